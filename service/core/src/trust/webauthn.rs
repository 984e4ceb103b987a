//! Passkeys and security keys (spec/webauthn.md): the registered credential, the proof a passkey
//! decision carries, and their checks. Pure: no clock, no randomness, no input or output; the
//! one-shot page that talks to the browser lives in the `ctx` binary.
//!
//! Only ES256 (ECDSA over P-256 with SHA-256, COSE algorithm -7) is accepted: it is the one
//! algorithm every WebAuthn authenticator supports, and one algorithm means one code path to get
//! right.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ciborium::Value;
use ctx_model::{Json, hex};
use ctx_projections::consent_store::SignedHumanDecisionAssertion;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::decision::HumanDecisionVerifier;

/// The relying party id every ctx credential is scoped to: the page is served on the loopback
/// interface and named `localhost` (spec/webauthn.md §4).
pub const WEBAUTHN_RP_ID: &str = "localhost";
/// The version byte that starts a credential's and a proof's encoding (spec/webauthn.md §2, §3).
pub const WEBAUTHN_FORMAT_VERSION: u8 = 1;
/// Longest credential id, in bytes (the WebAuthn Level 2 bound).
pub const WEBAUTHN_CREDENTIAL_ID_MAX_BYTES: usize = 1_023;
/// Longest authenticator data of an assertion, in bytes.
pub const WEBAUTHN_AUTHENTICATOR_DATA_MAX_BYTES: usize = 1_024;
/// Longest client data JSON, in bytes.
pub const WEBAUTHN_CLIENT_DATA_MAX_BYTES: usize = 4_096;
/// Longest signature, in bytes: a DER-encoded ES256 signature is at most 72.
pub const WEBAUTHN_SIGNATURE_MAX_BYTES: usize = 72;
/// Longest attestation object, in bytes.
pub const WEBAUTHN_ATTESTATION_MAX_BYTES: usize = 16_384;
/// Length of an uncompressed SEC1 P-256 public key: `0x04 || x || y`.
pub const WEBAUTHN_PUBLIC_KEY_BYTES: usize = 65;

const FLAG_USER_PRESENT: u8 = 0x01;
const FLAG_USER_VERIFIED: u8 = 0x04;
const FLAG_ATTESTED_CREDENTIAL: u8 = 0x40;
/// rpIdHash (32) + flags (1) + signCount (4).
const AUTHENTICATOR_DATA_MIN_BYTES: usize = 37;
const COSE_ALG_ES256: i128 = -7;
const COSE_KTY_EC2: i128 = 2;
const COSE_CRV_P256: i128 = 1;

/// Why a registration, a credential, a proof or an assertion is refused. Each sentence names the
/// value at fault (spec/webauthn.md §5 numbers the checks).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebAuthnError {
    #[error("the {what} is {len} bytes, over the limit of {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("the {what} ends after {len} bytes, before its {field}")]
    Truncated {
        what: &'static str,
        len: usize,
        field: &'static str,
    },
    #[error("the {what} has {extra} bytes after its last field")]
    Trailing { what: &'static str, extra: usize },
    #[error("the {what} has format version {found}, not {WEBAUTHN_FORMAT_VERSION}")]
    Version { what: &'static str, found: u8 },
    #[error("the {what} has an empty {field}")]
    Empty {
        what: &'static str,
        field: &'static str,
    },
    #[error("the public key {hex} is not a P-256 point")]
    PublicKey { hex: String },
    #[error("the proof is by credential {found}, not the registered {expected}")]
    OtherCredential { found: String, expected: String },
    #[error("the client data is not a JSON object: {0}")]
    ClientData(String),
    #[error("the client data's type is {found:?}, not {expected:?}")]
    Type {
        found: Option<String>,
        expected: &'static str,
    },
    #[error("the client data's challenge {found:?} is not {expected:?}")]
    Challenge {
        found: Option<String>,
        expected: String,
    },
    #[error("the client data's origin {found:?} is not {allowed}")]
    Origin {
        found: Option<String>,
        allowed: String,
    },
    #[error("the client data says the ceremony ran in a cross-origin frame")]
    CrossOrigin,
    #[error("the authenticator data's RP id hash {found} is not SHA-256(\"{WEBAUTHN_RP_ID}\")")]
    RpIdHash { found: String },
    #[error("the authenticator did not see the person present (flags {flags:#04x}: UP is off)")]
    UserNotPresent { flags: u8 },
    #[error("the authenticator did not verify the person (flags {flags:#04x}: UV is off)")]
    UserNotVerified { flags: u8 },
    #[error("the signature {hex} is not a DER-encoded ES256 signature")]
    SignatureEncoding { hex: String },
    #[error("the ES256 signature of credential {credential} does not verify")]
    BadSignature { credential: String },
    #[error(
        "the authenticator's signature counter is {seen}, not above {last}, the last one seen for \
         this credential: it may have been cloned"
    )]
    SignCount { last: u32, seen: u32 },
    #[error("the attestation object is refused: {0}")]
    Attestation(String),
    #[error("the credential public key is refused: {0}")]
    CoseKey(String),
}

