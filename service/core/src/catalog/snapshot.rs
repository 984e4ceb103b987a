//! The in-memory catalog snapshot: entries, the digests a planning environment pins, and the
//! material and install descriptors built with the engine's own identity builders.
//!
//! Every digest here is a SHA-256 over ASCII canonical JSON (`check::cja_digest`) of a document
//! listed in spec/catalog.md, so two catalogs with the same content (whatever their key order,
//! whitespace or entry order) have the same digests, and any content change changes them.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use sha2::{Digest as _, Sha256};

use ctx_model::{
    InstallDescriptorInput, Json, MaterialDescriptorInput, catalog_capability_identity, cja_digest,
    install_plan_descriptor, material_descriptor, material_identity,
};

use super::error::{CatalogError, EntryRef};
use super::format::{CatalogEntry, CatalogVersion, parse_document, strs};
use super::projection::{
    PROJECTION_FILE_NAME, Projection, ProjectionEncodeError, ProjectionError, encode,
};
use super::retrieval::{Posting, RetrievalIndex, RetrievalSource};
use ctx_model::CapabilityKind;

/// Schema of the namespace document hashed into `catalog_namespace_digest`.
pub const NAMESPACE_SCHEMA: &str = "ctx.catalog-namespace-v1";
/// Schema of the material manifest (the reference's `AuthenticatedCatalogContentSource`).
pub const MATERIAL_MANIFEST_SCHEMA: &str = "ctx.material-manifest-v1";
/// Schema of the installation manifest.
pub const INSTALLATION_MANIFEST_SCHEMA: &str = "ctx.installation-manifest-v1";
/// Adapter version hashed into the retrieval snapshot digest; bump it when the scorer changes.
pub const RETRIEVAL_ADAPTER_VERSION: &str = "ctx.catalog-retrieval-v3";
/// Projection version of a candidate's source digest (spec/catalog.md §5.3).
pub const CATALOG_ENTRY_PROJECTION: &str = "ctx.catalog-entry.graph-v4";

/// How many parsed catalogs a process keeps (see [`Catalog::parse`]).
const PARSED_MAX: usize = 4;

/// The catalogs this process parsed last, by the SHA-256 of their text.
static PARSED: Mutex<Vec<([u8; 32], Catalog)>> = Mutex::new(Vec::new());

/// A validated catalog with its digests and descriptors. Cloning shares it.
///
/// A catalog is parsed from its JSON text (every entry in memory), or opened from its projection
/// (spec/catalog.md §8), where an entry is read from the file the first time it is asked for.
#[derive(Debug, Clone)]
pub struct Catalog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    version: CatalogVersion,
    namespace: String,
    entries: Entries,
    content_digest: String,
    namespace_digest: String,
    material_snapshot_digest: String,
    installation_snapshot_digest: String,
    retrieval_snapshot_digest: String,
    /// Descriptors by entry position: all set when parsed, set on first use when projected.
    material_descriptors: LazySlots<Option<Json>>,
    install_descriptors: LazySlots<Option<Json>>,
    /// The retrieval index of a parsed catalog (spec/catalog.md §5.2), built on first use; a
    /// projected catalog reads the one its projection holds.
    retrieval_index: OnceLock<RetrievalIndex>,
}

#[derive(Debug)]
enum Entries {
    Parsed {
        entries: Vec<CatalogEntry>,
        /// Position of each entry in the source document, so later errors name it as written.
        positions: Vec<usize>,
    },
    Projected {
        projection: Box<Projection>,
        /// Entries read so far, by position.
        read: LazySlots<Option<CatalogEntry>>,
        /// Every entry, read on the first call of [`Catalog::entries`].
        all: OnceLock<Vec<CatalogEntry>>,
    },
}

/// Slots of one value per entry, each set at most once, allocated a block of
/// [`LAZY_BLOCK_SLOTS`] at a time when a slot of the block is first set: opening a projected
/// catalog of 100,000 entries allocates one pointer per block, not three values per entry.
struct LazySlots<T> {
    blocks: Vec<OnceLock<Box<[OnceLock<T>]>>>,
    len: usize,
}

