//! Importers: catalog entries built from the formats capabilities are published in (Agent Skills
//! directories, Claude Code subagent files, plugins and marketplaces, MCP server definitions),
//! with every digest, size and flag computed by ctx and every problem reported as a row of one
//! table (spec/catalog-build.md).
//!
//! An importer never trusts what a source says about itself beyond its name and description:
//! flags are derived from the material (spec/catalog.md §7), names are checked against both
//! hosts' rules (spec/capability-formats.md §6), and a source that cannot be made valid is
//! refused alone, never the whole build.

use ctx_model::CapabilityKind;

mod mcp;

/// One capability an importer produced, ready for the catalog writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportedEntry {
    pub kind: CapabilityKind,
    /// A name both hosts accept (spec/catalog.md §1.2); the writer makes the id `kind:name`.
    pub name: String,
    /// One line, at most the catalog's label limit (200 bytes), from the source's description.
    pub label: String,
    /// Sorted, unique lowercase safe tokens (at most 32).
    pub tags: Vec<String>,
    /// The body the catalog pins, as the host will receive it: a `SKILL.md`, a subagent file,
    /// or an `.mcp.json` fragment `{"mcpServers": {name: entry}}`.
    pub body: Vec<u8>,
    /// The skill's whole tree when it ships files besides `SKILL.md` (spec/skill-tree.md); the
    /// catalog then pins the tree, and `body` is its `SKILL.md`.
    pub tree: Option<SkillTree>,
    /// Where the entry came from.
    pub provenance: Provenance,
}

/// Where an imported entry came from (kept in the build report and, later, in the catalog).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The file the body was read from, as the person named it (or relative to the source).
    pub path: String,
    /// The plugin and marketplace it was found through, if any.
    pub plugin: Option<String>,
    pub marketplace: Option<String>,
    /// A version the source declares (plugin.json `version`, server.json `version`), if any.
    pub version: Option<String>,
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FindingSeverity {
    /// The entry was imported, changed or as it is; the person should know.
    Warning,
    /// The entry (or the whole source) was not imported.
    Refused,
}

/// One row of the build's problem table: entry, file, what is wrong, what was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: FindingSeverity,
    /// The file (or directory) at fault.
    pub path: String,
    /// The capability it concerns (`skill:pdf`), when one could be named.
    pub entry: Option<String>,
    /// What is wrong, as a sentence naming the value.
    pub problem: String,
    /// What was done about it ("normalized to \"stripe-integration\"", "skill refused").
    pub action: String,
}

mod discover;
#[cfg(test)]
mod tests;
mod write;

pub use discover::{
    MANIFEST_MAX_BYTES, SOURCES_MAX_DEPTH_LEVELS, SOURCES_MAX_DIRECTORIES,
    SOURCES_MAX_LISTED_ENTRIES, import_sources,
};
pub use write::{
    BUILD_MARKER_FILE, BuildError, CATALOG_BUILD_INSTALLER_ID, CATALOG_BUILD_PLAN_SCHEMA,
    WriteReport, write_catalog,
};

use std::collections::BTreeMap;

use ctx_model::{Json, is_capability_name};

use super::format::{BODY_V2_MAX_BYTES, CATALOG_V2_MAX_ENTRIES};
use super::names::host_name_refusal;
use super::tree::SkillTree;

/// What the importers produced from a build's sources: the entries and every finding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    pub entries: Vec<ImportedEntry>,
    pub findings: Vec<Finding>,
}

