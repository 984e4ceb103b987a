//! The `replay_determinism` target: an arbitrary program of engine events, mostly valid ones from
//! the testkit's builders (session start, planning with a decision surrogate, desired sets,
//! granted and denied decisions, receipts, claims / outcomes / guarded receipts of installs and
//! activations, observations, turns, session end) and some with one deliberate fault (wrong
//! expected revision, unknown consent, altered payload field, reused event id, another kind, a
//! missing / extra / corrupt decision, a shifted time, another scope), run through a real
//! [`Engine`] on a journal in a temporary directory. Checked as it goes:
//!
//! - a refusal is a typed [`ProcessError`] (never `Divergence`, `Store` or `Unsupported`) and
//!   changes nothing: the journal's global head, the engine stream's head, the snapshot and every
//!   projection digest are unchanged; an event that fails [`preflight`] is refused with exactly
//!   that message; a reused event id with other content is `EventIdCollision`;
//! - a commit is exactly what the reducer computes: an independently assembled replay input
//!   equals the stored one, `reduce` over the previous state gives the same result twice, and
//!   that result is the committed transition and the new snapshot state;
//! - the same committed event sent again returns the identical stored transition and changes
//!   nothing;
//! - a reopen finds every projection fresh and changes nothing;
//!
//! and after a reopen and at the end `replay_audit` is clean over every revision; at the end
//! every engine projection's `check` is equal, the journal verifies, `state_at` replays to the
//! state the harness reduced, and a fresh journal open plus a rebuild of every projection gives
//! the same digests and snapshot.
//!
//! Iterations are bounded: at most [`MAX_STEPS`] steps, one directory per process (under
//! `/dev/shm` when it exists, else the temp dir; `CTX_FUZZ_TMPDIR` overrides) emptied before and
//! after each run.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arbitrary::Arbitrary;
use ctx_journal::{Digest, Journal, OpenOptions};
use ctx_model::testkit::{Session, decision, digest, ops, ops::event_for};
use ctx_model::{
    EffectKind, EngineEvent, EngineState, EventKind, HostAction, Json, ReplayInput, ScopeRef,
    SessionStatus, Surrogate, Transition, UtcMicros, consent_id, preflight, reduce,
};
use ctx_projections::AttachReport;
use ctx_projections::engine::{
    ActivationGuard, AuthorizeError, Engine, EngineOptions, InstallGuard, InstallOutcome,
    ManualClock, ObservationNormalizer, OutcomeError, ProcessError, decode_view, engine_stream,
};
use ctx_projections::testkit::lifecycle::{OpaqueNormalizer, binding};

/// Most steps run per program; the rest of a longer program is ignored.
pub const MAX_STEPS: usize = 40;
/// The normalizer version recorded in every replay input.
const NORMALIZER_VERSION: &str = "ctx-normalizer-structured-v1";
/// The session every step belongs to.
const SESSION: &str = "fz";

#[derive(Arbitrary, Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The host level of the opening `SessionStarted`, modulo 8: 0..=4 managing, 5 activating,
    /// 6 observing, 7 query-only.
    pub level: u8,
    pub steps: Vec<Step>,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A valid event from the testkit's builders (skipped when it means nothing at the head).
    Event(Ev),
    /// An event with one deliberate fault (a `TurnStarting` when the event means nothing).
    Invalid(Ev, Fault),
    /// Claims, observes and settles pending install or activation `pick`: `how % 4` goes as far
    /// as the claim (0), the outcome (1) or the guarded receipt (2, 3); `(how >> 2) % 4` is the
    /// install outcome (0 failed, 1 indeterminate, else applied).
    Settle { pick: u8, how: u8 },
    /// Sends committed event `nth & 0x7f` again; with the high bit, a planning event carries
    /// another decision (the stored transition must still come back).
    Resubmit(u8),
    /// The session clock and the trusted clock move `n % 96` minutes forward.
    Advance(u8),
    /// Drops the engine and its journal and opens both again.
    Reopen,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev {
    /// A plan over the fixture catalog rows the mask selects.
    Plan(u8),
    /// A desired set by owner `n % 2` over the plan rows the mask selects.
    Desired(u8, u8),
    /// A decision on the pending consent: granted unless `n & 3 == 0`, on the preapproved
    /// policy basis when `n & 0xC0 == 0xC0`, else interactive.
    Decide(u8),
    /// An unguarded receipt for pending effect `n`: `how % 3` 0 applied, 1 failed, 2 expired.
    Receipt(u8, u8),
    /// `n % 8`: 0..=3 `TurnStarting`, 4..=6 `TurnEnded`, 7 `SessionEnded`.
    Turn(u8),
    /// A provider submission naming plan row `n`.
    Submission(u8),
    /// A tool call on plan row `n`.
    ToolCall(u8, bool),
    /// An observation: `kind % 3` workspace, development (planning, over the rows `mask`
    /// selects) or validation.
    Observed(u8, u8),
    /// Retry the failed deactivations of an ended session.
    RetryCleanup,
    /// `InstallConsentExpired` for the pending consent, at its expiry (the clocks move there).
    ConsentExpired,
    /// Another `SessionStarted` (last: a run of zero bytes decodes to the first variant).
    Start,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `n % 4`: expected revision head + 1, head + 2 + (n >> 2) % 8, head - 1, 0.
    Revision(u8),
    /// A decision naming a consent id nobody issued (replaces the event).
    UnknownConsent,
    /// `n % 4`: an unknown key, a key removed, a value replaced by a digest, a value altered
    /// (recursively into nested values); the key by `n >> 2`.
    Payload(u8),
    /// The id of committed event `n` (with this event's other content).
    DuplicateId(u8),
    /// Another event kind, `EventKind::ALL[n % 16]`, with the same payload.
    Kind(u8),
    /// `n % 4`: the decision dropped or added, a wrong value digest, the rows out of canonical
    /// order, a row altered.
    Decision(u8),
    /// `occurred_at` shifted by `(n as i8) * 37` seconds (an hour back for 0).
    Time(u8),
    /// Another exposure of the same stream (false) or another session's stream (true).
    Scope(bool),
}

