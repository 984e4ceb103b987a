//! The bounded net-benefit planner (reference planner-and-install §2.7, §2.9, §3): the integer
//! net-benefit model and the schema-v3 planning values it produces. Specified in
//! `spec/planner.md`.

pub mod adapter;
pub mod benefit;
pub mod plan_v3;
pub mod ports;
