//! The digests of spec/engine.md §1: `H` (lowercase hex SHA-256), the canonical-JSON digests
//! `H(CJ(v))` and `H(CJA(v))`, and the hex codec of raw digests.

use sha2::{Digest as _, Sha256};

use crate::json::Json;
use crate::shape::is_sha;

/// `H(x)`: lowercase hex SHA-256 of the UTF-8 bytes of `text`.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// SHA-256 hex of raw bytes.
pub fn sha256_hex_bytes(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `H(CJ(v))`.
pub fn cj_digest(v: &Json) -> String {
    sha256_hex(&v.to_cj())
}

/// `H(CJA(v))`.
pub fn cja_digest(v: &Json) -> String {
    sha256_hex(&v.to_cja())
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Parses 64 lowercase hex characters into 32 bytes.
pub fn parse_sha(s: &str) -> Option<[u8; 32]> {
    if !is_sha(s) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in s.as_bytes().chunks(2).enumerate() {
        let hi = hex_val(chunk[0])?;
        let lo = hex_val(chunk[1])?;
        out[i] = hi << 4 | lo;
    }
    Some(out)
}

/// Parses an even number of hex digits (either case) into bytes; `None` for anything else.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|pair| {
            let digit = |c: u8| hex_val(c.to_ascii_lowercase());
            Some(digit(pair[0])? << 4 | digit(pair[1])?)
        })
        .collect()
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{hex, parse_hex};

    #[test]
    fn parse_hex_reads_either_case_and_refuses_anything_else() {
        assert_eq!(parse_hex("00ff7A"), Some(vec![0x00, 0xff, 0x7a]));
        assert_eq!(parse_hex(""), Some(Vec::new()));
        for bad in ["0", "0g", "+f", " 0", "é0"] {
            assert_eq!(parse_hex(bad), None, "{bad:?}");
        }
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(parse_hex(&hex(&bytes)), Some(bytes));
    }
}
