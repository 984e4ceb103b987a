//! Agents: the Claude Code subagent Markdown as the catalog ships it, its Codex custom-agent
//! translation, and the duplicate-name checks of both hosts' agent trees
//! (spec/activation.md §2, §6, §7; spec/catalog.md §7; spec/cli.md §7.2).

use std::fs;
use std::path::{Path, PathBuf};

use super::TARGET_READ_MAX_BYTES;
use super::error::ActivationError;
use super::frontmatter;
use super::fsx::{Content, read_followed};

/// Most entries (files and directories) ctx reads while checking Claude Code's agent tree for
/// a duplicate `name`; a larger tree is refused rather than half-checked.
pub const AGENT_TREE_ENTRIES_MAX: usize = 4096;
/// Deepest directory level of that check (the host scans recursively).
pub const AGENT_TREE_DEPTH_MAX: usize = 8;

/// The first line of every Codex agent file ctx writes.
pub const CODEX_AGENT_HEADER: &str = "# Written by ctx from a Claude Code agent. ctx replaces or \
                                      removes this file only while it is exactly as written.\n";

/// Claude Code tools that only read: an agent limited to these (and to the read-only commands
/// below) runs in Codex's `read-only` sandbox.
const READ_ONLY_TOOLS: [&str; 7] = [
    "Read",
    "Grep",
    "Glob",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
];
/// `Bash(<prefix> *)` rules whose commands only read.
const READ_ONLY_COMMANDS: [&str; 8] = [
    "git diff",
    "git log",
    "git show",
    "git status",
    "git blame",
    "gh pr diff",
    "gh pr view",
    "gh pr checks",
];
/// Reasoning efforts both hosts name the same way.
const SHARED_EFFORTS: [&str; 3] = ["low", "medium", "high"];

/// What ctx reads from a Claude Code agent file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentMaterial {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) model: Option<String>,
    pub(crate) effort: Option<String>,
    pub(crate) tools: Option<Vec<String>>,
    /// The Claude-only frontmatter keys that guard or widen what the agent does (`hooks`,
    /// `mcpServers`, `permissionMode`): Codex has no equivalent, so such an agent is refused
    /// there rather than translated without its guard (a read-only agent whose hook blocks writes
    /// would lose that hook).
    pub(crate) claude_only: Vec<&'static str>,
    /// The body (the system prompt) without leading blank lines and trailing whitespace.
    pub(crate) instructions: String,
}

/// Reads and checks the agent Markdown of `name`: UTF-8, frontmatter with `name` equal to
/// `name` (the host's identity of the agent) and a `description`, and a non-empty body.
pub(crate) fn parse(name: &str, body: &[u8]) -> Result<AgentMaterial, ActivationError> {
    let invalid = |reason: String| ActivationError::InvalidMaterial {
        name: name.to_owned(),
        reason,
    };
    let fm = frontmatter::parse_named(name, body)?;
    let description = fm
        .scalar("description")
        .map_err(|e| invalid(e.to_string()))?
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| invalid("it has no description".to_owned()))?;
    let instructions = fm
        .body
        .trim_start_matches(['\n', '\r'])
        .trim_end()
        .to_owned();
    if instructions.is_empty() {
        return Err(invalid(
            "it has no instructions after the frontmatter".to_owned(),
        ));
    }
    Ok(AgentMaterial {
        name: name.to_owned(),
        description: description.to_owned(),
        model: fm
            .scalar("model")
            .map_err(|e| invalid(e.to_string()))?
            .map(str::to_owned),
        effort: fm
            .scalar("effort")
            .map_err(|e| invalid(e.to_string()))?
            .map(str::to_owned),
        tools: fm.list("tools").map_err(|e| invalid(e.to_string()))?,
        claude_only: ["hooks", "mcpServers", "permissionMode"]
            .into_iter()
            .filter(|key| fm.get(key).is_some())
            .collect(),
        instructions,
    })
}

/// The Codex model for a Claude `model` value, when Codex can use it: OpenAI model ids pass,
/// Claude aliases (`sonnet`, `opus`, ...), Claude ids and `inherit` are dropped (Codex then
/// uses its own model, which is what `inherit` means).
fn codex_model(model: &str) -> Option<&str> {
    let family = ["gpt-", "o1", "o3", "o4", "codex-"]
        .iter()
        .any(|p| model.starts_with(p));
    let charset = model
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.'));
    (family && charset && model.len() <= 64).then_some(model)
}

