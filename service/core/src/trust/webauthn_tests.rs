//! A software P-256 authenticator against the checks of spec/webauthn.md §5 and §7.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ciborium::Value;
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use sha2::{Digest as _, Sha256};

use super::*;
use crate::trust::{VerifierEntry, VerifierKind};

const ORIGIN: &str = "http://localhost:43121";
const SIGNING_BYTES: &[u8] = b"the exact signing bytes of one decision";

struct Authenticator {
    key: SigningKey,
    credential_id: Vec<u8>,
    counter: u32,
}

fn authenticator(seed: u8) -> Authenticator {
    let key = match SigningKey::from_slice(&[seed; 32]) {
        Ok(key) => key,
        Err(e) => panic!("a P-256 scalar: {e}"),
    };
    Authenticator {
        key,
        credential_id: vec![seed; 16],
        counter: 7,
    }
}

fn rp_hash(rp: &str) -> Vec<u8> {
    Sha256::digest(rp.as_bytes()).to_vec()
}

fn client_data(kind: &str, challenge: &[u8], origin: &str) -> Vec<u8> {
    format!(
        "{{\"type\":\"{kind}\",\"challenge\":\"{}\",\"origin\":\"{origin}\",\"crossOrigin\":false}}",
        URL_SAFE_NO_PAD.encode(challenge)
    )
    .into_bytes()
}

struct Ceremony<'a> {
    rp: &'a str,
    flags: u8,
    origin: &'a str,
    kind: &'a str,
    signing_bytes: &'a [u8],
}

impl Default for Ceremony<'_> {
    fn default() -> Self {
        Ceremony {
            rp: "localhost",
            flags: 0x05,
            origin: ORIGIN,
            kind: "webauthn.get",
            signing_bytes: SIGNING_BYTES,
        }
    }
}

