//! The Ed25519 verifier and its device-side signer: the proof is a 64-byte Ed25519 signature
//! (RFC 8032, pure Ed25519, no prehash and no context) over the exact signing bytes, checked with
//! strict verification (canonical `S`, no small-order public key or `R`).
//!
//! The signer is the human's device side: its key is a 32-byte seed that the caller supplies
//! (from the device's key store, or fresh through the injected randomness seam).

use std::fmt;

use ctx_projections::consent_store::{AssertionError, SignedHumanDecisionAssertion};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use super::{DecisionError, HumanDecisionVerifier, invalid};

/// Length of a public key, in bytes.
pub const ED25519_PUBLIC_KEY_BYTES: usize = 32;
/// Length of a signing-key seed, in bytes.
pub const ED25519_SEED_BYTES: usize = 32;
/// Length of a signature (the proof), in bytes.
pub const ED25519_SIGNATURE_BYTES: usize = 64;

/// Accepts exactly a valid strict Ed25519 signature by one public key over the signing bytes.
/// `Debug` does not show the key.
#[derive(Clone)]
pub struct Ed25519Verifier {
    key: VerifyingKey,
}

impl fmt::Debug for Ed25519Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ed25519Verifier(<redacted>)")
    }
}

impl Ed25519Verifier {
    /// A verifier for the compressed public key `public_key`. Refused when the bytes are not a
    /// point on the curve or the point has small order (a weak key that verifies forgeries).
    pub fn from_public_key_bytes(
        public_key: &[u8; ED25519_PUBLIC_KEY_BYTES],
    ) -> Result<Ed25519Verifier, DecisionError> {
        match VerifyingKey::from_bytes(public_key) {
            Ok(key) if !key.is_weak() => Ok(Ed25519Verifier { key }),
            _ => Err(invalid(
                "Ed25519 public key is not a valid strict verification key",
            )),
        }
    }

    /// The compressed public key.
    pub fn public_key_bytes(&self) -> [u8; ED25519_PUBLIC_KEY_BYTES] {
        self.key.to_bytes()
    }
}

impl HumanDecisionVerifier for Ed25519Verifier {
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        // Any length but 64 is refused here, without panicking.
        let Ok(signature) = Signature::from_slice(assertion.proof()) else {
            return false;
        };
        self.key.verify_strict(signing_bytes, &signature).is_ok()
    }
}

/// The human's device key. Not `Clone`; `Debug` redacts it; the key is zeroed when dropped.
pub struct Ed25519Signer {
    key: SigningKey,
}

impl fmt::Debug for Ed25519Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ed25519Signer(<redacted>)")
    }
}

impl Ed25519Signer {
    /// The signer whose secret key is the RFC 8032 seed `seed`.
    pub fn from_seed(seed: &[u8; ED25519_SEED_BYTES]) -> Ed25519Signer {
        Ed25519Signer {
            key: SigningKey::from_bytes(seed),
        }
    }

    /// A fresh signer: `fill` is the randomness seam and must fill the whole buffer with
    /// uniformly random bytes (the 32-byte seed).
    pub fn generate(fill: &mut impl FnMut(&mut [u8])) -> Ed25519Signer {
        let mut seed = [0u8; ED25519_SEED_BYTES];
        fill(&mut seed);
        let signer = Ed25519Signer::from_seed(&seed);
        seed.fill(0);
        std::hint::black_box(&seed);
        signer
    }

    /// A fresh signer seeded from the operating system's random source.
    pub fn generate_from_os() -> Result<Ed25519Signer, DecisionError> {
        let mut failed = false;
        let signer = Ed25519Signer::generate(&mut |buf: &mut [u8]| {
            failed = getrandom::fill(buf).is_err();
        });
        if failed {
            return Err(DecisionError::RandomnessUnavailable);
        }
        Ok(signer)
    }

    /// The RFC 8032 seed, to store the key in a private file (the `ctx key` commands); the
    /// caller is responsible for where the bytes go.
    pub fn seed_bytes(&self) -> [u8; ED25519_SEED_BYTES] {
        self.key.to_bytes()
    }

    /// The compressed public key to register with the trusted side.
    pub fn verifying_key_bytes(&self) -> [u8; ED25519_PUBLIC_KEY_BYTES] {
        self.key.verifying_key().to_bytes()
    }

    /// The verifier for this signer's public key.
    pub fn verifier(&self) -> Ed25519Verifier {
        Ed25519Verifier {
            key: self.key.verifying_key(),
        }
    }

    /// The 64-byte signature over `signing_bytes`: the proof.
    pub fn sign(&self, signing_bytes: &[u8]) -> Vec<u8> {
        self.key.sign(signing_bytes).to_bytes().to_vec()
    }

    /// `unsigned` (built with any placeholder proof) with its proof replaced by this signer's
    /// signature over its signing bytes.
    pub fn sign_assertion(
        &self,
        unsigned: &SignedHumanDecisionAssertion,
    ) -> Result<SignedHumanDecisionAssertion, AssertionError> {
        unsigned.with_proof(self.sign(&unsigned.signing_bytes()))
    }
}
