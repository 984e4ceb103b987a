//! MCP servers: a member of the project's `.mcp.json` (Claude Code) and a table of
//! `$CODEX_HOME/config.toml` (Codex); every byte outside ctx's entry stays as the person left it.

use std::fs;
use std::path::Path;

use ctx_hosts::AgentHost;
use ctx_hosts::activation::{
    ActivationError, ActivationOutcome, ActivationTarget, ConflictReason, DeactivationOutcome,
    TargetStatus,
};
use ctx_model::CapabilityKind;

use super::fixture::{Fixture, catalog};
use crate::support;

const MCP: CapabilityKind = CapabilityKind::McpServer;

const GITHUB: &str = r#"{"mcpServers": {"github": {"type": "http", "url": "https://api.githubcopilot.com/mcp/", "headers": {"Authorization": "Bearer ${GITHUB_PERSONAL_ACCESS_TOKEN}"}}}}"#;
const SENTRY: &str = r#"{"mcpServers": {"sentry": {"type": "stdio", "command": "npx", "args": ["-y", "@sentry/mcp-server@latest"], "env": {"SENTRY_AUTH_TOKEN": "${SENTRY_AUTH_TOKEN}"}}}}"#;

/// A person's `.mcp.json`: their own server, four-space indentation, an unknown key.
const MCP_JSON: &str = "{\n    \"mcpServers\": {\n        \"mine\": {\"command\": \"my-server\", \
                        \"args\": [\"--port\", \"7\"]}\n    },\n    \"x-note\":   true\n}\n";

/// [`MCP_JSON`] with the GitHub server added after the person's, in the file's layout.
const MCP_JSON_WITH_GITHUB: &str = "{\n    \"mcpServers\": {\n        \"mine\": {\"command\": \
                                    \"my-server\", \"args\": [\"--port\", \"7\"]},\n        \
                                    \"github\": {\n            \"type\": \"http\",\n            \
                                    \"url\": \"https://api.githubcopilot.com/mcp/\",\n            \
                                    \"headers\": {\n                \"Authorization\": \"Bearer \
                                    ${GITHUB_PERSONAL_ACCESS_TOKEN}\"\n            }\n        \
                                    }\n    },\n    \"x-note\":   true\n}\n";

/// A person's `config.toml`: comments, odd spacing, their own server and a project table.
const CONFIG_TOML: &str = "# Codex settings (mine)\nmodel   = \"gpt-5-codex\"  # pinned\n\n\
                           [mcp_servers.mine]\ncommand = \"my-server\"\nargs = [ \"--port\",  \"7\" \
                           ]   # odd spacing\n\n[projects.\"/work/x\"]\ntrust_level = \
                           \"trusted\"\n\n# end of file\n";

/// The table ctx writes for [`SENTRY`].
const SENTRY_TABLE: &str = "[mcp_servers.sentry]\ncommand = \"npx\"\nargs = [\"-y\", \
                            \"@sentry/mcp-server@latest\"]\nenv_vars = [\"SENTRY_AUTH_TOKEN\"]\n";

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

#[test]
fn claude_server_is_one_member_of_the_projects_mcp_json() {
    let _shared = support::shared();
    let f = Fixture::new();
    let file = f.project().join(".mcp.json");
    fs::write(&file, MCP_JSON).unwrap();
    let report = f
        .activate(AgentHost::Claude, MCP, "github", GITHUB.as_bytes())
        .unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Activated);
    assert_eq!(report.target.entry.as_deref(), Some("mcpServers.github"));
    assert_eq!(read(&file), MCP_JSON_WITH_GITHUB);

    let head = f.head();
    assert_eq!(
        f.activate(AgentHost::Claude, MCP, "github", GITHUB.as_bytes())
            .unwrap()
            .outcome,
        ActivationOutcome::AlreadyActive
    );
    assert_eq!(f.head(), head);

    let removed = f.deactivate(AgentHost::Claude, MCP, "github").unwrap();
    assert_eq!(removed.outcome, DeactivationOutcome::Removed);
    assert_eq!(
        read(&file),
        MCP_JSON,
        "the file is the person's original again"
    );
}

