//! Untrusted bytes into `decode_record_value`: it must never panic, and what it accepts must be
//! within the journal's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ctx_fuzz::decode_record::check(data);
});
