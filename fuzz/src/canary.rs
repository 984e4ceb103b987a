//! The `canary` target: it must fail. It panics on any input starting with [`TRIGGER`], which the
//! committed seed `corpus/canary/seed-trigger` holds exactly (so the first run fails), and which
//! libFuzzer also finds from an empty corpus within seconds (each matching byte is new coverage).
//! CI runs it expecting a failure: a fuzz set-up that cannot report this one cannot report any.

/// The input prefix that makes the canary fail.
pub const TRIGGER: &[u8; 4] = b"ctx!";

pub fn check(data: &[u8]) {
    // One branch per byte, so coverage guides libFuzzer to the trigger byte by byte.
    if data.first() == Some(&TRIGGER[0])
        && data.get(1) == Some(&TRIGGER[1])
        && data.get(2) == Some(&TRIGGER[2])
        && data.get(3) == Some(&TRIGGER[3])
    {
        panic!("ctx fuzz canary: the input starts with \"ctx!\", as it must to fail");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_inputs_pass() {
        for input in [&b""[..], b"c", b"ctx", b"ctx?", b"xctx!", b"CTX!"] {
            check(input);
        }
    }

    #[test]
    #[should_panic(expected = "ctx fuzz canary")]
    fn the_trigger_fails() {
        check(b"ctx!...");
    }

    #[test]
    fn the_committed_seed_is_the_trigger() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/canary/seed-trigger");
        match std::fs::read(&path) {
            Ok(bytes) => assert_eq!(bytes, TRIGGER),
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}
