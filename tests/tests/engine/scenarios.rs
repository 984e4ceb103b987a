//! Fixed scenarios the random histories reach too rarely (or, single-threaded, never): a claim
//! that outlives its engine handle, an install that expires before anyone claims it, and engine
//! handles racing for one claim and one outcome.

use std::ops::ControlFlow;
use std::sync::Barrier;

use ctx_journal::Journal;
use ctx_model::testkit::RowKind;
use ctx_model::{ActionKind, HostAction, Installation, Json, testkit};
use ctx_projections::engine::{
    AuthorizeError, GuardEffect, INSTALL_CLAIMS_TABLE, INSTALL_EXPIRIES_TABLE,
    INSTALL_OUTCOMES_TABLE, INSTALL_SETTLEMENTS_TABLE, InstallOutcome, ProcessError,
};

use super::{Host, binding, catalog_row, descriptor, expiry, install_material};
use crate::support;

fn table_len(journal: &Journal, table: &'static str) -> usize {
    let mut n = 0;
    journal
        .projection_scan(table, |_, _| {
            n += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
    n
}

/// [claims, outcomes, settlements, expiries] of installs.
fn install_tables(h: &Host) -> [usize; 4] {
    [
        INSTALL_CLAIMS_TABLE,
        INSTALL_OUTCOMES_TABLE,
        INSTALL_SETTLEMENTS_TABLE,
        INSTALL_EXPIRIES_TABLE,
    ]
    .map(|t| table_len(h.journal(), t))
}

fn install_row() -> Json {
    testkit::row(RowKind::Install, "skill", "demo")
}

/// Session, plan over the install row, desired set, granted consent: the pending install.
fn pending_install(h: &mut Host) -> HostAction {
    h.start("managing");
    let row = install_row();
    h.plan(vec![row.clone()]);
    let id = row.get_str("capability_id").unwrap().to_owned();
    let e = h.s.desired("owner-1", std::slice::from_ref(&row), &[&id]);
    h.commit(&e, None);
    let install = h.grant();
    let state = h.state().unwrap();
    assert_eq!(
        state.pending_effects.len(),
        1,
        "the granted consent releases exactly the install"
    );
    assert_eq!(state.pending_effects[0].action, install);
    install
}

fn assert_already_claimed(result: Result<(), AuthorizeError>, install: &HostAction, when: &str) {
    match result {
        Err(AuthorizeError::AlreadyClaimed { effect, action_id }) => {
            assert_eq!(effect, GuardEffect::Install);
            assert_eq!(action_id, install.action_id);
        }
        other => panic!("a second claim {when} must be AlreadyClaimed, got {other:?}"),
    }
}

#[test]
fn a_claim_outlives_its_engine_handle_and_settles_exactly_once() {
    let _shared = support::shared();
    let mut h = Host::new("reopen");
    let install = pending_install(&mut h);
    h.claim_install(&install).unwrap();
    assert_already_claimed(h.claim_install(&install), &install, "by the same handle");
    let position = h.position();

    // The claiming handle is gone (as after a crash between claim and outcome).
    h.reopen();
    assert_already_claimed(h.claim_install(&install), &install, "after a reopen");
    h.advance(Host::MINUTE);
    assert_already_claimed(h.claim_install(&install), &install, "a minute later");
    assert_eq!(h.position(), position, "refused claims write nothing");
    let status = h.engine().install_execution_status(&install).unwrap();
    assert!(status.claimed && !status.outcome_recorded && !status.settled);
    assert_eq!(
        status.execution_binding_digest,
        Some(binding().binding_digest())
    );
    // Still pending at the head: its expiry is refused while the claim exists.
    h.s.now = expiry(&install);
    h.sync_clock();
    let expired = h.s.expired(&install);
    let err = h.engine().process(&expired, None).unwrap_err();
    assert!(
        matches!(
            &err,
            ProcessError::Effect {
                effect: GuardEffect::Install,
                ..
            }
        ),
        "a claimed install cannot expire as unclaimed: {err:?}"
    );
    assert_eq!(h.position(), position);

    // The new handle records the one outcome (there is none yet) and settles the claim.
    let material = install_material(&install);
    let guard = h
        .engine()
        .record_install_outcome(
            &install,
            &binding(),
            InstallOutcome::Applied,
            Some(&material),
            &testkit::digest("verified-after-reopen"),
        )
        .unwrap();
    let err = h
        .engine()
        .record_install_outcome(
            &install,
            &binding(),
            InstallOutcome::Indeterminate,
            None,
            &testkit::digest("verified-after-reopen"),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("already has a different outcome"),
        "a second, different outcome is a conflict: {err}"
    );
    h.reopen();
    let receipt = h.s.applied(&install);
    let t = h
        .engine()
        .process_install_receipt(&receipt, &guard)
        .expect("the guard of an outcome recorded before a reopen settles after it");
    h.s.revision = t.to_revision;
    assert_eq!(
        t.actions
            .iter()
            .filter(|a| a.kind == ActionKind::ActivateCapability)
            .count(),
        1,
        "the settled install releases its activation"
    );
    let cap = install.entity_id.as_deref().unwrap();
    let state = h.state().unwrap();
    assert_eq!(
        state.capability(cap).unwrap().installation,
        Installation::Installed
    );
    // Settled: no longer pending at the head, so no claim of any kind.
    let err = h.claim_install(&install).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err:?}");
    let second_receipt = h.s.applied(&install);
    let err = h
        .engine()
        .process_install_receipt(&second_receipt, &guard)
        .unwrap_err();
    assert!(
        matches!(err, ProcessError::Authority(_)),
        "a second settlement is refused: {err:?}"
    );
    assert_eq!(install_tables(&h), [1, 1, 1, 0]);
    h.check_rebuilds();
}

#[test]
fn an_install_that_expires_unclaimed_retires_once_and_can_be_chosen_again() {
    let _shared = support::shared();
    let mut h = Host::new("expiry");
    let first = pending_install(&mut h);
    let expires = expiry(&first);

    // A minute before the expiry: a claim would still be granted, the expiry is refused.
    h.s.now = expires.checked_add(-Host::MINUTE).unwrap();
    h.sync_clock();
    let early = h.s.expired(&first);
    let err = h.engine().process(&early, None).unwrap_err();
    assert!(matches!(err, ProcessError::Clock(_)), "{err:?}");

    // At the expiry: the claim is refused by the trusted clock, the expiry retires the action.
    h.s.now = expires;
    h.sync_clock();
    let err = h.claim_install(&first).unwrap_err();
    assert!(
        matches!(
            err,
            AuthorizeError::ClaimExpired { effect: GuardEffect::Install, ref action_id }
                if *action_id == first.action_id
        ),
        "{err:?}"
    );
    let retire = h.s.expired(&first);
    h.commit(&retire, None);
    let state = h.state().unwrap();
    assert!(state.pending_effects.is_empty(), "the install is retired");
    assert_eq!(install_tables(&h), [0, 0, 0, 1]);

    // Retired once: a second expiry, a claim and an outcome are all refused, even after a reopen.
    h.reopen();
    let position = h.position();
    let again = h.s.expired(&first);
    assert!(h.engine().process(&again, None).is_err());
    let err = h.claim_install(&first).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err:?}");
    let err = h
        .engine()
        .record_install_outcome(
            &first,
            &binding(),
            InstallOutcome::Failed,
            None,
            &testkit::digest("late"),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("has no durable execution claim"),
        "no outcome without a claim: {err}"
    );
    assert_eq!(h.position(), position, "refusals write nothing");

    // Retired without blame: the same capability is chosen again by the next reassessment,
    // under a new consent and a new install action, which claims and settles normally.
    let row = install_row();
    let id = row.get_str("capability_id").unwrap().to_owned();
    let e = h.s.desired("owner-1", std::slice::from_ref(&row), &[&id]);
    h.commit(&e, None);
    let second = h.grant();
    assert_ne!(second.action_id, first.action_id);
    assert_eq!(second.entity_id, first.entity_id);
    h.claim_install(&second).unwrap();
    let material = install_material(&second);
    let guard = h
        .engine()
        .record_install_outcome(
            &second,
            &binding(),
            InstallOutcome::Applied,
            Some(&material),
            &testkit::digest("verified"),
        )
        .unwrap();
    let receipt = h.s.applied(&second);
    let t = h
        .engine()
        .process_install_receipt(&receipt, &guard)
        .unwrap();
    h.s.revision = t.to_revision;
    let state = h.state().unwrap();
    assert_eq!(
        state.capability(&id).unwrap().installation,
        Installation::Installed
    );
    // The first action stays retired.
    let err = h.claim_install(&first).unwrap_err();
    assert!(matches!(err, AuthorizeError::NotPending(_)), "{err:?}");
    assert_eq!(install_tables(&h), [1, 1, 1, 1]);
    h.check_rebuilds();
}

