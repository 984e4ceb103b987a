#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use ctx_model::sha256_hex;
use ctx_projections::consent_store::{AssertionFields, SignedHumanDecisionAssertion};

use super::*;

const SECRET: &[u8] = b"managed-query-consent-test-key";
const CHALLENGE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const PRINCIPAL: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
const AUDIENCE: &str = "ctx-managed-query";
const AUTHENTICATOR: &str = "managed-test-authenticator";

fn fields() -> AssertionFields {
    AssertionFields {
        challenge_digest: CHALLENGE.into(),
        decision: "granted".into(),
        principal_digest: PRINCIPAL.into(),
        authenticator_id: AUTHENTICATOR.into(),
        audience: AUDIENCE.into(),
        nonce: "managed-consent-nonce-1".into(),
        issued_at: "2026-08-03T12:00:00Z".into(),
        expires_at: "2026-08-03T12:30:00Z".into(),
        proof: b"unsigned".to_vec(),
    }
}

fn unsigned() -> SignedHumanDecisionAssertion {
    SignedHumanDecisionAssertion::new(fields()).unwrap()
}

fn hmac_signed() -> SignedHumanDecisionAssertion {
    let a = unsigned();
    a.with_proof(hmac_sha256_proof(SECRET, &a.signing_bytes()))
        .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

// ------------------------------------------------------------------------------------------------
// HMAC-SHA256
// ------------------------------------------------------------------------------------------------

#[test]
fn hmac_proof_matches_the_seed_verifier() {
    // Python: hmac.digest(b"managed-query-consent-test-key", signing_bytes, "sha256").hex()
    // over the same nine-key canonical JSON.
    assert_eq!(
        hex(&hmac_sha256_proof(SECRET, &unsigned().signing_bytes())),
        "efefc72ed22d84578c31e78a710fb099663e157075c50daab186dc75ed99f4d2"
    );
}

#[test]
fn hmac_verifier_accepts_the_right_proof_only() {
    let v = HmacSha256Verifier::new(SECRET).unwrap();
    let good = hmac_signed();
    assert!(v.verify_signed_assertion(&good, &good.signing_bytes()));
    assert_eq!(v.sign(&good.signing_bytes()), good.proof());
    // Wrong proof, truncated proof, proof over other bytes, other secret.
    let wrong = good.with_proof(b"invalid-proof".to_vec()).unwrap();
    assert!(!v.verify_signed_assertion(&wrong, &wrong.signing_bytes()));
    let truncated = good.with_proof(good.proof()[..31].to_vec()).unwrap();
    assert!(!v.verify_signed_assertion(&truncated, &truncated.signing_bytes()));
    assert!(!v.verify_signed_assertion(&good, b"other bytes"));
    let other = HmacSha256Verifier::new(b"another-secret-of-length".to_vec()).unwrap();
    assert!(!other.verify_signed_assertion(&good, &good.signing_bytes()));
}

#[test]
fn hmac_verifier_refuses_short_secrets_and_redacts() {
    assert_eq!(
        HmacSha256Verifier::new(vec![7u8; HMAC_SECRET_MIN_BYTES - 1])
            .unwrap_err()
            .to_string(),
        "HMAC-SHA256 verifier secret must be at least 16 bytes"
    );
    let v = HmacSha256Verifier::new(SECRET).unwrap();
    assert_eq!(format!("{v:?}"), "HmacSha256Verifier(<redacted>)");
}

// ------------------------------------------------------------------------------------------------
// Ed25519
// ------------------------------------------------------------------------------------------------

/// RFC 8032 §7.1, TEST 1 (empty message).
const RFC_SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const RFC_PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const RFC_SIGNATURE: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

#[test]
fn ed25519_signer_matches_rfc_8032() {
    let signer = Ed25519Signer::from_seed(&unhex::<32>(RFC_SEED));
    assert_eq!(hex(&signer.verifying_key_bytes()), RFC_PUBLIC);
    assert_eq!(hex(&signer.sign(b"")), RFC_SIGNATURE);
    assert_eq!(format!("{signer:?}"), "Ed25519Signer(<redacted>)");
    let v = Ed25519Verifier::from_public_key_bytes(&unhex::<32>(RFC_PUBLIC)).unwrap();
    assert_eq!(v.public_key_bytes(), signer.verifying_key_bytes());
    let a = unsigned()
        .with_proof(unhex::<64>(RFC_SIGNATURE).to_vec())
        .unwrap();
    assert!(v.verify_signed_assertion(&a, b""));
    assert!(!v.verify_signed_assertion(&a, b"x"));
}

#[test]
fn ed25519_sign_verify_round_trip_and_refusals() {
    let mut counter = 0u8;
    let signer = Ed25519Signer::generate(&mut |buf: &mut [u8]| {
        for b in buf.iter_mut() {
            counter = counter.wrapping_add(1);
            *b = counter;
        }
    });
    let seed: Vec<u8> = (1..=32).collect();
    let same = Ed25519Signer::from_seed(&seed.try_into().unwrap());
    assert_eq!(signer.verifying_key_bytes(), same.verifying_key_bytes());

    let signed = signer.sign_assertion(&unsigned()).unwrap();
    assert_eq!(signed.proof().len(), ED25519_SIGNATURE_BYTES);
    let v = signer.verifier();
    assert!(v.verify_signed_assertion(&signed, &signed.signing_bytes()));
    // Through the wire codec.
    let back = SignedHumanDecisionAssertion::decode(&signed.encode().unwrap()).unwrap();
    assert!(v.verify_signed_assertion(&back, &back.signing_bytes()));

    // Tampered signing bytes, tampered claims, wrong key.
    let mut tampered = signed.signing_bytes();
    tampered[10] ^= 1;
    assert!(!v.verify_signed_assertion(&signed, &tampered));
    let mut f = signed.fields().clone();
    f.decision = "denied".into();
    let flipped = SignedHumanDecisionAssertion::new(f).unwrap();
    assert!(!v.verify_signed_assertion(&flipped, &flipped.signing_bytes()));
    let stranger = Ed25519Signer::from_seed(&[9u8; 32]).verifier();
    assert!(!stranger.verify_signed_assertion(&signed, &signed.signing_bytes()));

    // Wrong lengths are refused without panicking.
    for len in [1, 63, 65, 128] {
        let mut proof = signed.proof().to_vec();
        proof.resize(len, 0);
        let a = signed.with_proof(proof).unwrap();
        assert!(!v.verify_signed_assertion(&a, &a.signing_bytes()), "{len}");
    }

    // Strict verification: S + L (same signature modulo the group order) is refused.
    const L: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde,
        0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x10,
    ];
    let mut malleable = signed.proof().to_vec();
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = u16::from(malleable[32 + i]) + u16::from(L[i]) + carry;
        malleable[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    let a = signed.with_proof(malleable).unwrap();
    assert!(!v.verify_signed_assertion(&a, &a.signing_bytes()));
}

#[test]
fn ed25519_refuses_invalid_and_weak_public_keys() {
    let message = "Ed25519 public key is not a valid strict verification key";
    // The identity point (small order).
    let mut identity = [0u8; 32];
    identity[0] = 1;
    assert_eq!(
        Ed25519Verifier::from_public_key_bytes(&identity)
            .unwrap_err()
            .to_string(),
        message
    );
    // A y coordinate with no point on the curve (y = 2).
    let mut off_curve = [0u8; 32];
    off_curve[0] = 2;
    assert_eq!(
        Ed25519Verifier::from_public_key_bytes(&off_curve)
            .unwrap_err()
            .to_string(),
        message
    );
}

#[test]
fn ed25519_os_generation_gives_distinct_keys() {
    let a = Ed25519Signer::generate_from_os().unwrap();
    let b = Ed25519Signer::generate_from_os().unwrap();
    assert_ne!(a.verifying_key_bytes(), b.verifying_key_bytes());
}

// ------------------------------------------------------------------------------------------------
// Registry and pinned verifier
// ------------------------------------------------------------------------------------------------

/// Records the signing bytes it was given and answers a fixed value.
#[derive(Debug)]
struct Recording {
    answer: bool,
    seen: Mutex<Vec<Vec<u8>>>,
}

impl HumanDecisionVerifier for Recording {
    fn verify_signed_assertion(
        &self,
        _assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        self.seen.lock().unwrap().push(signing_bytes.to_vec());
        self.answer
    }
}

fn hmac_registration(
    audience: &str,
    authenticator: &str,
    principal: &str,
) -> HumanDecisionVerifierRegistration {
    HumanDecisionVerifierRegistration::new(
        audience,
        authenticator,
        principal,
        Arc::new(HmacSha256Verifier::new(SECRET).unwrap()),
    )
    .unwrap()
}

#[test]
fn registration_validates_its_identity_and_redacts_it() {
    let v: Arc<dyn HumanDecisionVerifier> = Arc::new(HmacSha256Verifier::new(SECRET).unwrap());
    let cases = [
        (
            ("-x", AUTHENTICATOR, "bad"),
            "audience must be a bounded canonical token",
        ),
        (
            (AUDIENCE, "", "bad"),
            "authenticator_id must be a bounded canonical token",
        ),
        (
            (AUDIENCE, AUTHENTICATOR, "ABC"),
            "principal_digest must be a lowercase SHA-256 digest",
        ),
    ];
    for ((audience, authenticator, principal), message) in cases {
        let err =
            HumanDecisionVerifierRegistration::new(audience, authenticator, principal, v.clone())
                .unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let r = hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL);
    assert_eq!(
        format!("{r:?}"),
        "<human-decision-verifier-registration identity=redacted>"
    );
    assert_eq!(
        (r.audience(), r.authenticator_id(), r.principal_digest()),
        (AUDIENCE, AUTHENTICATOR, PRINCIPAL)
    );
    // Equality is the triple only, whatever the verifier.
    let other_verifier = HumanDecisionVerifierRegistration::new(
        AUDIENCE,
        AUTHENTICATOR,
        PRINCIPAL,
        Arc::new(Ed25519Signer::from_seed(&[1; 32]).verifier()),
    )
    .unwrap();
    assert_eq!(r, other_verifier);
    assert_ne!(r, hmac_registration("other", AUTHENTICATOR, PRINCIPAL));
}

#[test]
fn registry_refuses_empty_duplicate_and_foreign_registrations() {
    assert_eq!(
        TrustedHumanDecisionVerifierRegistry::new(Vec::new()).unwrap_err(),
        DecisionError::NoRegistrations
    );
    assert_eq!(
        DecisionError::NoRegistrations.to_string(),
        "at least one human decision verifier registration is required"
    );
    let dup = TrustedHumanDecisionVerifierRegistry::new(vec![
        hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL),
        hmac_registration(AUDIENCE, "second", PRINCIPAL),
        hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL),
    ])
    .unwrap_err();
    assert_eq!(
        dup.to_string(),
        "duplicate human decision verifier registration"
    );
    let foreign = hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL)
        .with_pid(std::process::id().wrapping_add(1));
    let err = TrustedHumanDecisionVerifierRegistry::new(vec![foreign]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "human decision verifier registration cannot cross a process boundary"
    );
}