/// Which origins a client data's `origin` may name (spec/webauthn.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPolicy {
    /// `http://localhost:<port>` or `http://127.0.0.1:<port>`, any port: the page is served once
    /// on a port the operating system picks, so a later check cannot know which it was.
    Loopback,
    /// Exactly this origin (the page server checks the one it serves).
    Exact(String),
}

impl OriginPolicy {
    fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPolicy::Exact(expected) => origin == expected,
            OriginPolicy::Loopback => ["http://localhost:", "http://127.0.0.1:"]
                .iter()
                .filter_map(|prefix| origin.strip_prefix(prefix))
                .any(|port| {
                    !port.is_empty()
                        && port.len() <= 5
                        && port.bytes().all(|b| b.is_ascii_digit())
                        && !port.starts_with('0')
                        && port.parse::<u16>().is_ok()
                }),
        }
    }

    fn describe(&self) -> String {
        match self {
            OriginPolicy::Loopback => "http://localhost:PORT or http://127.0.0.1:PORT".to_owned(),
            OriginPolicy::Exact(origin) => format!("{origin:?}"),
        }
    }
}

/// A registered passkey: its credential id, ES256 public key and the signature counter seen at
/// registration. Its encoding is what `VerifierEntry::public_key` holds for a passkey
/// (spec/webauthn.md §2).
#[derive(Clone, PartialEq, Eq)]
pub struct WebAuthnCredential {
    // Private so it stays within WEBAUTHN_CREDENTIAL_ID_MAX_BYTES, checked when built.
    credential_id: Vec<u8>,
    public_key: VerifyingKey,
    pub sign_count: u32,
}

impl fmt::Debug for WebAuthnCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebAuthnCredential")
            .field("credential_id", &hex(&self.credential_id))
            .field("public_key", &hex(&self.public_key_bytes()))
            .field("sign_count", &self.sign_count)
            .finish()
    }
}

impl WebAuthnCredential {
    /// A credential from its id, its uncompressed SEC1 public key and its counter.
    pub fn new(
        credential_id: Vec<u8>,
        public_key_sec1: &[u8],
        sign_count: u32,
    ) -> Result<WebAuthnCredential, WebAuthnError> {
        check_credential_id(&credential_id, "credential")?;
        let public_key = point(public_key_sec1)?;
        Ok(WebAuthnCredential {
            credential_id,
            public_key,
            sign_count,
        })
    }

    /// The credential id the authenticator chose.
    pub fn credential_id(&self) -> &[u8] {
        &self.credential_id
    }

    /// The uncompressed SEC1 public key (65 bytes).
    pub fn public_key_bytes(&self) -> Vec<u8> {
        self.public_key.to_sec1_point(false).as_bytes().to_vec()
    }