/// Whether `tool` (a Claude Code tool rule) only reads.
fn is_read_only(tool: &str) -> bool {
    if READ_ONLY_TOOLS.contains(&tool) {
        return true;
    }
    tool.strip_prefix("Bash(")
        .and_then(|rule| rule.strip_suffix(')'))
        .is_some_and(|rule| {
            READ_ONLY_COMMANDS.iter().any(|c| {
                rule.strip_prefix(c)
                    .is_some_and(|rest| rest.is_empty() || rest == " *" || rest == ":*")
            })
        })
}

/// The Codex custom agent for `m` (spec/activation.md §6): `name`, `description` and the body as
/// `developer_instructions`; `model` and `model_reasoning_effort` only when Codex knows the
/// value; `sandbox_mode = "read-only"` only when the Claude agent's `tools` allow nothing but
/// reading. `sandbox_mode` is never widened (no `danger-full-access`); `tools`, `hooks`,
/// `permissionMode`, `mcpServers` and every other Claude-only key are dropped.
pub(crate) fn codex_toml(m: &AgentMaterial) -> String {
    let mut out = String::from(CODEX_AGENT_HEADER);
    let mut line = |key: &str, value: &str| {
        out.push_str(key);
        out.push_str(" = ");
        basic_string(value, &mut out);
        out.push('\n');
    };
    line("name", &m.name);
    line("description", &m.description);
    if let Some(model) = m.model.as_deref().and_then(codex_model) {
        line("model", model);
    }
    if let Some(effort) = m.effort.as_deref().filter(|e| SHARED_EFFORTS.contains(e)) {
        line("model_reasoning_effort", effort);
    }
    if m.tools
        .as_ref()
        .is_some_and(|t| !t.is_empty() && t.iter().all(|tool| is_read_only(tool)))
    {
        line("sandbox_mode", "read-only");
    }
    out.push_str("developer_instructions = \"\"\"\n");
    multiline_body(&m.instructions, &mut out);
    out.push_str("\"\"\"\n");
    out
}

/// A TOML basic string: quotes, backslashes and control characters escaped.
fn basic_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        escape_char(c, out, false);
    }
    out.push('"');
}

/// The content of a TOML multi-line basic string (the newline after the opening quotes is not
/// part of the value): newlines and tabs stay, every quote and backslash is escaped, so no
/// `"""` or line-ending backslash can appear.
fn multiline_body(s: &str, out: &mut String) {
    for c in s.chars() {
        escape_char(c, out, true);
    }
}

fn escape_char(c: char, out: &mut String, multiline: bool) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' if multiline => out.push('\n'),
        '\t' if multiline => out.push('\t'),
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c if u32::from(c) < 0x20 || u32::from(c) == 0x7f => {
            out.push_str(&format!("\\u{:04X}", u32::from(c)));
        }
        c => out.push(c),
    }
}

/// Why a Codex agent text does not read back as its source.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CodexTomlError {
    /// The text is not TOML.
    #[error("{0}")]
    Parse(#[from] toml_edit::TomlError),
    #[error("the Codex agent does not read back as its source")]
    NotReadBack,
}

/// Checks that a Codex agent text reads back as `m` (name, description, instructions).
pub(crate) fn check_codex_toml(m: &AgentMaterial, text: &str) -> Result<(), CodexTomlError> {
    let doc: toml_edit::DocumentMut = text.parse()?;
    let get = |key: &str| doc.get(key).and_then(|i| i.as_str());
    if get("name") != Some(m.name.as_str())
        || get("description") != Some(m.description.as_str())
        || get("developer_instructions") != Some(m.instructions.as_str())
    {
        return Err(CodexTomlError::NotReadBack);
    }
    Ok(())
}

/// The `name` the host reads from an agent file's bytes (frontmatter for Claude Code, the TOML
/// key for Codex); `None` when it cannot be read.
pub(crate) fn declared_name(bytes: &[u8], codex: bool) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    if codex {
        let doc: toml_edit::DocumentMut = text.parse().ok()?;
        doc.get("name")?.as_str().map(str::to_owned)
    } else {
        let fm = frontmatter::parse(text).ok()?;
        fm.scalar("name").ok()?.map(str::to_owned)
    }
}

fn read_name(path: &Path, codex: bool) -> Option<String> {
    match read_followed(path, TARGET_READ_MAX_BYTES)? {
        Content::Bytes(bytes) => declared_name(&bytes, codex),
        Content::TooLarge(_) => None,
    }
}

