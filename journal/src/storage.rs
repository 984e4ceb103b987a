//! The storage seam below the journal's database file: a [`StorageWrapper`] receives the redb
//! file backend of every database file the journal opens and may return another backend in its
//! place. It exists for fault injection and crash images (tests and fuzzing); a production open
//! passes none and redb talks to the file directly.

use std::fmt;
use std::ops::Bound;
use std::path::Path;

use redb::Database;
/// redb's storage types, re-exported so a wrapper names exactly the version the journal uses.
pub use redb::backends::FileBackend;
pub use redb::{BackendError, StorageBackend};

use crate::error::{OpenError, StorageError};

/// Wraps the redb storage backend of a database file the journal opens: the data directory's
/// `journal.redb`, and `journal.redb.creating` while a new journal is being created (both paths
/// are passed, so a wrapper can tell them apart). A wrapper must forward every method it does not
/// deliberately change, the range locks included; the journal's own process lock already
/// excludes other processes.
pub trait StorageWrapper: Send + Sync + 'static {
    /// The backend to use in place of `file`, the plain backend of the database file at `path`.
    fn wrap(&self, path: &Path, file: FileBackend) -> Box<dyn StorageBackend>;
}

/// A boxed backend as a backend, so a wrapper can return any type.
struct Boxed(Box<dyn StorageBackend>);

impl fmt::Debug for Boxed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl StorageBackend for Boxed {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

/// Opens (creating when absent) the redb database at `path`, through `wrapper` when there is one.
pub(crate) fn open_database(
    path: &Path,
    wrapper: Option<&dyn StorageWrapper>,
) -> Result<Database, OpenError> {
    let Some(wrapper) = wrapper else {
        return Ok(Database::builder()
            .create(path)
            .map_err(StorageError::from)?);
    };
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
    let backend = FileBackend::new(file).map_err(StorageError::from)?;
    Ok(Database::builder()
        .create_with_backend(Boxed(wrapper.wrap(path, backend)))
        .map_err(StorageError::from)?)
}