#[test]
fn registry_resolves_the_exact_triple_only() {
    let registry = TrustedHumanDecisionVerifierRegistry::new(vec![
        hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL),
        hmac_registration(AUDIENCE, "second-authenticator", PRINCIPAL),
    ])
    .unwrap();
    assert_eq!(registry.len(), 2);
    assert!(!registry.is_empty());
    assert_eq!(
        format!("{registry:?}"),
        "<trusted-human-decision-verifier-registry count=2>"
    );
    let good = hmac_signed();
    let pinned = registry.resolve(&good).unwrap();
    assert_eq!(format!("{pinned:?}"), "<pinned-human-decision-verifier>");
    assert!(pinned.verify_signed_assertion(&good, &good.signing_bytes()));
    assert_eq!(
        pinned.try_verify_signed_assertion(&good, &good.signing_bytes()),
        Ok(true)
    );
    // Each element of the triple matters; no fallback.
    for edit in [
        (|f: &mut AssertionFields| f.audience = "ctx-other".into()) as fn(&mut AssertionFields),
        |f| f.authenticator_id = "unknown-authenticator".into(),
        |f| f.principal_digest = sha256_hex("someone-else"),
    ] {
        let mut f = good.fields().clone();
        edit(&mut f);
        let a = SignedHumanDecisionAssertion::new(f).unwrap();
        let err = registry.resolve(&a).unwrap_err();
        assert_eq!(err, DecisionError::UnknownVerifier);
        assert_eq!(
            err.to_string(),
            "no exact human decision verifier is registered for this assertion"
        );
    }
}

