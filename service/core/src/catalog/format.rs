//! The `ctx.catalog-v1` document: typed entries and the strict parser (spec/catalog.md).
//!
//! The parser is deliberately unforgiving: a catalog decides what the planner may recommend and
//! what an installer may write, so an unknown key, a duplicate id or a digest in the wrong case is
//! a mistake to report, never a value to guess at. Checks run in a fixed order (top level, then
//! each entry field by field, then cross-entry rules) so the same bad catalog always yields the
//! same first error.

use ctx_model::CapabilityKind;
use std::collections::{BTreeMap, BTreeSet};

use ctx_model::{
    Json, TOKEN_MAX_CHARS, is_capability_identity, is_capability_name, is_safe_token, is_sha,
};

use super::error::{CatalogError, EntryRef};

/// The `schema` value of a first-version catalog document: one body file per entry, small.
pub const CATALOG_SCHEMA: &str = "ctx.catalog-v1";
/// The `schema` value of a second-version catalog document: skill trees, provenance and limits
/// sized for real collections (spec/catalog.md §1.4).
pub const CATALOG_SCHEMA_V2: &str = "ctx.catalog-v2";
/// Largest catalog text accepted, in bytes: room for 100,000 entries of ~450 bytes, small enough
/// that a hostile file cannot make the parser allocate without bound.
pub const CATALOG_TEXT_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Most capabilities in one `ctx.catalog-v1` catalog, in entries (the reference material
/// manifest's bound).
pub const CATALOG_MAX_ENTRIES: usize = 512;
/// Most capabilities in one `ctx.catalog-v2` catalog, in entries.
pub const CATALOG_V2_MAX_ENTRIES: usize = 100_000;
/// Most tags on one capability, in tags.
pub const TAGS_MAX_PER_ENTRY: usize = 32;
/// Most `related` links on one capability, in entries.
pub const RELATED_MAX_PER_ENTRY: usize = 32;
/// Longest label, in UTF-8 bytes.
pub const LABEL_MAX_BYTES: usize = 200;
/// Largest body file of a `ctx.catalog-v1` catalog, in bytes (spec/catalog.md §1.3).
pub const BODY_MAX_BYTES: i64 = 6_000;
/// Largest estimated token count of a `ctx.catalog-v1` loadable body, in tokens.
pub const BODY_MAX_TOKENS: i64 = 1_500;
/// Largest body file of a `ctx.catalog-v2` catalog, in bytes: the skill tree's `SKILL.md` limit
/// (spec/skill-tree.md §3), for every kind.
pub const BODY_V2_MAX_BYTES: i64 = 256 * 1024;
/// Largest estimated token count of a `ctx.catalog-v2` loadable body, in tokens.
pub const BODY_V2_MAX_TOKENS: i64 = BODY_V2_MAX_BYTES / 4;
/// Largest skill pack a `ctx.catalog-v2` tree declares, in bytes (spec/skill-tree.md §7).
pub const TREE_PACK_MAX_BYTES: i64 = 100 * 1024 * 1024;
/// Longest body path, in bytes.
pub const BODY_PATH_MAX_BYTES: usize = 256;
/// Longest provenance origin, in bytes.
pub const SOURCE_ORIGIN_MAX_BYTES: usize = 512;
/// Longest provenance version, in bytes.
pub const SOURCE_VERSION_MAX_BYTES: usize = 64;

/// The catalog format a document declares; the limits and the fields it may use follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CatalogVersion {
    V1,
    V2,
}

