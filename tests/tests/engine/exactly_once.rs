//! Property test: random histories run through a real engine on a temp-dir journal. Besides the
//! testkit's domain events, the history claims, observes and settles installs and activations,
//! moves the trusted clock, expires unclaimed actions, resubmits committed events and reopens the
//! journal. A reference model remembers every successful claim, outcome and settlement per
//! (stream, action id) and checks each step against what the exactly-once protocols allow; at the
//! end every engine projection must rebuild byte for byte, the replay audit must be clean and the
//! journal must verify.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Mutex;

use ctx_journal::Journal;
use ctx_model::testkit::ops::{Op, event_for};
use ctx_model::{
    ActionKind, EffectKind, EngineEvent, EngineState, EventKind, HostAction, Installation,
    SessionStatus, Surrogate, Transition, UtcMicros, testkit,
};
use ctx_projections::AttachReport;
use ctx_projections::engine::{
    ACTIVATION_CLAIMS_TABLE, ACTIVATION_EXPIRIES_TABLE, ACTIVATION_OUTCOMES_TABLE,
    ACTIVATION_SETTLEMENTS_TABLE, ActivationGuard, AuthorizeError, EffectRefusal, GuardEffect,
    INSTALL_CLAIMS_TABLE, INSTALL_EXPIRIES_TABLE, INSTALL_OUTCOMES_TABLE,
    INSTALL_SETTLEMENTS_TABLE, InstallGuard, InstallOutcome, OutcomeError, ProcessError,
    replay_audit_journal,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::{
    Host, activation_material, binding, catalog_row, expiry, install_material, with_observation,
};
use crate::support;

/// 32 cases by default; `CTX_PROPTEST_CASES` (the suite's knob, default 96) scales it by a third.
fn cases() -> u32 {
    std::env::var("CTX_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(32, |n| (n / 3).max(1))
}

// ------------------------------------------------------------------------------------------------
// Steps
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Step {
    /// A testkit domain event, committed through `Engine::process`.
    History(Op),
    /// Claim pending install `n` at the head (any known install when none is pending).
    ClaimInstall(u8),
    /// Claim the last emitted install (or activation) once it is no longer pending at the head
    /// (or, when it still is or by the high bit of `pick`, an older one that is not).
    ClaimStale {
        activation: bool,
        pick: u8,
    },
    /// Record an outcome for install `pick` (a claimed one unless the high bit is set).
    InstallOutcome {
        pick: u8,
        mode: Mode,
        alternate: bool,
    },
    /// Commit the receipt of install `pick` with its recorded guard; `mismatched` sends the
    /// receipt kind the outcome does not name.
    InstallReceipt {
        pick: u8,
        mismatched: bool,
    },
    /// Claim pending activation `n` at the head (any known activation when none is pending).
    ClaimActivation(u8),
    ActivationOutcome {
        pick: u8,
        alternate: bool,
    },
    /// Commit the `ActionApplied` of activation `pick`, at the outcome's `observed_at` when
    /// `exact`, a second later otherwise.
    ActivationReceipt {
        pick: u8,
        exact: bool,
    },
    /// A move that takes the session forward (see [`Run::progress`]).
    Progress {
        choose: u8,
        variant: u8,
    },
    /// Moves the session clock and the trusted clock, in minutes.
    ClockJump(u8),
    /// `ActionExpired` for pending install or activation `n`, at its expiry.
    ExpireUnclaimed(u8),
    /// The last committed plain event (or guarded receipt, with its guard) again: the stored
    /// transition, nothing written.
    Resubmit {
        guarded: bool,
    },
    /// Drop the engine and journal and open both again on the same directory.
    Reopen,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::History(op) => match op {
                Op::Plan(_) => "event Plan",
                Op::Desired(..) => "event Desired",
                Op::Decide { granted: true, .. } => "event Decide granted",
                Op::Decide { granted: false, .. } => "event Decide denied",
                Op::Receipt(_, 0) => "event Receipt applied (unguarded)",
                Op::Receipt(_, 1) => "event Receipt failed (unguarded)",
                Op::Receipt(..) => "event Receipt expired",
                Op::TurnStarting => "event TurnStarting",
                Op::TurnEnded => "event TurnEnded",
                Op::Submission(_) => "event Submission",
                Op::ToolCall(..) => "event ToolCall",
                Op::Advance(_) => "event Advance",
                Op::SessionEnded => "event SessionEnded",
                Op::RetryCleanup => "event RetryCleanup",
            },
            Step::ClaimInstall(_) => "ClaimInstall",
            Step::ClaimStale {
                activation: false, ..
            } => "ClaimStale install",
            Step::ClaimStale {
                activation: true, ..
            } => "ClaimStale activation",
            Step::InstallOutcome {
                mode: Mode::Applied,
                ..
            } => "InstallOutcome applied",
            Step::InstallOutcome {
                mode: Mode::Failed, ..
            } => "InstallOutcome failed",
            Step::InstallOutcome {
                mode: Mode::Indeterminate,
                ..
            } => "InstallOutcome indeterminate",
            Step::InstallReceipt {
                mismatched: false, ..
            } => "InstallReceipt",
            Step::InstallReceipt {
                mismatched: true, ..
            } => "InstallReceipt mismatched",
            Step::ClaimActivation(_) => "ClaimActivation",
            Step::ActivationOutcome { .. } => "ActivationOutcome",
            Step::ActivationReceipt { exact: true, .. } => "ActivationReceipt",
            Step::ActivationReceipt { exact: false, .. } => "ActivationReceipt late",
            Step::Progress { .. } => "Progress",
            Step::ClockJump(_) => "ClockJump",
            Step::ExpireUnclaimed(_) => "ExpireUnclaimed",
            Step::Resubmit { guarded: false } => "Resubmit",
            Step::Resubmit { guarded: true } => "Resubmit guarded receipt",
            Step::Reopen => "Reopen",
        }
    }
}