/// Slots per block of a [`LazySlots`].
const LAZY_BLOCK_SLOTS: usize = 256;

impl<T> LazySlots<T> {
    fn new(len: usize) -> LazySlots<T> {
        LazySlots {
            blocks: (0..len.div_ceil(LAZY_BLOCK_SLOTS))
                .map(|_| OnceLock::new())
                .collect(),
            len,
        }
    }

    /// Slot `i`, set by `init` if it is not set yet; `None` past the end.
    fn get_or_init(&self, i: usize, init: impl FnOnce() -> T) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let block = self
            .blocks
            .get(i / LAZY_BLOCK_SLOTS)?
            .get_or_init(|| (0..LAZY_BLOCK_SLOTS).map(|_| OnceLock::new()).collect());
        Some(block.get(i % LAZY_BLOCK_SLOTS)?.get_or_init(init))
    }
}

impl<T> std::fmt::Debug for LazySlots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazySlots").field("len", &self.len).finish()
    }
}

/// A catalog's retrieval index, wherever it lives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IndexSource<'a> {
    Owned(&'a RetrievalIndex),
    Projected(&'a Projection),
}

/// One of two iterators of the same item.
enum Either<A, B> {
    Left(A),
    Right(B),
}

impl<T, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Either<A, B> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            Either::Left(a) => a.next(),
            Either::Right(b) => b.next(),
        }
    }
}

impl RetrievalSource for IndexSource<'_> {
    fn entry_count(&self) -> u32 {
        match self {
            IndexSource::Owned(i) => i.entry_count(),
            IndexSource::Projected(p) => p.entry_count(),
        }
    }

    fn total_length(&self) -> u64 {
        match self {
            IndexSource::Owned(i) => i.total_length(),
            IndexSource::Projected(p) => p.total_length(),
        }
    }

    fn doc_length(&self, entry: u32) -> u32 {
        match self {
            IndexSource::Owned(i) => i.doc_length(entry),
            IndexSource::Projected(p) => p.doc_length(entry),
        }
    }

    fn postings(&self, term: &str) -> impl Iterator<Item = Posting> + '_ {
        match self {
            IndexSource::Owned(i) => Either::Left(i.postings(term)),
            IndexSource::Projected(p) => Either::Right(p.postings(term)),
        }
    }

    fn document_frequency(&self, term: &str) -> u32 {
        match self {
            IndexSource::Owned(i) => i.document_frequency(term),
            IndexSource::Projected(p) => p.document_frequency(term),
        }
    }

    fn id(&self, entry: u32) -> std::borrow::Cow<'_, str> {
        match self {
            IndexSource::Owned(i) => i.id(entry),
            IndexSource::Projected(p) => RetrievalSource::id(*p, entry),
        }
    }

    fn neighbours(&self, entry: u32) -> impl Iterator<Item = u32> + '_ {
        match self {
            IndexSource::Owned(i) => Either::Left(i.neighbours(entry)),
            IndexSource::Projected(p) => Either::Right(p.neighbours(entry)),
        }
    }
}

/// Two catalogs are equal when their content is: everything else (digests, descriptors) is
/// derived from it, and the content digest is a digest of the canonical document.
impl PartialEq for Catalog {
    fn eq(&self, other: &Catalog) -> bool {
        self.inner.version == other.inner.version
            && self.inner.namespace == other.inner.namespace
            && self.inner.content_digest == other.inner.content_digest
    }
}