    /// spec/webauthn.md §2: version (1) | credential id length (u16 LE) | credential id |
    /// public key (65, SEC1 uncompressed) | sign count (u32 LE).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(1 + 2 + self.credential_id.len() + WEBAUTHN_PUBLIC_KEY_BYTES + 4);
        out.push(WEBAUTHN_FORMAT_VERSION);
        // The id is at most WEBAUTHN_CREDENTIAL_ID_MAX_BYTES (checked when built), so it fits.
        put_len(&mut out, &self.credential_id);
        out.extend_from_slice(&self.public_key_bytes());
        out.extend_from_slice(&self.sign_count.to_le_bytes());
        out
    }

    /// The inverse of [`WebAuthnCredential::to_bytes`]; refuses any other byte string.
    pub fn from_bytes(bytes: &[u8]) -> Result<WebAuthnCredential, WebAuthnError> {
        let what = "passkey credential";
        let mut reader = Reader::new(bytes, what);
        let version = reader.take(1, "version")?[0];
        if version != WEBAUTHN_FORMAT_VERSION {
            return Err(WebAuthnError::Version {
                what,
                found: version,
            });
        }
        let credential_id = reader.take_prefixed("credential id")?.to_vec();
        let public_key = reader.take(WEBAUTHN_PUBLIC_KEY_BYTES, "public key")?;
        let count = reader.take(4, "sign count")?;
        let sign_count = u32::from_le_bytes([count[0], count[1], count[2], count[3]]);
        reader.finish()?;
        WebAuthnCredential::new(credential_id, public_key, sign_count)
    }

    /// The verifier of this credential's proofs under the loopback origin policy.
    pub fn verifier(&self) -> WebAuthnVerifier {
        WebAuthnVerifier {
            credential: self.clone(),
            origin: OriginPolicy::Loopback,
        }
    }
}

/// The WebAuthn challenge of a decision: SHA-256 of its exact signing bytes, so the
/// authenticator signs the whole decision — grant or deny, nonce, times and the consent's
/// challenge digest (spec/webauthn.md §3).
pub fn webauthn_challenge(signing_bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(signing_bytes).into()
}

/// The proof of a passkey decision: the `proof` bytes of its signed assertion
/// (spec/webauthn.md §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebAuthnProof {
    pub credential_id: Vec<u8>,
    pub authenticator_data: Vec<u8>,
    pub client_data_json: Vec<u8>,
    pub signature: Vec<u8>,
}

impl WebAuthnProof {
    /// spec/webauthn.md §3: version (1), then credential id, authenticator data, client data
    /// JSON and signature, each as a u16 LE length and its bytes.
    pub fn encode(&self) -> Result<Vec<u8>, WebAuthnError> {
        self.check_bounds()?;
        let mut out = Vec::new();
        out.push(WEBAUTHN_FORMAT_VERSION);
        for part in [
            &self.credential_id,
            &self.authenticator_data,
            &self.client_data_json,
            &self.signature,
        ] {
            put_len(&mut out, part);
        }
        Ok(out)
    }

    /// The inverse of [`WebAuthnProof::encode`]; refuses any other byte string.
    pub fn decode(bytes: &[u8]) -> Result<WebAuthnProof, WebAuthnError> {
        let what = "passkey proof";
        let mut reader = Reader::new(bytes, what);
        let version = reader.take(1, "version")?[0];
        if version != WEBAUTHN_FORMAT_VERSION {
            return Err(WebAuthnError::Version {
                what,
                found: version,
            });
        }
        let proof = WebAuthnProof {
            credential_id: reader.take_prefixed("credential id")?.to_vec(),
            authenticator_data: reader.take_prefixed("authenticator data")?.to_vec(),
            client_data_json: reader.take_prefixed("client data JSON")?.to_vec(),
            signature: reader.take_prefixed("signature")?.to_vec(),
        };
        reader.finish()?;
        proof.check_bounds()?;
        Ok(proof)
    }

