//! `ctx audit`: every check ctx can make of a data directory's journal, offline (spec/cli.md §5):
//! redb's integrity check of the file, the journal's verification pass (digest, chain, MAC,
//! indexes), a replay of every engine stream through the reducer, and a fresh fold of every
//! projection compared with the stored tables, the verifier registry's whole history and every
//! recorded consent decision re-verified against it (spec/decisions.md §12.5), and every item of
//! the content stores checked against its name (`audit_stores`). The report names, for each kind
//! of failure, the first bad stream and revision; the exit status is 0 only when everything
//! verifies.

use std::collections::HashSet;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use ctx_journal::{
    FailureKind, Journal, OpenOptions, ProjectionError, ReadError, StorageIntegrity, StreamId,
    VerifyReport, check_storage_integrity,
};
use ctx_model::Json;
use ctx_projections::engine::{AuditError, StoreError, replay_audit_stream};
use ctx_projections::streams::ENGINE_RECORD_KIND;
use ctx_projections::{
    DetachedCheck, DetachedStatus, FrameworkError, Projections, domain_projections,
};

use crate::audit_stores::{StoreLine, check_stores};
use crate::error::{CliError, EXIT_OK};
use ctx_service::{JOURNAL_LOCK_WAIT, Layout};

/// The `schema` of `ctx audit --json`.
pub(crate) const AUDIT_SCHEMA: &str = "ctx.audit-report.v1";

/// The journal directory of `layout`, which must hold a journal database: the offline commands
/// never create one.
pub(super) fn existing_journal(layout: &Layout, action: &'static str) -> Result<PathBuf, CliError> {
    let dir = layout.journal();
    if ctx_service::journal_exists(&dir) {
        Ok(dir)
    } else {
        Err(CliError::NoJournal { path: dir, action })
    }
}

/// Opens the journal in `dir`, waiting for another `ctx` process as every command does.
pub(super) fn open_journal(dir: &std::path::Path) -> Result<Journal, CliError> {
    Ok(ctx_service::open_journal(
        dir,
        &OpenOptions::new().lock_wait(JOURNAL_LOCK_WAIT),
    )?)
}

/// Lowercase hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// A progress bar drawn in place on standard error (`\r`), only when it is a terminal; nothing
/// otherwise, so logs and pipes stay clean. Write errors are ignored: progress is cosmetic.
pub(super) struct Progress<'a> {
    err: &'a mut dyn Write,
    enabled: bool,
    label: &'static str,
    /// Per mille last drawn, so a million records redraw at most a thousand times.
    drawn: Option<u64>,
}

const BAR_WIDTH: u64 = 30;

