//! Crashes at the protocol's seams (fail points), and what `recover()` makes of them.

use std::fs;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{
    ActivationError, ActivationOutcome, ConflictReason, Operation, OutcomeResult, TargetStatus,
    failpoints,
};
use ctx_model::CapabilityKind;

use super::fixture::{Fixture, catalog, names};
use crate::support::FailPoints;

fn crash_at(point: &str) {
    fail::cfg(point, "return").unwrap();
}

fn fired(err: ActivationError, point: &str) {
    match err {
        ActivationError::FailPoint { name } => assert_eq!(name, point),
        other => panic!("expected the fail point {point}, got {other:?}"),
    }
}

#[test]
fn a_crash_after_the_intent_recovers_as_not_applied_and_a_retry_activates() {
    let _fp = FailPoints::setup();
    let f = Fixture::new();
    let cases: [(AgentHost, CapabilityKind, &str, Vec<u8>); 3] = [
        (
            AgentHost::Claude,
            CapabilityKind::Skill,
            "rust",
            catalog("skills/rust/SKILL.md"),
        ),
        (
            AgentHost::Codex,
            CapabilityKind::Agent,
            "debugger",
            catalog("agents/debugger.md"),
        ),
        (
            AgentHost::Claude,
            CapabilityKind::McpServer,
            "memory",
            catalog("mcp-servers/memory.json"),
        ),
    ];
    crash_at(failpoints::AFTER_INTENT);
    for (host, kind, name, body) in &cases {
        fired(
            f.activate(*host, *kind, name, body).unwrap_err(),
            failpoints::AFTER_INTENT,
        );
    }
    fail::remove(failpoints::AFTER_INTENT);
    // Nothing reached the hosts, and each target is pending.
    assert!(names(&f.home().join(".claude/skills")).is_empty());
    assert!(names(&f.codex_home().join("agents")).is_empty());
    assert!(!f.project().join(".mcp.json").exists());
    let pending = f.actuator.inspect().unwrap();
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|t| matches!(
        t.status,
        TargetStatus::Pending {
            operation: Operation::Activate,
            ..
        }
    )));
    // An operation on a pending target waits for recovery.
    let (host, kind, name, body) = &cases[0];
    assert!(matches!(
        f.activate(*host, *kind, name, body),
        Err(ActivationError::PendingIntent { .. })
    ));

    let recovered = f.actuator.recover().unwrap();
    assert_eq!(recovered.len(), 3);
    assert!(
        recovered
            .iter()
            .all(|r| r.result == OutcomeResult::NotApplied),
        "{recovered:?}"
    );
    assert!(
        f.actuator.recover().unwrap().is_empty(),
        "recovery is done once"
    );

    for (host, kind, name, body) in &cases {
        let report = f.activate(*host, *kind, name, body).unwrap();
        assert_eq!(report.outcome, ActivationOutcome::Activated);
    }
    let inspected = f.actuator.inspect().unwrap();
    assert!(
        inspected.iter().all(|t| t.status == TargetStatus::Active),
        "{inspected:?}"
    );
}

#[test]
fn a_crash_after_the_step_recovers_as_applied() {
    let _fp = FailPoints::setup();
    let f = Fixture::new();
    let body = catalog("agents/code-reviewer.md");
    crash_at(failpoints::AFTER_APPLY);
    fired(
        f.activate(
            AgentHost::Claude,
            CapabilityKind::Agent,
            "code-reviewer",
            &body,
        )
        .unwrap_err(),
        failpoints::AFTER_APPLY,
    );
    let sentry = catalog("mcp-servers/sentry.json");
    fired(
        f.activate(
            AgentHost::Codex,
            CapabilityKind::McpServer,
            "sentry",
            &sentry,
        )
        .unwrap_err(),
        failpoints::AFTER_APPLY,
    );
    fail::remove(failpoints::AFTER_APPLY);
    let file = f.home().join(".claude/agents/ctx/code-reviewer.md");
    assert_eq!(fs::read(&file).unwrap(), body);

    let recovered = f.actuator.recover().unwrap();
    assert_eq!(recovered.len(), 2);
    assert!(
        recovered.iter().all(|r| r.result == OutcomeResult::Applied),
        "{recovered:?}"
    );
    assert_eq!(
        f.activate(
            AgentHost::Claude,
            CapabilityKind::Agent,
            "code-reviewer",
            &body
        )
        .unwrap()
        .outcome,
        ActivationOutcome::AlreadyActive
    );

    // The same seam in a deactivation: the file is gone, recovery says so.
    crash_at(failpoints::AFTER_APPLY);
    fired(
        f.deactivate(AgentHost::Claude, CapabilityKind::Agent, "code-reviewer")
            .unwrap_err(),
        failpoints::AFTER_APPLY,
    );
    fail::remove(failpoints::AFTER_APPLY);
    assert!(!file.exists());
    let recovered = f.actuator.recover().unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].operation, Operation::Deactivate);
    assert_eq!(recovered[0].result, OutcomeResult::Applied);
    assert!(names(&f.home().join(".claude/.ctx-staging")).is_empty());
    let inspected = f.actuator.inspect().unwrap();
    assert_eq!(
        inspected.len(),
        1,
        "only the Codex server is still ctx's: {inspected:?}"
    );
}

