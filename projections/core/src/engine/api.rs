//! The engine coordinator (spec/engine-store.md §6): processes events into engine records,
//! answers snapshots and replay audits, and keeps the benefit audit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use ctx_journal::{
    AppendError, AppendOutcome, Digest, ExpectedRevision, Journal, NewRecord, RecordView,
    StreamAppend, StreamId, Timestamp,
};
use ctx_model::{
    EffectKind, EngineEvent, EngineState, EventKind, HostAction, Json, NORMALIZER_VERSION_DEFAULT,
    ObservationRef, PendingConsent, Preflight, ReplayError, ReplayInput, ScopeRef, Surrogate,
    Transition, UtcMicros, is_sha, is_token, parse_sha, preflight,
};

use crate::archive;
use crate::framework::{Projection, Projections};
use crate::streams::{BENEFIT_RESULT_KIND, ENGINE_RECORD_KIND};

use super::benefit::{
    BENEFIT_RESULTS_TABLE, BenefitAuditProjection, BenefitResultEntry, benefit_event_id,
    benefit_stream, validate_result_text,
};
use super::codes::{self, EffectRefusal};
use super::effects::EffectsProjection;
use super::error::{
    AuditComponent, AuditError, BenefitAuditError, Divergence, OpenEngineError, ProcessError,
    SnapshotError, StoreError,
};
use super::heads::{
    ENGINE_HEAD_CORRUPT, EVENTS_TABLE, EngineHead, EngineStateProjection, EventEntry, HEADS_TABLE,
    HeadSummary, ReduceFn, StoredHead, StreamFold,
};
use super::record::{
    ENGINE_RECORD_FORMAT_VERSION, EngineRecord, GuardEffect, GuardMode, RecordPlace,
    SettlementGuard, decode_view, engine_stream,
};

// ------------------------------------------------------------------------------------------------
// Seams
// ------------------------------------------------------------------------------------------------

/// Why the trusted clock could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClockError(pub String);

/// The trusted source of the current UTC time. The engine never reads the wall clock itself;
/// every expiry decision asks this seam (spec/engine.md §11).
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Result<UtcMicros, ClockError>;
}

/// A clock that says what it is told: for tests, fuzzing and hosts that own their time source.
#[derive(Debug)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    pub fn new(now: UtcMicros) -> ManualClock {
        ManualClock(AtomicI64::new(now.0))
    }

    pub fn set(&self, now: UtcMicros) {
        self.0.store(now.0, Ordering::SeqCst);
    }

    /// Moves the clock by `micros` (negative moves it back).
    pub fn advance(&self, micros: i64) {
        self.0.fetch_add(micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Result<UtcMicros, ClockError> {
        Ok(UtcMicros(self.0.load(Ordering::SeqCst)))
    }
}

/// Why a seam (normalizer, planner) failed. The engine never forwards the reason into an error
/// or the journal, since it may carry private content; it reports a fixed sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SeamError(pub String);

/// Resolves an observation reference into an approved observation surrogate (spec/engine.md §10).
pub trait ObservationNormalizer: Send + Sync + 'static {
    fn normalize(&self, reference: &ObservationRef) -> Result<Surrogate, SeamError>;
}

/// What a planner is told besides the observation.
#[derive(Debug, Clone, Copy)]
pub struct PlanningContext<'a> {
    pub planner_version: &'a str,
    pub catalog_snapshot_digest: &'a str,
}

/// Produces the decision surrogate of a planning event (spec/engine.md §10).
pub trait DecisionPlanner: Send + Sync + 'static {
    fn plan(
        &self,
        observation: Option<&Surrogate>,
        state: Option<&EngineState>,
        context: &PlanningContext<'_>,
    ) -> Result<Surrogate, SeamError>;
}

/// Options of [`Engine::open`]. The clock is required: there is no default time source.
#[derive(Clone)]
pub struct EngineOptions {
    clock: Arc<dyn Clock>,
    normalizer: Option<Arc<dyn ObservationNormalizer>>,
    normalizer_version: String,
    planner: Option<Arc<dyn DecisionPlanner>>,
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("normalizer", &self.normalizer.is_some())
            .field("normalizer_version", &self.normalizer_version)
            .field("planner", &self.planner.is_some())
            .finish_non_exhaustive()
    }
}

impl EngineOptions {
    pub fn new(clock: Arc<dyn Clock>) -> EngineOptions {
        EngineOptions {
            clock,
            normalizer: None,
            normalizer_version: NORMALIZER_VERSION_DEFAULT.to_owned(),
            planner: None,
        }
    }

    /// The observation normalizer and the version token recorded in every replay input.
    pub fn normalizer(
        mut self,
        normalizer: Arc<dyn ObservationNormalizer>,
        version: impl Into<String>,
    ) -> EngineOptions {
        self.normalizer = Some(normalizer);
        self.normalizer_version = version.into();
        self
    }

    /// The decision planner of planning events. Mutually exclusive, per event, with an explicit
    /// decision surrogate passed to [`Engine::process`].
    pub fn planner(mut self, planner: Arc<dyn DecisionPlanner>) -> EngineOptions {
        self.planner = Some(planner);
        self
    }
}

// ------------------------------------------------------------------------------------------------
// Results
// ------------------------------------------------------------------------------------------------

/// One engine record as a service reads it back: its place, its journal digest, the reducer
/// event it committed and the transition it produced.
#[derive(Debug, Clone, PartialEq)]
pub struct JournaledEvent {
    pub revision: u64,
    /// The journal record digest (64 lowercase hex).
    pub record_digest: String,
    /// H(CJ(host's source event)), the digest duplicate detection compares.
    pub source_event_content_digest: String,
    /// The canonical JSON of the transition as stored.
    pub transition_json: String,
    pub reducer_event: EngineEvent,
    pub transition: Transition,
}

/// The committed state of one engine stream. Revision 0 means no event was committed: no state
/// and no head digest.
#[derive(Debug)]
pub struct Snapshot {
    revision: u64,
    head_record_digest: Option<Digest>,
    state: Option<EngineState>,
}

impl Snapshot {
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Journal digest of the head record.
    pub fn head_record_digest(&self) -> Option<Digest> {
        self.head_record_digest
    }

    pub fn state(&self) -> Option<&EngineState> {
        self.state.as_ref()
    }

    pub fn into_state(self) -> Option<EngineState> {
        self.state
    }
}

/// The result of [`Engine::replay_audit`].
#[derive(Debug)]
pub struct AuditReport {
    stream: StreamId,
    revisions_checked: u64,
    divergence: Option<Divergence>,
}

impl AuditReport {
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// Records replayed without divergence.
    pub fn revisions_checked(&self) -> u64 {
        self.revisions_checked
    }

    /// The first divergence, if any.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.divergence.as_ref()
    }

    pub fn is_clean(&self) -> bool {
        self.divergence.is_none()
    }
}

/// What an engine event commits as, shown to the builder of the records committed with it
/// ([`Engine::process_with`]).
#[derive(Debug)]
pub struct PendingCommit<'a> {
    stream: StreamId,
    revision: u64,
    record_digest: Digest,
    transition: &'a Transition,
    state: Option<&'a EngineState>,
    replayed: bool,
}

