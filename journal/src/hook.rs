//! Projection hooks: code the projections crate runs inside the append's write transaction.

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

/// A hook's refusal, carried to the caller in [`crate::AppendError::Hook`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookError {
    message: String,
}

impl HookError {
    pub fn new(message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
        }
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ProjectionError> for HookError {
    fn from(e: ProjectionError) -> Self {
        HookError::new(e.to_string())
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
}
