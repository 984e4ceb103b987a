//! The bounded net-benefit planner (spec/planner.md §7, §1–§6): the integer
//! net-benefit model and the schema-v3 planning values it produces. Specified in
//! `spec/planner.md`.

pub mod adapter;
pub mod benefit;
pub mod plan;
pub mod ports;
