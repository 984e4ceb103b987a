//! ctx-benches: criterion benches for the ctx journal (`benches/journal.rs`) and the side-by-side
//! peer comparison behind the `ctx-bench compare` binary (raw fsync limits, SQLite WAL, raw redb
//! and the journal, measured in one run on the same disk).
//!
//! The library part holds what both share: the workload (events, payloads, event ids, stream ids)
//! and the measurement helpers. Every figure is produced from inputs built outside the timed
//! section wherever the measured operation is cheap enough for input building to matter.

pub mod compare;
pub mod measure;
pub mod workload;

/// The error type of the bench code: anything that can cross a thread boundary.
pub type BenchError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The result type of the bench code.
pub type BenchResult<T> = Result<T, BenchError>;
