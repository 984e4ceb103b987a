//! Acceptance tests of the engine of ctx-projections on a real temp-dir journal: random histories
//! against a reference model of the exactly-once install and activation protocols, and the fixed
//! scenarios the random histories rarely reach.

mod exactly_once;
mod liveness;
mod scenarios;

use std::sync::Arc;

use ctx_journal::Journal;
use ctx_model::testkit::Session;
use ctx_model::{
    EngineEvent, EngineState, EventKind, HostAction, Json, Surrogate, UtcMicros, testkit,
};
use ctx_projections::engine::{Engine, EngineOptions, ManualClock};

use crate::support;

/// The normalizer version recorded in every replay input.
pub const NORMALIZER_VERSION: &str = "ctx-normalizer-structured-v1";

/// Resolves any observation reference into the approved opaque-reference surrogate.
pub use ctx_projections::testkit::lifecycle::OpaqueNormalizer as Opaque;
/// The driver and target every claim of these tests is bound to.
pub use ctx_projections::testkit::lifecycle::binding;

/// A host driving one engine session on a temp-dir journal, with a trusted clock it controls.
/// The trusted clock follows the session clock (see [`Host::sync_clock`]).
pub struct Host {
    dir: tempfile::TempDir,
    engine: Option<Engine>,
    pub clock: Arc<ManualClock>,
    pub s: Session,
    /// How many times the engine was opened on the directory: claims made under an earlier
    /// epoch belong to another (dropped) engine handle.
    pub epoch: u32,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("dir", &self.dir.path())
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

fn options(clock: &Arc<ManualClock>) -> EngineOptions {
    EngineOptions::new(clock.clone()).normalizer(Arc::new(Opaque), NORMALIZER_VERSION)
}

fn open_engine(dir: &std::path::Path, clock: &Arc<ManualClock>) -> Engine {
    let journal = Arc::new(support::open(dir));
    Engine::open(journal, options(clock)).unwrap()
}

impl Host {
    pub const MINUTE: i64 = 60 * 1_000_000;

    pub fn new(session: &str) -> Host {
        let dir = support::tempdir();
        let s = Session::new(session);
        let clock = Arc::new(ManualClock::new(s.now));
        let engine = open_engine(dir.path(), &clock);
        Host {
            dir,
            engine: Some(engine),
            clock,
            s,
            epoch: 0,
        }
    }

    pub fn engine(&self) -> &Engine {
        self.engine.as_ref().unwrap()
    }

    pub fn journal(&self) -> &Arc<Journal> {
        self.engine().journal()
    }

    /// Another engine handle on the same journal (as a second component of the process would
    /// open); drop it before [`Host::reopen`].
    pub fn another_handle(&self) -> Engine {
        Engine::open(self.journal().clone(), options(&self.clock)).unwrap()
    }

    /// Drops the engine and its journal (the engine holds every `Arc` of it) and opens both
    /// again on the same directory.
    pub fn reopen(&mut self) {
        let engine = self.engine.take().unwrap();
        let journal = Arc::downgrade(engine.journal());
        drop(engine);
        assert!(
            journal.upgrade().is_none(),
            "the engine must hold the last reference to its journal before a reopen"
        );
        self.engine = Some(open_engine(self.dir.path(), &self.clock));
        self.epoch += 1;
    }

    /// The trusted clock says what the session clock says.
    pub fn sync_clock(&self) {
        self.clock.set(self.s.now);
    }

    /// Moves the session clock and the trusted clock together.
    pub fn advance(&mut self, micros: i64) {
        self.s.advance(micros);
        self.sync_clock();
    }

    pub fn now(&self) -> UtcMicros {
        use ctx_projections::engine::Clock;
        self.clock.now().unwrap()
    }

    /// The committed head state (`None` before the first event).
    pub fn state(&self) -> Option<EngineState> {
        self.engine().snapshot(&self.s.scope).unwrap().into_state()
    }

    pub fn revision(&self) -> u64 {
        self.engine().snapshot(&self.s.scope).unwrap().revision()
    }

