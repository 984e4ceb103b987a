//! Engine tests against the real reducer, replay boundary and identities, driven by
//! `crate::testkit::Session` (a temp-dir journal and a manual trusted clock).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::ControlFlow;
use std::sync::Arc;

use ctx_journal::{
    AppendError, Digest, ExpectedRevision, Journal, NewRecord, OpenOptions, StreamAppend, StreamId,
    Timestamp,
};
use ctx_model::testkit::{self, RowKind, Session};
use ctx_model::{
    ActionKind, EngineEvent, EventKind, HostAction, INSTALLER_ID, InstallExecutionBinding, Json,
    ReduceError, Surrogate, Transition, UtcMicros, cja_digest,
};

use crate::framework::Projections;
use crate::streams::*;

use super::api::audit_stream;
use super::*;

// ------------------------------------------------------------------------------------------------
// Fixture
// ------------------------------------------------------------------------------------------------

fn d(label: &str) -> String {
    testkit::digest(label)
}

use crate::testkit::lifecycle::OpaqueNormalizer as Opaque;

fn open_journal(dir: &tempfile::TempDir) -> Arc<Journal> {
    Arc::new(Journal::open(dir.path(), &OpenOptions::new()).unwrap())
}

fn options(clock: &Arc<ManualClock>) -> EngineOptions {
    EngineOptions::new(clock.clone()).normalizer(Arc::new(Opaque), "ctx-normalizer-structured-v1")
}

struct Fixture {
    dir: tempfile::TempDir,
    journal: Arc<Journal>,
    engine: Engine,
    clock: Arc<ManualClock>,
    s: Session,
    row: Json,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let journal = open_journal(&dir);
    let s = Session::new("s1");
    let clock = Arc::new(ManualClock::new(s.now));
    let engine = Engine::open(journal.clone(), options(&clock)).unwrap();
    Fixture {
        dir,
        journal,
        engine,
        clock,
        s,
        row: testkit::row(RowKind::Install, "skill", "demo"),
    }
}

impl Fixture {
    fn cap(&self) -> String {
        self.row.get_str("capability_id").unwrap().to_owned()
    }

    fn descriptor(&self) -> Json {
        self.row
            .get("authority")
            .and_then(|a| a.get("descriptor"))
            .cloned()
            .unwrap()
    }

    fn material_digest(&self) -> String {
        self.row
            .get("authority")
            .and_then(|a| a.get("result_material"))
            .and_then(|m| m.get_str("identity_digest"))
            .unwrap()
            .to_owned()
    }

    fn binding(&self) -> InstallExecutionBinding {
        InstallExecutionBinding::new(
            INSTALLER_ID,
            ctx_model::INSTALLER_DIGEST,
            &d("host-identity"),
            &d("target-identity"),
        )
        .unwrap()
    }

    /// Processes an event that must commit, and moves the session to the new head.
    fn commit(&mut self, e: &EngineEvent, decision: Option<Surrogate>) -> Transition {
        let t = self.engine.process(e, decision).unwrap();
        self.s.revision = t.to_revision;
        t
    }

    fn start(&mut self) {
        let e = self.s.started("managing");
        self.commit(&e, None);
    }

    fn empty(&mut self, kind: EventKind) -> Transition {
        let e = self.s.empty(kind);
        self.commit(&e, None)
    }

    /// The host's planning event: an observation reference, resolved by the normalizer, and the
    /// decision surrogate passed explicitly.
    fn plan(&mut self) -> Transition {
        let mut intent = self.s.intent();
        intent.payload = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(d("observation"))),
                ("opaque_id", Json::str("work-1")),
                ("provider_id", Json::str("host-1")),
            ]),
        )]);
        let decision = testkit::decision(vec![self.row.clone()]);
        self.commit(&intent, Some(decision))
    }

    /// Session (1), plan (2), desired set (3), granted consent (4): the pending install.
    fn pending_install(&mut self) -> HostAction {
        self.start();
        self.plan();
        let (row, cap) = (self.row.clone(), self.cap());
        let e = self
            .s
            .desired("owner-1", std::slice::from_ref(&row), &[&cap]);
        let t = self.commit(&e, None);
        assert_eq!(t.actions[0].kind, ActionKind::RequestConsent);
        let state = self
            .engine
            .snapshot(&self.s.scope)
            .unwrap()
            .into_state()
            .unwrap();
        let precomputed = state.pending_consents[0].install_action.clone();
        let e = self.s.decide(&precomputed, true, "interactive");
        let t = self.commit(&e, None);
        assert_eq!(t.actions[0].kind, ActionKind::InstallCapability);
        t.actions[0].clone()
    }

    fn authorize(&self, install: &HostAction) -> Result<(), AuthorizeError> {
        self.engine.authorize_install(
            install,
            &self.row,
            &self.descriptor(),
            &self.s.catalog,
            &self.s.policy,
            &self.binding(),
        )
    }

    fn outcome(
        &self,
        install: &HostAction,
        outcome: InstallOutcome,
        verification: &str,
    ) -> Result<InstallGuard, OutcomeError> {
        let material = self.material_digest();
        let observed = (outcome == InstallOutcome::Applied).then_some(material.as_str());
        self.engine.record_install_outcome(
            install,
            &self.binding(),
            outcome,
            observed,
            &d(verification),
        )
    }

    /// Runs the install to its settlement (revision 5); returns the emitted activation.
    fn installed(&mut self) -> HostAction {
        let install = self.pending_install();
        self.authorize(&install).unwrap();
        let guard = self
            .outcome(&install, InstallOutcome::Applied, "verification")
            .unwrap();
        let receipt = self.s.applied(&install);
        let t = self
            .engine
            .process_install_receipt(&receipt, &guard)
            .unwrap();
        self.s.revision = t.to_revision;
        assert_eq!(t.actions[0].kind, ActionKind::ActivateCapability);
        t.actions[0].clone()
    }

    fn stream(&self) -> StreamId {
        engine_stream(&self.s.scope).unwrap()
    }
}

fn check_all(engine: &Engine) {
    for name in [
        ENGINE_STATE_PROJECTION,
        ENGINE_EFFECTS_PROJECTION,
        ENGINE_BENEFIT_AUDIT_PROJECTION,
    ] {
        let report = engine.projections().check(name).unwrap();
        assert!(report.is_equal(), "{name}: {report:?}");
        let before = engine.projections().digest(name).unwrap();
        engine.projections().rebuild(name).unwrap();
        assert_eq!(engine.projections().digest(name).unwrap(), before, "{name}");
    }
}

fn count(journal: &Journal, table: &'static str) -> usize {
    let mut n = 0;
    journal
        .projection_scan(table, |_, _| {
            n += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    n
}

// ------------------------------------------------------------------------------------------------
// Records
// ------------------------------------------------------------------------------------------------

fn sample_record() -> EngineRecord {
    EngineRecord {
        format_version: ENGINE_RECORD_FORMAT_VERSION,
        reducer_version: "ctx-reducer-v3".into(),
        source_event_content_digest: d("source-event"),
        replay_json: "{}".into(),
        transition_json: "{}".into(),
        result_state_digest: d("state"),
        settlement_guard: Some(SettlementGuard {
            effect: GuardEffect::Install,
            action_id: "action-1".into(),
            action_content_digest: d("action"),
            mode: GuardMode::Applied,
            execution_outcome_digest: Some(d("outcome")),
        }),
    }
}

fn field_refused(record: &EngineRecord, name: &str) -> bool {
    matches!(record.encode(), Err(RecordError::Field { field, .. }) if field == name)
}

#[test]
fn engine_records_round_trip_and_refuse_bad_fields_without_panicking() {
    let record = sample_record();
    let bytes = record.encode().unwrap();
    for offset in 0..8 {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(&bytes);
        assert_eq!(EngineRecord::decode(&shifted[offset..]).unwrap(), record);
    }
    let mut wrong = record.clone();
    wrong.format_version = 2;
    assert_eq!(
        wrong.encode().unwrap_err(),
        RecordError::FormatVersion { found: 2 }
    );
    let mut wrong = record.clone();
    wrong.result_state_digest = "nope".into();
    assert!(field_refused(&wrong, "result_state_digest"));
    let mut wrong = record.clone();
    wrong.replay_json = "x".repeat(REPLAY_JSON_MAX_BYTES + 1);
    assert!(field_refused(&wrong, "replay_json"));
    let mut wrong = record.clone();
    wrong.settlement_guard.as_mut().unwrap().mode = GuardMode::Expired;
    assert!(field_refused(&wrong, "settlement_guard"));
    for mode in [GuardMode::Failed, GuardMode::Indeterminate] {
        let mut wrong = record.clone();
        let guard = wrong.settlement_guard.as_mut().unwrap();
        guard.effect = GuardEffect::Activation;
        guard.mode = mode;
        assert!(field_refused(&wrong, "settlement_guard"));
    }
    let mut indeterminate = record.clone();
    indeterminate.settlement_guard.as_mut().unwrap().mode = GuardMode::Indeterminate;
    let bytes_of = indeterminate.encode().unwrap();
    assert_eq!(EngineRecord::decode(&bytes_of).unwrap(), indeterminate);
    indeterminate
        .settlement_guard
        .as_mut()
        .unwrap()
        .execution_outcome_digest = None;
    assert!(field_refused(&indeterminate, "settlement_guard"));
    // Every truncation and every single-byte corruption is a typed error or a valid record.
    for cut in 0..bytes.len() {
        let _ = EngineRecord::decode(&bytes[..cut]);
    }
    for i in 0..bytes.len() {
        let mut corrupt = bytes.clone();
        corrupt[i] ^= 0xA5;
        let _ = EngineRecord::decode(&corrupt);
    }
    assert!(matches!(
        EngineRecord::decode(&[]).unwrap_err(),
        RecordError::Archive(_)
    ));
}

#[test]
fn guard_modes_archive_as_their_documented_byte_values() {
    // spec/engine-store.md §2: records are immutable, so these values never change.
    for (mode, byte) in [
        (GuardMode::Applied, 0u8),
        (GuardMode::Failed, 1),
        (GuardMode::Expired, 2),
        (GuardMode::Indeterminate, 3),
    ] {
        let bytes = crate::archive::to_bytes(&mode).unwrap();
        assert_eq!(bytes.first(), Some(&byte), "{mode:?}");
        assert_eq!(
            crate::archive::from_bytes::<GuardMode>(&bytes).unwrap(),
            mode
        );
    }
    assert!(crate::archive::from_bytes::<GuardMode>(&[4]).is_err());
}

#[test]
fn stored_records_bind_to_their_place() {
    let mut f = fixture();
    f.start();
    let records = f.journal.read_stream(&f.stream(), 1, 10).unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.kind, ENGINE_RECORD_KIND);
    assert_eq!(r.event_id, "ev-s1-1");
    assert_eq!(r.occurred_at, Timestamp(f.s.now.0));
    let record = EngineRecord::decode(&r.payload).unwrap();
    let place = RecordPlace {
        stream: f.stream(),
        revision: 1,
        event_id: "ev-s1-1",
        occurred_at: r.occurred_at,
    };
    let (replay, transition) = record.open(&place).unwrap();
    assert_eq!(replay.reducer_event.kind, EventKind::SessionStarted);
    assert_eq!((transition.from_revision, transition.to_revision), (0, 1));
    for elsewhere in [
        RecordPlace {
            revision: 2,
            ..place
        },
        RecordPlace {
            event_id: "ev-other",
            ..place
        },
        RecordPlace {
            occurred_at: Timestamp(0),
            ..place
        },
        RecordPlace {
            stream: StreamId::derive("ctx.engine", b"other").unwrap(),
            ..place
        },
    ] {
        assert!(matches!(
            record.open(&elsewhere).unwrap_err(),
            RecordError::Binding { .. }
        ));
    }
}

// ------------------------------------------------------------------------------------------------
// process, snapshot, duplicates, conflicts
// ------------------------------------------------------------------------------------------------

#[test]
fn session_started_then_events_advance_the_projected_head() {
    let mut f = fixture();
    let empty = f.engine.snapshot(&f.s.scope).unwrap();
    assert_eq!(empty.revision(), 0);
    assert!(empty.state().is_none() && empty.head_record_digest().is_none());
    let e = f.s.started("managing");
    let t = f.commit(&e, None);
    assert_eq!((t.from_revision, t.to_revision), (0, 1));
    let t = f.empty(EventKind::TurnEnded);
    assert_eq!((t.from_revision, t.to_revision), (1, 2));
    assert_eq!(t.event_id, "ev-s1-2");
    let snap = f.engine.snapshot(&f.s.scope).unwrap();
    assert_eq!(snap.revision(), 2);
    assert_eq!(snap.state().unwrap().revision, 2);
    let head = f.journal.stream_head(&f.stream()).unwrap().unwrap();
    assert_eq!(snap.head_record_digest(), Some(head.digest));
    // A child exposure of the same session shares the stream and its revisions.
    let mut child = f.s.empty(EventKind::TurnEnded);
    child.scope.exposure_id = "child-1".into();
    child.scope.parent_exposure_id = Some("exposure-1".into());
    f.commit(&child, None);
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 3);
    f.empty(EventKind::SessionEnded);
    check_all(&f.engine);
}

