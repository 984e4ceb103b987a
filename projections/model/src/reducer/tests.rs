#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::protocol::ActionKind;
use crate::state::{Activation, EffectKind, Installation, SessionStatus};
use crate::testkit::{self, RowKind, Session};

/// Reduces `event` over `state`, checks determinism, and advances the session head.
fn step(
    s: &mut Session,
    state: Option<&EngineState>,
    event: EngineEvent,
    decision: Option<crate::replay::Surrogate>,
) -> (EngineState, Transition) {
    let input = testkit::input(&event, decision);
    let (a, ta) = reduce(state, &input).unwrap();
    let (b, tb) = reduce(state, &input).unwrap();
    assert_eq!(
        a.to_json().to_cj(),
        b.to_json().to_cj(),
        "state must be deterministic"
    );
    assert_eq!(
        ta.to_json().to_cj(),
        tb.to_json().to_cj(),
        "transition must be deterministic"
    );
    s.revision = a.revision;
    (a, ta)
}

fn try_step(
    state: Option<&EngineState>,
    event: &EngineEvent,
) -> Result<(EngineState, Transition), ReduceError> {
    reduce(state, &testkit::input(event, None))
}

fn kinds(t: &Transition) -> Vec<ActionKind> {
    t.actions.iter().map(|a| a.kind).collect()
}

struct Flow {
    s: Session,
    state: EngineState,
    rows: Vec<Json>,
}

/// SessionStarted(managing) then a ready plan of `rows`.
fn planned(rows: Vec<Json>) -> (Flow, Transition) {
    let mut s = Session::new("s1");
    let e = s.started("managing");
    let (state, t) = step(&mut s, None, e, None);
    assert_eq!((state.revision, t.from_revision, t.to_revision), (1, 0, 1));
    let e = s.intent();
    let (state, t) = step(
        &mut s,
        Some(&state),
        e,
        Some(testkit::decision(rows.clone())),
    );
    (Flow { s, state, rows }, t)
}

impl Flow {
    fn clone_flow(&self) -> Flow {
        Flow {
            s: self.s.clone(),
            state: self.state.clone(),
            rows: self.rows.clone(),
        }
    }

    fn apply(&mut self, event: EngineEvent) -> Transition {
        let (state, t) = step(&mut self.s, Some(&self.state), event, None);
        self.state = state;
        t
    }
}

#[test]
fn first_event_must_start_the_session_at_revision_zero() {
    let mut s = Session::new("s1");
    let e = s.empty(EventKind::TurnEnded);
    assert_eq!(
        try_step(None, &e).unwrap_err(),
        ReduceError::InvalidEvent("SessionStarted must be the first event".into())
    );
    s.revision = 3;
    let e = s.started("managing");
    assert_eq!(
        try_step(None, &e).unwrap_err(),
        ReduceError::RevisionConflict {
            expected: 0,
            received: 3
        }
    );
}

#[test]
fn plan_commit_presents_rows_and_creates_runtime_state() {
    let rows = vec![
        testkit::row(RowKind::Load, "skill", "alpha"),
        testkit::row(RowKind::Install, "skill", "beta"),
        testkit::row(RowKind::Manual, "agent", "gamma"),
    ];
    let (f, t) = planned(rows);
    assert_eq!(kinds(&t), vec![ActionKind::PresentBundle]);
    let bundle = &t.actions[0];
    assert_eq!(bundle.precondition_revision, 2);
    assert_eq!(
        bundle
            .payload
            .get("capabilities")
            .and_then(Json::as_arr)
            .map(<[Json]>::len),
        Some(3)
    );
    let plan = f.state.committed_plan.as_ref().unwrap();
    assert_eq!(
        bundle.payload.get_str("plan_digest"),
        Some(plan.decision_digest.as_str())
    );
    assert_eq!(
        f.state.capabilities.len(),
        2,
        "manual rows create no runtime state"
    );
    assert_eq!(
        f.state.capability("skill:alpha").unwrap().installation,
        Installation::Installed
    );
    assert_eq!(
        f.state.capability("skill:beta").unwrap().installation,
        Installation::Absent
    );
    assert_eq!(f.state.last_manual_bundle, vec!["agent:gamma".to_owned()]);
}