impl CatalogVersion {
    pub fn schema(self) -> &'static str {
        match self {
            CatalogVersion::V1 => CATALOG_SCHEMA,
            CatalogVersion::V2 => CATALOG_SCHEMA_V2,
        }
    }

    fn max_entries(self) -> usize {
        match self {
            CatalogVersion::V1 => CATALOG_MAX_ENTRIES,
            CatalogVersion::V2 => CATALOG_V2_MAX_ENTRIES,
        }
    }

    /// The largest body file, in bytes.
    pub fn body_max_bytes(self) -> i64 {
        match self {
            CatalogVersion::V1 => BODY_MAX_BYTES,
            CatalogVersion::V2 => BODY_V2_MAX_BYTES,
        }
    }

    fn body_max_tokens(self) -> i64 {
        match self {
            CatalogVersion::V1 => BODY_MAX_TOKENS,
            CatalogVersion::V2 => BODY_V2_MAX_TOKENS,
        }
    }
}

const TOP_KEYS: [&str; 3] = ["capabilities", "namespace", "schema"];
const ENTRY_KEYS: [&str; 8] = [
    "id", "install", "kind", "label", "material", "related", "source", "tags",
];
const ENTRY_REQUIRED: [&str; 4] = ["id", "kind", "label", "tags"];
const MATERIAL_KEYS: [&str; 4] = ["estimated_tokens", "path", "sha256", "size_bytes"];
const MATERIAL_TREE_KEYS: [&str; 4] = ["estimated_tokens", "sha256", "size_bytes", "tree"];
const RESULT_TREE_KEYS: [&str; 3] = ["sha256", "size_bytes", "tree"];
const SOURCE_KEYS: [&str; 2] = ["origin", "version"];
const INSTALL_KEYS: [&str; 5] = [
    "credential_requirement",
    "installer_id",
    "permission_expansion",
    "plan_digest",
    "result",
];
const RESULT_KEYS: [&str; 3] = ["path", "sha256", "size_bytes"];

/// A body declared by an entry: where it lives (relative to the catalog directory) and the exact
/// bytes it must hold. A body is one file, or (`ctx.catalog-v2`, skills only) a skill tree: the
/// directory `path`, whose pack (spec/skill-tree.md §7) has the SHA-256 `sha256` and the length
/// `size_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyRef {
    pub path: String,
    pub sha256: String,
    pub size_bytes: i64,
    pub tree: bool,
}

impl BodyRef {
    /// The body's JSON form: `path` for a file, `tree` for a skill tree.
    fn fields(&self) -> [(&'static str, Json); 3] {
        [
            (
                if self.tree { "tree" } else { "path" },
                Json::str(&self.path),
            ),
            ("sha256", Json::str(&self.sha256)),
            ("size_bytes", Json::Int(self.size_bytes)),
        ]
    }
}

/// Where an entry came from (`ctx.catalog-v2`): a source path, or a marketplace and plugin, as
/// the builder saw it, and the version the source declared. Shown to people; never trusted for
/// anything the digests decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub origin: String,
    pub version: Option<String>,
}

/// Material the host can load directly (actionability `load`; skills only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaterialSpec {
    pub body: BodyRef,
    /// Always `ceil(size_bytes / 4)`, the reference's estimate.
    pub estimated_tokens: i64,
}

/// A typed install plan (actionability `install`; not for harnesses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallSpec {
    pub installer_id: String,
    pub plan_digest: String,
    pub permission_expansion: bool,
    pub credential_requirement: bool,
    /// The material the install leaves behind (a skill body, an agent file, a server entry).
    pub result: BodyRef,
}

/// One capability of the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    /// `kind:name`.
    pub id: String,
    pub kind: CapabilityKind,
    /// The part of the id after the colon.
    pub name: String,
    /// Human-readable one-line description.
    pub label: String,
    /// Sorted, unique lowercase safe tokens.
    pub tags: Vec<String>,
    /// Sorted, unique ids of other entries; the retrieval graph's edges.
    pub related: Vec<String>,
    pub material: Option<MaterialSpec>,
    pub install: Option<InstallSpec>,
    pub source: Option<SourceSpec>,
}

