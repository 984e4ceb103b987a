//! `ctx-bench zstd-dictionary`: trains the zstd dictionary the journal compresses record
//! payloads with (spec/journal.md §4, codec 2) from the payloads of `ctx export` files.
//!
//! The dictionary is part of the record format: once a build has written frames with it, every
//! later build must read them, so the trained bytes are committed as
//! `journal/core/src/records-v1.zdict` and never retrained in place. A new dictionary would be a
//! new codec id beside this one. This command exists so that anyone can see how the committed one
//! was made and measure a candidate against it.

use std::io::BufRead as _;
use std::path::Path;

use serde_json::Value;

use crate::BenchResult;

/// The committed dictionary's size: 32 KiB. On a held-out journal (prompts the training run never
/// saw) 16 KiB left 14 % more payload bytes, 64 KiB 3 % fewer (spec/journal.md §4).
pub const DEFAULT_DICTIONARY_BYTES: usize = 32 * 1024;

/// The writer's threshold with the dictionary (spec/journal.md §4 R6): shorter payloads are
/// stored as they are.
pub const COMPRESS_MIN_BYTES: usize = 128;

/// Every record payload of one `ctx export` file (JSON lines: a header line, then one record per
/// line with its payload in lowercase hex).
pub fn export_payloads(export: &Path) -> BenchResult<Vec<Vec<u8>>> {
    let file = std::fs::File::open(export)
        .map_err(|e| format!("the export {} could not be opened: {e}", export.display()))?;
    let mut payloads = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if n == 0 {
            continue;
        }
        let value: Value = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", export.display(), n + 1))?;
        let hex = value
            .get("payload")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{} line {} has no payload", export.display(), n + 1))?;
        payloads.push(from_hex(hex).ok_or_else(|| {
            format!(
                "{} line {} has a payload that is not hex",
                export.display(),
                n + 1
            )
        })?);
    }
    Ok(payloads)
}

fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Trains a dictionary of at most `size` bytes on `samples` (zstd's default trainer).
pub fn train(samples: &[Vec<u8>], size: usize) -> BenchResult<Vec<u8>> {
    zstd::dict::from_samples(samples, size)
        .map_err(|e| format!("zstd could not train a dictionary: {e}").into())
}

/// Bytes of `samples` after compressing each alone at level 3, with `dictionary` or without,
/// counting a payload below `min_bytes` or one that does not shrink as stored as is (the
/// writer's rule, spec/journal.md §4 R6).
pub fn compressed_bytes(
    samples: &[Vec<u8>],
    dictionary: Option<&[u8]>,
    min_bytes: usize,
) -> BenchResult<u64> {
    let mut compressor = match dictionary {
        Some(dictionary) => zstd::bulk::Compressor::with_dictionary(3, dictionary)?,
        None => zstd::bulk::Compressor::new(3)?,
    };
    let mut total = 0u64;
    for sample in samples {
        let stored = if sample.len() < min_bytes {
            sample.len()
        } else {
            compressor.compress(sample)?.len().min(sample.len())
        };
        total += stored as u64;
    }
    Ok(total)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_dictionary_trained_on_similar_payloads_compresses_them_better_than_none() {
        let samples: Vec<Vec<u8>> = (0..400)
            .map(|i| {
                format!(
                    r#"{{"schema":"ctx.engine.v1","type":"ExposurePlanned","stream":"s-{i}","selected":["skill:rust","agent:debugger"],"score_ppm":{}}}"#,
                    i * 7919 % 1_000_000
                )
                .into_bytes()
            })
            .collect();
        let dictionary = train(&samples, 4096).unwrap();
        assert!(!dictionary.is_empty() && dictionary.len() <= 4096);
        let with = compressed_bytes(&samples, Some(&dictionary), 0).unwrap();
        let without = compressed_bytes(&samples, None, 0).unwrap();
        assert!(with < without, "with {with} without {without}");
        assert_eq!(from_hex("7b7d"), Some(b"{}".to_vec()));
        assert_eq!(from_hex("7b7"), None);
    }
}