#[test]
fn install_flow_asks_consent_first_then_installs_and_activates() {
    let rows = vec![
        testkit::row(RowKind::Load, "skill", "alpha"),
        testkit::row(RowKind::Install, "skill", "beta"),
    ];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e =
        f.s.desired("owner-1", &rows, &["skill:alpha", "skill:beta"]);
    let t = f.apply(e);
    assert_eq!(
        kinds(&t),
        vec![ActionKind::RequestConsent],
        "consent precedes activation"
    );
    let request = &t.actions[0];
    assert_eq!(request.precondition_revision, 3);
    let consent = f.state.pending_consents[0].clone();
    assert_eq!(consent.install_action.precondition_revision, 4);
    assert_eq!(
        request.payload.get_str("requested_action_content_digest"),
        Some(consent.install_action.content_digest().as_str())
    );
    assert_eq!(
        consent.install_action.expires_at.as_deref(),
        Some("2026-12-01T11:00:00Z")
    );

    let e = f.s.decide(&consent.install_action, true, "interactive");
    let t = f.apply(e);
    assert_eq!(t.actions, vec![consent.install_action.clone()]);
    assert_eq!(f.state.pending_effects[0].effect, EffectKind::Install);

    let e = f.s.applied(&consent.install_action);
    let t = f.apply(e);
    assert_eq!(
        kinds(&t),
        vec![
            ActionKind::ActivateCapability,
            ActionKind::ActivateCapability
        ]
    );
    let beta = f.state.capability("skill:beta").unwrap();
    assert_eq!(beta.installation, Installation::Installed);
    assert_eq!(
        beta.current_authorized_material.get_str("origin"),
        Some("installed")
    );

    for action in t.actions.clone() {
        let e = f.s.applied(&action);
        let t = f.apply(e);
        assert!(t.actions.is_empty());
    }
    assert_eq!(
        f.state.active_capability_ids(),
        vec!["skill:alpha", "skill:beta"]
    );

    let e = f.s.empty(EventKind::TurnStarting);
    let t = f.apply(e);
    assert_eq!(
        kinds(&t),
        vec![ActionKind::PrepareExposure, ActionKind::PrepareExposure]
    );

    // Ending the session while the exposures are being prepared: deactivation waits for them.
    let e = f.s.empty(EventKind::SessionEnded);
    let t = f.apply(e);
    assert!(
        t.actions.is_empty(),
        "capabilities with a pending prepare are not deactivated yet"
    );
    assert_eq!(f.state.session_status, SessionStatus::Ended);
    let prepares: Vec<HostAction> = f
        .state
        .pending_effects
        .iter()
        .map(|p| p.action.clone())
        .collect();
    let e = f.s.applied(&prepares[0]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::DeactivateCapability]);
}

#[test]
fn denial_blocks_the_descriptor_and_reports_it() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let install = f.state.pending_consents[0].install_action.clone();
    let e = f.s.decide(&install, false, "interactive");
    let t = f.apply(e);
    assert!(
        t.actions.is_empty(),
        "a blocked descriptor is not offered again"
    );
    assert_eq!(
        t.diagnostics,
        vec![Json::object([
            ("code", Json::str("install_consent_denied")),
            ("capability_id", Json::str("skill:beta")),
        ])]
    );
    let digest = install
        .payload
        .get("install_plan_descriptor")
        .and_then(|d| d.get_str("descriptor_digest"))
        .unwrap();
    assert_eq!(
        f.state.blocked_install_descriptor_digests,
        vec![digest.to_owned()]
    );
}