#[test]
fn pinned_verifier_refuses_another_triple_and_other_signing_bytes() {
    let recording = Arc::new(Recording {
        answer: true,
        seen: Mutex::new(Vec::new()),
    });
    let registry = TrustedHumanDecisionVerifierRegistry::new(vec![
        HumanDecisionVerifierRegistration::new(
            AUDIENCE,
            AUTHENTICATOR,
            PRINCIPAL,
            recording.clone(),
        )
        .unwrap(),
        hmac_registration(AUDIENCE, "second-authenticator", PRINCIPAL),
    ])
    .unwrap();
    let a = unsigned();
    let pinned = registry.resolve(&a).unwrap();

    // Another triple, even one that is registered elsewhere: refused before the inner verifier.
    let mut f = a.fields().clone();
    f.authenticator_id = "second-authenticator".into();
    let other = SignedHumanDecisionAssertion::new(f).unwrap();
    assert!(!pinned.verify_signed_assertion(&other, &other.signing_bytes()));
    // Signing bytes that are not the assertion's own.
    let mut bytes = a.signing_bytes();
    bytes.push(b' ');
    assert!(!pinned.verify_signed_assertion(&a, &bytes));
    assert!(!pinned.verify_signed_assertion(&a, &other.signing_bytes()));
    assert!(!pinned.verify_signed_assertion(&a, b""));
    assert!(recording.seen.lock().unwrap().is_empty());

    // The exact assertion: the inner verifier sees the recomputed bytes and its answer stands.
    assert!(pinned.verify_signed_assertion(&a, &a.signing_bytes()));
    assert_eq!(*recording.seen.lock().unwrap(), vec![a.signing_bytes()]);

    // An inner `false` stays false.
    let refusing = TrustedHumanDecisionVerifierRegistry::new(vec![
        HumanDecisionVerifierRegistration::new(
            AUDIENCE,
            AUTHENTICATOR,
            PRINCIPAL,
            Arc::new(Recording {
                answer: false,
                seen: Mutex::new(Vec::new()),
            }),
        )
        .unwrap(),
    ])
    .unwrap();
    assert_eq!(
        refusing
            .resolve(&a)
            .unwrap()
            .try_verify_signed_assertion(&a, &a.signing_bytes()),
        Ok(false)
    );
}

