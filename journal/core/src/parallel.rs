//! Verified replay on several cores (spec/journal.md §7, "Parallel verification").
//!
//! A record's structure, digest D and MAC M depend on that record alone, so they can be checked
//! on any thread; what depends on order (gap-free positions, and the caller's fold) stays on the
//! calling thread. The calling thread copies the records the backend hands out into pages,
//! publishes each full page to a work queue split into chunks, and delivers pages oldest first:
//! for each chunk, in order, it takes the checked result (verifying chunks itself while it is not
//! ready, never waiting for a worker), and shows its records to the caller one at a time. Worker
//! threads take chunks from the queue, oldest first, and verify them with the same
//! [`verified_at`] every reader uses.
//!
//! A chunk stops at its first failing record, and delivery stops at the first chunk that failed:
//! the error reported is the one of the lowest failing position, exactly the error the
//! sequential path gives, and no record at or after it is shown.

use std::collections::VecDeque;
use std::ops::{ControlFlow, Range};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::Scope;

use rkyv::util::AlignedVec;

use crate::backend::ReadTxn;
use crate::codec::{MacKey, RecordView, decoded_extra_bytes};
use crate::error::ReadError;
use crate::sync::lock;
use crate::types::{Digest, StreamId, Timestamp};
use crate::verified::verified_at;

/// The most threads a scan verifies on, the calling thread included; also the cap of the
/// default, [`std::thread::available_parallelism`].
pub const SCAN_THREADS_MAX: usize = 8;

/// The most records one page holds. Pages start at [`SCAN_PARALLEL_FIRST_PAGE_RECORDS`] records
/// and double up to this, so a read that stops after a few records copies only a few.
pub const SCAN_PARALLEL_PAGE_RECORDS: usize = 1024;

/// A page closes once its stored bytes plus the payload bytes its compressed records declare
/// reach this many, so a page and its checked copy hold at most about twice this plus one
/// record (itself at most [`crate::PAYLOAD_MAX_BYTES`] decoded).
pub const SCAN_PARALLEL_PAGE_BYTES: usize = 1 << 20;

/// The most pages a scan holds at once: the page being filled or delivered and the pages
/// published ahead of it. Together with the page bounds this bounds the lookahead, both the
/// memory (the pages' stored bytes and their decoded copies, each under
/// [`SCAN_PARALLEL_PAGE_BYTES`] plus one record per page) and the records verified beyond the one
/// at which the caller stops (at most this many pages' records).
pub const SCAN_PARALLEL_PAGES: usize = 3;

/// The first page's records; each later page holds twice as many, up to
/// [`SCAN_PARALLEL_PAGE_RECORDS`].
const SCAN_PARALLEL_FIRST_PAGE_RECORDS: usize = 16;

/// Pages smaller than this are verified and delivered by the calling thread alone, at once: a
/// scan that stops early (`read_all` of a few records) never starts a thread.
const SCAN_PARALLEL_SPAWN_PAGE_RECORDS: usize = 256;

/// Records one worker verifies at a time: large enough that claiming a chunk costs little
/// against its hashing, small enough that the threads share the last page of a scan evenly.
const SCAN_PARALLEL_CHUNK_RECORDS: usize = 64;

/// Delivered chunks whose buffers a scan keeps for reuse: about the chunks of the pages it
/// holds, so steady state allocates nothing.
const SCAN_PARALLEL_SPARE_CHUNKS: usize =
    SCAN_PARALLEL_PAGES * SCAN_PARALLEL_PAGE_RECORDS / SCAN_PARALLEL_CHUNK_RECORDS;

/// The largest payload buffer a spare chunk keeps: a chunk's share of a page's bytes, twice.
const SCAN_PARALLEL_SPARE_CHUNK_BYTES: usize =
    2 * SCAN_PARALLEL_PAGE_BYTES / (SCAN_PARALLEL_PAGE_RECORDS / SCAN_PARALLEL_CHUNK_RECORDS);

/// The default thread count: the machine's parallelism, at most [`SCAN_THREADS_MAX`].
pub(crate) fn default_scan_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, SCAN_THREADS_MAX)
}

/// Records copied out of the backend, in position order, and their chunks' results.
#[derive(Default)]
struct Page {
    bytes: Vec<u8>,
    /// Each record's position, its bytes in `bytes`, and the most bytes its payload decodes to.
    records: Vec<(u64, Range<usize>, usize)>,
    /// The stored bytes plus the payload bytes decoding may add (see
    /// [`SCAN_PARALLEL_PAGE_BYTES`]).
    weight: usize,
    /// Chunks handed out so far; changed only under the queue's lock.
    claimed: AtomicUsize,
    checked: Vec<Mutex<Option<Checked>>>,
}