impl PendingCommit<'_> {
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The engine record's revision (the event's `expected_revision + 1`).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The journal digest (formula D) the engine record has: computed before the append for a
    /// new commit, read from the journal for a replayed one.
    pub fn record_digest(&self) -> Digest {
        self.record_digest
    }

    pub fn transition(&self) -> &Transition {
        self.transition
    }

    /// The state right after the event: `None` only for a replayed event that is no longer the
    /// head of its stream.
    pub fn state(&self) -> Option<&EngineState> {
        self.state
    }

    /// True when the event was committed before and only the extra records are appended now.
    pub fn is_replayed(&self) -> bool {
        self.replayed
    }

    /// The snapshot of the stream right after the event (see [`PendingCommit::state`]).
    pub fn snapshot(&self) -> Option<Snapshot> {
        self.state.map(|state| Snapshot {
            revision: self.revision,
            head_record_digest: Some(self.record_digest),
            state: Some(state.clone()),
        })
    }
}

/// Why [`Engine::process_with`] failed.
#[derive(Debug)]
pub enum ProcessWithError<E> {
    /// The event itself failed, exactly as [`Engine::process`] would; nothing was written.
    Process(ProcessError),
    /// The builder of the extra records refused; nothing was written.
    Extras(E),
    /// The journal refused one of the extra records (a conflict, a wrong revision, a projection
    /// refusal); nothing of this attempt was written.
    ExtrasAppend(AppendError),
}

impl<E: std::fmt::Display> std::fmt::Display for ProcessWithError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcessWithError::Process(e) => e.fmt(f),
            ProcessWithError::Extras(e) => e.fmt(f),
            ProcessWithError::ExtrasAppend(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ProcessWithError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcessWithError::Process(e) => Some(e),
            ProcessWithError::Extras(e) => Some(e),
            ProcessWithError::ExtrasAppend(e) => Some(e),
        }
    }
}

impl<E> From<ProcessError> for ProcessWithError<E> {
    fn from(e: ProcessError) -> Self {
        ProcessWithError::Process(e)
    }
}

impl<E> From<StoreError> for ProcessWithError<E> {
    fn from(e: StoreError) -> Self {
        ProcessWithError::Process(e.into())
    }
}

