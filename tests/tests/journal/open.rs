//! Opening: the same directory twice in one process shares one journal; a second process is
//! refused with the holder named, or waits for it.
//!
//! Not covered here: a handle used in a forked child must refuse to work. That needs fork(2),
//! which needs `unsafe` or libc, both outside this crate's rules.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctx_journal::{
    AppendError, ExpectedRevision, Journal, NewRecord, OpenError, OpenOptions, StreamAppend,
    Timestamp,
};

use crate::support::{self, Lines};

/// Set (to the data directory) in the lock-holding child process.
const LOCK_CHILD_ENV: &str = "CTX_TESTS_LOCK_CHILD";
const LOCK_CHILD_TEST: &str = "journal::open::lock_holder_child";
/// How long the child keeps the journal after being told to let go.
const CHILD_LINGER: Duration = Duration::from_millis(400);

fn record(event_id: &str) -> NewRecord {
    NewRecord::new(
        event_id,
        "open.kind",
        Timestamp(3),
        format!("payload of {event_id}"),
    )
}

#[test]
fn opening_a_directory_twice_shares_one_journal() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let s = support::stream("open-twice");
    let a = support::open(dir.path());
    // The same directory by another spelling: canonicalized to the same journal.
    let b = support::open(&dir.path().join("."));
    let link = support::tempdir();
    let link_path = link.path().join("link");
    std::os::unix::fs::symlink(dir.path(), &link_path).unwrap();
    let c = support::open(&link_path);
    assert_eq!(a.data_dir(), b.data_dir());
    assert_eq!(a.data_dir(), c.data_dir());

    let first = a
        .append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![record("o1")],
        ))
        .unwrap();
    assert_eq!(b.read_stream(&s, 1, 10).unwrap()[0].event_id, "o1");
    assert_eq!(
        c.stream_head(&s).unwrap().unwrap().digest,
        first.records[0].digest
    );
    // b's writer knows a's append: Exact(1) is right and NoStream is wrong.
    let second = b
        .append(StreamAppend::new(
            s,
            ExpectedRevision::Exact(1),
            vec![record("o2")],
        ))
        .unwrap();
    assert_eq!(
        (second.records[0].revision, second.records[0].position),
        (2, 2)
    );
    match c.append(StreamAppend::new(
        s,
        ExpectedRevision::NoStream,
        vec![record("o3")],
    )) {
        Err(AppendError::WrongRevision { current: 2, .. }) => {}
        other => panic!("expected WrongRevision at 2, got {other:?}"),
    }
    // An idempotent retry through another handle sees the first handle's record.
    let again = c
        .append(StreamAppend::new(
            s,
            ExpectedRevision::Any,
            vec![record("o1")],
        ))
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.records, first.records);

    // Dropping one handle leaves the others working.
    drop(a);
    b.append(StreamAppend::new(
        s,
        ExpectedRevision::Exact(2),
        vec![record("o3")],
    ))
    .unwrap();
    assert_eq!(c.read_stream(&s, 1, 10).unwrap().len(), 3);
    assert!(c.verify().unwrap().is_ok());
}

#[test]
fn a_relative_directory_is_refused() {
    match Journal::open("relative/journal", &OpenOptions::new()) {
        Err(OpenError::RelativePath { path }) => {
            assert_eq!(path.to_str(), Some("relative/journal"))
        }
        other => panic!("expected RelativePath, got {other:?}"),
    }
    assert!(
        !std::path::Path::new("relative").exists(),
        "nothing was created"
    );
}

/// The hidden child: opens the journal, appends one record, says READY with its pid, and holds the
/// journal until a line arrives on its standard input, then lingers a moment and exits.
#[test]
fn lock_holder_child() {
    let Some(dir) = support::child_role(LOCK_CHILD_ENV) else {
        return;
    };
    let journal = support::open(std::path::Path::new(&dir));
    let s = support::stream("open-lock");
    journal
        .append(StreamAppend::new(
            s,
            ExpectedRevision::NoStream,
            vec![record("child")],
        ))
        .unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "READY {}", std::process::id()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    std::thread::sleep(CHILD_LINGER);
    drop(journal);
}

#[test]
fn a_second_process_is_refused_naming_the_holder_or_waits() {
    if support::child_role(LOCK_CHILD_ENV).is_some() {
        return;
    }
    // The parent never appends here, so it needs no fail-point lock.
    let dir = support::tempdir();
    let path = dir.path().to_str().unwrap().to_owned();
    let mut child = support::spawn_child(LOCK_CHILD_TEST, &[(LOCK_CHILD_ENV, &path)], true);
    let mut lines = Lines::new(child.stdout.take().unwrap(), "READY ");
    let Some(pid) = lines.next_line() else {
        let _ = child.kill();
        panic!("the lock-holding child did not get ready");
    };
    assert_eq!(pid, child.id().to_string());

    // Refused at once, naming the holder.
    let started = Instant::now();
    match Journal::open(dir.path(), &OpenOptions::new().lock_wait(Duration::ZERO)) {
        Err(OpenError::Locked {
            path,
            holder,
            waited,
        }) => {
            assert_eq!(path, dir.path().canonicalize().unwrap());
            assert!(holder.contains(&format!("pid {pid}")), "holder: {holder}");
            assert!(waited < Duration::from_secs(1));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "lock_wait zero fails at once"
    );
    // Refused after waiting as long as asked.
    let wait = Duration::from_millis(150);
    match Journal::open(dir.path(), &OpenOptions::new().lock_wait(wait)) {
        Err(OpenError::Locked { waited, .. }) => assert!(waited >= wait, "waited {waited:?}"),
        other => panic!("expected Locked after waiting, got {other:?}"),
    }

    // Waits for the holder to let go, then opens and sees what the child wrote. Meanwhile an open
    // of another directory in this process is not held up by the waiting one.
    let other = support::tempdir();
    let mut stdin = child.stdin.take().unwrap();
    let (journal, started) = std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            Journal::open(
                dir.path(),
                &OpenOptions::new().lock_wait(Duration::from_secs(30)),
            )
        });
        std::thread::sleep(Duration::from_millis(100));
        let unrelated = Journal::open(other.path(), &OpenOptions::new()).unwrap();
        assert!(
            !waiting.is_finished(),
            "the other directory opened while the first open was still waiting"
        );
        drop(unrelated);
        let started = Instant::now();
        stdin.write_all(b"release\n").unwrap();
        drop(stdin);
        let journal = waiting
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("waiting for the holder to exit: {e}"));
        (journal, started)
    });
    assert!(
        started.elapsed() >= CHILD_LINGER - Duration::from_millis(50),
        "it waited"
    );
    let status = child.wait().unwrap();
    assert!(status.success(), "child: {status}");
    let records = journal
        .read_stream(&support::stream("open-lock"), 1, 10)
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].event_id, "child");
    assert!(journal.verify().unwrap().is_ok());
}

