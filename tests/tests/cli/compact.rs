//! `ctx compact` (spec/cli.md §5.6, spec/journal.md §10): the journal file shrinks to the pages it
//! holds, every record stays byte for byte, and a directory the audit found damaged is left as it is.

use super::hook::{Machine, claude_prompt};
use crate::support::run_ctx;

/// The two sizes of `compacted PATH: A MiB → B MiB`.
fn sizes(line: &str) -> (f64, f64) {
    let (_, numbers) = line.rsplit_once(": ").expect("a size");
    let (before, after) = numbers.trim().split_once(" MiB → ").expect("two sizes");
    let after = after.strip_suffix(" MiB").expect("MiB");
    (
        before.parse().expect("a number"),
        after.parse().expect("a number"),
    )
}

#[test]
fn compaction_shrinks_the_journal_file_and_keeps_every_record() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    for (i, prompt) in [
        "write rust unit tests",
        "write terraform for the new infrastructure",
        "set up playwright end to end tests",
        "tune the postgres queries",
    ]
    .iter()
    .cycle()
    .take(24)
    .enumerate()
    {
        claude_prompt(
            &data,
            &home,
            &project,
            &format!("compact-{}", i / 4),
            prompt,
        );
    }
    // Hooks that commit their prompt as one unit leave the file with little to reclaim (their
    // closes trim it), so whether 24 prompts give compaction something to do depends on the
    // layout. Records appended one commit at a time grow the file by doubling past what it
    // holds (spec/storage-growth.md §3.3): the part of a long-lived journal compaction is for.
    let journal = crate::support::open(&data.join("journal"));
    let stream = crate::support::stream("compact-padding");
    // Incompressible bytes: the journal compresses payloads.
    let mut rng = crate::support::Rng::new(7);
    for i in 0..400u32 {
        journal
            .append(ctx_journal::StreamAppend::new(
                stream,
                ctx_journal::ExpectedRevision::Any,
                vec![ctx_journal::NewRecord::new(
                    format!("compact-padding-{i}"),
                    "ctx.test-padding.v1",
                    ctx_journal::Timestamp(1),
                    (0..3000 + (i as usize % 7) * 500)
                        .map(|_| rng.next_u64() as u8)
                        .collect::<Vec<u8>>(),
                )],
            ))
            .expect("a padding record");
    }
    drop(journal);
    let exported = run_ctx(&data, &["export"], "");
    assert_eq!(exported.code, 0, "{exported:?}");
    let file = data.join("journal").join(ctx_journal::DATABASE_FILE);
    let bytes_before = std::fs::metadata(&file).expect("the file").len();

    let compacted = run_ctx(&data, &["compact"], "");
    assert_eq!(compacted.code, 0, "{compacted:?}");
    let line = compacted.stdout.trim();
    assert!(
        line.starts_with(&format!("compacted {}: ", file.display())),
        "{line}"
    );
    // The line rounds to a tenth of a MiB, so whether the file shrank is judged in bytes.
    let (before, after) = sizes(line);
    assert!(after <= before, "{line}");
    let bytes_after = std::fs::metadata(&file).expect("the file").len();
    assert!(
        bytes_after < bytes_before,
        "{bytes_before} → {bytes_after} bytes: {line}"
    );
    let on_disk = bytes_after as f64 / (1024.0 * 1024.0);
    assert!(
        (on_disk - after).abs() < 0.05,
        "{on_disk} MiB on disk, {line}"
    );

    // Nothing but the file's layout changed.
    let again = run_ctx(&data, &["export"], "");
    assert_eq!(again.stdout, exported.stdout);
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
    claude_prompt(
        &data,
        &home,
        &project,
        "compact-after",
        "write rust unit tests",
    );
}

#[test]
fn a_journal_the_audit_found_damaged_is_not_compacted() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    claude_prompt(&data, &home, &project, "damaged", "write rust unit tests");
    let journal = data.join("journal");
    ctx_journal::record_integrity_failure(&journal, "records/mac: position 9 failed its MAC")
        .expect("a verdict");
    let file = journal.join(ctx_journal::DATABASE_FILE);
    let before = std::fs::read(&file).expect("the file");

    let refused = run_ctx(&data, &["compact"], "");
    assert_eq!(refused.code, 3, "{refused:?}");
    assert_eq!(
        refused.stderr.trim(),
        format!(
            "ctx: error: journal {:?} is not compacted because `ctx audit` found it damaged (records/mac: position 9 failed its MAC); run `ctx audit` again once it \
             is repaired",
            file
        )
    );
    assert_eq!(std::fs::read(&file).expect("the file"), before);
}