fn history_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u8>().prop_map(Op::Plan),
        5 => (any::<u8>(), 1u8..=31).prop_map(|(o, m)| Op::Desired(o, m)),
        4 => (prop::bool::weighted(0.8), any::<bool>())
            .prop_map(|(granted, preapproved)| Op::Decide { granted, preapproved }),
        3 => (any::<u8>(), 0u8..3).prop_map(|(n, h)| Op::Receipt(n, h)),
        1 => Just(Op::TurnStarting),
        1 => Just(Op::TurnEnded),
        1 => any::<u8>().prop_map(Op::Submission),
        1 => (any::<u8>(), any::<bool>()).prop_map(|(n, ok)| Op::ToolCall(n, ok)),
        2 => Just(Op::SessionEnded),
        1 => Just(Op::RetryCleanup),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        28 => (any::<u8>(), any::<u8>())
            .prop_map(|(choose, variant)| Step::Progress { choose, variant }),
        14 => history_op().prop_map(Step::History),
        3 => any::<u8>().prop_map(Step::ClaimInstall),
        3 => (any::<bool>(), any::<u8>())
            .prop_map(|(activation, pick)| Step::ClaimStale { activation, pick }),
        3 => (
            any::<u8>(),
            prop_oneof![
                6 => Just(Mode::Applied),
                1 => Just(Mode::Failed),
                1 => Just(Mode::Indeterminate),
            ],
            prop::bool::weighted(0.15),
        )
            .prop_map(|(pick, mode, alternate)| Step::InstallOutcome { pick, mode, alternate }),
        3 => (any::<u8>(), prop::bool::weighted(0.3))
            .prop_map(|(pick, mismatched)| Step::InstallReceipt { pick, mismatched }),
        3 => any::<u8>().prop_map(Step::ClaimActivation),
        3 => (any::<u8>(), prop::bool::weighted(0.3))
            .prop_map(|(pick, alternate)| Step::ActivationOutcome { pick, alternate }),
        3 => (any::<u8>(), prop::bool::weighted(0.6))
            .prop_map(|(pick, exact)| Step::ActivationReceipt { pick, exact }),
        2 => (1u8..=90).prop_map(Step::ClockJump),
        3 => any::<u8>().prop_map(Step::ExpireUnclaimed),
        2 => any::<bool>().prop_map(|guarded| Step::Resubmit { guarded }),
        2 => Just(Step::Reopen),
    ]
}

// ------------------------------------------------------------------------------------------------
// Counts: how often each step was tried (it had a target) and succeeded, over the whole run.
// ------------------------------------------------------------------------------------------------

static COUNTS: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

fn tally(name: &str, succeeded: bool) {
    let mut counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let entry = counts.entry(name.to_owned()).or_default();
    entry.0 += 1;
    entry.1 += u64::from(succeeded);
}

/// Why the engine refused a plain event, without ids (for the counts).
fn refusal(kind: EventKind, e: &ProcessError) -> String {
    let why = match e {
        ProcessError::Reducer(r) => format!("Reducer({r})"),
        ProcessError::Effect { refusal, .. } => format!("Effect({refusal:?})"),
        other => format!("{other:?}"),
    };
    let why = why.split(['\'', '"']).next().unwrap_or_default().to_owned();
    format!("  refused {kind}: {why}")
}

// ------------------------------------------------------------------------------------------------
// The reference model
// ------------------------------------------------------------------------------------------------

/// An outcome (and, applied or failed, the settlement it leads to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Applied,
    Failed,
    /// Install only: settles by `ActionFailed`, as failed.
    Indeterminate,
}

impl Mode {
    fn install_outcome(self) -> InstallOutcome {
        match self {
            Mode::Applied => InstallOutcome::Applied,
            Mode::Failed => InstallOutcome::Failed,
            Mode::Indeterminate => InstallOutcome::Indeterminate,
        }
    }
}

/// One install or activation action the engine emitted, and what the protocol did with it.
#[derive(Debug)]
struct Tracked {
    effect: GuardEffect,
    action: HostAction,
    /// The epoch (engine handle) whose claim succeeded.
    claimed_in: Option<u32>,
    /// The one outcome: its mode and verification label.
    outcome: Option<(Mode, &'static str)>,
    install_guard: Option<InstallGuard>,
    activation_guard: Option<ActivationGuard>,
    settled: Option<Mode>,
    /// Retired by `ActionExpired` without a claim.
    expired: bool,
}

#[derive(Debug, Default)]
struct Model {
    /// Every install and activation action of the (single) engine stream, in emission order.
    actions: Vec<Tracked>,
    last_install: Option<String>,
    last_activation: Option<String>,
    /// The last plain event committed, to resubmit.
    last_plain: Option<(EngineEvent, Option<Surrogate>, Transition)>,
    /// The last guarded receipt committed (its action id), to resubmit with the action's guard.
    last_guarded: Option<(EngineEvent, String, Transition)>,
}

impl Model {
    fn get(&self, action_id: &str) -> Option<&Tracked> {
        self.actions
            .iter()
            .find(|t| t.action.action_id == action_id)
    }

    fn get_mut(&mut self, action_id: &str) -> Option<&mut Tracked> {
        self.actions
            .iter_mut()
            .find(|t| t.action.action_id == action_id)
    }

    fn of(&self, effect: GuardEffect) -> Vec<String> {
        self.actions
            .iter()
            .filter(|t| t.effect == effect)
            .map(|t| t.action.action_id.clone())
            .collect()
    }
}

/// A chosen forward move.
#[derive(Debug, Clone)]
enum Move {
    Op(Op),
    Claim(GuardEffect, String),
    Outcome(GuardEffect, String),
    Receipt(GuardEffect, String),
    /// The receipt of a pending deactivation or preparation (no claim protocol), by action id.
    Plain(String),
}

fn pick<T: Clone>(pool: &[T], n: u8) -> Option<T> {
    (!pool.is_empty()).then(|| pool[usize::from(n) % pool.len()].clone())
}

/// True when `action` is exactly one pending effect of `kind` at the head.
fn pending_exact(state: &EngineState, kind: EffectKind, action: &HostAction) -> bool {
    let json = action.to_cj();
    let mut same = state
        .pending_effects
        .iter()
        .filter(|p| p.action.action_id == action.action_id);
    matches!(
        (same.next(), same.next()),
        (Some(p), None) if p.effect == kind && p.action.to_cj() == json
    )
}

/// What the head must hold besides the pending effect for an install claim to be granted
/// (spec/engine-store.md §6): the capability absent, inactive and without material, under the
/// committed plan the action was issued by and the session's catalog and policy.
fn install_claimable(
    state: &EngineState,
    action: &HostAction,
    catalog: &str,
    policy: &str,
) -> bool {
    let row = catalog_row(action);
    let Some(id) = action.entity_id.as_deref() else {
        return false;
    };
    let capability_ok = state.capability(id).is_some_and(|c| {
        c.selection == row
            && c.installation == Installation::Absent
            && !c.is_active()
            && c.current_authorized_material.is_null()
            && Some(c.plan_id.as_str()) == action.plan_id.as_deref()
            && c.catalog_snapshot_id == catalog
    });
    let plan_ok = state.committed_plan.as_ref().is_some_and(|p| {
        Some(p.plan_id.as_str()) == action.plan_id.as_deref()
            && p.catalog_snapshot_id == catalog
            && p.capabilities.contains(&row)
    });
    capability_ok && plan_ok && state.install_policy_snapshot_digest.as_deref() == Some(policy)
}

/// The same for an activation claim (spec/engine-store.md §6): installed, inactive, with material.
fn activation_claimable(state: &EngineState, action: &HostAction, host: &str) -> bool {
    action
        .entity_id
        .as_deref()
        .and_then(|id| state.capability(id))
        .is_some_and(|c| {
            c.installation == Installation::Installed
                && !c.is_active()
                && !c.current_authorized_material.is_null()
        })
        && state.host_descriptor_digest == host
}

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

// ------------------------------------------------------------------------------------------------
// The run
// ------------------------------------------------------------------------------------------------

struct Run {
    h: Host,
    m: Model,
    /// What each step did, reported with a failure.
    trace: Vec<String>,
    /// The committed head revision the model expects.
    revision: u64,
}

type Checked = Result<(), TestCaseError>;

impl Run {
    fn note(&mut self, name: &str, succeeded: bool) {
        tally(name, succeeded);
        let outcome = if succeeded { "ok" } else { "refused" };
        self.trace.push(format!("{name}: {outcome}"));
    }