/// Sets the flag when dropped, so a helper thread stops even if the test panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Dropping every handle and opening again must work even while another thread of this process
/// starts child processes: a child briefly shares this process's open files between its fork and
/// its exec, and must not make this process's own reopen fail as "held by another process".
#[test]
fn reopening_while_this_process_spawns_children_is_not_refused() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let s = support::stream("open-spawn");
    drop(support::open(dir.path()));
    let stop = AtomicBool::new(false);
    let spawned = AtomicU64::new(0);
    let exe = std::env::current_exe().unwrap();
    let mut refusals = Vec::new();
    let mut reopens = 0u64;
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // Runs no test: it only starts, finds nothing to run and exits.
                let status = Command::new(&exe)
                    .args(["--exact", "no-such-test", "-q"])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(status.success());
                spawned.fetch_add(1, Ordering::Relaxed);
            }
        });
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            // The default options: no lock wait, as a host would open its journal.
            match Journal::open(dir.path(), &OpenOptions::new()) {
                Ok(journal) => {
                    reopens += 1;
                    let record = record(&format!("spawn-{reopens}"));
                    journal
                        .append(StreamAppend::new(s, ExpectedRevision::Any, vec![record]))
                        .unwrap();
                }
                Err(e) => refusals.push(e.to_string()),
            }
        }
    });
    eprintln!(
        "reopen while spawning: {reopens} reopens, {} refused, {} children",
        refusals.len(),
        spawned.load(Ordering::Relaxed)
    );
    assert!(spawned.load(Ordering::Relaxed) > 0, "no child was started");
    assert!(
        refusals.is_empty(),
        "{} of {} reopens refused (this process is pid {}), first: {}",
        refusals.len(),
        refusals.len() as u64 + reopens,
        std::process::id(),
        refusals[0]
    );
}

/// Set (to a root directory) in the child that creates journals until it is killed.
const FIRST_OPEN_CHILD_ENV: &str = "CTX_TESTS_FIRST_OPEN_CHILD";
const FIRST_OPEN_CHILD_TEST: &str = "journal::open::first_open_child";

/// Creates fresh journals under the root, one directory after another, until killed.
#[test]
fn first_open_child() {
    let Some(root) = support::child_role(FIRST_OPEN_CHILD_ENV) else {
        return;
    };
    println!("CREATING started");
    for i in 0..100_000u32 {
        let journal = Journal::open(format!("{root}/{i}"), &support::options()).unwrap();
        drop(journal);
    }
}

/// Regression (found by the managed-service crash test): a process killed while it creates a
/// journal's database must not leave a file that never opens again. The child creates journals
/// back to back; a SIGKILL lands inside some creation; every directory must then open, and the
/// half-created one is started over.
#[test]
fn a_kill_during_the_first_open_leaves_a_journal_that_opens() {
    let _shared = support::shared();
    let mut rng = support::Rng::from_time();
    for round in 0..8 {
        let root = support::tempdir();
        let path = root.path().canonicalize().unwrap();
        let mut child = support::spawn_child(
            FIRST_OPEN_CHILD_TEST,
            &[(FIRST_OPEN_CHILD_ENV, path.to_str().unwrap())],
            false,
        );
        let mut lines = Lines::new(child.stdout.take().unwrap(), "CREATING ");
        assert_eq!(lines.next_line().as_deref(), Some("started"));
        std::thread::sleep(Duration::from_millis(20 + rng.below(60)));
        child.kill().unwrap();
        child.wait().unwrap();
        let mut opened = 0;
        for entry in std::fs::read_dir(&path).unwrap() {
            let dir = entry.unwrap().path();
            let journal = Journal::open(&dir, &support::options()).unwrap_or_else(|e| {
                panic!(
                    "round {round}: {} does not open after the kill: {e}",
                    dir.display()
                )
            });
            journal.verify().unwrap();
            opened += 1;
        }
        assert!(opened > 0, "round {round}: the child created nothing");
    }
}

/// A leftover of an interrupted creation is removed by the next first open.
#[test]
fn a_leftover_creating_file_is_started_over() {
    let _shared = support::shared();
    let dir = support::tempdir();
    let path = dir.path().join("journal");
    drop(Journal::open(&path, &support::options()).unwrap());
    std::fs::remove_file(path.join(ctx_journal::DATABASE_FILE)).unwrap();
    std::fs::write(path.join("journal.redb.creating"), vec![0u8; 73_728]).unwrap();

    let journal = Journal::open(&path, &support::options()).unwrap();

    assert!(journal.verify().unwrap().is_ok());
    assert!(!path.join("journal.redb.creating").exists());
}
