//! The catalog loader: reads the catalog file, then every body file it declares, and checks each
//! body's size and SHA-256 against the declaration, and each entry's flags against what its
//! material implies (spec/catalog.md §7).
//!
//! Bodies are what a host will load into a model's context or an installer will write into a
//! host's configuration, so a body that drifted from its catalog digest must stop the load rather
//! than be served: the digests are what plans and consents are pinned to.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use ctx_model::sha256_hex_bytes;

use super::error::{CatalogError, EntryRef};
use super::flags;
use super::format::{BodyRef, CATALOG_TEXT_MAX_BYTES, CatalogEntry, estimated_tokens};
use super::open::{CatalogFileError, CatalogFileKind, open_catalog_file};
use super::pack::skill_pack;
use super::snapshot::Catalog;
use super::tree::{SkillTree, read_skill_tree};

/// File name of the catalog inside a catalog directory.
pub const CATALOG_FILE_NAME: &str = "catalog.json";

/// A catalog whose every body file was read and verified.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedCatalog {
    catalog: Catalog,
    /// Body text by declared relative path; for a skill tree, its pack (spec/skill-tree.md §7).
    bodies: BTreeMap<String, String>,
    /// Skill trees by declared directory path (spec/catalog.md §1.4).
    trees: BTreeMap<String, SkillTree>,
}

impl LoadedCatalog {
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The verified text of a body file, by its declared path.
    pub fn body_at(&self, path: &str) -> Option<&str> {
        self.bodies.get(path).map(String::as_str)
    }

    /// The verified skill tree declared at `path` (a `tree` body), if that body is a tree.
    pub fn tree_at(&self, path: &str) -> Option<&SkillTree> {
        self.trees.get(path)
    }

    /// The skill tree of a capability's `material`, if its material is a tree.
    pub fn material_tree(&self, capability_id: &str) -> Option<&SkillTree> {
        let entry = self.catalog.entry(capability_id)?;
        self.tree_at(&entry.material.as_ref()?.body.path)
    }

    /// The skill tree an install of a capability leaves behind, if its result is a tree.
    pub fn install_result_tree(&self, capability_id: &str) -> Option<&SkillTree> {
        let entry = self.catalog.entry(capability_id)?;
        self.tree_at(&entry.install.as_ref()?.result.path)
    }

    /// The loadable material of a capability (its `material` body), if it has one.
    pub fn material_text(&self, capability_id: &str) -> Option<&str> {
        let entry = self.catalog.entry(capability_id)?;
        self.body_at(&entry.material.as_ref()?.body.path)
    }

    /// The material an install of a capability leaves behind (its `install.result` body).
    pub fn install_result_text(&self, capability_id: &str) -> Option<&str> {
        let entry = self.catalog.entry(capability_id)?;
        self.body_at(&entry.install.as_ref()?.result.path)
    }
}

/// Loads `<dir>/catalog.json` with bodies resolved against `dir`.
pub fn load_catalog_dir(dir: &Path) -> Result<LoadedCatalog, CatalogError> {
    load_catalog(&dir.join(CATALOG_FILE_NAME), dir)
}

