//! Interposition on the journal's database file: a [`StorageWrapper`] may put a
//! [`StorageInterceptor`] between redb and every database file the journal opens. It exists for
//! fault injection and crash images (tests and fuzzing), so it is compiled only with the
//! `testing` feature: a production build has no such layer, redb talks to the file directly, and
//! redb's `StorageBackend` and `FileBackend` stay out of the crate's default public API (and so
//! redb's version out of its semver).

use std::fmt;
use std::ops::Bound;
use std::path::Path;

use std::sync::Arc;

use redb::{BackendError, Database};

/// redb's file backend and its trait (whose methods an interceptor calls on the file),
/// re-exported so an interceptor names exactly the version the journal uses.
pub use redb::StorageBackend;
pub use redb::backends::FileBackend;

use crate::error::{OpenError, StorageError};

/// Puts a [`StorageInterceptor`] between redb and a database file the journal opens: the data
/// directory's `journal.redb`, and `journal.redb.creating` while a new journal is being created
/// (both paths are passed, so a wrapper can tell them apart).
pub trait StorageWrapper: Send + Sync + 'static {
    /// The interceptor of the database file at `path` (`file` is its plain backend, e.g. to read
    /// its content at open), or `None` to leave the file alone.
    fn wrap(&self, path: &Path, file: &FileBackend) -> Option<Arc<dyn StorageInterceptor>>;
}

/// The data calls redb makes on a database file, each of which an interceptor may fail, record or
/// change; every default forwards to the file. The range locks and `close` are not interceptable:
/// the journal forwards them to the file itself, so no interceptor can break redb's locking or
/// leave a lock held after a failure.
pub trait StorageInterceptor: Send + Sync + 'static {
    fn len(&self, file: &FileBackend) -> Result<u64, std::io::Error> {
        file.len()
    }
    fn read(&self, file: &FileBackend, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        file.read(offset, out)
    }
    fn set_len(&self, file: &FileBackend, len: u64) -> Result<(), std::io::Error> {
        file.set_len(len)
    }
    fn sync_data(&self, file: &FileBackend) -> Result<(), std::io::Error> {
        file.sync_data()
    }
    fn write(&self, file: &FileBackend, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        file.write(offset, data)
    }
}

/// A file backend whose data calls go through an interceptor.
struct Intercepted {
    file: FileBackend,
    hooks: Arc<dyn StorageInterceptor>,
}

impl fmt::Debug for Intercepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intercepted")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl StorageBackend for Intercepted {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.hooks.len(&self.file)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.hooks.read(&self.file, offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.hooks.set_len(&self.file, len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.hooks.sync_data(&self.file)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.hooks.write(&self.file, offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.file.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.file.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.file.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.file.query_lock_range(start, end)
    }
}

/// Opens (creating when absent) the redb database at `path` through `wrapper`.
pub(crate) fn open_database(
    path: &Path,
    wrapper: &dyn StorageWrapper,
) -> Result<Database, OpenError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| OpenError::Io {
            path: path.into(),
            source,
        })?;
    let file = FileBackend::new(file).map_err(StorageError::from)?;
    let mut builder = Database::builder();
    builder.set_cache_size(super::REDB_CACHE_MAX_BYTES);
    let db = match wrapper.wrap(path, &file) {
        Some(hooks) => builder.create_with_backend(Intercepted { file, hooks }),
        None => builder.create_with_backend(file),
    };
    Ok(db.map_err(StorageError::from)?)
}