    /// The journal's head position: unchanged by anything refused.
    pub fn position(&self) -> u64 {
        self.journal().head_position().unwrap()
    }

    /// Commits an event that must be accepted, and moves the session to the new head.
    pub fn commit(&mut self, event: &EngineEvent, decision: Option<Surrogate>) {
        let t = self
            .engine()
            .process(event, decision)
            .unwrap_or_else(|e| panic!("{} must commit: {e}", event.kind));
        self.s.revision = t.to_revision;
    }

    pub fn start(&mut self, level: &str) {
        let e = self.s.started(level);
        self.commit(&e, None);
    }

    /// A planning event over `rows` (through the observation normalizer) that must commit.
    pub fn plan(&mut self, rows: Vec<Json>) {
        let intent = planning_event(&mut self.s);
        self.commit(&intent, Some(testkit::decision(rows)));
    }

    /// The pending install of the consent at the head, granted interactively.
    pub fn grant(&mut self) -> HostAction {
        let state = self.state().unwrap();
        let consent = state
            .pending_consents
            .first()
            .expect("a consent is pending")
            .install_action
            .clone();
        let e = self.s.decide(&consent, true, "interactive");
        self.commit(&e, None);
        consent
    }

    pub fn claim_install(
        &self,
        install: &HostAction,
    ) -> Result<(), ctx_projections::engine::AuthorizeError> {
        let row = catalog_row(install);
        self.engine().authorize_install(
            install,
            &row,
            &descriptor(&row),
            &self.s.catalog,
            &self.s.policy,
            &binding(),
        )
    }

    /// Every attached projection's incremental tables equal a fresh fold of the journal, the
    /// replay audit of the session is clean and the journal verifies.
    pub fn check_rebuilds(&self) {
        let engine = self.engine();
        for (name, _) in engine.projections().attached() {
            let report = engine.projections().check(name).unwrap();
            assert!(
                report.is_equal(),
                "{name}: incremental != rebuilt: {report:?}"
            );
        }
        let audit = engine.replay_audit(&self.s.scope).unwrap();
        assert!(audit.is_clean(), "replay audit: {:?}", audit.divergence());
        assert_eq!(audit.revisions_checked(), self.revision());
        let verify = self.journal().verify().unwrap();
        assert!(verify.is_ok(), "journal verify: {:?}", verify.failures);
    }
}

/// An `IntentObserved` event whose observation the normalizer resolves (the engine refuses the
/// bare `{}` payload of `Session::intent`).
pub fn planning_event(s: &mut Session) -> EngineEvent {
    let mut intent = s.intent();
    with_observation(&mut intent);
    intent
}

/// Gives an observation event the opaque observation reference the engine requires.
pub fn with_observation(event: &mut EngineEvent) {
    if event.kind == EventKind::IntentObserved {
        event.payload = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(testkit::digest("observation"))),
                ("opaque_id", Json::str(format!("work-{}", event.event_id))),
                ("provider_id", Json::str("host-1")),
            ]),
        )]);
    }
}

/// The fixture catalog row of the capability an action names.
pub fn catalog_row(action: &HostAction) -> Json {
    let id = action.entity_id.as_deref().unwrap();
    testkit::ops::catalog()
        .into_iter()
        .chain([testkit::row(testkit::RowKind::Install, "skill", "demo")])
        .find(|r| r.get_str("capability_id") == Some(id))
        .unwrap_or_else(|| panic!("{id} is not a fixture catalog row"))
}

pub fn descriptor(row: &Json) -> Json {
    row.get("authority")
        .and_then(|a| a.get("descriptor"))
        .cloned()
        .unwrap()
}

/// The result material an applied install reports observing.
pub fn install_material(install: &HostAction) -> String {
    install
        .payload
        .get("result_material")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned()
}

/// The material an applied activation reports observing.
pub fn activation_material(activation: &HostAction) -> String {
    activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned()
}

/// The action's expiry.
pub fn expiry(action: &HostAction) -> UtcMicros {
    UtcMicros::parse(action.expires_at.as_deref().unwrap()).unwrap()
}