#[test]
fn a_duplicate_event_returns_the_stored_transition_and_writes_nothing() {
    let mut f = fixture();
    f.start();
    let ev = f.s.empty(EventKind::TurnEnded);
    let first = f.commit(&ev, None);
    let position = f.journal.head_position().unwrap();
    assert_eq!(f.engine.process(&ev, None).unwrap(), first);
    assert_eq!(f.journal.head_position().unwrap(), position);
    // Same id, other content: a collision, whatever the expected revision says.
    let mut other = ev.clone();
    other.occurred_at = "2026-12-01T10:00:01Z".into();
    let err = f.engine.process(&other, None).unwrap_err();
    assert!(
        matches!(&err, ProcessError::EventIdCollision { event_id } if *event_id == ev.event_id),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "event id 'ev-s1-2' is already bound to different content"
    );
    // An event id taken by a record outside the engine is a collision too.
    f.journal
        .append(StreamAppend::new(
            StreamId::derive("test", b"foreign").unwrap(),
            ExpectedRevision::NoStream,
            vec![NewRecord::new("ev-taken", "test", Timestamp(0), vec![])],
        ))
        .unwrap();
    let mut taken = f.s.empty(EventKind::TurnEnded);
    taken.event_id = "ev-taken".into();
    let err = f.engine.process(&taken, None).unwrap_err();
    assert!(
        matches!(err, ProcessError::EventIdCollision { .. }),
        "{err}"
    );
}

#[test]
fn a_wrong_expected_revision_is_a_revision_conflict_naming_both() {
    let mut f = fixture();
    f.start();
    f.empty(EventKind::TurnEnded);
    let mut stale = f.s.empty(EventKind::TurnEnded);
    stale.expected_revision = 1;
    let err = f.engine.process(&stale, None).unwrap_err();
    assert!(
        matches!(
            err,
            ProcessError::RevisionConflict {
                expected: 1,
                actual: 2
            }
        ),
        "{err}"
    );
    assert_eq!(err.to_string(), "expected revision 1, found 2");
    let mut ahead = f.s.empty(EventKind::TurnEnded);
    ahead.expected_revision = 7;
    let err = f.engine.process(&ahead, None).unwrap_err();
    assert_eq!(err.to_string(), "expected revision 7, found 2");
    // The first event of a stream must be expected at revision 0.
    let mut other = Session::new("s2");
    other.revision = 3;
    let err = f
        .engine
        .process(&other.started("managing"), None)
        .unwrap_err();
    assert_eq!(err.to_string(), "expected revision 3, found 0");
}

#[test]
fn refused_and_invalid_events_write_nothing() {
    let mut f = fixture();
    let first = f.s.empty(EventKind::TurnEnded);
    let err = f.engine.process(&first, None).unwrap_err();
    assert!(
        matches!(&err, ProcessError::Reducer(ReduceError::InvalidEvent(m)) if m == "SessionStarted must be the first event"),
        "{err}"
    );
    let mut bad = f.s.started("managing");
    bad.occurred_at = "yesterday".into();
    assert!(matches!(
        f.engine.process(&bad, None).unwrap_err(),
        ProcessError::Invalid(_)
    ));
    // An observation without a normalizer is unsupported.
    let plain = Engine::open(f.journal.clone(), EngineOptions::new(f.clock.clone())).unwrap();
    f.start();
    let mut intent = f.s.intent();
    intent.payload = Json::object([(
        "observation_ref",
        Json::object([
            ("content_digest", Json::str(d("observation"))),
            ("opaque_id", Json::str("work-1")),
            ("provider_id", Json::str("host-1")),
        ]),
    )]);
    let err = plain.process(&intent, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "event requires a typed observation normalizer"
    );
    assert!(matches!(err, ProcessError::Unsupported(_)));
    // A planning event without its decision.
    let err = f.engine.process(&intent, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "planning event is missing its durable decision"
    );
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 1);
    assert_eq!(f.journal.head_position().unwrap(), 1);
}

#[test]
fn concurrent_writers_of_one_stream_commit_each_revision_once() {
    let mut f = fixture();
    f.start();
    let events: Vec<_> = (0..4).map(|_| f.s.empty(EventKind::TurnEnded)).collect();
    let barrier = std::sync::Barrier::new(events.len());
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = events
            .iter()
            .map(|e| {
                let (engine, barrier) = (&f.engine, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    engine.process(e, None)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert!(
            matches!(
                r,
                ProcessError::RevisionConflict {
                    expected: 1,
                    actual: 2
                }
            ),
            "{r}"
        );
    }
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 2);
}

// ------------------------------------------------------------------------------------------------
// Audit and tampering
// ------------------------------------------------------------------------------------------------

#[test]
fn replay_audit_of_a_clean_stream_checks_every_revision() {
    let mut f = fixture();
    f.pending_install();
    f.empty(EventKind::TurnEnded);
    let report = f.engine.replay_audit(&f.s.scope).unwrap();
    assert!(report.is_clean(), "{:?}", report.divergence());
    assert_eq!(report.revisions_checked(), 5);
    assert_eq!(report.stream(), f.stream());
    let standalone = replay_audit_journal(&f.journal, &f.s.scope).unwrap();
    assert!(standalone.is_clean());
    assert_eq!(standalone.revisions_checked(), 5);
}

/// Copies the engine records of the fixture's stream into a journal without engine projections,
/// replacing revision `at` by `tamper(record)`.
fn copy_with_tamper(
    f: &Fixture,
    at: u64,
    tamper: impl Fn(&mut EngineRecord),
) -> (tempfile::TempDir, Arc<Journal>) {
    let dir = tempfile::tempdir().unwrap();
    let to = open_journal(&dir);
    for r in f.journal.read_stream(&f.stream(), 1, 100).unwrap() {
        let mut payload = r.payload.clone();
        if r.revision == at {
            let mut record = EngineRecord::decode(&payload).unwrap();
            tamper(&mut record);
            payload = record.encode().unwrap();
        }
        to.append(StreamAppend::new(
            f.stream(),
            ExpectedRevision::Any,
            vec![NewRecord::new(r.event_id, r.kind, r.occurred_at, payload)],
        ))
        .unwrap();
    }
    (dir, to)
}

/// The record's transition with one extra diagnostic.
fn forge_transition(r: &mut EngineRecord) {
    let mut t = transition_from_canonical_text(&r.transition_json).unwrap();
    t.diagnostics
        .push(Json::object([("code", Json::str("forged"))]));
    r.transition_json = t.to_json().to_cj();
}

#[test]
fn a_tampered_transition_or_state_digest_is_reported_as_a_divergence() {
    let mut f = fixture();
    f.start();
    f.empty(EventKind::TurnEnded);
    f.empty(EventKind::TurnEnded);
    let (_dir, forged) = copy_with_tamper(&f, 2, forge_transition);
    let report = audit_stream(&forged, &f.stream(), ctx_model::reduce).unwrap();
    let div = report.divergence().unwrap();
    assert_eq!(
        (div.revision, div.component),
        (2, AuditComponent::Transition)
    );
    assert_eq!(report.revisions_checked(), 1);
    assert!(
        div.to_string()
            .contains("diverged at revision 2: transition")
    );

    let (_dir, forged) = copy_with_tamper(&f, 3, |r| r.result_state_digest = d("forged"));
    let div = replay_audit_journal(&forged, &f.s.scope)
        .unwrap()
        .divergence()
        .cloned();
    assert_eq!(
        div.map(|d| (d.revision, d.component)),
        Some((3, AuditComponent::State))
    );

    let (_dir, forged) = copy_with_tamper(&f, 1, |r| r.reducer_version = "other".into());
    let div = replay_audit_journal(&forged, &f.s.scope)
        .unwrap()
        .divergence()
        .cloned();
    assert_eq!(
        div.map(|d| (d.revision, d.component)),
        Some((1, AuditComponent::RecordBinding))
    );

    // The engine refuses to attach to a journal holding a record the reducer did not produce.
    let (_dir, forged) = copy_with_tamper(&f, 2, forge_transition);
    let err = Engine::open(forged, options(&f.clock)).unwrap_err();
    assert!(matches!(err, OpenEngineError::Attach(_)), "{err}");
    assert!(
        err.to_string()
            .contains("stores a transition the reducer does not produce"),
        "{err}"
    );
}

#[test]
fn a_forged_engine_record_is_refused_at_append_while_the_engine_is_attached() {
    // The genuine revision-3 record, made by a scratch engine on the same session.
    let mut scratch = fixture();
    scratch.start();
    scratch.empty(EventKind::TurnEnded);
    scratch.empty(EventKind::TurnEnded);
    let genuine = scratch
        .journal
        .read_stream(&scratch.stream(), 3, 1)
        .unwrap()
        .remove(0);
    let mut f = fixture();
    f.start();
    f.empty(EventKind::TurnEnded);
    let mut record = EngineRecord::decode(&genuine.payload).unwrap();
    record.result_state_digest = d("forged");
    let append = |payload: Vec<u8>| {
        f.journal.append(StreamAppend::new(
            f.stream(),
            ExpectedRevision::Exact(2),
            vec![NewRecord::new(
                genuine.event_id.clone(),
                ENGINE_RECORD_KIND,
                genuine.occurred_at,
                payload,
            )],
        ))
    };
    let err = append(record.encode().unwrap()).unwrap_err();
    assert!(
        matches!(
            &err,
            AppendError::Hook {
                code: Some(codes::ENGINE_REPLAY_DIVERGED),
                ..
            }
        ),
        "{err}"
    );
    // The genuine record is accepted: the projection recomputes exactly it.
    append(genuine.payload.clone()).unwrap();
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 3);
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
}

