//! Agents: the Markdown file in Claude Code's own subfolder, the translated TOML for Codex.

use std::fs;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{
    ActivationError, ActivationOutcome, CODEX_AGENT_HEADER, ConflictReason, DeactivationOutcome,
    TargetStatus,
};
use ctx_model::CapabilityKind;

use super::fixture::{Fixture, catalog, names};
use crate::support;

const AGENT: CapabilityKind = CapabilityKind::Agent;

/// A Claude Code agent with quoting, a Claude-only model, a read-only tool list, an escalating
/// permission mode and a hook: everything the Codex translation must drop or map.
const REVIEWER_MD: &str = "---\nname: strict-reviewer\ndescription: Reviews \"risky\" diffs; \
                           paths like C:\\temp count\ntools: Read, Grep, Glob, Bash(git diff \
                           *)\nmodel: opus\neffort: medium\npermissionMode: \
                           bypassPermissions\nhooks:\n  Stop:\n    - hooks: []\n---\n\nYou \
                           review diffs.\n\tQuote \"\"\" and backslash \\ stay text.\n\n";

/// [`REVIEWER_MD`] without the Claude-only keys (`permissionMode`, `hooks`), which Codex refuses.
const REVIEWER_PLAIN_MD: &str = "---\nname: strict-reviewer\ndescription: Reviews \"risky\" \
                                 diffs; paths like C:\\temp count\ntools: Read, Grep, Glob, \
                                 Bash(git diff *)\nmodel: opus\neffort: medium\n---\n\nYou \
                                 review diffs.\n\tQuote \"\"\" and backslash \\ stay text.\n\n";

/// The Codex agent for [`REVIEWER_PLAIN_MD`], written out by hand.
const REVIEWER_TOML: &str = "name = \"strict-reviewer\"\ndescription = \"Reviews \\\"risky\\\" \
                             diffs; paths like C:\\\\temp count\"\nmodel_reasoning_effort = \
                             \"medium\"\nsandbox_mode = \"read-only\"\ndeveloper_instructions = \
                             \"\"\"\nYou review diffs.\n\tQuote \\\"\\\"\\\" and backslash \\\\ \
                             stay text.\"\"\"\n";

#[test]
fn claude_agent_file_is_the_catalog_bytes_in_ctxs_subfolder() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("agents/code-reviewer.md");
    let report = f
        .activate(AgentHost::Claude, AGENT, "code-reviewer", &body)
        .unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Activated);
    let file = f.home().join(".claude/agents/ctx/code-reviewer.md");
    assert_eq!(fs::read(&file).unwrap(), body);
    assert_eq!(names(&f.home().join(".claude/agents")), ["ctx"]);
    assert_eq!(
        names(&f.home().join(".claude/agents/ctx")),
        ["code-reviewer.md"]
    );
    // The state digest of an agent file is the plain SHA-256 of its bytes.
    assert_eq!(report.state, ctx_model::sha256_hex_bytes(&body));

    let head = f.head();
    let again = f
        .activate(AgentHost::Claude, AGENT, "code-reviewer", &body)
        .unwrap();
    assert_eq!(again.outcome, ActivationOutcome::AlreadyActive);
    assert_eq!(f.head(), head);

    let removed = f
        .deactivate(AgentHost::Claude, AGENT, "code-reviewer")
        .unwrap();
    assert_eq!(removed.outcome, DeactivationOutcome::Removed);
    assert!(!file.exists());
    assert!(names(&f.home().join(".claude/agents/ctx")).is_empty());
    assert!(names(&f.home().join(".claude/.ctx-staging")).is_empty());
}

#[test]
fn codex_agent_is_translated_byte_exact_and_removed() {
    let _shared = support::shared();
    let f = Fixture::new();
    f.activate(
        AgentHost::Codex,
        AGENT,
        "strict-reviewer",
        REVIEWER_PLAIN_MD.as_bytes(),
    )
    .unwrap();
    let file = f.codex_home().join("agents/strict-reviewer.toml");
    let written = fs::read_to_string(&file).unwrap();
    assert_eq!(written, format!("{CODEX_AGENT_HEADER}{REVIEWER_TOML}"));
    assert!(!written.contains("danger-full-access"));
    assert!(!written.contains("opus"));
    assert!(!written.contains("bypass"));

    f.deactivate(AgentHost::Codex, AGENT, "strict-reviewer")
        .unwrap();
    assert!(!file.exists());
    assert!(names(&f.codex_home().join("agents")).is_empty());
}

#[test]
fn codex_translation_of_a_catalog_agent_keeps_its_instructions() {
    let _shared = support::shared();
    let f = Fixture::new();
    let md = String::from_utf8(catalog("agents/debugger.md")).unwrap();
    f.activate(AgentHost::Codex, AGENT, "debugger", md.as_bytes())
        .unwrap();
    let written = fs::read_to_string(f.codex_home().join("agents/debugger.toml")).unwrap();
    // Build the expected file from the Markdown's parts.
    let (front, body) = md
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .unwrap();
    let field = |key: &str| {
        front
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}: ")))
            .unwrap()
            .to_owned()
    };
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    // debugger may Edit and run any Bash command: no sandbox narrowing, and `model: inherit`
    // has no Codex value.
    let expected = format!(
        "{CODEX_AGENT_HEADER}name = \"debugger\"\ndescription = \"{}\"\ndeveloper_instructions = \
         \"\"\"\n{}\"\"\"\n",
        escape(&field("description")),
        escape(body.trim_start_matches('\n').trim_end())
    );
    assert_eq!(written, expected);
}

