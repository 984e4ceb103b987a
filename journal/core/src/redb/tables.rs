//! The journal's redb tables (spec/journal.md §4) and the set of them a write transaction opens.

use redb::{Table, TableDefinition, WriteTransaction};

use crate::error::StorageError;

pub(crate) const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");
pub(crate) const STREAMS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("journal.streams");
pub(crate) const CHUNKS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("journal.stream_chunks");
pub(crate) const EVENT_IDS: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("journal.event_ids");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("journal.meta");

pub(crate) const META_FORMAT: &str = "format_version";
pub(crate) const META_EVENT_INDEX_UPTO: &str = "event_index_upto";

pub(crate) struct Tables<'t> {
    pub(crate) records: Table<'t, u64, &'static [u8]>,
    pub(crate) streams: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) chunks: Table<'t, &'static [u8], &'static [u8]>,
    pub(crate) event_ids: Table<'t, (u64, u64), ()>,
    pub(crate) meta: Table<'t, &'static str, &'static [u8]>,
}

impl<'t> Tables<'t> {
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Tables<'t>, StorageError> {
        Ok(Tables {
            records: txn.open_table(RECORDS)?,
            streams: txn.open_table(STREAMS)?,
            chunks: txn.open_table(CHUNKS)?,
            event_ids: txn.open_table(EVENT_IDS)?,
            meta: txn.open_table(META)?,
        })
    }
}