/// Loads a catalog file and verifies every body it declares under `bodies_root`.
pub fn load_catalog(
    catalog_file: &Path,
    bodies_root: &Path,
) -> Result<LoadedCatalog, CatalogError> {
    let io = |source| CatalogError::Io {
        path: catalog_file.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    // Read one byte past the limit so an oversized file is refused without reading it whole.
    let limit = u64::try_from(CATALOG_TEXT_MAX_BYTES).unwrap_or(u64::MAX);
    let mut file = open_catalog_text(catalog_file)?;
    (&mut file)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > CATALOG_TEXT_MAX_BYTES {
        // The read stopped one byte past the limit, so its length is not the file's size: name
        // the size from the same open handle (fstat); a file still growing is at least what was
        // read (spec/catalog.md §2).
        let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        return Err(CatalogError::FileTooLarge {
            path: catalog_file.to_path_buf(),
            size_bytes: file.metadata().map_or(read, |m| m.len().max(read)),
            limit_bytes: limit,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| CatalogError::Json {
        detail: format!(
            "the text is not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })?;
    let catalog = Catalog::parse(&text)?;
    let mut bodies = BTreeMap::new();
    let mut trees = BTreeMap::new();
    for (i, entry) in catalog.entries().iter().enumerate() {
        for (field, body) in entry.bodies() {
            let (text, tree) =
                read_declared(bodies_root, catalog.entry_ref(i), entry, field, body)?;
            bodies.insert(body.path.clone(), text);
            if let Some(tree) = tree {
                trees.insert(body.path.clone(), tree);
            }
        }
    }
    for (i, entry) in catalog.entries().iter().enumerate() {
        check_flags(&catalog, i, entry, &bodies, &trees)?;
    }
    Ok(LoadedCatalog {
        catalog,
        bodies,
        trees,
    })
}

/// Reads and verifies one body `entry` declares in `field`: its text, or for a skill tree its
/// pack and the tree.
fn read_declared(
    bodies_root: &Path,
    entry_ref: EntryRef,
    entry: &CatalogEntry,
    field: &'static str,
    body: &BodyRef,
) -> Result<(String, Option<SkillTree>), CatalogError> {
    if body.tree {
        let field = CatalogEntry::body_field(field, body);
        let tokens = entry.material.as_ref().map(|m| m.estimated_tokens);
        let (tree, pack) =
            read_tree(bodies_root, body, tokens).map_err(|problem| CatalogError::Tree {
                entry: entry_ref,
                field: field.to_owned(),
                path: body.path.clone(),
                problem: problem.to_string(),
            })?;
        return Ok((pack, Some(tree)));
    }
    let text = read_body(bodies_root, body).map_err(|failure| match failure {
        BodyFailure::File(source) => CatalogError::File {
            entry: Some(entry_ref.clone()),
            field: Some(field.to_owned()),
            source,
        },
        BodyFailure::Problem(problem) => CatalogError::Body {
            entry: entry_ref.clone(),
            field: field.to_owned(),
            path: body.path.clone(),
            problem: problem.to_string(),
        },
    })?;
    Ok((text, None))
}

/// `catalog` with the bodies of the entries `capability_ids` only, read from the catalog
/// directory `dir` and verified against the catalog now: what an install or an activation needs,
/// verified when it is needed rather than with every other body at every open (spec/catalog.md
/// §8.4). An id the catalog does not hold is skipped. The flags are not derived again: they were
/// checked against these very bytes (their digests are the catalog's) when it was ingested.
pub fn load_catalog_entries(
    dir: &Path,
    catalog: &Catalog,
    capability_ids: &[&str],
) -> Result<LoadedCatalog, CatalogError> {
    let mut bodies = BTreeMap::new();
    let mut trees = BTreeMap::new();
    for id in capability_ids {
        let (Some(entry), Some(index)) = (catalog.entry(id), catalog.position_of(id)) else {
            continue;
        };
        for (field, body) in entry.bodies() {
            let (text, tree) = read_declared(dir, catalog.entry_ref(index), entry, field, body)?;
            bodies.insert(body.path.clone(), text);
            if let Some(tree) = tree {
                trees.insert(body.path.clone(), tree);
            }
        }
    }
    Ok(LoadedCatalog {
        catalog: catalog.clone(),
        bodies,
        trees,
    })
}

/// Refuses an entry whose declared flags understate what its material implies (spec/catalog.md
/// §7): an install whose `permission_expansion` or `credential_requirement` is `false` while the
/// rule derives `true` from the body it installs, and a `load` skill whose body would need either
/// flag, since a `load` skill reaches the host with no decision at all. Declaring `true` where the
/// rule derives `false` is a stricter author and stays allowed.
fn check_flags(
    catalog: &Catalog,
    index: usize,
    entry: &CatalogEntry,
    bodies: &BTreeMap<String, String>,
    trees: &BTreeMap<String, SkillTree>,
) -> Result<(), CatalogError> {
    let refuse = |field: &str, problem: String| CatalogError::Flags {
        entry: catalog.entry_ref(index),
        field: field.to_owned(),
        problem: format!(
            "{problem}; ctx derives both flags from the material (spec/catalog.md §7)"
        ),
    };
    let derived = |path: &str| {
        if let Some(tree) = trees.get(path) {
            return flags::derive_skill_tree(tree);
        }
        let text = bodies.get(path).map_or("", String::as_str);
        // A skill's siblings: the catalog's other bodies in the same directory (an
        // `agents/openai.yaml` beside `SKILL.md` may declare an MCP dependency). A range of the
        // sorted map, so a catalog of many entries costs no more than its own directory.
        let dir = format!("{}/", path.rsplit_once('/').map_or("", |(d, _)| d));
        let siblings: Vec<(&str, &str)> = bodies
            .range(dir.clone()..)
            .take_while(|(p, _)| p.starts_with(&dir))
            .filter(|(p, _)| p.as_str() != path)
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        flags::derive(entry.kind, text, &siblings)
    };
    if let Some(install) = &entry.install {
        let d = derived(&install.result.path);
        if !install.permission_expansion && !d.expansion.is_empty() {
            return Err(refuse(
                "install.permission_expansion",
                format!(
                    "is false, but the body it installs ({}) expands permissions: {}",
                    install.result.path,
                    d.expansion.join("; ")
                ),
            ));
        }
        if !install.credential_requirement && !d.credentials.is_empty() {
            return Err(refuse(
                "install.credential_requirement",
                format!(
                    "is false, but the body it installs ({}) needs credentials: {}",
                    install.result.path,
                    d.credentials.join("; ")
                ),
            ));
        }
    }
    if let Some(material) = &entry.material {
        let d = derived(&material.body.path);
        let evidence: Vec<String> = d.expansion.iter().chain(&d.credentials).cloned().collect();
        if !evidence.is_empty() {
            return Err(refuse(
                "material",
                format!(
                    "names a body ({}) that a host would load with no consent decision, but it \
                     {}: {}; such a skill must be an install whose flags say so",
                    material.body.path,
                    match (d.expansion.is_empty(), d.credentials.is_empty()) {
                        (false, false) => "expands permissions and needs credentials",
                        (false, true) => "expands permissions",
                        _ => "needs credentials",
                    },
                    evidence.join("; ")
                ),
            ));
        }
    }
    Ok(())
}

/// What is wrong with a declared skill tree; the sentence follows "... names the skill tree
/// \"PATH\", which " and becomes the problem of [`CatalogError::Tree`].
#[derive(Debug, thiserror::Error)]
enum TreeProblem {
    #[error("cannot be read: {0}")]
    Walk(super::tree::SkillTreeError),
    #[error("has a SKILL.md that is not UTF-8 text without NUL bytes")]
    NotText,
    #[error(
        "has a pack of {actual} bytes (digest {digest}), but the catalog declares {declared} bytes"
    )]
    PackSize {
        actual: usize,
        digest: String,
        declared: i64,
    },
    #[error("has a pack with SHA-256 {actual}, but the catalog declares {declared}")]
    PackDigest { actual: String, declared: String },
    #[error(
        "has a SKILL.md of {bytes} bytes, whose estimate is ceil(bytes / 4) = {expected} tokens, \
         but the catalog declares {declared} tokens"
    )]
    Tokens {
        bytes: usize,
        expected: i64,
        declared: i64,
    },
}

/// Reads a declared skill tree under the walk rules (spec/skill-tree.md §2) and checks it against
/// its declaration: the pack's SHA-256 and length, a UTF-8 `SKILL.md` without NUL, and for
/// loadable material the token estimate of that `SKILL.md`. Returns the tree and its pack.
fn read_tree(
    root: &Path,
    body: &BodyRef,
    estimated_tokens: Option<i64>,
) -> Result<(SkillTree, String), TreeProblem> {
    let tree = read_skill_tree(root, &body.path).map_err(TreeProblem::Walk)?;
    let skill_md = tree.skill_md();
    if skill_md.contains(&0) || std::str::from_utf8(skill_md).is_err() {
        return Err(TreeProblem::NotText);
    }
    let pack = skill_pack(&tree);
    let actual = sha256_hex_bytes(pack.as_bytes());
    if i64::try_from(pack.len()).ok() != Some(body.size_bytes) {
        return Err(TreeProblem::PackSize {
            actual: pack.len(),
            digest: actual,
            declared: body.size_bytes,
        });
    }
    if actual != body.sha256 {
        return Err(TreeProblem::PackDigest {
            actual,
            declared: body.sha256.clone(),
        });
    }
    if let Some(declared) = estimated_tokens {
        let expected = estimated_tokens_of(skill_md.len());
        if declared != expected {
            return Err(TreeProblem::Tokens {
                bytes: skill_md.len(),
                expected,
                declared,
            });
        }
    }
    Ok((tree, pack))
}

fn estimated_tokens_of(len: usize) -> i64 {
    estimated_tokens(i64::try_from(len).unwrap_or(i64::MAX))
}

/// Opens the catalog file `catalog_file` under the file rules (spec/catalog.md §3): relative to
/// its directory, never following a link, a regular file with one link. A failure of the
/// operating system (a missing file, say) stays [`CatalogError::Io`] naming the file.
fn open_catalog_text(catalog_file: &Path) -> Result<fs::File, CatalogError> {
    let io = |source| CatalogError::Io {
        path: catalog_file.to_path_buf(),
        source,
    };
    let name = catalog_file.file_name().and_then(|n| n.to_str());
    let (Some(root), Some(name)) = (catalog_file.parent(), name) else {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path names no UTF-8 file name inside a directory",
        )));
    };
    // `Path::new("catalog.json").parent()` is the empty path: the current directory.
    let root = if root.as_os_str().is_empty() {
        Path::new(".")
    } else {
        root
    };
    open_catalog_file(root, name, CatalogFileKind::Catalog).map_err(|e| match e {
        CatalogFileError::Io { source, .. } => io(source),
        other => CatalogError::File {
            entry: None,
            field: None,
            source: other,
        },
    })
}

