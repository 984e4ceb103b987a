//! The projections framework: projections as deterministic folds of the journal, kept current by
//! journal hooks, checkpointed in `proj.meta`, rebuilt or caught up when attached, and checked
//! against a fresh fold by digest (spec/projections.md, "Framework").

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use ctx_journal::{
    HookError, HookTxn, Journal, MaintenanceTxn, PROJECTION_TABLE_PREFIX, ProjectionError,
    ProjectionHook, ProjectionRead, RecordView,
};
use sha2::{Digest as _, Sha256};

/// The framework's own table: projection name → [`ProjectionMeta`].
pub const META_TABLE: &str = "proj.meta";
/// First bytes of every meta value.
pub const META_MAGIC: [u8; 4] = *b"CTXP";
/// The layout version of meta values (not a projection's version).
pub const META_FORMAT: u32 = 1;
/// Length of a meta value: magic, meta format u32, projection version u32, checkpoint u64.
pub const META_BYTES: usize = 20;
/// Domain prefix of [`Projections::digest`].
pub const DIGEST_DOMAIN: &[u8] = b"ctx-projection-digest-v1\0";
/// Written after the last entry of each table in a digest; no key length can equal it, since
/// redb keys are shorter than 4 GiB.
const DIGEST_TABLE_END: u32 = 0xFFFF_FFFF;
const PROJECTION_NAME_MAX_BYTES: usize = 64;
/// The journal's limit on projection table names.
const TABLE_NAME_MAX_BYTES: usize = 64;

/// A projection: a deterministic fold of the journal's records, in position order, into the
/// `proj.*` tables it owns exclusively.
///
/// `apply` must depend only on the record and on the projection's own tables, so that replaying
/// the journal from position 1 into empty tables reproduces what the hooks built incrementally.
/// Change [`Projection::version`] whenever `apply` or the table layout changes: a projection
/// whose stored version differs is rebuilt when attached.
pub trait Projection: Send + Sync + 'static {
    /// Stable name: the key of its meta entry and of its journal hook. 1 to 64 printable ASCII
    /// bytes, unique among the attached projections.
    fn name(&self) -> &'static str;
    fn version(&self) -> u32;
    /// The tables this projection owns; each starts with `proj.`, none is [`META_TABLE`], and no
    /// other projection lists it. The order is the order of [`Projections::digest`].
    fn tables(&self) -> &'static [&'static str];
    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError>;
}

/// A projection's meta entry: the version that built its tables and the position of the last
/// record applied to them (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProjectionMeta {
    pub version: u32,
    pub checkpoint: u64,
}

impl ProjectionMeta {
    /// The fixed-width layout of spec/projections.md, "Meta table layout".
    pub fn encode(&self) -> [u8; META_BYTES] {
        let mut out = [0u8; META_BYTES];
        out[0..4].copy_from_slice(&META_MAGIC);
        out[4..8].copy_from_slice(&META_FORMAT.to_le_bytes());
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..20].copy_from_slice(&self.checkpoint.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<ProjectionMeta, MetaError> {
        let bytes: &[u8; META_BYTES] = bytes
            .try_into()
            .map_err(|_| MetaError::Length { len: bytes.len() })?;
        let [m0, m1, m2, m3, f0, f1, f2, f3, v0, v1, v2, v3, c @ ..] = *bytes;
        let magic = [m0, m1, m2, m3];
        if magic != META_MAGIC {
            return Err(MetaError::Magic { found: magic });
        }
        let format = u32::from_le_bytes([f0, f1, f2, f3]);
        if format != META_FORMAT {
            return Err(MetaError::Format { found: format });
        }
        Ok(ProjectionMeta {
            version: u32::from_le_bytes([v0, v1, v2, v3]),
            checkpoint: u64::from_le_bytes(c),
        })
    }
}

/// Why a stored meta value does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    #[error("the projection meta value is {len} bytes long; it must be exactly 20 bytes")]
    Length { len: usize },
    #[error("the projection meta value starts with {found:02x?}, not with the magic \"CTXP\"")]
    Magic { found: [u8; 4] },
    #[error("the projection meta value has meta format {found}; this build reads format 1")]
    Format { found: u32 },
}

/// Why the framework refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameworkError {
    #[error("no projection named \"{name}\" is attached")]
    UnknownProjection { name: String },
    #[error("projection name \"{name}\" is not 1 to 64 printable ASCII bytes")]
    InvalidName { name: String },
    #[error("projection name \"{name}\" is given twice")]
    DuplicateName { name: String },
    #[error("table \"{table}\" of projection {projection} is refused: {reason}")]
    InvalidTable {
        projection: String,
        table: String,
        reason: &'static str,
    },
    #[error("table \"{table}\" is claimed by both projection {first} and projection {second}")]
    SharedTable {
        table: String,
        first: String,
        second: String,
    },
    #[error("the meta entry of projection {name} is invalid: {error}")]
    Meta { name: String, error: MetaError },
    #[error(
        "projection {name} claims records up to position {checkpoint}, but the journal ends at position {head}"
    )]
    AheadOfJournal {
        name: String,
        checkpoint: u64,
        head: u64,
    },
    #[error(
        "table \"{table}\" holds a {len}-byte key or value, too long for the projection digest"
    )]
    EntryTooLarge { table: String, len: usize },
    #[error(transparent)]
    Journal(#[from] ProjectionError),
}

/// What [`Projections::attach`] did for one projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachReport {
    /// The stored tables were built by this version up to the journal head; nothing was replayed.
    Fresh,
    /// The tables were cleared and the whole journal replayed into them.
    Rebuilt { records: u64, cause: RebuildCause },
    /// The records after the stored checkpoint were replayed.
    CaughtUp { records: u64 },
}

/// Why [`Projections::attach`] rebuilt a projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildCause {
    /// No meta entry: the projection was never attached to this journal.
    Missing,
    /// The stored tables were built by another version of the projection.
    VersionChanged { from: u32 },
    /// The meta entry did not decode; the tables cannot be trusted.
    InvalidMeta { error: MetaError },
}

/// The result of [`Projections::rebuild`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebuildReport {
    /// Records replayed (every record of the journal).
    pub records: u64,
    /// The checkpoint written: the journal head.
    pub checkpoint: u64,
}

