//! `ctx init --host claude|codex`: registers ctx's hooks with an agent host (spec/cli.md §8).
//!
//! Also the model both `ctx init` and `ctx doctor` judge a host's hooks file by: the exact
//! matcher group ctx writes for each hook event ([`Registration::group`]) and how the groups already
//! in the file compare with it ([`classify`]).
//!
//! ctx only ever adds its missing entries. An entry of ctx's that differs from what this binary
//! would write is reported and left alone: it may be another installation's, the person may
//! have edited it on purpose, and Codex trusts a hook by its content hash, so rewriting it
//! would silently disable it until the person trusts it again (spec/activation.md §5;
//! spec/cli.md §7.2).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{CliError, EXIT_OK};
use ctx_hosts::{AgentHost, HandlerStyle, HookEvent, HostHome};
use ctx_hosts::{
    HostFileError, JsonEditError, JsonNode, append_element, json_text, parse_json, read_host_file,
    update_locked,
};
use ctx_service::Layout;

/// What a hooks file that does not exist yet starts as: an empty object laid out on lines, so
/// the entries ctx adds are indented like a hand-written settings file.
const NEW_DOCUMENT: &str = "{}\n";

/// The command line ctx registers with a host: this binary and the data directory option.
#[derive(Debug, Clone)]
pub(super) struct Registration<'a> {
    pub host: AgentHost,
    /// The absolute path of this `ctx` binary.
    pub exe: &'a str,
    /// The `--data-dir` the person passed, if any; without it the hook chooses the data
    /// directory from its own environment when it runs.
    pub data_dir: Option<&'a str>,
}

impl<'a> Registration<'a> {
    /// The registration of this binary; both paths must be UTF-8, since JSON strings carry them.
    pub fn new(
        host: AgentHost,
        exe: &'a Path,
        data_dir: Option<&'a Path>,
    ) -> Result<Registration<'a>, CliError> {
        let utf8 = |path: &'a Path, what: &str| {
            path.to_str().ok_or_else(|| {
                CliError::Unexpected(format!(
                    "{what} {} is not valid UTF-8, so it cannot be written into the host's JSON \
                     settings",
                    path.display()
                ))
            })
        };
        Ok(Registration {
            host,
            exe: utf8(exe, "the path of this ctx binary")?,
            data_dir: data_dir
                .map(|d| utf8(d, "the data directory"))
                .transpose()?,
        })
    }

    /// The hook handler ctx writes for `event`, in the host's [`HandlerStyle`]: the exec form
    /// (`args`, no shell; Claude Code), or one shell-quoted command line (Codex handlers have no
    /// `args`).
    pub fn handler(&self, event: &HookEvent) -> JsonNode {
        let mut handler = vec![member("type", JsonNode::String("command".into()))];
        match self.host.profile().handler {
            HandlerStyle::CommandAndArgs => {
                let mut args: Vec<&str> = Vec::new();
                if let Some(dir) = self.data_dir {
                    args.extend(["--data-dir", dir]);
                }
                args.extend(["hook", self.host.as_str(), event.ctx_name]);
                let args = args.iter().map(|a| JsonNode::String((*a).into())).collect();
                handler.push(member("command", JsonNode::String(self.exe.into())));
                handler.push(member("args", JsonNode::Array(args)));
            }
            HandlerStyle::ShellCommand => {
                // The paths are quoted; the other words are ctx's own and need no quoting.
                let mut command = shell_quote(self.exe);
                if let Some(dir) = self.data_dir {
                    command.push_str(" --data-dir ");
                    command.push_str(&shell_quote(dir));
                }
                command.push_str(" hook ");
                command.push_str(self.host.as_str());
                command.push(' ');
                command.push_str(event.ctx_name);
                handler.push(member("command", JsonNode::String(command)));
            }
        }
        handler.push(member(
            "timeout",
            JsonNode::Number(event.timeout_seconds.to_string()),
        ));
        if event.background {
            handler.push(member("async", JsonNode::Bool(true)));
        }
        JsonNode::Object(handler)
    }

    /// The matcher ctx writes for `event`: a host whose groups always carry one (Claude Code)
    /// gets `""` for an unfiltered event (it matches everything); another (Codex) gets one only
    /// when the event is filtered.
    pub fn matcher(&self, event: &HookEvent) -> Option<&'static str> {
        if self.host.profile().matcher_always {
            Some(event.matcher.unwrap_or(""))
        } else {
            event.matcher
        }
    }

    /// The matcher group ctx appends to `hooks.<event>`: `{"matcher": …, "hooks": [handler]}`.
    pub fn group(&self, event: &HookEvent) -> JsonNode {
        let mut group = Vec::new();
        if let Some(matcher) = self.matcher(event) {
            group.push(member("matcher", JsonNode::String(matcher.into())));
        }
        group.push(member("hooks", JsonNode::Array(vec![self.handler(event)])));
        JsonNode::Object(group)
    }
}

