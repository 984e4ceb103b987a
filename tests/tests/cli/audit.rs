//! `ctx audit`, `ctx inspect`, `ctx export` and `ctx import`, run as processes.
