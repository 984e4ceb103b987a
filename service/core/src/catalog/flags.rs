//! The permission and credential flags of a capability, derived from its material by the rule of
//! spec/catalog.md §7.
//!
//! Why derive: the flags route an install to an interactive human decision
//! (`permission-expansion-requires-consent`, `credentials-require-consent`, spec/policy.md) and
//! keep the skill store from installing on its own, and a `load` skill reaches the host with no
//! decision at all. A flag written as `false` on material that pre-approves tools or needs a token
//! would skip that decision, and the catalog's author may be the agent the decision guards
//! against, so the loader derives the flags and refuses a catalog that understates them.
//!
//! The derivation reads the material the install leaves behind (`install.result`) — the activated
//! form, which is what the host acts on — and, for `load` skills, the material itself. It errs on
//! the side of `true`: evidence it cannot read counts.

use ctx_model::{CapabilityKind, Json};

use super::frontmatter::FmValue;

/// What the rule concludes about one material, with the evidence for each `true`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Derived {
    /// Why the material expands permissions (empty = it does not).
    pub expansion: Vec<String>,
    /// Why the material needs credentials (empty = it does not).
    pub credentials: Vec<String>,
}

impl Derived {
    /// (`permission_expansion`, `credential_requirement`).
    #[cfg(test)]
    pub fn flags(&self) -> (bool, bool) {
        (!self.expansion.is_empty(), !self.credentials.is_empty())
    }
}

/// Command-line tools whose every useful call goes to a hosted account under the user's personal
/// login, so a capability built around one cannot work without that login. Deliberately small:
/// `terraform`, `kubectl`, `docker`, `cargo`, `npm`, `git` act on whatever the project itself
/// configured (local providers, a local cluster or daemon, public registries) and work without a
/// personal login for their documented core (`terraform fmt`/`validate`, `kubectl` against kind),
/// so a skill that merely uses them is not flagged.
const AUTHENTICATED_CLIS: &[&str] = &["gh", "glab", "bq", "gcloud", "aws", "az"];

/// Environment variables that by name carry a credential when a skill or agent body references
/// them (`psql "$DATABASE_URL"`): the DSN variables, and any name with a secret-ish suffix.
const CREDENTIAL_VARIABLES: &[&str] = &["DATABASE_URL", "DSN"];
const CREDENTIAL_VARIABLE_SUFFIXES: &[&str] = &[
    "_TOKEN",
    "_API_KEY",
    "_KEY",
    "_SECRET",
    "_PASSWORD",
    "_PAT",
    "_DSN",
    "_DATABASE_URL",
];

/// Variables the host itself supplies to an MCP server; a `${…}` reference to one of them asks the
/// user for nothing (spec/activation.md §2, §7; spec/catalog.md §7: Claude sets
/// `CLAUDE_PROJECT_DIR` for stdio servers).
const HOST_PROVIDED_VARIABLES: &[&str] = &[
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_PLUGIN_ROOT",
    "CLAUDE_PLUGIN_DATA",
];

/// `permissionMode` values that let an agent act with fewer prompts than the session
/// (spec/activation.md §2, §6; spec/catalog.md §7); `default`, `plan` and `manual` do not.
pub(crate) const ESCALATING_PERMISSION_MODES: &[&str] =
    &["acceptEdits", "auto", "dontAsk", "bypassPermissions"];

/// Splits `---\n<frontmatter>\n---\n<body>` (after [`normalized`]); a file without frontmatter
/// is all body.
fn split_frontmatter(text: &str) -> (&str, &str) {
    let Some(rest) = text.strip_prefix("---\n") else {
        return ("", text);
    };
    match rest.find("\n---\n") {
        Some(end) => (&rest[..end], &rest[end + 5..]),
        None => ("", text),
    }
}

/// The top-level keys of YAML frontmatter with their same-line value (`hooks:` → `("hooks", "")`).
/// Nested lines are indented and list items start with `-`, so neither is a top-level key.
fn frontmatter_keys(frontmatter: &str) -> Vec<(&str, &str)> {
    frontmatter
        .lines()
        .filter(|l| !l.starts_with([' ', '\t', '-', '#']))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| {
            (
                k.trim().trim_matches(['"', '\'']),
                v.trim().trim_matches(['"', '\'']),
            )
        })
        .collect()
}

/// The same text with a byte-order mark dropped and CRLF line ends made LF: the hosts read such
/// files as they read plain ones, so the rule must not see less in them.
fn normalized(text: &str) -> String {
    text.strip_prefix('\u{feff}')
        .unwrap_or(text)
        .replace("\r\n", "\n")
}

