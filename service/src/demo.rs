//! `ctx demo`: opens (or reuses) a journal, appends to two streams, reads the records back, shows
//! an idempotent retry, a conflicting retry and a stale expected revision, and verifies the file.

use std::io::Write;

use ctx_journal::{
    AppendError, AppendOutcome, AppendedRecord, ExpectedRevision, Journal, NewRecord, OpenOptions,
    Record, StreamAppend, StreamHead, StreamId, Timestamp, VerifyReport,
};

use crate::data_dir::DataDir;
use crate::error::{CliError, EXIT_INTEGRITY};

/// What one demo run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    /// True when this run created the journal.
    pub created: bool,
    /// The head position before this run (0 for a new journal).
    pub head_before: u64,
    /// The head position after this run.
    pub head_after: u64,
    /// Records and streams counted by the final verification pass.
    pub verified_records: u64,
    pub verified_streams: u64,
}

struct DemoStream {
    label: String,
    id: StreamId,
}

impl DemoStream {
    fn new(namespace: &str, key: &str) -> Result<DemoStream, CliError> {
        let id = StreamId::derive(namespace, key.as_bytes())
            .map_err(|e| CliError::Unexpected(e.to_string()))?;
        Ok(DemoStream {
            label: format!("{namespace}/{key}"),
            id,
        })
    }
}

/// The expected revision that says "the stream is where I last saw it".
fn expected_from(head: Option<StreamHead>) -> ExpectedRevision {
    head.map_or(ExpectedRevision::NoStream, |h| {
        ExpectedRevision::Exact(h.revision)
    })
}

fn record_line(out: &mut dyn Write, label: &str, r: &AppendedRecord) -> std::io::Result<()> {
    writeln!(
        out,
        "    {label:<20} revision {:>3}  position {:>4}  digest {}",
        r.revision, r.position, r.digest
    )
}

fn read_line(out: &mut dyn Write, label: &str, r: &Record) -> std::io::Result<()> {
    writeln!(
        out,
        "    {label:<20} revision {:>3}  position {:>4}  {:<16} {:<28} {}",
        r.revision,
        r.position,
        r.kind,
        r.event_id,
        String::from_utf8_lossy(&r.payload)
    )
}

/// Checks that records read back are the ones the appends reported, digest for digest.
fn check_read_back(
    label: &str,
    read: &[Record],
    appended: &[AppendedRecord],
) -> Result<(), CliError> {
    let same = read.len() == appended.len()
        && read.iter().zip(appended).all(|(r, a)| {
            r.revision == a.revision && r.position == a.position && r.digest == a.digest
        });
    if same {
        Ok(())
    } else {
        Err(CliError::Integrity(format!(
            "{label}: the records read back are not the records appended ({read:?} vs \
             {appended:?})"
        )))
    }
}