#[test]
fn registry_and_pinned_verifier_are_process_bound() {
    let foreign = std::process::id().wrapping_add(1);
    let registry = TrustedHumanDecisionVerifierRegistry::new(vec![hmac_registration(
        AUDIENCE,
        AUTHENTICATOR,
        PRINCIPAL,
    )])
    .unwrap();
    let good = hmac_signed();
    let live = registry.resolve(&good).unwrap();
    assert!(live.verify_signed_assertion(&good, &good.signing_bytes()));

    let forked = registry.with_pid(foreign);
    assert_eq!(
        forked.resolve(&good).unwrap_err().to_string(),
        "human decision verifier registry cannot cross a process boundary"
    );
    let pinned = forked.any_pinned().unwrap();
    assert_eq!(
        pinned
            .try_verify_signed_assertion(&good, &good.signing_bytes())
            .unwrap_err()
            .to_string(),
        "human decision verifier cannot cross a process boundary"
    );
    assert!(!pinned.verify_signed_assertion(&good, &good.signing_bytes()));
}

#[test]
fn end_to_end_from_the_wire_with_both_verifiers() {
    let device = Ed25519Signer::from_seed(&[42; 32]);
    let registry = TrustedHumanDecisionVerifierRegistry::new(vec![
        hmac_registration(AUDIENCE, AUTHENTICATOR, PRINCIPAL),
        HumanDecisionVerifierRegistration::new(
            AUDIENCE,
            "device-key-1",
            PRINCIPAL,
            Arc::new(
                Ed25519Verifier::from_public_key_bytes(&device.verifying_key_bytes()).unwrap(),
            ),
        )
        .unwrap(),
    ])
    .unwrap();
    let mut f = fields();
    f.authenticator_id = "device-key-1".into();
    let device_signed = device
        .sign_assertion(&SignedHumanDecisionAssertion::new(f).unwrap())
        .unwrap();
    for assertion in [hmac_signed(), device_signed] {
        let wire = assertion.encode().unwrap();
        let decoded = SignedHumanDecisionAssertion::decode(&wire).unwrap();
        let pinned = registry.resolve(&decoded).unwrap();
        assert!(pinned.verify_signed_assertion(&decoded, &decoded.signing_bytes()));
        // A proof meant for the other verifier is refused.
        let swapped = decoded.with_proof(vec![0; 64]).unwrap();
        assert!(!pinned.verify_signed_assertion(&swapped, &swapped.signing_bytes()));
    }
}
