//! The journal handle: open, group-committed appends, verified reads, the verification pass.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use rkyv::util::AlignedVec;

use crate::codec::{FORMAT_VERSION, Integrity, MacKey, RecordView, authenticate, decode_record};
use crate::commit::Queue;
use crate::error::{OpenError, ProjectionError, ReadError, StorageError, VerifyError};
use crate::hook::ProjectionHook;
use crate::key::{self, KeySource, KeyedDigestKey};
use crate::lock::{self, ProcessLock};
use crate::redb_store::{RedbBackend, Tables, Writer};
use crate::seam::{Backend, ReadTxn};
use crate::storage::{StorageWrapper, open_database};
use crate::types::{Digest, Record, StreamHead, StreamId};
use crate::verify::VerifyReport;

pub(crate) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");
pub(crate) const STREAMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("journal.streams");
pub(crate) const CHUNKS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("journal.stream_chunks");
pub(crate) const EVENT_IDS: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("journal.event_ids");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("journal.meta");

const META_FORMAT: &str = "format_version";
/// Largest position or revision a valid journal holds (J11); values from disk above it are corrupt.
pub(crate) const POSITION_MAX: u64 = 1 << 63;

pub(crate) const META_EVENT_INDEX_UPTO: &str = "event_index_upto";

/// The redb file's name inside the data directory.
pub const DATABASE_FILE: &str = "journal.redb";

/// Options for [`Journal::open`].
#[derive(Clone)]
pub struct OpenOptions {
    lock_wait: Duration,
    key_source: Arc<KeySource>,
    storage_wrapper: Option<Arc<dyn StorageWrapper>>,
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("lock_wait", &self.lock_wait)
            .field("storage_wrapper", &self.storage_wrapper.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            lock_wait: Duration::ZERO,
            key_source: Arc::new(key::os_random_key),
            storage_wrapper: None,
        }
    }
}

impl OpenOptions {
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// How long to wait for another process to release the data directory before failing with
    /// [`OpenError::Locked`]. Zero (the default) fails at once.
    pub fn lock_wait(mut self, wait: Duration) -> OpenOptions {
        self.lock_wait = wait;
        self
    }

    /// Where the installation key's 32 random bytes come from when a journal is created.
    pub fn key_source(
        mut self,
        source: impl Fn() -> Result<[u8; 32], String> + Send + Sync + 'static,
    ) -> OpenOptions {
        self.key_source = Arc::new(source);
        self
    }

    /// Puts `wrapper` between redb and the database file (see [`StorageWrapper`]): a seam for
    /// fault injection and crash images. It applies only when this open is the first of the data
    /// directory in this process; later opens share the journal already open.
    pub fn storage_wrapper(mut self, wrapper: Arc<dyn StorageWrapper>) -> OpenOptions {
        self.storage_wrapper = Some(wrapper);
        self
    }
}

/// Journals open in this process, by canonical data directory, so a second open shares the first.
/// Each directory has its own slot, so an open that waits for another process's lock on one
/// directory does not hold up opens of other directories; two opens of one directory serialize on
/// its slot.
static OPEN_JOURNALS: LazyLock<Mutex<HashMap<PathBuf, OpenSlot>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

type OpenSlot = Arc<Mutex<Weak<Shared>>>;

/// A handle to an open journal. Clones and repeated opens of one directory share one journal.
#[derive(Clone)]
pub struct Journal {
    pub(crate) shared: Arc<Shared>,
}

/// A handle that does not keep its journal open: [`WeakJournal::upgrade`] gives the journal back
/// while some [`Journal`] handle of it is alive.
#[derive(Clone, Debug)]
pub struct WeakJournal(Weak<Shared>);