fn member(key: &str, value: JsonNode) -> (String, JsonNode) {
    (key.to_owned(), value)
}

/// `'…'` for a POSIX shell: every byte literal, a `'` written as `'\''`.
pub(super) fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// How one hook event of a host is registered in its hooks file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    /// Exactly one ctx handler, and it is exactly what this binary would write.
    Installed,
    /// No ctx handler.
    Missing,
    /// One ctx handler that differs from what this binary would write.
    Drifted,
    /// Several ctx handlers (duplicates, or another ctx binary's next to this one's).
    Conflicting,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Installed => "installed",
            Status::Missing => "missing",
            Status::Drifted => "drifted",
            Status::Conflicting => "conflicting",
        }
    }
}

/// The registration of one hook event found in a hooks file.
#[derive(Debug, Clone)]
pub(super) struct EventState {
    pub event: &'static HookEvent,
    pub status: Status,
    /// ctx handlers found for the event (exact or not).
    pub ctx_entries: usize,
    /// The command lines of the ctx handlers that differ from what this binary would write.
    pub differing: Vec<String>,
    /// The command line this binary would write.
    pub expected: String,
}

/// The words a handler runs: its `args` when it has them (exec form), else its `command` split
/// on whitespace with quotes trimmed (good enough to read the last words of a command line).
fn handler_words(handler: &JsonNode) -> Vec<&str> {
    if let Some(args) = handler.get("args").and_then(JsonNode::as_array) {
        return args.iter().filter_map(JsonNode::as_str).collect();
    }
    handler
        .get("command")
        .and_then(JsonNode::as_str)
        .map(|c| {
            c.split_whitespace()
                .map(|w| w.trim_matches(|q| q == '\'' || q == '"'))
                .collect()
        })
        .unwrap_or_default()
}

/// A ctx handler ends its command line with `hook <host> <event word>`, whichever binary,
/// data directory or event word it names.
fn is_ctx_handler(host: AgentHost, handler: &JsonNode) -> bool {
    matches!(handler_words(handler).as_slice(), [.., "hook", h, _] if *h == host.as_str())
}

/// A handler's command line, for reports.
fn describe(handler: &JsonNode) -> String {
    let command = handler
        .get("command")
        .and_then(JsonNode::as_str)
        .unwrap_or("");
    match handler.get("args").and_then(JsonNode::as_array) {
        Some(args) => {
            let mut line = command.to_owned();
            for arg in args {
                line.push(' ');
                match arg.as_str() {
                    Some(s) => line.push_str(s),
                    None => line.push_str(&arg.to_text()),
                }
            }
            line
        }
        None => command.to_owned(),
    }
}

