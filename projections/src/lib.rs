//! ctx-projections: the domain events, the engine reducer and the projections of the journal.
//! Built in a later issue; for now it only fixes the dependency direction service → projections →
//! journal.
#![forbid(unsafe_code)]

pub use ctx_journal as journal;
