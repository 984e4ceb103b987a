//! One [`HostProfile`] value per agent host: every fact about a host that ctx's code branches
//! on (its names, the hook events ctx registers, where its files live, how it lays out agents and
//! MCP servers, how it runs a hook handler). Code asks the profile instead of matching on
//! [`AgentHost`], so a new host is mostly a new profile (spec/activation.md §1,
//! spec/cli.md §6–§7). Its layout enums are exhaustive on purpose: a new layout must be handled
//! wherever one is matched.

use std::path::PathBuf;

use crate::hosts::{AgentHost, CLAUDE_HOOK_EVENTS, CODEX_HOOK_EVENTS, HookEvent, HostHome};

/// Claude Code's bundled skills: a personal skill of the same name replaces the bundled one, so
/// ctx refuses these names for Claude Code rather than shadow a host feature by accident
/// (spec/activation.md §2). Codex has no such skills under these names.
pub const CLAUDE_BUNDLED_SKILLS: [&str; 7] = [
    "batch",
    "code-review",
    "debug",
    "doctor",
    "loop",
    "simplify",
    "verify",
];
/// The subfolder of `~/.claude/agents` that holds ctx's agent files (the host scans
/// recursively and identifies agents by frontmatter `name`, so the folder is ctx's alone).
pub const CLAUDE_AGENTS_SUBDIR: &str = "ctx";
/// The project file of Claude Code's project-scope MCP servers.
pub const CLAUDE_PROJECT_MCP_FILE: &str = ".mcp.json";

/// How a host stores the custom agents ctx activates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentLayout {
    /// The catalog's Markdown file as is, in ctx's own subdirectory of the agents directory
    /// (the host scans it recursively): `<agents>/<subdir>/<name>.md`.
    MarkdownInSubdir { subdir: &'static str },
    /// A TOML agent file translated from the Markdown, directly in the agents directory.
    TomlFile,
}

/// Where and how a host keeps the MCP servers ctx activates.
#[derive(Debug, Clone, Copy)]
pub enum McpLayout {
    /// A member of a JSON object in a file of the session's project directory.
    ProjectJson { file: &'static str },
    /// A table of the host's TOML configuration file `file` in its directory `dir`.
    HomeToml {
        dir: fn(&HostHome) -> &std::path::Path,
        file: &'static str,
    },
}

/// How a host's hooks file names the command of a hook handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandlerStyle {
    /// `{"command": exe, "args": [...]}`: no shell.
    CommandAndArgs,
    /// `{"command": "<shell command line>"}`: the host runs it through a shell, so paths are
    /// quoted.
    ShellCommand,
}

/// Everything ctx needs to know about one agent host.
#[derive(Debug)]
#[non_exhaustive]
pub struct HostProfile {
    pub host: AgentHost,
    /// The name on the command line and in the journal (`ctx hook <name> …`).
    pub name: &'static str,
    /// The hook events ctx registers with the host.
    pub hook_events: &'static [HookEvent],
    /// The file where ctx's hooks are registered.
    pub hooks_file: fn(&HostHome) -> PathBuf,
    /// The personal skills directory the host reads.
    pub skills_dir: fn(&HostHome) -> PathBuf,
    /// The personal agents directory the host reads.
    pub agents_dir: fn(&HostHome) -> PathBuf,
    pub agent_layout: AgentLayout,
    pub mcp_layout: McpLayout,
    /// The key of the host's MCP server table (`mcpServers`, `mcp_servers`).
    pub mcp_servers_key: &'static str,
    /// Skills bundled with the host, which an activated skill must not shadow.
    pub bundled_skills: &'static [&'static str],
    /// The host re-scans its skills when a SessionStart hook asks (`reloadSkills`).
    pub reloads_skills: bool,
    /// Every hook group carries a matcher (`""` matches everything); otherwise only filtered
    /// events have one.
    pub matcher_always: bool,
    pub handler: HandlerStyle,
    /// The host runs a hook only after the person trusted it.
    pub hooks_need_trust: bool,
}

/// Claude Code (spec/cli.md §6, spec/activation.md §1).
pub static CLAUDE: HostProfile = HostProfile {
    host: AgentHost::Claude,
    name: "claude",
    hook_events: &CLAUDE_HOOK_EVENTS,
    hooks_file: HostHome::claude_settings,
    skills_dir: HostHome::claude_skills,
    agents_dir: HostHome::claude_agents,
    agent_layout: AgentLayout::MarkdownInSubdir {
        subdir: CLAUDE_AGENTS_SUBDIR,
    },
    mcp_layout: McpLayout::ProjectJson {
        file: CLAUDE_PROJECT_MCP_FILE,
    },
    mcp_servers_key: "mcpServers",
    bundled_skills: &CLAUDE_BUNDLED_SKILLS,
    reloads_skills: true,
    matcher_always: true,
    handler: HandlerStyle::CommandAndArgs,
    hooks_need_trust: false,
};

/// The OpenAI Codex CLI (spec/cli.md §6, spec/activation.md §1).
pub static CODEX: HostProfile = HostProfile {
    host: AgentHost::Codex,
    name: "codex",
    hook_events: &CODEX_HOOK_EVENTS,
    hooks_file: HostHome::codex_hooks,
    skills_dir: HostHome::agents_skills,
    agents_dir: HostHome::codex_agents,
    agent_layout: AgentLayout::TomlFile,
    mcp_layout: McpLayout::HomeToml {
        dir: HostHome::codex_home,
        file: "config.toml",
    },
    mcp_servers_key: "mcp_servers",
    bundled_skills: &[],
    reloads_skills: false,
    matcher_always: false,
    handler: HandlerStyle::ShellCommand,
    hooks_need_trust: true,
};

impl HostProfile {
    /// Whether an MCP server of this host lives in the session's project directory (so an
    /// activation needs one).
    pub fn mcp_in_project(&self) -> bool {
        matches!(self.mcp_layout, McpLayout::ProjectJson { .. })
    }
}

impl AgentHost {
    /// The host's profile: the one place its facts are written down.
    pub fn profile(self) -> &'static HostProfile {
        match self {
            AgentHost::Claude => &CLAUDE,
            AgentHost::Codex => &CODEX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_is_its_hosts() {
        for host in AgentHost::ALL {
            let profile = host.profile();
            assert_eq!(profile.host, host);
            assert_eq!(AgentHost::parse(profile.name), Some(host));
        }
    }
}
