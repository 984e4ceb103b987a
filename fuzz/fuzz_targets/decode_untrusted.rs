//! Untrusted bytes into every decoder of untrusted input in the projections and the service: no
//! panic, typed refusals, canonical re-encoding, re-validation (see `src/decode_untrusted.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ctx_fuzz::decode_untrusted::check(data);
});