impl Page {
    fn chunks(&self) -> usize {
        self.records.len().div_ceil(SCAN_PARALLEL_CHUNK_RECORDS)
    }
}

/// One chunk's verified records, decoded into owned buffers, and its first failure.
#[derive(Default)]
struct Checked {
    records: Vec<Fields>,
    text: String,
    payloads: Vec<u8>,
    failure: Option<ReadError>,
}

/// A verified record's header, its strings and payload given as ranges of a [`Checked`]'s
/// buffers.
struct Fields {
    stream: StreamId,
    revision: u64,
    position: u64,
    occurred_at: Timestamp,
    previous_digest: Digest,
    digest: Digest,
    mac: [u8; 32],
    event_id: Range<usize>,
    kind: Range<usize>,
    payload: Range<usize>,
}

impl Checked {
    fn push(&mut self, view: &RecordView<'_>) {
        let event_id = push_str(&mut self.text, view.event_id);
        let kind = push_str(&mut self.text, view.kind);
        let start = self.payloads.len();
        self.payloads.extend_from_slice(view.payload);
        self.records.push(Fields {
            stream: view.stream,
            revision: view.revision,
            position: view.position,
            occurred_at: view.occurred_at,
            previous_digest: view.previous_digest,
            digest: view.digest,
            mac: view.mac,
            event_id,
            kind,
            payload: start..self.payloads.len(),
        });
    }

    fn view(&self, fields: &Fields) -> RecordView<'_> {
        RecordView {
            stream: fields.stream,
            revision: fields.revision,
            position: fields.position,
            event_id: &self.text[fields.event_id.clone()],
            kind: &self.text[fields.kind.clone()],
            occurred_at: fields.occurred_at,
            payload: &self.payloads[fields.payload.clone()],
            previous_digest: fields.previous_digest,
            digest: fields.digest,
            mac: fields.mac,
        }
    }
}

fn push_str(text: &mut String, s: &str) -> Range<usize> {
    let start = text.len();
    text.push_str(s);
    start..text.len()
}

#[derive(Default)]
struct Queue {
    /// Published pages that still have chunks nobody has claimed, oldest first.
    pages: VecDeque<Arc<Page>>,
    /// Set when the scan ends (finished, failed, stopped or unwinding): workers exit.
    closed: bool,
}

impl Queue {
    /// The oldest chunk nobody has claimed yet.
    fn claim(&mut self) -> Option<(Arc<Page>, usize)> {
        while let Some(page) = self.pages.front() {
            let chunk = page.claimed.load(Ordering::Relaxed);
            if chunk < page.chunks() {
                page.claimed.store(chunk + 1, Ordering::Relaxed);
                return Some((Arc::clone(page), chunk));
            }
            self.pages.pop_front();
        }
        None
    }
}

/// What the calling thread and the workers share.
pub(crate) struct Work<'k> {
    mac: &'k MacKey,
    /// Delivered chunks' buffers, reused by the next chunks so a scan allocates about as many as
    /// its lookahead holds (at most [`SCAN_PARALLEL_SPARE_CHUNKS`] kept).
    spare: Mutex<Vec<Checked>>,
    queue: Mutex<Queue>,
    /// Signalled when a page is published or the queue closes; only workers wait on it.
    progress: Condvar,
}

impl<'k> Work<'k> {
    pub(crate) fn new(mac: &'k MacKey) -> Work<'k> {
        Work {
            mac,
            spare: Mutex::new(Vec::new()),
            queue: Mutex::new(Queue::default()),
            progress: Condvar::new(),
        }
    }

    fn wait<'q>(&self, queue: MutexGuard<'q, Queue>) -> MutexGuard<'q, Queue> {
        self.progress
            .wait(queue)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Verifies one chunk of `page`.
    fn verify(&self, page: &Page, chunk: usize, scratch: &mut AlignedVec<16>) -> Checked {
        let start = chunk * SCAN_PARALLEL_CHUNK_RECORDS;
        let end = (start + SCAN_PARALLEL_CHUNK_RECORDS).min(page.records.len());
        let records = &page.records[start..end];
        // A payload is at most its stored value, or what its frame declares: one allocation.
        let payload_bound: usize = records.iter().map(|(_, _, bound)| bound).sum();
        let mut out = lock(&self.spare).pop().unwrap_or_default();
        out.records.reserve(records.len());
        out.payloads.reserve(payload_bound);
        for (position, span, _) in records {
            match verified_at(&page.bytes[span.clone()], *position, scratch, self.mac) {
                Ok(view) => out.push(&view),
                Err(e) => {
                    // Records after a failure are never shown, so they need no checking.
                    out.failure = Some(e);
                    break;
                }
            }
        }
        out
    }