#[test]
fn an_actionless_revision_retires_and_reoffers_consent_with_new_ids() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    let first = f.apply(e);
    let e = f.s.empty(EventKind::TurnEnded);
    let second = f.apply(e);
    assert_eq!(kinds(&second), vec![ActionKind::RequestConsent]);
    assert_ne!(first.actions[0].action_id, second.actions[0].action_id);
    assert_ne!(first.actions[0].consent_id, second.actions[0].consent_id);
    assert_eq!(second.actions[0].precondition_revision, f.state.revision);
    assert_eq!(f.state.pending_consents.len(), 1);
    assert_eq!(
        f.state.pending_consents[0].consent_id.as_str(),
        second.actions[0].consent_id.as_deref().unwrap()
    );
}

#[test]
fn a_granted_decision_after_expiry_blocks_instead_of_installing() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let install = f.state.pending_consents[0].install_action.clone();
    f.s.advance(Session::HOUR);
    let e = f.s.decide(&install, true, "interactive");
    let t = f.apply(e);
    assert!(t.actions.is_empty());
    assert_eq!(
        t.diagnostics[0].get_str("code"),
        Some("install_consent_expired")
    );
    assert!(f.state.pending_effects.is_empty());
}

#[test]
fn unclaimed_install_expiry_retires_without_blocking() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let install = f.state.pending_consents[0].install_action.clone();
    let e = f.s.decide(&install, true, "preapproved-policy");
    f.apply(e);
    let e = f.s.expired(&install);
    let t = f.apply(e);
    assert!(t.actions.is_empty() && t.diagnostics.is_empty());
    assert!(f.state.blocked_install_descriptor_digests.is_empty());
    // Choosing it again offers a fresh consent.
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::RequestConsent]);
}

#[test]
fn a_failed_install_blocks_and_progresses_to_the_next_capability() {
    let rows = vec![
        testkit::row(RowKind::Install, "skill", "beta"),
        testkit::row(RowKind::Install, "skill", "delta"),
    ];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e =
        f.s.desired("owner-1", &rows, &["skill:beta", "skill:delta"]);
    let t = f.apply(e);
    assert_eq!(t.actions[0].entity_id.as_deref(), Some("skill:beta"));
    let install = f.state.pending_consents[0].install_action.clone();
    let e = f.s.decide(&install, true, "preapproved-policy");
    f.apply(e);
    let e = f.s.failed(&install);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::RequestConsent]);
    assert_eq!(t.actions[0].entity_id.as_deref(), Some("skill:delta"));
    assert_eq!(f.state.blocked_install_descriptor_digests.len(), 1);
}

#[test]
fn replacement_is_sequential_and_releases_the_old_capability() {
    let alpha = testkit::row(RowKind::Load, "skill", "alpha");
    let (mut f, _) = planned(vec![alpha.clone()]);
    let e =
        f.s.desired("owner-1", std::slice::from_ref(&alpha), &["skill:alpha"]);
    let t = f.apply(e);
    let e = f.s.applied(&t.actions[0]);
    f.apply(e);
    assert_eq!(f.state.active_capability_ids(), vec!["skill:alpha"]);

    // A new plan drops alpha and offers omega.
    let omega = testkit::row(RowKind::Load, "skill", "omega");
    f.s.plan_id = "ctx-query-host-1-s1-2".into();
    let e = f.s.intent();
    let (state, t) = step(
        &mut f.s,
        Some(&f.state),
        e,
        Some(testkit::decision(vec![omega.clone()])),
    );
    f.state = state;
    // Alpha lost its leases: reconcile deactivates it before presenting the bundle.
    assert_eq!(
        kinds(&t),
        vec![ActionKind::DeactivateCapability, ActionKind::PresentBundle]
    );
    let deactivate = t.actions[0].clone();
    // Alpha was released before omega was wanted, so nothing is held for rollback and omega
    // activates while alpha's deactivation is in flight.
    let e =
        f.s.desired("owner-1", std::slice::from_ref(&omega), &["skill:omega"]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::ActivateCapability]);
    assert!(!f.state.capability("skill:alpha").unwrap().rollback_held);
    let activate = t.actions[0].clone();
    let e = f.s.applied(&deactivate);
    f.apply(e);
    assert!(
        f.state.capability("skill:alpha").is_none(),
        "retired alpha is pruned"
    );
    let e = f.s.applied(&activate);
    f.apply(e);
    assert_eq!(f.state.active_capability_ids(), vec!["skill:omega"]);
}

