//! Creating and opening the journal's redb file (spec/journal.md §1 and §10): a new database is
//! built under a temporary name and renamed into place, so a crash never leaves a half-created
//! `journal.redb`; an existing one has its format checked and its writer state rebuilt.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use rkyv::util::AlignedVec;

use super::tables::{META, META_EVENT_INDEX_UPTO, META_FORMAT, RECORDS, Tables};
use super::{RedbBackend, Wrapper, Writer};
use crate::codec::{FORMAT_VERSION, FORMAT_VERSION_1, MacKey, authenticate, decode_record};
use crate::error::{OpenError, StorageError};
use crate::limits::POSITION_MAX;

/// The redb file's name inside the data directory.
pub const DATABASE_FILE: &str = "journal.redb";

/// Opens the redb journal in the data directory `dir` (under its process lock), creating the
/// database first when `create` (the caller has checked that [`DATABASE_FILE`] is absent). Returns
/// the backend and, when the unmerged tail holds a record that does not authenticate, why the
/// journal must refuse writes.
pub(crate) fn open_backend(
    dir: &Path,
    create: bool,
    mac: &MacKey,
    wrapper: Option<&Wrapper>,
    merge_records: u64,
) -> Result<(Arc<RedbBackend>, Option<String>), OpenError> {
    let db_path = dir.join(DATABASE_FILE);
    if create {
        create_database(dir, &db_path, mac, wrapper)?;
    }
    let db = open_database(&db_path, wrapper)?;
    let (mut writer, write_refusal) = initialize(&db, mac, &db_path)?;
    writer.merge_records = merge_records;
    let on_disk = wrapper.is_none().then(|| db_path.clone());
    let backend = RedbBackend::new(db, writer, db_path.display().to_string(), on_disk);
    Ok((Arc::new(backend), write_refusal))
}

/// Opens (creating when absent) the redb database at `path`, through `wrapper` when there is one.
fn open_database(path: &Path, wrapper: Option<&Wrapper>) -> Result<Database, OpenError> {
    match wrapper {
        None => Ok(Database::builder()
            .set_cache_size(super::REDB_CACHE_MAX_BYTES)
            .create(path)
            .map_err(StorageError::from)?),
        #[cfg(feature = "testing")]
        Some(wrapper) => super::interpose::open_database(path, wrapper),
        #[cfg(not(feature = "testing"))]
        Some(never) => match *never {},
    }
}

/// Name of a database being created: it becomes [`DATABASE_FILE`] only once initialized.
pub(crate) const CREATING_FILE: &str = "journal.redb.creating";

/// Creates and initializes a new database under [`CREATING_FILE`], then renames it into place
/// and syncs the directory. redb writes a new file's header in steps (the magic number last) and
/// refuses a file whose header is incomplete, so a process killed while creating the database in
/// place would leave a journal that never opens again. Here a crash leaves either no
/// `journal.redb` (the next open starts over, removing the leftover) or a complete one. Runs under
/// the process lock.
fn create_database(
    dir: &Path,
    db_path: &Path,
    mac: &MacKey,
    wrapper: Option<&Wrapper>,
) -> Result<(), OpenError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| OpenError::Io { path, source }
    };
    let creating = dir.join(CREATING_FILE);
    match std::fs::remove_file(&creating) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&creating)(e)),
    }
    {
        let db = open_database(&creating, wrapper)?;
        initialize(&db, mac, &creating)?;
    }
    std::fs::File::open(&creating)
        .and_then(|f| f.sync_all())
        .map_err(io(&creating))?;
    std::fs::rename(&creating, db_path).map_err(io(db_path))?;
    ctx_fs::fsync_dir(dir).map_err(|e| OpenError::fs_named(dir, e))
}

/// How many of the last records every open authenticates besides the unmerged tail
/// (spec/journal.md §10): about 1 ms per 256 records of a few kilobytes.
pub const OPEN_VERIFY_TAIL_RECORDS: u64 = 256;