impl<'a> Progress<'a> {
    pub(super) fn new(err: &'a mut dyn Write, enabled: bool) -> Progress<'a> {
        Progress {
            err,
            enabled,
            label: "",
            drawn: None,
        }
    }

    /// Starts a phase: its label is shown at once, without a bar until the first update.
    pub(super) fn phase(&mut self, label: &'static str) {
        self.label = label;
        self.drawn = None;
        if self.enabled {
            let _ = write!(self.err, "\r\x1b[2K{label} …");
            let _ = self.err.flush();
        }
    }

    pub(super) fn update(&mut self, done: u64, total: u64) {
        if !self.enabled || total == 0 {
            return;
        }
        let permille = done.min(total).saturating_mul(1000) / total;
        if self.drawn == Some(permille) {
            return;
        }
        self.drawn = Some(permille);
        let filled = permille * BAR_WIDTH / 1000;
        let bar: String = (0..BAR_WIDTH)
            .map(|i| if i < filled { '#' } else { '.' })
            .collect();
        let _ = write!(
            self.err,
            "\r\x1b[2K{:<12} [{bar}] {:>3}% ({done}/{total})",
            self.label,
            permille / 10
        );
        let _ = self.err.flush();
    }

    /// Clears the line, so whatever is written next starts clean.
    pub(super) fn clear(&mut self) {
        if self.enabled && !self.label.is_empty() {
            let _ = write!(self.err, "\r\x1b[2K");
            let _ = self.err.flush();
            self.label = "";
        }
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The first failure of one kind, as the report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    /// Which check found it: `storage`, `records`, `engine-replay`, `projections`, `trust`,
    /// `decisions`, `stores`.
    check: &'static str,
    kind: String,
    stream: Option<StreamId>,
    revision: Option<u64>,
    position: Option<u64>,
    projection: Option<&'static str>,
    table: Option<&'static str>,
    /// The first differing key of a projection table, in hex.
    key: Option<String>,
    /// How many of this kind were found (streams, records, keys: see spec/cli.md §5).
    count: u64,
    detail: String,
}

impl Failure {
    fn new(check: &'static str, kind: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            check,
            kind: kind.into(),
            stream: None,
            revision: None,
            position: None,
            projection: None,
            table: None,
            key: None,
            count: 1,
            detail: detail.into(),
        }
    }

    /// Where a read failure happened, when the error says.
    fn at_read(mut self, e: &ReadError) -> Failure {
        match e {
            ReadError::AuthenticationFailed {
                stream,
                revision,
                position,
                ..
            } => {
                self.stream = Some(*stream);
                self.revision = Some(*revision);
                self.position = Some(*position);
            }
            ReadError::Corrupt { position, .. } if *position > 0 => {
                self.position = Some(*position);
            }
            _ => {}
        }
        self
    }

    fn to_json(&self) -> Json {
        let opt_u64 = |v: Option<u64>| v.map_or(Json::Null, Json::from);
        Json::object([
            ("check", Json::str(self.check)),
            ("kind", Json::str(self.kind.as_str())),
            (
                "stream",
                self.stream.map_or(Json::Null, |s| Json::str(s.to_hex())),
            ),
            ("revision", opt_u64(self.revision)),
            ("position", opt_u64(self.position)),
            ("projection", Json::opt_str(self.projection)),
            ("table", Json::opt_str(self.table)),
            ("key", Json::opt_str(self.key.as_deref())),
            ("count", Json::from(self.count)),
            ("detail", Json::str(self.detail.as_str())),
        ])
    }

    fn to_line(&self) -> String {
        let mut line = format!("{}/{}", self.check, self.kind);
        if let Some(p) = self.projection {
            line.push_str(&format!(" projection {p}"));
        }
        if let Some(t) = self.table {
            line.push_str(&format!(" table {t}"));
        }
        if let Some(k) = &self.key {
            line.push_str(&format!(" key {k}"));
        }
        if let Some(s) = self.stream {
            line.push_str(&format!(" stream {s}"));
        }
        if let Some(r) = self.revision {
            line.push_str(&format!(" revision {r}"));
        }
        if let Some(p) = self.position {
            line.push_str(&format!(" (position {p})"));
        }
        line.push_str(&format!(": {} ({} found)", self.detail, self.count));
        line
    }
}

/// One projection's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProjectionLine {
    name: &'static str,
    version: u32,
    /// `equal`, `differs`, `rebuild-pending`, `invalid-meta`, `ahead-of-journal`.
    status: &'static str,
    checkpoint: Option<u64>,
    folded: u64,
    stored_digest: String,
    rebuilt_digest: String,
}

/// Everything `ctx audit` found.
#[derive(Debug, Default)]
struct Report {
    journal: String,
    storage: &'static str,
    records: u64,
    streams: u64,
    head_position: u64,
    engine_streams: u64,
    engine_revisions: u64,
    projections: Vec<ProjectionLine>,
    /// Registry changes replayed and verifiers registered now.
    trust_changes: u64,
    verifiers_active: u64,
    /// Consent decisions re-verified, by the assurance their evidence shows.
    decisions: u64,
    decisions_by_assurance: Vec<(String, u64)>,
    /// What the stores check saw, store by store.
    stores: Vec<StoreLine>,
    failures: Vec<Failure>,
}

