//! Finding capabilities in the paths a person names: skill directories, Claude Code subagent
//! files, plugins, marketplaces and MCP server files (spec/catalog-build.md §1–§2).
//!
//! The scan never follows a symbolic link below the source path (a link could point anywhere,
//! spec/catalog.md §3), is bounded in depth, directories and listed entries, and never stops at
//! the first problem: every source, entry and file that is wrong becomes a [`Finding`], so one
//! run shows a person everything to fix.

use std::fs;
use std::path::{Path, PathBuf};

use ctx_model::{CapabilityKind, Json, is_safe_token};

use super::super::format::{BODY_V2_MAX_BYTES, LABEL_MAX_BYTES, TAGS_MAX_PER_ENTRY};
use super::super::frontmatter::{Frontmatter, parse_frontmatter};
use super::super::names::{NameFinding, Severity, check_agent, check_skill};
use super::super::tree::{SkillTree, read_skill_tree_at};
use super::{Finding, FindingSeverity, Import, ImportedEntry, Provenance, merge};

/// Most directory levels scanned below a source directory (`skills/a/b/c/d/e/f` is 6 levels):
/// real skill collections nest two or three levels, and the bound keeps a mistaken source (a home
/// directory) from being walked whole (spec/catalog-build.md §6).
pub const SOURCES_MAX_DEPTH_LEVELS: usize = 6;
/// Most directories scanned over all sources of one build (spec/catalog-build.md §6).
pub const SOURCES_MAX_DIRECTORIES: usize = 2_000;
/// Most directory entries listed over all sources of one build, skipped ones included: the
/// directory limit does not bound a directory holding many files (spec/catalog-build.md §6).
pub const SOURCES_MAX_LISTED_ENTRIES: usize = 100_000;
/// Largest manifest read (`plugin.json`, `marketplace.json`, `.mcp.json`, `server.json`)
/// (spec/catalog-build.md §6).
pub const MANIFEST_MAX_BYTES: u64 = 1024 * 1024;

/// The body limit of `ctx.catalog-v2` as an unsigned size (spec/catalog.md §1.4).
const BODY_LIMIT_BYTES: u64 = BODY_V2_MAX_BYTES.unsigned_abs();
/// Directories skipped wherever they appear: version-control and package-manager state is not
/// a capability a person wrote (spec/skill-tree.md §2 skips the same names).
const SKIPPED_DIRECTORIES: [&str; 2] = [".git", "node_modules"];
/// The sentence a single-skill plugin's tree refusal ends with (spec/catalog-build.md §2.1).
const TREE_REFUSAL: &str = "a skill tree is its whole directory, and this one is also the plugin's, so ctx cannot pin the skill without the plugin's files";
/// The files of a single-skill plugin's directory that belong to the plugin, not the skill.
const PLUGIN_FILES: [&str; 4] = [".claude-plugin/", "agents/", ".mcp.json", "README"];
/// How many extra files a tree refusal names; the rest are counted.
const TREE_FILES_NAMED_MAX: usize = 3;

/// What one build imported: the entries and every finding, in source order.
pub fn import_sources(sources: &[PathBuf]) -> Import {
    let mut scan = Scan::default();
    let mut imports = Vec::with_capacity(sources.len());
    for source in sources {
        scan.import = Import::default();
        scan.source(source);
        imports.push(std::mem::take(&mut scan.import));
    }
    merge(imports)
}

/// The plugin and marketplace a capability is found through.
#[derive(Debug, Clone, Default)]
struct Origin {
    plugin: Option<String>,
    marketplace: Option<String>,
    version: Option<String>,
    /// Safe-token keywords of the plugin and its marketplace entry, to become tags.
    keywords: Vec<String>,
}

impl Origin {
    fn provenance(&self, path: &Path) -> Provenance {
        Provenance {
            path: path.display().to_string(),
            plugin: self.plugin.clone(),
            marketplace: self.marketplace.clone(),
            version: self.version.clone(),
        }
    }
}

/// The state of one build's scan: what it imported and how much it has walked.
#[derive(Debug, Default)]
struct Scan {
    import: Import,
    directories: usize,
    listed: usize,
    /// Set once a scan limit is met, so the finding is reported once and nothing more is walked.
    stopped: bool,
}