impl Catalog {
    /// Parses and validates a `ctx.catalog-v1` text. Body files are not read here; see
    /// [`super::load_catalog`] for the loader that verifies them.
    pub fn parse(json_text: &str) -> Result<Catalog, CatalogError> {
        // Parsing is a pure function of the text, and one `ctx` process parses the same catalog
        // several times (the runtime's catalog, and every artifact the registry re-authenticates):
        // the last few results are kept by the text's SHA-256. The bytes are still read and the
        // bodies still verified by every caller; only the parse is shared.
        let key: [u8; 32] = Sha256::digest(json_text.as_bytes()).into();
        let mut parsed = PARSED.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, catalog)) = parsed.iter().find(|(k, _)| *k == key) {
            return Ok(catalog.clone());
        }
        let catalog = Catalog::parse_uncached(json_text)?;
        if parsed.len() == PARSED_MAX {
            parsed.remove(0);
        }
        parsed.push((key, catalog.clone()));
        Ok(catalog)
    }

    fn parse_uncached(json_text: &str) -> Result<Catalog, CatalogError> {
        let parsed = parse_document(json_text)?;
        let namespace_digest = namespace_digest(&parsed.namespace);
        let entries: Vec<&CatalogEntry> = parsed.entries.iter().map(|(_, e)| e).collect();
        let material_snapshot_digest = material_snapshot(&entries);
        let installation_snapshot_digest = installation_snapshot(&entries);
        let document = Json::object([
            (
                "capabilities",
                Json::Arr(entries.iter().map(|e| e.to_json()).collect()),
            ),
            ("namespace", Json::str(&parsed.namespace)),
            ("schema", Json::str(parsed.version.schema())),
        ]);
        let content_digest = cja_digest(&document);
        let retrieval_snapshot_digest = retrieval_snapshot(
            &content_digest,
            &material_snapshot_digest,
            &installation_snapshot_digest,
        );

        let material_descriptors = LazySlots::new(parsed.entries.len());
        let install_descriptors = LazySlots::new(parsed.entries.len());
        for (position, (index, entry)) in parsed.entries.iter().enumerate() {
            let fail = |field: &str, e: ctx_model::ProtocolError| CatalogError::Entry {
                entry: EntryRef {
                    index: *index,
                    id: Some(entry.id.clone()),
                },
                field: field.to_owned(),
                problem: format!("does not form a valid descriptor: {}", e.message()),
            };
            let material = describe_material(entry, &material_snapshot_digest)
                .map_err(|e| fail("material", e))?;
            let install = describe_install(entry, &installation_snapshot_digest)
                .map_err(|e| fail("install", e))?;
            material_descriptors.get_or_init(position, || Some(material));
            install_descriptors.get_or_init(position, || install);
        }
        let (positions, entries): (Vec<usize>, Vec<CatalogEntry>) =
            parsed.entries.into_iter().unzip();
        Ok(Catalog {
            inner: Arc::new(Inner {
                version: parsed.version,
                namespace: parsed.namespace,
                entries: Entries::Parsed { entries, positions },
                content_digest,
                namespace_digest,
                material_snapshot_digest,
                installation_snapshot_digest,
                retrieval_snapshot_digest,
                material_descriptors,
                install_descriptors,
                retrieval_index: OnceLock::new(),
            }),
        })
    }

    /// Opens the projection file of the directory `dir` (spec/catalog.md §8). Entries are read
    /// from it when first asked for; nothing else of the catalog directory is opened.
    pub fn open_projection(dir: &Path) -> Result<Catalog, ProjectionError> {
        let projection = Projection::read(dir, PROJECTION_FILE_NAME)?;
        let [content, material, installation] = projection.digests().clone();
        let namespace = projection.namespace().to_owned();
        let count = projection.len();
        Ok(Catalog {
            inner: Arc::new(Inner {
                version: projection.version(),
                namespace_digest: namespace_digest(&namespace),
                retrieval_snapshot_digest: retrieval_snapshot(&content, &material, &installation),
                namespace,
                content_digest: content,
                material_snapshot_digest: material,
                installation_snapshot_digest: installation,
                material_descriptors: LazySlots::new(count),
                install_descriptors: LazySlots::new(count),
                retrieval_index: OnceLock::new(),
                entries: Entries::Projected {
                    projection: Box::new(projection),
                    read: LazySlots::new(count),
                    all: OnceLock::new(),
                },
            }),
        })
    }

    /// The retrieval index of the entries (spec/catalog.md §5.2) as an owned index, built once
    /// per catalog (for a projected catalog, from every entry: the scorer reads
    /// [`Catalog::retrieval_source`] instead).
    pub(crate) fn retrieval_index(&self) -> &RetrievalIndex {
        self.inner
            .retrieval_index
            .get_or_init(|| RetrievalIndex::build(self.entries()))
    }

    /// What the scorer reads: a projected catalog's index in its file (spec/catalog.md §8.2),
    /// read in place, else the owned index.
    pub(crate) fn retrieval_source(&self) -> IndexSource<'_> {
        match &self.inner.entries {
            Entries::Projected { projection, .. } => IndexSource::Projected(projection),
            Entries::Parsed { .. } => IndexSource::Owned(self.retrieval_index()),
        }
    }

    /// Whether a prompt word stands for a term of this catalog's retrieval index: a name, kind,
    /// tag or label word, plural-folded (spec/catalog.md §5.4). Only such words are evidence.
    pub fn knows_word(&self, word: &str) -> bool {
        self.retrieval_source().knows_word(word)
    }

    /// The projection file's bytes of this catalog (spec/catalog.md §8.1), decoded again and
    /// checked against every invariant of §8.3 before they are handed out to be written.
    pub fn projection_bytes(&self) -> Result<Vec<u8>, ProjectionEncodeError> {
        let i = &self.inner;
        let bytes = encode(
            i.version,
            &i.namespace,
            [
                &i.content_digest,
                &i.material_snapshot_digest,
                &i.installation_snapshot_digest,
            ],
            self.entries(),
            self.retrieval_index(),
        )?;
        Projection::decode(bytes.clone())
            .and_then(|p| p.verify_all())
            .map_err(ProjectionEncodeError::Unverified)?;
        Ok(bytes)
    }

    /// Whether this catalog was opened from its projection rather than parsed.
    pub fn is_projected(&self) -> bool {
        matches!(self.inner.entries, Entries::Projected { .. })
    }

    /// How many entries the catalog holds.
    pub fn len(&self) -> usize {
        match &self.inner.entries {
            Entries::Parsed { entries, .. } => entries.len(),
            Entries::Projected { projection, .. } => projection.len(),
        }
    }

    /// Whether the catalog holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Position of the entry `capability_id` in id order (in [`Catalog::entries`]).
    pub(crate) fn position_of(&self, capability_id: &str) -> Option<usize> {
        self.position(capability_id)
    }

    /// Position of the entry `capability_id` in id order.
    fn position(&self, capability_id: &str) -> Option<usize> {
        match &self.inner.entries {
            Entries::Parsed { entries, .. } => entries
                .binary_search_by(|e| e.id.as_str().cmp(capability_id))
                .ok(),
            Entries::Projected { projection, .. } => projection.position(capability_id),
        }
    }

    /// The entry at position `i`. A projected entry whose archive no longer validates is
    /// treated as absent: the file was checked whole when it was opened, so this means it
    /// changed in memory, which an assertion elsewhere would have caught.
    fn entry_at(&self, i: usize) -> Option<&CatalogEntry> {
        match &self.inner.entries {
            Entries::Parsed { entries, .. } => entries.get(i),
            Entries::Projected {
                projection, read, ..
            } => read.get_or_init(i, || projection.entry(i).ok())?.as_ref(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// Entries sorted by capability id. A projected catalog reads every entry on the first call;
    /// planning never calls this (spec/catalog.md §8.4).
    pub fn entries(&self) -> &[CatalogEntry] {
        match &self.inner.entries {
            Entries::Parsed { entries, .. } => entries,
            Entries::Projected {
                projection, all, ..
            } => all.get_or_init(|| {
                (0..projection.len())
                    .filter_map(|i| projection.entry(i).ok())
                    .collect()
            }),
        }
    }

    /// How errors name the entry at `i` of [`Catalog::entries`].
    pub(crate) fn entry_ref(&self, i: usize) -> EntryRef {
        let index = match &self.inner.entries {
            Entries::Parsed { positions, .. } => positions.get(i).copied().unwrap_or(i),
            Entries::Projected { .. } => i,
        };
        EntryRef {
            index,
            id: self.entry_at(i).map(|e| e.id.clone()),
        }
    }

    pub fn entry(&self, capability_id: &str) -> Option<&CatalogEntry> {
        self.entry_at(self.position(capability_id)?)
    }

    /// The canonical document: entries sorted by id, tags and links sorted, absent options
    /// omitted. Parsing its canonical text yields an equal catalog.
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "capabilities",
                Json::Arr(self.entries().iter().map(CatalogEntry::to_json).collect()),
            ),
            ("namespace", Json::str(&self.inner.namespace)),
            ("schema", Json::str(self.inner.version.schema())),
        ])
    }

    /// `H(CJA(canonical document))`.
    pub fn content_digest(&self) -> &str {
        &self.inner.content_digest
    }

    /// `H(CJA({namespace, schema: "ctx.catalog-namespace-v1"}))`: the namespace digest of every
    /// catalog capability identity.
    pub fn namespace_digest(&self) -> &str {
        &self.inner.namespace_digest
    }

    /// The reference's material manifest digest over the loadable bodies; the provenance of
    /// every material descriptor.
    pub fn material_snapshot_digest(&self) -> &str {
        &self.inner.material_snapshot_digest
    }

    /// Digest of the installation manifest; the provenance of every install descriptor.
    pub fn installation_snapshot_digest(&self) -> &str {
        &self.inner.installation_snapshot_digest
    }

    /// The catalog snapshot digest a plan pins: changes whenever the content, the scorer
    /// version or the candidate projection changes.
    pub fn retrieval_snapshot_digest(&self) -> &str {
        &self.inner.retrieval_snapshot_digest
    }

    /// The material descriptor of a capability, as the reference material port describes it:
    /// v2 `load` for a skill with material, v1 `manual` otherwise.
    pub fn material_descriptor(&self, capability_id: &str) -> Option<&Json> {
        let i = self.position(capability_id)?;
        self.inner
            .material_descriptors
            .get_or_init(i, || {
                let entry = self.entry_at(i)?;
                describe_material(entry, &self.inner.material_snapshot_digest).ok()
            })?
            .as_ref()
    }

    /// The install plan descriptor (schema v2, binding the result material) of an installable
    /// capability; `None` for an unknown id or an entry without `install`.
    pub fn install_descriptor(&self, capability_id: &str) -> Option<&Json> {
        let i = self.position(capability_id)?;
        self.inner
            .install_descriptors
            .get_or_init(i, || {
                let entry = self.entry_at(i)?;
                describe_install(entry, &self.inner.installation_snapshot_digest)
                    .ok()
                    .flatten()
            })?
            .as_ref()
    }

    /// The catalog capability identity document of a capability in this catalog's namespace.
    pub fn catalog_identity(&self, capability_id: &str) -> Option<Json> {
        let entry = self.entry(capability_id)?;
        catalog_capability_identity(&entry.id, entry.kind.as_str(), &self.inner.namespace_digest)
            .ok()
    }

    /// The material identity an install of this capability leaves behind, or that loading it
    /// exposes.
    pub fn material_identity(&self, capability_id: &str) -> Option<Json> {
        let entry = self.entry(capability_id)?;
        let body = entry
            .material
            .as_ref()
            .map(|m| &m.body)
            .or(entry.install.as_ref().map(|i| &i.result))?;
        material_identity(
            &entry.id,
            entry.kind.as_str(),
            &body.sha256,
            body.size_bytes,
        )
        .ok()
    }
}

