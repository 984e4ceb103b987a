//! The JSON value model of the domain and its two canonical encodings.
//!
//! Every digest of the reference is taken over a canonical JSON text, so values keep exactly the
//! shape the reference hashes: objects are `BTreeMap`s (byte order of UTF-8 keys equals code point
//! order, which is the reference's sort order), integers are `i64`, floats are finite `f64`s
//! rendered the way the reference renders them. The same type is stored in rkyv archives.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// Maximum nesting accepted by the parser; deeper input is refused before it can exhaust the stack.
pub const JSON_PARSE_DEPTH_MAX: usize = 64;

/// How much of a refused number's text a [`JsonFault`] quotes: enough to recognise it, never a
/// megabyte of digits in a message.
pub const JSON_FAULT_EXCERPT_MAX_BYTES: usize = 40;

/// A JSON value. Floats are always finite (construction through [`Json::float`] or the parser).
#[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(serialize_bounds(
    __S: rkyv::ser::Writer + rkyv::ser::Allocator,
    __S::Error: rkyv::rancor::Source,
))]
#[rkyv(deserialize_bounds(__D::Error: rkyv::rancor::Source))]
#[rkyv(bytecheck(bounds(__C: rkyv::validation::ArchiveContext)))]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(#[rkyv(omit_bounds)] Vec<Json>),
    Obj(#[rkyv(omit_bounds)] BTreeMap<String, Json>),
}

/// Why a text is not accepted as JSON. `Invalid` names the byte and the fault (spec/engine.md
/// §1.1); the other messages are the reference's fragments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not strict JSON; `offset` is the zero-based byte offset of the fault.
    #[error("the JSON is not valid at byte {offset}: {fault}")]
    Invalid { offset: usize, fault: JsonFault },
    #[error("duplicate JSON key '{key}'")]
    DuplicateKey { key: String },
    #[error("message is not canonical-JSON compatible: {detail}")]
    NotCompatible { detail: String },
}