impl Report {
    fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }

    /// Adds a failure, or counts it when its check already has one of that kind: the report
    /// keeps the first of each kind.
    fn fail(&mut self, failure: Failure) {
        match self
            .failures
            .iter_mut()
            .find(|f| f.check == failure.check && f.kind == failure.kind)
        {
            Some(first) => first.count += failure.count,
            None => self.failures.push(failure),
        }
    }

    /// The text report's `stores` line: items verified per store, and what was left alone.
    fn stores_line(&self) -> String {
        let each: Vec<String> = self
            .stores
            .iter()
            .map(|s| {
                if s.present {
                    format!("{} {} verified", s.name, s.verified)
                } else {
                    format!("{} 0 verified (no directory)", s.name)
                }
            })
            .collect();
        let locks: u64 = self.stores.iter().map(|s| s.locks).sum();
        let stages: u64 = self.stores.iter().map(|s| s.stages).sum();
        format!(
            "content against its name: {}; left alone: {locks} lock files, {stages} stages",
            each.join(", ")
        )
    }

    fn to_json(&self) -> Json {
        let projections = self
            .projections
            .iter()
            .map(|p| {
                Json::object([
                    ("name", Json::str(p.name)),
                    ("version", Json::from(u64::from(p.version))),
                    ("status", Json::str(p.status)),
                    ("checkpoint", p.checkpoint.map_or(Json::Null, Json::from)),
                    ("folded_records", Json::from(p.folded)),
                    ("stored_digest", Json::str(p.stored_digest.as_str())),
                    ("rebuilt_digest", Json::str(p.rebuilt_digest.as_str())),
                ])
            })
            .collect();
        Json::object([
            ("schema", Json::str(AUDIT_SCHEMA)),
            ("ok", Json::Bool(self.is_ok())),
            ("journal", Json::str(self.journal.as_str())),
            ("storage", Json::str(self.storage)),
            ("records", Json::from(self.records)),
            ("streams", Json::from(self.streams)),
            ("head_position", Json::from(self.head_position)),
            ("engine_streams", Json::from(self.engine_streams)),
            ("engine_revisions", Json::from(self.engine_revisions)),
            ("projections", Json::Arr(projections)),
            ("trust_changes", Json::from(self.trust_changes)),
            ("verifiers_active", Json::from(self.verifiers_active)),
            ("decisions", Json::from(self.decisions)),
            (
                "decisions_by_assurance",
                Json::object(
                    self.decisions_by_assurance
                        .iter()
                        .map(|(a, n)| (a.as_str(), Json::from(*n))),
                ),
            ),
            (
                "stores",
                Json::object(self.stores.iter().map(|s| (s.name.as_str(), s.to_json()))),
            ),
            (
                "failures",
                Json::Arr(self.failures.iter().map(Failure::to_json).collect()),
            ),
        ])
    }

    fn write_text(&self, out: &mut dyn Write, elapsed_ms: u128) -> std::io::Result<()> {
        writeln!(out, "ctx audit of {}", self.journal)?;
        if self.storage.starts_with("postgresql") {
            writeln!(out, "  storage      {}", self.storage)?;
        } else {
            writeln!(out, "  storage      redb integrity check: {}", self.storage)?;
        }
        writeln!(
            out,
            "  records      {} records in {} streams (head position {}): structure, digest, \
             chain, MAC and indexes",
            self.records, self.streams, self.head_position
        )?;
        writeln!(
            out,
            "  engine       {} engine streams, {} revisions replayed through the reducer",
            self.engine_streams, self.engine_revisions
        )?;
        writeln!(out, "  projections  stored tables against a fresh fold:")?;
        for p in &self.projections {
            let checkpoint = p.checkpoint.map_or_else(
                || "never attached".to_owned(),
                |c| format!("checkpoint {c}"),
            );
            writeln!(
                out,
                "    {:<22} v{} {:<16} {checkpoint}, {} records folded, digest {}",
                p.name, p.version, p.status, p.folded, p.stored_digest
            )?;
        }
        writeln!(
            out,
            "  trust        {} registry changes re-verified, {} verifiers registered now",
            self.trust_changes, self.verifiers_active
        )?;
        let by: Vec<String> = self
            .decisions_by_assurance
            .iter()
            .map(|(a, n)| format!("{n} {a}"))
            .collect();
        writeln!(
            out,
            "  decisions    {} consent decisions re-verified against the registry{}",
            self.decisions,
            if by.is_empty() {
                String::new()
            } else {
                format!(" ({})", by.join(", "))
            }
        )?;
        writeln!(out, "  stores       {}", self.stores_line())?;
        if self.is_ok() {
            writeln!(out, "result: OK, everything verifies ({elapsed_ms} ms)")?;
        } else {
            writeln!(
                out,
                "result: FAILED, {} kind(s) of failure ({elapsed_ms} ms):",
                self.failures.len()
            )?;
            for f in &self.failures {
                writeln!(out, "  {}", f.to_line())?;
            }
        }
        Ok(())
    }
}