// ------------------------------------------------------------------------------------------------
// Install protocol
// ------------------------------------------------------------------------------------------------

#[test]
fn the_install_protocol_claims_once_records_once_and_settles_once() {
    let mut f = fixture();
    let install = f.pending_install();
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(!status.claimed && !status.outcome_recorded && !status.settled);

    f.authorize(&install).unwrap();
    let err = f.authorize(&install).unwrap_err();
    assert!(
        matches!(&err, AuthorizeError::AlreadyClaimed { effect: GuardEffect::Install, action_id } if *action_id == install.action_id),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "install action '{}' has already been claimed",
            install.action_id
        )
    );
    assert_eq!(count(&f.journal, INSTALL_CLAIMS_TABLE), 1);

    // The receipt cannot be committed before the outcome exists.
    let receipt = f.s.applied(&install);
    let err = f.engine.process(&receipt, None).unwrap_err();
    assert!(
        matches!(
            &err,
            ProcessError::OutcomeRequired {
                effect: GuardEffect::Install,
                ..
            }
        ),
        "{err}"
    );

    f.clock.advance(1_000_000);
    let guard = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap();
    // Identical again: the same guard; different: a conflict.
    let again = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap();
    assert_eq!(
        again.execution_outcome_digest(),
        guard.execution_outcome_digest()
    );
    let err = f
        .outcome(&install, InstallOutcome::Applied, "other-verification")
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Conflict(_)), "{err}");
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.claimed && status.outcome_recorded && !status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Applied));
    assert_eq!(status.observed_at.as_deref(), Some("2026-12-01T10:00:01Z"));
    assert_eq!(
        status.outcome_digest.as_deref(),
        Some(guard.execution_outcome_digest())
    );
    assert_eq!(
        status.execution_binding_digest,
        Some(f.binding().binding_digest())
    );

    let t = f.engine.process_install_receipt(&receipt, &guard).unwrap();
    assert_eq!(t.to_revision, 5);
    assert!(f.engine.install_execution_status(&install).unwrap().settled);
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 1);
    // The same receipt again is a duplicate: the stored transition, no second settlement.
    assert_eq!(
        f.engine.process_install_receipt(&receipt, &guard).unwrap(),
        t
    );
    // Another receipt for the settled action names no pending effect any more.
    f.s.revision = 5;
    let other = f.s.applied(&install);
    let err = f
        .engine
        .process_install_receipt(&other, &guard)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "install execution outcome does not match a pending receipt"
    );
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 1);
    // After the settlement, no further outcome.
    let err = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Settled { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "install action '{}' already has a terminal settlement",
            install.action_id
        )
    );
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    check_all(&f.engine);
}

#[test]
fn outcomes_without_a_claim_or_with_wrong_material_or_binding_are_typed_errors() {
    let mut f = fixture();
    let install = f.pending_install();
    let err = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap_err();
    assert!(
        matches!(
            &err,
            OutcomeError::ClaimRequired {
                effect: GuardEffect::Install,
                action_id
            } if *action_id == install.action_id
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "install action '{}' has no durable execution claim",
            install.action_id
        )
    );
    f.authorize(&install).unwrap();
    let material = f.material_digest();
    // Material and binding checks come before any write.
    let err = f
        .engine
        .record_install_outcome(
            &install,
            &f.binding(),
            InstallOutcome::Applied,
            Some(&d("wrong-material")),
            &d("verification"),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "applied outcome does not match authorized result material"
    );
    let err = f
        .engine
        .record_install_outcome(
            &install,
            &f.binding(),
            InstallOutcome::Failed,
            Some(&material),
            &d("verification"),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed outcome requires verified material absence"
    );
    let err = f
        .engine
        .record_install_outcome(
            &install,
            &f.binding(),
            InstallOutcome::Indeterminate,
            Some(&material),
            &d("verification"),
        )
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Invalid(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "indeterminate outcome cannot carry an observed material identity"
    );
    let mut elsewhere = f.binding();
    elsewhere.target_identity_digest = d("elsewhere");
    let err = f
        .engine
        .record_install_outcome(
            &install,
            &elsewhere,
            InstallOutcome::Failed,
            None,
            &d("verification"),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "execution outcome binding does not match the claimed driver and target"
    );
    assert_eq!(count(&f.journal, INSTALL_OUTCOMES_TABLE), 0);
}

#[test]
fn a_second_handle_in_the_same_process_records_the_outcome_and_settles() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    // Another handle on the same journal did not make the claim, and may record its outcome:
    // the permit is re-issuable while no outcome exists.
    let other = Engine::open(f.journal.clone(), options(&f.clock)).unwrap();
    let material = f.material_digest();
    let guard = other
        .record_install_outcome(
            &install,
            &f.binding(),
            InstallOutcome::Applied,
            Some(&material),
            &d("verification"),
        )
        .unwrap();
    assert_eq!(guard.outcome(), InstallOutcome::Applied);
    // The claiming handle sees the same outcome: identical is idempotent, different conflicts.
    let again = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap();
    assert_eq!(
        again.execution_outcome_digest(),
        guard.execution_outcome_digest()
    );
    let err = f
        .outcome(&install, InstallOutcome::Failed, "verification")
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Conflict(_)), "{err}");
    assert_eq!(count(&f.journal, INSTALL_OUTCOMES_TABLE), 1);
    let receipt = f.s.applied(&install);
    let t = f.engine.process_install_receipt(&receipt, &guard).unwrap();
    f.s.revision = t.to_revision;
    assert!(f.engine.install_execution_status(&install).unwrap().settled);
    assert!(other.install_execution_status(&install).unwrap().settled);
    check_all(&f.engine);
}

/// Drops the engine and the journal (what a crashed process leaves behind is its data
/// directory) and opens a new journal and engine on the same directory.
fn reopen(f: Fixture) -> Fixture {
    let Fixture {
        dir,
        journal,
        engine,
        clock,
        s,
        row,
    } = f;
    drop(engine);
    drop(journal);
    let journal = open_journal(&dir);
    let engine = Engine::open(journal.clone(), options(&clock)).unwrap();
    Fixture {
        dir,
        journal,
        engine,
        clock,
        s,
        row,
    }
}

#[test]
fn a_claim_whose_process_died_is_recorded_indeterminate_and_settles_as_failed_once() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    // The claiming process dies mid-effect; a new process opens the same data directory.
    let mut f = reopen(f);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.claimed && !status.outcome_recorded && !status.settled);
    // The claim is burnt: the new process cannot claim (and so drive) it again.
    let err = f.authorize(&install).unwrap_err();
    assert!(
        matches!(&err, AuthorizeError::AlreadyClaimed { effect: GuardEffect::Install, action_id } if *action_id == install.action_id),
        "{err}"
    );
    f.clock.advance(1_000_000);
    let guard = f
        .outcome(&install, InstallOutcome::Indeterminate, "unverifiable")
        .unwrap();
    assert_eq!(guard.outcome(), InstallOutcome::Indeterminate);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.claimed && status.outcome_recorded && !status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Indeterminate));
    assert_eq!(
        status.outcome_digest.as_deref(),
        Some(guard.execution_outcome_digest())
    );
    assert_eq!(status.observed_at.as_deref(), Some("2026-12-01T10:00:01Z"));
    // Recording it again is idempotent.
    let again = f
        .outcome(&install, InstallOutcome::Indeterminate, "unverifiable")
        .unwrap();
    assert_eq!(
        again.execution_outcome_digest(),
        guard.execution_outcome_digest()
    );
    assert_eq!(count(&f.journal, INSTALL_OUTCOMES_TABLE), 1);

    let failed = f.s.failed(&install);
    let t = f.engine.process_install_receipt(&failed, &guard).unwrap();
    f.s.revision = t.to_revision;
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.claimed && status.outcome_recorded && status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Indeterminate));
    let settlement = f
        .journal
        .projection_get(
            INSTALL_SETTLEMENTS_TABLE,
            &effect_key(&f.stream(), &install.action_id),
            |v| crate::archive::from_bytes::<SettlementEntry>(v.unwrap()).unwrap(),
        )
        .unwrap();
    assert_eq!(settlement.outcome, GuardMode::Failed);
    assert!(settlement.from_indeterminate);
    assert_eq!(
        settlement.outcome_digest.as_str(),
        guard.execution_outcome_digest()
    );
    // The identical receipt again is a duplicate; any other receipt is refused.
    assert_eq!(
        f.engine.process_install_receipt(&failed, &guard).unwrap(),
        t
    );
    let second = f.s.failed(&install);
    let err = f
        .engine
        .process_install_receipt(&second, &guard)
        .unwrap_err();
    assert!(matches!(err, ProcessError::Authority(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "install execution outcome does not match a pending receipt"
    );
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 1);
    // No further outcome, no second claim: the install is no longer pending at the head.
    let err = f
        .outcome(&install, InstallOutcome::Indeterminate, "unverifiable")
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Settled { .. }), "{err}");
    let err = f.authorize(&install).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err}");
    // The reducer took it as a failed install: the descriptor is blocked, nothing is installed.
    let state = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    let descriptor_digest = f
        .descriptor()
        .get_str("descriptor_digest")
        .unwrap()
        .to_owned();
    assert_eq!(
        state.blocked_install_descriptor_digests,
        vec![descriptor_digest]
    );
    assert!(state.pending_effect_by_action(&install.action_id).is_none());
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    check_all(&f.engine);
}

#[test]
fn an_indeterminate_outcome_never_settles_as_applied() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    let guard = f
        .outcome(&install, InstallOutcome::Indeterminate, "unverifiable")
        .unwrap();
    let applied = f.s.applied(&install);
    let err = f
        .engine
        .process_install_receipt(&applied, &guard)
        .unwrap_err();
    assert!(matches!(err, ProcessError::Authority(_)), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "install action '{}' has an indeterminate outcome and settles only as failed",
            install.action_id
        )
    );
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 4);
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 0);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(!status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Indeterminate));
}

#[test]
fn a_different_outcome_after_an_indeterminate_one_is_a_conflict() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    f.outcome(&install, InstallOutcome::Indeterminate, "unverifiable")
        .unwrap();
    for (outcome, verification) in [
        (InstallOutcome::Failed, "unverifiable"),
        (InstallOutcome::Applied, "unverifiable"),
        (InstallOutcome::Indeterminate, "other-verification"),
    ] {
        let err = f.outcome(&install, outcome, verification).unwrap_err();
        assert!(matches!(err, OutcomeError::Conflict(_)), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "install action '{}' already has a different outcome",
                install.action_id
            )
        );
    }
    // A handle of another process finds the same durable outcome.
    let f = reopen(f);
    let err = f
        .outcome(&install, InstallOutcome::Failed, "unverifiable")
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Conflict(_)), "{err}");
    assert_eq!(count(&f.journal, INSTALL_OUTCOMES_TABLE), 1);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert_eq!(status.outcome, Some(InstallOutcome::Indeterminate));
}

