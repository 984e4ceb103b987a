//! ctx-journal: an append-only, hash-chained, authenticated event journal on redb.
//!
//! One redb file per data directory holds every record. Streams have contiguous revisions from 1;
//! every record also has a gap-free global position in commit order. Each record carries its
//! stream's previous digest, its own SHA-256 digest and an HMAC-SHA256 tag under the installation
//! key. Appends are idempotent by event id, atomic across streams and group-committed. The format
//! and its invariants are specified in `spec/journal.md`.
//!
//! Layers (spec/journal.md, "Code map"): the handle (`journal.rs`) uses the group commit, the
//! hooks and the backend seam (`backend.rs`), never the other way round; every redb name lives
//! under `redb/`, and the file-system rules are ctx-fs's.
#![forbid(unsafe_code)]

mod audit;
mod backend;
mod codec;
mod commit;
mod error;
mod hook;
mod import;
mod journal;
mod key;
mod limits;
mod lock;
mod maintain;
mod parallel;
mod redb;
mod shared;
mod sync;
mod types;
mod verdict;
mod verified;
mod verify;

pub use crate::redb::audit::{StorageIntegrity, check_storage_integrity};
pub use crate::redb::compact::{CompactError, Compaction, compact_storage};
pub use crate::redb::create::{DATABASE_FILE, OPEN_VERIFY_TAIL_RECORDS};
/// Interposition on the database file, for fault injection and crash images: only with the
/// `testing` feature, so redb's `StorageBackend` and `FileBackend` are not part of the default API.
#[cfg(feature = "testing")]
pub use crate::redb::interpose::{FileBackend, StorageBackend, StorageInterceptor, StorageWrapper};
pub use crate::redb::{QUICK_REPAIR_FROM_BYTES, REDB_CACHE_MAX_BYTES};
pub use crate::verdict::{
    INTEGRITY_VERDICT_FILE, INTEGRITY_VERDICT_MAX_BYTES, clear_integrity_failure,
    record_integrity_failure,
};
pub use audit::StreamInfo;
pub use backend::{
    Backend, CommitError, Finish, HeadDecodeError, IndexFinding, IndexKind, PutRecord, ReadTxn,
    WriteTxn,
};
pub use codec::{RecordView, StorePayloadsAsIs, decode_record_value};
pub use error::{
    AppendError, ConflictKind, DecodeError, OpenError, ProjectionError, ReadError, StorageError,
    VerifyError,
};
pub use hook::{HookError, HookTxn, PROJECTION_TABLE_PREFIX, ProjectionHook};
pub use import::{ImportError, ImportRecord, Importer};
pub use journal::{Journal, OpenOptions, WeakJournal};
pub use key::{KeySource, KeySourceError};
pub use limits::{
    BATCH_PAYLOAD_MAX_BYTES, BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, EVENT_ID_MAX_BYTES,
    EVENT_INDEX_MERGE_RECORDS, GROUP_RECORDS_MAX, KIND_MAX_BYTES, NAMESPACE_MAX_BYTES,
    PAYLOAD_MAX_BYTES, STREAM_CHUNK_REVISIONS, STREAM_KEY_MAX_BYTES,
};
pub use maintain::{MaintenanceTxn, ProjectionRead};
pub use parallel::{
    SCAN_PARALLEL_PAGE_BYTES, SCAN_PARALLEL_PAGE_RECORDS, SCAN_PARALLEL_PAGES, SCAN_THREADS_MAX,
};
pub use types::{
    AppendOutcome, AppendedRecord, Digest, ExpectedRevision, InputError, NewRecord, Record,
    StreamAppend, StreamHead, StreamId, Timestamp,
};
pub use verify::{FailureKind, VerifyFailure, VerifyReport};

/// File names inside a data directory.
pub mod files {
    pub use crate::key::KEY_FILE;
    pub use crate::lock::LOCK_FILE;
    pub use crate::redb::create::DATABASE_FILE;
}
