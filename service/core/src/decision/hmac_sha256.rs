//! The HMAC-SHA256 verifier: the proof is `HMAC-SHA256(secret, signing_bytes)`, as the seed's
//! test verifier computes it (`hmac.digest(SECRET, signing_bytes, "sha256")`). A shared secret is
//! not a person's key: use it for tests and fixtures, never to stand for a human in production.

use std::fmt;

use ctx_projections::consent_store::SignedHumanDecisionAssertion;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{DecisionError, HumanDecisionVerifier, invalid};

/// Shortest secret [`HmacSha256Verifier::new`] accepts, in bytes.
pub const HMAC_SECRET_MIN_BYTES: usize = 16;

fn keyed(secret: &[u8]) -> Option<Hmac<Sha256>> {
    // HMAC accepts keys of any length; the error branch cannot be taken.
    Hmac::<Sha256>::new_from_slice(secret).ok()
}

/// `HMAC-SHA256(secret, signing_bytes)`, 32 bytes: the proof a holder of `secret` attaches.
pub fn hmac_sha256_proof(secret: &[u8], signing_bytes: &[u8]) -> Vec<u8> {
    match keyed(secret) {
        Some(mut mac) => {
            mac.update(signing_bytes);
            mac.finalize().into_bytes().to_vec()
        }
        None => Vec::new(),
    }
}

/// Accepts exactly the proof `HMAC-SHA256(secret, signing_bytes)`, compared in constant time.
/// `Debug` redacts the secret.
pub struct HmacSha256Verifier {
    secret: Vec<u8>,
}

impl fmt::Debug for HmacSha256Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HmacSha256Verifier(<redacted>)")
    }
}

impl HmacSha256Verifier {
    /// A verifier for `secret`, which must be at least [`HMAC_SECRET_MIN_BYTES`] long.
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<HmacSha256Verifier, DecisionError> {
        let secret = secret.into();
        if secret.len() < HMAC_SECRET_MIN_BYTES {
            return Err(invalid(format!(
                "HMAC-SHA256 verifier secret must be at least {HMAC_SECRET_MIN_BYTES} bytes"
            )));
        }
        Ok(HmacSha256Verifier { secret })
    }

    /// The proof this verifier accepts for `signing_bytes`.
    pub fn sign(&self, signing_bytes: &[u8]) -> Vec<u8> {
        hmac_sha256_proof(&self.secret, signing_bytes)
    }
}

impl HumanDecisionVerifier for HmacSha256Verifier {
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        let Some(mut mac) = keyed(&self.secret) else {
            return false;
        };
        mac.update(signing_bytes);
        // `verify_slice` compares in constant time and refuses any length but 32.
        mac.verify_slice(assertion.proof()).is_ok()
    }
}