impl CatalogEntry {
    /// The body files this entry declares, with the field that declares each.
    pub fn bodies(&self) -> impl Iterator<Item = (&'static str, &BodyRef)> {
        let material = self.material.as_ref().map(|m| ("material.path", &m.body));
        let result = self
            .install
            .as_ref()
            .map(|i| ("install.result.path", &i.result));
        material.into_iter().chain(result)
    }

    /// The field that declares a body: `material.tree` / `install.result.tree` for a tree.
    pub fn body_field(field: &'static str, body: &BodyRef) -> &'static str {
        match (field, body.tree) {
            ("material.path", true) => "material.tree",
            ("install.result.path", true) => "install.result.tree",
            (other, _) => other,
        }
    }

    /// The canonical JSON form of the entry (sorted tags and links, absent options omitted).
    pub fn to_json(&self) -> Json {
        let mut m = BTreeMap::new();
        m.insert("id".to_owned(), Json::str(&self.id));
        m.insert("kind".to_owned(), Json::str(self.kind.as_str()));
        m.insert("label".to_owned(), Json::str(&self.label));
        m.insert("tags".to_owned(), strs(&self.tags));
        if !self.related.is_empty() {
            m.insert("related".to_owned(), strs(&self.related));
        }
        if let Some(material) = &self.material {
            m.insert(
                "material".to_owned(),
                Json::object(
                    [("estimated_tokens", Json::Int(material.estimated_tokens))]
                        .into_iter()
                        .chain(material.body.fields()),
                ),
            );
        }
        if let Some(install) = &self.install {
            m.insert(
                "install".to_owned(),
                Json::object([
                    (
                        "credential_requirement",
                        Json::Bool(install.credential_requirement),
                    ),
                    ("installer_id", Json::str(&install.installer_id)),
                    (
                        "permission_expansion",
                        Json::Bool(install.permission_expansion),
                    ),
                    ("plan_digest", Json::str(&install.plan_digest)),
                    ("result", Json::object(install.result.fields())),
                ]),
            );
        }
        if let Some(source) = &self.source {
            let mut fields = vec![("origin", Json::str(&source.origin))];
            if let Some(version) = &source.version {
                fields.push(("version", Json::str(version)));
            }
            m.insert("source".to_owned(), Json::object(fields));
        }
        Json::Obj(m)
    }
}

pub(crate) fn strs(items: &[String]) -> Json {
    Json::Arr(items.iter().map(Json::str).collect())
}

/// The parsed, validated document: namespace and entries sorted by capability id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParsedCatalog {
    pub version: CatalogVersion,
    pub namespace: String,
    /// Entries sorted by capability id, each with its position in the source document.
    pub entries: Vec<(usize, CatalogEntry)>,
}