    /// The signature counter the authenticator data claims (big-endian at bytes 33..37), if it
    /// is long enough to hold one. Unverified: call after [`WebAuthnVerifier::verify_proof`].
    pub fn sign_count(&self) -> Option<u32> {
        let bytes = self.authenticator_data.get(33..37)?;
        Some(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn check_bounds(&self) -> Result<(), WebAuthnError> {
        check_credential_id(&self.credential_id, "passkey proof")?;
        for (what, part, max) in [
            (
                "authenticator data",
                &self.authenticator_data,
                WEBAUTHN_AUTHENTICATOR_DATA_MAX_BYTES,
            ),
            (
                "client data JSON",
                &self.client_data_json,
                WEBAUTHN_CLIENT_DATA_MAX_BYTES,
            ),
            ("signature", &self.signature, WEBAUTHN_SIGNATURE_MAX_BYTES),
        ] {
            if part.is_empty() {
                return Err(WebAuthnError::Empty {
                    what: "passkey proof",
                    field: what,
                });
            }
            if part.len() > max {
                return Err(WebAuthnError::TooLong {
                    what,
                    len: part.len(),
                    max,
                });
            }
        }
        Ok(())
    }
}

/// Checks one registered passkey's proofs (spec/webauthn.md §5).
#[derive(Clone)]
pub struct WebAuthnVerifier {
    credential: WebAuthnCredential,
    origin: OriginPolicy,
}

impl fmt::Debug for WebAuthnVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebAuthnVerifier")
            .field("credential", &self.credential)
            .field("origin", &self.origin)
            .finish()
    }
}

impl WebAuthnVerifier {
    pub fn new(credential: WebAuthnCredential, origin: OriginPolicy) -> WebAuthnVerifier {
        WebAuthnVerifier { credential, origin }
    }

    /// Checks `proof` as this credential's signature over `signing_bytes`, in the order of
    /// spec/webauthn.md §5, and returns the authenticator's signature counter. The caller
    /// compares the counter with the last one it saw (spec/webauthn.md §6).
    pub fn verify_proof(
        &self,
        proof: &WebAuthnProof,
        signing_bytes: &[u8],
    ) -> Result<u32, WebAuthnError> {
        // §5.2: the credential the person registered, not another of theirs.
        if proof.credential_id != self.credential.credential_id {
            return Err(WebAuthnError::OtherCredential {
                found: hex(&proof.credential_id),
                expected: hex(&self.credential.credential_id),
            });
        }
        // §5.3–§5.5: what the browser says it asked for.
        check_client_data(
            &proof.client_data_json,
            "webauthn.get",
            &webauthn_challenge(signing_bytes),
            &self.origin,
        )?;
        // §5.6–§5.8: what the authenticator says it checked.
        let (_, sign_count) = check_authenticator_data(&proof.authenticator_data)?;
        // §5.9: the signature over authenticatorData || SHA-256(clientDataJSON).
        let signature = Signature::from_der(&proof.signature).map_err(|_| {
            WebAuthnError::SignatureEncoding {
                hex: hex(&proof.signature),
            }
        })?;
        let mut signed = proof.authenticator_data.clone();
        signed.extend_from_slice(&Sha256::digest(&proof.client_data_json));
        self.credential
            .public_key
            .verify(&signed, &signature)
            .map_err(|_| WebAuthnError::BadSignature {
                credential: hex(&self.credential.credential_id),
            })?;
        Ok(sign_count)
    }
}

impl HumanDecisionVerifier for WebAuthnVerifier {
    fn verify_signed_assertion(
        &self,
        assertion: &SignedHumanDecisionAssertion,
        signing_bytes: &[u8],
    ) -> bool {
        WebAuthnProof::decode(assertion.proof())
            .and_then(|proof| self.verify_proof(&proof, signing_bytes))
            .is_ok()
    }
}