#[test]
fn under_a_full_budget_replacement_holds_the_old_capability_until_the_new_one_is_active() {
    let names = ["a1", "a2", "a3", "a4", "a5"];
    let rows: Vec<Json> = names
        .iter()
        .map(|n| testkit::row(RowKind::Load, "skill", n))
        .collect();
    let (mut f, _) = planned(rows.clone());
    let ids: Vec<String> = names.iter().map(|n| format!("skill:{n}")).collect();
    let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let e = f.s.desired("owner-1", &rows, &id_refs);
    let t = f.apply(e);
    assert_eq!(t.actions.len(), 5);
    for a in t.actions {
        let e = f.s.applied(&a);
        f.apply(e);
    }
    assert_eq!(f.state.active_capability_ids().len(), 5);
    let mut next: Vec<Json> = rows[1..].to_vec();
    next.push(testkit::row(RowKind::Load, "skill", "a6"));
    f.s.plan_id = "ctx-query-host-1-s1-2".into();
    let e = f.s.intent();
    let (state, t) = step(
        &mut f.s,
        Some(&f.state),
        e,
        Some(testkit::decision(next.clone())),
    );
    f.state = state;
    // a1 lost its plan row and its leases: it is deactivated at once, nothing waits for it yet.
    assert_eq!(
        kinds(&t),
        vec![ActionKind::DeactivateCapability, ActionKind::PresentBundle]
    );
    assert!(!f.state.capability("skill:a1").unwrap().rollback_held);
    let first_deactivation = t.actions[0].clone();
    // The sixth waits for the budget.
    let e = f.s.desired("owner-2", &next, &["skill:a6"]);
    let t = f.apply(e);
    assert!(t.actions.is_empty());
    let deferred = vec![Json::object([
        ("code", Json::str("active_capability_budget_exhausted")),
        ("limit", Json::Int(5)),
        ("deferred", Json::Int(1)),
    ])];
    assert_eq!(t.diagnostics, deferred);
    // The deactivation fails: a1 stays active and blocked; a6 keeps waiting.
    let e = f.s.failed(&first_deactivation);
    let t = f.apply(e);
    assert!(t.actions.is_empty());
    assert_eq!(t.diagnostics, deferred);
    assert_eq!(
        f.state.blocked_deactivation_ids,
        vec!["skill:a1".to_owned()]
    );
    // Re-stating the desired set retries: a1 makes way and is held for rollback by a6's owner.
    let e = f.s.desired("owner-2", &next, &["skill:a6"]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::DeactivateCapability]);
    let a1 = f.state.capability("skill:a1").unwrap();
    assert!(a1.rollback_held);
    assert_eq!(a1.rollback_owner_id.as_deref(), Some("owner-2"));
    let e = f.s.applied(&t.actions[0]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::ActivateCapability]);
    let pending = f
        .state
        .pending_effect_by_action(&t.actions[0].action_id)
        .unwrap();
    assert_eq!(pending.rollback_capability_id.as_deref(), Some("skill:a1"));
    let activate = t.actions[0].clone();
    // A failed activation brings a1 back.
    let mut failing = f.clone_flow();
    let e = failing.s.failed(&activate);
    let t = failing.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::ActivateCapability]);
    assert_eq!(t.actions[0].lease_id.as_deref(), Some("rollback:skill:a1"));
    assert_eq!(
        failing.state.blocked_capability_ids,
        vec!["skill:a6".to_owned()]
    );
    // A successful one releases and prunes it.
    let e = f.s.applied(&activate);
    f.apply(e);
    assert!(f.state.capability("skill:a1").is_none());
    assert_eq!(f.state.active_capability_ids().len(), 5);
}