    fn state(&self) -> EngineState {
        self.h.state().unwrap()
    }

    /// Checks a refused write: nothing in the journal or at the head changed.
    fn unchanged(&self, position: u64, what: &str) -> Checked {
        prop_assert_eq!(
            self.h.position(),
            position,
            "a refused {} must leave the journal head position unchanged",
            what
        );
        prop_assert_eq!(
            self.h.revision(),
            self.revision,
            "a refused {} moved the head",
            what
        );
        Ok(())
    }

    /// Checks a committed transition and learns the actions it emitted.
    fn committed(&mut self, t: &Transition, event: &EngineEvent, position: u64) -> Checked {
        prop_assert_eq!(
            t.from_revision,
            self.revision,
            "transition of {}",
            event.kind
        );
        prop_assert_eq!(
            t.to_revision,
            self.revision + 1,
            "transition of {}",
            event.kind
        );
        let snapshot = self.h.revision();
        prop_assert_eq!(
            t.to_revision,
            snapshot,
            "the committed transition's revision must be the snapshot revision"
        );
        prop_assert_eq!(
            self.h.position(),
            position + 1,
            "a commit writes exactly one journal record"
        );
        self.revision = t.to_revision;
        self.h.s.revision = t.to_revision;
        let state = self.state();
        prop_assert_eq!(state.revision, t.to_revision);
        for a in &t.actions {
            let effect = match a.kind {
                ActionKind::InstallCapability => GuardEffect::Install,
                ActionKind::ActivateCapability => GuardEffect::Activation,
                _ => continue,
            };
            prop_assert!(
                self.m.get(&a.action_id).is_none(),
                "action {} was emitted twice",
                a.action_id
            );
            match effect {
                GuardEffect::Install => self.m.last_install = Some(a.action_id.clone()),
                GuardEffect::Activation => self.m.last_activation = Some(a.action_id.clone()),
            }
            self.m.actions.push(Tracked {
                effect,
                action: a.clone(),
                claimed_in: None,
                outcome: None,
                install_guard: None,
                activation_guard: None,
                settled: None,
                expired: false,
            });
        }
        Ok(())
    }

    /// A plain (unguarded) event through `Engine::process`.
    fn process(
        &mut self,
        name: &'static str,
        event: &EngineEvent,
        decision: Option<Surrogate>,
    ) -> Checked {
        let position = self.h.position();
        let target = event.kind.is_receipt().then(|| {
            event
                .payload
                .get_str("action_id")
                .unwrap_or_default()
                .to_owned()
        });
        let now = self.h.now();
        match self.h.engine().process(event, decision.clone()) {
            Ok(t) => {
                self.note(name, true);
                self.committed(&t, event, position)?;
                if let Some(id) = target
                    && let Some(tracked) = self.m.get_mut(&id)
                {
                    // Installs and activations settle only with a guard; without one, only an
                    // unclaimed action past its expiry retires.
                    prop_assert_eq!(
                        event.kind,
                        EventKind::ActionExpired,
                        "{} of {} action {} committed without an execution outcome",
                        event.kind,
                        tracked.effect.as_str(),
                        id
                    );
                    // ...or an activation claimed but never observed, which lapses.
                    let lapses =
                        tracked.effect == GuardEffect::Activation && tracked.outcome.is_none();
                    prop_assert!(
                        tracked.claimed_in.is_none() || lapses,
                        "claimed action {} expired",
                        id
                    );
                    prop_assert!(!tracked.expired, "action {} expired twice", id);
                    prop_assert!(
                        now >= expiry(&tracked.action),
                        "action {} expired early",
                        id
                    );
                    tracked.expired = true;
                }
                self.m.last_plain = Some((event.clone(), decision, t));
            }
            Err(e) => {
                self.note(name, false);
                tally(&refusal(event.kind, &e), true);
                self.unchanged(position, &event.kind.to_string())?;
                let typed = !matches!(
                    e,
                    ProcessError::RevisionConflict { .. }
                        | ProcessError::EventIdCollision { .. }
                        | ProcessError::Divergence(_)
                        | ProcessError::Store(_)
                        | ProcessError::Unsupported(_)
                );
                prop_assert!(
                    typed,
                    "{} refused with an untyped or impossible error: {:?}",
                    event.kind,
                    e
                );
            }
        }
        Ok(())
    }

    /// A testkit op through `Engine::process` (nothing when it has no meaning at the head).
    fn history(&mut self, op: Op) -> Checked {
        let state = self.state();
        let Some((mut event, decision)) = event_for(&mut self.h.s, &state, op) else {
            return Ok(());
        };
        with_observation(&mut event);
        // An expiry op moves the session clock to the action's expiry: the trusted clock follows.
        self.h.sync_clock();
        self.process(Step::History(op).name(), &event, decision)
    }

