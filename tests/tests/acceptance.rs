//! The ctx acceptance suite: one integration-test binary with one module per area.
//!
//! Some tests re-execute this binary to run a single hidden "child" test in another process (the
//! crash and process-lock tests); those child tests do nothing unless their environment variable
//! is set.

// Tests may panic on failure: that is how they report it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod activation;
mod architecture;
mod cli;
mod engine;
mod journal;
mod managed;
mod support;
