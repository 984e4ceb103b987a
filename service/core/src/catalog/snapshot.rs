//! The in-memory catalog snapshot: entries, the digests a planning environment pins, and the
//! material and install descriptors built with the engine's own identity builders.
//!
//! Every digest here is a SHA-256 over ASCII canonical JSON (`check::cja_digest`) of a document
//! listed in spec/catalog.md, so two catalogs with the same content (whatever their key order,
//! whitespace or entry order) have the same digests, and any content change changes them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use sha2::{Digest as _, Sha256};

use ctx_model::{
    InstallDescriptorInput, Json, MaterialDescriptorInput, catalog_capability_identity, cja_digest,
    install_plan_descriptor, material_descriptor, material_identity,
};

use super::error::{CatalogError, EntryRef};
use super::format::{CatalogEntry, CatalogVersion, parse_document, strs};
use super::retrieval::RetrievalIndex;
use ctx_model::CapabilityKind;

/// Schema of the namespace document hashed into `catalog_namespace_digest`.
pub const NAMESPACE_SCHEMA: &str = "ctx.catalog-namespace-v1";
/// Schema of the material manifest (the reference's `AuthenticatedCatalogContentSource`).
pub const MATERIAL_MANIFEST_SCHEMA: &str = "ctx.material-manifest-v1";
/// Schema of the installation manifest.
pub const INSTALLATION_MANIFEST_SCHEMA: &str = "ctx.installation-manifest-v1";
/// Adapter version hashed into the retrieval snapshot digest; bump it when the scorer changes.
pub const RETRIEVAL_ADAPTER_VERSION: &str = "ctx.catalog-retrieval-v2";
/// Projection version of a candidate's source digest (spec/catalog.md §5.3).
pub const CATALOG_ENTRY_PROJECTION: &str = "ctx.catalog-entry.graph-v4";

/// A validated catalog with its digests and descriptors.
/// How many parsed catalogs a process keeps (see [`Catalog::parse`]).
const PARSED_MAX: usize = 4;

/// The catalogs this process parsed last, by the SHA-256 of their text.
static PARSED: Mutex<Vec<([u8; 32], Catalog)>> = Mutex::new(Vec::new());

#[derive(Debug, Clone)]
pub struct Catalog {
    version: CatalogVersion,
    namespace: String,
    entries: Vec<CatalogEntry>,
    /// Position of each entry in the source document, so later errors name it as written.
    positions: Vec<usize>,
    by_id: BTreeMap<String, usize>,
    content_digest: String,
    namespace_digest: String,
    material_snapshot_digest: String,
    installation_snapshot_digest: String,
    retrieval_snapshot_digest: String,
    material_descriptors: Vec<Json>,
    install_descriptors: Vec<Option<Json>>,
    /// The retrieval index (spec/catalog.md §5.2), built on first use and shared by clones.
    retrieval_index: Arc<OnceLock<RetrievalIndex>>,
}

