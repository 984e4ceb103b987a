//! Failover (issue item 6): a primary and a synchronous standby on loopback; `kill -9` of the
//! primary while several writers append, promotion of the standby, then every acknowledged append
//! must be on the promoted standby exactly as acknowledged and the chains must verify. Appends
//! whose answer was `MaybeCommitted` (or `NotCommitted`) are retried there with the same event ids
//! and content and must end up written exactly once (spec/scale-out.md §4).
//!
//! Size: the primary is killed once the writers have `$CTX_FAILOVER_APPENDS` acknowledged appends
//! (default 250), or after 1.5 s when the variable is unset (120 s when it is set).
//!
//! Without PostgreSQL's binaries the test prints a `skipped:` line and passes, unless
//! `CTX_REQUIRE_PG=1`, which makes it fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::env;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ctx_journal::{
    AppendError, AppendOutcome, AppendedRecord, ExpectedRevision, Journal, NewRecord, OpenOptions,
    Record, StreamAppend, StreamId, Timestamp,
};
use ctx_journal_pg::{Cluster, ClusterOptions, PgBackend, gate};
use postgres::{Client, NoTls};

/// Writer threads, each with its own journal handle and connections (like separate processes).
const WRITERS: usize = 3;
/// Streams of each writer's own; every writer also appends to the shared ones.
const OWN_STREAMS: usize = 3;
const SHARED_STREAMS: usize = 2;
const DEFAULT_APPENDS: usize = 250;
const DEFAULT_BUDGET: Duration = Duration::from_millis(1500);
/// The budget when `$CTX_FAILOVER_APPENDS` asks for a size: the count decides, this only bounds.
const SIZED_BUDGET: Duration = Duration::from_secs(120);
/// The bound of every wait for the writers.
const WAIT: Duration = Duration::from_secs(30);
/// Acknowledged appends per writer retried on the promoted standby (the last ones before the kill).
const ACKED_RETRIES_PER_WRITER: usize = 5;

/// What an append was answered.
#[derive(Debug)]
enum Answer {
    Acked(Vec<AppendOutcome>),
    MaybeCommitted(String),
    NotCommitted(String),
    /// Any other error: its outcome is treated as unknown, and it is reported.
    Other(String),
}

impl Answer {
    /// The error's reason (empty for an acknowledgement).
    fn reason(&self) -> &str {
        match self {
            Answer::Acked(_) => "",
            Answer::MaybeCommitted(reason)
            | Answer::NotCommitted(reason)
            | Answer::Other(reason) => reason,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Answer::Acked(_) => "acknowledged",
            Answer::MaybeCommitted(_) => "maybe-committed",
            Answer::NotCommitted(_) => "not-committed",
            Answer::Other(_) => "other-error",
        }
    }
}

/// One append of one writer and its answer.
#[derive(Debug)]
struct Attempt {
    writer: usize,
    seq: usize,
    batch: Vec<StreamAppend>,
    answer: Answer,
    answered_at: Instant,
}

impl Attempt {
    fn event_ids(&self) -> impl Iterator<Item = &str> {
        self.batch
            .iter()
            .flat_map(|part| part.records.iter().map(|r| r.event_id.as_str()))
    }

    fn records(&self) -> usize {
        self.batch.iter().map(|part| part.records.len()).sum()
    }

    fn name(&self) -> String {
        format!("append {} of writer {}", self.seq, self.writer)
    }
}

fn stream(name: &str) -> StreamId {
    StreamId::derive("failover", name.as_bytes()).unwrap()
}

fn own_stream(writer: usize, k: usize) -> StreamId {
    stream(&format!("w{writer}-s{}", k % OWN_STREAMS))
}

fn shared_stream(k: usize) -> StreamId {
    stream(&format!("shared-{}", k % SHARED_STREAMS))
}

fn new_record(writer: usize, seq: usize, part: usize, i: usize) -> NewRecord {
    let event_id = format!("w{writer}-{seq}-{part}-{i}");
    let payload = format!("{event_id}:{}", "x".repeat((seq * 7 + i) % 40)).into_bytes();
    let kind = if part == 0 && i == 0 {
        "failover.first"
    } else {
        "failover.more"
    };
    NewRecord::new(
        event_id,
        kind,
        Timestamp(1_700_000_000_000_000 + seq as i64),
        payload,
    )
}