pub(crate) fn parse_document(text: &str) -> Result<ParsedCatalog, CatalogError> {
    if text.len() > CATALOG_TEXT_MAX_BYTES {
        return Err(CatalogError::TooLarge {
            size: text.len(),
            limit: CATALOG_TEXT_MAX_BYTES,
        });
    }
    let doc = Json::parse(text).map_err(|e| CatalogError::Json {
        detail: e.to_string(),
    })?;
    let top = |field: &str, problem: String| CatalogError::TopLevel {
        field: field.to_owned(),
        problem,
    };
    let Some(map) = doc.as_obj() else {
        return Err(top(
            "(document)",
            format!("must be an object but is a {}", json_type(&doc)),
        ));
    };
    if let Some(unknown) = map.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
        return Err(top(unknown, "is not a catalog field".to_owned()));
    }
    for key in TOP_KEYS {
        if !map.contains_key(key) {
            return Err(top(key, "is missing".to_owned()));
        }
    }
    let version = match map.get("schema").and_then(Json::as_str) {
        Some(CATALOG_SCHEMA) => CatalogVersion::V1,
        Some(CATALOG_SCHEMA_V2) => CatalogVersion::V2,
        _ => {
            return Err(top(
                "schema",
                format!(
                    "has the value {}, but only {CATALOG_SCHEMA:?} and {CATALOG_SCHEMA_V2:?} are \
                     supported",
                    shown(map.get("schema"))
                ),
            ));
        }
    };
    let max_entries = version.max_entries();
    let namespace = match map.get("namespace").and_then(Json::as_str) {
        Some(ns) if is_safe_token(ns) => ns.to_owned(),
        other => {
            return Err(top(
                "namespace",
                format!(
                    "has the value {}, which is not a lowercase safe token",
                    shown(other.map(Json::str).as_ref())
                ),
            ));
        }
    };
    let Some(items) = map.get("capabilities").and_then(Json::as_arr) else {
        return Err(top(
            "capabilities",
            format!(
                "must be an array but is a {}",
                map.get("capabilities").map_or("missing value", json_type)
            ),
        ));
    };
    if items.is_empty() || items.len() > max_entries {
        return Err(top(
            "capabilities",
            format!(
                "holds {} entries, outside the range 1 through {max_entries} entries of a {} \
                 catalog",
                items.len(),
                version.schema()
            ),
        ));
    }

    let mut entries = Vec::with_capacity(items.len());
    let mut seen_ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut seen_paths: BTreeMap<String, usize> = BTreeMap::new();
    for (index, item) in items.iter().enumerate() {
        let cx = EntryCx {
            entry: EntryRef {
                index,
                id: item.get_str("id").map(str::to_owned),
            },
            version,
        };
        let entry = parse_entry(&cx, item)?;
        if let Some(first) = seen_ids.insert(entry.id.clone(), index) {
            return Err(cx.err(
                "id",
                format!("repeats the id {:?} of entry {first}", entry.id),
            ));
        }
        for (field, body) in entry.bodies() {
            let field = CatalogEntry::body_field(field, body);
            if let Some(first) = seen_paths.insert(body.path.clone(), index) {
                return Err(cx.err(
                    field,
                    format!(
                        "repeats the body path {:?} already declared by entry {first}",
                        body.path
                    ),
                ));
            }
        }
        entries.push((cx, entry));
    }
    // A tree owns its whole directory: no other body may lie inside it (its file would be pinned
    // by two declarations), checked once every path is known, in entry order.
    let trees: BTreeSet<&str> = entries
        .iter()
        .flat_map(|(_, e)| e.bodies())
        .filter(|(_, b)| b.tree)
        .map(|(_, b)| b.path.as_str())
        .collect();
    if !trees.is_empty() {
        for (cx, entry) in &entries {
            for (field, body) in entry.bodies() {
                let mut prefix = body.path.as_str();
                while let Some((parent, _)) = prefix.rsplit_once('/') {
                    if trees.contains(parent) {
                        return Err(cx.err(
                            CatalogEntry::body_field(field, body),
                            format!(
                                "names {:?}, which lies inside the skill tree {parent:?} of \
                                 another declaration; a tree owns its whole directory",
                                body.path
                            ),
                        ));
                    }
                    prefix = parent;
                }
            }
        }
    }
    // Links are checked once every id is known, in entry order.
    for (cx, entry) in &entries {
        for (i, target) in entry.related.iter().enumerate() {
            if target == &entry.id {
                return Err(cx.err(
                    &format!("related[{i}]"),
                    format!("links the entry {target:?} to itself"),
                ));
            }
            if !seen_ids.contains_key(target) {
                return Err(cx.err(
                    &format!("related[{i}]"),
                    format!("names {target:?}, which is not a capability of this catalog"),
                ));
            }
        }
    }
    let mut entries: Vec<(usize, CatalogEntry)> = entries
        .into_iter()
        .map(|(cx, e)| (cx.entry.index, e))
        .collect();
    entries.sort_by(|a, b| a.1.id.cmp(&b.1.id));
    Ok(ParsedCatalog {
        version,
        namespace,
        entries,
    })
}

