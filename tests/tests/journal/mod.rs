//! Acceptance tests of the ctx-journal crate.

mod concurrency;
mod crash;
mod crash_image;
mod failpoints;
mod key;
mod limits;
mod model;
mod open;
mod parallel_scan;
mod tamper;
mod unit_of_work;
