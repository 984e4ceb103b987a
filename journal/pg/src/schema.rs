//! The PostgreSQL schema of a journal, its migrations, and the statements the backend runs
//! (spec/scale-out.md §3).

use crate::error::PgError;

/// The version of the newest schema this build knows: the last entry of [`MIGRATIONS`].
pub const SCHEMA_VERSION: i32 = 4;

/// The journal format version (spec/journal.md §11) this build reads and writes, kept in
/// `ctx_meta.format_version`: 2 since record values may be compressed (migration 2).
pub(crate) const FORMAT_VERSION: i32 = 2;

/// The key of the transaction-level advisory lock every migration runs under ("ctx_jnl1"), so
/// that concurrent first connections to one database apply each migration once.
pub(crate) const MIGRATION_LOCK_KEY: i64 = 0x6374_785f_6a6e_6c31;

/// One schema change. `{schema}` in `sql` stands for the quoted schema name.
pub(crate) struct Migration {
    pub version: i32,
    pub description: &'static str,
    pub sql: &'static str,
}

/// Every migration, in version order. Released entries are never edited: a change is a new entry.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "records, stream heads, projection tables and the serialized position",
        sql: r#"
CREATE TABLE {schema}.ctx_meta (
    id int PRIMARY KEY CHECK (id = 1),
    format_version int NOT NULL,
    last_position bigint NOT NULL CHECK (last_position >= 0)
);
INSERT INTO {schema}.ctx_meta (id, format_version, last_position) VALUES (1, 1, 0);
CREATE TABLE {schema}.ctx_records (
    position bigint PRIMARY KEY CHECK (position >= 1),
    stream bytea NOT NULL CHECK (octet_length(stream) = 32),
    revision bigint NOT NULL CHECK (revision >= 1),
    event_id text NOT NULL UNIQUE,
    record bytea NOT NULL,
    txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (stream, revision)
);
CREATE TABLE {schema}.ctx_streams (
    stream bytea PRIMARY KEY CHECK (octet_length(stream) = 32),
    revision bigint NOT NULL CHECK (revision >= 1),
    position bigint NOT NULL CHECK (position >= 1),
    digest bytea NOT NULL CHECK (octet_length(digest) = 32)
);
CREATE TABLE {schema}.ctx_projection (
    tbl text NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (tbl, key)
);
"#,
    },
    Migration {
        version: 2,
        description: "journal format version 2: record values may hold compressed payloads",
        // The same bytes as the redb journal's record values (spec/journal.md §4); the format version
        // tells a build that reads only version-1 values to refuse the journal instead of reporting
        // the newer values as corrupt (spec/journal.md §11).
        sql: "UPDATE {schema}.ctx_meta SET format_version = 2 WHERE id = 1 AND format_version = 1;",
    },
    Migration {
        version: 3,
        description: "ctx_put_records: a write transaction's records, head moves and last position in one statement",
        // The head compare raises an error instead of answering with a row count, so that the
        // puts can be sent together with COMMIT (one round trip): a failed compare aborts the
        // transaction and the COMMIT behind it only rolls back (spec/scale-out.md §3.6).
        sql: r#"
CREATE FUNCTION {schema}.ctx_put_records(
    positions bigint[], streams bytea[], revisions bigint[], event_ids text[], records bytea[],
    digests bytea[]
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    n int := coalesce(array_length(positions, 1), 0);
BEGIN
    FOR i IN 1 .. n LOOP
        INSERT INTO {schema}.ctx_records (position, stream, revision, event_id, record)
        VALUES (positions[i], streams[i], revisions[i], event_ids[i], records[i]);
        IF revisions[i] = 1 THEN
            INSERT INTO {schema}.ctx_streams (stream, revision, position, digest)
            VALUES (streams[i], 1, positions[i], digests[i])
            ON CONFLICT (stream) DO NOTHING;
        ELSE
            UPDATE {schema}.ctx_streams
            SET revision = revisions[i], position = positions[i], digest = digests[i]
            WHERE stream = streams[i] AND revision = revisions[i] - 1;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'CX001', MESSAGE = format(
                'the head of stream %s is not at revision %s (storing record %s at revision %s '
                'and position %s)', encode(streams[i], 'hex'), revisions[i] - 1, event_ids[i],
                revisions[i], positions[i]);
        END IF;
    END LOOP;
    IF n > 0 THEN
        UPDATE {schema}.ctx_meta SET last_position = positions[n] WHERE id = 1;
    END IF;
    RETURN n;
END
$fn$;
"#,
    },
    Migration {
        version: 4,
        description: "ctx_meta.async_position and ctx_durable: commits that release the position lock before their flush, and the positions known durable",
        // A write transaction that commits asynchronously (releasing the position lock before
        // the WAL flush) sets `async_position` to its last position, and its answer waits for a
        // synchronous transaction behind it that records a position in `ctx_durable`; a reader
        // that sees an asynchronous commit beyond every durable position makes it durable first
        // (spec/scale-out.md §3.9). Every commit before this migration was synchronous.
        sql: r#"
ALTER TABLE {schema}.ctx_meta
    ADD COLUMN async_position bigint NOT NULL DEFAULT 0 CHECK (async_position >= 0);
CREATE TABLE {schema}.ctx_durable (
    slot int PRIMARY KEY CHECK (slot >= 0 AND slot < 1024),
    position bigint NOT NULL CHECK (position >= 0)
);
"#,
    },
];