    /// One move that takes the session forward, chosen among those that make sense at the head:
    /// decide the pending consent, plan, desire, claim / observe / settle a pending install or
    /// activation, settle another pending effect.
    fn progress(&mut self, choose: u8, variant: u8) -> Checked {
        let state = self.state();
        let now = self.h.now();
        let (catalog, policy, host) = (
            self.h.s.catalog.clone(),
            self.h.s.policy.clone(),
            self.h.s.host_descriptor.clone(),
        );
        let active = state.session_status == SessionStatus::Active;
        let mut moves: Vec<Move> = Vec::new();
        if !state.pending_consents.is_empty() {
            moves.push(Move::Op(Op::Decide {
                granted: variant & 7 != 0,
                preapproved: variant & 8 != 0,
            }));
        }
        if active && state.committed_plan.is_none() {
            // Always with the first install row; the other rows by the variant.
            moves.push(Move::Op(Op::Plan(variant | 0x10)));
        }
        if active
            && state.committed_plan.is_some()
            && state.pending_consents.is_empty()
            && !state.capabilities.iter().any(|c| c.is_desired())
        {
            moves.push(Move::Op(Op::Desired(variant, (variant >> 3) | 1)));
        }
        for t in &self.m.actions {
            let id = t.action.action_id.clone();
            let in_time = now < expiry(&t.action);
            let fresh = t.claimed_in.is_none() && !t.expired;
            let (kind, claimable) = match t.effect {
                GuardEffect::Install => (
                    EffectKind::Install,
                    install_claimable(&state, &t.action, &catalog, &policy),
                ),
                GuardEffect::Activation => (
                    EffectKind::Activate,
                    activation_claimable(&state, &t.action, &host),
                ),
            };
            let pending = pending_exact(&state, kind, &t.action);
            if pending && claimable && fresh && in_time {
                moves.push(Move::Claim(t.effect, id.clone()));
            }
            let observable = t.effect == GuardEffect::Install || in_time;
            if t.claimed_in.is_some() && t.outcome.is_none() && observable {
                moves.push(Move::Outcome(t.effect, id.clone()));
            }
            let guarded = t.install_guard.is_some() || t.activation_guard.is_some();
            if pending && guarded && t.settled.is_none() {
                moves.push(Move::Receipt(t.effect, id));
            }
        }
        for p in &state.pending_effects {
            if matches!(p.effect, EffectKind::Deactivate | EffectKind::Prepare) {
                moves.push(Move::Plain(p.action.action_id.clone()));
            }
        }
        let Some(chosen) = pick(&moves, choose) else {
            return Ok(());
        };
        match chosen {
            Move::Op(op) => self.history(op),
            Move::Claim(effect, id) => {
                let name = match effect {
                    GuardEffect::Install => "ClaimInstall",
                    GuardEffect::Activation => "ClaimActivation",
                };
                self.claim(name, effect, &id)
            }
            Move::Outcome(GuardEffect::Install, id) => {
                let mode = match variant % 8 {
                    0 => Mode::Failed,
                    1 => Mode::Indeterminate,
                    _ => Mode::Applied,
                };
                let name = Step::InstallOutcome {
                    pick: 0,
                    mode,
                    alternate: false,
                }
                .name();
                self.install_outcome(name, &id, mode, false)
            }
            Move::Outcome(GuardEffect::Activation, id) => {
                self.activation_outcome("ActivationOutcome", &id, false)
            }
            Move::Receipt(GuardEffect::Install, id) => {
                self.install_receipt("InstallReceipt", &id, false)
            }
            Move::Receipt(GuardEffect::Activation, id) => {
                self.activation_receipt("ActivationReceipt", &id, true)
            }
            Move::Plain(id) => {
                let Some(pending) = state.pending_effect_by_action(&id) else {
                    unreachable!("the move was made from this head");
                };
                let action = pending.action.clone();
                let event = if variant & 7 == 0 {
                    self.h.s.failed(&action)
                } else {
                    self.h.s.applied(&action)
                };
                self.process(
                    "event Receipt of a deactivation or preparation",
                    &event,
                    None,
                )
            }
        }
    }