/// Runs one program against a fresh journal and panics on any broken invariant.
pub fn run(program: &Program) {
    // One directory per process: runs on several threads (unit tests) take turns.
    static TURN: Mutex<()> = Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = work_dir();
    crate::remove_dir(dir);
    let mut h = Harness::new(dir.clone(), program.level);
    for step in program.steps.iter().take(MAX_STEPS) {
        h.step(*step);
    }
    h.finish();
    drop(h);
    crate::remove_dir(dir);
}

/// This process's journal directory, chosen once; stale directories of dead fuzz processes are
/// removed the first time.
fn work_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::process_dir("ctx-fuzz-replay-determinism-"))
}

/// The fixture catalog, built once (claims need the row a plan selected).
fn catalog() -> &'static [Json] {
    static CATALOG: OnceLock<Vec<Json>> = OnceLock::new();
    CATALOG.get_or_init(ops::catalog)
}

fn open_engine(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    // A fixed key keeps runs reproducible and skips the OS random source.
    let options = OpenOptions::new().key_source(|| Ok([7u8; 32]));
    let journal = match Journal::open(dir, &options) {
        Ok(j) => Arc::new(j),
        Err(e) => panic!("open {}: {e}", dir.display()),
    };
    let options = EngineOptions::new(clock.clone())
        .normalizer(Arc::new(OpaqueNormalizer), NORMALIZER_VERSION);
    match Engine::open(journal, options) {
        Ok(engine) => engine,
        Err(e) => panic!("engine open: {e}"),
    }
}

/// Prints what each submission did when `CTX_FUZZ_TRACE` is set (for reading a finding).
fn trace(line: impl FnOnce() -> String) {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("CTX_FUZZ_TRACE").is_some()) {
        eprintln!("{}", line());
    }
}

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e:?}"),
    }
}

/// Gives an `IntentObserved` the opaque observation reference the engine requires (the
/// testkit's `intent` has the sanitized `{}` payload).
fn with_observation(event: &mut EngineEvent) {
    if event.kind == EventKind::IntentObserved {
        event.payload = observation(&event.event_id);
    }
}

fn observation(event_id: &str) -> Json {
    Json::object([(
        "observation_ref",
        Json::object([
            ("content_digest", Json::str(digest("observation"))),
            ("opaque_id", Json::str(format!("work-{event_id}"))),
            ("provider_id", Json::str("host-1")),
        ]),
    )])
}

/// The rows of the fixture catalog a mask selects (at most five, as a plan holds).
fn rows(mask: u8) -> Vec<Json> {
    catalog()
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, r)| r.clone())
        .take(5)
        .collect()
}

/// Alters one value in place; `seed` picks the nested value and how.
fn tweak(v: &mut Json, seed: u8, depth: u8) {
    match v {
        Json::Null => *v = Json::str("x"),
        Json::Bool(b) => *b = !*b,
        Json::Int(i) => *i = i.wrapping_add(1),
        Json::Float(_) => *v = Json::Int(0),
        Json::Str(s) => match s.pop() {
            // A digest stays a well-formed digest, naming something else.
            Some(c) if c.is_ascii_hexdigit() => s.push(if c == '0' { '1' } else { '0' }),
            Some(c) => {
                s.push(c);
                s.push('x');
            }
            None => s.push('x'),
        },
        Json::Arr(a) => {
            if a.is_empty() || depth >= 4 {
                a.push(Json::Null);
            } else {
                let n = a.len();
                tweak(
                    &mut a[usize::from(seed) % n],
                    seed.rotate_right(3),
                    depth + 1,
                );
            }
        }
        Json::Obj(m) => {
            if m.is_empty() || depth >= 4 {
                m.insert("unexpected".into(), Json::Int(1));
            } else {
                let n = m.len();
                if let Some((_, child)) = m.iter_mut().nth(usize::from(seed) % n) {
                    tweak(child, seed.rotate_right(3), depth + 1);
                }
            }
        }
    }
}

/// What the harness requires of one submission.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Any,
    /// The event must commit or come back as a stored transition.
    Ok,
    Revision {
        expected: u64,
        actual: u64,
    },
    Collision,
    Authority,
}

