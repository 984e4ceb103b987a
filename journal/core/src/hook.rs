//! Projection hooks: code the projections crate runs inside the append's write transaction.

use std::ops::ControlFlow;
use std::sync::Arc;

use std::cell::RefCell;

use rkyv::util::AlignedVec;

use crate::backend::WriteTxn;
use crate::codec::{MacKey, RecordView};
use crate::error::{ProjectionError, ReadError, StorageError};
use crate::parallel::{Pipeline, Work};
use crate::verified::verified_at;

/// Prefix every projection table name must carry, so a hook cannot touch the journal's tables.
pub const PROJECTION_TABLE_PREFIX: &str = "proj.";
const PROJECTION_TABLE_NAME_MAX_BYTES: usize = 64;

/// A projection maintained inside the journal's write transaction. `apply` sees each new record
/// once, in position order; replayed (idempotent) appends are not shown again. An `Err` aborts the
/// caller's whole append; other callers in the same group commit are unaffected.
pub trait ProjectionHook: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError>;
}

/// A hook's refusal, carried to the caller in [`crate::AppendError::Hook`] (appends) or
/// [`ProjectionError::Hook`] (maintenance). The optional code is a stable, machine-readable name
/// for the refusal, so callers can branch on it without parsing the message.
#[derive(Debug, Clone)]
pub struct HookError {
    message: String,
    code: Option<&'static str>,
    /// The typed journal error this refusal was made from, so that [`crate::Journal::maintain`]
    /// can hand it back typed instead of as a message. Shared because `HookError` is `Clone`.
    cause: Option<Arc<ProjectionError>>,
}

impl HookError {
    pub fn new(message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
            code: None,
            cause: None,
        }
    }

    /// A refusal with a machine-readable code, carried through to [`crate::AppendError::Hook`].
    pub fn with_code(code: &'static str, message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
            code: Some(code),
            cause: None,
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn code(&self) -> Option<&'static str> {
        self.code
    }

    /// The journal error behind this refusal: the typed one when this is its only copy, else one
    /// rebuilt from the message and code.
    pub(crate) fn into_projection_error(self) -> ProjectionError {
        match self.cause.map(Arc::try_unwrap) {
            Some(Ok(e)) => e,
            _ => ProjectionError::Hook {
                message: self.message,
                code: self.code,
            },
        }
    }
}

/// Two refusals are equal when they say the same thing; the typed cause is a transport detail.
impl PartialEq for HookError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message && self.code == other.code
    }
}

impl Eq for HookError {}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HookError {}

impl From<ProjectionError> for HookError {
    fn from(e: ProjectionError) -> Self {
        HookError {
            message: e.to_string(),
            code: e.code(),
            cause: Some(Arc::new(e)),
        }
    }
}

/// The part of the write transaction a hook may use: byte tables whose names start with
/// [`PROJECTION_TABLE_PREFIX`].
pub struct HookTxn<'t> {
    txn: RefCell<&'t mut dyn WriteTxn>,
    mac: &'t MacKey,
    /// Threads [`HookTxn::replay`] checks records on ([`crate::OpenOptions::scan_threads`]).
    scan_threads: usize,
}

impl std::fmt::Debug for HookTxn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookTxn")
    }
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned())
}

/// Entries a scan copies out of the transaction at a time. Callbacks run between pages, with the
/// transaction free, so a callback may use the transaction itself.
pub(crate) const SCAN_PAGE_ENTRIES: usize = 256;

pub(crate) fn check_table(name: &str) -> Result<(), ProjectionError> {
    if !name.starts_with(PROJECTION_TABLE_PREFIX) || name.len() > PROJECTION_TABLE_NAME_MAX_BYTES {
        return Err(ProjectionError::TableName {
            name: name.escape_debug().to_string(),
        });
    }
    Ok(())
}

/// The error of a transaction used from inside one of its own `get` callbacks.
fn busy() -> ProjectionError {
    StorageError::message(
        "a projection table was used from inside a `get` callback of the same transaction",
    )
    .into()
}

fn read_error(e: ReadError) -> ProjectionError {
    match e {
        ReadError::Storage(e) => ProjectionError::Storage(e),
        e => ProjectionError::Read(e),
    }
}

