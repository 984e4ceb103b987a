//! The signed human decision assertion (spec/decisions.md §3, §4, §5): the value a
//! person's authenticator signs, its exact signing bytes and its strict wire codec. Specified in
//! `spec/decisions.md`.
//!
//! The value carries no authority: anyone can build one. Authority comes only from a trusted
//! verifier accepting its proof over [`SignedHumanDecisionAssertion::signing_bytes`] and from the
//! broker store's checks (challenge binding, audience, times, nonce replay).

use std::collections::HashSet;
use std::fmt;

use ctx_model::{JSON_PARSE_DEPTH_MAX, Json, UtcMicros, is_sha, is_token, sha256_hex};

/// The `schema` field of the signing bytes and of the wire form: the domain tag of the signature.
pub const SIGNED_HUMAN_DECISION_ASSERTION_SCHEMA: &str = "ctx.signed-human-install-decision-v1";
/// Longest wire payload, and longest signing bytes, in bytes.
pub const MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES: usize = 16_384;
/// Longest `nonce`, in UTF-8 bytes.
pub const ASSERTION_NONCE_MAX_BYTES: usize = 256;
/// Longest `proof`, in bytes (the shortest is 1).
pub const ASSERTION_PROOF_MAX_BYTES: usize = 8_192;
/// The nine keys of the signing bytes, in their canonical (sorted) order.
pub const ASSERTION_SIGNING_KEYS: [&str; 9] = [
    "audience",
    "authenticator_id",
    "challenge_digest",
    "decision",
    "expires_at",
    "issued_at",
    "nonce",
    "principal_digest",
    "schema",
];
/// The ten keys of the wire form, in their canonical (sorted) order.
pub const ASSERTION_WIRE_KEYS: [&str; 10] = [
    "audience",
    "authenticator_id",
    "challenge_digest",
    "decision",
    "expires_at",
    "issued_at",
    "nonce",
    "principal_digest",
    "proof_base64",
    "schema",
];

/// Python's default `sys.int_info.default_max_str_digits`: an integer literal with more digits
/// fails to convert inside the reference's JSON decoder.
const PY_INT_MAX_STR_DIGITS: usize = 4_300;

/// What the human decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HumanDecision {
    Granted,
    Denied,
}

impl HumanDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            HumanDecision::Granted => "granted",
            HumanDecision::Denied => "denied",
        }
    }

    /// `granted` or `denied`, exactly.
    pub fn parse(text: &str) -> Option<HumanDecision> {
        match text {
            "granted" => Some(HumanDecision::Granted),
            "denied" => Some(HumanDecision::Denied),
            _ => None,
        }
    }
}

impl fmt::Display for HumanDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why assertion fields are refused (spec/decisions.md §3, the Python `ValueError`s). `Display` is
/// the reference's sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssertionError {
    /// Rules 1 and 3: `challenge_digest` or `principal_digest`.
    #[error("{field} must be a lowercase SHA-256 digest")]
    NotDigest { field: &'static str },
    /// Rule 2.
    #[error("decision must be granted or denied")]
    Decision,
    /// Rule 4: `authenticator_id` or `audience`.
    #[error("{field} must be a bounded canonical token")]
    NotToken { field: &'static str },
    /// Rule 5: empty, or longer than [`ASSERTION_NONCE_MAX_BYTES`].
    #[error("nonce must be non-empty text of at most 256 bytes")]
    NonceSize,
    /// Rule 5: a character below U+0020, or U+007F.
    #[error("nonce must not contain control characters")]
    NonceControl,
    /// Rule 6: `issued_at` or `expires_at`.
    #[error("{field} must be a canonical UTC timestamp")]
    NotTimestamp { field: &'static str },
    /// Rule 6.
    #[error("assertion expires_at must be after issued_at")]
    ExpiresNotAfterIssued,
    /// Rule 7.
    #[error("proof must be 1..8192 bytes")]
    ProofSize,
    /// Rule 8: signing bytes over [`MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES`].
    #[error("signed assertion exceeds its bounded size")]
    TooLarge,
}

/// Why a wire payload is refused or an assertion cannot be encoded (spec/decisions.md §5, the
/// Python `SignedHumanDecisionAssertionCodecError`). `Display` is the reference's sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssertionCodecError {
    /// Encode: the canonical wire form is over [`MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES`].
    #[error("signed human decision assertion exceeds its bounded size")]
    TooLarge,
    /// Decode 2: empty, or over [`MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES`].
    #[error("signed human decision assertion payload has an invalid size")]
    PayloadSize,
    /// Decode 3: an object (at any depth) repeats a key.
    #[error("signed human decision assertion contains a duplicate JSON key")]
    DuplicateKey,
    /// Decode 3: `NaN`, `Infinity` or `-Infinity` where a value is expected.
    #[error("signed human decision assertion contains noncanonical JSON constant {token}")]
    NonFiniteConstant { token: &'static str },
    /// Decode 3: not UTF-8, not JSON, or nested too deeply.
    #[error("signed human decision assertion payload is not valid JSON")]
    InvalidJson,
    /// Decode 4.
    #[error("signed human decision assertion JSON must be an object")]
    NotObject,
    /// Decode 5: the key set is not exactly [`ASSERTION_WIRE_KEYS`].
    #[error("signed human decision assertion has invalid fields")]
    KeySet,
    /// Decode 6.
    #[error("signed human decision assertion has an invalid schema")]
    Schema,
    /// Decode 7.
    #[error("proof_base64 must be canonical base64 text")]
    ProofBase64,
    /// Decode 8: a claim is not a string, or the fields fail [`SignedHumanDecisionAssertion::new`]
    /// (`cause`, when there is one, says which rule).
    #[error("signed human decision assertion fields are invalid")]
    Fields {
        #[source]
        cause: Option<AssertionError>,
    },
    /// Decode 9: re-encoding does not reproduce the payload byte for byte.
    #[error("signed human decision assertion payload is not canonical")]
    NotCanonical,
}

/// The fields of an assertion, as submitted. Build the value with
/// [`SignedHumanDecisionAssertion::new`], which validates them. `Debug` omits the proof.
#[derive(Clone, PartialEq, Eq)]
pub struct AssertionFields {
    pub challenge_digest: String,
    /// `granted` or `denied`.
    pub decision: String,
    pub principal_digest: String,
    pub authenticator_id: String,
    pub audience: String,
    pub nonce: String,
    /// Canonical UTC timestamp (spec/engine.md §1).
    pub issued_at: String,
    /// Canonical UTC timestamp, strictly after `issued_at`.
    pub expires_at: String,
    /// The authenticator's proof over the signing bytes (1..8192 bytes).
    pub proof: Vec<u8>,
}

impl fmt::Debug for AssertionFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AssertionFields")
            .field("challenge_digest", &self.challenge_digest)
            .field("decision", &self.decision)
            .field("principal_digest", &self.principal_digest)
            .field("authenticator_id", &self.authenticator_id)
            .field("audience", &self.audience)
            .field("nonce", &self.nonce)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// A validated signed human decision (spec/decisions.md §3). Immutable; equal when every field, the
/// proof included, is equal. `Clone` is harmless: the value is a claim, not an authority. `Debug`
/// omits the proof.
#[derive(Clone, PartialEq, Eq)]
pub struct SignedHumanDecisionAssertion {
    fields: AssertionFields,
    decision: HumanDecision,
    issued: UtcMicros,
    expires: UtcMicros,
}

impl fmt::Debug for SignedHumanDecisionAssertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = &self.fields;
        f.debug_struct("SignedHumanDecisionAssertion")
            .field("challenge_digest", &a.challenge_digest)
            .field("decision", &a.decision)
            .field("principal_digest", &a.principal_digest)
            .field("authenticator_id", &a.authenticator_id)
            .field("audience", &a.audience)
            .field("nonce", &a.nonce)
            .field("issued_at", &a.issued_at)
            .field("expires_at", &a.expires_at)
            .finish_non_exhaustive()
    }
}