/// The builder of the records committed with an engine event.
type ExtrasFn<'f, E> = &'f mut dyn FnMut(&PendingCommit<'_>) -> Result<Vec<StreamAppend>, E>;

// ------------------------------------------------------------------------------------------------
// Benefit staging
// ------------------------------------------------------------------------------------------------

/// Benefit results a planner stores while the engine plans one event on this thread. They are
/// committed in the event's own append instead of one append each, so a planning event and its
/// audit are durable together and cost one commit. Keyed by the engine's address: a planner
/// runs synchronously inside [`Engine::process`] on the calling thread.
struct StagingFrame {
    engine: usize,
    occurred_at: Timestamp,
    /// (result digest, canonical text), in the order stored, without repeats.
    results: Vec<(String, String)>,
}

thread_local! {
    static BENEFIT_STAGING: RefCell<Vec<StagingFrame>> = const { RefCell::new(Vec::new()) };
}

/// An open staging frame; dropping it (also on an early return or a panic) discards what it
/// staged, so a failed planning run stores nothing.
struct Staging {
    engine: usize,
}

impl Staging {
    fn begin(engine: &Engine, occurred_at: Timestamp) -> Staging {
        let engine = engine.address();
        BENEFIT_STAGING.with_borrow_mut(|frames| {
            frames.push(StagingFrame {
                engine,
                occurred_at,
                results: Vec::new(),
            });
        });
        Staging { engine }
    }

    /// Closes the frame and returns one `NoStream` append per staged result.
    fn finish(self) -> Vec<StreamAppend> {
        let frame = self.pop();
        let Some(frame) = frame else {
            return Vec::new();
        };
        frame
            .results
            .into_iter()
            .filter_map(|(digest, text)| {
                let stream = benefit_stream(&digest).ok()?;
                Some(StreamAppend::new(
                    stream,
                    ExpectedRevision::NoStream,
                    vec![NewRecord::new(
                        benefit_event_id(&digest),
                        BENEFIT_RESULT_KIND,
                        frame.occurred_at,
                        text.into_bytes(),
                    )],
                ))
            })
            .collect()
    }

    fn pop(&self) -> Option<StagingFrame> {
        BENEFIT_STAGING.with_borrow_mut(|frames| {
            let at = frames.iter().rposition(|f| f.engine == self.engine)?;
            Some(frames.remove(at))
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // After `finish` the frame is gone and this finds nothing.
        let _ = self.pop();
    }
}

/// Stages a validated, not yet stored result when `engine` is planning on this thread: `None`
/// when it is not (the caller appends), else the staging answer.
fn stage_benefit(
    engine: &Engine,
    digest: &str,
    text: &str,
) -> Option<Result<String, BenefitAuditError>> {
    let engine = engine.address();
    BENEFIT_STAGING.with_borrow_mut(|frames| {
        let frame = frames.iter_mut().rev().find(|f| f.engine == engine)?;
        Some(match frame.results.iter().find(|(d, _)| d == digest) {
            Some((_, staged)) if staged == text => Ok(digest.to_owned()),
            Some(_) => Err(BenefitAuditError::DigestCollision {
                result_digest: digest.to_owned(),
            }),
            None => {
                frame.results.push((digest.to_owned(), text.to_owned()));
                Ok(digest.to_owned())
            }
        })
    })
}

// ------------------------------------------------------------------------------------------------
// The engine
// ------------------------------------------------------------------------------------------------

/// The engine's projections as [`Engine::open`] attaches them: `engine.state` (with the engine's
/// reducer), `engine.effects` and `engine.benefit_audit`. Offline tools (`ctx audit`, `ctx
/// inspect`) check and read them without attaching them.
pub fn engine_projections() -> Vec<Arc<dyn Projection>> {
    vec![
        Arc::new(EngineStateProjection::new(ctx_model::reduce)),
        Arc::new(EffectsProjection),
        Arc::new(BenefitAuditProjection),
    ]
}

/// Locks of engine streams, by (data directory, stream): every engine write of one stream in this
/// process holds its lock from the head read to the append, so check-then-append cannot race
/// (another process cannot write: the journal's process lock excludes it). Entries whose lock
/// nobody holds are pruned.
type StreamLocks = HashMap<(PathBuf, StreamId), Weak<Mutex<()>>>;

static STREAM_LOCKS: LazyLock<Mutex<StreamLocks>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded data is either `()` or the lock map, which changes only by whole inserts and
    // prunes; a panic elsewhere cannot leave it inconsistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The engine of one journal: the reference's `CtxEngine` with its store being the journal.
pub struct Engine {
    pub(crate) journal: Arc<Journal>,
    pub(crate) projections: Projections,
    pub(crate) clock: Arc<dyn Clock>,
    normalizer: Option<Arc<dyn ObservationNormalizer>>,
    normalizer_version: String,
    planner: Option<Arc<dyn DecisionPlanner>>,
    pub(crate) reduce: ReduceFn,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("journal", &self.journal)
            .finish_non_exhaustive()
    }
}

/// Why the engine re-checks the duplicate index after a refusal.
enum Retry {
    Revision(u64),
    Collision,
}

impl Engine {
    /// Opens the engine on a journal: attaches (catching up or rebuilding) the `engine.state`,
    /// `engine.effects` and `engine.benefit_audit` projections.
    pub fn open(journal: Arc<Journal>, options: EngineOptions) -> Result<Engine, OpenEngineError> {
        if !is_token(&options.normalizer_version) {
            return Err(OpenEngineError::Option {
                option: "normalizer_version",
                reason: format!(
                    "\"{}\" is not an opaque token",
                    options.normalizer_version.escape_debug()
                ),
            });
        }
        let projections = Projections::attach(&journal, engine_projections())?;
        Ok(Engine {
            journal,
            projections,
            clock: options.clock,
            normalizer: options.normalizer,
            normalizer_version: options.normalizer_version,
            planner: options.planner,
            reduce: ctx_model::reduce,
        })
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// This engine's identity for benefit staging (see [`StagingFrame`]).
    fn address(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// The attached engine projections, for `digest`, `check` and `rebuild` by name
    /// ([`super::ENGINE_STATE_PROJECTION`], [`super::ENGINE_EFFECTS_PROJECTION`],
    /// [`super::ENGINE_BENEFIT_AUDIT_PROJECTION`]).
    pub fn projections(&self) -> &Projections {
        &self.projections
    }

    /// The lock of one engine stream (see [`STREAM_LOCKS`]).
    pub(crate) fn stream_lock(&self, stream: &StreamId) -> Arc<Mutex<()>> {
        let mut locks = lock(&STREAM_LOCKS);
        locks.retain(|_, w| w.strong_count() > 0);
        let key = (self.journal.data_dir().to_path_buf(), *stream);
        if let Some(existing) = locks.get(&key).and_then(Weak::upgrade) {
            return existing;
        }
        let fresh = Arc::new(Mutex::new(()));
        locks.insert(key, Arc::downgrade(&fresh));
        fresh
    }

    // ----- reads -----

    /// The stored head value of a stream: a full head, or the summary of a terminal stream
    /// (spec/engine-store.md §3).
    pub(crate) fn stored_head(&self, stream: &StreamId) -> Result<Option<StoredHead>, StoreError> {
        self.journal
            .projection_get(HEADS_TABLE, stream.as_bytes(), |v| {
                v.map(StoredHead::decode).transpose()
            })?
            .map_err(|e| StoreError::Corrupt(format!("the head of engine stream {stream}: {e}")))
    }

    /// The projected head of a stream with its state: a summary head's state is replayed from
    /// the stream's records and must have the summary's state digest (spec/engine-store.md §3,
    /// invariant 3), else [`StoreError::HeadSummary`].
    pub(crate) fn head(&self, stream: &StreamId) -> Result<Option<EngineHead>, StoreError> {
        Ok(match self.stored_head(stream)? {
            None => None,
            Some(StoredHead::Full(head)) => Some(*head),
            Some(StoredHead::Summary(summary)) => Some(EngineHead {
                revision: summary.revision,
                head_record_digest: summary.head_record_digest,
                head_position: summary.head_position,
                first_position: summary.first_position,
                state_digest: summary.state_digest,
                state: self.replay_summary(stream, &summary)?,
            }),
        })
    }

    /// Replays a summarized stream's revisions 1..=summary.revision from the journal (records
    /// are immutable, so a record appended meanwhile does not disturb it) and checks the result
    /// against the summary.
    fn replay_summary(
        &self,
        stream: &StreamId,
        summary: &HeadSummary,
    ) -> Result<EngineState, StoreError> {
        let mut fold = StreamFold::new(self.reduce);
        let mut failure = None;
        let limit = usize::try_from(summary.revision).unwrap_or(usize::MAX);
        self.journal
            .visit_stream(stream, 1, limit, |view| match fold.push(view) {
                Ok(()) => ControlFlow::Continue(()),
                Err(detail) => {
                    failure = Some(detail);
                    ControlFlow::Break(())
                }
            })?;
        let result = match failure {
            Some(detail) => Err(detail),
            None => fold.finish(summary),
        };
        result.map_err(|reason| StoreError::HeadSummary {
            stream: *stream,
            revision: summary.revision,
            detail: reason.to_string(),
        })
    }

    fn event_entry(&self, event_id: &str) -> Result<Option<EventEntry>, StoreError> {
        self.journal
            .projection_get(EVENTS_TABLE, event_id.as_bytes(), |v| {
                v.map(archive::from_bytes::<EventEntry>).transpose()
            })?
            .map_err(|e| StoreError::Corrupt(format!("the index entry of event {event_id}: {e}")))
    }

    /// The engine record at `revision` of `stream`, decoded and bound, with its journal digest.
    pub(crate) fn stored_record(
        &self,
        stream: &StreamId,
        revision: u64,
    ) -> Result<Option<(super::record::DecodedRecord, Digest)>, StoreError> {
        let mut found = None;
        self.journal.visit_stream(stream, revision, 1, |view| {
            found = Some(decode_view(view).map(|d| (d, view.digest)));
            ControlFlow::Break(())
        })?;
        found.transpose().map_err(|e| {
            StoreError::Corrupt(format!(
                "engine record at revision {revision} of stream {stream}: {e}"
            ))
        })
    }

    /// The state right after `revision` of `scope`'s stream (a historical head), rebuilt by
    /// replaying records 1..=`revision` through the reducer and checked against each record's
    /// stored state digest; `None` when the stream is shorter. Costs one reduction per revision:
    /// meant for rare checks against a past head (consent recovery), not for the hot path.
    pub fn state_at(
        &self,
        scope: &ScopeRef,
        revision: u64,
    ) -> Result<Option<EngineState>, StoreError> {
        let stream = engine_stream(scope).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if revision == 0 {
            return Ok(None);
        }
        let mut state: Option<EngineState> = None;
        let mut failure = None;
        let limit = usize::try_from(revision).unwrap_or(usize::MAX);
        self.journal.visit_stream(&stream, 1, limit, |view| {
            let replayed = decode_view(view)
                .map_err(|e| e.to_string())
                .and_then(|decoded| {
                    let (next, _) = (self.reduce)(state.as_ref(), &decoded.replay)
                        .map_err(|e| e.to_string())?;
                    if next.digest() != decoded.record.result_state_digest {
                        return Err("the replayed state differs from the stored digest".into());
                    }
                    Ok(next)
                });
            match replayed {
                Ok(next) => {
                    state = Some(next);
                    ControlFlow::Continue(())
                }
                Err(e) => {
                    failure = Some(format!(
                        "revision {} of stream {stream} does not replay: {e}",
                        view.revision
                    ));
                    ControlFlow::Break(())
                }
            }
        })?;
        if let Some(detail) = failure {
            return Err(StoreError::Corrupt(detail));
        }
        Ok(state.filter(|s| s.revision == revision))
    }

    /// The engine record at `revision` of `scope`'s stream, decoded and verified (digest, MAC,
    /// chain, binding to its place); `None` when the stream is shorter. Services use it to check
    /// that a revision holds exactly the event they built (spec/service.md §6).
    pub fn journaled_event(
        &self,
        scope: &ScopeRef,
        revision: u64,
    ) -> Result<Option<JournaledEvent>, StoreError> {
        let stream = engine_stream(scope).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        if revision == 0 {
            return Ok(None);
        }
        Ok(self
            .stored_record(&stream, revision)?
            .map(|(decoded, digest)| JournaledEvent {
                revision,
                record_digest: digest.to_hex(),
                source_event_content_digest: decoded.record.source_event_content_digest,
                transition_json: decoded.record.transition_json,
                reducer_event: decoded.replay.reducer_event,
                transition: decoded.transition,
            }))
    }

    /// The stored transition of `event_id` when it was committed with exactly this content;
    /// `EventIdCollision` when it was committed with other content or in another stream.
    fn cached_transition(
        &self,
        stream: &StreamId,
        event_id: &str,
        content_digest: &str,
    ) -> Result<Option<Transition>, ProcessError> {
        let Some(entry) = self.event_entry(event_id)? else {
            return Ok(None);
        };
        let same = entry.stream == *stream.as_bytes()
            && parse_sha(content_digest) == Some(entry.event_content_digest);
        if !same {
            return Err(ProcessError::EventIdCollision {
                event_id: event_id.to_owned(),
            });
        }
        match self.stored_record(stream, entry.revision)? {
            Some((decoded, _)) if decoded.replay.reducer_event.event_id == event_id => {
                Ok(Some(decoded.transition))
            }
            _ => Err(StoreError::Corrupt(format!(
                "event {event_id} is indexed at revision {} of stream {stream}, which does not hold it",
                entry.revision
            ))
            .into()),
        }
    }

    /// The committed state of a scope's stream.
    pub fn snapshot(&self, scope: &ScopeRef) -> Result<Snapshot, SnapshotError> {
        let stream = engine_stream(scope).map_err(|e| SnapshotError::Scope(e.to_string()))?;
        Ok(match self.head(&stream)? {
            None => Snapshot {
                revision: 0,
                head_record_digest: None,
                state: None,
            },
            Some(h) => Snapshot {
                revision: h.revision,
                head_record_digest: Some(Digest::from_bytes(h.head_record_digest)),
                state: Some(h.state),
            },
        })
    }

    // ----- process -----

    /// Processes one event (spec/engine-store.md §6) and returns its transition: the stored
    /// one when the identical event was committed before. `decision` is an explicit decision
    /// surrogate for a planning event (mutually exclusive with a configured planner).
    pub fn process(
        &self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
    ) -> Result<Transition, ProcessError> {
        self.process_guarded(event, decision, None)
    }

    /// [`Engine::process`] that commits `extras` in the same atomic journal append as the engine
    /// record, so an event and the records that depend on it (a query store's registration or
    /// completion binding) cost one commit and are durable together.
    ///
    /// `extras` is called once the engine record is known (its revision, journal digest,
    /// transition and resulting state) and returns the extra stream appends; they must not touch
    /// the engine stream or a benefit stream. When the event was committed before (an exact
    /// duplicate), `extras` is called with the stored record and its parts are appended alone:
    /// the journal's idempotency makes identical records (same event ids, same content) a no-op
    /// and different content a conflict, so a retry after a crash converges whichever side of the
    /// commit the crash hit. Returning no parts appends nothing.
    pub fn process_with<E>(
        &self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
        mut extras: impl FnMut(&PendingCommit<'_>) -> Result<Vec<StreamAppend>, E>,
    ) -> Result<Transition, ProcessWithError<E>> {
        self.process_inner(event, decision, None, Vec::new(), Some(&mut extras))
    }

    pub(crate) fn process_guarded(
        &self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
        supplied: Option<&SettlementGuard>,
    ) -> Result<Transition, ProcessError> {
        self.process_inner::<std::convert::Infallible>(event, decision, supplied, Vec::new(), None)
            .map_err(|e| match e {
                ProcessWithError::Process(e) => e,
                ProcessWithError::Extras(never) => match never {},
                // Without extras no extra part exists to be refused.
                ProcessWithError::ExtrasAppend(e) => StoreError::from(e).into(),
            })
    }

    /// `prefix`: appends committed in the same batch *before* the engine record (an install
    /// outcome its receipt settles), refused like extras.
    pub(crate) fn process_inner<E>(
        &self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
        supplied: Option<&SettlementGuard>,
        prefix: Vec<StreamAppend>,
        mut extras: Option<ExtrasFn<'_, E>>,
    ) -> Result<Transition, ProcessWithError<E>> {
        // 1. Pure validation, before any read (also for duplicates).
        let pre = preflight(event).map_err(replay_refusal)?;
        let stream = engine_stream(&pre.reducer_event.scope)
            .map_err(|e| ProcessError::Invalid(e.to_string()))?;
        let event_id = pre.reducer_event.event_id.clone();
        let digest = pre.source_event_content_digest.clone();
        // 2. Duplicate: the identical event returns its stored transition, with no other check.
        if let Some(t) = self.cached_transition(&stream, &event_id, &digest)? {
            return self.replayed_with(&stream, t, extras);
        }
        let stream_lock = self.stream_lock(&stream);
        let held = lock(&stream_lock);
        // Another thread of this process may have committed it while this one waited.
        if let Some(t) = self.cached_transition(&stream, &event_id, &digest)? {
            drop(held);
            return self.replayed_with(&stream, t, extras);
        }
        // 3. Head.
        let head = self.head(&stream)?;
        let revision = head.as_ref().map_or(0, |h| h.revision);
        if revision != pre.reducer_event.expected_revision {
            return Err(ProcessError::RevisionConflict {
                expected: pre.reducer_event.expected_revision,
                actual: revision,
            }
            .into());
        }
        let previous = head
            .as_ref()
            .map_or(Digest::ZERO, |h| Digest::from_bytes(h.head_record_digest));
        let state = head.as_ref().map(|h| &h.state);
        // 5. Authorities the state grants this event; 6. trusted-clock assertions.
        let authorities = derive_authorities(state, &pre.reducer_event, supplied)?;
        self.assert_clock(&authorities)?;
        // 9. Replay input, reduction, record.
        let kind = pre.reducer_event.kind;
        let occurred_at = UtcMicros::parse(&pre.reducer_event.occurred_at).map_err(|_| {
            ProcessError::Invalid("occurred_at must be an RFC 3339 timestamp".into())
        })?;
        // Benefit results the planner stores are staged and committed with the event.
        let staging = Staging::begin(self, Timestamp(occurred_at.0));
        let input = self.prepare(pre, state, decision)?;
        let mut benefits = staging.finish();
        let (next, transition) = (self.reduce)(state, &input).map_err(ProcessError::from)?;
        let to = revision + 1;
        let diverged = |component, detail: &str| Divergence {
            stream,
            revision: to,
            component,
            detail: detail.to_owned(),
        };
        if next.revision != to
            || transition.event_id != event_id
            || transition.from_revision != revision
            || transition.to_revision != to
            || transition.scope != input.reducer_event.scope
        {
            return Err(ProcessError::from(diverged(
                AuditComponent::ReducerOutput,
                "the reducer's output names another revision, event or scope",
            ))
            .into());
        }
        let record = EngineRecord {
            format_version: ENGINE_RECORD_FORMAT_VERSION,
            reducer_version: input.reducer_version.clone(),
            source_event_content_digest: input.source_event_content_digest.clone(),
            replay_json: input.to_cj(),
            transition_json: transition.view().to_cj(),
            result_state_digest: next.digest(),
            settlement_guard: authorities.guard.clone(),
        };
        let payload = record.encode().map_err(|e| {
            ProcessError::from(diverged(AuditComponent::RecordBinding, &e.to_string()))
        })?;
        record
            .open(&RecordPlace {
                stream,
                revision: to,
                event_id: &event_id,
                occurred_at: Timestamp(occurred_at.0),
            })
            .map_err(|e| {
                ProcessError::from(diverged(AuditComponent::RecordBinding, &e.to_string()))
            })?;
        let engine_record = NewRecord::new(
            event_id.clone(),
            ENGINE_RECORD_KIND,
            Timestamp(occurred_at.0),
            payload,
        );
        // Named before the append so records of the same batch (a planned mark) can carry it.
        let record_digest = engine_record.digest_at(&stream, to, &previous);
        let extra_parts = match extras.as_mut() {
            None => Vec::new(),
            Some(build) => build(&PendingCommit {
                stream,
                revision: to,
                record_digest,
                transition: &transition,
                state: Some(&next),
                replayed: false,
            })
            .map_err(ProcessWithError::Extras)?,
        };
        // 10. The clock again, immediately before the commit.
        self.assert_clock(&authorities)?;
        // 11. Commit; the expected revision is the final arbiter.
        let expected = if revision == 0 {
            ExpectedRevision::NoStream
        } else {
            ExpectedRevision::Exact(revision)
        };
        let engine_part = StreamAppend::new(stream, expected, vec![engine_record]);
        let retry = loop {
            let mut batch =
                Vec::with_capacity(prefix.len() + 1 + benefits.len() + extra_parts.len());
            batch.extend(prefix.iter().cloned());
            batch.push(engine_part.clone());
            batch.extend(benefits.iter().cloned());
            batch.extend(extra_parts.iter().cloned());
            let refusal = match self.journal.append_batch(batch) {
                Ok(outcomes) => {
                    let Some(outcome) = outcomes.get(prefix.len()) else {
                        return Err(StoreError::Corrupt(
                            "the journal answered an append without an outcome".into(),
                        )
                        .into());
                    };
                    if !outcome.replayed && outcome.last_digest() != record_digest {
                        // The extras already name the predicted digest; a journal that assigns
                        // another one no longer follows formula D.
                        return Err(StoreError::Corrupt(format!(
                            "the journal assigned event {event_id} a record digest other than \
                             formula D"
                        ))
                        .into());
                    }
                    return Ok(self.committed(&stream, &event_id, outcome, transition)?);
                }
                Err(e) => e,
            };
            // Which part the journal refused decides what the refusal means.
            // A conflict names the stream that holds the event id already, so it (like a hook
            // refusal) is attributed by the event id of the refused record.
            let part = match &refusal {
                AppendError::WrongRevision { stream: s, .. } => Some(*s),
                AppendError::Conflict { event_id: id, .. }
                | AppendError::Hook { event_id: id, .. } => {
                    if *id == event_id {
                        Some(stream)
                    } else {
                        prefix
                            .iter()
                            .chain(&benefits)
                            .chain(&extra_parts)
                            .find(|p| p.records.iter().any(|r| r.event_id == *id))
                            .map(|p| p.stream)
                    }
                }
                _ => None,
            };
            if let Some(at) = benefits.iter().position(|p| Some(p.stream) == part) {
                // The same result stored meanwhile (by another planning run) is the same result:
                // drop it from the batch and commit the rest; other bytes are a collision.
                let text = benefits[at].records.first().map(|r| r.payload.as_slice());
                let digest = benefits[at]
                    .records
                    .first()
                    .and_then(|r| {
                        r.event_id
                            .strip_prefix(super::benefit::BENEFIT_EVENT_PREFIX)
                    })
                    .unwrap_or_default()
                    .to_owned();
                match self.benefit_entry(&digest) {
                    Ok(Some(entry)) if Some(entry.bytes.as_slice()) == text => {
                        benefits.remove(at);
                        continue;
                    }
                    _ => {
                        return Err(StoreError::Corrupt(format!(
                            "benefit result {digest} is already bound to different bytes"
                        ))
                        .into());
                    }
                }
            }
            if part.is_some() && part != Some(stream) {
                drop(held);
                // An extra refused because the event itself committed meanwhile converges on it.
                if let Some(t) = self.cached_transition(&stream, &event_id, &digest)? {
                    return self.replayed_with(&stream, t, extras);
                }
                return Err(ProcessWithError::ExtrasAppend(refusal));
            }
            break match refusal {
                AppendError::WrongRevision { current, .. } => Retry::Revision(current),
                AppendError::Conflict { .. } => Retry::Collision,
                AppendError::Hook {
                    code: Some(code),
                    message,
                    ..
                } => return Err(hook_refusal(stream, to, code, message, kind).into()),
                e => return Err(StoreError::from(e).into()),
            };
        };
        drop(held);
        // A refused append may be a concurrent commit of this very event.
        if let Some(t) = self.cached_transition(&stream, &event_id, &digest)? {
            return self.replayed_with(&stream, t, extras);
        }
        Err(match retry {
            Retry::Revision(actual) => ProcessError::RevisionConflict {
                expected: revision,
                actual,
            },
            Retry::Collision => ProcessError::EventIdCollision { event_id },
        }
        .into())
    }

    /// The duplicate path of [`Engine::process_with`]: the event is committed, so only its extra
    /// records are appended, alone; identical ones are an idempotent no-op in the journal.
    fn replayed_with<E>(
        &self,
        stream: &StreamId,
        transition: Transition,
        extras: Option<ExtrasFn<'_, E>>,
    ) -> Result<Transition, ProcessWithError<E>> {
        let Some(build) = extras else {
            return Ok(transition);
        };
        let revision = transition.to_revision;
        let Some((_, record_digest)) = self.stored_record(stream, revision)? else {
            return Err(StoreError::Corrupt(format!(
                "event {} is committed at revision {revision} of stream {stream}, which is missing",
                transition.event_id
            ))
            .into());
        };
        let head = self.head(stream)?.filter(|h| h.revision == revision);
        let parts = build(&PendingCommit {
            stream: *stream,
            revision,
            record_digest,
            transition: &transition,
            state: head.as_ref().map(|h| &h.state),
            replayed: true,
        })
        .map_err(ProcessWithError::Extras)?;
        if !parts.is_empty() {
            self.journal
                .append_batch(parts)
                .map_err(ProcessWithError::ExtrasAppend)?;
        }
        Ok(transition)
    }

    /// The transition to return for a commit: ours, or the stored one when the journal found the
    /// identical record already committed.
    fn committed(
        &self,
        stream: &StreamId,
        event_id: &str,
        outcome: &AppendOutcome,
        transition: Transition,
    ) -> Result<Transition, ProcessError> {
        if !outcome.replayed {
            return Ok(transition);
        }
        match self.stored_record(stream, outcome.last_revision())? {
            Some((d, _)) if d.transition.event_id == event_id => Ok(d.transition),
            _ => Err(StoreError::Corrupt(format!(
                "the journal replayed event {event_id} but its stream does not hold it"
            ))
            .into()),
        }
    }

    fn prepare(
        &self,
        pre: Preflight,
        state: Option<&EngineState>,
        decision: Option<Surrogate>,
    ) -> Result<ReplayInput, ProcessError> {
        if decision.is_some() && self.planner.is_some() {
            return Err(ProcessError::Invalid(
                "an explicit decision surrogate and a configured decision planner are mutually exclusive"
                    .into(),
            ));
        }
        let observation = match &pre.observation_ref {
            None => None,
            Some(reference) => {
                let Some(normalizer) = &self.normalizer else {
                    return Err(ProcessError::Unsupported(
                        "event requires a typed observation normalizer".into(),
                    ));
                };
                Some(normalizer.normalize(reference).map_err(|_| {
                    ProcessError::Invalid("typed observation normalization failed".into())
                })?)
            }
        };
        let event = &pre.reducer_event;
        let decision = match (decision, &self.planner) {
            (Some(d), _) => Some(d),
            (None, Some(planner)) if event.kind.is_planning() => {
                let context = PlanningContext {
                    planner_version: event.planner_version.as_deref().unwrap_or_default(),
                    catalog_snapshot_digest: event
                        .catalog_snapshot_digest
                        .as_deref()
                        .unwrap_or_default(),
                };
                Some(
                    planner
                        .plan(observation.as_ref(), state, &context)
                        .map_err(|_| {
                            ProcessError::Invalid("typed decision planning failed".into())
                        })?,
                )
            }
            (None, _) => None,
        };
        ReplayInput::assemble(pre, observation, decision, &self.normalizer_version)
            .map_err(replay_refusal)
    }

    /// The trusted-clock assertions of spec/engine.md §11. The clock is not asked when the
    /// event depends on no expiry.
    fn assert_clock(&self, a: &Authorities) -> Result<(), ProcessError> {
        if a.decision_expires.is_none()
            && a.consent_expires.is_none()
            && a.install_expires.is_none()
            && a.activation_expires.is_none()
        {
            return Ok(());
        }
        let now = self
            .clock
            .now()
            .map_err(|e| ProcessError::Clock(format!("trusted UTC clock is unavailable: {e}")))?;
        let fail = |message: &str| Err(ProcessError::Clock(message.to_owned()));
        if a.decision_expires.is_some_and(|t| now >= t) {
            return fail("install decision has expired according to trusted clock");
        }
        if a.consent_expires.is_some_and(|t| now < t) {
            return fail("install consent has not expired according to trusted clock");
        }
        if a.install_expires.is_some_and(|t| now < t) {
            return fail("install action has not expired according to trusted clock");
        }
        if a.activation_expires.is_some_and(|t| now < t) {
            return fail("activation action has not expired according to trusted clock");
        }
        Ok(())
    }

    // ----- audit -----

    /// Replays a scope's stream from revision 1 and reports the first divergence: every stored
    /// transition and state digest is recomputed by the reducer, and the final state must be the
    /// projected head (spec/engine.md §10).
    pub fn replay_audit(&self, scope: &ScopeRef) -> Result<AuditReport, AuditError> {
        let stream = engine_stream(scope).map_err(|e| AuditError::Scope(e.to_string()))?;
        let (mut report, last) = audit_stream_inner(&self.journal, &stream, self.reduce)?;
        if report.divergence.is_some() {
            return Ok(report);
        }
        // The stored value, not `head`: a summary is compared with the replay here instead of
        // being replayed a second time.
        let head = self.stored_head(&stream)?;
        report.divergence = match (head, last) {
            (None, None) => None,
            (Some(h), None) => Some(Divergence {
                stream,
                revision: h.revision(),
                component: AuditComponent::Projection,
                detail: "a projected head exists for a stream without records".into(),
            }),
            (None, Some(l)) => Some(Divergence {
                stream,
                revision: l.revision,
                component: AuditComponent::Head,
                detail: "the stream has records but no projected head".into(),
            }),
            (Some(h), Some(l)) => {
                let summary = h.summary();
                let same_state = match &h {
                    // A summary is stored exactly for a terminal state (§3, invariant 2).
                    StoredHead::Full(full) => {
                        full.state == l.state && !super::heads::is_terminal(&l.state)
                    }
                    StoredHead::Summary(_) => super::heads::is_terminal(&l.state),
                };
                let same = summary.revision == l.revision
                    && Digest::from_bytes(summary.head_record_digest) == l.digest
                    && summary.head_position == l.position
                    && summary.first_position == l.first_position
                    && same_state
                    && parse_sha(&l.state.digest()) == Some(summary.state_digest);
                (!same).then(|| Divergence {
                    stream,
                    revision: l.revision,
                    component: AuditComponent::Head,
                    detail: format!(
                        "the projected head at revision {} differs from the replayed head",
                        summary.revision
                    ),
                })
            }
        };
        Ok(report)
    }

    // ----- benefit audit -----

    /// Stores one planning run's full benefit result under its `result_digest` and returns the
    /// digest; storing identical bytes again is a no-op (spec/engine-store.md §5).
    pub fn store_benefit_result(&self, result_json: &Json) -> Result<String, BenefitAuditError> {
        let text = result_json.to_cja();
        let digest =
            validate_result_text(&text).map_err(|e| BenefitAuditError::Invalid(e.to_string()))?;
        let stream =
            benefit_stream(&digest).map_err(|e| BenefitAuditError::Invalid(e.to_string()))?;
        if let Some(entry) = self.benefit_entry(&digest)? {
            return if entry.bytes == text.as_bytes() {
                Ok(digest)
            } else {
                Err(BenefitAuditError::DigestCollision {
                    result_digest: digest,
                })
            };
        }
        // During planning the result is committed with the planning event (one commit).
        if let Some(staged) = stage_benefit(self, &digest, &text) {
            return staged;
        }
        let now = self
            .clock
            .now()
            .map_err(|e| BenefitAuditError::Clock(e.to_string()))?;
        let append = StreamAppend::new(
            stream,
            ExpectedRevision::NoStream,
            vec![NewRecord::new(
                benefit_event_id(&digest),
                BENEFIT_RESULT_KIND,
                Timestamp(now.0),
                text.clone().into_bytes(),
            )],
        );
        match self.journal.append(append) {
            Ok(_) => Ok(digest),
            // Stored concurrently (or at another time): identical bytes are the same result.
            Err(AppendError::WrongRevision { .. } | AppendError::Conflict { .. }) => {
                match self.benefit_entry(&digest)? {
                    Some(entry) if entry.bytes == text.as_bytes() => Ok(digest),
                    _ => Err(BenefitAuditError::DigestCollision {
                        result_digest: digest,
                    }),
                }
            }
            Err(AppendError::Hook {
                code: Some(codes::BENEFIT_DIGEST_COLLISION),
                ..
            }) => Err(BenefitAuditError::DigestCollision {
                result_digest: digest,
            }),
            Err(e) => Err(StoreError::from(e).into()),
        }
    }

    /// Loads and re-validates a stored benefit result.
    pub fn load_benefit_result(&self, result_digest: &str) -> Result<Json, BenefitAuditError> {
        if !is_sha(result_digest) {
            return Err(BenefitAuditError::Invalid(
                "result_digest must be a lowercase SHA-256 digest".into(),
            ));
        }
        let Some(entry) = self.benefit_entry(result_digest)? else {
            return Err(BenefitAuditError::NotFound {
                result_digest: result_digest.to_owned(),
            });
        };
        let corrupt = |reason: &str| BenefitAuditError::Corrupt {
            result_digest: result_digest.to_owned(),
            reason: reason.to_owned(),
        };
        if entry.byte_length != entry.bytes.len() as u64 {
            return Err(corrupt("its byte length is invalid"));
        }
        if parse_sha(&ctx_model::sha256_hex_bytes(&entry.bytes)) != Some(entry.content_digest) {
            return Err(corrupt("its content digest is invalid"));
        }
        let text = std::str::from_utf8(&entry.bytes).map_err(|_| corrupt("it is not UTF-8"))?;
        let digest = validate_result_text(text).map_err(|e| corrupt(&e.to_string()))?;
        if digest != result_digest {
            return Err(corrupt("it is bound to the wrong digest"));
        }
        Json::parse(text).map_err(|_| corrupt("it is not valid JSON"))
    }

    fn benefit_entry(&self, digest: &str) -> Result<Option<BenefitResultEntry>, BenefitAuditError> {
        let Some(key) = parse_sha(digest) else {
            return Err(BenefitAuditError::Invalid(
                "result_digest must be a lowercase SHA-256 digest".into(),
            ));
        };
        self.journal
            .projection_get(BENEFIT_RESULTS_TABLE, &key, |v| {
                v.map(archive::from_bytes::<BenefitResultEntry>).transpose()
            })
            .map_err(StoreError::from)?
            .map_err(|e| BenefitAuditError::Corrupt {
                result_digest: digest.to_owned(),
                reason: e.to_string(),
            })
    }
}

/// Maps a replay-boundary refusal: an event the boundary cannot take is `Unsupported`, any other
/// refusal `Invalid`; the message is the reference's.
fn replay_refusal(e: ReplayError) -> ProcessError {
    match e {
        ReplayError::Unsupported(m) => ProcessError::Unsupported(m),
        other => ProcessError::Invalid(other.message().to_owned()),
    }
}

/// Maps a projection's refusal of an engine append to the engine's typed error.
fn hook_refusal(
    stream: StreamId,
    revision: u64,
    code: &'static str,
    message: String,
    kind: EventKind,
) -> ProcessError {
    if let Some((effect, refusal)) = EffectRefusal::from_code(code) {
        return ProcessError::Effect {
            effect,
            refusal,
            message,
        };
    }
    if code == ENGINE_HEAD_CORRUPT {
        return StoreError::HeadSummary {
            stream,
            revision: revision.saturating_sub(1),
            detail: message,
        }
        .into();
    }
    let component = match code {
        codes::ENGINE_RECORD_INVALID => AuditComponent::RecordBinding,
        codes::ENGINE_REDUCER_REFUSED
        | codes::ENGINE_REPLAY_DIVERGED
        | codes::ENGINE_CHAIN_BROKEN
        | codes::ENGINE_EVENT_DUPLICATE => AuditComponent::CommitResult,
        _ => {
            return StoreError::Corrupt(format!(
                "a projection refused the {kind} engine record ({code}): {message}"
            ))
            .into();
        }
    };
    Divergence {
        stream,
        revision,
        component,
        detail: message,
    }
    .into()
}

// ------------------------------------------------------------------------------------------------
// Authorities (spec/engine-store.md §6)
// ------------------------------------------------------------------------------------------------

/// What the head state grants one event: expiries to assert with the trusted clock and the
/// settlement guard its record must carry.
#[derive(Debug, Default)]
struct Authorities {
    /// now < this (an install decision).
    decision_expires: Option<UtcMicros>,
    /// now ≥ this (a consent expiry).
    consent_expires: Option<UtcMicros>,
    /// now ≥ this (an unclaimed install expiry).
    install_expires: Option<UtcMicros>,
    /// now ≥ this (an unclaimed activation expiry).
    activation_expires: Option<UtcMicros>,
    guard: Option<SettlementGuard>,
}

fn authority<T>(message: &str) -> Result<T, ProcessError> {
    Err(ProcessError::Authority(message.to_owned()))
}

fn expiry_of(action: &HostAction, message: &str) -> Result<UtcMicros, ProcessError> {
    action
        .expires_at
        .as_deref()
        .and_then(|t| UtcMicros::parse(t).ok())
        .ok_or_else(|| ProcessError::Clock(message.to_owned()))
}

pub(crate) fn is_v3_install(action: &HostAction) -> bool {
    action.kind == ctx_model::ActionKind::InstallCapability
        && action.payload.get_str("schema") == Some(ctx_model::INSTALL_ACTION_PAYLOAD_SCHEMA_V3)
}

pub(crate) fn is_v3_activation(action: &HostAction) -> bool {
    action.kind == ctx_model::ActionKind::ActivateCapability
        && action.payload.get_str("schema") == Some(ctx_model::MATERIAL_ACTION_PAYLOAD_SCHEMA_V3)
}

/// True when the consent is exactly the one the payload names: scope and requested identity and
/// policy (and, for an expiry, the install expiry).
fn consent_matches(c: &PendingConsent, event: &EngineEvent, with_expiry: bool) -> bool {
    let p = &event.payload;
    let install = &c.install_action;
    p.get_str("consent_id") == Some(c.consent_id.as_str())
        && event.scope == install.scope
        && p.get_str("requested_action_id") == Some(install.action_id.as_str())
        && p.get_str("requested_action_kind") == Some(install.kind.as_str())
        && p.get_str("requested_action_content_digest") == Some(install.content_digest().as_str())
        && p.get("requested_action_precondition_revision")
            == Some(&Json::from(install.precondition_revision))
        && p.get_str("policy_snapshot_digest") == install.payload.get_str("policy_snapshot_digest")
        && (!with_expiry || p.get_str("install_expires_at") == install.expires_at.as_deref())
}

/// True when a receipt's identity names exactly `action` (kind, content, precondition, scope).
fn receipt_names_exactly(event: &EngineEvent, action: &HostAction) -> bool {
    let p = &event.payload;
    p.get_str("action_kind") == Some(action.kind.as_str())
        && p.get_str("action_content_digest") == Some(action.content_digest().as_str())
        && p.get("action_precondition_revision") == Some(&Json::from(action.precondition_revision))
        && event.scope == action.scope
}

fn derive_authorities(
    state: Option<&EngineState>,
    event: &EngineEvent,
    supplied: Option<&SettlementGuard>,
) -> Result<Authorities, ProcessError> {
    let mut a = Authorities::default();
    let payload = &event.payload;
    let consent = |with_expiry: bool| {
        state.and_then(|s| {
            s.pending_consents
                .iter()
                .find(|c| consent_matches(c, event, with_expiry))
        })
    };
    match event.kind {
        EventKind::UserDecision if payload.get("decision_basis").is_some() => {
            if payload.get_str("decision_basis") == Some("preapproved-policy")
                && payload.get_str("decision") != Some("granted")
            {
                return authority("preapproved install policy decisions may only grant");
            }
            let Some(c) = consent(false) else {
                return authority("install decision does not match an exact pending consent");
            };
            a.decision_expires = Some(expiry_of(
                &c.install_action,
                "pending install decision has no valid expiry",
            )?);
        }
        EventKind::InstallConsentExpired => {
            let Some(c) = consent(true) else {
                return authority("install consent expiry does not match an exact pending consent");
            };
            a.consent_expires = Some(expiry_of(
                &c.install_action,
                "pending install consent has no valid expiry",
            )?);
        }
        _ => {}
    }
    let receipt_target = match (event.kind.is_receipt(), payload.get_str("action_id"), state) {
        (true, Some(id), Some(s)) => s.pending_effect_by_action(id),
        _ => None,
    };
    let mode = match event.kind {
        EventKind::ActionApplied => GuardMode::Applied,
        EventKind::ActionFailed => GuardMode::Failed,
        _ => GuardMode::Expired,
    };
    let supplied_install = supplied.filter(|g| g.effect == GuardEffect::Install);
    let supplied_activation = supplied.filter(|g| g.effect == GuardEffect::Activation);
    // Install receipts.
    let install =
        receipt_target.filter(|p| p.effect == EffectKind::Install && is_v3_install(&p.action));
    match (install, supplied_install) {
        (None, Some(_)) => {
            return authority("install execution outcome does not match a pending receipt");
        }
        (None, None) => {}
        (Some(p), supplied) if mode == GuardMode::Expired => {
            if supplied.is_some() {
                return authority("expired install actions cannot use execution outcomes");
            }
            if !receipt_names_exactly(event, &p.action) {
                return authority("install action expiry does not match exact pending authority");
            }
            a.install_expires = Some(expiry_of(
                &p.action,
                "pending install action has no valid expiry",
            )?);
            a.guard = Some(SettlementGuard {
                effect: GuardEffect::Install,
                action_id: p.action.action_id.clone(),
                action_content_digest: p.action.content_digest(),
                mode: GuardMode::Expired,
                execution_outcome_digest: None,
            });
        }
        (Some(p), None) => {
            return Err(ProcessError::OutcomeRequired {
                effect: GuardEffect::Install,
                action_id: p.action.action_id.clone(),
            });
        }
        (Some(p), Some(g)) => {
            // ActionApplied settles an applied outcome; ActionFailed a failed or an
            // indeterminate one (which settles as failed).
            if g.action_id != p.action.action_id
                || g.action_content_digest != p.action.content_digest()
                || g.mode.receipt_kind() != event.kind
                || g.execution_outcome_digest.is_none()
            {
                return authority("install receipt does not match its execution outcome");
            }
            a.guard = Some(g.clone());
        }
    }
    // Activation receipts (activate and rollback-activate).
    let activation = receipt_target.filter(|p| {
        matches!(
            p.effect,
            EffectKind::Activate | EffectKind::RollbackActivate
        ) && is_v3_activation(&p.action)
    });
    match (activation, supplied_activation) {
        (None, Some(_)) => {
            return authority("activation execution outcome does not match a pending receipt");
        }
        (None, None) => {}
        (Some(p), supplied) if mode == GuardMode::Expired => {
            if supplied.is_some() {
                return authority("expired activation actions cannot use execution outcomes");
            }
            if !receipt_names_exactly(event, &p.action) {
                return authority(
                    "activation action expiry does not match exact pending authority",
                );
            }
            a.activation_expires = Some(expiry_of(
                &p.action,
                "pending activation action has no valid expiry",
            )?);
            a.guard = Some(SettlementGuard {
                effect: GuardEffect::Activation,
                action_id: p.action.action_id.clone(),
                action_content_digest: p.action.content_digest(),
                mode: GuardMode::Expired,
                execution_outcome_digest: None,
            });
        }
        (Some(p), None) => {
            return Err(ProcessError::OutcomeRequired {
                effect: GuardEffect::Activation,
                action_id: p.action.action_id.clone(),
            });
        }
        (Some(p), Some(g)) => {
            if g.action_id != p.action.action_id
                || g.action_content_digest != p.action.content_digest()
                || g.mode != GuardMode::Applied
                || mode != GuardMode::Applied
                || g.execution_outcome_digest.is_none()
            {
                return authority("activation receipt does not match its execution outcome");
            }
            a.guard = Some(g.clone());
        }
    }
    Ok(a)
}

// ------------------------------------------------------------------------------------------------
// Audit
// ------------------------------------------------------------------------------------------------

/// The last replayed head of an audit.
struct ReplayedHead {
    revision: u64,
    digest: Digest,
    position: u64,
    /// Position of revision 1.
    first_position: u64,
    state: EngineState,
}

/// Replays a scope's engine stream from revision 1 with the engine's reducer, without using any
/// projection (so no head comparison): usable on a journal the engine projections refuse to
/// attach to, which is where a tampered or foreign record shows up.
pub fn replay_audit_journal(
    journal: &Journal,
    scope: &ScopeRef,
) -> Result<AuditReport, AuditError> {
    let stream = engine_stream(scope).map_err(|e| AuditError::Scope(e.to_string()))?;
    Ok(audit_stream(journal, &stream, ctx_model::reduce)?)
}

/// [`replay_audit_journal`] for an engine stream named by its id rather than its scope: what an
/// offline audit uses, since it finds engine streams by listing the journal's streams and a stream
/// id does not give its scope back. A stream that is not an engine stream diverges at revision 1
/// (`record-binding`).
pub fn replay_audit_stream(
    journal: &Journal,
    stream: &StreamId,
) -> Result<AuditReport, AuditError> {
    Ok(audit_stream(journal, stream, ctx_model::reduce)?)
}

/// [`replay_audit_journal`] with a given reducer.
pub(crate) fn audit_stream(
    journal: &Journal,
    stream: &StreamId,
    reduce: ReduceFn,
) -> Result<AuditReport, StoreError> {
    audit_stream_inner(journal, stream, reduce).map(|(report, _)| report)
}

fn audit_stream_inner(
    journal: &Journal,
    stream: &StreamId,
    reduce: ReduceFn,
) -> Result<(AuditReport, Option<ReplayedHead>), StoreError> {
    let mut last: Option<ReplayedHead> = None;
    let mut divergence = None;
    let mut checked = 0;
    journal.visit_stream(stream, 1, usize::MAX, |view| {
        match audit_one(view, last.as_ref().map(|h| &h.state), reduce) {
            Ok(state) => {
                checked = view.revision;
                let first_position = last.as_ref().map_or(view.position, |h| h.first_position);
                last = Some(ReplayedHead {
                    revision: view.revision,
                    digest: view.digest,
                    position: view.position,
                    first_position,
                    state,
                });
                ControlFlow::Continue(())
            }
            Err((component, detail)) => {
                divergence = Some(Divergence {
                    stream: *stream,
                    revision: view.revision,
                    component,
                    detail,
                });
                ControlFlow::Break(())
            }
        }
    })?;
    let report = AuditReport {
        stream: *stream,
        revisions_checked: checked,
        divergence,
    };
    Ok((report, last))
}

fn audit_one(
    view: &RecordView<'_>,
    prev: Option<&EngineState>,
    reduce: ReduceFn,
) -> Result<EngineState, (AuditComponent, String)> {
    let decoded = decode_view(view).map_err(|e| (AuditComponent::RecordBinding, e.to_string()))?;
    let (state, transition) =
        reduce(prev, &decoded.replay).map_err(|e| (AuditComponent::Reducer, e.to_string()))?;
    if state.revision != view.revision
        || transition.event_id != view.event_id
        || transition.to_revision != view.revision
    {
        return Err((
            AuditComponent::ReducerOutput,
            "the reducer's output names another revision or event".into(),
        ));
    }
    if transition.view().to_cj() != decoded.record.transition_json {
        return Err((
            AuditComponent::Transition,
            "the recomputed transition differs from the stored transition".into(),
        ));
    }
    let digest = state.digest();
    if digest != decoded.record.result_state_digest {
        return Err((
            AuditComponent::State,
            format!(
                "the recomputed state digest {digest} differs from the stored {}",
                decoded.record.result_state_digest
            ),
        ));
    }
    Ok(state)
}