/// How each of the host's hook events is registered in the hooks file `root`. A `hooks` member
/// that is not an object, or an event member that is not an array, is refused (the host could
/// not read it either); groups and handlers of other shapes are the person's and are skipped.
pub(super) fn classify(
    root: &JsonNode,
    registration: &Registration<'_>,
) -> Result<Vec<EventState>, JsonEditError> {
    if !matches!(root, JsonNode::Object(_)) {
        return Err(JsonEditError::NotAnObject {
            path: "the document".to_owned(),
            found: root.kind(),
        });
    }
    let hooks = root.get("hooks");
    if let Some(hooks) = hooks.filter(|h| !matches!(h, JsonNode::Object(_))) {
        return Err(JsonEditError::NotAnObject {
            path: "`hooks`".to_owned(),
            found: hooks.kind(),
        });
    }
    let host = registration.host;
    let mut states = Vec::new();
    for event in host.hook_events() {
        let groups = match hooks.and_then(|h| h.get(event.host_event)) {
            None => &[][..],
            Some(JsonNode::Array(groups)) => groups.as_slice(),
            Some(other) => {
                return Err(JsonEditError::NotAnArray {
                    path: format!("`hooks.{}`", event.host_event),
                    found: other.kind(),
                });
            }
        };
        let expected_matcher = registration.matcher(event);
        let expected = registration.handler(event);
        let (mut ctx_entries, mut exact) = (0, 0);
        let mut differing = Vec::new();
        for group in groups {
            let Some(handlers) = group.get("hooks").and_then(JsonNode::as_array) else {
                continue;
            };
            let matcher = group.get("matcher");
            let same_matcher = match (matcher, expected_matcher) {
                (None, None) => true,
                (Some(found), Some(wanted)) => found.as_str() == Some(wanted),
                _ => false,
            };
            for handler in handlers.iter().filter(|h| is_ctx_handler(host, h)) {
                ctx_entries += 1;
                if same_matcher && handler.same_value(&expected) {
                    exact += 1;
                } else {
                    let mut line = describe(handler);
                    if !same_matcher {
                        let shown = matcher.map_or_else(|| "none".to_owned(), JsonNode::to_text);
                        line.push_str(&format!(" (matcher {shown})"));
                    }
                    differing.push(line);
                }
            }
        }
        let status = match (ctx_entries, exact) {
            (0, _) => Status::Missing,
            (1, 1) => Status::Installed,
            (1, _) => Status::Drifted,
            _ => Status::Conflicting,
        };
        states.push(EventState {
            event,
            status,
            ctx_entries,
            differing,
            expected: describe(&expected),
        });
    }
    Ok(states)
}

/// The hooks file of a host.
pub(super) fn hooks_file(host: AgentHost, home: &HostHome) -> PathBuf {
    (host.profile().hooks_file)(home)
}

/// The directories a host must have had at session start to pick up capabilities ctx
/// activates during the session: `(role, path)`.
pub(super) fn host_directories(host: AgentHost, home: &HostHome) -> [(&'static str, PathBuf); 2] {
    let profile = host.profile();
    [
        ("skills", (profile.skills_dir)(home)),
        ("agents", (profile.agents_dir)(home)),
    ]
}

/// A host file error as a command failure (exit 2 when the person's file is at fault, else 3).
fn host_file_failure(step: &'static str, e: HostFileError) -> CliError {
    CliError::HostFile { step, source: e }
}

fn hex(bytes: &[u8; 32]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn show_event(event: &HookEvent, host: AgentHost) -> String {
    match event.matcher {
        Some(matcher) => format!(
            "{} [{matcher}] → ctx hook {host} {}",
            event.host_event, event.ctx_name
        ),
        None => format!("{} → ctx hook {host} {}", event.host_event, event.ctx_name),
    }
}

/// The Claude Code permission rules `ctx init --host claude` adds to `permissions.deny`
/// (spec/decisions.md §15.2): the agent's Bash tool may not run the person's commands, and its
/// file tools may not read or edit the device key's directory. A second line only: the agent
/// can spell a command another way, and a host that runs without permission checks ignores them.
pub(crate) fn claude_deny_rules(exe: &Path, device_key: Option<&Path>) -> Vec<String> {
    let mut rules = Vec::new();
    let mut programs = vec!["ctx".to_owned()];
    let exe = exe.display().to_string();
    if exe != "ctx" && !exe.contains(char::is_whitespace) {
        programs.push(exe);
    }
    for program in &programs {
        for words in ["consent approve", "consent deny", "key"] {
            rules.push(format!("Bash({program} {words} *)"));
        }
    }
    if let Some(dir) = device_key.and_then(Path::parent) {
        // `//` starts an absolute path in Claude Code's rule syntax.
        let dir = dir.display().to_string();
        let dir = dir.trim_start_matches('/');
        rules.push(format!("Read(//{dir}/**)"));
        rules.push(format!("Edit(//{dir}/**)"));
    }
    rules
}

/// The rules of `wanted` that `root`'s `permissions.deny` does not hold yet.
fn missing_deny_rules<'a>(root: &JsonNode, wanted: &'a [String]) -> Vec<&'a String> {
    let present: Vec<&str> = root
        .get("permissions")
        .and_then(|p| p.get("deny"))
        .and_then(JsonNode::as_array)
        .map(|rules| rules.iter().filter_map(JsonNode::as_str).collect())
        .unwrap_or_default();
    wanted
        .iter()
        .filter(|rule| !present.contains(&rule.as_str()))
        .collect()
}

