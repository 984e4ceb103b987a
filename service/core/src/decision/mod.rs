//! Signed human decisions, the trusted side (spec/decisions.md §6, §7): the
//! verifier port, the process-bound registry that pins one verifier per exact
//! (audience, authenticator, principal) triple, and two verifiers: HMAC-SHA256 (a shared test
//! secret, as the seed's tests use) and Ed25519 (a person's device key). Specified in
//! `spec/decisions.md`.
//!
//! The assertion value and its wire codec live with the broker store
//! (`ctx_projections::consent_store::SignedHumanDecisionAssertion`); the time checks, the
//! challenge binding and nonce replay are the store's (spec/projections.md §8.8), not a verifier's.

mod ed25519;
mod hmac_sha256;
mod registry;
#[cfg(test)]
mod tests;

use std::fmt;

use ctx_projections::consent_store::SignedHumanDecisionAssertion;

pub use ed25519::{
    ED25519_PUBLIC_KEY_BYTES, ED25519_SEED_BYTES, ED25519_SIGNATURE_BYTES, Ed25519Signer,
    Ed25519Verifier,
};
pub use hmac_sha256::{HmacSha256Verifier, hmac_sha256_proof};
pub use registry::{HumanDecisionVerifierRegistration, TrustedHumanDecisionVerifierRegistry};
// Used by this module's unit tests only.
#[cfg(test)]
use hmac_sha256::HMAC_SECRET_MIN_BYTES;

/// The verifier port (spec/decisions.md §6): checks an authenticator's proof over the exact signing
/// bytes. Only `true` accepts. An implementation also enforces its own authenticator-specific
/// replay policy; the broker store separately refuses any nonce it has already recorded.
///
/// Production injects a strong adapter (WebAuthn, OS user verification, a device key such as
/// [`Ed25519Verifier`]); [`HmacSha256Verifier`] is for tests.
pub trait HumanDecisionVerifier: Send + Sync + fmt::Debug {
    /// True only when `assertion.proof()` is a valid proof over `signing_bytes` for the
    /// authenticator this verifier stands for. Must not panic on any input.
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool;
}

/// Why a registration, a registry lookup, a key or a verifier is refused. `Display` is the
/// reference's sentence where it has one (spec/decisions.md §7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionError {
    /// A malformed argument (the reference's `ValueError`): a registration identity that is not
    /// a token or digest, an HMAC secret too short, an Ed25519 public key that is not a valid
    /// strict verification key.
    #[error("{message}")]
    Invalid { message: String },
    /// Two registrations for one (audience, authenticator_id, principal_digest) triple.
    #[error("duplicate human decision verifier registration")]
    DuplicateRegistration,
    /// A registry needs at least one registration.
    #[error("at least one human decision verifier registration is required")]
    NoRegistrations,
    /// A registration, the registry or a pinned verifier used in a process other than the one
    /// that created it (`HumanDecisionVerifierRegistryProcessMismatch`): one of
    /// [`REGISTRATION_PROCESS_MISMATCH`], [`REGISTRY_PROCESS_MISMATCH`],
    /// [`PINNED_PROCESS_MISMATCH`].
    #[error("{message}")]
    ProcessMismatch { message: &'static str },
    /// No registration for the assertion's exact triple (`UnknownHumanDecisionVerifier`, a
    /// `LookupError`): there is no fallback and no wildcard.
    #[error("no exact human decision verifier is registered for this assertion")]
    UnknownVerifier,
    /// The operating system's random source failed while generating a device key.
    #[error("operating system randomness is unavailable")]
    RandomnessUnavailable,
}

pub(crate) fn invalid(message: impl Into<String>) -> DecisionError {
    DecisionError::Invalid {
        message: message.into(),
    }
}

/// Equality without an early exit on the first differing byte (lengths are not secret).
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}
