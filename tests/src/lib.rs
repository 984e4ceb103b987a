//! ctx-tests: the acceptance suite of ctx. Everything lives in the single integration-test binary
//! `acceptance` (tests/acceptance.rs); this library is intentionally empty.