/// spec/webauthn.md §6: a counter of zero means the authenticator keeps none (synced passkeys);
/// any other counter must be above the last one seen for the credential, or two copies of the
/// credential are in use.
pub fn check_sign_count(last: u32, seen: u32) -> Result<(), WebAuthnError> {
    if seen == 0 && last == 0 || seen > last {
        Ok(())
    } else {
        Err(WebAuthnError::SignCount { last, seen })
    }
}

/// The verifier of `credential` as the trust registry hands it out.
pub(crate) fn passkey_verifier(credential: WebAuthnCredential) -> Arc<dyn HumanDecisionVerifier> {
    Arc::new(credential.verifier())
}

/// Checks a `navigator.credentials.create` response (spec/webauthn.md §7) and returns the new
/// credential: client data of type `webauthn.create` with `expected_challenge` and an allowed
/// origin; authenticator data for `localhost` with UP and UV set and attested credential data
/// whose key is an EC2 P-256 ES256 COSE key. The attestation statement is not checked: format
/// `none` and `packed` are accepted, since the registration is trusted on first use from the
/// person's terminal or approved by a verifier they hold, not by the authenticator's maker.
pub fn verify_webauthn_registration(
    attestation_object: &[u8],
    client_data_json: &[u8],
    expected_challenge: &[u8],
    origin: &OriginPolicy,
) -> Result<WebAuthnCredential, WebAuthnError> {
    if client_data_json.len() > WEBAUTHN_CLIENT_DATA_MAX_BYTES {
        return Err(WebAuthnError::TooLong {
            what: "client data JSON",
            len: client_data_json.len(),
            max: WEBAUTHN_CLIENT_DATA_MAX_BYTES,
        });
    }
    if attestation_object.len() > WEBAUTHN_ATTESTATION_MAX_BYTES {
        return Err(WebAuthnError::TooLong {
            what: "attestation object",
            len: attestation_object.len(),
            max: WEBAUTHN_ATTESTATION_MAX_BYTES,
        });
    }
    check_client_data(
        client_data_json,
        "webauthn.create",
        expected_challenge,
        origin,
    )?;
    let mut rest = attestation_object;
    let value: Value = ciborium::de::from_reader(&mut rest)
        .map_err(|e| WebAuthnError::Attestation(format!("it is not CBOR: {e}")))?;
    if !rest.is_empty() {
        return Err(WebAuthnError::Trailing {
            what: "attestation object",
            extra: rest.len(),
        });
    }
    let map = value
        .as_map()
        .ok_or_else(|| WebAuthnError::Attestation("it is not a CBOR map".to_owned()))?;
    let text_key = |name: &str| {
        map.iter()
            .find(|(k, _)| k.as_text() == Some(name))
            .map(|(_, v)| v)
    };
    let fmt = text_key("fmt")
        .and_then(Value::as_text)
        .ok_or_else(|| WebAuthnError::Attestation("it has no fmt".to_owned()))?;
    let statement = text_key("attStmt")
        .and_then(Value::as_map)
        .ok_or_else(|| WebAuthnError::Attestation("it has no attStmt map".to_owned()))?;
    match fmt {
        "none" if statement.is_empty() => {}
        "none" => {
            return Err(WebAuthnError::Attestation(
                "format none has a non-empty statement".to_owned(),
            ));
        }
        "packed" => {}
        other => {
            return Err(WebAuthnError::Attestation(format!(
                "attestation format {other:?} is not none or packed"
            )));
        }
    }
    let auth_data = text_key("authData")
        .and_then(Value::as_bytes)
        .ok_or_else(|| WebAuthnError::Attestation("it has no authData bytes".to_owned()))?;
    let (flags, sign_count) = check_authenticator_data(auth_data)?;
    if flags & FLAG_ATTESTED_CREDENTIAL == 0 {
        return Err(WebAuthnError::Attestation(format!(
            "its authenticator data has no attested credential data (flags {flags:#04x})"
        )));
    }
    let what = "attested credential data";
    let mut reader = Reader::new(&auth_data[AUTHENTICATOR_DATA_MIN_BYTES..], what);
    reader.take(16, "AAGUID")?;
    let len = reader.take(2, "credential id length")?;
    let id_len = usize::from(u16::from_be_bytes([len[0], len[1]]));
    let credential_id = reader.take(id_len, "credential id")?.to_vec();
    let mut key_bytes = reader.rest();
    let key: Value = ciborium::de::from_reader(&mut key_bytes)
        .map_err(|e| WebAuthnError::CoseKey(format!("it is not CBOR: {e}")))?;
    let public_key = cose_es256_key(&key)?;
    WebAuthnCredential::new(credential_id, &public_key, sign_count)
}

