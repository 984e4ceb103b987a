//! `ctx catalog add SOURCE...`, `ctx catalog list` and `ctx catalog show ID` (spec/cli.md §5.8):
//! a person's own capabilities, from the formats they are published in, into the data directory's
//! catalog, and what that catalog holds.
//!
//! `add` remembers every source it was given in the data directory, rebuilds the catalog from
//! all of them with `ctx catalog build`'s importers (spec/catalog-build.md) into a directory the
//! data directory owns, and ingests that directory. So adding the same unchanged sources again
//! writes nothing, and a source whose content changed gives its entries new content digests: an
//! install consented to for the old content is not the new one's (spec/catalog.md §1.4).

use std::io::Write;
use std::path::PathBuf;

use ctx_model::Json;
use ctx_service::{
    FindingSeverity, IngestError, Layout, LoadedCatalog, import_sources, ingest_catalog,
    load_catalog_dir, write_catalog,
};

use crate::build::{entries_word, write_table};
use crate::error::{CliError, EXIT_OK};

/// The file that lists the sources `ctx catalog add` was given, in the data directory.
const SOURCES_FILE: &str = "catalog-sources.json";
/// The directory `ctx catalog add` builds the catalog into, in the data directory.
const BUILD_DIR: &str = "catalog-build";
/// The schema of the sources file.
const SOURCES_SCHEMA: &str = "ctx.catalog-sources-v1";
/// Most sources `ctx catalog add` remembers; each is rebuilt on every add.
pub(crate) const SOURCES_MAX: usize = 256;
/// Largest sources file read, in bytes: 256 paths of up to 4 KiB each, with room.
const SOURCES_FILE_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// The remembered sources and namespace of `ctx catalog add`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sources {
    namespace: String,
    paths: Vec<PathBuf>,
}

impl Sources {
    fn to_json(&self) -> Json {
        Json::object([
            ("namespace", Json::str(&self.namespace)),
            ("schema", Json::str(SOURCES_SCHEMA)),
            (
                "sources",
                Json::Arr(
                    self.paths
                        .iter()
                        .map(|p| Json::str(p.to_string_lossy()))
                        .collect(),
                ),
            ),
        ])
    }