impl WeakJournal {
    pub fn upgrade(&self) -> Option<Journal> {
        self.0.upgrade().map(|shared| Journal { shared })
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("data_dir", &self.shared.data_dir)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    // Field order matters for drop: the backend closes before the process lock is released.
    pub(crate) backend: Arc<dyn Backend>,
    /// The same backend when it is redb, for tests that reach into its file.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) redb: Option<Arc<RedbBackend>>,
    pub(crate) mac: MacKey,
    /// Sub-key of [`Journal::keyed_digest`]; derived from the installation key at open.
    pub(crate) keyed: KeyedDigestKey,
    pub(crate) data_dir: PathBuf,
    pub(crate) pid: u32,
    pub(crate) queue: Mutex<Queue>,
    /// Signalled whenever a group commit finishes and its slots are filled.
    pub(crate) group_done: Condvar,
    /// Held around each group commit, maintenance and import: one write transaction of this
    /// handle at a time.
    pub(crate) commit: Mutex<()>,
    pub(crate) failed: AtomicBool,
    /// Set when the open found a record it could not authenticate in the unmerged tail; the
    /// journal then serves reads and verification but refuses writes.
    pub(crate) write_refusal: Option<String>,
    /// True when this open created the database file.
    pub(crate) created: bool,
    pub(crate) hooks: RwLock<Vec<Arc<dyn ProjectionHook>>>,
    /// The data directory's process lock, for a backend that only one process may write.
    pub(crate) _lock: Option<ProcessLock>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks is handled where it can happen (the group commit
    // catches it and fail-stops), so the data behind a poisoned lock is still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Journal {
    /// Opens the journal in `dir` (an absolute path), creating the directory, the installation
    /// key and the database on first use.
    pub fn open(dir: impl AsRef<Path>, options: &OpenOptions) -> Result<Journal, OpenError> {
        let dir = prepare_dir(dir.as_ref())?;
        let slot: OpenSlot = {
            let mut open = lock(&OPEN_JOURNALS);
            open.retain(|path, slot| {
                *path == dir || Arc::strong_count(slot) > 1 || { lock(slot).strong_count() > 0 }
            });
            open.entry(dir.clone()).or_default().clone()
        };
        let mut current = lock(&slot);
        if let Some(shared) = current.upgrade() {
            if shared.pid != std::process::id() {
                return Err(OpenError::ForkedProcess { path: dir });
            }
            return Ok(Journal { shared });
        }
        let process_lock = lock::acquire(&dir, options.lock_wait)?;
        let db_path = dir.join(DATABASE_FILE);
        let exists = db_path.exists();
        let key = key::load_or_create(&dir, !exists, options.key_source.as_ref())?;
        let mac = MacKey::new(key.bytes());
        let wrapper = options.storage_wrapper.as_deref();
        if !exists {
            create_database(&dir, &db_path, &mac, wrapper)?;
        }
        let db = open_database(&db_path, wrapper)?;
        let keyed = KeyedDigestKey::derive(&key);
        let (writer, write_refusal) = initialize(&db, &mac, &db_path)?;
        let backend = Arc::new(RedbBackend::new(db, writer, db_path.display().to_string()));
        let shared = Arc::new(Shared {
            backend: backend.clone(),
            redb: Some(backend),
            mac,
            keyed,
            data_dir: dir.clone(),
            pid: std::process::id(),
            queue: Mutex::new(Queue::default()),
            group_done: Condvar::new(),
            commit: Mutex::new(()),
            failed: AtomicBool::new(false),
            write_refusal,
            created: !exists,
            hooks: RwLock::new(Vec::new()),
            _lock: Some(process_lock),
        });
        *current = Arc::downgrade(&shared);
        Ok(Journal { shared })
    }

    /// Opens a journal whose records live in `backend` (spec/scale-out.md), with the installation
    /// key of the data directory `dir` (an absolute path). The key is created only when the
    /// backend holds no records yet; a backend with records and a directory without a key is
    /// refused, since its records could not be authenticated. Several processes, on several
    /// machines, may open one shared backend: no directory lock is taken, and each handle is its
    /// own (handles of one backend do not share a group commit; the backend serializes them).
    pub fn open_with_backend(
        dir: impl AsRef<Path>,
        options: &OpenOptions,
        backend: Arc<dyn Backend>,
    ) -> Result<Journal, OpenError> {
        let dir = prepare_dir(dir.as_ref())?;
        let mut last = 0;
        backend
            .read(&mut |txn| {
                last = txn.last_position()?;
                Ok(())
            })
            .map_err(|e| OpenError::Backend {
                location: backend.location(),
                reason: e.to_string(),
            })?;
        let key = key::load_or_create(&dir, last == 0, options.key_source.as_ref())?;
        let mac = MacKey::new(key.bytes());
        let keyed = KeyedDigestKey::derive(&key);
        Ok(Journal {
            shared: Arc::new(Shared {
                backend,
                redb: None,
                mac,
                keyed,
                data_dir: dir,
                pid: std::process::id(),
                queue: Mutex::new(Queue::default()),
                group_done: Condvar::new(),
                commit: Mutex::new(()),
                failed: AtomicBool::new(false),
                write_refusal: None,
                created: last == 0,
                hooks: RwLock::new(Vec::new()),
                _lock: None,
            }),
        })
    }

    /// A handle that does not keep this journal open.
    pub fn downgrade(&self) -> WeakJournal {
        WeakJournal(Arc::downgrade(&self.shared))
    }

    /// Where the records live: the redb file, or the backend's location.
    pub fn location(&self) -> String {
        self.shared.backend.location()
    }

    /// The canonical data directory.
    pub fn data_dir(&self) -> &Path {
        &self.shared.data_dir
    }

    /// Registers a projection hook; it sees every record appended from now on. Registration is
    /// idempotent by [`ProjectionHook::name`]: when a hook of that name is already registered
    /// (several handles share one journal, and each owner may register its hooks), this one is
    /// not added and the call returns `false`.
    pub fn register_hook(&self, hook: Arc<dyn ProjectionHook>) -> bool {
        let mut hooks = self
            .shared
            .hooks
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if hooks.iter().any(|h| h.name() == hook.name()) {
            return false;
        }
        hooks.push(hook);
        true
    }

    /// An installation-keyed digest of `body` under `domain` (spec/journal.md §3, formula K):
    /// `HMAC-SHA256(K_kd, domain ‖ 0x00 ‖ body)`, where `K_kd` is a sub-key derived from the
    /// installation key. It lets a caller derive references that are stable on this installation
    /// and unlinkable across installations without ever seeing the key. The sub-key is separate
    /// from the record-MAC key, so no choice of domain and body yields a record MAC. Callers
    /// should use a domain free of NUL bytes so that the domain/body split is unambiguous.
    pub fn keyed_digest(&self, domain: &[u8], body: &[u8]) -> [u8; 32] {
        self.shared.keyed.digest(domain, body)
    }

    /// True when the open that first loaded this journal in this process created it.
    pub fn was_created(&self) -> bool {
        self.shared.created
    }

    /// Why this journal refuses writes, when open found a record in the unmerged tail that does
    /// not authenticate (see [`AppendError::Integrity`]). Reads and `verify` still work.
    pub fn write_refusal(&self) -> Option<&str> {
        self.shared.write_refusal.as_deref()
    }

    /// True once a failed commit has stopped the journal; it refuses writes until reopened.
    pub fn is_fail_stopped(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    pub(crate) fn check_process(&self) -> bool {
        self.shared.pid == std::process::id()
    }

    // ----- reads -----

    /// Runs `f` in one read transaction of the backend and returns its result.
    pub(crate) fn read<R>(
        &self,
        f: impl FnMut(&mut dyn ReadTxn) -> Result<R, ReadError>,
    ) -> Result<R, ReadError> {
        self.run_read(false, f)
    }

    /// Runs `f`, which makes exactly one lookup, through [`Backend::read_single`].
    fn read_single<R>(
        &self,
        f: impl FnMut(&mut dyn ReadTxn) -> Result<R, ReadError>,
    ) -> Result<R, ReadError> {
        self.run_read(true, f)
    }

    fn run_read<R>(
        &self,
        single: bool,
        mut f: impl FnMut(&mut dyn ReadTxn) -> Result<R, ReadError>,
    ) -> Result<R, ReadError> {
        if !self.check_process() {
            return Err(ReadError::ForkedProcess);
        }
        let mut out = None;
        let mut work = |txn: &mut dyn ReadTxn| {
            out = Some(f(txn)?);
            Ok(())
        };
        if single {
            self.shared.backend.read_single(&mut work)?;
        } else {
            self.shared.backend.read(&mut work)?;
        }
        out.ok_or_else(|| StorageError::message("the backend did not run the read").into())
    }

    /// The head of a stream, or `None` when it has no records.
    pub fn stream_head(&self, stream: &StreamId) -> Result<Option<StreamHead>, ReadError> {
        self.read_single(|txn| txn.head(stream))
    }

    /// The last global position written (0 for an empty journal).
    pub fn head_position(&self) -> Result<u64, ReadError> {
        self.read_single(|txn| txn.last_position())
    }

    /// Reads up to `max` records of a stream starting at revision `from` (1-based), verifying each
    /// record's digest, MAC and chain link.
    pub fn read_stream(
        &self,
        stream: &StreamId,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, ReadError> {
        let mut out = Vec::new();
        self.visit_stream(stream, from, max, |view| {
            out.push(view.to_record());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Visits up to `max` records of a stream from revision `from`, zero-copy and verified.
    pub fn visit_stream(
        &self,
        stream: &StreamId,
        from: u64,
        max: usize,
        mut f: impl FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<(), ReadError> {
        self.read(|txn| {
            let Some(head) = txn.head(stream)? else {
                return Ok(());
            };
            let from = from.max(1);
            if from > head.revision || max == 0 {
                return Ok(());
            }
            let last = head.revision.min(from.saturating_add(max as u64 - 1));
            let mut scratch = AlignedVec::<16>::new();
            let mut previous = Digest::ZERO;
            let mut failed = None;
            let mut stopped = false;
            // The record before `from` is read only for its digest, which the first record
            // visited must chain to.
            let start = if from == 1 { 1 } else { from - 1 };
            let mut expected = start;
            txn.stream_records(stream, start, last, &mut |revision, position, value| {
                let outcome = if revision == expected {
                    self.decode_verified(value, &mut scratch, stream, revision, position)
                } else {
                    Err(ReadError::Corrupt {
                        position,
                        reason: format!(
                            "stream {stream} gave revision {revision} where {expected} was due"
                        ),
                    })
                };
                expected += 1;
                let view = match outcome {
                    Ok(view) => view,
                    Err(e) => {
                        failed = Some(e);
                        return ControlFlow::Break(());
                    }
                };
                if revision < from {
                    previous = view.digest;
                    return ControlFlow::Continue(());
                }
                if view.previous_digest != previous {
                    failed = Some(ReadError::AuthenticationFailed {
                        stream: *stream,
                        revision,
                        position,
                        reason: "the record does not chain to its predecessor",
                    });
                    return ControlFlow::Break(());
                }
                previous = view.digest;
                let flow = f(&view);
                stopped = flow.is_break();
                flow
            })?;
            if failed.is_none() && !stopped && expected <= last {
                failed = Some(ReadError::Corrupt {
                    position: 0,
                    reason: format!(
                        "stream {stream} has no record at revision {expected}, below its head {}",
                        head.revision
                    ),
                });
            }
            failed.map_or(Ok(()), Err)
        })
    }

    fn decode_verified<'a>(
        &self,
        value: &'a [u8],
        scratch: &'a mut AlignedVec<16>,
        stream: &StreamId,
        revision: u64,
        position: u64,
    ) -> Result<RecordView<'a>, ReadError> {
        let fail = |reason| ReadError::AuthenticationFailed {
            stream: *stream,
            revision,
            position,
            reason,
        };
        let view = decode_record(value, scratch).map_err(fail)?;
        if view.stream != *stream || view.revision != revision || view.position != position {
            return Err(fail(
                "the record's header names another place in the journal",
            ));
        }
        authenticate(&view, &self.shared.mac).map_err(|kind| auth_failed(&view, kind))?;
        Ok(view)
    }

    /// Reads up to `max` records in global order starting at position `from`, verified.
    pub fn read_all(&self, from: u64, max: usize) -> Result<Vec<Record>, ReadError> {
        let mut out = Vec::new();
        if max == 0 {
            return Ok(out);
        }
        self.scan(from, |view| {
            out.push(view.to_record());
            if out.len() >= max {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        Ok(out)
    }

    /// Visits every record from global position `from` in commit order, zero-copy, verifying each
    /// record's digest and MAC and that positions have no gaps. Returns the number visited.
    pub fn scan(
        &self,
        from: u64,
        mut f: impl FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ReadError> {
        self.read(|txn| scan_in(txn, from, &self.shared.mac, &mut f))
    }

    /// Reads a projection value written by a hook. The bytes have alignment 1.
    pub fn projection_get<R>(
        &self,
        table: &'static str,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, ProjectionError> {
        crate::hook::check_table(table)?;
        if !self.check_process() {
            return Err(ProjectionError::ForkedProcess);
        }
        let mut f = Some(f);
        let mut out = None;
        self.shared
            .backend
            .read_single(&mut |txn| {
                let Some(f) = f.take() else {
                    return Ok(());
                };
                out = Some(crate::hook::get_once(|cb| txn.kv_get(table, key, cb), f));
                Ok(())
            })
            .map_err(|e| match e {
                ReadError::Storage(e) => ProjectionError::Storage(e),
                e => ProjectionError::Read(e),
            })?;
        out.unwrap_or_else(|| Err(StorageError::message("the backend did not run the read").into()))
    }

    /// The full verification pass: every record's structure, digest, MAC and chain link, gap-free
    /// positions, contiguous revisions, and agreement of the stream heads and the backend's
    /// indexes (for redb, the per-stream position index and the event-id index) with the
    /// records. Findings are reported, not raised.
    pub fn verify(&self) -> Result<VerifyReport, VerifyError> {
        if !self.check_process() {
            return Err(VerifyError::ForkedProcess);
        }
        self.read(|txn| crate::verify::run(txn, &self.shared.mac))
            .map_err(|e| match e {
                ReadError::Storage(e) => VerifyError::Storage(e),
                ReadError::ForkedProcess => VerifyError::ForkedProcess,
                e => VerifyError::Storage(StorageError::message(e.to_string())),
            })
    }
}

/// Visits every record from `from` in position order inside `txn`, verified, checking that
/// positions have no gaps. Shared by [`Journal::scan`] and maintenance replays, so both refuse
/// exactly the same records.
pub(crate) fn scan_in(
    txn: &mut dyn ReadTxn,
    from: u64,
    mac: &MacKey,
    f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
) -> Result<u64, ReadError> {
    let from = from.max(1);
    let mut scratch = AlignedVec::<16>::new();
    let mut expected = from;
    let mut visited = 0;
    let mut failed = None;
    let mut stopped = false;
    txn.records(from, &mut |position, value| {
        if position != expected {
            failed = Some(ReadError::Corrupt {
                position: expected,
                reason: format!("positions jump from {} to {position}", expected - 1),
            });
            return ControlFlow::Break(());
        }
        expected += 1;
        match verified_at(value, position, &mut scratch, mac) {
            Ok(view) => {
                visited += 1;
                let flow = f(&view);
                stopped = flow.is_break();
                flow
            }
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    // A backend that leaves out the newest records is caught here: the records must run to the
    // last position of the same snapshot.
    let last = txn.last_position()?;
    if !stopped && expected <= last {
        return Err(ReadError::Corrupt {
            position: expected,
            reason: format!(
                "the records end at position {}, but the journal's last position is {last}",
                expected - 1
            ),
        });
    }
    Ok(visited)
}

/// Decodes the record stored under `position` and authenticates it: its structure, the position
/// its header names, D and M. Shared by `scan` and maintenance replays, so both refuse exactly the
/// same records.
pub(crate) fn verified_at<'a>(
    value: &'a [u8],
    position: u64,
    scratch: &'a mut AlignedVec<16>,
    mac: &MacKey,
) -> Result<RecordView<'a>, ReadError> {
    let view = decode_record(value, scratch).map_err(|reason| ReadError::Corrupt {
        position,
        reason: reason.to_owned(),
    })?;
    if view.position != position {
        return Err(auth_failed(&view, Integrity::Digest));
    }
    authenticate(&view, mac).map_err(|kind| auth_failed(&view, kind))?;
    Ok(view)
}

pub(crate) fn auth_failed(view: &RecordView<'_>, kind: Integrity) -> ReadError {
    ReadError::AuthenticationFailed {
        stream: view.stream,
        revision: view.revision,
        position: view.position,
        reason: match kind {
            Integrity::Digest => "the record digest does not match its content",
            Integrity::Mac => "the record MAC does not match the installation key",
        },
    }
}

/// Checks that `dir` is absolute, creates it (mode 0700) when missing, and canonicalizes it.
fn prepare_dir(dir: &Path) -> Result<PathBuf, OpenError> {
    if !dir.is_absolute() {
        return Err(OpenError::RelativePath {
            path: dir.to_path_buf(),
        });
    }
    let io = |source| OpenError::Io {
        path: dir.into(),
        source,
    };
    create_private_dir(dir).map_err(io)?;
    dir.canonicalize().map_err(io)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Creates the tables of a new journal or checks the format of an existing one, and rebuilds the
/// writer's in-memory state: the next position and the unmerged event ids.
/// Name of a database being created: it becomes [`DATABASE_FILE`] only once initialized.
pub const CREATING_FILE: &str = "journal.redb.creating";

/// Creates and initializes a new database under [`CREATING_FILE`], then renames it into place
/// and syncs the directory. redb writes a new file's header in steps (the magic number last) and
/// refuses a file whose header is incomplete, so a process killed while creating the database in
/// place would leave a journal that never opens again. Here a crash leaves either no
/// `journal.redb` (the next open starts over, removing the leftover) or a complete one. Runs under
/// the process lock.
fn create_database(
    dir: &Path,
    db_path: &Path,
    mac: &MacKey,
    wrapper: Option<&dyn StorageWrapper>,
) -> Result<(), OpenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { path, source }
    };
    let creating = dir.join(CREATING_FILE);
    match std::fs::remove_file(&creating) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&creating)(e)),
    }
    {
        let db = open_database(&creating, wrapper)?;
        initialize(&db, mac, &creating)?;
    }
    std::fs::File::open(&creating)
        .and_then(|f| f.sync_all())
        .map_err(io(&creating))?;
    std::fs::rename(&creating, db_path).map_err(io(db_path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

fn initialize(
    db: &Database,
    mac: &MacKey,
    path: &Path,
) -> Result<(Writer, Option<String>), OpenError> {
    let corrupt = |reason: &str| OpenError::Corrupt {
        path: path.into(),
        reason: reason.to_owned(),
    };
    // Only a brand-new database needs a write transaction (and its fsync); reopening an existing
    // journal, which short-lived hook processes do on every call, only reads.
    let exists = match db
        .begin_read()
        .map_err(StorageError::from)?
        .open_table(META)
    {
        Ok(_) => true,
        Err(redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(StorageError::from(e).into()),
    };
    if !exists {
        let txn = db.begin_write().map_err(StorageError::from)?;
        {
            let mut tables = Tables::open(&txn)?;
            if !tables.records.is_empty().map_err(StorageError::from)? {
                return Err(corrupt("records exist but the format version is missing"));
            }
            tables
                .meta
                .insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                .map_err(StorageError::from)?;
            tables
                .meta
                .insert(META_EVENT_INDEX_UPTO, 1u64.to_le_bytes().as_slice())
                .map_err(StorageError::from)?;
        }
        txn.commit().map_err(StorageError::from)?;
    }
    let read = db.begin_read().map_err(StorageError::from)?;
    let meta = read.open_table(META).map_err(StorageError::from)?;
    let found = meta
        .get(META_FORMAT)
        .map_err(StorageError::from)?
        .map(|g| <[u8; 4]>::try_from(g.value()).map(u32::from_le_bytes))
        .ok_or_else(|| corrupt("the format version is missing"))?
        .map_err(|_| corrupt("the format version is not 4 bytes"))?;
    if found != FORMAT_VERSION {
        return Err(OpenError::FormatVersion {
            path: path.into(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    let event_index_upto = meta
        .get(META_EVENT_INDEX_UPTO)
        .map_err(StorageError::from)?
        .and_then(|g| <[u8; 8]>::try_from(g.value()).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| corrupt("the event index checkpoint is missing"))?;
    let records = read.open_table(RECORDS).map_err(StorageError::from)?;
    let last_position = records
        .last()
        .map_err(StorageError::from)?
        .map_or(0, |(k, _)| k.value());
    // Positions and revisions stay below 2^63 (J11), so the writer's increments cannot overflow.
    if last_position >= POSITION_MAX {
        return Err(OpenError::Corrupt {
            path: path.into(),
            reason: format!("the last position {last_position} is out of range"),
        });
    }
    let next_position = last_position + 1;
    if event_index_upto == 0 || event_index_upto > next_position {
        return Err(OpenError::Corrupt {
            path: path.into(),
            reason: format!(
                "the event index checkpoint {event_index_upto} is past the last record {}",
                next_position - 1
            ),
        });
    }
    let mut recent = HashMap::new();
    let mut scratch = AlignedVec::<16>::new();
    let mut refusal = None;
    for entry in records
        .range(event_index_upto..)
        .map_err(StorageError::from)?
    {
        let (key, value) = entry.map_err(StorageError::from)?;
        let position = key.value();
        // A record that does not authenticate could hide an event id, and appending past it
        // could then duplicate an event; reads and the verification pass stay available.
        match decode_record(value.value(), &mut scratch) {
            Ok(view) if view.position == position && authenticate(&view, mac).is_ok() => {
                recent.insert(Box::from(view.event_id), position);
            }
            Ok(view) => {
                refusal.get_or_insert_with(|| {
                    format!(
                        "authentication failed for stream {} revision {} (position {position})",
                        view.stream, view.revision
                    )
                });
            }
            Err(reason) => {
                refusal.get_or_insert_with(|| format!("record at position {position}: {reason}"));
            }
        }
    }
    Ok((
        Writer {
            next_position,
            event_index_upto,
            recent,
        },
        refusal,
    ))
}