/// The token of a verification failure kind in the report.
fn kind_token(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::Structure => "structure",
        FailureKind::Authentication => "authentication",
        FailureKind::PositionGap => "position-gap",
        FailureKind::RevisionGap => "revision-gap",
        FailureKind::ChainBreak => "chain-break",
        FailureKind::HeadMismatch => "head-mismatch",
        FailureKind::PositionIndex => "position-index",
        FailureKind::EventIndex => "event-index",
        _ => "other",
    }
}

fn record_failures(report: &mut Report, verify: &VerifyReport) {
    for f in &verify.failures {
        report.fail(Failure {
            stream: f.stream,
            revision: f.revision,
            position: f.position,
            count: f.count,
            ..Failure::new("records", kind_token(f.kind), f.detail.as_str())
        });
    }
}

/// Replays every engine stream (a stream whose first record is an engine record) through the
/// reducer and compares every stored transition and state digest.
fn replay_engine_streams(
    journal: &Journal,
    engine_streams: &[StreamId],
    report: &mut Report,
    progress: &mut Progress<'_>,
) {
    progress.phase("engine");
    let total = engine_streams.len() as u64;
    for (i, stream) in engine_streams.iter().enumerate() {
        match replay_audit_stream(journal, stream) {
            Ok(audit) => {
                report.engine_revisions += audit.revisions_checked();
                if let Some(d) = audit.divergence() {
                    report.fail(Failure {
                        stream: Some(d.stream),
                        revision: Some(d.revision),
                        ..Failure::new("engine-replay", d.component.as_str(), d.detail.as_str())
                    });
                }
            }
            Err(AuditError::Store(StoreError::Read(e))) => {
                report.fail(
                    Failure {
                        stream: Some(*stream),
                        ..Failure::new("engine-replay", "read", e.to_string())
                    }
                    .at_read(&e),
                );
            }
            Err(e) => report.fail(Failure {
                stream: Some(*stream),
                ..Failure::new("engine-replay", "read", e.to_string())
            }),
        }
        progress.update(i as u64 + 1, total);
    }
}

/// Folds every projection afresh and compares it with the stored tables.
fn check_projections(
    journal: &Journal,
    streams: &HashSet<StreamId>,
    report: &mut Report,
    progress: &mut Progress<'_>,
) {
    progress.phase("projections");
    let checks = Projections::check_detached(journal, &domain_projections(), &mut |done, total| {
        progress.update(done, total);
    });
    let checks = match checks {
        Ok(checks) => checks,
        Err(e) => {
            report.fail(projection_error(&e));
            return;
        }
    };
    for c in &checks {
        let status = match c.status() {
            DetachedStatus::Equal => "equal",
            DetachedStatus::Differs => "differs",
            DetachedStatus::OtherVersion { .. } => "rebuild-pending",
            DetachedStatus::InvalidMeta => "invalid-meta",
            DetachedStatus::AheadOfJournal { .. } => "ahead-of-journal",
        };
        report.projections.push(ProjectionLine {
            name: c.name,
            version: c.version,
            status,
            checkpoint: c
                .meta
                .as_ref()
                .and_then(|m| m.as_ref().ok())
                .map(|m| m.checkpoint),
            folded: c.records,
            stored_digest: hex(&c.stored),
            rebuilt_digest: hex(&c.rebuilt),
        });
        if let Some(failure) = projection_failure(c, status, streams) {
            report.fail(failure);
        }
    }
}