/// The SQLSTATE `ctx_put_records` raises when a stream head is not at the revision before the
/// record's (migration 3).
pub(crate) const HEAD_MISMATCH: &str = "CX001";

/// Most rows one page of a scan asks for.
pub(crate) const PAGE_ROWS: i64 = 1000;
/// Most bytes of records or values one page of a scan holds, beyond its first row: a page ends
/// before the row that would take it past this many bytes.
pub(crate) const PAGE_BYTES: i64 = 8 << 20;

/// A checked schema name, and the same name quoted for SQL.
#[derive(Clone, Debug)]
pub(crate) struct SchemaName {
    pub name: String,
    pub quoted: String,
}

impl SchemaName {
    /// 1 to 63 bytes of lowercase ASCII letters, digits and `_`, starting with a letter or `_`,
    /// and not `pg_…` (reserved by PostgreSQL).
    pub(crate) fn new(name: &str) -> Result<SchemaName, PgError> {
        let mut bytes = name.bytes();
        let valid = name.len() <= 63
            && bytes
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
            && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.starts_with("pg_");
        if !valid {
            return Err(PgError::SchemaName {
                schema: name.escape_debug().to_string(),
            });
        }
        Ok(SchemaName {
            name: name.to_owned(),
            quoted: format!("\"{name}\""),
        })
    }
}

/// The statements the backend prepares, one per connection, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Q {
    LastPosition,
    Head,
    Record,
    RecordsPage,
    StreamPage,
    HeadsFirst,
    HeadsAfter,
    CheckPage,
    KvGet,
    KvScanFirst,
    KvScanAfter,
    FindEvent,
    PutRecords,
    KvRemove,
    KvClear,
    IsEmpty,
    Prefetch,
    KvFlush,
    LockPosition,
    InFlight,
    MakeDurable,
    MarkAsynchronous,
}

impl Q {
    pub(crate) const COUNT: usize = 22;

