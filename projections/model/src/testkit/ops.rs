//! Random-but-valid engine histories: an [`Op`] is interpreted against the current state and turns
//! into an event the reducer should accept (or, for a few ops, a deliberately invalid one). Used
//! by the reducer's property test, the engine's property test and the benchmarks.

use crate::json::Json;
use crate::protocol::{EngineEvent, EventKind};
use crate::replay::Surrogate;
use crate::state::{EffectKind, EngineState, SessionStatus};

use super::{RowKind, Session, decision, row};

/// The fixture catalog plans are drawn from.
pub fn catalog() -> Vec<Json> {
    vec![
        row(RowKind::Load, "skill", "alpha"),
        row(RowKind::Load, "skill", "bravo"),
        row(RowKind::Load, "agent", "charlie"),
        row(RowKind::Load, "skill", "delta"),
        row(RowKind::Install, "skill", "echo"),
        row(RowKind::Install, "agent", "foxtrot"),
        row(RowKind::InstallSensitive, "mcp-server", "golf"),
        row(RowKind::Manual, "harness", "hotel"),
    ]
}

/// One step of a generated history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A new plan over the catalog rows selected by the mask (at most five are kept).
    Plan(u8),
    /// A desired set by owner `n % 2` over the plan rows selected by the mask.
    Desired(u8, u8),
    /// A decision on the pending consent.
    Decide {
        granted: bool,
        preapproved: bool,
    },
    /// A receipt for pending effect `n`: 0 applied, 1 failed, 2 expired.
    Receipt(u8, u8),
    TurnStarting,
    TurnEnded,
    /// A provider submission naming plan row `n`.
    Submission(u8),
    /// A tool call on plan row `n`.
    ToolCall(u8, bool),
    /// Time passes, in minutes.
    Advance(u8),
    SessionEnded,
    /// Retry the failed deactivations of an ended session.
    RetryCleanup,
}

/// The event an op stands for in `state`, with the decision for planning events. `None` when the
/// op has no meaning in this state (for example a decision without a pending consent).
pub fn event_for(
    s: &mut Session,
    state: &EngineState,
    op: Op,
) -> Option<(EngineEvent, Option<Surrogate>)> {
    let plan_rows: Vec<Json> = state
        .committed_plan
        .as_ref()
        .map(|p| p.capabilities.clone())
        .unwrap_or_default();
    let active = state.session_status == SessionStatus::Active;
    match op {
        Op::Plan(mask) if active => {
            let rows: Vec<Json> = catalog()
                .into_iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, r)| r)
                .take(5)
                .collect();
            s.plan_id = format!("ctx-query-host-1-{}-{}", s.scope.session_id, state.revision);
            Some((s.intent(), Some(decision(rows))))
        }
        Op::Desired(owner, mask) if active && !plan_rows.is_empty() => {
            let ids: Vec<&str> = plan_rows
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .filter_map(|(_, r)| r.get_str("capability_id"))
                .collect();
            let owner = format!("owner-{}", owner % 2);
            Some((s.desired(&owner, &plan_rows, &ids), None))
        }
        Op::Decide {
            granted,
            preapproved,
        } => {
            let consent = state.pending_consents.first()?;
            let basis = if preapproved {
                "preapproved-policy"
            } else {
                "interactive"
            };
            Some((s.decide(&consent.install_action, granted, basis), None))
        }
        Op::Receipt(n, how) => {
            if state.pending_effects.is_empty() {
                return None;
            }
            let pending = &state.pending_effects[usize::from(n) % state.pending_effects.len()];
            let action = pending.action.clone();
            let event = match how % 3 {
                0 => s.applied(&action),
                1 => s.failed(&action),
                _ => {
                    // Expiry only retires what is still unclaimed in time; model that by moving
                    // the clock to the action's expiry first.
                    if matches!(pending.effect, EffectKind::Install | EffectKind::Activate)
                        && let Some(exp) = action
                            .expires_at
                            .as_deref()
                            .and_then(|e| crate::shape::UtcMicros::parse(e).ok())
                        && exp > s.now
                    {
                        s.now = exp;
                    }
                    s.expired(&action)
                }
            };
            Some((event, None))
        }
        Op::TurnStarting if active => Some((s.empty(EventKind::TurnStarting), None)),
        Op::TurnEnded if active => Some((s.empty(EventKind::TurnEnded), None)),
        Op::Submission(n) if active && !plan_rows.is_empty() => {
            let r = &plan_rows[usize::from(n) % plan_rows.len()];
            let payload = Json::object([(
                "capabilities",
                Json::Arr(vec![Json::object([
                    ("capability_id", r.get("capability_id").cloned()?),
                    ("source_digest", r.get("catalog_entry_digest").cloned()?),
                ])]),
            )]);
            Some((
                s.event(EventKind::ProviderSubmissionObserved, payload),
                None,
            ))
        }
        Op::ToolCall(n, ok) if active && !plan_rows.is_empty() => {
            let r = &plan_rows[usize::from(n) % plan_rows.len()];
            let payload = Json::object([
                ("capability_id", r.get("capability_id").cloned()?),
                ("source_digest", r.get("catalog_entry_digest").cloned()?),
                (
                    "outcome",
                    Json::str(if ok { "succeeded" } else { "failed" }),
                ),
            ]);
            Some((s.event(EventKind::ToolCallObserved, payload), None))
        }
        Op::Advance(minutes) => {
            s.advance(i64::from(minutes) * 60 * 1_000_000);
            None
        }
        Op::SessionEnded if active => Some((s.empty(EventKind::SessionEnded), None)),
        Op::RetryCleanup if !active && !state.blocked_deactivation_ids.is_empty() => {
            let ids: Vec<Json> = state
                .blocked_deactivation_ids
                .iter()
                .take(5)
                .map(Json::str)
                .collect();
            let payload = Json::object([("retry_failed_deactivations", Json::Arr(ids))]);
            Some((s.event(EventKind::ReassessmentRequested, payload), None))
        }
        _ => None,
    }
}
