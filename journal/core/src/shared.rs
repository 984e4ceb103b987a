//! The state one open journal shares between its handles: the backend, the installation's keys,
//! the group-commit queue, the registered hooks and the fail-stop flag. It sits below the handle
//! ([`crate::Journal`]) and the modules that act on it (commit, import, maintenance), so they
//! depend on it and not on each other.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use crate::backend::Backend;
use crate::codec::MacKey;
use crate::error::AppendError;
use crate::hook::ProjectionHook;
use crate::key::KeyedDigestKey;
use crate::lock::ProcessLock;
use crate::types::{AppendOutcome, StreamAppend};

pub(crate) type Reply = Result<Vec<AppendOutcome>, AppendError>;

/// Requests waiting for a group commit, and whether a leader is committing one now.
#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) pending: Vec<Pending>,
    pub(crate) leading: bool,
    /// Requests in the previous group: how many callers are likely to come back soon.
    pub(crate) last_group: usize,
}

pub(crate) struct Pending {
    pub(crate) batch: Vec<StreamAppend>,
    pub(crate) records: usize,
    pub(crate) slot: Arc<Mutex<Option<Reply>>>,
}

pub(crate) struct Shared {
    // Field order matters for drop: the backend closes before the process lock is released.
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) mac: MacKey,
    /// Sub-key of [`crate::Journal::keyed_digest`]; derived from the installation key at open.
    pub(crate) keyed: KeyedDigestKey,
    pub(crate) data_dir: PathBuf,
    pub(crate) pid: u32,
    pub(crate) queue: Mutex<Queue>,
    /// Signalled whenever a group commit finishes and its slots are filled.
    pub(crate) group_done: Condvar,
    /// Held around each group commit, maintenance and import: one write transaction of this
    /// handle at a time.
    pub(crate) commit: Mutex<()>,
    pub(crate) failed: AtomicBool,
    /// Set when the open found a record it could not authenticate in the unmerged tail; the
    /// journal then serves reads and verification but refuses writes.
    pub(crate) write_refusal: Option<String>,
    /// True when this open created the database file.
    pub(crate) created: bool,
    pub(crate) hooks: RwLock<Vec<Arc<dyn ProjectionHook>>>,
    /// Threads a verified replay checks records on ([`crate::OpenOptions::scan_threads`]).
    pub(crate) scan_threads: usize,
    /// The data directory's process lock, for a backend that only one process may write.
    pub(crate) _lock: Option<ProcessLock>,
}

impl Shared {
    /// False in a child forked from the process that opened the journal: a copy of the handle
    /// there must not write or read (spec/journal.md §8).
    pub(crate) fn check_process(&self) -> bool {
        self.pid == std::process::id()
    }

    /// True once a failed commit has stopped the journal; it refuses writes until reopened.
    pub(crate) fn is_fail_stopped(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}