#[test]
fn a_failed_install_settles_as_failed() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    let guard = f
        .outcome(&install, InstallOutcome::Failed, "verification")
        .unwrap();
    // An applied receipt does not match a failed outcome.
    let applied = f.s.applied(&install);
    let err = f
        .engine
        .process_install_receipt(&applied, &guard)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "install receipt does not match its execution outcome"
    );
    let failed = f.s.failed(&install);
    f.engine.process_install_receipt(&failed, &guard).unwrap();
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Failed));
    check_all(&f.engine);
}

#[test]
fn an_unclaimed_install_expires_only_after_its_expiry_and_never_once_claimed() {
    let mut f = fixture();
    let install = f.pending_install();
    let expired = f.s.expired(&install);
    let err = f.engine.process(&expired, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "install action has not expired according to trusted clock"
    );
    let expiry = UtcMicros::parse(install.expires_at.as_deref().unwrap()).unwrap();
    f.clock.set(expiry);
    // At the expiry the claim is refused by the trusted clock.
    let err = f.authorize(&install).unwrap_err();
    assert!(matches!(err, AuthorizeError::ClaimExpired { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "install action '{}' expired before it was claimed",
            install.action_id
        )
    );
    f.commit(&expired, None);
    assert_eq!(count(&f.journal, INSTALL_EXPIRIES_TABLE), 1);
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 0);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(!status.claimed && !status.settled);
    // Retired: no longer pending at the head (the expiry entry also refuses a claim record).
    let err = f.authorize(&install).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err}");

    // Claimed first: the expiry receipt is refused in its transaction.
    let mut g = fixture();
    let install = g.pending_install();
    g.authorize(&install).unwrap();
    g.clock.set(expiry);
    let expired = g.s.expired(&install);
    let err = g.engine.process(&expired, None).unwrap_err();
    assert!(
        matches!(
            &err,
            ProcessError::Effect {
                effect: GuardEffect::Install,
                refusal: EffectRefusal::AlreadyClaimed,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "claimed install action '{}' cannot expire as unclaimed",
            install.action_id
        )
    );
    assert_eq!(g.engine.snapshot(&g.s.scope).unwrap().revision(), 4);
    // A claimed install may still report its outcome after the expiry.
    g.outcome(&install, InstallOutcome::Failed, "late").unwrap();
}

#[test]
fn authorize_install_checks_its_arguments_and_the_pending_authority() {
    let mut f = fixture();
    // Build the install in a scratch engine: this fixture has no session yet.
    let mut scratch = fixture();
    let foreign = scratch.pending_install();
    let err = f.authorize(&foreign).unwrap_err();
    assert!(
        matches!(
            err,
            AuthorizeError::NoSession {
                effect: GuardEffect::Install
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "install authorization has no authoritative session"
    );
    let install = f.pending_install();
    let (row, descriptor, binding) = (f.row.clone(), f.descriptor(), f.binding());
    let refuse = |row: &Json, catalog: &str, policy: &str, binding: &InstallExecutionBinding| {
        f.engine
            .authorize_install(&install, row, &descriptor, catalog, policy, binding)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refuse(&row, "x", &f.s.policy, &binding),
        "install authorization requires exact snapshot digests"
    );
    assert_eq!(
        refuse(
            &Json::object([("capability_id", Json::str(f.cap()))]),
            &f.s.catalog,
            &f.s.policy,
            &binding
        ),
        "legacy selections cannot authorize physical installation"
    );
    let mut other_driver = binding.clone();
    other_driver.driver_id = "another-driver".into();
    assert_eq!(
        refuse(&row, &f.s.catalog, &f.s.policy, &other_driver),
        "selection has no schema-v3 physical install authority"
    );
    assert_eq!(
        refuse(&row, &f.s.catalog, &d("another-policy"), &binding),
        "install action is not the exact pending journal authority"
    );
    assert_eq!(
        refuse(&row, &d("another-catalog"), &f.s.policy, &binding),
        "install action is not the exact pending journal authority"
    );
    let mut altered = install.clone();
    altered.lease_id = Some("lease-x".into());
    let err = f.authorize(&altered).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err}");
    assert_eq!(count(&f.journal, INSTALL_CLAIMS_TABLE), 0);
}

// ------------------------------------------------------------------------------------------------
// Activation protocol
// ------------------------------------------------------------------------------------------------

#[test]
fn the_activation_protocol_requires_a_settled_install_and_an_exact_receipt_time() {
    let mut f = fixture();
    let activation = f.installed();
    let host = f.s.host_descriptor.clone();
    let binding = f.binding();
    let err = f
        .engine
        .authorize_activation(&activation, &binding, &d("other-host"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "activation action is not exact pending journal authority"
    );
    f.engine
        .authorize_activation(&activation, &binding, &host)
        .unwrap();
    let err = f
        .engine
        .authorize_activation(&activation, &binding, &host)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "activation action '{}' is already claimed",
            activation.action_id
        )
    );
    f.clock.advance(2_000_000);
    let observed = activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned();
    let guard = f
        .engine
        .record_activation_outcome(&activation, &binding, &observed, &d("seen"))
        .unwrap();
    let status = f.engine.activation_execution_status(&activation).unwrap();
    assert!(status.claimed && status.outcome_recorded && !status.settled);
    let observed_at = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
    assert_eq!(observed_at, f.s.now.checked_add(2_000_000).unwrap());
    // A receipt at another time does not settle: the settlement pins the observation.
    f.s.now = observed_at.checked_add(1_000_000).unwrap();
    let late = f.s.applied(&activation);
    let err = f
        .engine
        .process_activation_receipt(&late, &guard)
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ProcessError::Effect {
                effect: GuardEffect::Activation,
                refusal: EffectRefusal::OutcomeConflict,
                ..
            }
        ),
        "{err}"
    );
    f.s.now = observed_at;
    let exact = f.s.applied(&activation);
    f.engine.process_activation_receipt(&exact, &guard).unwrap();
    assert!(
        f.engine
            .activation_execution_status(&activation)
            .unwrap()
            .settled
    );
    let state = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    assert!(state.capability(&f.cap()).unwrap().is_active());
    assert_eq!(count(&f.journal, ACTIVATION_SETTLEMENTS_TABLE), 1);
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    check_all(&f.engine);
}

#[test]
fn an_activation_receipt_without_its_outcome_is_refused() {
    let mut f = fixture();
    let activation = f.installed();
    let applied = f.s.applied(&activation);
    let err = f.engine.process(&applied, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "activation action '{}' has no verified execution outcome",
            activation.action_id
        )
    );
    let observed = activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned();
    let err = f
        .engine
        .record_activation_outcome(&activation, &f.binding(), &observed, &d("seen"))
        .unwrap_err();
    assert!(
        matches!(
            err,
            OutcomeError::ClaimRequired {
                effect: GuardEffect::Activation,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "activation action '{}' has no durable claim",
            activation.action_id
        )
    );
    // Claimed by one handle, observed by another (of this or any process) before the expiry.
    let host = f.s.host_descriptor.clone();
    f.engine
        .authorize_activation(&activation, &f.binding(), &host)
        .unwrap();
    let other = Engine::open(f.journal.clone(), options(&f.clock)).unwrap();
    let before = f.clock.now().unwrap();
    let expiry = UtcMicros::parse(activation.expires_at.as_deref().unwrap()).unwrap();
    f.clock.set(expiry);
    let err = other
        .record_activation_outcome(&activation, &f.binding(), &observed, &d("seen"))
        .unwrap_err();
    assert!(matches!(err, OutcomeError::Expired { .. }), "{err}");
    f.clock.set(before);
    other
        .record_activation_outcome(&activation, &f.binding(), &observed, &d("seen"))
        .unwrap();
    assert!(
        f.engine
            .activation_execution_status(&activation)
            .unwrap()
            .outcome_recorded
    );
}

// ------------------------------------------------------------------------------------------------
// The effects projection on its own
// ------------------------------------------------------------------------------------------------

/// A claim record for `action` with consistent digests (the anchors are placeholders: the
/// effects projection cannot check them against the engine stream, by design).
fn claim_for(
    action: &HostAction,
    claimed_at: &str,
    binding: &InstallExecutionBinding,
) -> ClaimRecord {
    let mut c = ClaimRecord {
        format_version: EFFECT_FORMAT_VERSION,
        stream_key: action.scope.stream_key(),
        action_id: action.action_id.clone(),
        action_kind: action.kind.as_str().into(),
        action_content_digest: action.content_digest(),
        precondition_revision: action.precondition_revision,
        action_json: action.to_cj(),
        issuing_record_digest: d("issuing"),
        claimed_head_revision: action.precondition_revision,
        claimed_head_record_digest: d("head"),
        claimed_head_state_digest: d("head-state"),
        action_expires_at: action.expires_at.clone().unwrap(),
        claimed_at: claimed_at.into(),
        authorization_digest: d("authorization"),
        execution_binding_json: binding.to_json_text(),
        execution_binding_digest: binding.binding_digest(),
        claim_digest: String::new(),
    };
    c.claim_digest = c.compute_digest(GuardEffect::Install);
    c
}

fn outcome_for(claim: &ClaimRecord, material: &str, observed_at: &str) -> OutcomeRecord {
    let mut o = OutcomeRecord {
        format_version: EFFECT_FORMAT_VERSION,
        stream_key: claim.stream_key.clone(),
        action_id: claim.action_id.clone(),
        action_content_digest: claim.action_content_digest.clone(),
        claim_digest: claim.claim_digest.clone(),
        execution_binding_digest: claim.execution_binding_digest.clone(),
        outcome: GuardMode::Applied,
        observed_material_identity_digest: Some(material.into()),
        verification_digest: d("verification"),
        observed_at: observed_at.into(),
        outcome_digest: String::new(),
    };
    o.outcome_digest = o.compute_digest(GuardEffect::Install);
    o
}

fn at(text: &str) -> Timestamp {
    Timestamp(UtcMicros::parse(text).unwrap().0)
}

/// An engine record of `event` carrying `guard`; the effects projection reads the archive and the
/// reducer event of its replay input, so the transition text is a placeholder.
fn receipt_record(guard: SettlementGuard, event: &EngineEvent) -> Vec<u8> {
    EngineRecord {
        replay_json: testkit::input(event, None).to_cj(),
        settlement_guard: Some(guard),
        ..sample_record()
    }
    .encode()
    .unwrap()
}

fn append_one(
    j: &Journal,
    stream: StreamId,
    expected: ExpectedRevision,
    id: &str,
    kind: &str,
    time: Timestamp,
    payload: Vec<u8>,
) -> Result<(), AppendError> {
    j.append(StreamAppend::new(
        stream,
        expected,
        vec![NewRecord::new(id, kind, time, payload)],
    ))
    .map(|_| ())
}

fn code_of(e: &AppendError) -> Option<&'static str> {
    match e {
        AppendError::Hook { code, .. } => *code,
        _ => None,
    }
}

