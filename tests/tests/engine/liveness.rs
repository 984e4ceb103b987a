//! Regressions for the states the random histories once found stuck: every pending effect can
//! still be settled or retired, and a plan may release several active capabilities at once.

use ctx_model::testkit::RowKind;
use ctx_model::{ActionKind, EffectKind, HostAction, Json, testkit};
use ctx_projections::engine::{ActivationGuard, ProcessError};

use super::{Host, activation_material, binding, expiry};

fn load(name: &str) -> Json {
    testkit::row(RowKind::Load, "skill", name)
}

fn id(row: &Json) -> String {
    row.get_str("capability_id").unwrap().to_owned()
}

/// Claims, observes and settles an activation; returns the transition's actions.
fn activate(h: &mut Host, action: &HostAction) -> Vec<HostAction> {
    let host = h.s.host_descriptor.clone();
    h.engine()
        .authorize_activation(action, &binding(), &host)
        .unwrap();
    let guard: ActivationGuard = h
        .engine()
        .record_activation_outcome(
            action,
            &binding(),
            &activation_material(action),
            &testkit::digest("seen"),
        )
        .unwrap();
    let status = h.engine().activation_execution_status(action).unwrap();
    h.s.now = ctx_model::UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
    h.sync_clock();
    let e = h.s.applied(action);
    let t = h.engine().process_activation_receipt(&e, &guard).unwrap();
    h.s.revision = t.to_revision;
    t.actions
}

fn desired(h: &mut Host, owner: &str, rows: &[Json], ids: &[&str]) -> Vec<HostAction> {
    let e = h.s.desired(owner, rows, ids);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    t.actions
}

fn pending(h: &Host, effect: EffectKind) -> Vec<HostAction> {
    h.state()
        .unwrap()
        .pending_effects
        .iter()
        .filter(|p| p.effect == effect)
        .map(|p| p.action.clone())
        .collect()
}

#[test]
fn a_plan_may_release_two_active_capabilities_and_they_are_deactivated_in_turn() {
    let mut h = Host::new("release-two");
    h.start("managing");
    let (a, b, c) = (load("a"), load("b"), load("c"));
    let rows = vec![a.clone(), b.clone()];
    h.plan(rows.clone());
    let activations = desired(&mut h, "owner-1", &rows, &[&id(&a), &id(&b)]);
    assert_eq!(activations.len(), 2);
    for act in &activations {
        activate(&mut h, act);
    }
    h.s.plan_id = "ctx-query-host-1-release-two-2".into();
    h.plan(vec![c.clone()]);
    let first = pending(&h, EffectKind::Deactivate);
    assert_eq!(first.len(), 1, "one deactivation per reconcile pass");
    let e = h.s.applied(&first[0]);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    assert_eq!(t.actions.len(), 1);
    assert_eq!(t.actions[0].kind, ActionKind::DeactivateCapability);
    let e = h.s.applied(&t.actions[0]);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    assert!(h.state().unwrap().active_capability_ids().is_empty());
    h.check_rebuilds();
}

#[test]
fn a_claimed_activation_never_observed_lapses_at_its_expiry() {
    let mut h = Host::new("lapse");
    h.start("managing");
    let a = load("a");
    h.plan(vec![a.clone()]);
    let act = desired(&mut h, "owner-1", std::slice::from_ref(&a), &[&id(&a)]);
    let host = h.s.host_descriptor.clone();
    h.engine()
        .authorize_activation(&act[0], &binding(), &host)
        .unwrap();
    // The verifier never observes it; at expiry no outcome can be recorded any more.
    h.s.now = expiry(&act[0]);
    h.sync_clock();
    assert!(
        h.engine()
            .record_activation_outcome(
                &act[0],
                &binding(),
                &activation_material(&act[0]),
                &testkit::digest("late"),
            )
            .is_err()
    );
    let e = h.s.expired(&act[0]);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    assert!(
        pending(&h, EffectKind::Activate).is_empty(),
        "the lapsed activation is retired"
    );
    // The capability is still desired: the next reconcile offers a fresh activation.
    let again = desired(&mut h, "owner-1", std::slice::from_ref(&a), &[&id(&a)]);
    assert_eq!(again.len(), 1);
    assert_ne!(again[0].action_id, act[0].action_id);
    activate(&mut h, &again[0]);
    assert_eq!(
        h.state().unwrap().active_capability_ids(),
        vec![id(&a).as_str()]
    );
    h.check_rebuilds();
}

#[test]
fn a_rollback_activation_can_be_claimed_and_settled() {
    let mut h = Host::new("rollback");
    h.start("managing");
    let (x, y) = (load("x"), load("y"));
    let rows = vec![x.clone(), y.clone()];
    h.plan(rows.clone());
    let acts = desired(&mut h, "owner-1", &rows, &[&id(&x), &id(&y)]);
    let (ax, ay) = (
        acts.iter()
            .find(|a| a.entity_id.as_deref() == Some(id(&x).as_str()))
            .unwrap()
            .clone(),
        acts.iter()
            .find(|a| a.entity_id.as_deref() == Some(id(&y).as_str()))
            .unwrap()
            .clone(),
    );
    activate(&mut h, &ax);
    // y's activation lapses unclaimed.
    h.s.now = expiry(&ay);
    h.sync_clock();
    let e = h.s.expired(&ay);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    // A new plan keeps only y: x makes way, held for rollback by y's owner.
    h.s.plan_id = "ctx-query-host-1-rollback-2".into();
    h.plan(vec![y.clone()]);
    let deactivate = pending(&h, EffectKind::Deactivate);
    assert_eq!(deactivate.len(), 1);
    let e = h.s.applied(&deactivate[0]);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    let acts = desired(&mut h, "owner-1", std::slice::from_ref(&y), &[&id(&y)]);
    let y_again = acts
        .first()
        .cloned()
        .or_else(|| pending(&h, EffectKind::Activate).first().cloned());
    let Some(y_again) = y_again else {
        panic!("y is activated again");
    };
    // y's second activation lapses too, so x must come back.
    h.s.now = expiry(&y_again);
    h.sync_clock();
    let e = h.s.expired(&y_again);
    let t = h.engine().process(&e, None).unwrap();
    h.s.revision = t.to_revision;
    // Expiry does not reconcile; the next desired set does, and brings x back first.
    let acts = desired(&mut h, "owner-1", std::slice::from_ref(&y), &[&id(&y)]);
    assert_eq!(acts.len(), 1);
    let rollbacks = pending(&h, EffectKind::RollbackActivate);
    let rollback = rollbacks
        .first()
        .expect("x's rollback activation is pending");
    assert_eq!(
        rollback.lease_id.as_deref(),
        Some(format!("rollback:{}", id(&x)).as_str())
    );
    activate(&mut h, rollback);
    assert!(pending(&h, EffectKind::RollbackActivate).is_empty());
    assert!(
        h.state().unwrap().capability(&id(&x)).unwrap().is_active(),
        "x is back"
    );
    // Whatever the path, the session can always end and clean up.
    let e = h.s.empty(ctx_model::EventKind::SessionEnded);
    let r = h.engine().process(&e, None);
    assert!(
        !matches!(r, Err(ProcessError::Reducer(_))),
        "session end is accepted: {r:?}"
    );
    h.check_rebuilds();
}