    fn run(&mut self, step: Step) -> Checked {
        match step {
            Step::History(op) => self.history(op)?,
            Step::ClaimInstall(n) => {
                let state = self.state();
                let pending: Vec<String> = state
                    .pending_effects
                    .iter()
                    .filter(|p| p.effect == EffectKind::Install)
                    .map(|p| p.action.action_id.clone())
                    .collect();
                let pool = if pending.is_empty() {
                    self.m.of(GuardEffect::Install)
                } else {
                    pending
                };
                if let Some(id) = pick(&pool, n) {
                    self.claim(step.name(), GuardEffect::Install, &id)?;
                }
            }
            Step::ClaimActivation(n) => {
                let state = self.state();
                let pending: Vec<String> = state
                    .pending_effects
                    .iter()
                    .filter(|p| p.action.kind == ActionKind::ActivateCapability)
                    .map(|p| p.action.action_id.clone())
                    .collect();
                let pool = if pending.is_empty() {
                    self.m.of(GuardEffect::Activation)
                } else {
                    pending
                };
                if let Some(id) = pick(&pool, n) {
                    self.claim(step.name(), GuardEffect::Activation, &id)?;
                }
            }
            Step::ClaimStale {
                activation,
                pick: n,
            } => {
                let (last, effect) = if activation {
                    (self.m.last_activation.clone(), GuardEffect::Activation)
                } else {
                    (self.m.last_install.clone(), GuardEffect::Install)
                };
                let state = self.state();
                let stale: Vec<String> = self
                    .m
                    .of(effect)
                    .into_iter()
                    .filter(|id| state.pending_effect_by_action(id).is_none())
                    .collect();
                // The last emitted one once the head moved past it, else an older one.
                let chosen = match last {
                    Some(id) if stale.contains(&id) && n & 0x80 == 0 => Some(id),
                    _ => pick(&stale, n),
                };
                if let Some(id) = chosen {
                    let position = self.h.position();
                    self.claim(step.name(), effect, &id)?;
                    prop_assert_eq!(
                        self.h.position(),
                        position,
                        "a stale claim {} was granted",
                        id
                    );
                }
            }
            Step::InstallOutcome {
                pick: n,
                mode,
                alternate,
            } => {
                if let Some(id) = self.choose(GuardEffect::Install, n, |t| t.claimed_in.is_some()) {
                    self.install_outcome(step.name(), &id, mode, alternate)?;
                }
            }
            Step::InstallReceipt {
                pick: n,
                mismatched,
            } => {
                if let Some(id) =
                    self.choose(GuardEffect::Install, n, |t| t.install_guard.is_some())
                {
                    self.install_receipt(step.name(), &id, mismatched)?;
                }
            }
            Step::ActivationOutcome { pick: n, alternate } => {
                if let Some(id) =
                    self.choose(GuardEffect::Activation, n, |t| t.claimed_in.is_some())
                {
                    self.activation_outcome(step.name(), &id, alternate)?;
                }
            }
            Step::ActivationReceipt { pick: n, exact } => {
                if let Some(id) =
                    self.choose(GuardEffect::Activation, n, |t| t.activation_guard.is_some())
                {
                    self.activation_receipt(step.name(), &id, exact)?;
                }
            }
            Step::Progress { choose, variant } => self.progress(choose, variant)?,
            Step::ClockJump(minutes) => {
                self.h.advance(i64::from(minutes) * 60 * 1_000_000);
                self.note(step.name(), true);
            }
            Step::ExpireUnclaimed(n) => self.expire(step.name(), n)?,
            Step::Resubmit { guarded: true } => {
                if let Some((event, id, stored)) = self.m.last_guarded.clone() {
                    let position = self.h.position();
                    let t = self.m.get(&id).unwrap();
                    let again = match (&t.install_guard, &t.activation_guard) {
                        (Some(g), _) => self.h.engine().process_install_receipt(&event, g),
                        (_, Some(g)) => self.h.engine().process_activation_receipt(&event, g),
                        _ => unreachable!("a settled action has a guard"),
                    };
                    let same = matches!(&again, Ok(t) if *t == stored);
                    self.note(step.name(), same);
                    prop_assert!(
                        same,
                        "resubmitting receipt {} returned {:?}",
                        event.event_id,
                        again
                    );
                    self.unchanged(position, "receipt resubmission")?;
                }
            }
            Step::Resubmit { guarded: false } => {
                if let Some((event, decision, stored)) = self.m.last_plain.clone() {
                    let position = self.h.position();
                    let again = self.h.engine().process(&event, decision);
                    let same = matches!(&again, Ok(t) if *t == stored);
                    self.note(step.name(), same);
                    prop_assert!(same, "resubmitting {} returned {:?}", event.event_id, again);
                    self.unchanged(position, "resubmission")?;
                }
            }
            Step::Reopen => {
                self.h.reopen();
                let reports = self.h.engine().projections().attached().to_vec();
                let fresh = reports.iter().all(|(_, r)| *r == AttachReport::Fresh);
                self.note(step.name(), fresh);
                prop_assert!(fresh, "a clean reopen replayed something: {:?}", reports);
                prop_assert_eq!(
                    self.h.revision(),
                    self.revision,
                    "the head survives a reopen"
                );
            }
        }
        self.check_statuses()
    }

    /// A claim of the tracked action `id`, checked against the model.
    fn claim(&mut self, name: &'static str, effect: GuardEffect, id: &str) -> Checked {
        let state = self.state();
        let epoch = self.h.epoch;
        let now = self.h.now();
        let position = self.h.position();
        let Some(tracked) = self.m.get(id) else {
            prop_assert!(false, "action {} was never emitted", id);
            unreachable!()
        };
        let action = tracked.action.clone();
        let (pending, claimable) = match effect {
            GuardEffect::Install => (
                pending_exact(&state, EffectKind::Install, &action),
                install_claimable(&state, &action, &self.h.s.catalog, &self.h.s.policy),
            ),
            GuardEffect::Activation => (
                pending_exact(&state, EffectKind::Activate, &action),
                activation_claimable(&state, &action, &self.h.s.host_descriptor),
            ),
        };
        let in_time = now < expiry(&action);
        let fresh = tracked.claimed_in.is_none() && !tracked.expired;
        let result = match effect {
            GuardEffect::Install => self.h.claim_install(&action),
            GuardEffect::Activation => {
                let host = self.h.s.host_descriptor.clone();
                self.h
                    .engine()
                    .authorize_activation(&action, &binding(), &host)
            }
        };
        self.note(name, result.is_ok());
        let tracked = self.m.get_mut(id).unwrap();
        match result {
            Ok(()) => {
                prop_assert!(
                    fresh,
                    "{} action {} was claimed twice (or after it expired)",
                    effect.as_str(),
                    id
                );
                prop_assert!(
                    pending,
                    "{} action {} was claimed while not pending at the head",
                    effect.as_str(),
                    id
                );
                prop_assert!(
                    in_time,
                    "{} action {} was claimed at/after its expiry",
                    effect.as_str(),
                    id
                );
                prop_assert_eq!(self.h.position(), position + 1, "a claim writes one record");
                tracked.claimed_in = Some(epoch);
            }
            Err(e) => {
                prop_assert_eq!(self.h.position(), position, "a refused claim wrote: {}", e);
                let allowed = match &e {
                    AuthorizeError::AlreadyClaimed {
                        effect: of,
                        action_id,
                    } => *of == effect && action_id == id && tracked.claimed_in.is_some(),
                    AuthorizeError::NotPending(_) => !(pending && claimable),
                    AuthorizeError::ClaimExpired {
                        effect: of,
                        action_id,
                    } => *of == effect && action_id == id && (!in_time || tracked.expired),
                    _ => false,
                };
                prop_assert!(
                    allowed,
                    "claim of {} action {} refused with {:?} \
                     (pending {}, claimable {}, in time {}, model {:?})",
                    effect.as_str(),
                    id,
                    e,
                    pending,
                    claimable,
                    in_time,
                    (tracked.claimed_in, tracked.expired)
                );
                prop_assert!(
                    !(pending && claimable && in_time && fresh),
                    "a fresh pending {} action {} in time was refused: {}",
                    effect.as_str(),
                    id,
                    e
                );
            }
        }
        Ok(())
    }

    /// Chooses a tracked action of `effect`: among those with `preferred` unless the high bit of
    /// `n` is set (or none has it).
    fn choose(
        &self,
        effect: GuardEffect,
        n: u8,
        preferred: impl Fn(&Tracked) -> bool,
    ) -> Option<String> {
        let all = self.m.of(effect);
        let some: Vec<String> = all
            .iter()
            .filter(|id| self.m.get(id).is_some_and(&preferred))
            .cloned()
            .collect();
        if n & 0x80 == 0 && !some.is_empty() {
            pick(&some, n)
        } else {
            pick(&all, n)
        }
    }

