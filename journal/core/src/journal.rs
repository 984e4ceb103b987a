//! The journal handle: open, group-committed appends, verified reads, the verification pass.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, LazyLock, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use rkyv::util::AlignedVec;

use crate::backend::{Backend, ReadTxn};
use crate::codec::{MacKey, RecordView, authenticate, decode_record};
use crate::error::{AppendError, OpenError, ProjectionError, ReadError, StorageError, VerifyError};
use crate::hook::ProjectionHook;
use crate::key::{self, KeySource, KeySourceError, KeyedDigestKey};
use crate::lock;
use crate::parallel::scan_in;
use crate::redb::create::{DATABASE_FILE, open_backend};
use crate::shared::{Queue, Shared};
use crate::sync::lock;
use crate::types::{AppendOutcome, Digest, Record, StreamAppend, StreamHead, StreamId};
use crate::verified::auth_failed;
use crate::verify::VerifyReport;

/// Options for [`Journal::open`].
#[derive(Clone)]
pub struct OpenOptions {
    lock_wait: Duration,
    key_source: Arc<KeySource>,
    ignore_integrity_verdict: bool,
    event_index_merge_records: u64,
    scan_threads: usize,
    #[cfg(feature = "testing")]
    storage_wrapper: Option<Arc<dyn crate::StorageWrapper>>,
}

