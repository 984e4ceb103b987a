//! What killed or failed writers leave in a data directory goes at the next open or session start
//! (spec/cli.md §2): catalog staging of killed first ingests and temporary files of killed atomic
//! writes, but never what a live writer may still be using.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::hook::{Machine, claude_prompt, hook_env, hook_input};

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("run true");
    let pid = child.id();
    child.wait().expect("wait for true");
    pid
}

fn plant_file(path: &Path) {
    fs::write(path, b"left behind").expect("plant a leftover");
}

#[test]
fn leftovers_of_killed_writers_are_removed_and_a_live_writers_files_stay() {
    let machine = Machine::new("project");
    let (data, home, project) = machine.paths();
    claude_prompt(
        &data,
        &home,
        &project,
        "sweep-session",
        "write rust unit tests",
    );

    let dead = dead_pid();
    let live = std::process::id();
    // Staging and retired catalogs of killed ingests, with content.
    for name in [
        format!(".catalog.new-{dead}"),
        format!(".catalog.old-{live}"),
    ] {
        let dir = data.join(name).join("skills");
        fs::create_dir_all(&dir).unwrap();
        plant_file(&dir.join("SKILL.md"));
    }
    // Temporary files of killed writes: in the root (the policy store's `PID-N` form), in the
    // work directory, and one of a live process that is an hour and more old.
    let dead_root = data.join(format!(".install-policy.json.tmp-{dead}-0"));
    let dead_work = data.join("work").join(format!(".abc.json.tmp-{dead}"));
    let old_live = data.join("work").join(format!(".old.json.tmp-{live}"));
    // A fresh temporary file of a live process: its writer may still be at work.
    let fresh_live = data.join("work").join(format!(".new.json.tmp-{live}"));
    for path in [&dead_root, &dead_work, &old_live, &fresh_live] {
        plant_file(path);
    }
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7_200);
    fs::File::options()
        .write(true)
        .open(&old_live)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    // Not ctx's: a file that only looks similar stays.
    let other = data.join("work").join("notes.tmp-1");
    plant_file(&other);

    // A prompt opens the data directory: the root's leftovers go.
    claude_prompt(&data, &home, &project, "sweep-session", "write terraform");
    for name in [
        format!(".catalog.new-{dead}"),
        format!(".catalog.old-{live}"),
    ] {
        assert!(!data.join(&name).exists(), "{name} stayed");
    }
    assert!(!dead_root.exists(), "{} stayed", dead_root.display());
    // The work directory is swept at a session's start.
    assert!(dead_work.exists());
    let start = hook_env(
        &data,
        &home,
        "claude",
        "session-start",
        &hook_input("claude", "SessionStart", "sweep-session-2", &project),
    );
    assert_eq!(start.code, 0, "{start:?}");
    assert!(!dead_work.exists(), "{} stayed", dead_work.display());
    assert!(!old_live.exists(), "{} stayed", old_live.display());
    assert!(
        fresh_live.exists(),
        "a live writer's fresh file was removed"
    );
    assert!(other.exists(), "a file that is not ctx's was removed");
}