    fn install_outcome(
        &mut self,
        name: &'static str,
        id: &str,
        mode: Mode,
        alternate: bool,
    ) -> Checked {
        let id = id.to_owned();
        let position = self.h.position();
        let action = self.m.get(&id).unwrap().action.clone();
        let outcome = mode.install_outcome();
        let applied = mode == Mode::Applied;
        let label = if alternate {
            "verification-b"
        } else {
            "verification-a"
        };
        let material = applied.then(|| install_material(&action));
        let result = self.h.engine().record_install_outcome(
            &action,
            &binding(),
            outcome,
            material.as_deref(),
            &testkit::digest(label),
        );
        self.note(name, result.is_ok());
        let t = self.m.get_mut(&id).unwrap();
        let consistent = t.outcome.is_none_or(|o| o == (mode, label));
        match result {
            Ok(guard) => {
                prop_assert!(
                    t.claimed_in.is_some(),
                    "install {} has an outcome without a claim",
                    id
                );
                prop_assert!(
                    consistent,
                    "install {} has two distinct outcomes {:?} and {:?}",
                    id,
                    t.outcome,
                    (mode, label)
                );
                prop_assert!(
                    t.settled.is_none(),
                    "install {} got an outcome after its settlement",
                    id
                );
                prop_assert_eq!(guard.action_id(), id.as_str());
                prop_assert_eq!(guard.outcome(), outcome);
                let wrote = u64::from(t.outcome.is_none());
                prop_assert_eq!(
                    self.h.position(),
                    position + wrote,
                    "outcome records of install {}",
                    id
                );
                if t.outcome.is_none() && t.claimed_in != Some(self.h.epoch) {
                    tally(
                        "  outcome recorded by a later engine handle than its claim",
                        true,
                    );
                }
                t.outcome = Some((mode, label));
                t.install_guard = Some(guard);
            }
            Err(e) => {
                prop_assert_eq!(
                    self.h.position(),
                    position,
                    "a refused outcome wrote: {}",
                    e
                );
                let allowed = match &e {
                    OutcomeError::ClaimRequired { effect, action_id } => {
                        *effect == GuardEffect::Install
                            && *action_id == id
                            && t.claimed_in.is_none()
                    }
                    OutcomeError::Conflict(_) => !consistent,
                    OutcomeError::Settled { .. } => t.settled.is_some(),
                    _ => false,
                };
                prop_assert!(
                    allowed,
                    "install outcome for {} refused with {:?} (model {:?})",
                    id,
                    e,
                    (t.claimed_in, t.outcome, t.settled)
                );
                // Any handle (also one opened after the claim) may record the one outcome.
                prop_assert!(
                    !(t.claimed_in.is_some() && consistent && t.settled.is_none()),
                    "a consistent outcome for claimed install {} was refused: {}",
                    id,
                    e
                );
            }
        }
        Ok(())
    }

    fn install_receipt(&mut self, name: &'static str, id: &str, mismatched: bool) -> Checked {
        let id = id.to_owned();
        let t = self.m.get(&id).unwrap();
        let (Some(guard), Some((mode, _))) = (&t.install_guard, t.outcome) else {
            return Ok(());
        };
        let action = t.action.clone();
        let settled_before = t.settled;
        let state = self.state();
        let pending = pending_exact(&state, EffectKind::Install, &action);
        // Applied settles by ActionApplied; failed and indeterminate by ActionFailed.
        let applied = (mode == Mode::Applied) != mismatched;
        let event = if applied {
            self.h.s.applied(&action)
        } else {
            self.h.s.failed(&action)
        };
        let position = self.h.position();
        let result = self.h.engine().process_install_receipt(&event, guard);
        self.note(name, result.is_ok());
        match result {
            Ok(transition) => {
                prop_assert!(
                    !mismatched,
                    "install {} settled by a receipt its outcome does not name",
                    id
                );
                prop_assert!(settled_before.is_none(), "install {} settled twice", id);
                prop_assert!(
                    pending,
                    "install {} settled while not pending at the head",
                    id
                );
                self.committed(&transition, &event, position)?;
                // Indeterminate settles as failed: the capability stays absent.
                let settled = if mode == Mode::Applied {
                    Mode::Applied
                } else {
                    Mode::Failed
                };
                let cap = action.entity_id.as_deref().unwrap_or_default();
                let installed = self
                    .state()
                    .capability(cap)
                    .is_some_and(|c| c.installation == Installation::Installed);
                prop_assert_eq!(
                    installed,
                    settled == Mode::Applied,
                    "installation of {} after its {:?} install settled",
                    cap,
                    mode
                );
                self.m.get_mut(&id).unwrap().settled = Some(settled);
                self.m.last_guarded = Some((event, id.clone(), transition));
            }
            Err(e) => {
                self.unchanged(position, "install receipt")?;
                let allowed = matches!(
                    &e,
                    ProcessError::Authority(_)
                        | ProcessError::Effect {
                            effect: GuardEffect::Install,
                            refusal: EffectRefusal::ClaimSettled | EffectRefusal::OutcomeConflict,
                            ..
                        }
                );
                prop_assert!(allowed, "install receipt for {} refused with {:?}", id, e);
                prop_assert!(
                    !(pending && !mismatched && settled_before.is_none()),
                    "the receipt of pending install {} with its outcome's guard was refused: {}",
                    id,
                    e
                );
            }
        }
        Ok(())
    }

