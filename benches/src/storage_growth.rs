//! `ctx-bench storage-growth`: what the hook path leaves on disk and what a large journal costs to
//! audit and to reopen after a crash (spec/storage-growth.md; spec/journal.md §10).
//!
//! One data directory lives through `--prompts` prompts in sessions of [`PROMPTS_PER_SESSION`]:
//! each session is a `session-start`, its prompts (`user-prompt-submit`, each followed by a
//! `tool-outcome` of a Bash call) and a `session-end`, every one a fresh `ctx hook claude …`
//! process as Claude Code starts them. Nobody answers the consents the prompts ask for. Then:
//!
//! - **bytes**: the journal file, the pages redb holds in it (allocated) and the key and value bytes
//!   of every table (stored), per prompt; and the file after `ctx compact`;
//! - **audit**: `ctx audit`'s wall time and peak resident memory (`VmHWM` of its process, sampled
//!   every [`RSS_SAMPLE_MS`] ms);
//! - **reopen after kill -9**: a prompt hook is killed at several points of its run, then the next
//!   open of the journal is timed in this process ([`ctx_journal::Journal::open`], which repairs
//!   redb's file and authenticates the unmerged tail) and so is the next prompt hook.
//!
//! Figures only: nothing here asserts a speed or a size.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use redb::{ReadableDatabase, ReadableTableMetadata};
use serde_json::{Value, json};

use crate::BenchResult;
use crate::hook_latency::{PROMPTS, World, check_exit, hook_run, timed, without_digests};

/// Prompts when neither `--prompts` nor [`PROMPTS_ENV`] says otherwise (the size).
pub const DEFAULT_PROMPTS: usize = 2_000;
/// Prompts of the smoke mode (`--test`).
pub const SMOKE_PROMPTS: usize = 12;
/// Environment variable naming the number of prompts.
pub const PROMPTS_ENV: &str = "CTX_BENCH_STORAGE_PROMPTS";
/// Prompts per session.
pub const PROMPTS_PER_SESSION: usize = 20;
/// How often the audit's resident memory is sampled.
pub const RSS_SAMPLE_MS: u64 = 5;
/// When each killed prompt hook is killed, after its spawn.
const KILL_AFTER_MS: &[u64] = &[15, 30, 45, 60, 90];

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    pub ctx: PathBuf,
    pub prompts: usize,
    /// Where the data directory lives (a disk).
    pub dir: PathBuf,
    /// Keep the world's directory after the run (for `ctx export` and a closer look).
    pub keep: bool,
    /// After the prompts, append incompressible padding records through the journal API until
    /// the file is this large, so that the audit, the kills and the reopen meet a journal of that
    /// size (the per-prompt figures are taken before padding).
    pub pad_to_bytes: Option<u64>,
}

/// One padding record's payload: incompressible, so every record adds its size to the file.
const PAD_PAYLOAD_BYTES: usize = 16 * 1024;
/// Padding records per append (one stream each, within the journal's batch limits).
const PAD_BATCH_RECORDS: usize = 64;

/// One table's share.
#[derive(Debug, Clone, Default)]
pub struct TableBytes {
    pub entries: u64,
    pub stored: u64,
    pub fragmented: u64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub prompts: usize,
    pub hook_runs: usize,
    pub records: u64,
    pub file_bytes: u64,
    pub allocated_bytes: u64,
    pub stored_bytes: u64,
    pub compacted_file_bytes: u64,
    /// `proj.query.counts` (spec/projections.md §7.5): queries registered and retired, desired
    /// sets reserved and committed; the capacities bound the differences.
    pub query_counts: BTreeMap<String, u64>,
    pub tables: BTreeMap<String, TableBytes>,
    /// Each distinct `systemMessage` the prompts answered (digests elided) with its count.
    pub system_messages: BTreeMap<String, usize>,
    pub build_wall: Duration,
    pub audit_wall: Duration,
    pub audit_exit: i32,
    pub audit_peak_rss_bytes: u64,
    /// In-process `Journal::open` after each kill.
    pub reopen_after_kill: Vec<Duration>,
    /// The next prompt hook's wall time after each kill, and a prompt's on the clean journal.
    pub hook_after_kill: Vec<Duration>,
    pub hook_clean: Vec<Duration>,
    /// Padding records appended and the file size after them (0 without `--pad-to-mb`).
    pub padded_records: u64,
    pub padded_file_bytes: u64,
    /// Records past the event-id index checkpoint when the padding reached its size, and after
    /// the small records that force a merge.
    pub unmerged_before_merge: u64,
    pub unmerged_after_merge: u64,
}