/// The uncompressed SEC1 bytes of an EC2 P-256 ES256 COSE key (RFC 9053 §7.1.1).
fn cose_es256_key(key: &Value) -> Result<Vec<u8>, WebAuthnError> {
    let map = key
        .as_map()
        .ok_or_else(|| WebAuthnError::CoseKey("it is not a CBOR map".to_owned()))?;
    let get = |label: i128| {
        map.iter()
            .find(|(k, _)| k.as_integer().map(i128::from) == Some(label))
            .map(|(_, v)| v)
    };
    let int = |label: i128, name: &str| {
        get(label)
            .and_then(Value::as_integer)
            .map(i128::from)
            .ok_or_else(|| WebAuthnError::CoseKey(format!("it has no integer {name}")))
    };
    let kty = int(1, "kty")?;
    if kty != COSE_KTY_EC2 {
        return Err(WebAuthnError::CoseKey(format!(
            "key type {kty} is not EC2 ({COSE_KTY_EC2})"
        )));
    }
    let alg = int(3, "alg")?;
    if alg != COSE_ALG_ES256 {
        return Err(WebAuthnError::CoseKey(format!(
            "algorithm {alg} is not ES256 ({COSE_ALG_ES256})"
        )));
    }
    let crv = int(-1, "crv")?;
    if crv != COSE_CRV_P256 {
        return Err(WebAuthnError::CoseKey(format!(
            "curve {crv} is not P-256 ({COSE_CRV_P256})"
        )));
    }
    let coordinate = |label: i128, name: &str| {
        get(label)
            .and_then(Value::as_bytes)
            .filter(|b| b.len() == 32)
            .ok_or_else(|| WebAuthnError::CoseKey(format!("its {name} is not 32 bytes")))
    };
    let mut sec1 = vec![0x04];
    sec1.extend_from_slice(coordinate(-2, "x")?);
    sec1.extend_from_slice(coordinate(-3, "y")?);
    Ok(sec1)
}

/// spec/webauthn.md §5.3–§5.5: type, challenge (base64url of `challenge`) and origin.
fn check_client_data(
    client_data_json: &[u8],
    expected_type: &'static str,
    challenge: &[u8],
    origin: &OriginPolicy,
) -> Result<(), WebAuthnError> {
    let text = std::str::from_utf8(client_data_json)
        .map_err(|_| WebAuthnError::ClientData("it is not UTF-8".to_owned()))?;
    let value = Json::parse(text).map_err(|e| WebAuthnError::ClientData(e.to_string()))?;
    if value.as_obj().is_none() {
        return Err(WebAuthnError::ClientData(format!("it is {text:?}")));
    }
    let found = |key: &str| value.get_str(key).map(str::to_owned);
    if value.get_str("type") != Some(expected_type) {
        return Err(WebAuthnError::Type {
            found: found("type"),
            expected: expected_type,
        });
    }
    let expected = URL_SAFE_NO_PAD.encode(challenge);
    if value.get_str("challenge") != Some(expected.as_str()) {
        return Err(WebAuthnError::Challenge {
            found: found("challenge"),
            expected,
        });
    }
    if !value.get_str("origin").is_some_and(|o| origin.allows(o)) {
        return Err(WebAuthnError::Origin {
            found: found("origin"),
            allowed: origin.describe(),
        });
    }
    if value.get("crossOrigin").and_then(Json::as_bool) == Some(true) {
        return Err(WebAuthnError::CrossOrigin);
    }
    Ok(())
}