/// What is wrong at the offset of a [`JsonError::Invalid`]: a noun phrase naming the fault and,
/// where there is one, the text at fault (spec/engine.md §1.1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonFault {
    /// The text is empty or only whitespace.
    #[error("empty input")]
    Empty,
    /// The text ends inside a value.
    #[error("an unexpected end of input where {expected} was expected")]
    Truncated { expected: &'static str },
    /// A character that cannot start or continue the value at this point.
    #[error("an unexpected character {} where {expected} was expected", shown(.found))]
    Unexpected { found: char, expected: &'static str },
    /// A complete value is followed by more than whitespace.
    #[error("trailing data after the value, starting with {}", shown(.found))]
    TrailingData { found: char },
    /// A UTF-8 byte order mark (U+FEFF) before the value; RFC 8259 §8.1 forbids sending one.
    #[error("a byte order mark at the start")]
    ByteOrderMark,
    /// The bytes are not UTF-8 ([`Json::parse_bytes`]); `byte` is the first one that is not.
    #[error("invalid UTF-8 (byte {byte:#04x})")]
    NotUtf8 { byte: u8 },
    /// A raw control character (U+0000 through U+001F) inside a string; it must be escaped.
    #[error("a control character {} in a string", shown(.found))]
    ControlInString { found: char },
    /// A backslash escape JSON does not define.
    #[error("an invalid escape ({escape})")]
    InvalidEscape { escape: String },
    /// A `\u` escape of a UTF-16 surrogate without its partner: it names no character.
    #[error("a lone surrogate escape ({escape})")]
    LoneSurrogate { escape: String },
    /// An integer written with a leading zero (`01`), which JSON does not allow.
    #[error("a number with a leading zero ({text})")]
    LeadingZero { text: String },
    /// A float that overflows `f64` (`1e999999`) or an integer outside `i64`; `text` is the
    /// literal, cut to [`JSON_FAULT_EXCERPT_MAX_BYTES`].
    #[error("a number out of range ({text})")]
    NumberOutOfRange { text: String },
    /// Objects and arrays nest deeper than [`JSON_PARSE_DEPTH_MAX`].
    #[error("nesting deeper than {max} levels")]
    TooDeep { max: usize },
}

/// A character as a message shows it: printable ASCII quoted, anything else (controls, spaces,
/// invisible or look-alike non-ASCII) as its code point.
fn shown(c: &char) -> String {
    if c.is_ascii_graphic() {
        format!("'{c}'")
    } else {
        format!("U+{:04X}", u32::from(*c))
    }
}

/// Shorthand for an object map.
pub type JsonMap = BTreeMap<String, Json>;

impl Json {
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// A float value; `None` for NaN and infinities, which canonical JSON cannot carry.
    pub fn float(f: f64) -> Option<Json> {
        f.is_finite().then_some(Json::Float(f))
    }

    /// Builds an object from `(key, value)` pairs; a later duplicate key replaces an earlier one.
    pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Obj(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn opt_str(s: Option<&str>) -> Json {
        match s {
            Some(s) => Json::Str(s.to_owned()),
            None => Json::Null,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Json::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_obj(&self) -> Option<&JsonMap> {
        match self {
            Json::Obj(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_arr(&self) -> Option<&[Json]> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }

    /// The member `key` of an object; `None` for a missing key or a non-object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_obj().and_then(|m| m.get(key))
    }

    /// The string member `key`, if present and a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Json::as_str)
    }

    /// The JSON type name the reference uses in messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "NoneType",
            Json::Bool(_) => "bool",
            Json::Int(_) => "int",
            Json::Float(_) => "float",
            Json::Str(_) => "str",
            Json::Arr(_) => "list",
            Json::Obj(_) => "dict",
        }
    }

    /// Nesting depth: scalars 0, a container 1 + its deepest member.
    pub fn depth(&self) -> usize {
        match self {
            Json::Arr(a) => 1 + a.iter().map(Json::depth).max().unwrap_or(0),
            Json::Obj(m) => 1 + m.values().map(Json::depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Engine canonical JSON (`ctx-canonical-json-v1`): sorted keys, no whitespace, non-ASCII raw.
    pub fn to_cj(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    /// ASCII canonical JSON: as [`Json::to_cj`] but every non-ASCII character is `\uXXXX`.
    pub fn to_cja(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, true);
        out
    }

    fn write(&self, out: &mut String, ascii: bool) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Json::Float(f) => write_python_float(out, *f),
            Json::Str(s) => write_string(out, s, ascii),
            Json::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out, ascii);
                }
                out.push(']');
            }
            Json::Obj(m) => {
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k, ascii);
                    out.push(':');
                    v.write(out, ascii);
                }
                out.push('}');
            }
        }
    }

    /// Parses JSON text strictly (RFC 8259, spec/engine.md §1.1): duplicate keys, non-finite
    /// numbers, integers outside `i64`, nesting deeper than [`JSON_PARSE_DEPTH_MAX`], a byte order
    /// mark, lone surrogate escapes and trailing data are refused, each naming its byte offset.
    pub fn parse(text: &str) -> Result<Json, JsonError> {
        if text.starts_with('\u{feff}') {
            return Err(JsonError::Invalid {
                offset: 0,
                fault: JsonFault::ByteOrderMark,
            });
        }
        let mut parser = Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        };
        parser.skip_ws();
        if parser.pos == parser.bytes.len() {
            return Err(parser.fail(JsonFault::Empty));
        }
        let value = parser.value(0)?;
        parser.skip_ws();
        if parser.pos != parser.bytes.len() {
            let found = parser.found();
            return Err(parser.fail(JsonFault::TrailingData { found }));
        }
        Ok(value)
    }

    /// [`Json::parse`] of bytes: bytes that are not UTF-8 are refused at the first bad byte.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Json, JsonError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Json::parse(text),
            Err(e) => {
                let offset = e.valid_up_to();
                Err(JsonError::Invalid {
                    offset,
                    fault: JsonFault::NotUtf8 {
                        byte: bytes.get(offset).copied().unwrap_or(0),
                    },
                })
            }
        }
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_owned())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}

impl From<i64> for Json {
    fn from(i: i64) -> Json {
        Json::Int(i)
    }
}