fn finding(
    severity: FindingSeverity,
    path: &Path,
    entry: Option<String>,
    problem: String,
    action: &str,
) -> Finding {
    Finding {
        severity,
        path: path.display().to_string(),
        entry,
        problem,
        action: action.to_owned(),
    }
}

impl Scan {
    fn refuse(&mut self, path: &Path, entry: Option<String>, problem: String, action: &str) {
        self.import.findings.push(finding(
            FindingSeverity::Refused,
            path,
            entry,
            problem,
            action,
        ));
    }

    fn warn(&mut self, path: &Path, entry: Option<String>, problem: String, action: &str) {
        self.import.findings.push(finding(
            FindingSeverity::Warning,
            path,
            entry,
            problem,
            action,
        ));
    }

    /// One source path, recognized by what it is (spec/catalog-build.md §1).
    fn source(&mut self, path: &Path) {
        let before = (self.import.entries.len(), self.import.findings.len());
        // The source itself is opened as named: the person chose it, as they choose the catalog
        // directory (spec/catalog.md §3); nothing below it is followed.
        let meta = match fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) => {
                self.refuse(
                    path,
                    None,
                    format!("the source {} could not be read: {e}", path.display()),
                    "source skipped",
                );
                return;
            }
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if meta.is_file() {
            match name.as_str() {
                ".mcp.json" => self.mcp_file(path, McpFile::McpJson, &Origin::default()),
                "server.json" => self.mcp_file(path, McpFile::ServerJson, &Origin::default()),
                "config.toml" => self.mcp_file(path, McpFile::ConfigToml, &Origin::default()),
                "SKILL.md" => {
                    let dir = path.parent().unwrap_or(Path::new("."));
                    let dir_name = directory_name(dir);
                    self.skill(dir, &dir_name, &Origin::default());
                }
                _ if name.ends_with(".md") => self.agent(path, &Origin::default()),
                _ => self.refuse(
                    path,
                    None,
                    format!(
                        "the source {} is not a file ctx imports: a SKILL.md, a subagent .md \
                         file, an .mcp.json, a server.json or a config.toml",
                        path.display()
                    ),
                    "source skipped",
                ),
            }
        } else if meta.is_dir() {
            let manifests = path.join(".claude-plugin");
            if manifests.join("marketplace.json").is_file() {
                self.marketplace(path);
            } else if manifests.join("plugin.json").is_file() {
                self.plugin_with_manifest(path, &Origin::default());
            } else {
                let in_agents = name == "agents";
                self.walk(path, 0, in_agents, &Origin::default());
                let mcp = path.join(".mcp.json");
                if mcp.is_file() {
                    self.mcp_file(&mcp, McpFile::McpJson, &Origin::default());
                }
            }
        } else {
            self.refuse(
                path,
                None,
                format!(
                    "the source {} is neither a regular file nor a directory",
                    path.display()
                ),
                "source skipped",
            );
        }
        if before == (self.import.entries.len(), self.import.findings.len()) {
            self.refuse(
                path,
                None,
                format!(
                    "the source {} holds no skill, subagent, plugin, marketplace or MCP server \
                     file ctx recognizes",
                    path.display()
                ),
                "source skipped",
            );
        }
    }

    /// The names in `dir`, sorted so the build is deterministic; `None` (with a finding) when the
    /// directory cannot be listed or a scan limit is met.
    fn list(&mut self, dir: &Path) -> Option<Vec<(String, fs::FileType)>> {
        if self.stopped {
            return None;
        }
        self.directories += 1;
        if self.directories > SOURCES_MAX_DIRECTORIES {
            self.stopped = true;
            self.refuse(
                dir,
                None,
                format!(
                    "the sources hold more than {SOURCES_MAX_DIRECTORIES} directories, the \
                     most one build scans"
                ),
                "scanning stopped here; name narrower sources",
            );
            return None;
        }
        let reader = match fs::read_dir(dir) {
            Ok(reader) => reader,
            Err(e) => {
                self.refuse(
                    dir,
                    None,
                    format!("the directory {} could not be listed: {e}", dir.display()),
                    "directory skipped",
                );
                return None;
            }
        };
        let mut names = Vec::new();
        for entry in reader {
            self.listed += 1;
            if self.listed > SOURCES_MAX_LISTED_ENTRIES {
                self.stopped = true;
                self.refuse(
                    dir,
                    None,
                    format!(
                        "the sources hold more than {SOURCES_MAX_LISTED_ENTRIES} directory \
                         entries, the most one build lists"
                    ),
                    "scanning stopped here; name narrower sources",
                );
                return None;
            }
            match entry.and_then(|e| Ok((e.file_name(), e.file_type()?))) {
                Ok((name, kind)) => names.push((name.to_string_lossy().into_owned(), kind)),
                Err(e) => {
                    self.refuse(
                        dir,
                        None,
                        format!("the directory {} could not be listed: {e}", dir.display()),
                        "directory skipped",
                    );
                    return None;
                }
            }
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        Some(names)
    }

    /// Walks a directory for skills, plugins and (below a directory named `agents`) subagent
    /// files; `depth` is the directory's level below the source.
    fn walk(&mut self, dir: &Path, depth: usize, in_agents: bool, origin: &Origin) {
        let Some(names) = self.list(dir) else {
            return;
        };
        let has = |wanted: &str, dir_wanted: bool| {
            names
                .iter()
                .any(|(n, k)| n == wanted && if dir_wanted { k.is_dir() } else { k.is_file() })
        };
        if has("SKILL.md", false) {
            self.skill(dir, &directory_name(dir), origin);
            return;
        }
        // A plugin inside a plain directory is imported as a plugin; a plugin inside a plugin is
        // not a layout Claude Code loads, so its directories are scanned as plain ones.
        if origin.plugin.is_none()
            && has(".claude-plugin", true)
            && dir.join(".claude-plugin").join("plugin.json").is_file()
        {
            self.plugin_with_manifest(dir, origin);
            return;
        }
        for (name, kind) in names {
            let path = dir.join(&name);
            if kind.is_symlink() {
                self.warn(
                    &path,
                    None,
                    format!("{} is a symbolic link", path.display()),
                    "skipped: ctx never follows a symbolic link inside a source",
                );
            } else if kind.is_dir() {
                if SKIPPED_DIRECTORIES.contains(&name.as_str()) || name == ".claude-plugin" {
                    continue;
                }
                if depth + 1 > SOURCES_MAX_DEPTH_LEVELS {
                    self.warn(
                        &path,
                        None,
                        format!(
                            "the directory {} is more than {SOURCES_MAX_DEPTH_LEVELS} levels \
                             below its source",
                            path.display()
                        ),
                        "not scanned",
                    );
                    continue;
                }
                self.walk(&path, depth + 1, in_agents || name == "agents", origin);
            } else if kind.is_file() && in_agents && name.ends_with(".md") {
                self.agent(&path, origin);
            }
        }
    }

    /// One skill directory (spec/catalog-build.md §2.1).
    fn skill(&mut self, dir: &Path, dir_name: &str, origin: &Origin) {
        self.skill_in(dir, dir_name, origin, false);
    }

    /// One skill directory; `plugin_root` when it is a single-skill plugin's own directory, whose
    /// plugin files are not the skill's.
    fn skill_in(&mut self, dir: &Path, dir_name: &str, origin: &Origin, plugin_root: bool) {
        let skill_md = dir.join("SKILL.md");
        let label_id = format!("skill:{dir_name}");
        let tree = match read_skill_tree_at(dir) {
            Ok(tree) => tree,
            Err(e) => {
                self.refuse(&skill_md, Some(label_id), e.to_string(), "skill refused");
                return;
            }
        };
        let mut refused = false;
        // A single-skill plugin's directory is also the plugin's: its plugin files are not the
        // skill's, and a tree is a whole directory, so such a skill can only be its SKILL.md.
        let extra: Vec<&str> = tree
            .files()
            .iter()
            .map(|f| f.path())
            .filter(|p| *p != "SKILL.md")
            .filter(|p| !plugin_root || !PLUGIN_FILES.iter().any(|f| p.starts_with(f)))
            .collect();
        if plugin_root && !extra.is_empty() {
            let mut named: Vec<String> = extra
                .iter()
                .take(TREE_FILES_NAMED_MAX)
                .map(|p| (*p).to_owned())
                .collect();
            if extra.len() > TREE_FILES_NAMED_MAX {
                named.push(format!("{} more", extra.len() - TREE_FILES_NAMED_MAX));
            }
            let files = if extra.len() == 1 { "file" } else { "files" };
            self.refuse(
                dir,
                Some(label_id.clone()),
                format!(
                    "the skill directory has {} {files} besides SKILL.md ({}); {TREE_REFUSAL}",
                    extra.len(),
                    named.join(", ")
                ),
                "skill refused",
            );
            refused = true;
        }
        let has_tree = !plugin_root && tree.files().len() > 1;
        let bytes = tree.skill_md();
        let Some(fm) = self.frontmatter(&skill_md, &label_id, bytes, "skill refused") else {
            return;
        };
        let check = check_skill(&fm, dir_name);
        let entry = check
            .name
            .as_ref()
            .map_or(label_id, |name| format!("skill:{name}"));
        self.name_findings(&skill_md, &entry, &check.findings);
        if refused || check.is_refused() {
            return;
        }
        let (Some(name), Some(description)) = (check.name, check.description) else {
            return;
        };
        let body = bytes.to_vec();
        self.entry(
            CapabilityKind::Skill,
            name,
            &description,
            (body, has_tree.then_some(tree)),
            &skill_md,
            origin,
        );
    }

    /// One subagent file (spec/catalog-build.md §2.2).
    fn agent(&mut self, path: &Path, origin: &Origin) {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let label_id = format!("agent:{stem}");
        let bytes = match ctx_fs::read_bounded(path, BODY_LIMIT_BYTES) {
            Ok(bytes) => bytes,
            Err(ctx_fs::ReadError::TooLarge { size_bytes, .. }) => {
                self.refuse(
                    path,
                    Some(label_id),
                    format!(
                        "the agent file is {size_bytes} bytes, more than the limit of \
                         {BODY_LIMIT_BYTES} bytes of a ctx.catalog-v2 body"
                    ),
                    "agent refused",
                );
                return;
            }
            Err(e) => {
                self.refuse(path, Some(label_id), e.to_string(), "agent refused");
                return;
            }
        };
        let Some(fm) = self.frontmatter(path, &label_id, &bytes, "agent refused") else {
            return;
        };
        let check = check_agent(&fm, &stem);
        let entry = check
            .name
            .as_ref()
            .map_or(label_id, |name| format!("agent:{name}"));
        self.name_findings(path, &entry, &check.findings);
        if check.is_refused() {
            return;
        }
        let (Some(name), Some(description)) = (check.name, check.description) else {
            return;
        };
        self.entry(
            CapabilityKind::Agent,
            name,
            &description,
            (bytes, None),
            path,
            origin,
        );
    }

    /// The frontmatter of a skill or agent file, its repairs reported as warnings; `None` (with a
    /// finding) when the text is not UTF-8 or the YAML cannot be read.
    fn frontmatter(
        &mut self,
        path: &Path,
        entry: &str,
        bytes: &[u8],
        refused: &str,
    ) -> Option<Frontmatter> {
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.refuse(
                path,
                Some(entry.to_owned()),
                "the file is not UTF-8 text".to_owned(),
                refused,
            );
            return None;
        };
        match parse_frontmatter(text) {
            Ok(fm) => {
                for warning in &fm.warnings {
                    self.warn(
                        path,
                        Some(entry.to_owned()),
                        warning.to_string(),
                        "imported with the value quoted; quote it in the source",
                    );
                }
                Some(fm)
            }
            Err(e) => {
                self.refuse(path, Some(entry.to_owned()), e.to_string(), refused);
                None
            }
        }
    }

    fn name_findings(&mut self, path: &Path, entry: &str, findings: &[NameFinding]) {
        for f in findings {
            let severity = match f.severity {
                Severity::Warning => FindingSeverity::Warning,
                Severity::Refusal => FindingSeverity::Refused,
            };
            self.import.findings.push(finding(
                severity,
                path,
                Some(entry.to_owned()),
                name_problem(f),
                &f.what_was_done,
            ));
        }
    }

    /// Adds an entry with its label and tags (spec/catalog-build.md §2.4).
    fn entry(
        &mut self,
        kind: CapabilityKind,
        name: String,
        description: &str,
        (body, tree): (Vec<u8>, Option<SkillTree>),
        path: &Path,
        origin: &Origin,
    ) {
        let id = format!("{}:{name}", kind.as_str());
        let (label, cut) = label_of(description);
        if label.is_empty() {
            self.refuse(
                path,
                Some(id),
                "the description has no printable character for the catalog label".to_owned(),
                "refused",
            );
            return;
        }
        if let Some(bytes) = cut {
            self.warn(
                path,
                Some(id.clone()),
                format!(
                    "the description is {bytes} bytes as one line, more than the \
                     {LABEL_MAX_BYTES} bytes of a catalog label"
                ),
                &format!("truncated to {} bytes", label.len()),
            );
        }
        let (tags, dropped) = tags_of(&name, &origin.keywords);
        if dropped > 0 {
            self.warn(
                path,
                Some(id),
                format!(
                    "the entry has {} tags, more than the {TAGS_MAX_PER_ENTRY} a catalog entry \
                     holds",
                    tags.len() + dropped
                ),
                &format!("kept the first {TAGS_MAX_PER_ENTRY} in sorted order"),
            );
        }
        self.import.entries.push(ImportedEntry {
            kind,
            name,
            label,
            tags,
            body,
            tree,
            provenance: origin.provenance(path),
        });
    }

    /// A plugin directory with `.claude-plugin/plugin.json`.
    fn plugin_with_manifest(&mut self, dir: &Path, origin: &Origin) {
        let manifest_path = dir.join(".claude-plugin").join("plugin.json");
        let Some(manifest) = self.manifest(&manifest_path, "plugin refused") else {
            return;
        };
        self.plugin(dir, &manifest, &manifest_path, origin);
    }

    /// A plugin: its skills, agents and MCP servers, namespaced by its name
    /// (spec/catalog-build.md §1.3). `manifest` is `plugin.json`, or the marketplace entry of a
    /// plugin that has none.
    fn plugin(&mut self, dir: &Path, manifest: &Json, manifest_path: &Path, origin: &Origin) {
        let Some(name) = manifest.get_str("name") else {
            self.refuse(
                manifest_path,
                None,
                "the plugin manifest has no \"name\" string".to_owned(),
                "plugin refused",
            );
            return;
        };
        let before = (self.import.entries.len(), self.import.findings.len());
        let mut keywords = origin.keywords.clone();
        keywords.extend(safe_keywords(manifest));
        let plugin_origin = Origin {
            plugin: Some(name.to_owned()),
            marketplace: origin.marketplace.clone(),
            version: manifest
                .get_str("version")
                .map(str::to_owned)
                .or_else(|| origin.version.clone()),
            keywords,
        };
        let skills_dir = dir.join("skills");
        if skills_dir.is_dir() {
            self.walk(&skills_dir, 1, false, &plugin_origin);
        } else if dir.join("SKILL.md").is_file() {
            // A single-skill plugin: the skill is called by the plugin's name.
            self.skill_in(dir, name, &plugin_origin, true);
        }
        for path in self.manifest_paths(dir, manifest, manifest_path, "skills") {
            if path.join("SKILL.md").is_file() {
                self.skill(&path, &directory_name(&path), &plugin_origin);
            } else {
                self.walk(&path, 1, false, &plugin_origin);
            }
        }
        if manifest.get("agents").is_some() {
            for path in self.manifest_paths(dir, manifest, manifest_path, "agents") {
                if path.is_dir() {
                    self.walk(&path, 1, true, &plugin_origin);
                } else {
                    self.agent(&path, &plugin_origin);
                }
            }
        } else if dir.join("agents").is_dir() {
            self.walk(&dir.join("agents"), 1, true, &plugin_origin);
        }
        let mcp = dir.join(".mcp.json");
        if mcp.is_file() {
            self.mcp_file(&mcp, McpFile::McpJson, &plugin_origin);
        }
        if before == (self.import.entries.len(), self.import.findings.len()) {
            self.warn(
                dir,
                None,
                format!("the plugin {name:?} has no skill, subagent or MCP server ctx imports"),
                "nothing imported from it",
            );
        }
    }

    /// The extra paths a plugin manifest's `field` (`skills`, `agents`) names: relative paths
    /// starting with `./` that stay inside the plugin (spec/catalog-build.md §1.3).
    fn manifest_paths(
        &mut self,
        dir: &Path,
        manifest: &Json,
        manifest_path: &Path,
        field: &str,
    ) -> Vec<PathBuf> {
        let values: Vec<&Json> = match manifest.get(field) {
            None => return Vec::new(),
            Some(Json::Arr(items)) => items.iter().collect(),
            Some(one) => vec![one],
        };
        let mut paths = Vec::new();
        for value in values {
            let inside = value
                .as_str()
                .filter(|s| s.starts_with("./"))
                .and_then(|s| inside(dir, s));
            match inside {
                Some(path) if path.exists() => paths.push(path),
                Some(path) => self.refuse(
                    manifest_path,
                    None,
                    format!(
                        "the plugin field {field:?} names {}, which does not exist",
                        path.display()
                    ),
                    "path skipped",
                ),
                None => self.refuse(
                    manifest_path,
                    None,
                    format!(
                        "the plugin field {field:?} has the value {}, which is not a relative \
                         path starting with ./ inside the plugin",
                        value.to_cj()
                    ),
                    "path skipped",
                ),
            }
        }
        paths
    }

    /// A marketplace: its plugins whose source is a relative path inside it
    /// (spec/catalog-build.md §1.4).
    fn marketplace(&mut self, dir: &Path) {
        let manifest_path = dir.join(".claude-plugin").join("marketplace.json");
        let Some(manifest) = self.manifest(&manifest_path, "marketplace refused") else {
            return;
        };
        let Some(plugins) = manifest.get("plugins").and_then(Json::as_arr) else {
            self.refuse(
                &manifest_path,
                None,
                "the marketplace manifest has no \"plugins\" list".to_owned(),
                "marketplace refused",
            );
            return;
        };
        let market = manifest.get_str("name").map(str::to_owned);
        for (i, plugin) in plugins.iter().enumerate() {
            let name = plugin
                .get_str("name")
                .map_or_else(|| format!("plugins[{i}]"), str::to_owned);
            let origin = Origin {
                plugin: None,
                marketplace: market.clone(),
                version: plugin.get_str("version").map(str::to_owned),
                keywords: safe_keywords(plugin),
            };
            match plugin.get("source") {
                Some(Json::Str(source)) => match inside(dir, source) {
                    Some(path) if path.is_dir() => {
                        let own = path.join(".claude-plugin").join("plugin.json");
                        if own.is_file() {
                            if let Some(own_manifest) = self.manifest(&own, "plugin refused") {
                                self.plugin(&path, &own_manifest, &own, &origin);
                            }
                        } else {
                            // A plugin without its own manifest is described by its
                            // marketplace entry, as Claude Code reads it.
                            self.plugin(&path, plugin, &manifest_path, &origin);
                        }
                    }
                    Some(path) => self.refuse(
                        &manifest_path,
                        None,
                        format!(
                            "the plugin {name:?} has the source {source:?}, but {} is not a \
                             directory",
                            path.display()
                        ),
                        "plugin skipped",
                    ),
                    None => self.refuse(
                        &manifest_path,
                        None,
                        format!(
                            "the plugin {name:?} has the source {source:?}, which is not a \
                             relative path inside the marketplace directory"
                        ),
                        "plugin skipped",
                    ),
                },
                Some(other) => {
                    let kind = other
                        .get_str("source")
                        .map_or_else(|| other.type_name().to_owned(), |s| format!("{s:?}"));
                    self.warn(
                        &manifest_path,
                        None,
                        format!(
                            "the plugin {name:?} comes from a {kind} source, which is not \
                             fetched: ctx imports local paths only"
                        ),
                        "plugin skipped",
                    );
                }
                None => self.refuse(
                    &manifest_path,
                    None,
                    format!("the plugin {name:?} has no \"source\""),
                    "plugin skipped",
                ),
            }
        }
    }

    /// A JSON manifest, read bounded; `None` (with a finding) when it cannot be read or parsed.
    fn manifest(&mut self, path: &Path, refused: &str) -> Option<Json> {
        let bytes = match ctx_fs::read_bounded(path, MANIFEST_MAX_BYTES) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.refuse(path, None, e.to_string(), refused);
                return None;
            }
        };
        match Json::parse_bytes(&bytes) {
            Ok(json) if json.as_obj().is_some() => Some(json),
            Ok(json) => {
                self.refuse(
                    path,
                    None,
                    format!("the manifest is {}, not a JSON object", json.type_name()),
                    refused,
                );
                None
            }
            Err(e) => {
                self.refuse(
                    path,
                    None,
                    format!("the manifest is not accepted as JSON: {e}"),
                    refused,
                );
                None
            }
        }
    }

    /// An `.mcp.json` or `server.json`: read here, imported by the MCP importer.
    fn mcp_file(&mut self, path: &Path, kind: McpFile, origin: &Origin) {
        let bytes = match ctx_fs::read_bounded(path, MANIFEST_MAX_BYTES) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.refuse(path, None, e.to_string(), "source skipped");
                return;
            }
        };
        let Ok(text) = String::from_utf8(bytes) else {
            self.refuse(
                path,
                None,
                "the file is not UTF-8 text".to_owned(),
                "source skipped",
            );
            return;
        };
        let (entries, findings) = import_mcp_source(&path.display().to_string(), &text, kind);
        self.import.findings.extend(findings);
        for mut entry in entries {
            entry.provenance.plugin.clone_from(&origin.plugin);
            entry.provenance.marketplace.clone_from(&origin.marketplace);
            if entry.provenance.version.is_none() {
                entry.provenance.version.clone_from(&origin.version);
            }
            self.import.entries.push(entry);
        }
    }
}