/// A canonical UTC timestamp (spec/engine.md §1): parses, and re-renders to the same text.
fn canonical_timestamp(text: &str, field: &'static str) -> Result<UtcMicros, AssertionError> {
    match UtcMicros::parse(text) {
        Ok(t) if t.render() == text => Ok(t),
        _ => Err(AssertionError::NotTimestamp { field }),
    }
}

impl SignedHumanDecisionAssertion {
    /// Validates `fields` in the reference's order (spec/decisions.md §3).
    pub fn new(fields: AssertionFields) -> Result<SignedHumanDecisionAssertion, AssertionError> {
        let f = &fields;
        if !is_sha(&f.challenge_digest) {
            return Err(AssertionError::NotDigest {
                field: "challenge_digest",
            });
        }
        let decision = HumanDecision::parse(&f.decision).ok_or(AssertionError::Decision)?;
        if !is_sha(&f.principal_digest) {
            return Err(AssertionError::NotDigest {
                field: "principal_digest",
            });
        }
        if !is_token(&f.authenticator_id) {
            return Err(AssertionError::NotToken {
                field: "authenticator_id",
            });
        }
        if !is_token(&f.audience) {
            return Err(AssertionError::NotToken { field: "audience" });
        }
        if f.nonce.is_empty() || f.nonce.len() > ASSERTION_NONCE_MAX_BYTES {
            return Err(AssertionError::NonceSize);
        }
        if f.nonce.chars().any(|c| c < ' ' || c == '\u{7f}') {
            return Err(AssertionError::NonceControl);
        }
        let issued = canonical_timestamp(&f.issued_at, "issued_at")?;
        let expires = canonical_timestamp(&f.expires_at, "expires_at")?;
        if expires <= issued {
            return Err(AssertionError::ExpiresNotAfterIssued);
        }
        if f.proof.is_empty() || f.proof.len() > ASSERTION_PROOF_MAX_BYTES {
            return Err(AssertionError::ProofSize);
        }
        let assertion = SignedHumanDecisionAssertion {
            fields,
            decision,
            issued,
            expires,
        };
        // Unreachable within the field bounds above (at most 1 398 bytes), kept as the reference's
        // rule 8.
        if assertion.signing_bytes().len() > MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES {
            return Err(AssertionError::TooLarge);
        }
        Ok(assertion)
    }

    /// The same claims with another proof (re-validated): how a signer attaches its signature to
    /// an assertion built with a placeholder proof.
    pub fn with_proof(
        &self,
        proof: Vec<u8>,
    ) -> Result<SignedHumanDecisionAssertion, AssertionError> {
        SignedHumanDecisionAssertion::new(AssertionFields {
            proof,
            ..self.fields.clone()
        })
    }