#[test]
fn session_end_deactivates_one_capability_per_revision() {
    let rows = vec![
        testkit::row(RowKind::Load, "skill", "alpha"),
        testkit::row(RowKind::Load, "skill", "beta"),
    ];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e =
        f.s.desired("owner-1", &rows, &["skill:alpha", "skill:beta"]);
    let t = f.apply(e);
    for a in t.actions {
        let e = f.s.applied(&a);
        f.apply(e);
    }
    let e = f.s.empty(EventKind::SessionEnded);
    let t = f.apply(e);
    assert_eq!(f.state.session_status, SessionStatus::Ended);
    assert_eq!(kinds(&t), vec![ActionKind::DeactivateCapability]);
    assert_eq!(
        t.actions[0].lease_id.as_deref(),
        Some("lease-owner-1-skill:alpha")
    );
    let e = f.s.applied(&t.actions[0]);
    let t = f.apply(e);
    assert_eq!(kinds(&t), vec![ActionKind::DeactivateCapability]);
    assert_eq!(t.actions[0].entity_id.as_deref(), Some("skill:beta"));
    let e = f.s.applied(&t.actions[0]);
    f.apply(e);
    assert!(
        f.state
            .capabilities
            .iter()
            .all(|c| c.activation == Activation::Inactive)
    );
    let e = f.s.empty(EventKind::TurnStarting);
    assert_eq!(
        try_step(Some(&f.state), &e).unwrap_err(),
        ReduceError::InvalidEvent(
            "session has ended; only pending receipts or explicit cleanup recovery are accepted"
                .into()
        )
    );
}

#[test]
fn receipts_must_match_the_pending_action_exactly() {
    let rows = vec![testkit::row(RowKind::Load, "skill", "alpha")];
    let (mut f, _) = planned(rows);
    let rows = f.rows.clone();
    let e = f.s.desired("owner-1", &rows, &["skill:alpha"]);
    let t = f.apply(e);
    let mut forged = t.actions[0].clone();
    forged.lease_id = Some("other".into());
    let e = f.s.applied(&forged);
    assert_eq!(
        try_step(Some(&f.state), &e).unwrap_err(),
        ReduceError::InvalidEvent(
            "receipt action_content_digest does not match pending action".into()
        )
    );
}

#[test]
fn wrong_revision_and_foreign_session_are_refused() {
    let rows = vec![testkit::row(RowKind::Load, "skill", "alpha")];
    let (mut f, _) = planned(rows);
    f.s.revision = 1;
    let e = f.s.empty(EventKind::TurnEnded);
    assert_eq!(
        try_step(Some(&f.state), &e).unwrap_err(),
        ReduceError::RevisionConflict {
            expected: 2,
            received: 1
        }
    );
    let mut other = Session::new("s2");
    other.revision = 2;
    let e = other.empty(EventKind::TurnEnded);
    assert_eq!(
        try_step(Some(&f.state), &e).unwrap_err(),
        ReduceError::InvalidEvent(
            "event scope does not match the current-work session scope".into()
        )
    );
}

#[test]
fn a_ready_plan_cannot_replace_a_pending_consent() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows.clone());
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let e = f.s.intent();
    let input = testkit::input(&e, Some(testkit::decision(rows)));
    assert_eq!(
        reduce(Some(&f.state), &input).unwrap_err(),
        ReduceError::InvalidEvent(
            "a ready or abstained plan cannot replace pending schema-v3 authority".into()
        )
    );
}