/// The top-level `(key, value)` pairs of `text`'s frontmatter: the line scan of
/// [`frontmatter_keys`], plus every key a YAML parser (spec/capability-formats.md) finds that the
/// scan missed (a quoted key, a flow mapping), with its text (a list's items joined by spaces;
/// `unknown` for any other value, which no rule reads as harmless). A frontmatter that does not
/// parse adds nothing: Claude Code then loads the body with empty metadata.
fn frontmatter_pairs(text: &str, frontmatter: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = frontmatter_keys(frontmatter)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    if let Ok(fm) = super::frontmatter::parse_frontmatter(text) {
        for (key, value) in &fm.fields {
            if pairs.iter().any(|(k, _)| k == key) {
                continue;
            }
            let value = match value {
                FmValue::Str(s) => s.clone(),
                FmValue::List(items) => items
                    .iter()
                    .filter_map(|item| match item {
                        FmValue::Str(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => "unknown".to_owned(),
            };
            pairs.push((key.clone(), value));
        }
    }
    pairs
}

/// Claude Code's render-time shell injection: `` !`cmd` `` anywhere, or a ```` ```! ```` block.
/// Matched as Claude Code matches it — on the raw text, with no regard for Markdown code spans
/// (anthropics/claude-code#12762, #17267: an inline `` `!` `` triggers it too).
fn shell_injection(text: &str) -> bool {
    text.contains("!`") || text.lines().any(|l| l.trim_start().starts_with("```!"))
}

/// The shell commands a Markdown text shows: every line of a fenced block, every inline code
/// span, and every `Bash(…)` permission pattern; each split at `&&`, `||`, `|` and `;`.
fn commands(text: &str) -> Vec<String> {
    let mut spans: Vec<String> = Vec::new();
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            spans.push(line.to_owned());
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    // Odd pieces between backticks are inline code spans.
    spans.extend(prose.split('`').skip(1).step_by(2).map(str::to_owned));
    let mut rest = text;
    while let Some(start) = rest.find("Bash(") {
        rest = &rest[start + 5..];
        let end = rest.find(')').unwrap_or(rest.len());
        spans.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    spans
        .iter()
        .flat_map(|s| {
            s.split(['|', ';', '&'])
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|c| c.trim().trim_start_matches("$ ").trim().to_owned())
        .filter(|c| !c.is_empty())
        .collect()
}

/// `$NAME` and `${NAME…}` references with an upper-case shell variable name.
fn variable_references(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        rest = &rest[i + 1..];
        let start = usize::from(rest.starts_with('{'));
        let name_len = rest[start..]
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len() - start);
        let name = &rest[start..start + name_len];
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            names.push(name);
        }
    }
    names
}

fn is_credential_variable(name: &str) -> bool {
    CREDENTIAL_VARIABLES.contains(&name)
        || CREDENTIAL_VARIABLE_SUFFIXES
            .iter()
            .any(|s| name.ends_with(s))
}

/// A URL or DSN with a password in its authority (`postgres://user:secret@host/db`).
fn url_with_password(text: &str) -> bool {
    text.match_indices("://").any(|(i, _)| {
        let authority = text[i + 3..]
            .split(['/', ' ', '"', '\'', '`', '\n', ')'])
            .next()
            .unwrap_or("");
        authority
            .rsplit_once('@')
            .is_some_and(|(userinfo, _)| userinfo.contains(':'))
    })
}

/// Credential markers of a skill or agent text (see the constants above).
fn credential_markers(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for command in commands(text) {
        let program = command.split_whitespace().next().unwrap_or("");
        if AUTHENTICATED_CLIS.contains(&program) {
            found.push(format!(
                "runs the authenticated CLI `{program}` (`{command}`)"
            ));
        }
    }
    for name in variable_references(text) {
        if is_credential_variable(name) {
            found.push(format!("reads the credential variable ${name}"));
        }
    }
    if url_with_password(text) {
        found.push("embeds a URL with a password".to_owned());
    }
    found.sort();
    found.dedup();
    found
}

/// A skill (`SKILL.md`). `siblings` = the other catalog files of the skill's directory, by path.
pub(crate) fn derive_skill(text: &str, siblings: &[(&str, &str)]) -> Derived {
    let mut d = Derived::default();
    let text = &normalized(text);
    let (frontmatter, body) = split_frontmatter(text);
    let keys = frontmatter_pairs(text, frontmatter);
    for (key, value) in &keys {
        match key.as_str() {
            "allowed-tools" => d
                .expansion
                .push(format!("allowed-tools pre-approves {value}")),
            "hooks" => d.expansion.push("registers hooks".to_owned()),
            // A declared MCP server dependency pulls a server in (Codex
            // `skill_mcp_dependency_install`); no Agent Skills key does that today, so any of
            // these spellings counts.
            "mcpServers" | "mcp-servers" | "dependencies" => d
                .expansion
                .push(format!("declares the dependency key {key}")),
            _ => {}
        }
    }
    if shell_injection(text) {
        d.expansion
            .push("has render-time shell injection (!`…` or ```!)".to_owned());
    }
    for (path, sibling) in siblings {
        if path.ends_with("agents/openai.yaml") && sibling.contains("mcp") {
            d.expansion
                .push(format!("{path} declares an MCP dependency"));
        }
    }
    // The body, and the pre-approved commands: a skill that pre-approves `Bash(gh *)` is built
    // around `gh`.
    let allowed = keys
        .iter()
        .filter(|(k, _)| k == "allowed-tools")
        .map(|(_, v)| v.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    d.credentials = credential_markers(&format!("{allowed}\n{body}"));
    d
}

/// An agent (`agents/<name>.md`, the Claude Code subagent file; Codex TOML spellings included).
pub(crate) fn derive_agent(text: &str) -> Derived {
    let mut d = Derived::default();
    let text = &normalized(text);
    let (frontmatter, body) = split_frontmatter(text);
    let keys = frontmatter_pairs(text, frontmatter);
    for (key, value) in &keys {
        let value = value.as_str();
        match key.as_str() {
            // A mode ctx cannot read (not text) cannot be told from a harmless one.
            "permissionMode"
                if ESCALATING_PERMISSION_MODES.contains(&value) || value == "unknown" =>
            {
                d.expansion.push(format!("permissionMode: {value}"));
            }
            "mcpServers" | "mcp_servers" => {
                d.expansion.push("defines MCP servers inline".to_owned());
            }
            "hooks" => d.expansion.push("registers hooks".to_owned()),
            _ => {}
        }
    }
    if text.contains("danger-full-access") {
        d.expansion
            .push("sandbox_mode = danger-full-access".to_owned());
    }
    // The body only: the `tools` allow-list narrows what the agent may call and says nothing of
    // what it needs (pr-test-analyzer may read a diff with `gh pr diff` or `git diff`).
    d.credentials = credential_markers(body);
    d
}

/// Every string inside a JSON value.
fn strings(value: &Json, out: &mut Vec<String>) {
    match value {
        Json::Str(s) => out.push(s.clone()),
        Json::Arr(items) => items.iter().for_each(|v| strings(v, out)),
        Json::Obj(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// An MCP server entry (an `.mcp.json` fragment: `{"mcpServers": {name: entry}}`). Text that is
/// not such a fragment is judged as needing both flags: ctx cannot tell what it starts.
pub(crate) fn derive_mcp_server(text: &str) -> Derived {
    let mut d = Derived::default();
    let servers = Json::parse(text)
        .ok()
        .and_then(|json| json.get("mcpServers").and_then(Json::as_obj).cloned())
        .filter(|servers| !servers.is_empty());
    let Some(servers) = servers else {
        d.expansion
            .push("is not an .mcp.json fragment naming a server".to_owned());
        d.credentials
            .push("is not an .mcp.json fragment naming a server".to_owned());
        return d;
    };
    for (name, entry) in &servers {
        // Third-party code started with the user's privileges, or remote tools and data egress.
        d.expansion
            .push(format!("{name}: every MCP server expands permissions"));
        for key in ["oauth", "headersHelper"] {
            if entry.get(key).is_some() {
                d.credentials.push(format!("{name}: {key}"));
            }
        }
        let mut values = Vec::new();
        for key in ["command", "args", "env", "url", "headers"] {
            if let Some(v) = entry.get(key) {
                strings(v, &mut values);
            }
        }
        for value in &values {
            let mut rest = value.as_str();
            while let Some(i) = rest.find("${") {
                rest = &rest[i + 2..];
                let var = rest.split(['}', ':']).next().unwrap_or("");
                if !HOST_PROVIDED_VARIABLES.contains(&var) {
                    d.credentials.push(format!("{name}: references ${{{var}}}"));
                }
            }
            if url_with_password(value) {
                d.credentials.push(format!("{name}: a URL with a password"));
            }
        }
    }
    d
}

/// Derives an entry's flags from its installed (or loadable) text; `siblings` are the other
/// catalog files of a skill's directory, by path. Harnesses carry no material and no flag.
pub(crate) fn derive(kind: CapabilityKind, text: &str, siblings: &[(&str, &str)]) -> Derived {
    match kind {
        CapabilityKind::Skill => derive_skill(text, siblings),
        CapabilityKind::Agent => derive_agent(text),
        CapabilityKind::McpServer => derive_mcp_server(text),
        CapabilityKind::Harness => Derived::default(),
    }
}

/// The flags of a skill tree (spec/catalog.md §7): those of its `SKILL.md`, with the tree's other
/// text files as siblings, and every executable file expands permissions (a host may run it with
/// the person's privileges once the skill is active).
pub(crate) fn derive_skill_tree(tree: &super::tree::SkillTree) -> Derived {
    let skill_md = std::str::from_utf8(tree.skill_md()).unwrap_or_default();
    let siblings: Vec<(&str, &str)> = tree
        .files()
        .iter()
        .filter(|f| f.path() != "SKILL.md")
        .filter_map(|f| Some((f.path(), std::str::from_utf8(f.bytes()).ok()?)))
        .collect();
    let mut derived = derive_skill(skill_md, &siblings);
    for file in tree.files().iter().filter(|f| f.executable()) {
        derived
            .expansion
            .push(format!("ships the executable file {}", file.path()));
    }
    derived
}