fn namespace_digest(namespace: &str) -> String {
    cja_digest(&Json::object([
        ("namespace", Json::str(namespace)),
        ("schema", Json::str(NAMESPACE_SCHEMA)),
    ]))
}

/// The retrieval snapshot digest: a function of the content and the scorer and projection
/// versions, so a scorer change moves every plan's pin without a new ingest.
fn retrieval_snapshot(content: &str, material: &str, installation: &str) -> String {
    cja_digest(&Json::object([
        ("adapter_version", Json::str(RETRIEVAL_ADAPTER_VERSION)),
        (
            "allowed_entity_types",
            Json::Arr(
                CapabilityKind::ALL
                    .iter()
                    .map(|k| Json::str(k.as_str()))
                    .collect(),
            ),
        ),
        ("catalog_content_digest", Json::str(content)),
        ("installation_snapshot_digest", Json::str(installation)),
        ("material_snapshot_digest", Json::str(material)),
        ("projection_version", Json::str(CATALOG_ENTRY_PROJECTION)),
    ]))
}

fn material_snapshot(entries: &[&CatalogEntry]) -> String {
    let mut records: Vec<(&str, &str, Json)> = entries
        .iter()
        .filter_map(|e| {
            let m = e.material.as_ref()?;
            Some((
                e.id.as_str(),
                m.body.path.as_str(),
                Json::object([
                    ("capability_id", Json::str(&e.id)),
                    ("path", Json::str(&m.body.path)),
                    ("sha256", Json::str(&m.body.sha256)),
                    ("size_bytes", Json::Int(m.body.size_bytes)),
                ]),
            ))
        })
        .collect();
    records.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    cja_digest(&Json::object([
        (
            "records",
            Json::Arr(records.into_iter().map(|r| r.2).collect()),
        ),
        ("schema", Json::str(MATERIAL_MANIFEST_SCHEMA)),
    ]))
}

