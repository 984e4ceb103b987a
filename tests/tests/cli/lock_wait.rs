//! A hook never outwaits its host (spec/cli.md §7.4; spec/fs.md rule 8): while another process
//! holds the data directory, a prompt hook gives up within its share of the host's timeout and
//! tells the person who held it, named by the kernel's lock table, not by a stale record.

use std::fs::OpenOptions;
use std::io::Write as _;

use super::hook::{Machine, claude_prompt};

#[test]
fn a_prompt_hook_gives_up_within_its_share_of_the_host_timeout_and_names_the_real_holder() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    // A first prompt makes the data directory.
    claude_prompt(
        &data,
        &home,
        &project,
        "lock-session",
        "write rust unit tests",
    );

    // This test process takes the journal's lock without writing a holder record of its own;
    // the file keeps a stale record naming another process.
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .open(data.join("journal").join("ctx.lock"))
        .expect("the journal's lock file");
    lock.lock().expect("take the lock");
    lock.set_len(0).expect("truncate the record");
    lock.write_all(b"pid 1 (init)\n").expect("a stale record");

    let text = "write terraform for the new infrastructure";
    let answer = claude_prompt(&data, &home, &project, "lock-session", text);
    lock.unlock().expect("release the lock");

    assert!(answer.get("hookSpecificOutput").is_none(), "{answer}");
    let message = answer.get_str("systemMessage").expect("a message");
    assert!(
        message.starts_with(
            "ctx: another ctx process kept the data directory busy for longer than this hook \
             may wait (6.0 s of the host's 10 s timeout), so ctx did nothing for this prompt; \
             it is tried again at the next one: "
        ),
        "{message}"
    );
    let holder = format!("held by another process (pid {} (", std::process::id());
    assert!(message.contains(&holder), "{message}");
    assert!(!message.contains("pid 1 (init)"), "{message}");

    // With the lock released, the same prompt is planned.
    let again = claude_prompt(&data, &home, &project, "lock-session", text);
    assert!(again.get("hookSpecificOutput").is_some(), "{again}");
}