/// The failure a projection's check amounts to, if any. Tables built by another version are not
/// a failure: the next open of the engine or store rebuilds them, as spec/projections.md says.
fn projection_failure(
    c: &DetachedCheck,
    status: &'static str,
    streams: &HashSet<StreamId>,
) -> Option<Failure> {
    let base = |kind: &'static str, detail: String| Failure {
        projection: Some(c.name),
        ..Failure::new("projections", kind, detail)
    };
    match c.status() {
        DetachedStatus::Equal | DetachedStatus::OtherVersion { .. } => None,
        DetachedStatus::InvalidMeta => Some(base(
            status,
            match &c.meta {
                Some(Err(e)) => e.to_string(),
                _ => "the meta entry does not decode".to_owned(),
            },
        )),
        DetachedStatus::AheadOfJournal { checkpoint } => Some(base(
            status,
            format!(
                "the checkpoint {checkpoint} is past the journal head {}: the journal lost records",
                c.head
            ),
        )),
        DetachedStatus::Differs => {
            let keys: u64 = c.differences.iter().map(|d| d.keys).sum();
            let mut f = base(
                "mismatch",
                format!(
                    "the stored tables differ from a fresh fold of records 1 to {} ({} differing \
                     keys)",
                    c.upto, keys
                ),
            );
            if let Some(d) = c.differences.first() {
                f.table = Some(d.table);
                f.key = Some(hex(&d.first_key));
                // Engine tables are keyed by a stream id (optionally followed by more): name the
                // stream when the key starts with one the journal has.
                if let Some(id) = d
                    .first_key
                    .get(..32)
                    .and_then(|k| <[u8; 32]>::try_from(k).ok())
                {
                    let id = StreamId::from_bytes(id);
                    if streams.contains(&id) {
                        f.stream = Some(id);
                    }
                }
            }
            Some(f)
        }
    }
}

fn projection_error(e: &FrameworkError) -> Failure {
    let detail = format!("the projections could not be checked: {e}");
    match e {
        FrameworkError::Journal(ProjectionError::Read(read)) => {
            Failure::new("projections", "replay", detail).at_read(read)
        }
        FrameworkError::Journal(ProjectionError::Apply { position, .. }) => Failure {
            position: Some(*position),
            ..Failure::new("projections", "refused", detail)
        },
        _ => Failure::new("projections", "unavailable", detail),
    }
}

/// `ctx audit`: prints the report and returns the exit status (an `Err` after the report when
/// anything failed).
/// Replays the verifier registry and re-verifies every recorded consent decision against it
/// (spec/decisions.md §12.5).
fn check_decisions(journal: &Journal, report: &mut Report) {
    let trust = match ctx_service::read_trust(journal) {
        Ok(trust) => trust,
        Err(e) => {
            report.fail(Failure::new("trust", "registry-refused", e.to_string()));
            return;
        }
    };
    report.trust_changes = trust.revision();
    report.verifiers_active = trust.active().count() as u64;
    let checks = match ctx_service::audit_decisions(journal, &trust, &crate::commands::hook_session)
    {
        Ok(checks) => checks,
        Err(e) => {
            report.fail(Failure::new("decisions", "unreadable", e.to_string()));
            return;
        }
    };
    report.decisions = checks.len() as u64;
    for check in checks {
        let assurance = check
            .assurance
            .map_or_else(|| "unverified".to_owned(), |a| a.as_str().to_owned());
        match report
            .decisions_by_assurance
            .iter_mut()
            .find(|(a, _)| *a == assurance)
        {
            Some((_, n)) => *n += 1,
            None => report.decisions_by_assurance.push((assurance, 1)),
        }
        if let Some(problem) = check.problem {
            report.fail(Failure::new(
                "decisions",
                "unverified-decision",
                format!(
                    "the {} decision on {} (challenge {}) by {}: {problem}",
                    check.decision,
                    check.capability_id,
                    check.challenge_digest,
                    check.authenticator_id
                ),
            ));
        }
    }
    report.decisions_by_assurance.sort();
}