/// Reduces `event` over `state` and asserts the exact refusal message.
fn refused(
    state: Option<&EngineState>,
    event: &EngineEvent,
    decision: Option<crate::replay::Surrogate>,
    message: &str,
) {
    match reduce(state, &testkit::input(event, decision)) {
        Err(ReduceError::InvalidEvent(m) | ReduceError::Invalid(m)) => assert_eq!(m, message),
        other => panic!("expected refusal {message:?}, got {other:?}"),
    }
}

#[test]
fn session_rejections_name_their_cause() {
    let rows = vec![testkit::row(RowKind::Load, "skill", "alpha")];
    let (mut f, _) = planned(rows.clone());
    let mut e = f.s.empty(EventKind::TurnEnded);
    e.host_descriptor_digest = Some(testkit::digest("other-host"));
    refused(
        Some(&f.state),
        &e,
        None,
        "host descriptor changed within a current-work session",
    );
    let e = f.s.started("managing");
    refused(Some(&f.state), &e, None, "session is already started");
    let mut fresh = Session::new("s9");
    let mut e = fresh.started("managing");
    e.payload = Json::object([("host_level", Json::str("superuser"))]);
    refused(None, &e, None, "unknown host_level 'superuser'");
    let e = f.s.empty(EventKind::TurnEnded);
    refused(
        Some(&f.state),
        &e,
        Some(testkit::decision(rows.clone())),
        "decision is not valid for this event kind",
    );
    let e = f.s.intent();
    refused(
        Some(&f.state),
        &e,
        None,
        "planning event is missing its durable decision",
    );
    let mut old = testkit::decision(rows);
    old.schema_version = 1;
    refused(
        Some(&f.state),
        &e,
        Some(old),
        "v3 reducer requires capability plan schema version 3",
    );
    let mut input = testkit::input(&e, None);
    input.reducer_version = "ctx-reducer-v1".into();
    assert_eq!(
        reduce(Some(&f.state), &input).unwrap_err(),
        ReduceError::UnsupportedReducerVersion("ctx-reducer-v1".into())
    );
}

#[test]
fn desired_set_rejections_name_their_cause() {
    let mut s = Session::new("s1");
    let e = s.started("managing");
    let (bare, _) = step(&mut s, None, e, None);
    let rows = vec![
        testkit::row(RowKind::Load, "skill", "alpha"),
        testkit::row(RowKind::Load, "skill", "bravo"),
    ];
    let e = s.desired("owner-1", &rows, &["skill:alpha"]);
    refused(
        Some(&bare),
        &e,
        None,
        "v3 reassessment requires a committed capability plan",
    );

    let (mut f, _) = planned(rows.clone());
    let mut e = f.s.desired("owner-1", &rows, &["skill:alpha"]);
    e.correlation_id = Some("another-plan".into());
    refused(
        Some(&f.state),
        &e,
        None,
        "reassessment plan_id does not match the committed plan",
    );
    let mut e = f.s.desired("owner-1", &rows, &["skill:alpha"]);
    e.catalog_snapshot_digest = Some(testkit::digest("another-catalog"));
    refused(
        Some(&f.state),
        &e,
        None,
        "reassessment catalog snapshot does not match the committed plan",
    );

    let foreign = testkit::row(RowKind::Load, "skill", "zulu");
    let e = f.s.desired("owner-1", &[foreign], &["skill:zulu"]);
    refused(
        Some(&f.state),
        &e,
        None,
        "capability 'skill:zulu' was not in the committed plan",
    );

    let mut e =
        f.s.desired("owner-1", &rows, &["skill:alpha", "skill:bravo"]);
    if let Json::Obj(m) = &mut e.payload
        && let Some(Json::Arr(desired)) = m.get_mut("desired_capabilities")
    {
        let first = desired[0].clone();
        desired[1] = first;
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "duplicate lease_id 'lease-owner-1-skill:alpha'",
    );

    let mut e = f.s.desired("owner-1", &rows, &["skill:alpha"]);
    if let Json::Obj(m) = &mut e.payload
        && let Some(Json::Arr(desired)) = m.get_mut("desired_capabilities")
        && let Json::Obj(row) = &mut desired[0]
    {
        row.insert("source_digest".into(), Json::str(testkit::digest("forged")));
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "desired capability 'skill:alpha' does not match committed identity",
    );

    let e = f.s.desired("owner-1", &rows, &["skill:alpha"]);
    f.apply(e);
    let mut e = f.s.desired("owner-2", &rows, &["skill:alpha"]);
    if let Json::Obj(m) = &mut e.payload
        && let Some(Json::Arr(desired)) = m.get_mut("desired_capabilities")
        && let Json::Obj(row) = &mut desired[0]
    {
        row.insert("lease_id".into(), Json::str("lease-owner-1-skill:alpha"));
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "lease_id 'lease-owner-1-skill:alpha' already belongs to 'skill:alpha'",
    );
}

