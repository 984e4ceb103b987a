//! A program of valid and deliberately faulty engine events through a real engine, checked for
//! deterministic replay, idempotent resubmission and refusals that change nothing (see
//! `src/replay_determinism.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|program: ctx_fuzz::replay_determinism::Program| {
    ctx_fuzz::replay_determinism::run(&program);
});