#[test]
fn a_target_changed_by_hand_between_crash_and_recovery_is_indeterminate() {
    let _fp = FailPoints::setup();
    let f = Fixture::new();
    crash_at(failpoints::AFTER_INTENT);
    fired(
        f.activate(
            AgentHost::Claude,
            CapabilityKind::Agent,
            "debugger",
            &catalog("agents/debugger.md"),
        )
        .unwrap_err(),
        failpoints::AFTER_INTENT,
    );
    fail::remove(failpoints::AFTER_INTENT);
    let dir = f.home().join(".claude/agents/ctx");
    fs::create_dir_all(&dir).unwrap();
    let own = b"---\nname: debugger\ndescription: mine\n---\nMine.\n";
    fs::write(dir.join("debugger.md"), own).unwrap();

    let recovered = f.actuator.recover().unwrap();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].result, OutcomeResult::Indeterminate);
    assert_eq!(
        fs::read(dir.join("debugger.md")).unwrap(),
        own,
        "recovery never writes"
    );
    // ctx never wrote this file, so a new activation refuses to replace it.
    let err = f
        .activate(
            AgentHost::Claude,
            CapabilityKind::Agent,
            "debugger",
            &catalog("agents/debugger.md"),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            ActivationError::Conflict {
                reason: ConflictReason::Foreign,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_crash_while_replacing_a_link_recovers_either_way() {
    let _fp = FailPoints::setup();
    let f = Fixture::new();
    let v1 = super::fixture::skill_body("notes", "One.");
    let v2 = super::fixture::skill_body("notes", "Two.");
    f.activate(AgentHost::Codex, CapabilityKind::Skill, "notes", &v1)
        .unwrap();
    let link = f.home().join(".agents/skills/notes");

    crash_at(failpoints::AFTER_INTENT);
    fired(
        f.activate(AgentHost::Codex, CapabilityKind::Skill, "notes", &v2)
            .unwrap_err(),
        failpoints::AFTER_INTENT,
    );
    fail::remove(failpoints::AFTER_INTENT);
    assert_eq!(fs::read_link(&link).unwrap(), f.store_dir(&v1));
    assert_eq!(
        f.actuator.recover().unwrap()[0].result,
        OutcomeResult::NotApplied
    );
    // The ledger still answers for v1: a deactivation removes it.
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Active
    );

    crash_at(failpoints::AFTER_APPLY);
    fired(
        f.activate(AgentHost::Codex, CapabilityKind::Skill, "notes", &v2)
            .unwrap_err(),
        failpoints::AFTER_APPLY,
    );
    fail::remove(failpoints::AFTER_APPLY);
    assert_eq!(fs::read_link(&link).unwrap(), f.store_dir(&v2));
    assert_eq!(
        f.actuator.recover().unwrap()[0].result,
        OutcomeResult::Applied
    );
    assert!(names(&f.home().join(".agents/.ctx-staging")).is_empty());
    f.deactivate(AgentHost::Codex, CapabilityKind::Skill, "notes")
        .unwrap();
    assert!(fs::symlink_metadata(&link).is_err());
}