    /// The sources file of `layout`, or `None` when `add` never ran there.
    fn read(layout: &Layout) -> Result<Option<Sources>, CliError> {
        let path = layout.root().join(SOURCES_FILE);
        let bytes = match ctx_fs::read_bounded(&path, SOURCES_FILE_MAX_BYTES) {
            Ok(bytes) => bytes,
            Err(ctx_fs::ReadError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(CliError::Integrity(format!(
                    "the catalog sources file {} cannot be read: {e}",
                    path.display()
                )));
            }
        };
        let corrupt = |why: &str| {
            CliError::Integrity(format!(
                "the catalog sources file {} {why}; remove it and add the sources again",
                path.display()
            ))
        };
        let text = String::from_utf8(bytes).map_err(|_| corrupt("is not UTF-8"))?;
        let doc = Json::parse(&text).map_err(|_| corrupt("is not JSON"))?;
        if doc.get_str("schema") != Some(SOURCES_SCHEMA) {
            return Err(corrupt("does not have the schema ctx.catalog-sources-v1"));
        }
        let namespace = doc
            .get_str("namespace")
            .filter(|n| ctx_model::is_safe_token(n))
            .ok_or_else(|| corrupt("has no valid namespace"))?
            .to_owned();
        let Some(Json::Arr(items)) = doc.get("sources") else {
            return Err(corrupt("has no list of sources"));
        };
        if items.len() > SOURCES_MAX {
            return Err(corrupt("lists more sources than ctx catalog add keeps"));
        }
        let paths = items
            .iter()
            .map(|item| item.as_str().map(PathBuf::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| corrupt("lists a source that is not a path"))?;
        Ok(Some(Sources { namespace, paths }))
    }

    fn write(&self, layout: &Layout) -> Result<(), CliError> {
        let path = layout.root().join(SOURCES_FILE);
        let text = format!("{}\n", self.to_json());
        ctx_fs::write_durable(&path, text.as_bytes(), ctx_fs::FILE_MODE_PRIVATE).map_err(|e| {
            CliError::Output(std::io::Error::other(format!(
                "could not write {}: {e}",
                path.display()
            )))
        })
    }
}

/// `ctx catalog add SOURCE... [--namespace NS]`.
pub(crate) fn catalog_add(
    layout: &Layout,
    given: &[PathBuf],
    namespace: Option<&str>,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let mut added = Vec::with_capacity(given.len());
    for source in given {
        // A source is remembered by its absolute path, so a later add from another directory
        // rebuilds the same material.
        let path = std::fs::canonicalize(source).map_err(|e| {
            CliError::Usage(format!(
                "the source {} cannot be used: {e}",
                source.display()
            ))
        })?;
        added.push(path);
    }
    let before = Sources::read(layout)?;
    let mut sources = before.clone().unwrap_or_else(|| Sources {
        namespace: crate::build::DEFAULT_NAMESPACE.to_owned(),
        paths: Vec::new(),
    });
    if let Some(namespace) = namespace {
        namespace.clone_into(&mut sources.namespace);
    }
    let mut new = 0usize;
    for path in added {
        if !sources.paths.contains(&path) {
            sources.paths.push(path);
            new += 1;
        }
    }
    if sources.paths.len() > SOURCES_MAX {
        return Err(CliError::Usage(format!(
            "the catalog would have {} sources, more than the {SOURCES_MAX} ctx catalog add keeps",
            sources.paths.len()
        )));
    }
    let import = import_sources(&sources.paths);
    if !import.findings.is_empty() {
        write_table(&import.findings, out)?;
    }
    let build_dir = layout.root().join(BUILD_DIR);
    ctx_fs::create_private_dir_all(layout.root())
        .map_err(|e| CliError::Output(std::io::Error::other(e)))?;
    let report = write_catalog(&import, &sources.namespace, &build_dir)?;
    let ingest = ingest_catalog(layout, Some(&build_dir)).map_err(ingest_error)?;
    if before.as_ref() != Some(&sources) {
        sources.write(layout)?;
    }
    let refused = import.count(FindingSeverity::Refused);
    let warnings = import.count(FindingSeverity::Warning);
    writeln!(
        out,
        "{} {} ({new} new); the catalog holds {} {} ({refused} refused, {warnings} {}); {}",
        sources.paths.len(),
        if sources.paths.len() == 1 {
            "source"
        } else {
            "sources"
        },
        report.entries,
        entries_word(report.entries),
        if warnings == 1 { "warning" } else { "warnings" },
        if ingest.changed {
            "ingested"
        } else {
            "unchanged, nothing written"
        }
    )?;
    Ok(EXIT_OK)
}

fn ingest_error(e: IngestError) -> CliError {
    match e.code() {
        "invalid" => CliError::Usage(e.to_string()),
        _ => CliError::Unexpected(e.to_string()),
    }
}

/// The data directory's catalog, as the runtime would load it.
fn current(layout: &Layout) -> Result<LoadedCatalog, CliError> {
    let dir = layout.catalog();
    if !dir.join(ctx_service::CATALOG_FILE_NAME).exists() {
        return Err(CliError::Usage(format!(
            "{} holds no catalog yet; `ctx catalog add SOURCE` adds your capabilities",
            layout.root().display()
        )));
    }
    load_catalog_dir(&dir).map_err(|e| {
        CliError::Integrity(format!("the data directory's catalog does not load: {e}"))
    })
}

/// `ctx catalog list [--json]`: one line per entry — id, how it reaches a host, its flags, its
/// content digest and where it came from.
pub(crate) fn catalog_list(
    layout: &Layout,
    json: bool,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let loaded = current(layout)?;
    let catalog = loaded.catalog();
    if json {
        let entries: Vec<Json> = catalog
            .entries()
            .iter()
            .map(|e| summary(&loaded, &e.id))
            .collect();
        let doc = Json::object([
            ("content_digest", Json::str(catalog.content_digest())),
            ("entries", Json::Arr(entries)),
            ("namespace", Json::str(catalog.namespace())),
        ]);
        writeln!(out, "{doc}")?;
        return Ok(EXIT_OK);
    }
    writeln!(
        out,
        "{} {} in namespace {} (content {})",
        catalog.entries().len(),
        entries_word(catalog.entries().len()),
        catalog.namespace(),
        short(catalog.content_digest())
    )?;
    for entry in catalog.entries() {
        let s = summary(&loaded, &entry.id);
        let text = |k: &str| s.get_str(k).unwrap_or("-").to_owned();
        writeln!(
            out,
            "{} | {} | {} | {} | {}",
            entry.id,
            text("actionability"),
            text("flags"),
            s.get_str("content_sha256")
                .map_or_else(|| "-".to_owned(), short),
            match (s.get_str("origin"), s.get_str("version")) {
                (Some(o), Some(v)) => format!("{o} (version {v})"),
                (Some(o), None) => o.to_owned(),
                _ => "-".to_owned(),
            }
        )?;
    }
    Ok(EXIT_OK)
}

/// `ctx catalog show ID [--json]`: the entry as the catalog declares it, and for a skill tree
/// every file with its size and executable bit.
pub(crate) fn catalog_show(
    layout: &Layout,
    id: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<u8, CliError> {
    let loaded = current(layout)?;
    let Some(entry) = loaded.catalog().entry(id) else {
        return Err(CliError::Usage(format!(
            "the catalog has no entry {id:?}; `ctx catalog list` shows its entries"
        )));
    };
    let tree = loaded
        .material_tree(id)
        .or_else(|| loaded.install_result_tree(id));
    let files: Vec<Json> = tree.map_or_else(Vec::new, |t| {
        t.files()
            .iter()
            .map(|f| {
                Json::object([
                    ("executable", Json::Bool(f.executable())),
                    ("path", Json::str(f.path())),
                    (
                        "size_bytes",
                        Json::Int(i64::try_from(f.bytes().len()).unwrap_or(i64::MAX)),
                    ),
                ])
            })
            .collect()
    });
    if json {
        let mut doc = vec![
            ("entry", entry.to_json()),
            ("summary", summary(&loaded, id)),
        ];
        if tree.is_some() {
            doc.push(("files", Json::Arr(files)));
        }
        writeln!(out, "{}", Json::object(doc))?;
        return Ok(EXIT_OK);
    }
    let s = summary(&loaded, id);
    writeln!(out, "{id}: {}", entry.label)?;
    for key in [
        "actionability",
        "flags",
        "content_sha256",
        "size_bytes",
        "origin",
        "version",
    ] {
        if let Some(value) = s.get(key) {
            let shown = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            writeln!(out, "  {key}: {shown}")?;
        }
    }
    if !entry.tags.is_empty() {
        writeln!(out, "  tags: {}", entry.tags.join(", "))?;
    }
    if let Some(tree) = tree {
        writeln!(out, "  tree digest: {}", tree.digest_hex())?;
        for f in tree.files() {
            writeln!(
                out,
                "    {} {:>9} {}",
                if f.executable() { "x" } else { "-" },
                f.bytes().len(),
                f.path()
            )?;
        }
    }
    Ok(EXIT_OK)
}

/// The facts a person needs about one entry, as JSON.
fn summary(loaded: &LoadedCatalog, id: &str) -> Json {
    let Some(entry) = loaded.catalog().entry(id) else {
        return Json::Null;
    };
    let mut fields = vec![("id", Json::str(id))];
    let (actionability, body, flags) = match (&entry.material, &entry.install) {
        (Some(m), _) => ("load", Some(&m.body), "none".to_owned()),
        (None, Some(i)) => {
            let flags = match (i.permission_expansion, i.credential_requirement) {
                (true, true) => "expands permissions, needs credentials",
                (true, false) => "expands permissions",
                (false, true) => "needs credentials",
                (false, false) => "none",
            };
            ("install", Some(&i.result), flags.to_owned())
        }
        (None, None) => ("manual", None, "none".to_owned()),
    };
    fields.push(("actionability", Json::str(actionability)));
    fields.push(("flags", Json::str(flags)));
    if let Some(body) = body {
        fields.push(("content_sha256", Json::str(&body.sha256)));
        fields.push(("size_bytes", Json::Int(body.size_bytes)));
        fields.push((
            if body.tree { "tree" } else { "path" },
            Json::str(&body.path),
        ));
    }
    if let Some(source) = &entry.source {
        fields.push(("origin", Json::str(&source.origin)));
        if let Some(version) = &source.version {
            fields.push(("version", Json::str(version)));
        }
    }
    Json::object(fields)
}

fn short(digest: &str) -> String {
    digest.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_sources_file_round_trips_and_a_damaged_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert_eq!(Sources::read(&layout).unwrap(), None);
        let sources = Sources {
            namespace: "local".to_owned(),
            paths: vec![PathBuf::from("/a/skills"), PathBuf::from("/b/market")],
        };
        sources.write(&layout).unwrap();
        assert_eq!(Sources::read(&layout).unwrap(), Some(sources));
        std::fs::write(dir.path().join(SOURCES_FILE), "{").unwrap();
        let err = Sources::read(&layout).unwrap_err().to_string();
        assert!(err.contains("catalog-sources.json is not JSON"), "{err}");
    }

    #[test]
    fn a_short_digest_is_twelve_characters() {
        assert_eq!(short(&"a".repeat(64)), "a".repeat(12));
    }
}
