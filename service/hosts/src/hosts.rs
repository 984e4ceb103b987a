//! The agent hosts ctx plugs into (Claude Code and Codex): their names, the hook events ctx
//! registers with each, and where each keeps its files under a person's home directory.
//!
//! Facts from spec/activation.md §3, §6, §7; spec/cli.md §7.2, §7. The home directory is always
//! passed in (from `$HOME` / `$CODEX_HOME` by the command line, a temporary directory in tests),
//! never read from the process environment here.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// An agent host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentHost {
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
}

impl AgentHost {
    /// Both hosts, in a fixed order.
    pub const ALL: [AgentHost; 2] = [AgentHost::Claude, AgentHost::Codex];

    /// The name used on the command line and in the journal: `claude` or `codex`.
    pub fn as_str(self) -> &'static str {
        self.profile().name
    }

    /// Parses `claude` or `codex`.
    pub fn parse(name: &str) -> Option<AgentHost> {
        AgentHost::ALL.into_iter().find(|h| h.as_str() == name)
    }

    /// The hook events ctx registers with this host.
    pub fn hook_events(self) -> &'static [HookEvent] {
        self.profile().hook_events
    }

    /// The hook event whose ctx name (`ctx hook <host> <name>`) is `name`; several host events
    /// may share one ctx name (PostToolUse and PostToolUseFailure are both `tool-outcome`).
    pub fn hook_event_named(self, name: &str) -> Option<&'static HookEvent> {
        self.hook_events().iter().find(|e| e.ctx_name == name)
    }
}

impl fmt::Display for AgentHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hook registration of ctx with a host: the host's event name, the ctx command's event
/// word, the matcher and the handler options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookEvent {
    /// The host's event name, as in its settings (`UserPromptSubmit`).
    pub host_event: &'static str,
    /// The last word of `ctx hook <host> <word>`.
    pub ctx_name: &'static str,
    /// The matcher of the registration; `None` matches everything.
    pub matcher: Option<&'static str>,
    /// Whether the host may run the handler in the background (it never blocks anything).
    pub background: bool,
    /// The handler's timeout in seconds.
    pub timeout_seconds: u32,
}

/// The share of a hook's host timeout that ctx may spend waiting for locks (spec/cli.md §7.4):
/// the rest is left for the hook's own work and its answer, so a busy data directory makes the
/// hook answer with a sentence instead of being killed by the host.
pub const HOOK_LOCK_WAIT_SHARE_PERCENT: u32 = 60;

impl HookEvent {
    /// The longest a call of this event waits for every lock it takes, together.
    pub fn lock_wait(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            u64::from(self.timeout_seconds) * 10 * u64::from(HOOK_LOCK_WAIT_SHARE_PERCENT),
        )
    }
}

const fn event(
    host_event: &'static str,
    ctx_name: &'static str,
    matcher: Option<&'static str>,
    background: bool,
    timeout_seconds: u32,
) -> HookEvent {
    HookEvent {
        host_event,
        ctx_name,
        matcher,
        background,
        timeout_seconds,
    }
}

/// The tools whose outcomes ctx records in Claude Code: skills, agents and MCP tools.
pub const CLAUDE_TOOL_MATCHER: &str = "Skill|Agent|mcp__.*";

/// Claude Code's registrations (spec/cli.md §7, §7.2). UserPromptSubmit blocks the person's prompt,
/// so its timeout is short; SessionEnd shares a 1.5 s budget unless a timeout raises it.
pub const CLAUDE_HOOK_EVENTS: [HookEvent; 7] = [
    event(
        "SessionStart",
        "session-start",
        Some("startup|resume|clear|compact"),
        false,
        10,
    ),
    event("UserPromptSubmit", "user-prompt-submit", None, false, 10),
    event(
        "PostToolUse",
        "tool-outcome",
        Some(CLAUDE_TOOL_MATCHER),
        true,
        10,
    ),
    event(
        "PostToolUseFailure",
        "tool-outcome",
        Some(CLAUDE_TOOL_MATCHER),
        true,
        10,
    ),
    event("SubagentStart", "subagent", None, true, 10),
    event("SubagentStop", "subagent", None, true, 10),
    event("SessionEnd", "session-end", None, false, 5),
];

/// Codex's registrations: the same events except PostToolUseFailure, which Codex does not have.
/// Codex qualifies MCP tool names differently, so tool outcomes are not filtered by a matcher.
pub const CODEX_HOOK_EVENTS: [HookEvent; 6] = [
    event(
        "SessionStart",
        "session-start",
        Some("startup|resume|clear|compact"),
        false,
        10,
    ),
    event("UserPromptSubmit", "user-prompt-submit", None, false, 10),
    event("PostToolUse", "tool-outcome", None, true, 10),
    event("SubagentStart", "subagent", None, true, 10),
    event("SubagentStop", "subagent", None, true, 10),
    event("SessionEnd", "session-end", None, false, 5),
];

