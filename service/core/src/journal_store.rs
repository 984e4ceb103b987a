//! Where a journal directory's records live (spec/scale-out.md §5): the embedded redb file by
//! default, or a PostgreSQL database named by a connection string, with the installation key
//! still in the directory.
//!
//! A process routes a journal directory to a backend once (`ctx --journal URL`, or
//! `$CTX_JOURNAL_URL`, or [`route_journal`] for a host that links the service), and every open of
//! that directory in the process then reaches the same backend. Opens of one routed directory
//! share one journal while a handle of it is alive, as redb opens of one directory do, so
//! projection hooks registered by one component see the appends of every other.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use ctx_journal::{Journal, OpenError, OpenOptions, WeakJournal};
use ctx_journal_pg::PgBackend;

/// The environment variable naming the journal backend of every `ctx` command.
pub const JOURNAL_URL_ENV: &str = "CTX_JOURNAL_URL";

/// Where a journal's records live.
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum JournalSource {
    /// `journal.redb` in the journal directory.
    #[default]
    Embedded,
    /// A PostgreSQL database: a `postgres://` / `postgresql://` URL or a libpq key-value string
    /// (`host=… dbname=…`), with the journal's tables in PostgreSQL schema `schema` (`public`
    /// when `None`), so that several journals can share one database.
    Postgres { url: String, schema: Option<String> },
}

impl std::fmt::Debug for JournalSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL: it may hold a password.
        match self {
            JournalSource::Embedded => f.write_str("Embedded"),
            JournalSource::Postgres { .. } => f.write_str("Postgres { .. }"),
        }
    }
}

/// A journal source that is neither `redb` nor a PostgreSQL connection string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "journal source {shown:?} is neither `redb` nor a PostgreSQL connection string \
     (postgres://…, postgresql://… or host=… dbname=…)"
)]
pub struct JournalSourceError {
    shown: String,
}

impl JournalSource {
    /// Parses `redb` / `embedded` or a PostgreSQL connection string.
    pub fn parse(value: &str) -> Result<JournalSource, JournalSourceError> {
        let value = value.trim();
        if value == "redb" || value == "embedded" {
            return Ok(JournalSource::Embedded);
        }
        let url_like = value.starts_with("postgres://") || value.starts_with("postgresql://");
        let key_value = value.contains('=') && !value.contains("://");
        if (url_like || key_value) && value.parse::<postgres::Config>().is_ok() {
            return Ok(JournalSource::Postgres {
                url: value.to_owned(),
                schema: None,
            });
        }
        Err(JournalSourceError {
            shown: shown_without_secrets(value),
        })
    }
}