    fn activation_outcome(&mut self, name: &'static str, id: &str, alternate: bool) -> Checked {
        let id = id.to_owned();
        let now = self.h.now();
        let position = self.h.position();
        let action = self.m.get(&id).unwrap().action.clone();
        let label = if alternate { "seen-b" } else { "seen-a" };
        let result = self.h.engine().record_activation_outcome(
            &action,
            &binding(),
            &activation_material(&action),
            &testkit::digest(label),
        );
        self.note(name, result.is_ok());
        let in_time = now < expiry(&action);
        let t = self.m.get_mut(&id).unwrap();
        let consistent = t.outcome.is_none_or(|o| o == (Mode::Applied, label));
        match result {
            Ok(guard) => {
                prop_assert!(
                    t.claimed_in.is_some(),
                    "activation {} has an outcome without a claim",
                    id
                );
                prop_assert!(consistent, "activation {} has two distinct outcomes", id);
                prop_assert!(
                    t.settled.is_none(),
                    "activation {} got an outcome after its settlement",
                    id
                );
                prop_assert!(
                    in_time || t.outcome.is_some(),
                    "activation {} was observed at/after its expiry",
                    id
                );
                prop_assert_eq!(guard.action_id(), id.as_str());
                let wrote = u64::from(t.outcome.is_none());
                prop_assert_eq!(
                    self.h.position(),
                    position + wrote,
                    "outcome records of activation {}",
                    id
                );
                if t.outcome.is_none() && t.claimed_in != Some(self.h.epoch) {
                    tally(
                        "  outcome recorded by a later engine handle than its claim",
                        true,
                    );
                }
                t.outcome = Some((Mode::Applied, label));
                t.activation_guard = Some(guard);
            }
            Err(e) => {
                prop_assert_eq!(
                    self.h.position(),
                    position,
                    "a refused outcome wrote: {}",
                    e
                );
                let allowed = match &e {
                    OutcomeError::ClaimRequired { effect, action_id } => {
                        *effect == GuardEffect::Activation
                            && *action_id == id
                            && t.claimed_in.is_none()
                    }
                    OutcomeError::Conflict(_) => !consistent,
                    OutcomeError::Settled { .. } => t.settled.is_some(),
                    OutcomeError::Expired { action_id } => *action_id == id && !in_time,
                    _ => false,
                };
                prop_assert!(
                    allowed,
                    "activation outcome for {} refused with {:?} (model {:?})",
                    id,
                    e,
                    (t.claimed_in, t.outcome, t.settled)
                );
                prop_assert!(
                    !(t.claimed_in.is_some() && consistent && t.settled.is_none() && in_time),
                    "a consistent outcome for claimed activation {} in time was refused: {}",
                    id,
                    e
                );
            }
        }
        Ok(())
    }

    fn activation_receipt(&mut self, name: &'static str, id: &str, exact: bool) -> Checked {
        let id = id.to_owned();
        let t = self.m.get(&id).unwrap();
        let Some(guard) = &t.activation_guard else {
            return Ok(());
        };
        let action = t.action.clone();
        let settled_before = t.settled;
        let status = self
            .h
            .engine()
            .activation_execution_status(&action)
            .unwrap();
        prop_assert!(
            status.outcome_recorded,
            "activation {} has a guard but no outcome",
            id
        );
        let observed = UtcMicros::parse(status.observed_at.as_deref().unwrap()).unwrap();
        let state = self.state();
        let pending = pending_exact(&state, EffectKind::Activate, &action);
        let saved = self.h.s.now;
        self.h.s.now = if exact {
            observed
        } else {
            observed.checked_add(1_000_000).unwrap()
        };
        let event = self.h.s.applied(&action);
        self.h.s.now = saved;
        let position = self.h.position();
        let result = self.h.engine().process_activation_receipt(&event, guard);
        self.note(name, result.is_ok());
        match result {
            Ok(transition) => {
                prop_assert!(
                    exact,
                    "activation {} settled by a receipt at another time than its observation",
                    id
                );
                prop_assert!(settled_before.is_none(), "activation {} settled twice", id);
                prop_assert!(
                    pending,
                    "activation {} settled while not pending at the head",
                    id
                );
                self.committed(&transition, &event, position)?;
                let cap = action.entity_id.as_deref().unwrap_or_default();
                let active = self.state().capability(cap).is_some_and(|c| c.is_active());
                prop_assert!(active, "{} is not active after its activation settled", cap);
                self.m.get_mut(&id).unwrap().settled = Some(Mode::Applied);
                self.m.last_guarded = Some((event, id.clone(), transition));
            }
            Err(e) => {
                self.unchanged(position, "activation receipt")?;
                let allowed = matches!(
                    &e,
                    ProcessError::Authority(_)
                        | ProcessError::Effect {
                            effect: GuardEffect::Activation,
                            refusal: EffectRefusal::ClaimSettled | EffectRefusal::OutcomeConflict,
                            ..
                        }
                );
                prop_assert!(
                    allowed,
                    "activation receipt for {} refused with {:?}",
                    id,
                    e
                );
                prop_assert!(
                    !(pending && exact && settled_before.is_none()),
                    "the exact receipt of pending activation {} with its guard was refused: {}",
                    id,
                    e
                );
            }
        }
        Ok(())
    }

    fn expire(&mut self, name: &'static str, n: u8) -> Checked {
        let state = self.state();
        let pool: Vec<HostAction> = state
            .pending_effects
            .iter()
            .filter(|p| matches!(p.effect, EffectKind::Install | EffectKind::Activate))
            .map(|p| p.action.clone())
            .collect();
        // Mostly an unclaimed one; a claimed one when the high bit is set (or none is unclaimed).
        let unclaimed: Vec<HostAction> = pool
            .iter()
            .filter(|a| {
                self.m
                    .get(&a.action_id)
                    .is_none_or(|t| t.claimed_in.is_none())
            })
            .cloned()
            .collect();
        let pool = if n & 0x80 == 0 && !unclaimed.is_empty() {
            unclaimed
        } else {
            pool
        };
        let Some(action) = pick(&pool, n) else {
            return Ok(());
        };
        let expires = expiry(&action);
        if self.h.s.now < expires {
            self.h.s.now = expires;
        }
        self.h.sync_clock();
        let event = self.h.s.expired(&action);
        let claimed = self
            .m
            .get(&action.action_id)
            .is_some_and(|t| t.claimed_in.is_some());
        // An activation claimed but never observed lapses at its expiry; every other claimed
        // action must settle through its outcome.
        let lapses = action.kind == ActionKind::ActivateCapability
            && self
                .m
                .get(&action.action_id)
                .is_some_and(|t| t.claimed_in.is_some() && t.outcome.is_none());
        let position = self.h.position();
        let result = self.h.engine().process(&event, None);
        self.note(name, result.is_ok());
        match result {
            Ok(t) => {
                self.committed(&t, &event, position)?;
                let tracked = self.m.get_mut(&action.action_id).unwrap();
                prop_assert!(
                    !claimed || lapses,
                    "claimed action {} expired",
                    action.action_id
                );
                prop_assert!(
                    !tracked.expired,
                    "action {} expired twice",
                    action.action_id
                );
                tracked.expired = true;
            }
            Err(e) => {
                self.unchanged(position, "expiry")?;
                let refused_as_claimed = matches!(
                    &e,
                    ProcessError::Effect {
                        refusal: EffectRefusal::AlreadyClaimed,
                        ..
                    }
                );
                prop_assert!(
                    claimed && !lapses && refused_as_claimed,
                    "the expiry of pending action {} (claimed {}) was refused: {:?}",
                    action.action_id,
                    claimed,
                    e
                );
            }
        }
        Ok(())
    }

