//! Must fail: panics on inputs starting with `ctx!` (see `src/canary.rs`). CI asserts it does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ctx_fuzz::canary::check(data);
});