impl std::fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("OpenOptions");
        f.field("lock_wait", &self.lock_wait);
        f.field("scan_threads", &self.scan_threads);
        #[cfg(feature = "testing")]
        f.field("storage_wrapper", &self.storage_wrapper.is_some());
        f.finish_non_exhaustive()
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            lock_wait: Duration::ZERO,
            key_source: Arc::new(key::os_random_key),
            ignore_integrity_verdict: false,
            event_index_merge_records: crate::limits::EVENT_INDEX_MERGE_RECORDS,
            scan_threads: crate::parallel::default_scan_threads(),
            #[cfg(feature = "testing")]
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

    /// Opens as the auditor does: a standing verdict of an earlier audit (spec/journal.md §13)
    /// does not make this open refuse writes, so the audit judges the journal as it is now.
    pub fn ignore_integrity_verdict(mut self) -> OpenOptions {
        self.ignore_integrity_verdict = true;
        self
    }

    /// How many unmerged event ids this handle's commits let accumulate before they merge them
    /// into the on-disk event-id index (spec/journal.md §4, invariant J9): at most
    /// [`crate::EVENT_INDEX_MERGE_RECORDS`], the default. Every open authenticates the unmerged
    /// tail, so a program that reopens the journal per short call (ctx's hooks) keeps it small;
    /// a long-lived writer keeps the default, which merges least often.
    ///
    /// # Panics
    /// When `records` is 0 or above [`crate::EVENT_INDEX_MERGE_RECORDS`]: a programmer error.
    pub fn event_index_merge_records(mut self, records: u64) -> OpenOptions {
        assert!(
            (1..=crate::limits::EVENT_INDEX_MERGE_RECORDS).contains(&records),
            "event_index_merge_records must be between 1 and {}, not {records}",
            crate::limits::EVENT_INDEX_MERGE_RECORDS
        );
        self.event_index_merge_records = records;
        self
    }

    /// How many threads a verified replay ([`Journal::scan`], [`crate::HookTxn::replay`],
    /// [`crate::MaintenanceTxn::replay`]) checks records on, the calling thread included
    /// (spec/journal.md §7, "Parallel verification"). 1 checks every record on the calling
    /// thread; the default is [`std::thread::available_parallelism`], at most
    /// [`crate::SCAN_THREADS_MAX`]. The records, their order and the errors are the same for
    /// every count. It applies only when this open is the first of the data directory in this
    /// process; later opens share the journal already open.
    ///
    /// # Panics
    /// When `threads` is 0 or above [`crate::SCAN_THREADS_MAX`]: a programmer error.
    pub fn scan_threads(mut self, threads: usize) -> OpenOptions {
        assert!(
            (1..=crate::parallel::SCAN_THREADS_MAX).contains(&threads),
            "scan_threads must be between 1 and {}, not {threads}",
            crate::parallel::SCAN_THREADS_MAX
        );
        self.scan_threads = threads;
        self
    }

    /// Where the installation key's 32 random bytes come from when a journal is created.
    pub fn key_source(
        mut self,
        source: impl Fn() -> Result<[u8; 32], KeySourceError> + Send + Sync + 'static,
    ) -> OpenOptions {
        self.key_source = Arc::new(source);
        self
    }

    /// Puts `wrapper` between redb and the database file (see [`crate::StorageWrapper`]; the
    /// `testing` feature): interposition for fault injection and crash images. It applies only when this open is the first of the data
    /// directory in this process; later opens share the journal already open.
    #[cfg(feature = "testing")]
    pub fn storage_wrapper(mut self, wrapper: Arc<dyn crate::StorageWrapper>) -> OpenOptions {
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

#[cfg(test)]
impl crate::redb::testing::HasBackend for Journal {
    fn backend(&self) -> &dyn Backend {
        &*self.shared.backend
    }
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("data_dir", &self.shared.data_dir)
            .finish_non_exhaustive()
    }
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
        let exists = dir.join(DATABASE_FILE).exists();
        let key = key::load_or_create(&dir, !exists, options.key_source.as_ref())?;
        let mac = MacKey::new(key.bytes());
        #[cfg(feature = "testing")]
        let wrapper = options.storage_wrapper.as_deref();
        #[cfg(not(feature = "testing"))]
        let wrapper = None;
        let (backend, write_refusal) = open_backend(
            &dir,
            !exists,
            &mac,
            wrapper,
            options.event_index_merge_records,
        )?;
        // The audit's verdict outranks what this open could check (spec/journal.md §13).
        let verdict = if options.ignore_integrity_verdict {
            None
        } else {
            crate::verdict::standing_verdict(&dir)
        };
        let write_refusal = verdict.or(write_refusal);
        let keyed = KeyedDigestKey::derive(&key);
        let shared = Arc::new(Shared {
            backend,
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
            scan_threads: options.scan_threads,
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
                scan_threads: options.scan_threads,
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
        self.shared.is_fail_stopped()
    }

    pub(crate) fn check_process(&self) -> bool {
        self.shared.check_process()
    }

    // ----- appends (the group commit is in commit.rs) -----

    /// Appends records to one stream atomically.
    pub fn append(&self, append: StreamAppend) -> Result<AppendOutcome, AppendError> {
        self.shared.append(append)
    }

    /// Appends to several streams in one atomic commit: all of it is written, or none.
    pub fn append_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendOutcome>, AppendError> {
        self.shared.append_batch(batch)
    }

    /// Opens a unit of work (spec/journal.md §14): the appends that follow stay atomic, ordered
    /// and visible to this process, but become durable together at [`Journal::make_durable`] or
    /// when the journal closes; a crash before that loses all of them, never one in the middle
    /// and nothing before the unit. A caller makes the unit durable before every effect outside
    /// the journal that its records describe. Returns false on a backend that cannot defer
    /// (PostgreSQL), where every append stays durable on its own.
    pub fn defer_durability(&self) -> bool {
        self.check_process() && self.shared.backend.defer_durability()
    }

    /// Makes every append so far durable: one sync when a deferred append is pending, nothing
    /// otherwise (so it may be called before every effect). A sync that may have failed half-way
    /// fail-stops the journal, as a failed append does.
    pub fn make_durable(&self) -> Result<(), AppendError> {
        self.sync_unit(false)
    }

    /// Ends the unit of work: makes it durable as [`Journal::make_durable`] does, and every
    /// later append is durable on its own again. A process that goes on after the unit (an
    /// embedding host that runs many hooks) must end it, or its later appends would wait for
    /// the next sync.
    pub fn end_unit(&self) -> Result<(), AppendError> {
        self.sync_unit(true)
    }

    fn sync_unit(&self, end: bool) -> Result<(), AppendError> {
        if !self.check_process() {
            return Err(AppendError::ForkedProcess);
        }
        if self.shared.is_fail_stopped() {
            return Err(AppendError::FailStopped);
        }
        let _commit = lock(&self.shared.commit);
        match self.shared.backend.make_durable(end) {
            Ok(()) => Ok(()),
            Err(crate::backend::CommitError::NotCommitted(e)) => Err(AppendError::NotCommitted {
                reason: e.to_string(),
            }),
            Err(crate::backend::CommitError::MaybeCommitted(e)) => {
                self.shared
                    .failed
                    .store(true, std::sync::atomic::Ordering::Release);
                Err(AppendError::MaybeCommitted {
                    reason: e.to_string(),
                })
            }
        }
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

    /// Visits every record from global position `from` in commit order, verifying each record's
    /// digest and MAC and that positions have no gaps. Returns the number visited. `f` runs on
    /// this thread and sees the records one at a time, in order; the checks run on
    /// [`OpenOptions::scan_threads`] threads, a bounded number of records ahead of `f`
    /// (spec/journal.md §7). With one thread the views borrow the stored bytes (zero-copy); with
    /// more they borrow a page copied out of the read transaction.
    pub fn scan(
        &self,
        from: u64,
        mut f: impl FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ReadError> {
        self.read(|txn| {
            scan_in(
                txn,
                from,
                &self.shared.mac,
                self.shared.scan_threads,
                &mut f,
            )
        })
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
    // New directories get mode 0700; an existing one is left as it is (spec/fs.md rule 4).
    ctx_fs::create_private_dir_all(dir).map_err(|e| OpenError::fs(dir, e))?;
    dir.canonicalize().map_err(io)
}