    /// A failure with the steps that led to it.
    fn explain(&self, e: TestCaseError) -> TestCaseError {
        TestCaseError::fail(format!("{e}\nsteps taken:\n  {}", self.trace.join("\n  ")))
    }

    /// The engine's execution status of every tracked action agrees with the model.
    fn check_statuses(&self) -> Checked {
        prop_assert_eq!(self.h.revision(), self.revision, "the head revision");
        for t in &self.m.actions {
            let id = &t.action.action_id;
            let (claimed, recorded, settled) = match t.effect {
                GuardEffect::Install => {
                    let s = self.h.engine().install_execution_status(&t.action).unwrap();
                    let recorded = t.outcome.map(|(m, _)| m.install_outcome());
                    prop_assert_eq!(s.outcome, recorded, "outcome of install {}", id);
                    (s.claimed, s.outcome_recorded, s.settled)
                }
                GuardEffect::Activation => {
                    let s = self
                        .h
                        .engine()
                        .activation_execution_status(&t.action)
                        .unwrap();
                    (s.claimed, s.outcome_recorded, s.settled)
                }
            };
            prop_assert_eq!(
                claimed,
                t.claimed_in.is_some(),
                "claimed: {} {}",
                t.effect.as_str(),
                id
            );
            prop_assert_eq!(
                recorded,
                t.outcome.is_some(),
                "outcome: {} {}",
                t.effect.as_str(),
                id
            );
            prop_assert_eq!(
                settled,
                t.settled.is_some(),
                "settled: {} {}",
                t.effect.as_str(),
                id
            );
        }
        Ok(())
    }

    /// The end of a history: every projection rebuilds byte for byte, the replay audit is clean,
    /// the journal verifies and the effect tables hold exactly what the model granted.
    fn finish(&mut self) -> Checked {
        let engine = self.h.engine();
        let names: Vec<&'static str> = engine
            .projections()
            .attached()
            .iter()
            .map(|(n, _)| *n)
            .collect();
        prop_assert_eq!(
            names.len(),
            3,
            "the engine attaches three projections: {:?}",
            names
        );
        for name in names {
            let report = engine.projections().check(name).unwrap();
            prop_assert!(
                report.is_equal(),
                "{}: incremental != rebuilt ({:?})",
                name,
                report
            );
        }
        let audit = engine.replay_audit(&self.h.s.scope).unwrap();
        prop_assert!(audit.is_clean(), "replay audit: {:?}", audit.divergence());
        prop_assert_eq!(audit.revisions_checked(), self.revision);
        let standalone = replay_audit_journal(engine.journal(), &self.h.s.scope).unwrap();
        prop_assert!(
            standalone.is_clean(),
            "journal replay audit: {:?}",
            standalone.divergence()
        );
        let verify = engine.journal().verify().unwrap();
        prop_assert!(verify.is_ok(), "journal verify: {:?}", verify.failures);
        let journal = engine.journal();
        let count = |effect: GuardEffect, f: &dyn Fn(&Tracked) -> bool| {
            self.m
                .actions
                .iter()
                .filter(|t| t.effect == effect && f(t))
                .count()
        };
        for (effect, tables) in [
            (
                GuardEffect::Install,
                [
                    INSTALL_CLAIMS_TABLE,
                    INSTALL_OUTCOMES_TABLE,
                    INSTALL_SETTLEMENTS_TABLE,
                    INSTALL_EXPIRIES_TABLE,
                ],
            ),
            (
                GuardEffect::Activation,
                [
                    ACTIVATION_CLAIMS_TABLE,
                    ACTIVATION_OUTCOMES_TABLE,
                    ACTIVATION_SETTLEMENTS_TABLE,
                    ACTIVATION_EXPIRIES_TABLE,
                ],
            ),
        ] {
            let expected = [
                count(effect, &|t| t.claimed_in.is_some()),
                count(effect, &|t| t.outcome.is_some()),
                count(effect, &|t| t.settled.is_some()),
                count(effect, &|t| t.expired),
            ];
            let found = tables.map(|table| table_len(journal, table));
            prop_assert_eq!(
                found,
                expected,
                "{} claims, outcomes, settlements, expiries",
                effect.as_str()
            );
        }
        Ok(())
    }
}

#[test]
fn engine_histories_keep_exactly_once_and_rebuild_byte_for_byte() {
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let strategy = (
        prop_oneof![6 => Just("managing"), 1 => Just("activating"), 1 => Just("observing")],
        prop::collection::vec(step(), 1..40),
    );
    let started = std::time::Instant::now();
    let result = runner.run(&strategy, |(level, steps)| {
        let _shared = support::shared();
        let mut h = Host::new("prop");
        h.start(level);
        let mut run = Run {
            h,
            m: Model::default(),
            trace: Vec::new(),
            revision: 1,
        };
        for step in steps {
            run.run(step).map_err(|e| run.explain(e))?;
        }
        run.finish().map_err(|e| run.explain(e))
    });
    let counts = COUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    eprintln!(
        "engine_histories_keep_exactly_once_and_rebuild_byte_for_byte: {} cases in {:?}",
        cases(),
        started.elapsed()
    );
    for (name, (tried, succeeded)) in &counts {
        if name.starts_with(' ') {
            eprintln!("{name} x{tried}");
        } else {
            eprintln!("  {name:<40} tried {tried:>5}  succeeded {succeeded:>5}");
        }
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must keep reaching the deep protocol states, not just pass vacuously.
    if cases() >= 32 {
        for name in [
            "ClaimInstall",
            "InstallOutcome applied",
            "InstallReceipt",
            "ClaimActivation",
            "ActivationOutcome",
            "ActivationReceipt",
            "Reopen",
            "Resubmit",
        ] {
            let succeeded = counts.get(name).map_or(0, |c| c.1);
            assert!(
                succeeded > 0,
                "no successful \"{name}\" step in {} cases",
                cases()
            );
        }
    }
}