/// Where the hosts keep a person's files: `$HOME` and `$CODEX_HOME` (default `$HOME/.codex`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostHome {
    home: PathBuf,
    codex_home: PathBuf,
}

/// Why the hosts' home directory is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostHomeError {
    #[error("HOME is not set, so the hosts' configuration cannot be found")]
    NoHome,
    #[error("{variable}={value:?} is not an absolute path")]
    Relative {
        variable: &'static str,
        value: PathBuf,
    },
}

impl HostHome {
    /// The home directories named by `env` (`HOME`, `CODEX_HOME`); both must be absolute.
    pub fn from_env(env: impl Fn(&str) -> Option<OsString>) -> Result<HostHome, HostHomeError> {
        let absolute = |variable: &'static str| -> Result<Option<PathBuf>, HostHomeError> {
            match env(variable).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(value) => {
                    let path = PathBuf::from(value);
                    if path.is_absolute() {
                        Ok(Some(path))
                    } else {
                        Err(HostHomeError::Relative {
                            variable,
                            value: path,
                        })
                    }
                }
            }
        };
        let home = absolute("HOME")?.ok_or(HostHomeError::NoHome)?;
        let codex_home = absolute("CODEX_HOME")?.unwrap_or_else(|| home.join(".codex"));
        Ok(HostHome { home, codex_home })
    }

    /// A home directory with Codex's default (`<home>/.codex`).
    pub fn new(home: &Path) -> HostHome {
        HostHome {
            home: home.to_path_buf(),
            codex_home: home.join(".codex"),
        }
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn codex_home(&self) -> &Path {
        &self.codex_home
    }

    /// `~/.claude`.
    pub fn claude_dir(&self) -> PathBuf {
        self.home.join(".claude")
    }

    /// `~/.claude/settings.json`: where ctx's Claude Code hooks are registered.
    pub fn claude_settings(&self) -> PathBuf {
        self.claude_dir().join("settings.json")
    }

    /// `~/.claude/skills`: personal skills of Claude Code.
    pub fn claude_skills(&self) -> PathBuf {
        self.claude_dir().join("skills")
    }

    /// `~/.claude/agents`: personal subagents of Claude Code (scanned recursively).
    pub fn claude_agents(&self) -> PathBuf {
        self.claude_dir().join("agents")
    }

    /// `~/.claude.json`: Claude Code's own state file with user-scope MCP servers.
    pub fn claude_json(&self) -> PathBuf {
        self.home.join(".claude.json")
    }

    /// `$CODEX_HOME/config.toml`.
    pub fn codex_config(&self) -> PathBuf {
        self.codex_home.join("config.toml")
    }

    /// `$CODEX_HOME/hooks.json`: where ctx's Codex hooks are registered.
    pub fn codex_hooks(&self) -> PathBuf {
        self.codex_home.join("hooks.json")
    }

    /// `$CODEX_HOME/agents`: Codex's custom agents (TOML).
    pub fn codex_agents(&self) -> PathBuf {
        self.codex_home.join("agents")
    }

    /// `~/.agents/skills`: the user skills Codex reads.
    pub fn agents_skills(&self) -> PathBuf {
        self.home.join(".agents").join("skills")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_unique_host_names_and_known_ctx_words() {
        for host in AgentHost::ALL {
            let events = host.hook_events();
            for (i, e) in events.iter().enumerate() {
                assert!(events[..i].iter().all(|o| o.host_event != e.host_event));
                assert_eq!(
                    host.hook_event_named(e.ctx_name).map(|f| f.ctx_name),
                    Some(e.ctx_name)
                );
            }
        }
        assert!(AgentHost::Codex.hook_event_named("nope").is_none());
        assert_eq!(AgentHost::parse("codex"), Some(AgentHost::Codex));
        assert_eq!(AgentHost::parse("Claude"), None);
    }

    #[test]
    fn home_comes_from_the_environment_and_must_be_absolute() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(HostHome::from_env(env(&[])), Err(HostHomeError::NoHome));
        let home = HostHome::from_env(env(&[("HOME", "/h")])).ok();
        assert_eq!(
            home.as_ref().map(HostHome::codex_config),
            Some("/h/.codex/config.toml".into())
        );
        let home = HostHome::from_env(env(&[("HOME", "/h"), ("CODEX_HOME", "/c")])).ok();
        assert_eq!(home.map(|h| h.codex_hooks()), Some("/c/hooks.json".into()));
        assert!(matches!(
            HostHome::from_env(env(&[("HOME", "h")])),
            Err(HostHomeError::Relative {
                variable: "HOME",
                ..
            })
        ));
    }
}