fn installation_snapshot(entries: &[&CatalogEntry]) -> String {
    // Entries arrive sorted by id and ids are unique, so the records are in canonical order.
    let records: Vec<Json> = entries
        .iter()
        .filter_map(|e| {
            let i = e.install.as_ref()?;
            Some(Json::object([
                ("capability_id", Json::str(&e.id)),
                (
                    "credential_requirement",
                    Json::Bool(i.credential_requirement),
                ),
                ("installer_id", Json::str(&i.installer_id)),
                ("kind", Json::str(e.kind.as_str())),
                ("permission_expansion", Json::Bool(i.permission_expansion)),
                ("plan_digest", Json::str(&i.plan_digest)),
                ("result_path", Json::str(&i.result.path)),
                ("result_sha256", Json::str(&i.result.sha256)),
                ("result_size_bytes", Json::Int(i.result.size_bytes)),
            ]))
        })
        .collect();
    cja_digest(&Json::object([
        ("records", Json::Arr(records)),
        ("schema", Json::str(INSTALLATION_MANIFEST_SCHEMA)),
    ]))
}

fn describe_material(
    entry: &CatalogEntry,
    snapshot: &str,
) -> Result<Json, ctx_model::ProtocolError> {
    let kind = entry.kind.as_str();
    match &entry.material {
        Some(m) => {
            let identity = material_identity(&entry.id, kind, &m.body.sha256, m.body.size_bytes)?;
            material_descriptor(&MaterialDescriptorInput {
                capability_id: &entry.id,
                kind,
                actionability: "load",
                content_sha256: Some(&m.body.sha256),
                content_bytes: m.body.size_bytes,
                estimated_tokens: m.estimated_tokens,
                provenance_digest: snapshot,
                material_identity_digest: identity.get_str("identity_digest"),
            })
        }
        None => material_descriptor(&MaterialDescriptorInput {
            capability_id: &entry.id,
            kind,
            actionability: "manual",
            content_sha256: None,
            content_bytes: 0,
            estimated_tokens: 0,
            provenance_digest: snapshot,
            material_identity_digest: None,
        }),
    }
}

fn describe_install(
    entry: &CatalogEntry,
    snapshot: &str,
) -> Result<Option<Json>, ctx_model::ProtocolError> {
    let Some(i) = &entry.install else {
        return Ok(None);
    };
    let kind = entry.kind.as_str();
    let result = material_identity(&entry.id, kind, &i.result.sha256, i.result.size_bytes)?;
    install_plan_descriptor(&InstallDescriptorInput {
        capability_id: &entry.id,
        kind,
        installer_id: &i.installer_id,
        plan_digest: &i.plan_digest,
        provenance_digest: snapshot,
        permission_expansion: i.permission_expansion,
        credential_requirement: i.credential_requirement,
        result_material_identity_digest: result.get_str("identity_digest"),
    })
    .map(Some)
}

/// The tags of an entry as a JSON array (used by the candidate source digest).
pub(crate) fn tags_json(entry: &CatalogEntry) -> Json {
    strs(&entry.tags)
}