/// Why a declared body was refused: a file rule (spec/catalog.md §3) or what the bytes are.
enum BodyFailure {
    File(CatalogFileError),
    Problem(BodyProblem),
}

impl From<BodyProblem> for BodyFailure {
    fn from(problem: BodyProblem) -> BodyFailure {
        BodyFailure::Problem(problem)
    }
}

/// What is wrong with a declared body file; the sentence follows "... names the body file
/// \"PATH\", which " and becomes the problem of [`CatalogError::Body`].
#[derive(Debug, thiserror::Error)]
enum BodyProblem {
    #[error("does not exist (no {})", path.display())]
    Missing { path: PathBuf },
    #[error("cannot be inspected: {0}")]
    Inspect(std::io::Error),
    #[error("is {actual} bytes, but the catalog declares {declared} bytes")]
    Size { actual: u64, declared: i64 },
    #[error("cannot be read: {0}")]
    Read(std::io::Error),
    #[error("has SHA-256 {actual}, but the catalog declares {declared}")]
    Digest { actual: String, declared: String },
    #[error("contains a NUL byte, which material text may not hold")]
    Nul,
    #[error("is not UTF-8 text (invalid byte at offset {offset})")]
    Utf8 { offset: usize },
}

/// Reads one declared body under the file rules (spec/catalog.md §3): opened segment by segment
/// below `root` without following a link, a regular file with one link (a link could point
/// outside the catalog directory, and the body's digest would then vouch for a file nobody
/// reviewed), whose size is checked before a byte is read.
fn read_body(root: &Path, body: &BodyRef) -> Result<String, BodyFailure> {
    let path = root.join(&body.path);
    let mut file =
        open_catalog_file(root, &body.path, CatalogFileKind::Body).map_err(|e| match e {
            CatalogFileError::Io { path, source, .. }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                BodyFailure::Problem(BodyProblem::Missing { path })
            }
            CatalogFileError::Io { source, .. } => {
                BodyFailure::Problem(BodyProblem::Inspect(source))
            }
            other => BodyFailure::File(other),
        })?;
    let declared = u64::try_from(body.size_bytes).unwrap_or(0);
    let actual = file.metadata().map_err(BodyProblem::Inspect)?.len();
    if actual != declared {
        return Err(BodyProblem::Size {
            actual,
            declared: body.size_bytes,
        }
        .into());
    }
    // Bounded by the declared size (itself at most BODY_MAX_BYTES): a file grown since the check
    // above is refused without being read whole.
    let bytes = ctx_fs::read_bounded_file(&mut file, &path, declared).map_err(|e| match e {
        ctx_fs::ReadError::TooLarge { size_bytes, .. } => BodyProblem::Size {
            actual: size_bytes,
            declared: body.size_bytes,
        },
        ctx_fs::ReadError::Io { source, .. } => BodyProblem::Read(source),
        other => BodyProblem::Read(std::io::Error::other(other.to_string())),
    })?;
    if i64::try_from(bytes.len()).ok() != Some(body.size_bytes) {
        return Err(BodyProblem::Size {
            actual: bytes.len() as u64,
            declared: body.size_bytes,
        }
        .into());
    }
    let actual = sha256_hex_bytes(&bytes);
    if actual != body.sha256 {
        return Err(BodyProblem::Digest {
            actual,
            declared: body.sha256.clone(),
        }
        .into());
    }
    if bytes.contains(&0) {
        return Err(BodyProblem::Nul.into());
    }
    String::from_utf8(bytes).map_err(|e| {
        BodyProblem::Utf8 {
            offset: e.utf8_error().valid_up_to(),
        }
        .into()
    })
}
