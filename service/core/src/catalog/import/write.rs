//! Writing a built catalog directory: `catalog.json` in `ctx.catalog-v1` and the bodies it pins,
//! with every digest, size and flag computed here (spec/catalog-build.md §5–§8).
//!
//! The writer trusts nothing an importer or a source says about flags: it derives them from the
//! body with the loader's own rule (spec/catalog.md §7), checks the document with the catalog's
//! own parser before writing, and loads the written directory as `ctx catalog ingest` would, so a
//! build that succeeds is a catalog that ingests.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ctx_model::{CapabilityKind, Json, cja_digest, is_safe_token, sha256_hex_bytes};

use super::super::error::CatalogError;
use super::super::flags;
use super::super::format::{
    BodyRef, CATALOG_SCHEMA_V2, CatalogEntry, InstallSpec, MaterialSpec, SOURCE_ORIGIN_MAX_BYTES,
    SOURCE_VERSION_MAX_BYTES, SourceSpec, estimated_tokens,
};
use super::super::load::{CATALOG_FILE_NAME, load_catalog_dir};
use super::super::pack::skill_pack_identity;
use super::super::snapshot::Catalog;
use super::Import;

/// The installer every built install entry names (spec/catalog-build.md §7).
pub const CATALOG_BUILD_INSTALLER_ID: &str = "ctx-install-plan-executor-v1";
/// The schema of the plan document whose digest is a built entry's `plan_digest`
/// (spec/catalog-build.md §7).
pub const CATALOG_BUILD_PLAN_SCHEMA: &str = "ctx.catalog-build-install-plan-v1";
/// The file that marks a directory as written by `ctx catalog build`, so a rebuild may replace
/// what it holds and nothing else is ever overwritten (spec/catalog-build.md §8).
pub const BUILD_MARKER_FILE: &str = ".ctx-catalog-build";

/// The prefix of the staging directory a build writes into before swapping it in.
const STAGE_PREFIX: &str = ".ctx-build-";
/// The prefix of the directory the previous build's bodies are moved to during the swap.
const OLD_PREFIX: &str = ".ctx-old-";
/// The body directories a build owns inside its output directory.
const BODY_DIRECTORIES: [&str; 3] = ["skills", "agents", "mcp-servers"];

/// One file a build writes: its path relative to the output directory, its bytes, and whether
/// it is executable (a skill tree's file keeps the bit its digest pins).
type BuiltFile = (String, Vec<u8>, bool);

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    /// How many entries the catalog holds.
    pub entries: usize,
    /// True when the directory already held exactly this catalog and nothing was written.
    pub unchanged: bool,
    /// The catalog's content digest (spec/catalog.md §4).
    pub content_digest: String,
}

/// Why a catalog could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Every source was refused or empty.
    #[error("no entry could be imported from the sources, so no catalog was written")]
    NoEntries,
    /// The namespace is not a safe token.
    #[error(
        "the namespace {namespace:?} is not a safe token: 1 to 128 characters of a-z, 0-9 and \
         ._:@-, starting with a letter or digit"
    )]
    Namespace { namespace: String },
    /// The output directory holds files this command did not write.
    #[error(
        "the output directory {} holds files that ctx catalog build did not write (it has no \
         {BUILD_MARKER_FILE} file); name an empty or new directory",
        dir.display()
    )]
    NotOurs { dir: PathBuf },
    /// The output path exists and is not a directory (a symbolic link included).
    #[error("the output path {} exists and is not a directory", path.display())]
    NotDirectory { path: PathBuf },
    /// The document the writer built was refused by the catalog's parser.
    #[error("the built catalog is refused by the catalog parser: {source}")]
    Catalog { source: Box<CatalogError> },
    /// The written directory does not load.
    #[error("the catalog written to {} does not load: {source}", dir.display())]
    Load {
        dir: PathBuf,
        source: Box<CatalogError>,
    },
    /// The file system refused an operation.
    #[error("{} could not be {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
}

impl BuildError {
    /// True when the person's input is at fault (no entries, namespace, output directory), as
    /// opposed to the machine.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            BuildError::NoEntries
                | BuildError::Namespace { .. }
                | BuildError::NotOurs { .. }
                | BuildError::NotDirectory { .. }
        )
    }
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> BuildError {
    let path = path.to_path_buf();
    move |source| BuildError::Io {
        path,
        action,
        source,
    }
}

