//! Record verification shared by every reader: the handle's scans, the commit's reads of
//! stored records, projection hooks and maintenance replays all refuse exactly the same records
//! (spec/journal.md §7).

use std::ops::ControlFlow;

use rkyv::util::AlignedVec;

use crate::backend::ReadTxn;
use crate::codec::{Integrity, MacKey, RecordView, authenticate, decode_record};
use crate::error::ReadError;
use crate::parallel::{Pipeline, Work};

/// Visits every record from `from` in position order inside `txn`, verified, checking that
/// positions have no gaps. Shared by [`crate::Journal::scan`] and maintenance replays, so both refuse
/// exactly the same records. With `threads` above 1 the records' checks run on that many threads
/// (spec/journal.md §7, "Parallel verification"); `f` still sees them one at a time, in order, on
/// this thread, and the outcome is the same.
pub(crate) fn scan_in(
    txn: &mut dyn ReadTxn,
    from: u64,
    mac: &MacKey,
    threads: usize,
    f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
) -> Result<u64, ReadError> {
    let from = from.max(1);
    if threads > 1 {
        return scan_parallel(txn, from, mac, threads, f);
    }
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

/// [`scan_in`] on `threads` threads: the calling thread reads and delivers, every thread verifies.
fn scan_parallel(
    txn: &mut dyn ReadTxn,
    from: u64,
    mac: &MacKey,
    threads: usize,
    f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
) -> Result<u64, ReadError> {
    let work = Work::new(mac);
    std::thread::scope(|scope| {
        let mut pipeline = Pipeline::new(scope, &work, threads, from);
        let mut failed = None;
        let mut stopped = false;
        let read = txn.records(from, &mut |position, value| {
            if pipeline.push(position, value).is_break() {
                return ControlFlow::Break(());
            }
            match pipeline.deliver_due(f) {
                Ok(flow) => {
                    stopped = flow.is_break();
                    flow
                }
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if stopped {
            return Ok(pipeline.visited());
        }
        // The records read before a storage failure are shown first, as the sequential path
        // showed them before the failure; an earlier bad record still wins.
        if pipeline.finish(f)?.is_break() {
            return Ok(pipeline.visited());
        }
        read?;
        let expected = pipeline.expected();
        let last = txn.last_position()?;
        if expected <= last {
            return Err(ReadError::Corrupt {
                position: expected,
                reason: format!(
                    "the records end at position {}, but the journal's last position is {last}",
                    expected - 1
                ),
            });
        }
        Ok(pipeline.visited())
    })
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
