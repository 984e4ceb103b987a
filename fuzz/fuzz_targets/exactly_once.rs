//! Managed-service operations on two handles over one data directory, with crashes at the
//! service's named fail points, checked for exactly-once installs and signed or pre-approved
//! decisions only (see `src/exactly_once.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|program: ctx_fuzz::exactly_once::Program| {
    ctx_fuzz::exactly_once::run(&program);
});