/// Which MCP file a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum McpFile {
    McpJson,
    ServerJson,
    /// A `config.toml` whose `[mcp_servers.<name>]` tables define servers.
    ConfigToml,
}

/// Routes an MCP file to the MCP importer (spec/catalog-build.md §1.5).
fn import_mcp_source(
    path_display: &str,
    text: &str,
    kind: McpFile,
) -> (Vec<ImportedEntry>, Vec<Finding>) {
    match kind {
        McpFile::McpJson => super::mcp::import_mcp_json(path_display, text),
        McpFile::ServerJson => super::mcp::import_server_json(path_display, text),
        McpFile::ConfigToml => super::mcp::import_config_toml(path_display, text),
    }
}

/// The last component of a directory's path, as text.
fn directory_name(dir: &Path) -> String {
    match dir.file_name() {
        Some(name) => name.to_string_lossy().into_owned(),
        // `.` or a path ending in `..` has no file name; the absolute path does.
        None => dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default(),
    }
}

/// `base/relative` when `relative` is a relative path with no `..` segment.
fn inside(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut path = base.to_path_buf();
    for component in Path::new(relative).components() {
        match component {
            std::path::Component::Normal(segment) => path.push(segment),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    (path != base).then_some(path)
}

/// The safe-token `keywords` of a plugin manifest or marketplace entry, lowercased.
fn safe_keywords(manifest: &Json) -> Vec<String> {
    manifest
        .get("keywords")
        .and_then(Json::as_arr)
        .unwrap_or_default()
        .iter()
        .filter_map(Json::as_str)
        .map(str::to_ascii_lowercase)
        .filter(|k| is_safe_token(k))
        .collect()
}

/// A one-line label cut at a character boundary to the catalog's limit, with the one-line size
/// when it was cut. Control characters are dropped: a label must have none (spec/catalog.md
/// §1.2).
pub(super) fn label_of(description: &str) -> (String, Option<usize>) {
    let one_line: String = description
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    if one_line.len() <= LABEL_MAX_BYTES {
        return (one_line, None);
    }
    let mut end = LABEL_MAX_BYTES;
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    let label = one_line[..end].trim_end().to_owned();
    (label, Some(one_line.len()))
}

/// Tags: the name's hyphen-separated tokens and the keywords, sorted and unique, at most
/// [`TAGS_MAX_PER_ENTRY`]; with how many were dropped.
pub(super) fn tags_of(name: &str, keywords: &[String]) -> (Vec<String>, usize) {
    let mut tags: Vec<String> = name
        .split('-')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .chain(keywords.iter().cloned())
        .filter(|t| is_safe_token(t))
        .collect();
    tags.sort();
    tags.dedup();
    let dropped = tags.len().saturating_sub(TAGS_MAX_PER_ENTRY);
    tags.truncate(TAGS_MAX_PER_ENTRY);
    (tags, dropped)
}

/// A name check's finding as one sentence: `name "Stripe_Integration" has …`.
fn name_problem(f: &NameFinding) -> String {
    match f.field {
        "keys" => {
            let noun = if f.value.contains(", ") {
                "keys"
            } else {
                "key"
            };
            format!("the frontmatter {noun} {} {}", f.value, f.rule)
        }
        field if f.value.is_empty() => format!("the {field} {}", f.rule),
        field => format!("the {field} {:?} {}", f.value, f.rule),
    }
}
