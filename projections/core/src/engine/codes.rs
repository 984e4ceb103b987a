//! Machine-readable codes of the engine projections' refusals (`HookError::with_code`). An append
//! refused by a projection comes back as `AppendError::Hook { code, .. }`; the engine maps the
//! code to its typed errors, so callers never parse messages.

use super::record::GuardEffect;

/// An engine record does not decode, or does not bind to its place in the journal.
pub const ENGINE_RECORD_INVALID: &str = "engine-record-invalid";
/// An engine record does not continue its stream's projected head (revision or digest chain).
pub const ENGINE_CHAIN_BROKEN: &str = "engine-chain-broken";
/// An engine event id is already projected (the journal keeps event ids unique, so this is a
/// corrupted projection).
pub const ENGINE_EVENT_DUPLICATE: &str = "engine-event-duplicate";
/// The reducer refused a stored replay input.
pub const ENGINE_REDUCER_REFUSED: &str = "engine-reducer-refused";
/// Re-running the reducer produced another transition or state digest than the record stores.
pub const ENGINE_REPLAY_DIVERGED: &str = "engine-replay-diverged";
/// A claim or outcome record does not decode or is not self-consistent.
pub const EFFECT_RECORD_INVALID: &str = "effect-record-invalid";
/// A benefit result record does not decode or does not match its digest.
pub const BENEFIT_RESULT_INVALID: &str = "benefit-result-invalid";
/// A benefit result digest is already bound to other bytes.
pub const BENEFIT_DIGEST_COLLISION: &str = "benefit-digest-collision";

/// Why the effects projection refused a claim, an outcome or a settling receipt
/// (spec/engine-store.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EffectRefusal {
    /// A second claim, or an expiry receipt for a claimed action.
    AlreadyClaimed,
    /// A claim for an action that already expired unclaimed.
    ClaimExpired,
    /// A settling receipt without a claim.
    ClaimRequired,
    /// A second settlement, or an outcome or claim after the settlement.
    ClaimSettled,
    /// An outcome without a claim, or a settling receipt without an outcome.
    OutcomeRequired,
    /// An outcome or guard that disagrees with the durable claim or outcome.
    OutcomeConflict,
    /// Durable claim authority that contradicts itself (a corrupted or forged record).
    AuthorityCorrupt,
}

impl EffectRefusal {
    const ALL: [EffectRefusal; 7] = [
        EffectRefusal::AlreadyClaimed,
        EffectRefusal::ClaimExpired,
        EffectRefusal::ClaimRequired,
        EffectRefusal::ClaimSettled,
        EffectRefusal::OutcomeRequired,
        EffectRefusal::OutcomeConflict,
        EffectRefusal::AuthorityCorrupt,
    ];

    /// The hook code, e.g. `install-already-claimed`, `activation-outcome-conflict`.
    pub fn code(self, effect: GuardEffect) -> &'static str {
        use EffectRefusal::*;
        match (effect, self) {
            (GuardEffect::Install, AlreadyClaimed) => "install-already-claimed",
            (GuardEffect::Install, ClaimExpired) => "install-claim-expired",
            (GuardEffect::Install, ClaimRequired) => "install-claim-required",
            (GuardEffect::Install, ClaimSettled) => "install-claim-settled",
            (GuardEffect::Install, OutcomeRequired) => "install-outcome-required",
            (GuardEffect::Install, OutcomeConflict) => "install-outcome-conflict",
            (GuardEffect::Install, AuthorityCorrupt) => "install-authority-corrupt",
            (GuardEffect::Activation, AlreadyClaimed) => "activation-already-claimed",
            (GuardEffect::Activation, ClaimExpired) => "activation-claim-expired",
            (GuardEffect::Activation, ClaimRequired) => "activation-claim-required",
            (GuardEffect::Activation, ClaimSettled) => "activation-claim-settled",
            (GuardEffect::Activation, OutcomeRequired) => "activation-outcome-required",
            (GuardEffect::Activation, OutcomeConflict) => "activation-outcome-conflict",
            (GuardEffect::Activation, AuthorityCorrupt) => "activation-authority-corrupt",
        }
    }

    /// The refusal a hook code names, if it is one of the effects projection's.
    pub fn from_code(code: &str) -> Option<(GuardEffect, EffectRefusal)> {
        [GuardEffect::Install, GuardEffect::Activation]
            .into_iter()
            .flat_map(|e| EffectRefusal::ALL.into_iter().map(move |r| (e, r)))
            .find(|(e, r)| r.code(*e) == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for effect in [GuardEffect::Install, GuardEffect::Activation] {
            for refusal in EffectRefusal::ALL {
                let code = refusal.code(effect);
                assert!(seen.insert(code), "{code} twice");
                assert_eq!(EffectRefusal::from_code(code), Some((effect, refusal)));
            }
        }
        assert_eq!(EffectRefusal::from_code(ENGINE_RECORD_INVALID), None);
    }
}
