//! Shape checks shared by the domain model (spec/engine.md §1, §2): tokens, digests, capability
//! names, trimmed text and canonical UTC timestamps.

use std::fmt;

use crate::vocab::CapabilityKind;

/// Longest opaque or safe token, in characters.
pub const TOKEN_MAX_CHARS: usize = 128;

/// Exactly 64 lowercase hex characters.
pub fn is_sha(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// The opaque/machine token: `[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}`.
pub fn is_token(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= TOKEN_MAX_CHARS
        && b[0].is_ascii_alphanumeric()
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'@' | b'-'))
}

/// The lowercase safe token: `[a-z0-9][a-z0-9._:@-]{0,127}`.
pub fn is_safe_token(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= TOKEN_MAX_CHARS
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b[1..].iter().all(|&c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, b'.' | b'_' | b':' | b'@' | b'-')
        })
}

/// A capability name: `[a-z0-9][a-z0-9._@-]{0,127}` (no colon).
pub fn is_capability_name(s: &str) -> bool {
    is_safe_token(s) && !s.contains(':')
}

/// `kind:name` with a declared kind, a valid name and at most 128 characters in total.
pub fn is_capability_identity(kind: &str, capability_id: &str) -> bool {
    CapabilityKind::parse(kind).is_some()
        && capability_id.len() <= TOKEN_MAX_CHARS
        && capability_id
            .split_once(':')
            .is_some_and(|(prefix, name)| prefix == kind && is_capability_name(name))
}

/// The kind prefix of a capability id, if it has one.
pub fn kind_of(capability_id: &str) -> Option<&str> {
    capability_id.split_once(':').map(|(k, _)| k)
}

/// Non-empty, equal to itself trimmed, and free of surrogate code points (which Rust strings
/// cannot hold, so only the first two conditions need checking).
pub fn is_trimmed(s: &str) -> bool {
    !s.is_empty() && s.trim() == s
}

/// A point in time in UTC with microsecond precision, rendered in the reference's canonical form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcMicros(pub i64);

/// Why a timestamp text is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampError {
    /// The text does not have the strict RFC 3339 shape.
    Syntax,
    /// The shape is right but the date or time does not exist.
    Value,
}

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;
/// One hour in microseconds: the action and consent TTL.
pub const ONE_HOUR_MICROS: i64 = 3_600 * MICROS_PER_SECOND;