/// `ctx init --host claude|codex`.
pub(crate) fn init(
    host: AgentHost,
    layout: &Layout,
    data_dir_option: Option<&Path>,
    home: &HostHome,
    exe: &Path,
    device_key: Option<&Path>,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let deny_rules = match host {
        AgentHost::Claude => claude_deny_rules(exe, device_key),
        AgentHost::Codex => Vec::new(),
    };
    let mut added_rules: Vec<String> = Vec::new();
    let step = match host {
        AgentHost::Claude => "ctx init --host claude",
        AgentHost::Codex => "ctx init --host codex",
    };
    let registration = Registration::new(host, exe, data_dir_option)?;
    let file = hooks_file(host, home);
    let mut states: Vec<EventState> = Vec::new();
    let outcome = update_locked(&file, |current| -> Result<_, HostFileError> {
        let refused = |source| HostFileError::Json {
            path: file.clone(),
            source,
        };
        let text = match current {
            None => NEW_DOCUMENT,
            Some(bytes) => json_text(bytes).map_err(refused)?,
        };
        let root = parse_json(text).map_err(refused)?;
        states = classify(&root, &registration).map_err(refused)?;
        let mut edited = text.to_owned();
        for state in states.iter().filter(|s| s.status == Status::Missing) {
            let group = registration.group(state.event).to_text();
            edited = append_element(&edited, &["hooks", state.event.host_event], &group)
                .map_err(refused)?;
        }
        added_rules.clear();
        for rule in missing_deny_rules(&root, &deny_rules) {
            let value = JsonNode::String(rule.clone()).to_text();
            edited = append_element(&edited, &["permissions", "deny"], &value).map_err(refused)?;
            added_rules.push(rule.clone());
        }
        // Nothing missing: nothing is written, not even the same bytes (Codex trust is per
        // content hash, and a rewrite would also wake every watcher of the file).
        Ok((edited != text).then(|| edited.into_bytes()))
    })
    .map_err(|e| host_file_failure(step, e))?;
    verify(&outcome.target, &registration, &states)?;

    writeln!(out, "{step}: hooks in {}", outcome.target.display())?;
    for state in &states {
        let shown = show_event(state.event, host);
        match state.status {
            Status::Missing => writeln!(out, "  added        {shown}")?,
            Status::Installed => writeln!(out, "  present      {shown}")?,
            Status::Drifted => writeln!(
                out,
                "  drifted      {shown}: the ctx entry ({}) differs from what this ctx would \
                 write ({}); left as it is, see `ctx doctor`",
                state.differing.join("; "),
                state.expected
            )?,
            Status::Conflicting => writeln!(
                out,
                "  conflicting  {shown}: {} ctx entries; left as they are, see `ctx doctor`",
                state.ctx_entries
            )?,
        }
    }
    for rule in &deny_rules {
        let verb = if added_rules.contains(rule) {
            "denied"
        } else {
            "present"
        };
        writeln!(out, "  {verb:<12} permission rule {rule}")?;
    }
    if !deny_rules.is_empty() {
        writeln!(
            out,
            "  (a second line of defence: the consent itself needs your passphrase or passkey, \
             which the agent cannot give)"
        )?;
    }
    match (outcome.written, outcome.before, outcome.after) {
        (true, before, Some(after)) => writeln!(
            out,
            "  wrote {} (sha256 {} → {})",
            outcome.target.display(),
            before.as_ref().map_or_else(|| "none".to_owned(), hex),
            hex(&after)
        )?,
        _ => writeln!(
            out,
            "  left {} unchanged: nothing was missing",
            outcome.target.display()
        )?,
    }
    for (role, dir) in host_directories(host, home) {
        if dir.is_dir() {
            writeln!(out, "  present      {role} directory {}", dir.display())?;
        } else {
            // Default mode: these are the host's directories, read by the person's tools too.
            fs::create_dir_all(&dir).map_err(|source| CliError::File {
                action: "create the directory",
                path: dir.clone(),
                source,
            })?;
            writeln!(out, "  created      {role} directory {}", dir.display())?;
        }
    }
    match registration.data_dir {
        Some(dir) => writeln!(out, "  the hooks use the data directory {dir} (--data-dir)")?,
        None => writeln!(
            out,
            "  the hooks choose their data directory when they run ($CTX_DATA_DIR, else \
             $XDG_DATA_HOME/ctx, else ~/.local/share/ctx; now {})",
            layout.root().display()
        )?,
    }
    if host.profile().hooks_need_trust {
        writeln!(
            out,
            "Codex runs a hook only after you trust it, and skips untrusted hooks silently: \
             start Codex, run /hooks, review ctx's hooks and trust them."
        )?;
    }
    Ok(EXIT_OK)
}

