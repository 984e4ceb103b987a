//! Errors of the PostgreSQL backend. Messages name the server (host, port, database) and what
//! failed; never a password.

use std::error::Error as _;

/// Why connecting to, preparing or using a PostgreSQL journal failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// The connection string does not parse.
    #[error("the PostgreSQL connection string is invalid: {}", describe(.source))]
    Config { source: postgres::Error },
    /// A schema name that is not 1 to 63 lowercase letters, digits or `_`.
    #[error(
        "schema name \"{schema}\" must be 1 to 63 lowercase letters, digits or _, start with a \
         letter or _, and not start with pg_"
    )]
    SchemaName { schema: String },
    #[error("connecting to PostgreSQL at {location} failed: {}", describe(.source))]
    Connect {
        location: String,
        source: postgres::Error,
    },
    #[error("preparing the journal schema at {location} failed while {step}: {}", describe(.source))]
    Migrate {
        location: String,
        step: &'static str,
        source: postgres::Error,
    },
    #[error(
        "the journal schema at {location} is at version {found}; this build knows versions up to \
         {supported}: use a newer build"
    )]
    SchemaTooNew {
        location: String,
        found: i32,
        supported: i32,
    },
    #[error(
        "the journal at {location} has format version {found}; this build reads version {supported}"
    )]
    FormatVersion {
        location: String,
        found: i32,
        supported: i32,
    },
    #[error("the journal schema at {location} is damaged: {reason}")]
    Corrupt { location: String, reason: String },
    /// The runtime that drives a connection's socket could not be made (threads or file
    /// descriptors exhausted).
    #[error("connecting to PostgreSQL at {location} failed: no I/O runtime: {source}")]
    Runtime {
        location: String,
        source: std::io::Error,
    },
    /// A statement failed.
    #[error("{what} at PostgreSQL {location} failed: {}", describe(.source))]
    Query {
        location: String,
        what: &'static str,
        source: postgres::Error,
    },
}

/// The error with what the server said: `postgres::Error` shows only its kind ("db error"), and
/// the server's message, detail and SQLSTATE are in its source.
pub(crate) fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{db} (SQLSTATE {})", db.code().code());
    }
    match error.source() {
        Some(source) => format!("{error}: {source}"),
        None => error.to_string(),
    }
}