    /// Verifies one chunk of `page` and files its result for the calling thread, which takes it
    /// without waiting (so no wake-up is needed).
    fn check(&self, page: &Page, chunk: usize, scratch: &mut AlignedVec<16>) {
        let out = self.verify(page, chunk, scratch);
        *lock(&page.checked[chunk]) = Some(out);
    }

    /// Keeps a delivered chunk's buffers for a later chunk.
    fn recycle(&self, mut checked: Checked) {
        checked.records.clear();
        checked.text.clear();
        checked.payloads.clear();
        // A chunk that held large payloads is not kept, so the spares stay small.
        if checked.payloads.capacity() > SCAN_PARALLEL_SPARE_CHUNK_BYTES {
            return;
        }
        let mut spare = lock(&self.spare);
        if spare.len() < SCAN_PARALLEL_SPARE_CHUNKS {
            spare.push(checked);
        }
    }

    fn close(&self) {
        lock(&self.queue).closed = true;
        self.progress.notify_all();
    }

    /// A worker: verifies chunks, oldest first, until the queue closes.
    fn run_worker(&self) {
        let mut scratch = AlignedVec::<16>::new();
        loop {
            let (page, chunk) = {
                let mut queue = lock(&self.queue);
                loop {
                    if queue.closed {
                        return;
                    }
                    if let Some(claimed) = queue.claim() {
                        break claimed;
                    }
                    queue = self.wait(queue);
                }
            };
            self.check(&page, chunk, &mut scratch);
        }
    }
}

/// The calling thread's side: copies records into pages, publishes them, and delivers them in
/// order. Lives inside a [`std::thread::scope`]; dropping it closes the queue, so the scope's
/// workers exit on every path out (an error, a stop, a panic of the caller's closure).
pub(crate) struct Pipeline<'scope, 'env, 'k> {
    scope: &'scope Scope<'scope, 'env>,
    work: &'env Work<'k>,
    /// Threads to verify on, the calling thread included.
    threads: usize,
    spawned: bool,
    filling: Page,
    page_records: usize,
    in_flight: VecDeque<Arc<Page>>,
    /// The next position due from the backend.
    expected: u64,
    /// A gap in the positions, reported once every record before it has been delivered.
    gap: Option<ReadError>,
    visited: u64,
    scratch: AlignedVec<16>,
    /// A delivered page whose buffers the next page reuses.
    spare: Option<Page>,
}

impl Drop for Pipeline<'_, '_, '_> {
    fn drop(&mut self) {
        self.work.close();
    }
}

impl<'scope, 'env, 'k> Pipeline<'scope, 'env, 'k> {
    /// # Panics
    /// When `threads` is below 2: the sequential path serves one thread.
    pub(crate) fn new(
        scope: &'scope Scope<'scope, 'env>,
        work: &'env Work<'k>,
        threads: usize,
        from: u64,
    ) -> Self {
        assert!(threads >= 2, "a pipeline verifies on at least two threads");
        Pipeline {
            scope,
            work,
            threads,
            spawned: false,
            filling: Page::default(),
            page_records: SCAN_PARALLEL_FIRST_PAGE_RECORDS,
            in_flight: VecDeque::new(),
            expected: from,
            gap: None,
            visited: 0,
            scratch: AlignedVec::new(),
            spare: None,
        }
    }

    /// The next position due from the backend.
    pub(crate) fn expected(&self) -> u64 {
        self.expected
    }

    /// Records shown to the caller so far.
    pub(crate) fn visited(&self) -> u64 {
        self.visited
    }

    /// Takes one record as the backend hands it out. Breaks when the positions jump: reading
    /// stops there, and [`Pipeline::finish`] reports the jump after the records before it.
    pub(crate) fn push(&mut self, position: u64, value: &[u8]) -> ControlFlow<()> {
        if position != self.expected {
            self.gap = Some(ReadError::Corrupt {
                position: self.expected,
                reason: format!("positions jump from {} to {position}", self.expected - 1),
            });
            return ControlFlow::Break(());
        }
        self.expected += 1;
        let start = self.filling.bytes.len();
        self.filling.bytes.extend_from_slice(value);
        let end = self.filling.bytes.len();
        let bound = value.len() + decoded_extra_bytes(value);
        self.filling.records.push((position, start..end, bound));
        self.filling.weight += bound;
        if self.filling.records.len() >= self.page_records
            || self.filling.weight >= SCAN_PARALLEL_PAGE_BYTES
        {
            self.publish();
        }
        ControlFlow::Continue(())
    }

