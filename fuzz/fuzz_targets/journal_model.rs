//! A program of appends, retries, reads and reopens against a real journal, checked step by step
//! against an in-memory model (see `src/journal_ops.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|program: ctx_fuzz::journal_ops::Program| {
    ctx_fuzz::journal_ops::run(&program);
});