#[test]
fn a_persons_agent_file_is_never_overwritten() {
    let _shared = support::shared();
    let f = Fixture::new();
    let dir = f.home().join(".claude/agents/ctx");
    fs::create_dir_all(&dir).unwrap();
    let own = b"---\nname: code-reviewer\ndescription: mine\n---\nMy reviewer.\n";
    fs::write(dir.join("code-reviewer.md"), own).unwrap();
    let head = f.head();
    let err = f
        .activate(
            AgentHost::Claude,
            AGENT,
            "code-reviewer",
            &catalog("agents/code-reviewer.md"),
        )
        .unwrap_err();
    assert!(
        matches!(&err, ActivationError::Conflict { reason: ConflictReason::Foreign, path, .. }
            if path.ends_with("agents/ctx/code-reviewer.md")),
        "{err:?}"
    );
    assert_eq!(fs::read(dir.join("code-reviewer.md")).unwrap(), own);
    assert_eq!(f.head(), head);
}

#[test]
fn a_duplicate_agent_name_elsewhere_in_the_tree_is_a_conflict() {
    let _shared = support::shared();
    let f = Fixture::new();
    let team = f.home().join(".claude/agents/team/nested");
    fs::create_dir_all(&team).unwrap();
    let other = team.join("reviewer.md");
    fs::write(
        &other,
        b"---\nname: code-reviewer\ndescription: the team's\n---\nTeam.\n",
    )
    .unwrap();
    let head = f.head();
    let err = f
        .activate(
            AgentHost::Claude,
            AGENT,
            "code-reviewer",
            &catalog("agents/code-reviewer.md"),
        )
        .unwrap_err();
    match err {
        ActivationError::Conflict {
            reason: ConflictReason::DuplicateAgentName { other: found },
            ..
        } => assert_eq!(found, fs::canonicalize(&other).unwrap()),
        other => panic!("{other:?}"),
    }
    assert!(
        !f.home()
            .join(".claude/agents/ctx/code-reviewer.md")
            .exists()
    );
    assert_eq!(f.head(), head);

    // Codex: another TOML declaring the same name.
    let agents = f.codex_home().join("agents");
    fs::create_dir_all(&agents).unwrap();
    fs::write(
        agents.join("mine.toml"),
        "name = \"debugger\"\ndescription = \"x\"\n",
    )
    .unwrap();
    let err = f
        .activate(
            AgentHost::Codex,
            AGENT,
            "debugger",
            &catalog("agents/debugger.md"),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            ActivationError::Conflict {
                reason: ConflictReason::DuplicateAgentName { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn deactivation_is_refused_after_the_person_edited_the_agent_file() {
    let _shared = support::shared();
    let f = Fixture::new();
    let body = catalog("agents/code-explorer.md");
    f.activate(AgentHost::Claude, AGENT, "code-explorer", &body)
        .unwrap();
    let file = f.home().join(".claude/agents/ctx/code-explorer.md");
    let mut edited = body.clone();
    edited.extend_from_slice(b"\nAlso check the tests.\n");
    fs::write(&file, &edited).unwrap();
    let head = f.head();
    let err = f
        .deactivate(AgentHost::Claude, AGENT, "code-explorer")
        .unwrap_err();
    assert!(
        matches!(
            &err,
            ActivationError::Conflict {
                reason: ConflictReason::EditedSinceActivation,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(fs::read(&file).unwrap(), edited);
    assert_eq!(f.head(), head);
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Drifted
    );
}

#[test]
fn agent_material_that_does_not_name_itself_is_refused() {
    let _shared = support::shared();
    let f = Fixture::new();
    let err = f
        .activate(
            AgentHost::Claude,
            AGENT,
            "debugger",
            &catalog("agents/code-reviewer.md"),
        )
        .unwrap_err();
    assert!(
        matches!(err, ActivationError::InvalidMaterial { .. }),
        "{err:?}"
    );
    assert_eq!(f.head(), 0);
}

#[test]
fn an_agent_whose_hooks_or_permissions_codex_cannot_carry_is_refused_there() {
    let _shared = support::shared();
    let f = Fixture::new();
    let head = f.head();
    let refused = f
        .activate(
            AgentHost::Codex,
            AGENT,
            "strict-reviewer",
            REVIEWER_MD.as_bytes(),
        )
        .unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("hooks, permissionMode"), "{message}");
    assert!(!f.codex_home().join("agents/strict-reviewer.toml").exists());
    assert_eq!(f.head(), head, "nothing recorded");
    // The catalog's db-reader, whose hook blocks writes, is one of them.
    let db_reader = catalog("agents/db-reader.md");
    assert!(
        f.activate(AgentHost::Codex, AGENT, "db-reader", &db_reader)
            .is_err()
    );
    // Claude Code takes it as it is.
    f.activate(AgentHost::Claude, AGENT, "db-reader", &db_reader)
        .unwrap();
}
