//! Units of work (spec/journal.md §14): appends after `defer_durability` are visible at once in
//! the process, become durable together at `make_durable` or at close, and a process killed
//! before that loses exactly the appends since the last durable point, never one in the middle
//! and nothing before it.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use ctx_journal::{ExpectedRevision, Journal, NewRecord, OpenOptions, StreamAppend, Timestamp};

use crate::support::{self, Lines};

/// Set (to "mode|dir") in the child process.
const CHILD_ENV: &str = "CTX_TESTS_UNIT_CHILD";
const CHILD_TEST: &str = "journal::unit_of_work::unit_child";
const KIND: &str = "unit.kind";

fn append(journal: &Journal, stream: &str, ids: &[&str]) {
    let records = ids
        .iter()
        .map(|id| NewRecord::new(*id, KIND, Timestamp(1), support::payload_for(id)))
        .collect();
    journal
        .append(StreamAppend::new(
            support::stream(stream),
            ExpectedRevision::Any,
            records,
        ))
        .unwrap();
}

fn batch(journal: &Journal, parts: &[(&str, &str)]) {
    let appends = parts
        .iter()
        .map(|(stream, id)| {
            StreamAppend::new(
                support::stream(stream),
                ExpectedRevision::Any,
                vec![NewRecord::new(
                    *id,
                    KIND,
                    Timestamp(1),
                    support::payload_for(id),
                )],
            )
        })
        .collect();
    journal.append_batch(appends).unwrap();
}

/// Event ids of the whole journal in position order.
fn event_ids(journal: &Journal) -> Vec<String> {
    journal
        .read_all(1, 1_000)
        .unwrap()
        .into_iter()
        .map(|r| r.event_id)
        .collect()
}

fn say(line: &str) {
    let mut out = std::io::stdout();
    out.write_all(format!("{line}\n").as_bytes()).unwrap();
    out.flush().unwrap();
}

/// The hidden child. "kill": a durable append, a unit made durable, then a unit left pending
/// until the parent kills the process. "end": a unit ended, then an append after it, until the
/// parent kills the process. "close": a unit left pending when the journal closes.
#[test]
fn unit_child() {
    let Some(spec) = support::child_role(CHILD_ENV) else {
        return;
    };
    let (mode, dir) = spec.split_once('|').unwrap();
    let options = OpenOptions::new().lock_wait(Duration::from_secs(20));
    let journal = Journal::open(dir, &options).unwrap();
    match mode {
        "kill" => {
            append(&journal, "a", &["before"]);
            assert!(journal.defer_durability(), "redb defers durability");
            append(&journal, "a", &["u1"]);
            batch(&journal, &[("a", "u2"), ("b", "u3")]);
            journal.make_durable().unwrap();
            append(&journal, "b", &["v1"]);
            batch(&journal, &[("a", "v2"), ("c", "v3")]);
            // Deferred appends are read back at once by this process.
            say(&format!("SEEN {}", event_ids(&journal).join(",")));
            say("READY");
            std::thread::sleep(Duration::from_secs(60));
        }
        "end" => {
            assert!(journal.defer_durability());
            append(&journal, "a", &["e1"]);
            journal.end_unit().unwrap();
            // After the unit, an append is durable on its own again.
            append(&journal, "b", &["e2"]);
            say("READY");
            std::thread::sleep(Duration::from_secs(60));
        }
        "close" => {
            assert!(journal.defer_durability());
            append(&journal, "a", &["w1"]);
            batch(&journal, &[("a", "w2"), ("b", "w3")]);
            drop(journal);
            say("CLOSED");
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn run_child(mode: &str, dir: &Path) -> (std::process::Child, Lines) {
    let spec = format!("{mode}|{}", dir.display());
    let mut child = support::spawn_child(CHILD_TEST, &[(CHILD_ENV, &spec)], false);
    let lines = Lines::new(child.stdout.take().unwrap(), "");
    (child, lines)
}

#[test]
fn a_process_killed_inside_a_unit_loses_the_unit_and_keeps_everything_made_durable() {
    let dir = support::tempdir();
    let (mut child, mut lines) = run_child("kill", dir.path());
    let mut seen = None;
    loop {
        let line = lines
            .next_line()
            .expect("the child ended before it was ready");
        if let Some(ids) = line.strip_prefix("SEEN ") {
            seen = Some(ids.to_owned());
        }
        if line == "READY" {
            break;
        }
    }
    assert_eq!(
        seen.as_deref(),
        Some("before,u1,u2,u3,v1,v2,v3"),
        "the child reads its deferred appends back"
    );
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed: {status}");

    let journal = support::open(dir.path());
    assert_eq!(
        event_ids(&journal),
        ["before", "u1", "u2", "u3"],
        "the unit made durable survives the kill, the pending one is lost whole"
    );
    let report = journal.verify().unwrap();
    assert_eq!(report.records, 4, "{report:?}");
    // Positions stay dense: the next append takes the position after the durable unit.
    append(&journal, "c", &["after"]);
    let records = journal.read_all(1, 10).unwrap();
    let last = records.last().unwrap();
    assert_eq!((last.event_id.as_str(), last.position), ("after", 5));
}

#[test]
fn after_the_unit_ends_every_append_is_durable_on_its_own() {
    let dir = support::tempdir();
    let (mut child, mut lines) = run_child("end", dir.path());
    let ready = std::iter::from_fn(|| lines.next_line()).any(|line| line == "READY");
    assert!(ready, "the child got ready");
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child was killed: {status}");
    let journal = support::open(dir.path());
    assert_eq!(event_ids(&journal), ["e1", "e2"]);
}

#[test]
fn a_unit_pending_when_the_journal_closes_is_made_durable_by_the_close() {
    let dir = support::tempdir();
    let (mut child, mut lines) = run_child("close", dir.path());
    // The test harness prints lines of its own; the child's are searched for.
    let closed = std::iter::from_fn(|| lines.next_line()).any(|line| line == "CLOSED");
    assert!(closed, "the child closed its journal");
    let status = child.wait().unwrap();
    assert!(status.success(), "the child finished: {status}");
    let journal = support::open(dir.path());
    assert_eq!(event_ids(&journal), ["w1", "w2", "w3"]);
}

#[test]
fn make_durable_without_a_pending_unit_writes_nothing() {
    let dir = support::tempdir();
    let journal = support::open(dir.path());
    append(&journal, "a", &["x1"]);
    let file = dir.path().join("journal.redb");
    let before = std::fs::read(&file).unwrap();
    journal.make_durable().unwrap();
    assert!(journal.defer_durability());
    journal.make_durable().unwrap();
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "nothing was pending, so the file is unchanged"
    );
}