fn per_prompt(bytes: u64, prompts: usize) -> f64 {
    bytes as f64 / prompts.max(1) as f64 / 1000.0
}

fn median(v: &[Duration]) -> Option<Duration> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.1}", d.as_secs_f64() * 1e3),
    )
}

impl Report {
    pub fn markdown(&self) -> String {
        let mb = |b: u64| b as f64 / 1e6;
        let mut out = format!(
            "storage growth: {} prompts ({} hook runs, {:.0} s), {} records\n\n\
             | measure | total MB | KB per prompt |\n| --- | --- | --- |\n\
             | journal file | {:.1} | {:.1} |\n| allocated pages | {:.1} | {:.1} |\n\
             | stored (keys + values) | {:.1} | {:.1} |\n| file after `ctx compact` | {:.1} | {:.1} |\n\n\
             | table | entries per prompt | stored KB per prompt | fragmented KB per prompt |\n\
             | --- | --- | --- | --- |\n",
            self.prompts,
            self.hook_runs,
            self.build_wall.as_secs_f64(),
            self.records,
            mb(self.file_bytes),
            per_prompt(self.file_bytes, self.prompts),
            mb(self.allocated_bytes),
            per_prompt(self.allocated_bytes, self.prompts),
            mb(self.stored_bytes),
            per_prompt(self.stored_bytes, self.prompts),
            mb(self.compacted_file_bytes),
            per_prompt(self.compacted_file_bytes, self.prompts),
        );
        let mut tables: Vec<_> = self.tables.iter().collect();
        tables.sort_by_key(|(_, t)| std::cmp::Reverse(t.stored));
        for (name, t) in tables {
            out.push_str(&format!(
                "| `{name}` | {:.2} | {:.2} | {:.2} |\n",
                t.entries as f64 / self.prompts.max(1) as f64,
                per_prompt(t.stored, self.prompts),
                per_prompt(t.fragmented, self.prompts),
            ));
        }
        if self.padded_records > 0 {
            out.push_str(&format!(
                "\npadded with {} records to a {:.1} MB file before the audit and the kills \
                 (unmerged event ids: {} at the size, {} after the forced merge)\n",
                self.padded_records,
                mb(self.padded_file_bytes),
                self.unmerged_before_merge,
                self.unmerged_after_merge,
            ));
        }
        out.push_str(&format!(
            "\n`ctx audit`: exit {}, {:.2} s, peak RSS {:.1} MiB\n\
             reopen after kill -9 (in-process open, {} kills): median {} ms, max {} ms\n\
             next prompt hook after kill -9: median {} ms; on a clean journal: median {} ms\n",
            self.audit_exit,
            self.audit_wall.as_secs_f64(),
            self.audit_peak_rss_bytes as f64 / (1024.0 * 1024.0),
            self.reopen_after_kill.len(),
            ms(median(&self.reopen_after_kill)),
            ms(self.reopen_after_kill.iter().max().copied()),
            ms(median(&self.hook_after_kill)),
            ms(median(&self.hook_clean)),
        ));
        let count = |name: &str| self.query_counts.get(name).copied().unwrap_or(0);
        out.push_str(&format!(
            "managed queries: {} registered, {} live; desired sets: {} reserved, {} pending\n",
            count("queries"),
            count("queries").saturating_sub(count("queries_retired")),
            count("desired_sets"),
            count("desired_sets").saturating_sub(count("desired_sets_committed")),
        ));
        for (message, count) in &self.system_messages {
            out.push_str(&format!("  {count} x systemMessage: {message}\n"));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let list = |v: &[Duration]| v.iter().map(|d| d.as_micros() as u64).collect::<Vec<_>>();
        json!({
            "schema": "ctx.bench-storage-growth-v1",
            "prompts": self.prompts,
            "hook_runs": self.hook_runs,
            "records": self.records,
            "file_bytes": self.file_bytes,
            "allocated_bytes": self.allocated_bytes,
            "stored_bytes": self.stored_bytes,
            "compacted_file_bytes": self.compacted_file_bytes,
            "padded_records": self.padded_records,
            "padded_file_bytes": self.padded_file_bytes,
            "unmerged_before_merge": self.unmerged_before_merge,
            "unmerged_after_merge": self.unmerged_after_merge,
            "tables": self.tables.iter().map(|(name, t)| (name.clone(), json!({
                "entries": t.entries, "stored": t.stored, "fragmented": t.fragmented,
            }))).collect::<serde_json::Map<_, _>>(),
            "system_messages": self.system_messages,
            "query_counts": self.query_counts,
            "build_wall_ms": self.build_wall.as_millis() as u64,
            "audit_wall_ms": self.audit_wall.as_millis() as u64,
            "audit_exit": self.audit_exit,
            "audit_peak_rss_bytes": self.audit_peak_rss_bytes,
            "reopen_after_kill_us": list(&self.reopen_after_kill),
            "hook_after_kill_us": list(&self.hook_after_kill),
            "hook_clean_us": list(&self.hook_clean),
        })
    }
}

/// Runs one non-prompt hook event of Claude Code (`session-start`, `tool-outcome`,
/// `session-end`) and checks it exits 0.
fn event(ctx: &Path, world: &World, session: &str, event: &str, fields: Value) -> BenchResult<()> {
    let host_event = match event {
        "session-start" => "SessionStart",
        "tool-outcome" => "PostToolUse",
        _ => "SessionEnd",
    };
    let mut input = json!({
        "session_id": session,
        "transcript_path": world.home.join(format!("{session}.jsonl")).display().to_string(),
        "cwd": world.project.display().to_string(),
        "permission_mode": "default",
        "hook_event_name": host_event,
    });
    if let (Some(input), Value::Object(extra)) = (input.as_object_mut(), fields) {
        input.extend(extra);
    }
    let (_, output) = timed(
        &mut world.ctx(ctx, &["hook", "claude", event]),
        input.to_string().as_bytes(),
    )?;
    check_exit(&format!("ctx hook claude {event}"), &output)
}

/// Appends incompressible records (kind `ctx.bench-padding.v1`, which no projection reads) until
/// `file` is at least `target` bytes, then small ones until the journal has just merged its
/// event-id index (spec/journal.md §4), so that the reopen after a kill measures redb's repair
/// and not the open's authentication of up to `EVENT_INDEX_MERGE_RECORDS` unmerged records
/// (reported separately as `unmerged_before_merge`). Returns (padding records, unmerged records
/// before the forced merge, unmerged records after it).
fn pad(journal_dir: &Path, file: &Path, target: u64) -> BenchResult<(u64, u64, u64)> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    };
    let mut appended = 0u64;
    let mut batch = 0u64;
    let mut append = |journal: &ctx_journal::Journal,
                      count: usize,
                      len: usize,
                      noise: &mut dyn FnMut(usize) -> Vec<u8>|
     -> BenchResult<()> {
        let records = (0..count)
            .map(|i| {
                ctx_journal::NewRecord::new(
                    format!("pad-{batch}-{i}"),
                    "ctx.bench-padding.v1",
                    ctx_journal::Timestamp(0),
                    noise(len),
                )
            })
            .collect();
        let stream = ctx_journal::StreamId::derive("ctx.bench-padding", &batch.to_le_bytes())?;
        journal.append_batch(vec![ctx_journal::StreamAppend::new(
            stream,
            ctx_journal::ExpectedRevision::NoStream,
            records,
        )])?;
        appended += count as u64;
        batch += 1;
        Ok(())
    };
    let options = ctx_journal::OpenOptions::new();
    let journal = ctx_journal::Journal::open(journal_dir, &options)?;
    while std::fs::metadata(file)?.len() < target {
        append(&journal, PAD_BATCH_RECORDS, PAD_PAYLOAD_BYTES, &mut noise)?;
    }
    let head = journal.head_position()?;
    drop(journal);
    let unmerged_before = head + 1 - event_index_upto(file)?;
    let journal = ctx_journal::Journal::open(journal_dir, &options)?;
    let mut missing = ctx_journal::EVENT_INDEX_MERGE_RECORDS.saturating_sub(unmerged_before);
    while missing > 0 {
        let count = missing.min(1000) as usize;
        append(&journal, count, 64, &mut noise)?;
        missing -= count as u64;
    }
    let head = journal.head_position()?;
    drop(journal);
    let unmerged_after = head + 1 - event_index_upto(file)?;
    Ok((appended, unmerged_before, unmerged_after))
}

