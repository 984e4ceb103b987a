//! ctx-benches: criterion benches for the ctx journal (`benches/journal.rs`) and the side-by-side
//! peer comparison behind the `ctx-bench compare` binary (raw fsync limits, SQLite WAL, raw redb
//! and the journal, measured in one run on the same disk), and `ctx-bench hook-latency`, the
//! cold-start wall time of the `ctx` process an agent host starts for every prompt (on redb, and
//! with `--postgres` on PostgreSQL). `ctx-bench seam-ab` ([`seam_ab`]) compares the redb journal
//! before and after the storage-seam refactor, building the same workload at both revisions;
//! `ctx-bench pg-append` ([`pg_append`]) compares appends through the seam on PostgreSQL with plain
//! inserts of the same rows; `ctx-bench storage-growth` ([`storage_growth`]) what the hook path
//! leaves on disk per prompt, what auditing it costs in memory and what reopening it after a kill
//! costs in time. `ctx-bench plan-quality` ([`plan_quality`]) measures how well a prompt's plan
//! picks capabilities, on a labelled set of prompts and a realistic catalog the project owns.
//!
//! The library part holds what both share: the workload (events, payloads, event ids, stream ids)
//! and the measurement helpers. Every figure is produced from inputs built outside the timed
//! section wherever the measured operation is cheap enough for input building to matter.

pub mod catalog_scale;
pub mod compare;
pub mod hook_latency;
pub mod measure;
pub mod pg_append;
pub mod plan_quality;
pub mod seam_ab;
pub mod storage_growth;
pub mod workload;
pub mod zstd_dictionary;

/// The error type of the bench code: anything that can cross a thread boundary.
pub type BenchError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of the bench code.
pub type BenchResult<T> = Result<T, BenchError>;

/// The workspace's target directory: `CARGO_TARGET_DIR` if set, else `<workspace>/target` found
/// from this crate's manifest dir, else `./target`.
pub fn target_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match manifest.parent() {
        Some(root) if root.join("Cargo.toml").is_file() => root.join("target"),
        _ => PathBuf::from("target"),
    }
}