/// Another Claude Code agent file under `root` (scanned recursively, as the host does) whose
/// frontmatter `name` is `name`; `own` (ctx's target) is skipped. Files the host would skip
/// (unreadable frontmatter) cannot clash and are skipped too.
pub(crate) fn claude_duplicate(
    root: &Path,
    own: &Path,
    name: &str,
) -> Result<Option<PathBuf>, ActivationError> {
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(ActivationError::Io {
                    action: "list",
                    path: dir,
                    source,
                });
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(ActivationError::io("list", &dir))?;
            seen += 1;
            if seen > AGENT_TREE_ENTRIES_MAX {
                return Err(ActivationError::AgentTreeTooLarge {
                    path: root.to_path_buf(),
                    max: AGENT_TREE_ENTRIES_MAX,
                });
            }
            paths.push(entry.path());
        }
        paths.sort();
        for path in paths {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                // Linked directories are not followed: a link cycle must not hang the check.
                if depth < AGENT_TREE_DEPTH_MAX {
                    stack.push((path, depth + 1));
                }
            } else if path.extension().is_some_and(|e| e == "md")
                && path != own
                && read_name(&path, false).as_deref() == Some(name)
            {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}

/// Another Codex agent file directly in `dir` whose `name` is `name`; `own` is skipped.
pub(crate) fn codex_duplicate(
    dir: &Path,
    own: &Path,
    name: &str,
) -> Result<Option<PathBuf>, ActivationError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ActivationError::Io {
                action: "list",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(ActivationError::io("list", dir))?;
        if paths.len() >= AGENT_TREE_ENTRIES_MAX {
            return Err(ActivationError::AgentTreeTooLarge {
                path: dir.to_path_buf(),
                max: AGENT_TREE_ENTRIES_MAX,
            });
        }
        paths.push(entry.path());
    }
    paths.sort();
    Ok(paths.into_iter().find(|p| {
        p.extension().is_some_and(|e| e == "toml")
            && p != own
            && read_name(p, true).as_deref() == Some(name)
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_codex_translation_is_conservative_and_reads_back() {
        let md = "---\nname: reviewer\ndescription: Reviews \"diffs\"\\ carefully\ntools: Read, \
                  Grep, Bash(git diff *)\nmodel: sonnet\neffort: high\npermissionMode: \
                  bypassPermissions\nhooks:\n  Stop: []\n---\n\nLine one \"\"\" end\n\tTabbed \
                  \\ back\n\n";
        let m = parse("reviewer", md.as_bytes()).unwrap();
        let toml = codex_toml(&m);
        assert_eq!(
            toml,
            format!(
                "{CODEX_AGENT_HEADER}name = \"reviewer\"\ndescription = \"Reviews \\\"diffs\\\"\\\\ \
                 carefully\"\nmodel_reasoning_effort = \"high\"\nsandbox_mode = \
                 \"read-only\"\ndeveloper_instructions = \"\"\"\nLine one \\\"\\\"\\\" end\n\tTabbed \
                 \\\\ back\"\"\"\n"
            )
        );
        check_codex_toml(&m, &toml).unwrap();
        assert_eq!(
            declared_name(toml.as_bytes(), true).as_deref(),
            Some("reviewer")
        );
        assert!(!toml.contains("danger-full-access"));
        assert!(!toml.contains("bypass"));

        let writer = "---\nname: fixer\ndescription: Fixes\ntools: Read, Edit\nmodel: \
                      gpt-5-codex\n---\nFix it.\n";
        let toml = codex_toml(&parse("fixer", writer.as_bytes()).unwrap());
        assert!(toml.contains("\nmodel = \"gpt-5-codex\"\n"), "{toml}");
        assert!(!toml.contains("sandbox_mode"), "{toml}");
    }

    #[test]
    fn agent_material_must_name_itself_and_say_something() {
        assert!(parse("a", b"---\nname: b\ndescription: d\n---\nx").is_err());
        assert!(parse("a", b"---\nname: a\n---\nx").is_err());
        assert!(parse("a", b"---\nname: a\ndescription: d\n---\n\n  \n").is_err());
        assert!(parse("a", b"no frontmatter").is_err());
        assert!(parse("a", b"---\nname: a\ndescription: d\n---\nx").is_ok());
    }
}