/// Re-reads the hooks file as the host will and checks that every event is now registered
/// (or still drifted or conflicting, which init leaves alone).
fn verify(
    file: &Path,
    registration: &Registration<'_>,
    before: &[EventState],
) -> Result<(), CliError> {
    let unexpected = |detail: String| {
        CliError::Unexpected(format!(
            "{} does not hold ctx's hooks after writing them: {detail}",
            file.display()
        ))
    };
    let bytes = read_host_file(file)
        .map_err(|e| unexpected(e.to_string()))?
        .ok_or_else(|| unexpected("the file is gone".to_owned()))?;
    let text = json_text(&bytes).map_err(|e| unexpected(e.to_string()))?;
    let root = parse_json(text).map_err(|e| unexpected(e.to_string()))?;
    let after = classify(&root, registration).map_err(|e| unexpected(e.to_string()))?;
    for (was, now) in before.iter().zip(&after) {
        // Another process may have changed the file since (the host, or a concurrent init that
        // found the same state); only the loss of an entry just added is a failure.
        if was.status == Status::Missing && now.status == Status::Missing {
            return Err(unexpected(format!(
                "{} is missing",
                show_event(now.event, registration.host)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    fn registration(host: AgentHost) -> Registration<'static> {
        Registration {
            host,
            exe: "/opt/my tools/ctx",
            data_dir: Some("/d/it's"),
        }
    }

    #[test]
    fn codex_commands_are_shell_quoted() {
        let r = registration(AgentHost::Codex);
        let event = &AgentHost::Codex.hook_events()[0];
        let handler = r.handler(event);
        assert_eq!(
            handler.get("command").and_then(JsonNode::as_str),
            Some("'/opt/my tools/ctx' --data-dir '/d/it'\\''s' hook codex session-start")
        );
        assert!(is_ctx_handler(AgentHost::Codex, &handler));
        assert!(!is_ctx_handler(AgentHost::Claude, &handler));
    }

    #[test]
    fn classification_counts_ctx_handlers_only() {
        let r = registration(AgentHost::Claude);
        let events = AgentHost::Claude.hook_events();
        let mine = r.group(&events[0]).to_text();
        let other = r#"{"matcher":"","hooks":[{"type":"command","command":"/old/ctx","args":["hook","claude","session-start"]}]}"#;
        let person = r#"{"hooks":[{"type":"command","command":"echo hi"}]}"#;
        let text = format!(
            r#"{{"hooks":{{"SessionStart":[{person},{mine}],"UserPromptSubmit":[{other}],"SessionEnd":[{mine},{other}]}}}}"#
        );
        let states = classify(&parse_json(&text).unwrap(), &r).unwrap();
        let status = |name: &str| {
            states
                .iter()
                .find(|s| s.event.host_event == name)
                .map(|s| s.status)
        };
        assert_eq!(status("SessionStart"), Some(Status::Installed));
        assert_eq!(status("UserPromptSubmit"), Some(Status::Drifted));
        assert_eq!(status("SessionEnd"), Some(Status::Conflicting));
        assert_eq!(status("PostToolUse"), Some(Status::Missing));
        assert!(matches!(
            classify(&parse_json(r#"{"hooks":[]}"#).unwrap(), &r),
            Err(JsonEditError::NotAnObject { .. })
        ));
        assert!(matches!(
            classify(&parse_json(r#"{"hooks":{"SessionEnd":{}}}"#).unwrap(), &r),
            Err(JsonEditError::NotAnArray { .. })
        ));
    }
}