    const ALL: [Q; Q::COUNT] = [
        Q::LastPosition,
        Q::Head,
        Q::Record,
        Q::RecordsPage,
        Q::StreamPage,
        Q::HeadsFirst,
        Q::HeadsAfter,
        Q::CheckPage,
        Q::KvGet,
        Q::KvScanFirst,
        Q::KvScanAfter,
        Q::FindEvent,
        Q::PutRecords,
        Q::KvRemove,
        Q::KvClear,
        Q::IsEmpty,
        Q::Prefetch,
        Q::KvFlush,
        Q::LockPosition,
        Q::InFlight,
        Q::MakeDurable,
        Q::MarkAsynchronous,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The statement's text; `s` is the quoted schema name.
    fn text(self, s: &str) -> String {
        match self {
            Q::LastPosition => format!("SELECT last_position FROM {s}.ctx_meta WHERE id = 1"),
            // The position lock every write transaction takes first (spec/scale-out.md §3.4).
            Q::LockPosition => {
                format!("SELECT last_position FROM {s}.ctx_meta WHERE id = 1 FOR UPDATE")
            }
            Q::Head => format!(
                "SELECT revision, position, digest FROM {s}.ctx_streams WHERE stream = $1::bytea"
            ),
            Q::Record => {
                format!("SELECT record FROM {s}.ctx_records WHERE position = $1::bigint")
            }
            // $1 from position, $2 rows, $3 bytes. The running byte sum ends the page early for
            // large records; the first row always fits.
            Q::RecordsPage => format!(
                "SELECT position, record FROM (\
                   SELECT position, record, sum(octet_length(record)) OVER \
                     (ORDER BY position ROWS UNBOUNDED PRECEDING) - octet_length(record) AS before \
                   FROM {s}.ctx_records WHERE position >= $1::bigint \
                   ORDER BY position LIMIT $2::bigint) page \
                 WHERE before < $3::bigint ORDER BY position"
            ),
            // $1 stream, $2 from revision, $3 to revision, $4 rows, $5 bytes.
            Q::StreamPage => format!(
                "SELECT revision, position, record FROM (\
                   SELECT revision, position, record, sum(octet_length(record)) OVER \
                     (ORDER BY revision ROWS UNBOUNDED PRECEDING) - octet_length(record) AS before \
                   FROM {s}.ctx_records \
                   WHERE stream = $1::bytea AND revision >= $2::bigint AND revision <= $3::bigint \
                   ORDER BY revision LIMIT $4::bigint) page \
                 WHERE before < $5::bigint ORDER BY revision"
            ),
            Q::HeadsFirst => format!(
                "SELECT stream, revision, position, digest FROM {s}.ctx_streams \
                 ORDER BY stream LIMIT $1::bigint"
            ),
            Q::HeadsAfter => format!(
                "SELECT stream, revision, position, digest FROM {s}.ctx_streams \
                 WHERE stream > $1::bytea ORDER BY stream LIMIT $2::bigint"
            ),
            // $1 after position (exclusive, raw), $2 rows, $3 bytes.
            Q::CheckPage => format!(
                "SELECT position, stream, revision, event_id, record FROM (\
                   SELECT position, stream, revision, event_id, record, \
                     sum(octet_length(record)) OVER \
                     (ORDER BY position ROWS UNBOUNDED PRECEDING) - octet_length(record) AS before \
                   FROM {s}.ctx_records WHERE position > $1::bigint \
                   ORDER BY position LIMIT $2::bigint) page \
                 WHERE before < $3::bigint ORDER BY position"
            ),
            Q::KvGet => format!(
                "SELECT value FROM {s}.ctx_projection WHERE tbl = $1::text AND key = $2::bytea"
            ),
            // $1 table, $2 rows, $3 bytes.
            Q::KvScanFirst => format!(
                "SELECT key, value FROM (\
                   SELECT key, value, sum(octet_length(key) + octet_length(value)) OVER \
                     (ORDER BY key ROWS UNBOUNDED PRECEDING) \
                     - octet_length(key) - octet_length(value) AS before \
                   FROM {s}.ctx_projection WHERE tbl = $1::text \
                   ORDER BY key LIMIT $2::bigint) page \
                 WHERE before < $3::bigint ORDER BY key"
            ),
            // $1 table, $2 after key (exclusive), $3 rows, $4 bytes.
            Q::KvScanAfter => format!(
                "SELECT key, value FROM (\
                   SELECT key, value, sum(octet_length(key) + octet_length(value)) OVER \
                     (ORDER BY key ROWS UNBOUNDED PRECEDING) \
                     - octet_length(key) - octet_length(value) AS before \
                   FROM {s}.ctx_projection WHERE tbl = $1::text AND key > $2::bytea \
                   ORDER BY key LIMIT $3::bigint) page \
                 WHERE before < $4::bigint ORDER BY key"
            ),
            Q::FindEvent => {
                format!("SELECT position FROM {s}.ctx_records WHERE event_id = $1::text")
            }
            // $1 positions, $2 streams, $3 revisions, $4 event ids, $5 records, $6 digests: the
            // records of a write transaction in position order. Each record row and its head move
            // together, and `ctx_meta.last_position` moves to the last one; a head that is not at
            // revision − 1 (or a first record that is not revision 1) raises SQLSTATE CX001,
            // which aborts the transaction.
            Q::PutRecords => format!(
                "SELECT {s}.ctx_put_records($1::bigint[], $2::bytea[], $3::bigint[], $4::text[], \
                 $5::bytea[], $6::bytea[])"
            ),
            Q::KvRemove => {
                format!("DELETE FROM {s}.ctx_projection WHERE tbl = $1::text AND key = $2::bytea")
            }
            Q::KvClear => format!("DELETE FROM {s}.ctx_projection WHERE tbl = $1::text"),
            // $1/$2 the tables and keys removed, $3/$4/$5 the tables, keys and values put: a
            // write transaction's deferred projection writes in one statement. The two sets are
            // disjoint (one entry per key), so the delete and the upsert never touch one row.
            Q::KvFlush => format!(
                "WITH removed AS (\
                   DELETE FROM {s}.ctx_projection p \
                   USING unnest($1::text[], $2::bytea[]) AS r(tbl, key) \
                   WHERE p.tbl = r.tbl AND p.key = r.key) \
                 INSERT INTO {s}.ctx_projection (tbl, key, value) \
                 SELECT * FROM unnest($3::text[], $4::bytea[], $5::bytea[]) \
                 ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value"
            ),
            Q::IsEmpty => format!("SELECT NOT EXISTS (SELECT 1 FROM {s}.ctx_records)"),
            // The durability check (spec/scale-out.md §3.9): true when the last asynchronous
            // commit this statement's snapshot shows is beyond every position `ctx_durable`
            // records, so it may not be durable yet.
            Q::InFlight => format!(
                "SELECT m.async_position > (SELECT coalesce(max(d.position), 0) \
                   FROM {s}.ctx_durable d) \
                 FROM {s}.ctx_meta m WHERE m.id = 1"
            ),
            // The durability step (spec/scale-out.md §3.9), run in its own synchronous
            // transaction: when an asynchronous commit it can see is beyond every durable
            // position, it records the last position in this session's `ctx_durable` slot. A
            // transaction that writes a row commits with a WAL flush (and
            // the synchronous standby's) that covers every commit record before its own, so every
            // commit this statement can see is durable when it returns; one that writes nothing
            // ends without a flush. The slot is the server process id modulo 1,024, so concurrent
            // sessions rarely wait for each other's row across their flushes; `GREATEST` keeps a
            // slot from moving back when two sessions share it. Prepared like every statement
            // here: planned once per connection, where a simple query is planned at every call.
            Q::MakeDurable => format!(
                "INSERT INTO {s}.ctx_durable (slot, position) \
                 SELECT pg_backend_pid() % 1024, m.last_position FROM {s}.ctx_meta m \
                 WHERE m.id = 1 \
                   AND m.async_position > (SELECT coalesce(max(d.position), 0) \
                     FROM {s}.ctx_durable d) \
                 ON CONFLICT (slot) DO UPDATE SET position = GREATEST({s}.ctx_durable.position, \
                   excluded.position)"
            ),
            // Sent by a write transaction that commits asynchronously, after its record puts
            // and before `COMMIT` (spec/scale-out.md §3.9): a reader that sees this commit sees
            // its last position here, beyond every durable position until a durability step
            // covers it. Synchronous commits leave the column alone: they become visible only
            // once durable.
            Q::MarkAsynchronous => {
                format!("UPDATE {s}.ctx_meta SET async_position = last_position WHERE id = 1")
            }
            // $1 event ids, $2 streams: one row per event id (kind 0: the id and its position,
            // if stored) and one per stream (kind 1: the stream and its head, if any). Each
            // lookup is a lateral subquery (`LIMIT 1` keeps the planner from flattening it; the
            // columns are unique anyway), so every plan, the generic one too, probes the unique
            // indexes once per id and stream: a plain join planned a sequential scan of
            // `ctx_streams` (hash join) on a small table, whose cost grows with the streams.
            Q::Prefetch => format!(
                "SELECT 0, e.id, r.position, NULL::bytea, NULL::bigint, NULL::bigint, NULL::bytea \
                 FROM unnest($1::text[]) AS e(id) \
                 LEFT JOIN LATERAL (SELECT position FROM {s}.ctx_records \
                   WHERE event_id = e.id LIMIT 1) r ON true \
                 UNION ALL \
                 SELECT 1, NULL::text, NULL::bigint, t.stream, h.revision, h.position, h.digest \
                 FROM unnest($2::bytea[]) AS t(stream) \
                 LEFT JOIN LATERAL (SELECT revision, position, digest FROM {s}.ctx_streams \
                   WHERE stream = t.stream LIMIT 1) h ON true"
            ),
        }
    }
}

/// Every statement's text for one schema.
#[derive(Debug)]
pub(crate) struct Sql {
    texts: Vec<String>,
}

impl Sql {
    pub(crate) fn new(schema: &SchemaName) -> Sql {
        let s = &schema.quoted;
        Sql {
            texts: Q::ALL.iter().map(|q| q.text(s)).collect(),
        }
    }

    pub(crate) fn text(&self, q: Q) -> &str {
        self.texts.get(q.index()).map_or("", String::as_str)
    }
}