/// What a refused source may show: a URL's scheme only, a short plain word, or its length. A
/// connection string can hold a password anywhere after the scheme (`user:password@`,
/// `password=`), so nothing of that part is ever repeated.
fn shown_without_secrets(value: &str) -> String {
    if let Some((scheme, _)) = value.split_once("://") {
        return format!("{scheme}://…");
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    if value.len() <= 24 && value.chars().all(plain) {
        return value.to_owned();
    }
    format!("<{} characters>", value.chars().count())
}

#[derive(Default)]
struct Routes {
    sources: HashMap<PathBuf, JournalSource>,
    /// Open handles of routed directories; weak, so a journal nobody uses closes its
    /// connections.
    open: HashMap<PathBuf, WeakJournal>,
}

static ROUTES: LazyLock<Mutex<Routes>> = LazyLock::new(|| Mutex::new(Routes::default()));

fn routes() -> std::sync::MutexGuard<'static, Routes> {
    ROUTES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Routes the journal directory `dir` of this process to `source`. A later route of the same
/// directory replaces it for later opens; handles already open keep their backend.
pub fn route_journal(dir: &Path, source: JournalSource) {
    let mut routes = routes();
    routes.open.remove(dir);
    match source {
        JournalSource::Embedded => routes.sources.remove(dir),
        source => routes.sources.insert(dir.to_path_buf(), source),
    };
}

/// The source `dir` is routed to in this process.
pub fn journal_source(dir: &Path) -> JournalSource {
    routes().sources.get(dir).cloned().unwrap_or_default()
}

/// Unmerged event ids at which ctx's own journal handles merge them into the event-id index
/// (spec/journal.md §4): ctx opens the journal once per command or hook, and every open
/// authenticates the unmerged tail, about 2 µs per record (6 µs for a hook's engine records),
/// so with the journal's default of 32,768 a hook after some two thousand prompts spent 60 ms
/// and more opening. At 1,024 an open reads at most 1,280 records and a merge writes 1,024
/// index entries once every hundred or so prompts.
pub const SERVICE_EVENT_INDEX_MERGE_RECORDS: u64 = 1_024;

/// Opens the journal of directory `dir` on the backend it is routed to.
pub fn open_journal(dir: &Path, options: &OpenOptions) -> Result<Journal, OpenError> {
    let mut routes = routes();
    let Some(JournalSource::Postgres { url, schema }) = routes.sources.get(dir).cloned() else {
        drop(routes);
        let options = options
            .clone()
            .event_index_merge_records(SERVICE_EVENT_INDEX_MERGE_RECORDS);
        return Journal::open(dir, &options);
    };
    if let Some(journal) = routes.open.get(dir).and_then(WeakJournal::upgrade) {
        return Ok(journal);
    }
    routes.open.retain(|_, weak| weak.upgrade().is_some());
    let backend = match &schema {
        Some(schema) => PgBackend::connect_in_schema(&url, schema),
        None => PgBackend::connect(&url),
    }
    .map_err(|e| OpenError::Backend {
        location: "PostgreSQL".to_owned(),
        reason: e.to_string(),
    })?;
    let journal = Journal::open_with_backend(dir, options, Arc::new(backend))?;
    routes.open.insert(dir.to_path_buf(), journal.downgrade());
    Ok(journal)
}

/// True when `dir` holds a journal: its redb file, or a route to another backend (whose
/// emptiness the open itself reports).
pub fn journal_exists(dir: &Path) -> bool {
    match journal_source(dir) {
        JournalSource::Embedded => dir.join(ctx_journal::files::DATABASE_FILE).is_file(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn sources_parse_and_a_bad_one_is_named_without_its_tail() {
        assert_eq!(JournalSource::parse("redb"), Ok(JournalSource::Embedded));
        assert!(matches!(
            JournalSource::parse("postgres://u:p@127.0.0.1:5432/ctx"),
            Ok(JournalSource::Postgres { .. })
        ));
        assert!(matches!(
            JournalSource::parse("host=127.0.0.1 port=5432 dbname=ctx user=ctx"),
            Ok(JournalSource::Postgres { .. })
        ));
        for (value, shown) in [
            ("mysql://root:pw@db/ctx", "\"mysql://…\""),
            ("mysql://ctx:hunter2@db.example/ctx", "\"mysql://…\""),
            ("sqlite", "\"sqlite\""),
            ("password=hunter2 bogus", "\"<22 characters>\""),
            ("root:hunter2@db", "\"<15 characters>\""),
        ] {
            let err = JournalSource::parse(value).unwrap_err().to_string();
            assert!(err.contains(shown), "{value}: {err}");
            assert!(!err.contains("pw@") && !err.contains("hunter2"), "{err}");
        }
        assert!(JournalSource::parse("").is_err());
        assert_eq!(
            format!("{:?}", JournalSource::parse("postgres://u:pw@h/d").unwrap()),
            "Postgres { .. }"
        );
    }

    #[test]
    fn an_unrouted_directory_is_embedded() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(journal_source(dir.path()), JournalSource::Embedded);
        assert!(!journal_exists(dir.path()));
        let journal = open_journal(dir.path(), &OpenOptions::new()).unwrap();
        assert!(journal.location().ends_with("journal.redb"));
        assert!(journal_exists(dir.path()));
    }
}