#[test]
fn the_effects_projection_alone_refuses_what_the_protocol_forbids() {
    let mut source = fixture();
    let install = source.pending_install();
    let (binding, material) = (source.binding(), source.material_digest());
    let claimed_at = source.s.now.render();
    let observed_at = source.s.now.checked_add(5_000_000).unwrap().render();
    let claim = claim_for(&install, &claimed_at, &binding);
    let outcome = outcome_for(&claim, &material, &observed_at);
    let key = claim.stream_key.clone();
    let effect = effect_stream(GuardEffect::Install, &key, &install.action_id).unwrap();
    let engine = source.stream();
    let guard = |mode, outcome: Option<&str>| SettlementGuard {
        effect: GuardEffect::Install,
        action_id: install.action_id.clone(),
        action_content_digest: install.content_digest(),
        mode,
        execution_outcome_digest: outcome.map(str::to_owned),
    };
    let applied = source.s.applied(&install);
    let failed = source.s.failed(&install);
    let expired = source.s.expired(&install);
    let turn = source.s.empty(EventKind::TurnEnded);
    let receipt_of = |j: &Journal, id: &str, g: SettlementGuard, event: &EngineEvent| {
        append_one(
            j,
            engine,
            ExpectedRevision::Any,
            id,
            ENGINE_RECORD_KIND,
            Timestamp(0),
            receipt_record(g, event),
        )
    };
    let receipt = |j: &Journal, id: &str, g: SettlementGuard| {
        let event = match g.mode {
            GuardMode::Applied => &applied,
            GuardMode::Failed | GuardMode::Indeterminate => &failed,
            GuardMode::Expired => &expired,
        };
        receipt_of(j, id, g, event)
    };
    let outcome_digest = outcome.outcome_digest.as_str();

    // Only the effects projection is attached: it must stand alone.
    let dir = tempfile::tempdir().unwrap();
    let j = open_journal(&dir);
    let p = Projections::attach(&j, vec![Arc::new(super::effects::EffectsProjection)]).unwrap();

    // An outcome without a claim (revision 1 of the effect stream is not a claim).
    append_one(
        &j,
        effect,
        ExpectedRevision::NoStream,
        "filler",
        "test",
        Timestamp(0),
        vec![],
    )
    .unwrap();
    let err = append_one(
        &j,
        effect,
        ExpectedRevision::Exact(1),
        &outcome_event_id(GuardEffect::Install, &effect),
        INSTALL_OUTCOME_KIND,
        at(&observed_at),
        crate::archive::to_bytes(&outcome).unwrap(),
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some("install-outcome-required"), "{err}");
    // A settling receipt without a claim.
    let err = receipt(&j, "ev-r1", guard(GuardMode::Applied, Some(outcome_digest))).unwrap_err();
    assert_eq!(code_of(&err), Some("install-claim-required"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let j = open_journal(&dir);
    let p2 = Projections::attach(&j, vec![Arc::new(super::effects::EffectsProjection)]).unwrap();
    // A claim whose digest does not match its fields.
    let mut forged = claim.clone();
    forged.authorization_digest = d("forged");
    let claim_id = claim_event_id(GuardEffect::Install, &effect);
    let err = append_one(
        &j,
        effect,
        ExpectedRevision::NoStream,
        &claim_id,
        INSTALL_CLAIM_KIND,
        at(&claimed_at),
        crate::archive::to_bytes(&forged).unwrap(),
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some(codes::EFFECT_RECORD_INVALID), "{err}");
    append_one(
        &j,
        effect,
        ExpectedRevision::NoStream,
        &claim_id,
        INSTALL_CLAIM_KIND,
        at(&claimed_at),
        crate::archive::to_bytes(&claim).unwrap(),
    )
    .unwrap();
    // Settling before the outcome exists; expiring a claimed action.
    let err = receipt(&j, "ev-r2", guard(GuardMode::Applied, Some(outcome_digest))).unwrap_err();
    assert_eq!(code_of(&err), Some("install-outcome-required"), "{err}");
    let err = receipt(&j, "ev-r3", guard(GuardMode::Expired, None)).unwrap_err();
    assert_eq!(code_of(&err), Some("install-already-claimed"), "{err}");
    append_one(
        &j,
        effect,
        ExpectedRevision::Exact(1),
        &outcome_event_id(GuardEffect::Install, &effect),
        INSTALL_OUTCOME_KIND,
        at(&observed_at),
        crate::archive::to_bytes(&outcome).unwrap(),
    )
    .unwrap();
    // A guard on a record that is not this action's receipt settles nothing.
    let err = receipt_of(
        &j,
        "ev-smuggled",
        guard(GuardMode::Applied, Some(outcome_digest)),
        &turn,
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some("install-authority-corrupt"), "{err}");
    // A guard that disagrees with the outcome.
    let err = receipt(&j, "ev-r4", guard(GuardMode::Failed, Some(outcome_digest))).unwrap_err();
    assert_eq!(code_of(&err), Some("install-outcome-conflict"), "{err}");
    // Settled exactly once.
    receipt(&j, "ev-r5", guard(GuardMode::Applied, Some(outcome_digest))).unwrap();
    let err = receipt(&j, "ev-r6", guard(GuardMode::Applied, Some(outcome_digest))).unwrap_err();
    assert_eq!(code_of(&err), Some("install-claim-settled"), "{err}");
    assert_eq!(count(&j, INSTALL_SETTLEMENTS_TABLE), 1);
    let settlement = j
        .projection_get(
            INSTALL_SETTLEMENTS_TABLE,
            &effect_key(&engine, &install.action_id),
            |v| crate::archive::from_bytes::<SettlementEntry>(v.unwrap()).unwrap(),
        )
        .unwrap();
    assert_eq!(settlement.receipt_event_id, "ev-r5");
    assert_eq!(
        settlement.settlement_digest,
        settlement.compute_digest(GuardEffect::Install, &key, &install.action_id)
    );
    assert!(p2.check(ENGINE_EFFECTS_PROJECTION).unwrap().is_equal());

    // An indeterminate outcome carries no material, and settles once, only by ActionFailed, as
    // failed.
    let dir = tempfile::tempdir().unwrap();
    let j = open_journal(&dir);
    let p3 = Projections::attach(&j, vec![Arc::new(super::effects::EffectsProjection)]).unwrap();
    append_one(
        &j,
        effect,
        ExpectedRevision::NoStream,
        &claim_id,
        INSTALL_CLAIM_KIND,
        at(&claimed_at),
        crate::archive::to_bytes(&claim).unwrap(),
    )
    .unwrap();
    let mut unsure = outcome.clone();
    unsure.outcome = GuardMode::Indeterminate;
    unsure.observed_material_identity_digest = None;
    unsure.outcome_digest = unsure.compute_digest(GuardEffect::Install);
    assert_ne!(unsure.outcome_digest, {
        let mut failed = unsure.clone();
        failed.outcome = GuardMode::Failed;
        failed.compute_digest(GuardEffect::Install)
    });
    let mut carrying = unsure.clone();
    carrying.observed_material_identity_digest = Some(material.clone());
    carrying.outcome_digest = carrying.compute_digest(GuardEffect::Install);
    let outcome_id = outcome_event_id(GuardEffect::Install, &effect);
    let append_outcome = |o: &OutcomeRecord| {
        append_one(
            &j,
            effect,
            ExpectedRevision::Exact(1),
            &outcome_id,
            INSTALL_OUTCOME_KIND,
            at(&observed_at),
            crate::archive::to_bytes(o).unwrap(),
        )
    };
    let err = append_outcome(&carrying).unwrap_err();
    assert_eq!(code_of(&err), Some(codes::EFFECT_RECORD_INVALID), "{err}");
    append_outcome(&unsure).unwrap();
    let unsure_digest = unsure.outcome_digest.as_str();
    let err = receipt_of(
        &j,
        "ev-i1",
        guard(GuardMode::Indeterminate, Some(unsure_digest)),
        &applied,
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some("install-authority-corrupt"), "{err}");
    let err = receipt(&j, "ev-i2", guard(GuardMode::Failed, Some(unsure_digest))).unwrap_err();
    assert_eq!(code_of(&err), Some("install-outcome-conflict"), "{err}");
    receipt(
        &j,
        "ev-i3",
        guard(GuardMode::Indeterminate, Some(unsure_digest)),
    )
    .unwrap();
    let err = receipt(
        &j,
        "ev-i4",
        guard(GuardMode::Indeterminate, Some(unsure_digest)),
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some("install-claim-settled"), "{err}");
    let settlement = j
        .projection_get(
            INSTALL_SETTLEMENTS_TABLE,
            &effect_key(&engine, &install.action_id),
            |v| crate::archive::from_bytes::<SettlementEntry>(v.unwrap()).unwrap(),
        )
        .unwrap();
    assert_eq!(
        (settlement.outcome, settlement.from_indeterminate),
        (GuardMode::Failed, true)
    );
    assert_eq!(settlement.receipt_event_id, "ev-i3");
    let digest = settlement.compute_digest(GuardEffect::Install, &key, &install.action_id);
    assert_eq!(settlement.settlement_digest, digest);
    // The fact that it came from an indeterminate outcome is bound by the digest.
    let plain = SettlementEntry {
        from_indeterminate: false,
        ..settlement.clone()
    };
    assert_ne!(
        plain.compute_digest(GuardEffect::Install, &key, &install.action_id),
        digest
    );
    assert!(p3.check(ENGINE_EFFECTS_PROJECTION).unwrap().is_equal());
    drop(p);
}

// ------------------------------------------------------------------------------------------------
// Benefit audit
// ------------------------------------------------------------------------------------------------

fn benefit_result(limit: i64) -> Json {
    let mut fields = ctx_model::JsonMap::new();
    fields.insert("abstention_code".into(), Json::str("below-net-benefit"));
    fields.insert("assessments".into(), Json::Arr(vec![]));
    fields.insert("candidate_pool_count".into(), Json::Int(0));
    fields.insert("policy_digest".into(), Json::str(d("benefit-policy")));
    fields.insert("requested_limit".into(), Json::Int(limit));
    fields.insert(
        "schema".into(),
        Json::str(ctx_model::BENEFIT_RESULT_SCHEMA_ID),
    );
    fields.insert("search_evaluation_count".into(), Json::Int(0));
    fields.insert("selections".into(), Json::Arr(vec![]));
    let digest = cja_digest(&Json::Obj(fields.clone()));
    fields.insert("result_digest".into(), Json::str(digest));
    Json::Obj(fields)
}

#[test]
fn benefit_results_are_stored_once_and_loaded_revalidated() {
    let f = fixture();
    let result = benefit_result(3);
    let digest = f.engine.store_benefit_result(&result).unwrap();
    assert_eq!(Some(digest.as_str()), result.get_str("result_digest"));
    let position = f.journal.head_position().unwrap();
    f.clock.advance(5_000_000);
    assert_eq!(f.engine.store_benefit_result(&result).unwrap(), digest);
    assert_eq!(f.journal.head_position().unwrap(), position);
    assert_eq!(f.engine.load_benefit_result(&digest).unwrap(), result);
    assert!(matches!(
        f.engine.load_benefit_result(&d("absent")).unwrap_err(),
        BenefitAuditError::NotFound { .. }
    ));
    assert!(matches!(
        f.engine.load_benefit_result("ABC").unwrap_err(),
        BenefitAuditError::Invalid(_)
    ));
    // A result whose digest does not match its fields is refused before any write.
    let mut forged = result.clone();
    if let Json::Obj(m) = &mut forged {
        m.insert("requested_limit".into(), Json::Int(4));
    }
    let err = f.engine.store_benefit_result(&forged).unwrap_err();
    assert_eq!(
        err.to_string(),
        "result_digest does not match canonical result fields"
    );
    // A second record on the digest's stream is refused by the projection.
    let err = append_one(
        &f.journal,
        benefit_stream(&digest).unwrap(),
        ExpectedRevision::Any,
        "benefit-again",
        BENEFIT_RESULT_KIND,
        Timestamp(0),
        result.to_cja().into_bytes(),
    )
    .unwrap_err();
    assert_eq!(code_of(&err), Some(codes::BENEFIT_RESULT_INVALID), "{err}");
    f.engine.store_benefit_result(&benefit_result(1)).unwrap();
    assert_eq!(count(&f.journal, BENEFIT_RESULTS_TABLE), 2);
    assert_eq!(f.journal.head_position().unwrap(), position + 1);
    check_all(&f.engine);
}

// ------------------------------------------------------------------------------------------------
// The whole lifecycle
// ------------------------------------------------------------------------------------------------

#[test]
fn the_seed_lifecycle_settles_every_effect_once_and_every_projection_rebuilds_equal() {
    let mut f = fixture();
    let activation = f.installed();
    let binding = f.binding();
    let host = f.s.host_descriptor.clone();
    f.engine
        .authorize_activation(&activation, &binding, &host)
        .unwrap();
    f.clock.advance(1_000_000);
    let observed = activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned();
    let guard = f
        .engine
        .record_activation_outcome(&activation, &binding, &observed, &d("seen"))
        .unwrap();
    let status = f.engine.activation_execution_status(&activation).unwrap();
    f.s.now = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
    let receipt = f.s.applied(&activation);
    let t = f
        .engine
        .process_activation_receipt(&receipt, &guard)
        .unwrap();
    f.s.revision = t.to_revision;
    f.engine.store_benefit_result(&benefit_result(2)).unwrap();
    f.empty(EventKind::SessionEnded);
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 1);
    assert_eq!(count(&f.journal, ACTIVATION_SETTLEMENTS_TABLE), 1);
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    check_all(&f.engine);
    // A fresh engine on the same directory attaches without replaying anything.
    let Fixture {
        dir,
        journal,
        engine,
        s,
        ..
    } = f;
    let revision = engine.snapshot(&s.scope).unwrap().revision();
    drop(engine);
    drop(journal);
    let journal = open_journal(&dir);
    let clock = Arc::new(ManualClock::new(s.now));
    let engine = Engine::open(journal, options(&clock)).unwrap();
    assert!(
        engine
            .projections()
            .attached()
            .iter()
            .all(|(_, r)| *r == crate::framework::AttachReport::Fresh)
    );
    assert_eq!(engine.snapshot(&s.scope).unwrap().revision(), revision);
    check_all(&engine);
}

#[test]
fn catalog_loaded_material_activates_without_an_install() {
    // Deviation from the reference's caveat 3: a load row needs no install lower bound.
    let mut f = fixture();
    f.row = testkit::row(RowKind::Load, "skill", "loaded");
    f.start();
    f.plan();
    let (row, cap) = (f.row.clone(), f.cap());
    let e = f.s.desired("owner-1", std::slice::from_ref(&row), &[&cap]);
    let t = f.commit(&e, None);
    assert_eq!(t.actions[0].kind, ActionKind::ActivateCapability);
    let activation = t.actions[0].clone();
    let host = f.s.host_descriptor.clone();
    f.engine
        .authorize_activation(&activation, &f.binding(), &host)
        .unwrap();
    let observed = activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned();
    let guard = f
        .engine
        .record_activation_outcome(&activation, &f.binding(), &observed, &d("seen"))
        .unwrap();
    let status = f.engine.activation_execution_status(&activation).unwrap();
    f.s.now = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
    let receipt = f.s.applied(&activation);
    f.engine
        .process_activation_receipt(&receipt, &guard)
        .unwrap();
    let state = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    assert!(state.capability(&cap).unwrap().is_active());
    assert_eq!(count(&f.journal, INSTALL_CLAIMS_TABLE), 0);
    check_all(&f.engine);
}

// ------------------------------------------------------------------------------------------------
// process_with: extra records and staged benefit results in the event's own append
// ------------------------------------------------------------------------------------------------

fn extra_append(event_id: &str, payload: &str) -> StreamAppend {
    StreamAppend::new(
        StreamId::derive("test", b"extra").unwrap(),
        ExpectedRevision::NoStream,
        vec![NewRecord::new(
            event_id,
            "test",
            Timestamp(0),
            payload.as_bytes().to_vec(),
        )],
    )
}

#[test]
fn process_with_commits_extras_in_the_event_append_and_converges_on_retry() {
    let mut f = fixture();
    f.start();
    let ev = f.s.empty(EventKind::TurnEnded);
    let position = f.journal.head_position().unwrap();
    let mut predicted = None;
    let t = f
        .engine
        .process_with(&ev, None, |pending| {
            assert!(!pending.is_replayed());
            assert_eq!(pending.revision(), 2);
            predicted = Some((pending.stream(), pending.record_digest()));
            Ok::<_, String>(vec![extra_append(
                "extra-1",
                &pending.record_digest().to_hex(),
            )])
        })
        .unwrap();
    assert_eq!(t.to_revision, 2);
    assert_eq!(f.journal.head_position().unwrap(), position + 2);
    // The digest named before the append is the one the journal assigned (formula D).
    let (stream, digest) = predicted.unwrap();
    assert_eq!(
        f.journal.stream_head(&stream).unwrap().unwrap().digest,
        digest
    );
    // An exact retry replays the event and its identical extras: nothing is written.
    let again = f
        .engine
        .process_with(&ev, None, |pending| {
            assert!(pending.is_replayed());
            assert_eq!(pending.record_digest(), digest);
            Ok::<_, String>(vec![extra_append("extra-1", &digest.to_hex())])
        })
        .unwrap();
    assert_eq!(again, t);
    assert_eq!(f.journal.head_position().unwrap(), position + 2);
    // Other extra content under the same event id is a conflict.
    let err = f
        .engine
        .process_with(&ev, None, |_| {
            Ok::<_, String>(vec![extra_append("extra-1", "other")])
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProcessWithError::ExtrasAppend(AppendError::Conflict { .. })
        ),
        "{err}"
    );
    check_all(&f.engine);
}

#[test]
fn a_refused_extra_or_builder_commits_nothing_of_the_event() {
    let mut f = fixture();
    f.start();
    f.journal.append(extra_append("taken", "first")).unwrap();
    let ev = f.s.empty(EventKind::TurnEnded);
    let position = f.journal.head_position().unwrap();
    let err = f
        .engine
        .process_with(&ev, None, |_| {
            Ok::<_, String>(vec![extra_append("taken", "second")])
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProcessWithError::ExtrasAppend(AppendError::Conflict { .. })
        ),
        "{err}"
    );
    let err = f
        .engine
        .process_with(&ev, None, |_| {
            Err::<Vec<StreamAppend>, _>("refused".to_owned())
        })
        .unwrap_err();
    assert!(matches!(&err, ProcessWithError::Extras(m) if m == "refused"));
    assert_eq!(f.journal.head_position().unwrap(), position);
    assert_eq!(f.engine.snapshot(&f.s.scope).unwrap().revision(), 1);
    // Without the refused extra the event commits.
    assert_eq!(f.engine.process(&ev, None).unwrap().to_revision, 2);
}

/// A planner that stores a benefit result through the engine, as the service's audit sink does.
struct StoringPlanner {
    engine: std::sync::OnceLock<std::sync::Weak<Engine>>,
    row: Json,
    fail: bool,
}

impl DecisionPlanner for StoringPlanner {
    fn plan(
        &self,
        _: Option<&Surrogate>,
        _: Option<&ctx_model::EngineState>,
        _: &PlanningContext<'_>,
    ) -> Result<Surrogate, SeamError> {
        let engine = self
            .engine
            .get()
            .and_then(std::sync::Weak::upgrade)
            .unwrap();
        engine.store_benefit_result(&benefit_result(7)).unwrap();
        // Storing the same result twice in one run stages it once.
        engine.store_benefit_result(&benefit_result(7)).unwrap();
        if self.fail {
            return Err(SeamError("planning failed".into()));
        }
        Ok(testkit::decision(vec![self.row.clone()]))
    }
}

#[test]
fn a_benefit_result_stored_while_planning_commits_with_the_planning_event() {
    for fail in [true, false] {
        let mut f = fixture();
        let planner = Arc::new(StoringPlanner {
            engine: std::sync::OnceLock::new(),
            row: f.row.clone(),
            fail,
        });
        let engine = Arc::new(
            Engine::open(
                f.journal.clone(),
                options(&f.clock).planner(planner.clone()),
            )
            .unwrap(),
        );
        planner.engine.set(Arc::downgrade(&engine)).unwrap();
        let started = f.s.started("managing");
        f.s.revision = engine.process(&started, None).unwrap().to_revision;
        let mut intent = f.s.intent();
        intent.payload = Json::object([(
            "observation_ref",
            Json::object([
                ("content_digest", Json::str(d("observation"))),
                ("opaque_id", Json::str("work-1")),
                ("provider_id", Json::str("host-1")),
            ]),
        )]);
        let position = f.journal.head_position().unwrap();
        let digest = benefit_result(7)
            .get_str("result_digest")
            .unwrap()
            .to_owned();
        let outcome = engine.process(&intent, None);
        if fail {
            // A failed planning run stores nothing, its benefit result included.
            assert!(outcome.is_err());
            assert_eq!(f.journal.head_position().unwrap(), position);
            assert!(matches!(
                engine.load_benefit_result(&digest).unwrap_err(),
                BenefitAuditError::NotFound { .. }
            ));
        } else {
            outcome.unwrap();
            // The engine record and the benefit result: two records of one append.
            assert_eq!(f.journal.head_position().unwrap(), position + 2);
            assert_eq!(
                engine.load_benefit_result(&digest).unwrap(),
                benefit_result(7)
            );
            // Outside planning the result is stored (here: found) directly again.
            assert_eq!(
                engine.store_benefit_result(&benefit_result(7)).unwrap(),
                digest
            );
        }
    }
}

#[test]
fn an_outcome_and_its_receipt_commit_together_or_not_at_all() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    let material = f.material_digest();
    let binding = f.binding();
    let head = f.engine.journal().head_position().unwrap();
    // A receipt at a stale revision is refused, and its outcome is not recorded either.
    let mut stale = f.s.applied(&install);
    stale.expected_revision -= 1;
    let err = f
        .engine
        .record_install_outcome_and_receipt(
            &install,
            &binding,
            InstallOutcome::Applied,
            Some(&material),
            &d("verification"),
            |_, observed_at| {
                stale.occurred_at = observed_at.to_owned();
                stale.clone()
            },
        )
        .unwrap_err();
    assert!(
        matches!(&err, OutcomeError::Receipt(e) if matches!(**e, ProcessError::RevisionConflict { .. })),
        "{err:?}"
    );
    assert_eq!(f.engine.journal().head_position().unwrap(), head);
    assert!(
        !f.engine
            .install_execution_status(&install)
            .unwrap()
            .outcome_recorded
    );
    // At the head revision both records land: the outcome, then the receipt that settles it.
    let mut receipt = f.s.applied(&install);
    let (guard, transition) = f
        .engine
        .record_install_outcome_and_receipt(
            &install,
            &binding,
            InstallOutcome::Applied,
            Some(&material),
            &d("verification"),
            |guard, observed_at| {
                receipt.event_id = format!("receipt-{}", guard.execution_outcome_digest());
                receipt.occurred_at = observed_at.to_owned();
                receipt.clone()
            },
        )
        .unwrap();
    let transition = transition.unwrap();
    assert_eq!(transition.actions[0].kind, ActionKind::ActivateCapability);
    assert_eq!(f.engine.journal().head_position().unwrap(), head + 2);
    let status = f.engine.install_execution_status(&install).unwrap();
    assert!(status.settled);
    assert_eq!(status.outcome, Some(InstallOutcome::Applied));
    assert_eq!(
        status.outcome_digest.as_deref(),
        Some(guard.execution_outcome_digest())
    );
    // Settled: neither half can be recorded again.
    let again = f.engine.record_install_outcome_and_receipt(
        &install,
        &binding,
        InstallOutcome::Applied,
        Some(&material),
        &d("verification"),
        |_, _| receipt.clone(),
    );
    assert!(
        matches!(again, Err(OutcomeError::Settled { .. })),
        "{again:?}"
    );
    check_all(&f.engine);
}