/// How a submission reaches the engine.
enum Submit<'a> {
    Plain,
    Install(&'a InstallGuard),
    Activation(&'a ActivationGuard),
}

/// A journal stream head: revision, global position, record digest.
type Head = (u64, u64, Digest);

/// What a refusal must leave as it was.
#[derive(Debug, PartialEq)]
struct Before {
    position: u64,
    stream: Option<Head>,
    /// The submitted event's scope and the head of its stream, when it is another stream.
    other: Option<(ScopeRef, Option<Head>)>,
    revision: u64,
    head: Option<Digest>,
    state: Option<EngineState>,
    digests: Vec<[u8; 32]>,
}

#[derive(Debug, Clone)]
struct Committed {
    event: EngineEvent,
    decision: Option<Surrogate>,
    content_digest: String,
    transition: Transition,
}

struct Harness {
    dir: PathBuf,
    clock: Arc<ManualClock>,
    engine: Option<Engine>,
    s: Session,
    level: &'static str,
    /// The state the harness's own reductions arrived at (the snapshot must agree).
    state: Option<EngineState>,
    /// States by revision (index 0 is revision 1).
    history: Vec<EngineState>,
    committed: Vec<Committed>,
    by_id: HashMap<String, usize>,
    /// Every install action a consent ever named.
    installs: Vec<HostAction>,
    names: Vec<&'static str>,
}

impl Harness {
    fn new(dir: PathBuf, level: u8) -> Harness {
        let s = Session::new(SESSION);
        let clock = Arc::new(ManualClock::new(s.now));
        let engine = open_engine(&dir, &clock);
        let names = engine
            .projections()
            .attached()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        let level = match level % 8 {
            0..=4 => "managing",
            5 => "activating",
            6 => "observing",
            _ => "query-only",
        };
        let mut h = Harness {
            dir,
            clock,
            engine: Some(engine),
            s,
            level,
            state: None,
            history: Vec::new(),
            committed: Vec::new(),
            by_id: HashMap::new(),
            installs: Vec::new(),
            names,
        };
        let start = h.s.started(level);
        h.submit(&start, None, Submit::Plain, Expect::Ok);
        h
    }

    fn engine(&self) -> &Engine {
        match &self.engine {
            Some(e) => e,
            None => panic!("the engine is open between steps"),
        }
    }

    fn head(&self) -> u64 {
        self.state.as_ref().map_or(0, |s| s.revision)
    }

    fn sync_clock(&self) {
        self.clock.set(self.s.now);
    }

    // ----- steps -----

    fn step(&mut self, step: Step) {
        trace(|| format!("step {step:?}"));
        match step {
            Step::Event(ev) => {
                if let Some((event, decision)) = self.build(ev) {
                    self.submit(&event, decision, Submit::Plain, Expect::Any);
                }
            }
            Step::Invalid(ev, fault) => self.invalid(ev, fault),
            Step::Settle { pick, how } => self.settle(pick, how),
            Step::Resubmit(nth) => {
                let c = self.committed[usize::from(nth & 0x7f) % self.committed.len()].clone();
                let decision = match c.decision {
                    Some(_) if nth & 0x80 != 0 => Some(decision(Vec::new())),
                    d => d,
                };
                self.submit(&c.event, decision, Submit::Plain, Expect::Ok);
            }
            Step::Advance(n) => self.s.advance(i64::from(n % 96) * 60 * 1_000_000),
            Step::Reopen => self.reopen(),
        }
    }

    /// The event `ev` stands for at the head, with its decision; `None` when it means nothing.
    fn build(&mut self, ev: Ev) -> Option<(EngineEvent, Option<Surrogate>)> {
        let state = self.state.clone()?;
        let op = match ev {
            Ev::Start => {
                let level = self.level;
                return Some((self.s.started(level), None));
            }
            Ev::Plan(mask) => ops::Op::Plan(mask),
            Ev::Desired(owner, mask) => ops::Op::Desired(owner, mask),
            Ev::Decide(n) => ops::Op::Decide {
                granted: n & 3 != 0,
                preapproved: n & 0xC0 == 0xC0,
            },
            Ev::Receipt(n, how) => ops::Op::Receipt(n, how % 3),
            Ev::Turn(n) => match n % 8 {
                0..=3 => ops::Op::TurnStarting,
                4..=6 => ops::Op::TurnEnded,
                _ => ops::Op::SessionEnded,
            },
            Ev::Submission(n) => ops::Op::Submission(n),
            Ev::ToolCall(n, ok) => ops::Op::ToolCall(n, ok),
            Ev::Observed(kind, mask) => {
                if state.session_status != SessionStatus::Active {
                    return None;
                }
                let kind = [
                    EventKind::WorkspaceObserved,
                    EventKind::DevelopmentObserved,
                    EventKind::ValidationObserved,
                ][usize::from(kind % 3)];
                let planning = kind.is_planning();
                if planning {
                    self.s.plan_id = format!("ctx-query-host-1-{SESSION}-{}", state.revision);
                }
                let mut e = self.s.event(kind, Json::object::<&str>([]));
                e.payload = observation(&e.event_id);
                return Some((e, planning.then(|| decision(rows(mask)))));
            }
            Ev::RetryCleanup => ops::Op::RetryCleanup,
            Ev::ConsentExpired => {
                let install = state.pending_consents.first()?.clone();
                let action = &install.install_action;
                let expires = action.expires_at.clone()?;
                if let Ok(at) = UtcMicros::parse(&expires)
                    && at > self.s.now
                {
                    self.s.now = at;
                }
                let payload = Json::object([
                    ("consent_id", Json::str(&install.consent_id)),
                    ("install_expires_at", Json::str(&expires)),
                    (
                        "policy_snapshot_digest",
                        action
                            .payload
                            .get("policy_snapshot_digest")
                            .cloned()
                            .unwrap_or(Json::Null),
                    ),
                    (
                        "requested_action_content_digest",
                        Json::str(action.content_digest()),
                    ),
                    ("requested_action_id", Json::str(&action.action_id)),
                    ("requested_action_kind", Json::str(action.kind.as_str())),
                    (
                        "requested_action_precondition_revision",
                        Json::from(action.precondition_revision),
                    ),
                ]);
                return Some((
                    self.s.event(EventKind::InstallConsentExpired, payload),
                    None,
                ));
            }
        };
        let (mut event, decision) = event_for(&mut self.s, &state, op)?;
        with_observation(&mut event);
        Some((event, decision))
    }

    fn invalid(&mut self, ev: Ev, fault: Fault) {
        let head = self.head();
        if fault == Fault::UnknownConsent {
            let state = self.state.clone();
            let install = state
                .as_ref()
                .and_then(|s| s.pending_consents.first())
                .map(|c| c.install_action.clone())
                .or_else(|| self.installs.last().cloned());
            let Some(mut install) = install else {
                return;
            };
            // A decision must target the next revision; an old install is moved there (its
            // consent is unknown either way).
            install.precondition_revision = head + 1;
            let mut event = self.s.decide(&install, true, "interactive");
            if let Json::Obj(m) = &mut event.payload {
                m.insert(
                    "consent_id".into(),
                    Json::str(consent_id(&digest("unknown-consent"), "skill:nobody")),
                );
            }
            self.submit(&event, None, Submit::Plain, Expect::Authority);
            return;
        }
        let (mut event, mut decision) = match self.build(ev) {
            Some(built) => built,
            None => (self.s.empty(EventKind::TurnStarting), None),
        };
        let expect = match fault {
            Fault::UnknownConsent => unreachable!("handled above"),
            Fault::Revision(n) => {
                event.expected_revision = match n % 4 {
                    0 => head + 1,
                    1 => head + 2 + u64::from((n >> 2) % 8),
                    2 => head.saturating_sub(1),
                    _ => 0,
                };
                Expect::Revision {
                    expected: event.expected_revision,
                    actual: head,
                }
            }
            Fault::Payload(n) => {
                match &mut event.payload {
                    Json::Obj(m) if !m.is_empty() && n % 4 != 0 => {
                        let key = m.keys().nth(usize::from(n >> 2) % m.len()).cloned();
                        if let Some(key) = key {
                            match n % 4 {
                                1 => {
                                    m.remove(&key);
                                }
                                2 => {
                                    m.insert(key, Json::str(digest("altered")));
                                }
                                _ => {
                                    if let Some(v) = m.get_mut(&key) {
                                        tweak(v, n >> 2, 0);
                                    }
                                }
                            }
                        }
                    }
                    Json::Obj(m) => {
                        m.insert("unexpected".into(), Json::Int(i64::from(n)));
                    }
                    other => *other = Json::object([("unexpected", Json::Int(1))]),
                }
                Expect::Any
            }
            Fault::DuplicateId(n) => {
                let c = &self.committed[usize::from(n) % self.committed.len()];
                event.event_id = c.event.event_id.clone();
                Expect::Collision
            }
            Fault::Kind(n) => {
                let all = EventKind::ALL;
                let mut kind = all[usize::from(n) % all.len()];
                if kind == event.kind {
                    kind = all[(usize::from(n) + 1) % all.len()];
                }
                event.kind = kind;
                Expect::Any
            }
            Fault::Decision(n) => {
                decision = match (n % 4, decision) {
                    (0, Some(_)) => None,
                    (0, None) => Some(self::decision(rows(n >> 2))),
                    (1, d) => {
                        let mut d = d.unwrap_or_else(|| self::decision(rows(n >> 2)));
                        d.value_digest = digest("not-the-value");
                        Some(d)
                    }
                    (m, d) => {
                        let d = d.unwrap_or_else(|| self::decision(rows(n >> 2)));
                        let mut value = d.value.clone();
                        if let Json::Obj(fields) = &mut value
                            && let Some(Json::Arr(caps)) = fields.get_mut("capabilities")
                        {
                            if m == 2 && caps.len() > 1 {
                                caps.reverse();
                            } else if let Some(row) = caps.first_mut() {
                                tweak(row, n >> 2, 1);
                            } else {
                                caps.push(Json::Null);
                            }
                        }
                        Some(Surrogate::new(&d.schema_id, d.schema_version, value))
                    }
                };
                Expect::Any
            }
            Fault::Time(n) => {
                let seconds = match i64::from(n as i8) {
                    0 => -3_600,
                    k => k * 37,
                };
                let at = self.s.now.checked_add(seconds * 1_000_000);
                if let Some(at) = at {
                    event.occurred_at = at.render();
                }
                Expect::Any
            }
            Fault::Scope(false) => {
                event.scope.exposure_id = "exposure-2".into();
                Expect::Any
            }
            Fault::Scope(true) => {
                event.scope.session_id = "fz-other".into();
                Expect::Revision {
                    expected: event.expected_revision,
                    actual: 0,
                }
            }
        };
        self.submit(&event, decision, Submit::Plain, expect);
    }

    fn settle(&mut self, pick: u8, how: u8) {
        let Some(state) = self.state.clone() else {
            return;
        };
        let pending: Vec<_> = state
            .pending_effects
            .iter()
            .filter(|p| matches!(p.effect, EffectKind::Install | EffectKind::Activate))
            .collect();
        if pending.is_empty() {
            return;
        }
        let p = pending[usize::from(pick) % pending.len()];
        let action = p.action.clone();
        let stage = how % 4;
        self.sync_clock();
        if p.effect == EffectKind::Install {
            let Ok(status) = self.engine().install_execution_status(&action) else {
                return;
            };
            if !status.claimed {
                let id = action.entity_id.as_deref().unwrap_or_default();
                let Some(row) = catalog()
                    .iter()
                    .find(|r| r.get_str("capability_id") == Some(id))
                else {
                    return;
                };
                let descriptor = row
                    .get("authority")
                    .and_then(|a| a.get("descriptor"))
                    .cloned()
                    .unwrap_or(Json::Null);
                let before = self.before(None);
                let r = self.engine().authorize_install(
                    &action,
                    row,
                    &descriptor,
                    &self.s.catalog,
                    &self.s.policy,
                    &binding(),
                );
                if !self.claimed(r, before, "install claim") {
                    return;
                }
            }
            if stage == 0 {
                return;
            }
            let outcome = match (how >> 2) % 4 {
                0 => InstallOutcome::Failed,
                1 => InstallOutcome::Indeterminate,
                _ => InstallOutcome::Applied,
            };
            let material = action
                .payload
                .get("result_material")
                .and_then(|m| m.get_str("identity_digest"))
                .map(str::to_owned);
            let observed = match outcome {
                InstallOutcome::Applied => material.as_deref(),
                _ => None,
            };
            let before = self.before(None);
            let r = self.engine().record_install_outcome(
                &action,
                &binding(),
                outcome,
                observed,
                &digest("install-seen"),
            );
            let Some(guard) = self.outcome(r, before, "install outcome") else {
                return;
            };
            if stage == 1 {
                return;
            }
            let event = match guard.outcome() {
                InstallOutcome::Applied => self.s.applied(&action),
                _ => self.s.failed(&action),
            };
            self.submit(&event, None, Submit::Install(&guard), Expect::Any);
        } else {
            let Ok(status) = self.engine().activation_execution_status(&action) else {
                return;
            };
            if !status.claimed {
                let before = self.before(None);
                let host = self.s.host_descriptor.clone();
                let r = self
                    .engine()
                    .authorize_activation(&action, &binding(), &host);
                if !self.claimed(r, before, "activation claim") {
                    return;
                }
            }
            if stage == 0 {
                return;
            }
            let material = action
                .payload
                .get("material_identity")
                .and_then(|m| m.get_str("identity_digest"))
                .unwrap_or_default()
                .to_owned();
            let before = self.before(None);
            let r = self.engine().record_activation_outcome(
                &action,
                &binding(),
                &material,
                &digest("activation-seen"),
            );
            let Some(guard) = self.outcome(r, before, "activation outcome") else {
                return;
            };
            if stage == 1 {
                return;
            }
            let status = ok(
                self.engine().activation_execution_status(&action),
                "activation status",
            );
            // The receipt carries the outcome's observation time.
            if let Some(at) = status
                .observed_at
                .as_deref()
                .and_then(|t| UtcMicros::parse(t).ok())
            {
                self.s.now = at;
            }
            let event = self.s.applied(&action);
            self.submit(&event, None, Submit::Activation(&guard), Expect::Any);
        }
    }

    /// Checks a claim's result: a refusal is typed and changes nothing, a claim leaves the
    /// engine stream alone. True when the claim exists now.
    fn claimed(&mut self, r: Result<(), AuthorizeError>, before: Before, what: &str) -> bool {
        trace(|| format!("  {what}: {r:?}"));
        match r {
            Ok(()) => {
                let after = self.before(None);
                assert!(
                    after.position > before.position,
                    "{what} wrote no claim record"
                );
                self.same_engine_stream(&before, &after, what);
                true
            }
            Err(e) => {
                assert!(
                    !matches!(
                        e,
                        AuthorizeError::Store(_) | AuthorizeError::AuthorityCorrupt(_)
                    ),
                    "{what} failed with an untyped or impossible error: {e:?}"
                );
                self.unchanged(&before, &format!("refused {what} ({e:?})"));
                false
            }
        }
    }

    fn outcome<G>(&mut self, r: Result<G, OutcomeError>, before: Before, what: &str) -> Option<G> {
        trace(|| format!("  {what}: {:?}", r.as_ref().err()));
        match r {
            Ok(guard) => {
                let after = self.before(None);
                self.same_engine_stream(&before, &after, what);
                Some(guard)
            }
            Err(e) => {
                assert!(
                    !matches!(
                        e,
                        OutcomeError::Store(_)
                            | OutcomeError::AuthorityCorrupt(_)
                            | OutcomeError::Receipt(_)
                    ),
                    "{what} failed with an untyped or impossible error: {e:?}"
                );
                self.unchanged(&before, &format!("refused {what} ({e:?})"));
                None
            }
        }
    }

    fn same_engine_stream(&self, before: &Before, after: &Before, what: &str) {
        assert_eq!(
            (before.stream, before.revision, before.head, &before.state),
            (after.stream, after.revision, after.head, &after.state),
            "{what} moved the engine stream"
        );
    }

    fn reopen(&mut self) {
        let before = self.before(None);
        self.engine = None;
        let engine = open_engine(&self.dir, &self.clock);
        for (name, report) in engine.projections().attached() {
            assert_eq!(
                *report,
                AttachReport::Fresh,
                "{name} must be fresh after a reopen"
            );
        }
        self.engine = Some(engine);
        self.unchanged(&before, "reopen");
        self.audit("after a reopen");
    }

    // ----- invariants -----

    fn stream_head(&self, scope: &ScopeRef) -> Option<Head> {
        let stream = ok(engine_stream(scope), "engine stream");
        ok(self.engine().journal().stream_head(&stream), "stream head")
            .map(|h| (h.revision, h.position, h.digest))
    }

    fn before(&self, event: Option<&EngineEvent>) -> Before {
        let engine = self.engine();
        let snapshot = ok(engine.snapshot(&self.s.scope), "snapshot");
        let mine = ok(engine_stream(&self.s.scope), "engine stream");
        let other = event
            .filter(|e| engine_stream(&e.scope).is_ok_and(|theirs| theirs != mine))
            .map(|e| (e.scope.clone(), self.stream_head(&e.scope)));
        Before {
            position: ok(engine.journal().head_position(), "head position"),
            stream: self.stream_head(&self.s.scope),
            other,
            revision: snapshot.revision(),
            head: snapshot.head_record_digest(),
            state: snapshot.into_state(),
            digests: self
                .names
                .iter()
                .map(|n| ok(engine.projections().digest(n), "projection digest"))
                .collect(),
        }
    }

    fn unchanged(&self, before: &Before, what: &str) {
        let after = match &before.other {
            Some((scope, _)) => {
                let mut after = self.before(None);
                after.other = Some((scope.clone(), self.stream_head(scope)));
                after
            }
            None => self.before(None),
        };
        assert_eq!(*before, after, "{what} changed something");
        assert_eq!(
            after.state, self.state,
            "the snapshot is not the state the harness reduced"
        );
    }

    /// The replay input the engine must have assembled for `event`, built here independently.
    fn assemble(&self, event: &EngineEvent, decision: Option<Surrogate>) -> Option<ReplayInput> {
        let pre = preflight(event).ok()?;
        let observation = pre.observation_ref.as_ref().map(|r| {
            ok(
                OpaqueNormalizer.normalize(r),
                "the fixture normalizer resolves every reference",
            )
        });
        ReplayInput::assemble(pre, observation, decision, NORMALIZER_VERSION).ok()
    }

    fn submit(
        &mut self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
        how: Submit<'_>,
        expect: Expect,
    ) {
        self.sync_clock();
        let before = self.before(Some(event));
        let result = match how {
            Submit::Plain => self.engine().process(event, decision.clone()),
            Submit::Install(g) => self.engine().process_install_receipt(event, g),
            Submit::Activation(g) => self.engine().process_activation_receipt(event, g),
        };
        let pre = preflight(event);
        trace(|| match &result {
            Ok(t) => format!(
                "{} {} @{} -> ok {}..{} actions {:?}",
                event.kind,
                event.event_id,
                event.expected_revision,
                t.from_revision,
                t.to_revision,
                t.actions
                    .iter()
                    .map(|a| a.kind.as_str())
                    .collect::<Vec<_>>()
            ),
            Err(e) => format!(
                "{} {} @{} -> refused {e:?}",
                event.kind, event.event_id, event.expected_revision
            ),
        });
        match result {
            Ok(t) => {
                let content = match &pre {
                    Ok(p) => p.source_event_content_digest.clone(),
                    Err(e) => panic!("{} committed but fails preflight: {e:?}", event.kind),
                };
                assert!(
                    !matches!(
                        expect,
                        Expect::Revision { .. } | Expect::Collision | Expect::Authority
                    ),
                    "{} must be refused ({expect:?}), committed {t:?}",
                    event.kind
                );
                if let Some(&i) = self.by_id.get(&event.event_id) {
                    let c = &self.committed[i];
                    assert_eq!(
                        c.content_digest, content,
                        "event id {} with other content was not refused",
                        event.event_id
                    );
                    assert_eq!(
                        t, c.transition,
                        "a resubmitted event must return its stored transition"
                    );
                    self.unchanged(&before, "a resubmitted event");
                } else {
                    self.commit(event, decision, content, t, before);
                }
            }
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        ProcessError::Invalid(_)
                            | ProcessError::EventIdCollision { .. }
                            | ProcessError::RevisionConflict { .. }
                            | ProcessError::Authority(_)
                            | ProcessError::Clock(_)
                            | ProcessError::OutcomeRequired { .. }
                            | ProcessError::Effect { .. }
                            | ProcessError::Reducer(_)
                    ),
                    "{} refused with an untyped or impossible error: {e:?}",
                    event.kind
                );
                self.unchanged(&before, &format!("a refused {} ({e:?})", event.kind));
                match (&pre, &expect) {
                    // Preflight comes first, before any read.
                    (Err(p), _) => assert!(
                        matches!(&e, ProcessError::Invalid(m) if m == p.message()),
                        "{} fails preflight ({p:?}) but was refused with {e:?}",
                        event.kind
                    ),
                    (Ok(_), Expect::Any) => {}
                    (Ok(_), Expect::Ok) => panic!(
                        "{} {} must commit or replay: {e:?}",
                        event.kind, event.event_id
                    ),
                    (Ok(_), Expect::Revision { expected, actual }) => assert!(
                        matches!(
                            e,
                            ProcessError::RevisionConflict { expected: x, actual: a }
                                if x == *expected && a == *actual
                        ),
                        "{} at a wrong revision refused with {e:?}, not {expect:?}",
                        event.kind
                    ),
                    (Ok(_), Expect::Collision) => assert!(
                        matches!(&e, ProcessError::EventIdCollision { event_id } if *event_id == event.event_id),
                        "a reused event id {} refused with {e:?}",
                        event.event_id
                    ),
                    (Ok(_), Expect::Authority) => assert!(
                        matches!(e, ProcessError::Authority(_)),
                        "a decision on an unknown consent refused with {e:?}"
                    ),
                }
                // A reducer refusal is the reducer's, deterministically.
                if let Some(input) = self.assemble(event, decision) {
                    let first = reduce(self.state.as_ref(), &input);
                    let second = reduce(self.state.as_ref(), &input);
                    assert_eq!(first, second, "reduction must be deterministic");
                    if let ProcessError::Reducer(r) = &e {
                        assert_eq!(
                            first.as_ref().err(),
                            Some(r),
                            "the engine's reducer refusal differs from the reducer's"
                        );
                    }
                } else {
                    assert!(
                        !matches!(e, ProcessError::Reducer(_)),
                        "the reducer refused an event whose replay input does not assemble: {e:?}"
                    );
                }
            }
        }
    }

    fn commit(
        &mut self,
        event: &EngineEvent,
        decision: Option<Surrogate>,
        content: String,
        t: Transition,
        before: Before,
    ) {
        let prev = self.state.clone();
        let revision = self.head() + 1;
        let after = self.before(None);
        assert_eq!(
            after.position,
            before.position + 1,
            "a commit writes exactly one record"
        );
        assert_eq!(after.revision, revision, "the snapshot moves one revision");
        assert_eq!((t.from_revision, t.to_revision), (revision - 1, revision));
        assert_eq!(t.event_id, event.event_id);
        let input = match self.assemble(event, decision.clone()) {
            Some(i) => i,
            None => panic!(
                "{} committed but its replay input does not assemble",
                event.kind
            ),
        };
        let first = reduce(prev.as_ref(), &input);
        let second = reduce(prev.as_ref(), &input);
        assert_eq!(first, second, "reduction must be deterministic");
        let (next, reduced) = match first {
            Ok(r) => r,
            Err(e) => panic!("{} committed but the reducer refuses it: {e:?}", event.kind),
        };
        assert_eq!(reduced, t, "the committed transition is the reduced one");
        assert_eq!(
            after.state.as_ref(),
            Some(&next),
            "the snapshot state is the reduced one"
        );
        // The stored record holds exactly this replay input and transition.
        let engine = self.engine();
        let stream = ok(engine_stream(&self.s.scope), "engine stream");
        let mut stored = None;
        ok(
            engine.journal().visit_stream(&stream, revision, 1, |view| {
                stored = Some(decode_view(view));
                ControlFlow::Break(())
            }),
            "visit the engine stream",
        );
        let stored = match stored {
            Some(Ok(d)) => d,
            other => panic!("the committed record does not decode: {other:?}"),
        };
        assert_eq!(stored.replay, input, "the stored replay input");
        assert_eq!(stored.transition, t, "the stored transition");
        assert_eq!(stored.record.result_state_digest, next.digest());
        let journaled = ok(engine.journaled_event(&self.s.scope, revision), "journaled")
            .unwrap_or_else(|| panic!("revision {revision} is not journaled"));
        assert_eq!(journaled.transition, t);
        assert_eq!(journaled.reducer_event, input.reducer_event);
        assert_eq!(journaled.source_event_content_digest, content);
        // The same event again is the stored transition, and changes nothing.
        let again = ok(
            engine.process(event, decision.clone()),
            "a committed event again",
        );
        assert_eq!(
            again, t,
            "a resubmitted event returns its stored transition"
        );
        self.unchanged_after(&after, "a resubmitted event");
        // Learn the result.
        for c in &next.pending_consents {
            if !self
                .installs
                .iter()
                .any(|a| a.action_id == c.install_action.action_id)
            {
                self.installs.push(c.install_action.clone());
            }
        }
        self.by_id
            .insert(event.event_id.clone(), self.committed.len());
        self.committed.push(Committed {
            event: event.clone(),
            decision,
            content_digest: content,
            transition: t,
        });
        self.s.revision = revision;
        self.history.push(next.clone());
        self.state = Some(next);
    }

    /// The replay audit of the session: clean, every revision checked. Run after a reopen and at
    /// the end, not after every commit: records are immutable and every commit is checked against
    /// an independent reduction already, so a per-commit audit (quadratic in the program length)
    /// would only repeat those checks at a third of the run time.
    fn audit(&self, when: &str) {
        let audit = ok(self.engine().replay_audit(&self.s.scope), "replay audit");
        assert!(
            audit.is_clean(),
            "replay audit {when}: {:?}",
            audit.divergence()
        );
        assert_eq!(
            audit.revisions_checked(),
            self.head(),
            "replay audit {when}"
        );
    }

    fn unchanged_after(&self, after: &Before, what: &str) {
        let now = self.before(None);
        assert_eq!(*after, now, "{what} changed something");
    }

    fn finish(&mut self) {
        self.audit("at the end");
        let engine = self.engine();
        let revision = self.head();
        for name in &self.names {
            let report = ok(engine.projections().check(name), "projection check");
            assert!(
                report.is_equal(),
                "{name}: the incremental tables differ from a rebuild: {report:?}"
            );
        }
        let verify = ok(engine.journal().verify(), "verify");
        assert!(verify.is_ok(), "journal verify: {verify:?}");
        // state_at replays to an earlier revision.
        let mid = revision.div_ceil(2);
        let at = ok(engine.state_at(&self.s.scope, mid), "state_at");
        assert_eq!(
            at.as_ref(),
            self.history.get(mid as usize - 1),
            "state_at {mid}"
        );
        // A fresh open rebuilds every projection to the same bytes.
        let before = self.before(None);
        self.engine = None;
        let engine = open_engine(&self.dir, &self.clock);
        for name in &self.names {
            ok(engine.projections().rebuild(name), "rebuild");
        }
        self.engine = Some(engine);
        self.unchanged(&before, "a fresh open and rebuild");
    }
}
// ------------------------------------------------------------------------------------------------
// Encoding: the bytes `arbitrary` decodes back into a program (for seeds and tests)
// ------------------------------------------------------------------------------------------------