#[test]
fn claude_server_creates_the_mcp_json_when_the_project_has_none() {
    let _shared = support::shared();
    let f = Fixture::new();
    f.activate(AgentHost::Claude, MCP, "sentry", SENTRY.as_bytes())
        .unwrap();
    let expected = "{\n  \"mcpServers\": {\n    \"sentry\": {\n      \"type\": \"stdio\",\n      \
                    \"command\": \"npx\",\n      \"args\": [\n        \"-y\",\n        \
                    \"@sentry/mcp-server@latest\"\n      ],\n      \"env\": {\n        \
                    \"SENTRY_AUTH_TOKEN\": \"${SENTRY_AUTH_TOKEN}\"\n      }\n    }\n  }\n}\n";
    assert_eq!(read(&f.project().join(".mcp.json")), expected);
}

#[test]
fn codex_server_is_one_table_of_config_toml_and_comments_survive() {
    let _shared = support::shared();
    let f = Fixture::new();
    fs::create_dir_all(f.codex_home()).unwrap();
    let file = f.codex_home().join("config.toml");
    fs::write(&file, CONFIG_TOML).unwrap();
    let report = f
        .activate(AgentHost::Codex, MCP, "sentry", SENTRY.as_bytes())
        .unwrap();
    assert_eq!(report.target.entry.as_deref(), Some("mcp_servers.sentry"));
    let expected = CONFIG_TOML.replace("\n[projects.", &format!("\n{SENTRY_TABLE}\n[projects."));
    assert_eq!(read(&file), expected);

    f.deactivate(AgentHost::Codex, MCP, "sentry").unwrap();
    assert_eq!(read(&file), CONFIG_TOML);
}

#[test]
fn codex_http_server_names_its_bearer_token_variable() {
    let _shared = support::shared();
    let f = Fixture::new();
    f.activate(AgentHost::Codex, MCP, "github", GITHUB.as_bytes())
        .unwrap();
    let file = f.codex_home().join("config.toml");
    assert_eq!(
        read(&file),
        "[mcp_servers.github]\nurl = \"https://api.githubcopilot.com/mcp/\"\n\
         bearer_token_env_var = \"GITHUB_PERSONAL_ACCESS_TOKEN\"\n"
    );
    f.deactivate(AgentHost::Codex, MCP, "github").unwrap();
    // ctx created the file; it stays, empty of ctx's table.
    assert_eq!(read(&file), "");
}

#[test]
fn a_persons_own_server_entry_is_never_overwritten() {
    let _shared = support::shared();
    let f = Fixture::new();
    let file = f.project().join(".mcp.json");
    let own = "{\"mcpServers\": {\"github\": {\"type\": \"http\", \"url\": \"https://example.test/mcp\"}}}\n";
    fs::write(&file, own).unwrap();
    let err = f
        .activate(AgentHost::Claude, MCP, "github", GITHUB.as_bytes())
        .unwrap_err();
    match &err {
        ActivationError::Conflict {
            path,
            entry,
            reason: ConflictReason::Foreign,
        } => {
            assert!(path.ends_with("project/.mcp.json"), "{}", path.display());
            assert_eq!(entry.as_deref(), Some("mcpServers.github"));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("mcpServers.github"), "{err}");
    assert_eq!(read(&file), own);
    assert_eq!(f.head(), 0, "no intent was recorded");
}

#[test]
fn an_edited_server_table_is_never_removed_but_a_reformatted_one_is() {
    let _shared = support::shared();
    let f = Fixture::new();
    fs::create_dir_all(f.codex_home()).unwrap();
    let file = f.codex_home().join("config.toml");
    fs::write(&file, CONFIG_TOML).unwrap();
    f.activate(AgentHost::Codex, MCP, "sentry", SENTRY.as_bytes())
        .unwrap();

    // Layout only: the host reads the same values, so the entry is still ctx's.
    let reformatted = read(&file).replace(
        "args = [\"-y\", \"@sentry/mcp-server@latest\"]",
        "args = [ \"-y\",\n  '@sentry/mcp-server@latest' ]  # spread out",
    );
    fs::write(&file, &reformatted).unwrap();
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Active
    );

    // A changed value: the person's now.
    let edited = reformatted.replace("@sentry/mcp-server@latest", "@sentry/mcp-server@0.9.0");
    fs::write(&file, &edited).unwrap();
    assert_eq!(
        f.actuator.inspect().unwrap()[0].status,
        TargetStatus::Drifted
    );
    let head = f.head();
    let err = f.deactivate(AgentHost::Codex, MCP, "sentry").unwrap_err();
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
    assert_eq!(read(&file), edited);
    assert_eq!(f.head(), head);

    // Back to ctx's values (in the person's layout): deactivation removes just that table.
    fs::write(&file, &reformatted).unwrap();
    f.deactivate(AgentHost::Codex, MCP, "sentry").unwrap();
    assert_eq!(read(&file), CONFIG_TOML);
}