/// Calls `f` once with what `get` passes to its callback; a backend that does not call back is a
/// storage failure.
pub(crate) fn get_once<R>(
    get: impl FnOnce(&mut dyn FnMut(Option<&[u8]>)) -> Result<(), ReadError>,
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Result<R, ProjectionError> {
    let mut f = Some(f);
    let mut out = None;
    get(&mut |value| {
        if let Some(f) = f.take() {
            out = Some(f(value));
        }
    })
    .map_err(read_error)?;
    out.ok_or_else(|| StorageError::message("the backend did not answer a projection read").into())
}

/// Calls `f` with every entry of `table` in key order until it breaks, a page at a time.
pub(crate) fn scan_pages(
    mut page: impl FnMut(
        Option<&[u8]>,
        &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError>,
    mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
) -> Result<(), ProjectionError> {
    let mut after: Option<Vec<u8>> = None;
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(SCAN_PAGE_ENTRIES);
    loop {
        entries.clear();
        page(after.as_deref(), &mut |key, value| {
            entries.push((key.to_vec(), value.to_vec()));
            if entries.len() >= SCAN_PAGE_ENTRIES {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })?;
        for (key, value) in &entries {
            if f(key, value).is_break() {
                return Ok(());
            }
        }
        if entries.len() < SCAN_PAGE_ENTRIES {
            return Ok(());
        }
        after = entries.pop().map(|(key, _)| key);
    }
}

impl<'t> HookTxn<'t> {
    pub(crate) fn new(
        txn: &'t mut dyn WriteTxn,
        mac: &'t MacKey,
        scan_threads: usize,
    ) -> HookTxn<'t> {
        HookTxn {
            txn: RefCell::new(txn),
            mac,
            scan_threads,
        }
    }

    /// Calls `f` for every record with a position in `from_position..before_position`, in
    /// position order, inside this transaction: committed records, and records this transaction
    /// has already written before the one being applied. Each record is checked exactly as
    /// [`crate::Journal::scan`] checks it (gap-free positions, structure, D and M); a record that
    /// fails is an error and is never shown to `f`. Returns the number of records visited. An
    /// `Err` from `f` stops the replay and is returned as [`ProjectionError::Apply`], naming the
    /// record.
    ///
    /// Records are copied out a page at a time, so `f` may use this transaction's projection
    /// tables between them. A hook uses it to fold records that were appended without it (by a
    /// process that had not attached its projection) before the record it is given.
    ///
    /// With [`crate::OpenOptions::scan_threads`] above 1 the records are checked on that many
    /// threads, a bounded number of pages ahead of `f` (spec/journal.md §7); `f` still runs on
    /// this thread, in order, with the transaction free, and the outcome is the same.
    pub fn replay(
        &self,
        from_position: u64,
        before_position: u64,
        mut f: impl FnMut(&HookTxn<'_>, &RecordView<'_>) -> Result<(), HookError>,
    ) -> Result<u64, ProjectionError> {
        if self.scan_threads > 1 {
            return self.replay_parallel(from_position.max(1), before_position, &mut f);
        }
        let mut next = from_position.max(1);
        let mut scratch = AlignedVec::<16>::new();
        let mut visited = 0;
        let mut page: Vec<(u64, Vec<u8>)> = Vec::with_capacity(SCAN_PAGE_ENTRIES);
        while next < before_position {
            page.clear();
            self.with_txn(|txn| {
                txn.records(next, &mut |position, value| {
                    if position >= before_position {
                        return ControlFlow::Break(());
                    }
                    page.push((position, value.to_vec()));
                    if page.len() >= SCAN_PAGE_ENTRIES {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
            })??;
            for (position, value) in &page {
                let position = *position;
                if position != next {
                    return Err(ReadError::Corrupt {
                        position: next,
                        reason: format!("positions jump from {} to {position}", next - 1),
                    }
                    .into());
                }
                next += 1;
                let view = verified_at(value, position, &mut scratch, self.mac)?;
                if let Err(e) = f(self, &view) {
                    return Err(ProjectionError::Apply {
                        position,
                        event_id: view.event_id.to_owned(),
                        message: e.message().to_owned(),
                        code: e.code(),
                    });
                }
                visited += 1;
            }
            if page.len() < SCAN_PAGE_ENTRIES {
                break;
            }
        }
        Ok(visited)
    }

    /// [`HookTxn::replay`] on several threads: pages are read ahead while the transaction is
    /// free, and `f` runs between the reads, so it may use the transaction as before.
    fn replay_parallel(
        &self,
        from: u64,
        before_position: u64,
        f: &mut dyn FnMut(&HookTxn<'_>, &RecordView<'_>) -> Result<(), HookError>,
    ) -> Result<u64, ProjectionError> {
        if from >= before_position {
            return Ok(0);
        }
        let work = Work::new(self.mac);
        std::thread::scope(|scope| {
            let mut pipeline = Pipeline::new(scope, &work, self.scan_threads, from);
            let mut applied = None;
            let mut deliver = |view: &RecordView<'_>| match f(self, view) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    applied = Some(ProjectionError::Apply {
                        position: view.position,
                        event_id: view.event_id.to_owned(),
                        message: e.message().to_owned(),
                        code: e.code(),
                    });
                    ControlFlow::Break(())
                }
            };
            let mut stopped = false;
            let mut read_failure = None;
            loop {
                // Reading stops when a page is due, so that `f` runs with the transaction free.
                let mut due = false;
                let next = pipeline.expected();
                let read = self.with_txn(|txn| {
                    txn.records(next, &mut |position, value| {
                        if position >= before_position {
                            return ControlFlow::Break(());
                        }
                        if pipeline.push(position, value).is_break() {
                            return ControlFlow::Break(());
                        }
                        due = pipeline.due();
                        if due {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })
                })?;
                if let Err(e) = read {
                    read_failure = Some(e);
                    break;
                }
                if !due {
                    break;
                }
                if pipeline.deliver_due(&mut deliver)?.is_break() {
                    stopped = true;
                    break;
                }
            }
            if !stopped && pipeline.finish(&mut deliver)?.is_break() {
                stopped = true;
            }
            // `deliver` breaks only when `f` refused a record, and says which.
            if let Some(e) = applied.filter(|_| stopped) {
                return Err(e);
            }
            // The records read before a storage failure are shown first, as on one thread.
            if let Some(e) = read_failure {
                return Err(e.into());
            }
            Ok(pipeline.visited())
        })
    }

    pub fn insert(
        &self,
        table: &'static str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ProjectionError> {
        check_table(table)?;
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        txn.kv_put(table, key, value)?;
        Ok(())
    }

    pub fn remove(&self, table: &'static str, key: &[u8]) -> Result<bool, ProjectionError> {
        check_table(table)?;
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        Ok(txn.kv_remove(table, key)?)
    }

    /// Calls `f` with the value stored under `key`, if any. The bytes have alignment 1.
    pub fn get<R>(
        &self,
        table: &'static str,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, ProjectionError> {
        check_table(table)?;
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        get_once(|cb| txn.kv_get(table, key, cb), f)
    }

    /// Calls `f` with every entry of `table` in key order until it returns `Break`. The bytes have
    /// alignment 1. `f` may use this transaction.
    pub fn scan(
        &self,
        table: &'static str,
        f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError> {
        check_table(table)?;
        scan_pages(
            |after, cb| {
                let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
                txn.kv_scan(table, after, cb).map_err(read_error)
            },
            f,
        )
    }

    /// Deletes every entry of `table`.
    pub fn clear(&self, table: &'static str) -> Result<(), ProjectionError> {
        check_table(table)?;
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        txn.kv_clear(table)?;
        Ok(())
    }

    /// The transaction itself, for the journal's own reads inside a maintenance transaction.
    pub(crate) fn with_txn<R>(
        &self,
        f: impl FnOnce(&mut dyn WriteTxn) -> R,
    ) -> Result<R, ProjectionError> {
        let mut txn = self.txn.try_borrow_mut().map_err(|_| busy())?;
        Ok(f(&mut **txn))
    }
}