/// The result of [`Projections::check`]: the digest of the stored (incrementally maintained)
/// tables and of the tables a full replay builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckReport {
    pub incremental: [u8; 32],
    pub rebuilt: [u8; 32],
    /// Records replayed for the rebuilt digest.
    pub records: u64,
}

impl CheckReport {
    /// True when the incremental tables equal a fresh fold of the journal.
    pub fn is_equal(&self) -> bool {
        self.incremental == self.rebuilt
    }
}

/// Runs a projection as a journal hook: apply, then advance its checkpoint, both inside the
/// append's transaction, so tables and checkpoint never disagree (P3).
struct Adapter(Arc<dyn Projection>);

impl ProjectionHook for Adapter {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
        // On a journal shared by several processes (spec/scale-out.md §5) a process that has not
        // attached this projection appends without it. Those records are folded first, inside
        // this transaction, so the checkpoint never moves over a record the tables did not see
        // (P3, P4a). A checkpoint at or past this record cannot come from any writer.
        let stored = tx.get(META_TABLE, self.0.name().as_bytes(), |v| {
            v.map(ProjectionMeta::decode)
        })?;
        if let Some(Ok(meta)) = stored
            && meta.checkpoint + 1 != record.position
        {
            if meta.checkpoint >= record.position {
                return Err(HookError::with_code(
                    "projection-ahead",
                    format!(
                        "projection {} claims records up to position {}, past the record at \
                         position {} being appended",
                        self.0.name(),
                        meta.checkpoint,
                        record.position
                    ),
                ));
            }
            tx.replay(meta.checkpoint + 1, record.position, |tx, missed| {
                self.0.apply(tx, missed)
            })?;
        }
        self.0.apply(tx, record)?;
        write_meta(tx, self.0.as_ref(), record.position)?;
        Ok(())
    }
}

fn write_meta(
    tx: &HookTxn<'_>,
    projection: &dyn Projection,
    checkpoint: u64,
) -> Result<(), ProjectionError> {
    let meta = ProjectionMeta {
        version: projection.version(),
        checkpoint,
    };
    tx.insert(
        META_TABLE,
        projection.name().as_bytes(),
        meta.encode().as_slice(),
    )
}

/// The attached projections of one journal.
pub struct Projections {
    journal: Arc<Journal>,
    list: Vec<Arc<dyn Projection>>,
    attached: Vec<(&'static str, AttachReport)>,
}

impl std::fmt::Debug for Projections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projections")
            .field("journal", &self.journal)
            .field("attached", &self.attached)
            .finish()
    }
}

impl Projections {
    /// Attaches `list` to the journal in one maintenance transaction (so no append can interleave):
    /// for each projection, a missing meta entry, another version or an undecodable meta entry
    /// clears its tables and replays the whole journal; a checkpoint behind the head replays the
    /// records after it; a checkpoint ahead of the head is an error. Then the projections' hooks
    /// are registered, still inside that transaction, so each sees exactly the records after the
    /// head it was brought to. A hook whose name is already registered on this journal (attached
    /// earlier in this process) is kept and not replaced.
    pub fn attach(
        journal: &Arc<Journal>,
        list: Vec<Arc<dyn Projection>>,
    ) -> Result<Projections, FrameworkError> {
        validate(&list)?;
        let attached = maintain(journal, |m| {
            let mut reports = Vec::with_capacity(list.len());
            for p in &list {
                let report = bring_up_to_date(m, p.as_ref())?;
                reports.push((p.name(), report));
            }
            // Registered under the writer lock: an append waiting for it will run these hooks.
            for p in &list {
                journal.register_hook(Arc::new(Adapter(p.clone())));
            }
            // Nothing to write when every projection is already at the head: aborting the
            // transaction spares the fsync a commit would cost on every open.
            let changed = reports
                .iter()
                .any(|(_, r)| !matches!(r, AttachReport::Fresh));
            Ok((reports, changed))
        })?;
        Ok(Projections {
            journal: journal.clone(),
            list,
            attached,
        })
    }

    /// What [`Projections::attach`] did, per projection, in the order given.
    pub fn attached(&self) -> &[(&'static str, AttachReport)] {
        &self.attached
    }

    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The stored meta entry of a projection (`None` when it has none).
    pub fn meta(&self, name: &str) -> Result<Option<ProjectionMeta>, FrameworkError> {
        let p = self.find(name)?;
        let stored = self.journal.projection_read(|r| {
            r.get(META_TABLE, p.name().as_bytes(), |v| {
                v.map(ProjectionMeta::decode).transpose()
            })
        })??;
        stored.map_err(|error| FrameworkError::Meta {
            name: p.name().to_owned(),
            error,
        })
    }

    /// Clears the projection's tables and meta entry, replays the whole journal into them and
    /// commits, in one maintenance transaction.
    pub fn rebuild(&self, name: &str) -> Result<RebuildReport, FrameworkError> {
        let p = self.find(name)?;
        maintain(&self.journal, |m| {
            let records = rebuild_in(m, p.as_ref())?;
            Ok((
                RebuildReport {
                    records,
                    checkpoint: m.head_position(),
                },
                true,
            ))
        })
    }

    /// The digest of the projection's stored tables, read in one snapshot (spec/projections.md,
    /// "Digest").
    pub fn digest(&self, name: &str) -> Result<[u8; 32], FrameworkError> {
        let p = self.find(name)?;
        self.journal
            .projection_read(|r| digest_tables(p.tables(), |table, f| r.scan(table, f)))?
    }

    /// Compares the stored tables with a fresh fold: inside one maintenance transaction, digests
    /// the stored tables, clears them, replays the whole journal, digests the result, and aborts,
    /// so nothing changes.
    pub fn check(&self, name: &str) -> Result<CheckReport, FrameworkError> {
        let p = self.find(name)?;
        maintain(&self.journal, |m| {
            let incremental = digest_tables(p.tables(), |table, f| m.scan(table, f))?;
            let records = rebuild_in(m, p.as_ref())?;
            let rebuilt = digest_tables(p.tables(), |table, f| m.scan(table, f))?;
            Ok((
                CheckReport {
                    incremental,
                    rebuilt,
                    records,
                },
                false,
            ))
        })
    }

    fn find(&self, name: &str) -> Result<&Arc<dyn Projection>, FrameworkError> {
        self.list.iter().find(|p| p.name() == name).ok_or_else(|| {
            FrameworkError::UnknownProjection {
                name: name.escape_debug().to_string(),
            }
        })
    }
}

/// What [`Projections::check_detached`] found for one projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedCheck {
    pub name: &'static str,
    /// This build's version of the projection.
    pub version: u32,
    /// The stored meta entry: `None` when the projection was never attached to this journal.
    pub meta: Option<Result<ProjectionMeta, MetaError>>,
    /// The last position folded into the fresh tables: the stored checkpoint when the meta entry
    /// names this version (0 without a meta entry), else the journal head.
    pub upto: u64,
    /// The journal head.
    pub head: u64,
    /// The digest of the stored tables.
    pub stored: [u8; 32],
    /// The digest of the fresh fold of records 1..=`upto`.
    pub rebuilt: [u8; 32],
    /// Records folded into the fresh tables.
    pub records: u64,
    /// Each table whose stored entries differ from the fresh fold, in [`Projection::tables`]
    /// order.
    pub differences: Vec<TableDifference>,
}