/// Names one entry in every error it raises.
pub(crate) struct EntryCx {
    pub entry: EntryRef,
    pub version: CatalogVersion,
}

impl EntryCx {
    pub fn err(&self, field: &str, problem: String) -> CatalogError {
        CatalogError::Entry {
            entry: self.entry.clone(),
            field: field.to_owned(),
            problem,
        }
    }
}

fn parse_entry(cx: &EntryCx, item: &Json) -> Result<CatalogEntry, CatalogError> {
    let Some(m) = item.as_obj() else {
        return Err(cx.err(
            "(entry)",
            format!("must be an object but is a {}", json_type(item)),
        ));
    };
    if let Some(unknown) = m.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
        return Err(cx.err(unknown, "is not a capability field".to_owned()));
    }
    for key in ENTRY_REQUIRED {
        if !m.contains_key(key) {
            return Err(cx.err(key, "is missing".to_owned()));
        }
    }
    let kind_text = m.get("kind").and_then(Json::as_str);
    let Some(kind) = kind_text.and_then(CapabilityKind::parse) else {
        return Err(cx.err(
            "kind",
            format!(
                "has the value {}, which is not one of skill, agent, mcp-server, harness",
                shown(m.get("kind"))
            ),
        ));
    };
    let id = match m.get("id").and_then(Json::as_str) {
        Some(id) if is_capability_identity(kind.as_str(), id) => id.to_owned(),
        _ => {
            return Err(cx.err(
                "id",
                format!(
                    "has the value {}, which is not a canonical {kind}:<name> capability id \
                     (name from a-z 0-9 . _ @ -, first character a-z or 0-9, at most \
                     {TOKEN_MAX_CHARS} characters in all)",
                    shown(m.get("id"))
                ),
            ));
        }
    };
    let name = id
        .split_once(':')
        .map(|(_, n)| n.to_owned())
        .filter(|n| is_capability_name(n))
        .unwrap_or_default();
    // What a host refuses never ingests (spec/catalog.md §1.2): a skill's name becomes its
    // directory under the host's skills directory, an agent's its frontmatter name.
    if matches!(kind, CapabilityKind::Skill | CapabilityKind::Agent)
        && let Some(why) = super::names::host_name_refusal(&name, kind == CapabilityKind::Agent)
    {
        return Err(cx.err(
            "id",
            format!("has the value {id:?}, whose name {name:?} a host refuses: {why}"),
        ));
    }
    let label = match m.get("label").and_then(Json::as_str) {
        Some(l)
            if !l.is_empty()
                && l.len() <= LABEL_MAX_BYTES
                && l.trim() == l
                && !l.chars().any(char::is_control) =>
        {
            l.to_owned()
        }
        _ => {
            return Err(cx.err(
                "label",
                format!(
                    "has the value {}, but a label is trimmed text of 1 through \
                     {LABEL_MAX_BYTES} bytes without control characters",
                    shown_short(m.get("label"))
                ),
            ));
        }
    };
    let tags = token_list(cx, m.get("tags"), "tags", TAGS_MAX_PER_ENTRY, |s| {
        is_safe_token(s)
    })?;
    let related = match m.get("related") {
        None => Vec::new(),
        Some(v) => token_list(cx, Some(v), "related", RELATED_MAX_PER_ENTRY, |s| {
            s.split_once(':')
                .is_some_and(|(k, _)| is_capability_identity(k, s))
        })?,
    };
    let material = match m.get("material") {
        None => None,
        Some(v) => {
            if kind != CapabilityKind::Skill {
                return Err(cx.err(
                    "material",
                    format!("is allowed only for skills, and this entry's kind is {kind}"),
                ));
            }
            Some(parse_material(cx, v)?)
        }
    };
    let install = match m.get("install") {
        None => None,
        Some(v) => {
            if !kind.is_installable() {
                return Err(cx.err(
                    "install",
                    format!("is not allowed for the kind {kind}, which is catalog-only"),
                ));
            }
            if material.is_some() {
                return Err(cx.err(
                    "install",
                    "is present together with material, but an entry is either loaded or \
                     installed"
                        .to_owned(),
                ));
            }
            Some(parse_install(cx, v)?)
        }
    };
    for (field, body) in material
        .as_ref()
        .map(|m| ("material.tree", &m.body))
        .into_iter()
        .chain(install.as_ref().map(|i| ("install.result.tree", &i.result)))
    {
        if body.tree && kind != CapabilityKind::Skill {
            return Err(cx.err(
                field,
                format!("is allowed only for skills, and this entry's kind is {kind}"),
            ));
        }
    }
    let source = match m.get("source") {
        None => None,
        Some(v) => Some(parse_source(cx, v)?),
    };
    Ok(CatalogEntry {
        id,
        kind,
        name,
        label,
        tags,
        related,
        material,
        install,
        source,
    })
}