/// Writes `import` as a `ctx.catalog-v2` directory at `out` (spec/catalog-build.md §5–§8).
///
/// # Errors
/// [`BuildError`] when there is no entry, the namespace is not a safe token, `out` is not a
/// directory this command wrote, the file system fails, or the result does not load.
pub fn write_catalog(
    import: &Import,
    namespace: &str,
    out: &Path,
) -> Result<WriteReport, BuildError> {
    if !is_safe_token(namespace) {
        return Err(BuildError::Namespace {
            namespace: namespace.to_owned(),
        });
    }
    if import.entries.is_empty() {
        return Err(BuildError::NoEntries);
    }
    let (text, bodies) = build(import, namespace);
    let catalog = Catalog::parse(&text).map_err(|source| BuildError::Catalog {
        source: Box::new(source),
    })?;
    let report = |unchanged| WriteReport {
        entries: catalog.entries().len(),
        unchanged,
        content_digest: catalog.content_digest().to_owned(),
    };
    let ours = check_out(out)?;
    if ours && unchanged(out, &text, &bodies) {
        load_catalog_dir(out).map_err(|source| BuildError::Load {
            dir: out.to_path_buf(),
            source: Box::new(source),
        })?;
        return Ok(report(true));
    }
    fs::create_dir_all(out).map_err(io_error(out, "created"))?;
    let marker = out.join(BUILD_MARKER_FILE);
    if !ours {
        fs::write(
            &marker,
            "written by ctx catalog build; a rebuild replaces this directory's catalog\n",
        )
        .map_err(io_error(&marker, "written"))?;
    }
    let stage = out.join(format!("{STAGE_PREFIX}{}", std::process::id()));
    let result = stage_and_swap(out, &stage, &text, &bodies);
    if result.is_err() {
        // Best effort: a failed build leaves no staging directory behind; the error that
        // matters is the one returned.
        let _ = fs::remove_dir_all(&stage);
    }
    result?;
    load_catalog_dir(out).map_err(|source| BuildError::Load {
        dir: out.to_path_buf(),
        source: Box::new(source),
    })?;
    Ok(report(false))
}

/// The catalog text and the files to write, sorted by path.
fn build(import: &Import, namespace: &str) -> (String, Vec<BuiltFile>) {
    let mut entries = Vec::with_capacity(import.entries.len());
    let mut bodies = Vec::with_capacity(import.entries.len());
    for imported in &import.entries {
        let kind = imported.kind;
        let name = &imported.name;
        let id = format!("{}:{name}", kind.as_str());
        let path = match (kind, &imported.tree) {
            (CapabilityKind::Skill, Some(_)) => format!("skills/{name}"),
            (CapabilityKind::Skill, None) => format!("skills/{name}/SKILL.md"),
            (CapabilityKind::Agent, _) => format!("agents/{name}.md"),
            (CapabilityKind::McpServer, _) => format!("mcp-servers/{name}.json"),
            // No importer produces a harness, and a harness carries no body
            // (spec/catalog.md §1.2): it would be a manual entry.
            (CapabilityKind::Harness, _) => String::new(),
        };
        let (material, install) = if path.is_empty() {
            (None, None)
        } else {
            // The flags are derived from the material, never taken from the source
            // (spec/catalog.md §7); a body that is not UTF-8 is refused by the parser below.
            let (body, derived, tokens) = match &imported.tree {
                Some(tree) => {
                    let (sha256, size) = skill_pack_identity(tree);
                    for file in tree.files() {
                        bodies.push((
                            format!("{path}/{}", file.path()),
                            file.bytes().to_vec(),
                            file.executable(),
                        ));
                    }
                    let body = BodyRef {
                        path: path.clone(),
                        sha256,
                        size_bytes: i64::try_from(size).unwrap_or(i64::MAX),
                        tree: true,
                    };
                    let tokens =
                        estimated_tokens(i64::try_from(tree.skill_md().len()).unwrap_or(i64::MAX));
                    (body, flags::derive_skill_tree(tree), tokens)
                }
                None => {
                    let body = BodyRef {
                        path: path.clone(),
                        sha256: sha256_hex_bytes(&imported.body),
                        size_bytes: i64::try_from(imported.body.len()).unwrap_or(i64::MAX),
                        tree: false,
                    };
                    let text = String::from_utf8_lossy(&imported.body);
                    let derived = flags::derive(kind, &text, &[]);
                    bodies.push((path.clone(), imported.body.clone(), false));
                    let tokens = estimated_tokens(body.size_bytes);
                    (body, derived, tokens)
                }
            };
            let expansion = !derived.expansion.is_empty();
            let credentials = !derived.credentials.is_empty();
            if kind == CapabilityKind::Skill && !expansion && !credentials {
                (
                    Some(MaterialSpec {
                        body,
                        estimated_tokens: tokens,
                    }),
                    None,
                )
            } else {
                let plan_digest = plan_digest(&id, &body.sha256);
                (
                    None,
                    Some(InstallSpec {
                        installer_id: CATALOG_BUILD_INSTALLER_ID.to_owned(),
                        plan_digest,
                        permission_expansion: expansion,
                        credential_requirement: credentials,
                        result: body,
                    }),
                )
            }
        };
        entries.push(CatalogEntry {
            source: Some(source_of(&imported.provenance)),
            id,
            kind,
            name: name.clone(),
            label: imported.label.clone(),
            tags: imported.tags.clone(),
            related: Vec::new(),
            material,
            install,
        });
    }
    entries.sort_by(|a, b| a.id.cmp(&b.id));
    bodies.sort();
    let document = Json::object([
        (
            "capabilities",
            Json::Arr(entries.iter().map(CatalogEntry::to_json).collect()),
        ),
        ("namespace", Json::str(namespace)),
        ("schema", Json::str(CATALOG_SCHEMA_V2)),
    ]);
    let mut text = String::new();
    pretty(&document, 0, &mut text);
    text.push('\n');
    (text, bodies)
}