// ------------------------------------------------------------------------------------------------
// Summary heads of terminal streams (spec/engine-store.md §3)
// ------------------------------------------------------------------------------------------------

/// The stored head value of `stream`, as bytes.
fn head_value(journal: &Journal, stream: &StreamId) -> Vec<u8> {
    journal
        .projection_get(HEADS_TABLE, stream.as_bytes(), |v| v.map(<[u8]>::to_vec))
        .unwrap()
        .unwrap()
}

/// Overwrites the stored head value of `stream`.
fn put_head_value(journal: &Journal, stream: &StreamId, value: &[u8]) {
    journal
        .maintain(|tx| {
            tx.insert(HEADS_TABLE, stream.as_bytes(), value)
                .map(|()| ((), true))
                .map_err(ctx_journal::HookError::from)
        })
        .unwrap();
}

impl Fixture {
    /// A catalog-loaded capability activated and settled: the head is revision 4.
    fn active_loaded(&mut self) -> String {
        self.row = testkit::row(RowKind::Load, "skill", "loaded");
        self.start();
        self.plan();
        let (row, cap) = (self.row.clone(), self.cap());
        let e = self
            .s
            .desired("owner-1", std::slice::from_ref(&row), &[&cap]);
        let t = self.commit(&e, None);
        let activation = t.actions[0].clone();
        let host = self.s.host_descriptor.clone();
        self.engine
            .authorize_activation(&activation, &self.binding(), &host)
            .unwrap();
        let observed = activation
            .payload
            .get("material_identity")
            .and_then(|m| m.get_str("identity_digest"))
            .unwrap()
            .to_owned();
        let guard = self
            .engine
            .record_activation_outcome(&activation, &self.binding(), &observed, &d("seen"))
            .unwrap();
        let status = self
            .engine
            .activation_execution_status(&activation)
            .unwrap();
        self.s.now = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
        let receipt = self.s.applied(&activation);
        let t = self
            .engine
            .process_activation_receipt(&receipt, &guard)
            .unwrap();
        self.s.revision = t.to_revision;
        cap
    }