impl From<u64> for Json {
    /// Revisions and counts are below 2^63 by the journal's limits; saturating keeps this total.
    fn from(i: u64) -> Json {
        Json::Int(i64::try_from(i).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<JsonMap> for Json {
    fn from(m: JsonMap) -> Json {
        Json::Obj(m)
    }
}

impl From<Vec<Json>> for Json {
    fn from(a: Vec<Json>) -> Json {
        Json::Arr(a)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cj())
    }
}

fn write_string(out: &mut String, s: &str, ascii: bool) {
    out.push('"');
    // Nearly every string the engine hashes is a plain token or digest: copy it in one piece.
    let plain = |b: u8| b >= 0x20 && b != b'"' && b != b'\\' && (b < 0x80 || !ascii);
    if s.bytes().all(plain) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Renders a finite float the way the reference's `repr` does: the shortest round-trip digits,
/// positional notation for decimal exponents in [-4, 16), scientific (`1e+16`, `1e-05`) otherwise,
/// and a `.0` on integral positional values.
fn write_python_float(out: &mut String, f: f64) {
    if f.is_sign_negative() {
        out.push('-');
    }
    let abs = f.abs();
    if abs == 0.0 {
        out.push_str("0.0");
        return;
    }
    // Rust's `{:e}` yields the shortest round-trip digits as `d[.ddd]e<exp>`.
    let sci = format!("{abs:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    let decpt = exponent + 1;
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let sign = if e < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(digits);
    } else {
        let decpt = decpt as usize;
        if digits.len() <= decpt {
            out.push_str(digits);
            for _ in digits.len()..decpt {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt]);
            out.push('.');
            out.push_str(&digits[decpt..]);
        }
    }
}

/// A strict recursive-descent JSON parser over a UTF-8 text. Recursion is bounded by
/// [`JSON_PARSE_DEPTH_MAX`]; every refusal names the byte offset where the text went wrong.
struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// What a message says the parser was looking for.
const EXPECT_VALUE: &str = "a value";
const EXPECT_KEY: &str = "a key in double quotes";
const EXPECT_COLON: &str = "':'";
const EXPECT_ARRAY_NEXT: &str = "',' or ']'";
const EXPECT_OBJECT_NEXT: &str = "',' or '}'";
const EXPECT_DIGIT: &str = "a digit";
const EXPECT_STRING_END: &str = "a closing '\"'";
const EXPECT_ESCAPE: &str = "an escape character";
const EXPECT_HEX: &str = "four hexadecimal digits";

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Parser<'_> {
    fn fail_at(&self, offset: usize, fault: JsonFault) -> JsonError {
        JsonError::Invalid { offset, fault }
    }

    fn fail(&self, fault: JsonFault) -> JsonError {
        self.fail_at(self.pos, fault)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// The character at the current offset (structural offsets are always character boundaries;
    /// the replacement character stands in should one not be).
    fn found(&self) -> char {
        self.text
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
            .unwrap_or(char::REPLACEMENT_CHARACTER)
    }

    /// The end of input or the unexpected character at the current offset.
    fn unexpected(&self, expected: &'static str) -> JsonError {
        if self.pos >= self.bytes.len() {
            self.fail(JsonFault::Truncated { expected })
        } else {
            let found = self.found();
            self.fail(JsonFault::Unexpected { found, expected })
        }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
    }

    /// The value at the current offset; `depth` is the number of containers around it.
    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::Str),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.unexpected(EXPECT_VALUE)),
        }
    }

    /// Refuses a container that would nest deeper than [`JSON_PARSE_DEPTH_MAX`], before it can
    /// exhaust the stack.
    fn enter(&self, depth: usize) -> Result<(), JsonError> {
        if depth >= JSON_PARSE_DEPTH_MAX {
            return Err(self.fail(JsonFault::TooDeep {
                max: JSON_PARSE_DEPTH_MAX,
            }));
        }
        Ok(())
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.enter(depth)?;
        self.pos += 1;
        let mut out = BTreeMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Obj(out));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.unexpected(EXPECT_KEY));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.unexpected(EXPECT_COLON));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            if out.contains_key(&key) {
                return Err(JsonError::DuplicateKey { key });
            }
            out.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Obj(out));
                }
                _ => return Err(self.unexpected(EXPECT_OBJECT_NEXT)),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.enter(depth)?;
        self.pos += 1;
        let mut out = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Arr(out));
        }
        loop {
            self.skip_ws();
            out.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Arr(out));
                }
                _ => return Err(self.unexpected(EXPECT_ARRAY_NEXT)),
            }
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, JsonError> {
        let expected = match word {
            "true" => "'true'",
            "false" => "'false'",
            _ => "'null'",
        };
        for &b in word.as_bytes() {
            if self.peek() != Some(b) {
                return Err(self.unexpected(expected));
            }
            self.pos += 1;
        }
        Ok(value)
    }

    /// Skips ASCII digits; how many there were.
    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                    self.digits();
                    let text = excerpt(&self.text[start..self.pos]);
                    return Err(self.fail_at(start, JsonFault::LeadingZero { text }));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.unexpected(EXPECT_DIGIT)),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.unexpected(EXPECT_DIGIT));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            integer = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.unexpected(EXPECT_DIGIT));
            }
        }
        let text = &self.text[start..self.pos];
        let out_of_range = || {
            self.fail_at(
                start,
                JsonFault::NumberOutOfRange {
                    text: excerpt(text),
                },
            )
        };
        if integer {
            // `-0` has always been the float -0.0 (the earlier serde_json parser read it so), and
            // digests taken over its canonical text `-0.0` must not change.
            if text == "-0" {
                return Ok(Json::Float(-0.0));
            }
            return text
                .parse::<i64>()
                .map(Json::Int)
                .map_err(|_| out_of_range());
        }
        // Rust's float parsing is correctly rounded, so a float re-parses from its own canonical
        // text to the same number; overflow yields infinity, which canonical JSON cannot carry.
        match text.parse::<f64>().ok().and_then(Json::float) {
            Some(value) => Ok(value),
            None => Err(out_of_range()),
        }
    }

    /// Four hexadecimal digits at the current offset, for the `\u` escape starting at `escape`.
    fn hex4(&mut self, escape: usize) -> Result<u16, JsonError> {
        let mut code = 0u16;
        for _ in 0..4 {
            let digit = match self.peek() {
                None => {
                    return Err(self.fail(JsonFault::Truncated {
                        expected: EXPECT_HEX,
                    }));
                }
                Some(b) => (b as char).to_digit(16),
            };
            let Some(digit) = digit else {
                let written: String = self.text[escape..].chars().take(6).collect();
                return Err(self.fail_at(escape, JsonFault::InvalidEscape { escape: written }));
            };
            code = code * 16 + digit as u16;
            self.pos += 1;
        }
        Ok(code)
    }

    /// The character of the `\u` escape whose backslash is at the current offset, pairing a
    /// high surrogate with the low surrogate escape that must follow it.
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let escape = self.pos;
        self.pos += 2;
        let first = self.hex4(escape)?;
        let lone = |parser: &Self| {
            parser.fail_at(
                escape,
                JsonFault::LoneSurrogate {
                    escape: parser.text[escape..escape + 6].to_owned(),
                },
            )
        };
        let code = match first {
            0xD800..=0xDBFF => {
                if self.pos >= self.bytes.len() {
                    return Err(self.fail(JsonFault::Truncated {
                        expected: EXPECT_STRING_END,
                    }));
                }
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(lone(self));
                }
                let low_escape = self.pos;
                self.pos += 2;
                let second = self.hex4(low_escape)?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(lone(self));
                }
                0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(lone(self)),
            code => u32::from(code),
        };
        char::from_u32(code).ok_or_else(|| lone(self))
    }

    /// The string whose opening quote is at the current offset, unescaped.
    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            // Copy the run up to the next quote, backslash or control byte in one piece: each
            // of those is ASCII, so the run ends on a character boundary.
            let run = self.pos;
            while self
                .peek()
                .is_some_and(|b| b != b'"' && b != b'\\' && b >= 0x20)
            {
                self.pos += 1;
            }
            out.push_str(&self.text[run..self.pos]);
            match self.peek() {
                None => {
                    return Err(self.fail(JsonFault::Truncated {
                        expected: EXPECT_STRING_END,
                    }));
                }
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let escaped = match self.bytes.get(self.pos + 1) {
                        None => {
                            self.pos += 1;
                            return Err(self.fail(JsonFault::Truncated {
                                expected: EXPECT_ESCAPE,
                            }));
                        }
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            out.push(self.unicode_escape()?);
                            continue;
                        }
                        Some(_) => {
                            let written: String = self.text[self.pos..].chars().take(2).collect();
                            return Err(self.fail(JsonFault::InvalidEscape { escape: written }));
                        }
                    };
                    out.push(escaped);
                    self.pos += 2;
                }
                Some(_) => {
                    let found = self.found();
                    return Err(self.fail(JsonFault::ControlInString { found }));
                }
            }
        }
    }
}