/// spec/webauthn.md §5.6–§5.8: RP id hash, UP and UV; returns the flags and the counter.
fn check_authenticator_data(data: &[u8]) -> Result<(u8, u32), WebAuthnError> {
    if data.len() < AUTHENTICATOR_DATA_MIN_BYTES {
        return Err(WebAuthnError::Truncated {
            what: "authenticator data",
            len: data.len(),
            field: "signature counter",
        });
    }
    let rp_id_hash: [u8; 32] = Sha256::digest(WEBAUTHN_RP_ID.as_bytes()).into();
    if data[..32] != rp_id_hash {
        return Err(WebAuthnError::RpIdHash {
            found: hex(&data[..32]),
        });
    }
    let flags = data[32];
    if flags & FLAG_USER_PRESENT == 0 {
        return Err(WebAuthnError::UserNotPresent { flags });
    }
    if flags & FLAG_USER_VERIFIED == 0 {
        return Err(WebAuthnError::UserNotVerified { flags });
    }
    // The counter is big-endian in authenticator data (WebAuthn §6.1).
    let sign_count = u32::from_be_bytes([data[33], data[34], data[35], data[36]]);
    Ok((flags, sign_count))
}

fn check_credential_id(id: &[u8], what: &'static str) -> Result<(), WebAuthnError> {
    if id.is_empty() {
        return Err(WebAuthnError::Empty {
            what,
            field: "credential id",
        });
    }
    if id.len() > WEBAUTHN_CREDENTIAL_ID_MAX_BYTES {
        return Err(WebAuthnError::TooLong {
            what: "credential id",
            len: id.len(),
            max: WEBAUTHN_CREDENTIAL_ID_MAX_BYTES,
        });
    }
    Ok(())
}

fn point(sec1: &[u8]) -> Result<VerifyingKey, WebAuthnError> {
    // Only the uncompressed form, so one key has one encoding (spec/webauthn.md §2).
    if sec1.len() != WEBAUTHN_PUBLIC_KEY_BYTES || sec1[0] != 0x04 {
        return Err(WebAuthnError::PublicKey { hex: hex(sec1) });
    }
    VerifyingKey::from_sec1_bytes(sec1).map_err(|_| WebAuthnError::PublicKey { hex: hex(sec1) })
}

/// Appends a u16 LE length and the bytes; callers bound every part below 65,536 bytes first.
fn put_len(out: &mut Vec<u8>, part: &[u8]) {
    let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&part[..usize::from(len)]);
}

/// A bounds-checked cursor over untrusted bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { bytes, at: 0, what }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WebAuthnError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len());
        let Some(end) = end else {
            return Err(WebAuthnError::Truncated {
                what: self.what,
                len: self.bytes.len(),
                field,
            });
        };
        let part = &self.bytes[self.at..end];
        self.at = end;
        Ok(part)
    }

    fn take_prefixed(&mut self, field: &'static str) -> Result<&'a [u8], WebAuthnError> {
        let len = self.take(2, field)?;
        let n = usize::from(u16::from_le_bytes([len[0], len[1]]));
        self.take(n, field)
    }

    fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.at..];
        self.at = self.bytes.len();
        rest
    }

    fn finish(self) -> Result<(), WebAuthnError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            extra => Err(WebAuthnError::Trailing {
                what: self.what,
                extra,
            }),
        }
    }
}

#[cfg(test)]
#[path = "webauthn_tests.rs"]
mod tests;
