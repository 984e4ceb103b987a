//! This crate's tests only: direct access to the redb file behind a journal, for tests that forge
//! what a corrupt or colliding file would hold. Callers hold the journal's commit lock, so no
//! group commit runs meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase};

use super::tables::{EVENT_IDS, RECORDS};
use super::{RedbBackend, Writer};
use crate::backend::Backend;

/// What holds a backend: the journal handle. The helpers below take it through this trait, so
/// that `redb/` does not name the handle (the handle uses the backend, never the other way round).
pub(crate) trait HasBackend {
    fn backend(&self) -> &dyn Backend;
}

impl RedbBackend {
    /// The redb backend behind `journal`, for this crate's tests that reach into its file.
    pub(crate) fn of(journal: &impl HasBackend) -> &RedbBackend {
        match journal.backend().as_any().downcast_ref::<RedbBackend>() {
            Some(backend) => backend,
            None => panic!("the journal's backend is not redb"),
        }
    }
}

/// The stored value of the record at `position`.
pub(crate) fn record_value(journal: &impl HasBackend, position: u64) -> Vec<u8> {
    let txn = RedbBackend::of(journal).db.begin_read().unwrap();
    let records = txn.open_table(RECORDS).unwrap();
    records.get(position).unwrap().unwrap().value().to_vec()
}

/// Stores `value` as the record at `position`, bypassing every check.
pub(crate) fn put_record_value(journal: &impl HasBackend, position: u64, value: &[u8]) {
    let txn = RedbBackend::of(journal).db.begin_write().unwrap();
    txn.open_table(RECORDS)
        .unwrap()
        .insert(position, value)
        .unwrap();
    txn.commit().unwrap();
}

/// Adds the entry `(key, position)` to the merged part of the event-id index.
pub(crate) fn insert_event_index(journal: &impl HasBackend, key: u64, position: u64) {
    let txn = RedbBackend::of(journal).db.begin_write().unwrap();
    txn.open_table(EVENT_IDS)
        .unwrap()
        .insert((key, position), ())
        .unwrap();
    txn.commit().unwrap();
}

/// An empty redb backend on a new file at `path` (no tables yet), for a handle built by hand.
pub(crate) fn scratch_backend(path: &Path) -> Arc<dyn Backend> {
    let db = Database::builder().create(path).unwrap();
    Arc::new(RedbBackend::new(
        db,
        Writer {
            next_position: 1,
            event_index_upto: 1,
            recent: HashMap::new(),
            quick_repair: false,
            commits_since_size_check: 0,
            deferred: false,
            pending: false,
            merge_records: crate::limits::EVENT_INDEX_MERGE_RECORDS,
        },
        path.display().to_string(),
        Some(path.to_path_buf()),
    ))
}
