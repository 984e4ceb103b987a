//! Test fixtures that need the journal: the lifecycle driver runs a whole managed session through
//! a real engine. The journal-free builders live in `ctx_model::testkit`. Compiled for this
//! crate's tests and behind the `testkit` feature; never part of a production build.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod lifecycle;