#[test]
fn racing_handles_claim_once_and_record_one_outcome() {
    let _shared = support::shared();
    for round in 0..4 {
        let mut h = Host::new(&format!("race-{round}"));
        let install = pending_install(&mut h);
        let handles: Vec<_> = (0..4).map(|_| h.another_handle()).collect();
        let row = catalog_row(&install);
        let descriptor = descriptor(&row);
        let barrier = Barrier::new(handles.len());
        let claims: Vec<Result<(), AuthorizeError>> = std::thread::scope(|scope| {
            let racers: Vec<_> = handles
                .iter()
                .map(|engine| {
                    let (row, descriptor, barrier, s) = (&row, &descriptor, &barrier, &h.s);
                    let install = &install;
                    scope.spawn(move || {
                        barrier.wait();
                        engine.authorize_install(
                            install,
                            row,
                            descriptor,
                            &s.catalog,
                            &s.policy,
                            &binding(),
                        )
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(
            claims.iter().filter(|c| c.is_ok()).count(),
            1,
            "exactly one racing claim wins: {claims:?}"
        );
        for refused in claims.iter().filter_map(|c| c.as_ref().err()) {
            assert!(
                matches!(refused, AuthorizeError::AlreadyClaimed { .. }),
                "a losing claim is AlreadyClaimed: {refused:?}"
            );
        }
        // A live driver's applied outcome races recovering handles' indeterminate ones.
        let material = install_material(&install);
        let verification = testkit::digest("verification");
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let racers: Vec<_> = handles
                .iter()
                .enumerate()
                .map(|(i, engine)| {
                    let (install, barrier) = (&install, &barrier);
                    let (material, verification) = (&material, &verification);
                    scope.spawn(move || {
                        barrier.wait();
                        let (outcome, observed) = if i == 0 {
                            (InstallOutcome::Applied, Some(material.as_str()))
                        } else {
                            (InstallOutcome::Indeterminate, None)
                        };
                        engine
                            .record_install_outcome(
                                install,
                                &binding(),
                                outcome,
                                observed,
                                verification,
                            )
                            .map(|guard| (outcome, guard))
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let recorded = h.engine().install_execution_status(&install).unwrap();
        let winner = recorded.outcome.expect("one outcome is recorded");
        for result in &outcomes {
            match result {
                // Every success returns the guard of the one recorded outcome.
                Ok((outcome, guard)) => {
                    assert_eq!(*outcome, winner);
                    assert_eq!(
                        Some(guard.execution_outcome_digest()),
                        recorded.outcome_digest.as_deref()
                    );
                }
                Err(e) => assert!(
                    e.to_string().contains("already has a different outcome"),
                    "a losing, different outcome is a conflict: {e}"
                ),
            }
        }
        let guard = outcomes
            .into_iter()
            .find_map(Result::ok)
            .map(|(_, guard)| guard)
            .expect("some handle recorded the outcome");
        drop(handles);
        let receipt = if winner == InstallOutcome::Applied {
            h.s.applied(&install)
        } else {
            h.s.failed(&install)
        };
        let t = h
            .engine()
            .process_install_receipt(&receipt, &guard)
            .unwrap();
        h.s.revision = t.to_revision;
        let cap = install.entity_id.as_deref().unwrap();
        let installed = h.state().unwrap().capability(cap).unwrap().installation;
        assert_eq!(
            installed == Installation::Installed,
            winner == InstallOutcome::Applied,
            "an indeterminate outcome settles as failed"
        );
        assert_eq!(install_tables(&h), [1, 1, 1, 0]);
        h.check_rebuilds();
    }
}
