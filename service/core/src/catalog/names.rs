//! Names and descriptions of skills and agents: which name a capability is catalogued under,
//! its one-line description, and every finding a person should read about them
//! (spec/capability-formats.md §6–§9).
//!
//! The checks are lenient the way the hosts are: a fault a host works around is a warning with
//! what was done about it, and only a fault no host works around refuses the capability.

use std::fmt;

use super::frontmatter::{FmValue, Frontmatter, QUOTED_IN_MESSAGE_MAX_CHARS, shorten};

/// Most characters of a skill or agent name (spec/capability-formats.md §6).
pub const NAME_MAX_CHARS: usize = 64;
/// Most characters of a description in the open spec, and of a catalog label
/// (spec/capability-formats.md §8).
pub const DESCRIPTION_MAX_CHARS: usize = 1024;
/// Skill folder names Claude Code keeps for itself (spec/capability-formats.md §6).
pub const RESERVED_SKILL_DIRECTORY_NAMES: [&str; 1] = ["synced"];
/// Names of skills bundled with Claude Code, which a local skill of the same name would
/// override. A known subset, not the full list (spec/capability-formats.md §6).
pub const BUNDLED_SKILL_NAMES: [&str; 1] = ["claude-api"];
/// Words a platform rule of uncertain source forbids in skill names; warned about, never
/// refused (spec/capability-formats.md §6).
pub const DISCOURAGED_NAME_WORDS: [&str; 2] = ["anthropic", "claude"];
/// The keys of the Agent Skills open spec; strict validators refuse any other
/// (spec/capability-formats.md §1.1).
pub const OPEN_SPEC_SKILL_KEYS: [&str; 6] = [
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The capability is catalogued; something was normalized, ignored or cut.
    Warning,
    /// The capability is not catalogued.
    Refusal,
}

/// One row of the findings table (spec/capability-formats.md §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFinding {
    /// Whether the capability is still catalogued.
    pub severity: Severity,
    /// What the finding is about: `directory`, `name`, `description` or `keys`.
    pub field: &'static str,
    /// The value at fault as written, cut to a readable length.
    pub value: String,
    /// The rule it breaks, as the rest of a sentence whose subject is the field and value.
    pub rule: String,
    /// What was done about it.
    pub what_was_done: String,
}

impl fmt::Display for NameFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?} {}; {}",
            self.field, self.value, self.rule, self.what_was_done
        )
    }
}

/// The result of checking a skill's frontmatter against its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillCheck {
    /// The name the skill is catalogued under: its normalized directory name, `None` when that
    /// cannot be made valid.
    pub name: Option<String>,
    /// The one-line description for the catalog label, `None` when missing.
    pub description: Option<String>,
    /// Everything a person should read, in the order checked.
    pub findings: Vec<NameFinding>,
    /// `allowed-tools`, a string split into entries or a list of strings.
    pub allowed_tools: Option<Vec<String>>,
    /// Whether a `hooks` key is present.
    pub hooks_present: bool,
    /// Whether an `mcpServers` or `dependencies` key is present.
    pub mcp_servers_present: bool,
    /// The `shell` value, when it is text.
    pub shell: Option<String>,
}

impl SkillCheck {
    /// Whether any finding refuses the skill.
    pub fn is_refused(&self) -> bool {
        is_refused(&self.findings)
    }
}

/// The result of checking an agent file's frontmatter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCheck {
    /// The normalized `name`, `None` when missing or impossible to make valid.
    pub name: Option<String>,
    /// The one-line description for the catalog label, `None` when missing.
    pub description: Option<String>,
    /// Everything a person should read, in the order checked.
    pub findings: Vec<NameFinding>,
    /// `tools`, a comma-separated string split into entries or a list of strings.
    pub tools: Option<Vec<String>>,
    /// The `permissionMode` value, when it is text.
    pub permission_mode: Option<String>,
    /// Whether an `mcpServers` key is present.
    pub mcp_servers_present: bool,
    /// Whether a `hooks` key is present.
    pub hooks_present: bool,
}

impl AgentCheck {
    /// Whether any finding refuses the agent.
    pub fn is_refused(&self) -> bool {
        is_refused(&self.findings)
    }
}

/// Which host format is checked; the rules differ in places (spec/capability-formats.md §6).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Skill,
    Agent,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Skill => "skill",
            Kind::Agent => "agent",
        }
    }

    fn with_article(self) -> &'static str {
        match self {
            Kind::Skill => "a skill",
            Kind::Agent => "an agent",
        }
    }
}