    /// The validated fields.
    pub fn fields(&self) -> &AssertionFields {
        &self.fields
    }
    pub fn into_fields(self) -> AssertionFields {
        self.fields
    }
    pub fn challenge_digest(&self) -> &str {
        &self.fields.challenge_digest
    }
    pub fn decision(&self) -> HumanDecision {
        self.decision
    }
    pub fn principal_digest(&self) -> &str {
        &self.fields.principal_digest
    }
    pub fn authenticator_id(&self) -> &str {
        &self.fields.authenticator_id
    }
    pub fn audience(&self) -> &str {
        &self.fields.audience
    }
    pub fn nonce(&self) -> &str {
        &self.fields.nonce
    }
    /// Canonical UTC text.
    pub fn issued_at(&self) -> &str {
        &self.fields.issued_at
    }
    /// Canonical UTC text.
    pub fn expires_at(&self) -> &str {
        &self.fields.expires_at
    }
    pub fn issued_at_micros(&self) -> UtcMicros {
        self.issued
    }
    pub fn expires_at_micros(&self) -> UtcMicros {
        self.expires
    }
    pub fn proof(&self) -> &[u8] {
        &self.fields.proof
    }

    /// Lowercase hex SHA-256 of the raw UTF-8 bytes of the nonce (spec/projections.md §8.1, §8.8):
    /// what the broker records in its nonce history.
    pub fn nonce_digest(&self) -> String {
        sha256_hex(&self.fields.nonce)
    }

    /// The claims as a JSON object: the nine signing keys, or the ten wire keys with the proof.
    fn claims(&self, proof_base64: Option<String>) -> Json {
        let f = &self.fields;
        let mut pairs = vec![
            ("audience", Json::str(&f.audience)),
            ("authenticator_id", Json::str(&f.authenticator_id)),
            ("challenge_digest", Json::str(&f.challenge_digest)),
            ("decision", Json::str(self.decision.as_str())),
            ("expires_at", Json::str(&f.expires_at)),
            ("issued_at", Json::str(&f.issued_at)),
            ("nonce", Json::str(&f.nonce)),
            ("principal_digest", Json::str(&f.principal_digest)),
            ("schema", Json::str(SIGNED_HUMAN_DECISION_ASSERTION_SCHEMA)),
        ];
        if let Some(proof) = proof_base64 {
            pairs.push(("proof_base64", Json::Str(proof)));
        }
        Json::object(pairs)
    }

    /// The exact bytes an authenticator signs (spec/decisions.md §4): the ASCII canonical JSON of
    /// the nine [`ASSERTION_SIGNING_KEYS`], every value a string, `schema` the domain tag, no
    /// proof.
    pub fn signing_bytes(&self) -> Vec<u8> {
        self.claims(None).to_cja().into_bytes()
    }

    /// The canonical wire form (spec/decisions.md §5): the ASCII canonical JSON of the ten
    /// [`ASSERTION_WIRE_KEYS`], the proof as padded standard base64.
    pub fn encode(&self) -> Result<Vec<u8>, AssertionCodecError> {
        let bytes = self
            .claims(Some(base64_encode(&self.fields.proof)))
            .to_cja()
            .into_bytes();
        if bytes.len() > MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES {
            return Err(AssertionCodecError::TooLarge);
        }
        Ok(bytes)
    }

    /// Decodes a wire payload strictly (spec/decisions.md §5, in order): size, UTF-8 JSON
    /// without duplicate keys or non-finite constants, an object of exactly the ten keys, the
    /// schema, canonical base64, the field rules, and a byte-for-byte canonical re-encoding.
    pub fn decode(payload: &[u8]) -> Result<SignedHumanDecisionAssertion, AssertionCodecError> {
        if payload.is_empty() || payload.len() > MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES {
            return Err(AssertionCodecError::PayloadSize);
        }
        let text = std::str::from_utf8(payload).map_err(|_| AssertionCodecError::InvalidJson)?;
        let Value::Object(members) = Scanner::parse(text)? else {
            return Err(AssertionCodecError::NotObject);
        };
        // Keys are unique (duplicates were refused), so ten known keys are exactly the ten keys.
        let mut claims: [Option<&Value>; 10] = [None; 10];
        for (key, value) in &members {
            let slot = match key {
                PyText::Utf8(k) => ASSERTION_WIRE_KEYS.iter().position(|w| w == k),
                PyText::Surrogates(_) => None,
            };
            match slot {
                Some(i) => claims[i] = Some(value),
                None => return Err(AssertionCodecError::KeySet),
            }
        }
        let text_of = |i: usize| match claims[i] {
            Some(Value::Text(PyText::Utf8(s))) => Some(s.as_str()),
            _ => None,
        };
        if members.len() != ASSERTION_WIRE_KEYS.len() {
            return Err(AssertionCodecError::KeySet);
        }
        if text_of(9) != Some(SIGNED_HUMAN_DECISION_ASSERTION_SCHEMA) {
            return Err(AssertionCodecError::Schema);
        }
        let proof = text_of(8)
            .and_then(base64_decode_canonical)
            .ok_or(AssertionCodecError::ProofBase64)?;
        let field = |i: usize| {
            text_of(i)
                .map(str::to_owned)
                .ok_or(AssertionCodecError::Fields { cause: None })
        };
        let fields = AssertionFields {
            audience: field(0)?,
            authenticator_id: field(1)?,
            challenge_digest: field(2)?,
            decision: field(3)?,
            expires_at: field(4)?,
            issued_at: field(5)?,
            nonce: field(6)?,
            principal_digest: field(7)?,
            proof,
        };
        let assertion = SignedHumanDecisionAssertion::new(fields)
            .map_err(|e| AssertionCodecError::Fields { cause: Some(e) })?;
        if assertion.encode()? != payload {
            return Err(AssertionCodecError::NotCanonical);
        }
        Ok(assertion)
    }
}