/// The catalog's provenance of an imported entry (spec/catalog-build.md §2.5): the file it was
/// read from, behind the marketplace and plugin it was found through, and the version its source
/// declares; control characters dropped, cut at a character boundary to the field limits.
fn source_of(provenance: &super::Provenance) -> SourceSpec {
    let mut origin = String::new();
    if let Some(marketplace) = &provenance.marketplace {
        origin.push_str(&format!("marketplace {marketplace}, "));
    }
    if let Some(plugin) = &provenance.plugin {
        origin.push_str(&format!("plugin {plugin}: "));
    }
    origin.push_str(&provenance.path);
    let clean = |text: &str, max: usize| {
        let mut out: String = text.chars().filter(|c| !c.is_control()).collect();
        if out.len() > max {
            let mut end = max;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
        }
        out.trim().to_owned()
    };
    let origin = clean(&origin, SOURCE_ORIGIN_MAX_BYTES);
    SourceSpec {
        origin: if origin.is_empty() {
            "(unnamed source)".to_owned()
        } else {
            origin
        },
        version: provenance
            .version
            .as_deref()
            .map(|v| clean(v, SOURCE_VERSION_MAX_BYTES))
            .filter(|v| !v.is_empty()),
    }
}

/// `H(CJA({capability_id, installer_id, result_sha256, schema}))` (spec/catalog-build.md §7).
pub(super) fn plan_digest(capability_id: &str, result_sha256: &str) -> String {
    cja_digest(&Json::object([
        ("capability_id", Json::str(capability_id)),
        ("installer_id", Json::str(CATALOG_BUILD_INSTALLER_ID)),
        ("result_sha256", Json::str(result_sha256)),
        ("schema", Json::str(CATALOG_BUILD_PLAN_SCHEMA)),
    ]))
}

/// Indented JSON with sorted keys, so a person can review the file and its diff. The recursion
/// follows the document this module builds, which nests four levels, never input.
fn pretty(value: &Json, indent: usize, out: &mut String) {
    let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
    match value {
        Json::Arr(items) if !items.is_empty() => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                pad(out, indent + 2);
                pretty(item, indent + 2, out);
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            pad(out, indent);
            out.push(']');
        }
        Json::Obj(map) if !map.is_empty() => {
            out.push_str("{\n");
            for (i, (key, item)) in map.iter().enumerate() {
                pad(out, indent + 2);
                out.push_str(&Json::str(key.as_str()).to_cj());
                out.push_str(": ");
                pretty(item, indent + 2, out);
                out.push_str(if i + 1 < map.len() { ",\n" } else { "\n" });
            }
            pad(out, indent);
            out.push('}');
        }
        other => out.push_str(&other.to_cj()),
    }
}

