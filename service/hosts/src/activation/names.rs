//! Name rules of the three kinds, checked before anything touches the disk (spec/activation.md §2).
//!
//! The name becomes a directory entry (`skills/<name>`, `agents/ctx/<name>.md`) or a config key
//! (`mcpServers.<name>`, `[mcp_servers.<name>]`), so the rules also keep it free of path
//! separators, dots and quoting.

use crate::hosts::AgentHost;
use crate::profile::CLAUDE_BUNDLED_SKILLS;

use super::error::ActivationError;
use ctx_model::CapabilityKind;

/// Longest skill name (Agent Skills specification), in bytes.
pub const SKILL_NAME_MAX_BYTES: usize = 64;
/// Longest agent name, in bytes (the skill limit; Claude Code states none, Codex reads it as a
/// file name).
pub const AGENT_NAME_MAX_BYTES: usize = 64;
/// Longest MCP server name, in bytes.
pub const SERVER_NAME_MAX_BYTES: usize = 64;

/// Skill folder names with a meaning of their own: claude.ai-synced skills live in `synced`.
pub const RESERVED_SKILL_NAMES: [&str; 1] = ["synced"];

/// Words the Skills API refuses inside skill names; ctx keeps to the portable rule.
pub const RESERVED_SKILL_WORDS: [&str; 2] = ["anthropic", "claude"];

/// MCP server names Claude Code reserves for its own servers (the others it reserves contain a
/// space, which the character rule already refuses).
pub const RESERVED_SERVER_NAMES: [&str; 3] = ["workspace", "claude-in-chrome", "computer-use"];

/// Checks `name` for `kind` on `host`.
pub(crate) fn check(
    host: AgentHost,
    kind: CapabilityKind,
    name: &str,
) -> Result<(), ActivationError> {
    let refuse = |reason: &'static str| ActivationError::InvalidName {
        kind,
        name: name.to_owned(),
        reason,
    };
    match kind {
        CapabilityKind::Skill => check_skill(name)
            .and_then(|()| match host {
                AgentHost::Claude if CLAUDE_BUNDLED_SKILLS.contains(&name) => {
                    Err("it would shadow a skill bundled with Claude Code")
                }
                _ => Ok(()),
            })
            .map_err(refuse),
        CapabilityKind::Agent => check_agent(name).map_err(refuse),
        CapabilityKind::McpServer => check_server(name).map_err(refuse),
        CapabilityKind::Harness => Err(not_activatable(kind, name)),
    }
}

/// The refusal of a kind that is not installable (a harness is loaded, never put on a host);
/// before the one `ctx_model::CapabilityKind`, activation's own kind could not name it.
pub(crate) fn not_activatable(kind: CapabilityKind, name: &str) -> ActivationError {
    ActivationError::InvalidName {
        kind,
        name: name.to_owned(),
        reason: "ctx activates only skills, agents and MCP servers on an agent host",
    }
}

/// The shape every recorded name has, whatever the kind: 1 to 64 ASCII letters, digits, `-`
/// or `_`. The ledger decodes records with this rule rather than [`check`], so a name rule
/// tightened later (a new bundled skill) never makes earlier records unreadable.
pub(crate) fn is_recorded_name(name: &str) -> bool {
    (1..=SKILL_NAME_MAX_BYTES
        .max(AGENT_NAME_MAX_BYTES)
        .max(SERVER_NAME_MAX_BYTES))
        .contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn check_skill(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > SKILL_NAME_MAX_BYTES {
        return Err("a skill name has 1 to 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("a skill name has only lowercase letters, digits and hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err("a skill name neither starts nor ends with a hyphen nor has two in a row");
    }
    if RESERVED_SKILL_NAMES.contains(&name) {
        return Err("the folder name is reserved for claude.ai-synced skills");
    }
    if RESERVED_SKILL_WORDS.iter().any(|w| name.contains(w)) {
        return Err("skill names may not contain the reserved words anthropic or claude");
    }
    Ok(())
}

fn check_agent(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > AGENT_NAME_MAX_BYTES {
        return Err("an agent name has 1 to 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("an agent name has only lowercase letters, digits and hyphens");
    }
    if name.starts_with('-') {
        return Err("an agent name does not start with a hyphen");
    }
    Ok(())
}

fn check_server(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > SERVER_NAME_MAX_BYTES {
        return Err("a server name has 1 to 64 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err("a server name has only letters, digits, hyphens and underscores");
    }
    if RESERVED_SERVER_NAMES.contains(&name) {
        return Err("Claude Code reserves this server name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_names_follow_the_agent_skills_rules_and_spare_bundled_skills() {
        for ok in [
            "rust",
            "pdf",
            "a",
            "web-artifacts-builder",
            "go2",
            &"a".repeat(64),
        ] {
            assert!(check_skill(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            &"a".repeat(65),
            "Rust",
            "-rust",
            "rust-",
            "ru--st",
            "ru_st",
            "ru.st",
            "../x",
            "synced",
            "my-claude-helper",
        ] {
            assert!(check_skill(bad).is_err(), "{bad}");
        }
        for bundled in ["doctor", "code-review", "loop"] {
            assert!(check(AgentHost::Claude, CapabilityKind::Skill, bundled).is_err());
            assert!(check(AgentHost::Codex, CapabilityKind::Skill, bundled).is_ok());
        }
    }

    #[test]
    fn agent_and_server_names_keep_to_their_character_sets() {
        assert!(check_agent("code-reviewer").is_ok());
        assert!(check_agent("agent-sdk-verifier-py").is_ok());
        for bad in ["", "-x", "Code", "a:b", "a_b", "a/b"] {
            assert!(check_agent(bad).is_err(), "{bad}");
        }
        for ok in ["github", "sequential-thinking", "My_Server2"] {
            assert!(check_server(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "workspace",
            "computer-use",
            "a b",
            "a.b",
            "a/b",
            "\"x\"",
        ] {
            assert!(check_server(bad).is_err(), "{bad}");
        }
    }
}