    fn stored(&self) -> StoredHead {
        StoredHead::decode(&head_value(&self.journal, &self.stream())).unwrap()
    }
}

#[test]
fn summary_heads_have_a_fixed_little_endian_layout() {
    let summary = HeadSummary {
        revision: 0x0102_0304_0506_0708,
        head_record_digest: [0xAA; 32],
        head_position: 9,
        first_position: 3,
        state_digest: [0x55; 32],
    };
    let bytes = summary.encode();
    assert_eq!(bytes.len(), HEAD_SUMMARY_BYTES);
    assert_eq!(&bytes[0..4], b"EHS1");
    assert_eq!(&bytes[4..12], &[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(&bytes[12..44], &[0xAA; 32]);
    assert_eq!(&bytes[44..52], &9u64.to_le_bytes());
    assert_eq!(&bytes[52..60], &3u64.to_le_bytes());
    assert_eq!(&bytes[60..92], &[0x55; 32]);
    assert_eq!(
        StoredHead::decode(&bytes).unwrap(),
        StoredHead::Summary(summary)
    );
    assert_eq!(
        StoredHead::decode(&bytes[..91]),
        Err(HeadValueError::SummaryLength { len: 91 })
    );
    assert_eq!(
        StoredHead::decode(b"EHX1rest"),
        Err(HeadValueError::Tag { found: *b"EHX1" })
    );
    assert_eq!(
        StoredHead::decode(b"EH"),
        Err(HeadValueError::Short { len: 2 })
    );
    // A full head's tag followed by garbage is an archive error, never a panic.
    assert!(matches!(
        StoredHead::decode(b"EHF1 not an archive"),
        Err(HeadValueError::Archive(_))
    ));
}

#[test]
fn an_ended_stream_keeps_a_summary_head_and_its_state_is_replayed_on_read() {
    let mut f = fixture();
    f.start();
    f.plan();
    assert!(matches!(f.stored(), StoredHead::Full(_)));
    f.empty(EventKind::SessionEnded);
    let value = head_value(&f.journal, &f.stream());
    assert_eq!(value.len(), HEAD_SUMMARY_BYTES);
    let StoredHead::Summary(summary) = f.stored() else {
        panic!("an ended stream without pending effects keeps a summary head");
    };
    assert_eq!(summary.revision, 3);
    let head = f.journal.stream_head(&f.stream()).unwrap().unwrap();
    assert_eq!(summary.head_position, head.position);
    assert_eq!(Digest::from_bytes(summary.head_record_digest), head.digest);
    // The snapshot replays the stream: the state is the one the records name.
    let snapshot = f.engine.snapshot(&f.s.scope).unwrap();
    assert_eq!(snapshot.revision(), 3);
    assert_eq!(snapshot.head_record_digest(), Some(head.digest));
    let state = snapshot.into_state().unwrap();
    assert!(is_terminal(&state));
    assert_eq!(
        ctx_model::parse_sha(&state.digest()),
        Some(summary.state_digest)
    );
    assert_eq!(f.engine.state_at(&f.s.scope, 3).unwrap(), Some(state));
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    check_all(&f.engine);
}

#[test]
fn every_ended_stream_stores_exactly_the_fixed_summary_size() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open_journal(&dir);
    let first = Session::new("bounded-0");
    let clock = Arc::new(ManualClock::new(first.now));
    let engine = Engine::open(journal.clone(), options(&clock)).unwrap();
    let mut streams = Vec::new();
    for i in 0..6 {
        let mut s = Session::new(&format!("bounded-{i}"));
        for kind in [
            None,
            Some(EventKind::TurnStarting),
            Some(EventKind::TurnEnded),
            Some(EventKind::SessionEnded),
        ] {
            let e = match kind {
                None => s.started("managing"),
                Some(k) => s.empty(k),
            };
            s.revision = engine.process(&e, None).unwrap().to_revision;
        }
        streams.push(engine_stream(&s.scope).unwrap());
    }
    let mut values = Vec::new();
    journal
        .projection_scan(HEADS_TABLE, |_, v| {
            values.push(v.len());
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(values, vec![HEAD_SUMMARY_BYTES; streams.len()]);
    check_all(&engine);
}

#[test]
fn a_record_after_the_summary_applies_from_the_replayed_state() {
    // What can follow a terminal head: the recovery `ReassessmentRequested` of a failed
    // deactivation (the reducer refuses receipts of unknown actions and every other kind).
    let mut f = fixture();
    let cap = f.active_loaded();
    let t = f.empty(EventKind::SessionEnded);
    assert_eq!(t.actions[0].kind, ActionKind::DeactivateCapability);
    // A pending deactivation: the stream is ended but not terminal.
    assert!(matches!(f.stored(), StoredHead::Full(_)));
    let deactivate = t.actions[0].clone();
    let e = f.s.failed(&deactivate);
    f.commit(&e, None);
    let StoredHead::Summary(summary) = f.stored() else {
        panic!("a failed deactivation leaves nothing pending");
    };
    let state = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    assert!(state.blocked_deactivation_ids.contains(&cap));
    assert!(state.capability(&cap).unwrap().is_active());
    // The retry is reduced over the state replayed from the journal, by the engine and by the
    // projection's apply alike.
    let e = f.s.event(
        EventKind::ReassessmentRequested,
        Json::object([(
            "retry_failed_deactivations",
            Json::Arr(vec![Json::str(&cap)]),
        )]),
    );
    let t = f.commit(&e, None);
    assert_eq!(t.to_revision, summary.revision + 1);
    assert_eq!(t.actions[0].kind, ActionKind::DeactivateCapability);
    let StoredHead::Full(full) = f.stored() else {
        panic!("a pending deactivation needs the whole state");
    };
    assert_eq!(full.first_position, summary.first_position);
    let e = f.s.applied(&t.actions[0]);
    f.commit(&e, None);
    assert_eq!(
        head_value(&f.journal, &f.stream()).len(),
        HEAD_SUMMARY_BYTES
    );
    let state = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    assert!(state.active_capability_ids().is_empty());
    assert!(f.engine.replay_audit(&f.s.scope).unwrap().is_clean());
    // The rebuild folds the same summaries, replays included, byte for byte.
    check_all(&f.engine);
    // And a fresh handle on the reopened journal reads the same.
    let f = reopen(f);
    let again = f.engine.snapshot(&f.s.scope).unwrap().into_state().unwrap();
    assert_eq!(again, state);
}

#[test]
fn a_tampered_summary_is_reported_on_read_audit_and_check() {
    let mut f = fixture();
    f.start();
    f.empty(EventKind::SessionEnded);
    let stream = f.stream();
    let original = head_value(&f.journal, &stream);
    let mut forged = original.clone();
    forged[HEAD_SUMMARY_BYTES - 1] ^= 1;
    put_head_value(&f.journal, &stream, &forged);
    match f.engine.snapshot(&f.s.scope) {
        Err(SnapshotError::Store(StoreError::HeadSummary {
            stream: named,
            revision,
            detail,
        })) => {
            assert_eq!(named, stream);
            assert_eq!(revision, 2);
            assert!(detail.contains("state digest"), "{detail}");
        }
        other => panic!("a forged summary must not read: {other:?}"),
    }
    let report = f.engine.replay_audit(&f.s.scope).unwrap();
    let divergence = report.divergence().unwrap();
    assert_eq!(divergence.component, AuditComponent::Head);
    assert_eq!(divergence.stream, stream);
    let check = f
        .engine
        .projections()
        .check(ENGINE_STATE_PROJECTION)
        .unwrap();
    assert!(!check.is_equal());
    // A summary naming another head record is caught the same way.
    let mut summary = HeadSummary::decode(&original).unwrap();
    summary.head_position += 1;
    put_head_value(&f.journal, &stream, &summary.encode());
    assert!(matches!(
        f.engine.snapshot(&f.s.scope),
        Err(SnapshotError::Store(StoreError::HeadSummary { .. }))
    ));
    // The rebuild restores it.
    f.engine
        .projections()
        .rebuild(ENGINE_STATE_PROJECTION)
        .unwrap();
    assert_eq!(head_value(&f.journal, &stream), original);
    assert!(f.engine.snapshot(&f.s.scope).unwrap().state().is_some());
}

/// A fixture whose stream ended with a failed deactivation (a summary head at revision 6), and
/// the recovery event that may follow it.
fn ended_with_blocked_deactivation() -> (Fixture, EngineEvent) {
    let mut f = fixture();
    let cap = f.active_loaded();
    let t = f.empty(EventKind::SessionEnded);
    let e = f.s.failed(&t.actions[0]);
    f.commit(&e, None);
    let retry = f.s.event(
        EventKind::ReassessmentRequested,
        Json::object([(
            "retry_failed_deactivations",
            Json::Arr(vec![Json::str(&cap)]),
        )]),
    );
    (f, retry)
}

#[test]
fn a_record_on_a_stream_whose_summary_is_forged_is_refused_by_the_projection() {
    // The same history twice (the engine and the fixtures are deterministic): `honest` commits
    // the recovery record, whose payload is then appended to `f` below a forged summary.
    let (honest, retry) = ended_with_blocked_deactivation();
    let t = honest.engine.process(&retry, None).unwrap();
    let stream = honest.stream();
    let record = honest
        .journal
        .read_stream(&stream, t.to_revision, 1)
        .unwrap()
        .remove(0);
    let (f, retry_again) = ended_with_blocked_deactivation();
    assert_eq!(retry_again, retry);
    let mut summary = HeadSummary::decode(&head_value(&f.journal, &stream)).unwrap();
    assert_eq!(summary.revision + 1, t.to_revision);
    summary.state_digest[0] ^= 1;
    put_head_value(&f.journal, &stream, &summary.encode());
    // The engine's own read refuses first, naming the stream.
    match f.engine.process(&retry, None) {
        Err(ProcessError::Store(StoreError::HeadSummary { stream: named, .. })) => {
            assert_eq!(named, stream);
        }
        other => panic!("a forged summary must refuse the next event: {other:?}"),
    }
    // The projection's apply replays the stream and refuses to build on the forged summary.
    let refused = f
        .journal
        .append(StreamAppend::new(
            stream,
            ExpectedRevision::Exact(summary.revision),
            vec![NewRecord::new(
                record.event_id.clone(),
                ENGINE_RECORD_KIND,
                record.occurred_at,
                record.payload.clone(),
            )],
        ))
        .unwrap_err();
    assert_eq!(code_of(&refused), Some(ENGINE_HEAD_CORRUPT), "{refused}");
    assert!(
        refused.to_string().contains(&stream.to_string()),
        "{refused}"
    );
    // Rebuilt from the journal, the summary is honest again and the same record applies.
    f.engine
        .projections()
        .rebuild(ENGINE_STATE_PROJECTION)
        .unwrap();
    assert_eq!(
        f.engine.process(&retry, None).unwrap().to_revision,
        t.to_revision
    );
    assert_eq!(
        f.journal.stream_head(&stream).unwrap().unwrap().digest,
        record.digest
    );
    check_all(&f.engine);
}

// ------------------------------------------------------------------------------------------------
// Effects entries (spec/engine-store.md §4): position and digest, not the record
// ------------------------------------------------------------------------------------------------

/// Every (key, value) of an effects table.
fn entries(journal: &Journal, table: &'static str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    journal
        .projection_scan(table, |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
    out
}

fn put_entry(journal: &Journal, table: &'static str, key: &[u8], value: &[u8]) {
    journal
        .maintain(|tx| {
            tx.insert(table, key, value)
                .map(|()| ((), true))
                .map_err(ctx_journal::HookError::from)
        })
        .unwrap();
}

#[test]
fn claims_and_outcomes_store_the_fixed_entry_naming_their_record() {
    let mut f = fixture();
    let activation = f.installed();
    let host = f.s.host_descriptor.clone();
    f.engine
        .authorize_activation(&activation, &f.binding(), &host)
        .unwrap();
    let observed = activation
        .payload
        .get("material_identity")
        .and_then(|m| m.get_str("identity_digest"))
        .unwrap()
        .to_owned();
    let guard = f
        .engine
        .record_activation_outcome(&activation, &f.binding(), &observed, &d("seen"))
        .unwrap();
    let status = f.engine.activation_execution_status(&activation).unwrap();
    assert!(status.claimed && status.outcome_recorded && !status.settled);
    f.s.now = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
    let receipt = f.s.applied(&activation);
    f.engine
        .process_activation_receipt(&receipt, &guard)
        .unwrap();
    assert!(
        f.engine
            .activation_execution_status(&activation)
            .unwrap()
            .settled
    );
    for (table, kind, record_kind) in [
        (
            INSTALL_CLAIMS_TABLE,
            EffectEntryKind::Claim,
            INSTALL_CLAIM_KIND,
        ),
        (
            INSTALL_OUTCOMES_TABLE,
            EffectEntryKind::Outcome,
            INSTALL_OUTCOME_KIND,
        ),
        (
            ACTIVATION_CLAIMS_TABLE,
            EffectEntryKind::Claim,
            ACTIVATION_CLAIM_KIND,
        ),
        (
            ACTIVATION_OUTCOMES_TABLE,
            EffectEntryKind::Outcome,
            ACTIVATION_OUTCOME_KIND,
        ),
    ] {
        let stored = entries(&f.journal, table);
        assert_eq!(stored.len(), 1, "{table}");
        let (_, value) = &stored[0];
        assert_eq!(value.len(), EFFECT_ENTRY_BYTES, "{table}");
        let entry = EffectEntry::decode(kind, value).unwrap();
        let record = f
            .journal
            .read_all(entry.position, 1)
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(record.digest, entry.record_digest, "{table}");
        assert_eq!(record.kind, record_kind, "{table}");
    }
    check_all(&f.engine);
}

#[test]
fn a_tampered_effect_entry_is_reported_on_read_apply_and_check() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    f.clock.advance(1_000_000);
    let guard = f
        .outcome(&install, InstallOutcome::Applied, "verification")
        .unwrap();
    let stream = f.stream();
    let [(key, original)] = entries(&f.journal, INSTALL_OUTCOMES_TABLE)
        .try_into()
        .unwrap();
    // The record digest changed in the table.
    let mut forged = original.clone();
    forged[20] ^= 1;
    put_entry(&f.journal, INSTALL_OUTCOMES_TABLE, &key, &forged);
    match f.engine.install_execution_status(&install) {
        Err(StatusError::Store(StoreError::EffectEntry {
            effect: GuardEffect::Install,
            kind: EffectEntryKind::Outcome,
            stream: named,
            action_id,
            source,
        })) if matches!(*source, EffectEntryError::Digest { .. }) => {
            assert_eq!(named, stream);
            assert_eq!(action_id, install.action_id);
        }
        other => panic!("a forged outcome entry must not read: {other:?}"),
    }
    let check = f
        .engine
        .projections()
        .check(ENGINE_EFFECTS_PROJECTION)
        .unwrap();
    assert!(!check.is_equal(), "{check:?}");
    // The receipt's apply fetches the outcome by the forged entry and refuses it.
    let receipt = f.s.applied(&install);
    let err = f
        .engine
        .process_install_receipt(&receipt, &guard)
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!(
            "the install outcome entry of action '{}' on engine stream {stream} is corrupt",
            install.action_id
        )),
        "{err}"
    );
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 0);
    // An entry pointing at another position (its claim) is caught by the digest too.
    let mut moved = EffectEntry::decode(EffectEntryKind::Outcome, &original).unwrap();
    moved.position -= 1;
    put_entry(&f.journal, INSTALL_OUTCOMES_TABLE, &key, &moved.encode());
    assert!(matches!(
        f.engine.install_execution_status(&install),
        Err(StatusError::Store(StoreError::EffectEntry { source, .. }))
            if matches!(*source, EffectEntryError::Digest { .. })
    ));
    // The rebuild restores the entry, and the receipt then settles.
    f.engine
        .projections()
        .rebuild(ENGINE_EFFECTS_PROJECTION)
        .unwrap();
    assert_eq!(
        entries(&f.journal, INSTALL_OUTCOMES_TABLE),
        vec![(key, original)]
    );
    f.engine.process_install_receipt(&receipt, &guard).unwrap();
    assert_eq!(count(&f.journal, INSTALL_SETTLEMENTS_TABLE), 1);
    check_all(&f.engine);
}

