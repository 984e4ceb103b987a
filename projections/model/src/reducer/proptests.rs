//! Property test: random valid histories reduce deterministically and keep the engine's promises,
//! checked against a small reference model of what may happen when.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::{ReduceError, reduce};
use crate::protocol::{ActionKind, EventKind};
use crate::state::{EngineState, Installation};
use crate::testkit::ops::{Op, event_for};
use crate::testkit::{self, Session};

fn cases() -> u32 {
    std::env::var("CTX_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Plan),
        8 => (any::<u8>(), 1u8..=31).prop_map(|(o, m)| Op::Desired(o, m)),
        8 => (any::<bool>(), any::<bool>())
            .prop_map(|(granted, preapproved)| Op::Decide { granted, preapproved }),
        14 => (any::<u8>(), prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(n, h)| Op::Receipt(n, h)),
        2 => Just(Op::TurnStarting),
        2 => Just(Op::TurnEnded),
        2 => any::<u8>().prop_map(Op::Submission),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(n, ok)| Op::ToolCall(n, ok)),
        2 => (0u8..90).prop_map(Op::Advance),
        1 => Just(Op::SessionEnded),
        2 => Just(Op::RetryCleanup),
    ]
}

/// What the model remembers across steps.
#[derive(Default)]
struct Model {
    /// Install actions a granted, in-time decision released.
    granted_installs: BTreeSet<String>,
    /// Capabilities whose install receipt was applied.
    installed_by_receipt: BTreeSet<String>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn random_histories_are_deterministic_and_keep_the_engine_promises(
        level in prop_oneof![4 => Just("managing"), 1 => Just("activating"), 1 => Just("observing")],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut s = Session::new("prop");
        let start = s.started(level);
        let (mut state, _) = reduce(None, &testkit::input(&start, None)).unwrap();
        s.revision = 1;
        let mut model = Model::default();
        for op in ops {
            let Some((event, decision)) = event_for(&mut s, &state, op) else { continue };
            let input = testkit::input(&event, decision);
            let first = reduce(Some(&state), &input);
            let second = reduce(Some(&state), &input);
            prop_assert_eq!(&first, &second, "reduction must be deterministic");
            let (next, transition) = match first {
                Ok(ok) => ok,
                Err(ReduceError::RevisionConflict { .. }) => {
                    prop_assert!(false, "generated events always target the head");
                    unreachable!()
                }
                // Refused events change nothing; the next op starts from the same head.
                Err(_) => continue,
            };
            prop_assert_eq!(next.revision, state.revision + 1);
            prop_assert_eq!(transition.from_revision, state.revision);
            prop_assert!(next.active_capability_ids().len() <= 5);
            for action in &transition.actions {
                match action.kind {
                    ActionKind::InstallCapability => {
                        // An install is released only by a granted decision on its own consent.
                        prop_assert_eq!(event.kind, EventKind::UserDecision);
                        prop_assert_eq!(event.payload.get_str("decision"), Some("granted"));
                        prop_assert!(event.occurred_at < action.expires_at.clone().unwrap());
                        model.granted_installs.insert(action.action_id.clone());
                    }
                    ActionKind::ActivateCapability => {
                        let id = action.entity_id.as_deref().unwrap();
                        prop_assert_eq!(
                            next.capability(id).map(|c| c.installation),
                            Some(Installation::Installed)
                        );
                    }
                    _ => {}
                }
            }
            if event.kind == EventKind::ActionApplied
                && event.payload.get_str("action_kind") == Some("InstallCapability")
            {
                let id = event.payload.get_str("action_id").unwrap();
                prop_assert!(model.granted_installs.contains(id), "receipt only for a released install");
                let cap = transition_entity(&state, id);
                model.installed_by_receipt.insert(cap);
            }
            check_installed(&state, &next, &model)?;
            // The borrowed view and the owned mapping encode to the same canonical bytes.
            prop_assert_eq!(next.view().to_cj(), next.to_json().to_cj());
            prop_assert_eq!(transition.view().to_cj(), transition.to_json().to_cj());
            // The persisted form decodes back to the same state.
            let text = next.to_canonical_text();
            prop_assert_eq!(EngineState::from_canonical_text(&text).unwrap(), next.clone());
            s.revision = next.revision;
            state = next;
        }
    }
}

fn transition_entity(state: &EngineState, action_id: &str) -> String {
    state
        .pending_effect_by_action(action_id)
        .and_then(|p| p.entity().map(str::to_owned))
        .unwrap_or_default()
}

/// An install-authority capability becomes installed only through its applied install receipt.
fn check_installed(
    prev: &EngineState,
    next: &EngineState,
    model: &Model,
) -> Result<(), TestCaseError> {
    for cap in &next.capabilities {
        let id = cap.capability_id();
        let was = prev.capability(id).map(|c| c.installation);
        if cap.installation == Installation::Installed && was == Some(Installation::Absent) {
            prop_assert!(
                model.installed_by_receipt.contains(id),
                "{} installed without a receipt",
                id
            );
        }
    }
    Ok(())
}
