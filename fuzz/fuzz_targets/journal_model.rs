//! A program of appends, retries, reads, reopens and injected storage failures against a real
//! journal, checked step by step against an in-memory model (see `src/journal_model.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|program: ctx_fuzz::journal_model::Program| {
    ctx_fuzz::journal_model::run(&program);
});