/// `event_index_upto` of a closed journal's meta (spec/journal.md §4): every record below it is
/// in the event-id index, the others are authenticated by every open.
fn event_index_upto(file: &Path) -> BenchResult<u64> {
    const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("journal.meta");
    let db = redb::Database::open(file)?;
    let txn = db.begin_read()?;
    let meta = txn.open_table(META)?;
    let value = meta
        .get("event_index_upto")?
        .ok_or("the journal has no event_index_upto")?;
    Ok(u64::from_le_bytes(value.value().try_into()?))
}

/// The peak resident memory of a process's life so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Table sizes of the journal file (closed by every `ctx` process by now).
fn table_bytes(file: &Path, report: &mut Report) -> BenchResult<()> {
    let db = redb::Database::builder()
        .set_cache_size(ctx_journal::REDB_CACHE_MAX_BYTES)
        .open(file)?;
    // Allocated pages are a write transaction's statistic; it is aborted, nothing is written.
    let write = db.begin_write()?;
    let stats = write.stats()?;
    report.allocated_bytes = stats.allocated_pages() * stats.page_size() as u64;
    write.abort()?;
    let read = db.begin_read()?;
    for handle in read.list_tables()? {
        let table = read.open_untyped_table(handle)?;
        let s = table.stats()?;
        report.stored_bytes += s.stored_bytes();
        report.tables.insert(
            redb::TableHandle::name(&table).to_owned(),
            TableBytes {
                entries: table.len()?,
                stored: s.stored_bytes(),
                fragmented: s.fragmented_bytes(),
            },
        );
    }
    let counts: redb::TableDefinition<&[u8], &[u8]> =
        redb::TableDefinition::new("proj.query.counts");
    if let Ok(table) = read.open_table(counts) {
        for name in [
            "queries",
            "queries_retired",
            "desired_sets",
            "desired_sets_committed",
        ] {
            let value = table
                .get(name.as_bytes())?
                .and_then(|v| <[u8; 8]>::try_from(v.value()).ok().map(u64::from_le_bytes));
            if let Some(value) = value {
                report.query_counts.insert(name.to_owned(), value);
            }
        }
    }
    report.records = report
        .tables
        .get("journal.records")
        .map_or(0, |t| t.entries);
    Ok(())
}

