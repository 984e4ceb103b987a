//! The sample catalog's `permission_expansion` and `credential_requirement` flags, derived from
//! each entry's material by the rule of spec/catalog.md §7 (from spec/catalog.md §7),
//! without looking at the flags, and compared with them.
//!
//! Why derive: the flags route an install to an interactive human decision
//! (spec/catalog.md §7, `permission-expansion-requires-consent`,
//! `credentials-require-consent`) and keep the skill store from installing on its own
//! (`skill_cas::installs`). A flag hand-written as `false` on material that pre-approves tools or
//! needs a token would skip that decision, and nothing else would notice.
//!
//! The derivation reads the material the install leaves behind (`install.result`) — the activated
//! form, which is what the host acts on — and, for `load` skills, the material itself.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

use ctx_model::CapabilityKind;
use ctx_model::Json;

use super::*;

/// What the rule concludes about one material, with the evidence for each `true`.
#[derive(Debug, Default)]
struct Derived {
    /// Why the material expands permissions (empty = it does not).
    expansion: Vec<String>,
    /// Why the material needs credentials (empty = it does not).
    credentials: Vec<String>,
}

impl Derived {
    fn flags(&self) -> (bool, bool) {
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
const ESCALATING_PERMISSION_MODES: &[&str] =
    &["acceptEdits", "auto", "dontAsk", "bypassPermissions"];

/// Splits `---\n<frontmatter>\n---\n<body>`; a file without frontmatter is all body.
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
        .map(|(k, v)| (k.trim(), v.trim().trim_matches(['"', '\''])))
        .collect()
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
fn derive_skill(text: &str, siblings: &[(&str, &str)]) -> Derived {
    let mut d = Derived::default();
    let (frontmatter, body) = split_frontmatter(text);
    let keys = frontmatter_keys(frontmatter);
    for (key, value) in &keys {
        match *key {
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
        .filter(|(k, _)| *k == "allowed-tools")
        .map(|(_, v)| *v)
        .collect::<Vec<_>>()
        .join(" ");
    d.credentials = credential_markers(&format!("{allowed}\n{body}"));
    d
}

/// An agent (`agents/<name>.md`, the Claude Code subagent file; Codex TOML spellings included).
fn derive_agent(text: &str) -> Derived {
    let mut d = Derived::default();
    let (frontmatter, body) = split_frontmatter(text);
    for (key, value) in frontmatter_keys(frontmatter) {
        match key {
            "permissionMode" if ESCALATING_PERMISSION_MODES.contains(&value) => {
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

/// An MCP server entry (an `.mcp.json` fragment: `{"mcpServers": {name: entry}}`).
fn derive_mcp_server(text: &str) -> Derived {
    let mut d = Derived::default();
    let json = Json::parse(text).expect("an MCP fragment is JSON");
    let servers = json
        .get("mcpServers")
        .and_then(Json::as_obj)
        .expect("an MCP fragment has mcpServers");
    assert!(!servers.is_empty(), "an MCP fragment names a server");
    for (name, entry) in servers {
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

/// Derives an entry's flags from its installed (or loadable) text.
fn derive(kind: CapabilityKind, path: &str, text: &str) -> Derived {
    match kind {
        CapabilityKind::Skill => {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            let siblings: Vec<(&str, &str)> = sample_catalog_files()
                .iter()
                .filter(|(p, _)| *p != path && p.starts_with(&format!("{dir}/")))
                .map(|(p, bytes)| (*p, std::str::from_utf8(bytes).expect("UTF-8 sibling")))
                .collect();
            derive_skill(text, &siblings)
        }
        CapabilityKind::Agent => derive_agent(text),
        CapabilityKind::McpServer => derive_mcp_server(text),
        CapabilityKind::Harness => panic!("harnesses carry no material"),
    }
}

fn sample() -> LoadedCatalog {
    load_catalog_dir(&sample_catalog_dir()).expect("the sample catalog loads and verifies")
}

#[test]
fn installable_entries_carry_the_flags_their_material_implies() {
    let loaded = sample();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for entry in loaded.catalog().entries() {
        let Some(install) = &entry.install else {
            continue;
        };
        let text = loaded.install_result_text(&entry.id).expect("install body");
        let derived = derive(entry.kind, &install.result.path, text);
        let declared = (install.permission_expansion, install.credential_requirement);
        if derived.flags() != declared {
            wrong.push(format!(
                "{}: declares (permission_expansion, credential_requirement) = {declared:?}, \
                 the material implies {:?}: {derived:?}",
                entry.id,
                derived.flags()
            ));
        }
        checked += 1;
    }
    assert!(wrong.is_empty(), "dishonest flags:\n{}", wrong.join("\n"));
    // Not vacuous: the sample has installs of every installable kind, with each flag both ways.
    assert!(checked >= 25, "{checked} installs checked");
    let installs = || {
        loaded
            .catalog()
            .entries()
            .iter()
            .filter_map(|e| e.install.as_ref())
    };
    for flag in [
        |i: &InstallSpec| i.permission_expansion,
        |i: &InstallSpec| i.credential_requirement,
    ] {
        assert!(installs().any(flag) && installs().any(|i| !flag(i)));
    }
}

/// A `load` skill reaches the host with no install plan, so no flag and no consent gate; its
/// material must therefore neither expand permissions nor need credentials.
#[test]
fn loadable_skills_neither_expand_permissions_nor_need_credentials() {
    let loaded = sample();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for entry in loaded.catalog().entries() {
        let Some(material) = &entry.material else {
            continue;
        };
        let text = loaded.material_text(&entry.id).expect("material body");
        let derived = derive(entry.kind, &material.body.path, text);
        if derived.flags() != (false, false) {
            wrong.push(format!("{}: {derived:?}", entry.id));
        }
        checked += 1;
    }
    assert!(
        wrong.is_empty(),
        "load material that needs a gate:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 10, "{checked} loadable skills checked");
}

/// The rule recognizes each marker, and not its harmless look-alikes.
#[test]
fn the_derivation_recognizes_each_marker() {
    let skill = |t: &str| derive_skill(t, &[]).flags();
    let plain = "---\nname: x\ndescription: y\n---\n";
    assert_eq!(
        skill(&format!("{plain}Run `cargo test`.\n")),
        (false, false)
    );
    assert_eq!(
        skill("---\nname: x\nallowed-tools: Bash(git add *)\n---\nbody\n"),
        (true, false)
    );
    assert_eq!(
        skill("---\nname: x\nallowed-tools: Bash(gh pr view *)\n---\nbody\n"),
        (true, true)
    );
    assert_eq!(
        skill("---\nname: x\nhooks:\n  Stop:\n    - hooks: []\n---\nbody\n"),
        (true, false)
    );
    assert_eq!(
        skill(&format!("{plain}Branch: !`git branch`\n")),
        (true, false)
    );
    assert_eq!(skill(&format!("{plain}```!\ndate\n```\n")), (true, false));
    // Claude Code reads `!` before a closing backtick as injection too.
    assert_eq!(skill(&format!("{plain}Avoid (`!`) here.\n")), (true, false));
    assert_eq!(
        skill(&format!("{plain}Avoid (postfix !) here.\n")),
        (false, false)
    );
    assert_eq!(
        derive_skill(
            plain,
            &[(
                "skills/x/agents/openai.yaml",
                "dependencies:\n  tools:\n    - type: mcp\n"
            )]
        )
        .flags(),
        (true, false)
    );
    assert_eq!(
        skill(&format!("{plain}First `gh auth status`.\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}```sh\ncd x && bq query 'select 1'\n```\n")),
        (false, true)
    );
    assert_eq!(skill(&format!("{plain}Then `aws s3 ls`.\n")), (false, true));
    // Not markers: a word `gh` in prose, lower-case shell variables, tools acting on the
    // project's own configuration.
    assert_eq!(
        skill(&format!("{plain}gh is great; `echo $o`.\n")),
        (false, false)
    );
    assert_eq!(
        skill(&format!(
            "{plain}`terraform plan`, `kubectl get pods`, `TF_VAR_x`.\n"
        )),
        (false, false)
    );
    assert_eq!(
        skill(&format!("{plain}Set `$SENTRY_AUTH_TOKEN`.\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}`psql postgres://u:pw@db/app`\n")),
        (false, true)
    );
    assert_eq!(
        skill(&format!("{plain}`psql postgres://db/app`\n")),
        (false, false)
    );

    let agent =
        |fm: &str, body: &str| derive_agent(&format!("---\nname: x\n{fm}---\n{body}")).flags();
    assert_eq!(agent("tools: Read, Bash\n", "Review.\n"), (false, false));
    assert_eq!(
        agent("tools: Bash(gh pr diff *)\n", "Review.\n"),
        (false, false)
    );
    for mode in ["default", "plan", "manual"] {
        assert_eq!(
            agent(&format!("permissionMode: {mode}\n"), ""),
            (false, false)
        );
    }
    for mode in ESCALATING_PERMISSION_MODES {
        assert_eq!(
            agent(&format!("permissionMode: {mode}\n"), ""),
            (true, false)
        );
    }
    assert_eq!(agent("mcpServers:\n  - github\n", ""), (true, false));
    assert_eq!(agent("hooks:\n  PreToolUse: []\n", ""), (true, false));
    assert_eq!(
        agent("", "Query with `psql \"$DATABASE_URL\"`.\n"),
        (false, true)
    );
    assert_eq!(agent("", "Run `gcloud auth list`.\n"), (false, true));

    let mcp =
        |entry: &str| derive_mcp_server(&format!("{{\"mcpServers\": {{\"s\": {entry}}}}}")).flags();
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["-y", "pkg"]}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["${CLAUDE_PROJECT_DIR}"]}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "env": {"K": "${API_KEY}"}}"#),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["--dsn", "${DATABASE_URL:-x}"]}"#),
        (true, true)
    );
    assert_eq!(
        mcp(
            r#"{"type": "http", "url": "https://x/mcp", "headers": {"Authorization": "Bearer ${T}"}}"#
        ),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"type": "http", "url": "https://x/mcp"}"#),
        (true, false)
    );
    assert_eq!(
        mcp(r#"{"type": "http", "url": "https://x/mcp", "oauth": {"clientId": "c"}}"#),
        (true, true)
    );
    assert_eq!(
        mcp(r#"{"command": "npx", "args": ["--dsn", "postgres://u:pw@h/db"]}"#),
        (true, true)
    );
}

/// The flags of spec/catalog.md §7 (the research table the sample was built from), for
/// the ids the sample ships. `None` = the sample ships the id without an install (manual), so it
/// carries no flags.
#[test]
fn flags_agree_with_the_research_notes_table() {
    const NOTES: &[(&str, Option<(bool, bool)>)] = &[
        ("skill:pdf", None),
        ("skill:xlsx", None),
        ("skill:mcp-builder", Some((false, false))),
        ("skill:webapp-testing", Some((false, false))),
        ("skill:gh-address-comments", Some((false, true))),
        ("skill:commit", Some((true, false))),
        ("skill:pr-summary", Some((true, true))),
        ("skill:cargo-clippy-fix", Some((true, false))),
        ("agent:code-reviewer", Some((false, false))),
        ("agent:code-explorer", Some((false, false))),
        ("agent:silent-failure-hunter", Some((false, false))),
        ("agent:pr-test-analyzer", Some((false, false))),
        ("agent:type-design-analyzer", Some((false, false))),
        ("agent:code-simplifier", Some((false, false))),
        ("agent:debugger", Some((false, false))),
        // The hosts' research table gives (false, true): the sample ships it manual (spec/catalog.md §7).
        ("agent:data-scientist", None),
        ("agent:db-reader", Some((true, true))),
        ("mcp-server:filesystem", Some((true, false))),
        ("mcp-server:git", Some((true, false))),
        ("mcp-server:fetch", Some((true, false))),
        ("mcp-server:memory", Some((true, false))),
        ("mcp-server:sequential-thinking", Some((true, false))),
        ("mcp-server:time", Some((true, false))),
        ("mcp-server:github", Some((true, true))),
        ("mcp-server:playwright", Some((true, false))),
        ("mcp-server:context7", Some((true, false))),
        ("mcp-server:sentry", Some((true, true))),
        ("mcp-server:dbhub", Some((true, true))),
        // The hosts' research table gives (true, true), OAuth: the sample ships it manual
        // (spec/catalog.md §7).
        ("mcp-server:notion", None),
    ];
    let loaded = sample();
    for (id, flags) in NOTES {
        let entry = loaded.catalog().entry(id).expect("the sample ships the id");
        let declared = entry
            .install
            .as_ref()
            .map(|i| (i.permission_expansion, i.credential_requirement));
        assert_eq!(declared, *flags, "{id}");
    }
}