/// A number's text for a message, cut to [`JSON_FAULT_EXCERPT_MAX_BYTES`] (number texts are
/// ASCII, so any cut is a character boundary).
fn excerpt(text: &str) -> String {
    match text.get(..JSON_FAULT_EXCERPT_MAX_BYTES) {
        Some(head) if head.len() < text.len() => format!("{head}… ({} bytes)", text.len()),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn canonical_encodings_escape_as_the_reference_does() {
        let v = Json::object([
            ("b", Json::str("é\n\u{1}\u{2028}😀")),
            (
                "a",
                Json::Arr(vec![Json::Int(-1), Json::Bool(true), Json::Null]),
            ),
        ]);
        assert_eq!(
            v.to_cj(),
            "{\"a\":[-1,true,null],\"b\":\"é\\n\\u0001\u{2028}😀\"}"
        );
        assert_eq!(
            v.to_cja(),
            "{\"a\":[-1,true,null],\"b\":\"\\u00e9\\n\\u0001\\u2028\\ud83d\\ude00\"}"
        );
    }

    #[test]
    fn floats_render_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5, "1.5"),
            (-0.0, "-0.0"),
            (123.456, "123.456"),
            (1.2345e-7, "1.2345e-07"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (0.1, "0.1"),
        ];
        for (f, want) in cases {
            assert_eq!(Json::Float(f).to_cj(), want, "{f}");
        }
    }

    #[test]
    fn parse_rounds_floats_correctly_and_refuses_integers_beyond_i64() {
        // Found by the decode_untrusted fuzz target: a parsed float must re-parse from its own
        // canonical text to the same number.
        for text in [
            "9.999999999995001e+19",
            "-9.333333333333333e+95",
            "1e20",
            "0.1",
        ] {
            let v = Json::parse(text).unwrap();
            assert_eq!(Json::parse(&v.to_cj()).unwrap(), v, "{text}");
            let f: f64 = text.parse().unwrap();
            assert_eq!(v, Json::Float(f), "{text}");
        }
        for text in [
            "18446744073709551616",
            "99999999999949999995",
            "[1, -9333333333333333333333333333333333333333337]",
            "{\"a\": 9223372036854775808}",
        ] {
            assert!(
                matches!(
                    Json::parse(text),
                    Err(JsonError::Invalid {
                        fault: JsonFault::NumberOutOfRange { .. },
                        ..
                    })
                ),
                "{text}"
            );
        }
        // Inside strings, digits are text; in range, integers stay integers.
        assert!(Json::parse("\"99999999999999999999999\"").is_ok());
        assert_eq!(
            Json::parse("-9223372036854775808").unwrap(),
            Json::Int(i64::MIN)
        );
    }

    #[test]
    fn parse_rejects_duplicates_and_garbage() {
        assert_eq!(
            Json::parse("{\"a\":1,\"a\":2}"),
            Err(JsonError::DuplicateKey { key: "a".into() })
        );
        // A duplicate is found where its value ends, before anything later in the text.
        assert_eq!(
            Json::parse("{\"a\":1,\"a\":2 x"),
            Err(JsonError::DuplicateKey { key: "a".into() })
        );
        let v = Json::parse("{\"z\":[1,2.5,\"x\"],\"a\":{}}").unwrap();
        assert_eq!(v.to_cj(), "{\"a\":{},\"z\":[1,2.5,\"x\"]}");
    }

    /// The sentence a person reads for a refused text.
    fn refusal(text: &str) -> String {
        Json::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn each_refusal_names_the_byte_and_the_fault() {
        // The ten faults testers sent to host commands (issue 21), each with its own sentence.
        let deep = "[".repeat(10_000);
        assert_eq!(
            refusal(&deep),
            "the JSON is not valid at byte 64: nesting deeper than 64 levels"
        );
        assert_eq!(
            refusal("{\"limit\": 1e999999}"),
            "the JSON is not valid at byte 10: a number out of range (1e999999)"
        );
        assert_eq!(
            refusal("[1, 123456789012345678901234567890]"),
            "the JSON is not valid at byte 4: a number out of range \
             (123456789012345678901234567890)"
        );
        assert_eq!(
            refusal("\u{feff}{}"),
            "the JSON is not valid at byte 0: a byte order mark at the start"
        );
        assert_eq!(
            refusal("{\"a\":1} x"),
            "the JSON is not valid at byte 8: trailing data after the value, starting with 'x'"
        );
        assert_eq!(
            refusal("\"\\ud800\""),
            "the JSON is not valid at byte 1: a lone surrogate escape (\\ud800)"
        );
        assert_eq!(
            refusal("{\"a\":\"x\u{0}y\"}"),
            "the JSON is not valid at byte 7: a control character U+0000 in a string"
        );
        assert_eq!(refusal(""), "the JSON is not valid at byte 0: empty input");
        assert_eq!(
            refusal("{\"a\": [1, 2"),
            "the JSON is not valid at byte 11: an unexpected end of input where ',' or ']' was \
             expected"
        );
        assert_eq!(
            Json::parse_bytes(b"{\"a\": \"\xff\"}")
                .unwrap_err()
                .to_string(),
            "the JSON is not valid at byte 7: invalid UTF-8 (byte 0xff)"
        );
    }

    #[test]
    fn other_refusals_name_the_character_and_what_was_expected() {
        let cases = [
            (
                "NaN",
                "byte 0: an unexpected character 'N' where a value was expected",
            ),
            ("  \n\t", "byte 4: empty input"),
            (
                "[1,]",
                "byte 3: an unexpected character ']' where a value was expected",
            ),
            (
                "{\"a\":1,}",
                "byte 7: an unexpected character '}' where a key in double quotes was expected",
            ),
            (
                "{\"a\" 1}",
                "byte 5: an unexpected character '1' where ':' was expected",
            ),
            (
                "[1 2]",
                "byte 3: an unexpected character '2' where ',' or ']' was expected",
            ),
            (
                "tru",
                "byte 3: an unexpected end of input where 'true' was expected",
            ),
            (
                "nulL",
                "byte 3: an unexpected character 'L' where 'null' was expected",
            ),
            (
                "-",
                "byte 1: an unexpected end of input where a digit was expected",
            ),
            (
                "1.e5",
                "byte 2: an unexpected character 'e' where a digit was expected",
            ),
            ("[01]", "byte 1: a number with a leading zero (01)"),
            (
                "\"abc",
                "byte 4: an unexpected end of input where a closing '\"' was expected",
            ),
            ("\"\\x\"", "byte 1: an invalid escape (\\x)"),
            ("\"\\u12g4\"", "byte 1: an invalid escape (\\u12g4)"),
            ("\"\\udc00\"", "byte 1: a lone surrogate escape (\\udc00)"),
            (
                "\"\\ud83d\\u0041\"",
                "byte 1: a lone surrogate escape (\\ud83d)",
            ),
            (
                "[\"é\", é]",
                "byte 7: an unexpected character U+00E9 where a value was expected",
            ),
            (
                "{} \u{feff}",
                "byte 3: trailing data after the value, starting with U+FEFF",
            ),
            (
                "\u{0}",
                "byte 0: an unexpected character U+0000 where a value was expected",
            ),
            ("1e400", "byte 0: a number out of range (1e400)"),
            ("-1e400", "byte 0: a number out of range (-1e400)"),
            (
                "9223372036854775808",
                "byte 0: a number out of range (9223372036854775808)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(
                refusal(text),
                format!("the JSON is not valid at {want}"),
                "{text:?}"
            );
        }
        // A long number is quoted only in part, with its length.
        let long = "9".repeat(10_000);
        assert_eq!(
            refusal(&long),
            format!(
                "the JSON is not valid at byte 0: a number out of range ({}… (10000 bytes))",
                "9".repeat(JSON_FAULT_EXCERPT_MAX_BYTES)
            )
        );
    }

    #[test]
    fn accepted_edge_values_keep_their_meaning() {
        let nested = |n: usize| "[".repeat(n) + &"]".repeat(n);
        assert_eq!(
            Json::parse(&nested(JSON_PARSE_DEPTH_MAX)).unwrap().depth(),
            64
        );
        assert_eq!(
            refusal(&nested(JSON_PARSE_DEPTH_MAX + 1)),
            "the JSON is not valid at byte 64: nesting deeper than 64 levels"
        );
        let object = "{\"a\":".repeat(JSON_PARSE_DEPTH_MAX) + "1" + &"}".repeat(64);
        assert_eq!(Json::parse(&object).unwrap().depth(), 64);
        // `-0` is the float -0.0, as it always was; tiny floats round to zero, not out of range.
        assert_eq!(Json::parse("-0").unwrap().to_cj(), "-0.0");
        assert_eq!(Json::parse("1e-999999").unwrap(), Json::Float(0.0));
        assert_eq!(Json::parse("0e999999").unwrap(), Json::Float(0.0));
        assert_eq!(
            Json::parse(" \"\\ud83d\\ude00\\u00e9\\/\\b\" ").unwrap(),
            Json::str("😀é/\u{8}")
        );
        assert_eq!(
            Json::parse_bytes(b"[true]").unwrap(),
            Json::Arr(vec![Json::Bool(true)])
        );
    }

    /// serde_json's value of a text in this module's model (the parser this one replaced was
    /// built on serde_json): `None` for a value outside the model (an integer outside i64, a
    /// non-finite float, nesting past the limit), which this parser refuses.
    fn serde_value(v: serde_json::Value, depth: usize) -> Option<Json> {
        Some(match v {
            serde_json::Value::Null => Json::Null,
            serde_json::Value::Bool(b) => Json::Bool(b),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Json::Int(i),
                (None, None, Some(f)) => Json::float(f)?,
                _ => return None,
            },
            serde_json::Value::String(s) => Json::Str(s),
            serde_json::Value::Array(a) if depth < JSON_PARSE_DEPTH_MAX => Json::Arr(
                a.into_iter()
                    .map(|v| serde_value(v, depth + 1))
                    .collect::<Option<_>>()?,
            ),
            serde_json::Value::Object(m) if depth < JSON_PARSE_DEPTH_MAX => Json::Obj(
                m.into_iter()
                    .map(|(k, v)| Some((k, serde_value(v, depth + 1)?)))
                    .collect::<Option<_>>()?,
            ),
            _ => return None,
        })
    }

    /// JSON texts as a generator writes them: valid ones, with awkward numbers, escapes and
    /// whitespace, which the test then mutates.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("-0".to_owned()),
            "-?(0|[1-9][0-9]{0,21})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
            "\"([a-c é\u{1}]|\\\\[nt\"\\\\/u]|\\\\u(00e9|d83d|dc00|0000|d83d\\\\ude00))*\"",
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(", "))),
                prop::collection::vec(("\"[ab]{0,2}\"", inner), 0..4).prop_map(|members| {
                    let members: Vec<String> =
                        members.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        /// The parser accepts exactly what serde_json (with correctly rounded floats) accepts,
        /// with the same values, except what the model refuses: duplicate keys, integers
        /// outside i64, non-finite numbers, nesting past the limit.
        #[test]
        fn parse_agrees_with_serde_json(
            text in json_text(),
            edit in proptest::option::of((0usize..64, proptest::sample::select(
                vec!['[', ']', '{', '}', ':', ',', '"', '\\', ' ', '0', '9', '.', 'e', '-', 'n', '\u{0}'],
            ))),
        ) {
            let mut text = text;
            if let Some((at, c)) = edit {
                let at = text.char_indices().map(|(i, _)| i).nth(at).unwrap_or(text.len());
                text.insert(at, c);
            }
            let theirs = serde_json::from_str::<serde_json::Value>(&text).ok();
            match Json::parse(&text) {
                Ok(ours) => {
                    let theirs = theirs.and_then(|v| serde_value(v, 0));
                    proptest::prop_assert_eq!(Some(ours), theirs, "{:?}", text);
                }
                Err(JsonError::DuplicateKey { key }) => {
                    let written = format!("\"{key}\"");
                    proptest::prop_assert!(text.matches(&written).count() >= 2, "{:?}", text);
                }
                Err(e) => {
                    // An integer literal beyond u64 reaches serde_json's model as a float.
                    let big_integer = text
                        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
                        .any(|t| {
                            let digits = t.strip_prefix('-').unwrap_or(t);
                            !digits.is_empty()
                                && digits.bytes().all(|b| b.is_ascii_digit())
                                && t.parse::<i64>().is_err()
                        });
                    let refused = theirs.is_none();
                    let outside = theirs.is_some_and(|v| serde_value(v, 0).is_none());
                    proptest::prop_assert!(
                        refused || outside || big_integer,
                        "{:?} refused ({}) but serde_json accepts it",
                        text,
                        e
                    );
                }
            }
        }
    }

    #[test]
    fn archives_round_trip() {
        let v = Json::parse("{\"a\":[1,{\"b\":null}],\"c\":1.5}").unwrap();
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&v).unwrap();
        let back = rkyv::from_bytes::<Json, rkyv::rancor::Error>(&bytes).unwrap();
        assert_eq!(back, v);
    }
}