/// Measures as `config` says.
pub fn run(config: &Config) -> BenchResult<Report> {
    if config.prompts == 0 {
        return Err("at least one prompt is needed".into());
    }
    let ctx = std::fs::canonicalize(&config.ctx)
        .map_err(|e| format!("the ctx binary {}: {e}", config.ctx.display()))?;
    let world = World::new(&config.dir, None)?;
    let mut report = Report {
        prompts: config.prompts,
        ..Report::default()
    };
    let started = Instant::now();
    let sessions = config.prompts.div_ceil(PROMPTS_PER_SESSION);
    for s in 0..sessions {
        let session = format!("growth-{s}");
        event(
            &ctx,
            &world,
            &session,
            "session-start",
            json!({"source": "startup"}),
        )?;
        report.hook_runs += 1;
        let first = s * PROMPTS_PER_SESSION;
        for i in first..(first + PROMPTS_PER_SESSION).min(config.prompts) {
            let prompt = format!("{} {i}", PROMPTS[i % PROMPTS.len()]);
            let (_, reply) = hook_run(&ctx, &world, &session, &prompt)?;
            if let Some(message) = reply
                .as_ref()
                .and_then(|r| r.get("systemMessage"))
                .and_then(Value::as_str)
            {
                *report
                    .system_messages
                    .entry(without_digests(message))
                    .or_default() += 1;
            }
            event(
                &ctx,
                &world,
                &session,
                "tool-outcome",
                json!({
                    "tool_name": "Bash",
                    "tool_input": {"command": "cargo test"},
                    "tool_use_id": format!("toolu_{i}"),
                    "tool_response": {"stdout": "ok", "stderr": "", "interrupted": false},
                }),
            )?;
            report.hook_runs += 2;
        }
        event(
            &ctx,
            &world,
            &session,
            "session-end",
            json!({"reason": "other"}),
        )?;
        report.hook_runs += 1;
    }
    report.build_wall = started.elapsed();
    let journal_dir = world.data.join("journal");
    let file = journal_dir.join(ctx_journal::DATABASE_FILE);
    report.file_bytes = std::fs::metadata(&file)?.len();
    table_bytes(&file, &mut report)?;
    if let Some(target) = config.pad_to_bytes {
        (
            report.padded_records,
            report.unmerged_before_merge,
            report.unmerged_after_merge,
        ) = pad(&journal_dir, &file, target)?;
        report.padded_file_bytes = std::fs::metadata(&file)?.len();
    }

    // The audit, its memory sampled while it runs.
    let started = Instant::now();
    let mut audit = world
        .ctx(&ctx, &["audit"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let status = loop {
        if let Some(rss) = peak_rss(audit.id()) {
            report.audit_peak_rss_bytes = report.audit_peak_rss_bytes.max(rss);
        }
        if let Some(status) = audit.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(RSS_SAMPLE_MS));
    };
    report.audit_wall = started.elapsed();
    report.audit_exit = status.code().unwrap_or(-1);

    // Reopen after kill -9, at several points of a prompt hook's run.
    let session = "killed";
    for (k, after) in KILL_AFTER_MS.iter().enumerate() {
        let (clean, _) = hook_run(&ctx, &world, session, &format!("{} clean {k}", PROMPTS[1]))?;
        report.hook_clean.push(clean);
        let input = world.hook_input(session, &format!("{} killed {k}", PROMPTS[0]))?;
        let mut child = world
            .ctx(&ctx, &["hook", "claude", "user-prompt-submit"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            use std::io::Write as _;
            // A child killed before it reads closes the pipe; that is not a failure here.
            let _ = stdin.write_all(&input);
        }
        std::thread::sleep(Duration::from_millis(*after));
        child.kill()?;
        child.wait()?;
        let started = Instant::now();
        let journal = ctx_journal::Journal::open(&journal_dir, &ctx_journal::OpenOptions::new())?;
        report.reopen_after_kill.push(started.elapsed());
        drop(journal);
        // The open above repaired the file; kill again so the hook meets an unclean file too.
        let mut again = world
            .ctx(&ctx, &["hook", "claude", "user-prompt-submit"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        if let Some(mut stdin) = again.stdin.take() {
            use std::io::Write as _;
            let _ = stdin.write_all(&input);
        }
        std::thread::sleep(Duration::from_millis(*after));
        again.kill()?;
        again.wait()?;
        let (wall, _) = hook_run(&ctx, &world, session, &format!("{} after {k}", PROMPTS[2]))?;
        report.hook_after_kill.push(wall);
    }

    let compacted = world
        .ctx(&ctx, &["compact"])
        .stdin(Stdio::null())
        .output()?;
    check_exit("ctx compact", &compacted)?;
    report.compacted_file_bytes = std::fs::metadata(&file)?.len();
    if config.keep {
        eprintln!("kept the run's directory {}", world.keep().display());
    }
    Ok(report)
}

/// Prompts: `--prompts` if given, else [`PROMPTS_ENV`], else [`DEFAULT_PROMPTS`].
pub fn prompts_from(arg: Option<usize>) -> BenchResult<usize> {
    if let Some(n) = arg {
        return Ok(n);
    }
    match std::env::var(PROMPTS_ENV) {
        Ok(text) => text
            .parse()
            .map_err(|_| format!("{PROMPTS_ENV}={text:?} is not a number of prompts").into()),
        Err(_) => Ok(DEFAULT_PROMPTS),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The smoke mode: a few prompts against this profile's `ctx` binary prove the harness runs
    /// end to end and that it reads what it says it reads. Figures are printed, not judged.
    #[test]
    fn the_smoke_run_measures_a_real_journal() {
        let ctx = crate::hook_latency::build_ctx(&crate::target_dir(), false).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let report = run(&Config {
            ctx,
            prompts: SMOKE_PROMPTS,
            dir: dir.path().to_path_buf(),
            keep: false,
            pad_to_bytes: Some(8 * 1000 * 1000),
        })
        .unwrap();
        println!("{}", report.markdown());
        assert_eq!(report.audit_exit, 0, "{}", report.markdown());
        assert_eq!(report.hook_after_kill.len(), KILL_AFTER_MS.len());
        assert!(report.records > 0);
        assert!(report.tables.contains_key("journal.records"));
        assert!(report.stored_bytes <= report.allocated_bytes);
        assert!(report.allocated_bytes <= report.file_bytes);
        assert!(report.audit_peak_rss_bytes > 0);
        // The padding reached its size and the audit (exit 0 above) accepted its records.
        assert!(report.padded_records > 0);
        assert!(report.padded_file_bytes >= 8 * 1000 * 1000);
        assert!(report.file_bytes < report.padded_file_bytes);
    }
}
