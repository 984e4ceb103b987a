//! The replay error classes and the small value checks that fail with them (spec/engine.md §8).
//! They sit below both `replay` (surrogates, preflight) and `plan` (the
//! capability plan a decision surrogate carries), so the replay dispatch can call the plan
//! validator without `plan` importing `replay` back.

use crate::json::{Json, JsonMap};
use crate::protocol::has_exact_keys;
use crate::shape::{is_sha, is_token};

/// Why a replay value was refused. The classes are the reference's: a structural violation, a
/// value unsafe for the journal (free text, wrong retention), a value that does not match what it
/// claims to bind, and an event the replay boundary cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    Privacy(String),
    #[error("{0}")]
    Binding(String),
    #[error("{0}")]
    Unsupported(String),
}

impl ReplayError {
    pub fn message(&self) -> &str {
        match self {
            ReplayError::Validation(m)
            | ReplayError::Privacy(m)
            | ReplayError::Binding(m)
            | ReplayError::Unsupported(m) => m,
        }
    }
}

pub(crate) fn vfail<T>(message: impl Into<String>) -> Result<T, ReplayError> {
    Err(ReplayError::Validation(message.into()))
}

pub(crate) fn pfail<T>(message: impl Into<String>) -> Result<T, ReplayError> {
    Err(ReplayError::Privacy(message.into()))
}

/// An opaque token, or a privacy fault naming `name`.
pub(crate) fn r_token<'a>(value: &'a Json, name: &str) -> Result<&'a str, ReplayError> {
    match value.as_str() {
        Some(s) if is_token(s) => Ok(s),
        _ => pfail(format!("{name} must be an opaque safe token")),
    }
}

pub(crate) fn r_token_str<'a>(value: &'a str, name: &str) -> Result<&'a str, ReplayError> {
    if is_token(value) {
        Ok(value)
    } else {
        pfail(format!("{name} must be an opaque safe token"))
    }
}

/// A lowercase SHA-256 digest, or a privacy fault naming `name`.
pub(crate) fn r_digest<'a>(value: &'a Json, name: &str) -> Result<&'a str, ReplayError> {
    match value.as_str() {
        Some(s) if is_sha(s) => Ok(s),
        _ => pfail(format!("{name} must be a lowercase SHA-256 digest")),
    }
}

/// An object with exactly `keys`.
pub(crate) fn r_exact<'a>(
    value: &'a Json,
    keys: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ReplayError> {
    let Some(m) = value.as_obj() else {
        return vfail(format!("{name} must be an object"));
    };
    if !has_exact_keys(m, keys) {
        return vfail(format!("{name} has missing or unknown fields"));
    }
    Ok(m)
}

/// An object whose keys are a subset of `keys`.
pub(crate) fn r_allowed<'a>(
    value: &'a Json,
    keys: &[&str],
    name: &str,
) -> Result<&'a JsonMap, ReplayError> {
    let Some(m) = value.as_obj() else {
        return vfail(format!("{name} must be an object"));
    };
    if m.keys().any(|k| !keys.contains(&k.as_str())) {
        return vfail(format!("{name} has unknown fields"));
    }
    Ok(m)
}

/// An array of at most `max` items.
pub(crate) fn r_sequence<'a>(
    value: &'a Json,
    name: &str,
    max: usize,
) -> Result<&'a [Json], ReplayError> {
    let Some(items) = value.as_arr() else {
        return vfail(format!("{name} must be an array"));
    };
    if items.len() > max {
        return vfail(format!("{name} exceeds the bounded capability limit"));
    }
    Ok(items)
}

pub(crate) fn r_nonnegative(value: &Json, name: &str) -> Result<i64, ReplayError> {
    match value {
        Json::Int(i) if *i >= 0 => Ok(*i),
        _ => vfail(format!("{name} must be a non-negative integer")),
    }
}

pub(crate) fn r_bounded(value: &Json, name: &str, max: i64) -> Result<i64, ReplayError> {
    let i = r_nonnegative(value, name)?;
    if i > max {
        return vfail(format!("{name} exceeds its maximum"));
    }
    Ok(i)
}

/// A canonical token array: opaque tokens, lowercase, unique, sorted; returns its length.
pub(crate) fn r_token_array(value: &Json, name: &str, max: usize) -> Result<usize, ReplayError> {
    let items = r_sequence(value, name, max)?;
    let mut tokens = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        tokens.push(r_token(item, &format!("{name}[{i}]"))?);
    }
    if tokens.iter().any(|t| t.to_ascii_lowercase() != *t) {
        return vfail(format!("{name} must use lowercase canonical tokens"));
    }
    let mut sorted = tokens.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != tokens.len() {
        return vfail(format!("{name} must not contain duplicates"));
    }
    if sorted != tokens {
        return vfail(format!("{name} must use canonical order"));
    }
    Ok(tokens.len())
}