impl UtcMicros {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.f{1,6}](Z|±HH:MM)` and converts it to UTC.
    pub fn parse(s: &str) -> Result<UtcMicros, TimestampError> {
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| -> Result<i64, TimestampError> {
            let part = b.get(r).ok_or(TimestampError::Syntax)?;
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return Err(TimestampError::Syntax);
            }
            Ok(part
                .iter()
                .fold(0i64, |acc, &c| acc * 10 + i64::from(c - b'0')))
        };
        if b.len() < 20
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
        {
            return Err(TimestampError::Syntax);
        }
        let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
        let mut i = 19;
        let mut micros = 0i64;
        if b[i] == b'.' {
            let start = i + 1;
            let mut end = start;
            while end < b.len() && b[end].is_ascii_digit() {
                end += 1;
            }
            let n = end - start;
            if n == 0 || n > 6 {
                return Err(TimestampError::Syntax);
            }
            micros = digits(start..end)? * 10i64.pow(u32::try_from(6 - n).unwrap_or(0));
            i = end;
        }
        let offset_minutes = match b.get(i..) {
            Some(b"Z") => 0,
            Some(rest)
                if rest.len() == 6 && (rest[0] == b'+' || rest[0] == b'-') && rest[3] == b':' =>
            {
                let h = digits(i + 1..i + 3)?;
                let m = digits(i + 4..i + 6)?;
                if h > 23 || m > 59 {
                    return Err(TimestampError::Value);
                }
                let total = h * 60 + m;
                if rest[0] == b'-' { -total } else { total }
            }
            _ => return Err(TimestampError::Syntax),
        };
        if !(1..=9999).contains(&year)
            || !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(TimestampError::Value);
        }
        let days = days_from_civil(year, month, day);
        let local = days * MICROS_PER_DAY
            + (hour * 3600 + minute * 60 + second) * MICROS_PER_SECOND
            + micros;
        let utc = UtcMicros(local - offset_minutes * 60 * MICROS_PER_SECOND);
        if !utc.in_range() {
            return Err(TimestampError::Value);
        }
        Ok(utc)
    }

    fn in_range(self) -> bool {
        let min = days_from_civil(1, 1, 1) * MICROS_PER_DAY;
        let max = (days_from_civil(9999, 12, 31) + 1) * MICROS_PER_DAY;
        (min..max).contains(&self.0)
    }

    /// `self + micros`, or `None` past year 9999.
    pub fn checked_add(self, micros: i64) -> Option<UtcMicros> {
        let t = UtcMicros(self.0.checked_add(micros)?);
        t.in_range().then_some(t)
    }

    /// Renders `YYYY-MM-DDTHH:MM:SS[.ffffff with trailing zeros stripped]Z`.
    pub fn render(self) -> String {
        let days = self.0.div_euclid(MICROS_PER_DAY);
        let in_day = self.0.rem_euclid(MICROS_PER_DAY);
        let (y, m, d) = civil_from_days(days);
        let secs = in_day / MICROS_PER_SECOND;
        let frac = in_day % MICROS_PER_SECOND;
        let mut s = format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        if frac != 0 {
            let f = format!("{frac:06}");
            s.push('.');
            s.push_str(f.trim_end_matches('0'));
        }
        s.push('Z');
        s
    }
}

impl fmt::Display for UtcMicros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// Normalizes a protocol timestamp to its canonical UTC text.
pub fn normalize_timestamp(s: &str) -> Result<String, TimestampError> {
    UtcMicros::parse(s).map(UtcMicros::render)
}

/// True when `s` is already in canonical UTC form.
pub fn is_canonical_timestamp(s: &str) -> bool {
    normalize_timestamp(s).is_ok_and(|n| n == s)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

// Howard Hinnant's days-from-civil and its inverse, for the proleptic Gregorian calendar.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::digest::{parse_sha, sha256_hex};

    #[test]
    fn timestamps_normalize_to_utc_z() {
        assert_eq!(
            normalize_timestamp("2026-01-01T10:00:00.500+02:00").unwrap(),
            "2026-01-01T08:00:00.5Z"
        );
        assert_eq!(
            normalize_timestamp("2026-03-01T00:30:00+01:00").unwrap(),
            "2026-02-28T23:30:00Z"
        );
        assert_eq!(
            normalize_timestamp("2024-02-29T23:59:59.000001Z").unwrap(),
            "2024-02-29T23:59:59.000001Z"
        );
        assert_eq!(
            normalize_timestamp("2025-02-29T00:00:00Z"),
            Err(TimestampError::Value)
        );
        assert_eq!(
            normalize_timestamp("2025-01-01 00:00:00Z"),
            Err(TimestampError::Syntax)
        );
        assert_eq!(
            normalize_timestamp("2025-01-01T00:00:00.1234567Z"),
            Err(TimestampError::Syntax)
        );
        assert_eq!(
            normalize_timestamp("2025-01-01T00:00:00Z\n"),
            Err(TimestampError::Syntax)
        );
        assert_eq!(
            normalize_timestamp("2025-01-01T24:00:00Z"),
            Err(TimestampError::Value)
        );
        let t = UtcMicros::parse("2026-12-31T23:30:00Z").unwrap();
        assert_eq!(
            t.checked_add(ONE_HOUR_MICROS).unwrap().render(),
            "2027-01-01T00:30:00Z"
        );
    }

    #[test]
    fn tokens_and_identities() {
        assert!(is_token("Abc.def_1:2@x-y"));
        assert!(!is_token("-abc"));
        assert!(!is_token(&"a".repeat(129)));
        assert!(is_safe_token("skill:demo"));
        assert!(!is_safe_token("Skill"));
        assert!(is_capability_identity("skill", "skill:demo"));
        assert!(!is_capability_identity("skill", "agent:demo"));
        assert!(!is_capability_identity("skill", "skill:a:b"));
        assert!(is_sha(&sha256_hex("x")));
        assert_eq!(
            sha256_hex("ctx-install-plan-executor-v1:typed-plan-only:no-raw-command"),
            "fab2f863fbd4c876f182349749c97317de919e94bfbfa7e5f621b66b9eb98efc"
        );
        assert_eq!(parse_sha(&"ab".repeat(32)).unwrap(), [0xab; 32]);
    }
}