#[test]
fn a_claim_entry_copied_from_another_action_is_refused_on_read() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    let [(key, original)] = entries(&f.journal, INSTALL_CLAIMS_TABLE)
        .try_into()
        .unwrap();
    // A genuine claim entry stored under another action's key names a record of another action.
    let mut other_key = key.clone();
    other_key.extend_from_slice(b"-other");
    put_entry(&f.journal, INSTALL_CLAIMS_TABLE, &other_key, &original);
    let (engine_stream, action_id) = super::effect_entry::split_key(&other_key).unwrap();
    let Err(err) = f.engine.effect_state(GuardEffect::Install, &other_key) else {
        panic!("a claim entry of another action must not read");
    };
    match err {
        StoreError::EffectEntry {
            stream,
            action_id: named,
            source,
            ..
        } if matches!(*source, EffectEntryError::OtherAction { .. }) => {
            assert_eq!(stream, engine_stream);
            assert_eq!(named, action_id);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_version_2_effects_table_of_payload_copies_is_rebuilt_as_entries_on_attach() {
    let mut f = fixture();
    let install = f.pending_install();
    f.authorize(&install).unwrap();
    let [(key, entry)] = entries(&f.journal, INSTALL_CLAIMS_TABLE)
        .try_into()
        .unwrap();
    // What version 2 stored: the claim record's payload itself, under a version-2 meta entry.
    let claim = EffectEntry::decode(EffectEntryKind::Claim, &entry).unwrap();
    let payload = f
        .journal
        .read_all(claim.position, 1)
        .unwrap()
        .pop()
        .unwrap()
        .payload;
    put_entry(&f.journal, INSTALL_CLAIMS_TABLE, &key, &payload);
    let meta = f
        .journal
        .projection_get(
            crate::framework::META_TABLE,
            ENGINE_EFFECTS_PROJECTION.as_bytes(),
            |v| v.map(crate::framework::ProjectionMeta::decode),
        )
        .unwrap()
        .unwrap()
        .unwrap();
    let old = crate::framework::ProjectionMeta {
        version: 2,
        checkpoint: meta.checkpoint,
    };
    put_entry(
        &f.journal,
        crate::framework::META_TABLE,
        ENGINE_EFFECTS_PROJECTION.as_bytes(),
        &old.encode(),
    );
    let f = reopen(f);
    assert_eq!(
        entries(&f.journal, INSTALL_CLAIMS_TABLE),
        vec![(key, entry)]
    );
    assert!(f.engine.install_execution_status(&install).unwrap().claimed);
    check_all(&f.engine);
}
