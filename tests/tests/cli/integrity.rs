//! Fail-stop on integrity (spec/journal.md §10, §13; spec/cli.md §7.4): a hook never builds on a
//! journal whose last records do not authenticate or that `ctx audit` found damaged. It writes
//! nothing and says so in one sentence; the audit's verdict stands until an audit finds the
//! journal intact again.

use std::path::Path;

use ctx_journal::files;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::hook::{Machine, claude_prompt, hook_env, hook_input, reply, with_prompt};
use crate::support::run_ctx;

const RECORDS: TableDefinition<u64, &[u8]> = TableDefinition::new("journal.records");

/// The last record's position, read through redb with the journal closed.
fn last_position(journal_dir: &Path) -> u64 {
    let db = redb::Database::open(journal_dir.join(files::DATABASE_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let table = txn.open_table(RECORDS).unwrap();
    let last = table.last().unwrap().expect("a record");
    last.0.value()
}

/// Flips the lowest bit of the last byte of the record at `position` (again: restores it).
fn flip_record(journal_dir: &Path, position: u64) {
    let db = redb::Database::open(journal_dir.join(files::DATABASE_FILE)).unwrap();
    let mut value = {
        let txn = db.begin_read().unwrap();
        let table = txn.open_table(RECORDS).unwrap();
        // With its payload stored as is, the value's last byte is the payload's last byte.
        crate::support::record_value_stored_as_is(table.get(position).unwrap().unwrap().value())
    };
    let last = value.len() - 1;
    value[last] ^= 0x01;
    let txn = db.begin_write().unwrap();
    txn.open_table(RECORDS)
        .unwrap()
        .insert(position, value.as_slice())
        .unwrap();
    txn.commit().unwrap();
}

const REFUSED: &str = "ctx: ctx stopped writing to its journal because it failed an integrity \
                       check: ";
const REFUSED_END: &str = ". Nothing is planned, asked or installed until it is repaired; \
                           `ctx audit` shows what failed";

#[test]
fn a_hook_refuses_to_build_on_a_damaged_journal_and_the_audit_verdict_stands_until_repaired() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    let journal_dir = data.join("journal");
    claude_prompt(&data, &home, &project, "integrity", "write rust unit tests");
    let head = last_position(&journal_dir);
    let prompt = |text: &str| {
        let input = with_prompt(
            hook_input("claude", "UserPromptSubmit", "integrity", &project),
            text,
        );
        reply(&hook_env(
            &data,
            &home,
            "claude",
            "user-prompt-submit",
            &input,
        ))
        .expect("a reply")
    };

    // The last record does not authenticate: the next prompt writes nothing.
    flip_record(&journal_dir, head);
    let answer = prompt("write terraform for the new infrastructure");
    let message = answer.get_str("systemMessage").expect("a message");
    assert_eq!(
        message,
        format!(
            "{REFUSED}authentication failed for stream {} revision {} (position {head}){REFUSED_END}",
            stream_of(message),
            revision_of(message)
        ),
    );
    assert!(answer.get("hookSpecificOutput").is_none(), "{answer}");
    assert_eq!(last_position(&journal_dir), head, "a refused hook appended");

    // The audit finds it and leaves its verdict; repairing the byte alone does not lift it.
    let audit = run_ctx(&data, &["audit"], "");
    assert_ne!(audit.code, 0, "{audit:?}");
    assert!(
        journal_dir
            .join(ctx_journal::INTEGRITY_VERDICT_FILE)
            .is_file()
    );
    flip_record(&journal_dir, head);
    let answer = prompt("write terraform for the new infrastructure");
    let message = answer.get_str("systemMessage").expect("a message");
    assert!(
        message.starts_with(&format!("{REFUSED}`ctx audit` found it damaged (records/"))
            && message.ends_with(&format!(
                "; run `ctx audit` again once it is repaired{REFUSED_END}"
            )),
        "{message}"
    );
    assert_eq!(last_position(&journal_dir), head, "a refused hook appended");

    // An audit that finds the journal intact lifts the verdict, and hooks work again.
    let audit = run_ctx(&data, &["audit"], "");
    assert_eq!(audit.code, 0, "{audit:?}");
    assert!(
        !journal_dir
            .join(ctx_journal::INTEGRITY_VERDICT_FILE)
            .exists()
    );
    let answer = prompt("write terraform for the new infrastructure");
    assert!(answer.get("hookSpecificOutput").is_some(), "{answer}");
    assert!(last_position(&journal_dir) > head);
}

/// The stream id the refusal names (whatever record was last, the sentence names its stream).
fn stream_of(message: &str) -> &str {
    message
        .split("for stream ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default()
}

fn revision_of(message: &str) -> &str {
    message
        .split(" revision ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_default()
}