/// `ctx compact` (spec/cli.md §6): the embedded journal's file shrunk to the pages it holds.
pub(crate) fn compact(layout: &Layout, out: &mut dyn Write) -> Result<u8, CliError> {
    let dir = existing_journal(layout, "compact")?;
    if ctx_service::journal_source(&dir) != ctx_service::JournalSource::Embedded {
        return Err(CliError::Usage(
            "`ctx compact` applies to the embedded journal only; a PostgreSQL journal's space \
             is the server's to reclaim (VACUUM)"
                .to_owned(),
        ));
    }
    let done = ctx_journal::compact_storage(&dir, JOURNAL_LOCK_WAIT)?;
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    writeln!(
        out,
        "compacted {}: {:.1} MiB → {:.1} MiB",
        dir.join(ctx_journal::DATABASE_FILE).display(),
        mib(done.file_bytes_before),
        mib(done.file_bytes_after)
    )?;
    Ok(EXIT_OK)
}

pub(crate) fn audit(
    layout: &Layout,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
    progress: bool,
) -> Result<u8, CliError> {
    let started = Instant::now();
    let dir = existing_journal(layout, "audit")?;
    let mut progress = Progress::new(err, progress);
    let mut report = Report {
        journal: dir.display().to_string(),
        ..Report::default()
    };
    // redb's check needs the database to itself: run it before this process opens the journal.
    progress.phase("storage");
    let embedded = ctx_service::journal_source(&dir) == ctx_service::JournalSource::Embedded;
    let integrity = if embedded {
        check_storage_integrity(&dir, JOURNAL_LOCK_WAIT)?
    } else {
        // A PostgreSQL journal's pages are the server's to check (its own checksums and WAL);
        // the records below are verified exactly as on redb.
        StorageIntegrity::Clean
    };
    report.storage = match integrity {
        StorageIntegrity::Clean if !embedded => "postgresql (checked by the server)",
        StorageIntegrity::Clean => "clean",
        StorageIntegrity::Repaired => {
            report.fail(Failure::new(
                "storage",
                "repaired",
                "redb found the file damaged and repaired it; the checks below ran on the \
                 repaired file",
            ));
            "repaired"
        }
        StorageIntegrity::Corrupt { detail } => {
            report.fail(Failure::new("storage", "corrupt", detail));
            "corrupt"
        }
    };
    if report.storage != "corrupt" {
        let journal = ctx_service::open_journal(
            &dir,
            &OpenOptions::new()
                .lock_wait(JOURNAL_LOCK_WAIT)
                .ignore_integrity_verdict(),
        )?;
        progress.phase("records");
        let verify = journal.verify()?;
        report.records = verify.records;
        report.streams = verify.streams;
        report.head_position = journal.head_position()?;
        record_failures(&mut report, &verify);
        let mut streams = HashSet::new();
        let mut engine_streams = Vec::new();
        journal.visit_streams(|info| {
            streams.insert(info.stream);
            if info.first_kind.as_deref() == Some(ENGINE_RECORD_KIND) {
                engine_streams.push(info.stream);
            }
            ControlFlow::Continue(())
        })?;
        report.engine_streams = engine_streams.len() as u64;
        replay_engine_streams(&journal, &engine_streams, &mut report, &mut progress);
        check_projections(&journal, &streams, &mut report, &mut progress);
        progress.phase("decisions");
        check_decisions(&journal, &mut report);
    }
    // The stores do not depend on the journal: checked whatever the checks above found.
    progress.phase("stores");
    let stores = check_stores(layout);
    report.stores = stores.stores;
    for problem in stores.problems {
        report.fail(Failure::new("stores", problem.kind, problem.detail));
    }
    // Damaged storage or records are a standing verdict: every later open of the directory
    // refuses writes until an audit finds the journal intact (spec/journal.md §13). A PostgreSQL
    // journal's directory holds only its key; the verdict lives there all the same.
    let damaged = report
        .failures
        .iter()
        .find(|f| matches!(f.check, "storage" | "records"));
    match damaged {
        Some(first) => ctx_journal::record_integrity_failure(&dir, &first.to_line())?,
        None => ctx_journal::clear_integrity_failure(&dir)?,
    }
    progress.clear();
    drop(progress);
    if json {
        writeln!(out, "{}", report.to_json().to_cja())?;
    } else {
        report.write_text(out, started.elapsed().as_millis())?;
    }
    out.flush()?;
    match report.failures.first() {
        None => Ok(EXIT_OK),
        Some(first) => Err(CliError::AuditFailed {
            summary: format!(
                "{} kind(s) of failure; the first: {}",
                report.failures.len(),
                first.to_line()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::error::{EXIT_INTEGRITY, EXIT_USAGE};

    #[test]
    fn the_progress_bar_draws_only_on_a_terminal_and_clears_its_line() {
        let mut quiet = Vec::new();
        {
            let mut p = Progress::new(&mut quiet, false);
            p.phase("records");
            p.update(5, 10);
        }
        assert!(quiet.is_empty());
        let mut drawn = Vec::new();
        {
            let mut p = Progress::new(&mut drawn, true);
            p.phase("records");
            p.update(5, 10);
            // The same per mille is not drawn twice; a total of zero draws nothing.
            p.update(5, 10);
            p.update(1, 0);
            p.update(10, 10);
        }
        let text = String::from_utf8(drawn).unwrap();
        assert_eq!(text.matches("50%").count(), 1, "{text:?}");
        assert!(
            text.contains("[###############...............]"),
            "{text:?}"
        );
        assert!(text.contains("100% (10/10)"), "{text:?}");
        assert!(text.ends_with("\r\x1b[2K"), "cleared at the end: {text:?}");
    }

    #[test]
    fn failures_keep_the_first_of_each_kind_and_count_the_rest() {
        let mut report = Report::default();
        let stream = StreamId::from_bytes([0xab; 32]);
        report.fail(Failure {
            stream: Some(stream),
            revision: Some(3),
            position: Some(7),
            ..Failure::new("records", "authentication", "the digest differs")
        });
        report.fail(Failure {
            revision: Some(9),
            ..Failure::new("records", "authentication", "later")
        });
        report.fail(Failure::new(
            "engine-replay",
            "authentication",
            "other check",
        ));
        assert_eq!(report.failures.len(), 2);
        let first = &report.failures[0];
        assert_eq!((first.revision, first.count), (Some(3), 2));
        assert_eq!(
            first.to_line(),
            format!(
                "records/authentication stream {} revision 3 (position 7): the digest differs (2 \
                 found)",
                "ab".repeat(32)
            )
        );
        let json = report.to_json();
        assert_eq!(json.get("ok"), Some(&Json::Bool(false)));
        let failures = json.get("failures").and_then(Json::as_arr).unwrap();
        assert_eq!(
            failures[0].get_str("stream"),
            Some("ab".repeat(32).as_str())
        );
        assert_eq!(failures[0].get("revision"), Some(&Json::Int(3)));
        assert_eq!(failures[1].get("stream"), Some(&Json::Null));
        // Every failure object has every documented key.
        for f in failures {
            let keys: Vec<&str> = f.as_obj().unwrap().keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                [
                    "check",
                    "count",
                    "detail",
                    "key",
                    "kind",
                    "position",
                    "projection",
                    "revision",
                    "stream",
                    "table"
                ]
            );
        }
    }

    #[test]
    fn hex_is_lowercase_and_exit_statuses_follow_the_spec() {
        assert_eq!(hex(&[0x00, 0x9f, 0xff]), "009fff");
        let dir = tempfile::tempdir().unwrap();
        let missing = existing_journal(&Layout::new(dir.path()), "audit").unwrap_err();
        assert_eq!(missing.exit_code(), EXIT_USAGE);
        assert!(
            missing.to_string().contains("holds no journal"),
            "{missing}"
        );
        let failed = CliError::AuditFailed {
            summary: "x".into(),
        };
        assert_eq!(failed.exit_code(), EXIT_INTEGRITY);
    }
}