// ------------------------------------------------------------------------------------------------
// Base64 (RFC 4648 §4: `+/` alphabet, `=` padding, no line breaks)
// ------------------------------------------------------------------------------------------------

const BASE64_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(BASE64_ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes padded standard base64 and accepts it only if re-encoding the bytes reproduces the
/// text exactly (so non-zero trailing bits, missing or extra padding, other alphabets and
/// whitespace are all refused). The empty text decodes to no bytes.
fn base64_decode_canonical(text: &str) -> Option<Vec<u8>> {
    let b = text.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    let chunks = b.len() / 4;
    for (index, chunk) in b.chunks(4).enumerate() {
        let last = index + 1 == chunks;
        let pad = match chunk {
            [_, _, b'=', b'='] if last => 2,
            [_, _, _, b'='] if last => 1,
            _ => 0,
        };
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = n << 6 | base64_value(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    (base64_encode(&out) == text).then_some(out)
}

// ------------------------------------------------------------------------------------------------
// The JSON scanner of the reference's decoder
// ------------------------------------------------------------------------------------------------
//
// The reference decodes with Python's `json.loads`, an `object_pairs_hook` that refuses duplicate
// keys and a `parse_constant` hook that refuses `NaN`/`Infinity`/`-Infinity`. Which sentence a
// malformed payload earns depends on which of those fires first in scanning order, so this
// scanner follows Python's: a constant is refused when it is reached, a duplicate when its object
// closes, and everything else (syntax, trailing data, depth) is "not valid JSON". It also accepts
// what Python accepts and `Json::parse` does not (lone surrogate escapes, integers beyond 64 bits,
// `1e400`), so such payloads fail at the later, more specific step as they do in the reference.
// Nesting is bounded by `JSON_PARSE_DEPTH_MAX` (Python's own bound is its recursion limit).

/// A decoded JSON string as Python holds it: a sequence of code points, where escapes may leave
/// lone surrogates that no Rust `String` can hold.
#[derive(Debug, PartialEq, Eq, Hash)]
enum PyText {
    Utf8(String),
    /// At least one lone surrogate: never equal to any `Utf8` text.
    Surrogates(Vec<u32>),
}

#[derive(Debug)]
enum Value {
    Text(PyText),
    Object(Vec<(PyText, Value)>),
    /// Numbers, literals and arrays: no assertion field may be one.
    Other,
}

struct Scanner<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
}

type Scan<T> = Result<T, AssertionCodecError>;

const INVALID: AssertionCodecError = AssertionCodecError::InvalidJson;

impl<'a> Scanner<'a> {
    fn parse(text: &'a str) -> Scan<Value> {
        let mut s = Scanner {
            text,
            b: text.as_bytes(),
            i: 0,
        };
        s.whitespace();
        let value = s.value(0)?;
        s.whitespace();
        if s.i != s.b.len() {
            return Err(INVALID);
        }
        Ok(value)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn starts_with(&self, literal: &str) -> bool {
        self.b
            .get(self.i..)
            .is_some_and(|rest| rest.starts_with(literal.as_bytes()))
    }

    fn value(&mut self, depth: usize) -> Scan<Value> {
        let literal = |s: &mut Scanner<'_>, word: &str| {
            s.i += word.len();
            Ok(Value::Other)
        };
        match self.peek() {
            Some(b'"') => Ok(Value::Text(self.string()?)),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'n') if self.starts_with("null") => literal(self, "null"),
            Some(b't') if self.starts_with("true") => literal(self, "true"),
            Some(b'f') if self.starts_with("false") => literal(self, "false"),
            Some(b'N') if self.starts_with("NaN") => {
                Err(AssertionCodecError::NonFiniteConstant { token: "NaN" })
            }
            Some(b'I') if self.starts_with("Infinity") => {
                Err(AssertionCodecError::NonFiniteConstant { token: "Infinity" })
            }
            Some(b'-') if self.starts_with("-Infinity") => {
                Err(AssertionCodecError::NonFiniteConstant { token: "-Infinity" })
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(INVALID),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        self.i - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, backtracking over a `.` or an exponent
    /// without digits as Python does (what follows is then refused by the caller).
    fn number(&mut self) -> Scan<Value> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let int_digits = match self.peek() {
            Some(b'0') => {
                self.i += 1;
                1
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(INVALID),
        };
        let mut is_float = false;
        if self.peek() == Some(b'.') && self.b.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
            self.digits();
            is_float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'-' | b'+')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = save;
            } else {
                is_float = true;
            }
        }
        if !is_float && int_digits > PY_INT_MAX_STR_DIGITS {
            return Err(INVALID);
        }
        Ok(Value::Other)
    }

    fn hex4(&self, at: usize) -> Scan<u32> {
        let digits = self.b.get(at..at + 4).ok_or(INVALID)?;
        digits.iter().try_fold(0u32, |acc, &c| {
            let v = char::from(c).to_digit(16).ok_or(INVALID)?;
            Ok(acc << 4 | v)
        })
    }

    /// A string from its opening quote; raw control characters are refused (Python's `strict`).
    fn string(&mut self) -> Scan<PyText> {
        self.i += 1;
        let mut points: Vec<u32> = Vec::new();
        loop {
            let c = self.peek().ok_or(INVALID)?;
            match c {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    let escape = self.b.get(self.i + 1).copied().ok_or(INVALID)?;
                    self.i += 2;
                    let point = match escape {
                        b'"' => 0x22,
                        b'\\' => 0x5c,
                        b'/' => 0x2f,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => 0x0a,
                        b'r' => 0x0d,
                        b't' => 0x09,
                        b'u' => {
                            let mut point = self.hex4(self.i)?;
                            self.i += 4;
                            if (0xd800..0xdc00).contains(&point)
                                && self.b.get(self.i..self.i + 2) == Some(b"\\u")
                            {
                                let low = self.hex4(self.i + 2)?;
                                if (0xdc00..0xe000).contains(&low) {
                                    point = 0x10000 + ((point - 0xd800) << 10) + (low - 0xdc00);
                                    self.i += 6;
                                }
                            }
                            point
                        }
                        _ => return Err(INVALID),
                    };
                    points.push(point);
                }
                0x00..=0x1f => return Err(INVALID),
                _ => {
                    let ch = self.text.get(self.i..).and_then(|rest| rest.chars().next());
                    let ch = ch.ok_or(INVALID)?;
                    points.push(u32::from(ch));
                    self.i += ch.len_utf8();
                }
            }
        }
        let text: Option<String> = points.iter().map(|&p| char::from_u32(p)).collect();
        Ok(match text {
            Some(text) => PyText::Utf8(text),
            None => PyText::Surrogates(points),
        })
    }

    fn object(&mut self, depth: usize) -> Scan<Value> {
        if depth >= JSON_PARSE_DEPTH_MAX {
            return Err(INVALID);
        }
        self.i += 1;
        self.whitespace();
        let mut members = Vec::new();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(INVALID);
            }
            let key = self.string()?;
            self.whitespace();
            if self.peek() != Some(b':') {
                return Err(INVALID);
            }
            self.i += 1;
            self.whitespace();
            let value = self.value(depth + 1)?;
            members.push((key, value));
            self.whitespace();
            match self.peek() {
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                Some(b',') => {
                    self.i += 1;
                    self.whitespace();
                }
                _ => return Err(INVALID),
            }
        }
        // The reference's `object_pairs_hook` runs when the object closes.
        let mut seen = HashSet::with_capacity(members.len());
        if !members.iter().all(|(key, _)| seen.insert(key)) {
            return Err(AssertionCodecError::DuplicateKey);
        }
        Ok(Value::Object(members))
    }

    fn array(&mut self, depth: usize) -> Scan<Value> {
        if depth >= JSON_PARSE_DEPTH_MAX {
            return Err(INVALID);
        }
        self.i += 1;
        self.whitespace();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Value::Other);
        }
        loop {
            self.value(depth + 1)?;
            self.whitespace();
            match self.peek() {
                Some(b']') => {
                    self.i += 1;
                    return Ok(Value::Other);
                }
                Some(b',') => {
                    self.i += 1;
                    self.whitespace();
                }
                _ => return Err(INVALID),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const CHALLENGE: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const PRINCIPAL: &str = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

    fn fields() -> AssertionFields {
        AssertionFields {
            challenge_digest: CHALLENGE.into(),
            decision: "granted".into(),
            principal_digest: PRINCIPAL.into(),
            authenticator_id: "managed-test-authenticator".into(),
            audience: "ctx-managed-query".into(),
            nonce: "managed-consent-nonce-1".into(),
            issued_at: "2026-08-03T12:00:00Z".into(),
            expires_at: "2026-08-03T12:30:00.5Z".into(),
            proof: b"proof-bytes".to_vec(),
        }
    }

    fn assertion() -> SignedHumanDecisionAssertion {
        SignedHumanDecisionAssertion::new(fields()).unwrap()
    }

    fn with(edit: impl FnOnce(&mut AssertionFields)) -> Result<(), AssertionError> {
        let mut f = fields();
        edit(&mut f);
        SignedHumanDecisionAssertion::new(f).map(|_| ())
    }

    fn payload() -> String {
        String::from_utf8(assertion().encode().unwrap()).unwrap()
    }

    fn decode_text(text: &str) -> Result<SignedHumanDecisionAssertion, AssertionCodecError> {
        SignedHumanDecisionAssertion::decode(text.as_bytes())
    }

    /// The payload with one member's JSON value text replaced.
    fn replace_value(key: &str, value_json: &str) -> String {
        let p = payload();
        let start = p.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
        let end = start + p[start..].find([',', '}']).unwrap();
        format!("{}{}{}", &p[..start], value_json, &p[end..])
    }

    #[test]
    fn signing_bytes_are_the_exact_nine_key_text() {
        let expected = concat!(
            "{\"audience\":\"ctx-managed-query\",",
            "\"authenticator_id\":\"managed-test-authenticator\",",
            "\"challenge_digest\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",",
            "\"decision\":\"granted\",",
            "\"expires_at\":\"2026-08-03T12:30:00.5Z\",",
            "\"issued_at\":\"2026-08-03T12:00:00Z\",",
            "\"nonce\":\"managed-consent-nonce-1\",",
            "\"principal_digest\":\"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\",",
            "\"schema\":\"ctx.signed-human-install-decision-v1\"}"
        );
        assert_eq!(
            String::from_utf8(assertion().signing_bytes()).unwrap(),
            expected
        );
        // Non-ASCII, quotes and backslashes in the nonce are escaped as Python's json.dumps does.
        let mut f = fields();
        f.nonce = "n\"\\é😀/\u{7e}".into();
        f.decision = "denied".into();
        let a = SignedHumanDecisionAssertion::new(f).unwrap();
        let text = String::from_utf8(a.signing_bytes()).unwrap();
        assert!(
            text.contains("\"nonce\":\"n\\\"\\\\\\u00e9\\ud83d\\ude00/~\""),
            "{text}"
        );
        assert!(text.contains("\"decision\":\"denied\""));
        assert!(text.is_ascii());
    }

    #[test]
    fn encode_is_the_exact_ten_key_text_and_round_trips() {
        let expected = concat!(
            "{\"audience\":\"ctx-managed-query\",",
            "\"authenticator_id\":\"managed-test-authenticator\",",
            "\"challenge_digest\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\",",
            "\"decision\":\"granted\",",
            "\"expires_at\":\"2026-08-03T12:30:00.5Z\",",
            "\"issued_at\":\"2026-08-03T12:00:00Z\",",
            "\"nonce\":\"managed-consent-nonce-1\",",
            "\"principal_digest\":\"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\",",
            "\"proof_base64\":\"cHJvb2YtYnl0ZXM=\",",
            "\"schema\":\"ctx.signed-human-install-decision-v1\"}"
        );
        assert_eq!(payload(), expected);
        let back = decode_text(expected).unwrap();
        assert_eq!(back, assertion());
        assert_eq!(back.proof(), b"proof-bytes");
        assert_eq!(back.decision(), HumanDecision::Granted);
        assert_eq!(
            back.expires_at_micros().0 - back.issued_at_micros().0,
            1_800_500_000
        );
        // Every proof length 1..=5 round-trips (all three padding shapes).
        for n in 1..=5u8 {
            let a = assertion()
                .with_proof((0..n).map(|i| i.wrapping_mul(77)).collect())
                .unwrap();
            let bytes = a.encode().unwrap();
            assert_eq!(SignedHumanDecisionAssertion::decode(&bytes).unwrap(), a);
        }
        // A maximal proof and a maximal escaped nonce stay under the bound.
        let mut f = fields();
        f.nonce = "😀".repeat(64);
        f.proof = vec![0xff; ASSERTION_PROOF_MAX_BYTES];
        let a = SignedHumanDecisionAssertion::new(f).unwrap();
        let bytes = a.encode().unwrap();
        assert_eq!(SignedHumanDecisionAssertion::decode(&bytes).unwrap(), a);
    }

    #[test]
    fn the_largest_assertion_is_far_below_the_bounds() {
        let f = AssertionFields {
            audience: "A".repeat(128),
            authenticator_id: "B".repeat(128),
            nonce: "\u{10ffff}".repeat(64),
            issued_at: "2026-08-03T12:00:00.123456Z".into(),
            expires_at: "2026-08-03T12:00:00.654321Z".into(),
            proof: vec![7; ASSERTION_PROOF_MAX_BYTES],
            ..fields()
        };
        let a = SignedHumanDecisionAssertion::new(f).unwrap();
        assert_eq!(a.signing_bytes().len(), 1_398);
        assert_eq!(a.encode().unwrap().len(), 12_340);
    }

    #[test]
    fn nonce_digest_hashes_the_raw_utf8_nonce() {
        assert_eq!(
            assertion().nonce_digest(),
            sha256_hex("managed-consent-nonce-1")
        );
        let mut f = fields();
        f.nonce = "é".into();
        let a = SignedHumanDecisionAssertion::new(f).unwrap();
        // SHA-256 of the two bytes C3 A9, not of a JSON escape.
        assert_eq!(a.nonce_digest(), ctx_model::sha256_hex_bytes(&[0xc3, 0xa9]));
    }

    #[test]
    fn debug_hides_the_proof() {
        let a = assertion();
        let text = format!("{a:?} {:?}", a.fields());
        assert!(!text.contains("proof"), "{text}");
        assert!(!text.contains("112, 114"), "{text}");
    }

    #[test]
    fn fields_are_validated_in_order_with_the_reference_sentences() {
        type Edit = Box<dyn FnOnce(&mut AssertionFields)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|f| {
                    f.challenge_digest = CHALLENGE.to_uppercase();
                    f.decision = "maybe".into();
                }),
                "challenge_digest must be a lowercase SHA-256 digest",
            ),
            (
                Box::new(|f| {
                    f.decision = "Granted".into();
                    f.principal_digest = "x".into();
                }),
                "decision must be granted or denied",
            ),
            (
                Box::new(|f| {
                    f.principal_digest = "x".into();
                    f.authenticator_id = String::new();
                }),
                "principal_digest must be a lowercase SHA-256 digest",
            ),
            (
                Box::new(|f| {
                    f.authenticator_id = "-bad".into();
                    f.audience = String::new();
                }),
                "authenticator_id must be a bounded canonical token",
            ),
            (
                Box::new(|f| {
                    f.audience = "a".repeat(129);
                    f.nonce = String::new();
                }),
                "audience must be a bounded canonical token",
            ),
            (
                Box::new(|f| f.nonce = String::new()),
                "nonce must be non-empty text of at most 256 bytes",
            ),
            (
                Box::new(|f| f.nonce = "é".repeat(129)),
                "nonce must be non-empty text of at most 256 bytes",
            ),
            (
                Box::new(|f| {
                    f.nonce = "a\u{1}".into();
                    f.issued_at = "bad".into();
                }),
                "nonce must not contain control characters",
            ),
            (
                Box::new(|f| f.nonce = "a\u{7f}".into()),
                "nonce must not contain control characters",
            ),
            (
                Box::new(|f| f.issued_at = "2026-08-03T12:00:00.000Z".into()),
                "issued_at must be a canonical UTC timestamp",
            ),
            (
                Box::new(|f| f.issued_at = "2026-08-03T12:00:00+00:00".into()),
                "issued_at must be a canonical UTC timestamp",
            ),
            (
                Box::new(|f| f.expires_at = "2026-08-03t12:30:00z".into()),
                "expires_at must be a canonical UTC timestamp",
            ),
            (
                Box::new(|f| {
                    f.expires_at = f.issued_at.clone();
                    f.proof.clear();
                }),
                "assertion expires_at must be after issued_at",
            ),
            (
                Box::new(|f| f.expires_at = "2026-08-03T11:00:00Z".into()),
                "assertion expires_at must be after issued_at",
            ),
            (Box::new(|f| f.proof.clear()), "proof must be 1..8192 bytes"),
            (
                Box::new(|f| f.proof = vec![1; ASSERTION_PROOF_MAX_BYTES + 1]),
                "proof must be 1..8192 bytes",
            ),
        ];
        for (edit, message) in cases {
            assert_eq!(with(edit).unwrap_err().to_string(), message);
        }
        // The bounds themselves are accepted.
        with(|f| f.nonce = "é".repeat(128)).unwrap();
        with(|f| f.nonce = "\u{80}~".into()).unwrap();
        with(|f| f.audience = "A".repeat(128)).unwrap();
        with(|f| f.proof = vec![0; ASSERTION_PROOF_MAX_BYTES]).unwrap();
        with(|f| f.expires_at = "2026-08-03T12:00:00.000001Z".into()).unwrap();
    }

    fn err(text: &str) -> String {
        decode_text(text).unwrap_err().to_string()
    }

    #[test]
    fn decode_refuses_sizes_and_invalid_json() {
        assert_eq!(
            SignedHumanDecisionAssertion::decode(b"")
                .unwrap_err()
                .to_string(),
            "signed human decision assertion payload has an invalid size"
        );
        let mut big = payload().into_bytes();
        big.resize(MAX_SIGNED_HUMAN_DECISION_ASSERTION_BYTES + 1, b' ');
        assert_eq!(
            SignedHumanDecisionAssertion::decode(&big)
                .unwrap_err()
                .to_string(),
            "signed human decision assertion payload has an invalid size"
        );
        let not_json = "signed human decision assertion payload is not valid JSON";
        for text in [
            "{",
            "{\"a\":1,}",
            "[1,]",
            "{\"a\" 1}",
            "{'a':1}",
            "{\"a\":1} x",
            "\u{feff}{}",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":-}",
            "{\"a\":nul}",
            "nan",
            "\"unterminated",
        ] {
            assert_eq!(err(text), not_json, "{text:?}");
        }
        assert_eq!(
            SignedHumanDecisionAssertion::decode(b"{\"a\":\"\xff\"}")
                .unwrap_err()
                .to_string(),
            not_json
        );
        let deep = "[".repeat(70) + &"]".repeat(70);
        assert_eq!(err(&format!("{{\"a\":{deep}}}")), not_json);
        let huge_int = "1".repeat(PY_INT_MAX_STR_DIGITS + 1);
        assert_eq!(err(&format!("{{\"a\":{huge_int}}}")), not_json);
    }

    #[test]
    fn decode_reports_duplicates_and_constants_in_scanning_order() {
        let dup = "signed human decision assertion contains a duplicate JSON key";
        assert_eq!(err("{\"a\":1,\"a\":2}"), dup);
        assert_eq!(err("[{\"x\":{\"b\":1,\"b\":[]}}]"), dup);
        assert_eq!(err("{\"\\u0061\":1,\"a\":2}"), dup);
        assert_eq!(err("{\"\\ud800\":1,\"\\ud800\":2}"), dup);
        let p = payload();
        assert_eq!(err(&p.replacen('{', "{\"nonce\":\"x\",", 1)), dup);
        let constant = |t: &str| {
            format!("signed human decision assertion contains noncanonical JSON constant {t}")
        };
        assert_eq!(err("NaN"), constant("NaN"));
        assert_eq!(err("{\"a\":[1,Infinity]}"), constant("Infinity"));
        assert_eq!(err("{\"a\":-Infinity}"), constant("-Infinity"));
        assert_eq!(err(&replace_value("nonce", "NaN")), constant("NaN"));
        // A constant reached before the duplicate's object closes wins; a syntax error reached
        // first wins over both; a duplicate wins over trailing garbage.
        assert_eq!(err("{\"a\":1,\"a\":NaN}"), constant("NaN"));
        assert_eq!(
            err("{\"a\" NaN}"),
            "signed human decision assertion payload is not valid JSON"
        );
        assert_eq!(
            err("{\"a\":1,\"a\":2"),
            "signed human decision assertion payload is not valid JSON"
        );
        assert_eq!(err("{\"a\":1,\"a\":2} x"), dup);
        // Python accepts these numbers, so the failure is a later step's.
        assert_eq!(
            err("[1e400, 123456789012345678901234567890]"),
            "signed human decision assertion JSON must be an object"
        );
    }

    #[test]
    fn decode_refuses_shape_schema_and_base64() {
        for text in ["[]", "\"x\"", "1", "null", "true"] {
            assert_eq!(
                err(text),
                "signed human decision assertion JSON must be an object"
            );
        }
        let fields_err = "signed human decision assertion has invalid fields";
        let p = payload();
        assert_eq!(err("{}"), fields_err);
        assert_eq!(err(&p.replacen('{', "{\"extra\":\"x\",", 1)), fields_err);
        assert_eq!(
            err(&p.replacen("\"nonce\":\"managed-consent-nonce-1\",", "", 1)),
            fields_err
        );
        assert_eq!(err(&p.replacen("\"nonce\"", "\"\\ud800\"", 1)), fields_err);
        let schema_err = "signed human decision assertion has an invalid schema";
        assert_eq!(
            err(&replace_value(
                "schema",
                "\"ctx.signed-human-install-decision-v2\""
            )),
            schema_err
        );
        assert_eq!(err(&replace_value("schema", "null")), schema_err);
        let b64_err = "proof_base64 must be canonical base64 text";
        for bad in [
            "\"cHJvb2YtYnl0ZXM\"",
            "\"cHJvb2YtYnl0ZXM==\"",
            "\"cHJvb2YtYnl0ZXN=\"",
            "\"QR==\"",
            "\"-_8=\"",
            "\"+/8= \"",
            "\"cHJv\\nb2YtYnl0ZXM=\"",
            "\"cHJv\\u00e9\"",
            "\"=AAA\"",
            "\"AA=A\"",
            "\"AA==AAAA\"",
            "\"\\ud800AAA\"",
            "1",
            "[]",
        ] {
            assert_eq!(err(&replace_value("proof_base64", bad)), b64_err, "{bad}");
        }
        // "+/8=" is canonical base64 of FB FF; the empty string decodes but fails the fields.
        let p2 = replace_value("proof_base64", "\"+/8=\"");
        assert_eq!(decode_text(&p2).unwrap().proof(), [0xfb, 0xff]);
        assert_eq!(
            err(&replace_value("proof_base64", "\"\"")),
            "signed human decision assertion fields are invalid"
        );
    }

    #[test]
    fn decode_refuses_invalid_fields() {
        let fields_err = "signed human decision assertion fields are invalid";
        for (key, value) in [
            ("decision", "\"approved\""),
            ("decision", "true"),
            ("nonce", "\"a\\u0001b\""),
            ("nonce", "\"a\\u007fb\""),
            ("nonce", &format!("\"{}\"", "n".repeat(257))),
            ("nonce", "\"\\udc00\""),
            ("nonce", "1"),
            ("issued_at", "\"2026-08-03T12:00:00.000Z\""),
            ("issued_at", "\"2026-08-03T13:00:00Z\""),
            ("expires_at", "\"2026-08-03T12:00:00Z\""),
            ("challenge_digest", "\"ABC\""),
            ("audience", "{}"),
            ("authenticator_id", "null"),
        ] {
            let e = decode_text(&replace_value(key, value)).unwrap_err();
            assert_eq!(e.to_string(), fields_err, "{key}={value}");
            assert!(matches!(e, AssertionCodecError::Fields { .. }));
        }
        let e = decode_text(&replace_value("expires_at", "\"2026-08-03T12:00:00Z\"")).unwrap_err();
        assert_eq!(
            e,
            AssertionCodecError::Fields {
                cause: Some(AssertionError::ExpiresNotAfterIssued)
            }
        );
    }

    #[test]
    fn decode_refuses_noncanonical_payloads() {
        let not_canonical = "signed human decision assertion payload is not canonical";
        let p = payload();
        // Whitespace, reordered keys, escapes where the canonical form has none, and raw
        // non-ASCII where it has escapes: all decode to a valid assertion but are not canonical.
        assert_eq!(err(&format!(" {p}")), not_canonical);
        assert_eq!(err(&format!("{p}\n")), not_canonical);
        assert_eq!(err(&p.replacen(",", ", ", 1)), not_canonical);
        assert_eq!(err(&p.replacen(":", " : ", 1)), not_canonical);
        let aud = "\"audience\":\"ctx-managed-query\",";
        let reordered =
            p.replacen(aud, "", 1)
                .replacen("\"schema\"", &format!("{}\"schema\"", aud), 1);
        assert_eq!(err(&reordered), not_canonical);
        assert_eq!(
            err(&replace_value("nonce", "\"managed-consent-nonce-\\u0031\"")),
            not_canonical
        );
        assert_eq!(err(&replace_value("nonce", "\"\\/x\"")), not_canonical);
        let mut f = fields();
        f.nonce = "é".into();
        let canonical = String::from_utf8(
            SignedHumanDecisionAssertion::new(f)
                .unwrap()
                .encode()
                .unwrap(),
        )
        .unwrap();
        assert!(canonical.contains("\"nonce\":\"\\u00e9\""));
        assert_eq!(decode_text(&canonical).unwrap().nonce(), "é");
        assert_eq!(err(&canonical.replace("\\u00e9", "é")), not_canonical);
        assert_eq!(err(&canonical.replace("\\u00e9", "\\u00E9")), not_canonical);
    }

    #[test]
    fn decode_never_panics_on_mutations() {
        let p = payload().into_bytes();
        for i in 0..p.len() {
            for b in [0u8, b'"', b'\\', b'{', b'}', b',', b':', 0xff, b'u', b'0'] {
                let mut m = p.clone();
                m[i] = b;
                let _ = SignedHumanDecisionAssertion::decode(&m);
            }
            let _ = SignedHumanDecisionAssertion::decode(&p[..i]);
        }
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (raw, text) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(raw.as_bytes()), text);
            assert_eq!(base64_decode_canonical(text).unwrap(), raw.as_bytes());
        }
        assert_eq!(base64_encode(&[0xfb, 0xff, 0xfe]), "+//+");
        assert_eq!(base64_decode_canonical("Zh=="), None);
        assert_eq!(base64_decode_canonical("Zm9="), None);
        assert_eq!(base64_decode_canonical("Zg="), None);
        assert_eq!(base64_decode_canonical("Zg"), None);
    }
}
