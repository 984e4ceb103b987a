//! Migrating a database's ctx schema to [`SCHEMA_VERSION`] (spec/scale-out.md §3): the only part
//! of the schema's code that talks to a connection, kept apart so that the connection's code can
//! use the statement texts without a cycle.

use postgres::types::ToSql;

use crate::conn::Conn;
use crate::error::PgError;
use crate::schema::{FORMAT_VERSION, MIGRATION_LOCK_KEY, MIGRATIONS, SCHEMA_VERSION, SchemaName};

/// Brings the schema in `conn`'s database up to [`SCHEMA_VERSION`] in one transaction under the
/// migration lock, and checks the meta row. Refuses a newer schema or another format version. On
/// an error the transaction is left open: the caller drops the connection, which rolls it back.
pub(crate) fn migrate(conn: &Conn, schema: &SchemaName, location: &str) -> Result<(), PgError> {
    let s = &schema.quoted;
    let fail = |step: &'static str| {
        move |source: postgres::Error| PgError::Migrate {
            location: location.to_owned(),
            step,
            source,
        }
    };
    // One value of the first row; a statement that answers no row is an error of that step.
    let one = |step: &'static str, sql: &str, params: &[&(dyn ToSql + Sync)]| {
        conn.query(sql, params)
            .map_err(fail(step))
            .map(|rows| rows.into_iter().next())
    };
    conn.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        .map_err(fail("starting the migration transaction"))?;
    conn.query(
        "SELECT pg_advisory_xact_lock($1::bigint)",
        &[&MIGRATION_LOCK_KEY],
    )
    .map_err(fail("taking the migration lock"))?;
    // Existence is checked first: CREATE … IF NOT EXISTS needs the CREATE privilege even when
    // the object exists, and a journal's user may have been granted only the tables.
    let schema_exists: bool = match one(
        "looking for the schema",
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)",
        &[&schema.name],
    )? {
        Some(row) => row.try_get(0).map_err(fail("looking for the schema"))?,
        None => false,
    };
    if !schema_exists {
        conn.batch_execute(&format!("CREATE SCHEMA {s}"))
            .map_err(fail("creating the schema"))?;
    }
    let table = format!("{s}.ctx_schema_migrations");
    let has_table: bool = match one(
        "looking for ctx_schema_migrations",
        "SELECT to_regclass($1::text) IS NOT NULL",
        &[&table],
    )? {
        Some(row) => row
            .try_get(0)
            .map_err(fail("looking for ctx_schema_migrations"))?,
        None => false,
    };
    if !has_table {
        conn.batch_execute(&format!(
            "CREATE TABLE {table} (version int PRIMARY KEY, description text NOT NULL)"
        ))
        .map_err(fail("creating ctx_schema_migrations"))?;
    }
    let found: i32 = match one(
        "reading the schema version",
        &format!("SELECT coalesce(max(version), 0) FROM {table}"),
        &[],
    )? {
        Some(row) => row.try_get(0).map_err(fail("reading the schema version"))?,
        None => 0,
    };
    if found > SCHEMA_VERSION {
        // The caller drops the connection, which rolls the transaction back; nothing was changed
        // anyway.
        return Err(PgError::SchemaTooNew {
            location: location.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > found) {
        conn.batch_execute(&migration.sql.replace("{schema}", s))
            .map_err(fail("applying a migration"))?;
        conn.execute(
            &format!("INSERT INTO {table} (version, description) VALUES ($1::int, $2::text)"),
            &[&migration.version, &migration.description],
        )
        .map_err(fail("recording a migration"))?;
    }
    let meta = one(
        "reading ctx_meta",
        &format!("SELECT format_version, last_position FROM {s}.ctx_meta WHERE id = 1"),
        &[],
    )?;
    let Some(meta) = meta else {
        return Err(PgError::Corrupt {
            location: location.to_owned(),
            reason: "ctx_meta has no row".to_owned(),
        });
    };
    let (format, last): (i32, i64) = meta
        .try_get(0)
        .and_then(|f| Ok((f, meta.try_get(1)?)))
        .map_err(fail("reading ctx_meta"))?;
    if format != FORMAT_VERSION {
        return Err(PgError::FormatVersion {
            location: location.to_owned(),
            found: format,
            supported: FORMAT_VERSION,
        });
    }
    if last < 0 {
        return Err(PgError::Corrupt {
            location: location.to_owned(),
            reason: format!("ctx_meta.last_position is negative ({last})"),
        });
    }
    conn.batch_execute("COMMIT")
        .map_err(fail("committing the migration"))
}