/// Whether `out` may be written: absent, empty, or holding the marker of an earlier build
/// (returns true for the last).
fn check_out(out: &Path) -> Result<bool, BuildError> {
    let meta = match fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io_error(out, "read")(e)),
    };
    if !meta.is_dir() {
        return Err(BuildError::NotDirectory {
            path: out.to_path_buf(),
        });
    }
    let marker = fs::symlink_metadata(out.join(BUILD_MARKER_FILE));
    if marker.is_ok_and(|m| m.is_file()) {
        return Ok(true);
    }
    let mut listing = fs::read_dir(out).map_err(io_error(out, "listed"))?;
    if listing.next().is_some() {
        return Err(BuildError::NotOurs {
            dir: out.to_path_buf(),
        });
    }
    Ok(false)
}

/// Whether `out` already holds exactly this catalog text and these files, byte for byte and
/// executable bit for executable bit.
fn unchanged(out: &Path, text: &str, bodies: &[BuiltFile]) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let same = |path: &Path, bytes: &[u8]| {
        let limit = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        ctx_fs::read_bounded(path, limit).is_ok_and(|found| found == bytes)
    };
    same(&out.join(CATALOG_FILE_NAME), text.as_bytes())
        && bodies.iter().all(|(path, bytes, executable)| {
            let path = out.join(path);
            same(&path, bytes)
                && fs::symlink_metadata(&path)
                    .is_ok_and(|m| (m.permissions().mode() & 0o111 != 0) == *executable)
        })
}

/// Writes everything into `stage`, then moves it into `out`: the old body directories aside,
/// the new ones in, and `catalog.json` last, so a reader sees the old catalog or the new one and
/// never a catalog whose bodies are half written (a reader between the moves finds a body
/// missing, which the loader refuses).
fn stage_and_swap(
    out: &Path,
    stage: &Path,
    text: &str,
    bodies: &[BuiltFile],
) -> Result<(), BuildError> {
    if fs::symlink_metadata(stage).is_ok() {
        fs::remove_dir_all(stage).map_err(io_error(stage, "removed"))?;
    }
    fs::create_dir(stage).map_err(io_error(stage, "created"))?;
    for (path, bytes, executable) in bodies {
        let target = stage.join(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_error(parent, "created"))?;
        }
        fs::write(&target, bytes).map_err(io_error(&target, "written"))?;
        if *executable {
            use std::os::unix::fs::PermissionsExt as _;
            fs::set_permissions(&target, fs::Permissions::from_mode(0o755))
                .map_err(io_error(&target, "made executable"))?;
        }
    }
    let staged_catalog = stage.join(CATALOG_FILE_NAME);
    fs::write(&staged_catalog, text).map_err(io_error(&staged_catalog, "written"))?;
    let old = out.join(format!("{OLD_PREFIX}{}", std::process::id()));
    if fs::symlink_metadata(&old).is_ok() {
        fs::remove_dir_all(&old).map_err(io_error(&old, "removed"))?;
    }
    fs::create_dir(&old).map_err(io_error(&old, "created"))?;
    for name in BODY_DIRECTORIES {
        let current = out.join(name);
        if fs::symlink_metadata(&current).is_ok() {
            fs::rename(&current, old.join(name)).map_err(io_error(&current, "moved aside"))?;
        }
    }
    for name in BODY_DIRECTORIES {
        let staged = stage.join(name);
        if staged.is_dir() {
            fs::rename(&staged, out.join(name)).map_err(io_error(&staged, "moved in"))?;
        }
    }
    let target = out.join(CATALOG_FILE_NAME);
    fs::rename(&staged_catalog, &target).map_err(io_error(&target, "replaced"))?;
    fs::remove_dir_all(&old).map_err(io_error(&old, "removed"))?;
    fs::remove_dir(stage).map_err(io_error(stage, "removed"))?;
    Ok(())
}