/// Checks a skill's frontmatter and the name of its directory (spec/capability-formats.md §8.1).
pub fn check_skill(fm: &Frontmatter, dir_name: &str) -> SkillCheck {
    let mut findings = Vec::new();
    let dir = normalize_name(dir_name, Kind::Skill);
    let name = match validity(&dir) {
        Err(why) => {
            findings.push(refusal(
                "directory",
                dir_name,
                format!("cannot be made a valid name: {why}"),
                "skill refused",
            ));
            None
        }
        Ok(()) => {
            if dir != dir_name {
                findings.push(warning(
                    "directory",
                    dir_name,
                    defects(dir_name, Kind::Skill),
                    format!("normalized to {dir:?}"),
                ));
            }
            Some(dir)
        }
    };
    check_skill_name_field(fm, name.as_deref(), &mut findings);
    if let Some(dir) = name.as_deref() {
        check_reserved(dir, dir_name, &mut findings);
    }
    let description = check_description(fm, Kind::Skill, &mut findings);
    let unknown: Vec<&str> = fm
        .keys()
        .filter(|k| !OPEN_SPEC_SKILL_KEYS.contains(k))
        .collect();
    if !unknown.is_empty() {
        // Every key is listed, each cut on its own, so a person sees all of them; there are at
        // most `FRONTMATTER_MAX_KEYS`.
        let listed: Vec<String> = unknown
            .iter()
            .map(|k| shorten(k, QUOTED_IN_MESSAGE_MAX_CHARS))
            .collect();
        let verb = if unknown.len() == 1 { "is" } else { "are" };
        findings.push(NameFinding {
            severity: Severity::Warning,
            field: "keys",
            value: listed.join(", "),
            rule: format!("{verb} outside the six keys of the open spec"),
            what_was_done: "kept; would be refused by strict validators and claude.ai upload"
                .to_owned(),
        });
    }
    SkillCheck {
        name,
        description,
        findings,
        allowed_tools: tool_list(fm.get("allowed-tools")),
        hooks_present: fm.get("hooks").is_some(),
        mcp_servers_present: fm.get("mcpServers").is_some() || fm.get("dependencies").is_some(),
        shell: fm.str_field("shell").map(str::to_owned),
    }
}

/// Checks an agent file's frontmatter; its identity is `name` alone, never the file name
/// (spec/capability-formats.md §8.2).
pub fn check_agent(fm: &Frontmatter, file_stem: &str) -> AgentCheck {
    let mut findings = Vec::new();
    let name = match fm.get("name") {
        None => {
            findings.push(refusal(
                "name",
                "",
                format!(
                    "is missing, and Claude Code identifies an agent only by it, not by the file \
                     name {:?}",
                    shorten(file_stem, QUOTED_IN_MESSAGE_MAX_CHARS)
                ),
                "agent refused",
            ));
            None
        }
        Some(FmValue::Str(raw)) => {
            let normalized = normalize_name(raw, Kind::Agent);
            match validity(&normalized) {
                Err(why) => {
                    findings.push(refusal(
                        "name",
                        raw,
                        format!("cannot be made a valid name: {why}"),
                        "agent refused",
                    ));
                    None
                }
                Ok(()) => {
                    if normalized != *raw {
                        let trimmed = raw.trim();
                        let skipped = trimmed.contains(':') || trimmed.starts_with('-');
                        let done = if skipped {
                            format!(
                                "normalized to {normalized:?}, since Claude Code skips an agent \
                                 whose name has `:` or starts with `-`"
                            )
                        } else {
                            format!("normalized to {normalized:?}")
                        };
                        findings.push(warning("name", raw, defects(raw, Kind::Agent), done));
                    }
                    Some(normalized)
                }
            }
        }
        Some(other) => {
            findings.push(refusal(
                "name",
                "",
                format!("is {}, not text", other.kind()),
                "agent refused",
            ));
            None
        }
    };
    let description = check_description(fm, Kind::Agent, &mut findings);
    AgentCheck {
        name,
        description,
        findings,
        tools: tool_list(fm.get("tools")),
        permission_mode: fm.str_field("permissionMode").map(str::to_owned),
        mcp_servers_present: fm.get("mcpServers").is_some(),
        hooks_present: fm.get("hooks").is_some(),
    }
}