#[test]
fn consent_and_receipt_rejections_name_their_cause() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows.clone());
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let install = f.state.pending_consents[0].install_action.clone();

    let mut e = f.s.decide(&install, true, "interactive");
    if let Json::Obj(m) = &mut e.payload {
        m.insert("consent_id".into(), Json::str("consent-unknown"));
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "UserDecision references unknown or completed consent",
    );
    let mut e = f.s.decide(&install, true, "interactive");
    if let Json::Obj(m) = &mut e.payload {
        m.insert(
            "requested_action_content_digest".into(),
            Json::str(testkit::digest("x")),
        );
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "UserDecision does not match the exact requested install",
    );
    let mut e = f.s.decide(&install, true, "interactive");
    if let Json::Obj(m) = &mut e.payload {
        m.insert(
            "policy_snapshot_digest".into(),
            Json::str(testkit::digest("other-policy")),
        );
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "UserDecision policy snapshot does not match pending install",
    );
    let mut e = f.s.decide(&install, true, "interactive");
    e.scope.exposure_id = "exposure-2".into();
    refused(
        Some(&f.state),
        &e,
        None,
        "UserDecision scope does not match pending consent",
    );
    let e = consent_expired(&mut f.s, &install, "consent-unknown");
    refused(
        Some(&f.state),
        &e,
        None,
        "InstallConsentExpired references unknown or completed consent",
    );

    let e = f.s.decide(&install, true, "interactive");
    f.apply(e);
    let mut forged = install.clone();
    forged.action_id = "action-unknown".into();
    let e = f.s.applied(&forged);
    refused(
        Some(&f.state),
        &e,
        None,
        "receipt references unknown or completed action 'action-unknown'",
    );
    let mut e = f.s.applied(&install);
    if let Json::Obj(m) = &mut e.payload
        && let Some(Json::Obj(v)) = m.get_mut("verification")
    {
        v.insert("host_state".into(), Json::str("active"));
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "receipt verification contradicts the requested physical state",
    );
    let mut e = f.s.applied(&install);
    if let Json::Obj(m) = &mut e.payload
        && let Some(Json::Obj(v)) = m.get_mut("verification")
    {
        v.insert(
            "installer_digest".into(),
            Json::str(testkit::digest("other-installer")),
        );
    }
    refused(
        Some(&f.state),
        &e,
        None,
        "schema-v3 receipt does not byte-match the exact pending action authority",
    );
}

#[test]
fn an_installed_consent_expiry_retires_without_blocking() {
    let rows = vec![testkit::row(RowKind::Install, "skill", "beta")];
    let (mut f, _) = planned(rows.clone());
    let e = f.s.desired("owner-1", &rows, &["skill:beta"]);
    f.apply(e);
    let install = f.state.pending_consents[0].install_action.clone();
    let consent = install.consent_id.clone().unwrap();
    let e = consent_expired(&mut f.s, &install, &consent);
    let t = f.apply(e);
    assert!(t.actions.is_empty());
    assert_eq!(
        t.diagnostics,
        vec![Json::object([
            ("code", Json::str("install_consent_expired")),
            ("capability_id", Json::str("skill:beta")),
            ("consent_id", Json::str(consent)),
        ])]
    );
    assert!(f.state.pending_consents.is_empty());
    assert!(f.state.blocked_install_descriptor_digests.is_empty());
}