/// An entry's provenance (`ctx.catalog-v2` only): `origin` trimmed text of 1 through 512 bytes,
/// `version` (optional) trimmed text of 1 through 64 bytes, neither with control characters.
fn parse_source(cx: &EntryCx, v: &Json) -> Result<SourceSpec, CatalogError> {
    if cx.version == CatalogVersion::V1 {
        return Err(cx.err(
            "source",
            format!("is a {CATALOG_SCHEMA_V2} field, and this catalog is {CATALOG_SCHEMA}"),
        ));
    }
    let Some(m) = v.as_obj() else {
        return Err(cx.err(
            "source",
            format!("must be an object but is a {}", json_type(v)),
        ));
    };
    if let Some(unknown) = m.keys().find(|k| !SOURCE_KEYS.contains(&k.as_str())) {
        return Err(cx.err(
            &format!("source.{unknown}"),
            "is not a known field".to_owned(),
        ));
    }
    let text = |key: &str, max: usize, required: bool| -> Result<Option<String>, CatalogError> {
        match m.get(key) {
            None if !required => Ok(None),
            Some(Json::Str(t))
                if !t.is_empty()
                    && t.len() <= max
                    && t.trim() == t
                    && !t.chars().any(char::is_control) =>
            {
                Ok(Some(t.clone()))
            }
            other => Err(cx.err(
                &format!("source.{key}"),
                format!(
                    "has the value {}, but it must be trimmed text of 1 through {max} bytes \
                     without control characters",
                    shown_short(other)
                ),
            )),
        }
    };
    let origin = text("origin", SOURCE_ORIGIN_MAX_BYTES, true)?.unwrap_or_default();
    let version = text("version", SOURCE_VERSION_MAX_BYTES, false)?;
    Ok(SourceSpec { origin, version })
}

/// A list of unique tokens accepted by `valid`, returned sorted.
fn token_list(
    cx: &EntryCx,
    value: Option<&Json>,
    field: &str,
    limit: usize,
    valid: impl Fn(&str) -> bool,
) -> Result<Vec<String>, CatalogError> {
    let Some(items) = value.and_then(Json::as_arr) else {
        return Err(cx.err(
            field,
            format!(
                "must be an array but is a {}",
                value.map_or("missing value", json_type)
            ),
        ));
    };
    if items.len() > limit {
        return Err(cx.err(
            field,
            format!(
                "holds {} items, more than the limit of {limit} items",
                items.len()
            ),
        ));
    }
    let mut out = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        match item.as_str() {
            Some(s) if valid(s) => {
                if !out.insert(s.to_owned()) {
                    return Err(cx.err(&at, format!("repeats the value {s:?}")));
                }
            }
            _ => {
                let what = if field == "tags" {
                    "a lowercase safe token (a-z 0-9 . _ : @ -, first character a-z or 0-9)"
                } else {
                    "a canonical kind:name capability id"
                };
                return Err(cx.err(
                    &at,
                    format!("has the value {}, which is not {what}", shown(Some(item))),
                ));
            }
        }
    }
    Ok(out.into_iter().collect())
}