impl Authenticator {
    fn credential(&self) -> WebAuthnCredential {
        let sec1 = self.key.verifying_key().to_sec1_point(false);
        match WebAuthnCredential::new(self.credential_id.clone(), sec1.as_bytes(), 0) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    fn get(&self, c: &Ceremony<'_>) -> WebAuthnProof {
        let mut authenticator_data = rp_hash(c.rp);
        authenticator_data.push(c.flags);
        authenticator_data.extend_from_slice(&self.counter.to_be_bytes());
        let client_data_json = client_data(c.kind, &webauthn_challenge(c.signing_bytes), c.origin);
        let mut signed = authenticator_data.clone();
        signed.extend_from_slice(&Sha256::digest(&client_data_json));
        let signature: Signature = self.key.sign(&signed);
        WebAuthnProof {
            credential_id: self.credential_id.clone(),
            authenticator_data,
            client_data_json,
            signature: signature.to_der().as_bytes().to_vec(),
        }
    }

    fn attestation(&self, flags: u8, alg: i64) -> Vec<u8> {
        let point = self.key.verifying_key().to_sec1_point(false);
        let bytes = point.as_bytes();
        let cose = Value::Map(vec![
            (Value::from(1), Value::from(2)),
            (Value::from(3), Value::from(alg)),
            (Value::from(-1), Value::from(1)),
            (Value::from(-2), Value::Bytes(bytes[1..33].to_vec())),
            (Value::from(-3), Value::Bytes(bytes[33..65].to_vec())),
        ]);
        let mut auth_data = rp_hash("localhost");
        auth_data.push(flags);
        auth_data.extend_from_slice(&0u32.to_be_bytes());
        auth_data.extend_from_slice(&[0u8; 16]);
        auth_data.extend_from_slice(&(self.credential_id.len() as u16).to_be_bytes());
        auth_data.extend_from_slice(&self.credential_id);
        let mut key_bytes = Vec::new();
        ciborium::ser::into_writer(&cose, &mut key_bytes).unwrap();
        auth_data.extend_from_slice(&key_bytes);
        let object = Value::Map(vec![
            (Value::from("fmt"), Value::from("none")),
            (Value::from("attStmt"), Value::Map(vec![])),
            (Value::from("authData"), Value::Bytes(auth_data)),
        ]);
        let mut out = Vec::new();
        ciborium::ser::into_writer(&object, &mut out).unwrap();
        out
    }
}

fn verify(a: &Authenticator, proof: &WebAuthnProof) -> Result<u32, WebAuthnError> {
    a.credential().verifier().verify_proof(proof, SIGNING_BYTES)
}

#[test]
fn a_valid_user_verified_assertion_is_accepted_and_returns_the_counter() {
    let a = authenticator(3);
    let proof = a.get(&Ceremony::default());
    assert_eq!(verify(&a, &proof), Ok(7));
    // Through the encoded proof too, and from 127.0.0.1.
    let encoded = proof.encode().unwrap();
    assert_eq!(WebAuthnProof::decode(&encoded).as_ref(), Ok(&proof));
    let loopback = a.get(&Ceremony {
        origin: "http://127.0.0.1:9",
        ..Ceremony::default()
    });
    assert_eq!(verify(&a, &loopback), Ok(7));
}

#[test]
fn user_verification_and_presence_are_both_required() {
    let a = authenticator(3);
    let no_uv = a.get(&Ceremony {
        flags: 0x01,
        ..Ceremony::default()
    });
    assert_eq!(
        verify(&a, &no_uv),
        Err(WebAuthnError::UserNotVerified { flags: 0x01 })
    );
    let no_up = a.get(&Ceremony {
        flags: 0x04,
        ..Ceremony::default()
    });
    assert_eq!(
        verify(&a, &no_up),
        Err(WebAuthnError::UserNotPresent { flags: 0x04 })
    );
}

#[test]
fn origin_rp_id_type_and_challenge_are_checked() {
    let a = authenticator(3);
    for origin in [
        "https://localhost:443",
        "http://evil.example:80",
        "http://localhost",
        "http://localhost:",
        "http://localhost:99999",
        "http://localhost:8080/x",
        "http://127.0.0.1.evil:80",
    ] {
        let proof = a.get(&Ceremony {
            origin,
            ..Ceremony::default()
        });
        assert!(
            matches!(verify(&a, &proof), Err(WebAuthnError::Origin { .. })),
            "{origin}"
        );
    }
    let exact = WebAuthnVerifier::new(
        a.credential(),
        OriginPolicy::Exact("http://localhost:1".to_owned()),
    );
    assert!(matches!(
        exact.verify_proof(&a.get(&Ceremony::default()), SIGNING_BYTES),
        Err(WebAuthnError::Origin { .. })
    ));
    let rp = a.get(&Ceremony {
        rp: "evil.example",
        ..Ceremony::default()
    });
    assert!(matches!(
        verify(&a, &rp),
        Err(WebAuthnError::RpIdHash { .. })
    ));
    let create = a.get(&Ceremony {
        kind: "webauthn.create",
        ..Ceremony::default()
    });
    assert!(matches!(
        verify(&a, &create),
        Err(WebAuthnError::Type { .. })
    ));
    // Signed over other decision bytes (a denial turned into a grant, say).
    let other = a.get(&Ceremony {
        signing_bytes: b"another decision",
        ..Ceremony::default()
    });
    assert!(matches!(
        verify(&a, &other),
        Err(WebAuthnError::Challenge { .. })
    ));
}

#[test]
fn another_credential_or_a_flipped_signature_is_refused() {
    let a = authenticator(3);
    let b = authenticator(4);
    // b's proof against a's registration: the id differs.
    assert!(matches!(
        verify(&a, &b.get(&Ceremony::default())),
        Err(WebAuthnError::OtherCredential { .. })
    ));
    // b's key under a's id: the signature does not verify.
    let mut forged = b.get(&Ceremony::default());
    forged.credential_id = a.credential_id.clone();
    assert!(matches!(
        verify(&a, &forged),
        Err(WebAuthnError::BadSignature { .. })
    ));
    let good = a.get(&Ceremony::default());
    for i in 0..good.signature.len() {
        let mut flipped = good.clone();
        flipped.signature[i] ^= 0x01;
        assert!(verify(&a, &flipped).is_err(), "byte {i}");
    }
    let mut data = good.clone();
    data.authenticator_data[36] ^= 0x01;
    assert!(matches!(
        verify(&a, &data),
        Err(WebAuthnError::BadSignature { .. })
    ));
}

#[test]
fn truncated_or_garbage_proofs_are_refused_without_panicking() {
    let a = authenticator(3);
    let encoded = a.get(&Ceremony::default()).encode().unwrap();
    for len in 0..encoded.len() {
        assert!(WebAuthnProof::decode(&encoded[..len]).is_err(), "{len}");
    }
    let mut trailing = encoded.clone();
    trailing.push(0);
    assert!(matches!(
        WebAuthnProof::decode(&trailing),
        Err(WebAuthnError::Trailing { extra: 1, .. })
    ));
    let mut version = encoded.clone();
    version[0] = 2;
    assert!(matches!(
        WebAuthnProof::decode(&version),
        Err(WebAuthnError::Version { found: 2, .. })
    ));
    // Pseudo-random garbage of many lengths.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for len in [1usize, 2, 9, 37, 100, 1_000, 8_192] {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let _ = WebAuthnProof::decode(&bytes);
        let _ = WebAuthnCredential::from_bytes(&bytes);
        let _ = verify_webauthn_registration(&bytes, &bytes, b"c", &OriginPolicy::Loopback);
    }
    // A proof whose parts are short garbage decodes but does not verify.
    let garbage = WebAuthnProof {
        credential_id: a.credential_id.clone(),
        authenticator_data: vec![0; 3],
        client_data_json: b"{".to_vec(),
        signature: vec![0x30],
    };
    assert!(verify(&a, &garbage).is_err());
    let short_data = WebAuthnProof {
        authenticator_data: vec![0; 3],
        ..a.get(&Ceremony::default())
    };
    assert!(matches!(
        verify(&a, &short_data),
        Err(WebAuthnError::Truncated { .. })
    ));
    // An oversized part is refused on encode and decode.
    let big = WebAuthnProof {
        signature: vec![0; WEBAUTHN_SIGNATURE_MAX_BYTES + 1],
        ..a.get(&Ceremony::default())
    };
    assert!(matches!(big.encode(), Err(WebAuthnError::TooLong { .. })));
}