#[test]
fn evidence_follows_submissions_and_tool_calls() {
    let rows = vec![testkit::row(RowKind::Load, "skill", "alpha")];
    let (mut f, _) = planned(rows.clone());
    let source = rows[0].get_str("catalog_entry_digest").unwrap().to_owned();
    let e = f.s.event(
        EventKind::ProviderSubmissionObserved,
        Json::object([(
            "capabilities",
            Json::Arr(vec![
                Json::object([
                    ("capability_id", Json::str("skill:alpha")),
                    ("source_digest", Json::str(&source)),
                ]),
                Json::object([
                    ("capability_id", Json::str("skill:ghost")),
                    ("source_digest", Json::str(&source)),
                ]),
            ]),
        )]),
    );
    let t = f.apply(e);
    assert_eq!(
        t.diagnostics,
        vec![Json::object([
            ("code", Json::str("source_digest_mismatch")),
            ("capability_id", Json::str("skill:ghost")),
        ])]
    );
    let e = f.s.event(
        EventKind::ToolCallObserved,
        Json::object([
            ("capability_id", Json::str("skill:alpha")),
            ("source_digest", Json::str(&source)),
            ("outcome", Json::str("failed")),
        ]),
    );
    f.apply(e);
    let evidence = f.state.evidence_for("exposure-1", "skill:alpha").unwrap();
    assert_eq!(evidence.exposure, crate::state::Exposure::Submitted);
    assert_eq!(evidence.invocation, crate::state::Invocation::InvokedFailed);
}

#[test]
fn a_host_that_cannot_activate_gets_diagnostics_not_actions() {
    let mut s = Session::new("s1");
    let e = s.started("observing");
    let (state, _) = step(&mut s, None, e, None);
    let rows = vec![testkit::row(RowKind::Load, "skill", "alpha")];
    let e = s.intent();
    let (state, t) = step(
        &mut s,
        Some(&state),
        e,
        Some(testkit::decision(rows.clone())),
    );
    assert_eq!(kinds(&t), vec![ActionKind::PresentBundle]);
    let e = s.desired("owner-1", &rows, &["skill:alpha"]);
    let (_, t) = step(&mut s, Some(&state), e, None);
    assert!(t.actions.is_empty());
    assert_eq!(
        t.diagnostics,
        vec![Json::object([
            ("code", Json::str("host_activation_unsupported")),
            ("host_level", Json::str("observing")),
        ])]
    );
}

#[test]
fn an_abstained_plan_reports_its_code() {
    let (f, t) = planned(Vec::new());
    assert!(t.actions.is_empty());
    assert_eq!(
        t.diagnostics,
        vec![Json::object([("code", Json::str("below-net-benefit"))])]
    );
    assert_eq!(f.state.committed_plan.as_ref().unwrap().status, "abstained");
}

/// An `InstallConsentExpired` for `install` naming `consent_id`.
fn consent_expired(s: &mut Session, install: &HostAction, consent_id: &str) -> EngineEvent {
    s.event(
        EventKind::InstallConsentExpired,
        Json::object([
            ("consent_id", Json::str(consent_id)),
            (
                "install_expires_at",
                Json::opt_str(install.expires_at.as_deref()),
            ),
            (
                "policy_snapshot_digest",
                install
                    .payload
                    .get("policy_snapshot_digest")
                    .cloned()
                    .unwrap(),
            ),
            (
                "requested_action_content_digest",
                Json::str(install.content_digest()),
            ),
            ("requested_action_id", Json::str(&install.action_id)),
            ("requested_action_kind", Json::str("InstallCapability")),
            (
                "requested_action_precondition_revision",
                Json::from(install.precondition_revision),
            ),
        ]),
    )
}
