//! The JSON value model of the domain and its two canonical encodings.
//!
//! Every digest of the reference is taken over a canonical JSON text, so values keep exactly the
//! shape the reference hashes: objects are `BTreeMap`s (byte order of UTF-8 keys equals code point
//! order, which is the reference's sort order), integers are `i64`, floats are finite `f64`s
//! rendered the way the reference renders them. The same type is stored in rkyv archives.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

/// Maximum nesting accepted by the parser; deeper input is refused before it can exhaust the stack.
pub const JSON_PARSE_DEPTH_MAX: usize = 64;

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

/// Why a text is not accepted as JSON. Messages are the reference's fragments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    #[error("message is not valid JSON")]
    Invalid,
    #[error("duplicate JSON key '{key}'")]
    DuplicateKey { key: String },
    #[error("message is not canonical-JSON compatible: {detail}")]
    NotCompatible { detail: String },
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

    /// Parses JSON text strictly: duplicate keys, non-finite numbers, integers outside `i64` and
    /// nesting deeper than [`JSON_PARSE_DEPTH_MAX`] are refused.
    pub fn parse(text: &str) -> Result<Json, JsonError> {
        // serde_json hands integer literals beyond u64 to the visitor as floats, where they can
        // no longer be told from `1e20`: find them in the text first (found by the
        // decode_untrusted fuzz target).
        if has_integer_beyond_i64(text) {
            return Err(JsonError::Invalid);
        }
        let duplicate = std::cell::RefCell::new(None);
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = JsonVisitor {
            depth: 0,
            duplicate: &duplicate,
        }
        .deserialize(&mut de);
        if let Some(key) = duplicate.into_inner() {
            return Err(JsonError::DuplicateKey { key });
        }
        let value = parsed.map_err(|_| JsonError::Invalid)?;
        de.end().map_err(|_| JsonError::Invalid)?;
        Ok(value)
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

/// True when `text` holds, outside strings, an integer literal (digits, an optional leading
/// minus, no fraction or exponent) whose value is outside `i64`. A lexical scan only: the parser
/// still decides what is valid JSON.
fn has_integer_beyond_i64(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    in_string = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_digit() || matches!(b[i], b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                i += 1;
            }
            let token = &text[start..i];
            let integer = !token.contains(['.', 'e', 'E']);
            if integer
                && token.len() > 1
                && token.parse::<i64>().is_err()
                && token
                    .trim_start_matches('-')
                    .bytes()
                    .all(|d| d.is_ascii_digit())
            {
                return true;
            }
            continue;
        }
        i += 1;
    }
    false
}

struct JsonVisitor<'a> {
    depth: usize,
    duplicate: &'a std::cell::RefCell<Option<String>>,
}

impl<'de> DeserializeSeed<'de> for JsonVisitor<'_> {
    type Value = Json;

    fn deserialize<D: de::Deserializer<'de>>(self, de: D) -> Result<Json, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonVisitor<'_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        i64::try_from(v)
            .map(Json::Int)
            .map_err(|_| E::custom("integer out of range"))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Json::float(v).ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        if self.depth >= JSON_PARSE_DEPTH_MAX {
            return Err(de::Error::custom("too deep"));
        }
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(JsonVisitor {
            depth: self.depth + 1,
            duplicate: self.duplicate,
        })? {
            out.push(v);
        }
        Ok(Json::Arr(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        if self.depth >= JSON_PARSE_DEPTH_MAX {
            return Err(de::Error::custom("too deep"));
        }
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(JsonVisitor {
                depth: self.depth + 1,
                duplicate: self.duplicate,
            })?;
            if out.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(key);
                return Err(de::Error::custom("duplicate key"));
            }
            out.insert(key, value);
        }
        Ok(Json::Obj(out))
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
            assert_eq!(Json::parse(text), Err(JsonError::Invalid), "{text}");
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
        assert_eq!(Json::parse("{\"a\":1} x"), Err(JsonError::Invalid));
        assert_eq!(Json::parse("NaN"), Err(JsonError::Invalid));
        assert_eq!(Json::parse("\"\\ud800\""), Err(JsonError::Invalid));
        assert_eq!(Json::parse("18446744073709551615"), Err(JsonError::Invalid));
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert_eq!(Json::parse(&deep), Err(JsonError::Invalid));
        let v = Json::parse("{\"z\":[1,2.5,\"x\"],\"a\":{}}").unwrap();
        assert_eq!(v.to_cj(), "{\"a\":{},\"z\":[1,2.5,\"x\"]}");
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