/// The skill's `name` against its directory name; the directory name wins, as Claude Code
/// takes the command from it (spec/capability-formats.md §8.1).
fn check_skill_name_field(fm: &Frontmatter, dir: Option<&str>, findings: &mut Vec<NameFinding>) {
    let used = match dir {
        Some(dir) => format!("the directory name {dir:?} is used"),
        None => "the directory name is used".to_owned(),
    };
    let raw = match fm.get("name") {
        None => {
            findings.push(warning(
                "name",
                "",
                "is missing, and the open spec requires it".to_owned(),
                used,
            ));
            return;
        }
        Some(FmValue::Str(raw)) => raw,
        Some(other) => {
            findings.push(warning(
                "name",
                "",
                format!("is {}, not text", other.kind()),
                format!("ignored; {used}"),
            ));
            return;
        }
    };
    let normalized = normalize_name(raw, Kind::Skill);
    if let Err(why) = validity(&normalized) {
        findings.push(warning(
            "name",
            raw,
            format!("cannot be made a valid name: {why}"),
            format!("ignored; {used}"),
        ));
        return;
    }
    if normalized != *raw {
        findings.push(warning(
            "name",
            raw,
            defects(raw, Kind::Skill),
            format!("normalized to {normalized:?}"),
        ));
    }
    if let Some(dir) = dir
        && normalized != dir
    {
        findings.push(warning(
            "name",
            raw,
            format!("differs from its directory name {dir:?}"),
            format!(
                "{used}: Claude Code takes the command from the directory, and the open spec \
                 requires the two to be equal"
            ),
        ));
    }
}

/// Reserved and bundled names refuse the skill; the discouraged words only warn
/// (spec/capability-formats.md §6).
fn check_reserved(name: &str, dir_name: &str, findings: &mut Vec<NameFinding>) {
    if RESERVED_SKILL_DIRECTORY_NAMES.contains(&name) {
        findings.push(refusal(
            "directory",
            dir_name,
            "is a folder name Claude Code reserves for itself".to_owned(),
            "skill refused",
        ));
    } else if BUNDLED_SKILL_NAMES.contains(&name) {
        findings.push(refusal(
            "directory",
            dir_name,
            "is the name of a skill bundled with Claude Code, which a local skill of that name \
             would override"
                .to_owned(),
            "skill refused",
        ));
    } else if let Some(word) = DISCOURAGED_NAME_WORDS.iter().find(|w| name.contains(**w)) {
        findings.push(warning(
            "name",
            name,
            format!("contains the word {word:?}, which a platform rule is reported to forbid in skill names"),
            "kept; an upload that applies the rule would refuse it".to_owned(),
        ));
    }
}

/// The description as a one-line catalog label, with its findings
/// (spec/capability-formats.md §8.3).
fn check_description(
    fm: &Frontmatter,
    kind: Kind,
    findings: &mut Vec<NameFinding>,
) -> Option<String> {
    let refused = format!(
        "{} refused: hosts skip {} without a description",
        kind.noun(),
        kind.with_article()
    );
    let raw = match fm.get("description") {
        None => {
            findings.push(refusal(
                "description",
                "",
                "is missing".to_owned(),
                &refused,
            ));
            return None;
        }
        Some(FmValue::Str(raw)) => raw,
        Some(other) => {
            findings.push(refusal(
                "description",
                "",
                format!("is {}, not text", other.kind()),
                &refused,
            ));
            return None;
        }
    };
    let label = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    if label.is_empty() {
        findings.push(refusal("description", raw, "is empty".to_owned(), &refused));
        return None;
    }
    let lines = raw.lines().filter(|l| !l.trim().is_empty()).count();
    if lines > 1 {
        findings.push(warning(
            "description",
            raw,
            format!("spans {lines} lines"),
            "joined to one line, as Codex does".to_owned(),
        ));
    }
    let chars = raw.chars().count();
    if chars > DESCRIPTION_MAX_CHARS {
        let limit = match kind {
            Kind::Skill => "the open spec allows",
            Kind::Agent => "a catalog label holds",
        };
        let done = if label.chars().count() > DESCRIPTION_MAX_CHARS {
            format!("truncated to {DESCRIPTION_MAX_CHARS} characters for the catalog label")
        } else {
            "kept whole, since its one-line form fits the catalog label".to_owned()
        };
        findings.push(warning(
            "description",
            raw,
            format!("is {chars} characters, more than the {DESCRIPTION_MAX_CHARS} {limit}"),
            done,
        ));
    }
    Some(label.chars().take(DESCRIPTION_MAX_CHARS).collect())
}

/// The normalization steps of spec/capability-formats.md §7. Lowercasing is ASCII only, so no
/// non-ASCII letter (the Kelvin sign `K` lowercases to `k`) can turn into a valid name.
fn normalize_name(raw: &str, kind: Kind) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.trim().chars() {
        let c = match c {
            '_' => '-',
            ':' if kind == Kind::Agent => '-',
            c if c.is_whitespace() => '-',
            c => c.to_ascii_lowercase(),
        };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    out.trim_matches('-').to_owned()
}