/// Creates the tables of a new journal or checks the format of an existing one, and rebuilds the
/// writer's in-memory state: the next position and the unmerged event ids.
fn initialize(
    db: &Database,
    mac: &MacKey,
    path: &Path,
) -> Result<(Writer, Option<String>), OpenError> {
    let corrupt = |reason: &str| OpenError::Corrupt {
        path: path.into(),
        reason: reason.to_owned(),
    };
    // Only a brand-new database needs a write transaction (and its fsync); reopening an existing
    // journal, which short-lived hook processes do on every call, only reads.
    let exists = match db
        .begin_read()
        .map_err(StorageError::from)?
        .open_table(META)
    {
        Ok(_) => true,
        Err(redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(StorageError::from(e).into()),
    };
    if !exists {
        let txn = db.begin_write().map_err(StorageError::from)?;
        {
            let mut tables = Tables::open(&txn)?;
            if !tables.records.is_empty().map_err(StorageError::from)? {
                return Err(corrupt("records exist but the format version is missing"));
            }
            tables
                .meta
                .insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                .map_err(StorageError::from)?;
            tables
                .meta
                .insert(META_EVENT_INDEX_UPTO, 1u64.to_le_bytes().as_slice())
                .map_err(StorageError::from)?;
        }
        txn.commit().map_err(StorageError::from)?;
    }
    let format = |meta: &redb::ReadOnlyTable<&str, &[u8]>| -> Result<u32, OpenError> {
        meta.get(META_FORMAT)
            .map_err(StorageError::from)?
            .map(|g| <[u8; 4]>::try_from(g.value()).map(u32::from_le_bytes))
            .ok_or_else(|| corrupt("the format version is missing"))?
            .map_err(|_| corrupt("the format version is not 4 bytes"))
    };
    let found = format(
        &db.begin_read()
            .map_err(StorageError::from)?
            .open_table(META)
            .map_err(StorageError::from)?,
    )?;
    if found == FORMAT_VERSION_1 {
        // Every version-1 value still reads (spec/journal.md §11); the meta says 2 from now on so
        // that a build that reads only version-1 values refuses this journal at open instead of
        // reporting the version-2 values this build appends as corrupt. Once per journal.
        let txn = db.begin_write().map_err(StorageError::from)?;
        {
            let mut tables = Tables::open(&txn)?;
            tables
                .meta
                .insert(META_FORMAT, FORMAT_VERSION.to_le_bytes().as_slice())
                .map_err(StorageError::from)?;
        }
        txn.commit().map_err(StorageError::from)?;
    }
    let read = db.begin_read().map_err(StorageError::from)?;
    let meta = read.open_table(META).map_err(StorageError::from)?;
    let found = format(&meta)?;
    if found != FORMAT_VERSION {
        return Err(OpenError::FormatVersion {
            path: path.into(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    let event_index_upto = meta
        .get(META_EVENT_INDEX_UPTO)
        .map_err(StorageError::from)?
        .and_then(|g| <[u8; 8]>::try_from(g.value()).ok())
        .map(u64::from_le_bytes)
        .ok_or_else(|| corrupt("the event index checkpoint is missing"))?;
    let records = read.open_table(RECORDS).map_err(StorageError::from)?;
    let last_position = records
        .last()
        .map_err(StorageError::from)?
        .map_or(0, |(k, _)| k.value());
    // Positions and revisions stay below 2^63 (J11), so the writer's increments cannot overflow.
    if last_position >= POSITION_MAX {
        return Err(OpenError::Corrupt {
            path: path.into(),
            reason: format!("the last position {last_position} is out of range"),
        });
    }
    let next_position = last_position + 1;
    if event_index_upto == 0 || event_index_upto > next_position {
        return Err(OpenError::Corrupt {
            path: path.into(),
            reason: format!(
                "the event index checkpoint {event_index_upto} is past the last record {}",
                next_position - 1
            ),
        });
    }
    let mut recent = HashMap::new();
    let mut scratch = AlignedVec::<16>::new();
    let mut refusal = None;
    // The unmerged tail, and at least the last `OPEN_VERIFY_TAIL_RECORDS` records whatever the
    // checkpoint: the records the next appends build on are checked before anything is appended.
    let verify_from = event_index_upto.min(
        next_position
            .saturating_sub(OPEN_VERIFY_TAIL_RECORDS)
            .max(1),
    );
    for entry in records.range(verify_from..).map_err(StorageError::from)? {
        let (key, value) = entry.map_err(StorageError::from)?;
        let position = key.value();
        // A record that does not authenticate could hide an event id, and appending past it
        // could then duplicate an event; reads and the verification pass stay available.
        match decode_record(value.value(), &mut scratch) {
            Ok(view) if view.position == position && authenticate(&view, mac).is_ok() => {
                if position >= event_index_upto {
                    recent.insert(Box::from(view.event_id), position);
                }
            }
            Ok(view) => {
                refusal.get_or_insert_with(|| {
                    format!(
                        "authentication failed for stream {} revision {} (position {position})",
                        view.stream, view.revision
                    )
                });
            }
            Err(reason) => {
                refusal.get_or_insert_with(|| format!("record at position {position}: {reason}"));
            }
        }
    }
    Ok((
        Writer {
            next_position,
            event_index_upto,
            recent,
            quick_repair: false,
            commits_since_size_check: 0,
            deferred: false,
            pending: false,
            merge_records: crate::limits::EVENT_INDEX_MERGE_RECORDS,
        },
        refusal,
    ))
}
