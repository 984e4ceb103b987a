//! Crash test: a child process appends (single records and multi-stream batches) and reports
//! every acknowledged append on its standard output; the parent kills it with SIGKILL at a random
//! moment, reopens the journal and checks that every acknowledged append is there byte for byte,
//! that the append in flight is there entirely or not at all, and that nothing else is.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ctx_journal::{
    Digest, ExpectedRevision, Journal, NewRecord, OpenOptions, Record, StreamAppend, StreamId,
    Timestamp,
};

use crate::support::{self, Lines, Rng};

/// Set (to "dir|round|seed") in the child process.
const CHILD_ENV: &str = "CTX_TESTS_CRASH_CHILD";
const CHILD_TEST: &str = "journal::crash::crash_child";
const STREAMS: usize = 5;
const KIND: &str = "crash.kind";
/// Rounds that share one data directory (each reopening what the previous kills left).
const ROUNDS_PER_DIR: u32 = 10;

fn stream_id(index: usize) -> StreamId {
    support::stream(&format!("crash-{index}"))
}

fn rounds() -> u32 {
    std::env::var("CTX_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// The hidden child: appends until killed. Without its environment variable it does nothing.
#[test]
fn crash_child() {
    let Some(spec) = support::child_role(CHILD_ENV) else {
        return;
    };
    let mut fields = spec.split('|');
    let dir = fields.next().unwrap().to_owned();
    let round: u64 = fields.next().unwrap().parse().unwrap();
    let seed: u64 = fields.next().unwrap().parse().unwrap();
    let options = OpenOptions::new().lock_wait(Duration::from_secs(20));
    let journal = Journal::open(&dir, &options).unwrap();
    let mut rng = Rng::new(seed);
    let mut out = std::io::stdout();
    if out
        .write_all(b"READY\n")
        .and_then(|()| out.flush())
        .is_err()
    {
        return;
    }
    let started = Instant::now();
    for seq in 0u64.. {
        // A safety net in case the parent is gone without killing this process.
        if started.elapsed() > Duration::from_secs(30) {
            return;
        }
        let parts = if rng.below(3) == 0 {
            2 + rng.below(2) as usize
        } else {
            1
        };
        let mut streams: Vec<usize> = Vec::new();
        while streams.len() < parts {
            let s = rng.below(STREAMS as u64) as usize;
            if !streams.contains(&s) {
                streams.push(s);
            }
        }
        let mut batch = Vec::new();
        let mut begin = format!("BEGIN {seq} ");
        for (p, s) in streams.iter().enumerate() {
            let count = 1 + rng.below(2);
            let records: Vec<NewRecord> = (0..count)
                .map(|k| {
                    let event_id = format!("r{round}-{seq}-{p}-{k}");
                    let payload = support::payload_for(&event_id);
                    NewRecord::new(event_id, KIND, Timestamp(seq as i64), payload)
                })
                .collect();
            let expected = if rng.below(2) == 0 {
                ExpectedRevision::Any
            } else {
                match journal.stream_head(&stream_id(*s)).unwrap() {
                    None => ExpectedRevision::NoStream,
                    Some(h) => ExpectedRevision::Exact(h.revision),
                }
            };
            let ids: Vec<&str> = records.iter().map(|r| r.event_id.as_str()).collect();
            begin.push_str(&format!(
                "{}{s}={}",
                if p > 0 { ";" } else { "" },
                ids.join(",")
            ));
            batch.push(StreamAppend::new(stream_id(*s), expected, records));
        }
        begin.push('\n');
        if out
            .write_all(begin.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
        let outcomes = if batch.len() == 1 {
            vec![journal.append(batch.pop().unwrap()).unwrap()]
        } else {
            journal.append_batch(batch).unwrap()
        };
        let mut ack = format!("ACK {seq} ");
        for (p, (outcome, s)) in outcomes.iter().zip(&streams).enumerate() {
            assert!(!outcome.replayed);
            let recs: Vec<String> = outcome
                .records
                .iter()
                .enumerate()
                .map(|(k, r)| {
                    format!(
                        "r{round}-{seq}-{p}-{k}/{}/{}/{}",
                        r.revision, r.position, r.digest
                    )
                })
                .collect();
            ack.push_str(&format!(
                "{}{s}={}",
                if p > 0 { ";" } else { "" },
                recs.join(",")
            ));
        }
        ack.push('\n');
        if out
            .write_all(ack.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// One record of an append as the child described it.
#[derive(Debug, Clone)]
struct Described {
    stream: usize,
    event_id: String,
    /// Revision, position and digest: known for acknowledged appends only.
    result: Option<(u64, u64, String)>,
}

#[derive(Debug)]
struct Line {
    seq: u64,
    records: Vec<Described>,
}

fn parse(line: &str, acked: bool) -> Line {
    let (seq, parts) = line.split_once(' ').unwrap();
    let mut records = Vec::new();
    for part in parts.split(';') {
        let (stream, recs) = part.split_once('=').unwrap();
        let stream: usize = stream.parse().unwrap();
        for rec in recs.split(',') {
            if acked {
                let f: Vec<&str> = rec.split('/').collect();
                assert_eq!(f.len(), 4, "ack record {rec}");
                records.push(Described {
                    stream,
                    event_id: f[0].to_owned(),
                    result: Some((
                        f[1].parse().unwrap(),
                        f[2].parse().unwrap(),
                        f[3].to_owned(),
                    )),
                });
            } else {
                records.push(Described {
                    stream,
                    event_id: rec.to_owned(),
                    result: None,
                });
            }
        }
    }
    Line {
        seq: seq.parse().unwrap(),
        records,
    }
}

/// What the parent knows to be in the journal, position by position.
#[derive(Debug, Clone)]
struct Known {
    stream: usize,
    event_id: String,
    revision: u64,
    digest: Digest,
}

struct RoundResult {
    acked_appends: usize,
    in_flight_committed: bool,
}

/// Runs one child until killed; returns the acknowledged appends and the one in flight.
fn run_child(dir: &Path, round: u32, rng: &mut Rng) -> (Vec<Line>, Option<Line>) {
    let seed = rng.next_u64();
    let spec = format!("{}|{round}|{seed}", dir.display());
    let mut child = support::spawn_child(CHILD_TEST, &[(CHILD_ENV, &spec)], false);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut lines = Lines::new(stdout, "");
        while let Some(line) = lines.next_line() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    // Wait for the child to have the journal open, then let it append for a random while.
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line == "READY" => break,
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("crash child of round {round} never got ready ({e}); output: {lines:?}");
            }
        }
    }
    let delay = match rng.below(8) {
        0 => 0,
        1 => rng.below(5),
        _ => 5 + rng.below(120),
    };
    std::thread::sleep(Duration::from_millis(delay));
    child.kill().unwrap(); // SIGKILL on unix
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the child must have been killed, not have finished: {status}"
    );
    reader.join().unwrap();
    lines.extend(rx.try_iter());

    let mut acked: Vec<Line> = Vec::new();
    let mut pending: Option<Line> = None;
    for line in &lines {
        if let Some(rest) = line.strip_prefix("BEGIN ") {
            assert!(pending.is_none(), "a BEGIN without its ACK before {line}");
            pending = Some(parse(rest, false));
        } else if let Some(rest) = line.strip_prefix("ACK ") {
            let ack = parse(rest, true);
            let begun = pending.take().unwrap();
            assert_eq!(begun.seq, ack.seq);
            let begun_ids: Vec<(usize, &str)> = begun
                .records
                .iter()
                .map(|r| (r.stream, r.event_id.as_str()))
                .collect();
            let acked_ids: Vec<(usize, &str)> = ack
                .records
                .iter()
                .map(|r| (r.stream, r.event_id.as_str()))
                .collect();
            assert_eq!(begun_ids, acked_ids);
            acked.push(ack);
        }
    }
    (acked, pending)
}

fn check_record(record: &Record, stream: usize, event_id: &str, revision: u64, position: u64) {
    assert_eq!(record.position, position, "position of {event_id}");
    assert_eq!(record.stream, stream_id(stream), "stream of {event_id}");
    assert_eq!(record.revision, revision, "revision of {event_id}");
    assert_eq!(record.event_id, event_id);
    assert_eq!(record.kind, KIND);
    assert_eq!(
        record.payload,
        support::payload_for(event_id),
        "payload bytes of {event_id}"
    );
}

/// Reopens the journal after a kill and checks it against what the parent knows plus what the
/// child acknowledged; returns the records that are now known to be in the journal.
fn check_after_kill(
    dir: &Path,
    known: &mut Vec<Known>,
    acked: &[Line],
    in_flight: Option<&Line>,
) -> RoundResult {
    let journal = Journal::open(dir, &support::options())
        .unwrap_or_else(|e| panic!("reopen after SIGKILL failed: {e}"));
    let report = journal.verify().unwrap();
    assert!(report.is_ok(), "verify after SIGKILL: {report:?}");
    let all = journal.read_all(1, usize::MAX).unwrap();
    assert_eq!(report.records, all.len() as u64);
    assert_eq!(journal.head_position().unwrap(), all.len() as u64);
    for (i, record) in all.iter().enumerate() {
        assert_eq!(record.position, i as u64 + 1, "positions are gap-free");
    }

    // Everything known before this round is unchanged (its payload was checked byte for byte
    // when it became known; its digest, checked by every read, covers the payload since).
    assert!(
        all.len() >= known.len(),
        "records were lost: {} < {}",
        all.len(),
        known.len()
    );
    for (i, k) in known.iter().enumerate() {
        let r = &all[i];
        assert_eq!(
            (r.stream, r.revision, r.event_id.as_str(), r.digest),
            (
                stream_id(k.stream),
                k.revision,
                k.event_id.as_str(),
                k.digest
            ),
            "record at position {}",
            i + 1
        );
    }

    // The acknowledged appends follow, in order, at the positions and revisions the parent
    // expects from a single sequential writer.
    let mut heads = [0u64; STREAMS];
    for k in known.iter() {
        heads[k.stream] = k.revision;
    }
    let mut position = known.len() as u64;
    for line in acked {
        for d in &line.records {
            heads[d.stream] += 1;
            position += 1;
            let (revision, at, digest) = d.result.as_ref().unwrap();
            assert_eq!(
                (*revision, *at),
                (heads[d.stream], position),
                "ack of {}",
                d.event_id
            );
            let record = all
                .get(position as usize - 1)
                .unwrap_or_else(|| panic!("acknowledged record {} is missing", d.event_id));
            check_record(record, d.stream, &d.event_id, *revision, *at);
            assert_eq!(record.digest.to_hex(), *digest, "digest of {}", d.event_id);
            known.push(Known {
                stream: d.stream,
                event_id: d.event_id.clone(),
                revision: *revision,
                digest: record.digest,
            });
        }
    }

    // Beyond them: nothing, or the whole append that was in flight.
    let extra = all.len() - known.len();
    let in_flight_committed = extra > 0;
    if in_flight_committed {
        let line = in_flight.unwrap_or_else(|| {
            panic!("{extra} records beyond the acknowledged ones and nothing in flight")
        });
        assert_eq!(
            extra,
            line.records.len(),
            "the append in flight (seq {}) is partially visible",
            line.seq
        );
        for d in &line.records {
            heads[d.stream] += 1;
            position += 1;
            let record = &all[position as usize - 1];
            check_record(record, d.stream, &d.event_id, heads[d.stream], position);
            known.push(Known {
                stream: d.stream,
                event_id: d.event_id.clone(),
                revision: heads[d.stream],
                digest: record.digest,
            });
        }
    }

    // Each stream reads back whole, chained and contiguous from revision 1.
    for (s, head) in heads.iter().enumerate() {
        let records = journal.read_stream(&stream_id(s), 1, usize::MAX).unwrap();
        assert_eq!(records.len() as u64, *head, "records of stream {s}");
        let mut previous = Digest::ZERO;
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.revision, i as u64 + 1);
            assert_eq!(r.previous_digest, previous);
            assert_eq!(all[r.position as usize - 1], *r);
            previous = r.digest;
        }
        match journal.stream_head(&stream_id(s)).unwrap() {
            None => assert_eq!(*head, 0),
            Some(h) => assert_eq!((h.revision, h.digest), (*head, previous)),
        }
    }
    RoundResult {
        acked_appends: acked.len(),
        in_flight_committed,
    }
}