/// Append `seq` of `writer`: two of three are a single record (on an own or a shared stream), the
/// third a batch over two or three streams (two records on an own stream, one on a shared one,
/// sometimes one on another own stream).
fn batch_for(writer: usize, seq: usize) -> Vec<StreamAppend> {
    let any = ExpectedRevision::Any;
    match seq % 3 {
        0 => vec![StreamAppend::new(
            own_stream(writer, seq / 3),
            any,
            vec![new_record(writer, seq, 0, 0)],
        )],
        1 => vec![StreamAppend::new(
            shared_stream(seq / 3),
            any,
            vec![new_record(writer, seq, 0, 0)],
        )],
        _ => {
            let k = seq / 3;
            let mut batch = vec![
                StreamAppend::new(
                    own_stream(writer, k),
                    any,
                    vec![new_record(writer, seq, 0, 0), new_record(writer, seq, 0, 1)],
                ),
                StreamAppend::new(shared_stream(k), any, vec![new_record(writer, seq, 1, 0)]),
            ];
            if k % 2 == 1 {
                batch.push(StreamAppend::new(
                    own_stream(writer, k + 1),
                    any,
                    vec![new_record(writer, seq, 2, 0)],
                ));
            }
            batch
        }
    }
}

fn append(journal: &Journal, batch: Vec<StreamAppend>) -> Result<Vec<AppendOutcome>, AppendError> {
    if batch.len() == 1 {
        let part = batch.into_iter().next().unwrap();
        journal.append(part).map(|outcome| vec![outcome])
    } else {
        journal.append_batch(batch)
    }
}

fn open(url: &str, dir: &Path) -> Journal {
    let backend = PgBackend::connect(url).unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    Journal::open_with_backend(dir, &OpenOptions::new(), Arc::new(backend))
        .unwrap_or_else(|e| panic!("open the journal at {url}: {e}"))
}

/// Appends until an append fails (the kill) or `stop` is set; every answer is kept.
fn write_until_failure(
    writer: usize,
    journal: &Journal,
    stop: &AtomicBool,
    acked: &AtomicUsize,
) -> Vec<Attempt> {
    let mut attempts = Vec::new();
    for seq in 0.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let batch = batch_for(writer, seq);
        let answer = match append(journal, batch.clone()) {
            Ok(outcomes) => {
                acked.fetch_add(1, Ordering::AcqRel);
                Answer::Acked(outcomes)
            }
            Err(AppendError::MaybeCommitted { reason }) => Answer::MaybeCommitted(reason),
            Err(AppendError::NotCommitted { reason }) => Answer::NotCommitted(reason),
            Err(e) => Answer::Other(format!("{e} ({e:?})")),
        };
        let failed = !matches!(answer, Answer::Acked(_));
        attempts.push(Attempt {
            writer,
            seq,
            batch,
            answer,
            answered_at: Instant::now(),
        });
        if failed {
            break;
        }
    }
    attempts
}

/// Every record in position order, checked dense from 1 (the scan also checks it) and against the
/// head position; and the records by event id, each id once.
fn all_records(journal: &Journal) -> (Vec<Record>, HashMap<String, Record>) {
    let records = journal.read_all(1, usize::MAX).unwrap();
    for (i, record) in records.iter().enumerate() {
        assert_eq!(
            record.position,
            i as u64 + 1,
            "positions are not 1..N without a gap: record {} is at {}",
            record.event_id,
            record.position
        );
    }
    assert_eq!(journal.head_position().unwrap(), records.len() as u64);
    let mut by_id = HashMap::new();
    for record in &records {
        let previous = by_id.insert(record.event_id.clone(), record.clone());
        assert!(
            previous.is_none(),
            "event {} is stored twice: at positions {} and {}",
            record.event_id,
            previous.map_or(0, |r| r.position),
            record.position
        );
    }
    (records, by_id)
}

fn assert_verifies(journal: &Journal, records: usize) {
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "verify found: {:#?}", report.failures);
    assert_eq!(report.records, records as u64);
}

/// The stored record of `new` in `part`, checked to hold `new`'s content.
fn stored<'a>(
    by_id: &'a HashMap<String, Record>,
    part: &StreamAppend,
    new: &NewRecord,
    what: &str,
) -> Option<&'a Record> {
    let record = by_id.get(&new.event_id)?;
    assert_eq!(
        (
            &record.stream,
            &record.kind,
            record.occurred_at,
            &record.payload
        ),
        (&part.stream, &new.kind, new.occurred_at, &new.payload),
        "{what}: event {} is stored with other content",
        new.event_id
    );
    Some(record)
}

fn appended(record: &Record) -> AppendedRecord {
    AppendedRecord {
        revision: record.revision,
        position: record.position,
        digest: record.digest,
    }
}