    /// True when a page is due for delivery: reading further would exceed
    /// [`SCAN_PARALLEL_PAGES`] (or, before the workers start, any page is waiting).
    pub(crate) fn due(&self) -> bool {
        let ahead = if self.spawned {
            SCAN_PARALLEL_PAGES - 1
        } else {
            0
        };
        self.in_flight.len() > ahead
    }

    fn publish(&mut self) {
        if self.filling.records.is_empty() {
            return;
        }
        let mut page = std::mem::take(&mut self.filling);
        page.checked = (0..page.chunks()).map(|_| Mutex::new(None)).collect();
        let records = page.records.len();
        let page = Arc::new(page);
        self.in_flight.push_back(Arc::clone(&page));
        lock(&self.work.queue).pages.push_back(page);
        self.work.progress.notify_all();
        if !self.spawned && records >= SCAN_PARALLEL_SPAWN_PAGE_RECORDS {
            self.spawned = true;
            let work = self.work;
            for _ in 1..self.threads {
                self.scope.spawn(move || work.run_worker());
            }
        }
        self.page_records = (self.page_records * 2).min(SCAN_PARALLEL_PAGE_RECORDS);
        // Reuse the delivered page's buffers when no worker holds it any more.
        if let Some(mut spare) = self.spare.take() {
            spare.bytes.clear();
            spare.records.clear();
            spare.weight = 0;
            spare.checked.clear();
            spare.claimed = AtomicUsize::new(0);
            self.filling = spare;
        }
    }

    /// Delivers pages while one is due. `f` sees each record in position order; a failing record
    /// is returned as the error and nothing at or after it is shown.
    pub(crate) fn deliver_due(
        &mut self,
        f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, ReadError> {
        while self.due() {
            if self.deliver_oldest(f)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Publishes the page being filled and delivers every page, then reports a gap found while
    /// reading, if any.
    pub(crate) fn finish(
        &mut self,
        f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, ReadError> {
        self.publish();
        while !self.in_flight.is_empty() {
            if self.deliver_oldest(f)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        self.work.close();
        self.gap.take().map_or(Ok(ControlFlow::Continue(())), Err)
    }

    fn deliver_oldest(
        &mut self,
        f: &mut dyn FnMut(&RecordView<'_>) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>, ReadError> {
        let Some(page) = self.in_flight.pop_front() else {
            return Ok(ControlFlow::Continue(()));
        };
        for chunk in 0..page.chunks() {
            let checked = self.take_checked(&page, chunk);
            for fields in &checked.records {
                self.visited += 1;
                if f(&checked.view(fields)).is_break() {
                    self.work.close();
                    return Ok(ControlFlow::Break(()));
                }
            }
            if let Some(e) = checked.failure {
                self.work.close();
                return Err(e);
            }
            self.work.recycle(checked);
        }
        // Every chunk of a delivered page is claimed: the queue lets go of it, so its buffers
        // can be reused unless a worker still holds it.
        {
            let mut queue = lock(&self.work.queue);
            if queue.pages.front().is_some_and(|p| Arc::ptr_eq(p, &page)) {
                queue.pages.pop_front();
            }
        }
        if let Ok(page) = Arc::try_unwrap(page) {
            self.spare = Some(page);
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The result of `chunk` of `page`. While it is not ready, this thread verifies the oldest
    /// unclaimed chunk itself; when every published chunk is claimed and this one is still in a
    /// worker's hands, it verifies this one too and uses its own result. The calling thread
    /// therefore never waits for a worker: a worker that the system does not schedule for a
    /// while (a loaded machine) costs at most one chunk done twice, never a stall.
    fn take_checked(&mut self, page: &Page, chunk: usize) -> Checked {
        loop {
            if let Some(done) = lock(&page.checked[chunk]).take() {
                return done;
            }
            let claimed = lock(&self.work.queue).claim();
            match claimed {
                Some((claimed, c)) => self.work.check(&claimed, c, &mut self.scratch),
                None => return self.work.verify(page, chunk, &mut self.scratch),
            }
        }
    }
}

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
        return Err(records_end_early(expected, last));
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
            return Err(records_end_early(expected, last));
        }
        Ok(pipeline.visited())
    })
}

/// The error of a read whose records stop at `expected - 1` while the same snapshot's last
/// position is `last` (≥ `expected`): a backend that leaves out the newest records.
pub(crate) fn records_end_early(expected: u64, last: u64) -> ReadError {
    ReadError::Corrupt {
        position: expected,
        reason: format!(
            "the records end at position {}, but the journal's last position is {last}",
            expected - 1
        ),
    }
}