impl Import {
    /// How many findings have the severity `severity`.
    pub fn count(&self, severity: FindingSeverity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// Merges the imports of a build's sources, in the order the sources were given, into one set
/// keyed by `kind:name` (spec/catalog-build.md §3). The first source keeps a name; a later entry
/// of the same id is renamed `<plugin>-<name>` when it came from a plugin and that name is free
/// and valid, and refused otherwise, naming both paths. Entries past the catalog's entry limit
/// are refused. The same imports in the same order always merge to the same result.
pub fn merge(imports: Vec<Import>) -> Import {
    let mut out = Import::default();
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    for import in imports {
        out.findings.extend(import.findings);
        for mut entry in import.entries {
            let kind = entry.kind.as_str();
            let id = format!("{kind}:{}", entry.name);
            let path = entry.provenance.path.clone();
            if let Some(first) = taken.get(&id) {
                let first = first.clone();
                let renamed = entry
                    .provenance
                    .plugin
                    .as_ref()
                    .map(|plugin| format!("{plugin}-{}", entry.name))
                    .filter(|name| name_is_valid(entry.kind, name))
                    .filter(|name| !taken.contains_key(&format!("{kind}:{name}")))
                    .and_then(|name| renamed_body(&entry, &name).map(|body| (name, body)));
                match renamed {
                    Some((name, body)) => {
                        out.findings.push(Finding {
                            severity: FindingSeverity::Warning,
                            path: path.clone(),
                            entry: Some(id.clone()),
                            problem: format!(
                                "the id {id} is already taken by {first}, from an earlier source"
                            ),
                            action: format!("imported as {kind}:{name}, namespaced by its plugin"),
                        });
                        entry.name = name;
                        entry.body = body;
                    }
                    None => {
                        out.findings.push(Finding {
                            severity: FindingSeverity::Refused,
                            path: path.clone(),
                            entry: Some(id.clone()),
                            problem: format!(
                                "the id {id} is already taken by {first}, from an earlier source"
                            ),
                            action: "refused; the first source given keeps the name".to_owned(),
                        });
                        continue;
                    }
                }
            }
            if out.entries.len() >= CATALOG_V2_MAX_ENTRIES {
                out.findings.push(Finding {
                    severity: FindingSeverity::Refused,
                    path,
                    entry: Some(format!("{kind}:{}", entry.name)),
                    problem: format!(
                        "the catalog already holds {CATALOG_V2_MAX_ENTRIES} entries, the most \
                         ctx.catalog-v2 allows"
                    ),
                    action: "refused".to_owned(),
                });
                continue;
            }
            taken.insert(format!("{kind}:{}", entry.name), path);
            out.entries.push(entry);
        }
    }
    out
}

/// Whether a catalog accepts `name` for an entry of `kind` (spec/catalog.md §1.2).
fn name_is_valid(kind: ctx_model::CapabilityKind, name: &str) -> bool {
    use ctx_model::CapabilityKind as K;
    is_capability_name(name)
        && match kind {
            K::Skill => host_name_refusal(name, false).is_none(),
            K::Agent => host_name_refusal(name, true).is_none(),
            K::McpServer | K::Harness => true,
        }
}

/// The body of `entry` renamed to `name`, where the body itself names the capability: the
/// frontmatter `name:` line of a skill or agent (Claude Code identifies an agent by it), the
/// server key of an MCP fragment. `None` when the body cannot be renamed or outgrows the limit,
/// and for a skill tree, whose files the catalog pins exactly as its author wrote them.
fn renamed_body(entry: &ImportedEntry, name: &str) -> Option<Vec<u8>> {
    if entry.tree.is_some() {
        return None;
    }
    let text = std::str::from_utf8(&entry.body).ok()?;
    let body = match entry.kind {
        ctx_model::CapabilityKind::McpServer => {
            let json = Json::parse(text).ok()?;
            let servers = json.get("mcpServers")?.as_obj()?;
            let (_, server) = servers.iter().next().filter(|_| servers.len() == 1)?;
            let renamed = Json::object([(
                "mcpServers",
                Json::object([(name.to_owned(), server.clone())]),
            )]);
            renamed.to_cj().into_bytes()
        }
        _ => {
            let rest = text.strip_prefix("---\n")?;
            let end = rest.find("\n---")?;
            let mut lines: Vec<String> = rest[..end].lines().map(str::to_owned).collect();
            let line = lines.iter_mut().find(|l| l.starts_with("name:"));
            match line {
                Some(line) => *line = format!("name: {name}"),
                // A skill without a `name` line takes its directory's name, which is the new one.
                None if entry.kind == ctx_model::CapabilityKind::Skill => {}
                None => return None,
            }
            format!("---\n{}{}", lines.join("\n"), &rest[end..]).into_bytes()
        }
    };
    (i64::try_from(body.len()).ok()? <= BODY_V2_MAX_BYTES).then_some(body)
}