/// Two catalogs are equal when their content is: everything else (digests, descriptors) is
/// derived from it, and source positions only serve error messages.
impl PartialEq for Catalog {
    fn eq(&self, other: &Catalog) -> bool {
        self.version == other.version
            && self.namespace == other.namespace
            && self.entries == other.entries
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
        let namespace_digest = cja_digest(&Json::object([
            ("namespace", Json::str(&parsed.namespace)),
            ("schema", Json::str(NAMESPACE_SCHEMA)),
        ]));
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
        let retrieval_snapshot_digest = cja_digest(&Json::object([
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
            ("catalog_content_digest", Json::str(&content_digest)),
            (
                "installation_snapshot_digest",
                Json::str(&installation_snapshot_digest),
            ),
            (
                "material_snapshot_digest",
                Json::str(&material_snapshot_digest),
            ),
            ("projection_version", Json::str(CATALOG_ENTRY_PROJECTION)),
        ]));

        let mut material_descriptors = Vec::with_capacity(entries.len());
        let mut install_descriptors = Vec::with_capacity(entries.len());
        for (index, entry) in &parsed.entries {
            let fail = |field: &str, e: ctx_model::ProtocolError| CatalogError::Entry {
                entry: EntryRef {
                    index: *index,
                    id: Some(entry.id.clone()),
                },
                field: field.to_owned(),
                problem: format!("does not form a valid descriptor: {}", e.message()),
            };
            material_descriptors.push(
                describe_material(entry, &material_snapshot_digest)
                    .map_err(|e| fail("material", e))?,
            );
            install_descriptors.push(
                describe_install(entry, &installation_snapshot_digest)
                    .map_err(|e| fail("install", e))?,
            );
        }
        let (positions, entries): (Vec<usize>, Vec<CatalogEntry>) =
            parsed.entries.into_iter().unzip();
        let by_id = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id.clone(), i))
            .collect();
        Ok(Catalog {
            version: parsed.version,
            namespace: parsed.namespace,
            entries,
            positions,
            by_id,
            content_digest,
            namespace_digest,
            material_snapshot_digest,
            installation_snapshot_digest,
            retrieval_snapshot_digest,
            material_descriptors,
            install_descriptors,
            retrieval_index: Arc::new(OnceLock::new()),
        })
    }

    /// The retrieval index of the entries (spec/catalog.md §5.2), built once per catalog.
    pub(crate) fn retrieval_index(&self) -> &RetrievalIndex {
        self.retrieval_index
            .get_or_init(|| RetrievalIndex::build(&self.entries))
    }

    /// Whether a prompt word stands for a term of this catalog's retrieval index: a name, kind,
    /// tag or label word, plural-folded (spec/catalog.md §5.4). Only such words are evidence.
    pub fn knows_word(&self, word: &str) -> bool {
        self.retrieval_index().knows_word(word)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Entries sorted by capability id.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// How errors name the entry at `i` of [`Catalog::entries`].
    pub(crate) fn entry_ref(&self, i: usize) -> EntryRef {
        EntryRef {
            index: self.positions.get(i).copied().unwrap_or(i),
            id: self.entries.get(i).map(|e| e.id.clone()),
        }
    }

    pub fn entry(&self, capability_id: &str) -> Option<&CatalogEntry> {
        self.by_id.get(capability_id).map(|&i| &self.entries[i])
    }

    /// The canonical document: entries sorted by id, tags and links sorted, absent options
    /// omitted. Parsing its canonical text yields an equal catalog.
    pub fn to_json(&self) -> Json {
        Json::object([
            (
                "capabilities",
                Json::Arr(self.entries.iter().map(CatalogEntry::to_json).collect()),
            ),
            ("namespace", Json::str(&self.namespace)),
            ("schema", Json::str(self.version.schema())),
        ])
    }

    /// `H(CJA(canonical document))`.
    pub fn content_digest(&self) -> &str {
        &self.content_digest
    }

    /// `H(CJA({namespace, schema: "ctx.catalog-namespace-v1"}))`: the namespace digest of every
    /// catalog capability identity.
    pub fn namespace_digest(&self) -> &str {
        &self.namespace_digest
    }

    /// The reference's material manifest digest over the loadable bodies; the provenance of
    /// every material descriptor.
    pub fn material_snapshot_digest(&self) -> &str {
        &self.material_snapshot_digest
    }

    /// Digest of the installation manifest; the provenance of every install descriptor.
    pub fn installation_snapshot_digest(&self) -> &str {
        &self.installation_snapshot_digest
    }

    /// The catalog snapshot digest a plan pins: changes whenever the content, the scorer
    /// version or the candidate projection changes.
    pub fn retrieval_snapshot_digest(&self) -> &str {
        &self.retrieval_snapshot_digest
    }

    /// The material descriptor of a capability, as the reference material port describes it:
    /// v2 `load` for a skill with material, v1 `manual` otherwise.
    pub fn material_descriptor(&self, capability_id: &str) -> Option<&Json> {
        self.by_id
            .get(capability_id)
            .and_then(|&i| self.material_descriptors.get(i))
    }

    /// The install plan descriptor (schema v2, binding the result material) of an installable
    /// capability; `None` for an unknown id or an entry without `install`.
    pub fn install_descriptor(&self, capability_id: &str) -> Option<&Json> {
        self.by_id
            .get(capability_id)
            .and_then(|&i| self.install_descriptors.get(i))
            .and_then(Option::as_ref)
    }

    /// The catalog capability identity document of a capability in this catalog's namespace.
    pub fn catalog_identity(&self, capability_id: &str) -> Option<Json> {
        let entry = self.entry(capability_id)?;
        catalog_capability_identity(&entry.id, entry.kind.as_str(), &self.namespace_digest).ok()
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