/// The four bytes of a derived enum's variant choice: `arbitrary` takes a `u32` `x` and picks
/// variant `(x * count) >> 32`.
fn variant(out: &mut Vec<u8>, index: u64, count: u64) {
    let x = u32::try_from((index << 32).div_ceil(count)).unwrap_or(u32::MAX);
    out.extend_from_slice(&x.to_le_bytes());
}

impl Program {
    /// The bytes `Program::arbitrary_take_rest` (what libFuzzer's `fuzz_target!` calls) decodes
    /// back into this program: seeds for the corpus.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.level];
        for step in &self.steps {
            // A collection taking the rest of the input continues while a `bool` says so.
            out.push(1);
            step.encode(&mut out);
        }
        out.push(0);
        out
    }
}

impl Step {
    fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Step::Event(ev) => {
                variant(out, 0, 6);
                ev.encode(out);
            }
            Step::Invalid(ev, fault) => {
                variant(out, 1, 6);
                ev.encode(out);
                fault.encode(out);
            }
            Step::Settle { pick, how } => {
                variant(out, 2, 6);
                out.extend([pick, how]);
            }
            Step::Resubmit(n) => {
                variant(out, 3, 6);
                out.push(n);
            }
            Step::Advance(n) => {
                variant(out, 4, 6);
                out.push(n);
            }
            Step::Reopen => variant(out, 5, 6),
        }
    }
}