#[test]
fn a_literal_secret_is_never_written() {
    let _shared = support::shared();
    let f = Fixture::new();
    let leaky = r#"{"mcpServers": {"leaky": {"command": "npx", "args": ["-y", "leaky-server"], "env": {"GITHUB_TOKEN": "ghp_abcdef0123456789"}}}}"#;
    for host in AgentHost::ALL {
        let err = f
            .activate(host, MCP, "leaky", leaky.as_bytes())
            .unwrap_err();
        match err {
            ActivationError::LiteralSecret { field, .. } => assert_eq!(field, "env.GITHUB_TOKEN"),
            other => panic!("{other:?}"),
        }
    }
    assert!(!f.project().join(".mcp.json").exists());
    assert!(!f.codex_home().join("config.toml").exists());
    assert_eq!(f.head(), 0);
}

#[test]
fn codex_refuses_servers_it_would_read_differently() {
    let _shared = support::shared();
    let f = Fixture::new();
    // `${CLAUDE_PROJECT_DIR}` in args: Codex does not expand it.
    let err = f
        .activate(
            AgentHost::Codex,
            MCP,
            "git",
            &catalog("mcp-servers/git.json"),
        )
        .unwrap_err();
    assert!(
        matches!(err, ActivationError::UnsupportedForHost { .. }),
        "{err:?}"
    );
    assert!(!f.codex_home().join("config.toml").exists());
}

#[test]
fn a_claude_server_needs_an_absolute_project_directory() {
    assert!(matches!(
        ActivationTarget::new(AgentHost::Claude, MCP, "github", None),
        Err(ActivationError::ProjectDirRequired { .. })
    ));
    assert!(matches!(
        ActivationTarget::new(AgentHost::Claude, MCP, "github", Some(Path::new("project"))),
        Err(ActivationError::ProjectDirNotAbsolute { .. })
    ));
    assert!(ActivationTarget::new(AgentHost::Codex, MCP, "github", None).is_ok());
    assert!(matches!(
        ActivationTarget::new(AgentHost::Codex, MCP, "workspace", None),
        Err(ActivationError::InvalidName { .. })
    ));
}

#[test]
fn a_new_version_of_a_server_replaces_ctxs_table_in_place() {
    let _shared = support::shared();
    let f = Fixture::new();
    fs::create_dir_all(f.codex_home()).unwrap();
    let file = f.codex_home().join("config.toml");
    fs::write(&file, CONFIG_TOML).unwrap();
    f.activate(AgentHost::Codex, MCP, "sentry", SENTRY.as_bytes())
        .unwrap();
    let pinned = SENTRY.replace("@latest", "@0.9.0");
    let report = f
        .activate(AgentHost::Codex, MCP, "sentry", pinned.as_bytes())
        .unwrap();
    assert_eq!(report.outcome, ActivationOutcome::Replaced);
    let expected = CONFIG_TOML.replace(
        "\n[projects.",
        &format!(
            "\n{}\n[projects.",
            SENTRY_TABLE.replace("@latest", "@0.9.0")
        ),
    );
    assert_eq!(read(&file), expected);

    // The same on the Claude side: the member's value is replaced where it stands.
    let json = f.project().join(".mcp.json");
    fs::write(&json, MCP_JSON).unwrap();
    f.activate(AgentHost::Claude, MCP, "github", GITHUB.as_bytes())
        .unwrap();
    let moved = GITHUB.replace("api.githubcopilot.com", "copilot.example.test");
    f.activate(AgentHost::Claude, MCP, "github", moved.as_bytes())
        .unwrap();
    assert_eq!(
        read(&json),
        MCP_JSON_WITH_GITHUB.replace("api.githubcopilot.com", "copilot.example.test")
    );
    f.deactivate(AgentHost::Claude, MCP, "github").unwrap();
    assert_eq!(read(&json), MCP_JSON);
}