#[test]
fn every_acknowledged_append_survives_kill_9_of_the_primary_and_promotion() {
    let test = "every_acknowledged_append_survives_kill_9_of_the_primary_and_promotion";
    if !gate(test, Cluster::binaries().map(drop)).unwrap_or_else(|e| panic!("{e}")) {
        return;
    }
    let (target, budget) = match env::var("CTX_FAILOVER_APPENDS") {
        Ok(n) if !n.is_empty() => (
            n.parse::<usize>()
                .unwrap_or_else(|e| panic!("CTX_FAILOVER_APPENDS={n:?}: {e}")),
            SIZED_BUDGET,
        ),
        _ => (DEFAULT_APPENDS, DEFAULT_BUDGET),
    };
    let started = Instant::now();
    let primary = Cluster::start(ClusterOptions::new().with_replication(true)).unwrap();
    let standby = primary.start_sync_standby().unwrap();
    let set_up = started.elapsed();

    let mut on_primary = Client::connect(&primary.url(), NoTls).unwrap();
    let replication: Vec<(Option<String>, Option<String>)> = on_primary
        .query(
            "select application_name, sync_state from pg_stat_replication",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        replication,
        [(Some("s1".to_owned()), Some("sync".to_owned()))],
        "the standby must be the primary's one synchronous standby"
    );
    for (name, value) in [("synchronous_commit", "on"), ("fsync", "on")] {
        let shown: String = on_primary
            .query_one(&format!("show {name}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(shown, value, "{name}");
    }
    drop(on_primary);

    // The installation key and the schema, before any writer opens.
    let key_dir = tempfile::tempdir().unwrap();
    drop(open(&primary.url(), key_dir.path()));

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let (done, results) = mpsc::channel();
    // Opened here, so that a failure to connect fails the test rather than a thread.
    let journals: Vec<Journal> = (0..WRITERS)
        .map(|_| open(&primary.url(), key_dir.path()))
        .collect();
    for (writer, journal) in journals.into_iter().enumerate() {
        let (stop, acked, done) = (stop.clone(), acked.clone(), done.clone());
        thread::spawn(move || {
            let attempts = write_until_failure(writer, &journal, &stop, &acked);
            let _ = done.send(attempts);
        });
    }
    drop(done);
    let writing = Instant::now();
    while acked.load(Ordering::Acquire) < target && writing.elapsed() < budget {
        thread::sleep(Duration::from_millis(2));
    }
    let acked_at_kill = acked.load(Ordering::Acquire);
    let kill_sent = Instant::now();
    primary.kill9().unwrap();
    stop.store(true, Ordering::Release);
    let mut attempts: Vec<Attempt> = Vec::new();
    for _ in 0..WRITERS {
        let deadline = kill_sent + WAIT;
        let wait = deadline.saturating_duration_since(Instant::now());
        let finished = results.recv_timeout(wait).unwrap_or_else(|e| {
            panic!("a writer did not stop within {WAIT:?} of the kill (or panicked): {e}")
        });
        attempts.extend(finished);
    }
    let writers_stopped = kill_sent.elapsed();
    assert!(
        acked_at_kill > 0,
        "no append was acknowledged before the kill"
    );
    for attempt in &attempts {
        if !matches!(attempt.answer, Answer::Acked(_)) {
            assert!(
                attempt.answered_at >= kill_sent,
                "{} failed before the primary was killed: {}: {}",
                attempt.name(),
                attempt.answer.kind(),
                attempt.answer.reason()
            );
        }
    }

    let promoting = Instant::now();
    standby.promote().unwrap();
    let promoted_in = promoting.elapsed();
    let journal = open(&standby.url(), key_dir.path());

    // Before any retry: every acknowledged append is there as acknowledged.
    let (before, by_id) = all_records(&journal);
    assert_verifies(&journal, before.len());
    let mut streams: BTreeMap<StreamId, Vec<Record>> = BTreeMap::new();
    for record in &before {
        streams.entry(record.stream).or_default();
    }
    for (id, records) in &mut streams {
        *records = journal.read_stream(id, 1, usize::MAX).unwrap();
        for (i, record) in records.iter().enumerate() {
            assert_eq!(
                record.revision,
                i as u64 + 1,
                "stream {id} has a revision gap"
            );
            assert_eq!(Some(record), by_id.get(&record.event_id));
        }
    }
    let mut acked_appends = 0;
    let mut acked_after_kill = 0;
    let mut acked_records = 0;
    for attempt in &attempts {
        let Answer::Acked(outcomes) = &attempt.answer else {
            continue;
        };
        acked_appends += 1;
        if attempt.answered_at >= kill_sent {
            acked_after_kill += 1;
        }
        assert_eq!(outcomes.len(), attempt.batch.len());
        for (part, outcome) in attempt.batch.iter().zip(outcomes) {
            assert_eq!(outcome.stream, part.stream);
            assert!(
                !outcome.replayed,
                "{} was answered as a replay",
                attempt.name()
            );
            for (new, ack) in part.records.iter().zip(&outcome.records) {
                let what = attempt.name();
                let record = stored(&by_id, part, new, &what).unwrap_or_else(|| {
                    panic!(
                        "LOST: {what} was acknowledged (event {} at position {}, revision {} of \
                         stream {}, digest {}) but the promoted standby does not have it; it \
                         holds {} records",
                        new.event_id,
                        ack.position,
                        ack.revision,
                        part.stream,
                        ack.digest,
                        before.len()
                    )
                });
                assert_eq!(
                    appended(record),
                    *ack,
                    "{what}: event {} is stored elsewhere than acknowledged",
                    new.event_id
                );
                let in_stream = &streams[&part.stream][(ack.revision - 1) as usize];
                assert_eq!(in_stream, record);
                acked_records += 1;
            }
        }
    }

    // Unknown outcomes: all of an append or none of it; NotCommitted ones none. Then each is
    // retried with the same event ids and content and must end up there once.
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut written = 0;
    for attempt in &attempts {
        let may_be_there = match &attempt.answer {
            Answer::Acked(_) => continue,
            Answer::MaybeCommitted(_) | Answer::Other(_) => true,
            Answer::NotCommitted(_) => false,
        };
        let kind = attempt.answer.kind();
        let present: Vec<bool> = attempt
            .event_ids()
            .map(|id| by_id.contains_key(id))
            .collect();
        let there = present.iter().all(|p| *p);
        assert!(
            there || !present.iter().any(|p| *p),
            "{} ({kind}) is only partly stored: {present:?}",
            attempt.name()
        );
        assert!(
            may_be_there || !there,
            "{} was answered NotCommitted but the promoted standby has it: {}",
            attempt.name(),
            attempt.answer.reason()
        );
        *counts.entry(kind).or_default() += 1;
        *counts
            .entry(if there {
                "retried, was there"
            } else {
                "retried, was absent"
            })
            .or_default() += 1;
        let outcomes = append(&journal, attempt.batch.clone())
            .unwrap_or_else(|e| panic!("retrying {} ({kind}): {e}", attempt.name()));
        for (part, outcome) in attempt.batch.iter().zip(&outcomes) {
            assert_eq!(
                outcome.replayed,
                there,
                "retrying {} ({kind})",
                attempt.name()
            );
            if there {
                for (new, again) in part.records.iter().zip(&outcome.records) {
                    let record = stored(&by_id, part, new, &attempt.name()).unwrap();
                    assert_eq!(appended(record), *again);
                }
            }
        }
        if !there {
            written += attempt.records();
        }
    }

    // The acknowledged appends closest to the kill replay as acknowledged.
    let mut replayed_acked = 0;
    for writer in 0..WRITERS {
        let last_acked = attempts
            .iter()
            .filter(|a| a.writer == writer)
            .filter_map(|a| match &a.answer {
                Answer::Acked(outcomes) => Some((a, outcomes)),
                _ => None,
            })
            .rev()
            .take(ACKED_RETRIES_PER_WRITER);
        for (attempt, outcomes) in last_acked {
            let again = append(&journal, attempt.batch.clone())
                .unwrap_or_else(|e| panic!("retrying acknowledged {}: {e}", attempt.name()));
            for (first, again) in outcomes.iter().zip(&again) {
                assert!(again.replayed, "retrying acknowledged {}", attempt.name());
                assert_eq!(first.records, again.records);
            }
            replayed_acked += 1;
        }
    }

    // Every append of every writer is now there exactly once, and nothing else is.
    let (after, after_by_id) = all_records(&journal);
    assert_eq!(after.len(), before.len() + written);
    let total: usize = attempts.iter().map(Attempt::records).sum();
    assert_eq!(after.len(), total, "records that no writer appended");
    for attempt in &attempts {
        for id in attempt.event_ids() {
            assert!(after_by_id.contains_key(id), "{id} is missing after retry");
        }
    }
    assert_verifies(&journal, after.len());

    for attempt in &attempts {
        if !matches!(attempt.answer, Answer::Acked(_)) {
            eprintln!(
                "{} ({} records), {:?} after the kill: {}: {}",
                attempt.name(),
                attempt.records(),
                attempt.answered_at.duration_since(kill_sent),
                attempt.answer.kind(),
                attempt.answer.reason()
            );
        }
    }
    eprintln!(
        "{WRITERS} writers: {} appends answered, {acked_appends} acknowledged ({acked_records} \
         records, {acked_after_kill} answered after the kill was sent; {acked_at_kill} counted at \
         the kill), {counts:?}, {written} records newly written by the retries, \
         {replayed_acked} acknowledged appends replayed; promoted standby holds {} records \
         before the retries and {} after, in {} streams; set-up {set_up:?}, writing {:?}, \
         writers stopped {writers_stopped:?} after the kill, promotion {promoted_in:?}, total \
         {:?}",
        attempts.len(),
        before.len(),
        after.len(),
        streams.len(),
        kill_sent.duration_since(writing),
        started.elapsed()
    );
    drop(journal);
    standby.stop().unwrap();
}