#[test]
fn a_credential_round_trips_and_names_its_entry() {
    let a = authenticator(5);
    let mut credential = a.credential();
    credential.sign_count = 0x0102_0304;
    let bytes = credential.to_bytes();
    assert_eq!(bytes[0], WEBAUTHN_FORMAT_VERSION);
    assert_eq!(&bytes[1..3], &16u16.to_le_bytes());
    assert_eq!(&bytes[bytes.len() - 4..], &[4, 3, 2, 1]);
    assert_eq!(bytes.len(), 1 + 2 + 16 + 65 + 4);
    assert_eq!(
        WebAuthnCredential::from_bytes(&bytes),
        Ok(credential.clone())
    );
    for len in 0..bytes.len() {
        assert!(WebAuthnCredential::from_bytes(&bytes[..len]).is_err());
    }
    let mut off_curve = bytes.clone();
    off_curve[3 + 16 + 10] ^= 0xff;
    assert!(matches!(
        WebAuthnCredential::from_bytes(&off_curve),
        Err(WebAuthnError::PublicKey { .. })
    ));
    let entry = VerifierEntry::passkey(&credential);
    assert_eq!(entry.kind, VerifierKind::Passkey);
    assert!(entry.authenticator_id.starts_with("ctx-passkey-"));
    assert_eq!(entry.authenticator_id.len(), "ctx-passkey-".len() + 16);
    let verifier = entry.verifier().unwrap();
    let proof = a.get(&Ceremony::default()).encode().unwrap();
    let assertion = signed_assertion(&entry, proof);
    assert!(verifier.verify_signed_assertion(&assertion, SIGNING_BYTES));
    assert!(!verifier.verify_signed_assertion(&assertion, b"other bytes"));
    let garbage = signed_assertion(&entry, vec![1, 2, 3]);
    assert!(!verifier.verify_signed_assertion(&garbage, SIGNING_BYTES));
}

fn signed_assertion(entry: &VerifierEntry, proof: Vec<u8>) -> SignedHumanDecisionAssertion {
    use ctx_projections::consent_store::AssertionFields;
    SignedHumanDecisionAssertion::new(AssertionFields {
        challenge_digest: "a".repeat(64),
        decision: "granted".to_owned(),
        principal_digest: entry.principal_digest.clone(),
        authenticator_id: entry.authenticator_id.clone(),
        audience: "ctx-managed-query".to_owned(),
        nonce: "ctx-nonce-1".to_owned(),
        issued_at: ctx_model::UtcMicros(1_800_000_000_000_000).render(),
        expires_at: ctx_model::UtcMicros(1_800_000_300_000_000).render(),
        proof,
    })
    .unwrap()
}