/// Where one table's stored entries differ from a fresh fold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableDifference {
    pub table: &'static str,
    /// The smallest key whose entry differs: stored but not rebuilt, rebuilt but not stored, or
    /// stored with another value.
    pub first_key: Vec<u8>,
    /// How many keys differ.
    pub keys: u64,
}

/// How a projection's stored tables compare with the journal, per [`DetachedCheck::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetachedStatus {
    /// The stored tables equal the fold of records 1..=checkpoint (P3); a checkpoint behind the
    /// head is caught up at the next attach.
    Equal,
    /// The stored tables differ from that fold: changed behind the framework, or folded by a
    /// non-deterministic `apply` (P7).
    Differs,
    /// The tables were built by another version; the next attach rebuilds them. Not compared.
    OtherVersion { stored: u32 },
    /// The meta entry does not decode; the next attach rebuilds the tables.
    InvalidMeta,
    /// The checkpoint is past the journal head: the journal lost records (P5).
    AheadOfJournal { checkpoint: u64 },
}

impl DetachedCheck {
    pub fn is_equal(&self) -> bool {
        self.stored == self.rebuilt
    }

    pub fn status(&self) -> DetachedStatus {
        match &self.meta {
            Some(Err(_)) => DetachedStatus::InvalidMeta,
            Some(Ok(meta)) if meta.version != self.version => DetachedStatus::OtherVersion {
                stored: meta.version,
            },
            Some(Ok(meta)) if meta.checkpoint > self.head => DetachedStatus::AheadOfJournal {
                checkpoint: meta.checkpoint,
            },
            _ if self.is_equal() => DetachedStatus::Equal,
            _ => DetachedStatus::Differs,
        }
    }
}

/// What [`Projections::inspect_detached`] reads for one projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionSummary {
    pub name: &'static str,
    /// This build's version of the projection.
    pub version: u32,
    /// The stored meta entry: `None` when the projection was never attached to this journal.
    pub meta: Option<Result<ProjectionMeta, MetaError>>,
    /// Each table with its number of entries, in [`Projection::tables`] order.
    pub tables: Vec<(&'static str, u64)>,
    /// [`Projections::digest`] of the stored tables.
    pub digest: [u8; 32],
}

