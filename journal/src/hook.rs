//! Projection hooks: code the projections crate runs inside the append's write transaction.

use std::ops::ControlFlow;
use std::sync::Arc;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::codec::RecordView;
use crate::error::{ProjectionError, StorageError};

/// Prefix every projection table name must carry, so a hook cannot touch the journal's tables.
pub const PROJECTION_TABLE_PREFIX: &str = "proj.";
const PROJECTION_TABLE_NAME_MAX_BYTES: usize = 64;

/// A projection maintained inside the journal's write transaction. `apply` sees each new record
/// once, in position order; replayed (idempotent) appends are not shown again. An `Err` aborts the
/// caller's whole append; other callers in the same group commit are unaffected.
pub trait ProjectionHook: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError>;
}

/// A hook's refusal, carried to the caller in [`crate::AppendError::Hook`] (appends) or
/// [`ProjectionError::Hook`] (maintenance). The optional code is a stable, machine-readable name
/// for the refusal, so callers can branch on it without parsing the message.
#[derive(Debug, Clone)]
pub struct HookError {
    message: String,
    code: Option<&'static str>,
    /// The typed journal error this refusal was made from, so that [`crate::Journal::maintain`]
    /// can hand it back typed instead of as a message. Shared because `HookError` is `Clone`.
    cause: Option<Arc<ProjectionError>>,
}

impl HookError {
    pub fn new(message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
            code: None,
            cause: None,
        }
    }

    /// A refusal with a machine-readable code, carried through to [`crate::AppendError::Hook`].
    pub fn with_code(code: &'static str, message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
            code: Some(code),
            cause: None,
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn code(&self) -> Option<&'static str> {
        self.code
    }

    /// The journal error behind this refusal: the typed one when this is its only copy, else one
    /// rebuilt from the message and code.
    pub(crate) fn into_projection_error(self) -> ProjectionError {
        match self.cause.map(Arc::try_unwrap) {
            Some(Ok(e)) => e,
            _ => ProjectionError::Hook {
                message: self.message,
                code: self.code,
            },
        }
    }
}

/// Two refusals are equal when they say the same thing; the typed cause is a transport detail.
impl PartialEq for HookError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message && self.code == other.code
    }
}

impl Eq for HookError {}

impl std::fmt::Display for HookError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HookError {}

impl From<ProjectionError> for HookError {
    fn from(e: ProjectionError) -> Self {
        HookError {
            message: e.to_string(),
            code: e.code(),
            cause: Some(Arc::new(e)),
        }
    }
}

/// The part of the write transaction a hook may use: byte tables whose names start with
/// [`PROJECTION_TABLE_PREFIX`].
pub struct HookTxn<'t> {
    pub(crate) txn: &'t WriteTransaction,
}

impl std::fmt::Debug for HookTxn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookTxn")
    }
}

pub(crate) fn table_def(
    name: &'static str,
) -> Result<TableDefinition<'static, &'static [u8], &'static [u8]>, ProjectionError> {
    if !name.starts_with(PROJECTION_TABLE_PREFIX) || name.len() > PROJECTION_TABLE_NAME_MAX_BYTES {
        return Err(ProjectionError::TableName {
            name: name.escape_debug().to_string(),
        });
    }
    Ok(TableDefinition::new(name))
}

impl HookTxn<'_> {
    pub fn insert(
        &self,
        table: &'static str,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), ProjectionError> {
        let mut t = self
            .txn
            .open_table(table_def(table)?)
            .map_err(StorageError::from)?;
        t.insert(key, value).map_err(StorageError::from)?;
        Ok(())
    }

    pub fn remove(&self, table: &'static str, key: &[u8]) -> Result<bool, ProjectionError> {
        let mut t = self
            .txn
            .open_table(table_def(table)?)
            .map_err(StorageError::from)?;
        Ok(t.remove(key).map_err(StorageError::from)?.is_some())
    }

    /// Calls `f` with the value stored under `key`, if any. The bytes have alignment 1.
    pub fn get<R>(
        &self,
        table: &'static str,
        key: &[u8],
        f: impl FnOnce(Option<&[u8]>) -> R,
    ) -> Result<R, ProjectionError> {
        let t = self
            .txn
            .open_table(table_def(table)?)
            .map_err(StorageError::from)?;
        let guard = t.get(key).map_err(StorageError::from)?;
        Ok(f(guard.as_ref().map(|g| g.value())))
    }

    /// Calls `f` with every entry of `table` in key order until it returns `Break`. The bytes have
    /// alignment 1. A table that does not exist yet is created (empty), as `insert` would.
    pub fn scan(
        &self,
        table: &'static str,
        mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError> {
        let t = self
            .txn
            .open_table(table_def(table)?)
            .map_err(StorageError::from)?;
        for entry in t.iter().map_err(StorageError::from)? {
            let (key, value) = entry.map_err(StorageError::from)?;
            if f(key.value(), value.value()).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// Deletes every entry of `table`. The redb table itself is deleted, which frees its pages in
    /// one step instead of removing entries one by one; the next use recreates it empty.
    pub fn clear(&self, table: &'static str) -> Result<(), ProjectionError> {
        self.txn
            .delete_table(table_def(table)?)
            .map_err(StorageError::from)?;
        Ok(())
    }
}