fn parse_material(cx: &EntryCx, v: &Json) -> Result<MaterialSpec, CatalogError> {
    let keys: &[&str] = if is_tree(cx, v, "material")? {
        &MATERIAL_TREE_KEYS
    } else {
        &MATERIAL_KEYS
    };
    let m = exact_object(cx, v, "material", keys)?;
    let body = parse_body(cx, m, "material")?;
    let max_tokens = cx.version.body_max_tokens();
    if body.tree {
        // A tree's estimate is its `SKILL.md`'s, the text a host loads first; the loader checks
        // it against the file (spec/catalog.md §1.4).
        return match m.get("estimated_tokens") {
            Some(Json::Int(t)) if (1..=max_tokens).contains(t) => Ok(MaterialSpec {
                body,
                estimated_tokens: *t,
            }),
            other => Err(cx.err(
                "material.estimated_tokens",
                format!(
                    "has the value {}, outside the range 1 through {max_tokens} tokens",
                    shown(other)
                ),
            )),
        };
    }
    let expected = estimated_tokens(body.size_bytes);
    match m.get("estimated_tokens") {
        Some(Json::Int(t)) if *t == expected => {}
        other => {
            return Err(cx.err(
                "material.estimated_tokens",
                format!(
                    "has the value {}, but must be ceil(size_bytes / 4) = {expected} tokens",
                    shown(other)
                ),
            ));
        }
    }
    if expected > max_tokens {
        return Err(cx.err(
            "material.estimated_tokens",
            format!("is {expected}, more than the limit of {max_tokens} tokens"),
        ));
    }
    Ok(MaterialSpec {
        body,
        estimated_tokens: expected,
    })
}

/// The reference's token estimate: one token per four bytes, rounded up.
pub fn estimated_tokens(size_bytes: i64) -> i64 {
    (size_bytes + 3) / 4
}

fn parse_install(cx: &EntryCx, v: &Json) -> Result<InstallSpec, CatalogError> {
    let m = exact_object(cx, v, "install", &INSTALL_KEYS)?;
    let installer_id = match m.get("installer_id").and_then(Json::as_str) {
        Some(s) if is_safe_token(s) => s.to_owned(),
        other => {
            return Err(cx.err(
                "install.installer_id",
                format!(
                    "has the value {}, which is not a lowercase safe token",
                    shown(other.map(Json::str).as_ref())
                ),
            ));
        }
    };
    let plan_digest = digest(cx, m, "install", "plan_digest")?;
    let flag = |key: &str| match m.get(key) {
        Some(Json::Bool(b)) => Ok(*b),
        other => Err(cx.err(
            &format!("install.{key}"),
            format!("has the value {}, which is not a boolean", shown(other)),
        )),
    };
    let permission_expansion = flag("permission_expansion")?;
    let credential_requirement = flag("credential_requirement")?;
    let result_value = m.get("result").unwrap_or(&Json::Null);
    let keys: &[&str] = if is_tree(cx, result_value, "install.result")? {
        &RESULT_TREE_KEYS
    } else {
        &RESULT_KEYS
    };
    let r = exact_object(cx, result_value, "install.result", keys)?;
    let result = parse_body(cx, r, "install.result")?;
    Ok(InstallSpec {
        installer_id,
        plan_digest,
        permission_expansion,
        credential_requirement,
        result,
    })
}

fn exact_object<'a>(
    cx: &EntryCx,
    v: &'a Json,
    field: &str,
    keys: &[&str],
) -> Result<&'a ctx_model::JsonMap, CatalogError> {
    let Some(m) = v.as_obj() else {
        return Err(cx.err(
            field,
            format!("must be an object but is a {}", json_type(v)),
        ));
    };
    if let Some(unknown) = m.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(cx.err(
            &format!("{field}.{unknown}"),
            "is not a known field".to_owned(),
        ));
    }
    if let Some(missing) = keys.iter().find(|k| !m.contains_key(**k)) {
        return Err(cx.err(&format!("{field}.{missing}"), "is missing".to_owned()));
    }
    Ok(m)
}

