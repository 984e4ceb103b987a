//! ctx-journal-pg: the ctx journal on PostgreSQL (spec/scale-out.md).
//!
//! With the `cluster` feature (off by default; this crate's own tests turn it on) it also provides
//! [`Cluster`], a throwaway PostgreSQL server in a temporary directory, with a synchronous standby
//! on request, for tests, benches and CI.
#![forbid(unsafe_code)]

#[cfg(feature = "cluster")]
mod cluster;

#[cfg(feature = "cluster")]
pub use cluster::{Cluster, ClusterError, ClusterOptions, TestServer, available, gate, shared};

mod backend;
mod conn;
mod error;
mod migrate;
mod schema;

pub use backend::PgBackend;
pub use error::PgError;
pub use schema::SCHEMA_VERSION;
