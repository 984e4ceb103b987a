//! Fuzz harness code for the ctx journal, kept in a library so the targets stay one-liners and the
//! harness itself can be unit-tested with `cargo test` in this directory.

pub mod canary;
pub mod decode_record;
pub mod decode_untrusted;
pub mod exactly_once;
pub mod journal_model;
pub mod replay_determinism;