/// Why an agent host would refuse a catalog entry's skill or agent `name` as it is (a clause:
/// "names are 1 to 64 characters …"), or `None` when both hosts accept it (spec/catalog.md §1.2, spec/capability-formats.md
/// §6): a catalog is checked exactly, with no normalization, because activation writes the name
/// as the host's directory or agent name.
pub(crate) fn host_name_refusal(name: &str, agent: bool) -> Option<String> {
    let kind = if agent { Kind::Agent } else { Kind::Skill };
    let normalized = normalize_name(name, kind);
    if let Err(why) = validity(&normalized) {
        return Some(why.to_string());
    }
    if normalized != name {
        return Some(format!(
            "names are 1 to {NAME_MAX_CHARS} characters of a-z, 0-9 and single \
             hyphens, not at either end (it could be \"{normalized}\")"
        ));
    }
    if !agent
        && (RESERVED_SKILL_DIRECTORY_NAMES.contains(&name) || BUNDLED_SKILL_NAMES.contains(&name))
    {
        return Some("Claude Code reserves it or bundles a skill of that name".to_owned());
    }
    None
}

/// Why a normalized name is not valid: the rest of a sentence ("it is empty once normalized").
#[derive(Debug)]
struct InvalidName(String);

impl std::fmt::Display for InvalidName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether a normalized name is valid: 1 to [`NAME_MAX_CHARS`] characters of `a-z`, `0-9` and
/// `-` (spec/capability-formats.md §6).
fn validity(normalized: &str) -> Result<(), InvalidName> {
    if normalized.is_empty() {
        return Err(InvalidName("it is empty once normalized".to_owned()));
    }
    if !normalized
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(InvalidName(
            "it keeps characters other than a-z, 0-9 and `-` once normalized".to_owned(),
        ));
    }
    let chars = normalized.chars().count();
    if chars > NAME_MAX_CHARS {
        return Err(InvalidName(format!(
            "it is {chars} characters once normalized, more than {NAME_MAX_CHARS}"
        )));
    }
    Ok(())
}

/// What normalization changed in a name, as "has uppercase letters and `_`".
fn defects(raw: &str, kind: Kind) -> String {
    let trimmed = raw.trim();
    let mut found: Vec<&str> = Vec::new();
    if trimmed.len() != raw.len() {
        found.push("surrounding spaces");
    }
    if trimmed.chars().any(|c| c.is_ascii_uppercase()) {
        found.push("uppercase letters");
    }
    if trimmed.contains('_') {
        found.push("`_`");
    }
    if trimmed.chars().any(char::is_whitespace) {
        found.push("spaces");
    }
    if kind == Kind::Agent && trimmed.contains(':') {
        found.push("`:`");
    }
    if trimmed.contains("--") {
        found.push("`--`");
    }
    if trimmed.starts_with('-') || trimmed.ends_with('-') {
        found.push("a leading or trailing `-`");
    }
    match found.as_slice() {
        [] => "is not in normal form".to_owned(),
        [one] => format!("has {one}"),
        [init @ .., last] => format!("has {} and {last}", init.join(", ")),
    }
}

/// A tool list as entries: a list keeps its text items; a string splits at commas and
/// whitespace outside parentheses, so `Bash(npm run test:*)` stays one entry
/// (spec/capability-formats.md §8.4).
fn tool_list(value: Option<&FmValue>) -> Option<Vec<String>> {
    match value? {
        FmValue::Str(s) => Some(split_tools(s)),
        FmValue::List(items) => Some(
            items
                .iter()
                .filter_map(FmValue::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

fn split_tools(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && (c == ',' || c.is_whitespace()) {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn is_refused(findings: &[NameFinding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Refusal)
}

fn warning(
    field: &'static str,
    value: &str,
    rule: String,
    what_was_done: impl Into<String>,
) -> NameFinding {
    finding(Severity::Warning, field, value, rule, what_was_done.into())
}

fn refusal(field: &'static str, value: &str, rule: String, what_was_done: &str) -> NameFinding {
    finding(
        Severity::Refusal,
        field,
        value,
        rule,
        what_was_done.to_owned(),
    )
}

fn finding(
    severity: Severity,
    field: &'static str,
    value: &str,
    rule: String,
    what_was_done: String,
) -> NameFinding {
    NameFinding {
        severity,
        field,
        value: shorten(value, QUOTED_IN_MESSAGE_MAX_CHARS),
        rule,
        what_was_done,
    }
}