#[test]
fn a_registration_yields_the_credential_and_checks_flags_and_key() {
    let a = authenticator(6);
    let challenge = b"registration challenge";
    let client = client_data("webauthn.create", challenge, ORIGIN);
    let origin = OriginPolicy::Exact(ORIGIN.to_owned());
    let credential =
        verify_webauthn_registration(&a.attestation(0x45, -7), &client, challenge, &origin);
    assert_eq!(credential, Ok(a.credential()));
    assert!(matches!(
        verify_webauthn_registration(&a.attestation(0x41, -7), &client, challenge, &origin),
        Err(WebAuthnError::UserNotVerified { .. })
    ));
    assert!(matches!(
        verify_webauthn_registration(&a.attestation(0x05, -7), &client, challenge, &origin),
        Err(WebAuthnError::Attestation(_))
    ));
    assert!(matches!(
        verify_webauthn_registration(&a.attestation(0x45, -257), &client, challenge, &origin),
        Err(WebAuthnError::CoseKey(_))
    ));
    assert!(matches!(
        verify_webauthn_registration(&a.attestation(0x45, -7), &client, b"other", &origin),
        Err(WebAuthnError::Challenge { .. })
    ));
    let get = client_data("webauthn.get", challenge, ORIGIN);
    assert!(matches!(
        verify_webauthn_registration(&a.attestation(0x45, -7), &get, challenge, &origin),
        Err(WebAuthnError::Type { .. })
    ));
    let attestation = a.attestation(0x45, -7);
    for len in 0..attestation.len() {
        assert!(
            verify_webauthn_registration(&attestation[..len], &client, challenge, &origin).is_err(),
            "{len}"
        );
    }
}

#[test]
fn a_counter_must_grow_unless_the_authenticator_keeps_none() {
    assert_eq!(check_sign_count(0, 0), Ok(()));
    assert_eq!(check_sign_count(0, 1), Ok(()));
    assert_eq!(check_sign_count(7, 8), Ok(()));
    assert_eq!(
        check_sign_count(7, 7),
        Err(WebAuthnError::SignCount { last: 7, seen: 7 })
    );
    assert_eq!(
        check_sign_count(7, 3),
        Err(WebAuthnError::SignCount { last: 7, seen: 3 })
    );
    // A counter that fell back to zero after counting is a clone or a reset: refused.
    assert_eq!(
        check_sign_count(7, 0),
        Err(WebAuthnError::SignCount { last: 7, seen: 0 })
    );
    let a = authenticator(3);
    assert_eq!(a.get(&Ceremony::default()).sign_count(), Some(7));
    let short = WebAuthnProof {
        authenticator_data: vec![0; 36],
        ..a.get(&Ceremony::default())
    };
    assert_eq!(short.sign_count(), None);
}

#[test]
fn a_registry_entry_must_name_its_own_credential() {
    let credential = authenticator(8).credential();
    let entry = VerifierEntry::passkey(&credential);
    assert_eq!(
        VerifierEntry::from_json(&entry.to_json()).ok(),
        Some(entry.clone())
    );
    let renamed = VerifierEntry {
        authenticator_id: "ctx-passkey-0000000000000000".to_owned(),
        ..entry.clone()
    };
    assert!(VerifierEntry::from_json(&renamed.to_json()).is_err());
    let other_key = VerifierEntry {
        public_key: authenticator(9).credential().to_bytes(),
        ..entry.clone()
    };
    assert!(VerifierEntry::from_json(&other_key.to_json()).is_err());
    let garbage = VerifierEntry {
        public_key: vec![1, 2, 3],
        ..entry
    };
    assert!(VerifierEntry::from_json(&garbage.to_json()).is_err());
    assert!(garbage.verifier().is_err());
}

#[test]
fn the_highest_counter_comes_from_the_journaled_decisions_of_that_credential() {
    let dir = tempfile::tempdir().unwrap();
    let journal = crate::journal_store::open_journal(
        &dir.path().join("journal"),
        &ctx_journal::OpenOptions::new(),
    )
    .unwrap();
    let mut a = authenticator(4);
    let entry = VerifierEntry::passkey(&a.credential());
    let at = ctx_journal::Timestamp(1_800_000_000_000_000);
    assert_eq!(
        crate::trust::highest_passkey_counter(&journal, &entry.authenticator_id).unwrap(),
        None
    );
    for counter in [12, 9] {
        a.counter = counter;
        let proof = a.get(&Ceremony::default()).encode().unwrap();
        crate::trust::record_decision_evidence(
            &journal,
            &signed_assertion(&entry, proof),
            &entry,
            crate::trust::Assurance::Presence,
            at,
        )
        .unwrap();
    }
    assert_eq!(
        crate::trust::highest_passkey_counter(&journal, &entry.authenticator_id).unwrap(),
        Some(12)
    );
    let other = VerifierEntry::passkey(&authenticator(5).credential());
    assert_eq!(
        crate::trust::highest_passkey_counter(&journal, &other.authenticator_id).unwrap(),
        None
    );
}