impl Projections {
    /// Compares the stored tables of every projection in `list` with a fresh fold of the journal
    /// **without attaching them**: no hook is registered and nothing is written. One maintenance
    /// transaction (appends wait for it) reads each meta entry and digests the stored tables,
    /// clears the tables, replays the journal once, folding each record into every projection
    /// whose [`DetachedCheck::upto`] it is within, digests the result, finds the first differing
    /// key of each table that differs (against a read snapshot of the stored tables, which is the
    /// transaction's starting point since nothing commits meanwhile) and aborts. `progress` is
    /// called with (position, head) after each replayed record.
    ///
    /// For offline audits (`ctx audit`), where attaching would itself rebuild or catch up the
    /// tables being audited. Refused as maintenance is (a journal that refuses writes); a record
    /// that fails authentication or that a projection refuses stops the check
    /// ([`ProjectionError::Read`], [`ProjectionError::Apply`]).
    pub fn check_detached(
        journal: &Journal,
        list: &[Arc<dyn Projection>],
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<DetachedCheck>, FrameworkError> {
        validate(list)?;
        maintain(journal, |m| {
            let head = m.head_position();
            let mut checks = Vec::with_capacity(list.len());
            for p in list {
                let meta = read_meta(m, p.name())?;
                let upto = match &meta {
                    None => 0,
                    Some(Ok(meta)) if meta.version == p.version() && meta.checkpoint <= head => {
                        meta.checkpoint
                    }
                    Some(_) => head,
                };
                checks.push(DetachedCheck {
                    name: p.name(),
                    version: p.version(),
                    meta,
                    upto,
                    head,
                    stored: digest_tables(p.tables(), |table, f| m.scan(table, f))?,
                    rebuilt: [0; 32],
                    records: 0,
                    differences: Vec::new(),
                });
            }
            for p in list {
                for &table in p.tables() {
                    m.clear(table)?;
                }
            }
            m.replay(1, |tx, r| {
                for (p, c) in list.iter().zip(checks.iter_mut()) {
                    if r.position <= c.upto {
                        p.apply(tx, r)?;
                        c.records += 1;
                    }
                }
                progress(r.position, head);
                Ok(())
            })?;
            journal.projection_read(|stored| -> Result<(), FrameworkError> {
                for (p, c) in list.iter().zip(checks.iter_mut()) {
                    c.rebuilt = digest_tables(p.tables(), |table, f| m.scan(table, f))?;
                    if c.is_equal() {
                        continue;
                    }
                    for &table in p.tables() {
                        if let Some(d) = first_difference(m, stored, table)? {
                            c.differences.push(d);
                        }
                    }
                }
                Ok(())
            })??;
            Ok((checks, false))
        })
    }

    /// Reads, in one snapshot and without attaching anything, each projection's meta entry, the
    /// number of entries of each of its tables and the digest of its stored tables.
    pub fn inspect_detached(
        journal: &Journal,
        list: &[Arc<dyn Projection>],
    ) -> Result<Vec<ProjectionSummary>, FrameworkError> {
        validate(list)?;
        journal.projection_read(|r| {
            let mut out = Vec::with_capacity(list.len());
            for p in list {
                let meta = r.get(META_TABLE, p.name().as_bytes(), |v| {
                    v.map(ProjectionMeta::decode)
                })?;
                let mut tables = Vec::with_capacity(p.tables().len());
                for &table in p.tables() {
                    let mut entries = 0u64;
                    r.scan(table, |_, _| {
                        entries += 1;
                        ControlFlow::Continue(())
                    })?;
                    tables.push((table, entries));
                }
                out.push(ProjectionSummary {
                    name: p.name(),
                    version: p.version(),
                    meta,
                    tables,
                    digest: digest_tables(p.tables(), |table, f| r.scan(table, f))?,
                });
            }
            Ok(out)
        })?
    }
}

/// The first key (and the number of keys) of `table` whose entry differs between the fresh fold
/// in `m` and the stored snapshot `stored`; `None` when the table is the same in both. Two passes
/// of point lookups, one from each side, so neither table is held in memory.
fn first_difference(
    m: &MaintenanceTxn<'_>,
    stored: &ProjectionRead<'_>,
    table: &'static str,
) -> Result<Option<TableDifference>, FrameworkError> {
    let mut first: Option<Vec<u8>> = None;
    let mut keys = 0u64;
    let mut failure = None;
    let mut note = |key: &[u8], first: &mut Option<Vec<u8>>| {
        keys += 1;
        if first.as_deref().is_none_or(|f| key < f) {
            *first = Some(key.to_vec());
        }
    };
    m.scan(table, |key, value| {
        match stored.get(table, key, |s| s == Some(value)) {
            Ok(true) => {}
            Ok(false) => note(key, &mut first),
            Err(e) => {
                failure = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;
    stored.scan(table, |key, _| {
        match m.get(table, key, |v| v.is_some()) {
            // Present on both sides: compared by the first pass.
            Ok(true) => {}
            Ok(false) => note(key, &mut first),
            Err(e) => {
                failure = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(first.map(|first_key| TableDifference {
        table,
        first_key,
        keys,
    }))
}

/// Refuses bad names and tables before anything touches the journal.
fn validate(list: &[Arc<dyn Projection>]) -> Result<(), FrameworkError> {
    let mut names = HashSet::new();
    let mut owners: HashMap<&'static str, &'static str> = HashMap::new();
    for p in list {
        let name = p.name();
        if name.is_empty()
            || name.len() > PROJECTION_NAME_MAX_BYTES
            || !name.bytes().all(|b| (0x21..=0x7E).contains(&b))
        {
            return Err(FrameworkError::InvalidName {
                name: name.escape_debug().to_string(),
            });
        }
        if !names.insert(name) {
            return Err(FrameworkError::DuplicateName {
                name: name.to_owned(),
            });
        }
        for &table in p.tables() {
            let refuse = |reason| FrameworkError::InvalidTable {
                projection: name.to_owned(),
                table: table.escape_debug().to_string(),
                reason,
            };
            if !table.starts_with(PROJECTION_TABLE_PREFIX) {
                return Err(refuse("its name does not start with \"proj.\""));
            }
            if table.len() > TABLE_NAME_MAX_BYTES {
                return Err(refuse("its name is longer than 64 bytes"));
            }
            if table == META_TABLE {
                return Err(refuse("it is the framework's meta table"));
            }
            if let Some(first) = owners.insert(table, name) {
                if first == name {
                    return Err(refuse("the projection lists it twice"));
                }
                return Err(FrameworkError::SharedTable {
                    table: table.to_owned(),
                    first: first.to_owned(),
                    second: name.to_owned(),
                });
            }
        }
    }
    Ok(())
}

/// Runs `f` in a journal maintenance transaction, letting it fail with a [`FrameworkError`]: the
/// journal's own errors travel through [`HookError`] typed, the framework's are kept aside.
fn maintain<R>(
    journal: &Journal,
    f: impl FnOnce(&MaintenanceTxn<'_>) -> Result<(R, bool), FrameworkError>,
) -> Result<R, FrameworkError> {
    let mut failure = None;
    let result = journal.maintain(|m| match f(m) {
        Ok(done) => Ok(done),
        Err(FrameworkError::Journal(e)) => Err(HookError::from(e)),
        Err(e) => {
            let refusal = HookError::with_code("projection-framework", e.to_string());
            failure = Some(e);
            Err(refusal)
        }
    });
    match (result, failure) {
        (Ok(r), _) => Ok(r),
        (Err(_), Some(e)) => Err(e),
        (Err(e), None) => Err(e.into()),
    }
}

fn read_meta(
    m: &MaintenanceTxn<'_>,
    name: &str,
) -> Result<Option<Result<ProjectionMeta, MetaError>>, ProjectionError> {
    m.get(META_TABLE, name.as_bytes(), |v| {
        v.map(ProjectionMeta::decode)
    })
}

fn bring_up_to_date(
    m: &MaintenanceTxn<'_>,
    p: &dyn Projection,
) -> Result<AttachReport, FrameworkError> {
    let head = m.head_position();
    let cause = match read_meta(m, p.name())? {
        Some(Ok(meta)) if meta.version == p.version() => {
            if meta.checkpoint > head {
                return Err(FrameworkError::AheadOfJournal {
                    name: p.name().to_owned(),
                    checkpoint: meta.checkpoint,
                    head,
                });
            }
            if meta.checkpoint == head {
                return Ok(AttachReport::Fresh);
            }
            let records = m.replay(meta.checkpoint + 1, |tx, r| p.apply(tx, r))?;
            write_meta(m, p, head)?;
            return Ok(AttachReport::CaughtUp { records });
        }
        Some(Ok(meta)) => RebuildCause::VersionChanged { from: meta.version },
        Some(Err(error)) => RebuildCause::InvalidMeta { error },
        None => RebuildCause::Missing,
    };
    let records = rebuild_in(m, p)?;
    Ok(AttachReport::Rebuilt { records, cause })
}

/// Clears the projection's tables and meta entry, replays every record into them and writes the
/// head as the checkpoint. Returns the number of records replayed.
fn rebuild_in(m: &MaintenanceTxn<'_>, p: &dyn Projection) -> Result<u64, FrameworkError> {
    for &table in p.tables() {
        m.clear(table)?;
    }
    m.remove(META_TABLE, p.name().as_bytes())?;
    let records = m.replay(1, |tx, r| p.apply(tx, r))?;
    write_meta(m, p, m.head_position())?;
    Ok(records)
}

/// SHA-256 over [`DIGEST_DOMAIN`], then for each table in order: name length u32 LE, name, each
/// entry in key order as key length u32 LE, key, value length u32 LE, value, and the terminator
/// u32 0xFFFF_FFFF. Length prefixes and the terminator make the encoding unambiguous, so equal
/// digests mean equal tables. `scan` reads one table (a missing table is empty).
fn digest_tables(
    tables: &[&'static str],
    mut scan: impl FnMut(
        &'static str,
        &mut dyn FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ProjectionError>,
) -> Result<[u8; 32], FrameworkError> {
    let mut h = Sha256::new();
    h.update(DIGEST_DOMAIN);
    for &table in tables {
        let mut too_large = None;
        h.update(digest_len(table, table.len())?.to_le_bytes());
        h.update(table.as_bytes());
        scan(table, &mut |key, value| match (
            digest_len(table, key.len()),
            digest_len(table, value.len()),
        ) {
            (Ok(k), Ok(v)) => {
                h.update(k.to_le_bytes());
                h.update(key);
                h.update(v.to_le_bytes());
                h.update(value);
                ControlFlow::Continue(())
            }
            (Err(e), _) | (_, Err(e)) => {
                too_large = Some(e);
                ControlFlow::Break(())
            }
        })?;
        if let Some(e) = too_large {
            return Err(e);
        }
        h.update(DIGEST_TABLE_END.to_le_bytes());
    }
    Ok(h.finalize().into())
}

fn digest_len(table: &str, len: usize) -> Result<u32, FrameworkError> {
    u32::try_from(len)
        .ok()
        .filter(|&n| n != DIGEST_TABLE_END)
        .ok_or_else(|| FrameworkError::EntryTooLarge {
            table: table.to_owned(),
            len,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use ctx_journal::{
        ExpectedRevision, NewRecord, OpenOptions, StreamAppend, StreamId, Timestamp,
    };

    use super::*;
    use crate::archive;

    const COUNTS: &str = "proj.test.counts";
    const KINDS: &str = "proj.test.kinds";

    #[derive(Debug, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    struct Count {
        records: u64,
        last_event: String,
    }

    /// Counts records per stream (rkyv values) and per kind (u64 LE values).
    struct Counts {
        version: u32,
    }

    impl Projection for Counts {
        fn name(&self) -> &'static str {
            "counts"
        }

        fn version(&self) -> u32 {
            self.version
        }

        fn tables(&self) -> &'static [&'static str] {
            &[COUNTS, KINDS]
        }

        fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
            let key = record.stream.as_bytes().as_slice();
            let before = tx.get(COUNTS, key, |v| {
                v.map(|b| archive::with_archived::<Count, _>(b, |c| c.records.to_native()))
                    .transpose()
            })??;
            let count = Count {
                records: before.unwrap_or(0) + 1,
                last_event: record.event_id.to_owned(),
            };
            tx.insert(COUNTS, key, &archive::to_bytes(&count)?)?;
            let kind = record.kind.as_bytes();
            let n = tx.get(KINDS, kind, |v| {
                v.and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map_or(0, u64::from_le_bytes)
            })?;
            tx.insert(KINDS, kind, &(n + 1).to_le_bytes())?;
            Ok(())
        }
    }

    fn counts(version: u32) -> Vec<Arc<dyn Projection>> {
        vec![Arc::new(Counts { version })]
    }

    fn open(dir: &tempfile::TempDir) -> Arc<Journal> {
        Arc::new(Journal::open(dir.path(), &OpenOptions::new()).unwrap())
    }

    fn append(j: &Journal, stream: &str, from: usize, n: usize) {
        let s = StreamId::derive("test", stream.as_bytes()).unwrap();
        let records = (from..from + n)
            .map(|i| {
                let kind = if i % 3 == 0 { "three" } else { "other" };
                NewRecord::new(format!("{stream}-{i}"), kind, Timestamp(i as i64), vec![])
            })
            .collect();
        j.append(StreamAppend::new(s, ExpectedRevision::Any, records))
            .unwrap();
    }

    fn stream_count(j: &Journal, stream: &str) -> Option<Count> {
        let s = StreamId::derive("test", stream.as_bytes()).unwrap();
        j.projection_get(COUNTS, s.as_bytes(), |v| {
            v.map(|b| archive::from_bytes::<Count>(b).unwrap())
        })
        .unwrap()
    }

    #[test]
    fn incremental_tables_equal_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "early", 0, 3);
        let p = Projections::attach(&j, counts(1)).unwrap();
        assert_eq!(
            p.attached(),
            [(
                "counts",
                AttachReport::Rebuilt {
                    records: 3,
                    cause: RebuildCause::Missing
                }
            )]
        );
        for i in 0..20 {
            append(&j, &format!("s{}", i % 4), i * 5, 5);
        }
        assert_eq!(stream_count(&j, "s1").unwrap().records, 25);
        let head = j.head_position().unwrap();
        assert_eq!(
            p.meta("counts").unwrap(),
            Some(ProjectionMeta {
                version: 1,
                checkpoint: head
            })
        );
        let check = p.check("counts").unwrap();
        assert!(check.is_equal(), "{check:?}");
        assert_eq!(check.records, head);
        let incremental = p.digest("counts").unwrap();
        assert_eq!(incremental, check.incremental);
        let rebuilt = p.rebuild("counts").unwrap();
        assert_eq!(
            rebuilt,
            RebuildReport {
                records: head,
                checkpoint: head
            }
        );
        assert_eq!(p.digest("counts").unwrap(), incremental);
    }

    #[test]
    fn a_version_bump_rebuilds_on_attach() {
        let dir = tempfile::tempdir().unwrap();
        {
            let j = open(&dir);
            let _p = Projections::attach(&j, counts(1)).unwrap();
            append(&j, "a", 0, 4);
        }
        let j = open(&dir);
        let p = Projections::attach(&j, counts(2)).unwrap();
        assert_eq!(
            p.attached()[0].1,
            AttachReport::Rebuilt {
                records: 4,
                cause: RebuildCause::VersionChanged { from: 1 }
            }
        );
        assert_eq!(p.meta("counts").unwrap().unwrap().version, 2);
        assert_eq!(stream_count(&j, "a").unwrap().records, 4);
        drop(p);
        drop(j);
        // Same version again: nothing to do.
        let j = open(&dir);
        let p = Projections::attach(&j, counts(2)).unwrap();
        assert_eq!(p.attached()[0].1, AttachReport::Fresh);
    }

    #[test]
    fn records_appended_while_detached_are_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        {
            let j = open(&dir);
            let _p = Projections::attach(&j, counts(1)).unwrap();
            append(&j, "a", 0, 3);
        }
        {
            let j = open(&dir);
            append(&j, "a", 3, 2);
            append(&j, "b", 0, 1);
        }
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        assert_eq!(p.attached()[0].1, AttachReport::CaughtUp { records: 3 });
        assert_eq!(
            stream_count(&j, "a").unwrap(),
            Count {
                records: 5,
                last_event: "a-4".into()
            }
        );
        assert_eq!(p.meta("counts").unwrap().unwrap().checkpoint, 6);
        assert!(p.check("counts").unwrap().is_equal());
        // And the hook keeps it current afterwards.
        append(&j, "b", 1, 1);
        assert_eq!(stream_count(&j, "b").unwrap().records, 2);
        assert!(p.check("counts").unwrap().is_equal());
    }

    /// Overwrites one entry of the counts table behind the projection's back.
    fn tamper(j: &Journal, stream: &str, records: u64) {
        let s = StreamId::derive("test", stream.as_bytes()).unwrap();
        let bytes = archive::to_bytes(&Count {
            records,
            last_event: "forged".into(),
        })
        .unwrap();
        j.maintain(|m| {
            m.insert(COUNTS, s.as_bytes(), &bytes)?;
            Ok(((), true))
        })
        .unwrap();
    }

    #[test]
    fn check_reports_a_difference_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        append(&j, "a", 0, 3);
        append(&j, "b", 0, 2);
        let clean = p.digest("counts").unwrap();
        tamper(&j, "a", 99);
        let tampered = p.digest("counts").unwrap();
        assert_ne!(clean, tampered, "digests differ when an entry differs");
        let meta = p.meta("counts").unwrap();
        let check = p.check("counts").unwrap();
        assert!(!check.is_equal());
        assert_eq!((check.incremental, check.rebuilt), (tampered, clean));
        // The check aborted its transaction: the forged entry is still there.
        assert_eq!(p.digest("counts").unwrap(), tampered);
        assert_eq!(stream_count(&j, "a").unwrap().records, 99);
        assert_eq!(p.meta("counts").unwrap(), meta);
        p.rebuild("counts").unwrap();
        assert_eq!(p.digest("counts").unwrap(), clean);
    }

    #[test]
    fn the_digest_follows_the_documented_encoding() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        append(&j, "a", 1, 1);
        let s = StreamId::derive("test", b"a").unwrap();
        let value = archive::to_bytes(&Count {
            records: 1,
            last_event: "a-1".into(),
        })
        .unwrap();
        let mut h = Sha256::new();
        h.update(b"ctx-projection-digest-v1\0");
        h.update(16u32.to_le_bytes());
        h.update(b"proj.test.counts");
        h.update(32u32.to_le_bytes());
        h.update(s.as_bytes());
        h.update((value.len() as u32).to_le_bytes());
        h.update(&value);
        h.update(0xFFFF_FFFFu32.to_le_bytes());
        h.update(15u32.to_le_bytes());
        h.update(b"proj.test.kinds");
        h.update(5u32.to_le_bytes());
        h.update(b"other");
        h.update(8u32.to_le_bytes());
        h.update(1u64.to_le_bytes());
        h.update(0xFFFF_FFFFu32.to_le_bytes());
        let expected: [u8; 32] = h.finalize().into();
        assert_eq!(p.digest("counts").unwrap(), expected);
    }

    #[test]
    fn an_append_folds_the_records_its_projection_missed_first() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "a", 0, 2);
        let p = Projections::attach(&j, counts(1)).unwrap();
        append(&j, "a", 2, 2);
        // What another process appending to a shared journal without this projection leaves:
        // a checkpoint behind the journal head, and tables that did not see records 3 and 4.
        let s = StreamId::derive("test", b"a").unwrap();
        j.maintain(|m| {
            // Fold only records 1 and 2, as the projection would hold them.
            for table in p.list[0].tables() {
                m.clear(table)?;
            }
            m.replay(1, |tx, r| {
                if r.position <= 2 {
                    p.list[0].apply(tx, r)?;
                }
                Ok(())
            })?;
            let behind = ProjectionMeta {
                version: 1,
                checkpoint: 2,
            };
            m.insert(META_TABLE, b"counts", &behind.encode())?;
            Ok(((), true))
        })
        .unwrap();
        assert_eq!(stream_count(&j, "a").unwrap().records, 2);
        j.append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![NewRecord::new("a-9", "other", Timestamp(9), vec![])],
        ))
        .unwrap();
        // Records 3 and 4 were folded before record 5: the tables equal a fresh fold again.
        assert_eq!(stream_count(&j, "a").unwrap().records, 5);
        assert_eq!(p.meta("counts").unwrap().unwrap().checkpoint, 5);
        assert!(p.check("counts").unwrap().is_equal());
    }

    #[test]
    fn an_append_under_a_checkpoint_past_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "a", 0, 2);
        let _p = Projections::attach(&j, counts(1)).unwrap();
        let ahead = ProjectionMeta {
            version: 1,
            checkpoint: 7,
        };
        j.maintain(|m| {
            m.insert(META_TABLE, b"counts", &ahead.encode())?;
            Ok(((), true))
        })
        .unwrap();
        let s = StreamId::derive("test", b"a").unwrap();
        let err = j
            .append(StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![NewRecord::new("a-9", "other", Timestamp(9), vec![])],
            ))
            .unwrap_err();
        assert!(
            matches!(
                &err,
                ctx_journal::AppendError::Hook {
                    code: Some("projection-ahead"),
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(j.head_position().unwrap(), 2);
    }

    #[test]
    fn a_checkpoint_past_the_journal_head_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "a", 0, 2);
        let meta = ProjectionMeta {
            version: 1,
            checkpoint: 10,
        };
        j.maintain(|m| {
            m.insert(META_TABLE, b"counts", &meta.encode())?;
            Ok(((), true))
        })
        .unwrap();
        let err = Projections::attach(&j, counts(1)).unwrap_err();
        assert!(
            matches!(
                &err,
                FrameworkError::AheadOfJournal {
                    checkpoint: 10,
                    head: 2,
                    ..
                }
            ),
            "{err}"
        );
        // Nothing was registered: appends are not projected by a refused attach.
        append(&j, "a", 2, 1);
        assert!(stream_count(&j, "a").is_none());
    }

    #[test]
    fn an_undecodable_meta_entry_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "a", 0, 2);
        j.maintain(|m| {
            m.insert(META_TABLE, b"counts", b"garbage")?;
            Ok(((), true))
        })
        .unwrap();
        let p = Projections::attach(&j, counts(1)).unwrap();
        assert_eq!(
            p.attached()[0].1,
            AttachReport::Rebuilt {
                records: 2,
                cause: RebuildCause::InvalidMeta {
                    error: MetaError::Length { len: 7 }
                }
            }
        );
    }

    #[test]
    fn meta_values_round_trip_and_refuse_bad_layouts() {
        let meta = ProjectionMeta {
            version: 7,
            checkpoint: 1 << 40,
        };
        let bytes = meta.encode();
        assert_eq!(&bytes[..4], b"CTXP");
        assert_eq!(bytes[4..8], 1u32.to_le_bytes());
        assert_eq!(bytes[8..12], 7u32.to_le_bytes());
        assert_eq!(bytes[12..], (1u64 << 40).to_le_bytes());
        assert_eq!(ProjectionMeta::decode(&bytes), Ok(meta));
        assert_eq!(
            ProjectionMeta::decode(&bytes[..19]),
            Err(MetaError::Length { len: 19 })
        );
        let mut wrong = bytes;
        wrong[0] = b'X';
        assert_eq!(
            ProjectionMeta::decode(&wrong),
            Err(MetaError::Magic { found: *b"XTXP" })
        );
        let mut wrong = bytes;
        wrong[4] = 2;
        let err = ProjectionMeta::decode(&wrong).unwrap_err();
        assert_eq!(err, MetaError::Format { found: 2 });
        assert!(err.to_string().contains("meta format 2"), "{err}");
    }

    struct Named(&'static str, &'static [&'static str]);

    impl Projection for Named {
        fn name(&self) -> &'static str {
            self.0
        }

        fn version(&self) -> u32 {
            1
        }

        fn tables(&self) -> &'static [&'static str] {
            self.1
        }

        fn apply(&self, _: &HookTxn<'_>, _: &RecordView<'_>) -> Result<(), HookError> {
            Ok(())
        }
    }

    #[test]
    fn bad_names_and_tables_are_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let attach = |list: Vec<Arc<dyn Projection>>| Projections::attach(&j, list).unwrap_err();
        let err = attach(vec![Arc::new(Named("a", &[])), Arc::new(Named("a", &[]))]);
        assert!(matches!(&err, FrameworkError::DuplicateName { name } if name == "a"));
        let err = attach(vec![Arc::new(Named("has space", &[]))]);
        assert!(matches!(err, FrameworkError::InvalidName { .. }), "{err}");
        let err = attach(vec![Arc::new(Named("a", &["journal.records"]))]);
        assert!(
            matches!(&err, FrameworkError::InvalidTable { table, .. } if table == "journal.records"),
            "{err}"
        );
        let err = attach(vec![Arc::new(Named("a", &[META_TABLE]))]);
        assert!(matches!(err, FrameworkError::InvalidTable { .. }), "{err}");
        let err = attach(vec![Arc::new(Named("a", &["proj.x", "proj.x"]))]);
        assert!(matches!(err, FrameworkError::InvalidTable { .. }), "{err}");
        let err = attach(vec![
            Arc::new(Named("a", &["proj.x"])),
            Arc::new(Named("b", &["proj.x"])),
        ]);
        assert!(
            matches!(&err, FrameworkError::SharedTable { first, second, .. } if first == "a" && second == "b"),
            "{err}"
        );
        assert!(
            j.projection_scan(META_TABLE, |_, _| ControlFlow::Break(()))
                .is_ok()
        );
        let mut metas = 0;
        j.projection_scan(META_TABLE, |_, _| {
            metas += 1;
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(metas, 0);
    }

    #[test]
    fn unknown_projection_names_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        for result in [
            p.rebuild("nope").map(|_| ()),
            p.digest("nope").map(|_| ()),
            p.check("nope").map(|_| ()),
            p.meta("nope").map(|_| ()),
        ] {
            let err = result.unwrap_err();
            assert!(
                matches!(&err, FrameworkError::UnknownProjection { name } if name == "nope"),
                "{err}"
            );
            assert!(err.to_string().contains("\"nope\""));
        }
    }

    /// Refuses records whose kind is "poison", with a code.
    struct Picky;

    impl Projection for Picky {
        fn name(&self) -> &'static str {
            "picky"
        }

        fn version(&self) -> u32 {
            1
        }

        fn tables(&self) -> &'static [&'static str] {
            &["proj.test.picky"]
        }

        fn apply(&self, tx: &HookTxn<'_>, record: &RecordView<'_>) -> Result<(), HookError> {
            if record.kind == "poison" {
                return Err(HookError::with_code("poison", "the record is poison"));
            }
            tx.insert("proj.test.picky", &record.position.to_be_bytes(), &[])?;
            Ok(())
        }
    }

    #[test]
    fn a_refusing_projection_refuses_the_append_with_its_code_and_fails_a_replay() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let s = StreamId::derive("test", b"p").unwrap();
        let poison = || {
            StreamAppend::new(
                s,
                ExpectedRevision::Any,
                vec![NewRecord::new("p1", "poison", Timestamp(0), vec![])],
            )
        };
        // Appended while Picky is not attached, so the attach's rebuild meets it.
        j.append(poison()).unwrap();
        let err = Projections::attach(&j, vec![Arc::new(Picky)]).unwrap_err();
        assert!(
            matches!(
                &err,
                FrameworkError::Journal(ProjectionError::Apply {
                    position: 1,
                    code: Some("poison"),
                    ..
                })
            ),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let _p = Projections::attach(&j, vec![Arc::new(Picky)]).unwrap();
        let err = j.append(poison()).unwrap_err();
        assert!(
            matches!(
                &err,
                ctx_journal::AppendError::Hook {
                    code: Some("poison"),
                    ..
                }
            ),
            "{err}"
        );
    }

    fn check_counts(j: &Journal, version: u32) -> DetachedCheck {
        let mut calls = 0;
        let mut checks =
            Projections::check_detached(j, &counts(version), &mut |_, _| calls += 1).unwrap();
        assert_eq!(
            calls,
            j.head_position().unwrap(),
            "one progress call per record"
        );
        checks.remove(0)
    }

    #[test]
    fn a_detached_check_compares_with_the_fold_up_to_the_checkpoint_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let j = open(&dir);
            // Never attached: no meta entry, empty tables, compared with a fold of nothing.
            append(&j, "a", 0, 2);
            let c = check_counts(&j, 1);
            assert_eq!((c.meta.clone(), c.upto, c.records), (None, 0, 0));
            assert_eq!(c.status(), DetachedStatus::Equal);
            let _p = Projections::attach(&j, counts(1)).unwrap();
            append(&j, "a", 2, 3);
            let c = check_counts(&j, 1);
            assert_eq!((c.upto, c.head, c.records), (5, 5, 5));
            assert_eq!(c.status(), DetachedStatus::Equal);
            assert!(c.differences.is_empty());
        }
        // Records appended while detached leave the checkpoint behind: still equal to its fold.
        let j = open(&dir);
        append(&j, "b", 0, 2);
        let c = check_counts(&j, 1);
        assert_eq!((c.upto, c.head, c.records), (5, 7, 5));
        assert_eq!(c.status(), DetachedStatus::Equal);
        // Another version is not compared, only reported.
        assert_eq!(
            check_counts(&j, 2).status(),
            DetachedStatus::OtherVersion { stored: 1 }
        );
        // Nothing was attached or registered by the checks: the detached appends stay unprojected.
        assert!(stream_count(&j, "b").is_none());
        let meta = j
            .projection_read(|r| r.get(META_TABLE, b"counts", |v| v.map(<[u8]>::to_vec)))
            .unwrap();
        assert_eq!(
            ProjectionMeta::decode(&meta.unwrap().unwrap())
                .unwrap()
                .checkpoint,
            5
        );
    }

    #[test]
    fn a_detached_check_names_the_first_differing_key_of_each_table() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        append(&j, "a", 0, 3);
        append(&j, "b", 0, 2);
        tamper(&j, "b", 42);
        let forged = p.digest("counts").unwrap();
        // An extra kind entry: stored but not rebuilt.
        j.maintain(|m| {
            m.insert(KINDS, b"forged-kind", &1u64.to_le_bytes())?;
            Ok(((), true))
        })
        .unwrap();
        let c = check_counts(&j, 1);
        assert_eq!(c.status(), DetachedStatus::Differs);
        assert_ne!(c.stored, c.rebuilt);
        let b = StreamId::derive("test", b"b").unwrap();
        assert_eq!(
            c.differences,
            [
                TableDifference {
                    table: COUNTS,
                    first_key: b.as_bytes().to_vec(),
                    keys: 1
                },
                TableDifference {
                    table: KINDS,
                    first_key: b"forged-kind".to_vec(),
                    keys: 1
                }
            ]
        );
        // The check aborted: the forged entries are still there.
        assert_eq!(stream_count(&j, "b").unwrap().records, 42);
        assert_ne!(p.digest("counts").unwrap(), forged);
        assert_eq!(p.digest("counts").unwrap(), c.stored);
        // And the ordinary check agrees with the detached one.
        let check = p.check("counts").unwrap();
        assert_eq!((check.incremental, check.rebuilt), (c.stored, c.rebuilt));
    }

    #[test]
    fn a_detached_check_reports_bad_meta_entries_and_summaries_count_entries() {
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        append(&j, "a", 0, 2);
        let write_meta = |bytes: &[u8]| {
            j.maintain(|m| {
                m.insert(META_TABLE, b"counts", bytes)?;
                Ok(((), true))
            })
            .unwrap();
        };
        write_meta(b"garbage");
        assert_eq!(check_counts(&j, 1).status(), DetachedStatus::InvalidMeta);
        let ahead = ProjectionMeta {
            version: 1,
            checkpoint: 10,
        };
        write_meta(&ahead.encode());
        assert_eq!(
            check_counts(&j, 1).status(),
            DetachedStatus::AheadOfJournal { checkpoint: 10 }
        );
        let summary = Projections::inspect_detached(&j, &counts(1)).unwrap();
        assert_eq!(summary[0].meta, Some(Ok(ahead)));
        assert_eq!(summary[0].tables, [(COUNTS, 0), (KINDS, 0)]);
        let dir = tempfile::tempdir().unwrap();
        let j = open(&dir);
        let p = Projections::attach(&j, counts(1)).unwrap();
        append(&j, "a", 0, 3);
        append(&j, "b", 0, 1);
        let summary = Projections::inspect_detached(&j, &counts(1)).unwrap();
        assert_eq!(summary[0].tables, [(COUNTS, 2), (KINDS, 2)]);
        assert_eq!(summary[0].digest, p.digest("counts").unwrap());
        assert_eq!(
            summary[0].meta,
            Some(Ok(ProjectionMeta {
                version: 1,
                checkpoint: 4
            }))
        );
    }
}