fn digest(
    cx: &EntryCx,
    m: &ctx_model::JsonMap,
    prefix: &str,
    key: &str,
) -> Result<String, CatalogError> {
    match m.get(key).and_then(Json::as_str) {
        Some(s) if is_sha(s) => Ok(s.to_owned()),
        other => Err(cx.err(
            &format!("{prefix}.{key}"),
            format!(
                "has the value {}, which is not a lowercase SHA-256 digest of 64 hex characters",
                shown(other.map(Json::str).as_ref())
            ),
        )),
    }
}

/// Whether a body object declares a skill tree (a `tree` key), which only `ctx.catalog-v2` may.
fn is_tree(cx: &EntryCx, v: &Json, field: &str) -> Result<bool, CatalogError> {
    let tree = v.as_obj().is_some_and(|m| m.contains_key("tree"));
    if tree && cx.version == CatalogVersion::V1 {
        return Err(cx.err(
            &format!("{field}.tree"),
            format!("is a {CATALOG_SCHEMA_V2} field, and this catalog is {CATALOG_SCHEMA}"),
        ));
    }
    Ok(tree)
}

fn parse_body(cx: &EntryCx, m: &ctx_model::JsonMap, prefix: &str) -> Result<BodyRef, CatalogError> {
    let tree = m.contains_key("tree");
    let path_key = if tree { "tree" } else { "path" };
    let path = match m.get(path_key).and_then(Json::as_str) {
        Some(p) if is_body_path(p) => p.to_owned(),
        other => {
            return Err(cx.err(
                &format!("{prefix}.{path_key}"),
                format!(
                    "has the value {}, which is not a relative POSIX path of at most \
                     {BODY_PATH_MAX_BYTES} bytes without empty, '.' or '..' segments",
                    shown(other.map(Json::str).as_ref())
                ),
            ));
        }
    };
    let sha256 = digest(cx, m, prefix, "sha256")?;
    let max = if tree {
        TREE_PACK_MAX_BYTES
    } else {
        cx.version.body_max_bytes()
    };
    let size_bytes = match m.get("size_bytes") {
        Some(Json::Int(n)) if (1..=max).contains(n) => *n,
        other => {
            return Err(cx.err(
                &format!("{prefix}.size_bytes"),
                format!(
                    "has the value {}, outside the range 1 through {max} bytes",
                    shown(other)
                ),
            ));
        }
    };
    Ok(BodyRef {
        path,
        sha256,
        size_bytes,
        tree,
    })
}

/// A relative POSIX path whose segments are plain names: no absolute paths, no backslashes, no
/// `.`/`..`/empty segments, so a body can never point outside the catalog directory.
pub fn is_body_path(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= BODY_PATH_MAX_BYTES
        && !p.contains('\\')
        && !p.contains('\0')
        && !p.chars().any(char::is_control)
        && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "boolean",
        Json::Int(_) | Json::Float(_) => "number",
        Json::Str(_) => "string",
        Json::Arr(_) => "array",
        Json::Obj(_) => "object",
    }
}

/// A value as shown in a message: canonical JSON, cut to a readable length.
fn shown(v: Option<&Json>) -> String {
    match v {
        None => "(missing)".to_owned(),
        Some(v) => cut(&v.to_cj(), 80),
    }
}

fn shown_short(v: Option<&Json>) -> String {
    match v {
        None => "(missing)".to_owned(),
        Some(v) => cut(&v.to_cj(), 40),
    }
}

fn cut(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let head: String = s.chars().take(max_chars).collect();
        format!("{head}…")
    }
}