/// Runs the demo against `dir`, stamping records with `now`, and prints each step to `out`.
pub fn run_demo(
    dir: &DataDir,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<DemoSummary, CliError> {
    writeln!(out, "ctx demo: the journal, step by step")?;
    writeln!(
        out,
        "data directory: {} ({})",
        dir.path.display(),
        dir.source
    )?;

    // 1. Open, creating the directory, installation key and database on first use.
    let journal = Journal::open(&dir.path, &OpenOptions::new())?;
    let head_before = journal.head_position()?;
    if journal.was_created() {
        writeln!(
            out,
            "1. open: created a new journal at {}",
            journal.data_dir().display()
        )?;
    } else {
        writeln!(
            out,
            "1. open: reused the existing journal at {} ({head_before} records)",
            journal.data_dir().display()
        )?;
    }
    match steps(&journal, head_before, now, out) {
        Ok(()) => {}
        Err(e) if e.exit_code() == EXIT_INTEGRITY => {
            // Say what is wrong with the file, not only which step tripped over it; the step's
            // own error is the one reported on stderr.
            writeln!(
                out,
                "   stopped by an integrity failure; running the verification pass"
            )?;
            if let Err(CliError::Output(io)) = verify(&journal, out) {
                return Err(CliError::Output(io));
            }
            return Err(e);
        }
        Err(e) => return Err(e),
    }
    let report = verify(&journal, out)?;
    let head_after = journal.head_position()?;
    writeln!(
        out,
        "done: head position {head_before} -> {head_after}; run it again to append more"
    )?;
    Ok(DemoSummary {
        created: journal.was_created(),
        head_before,
        head_after,
        verified_records: report.records,
        verified_streams: report.streams,
    })
}

/// Steps 2 to 7: appends, read-back, retry, conflict, stale revision.
fn steps(
    journal: &Journal,
    head_before: u64,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    // Event ids must be unique per run: derive them from the head position, which only grows.
    let run = head_before + 1;
    let id = |name: &str| format!("demo-{run}-{name}");
    writeln!(
        out,
        "   this run's event ids start with demo-{run}- (head position {head_before} + 1)"
    )?;

    let orders = DemoStream::new("demo.order", "order-1")?;
    let ledger = DemoStream::new("demo.ledger", "main")?;
    writeln!(out, "   streams: {} = {}", orders.label, orders.id)?;
    writeln!(out, "            {} = {}", ledger.label, ledger.id)?;

    // 2. A single append with an optimistic expected revision.
    let expected = expected_from(journal.stream_head(&orders.id)?);
    let placed = StreamAppend::new(
        orders.id,
        expected,
        vec![NewRecord::new(
            id("order-placed"),
            "order.placed",
            now,
            format!("{{\"order\":\"order-1\",\"item\":\"widget\",\"quantity\":2,\"run\":{run}}}"),
        )],
    );
    let first = journal.append(placed.clone())?;
    writeln!(
        out,
        "2. append to {} (expected {expected}): replayed = {}",
        orders.label, first.replayed
    )?;
    for r in &first.records {
        record_line(out, &orders.label, r)?;
    }

    // 3. One atomic commit across two streams.
    let ledger_expected = expected_from(journal.stream_head(&ledger.id)?);
    let batch = vec![
        StreamAppend::new(
            orders.id,
            ExpectedRevision::Exact(first.last_revision()),
            vec![NewRecord::new(
                id("order-paid"),
                "order.paid",
                now,
                format!("{{\"order\":\"order-1\",\"amount_cents\":1998,\"run\":{run}}}"),
            )],
        ),
        StreamAppend::new(
            ledger.id,
            ledger_expected,
            vec![NewRecord::new(
                id("ledger-credit"),
                "ledger.credited",
                now,
                format!("{{\"account\":\"sales\",\"amount_cents\":1998,\"run\":{run}}}"),
            )],
        ),
    ];
    let outcomes = journal.append_batch(batch)?;
    let [paid, credited]: [AppendOutcome; 2] =
        outcomes.try_into().map_err(|o: Vec<AppendOutcome>| {
            CliError::Unexpected(format!("{} outcomes for 2 streams", o.len()))
        })?;
    writeln!(
        out,
        "3. atomic batch: {} (expected revision {}) and {} (expected {ledger_expected}) in one commit",
        orders.label,
        first.last_revision(),
        ledger.label
    )?;
    record_line(out, &orders.label, &paid.records[0])?;
    record_line(out, &ledger.label, &credited.records[0])?;

    // 4. Read back, verified record by record (digest, MAC, chain link).
    let mut order_appended = first.records.clone();
    order_appended.extend_from_slice(&paid.records);
    let order_read = journal.read_stream(&orders.id, first.records[0].revision, 16)?;
    let ledger_read = journal.read_stream(&ledger.id, credited.records[0].revision, 16)?;
    check_read_back(&orders.label, &order_read, &order_appended)?;
    check_read_back(&ledger.label, &ledger_read, &credited.records)?;
    writeln!(
        out,
        "4. read back (each record's digest, MAC and chain link checked):"
    )?;
    for r in &order_read {
        read_line(out, &orders.label, r)?;
    }
    for r in &ledger_read {
        read_line(out, &ledger.label, r)?;
    }
    let global = journal.read_all(run, 16)?;
    let order: Vec<String> = global
        .iter()
        .map(|r| {
            let label = if r.stream == orders.id {
                &orders.label
            } else {
                &ledger.label
            };
            format!("{} {label}@{}", r.position, r.revision)
        })
        .collect();
    writeln!(
        out,
        "   global order from position {run}: {}",
        order.join(", ")
    )?;

    // 5. An idempotent retry: the same append again, although its expected revision is now stale.
    let retry = journal.append(placed.clone())?;
    if !retry.replayed || retry.records != first.records {
        return Err(CliError::Unexpected(format!(
            "a retry of {} was not answered with the original result: {retry:?}",
            placed.records[0].event_id
        )));
    }
    let r = &retry.records[0];
    writeln!(
        out,
        "5. retry of {} (same content): replayed = {}, revision {}, position {}, digest {} \
         (the original result; nothing written)",
        placed.records[0].event_id, retry.replayed, r.revision, r.position, r.digest
    )?;

    // 6. The same event id with other content is a typed conflict.
    let mut altered = placed.clone();
    altered.records[0].payload = b"{\"order\":\"order-1\",\"quantity\":3}".to_vec();
    refused(
        out,
        "6. same event id, other content",
        journal.append(altered),
        |e| matches!(e, AppendError::Conflict { .. }),
    )?;

    // 7. A stale expected revision is refused and reports the current head.
    let stale = StreamAppend::new(
        orders.id,
        ExpectedRevision::Exact(first.last_revision()),
        vec![NewRecord::new(
            id("order-cancelled"),
            "order.cancelled",
            now,
            "{}",
        )],
    );
    refused(
        out,
        &format!(
            "7. append to {} expecting revision {}",
            orders.label,
            first.last_revision()
        ),
        journal.append(stale),
        |e| matches!(e, AppendError::WrongRevision { .. }),
    )?;

    Ok(())
}

/// Step 8: the full verification pass; findings are an integrity failure.
fn verify(journal: &Journal, out: &mut dyn Write) -> Result<VerifyReport, CliError> {
    let report = journal.verify()?;
    if !report.is_ok() {
        writeln!(
            out,
            "8. verify: FAILED ({} records in {} streams)",
            report.records, report.streams
        )?;
        for f in &report.failures {
            let place = match (f.stream, f.revision, f.position) {
                (Some(s), Some(r), Some(p)) => format!(" at stream {s} revision {r} position {p}"),
                (_, _, Some(p)) => format!(" at position {p}"),
                _ => String::new(),
            };
            writeln!(out, "    {} ({}x){place}: {}", f.kind, f.count, f.detail)?;
        }
        return Err(CliError::VerifyFailed(report));
    }
    writeln!(
        out,
        "8. verify: ok, {} records in {} streams, no integrity failures",
        report.records, report.streams
    )?;
    Ok(report)
}

/// Prints an append's expected refusal; any other result is a demo failure.
fn refused<T: std::fmt::Debug>(
    out: &mut dyn Write,
    what: &str,
    result: Result<T, AppendError>,
    expected: impl Fn(&AppendError) -> bool,
) -> Result<(), CliError> {
    match result {
        Err(e) if expected(&e) => {
            writeln!(out, "{what}: refused, as it should be:")?;
            writeln!(out, "    {e}")?;
            Ok(())
        }
        Err(e) => Err(e.into()),
        Ok(v) => Err(CliError::Unexpected(format!(
            "{what}: accepted, but should be refused: {v:?}"
        ))),
    }
}