#[test]
fn sigkill_during_appends_loses_nothing_acknowledged() {
    if support::child_role(CHILD_ENV).is_some() {
        return;
    }
    // The parent never appends (only its children do), so it needs no fail-point lock.
    let rounds = rounds();
    let mut rng = Rng::from_time();
    let seed = rng.next_u64();
    let mut rng = Rng::new(seed);
    eprintln!("crash test: {rounds} rounds, seed {seed}");
    let mut dir = support::tempdir();
    let mut known: Vec<Known> = Vec::new();
    let started = Instant::now();
    let (mut acked_total, mut in_flight_committed, mut in_flight_lost) = (0, 0, 0);
    let (mut batches_acked, mut records_before) = (0, 0);
    for round in 0..rounds {
        // A fresh directory now and then keeps the journal (and each check) small.
        if round > 0 && round % ROUNDS_PER_DIR == 0 {
            dir = support::tempdir();
            records_before += known.len();
            known.clear();
        }
        let (acked, in_flight) = run_child(dir.path(), round, &mut rng);
        batches_acked += acked.iter().filter(|l| is_batch(l)).count();
        let result = check_after_kill(dir.path(), &mut known, &acked, in_flight.as_ref());
        acked_total += result.acked_appends;
        if result.in_flight_committed {
            in_flight_committed += 1;
        } else if in_flight.is_some() {
            in_flight_lost += 1;
        }
    }
    eprintln!(
        "crash test: {rounds} rounds in {:?}: {acked_total} acknowledged appends \
         ({batches_acked} multi-stream), {} records in {} directories; in flight at the kill: \
         {in_flight_committed} committed, {in_flight_lost} not",
        started.elapsed(),
        records_before + known.len(),
        rounds.div_ceil(ROUNDS_PER_DIR)
    );
    assert!(
        acked_total > 0,
        "no append was acknowledged in {rounds} rounds"
    );
}

fn is_batch(line: &Line) -> bool {
    line.records
        .iter()
        .any(|r| r.stream != line.records[0].stream)
}