/// A borrowed view of a JSON value, so that canonical encodings and digests of domain values do
/// not deep-copy the documents they contain. Object keys may be given in any order; encoding
/// sorts them, as the canonical forms require.
#[derive(Debug, Clone)]
pub enum JsonView<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Str(&'a str),
    /// An existing value, encoded as is.
    Json(&'a Json),
    Arr(Vec<JsonView<'a>>),
    Obj(Vec<(&'static str, JsonView<'a>)>),
}

impl<'a> JsonView<'a> {
    pub fn obj(mut fields: Vec<(&'static str, JsonView<'a>)>) -> JsonView<'a> {
        fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
        JsonView::Obj(fields)
    }

    pub fn opt_str(s: Option<&'a str>) -> JsonView<'a> {
        s.map_or(JsonView::Null, JsonView::Str)
    }

    pub fn uint(n: u64) -> JsonView<'a> {
        JsonView::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }

    pub fn strs(list: &'a [String]) -> JsonView<'a> {
        JsonView::Arr(list.iter().map(|s| JsonView::Str(s)).collect())
    }

    /// An owned copy.
    pub fn to_json(&self) -> Json {
        match self {
            JsonView::Null => Json::Null,
            JsonView::Bool(b) => Json::Bool(*b),
            JsonView::Int(i) => Json::Int(*i),
            JsonView::Str(s) => Json::Str((*s).to_owned()),
            JsonView::Json(j) => (*j).clone(),
            JsonView::Arr(a) => Json::Arr(a.iter().map(JsonView::to_json).collect()),
            JsonView::Obj(m) => Json::Obj(
                m.iter()
                    .map(|(k, v)| ((*k).to_owned(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// Engine canonical JSON of the viewed value.
    pub fn to_cj(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    fn write(&self, out: &mut String, ascii: bool) {
        match self {
            JsonView::Null => out.push_str("null"),
            JsonView::Bool(true) => out.push_str("true"),
            JsonView::Bool(false) => out.push_str("false"),
            JsonView::Int(i) => {
                let _ = write!(out, "{i}");
            }
            JsonView::Str(s) => write_string(out, s, ascii),
            JsonView::Json(j) => j.write(out, ascii),
            JsonView::Arr(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out, ascii);
                }
                out.push(']');
            }
            JsonView::Obj(m) => {
                // `obj` sorted the keys; a literal `Obj` must be built sorted (checked here,
                // on in release, because a wrong order would silently change every digest).
                assert!(
                    m.windows(2).all(|w| w[0].0 < w[1].0),
                    "JsonView object keys must be sorted and unique"
                );
                out.push('{');
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, k, ascii);
                    out.push(':');
                    v.write(out, ascii);
                }
                out.push('}');
            }
        }
    }
}