impl Ev {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 11;
        match *self {
            Ev::Plan(m) => {
                variant(out, 0, N);
                out.push(m);
            }
            Ev::Desired(o, m) => {
                variant(out, 1, N);
                out.extend([o, m]);
            }
            Ev::Decide(n) => {
                variant(out, 2, N);
                out.push(n);
            }
            Ev::Receipt(n, how) => {
                variant(out, 3, N);
                out.extend([n, how]);
            }
            Ev::Turn(n) => {
                variant(out, 4, N);
                out.push(n);
            }
            Ev::Submission(n) => {
                variant(out, 5, N);
                out.push(n);
            }
            Ev::ToolCall(n, ok) => {
                variant(out, 6, N);
                out.extend([n, u8::from(ok)]);
            }
            Ev::Observed(k, m) => {
                variant(out, 7, N);
                out.extend([k, m]);
            }
            Ev::RetryCleanup => variant(out, 8, N),
            Ev::ConsentExpired => variant(out, 9, N),
            Ev::Start => variant(out, 10, N),
        }
    }
}

impl Fault {
    fn encode(&self, out: &mut Vec<u8>) {
        const N: u64 = 8;
        match *self {
            Fault::Revision(n) => {
                variant(out, 0, N);
                out.push(n);
            }
            Fault::UnknownConsent => variant(out, 1, N),
            Fault::Payload(n) => {
                variant(out, 2, N);
                out.push(n);
            }
            Fault::DuplicateId(n) => {
                variant(out, 3, N);
                out.push(n);
            }
            Fault::Kind(n) => {
                variant(out, 4, N);
                out.push(n);
            }
            Fault::Decision(n) => {
                variant(out, 5, N);
                out.push(n);
            }
            Fault::Time(n) => {
                variant(out, 6, N);
                out.push(n);
            }
            Fault::Scope(other) => {
                variant(out, 7, N);
                out.push(u8::from(other));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// alpha, bravo (loads) and echo (an install) of the fixture catalog.
    const PLAN: u8 = 0b0001_0011;
    /// A settle that goes all the way, with an applied install outcome.
    const SETTLE: u8 = 0b1010;

    /// A managed session: plan, desired set, granted consent, install and activations claimed,
    /// observed and settled, a turn, observations, a resubmission, a reopen, the session end and
    /// its deactivations.
    fn managed_session() -> Program {
        use Ev::*;
        Program {
            level: 0,
            steps: vec![
                Step::Event(Plan(PLAN)),
                Step::Event(Desired(1, 0b111)),
                Step::Event(Decide(1)),
                Step::Settle {
                    pick: 0,
                    how: SETTLE,
                },
                Step::Settle {
                    pick: 0,
                    how: SETTLE,
                },
                Step::Settle {
                    pick: 0,
                    how: SETTLE,
                },
                Step::Settle {
                    pick: 0,
                    how: SETTLE,
                },
                Step::Event(Turn(0)),
                Step::Event(Receipt(0, 0)),
                Step::Event(Submission(0)),
                Step::Event(ToolCall(1, true)),
                Step::Event(Observed(0, 0)),
                Step::Event(Observed(1, 0b0000_1100)),
                Step::Resubmit(3),
                Step::Resubmit(0x81),
                Step::Event(Turn(4)),
                Step::Reopen,
                Step::Event(Turn(7)),
                Step::Event(Receipt(0, 0)),
                Step::Event(Receipt(0, 1)),
                Step::Event(Receipt(0, 0)),
                Step::Event(RetryCleanup),
            ],
        }
    }

    /// Every fault against a session with a pending consent, then a granted decision, refused
    /// receipts without outcomes, a partial settle and expiries.
    fn faults() -> Program {
        use Ev::*;
        Program {
            level: 0,
            steps: vec![
                Step::Event(Plan(PLAN)),
                Step::Event(Desired(0, 0b111)),
                Step::Invalid(Decide(1), Fault::UnknownConsent),
                Step::Invalid(Decide(1), Fault::Revision(0)),
                Step::Invalid(Decide(1), Fault::Revision(3)),
                Step::Invalid(Turn(0), Fault::Revision(2)),
                Step::Invalid(Decide(1), Fault::DuplicateId(1)),
                Step::Invalid(Decide(1), Fault::Payload(3)),
                Step::Invalid(Decide(1), Fault::Payload(0)),
                Step::Invalid(Desired(0, 1), Fault::Payload(1)),
                Step::Invalid(Turn(0), Fault::Kind(3)),
                Step::Invalid(Plan(3), Fault::Decision(0)),
                Step::Invalid(Plan(3), Fault::Decision(1)),
                Step::Invalid(Plan(3), Fault::Decision(2)),
                Step::Invalid(Plan(3), Fault::Decision(3)),
                Step::Invalid(Turn(0), Fault::Decision(7)),
                Step::Invalid(Turn(0), Fault::Scope(true)),
                Step::Invalid(Decide(1), Fault::Time(0)),
                Step::Event(Decide(1)),
                Step::Event(Receipt(0, 0)),
                Step::Settle { pick: 0, how: 0 },
                Step::Event(Receipt(0, 2)),
                Step::Settle { pick: 1, how: 1 },
                Step::Settle { pick: 1, how: 2 },
                Step::Advance(95),
                Step::Event(Receipt(0, 2)),
                Step::Invalid(Start, Fault::DuplicateId(0)),
                Step::Event(Start),
                Step::Invalid(Turn(0), Fault::Scope(false)),
            ],
        }
    }

    /// A denied consent, a consent left to expire, a preapproved denial and a late decision.
    fn consents() -> Program {
        use Ev::*;
        Program {
            level: 4,
            steps: vec![
                Step::Event(Plan(0b0011_0000)),
                Step::Event(Desired(0, 0b11)),
                Step::Event(Decide(0)),
                Step::Event(Desired(1, 0b11)),
                Step::Event(Decide(0xC0)),
                Step::Event(ConsentExpired),
                Step::Event(Desired(0, 0b10)),
                Step::Advance(70),
                Step::Event(Decide(2)),
                Step::Event(Turn(0)),
                Step::Invalid(Start, Fault::UnknownConsent),
                Step::Invalid(ConsentExpired, Fault::Payload(6)),
                Step::Event(ConsentExpired),
                Step::Resubmit(5),
            ],
        }
    }

    /// An observing host: plans and observations, a failed install outcome, the session end.
    fn observing() -> Program {
        use Ev::*;
        Program {
            level: 6,
            steps: vec![
                Step::Event(Observed(1, 0b1000_0001)),
                Step::Event(Desired(0, 0b11)),
                Step::Event(Observed(2, 0)),
                Step::Event(Turn(1)),
                Step::Event(Turn(5)),
                Step::Invalid(Turn(7), Fault::Kind(0)),
                Step::Event(Turn(7)),
                Step::Event(Observed(0, 0)),
            ],
        }
    }

    fn failed_install() -> Program {
        use Ev::*;
        Program {
            level: 1,
            steps: vec![
                Step::Event(Plan(0b0101_0000)),
                Step::Event(Desired(0, 0b1)),
                Step::Event(Decide(1)),
                Step::Settle {
                    pick: 0,
                    how: 0b0001,
                },
                Step::Settle {
                    pick: 0,
                    how: 0b0010,
                },
                Step::Event(Desired(1, 0b11)),
                Step::Event(Decide(3)),
                Step::Settle {
                    pick: 0,
                    how: 0b0110,
                },
                Step::Reopen,
                Step::Settle {
                    pick: 0,
                    how: 0b0110,
                },
                // No consent is pending: the decision names an old install.
                Step::Invalid(Start, Fault::UnknownConsent),
                Step::Event(Turn(7)),
            ],
        }
    }

    fn programs() -> Vec<(&'static str, Program)> {
        vec![
            ("managed-session", managed_session()),
            ("faults", faults()),
            ("consents", consents()),
            ("observing", observing()),
            ("failed-install", failed_install()),
        ]
    }

    fn decode(bytes: &[u8]) -> arbitrary::Result<Program> {
        Program::arbitrary_take_rest(arbitrary::Unstructured::new(bytes))
    }

    #[test]
    fn programs_encode_to_the_bytes_that_decode_to_them() {
        for (name, program) in programs() {
            match decode(&program.to_bytes()) {
                Ok(decoded) => assert_eq!(decoded, program, "{name}"),
                Err(e) => panic!("{name}: {e}"),
            }
        }
    }

    #[test]
    fn a_managed_session_passes() {
        run(&managed_session());
    }

    #[test]
    fn faulty_events_are_refused_and_change_nothing() {
        run(&faults());
    }

    #[test]
    fn consents_and_expiries_pass() {
        run(&consents());
        run(&observing());
        run(&failed_install());
    }

    #[test]
    fn arbitrary_programs_pass() {
        // Deterministic pseudo-random inputs through the same decoding libFuzzer uses.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..24 {
            let bytes: Vec<u8> = (0..192)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            if let Ok(program) = decode(&bytes) {
                run(&program);
            }
        }
    }

    /// Writes the hand-written programs as seeds: `CTX_FUZZ_WRITE_SEEDS=1 cargo test --release
    /// replay_determinism::tests::write_seeds`.
    #[test]
    fn write_seeds() {
        if std::env::var_os("CTX_FUZZ_WRITE_SEEDS").is_none() {
            return;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/replay_determinism");
        ok(std::fs::create_dir_all(&dir), "corpus directory");
        for (name, program) in programs() {
            // Named `seed-*`, the corpus files fuzz/.gitignore keeps.
            let path = dir.join(format!("seed-{name}"));
            ok(std::fs::write(path, program.to_bytes()), "seed");
        }
    }
}
