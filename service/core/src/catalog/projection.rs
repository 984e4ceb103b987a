//! The catalog projection (spec/catalog.md §8): the ingested catalog as one immutable file that a
//! prompt hook reads without parsing the catalog JSON or opening a body file.
//!
//! The file is a fixed 64-byte little-endian header followed by an rkyv archive of
//! [`ProjectionV1`]. The header carries a magic, the format version, the archive's length and its
//! BLAKE3 digest, so a torn or altered file is refused before the archive is looked at; the
//! archive is then checked structurally (rkyv's bytecheck) and semantically (ids sorted and
//! unique, every kind known, every id `kind:name`, every digest a SHA-256 in hex) before any
//! entry is served. Entries are materialized one at a time, on first use, so a plan over a
//! catalog of 100,000 entries touches only the few entries it retrieves.
//!
//! The projection is derived data: it is built from a catalog whose every body was verified
//! (`ctx catalog ingest`, artifact publication), and it is rebuilt from the catalog JSON whenever
//! it is missing or refused.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use ctx_model::{CapabilityKind, is_sha};
use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::format::{BodyRef, CatalogEntry, CatalogVersion, InstallSpec, MaterialSpec, SourceSpec};
use super::open::{CatalogFileKind, open_catalog_file};
use super::retrieval::{Posting, RetrievalIndex, RetrievalSource};

/// File name of the projection inside a catalog directory or a registry artifact.
pub const PROJECTION_FILE_NAME: &str = "catalog.projection";
/// The projection format version this build writes and reads.
pub const PROJECTION_FORMAT_VERSION: u32 = 1;
/// Length of the fixed header, in bytes.
pub const PROJECTION_HEADER_BYTES: usize = 64;
/// Largest projection archive accepted, in bytes: a catalog's text limit plus room for the
/// archive's offsets (spec/catalog.md §8).
pub const PROJECTION_ARCHIVE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The magic at offset 0.
const MAGIC: [u8; 8] = *b"CTXCATP\0";
/// Sections of a format-1 body, in order (spec/catalog.md §8.2).
const SECTION_COUNT: usize = 14;
const SECTION_META: usize = 0;
const SECTION_ID_SLOTS: usize = 1;
const SECTION_ID_BYTES: usize = 2;
const SECTION_ENTRY_SLOTS: usize = 3;
const SECTION_ENTRY_ARCHIVES: usize = 4;
const SECTION_TAG_SLOTS: usize = 5;
const SECTION_TAG_BYTES: usize = 6;
/// The retrieval index (spec/catalog.md §5.2, §8.2): sorted terms as slots and bytes, each term's
/// posting range, postings as `(entry u32, weight u32)`, entry lengths, and the relation graph
/// as neighbour ranges and neighbours; every integer a little-endian `u32`.
const SECTION_TERM_SLOTS: usize = 7;
const SECTION_TERM_BYTES: usize = 8;
const SECTION_TERM_OFFSETS: usize = 9;
const SECTION_POSTINGS: usize = 10;
const SECTION_DOC_LENGTHS: usize = 11;
const SECTION_NEIGHBOUR_OFFSETS: usize = 12;
const SECTION_NEIGHBOURS: usize = 13;
/// Width of one posting, in bytes: entry position and weight.
const POSTING_BYTES: usize = 8;
/// Alignment of every section and every entry archive, in bytes: rkyv's archived integers need
/// at most 8, and the body itself starts 16-aligned in an aligned buffer.
const ALIGN_BYTES: usize = 16;
/// Width of one slot of a slot section, in bytes: `u32` offset and `u32` length.
const SLOT_BYTES: usize = 8;

/// Why a projection file was refused. Every refusal names the file; the caller falls back to the
/// catalog JSON, which is the source of truth.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionError {
    #[error("the catalog projection {} could not be read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the catalog projection {} is not valid: {problem}", path.display())]
    Invalid {
        path: PathBuf,
        problem: ProjectionProblem,
    },
}

/// What is wrong with a projection's bytes (spec/catalog.md §8.3); each sentence follows "the
/// catalog projection FILE is not valid: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionProblem {
    #[error("it is larger than {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    #[error("it has {size_bytes} bytes, fewer than its {PROJECTION_HEADER_BYTES}-byte header")]
    Short { size_bytes: usize },
    #[error("it does not start with the projection magic")]
    Magic,
    #[error("its format version is {found}; this build reads version {PROJECTION_FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("its header declares {declared} body bytes but {actual} follow")]
    Length { declared: u64, actual: usize },
    #[error("its reserved header bytes are not zero")]
    Reserved,
    #[error("its body does not match the BLAKE3 digest in its header")]
    Digest,
    #[error("its section {index} lies outside the body or is misaligned")]
    Section { index: usize },
    #[error("its {what} slots do not number its {count} entries")]
    SlotCount { what: &'static str, count: usize },
    #[error("its tag slots are not whole")]
    TagSlots,
    #[error("its catalog facts do not validate: {detail}")]
    Facts { detail: String },
    #[error("its catalog version {found} is neither 1 nor 2")]
    CatalogVersion { found: u8 },
    #[error("its {field} {value:?} is not a SHA-256 digest")]
    FactDigest { field: &'static str, value: String },
    #[error("its {what} {index} lies outside its section or is not UTF-8")]
    Slot { what: &'static str, index: usize },
    #[error("its {what} {value:?} is out of order or repeated")]
    Order { what: &'static str, value: String },
    #[error("its retrieval index is not whole: {what}")]
    Index { what: &'static str },
    #[error("its entry {index} does not validate: {detail}")]
    Entry { index: usize, detail: String },
    #[error("its entry {index} ({id:?}) disagrees with its id table")]
    EntryId { index: usize, id: String },
    #[error("its entry {id:?} has the unknown kind {kind}")]
    EntryKind { id: String, kind: u8 },
    #[error("its entry {id:?} is not named {kind}:{name}")]
    EntryName {
        id: String,
        kind: CapabilityKind,
        name: String,
    },
}

/// The archived per-catalog facts (section 0): fixed size whatever the entry count.
#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectionMeta {
    /// 1 for `ctx.catalog-v1`, 2 for `ctx.catalog-v2`.
    pub catalog_version: u8,
    pub namespace: String,
    pub content_digest: String,
    pub material_snapshot_digest: String,
    pub installation_snapshot_digest: String,
}

/// One archived entry (section 4): each entry is its own small archive, validated when it is
/// first used, so opening a projection costs the same at 50 entries as at 100,000.
#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectedEntry {
    pub id: String,
    /// Index into [`CapabilityKind::ALL`].
    pub kind: u8,
    pub name: String,
    pub label: String,
    pub tags: Vec<String>,
    pub related: Vec<String>,
    pub material: Option<ProjectedMaterial>,
    pub install: Option<ProjectedInstall>,
    pub source: Option<ProjectedSource>,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectedBody {
    pub path: String,
    pub sha256: String,
    pub size_bytes: i64,
    pub tree: bool,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectedMaterial {
    pub body: ProjectedBody,
    pub estimated_tokens: i64,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectedInstall {
    pub installer_id: String,
    pub plan_digest: String,
    pub permission_expansion: bool,
    pub credential_requirement: bool,
    pub result: ProjectedBody,
}

#[derive(rkyv::Archive, rkyv::Serialize, Debug)]
pub(crate) struct ProjectedSource {
    pub origin: String,
    pub version: Option<String>,
}

fn kind_index(kind: CapabilityKind) -> u8 {
    let index = CapabilityKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(0);
    u8::try_from(index).unwrap_or(0)
}

fn project_body(body: &BodyRef) -> ProjectedBody {
    ProjectedBody {
        path: body.path.clone(),
        sha256: body.sha256.clone(),
        size_bytes: body.size_bytes,
        tree: body.tree,
    }
}

fn project_entry(entry: &CatalogEntry) -> ProjectedEntry {
    ProjectedEntry {
        id: entry.id.clone(),
        kind: kind_index(entry.kind),
        name: entry.name.clone(),
        label: entry.label.clone(),
        tags: entry.tags.clone(),
        related: entry.related.clone(),
        material: entry.material.as_ref().map(|m| ProjectedMaterial {
            body: project_body(&m.body),
            estimated_tokens: m.estimated_tokens,
        }),
        install: entry.install.as_ref().map(|i| ProjectedInstall {
            installer_id: i.installer_id.clone(),
            plan_digest: i.plan_digest.clone(),
            permission_expansion: i.permission_expansion,
            credential_requirement: i.credential_requirement,
            result: project_body(&i.result),
        }),
        source: entry.source.as_ref().map(|s| ProjectedSource {
            origin: s.origin.clone(),
            version: s.version.clone(),
        }),
    }
}

fn version_number(version: CatalogVersion) -> u8 {
    match version {
        CatalogVersion::V1 => 1,
        CatalogVersion::V2 => 2,
    }
}

fn catalog_version(number: u8) -> Option<CatalogVersion> {
    match number {
        1 => Some(CatalogVersion::V1),
        2 => Some(CatalogVersion::V2),
        _ => None,
    }
}

/// Why encoding failed: a section or an offset outgrew its fixed width, or rkyv refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectionEncodeError {
    #[error("the catalog projection would exceed {limit} bytes in its {what}")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("the catalog projection could not be archived: {0}")]
    Archive(String),
}

fn pad(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(ALIGN_BYTES) {
        out.push(0);
    }
}

fn u32_of(value: usize, what: &'static str) -> Result<u32, ProjectionEncodeError> {
    u32::try_from(value).map_err(|_| ProjectionEncodeError::TooLarge {
        what,
        limit: u64::from(u32::MAX),
    })
}

/// A slot section and its byte section for a list of items.
fn slots<'a>(
    items: impl Iterator<Item = &'a [u8]>,
    what: &'static str,
) -> Result<(Vec<u8>, Vec<u8>), ProjectionEncodeError> {
    let (mut slots, mut bytes) = (Vec::new(), Vec::new());
    for item in items {
        slots.extend_from_slice(&u32_of(bytes.len(), what)?.to_le_bytes());
        slots.extend_from_slice(&u32_of(item.len(), what)?.to_le_bytes());
        bytes.extend_from_slice(item);
    }
    Ok((slots, bytes))
}

/// The projection file's bytes for a catalog whose entries are sorted by id: header, section
/// table, sections (spec/catalog.md §8.1, §8.2).
pub(crate) fn encode(
    version: CatalogVersion,
    namespace: &str,
    digests: [&str; 3],
    entries: &[CatalogEntry],
    index: &RetrievalIndex,
) -> Result<Vec<u8>, ProjectionEncodeError> {
    let archive_error = |e: rancor::Error| ProjectionEncodeError::Archive(e.to_string());
    let [content, material, installation] = digests;
    let meta = rkyv::to_bytes::<rancor::Error>(&ProjectionMeta {
        catalog_version: version_number(version),
        namespace: namespace.to_owned(),
        content_digest: content.to_owned(),
        material_snapshot_digest: material.to_owned(),
        installation_snapshot_digest: installation.to_owned(),
    })
    .map_err(archive_error)?;
    let (id_slots, id_bytes) = slots(entries.iter().map(|e| e.id.as_bytes()), "entry ids")?;
    let mut archives: Vec<u8> = Vec::new();
    let mut entry_slots: Vec<u8> = Vec::new();
    for entry in entries {
        pad(&mut archives);
        let archived =
            rkyv::to_bytes::<rancor::Error>(&project_entry(entry)).map_err(archive_error)?;
        entry_slots.extend_from_slice(&u32_of(archives.len(), "entry archives")?.to_le_bytes());
        entry_slots.extend_from_slice(&u32_of(archived.len(), "entry archives")?.to_le_bytes());
        archives.extend_from_slice(&archived);
    }
    let mut tags: Vec<&str> = entries
        .iter()
        .flat_map(|e| e.tags.iter().map(String::as_str))
        .collect();
    tags.sort_unstable();
    tags.dedup();
    let (tag_slots, tag_bytes) = slots(tags.iter().map(|t| t.as_bytes()), "tags")?;
    let parts = index.parts();
    let (term_slots, term_bytes) = slots(parts.terms.iter().map(|t| t.as_bytes()), "terms")?;
    let words =
        |values: &[u32]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let postings: Vec<u8> = parts
        .postings
        .iter()
        .flat_map(|p| [p.entry.to_le_bytes(), p.weight.to_le_bytes()])
        .flatten()
        .collect();
    let (term_offsets, doc_lengths) = (words(parts.term_offsets), words(parts.doc_lengths));
    let (neighbour_offsets, neighbours) = (words(parts.neighbour_offsets), words(parts.neighbours));
    let sections: [&[u8]; SECTION_COUNT] = [
        &meta,
        &id_slots,
        &id_bytes,
        &entry_slots,
        &archives,
        &tag_slots,
        &tag_bytes,
        &term_slots,
        &term_bytes,
        &term_offsets,
        &postings,
        &doc_lengths,
        &neighbour_offsets,
        &neighbours,
    ];
    let mut body = vec![0u8; SECTION_COUNT * 16];
    pad(&mut body);
    for (i, section) in sections.iter().enumerate() {
        pad(&mut body);
        let (offset, length) = (body.len() as u64, section.len() as u64);
        body[i * 16..i * 16 + 8].copy_from_slice(&offset.to_le_bytes());
        body[i * 16 + 8..i * 16 + 16].copy_from_slice(&length.to_le_bytes());
        body.extend_from_slice(section);
    }
    let count = u32_of(entries.len(), "entry count")?;
    let mut out = Vec::with_capacity(PROJECTION_HEADER_BYTES + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROJECTION_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(&body).as_bytes());
    out.resize(PROJECTION_HEADER_BYTES, 0);
    out.extend_from_slice(&body);
    Ok(out)
}

/// A validated projection, owned and aligned for zero-copy reads. Per-catalog facts are checked
/// when the file is decoded; an entry's archive is checked each time it is read.
pub(crate) struct Projection {
    /// The whole file; the body starts at [`PROJECTION_HEADER_BYTES`], which is 16-aligned.
    bytes: AlignedVec<ALIGN_BYTES>,
    /// `(start, end)` of every section, as offsets into `bytes`, checked against its length.
    sections: [(usize, usize); SECTION_COUNT],
    count: usize,
    version: CatalogVersion,
    namespace: String,
    digests: [String; 3],
    /// Sum of the entries' retrieval lengths, computed when the file is decoded.
    total_length: u64,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("bytes", &self.bytes.len())
            .field("entries", &self.count)
            .finish()
    }
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(word))
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let word: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(word))
}

impl Projection {
    /// Reads and validates the projection file `relative` of the directory `dir`, opened under
    /// the catalog file rules (spec/catalog.md §3).
    pub(crate) fn read(dir: &Path, relative: &str) -> Result<Projection, ProjectionError> {
        let path = dir.join(relative);
        let io = |source| ProjectionError::Io {
            path: path.clone(),
            source,
        };
        let mut file = open_catalog_file(dir, relative, CatalogFileKind::Catalog)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let limit = PROJECTION_ARCHIVE_MAX_BYTES + PROJECTION_HEADER_BYTES as u64;
        let mut bytes = AlignedVec::<ALIGN_BYTES>::new();
        let read = bytes
            .extend_from_reader(&mut (&mut file).take(limit + 1))
            .map_err(io)?;
        if read as u64 > limit {
            return Err(ProjectionError::Invalid {
                path,
                problem: ProjectionProblem::TooLarge { limit_bytes: limit },
            });
        }
        Projection::decode(bytes).map_err(|problem| ProjectionError::Invalid {
            path: path.clone(),
            problem,
        })
    }

    /// Validates a projection file's bytes: header, digest, section table, then the per-catalog
    /// facts (invariants P1–P5 of spec/catalog.md §8.3).
    pub(crate) fn decode(bytes: AlignedVec<ALIGN_BYTES>) -> Result<Projection, ProjectionProblem> {
        let Some((header, body)) = bytes.split_at_checked(PROJECTION_HEADER_BYTES) else {
            return Err(ProjectionProblem::Short {
                size_bytes: bytes.len(),
            });
        };
        if header[..8] != MAGIC {
            return Err(ProjectionProblem::Magic);
        }
        let version = le_u32(header, 8).unwrap_or(0);
        if version != PROJECTION_FORMAT_VERSION {
            return Err(ProjectionProblem::Version { found: version });
        }
        let count = le_u32(header, 12).unwrap_or(0) as usize;
        let length = le_u64(header, 16).unwrap_or(0);
        if length != body.len() as u64 {
            return Err(ProjectionProblem::Length {
                declared: length,
                actual: body.len(),
            });
        }
        if header[56..].iter().any(|b| *b != 0) {
            return Err(ProjectionProblem::Reserved);
        }
        if blake3::hash(body).as_bytes()[..] != header[24..56] {
            return Err(ProjectionProblem::Digest);
        }
        let mut sections = [(0usize, 0usize); SECTION_COUNT];
        for (i, section) in sections.iter_mut().enumerate() {
            let offset = le_u64(body, i * 16).unwrap_or(u64::MAX);
            let len = le_u64(body, i * 16 + 8).unwrap_or(u64::MAX);
            let end = offset.saturating_add(len);
            if end > body.len() as u64
                || !offset.is_multiple_of(ALIGN_BYTES as u64)
                || offset < (SECTION_COUNT * 16) as u64
            {
                return Err(ProjectionProblem::Section { index: i });
            }
            // Both fit in usize: they are at most the body's length.
            *section = (
                PROJECTION_HEADER_BYTES + offset as usize,
                PROJECTION_HEADER_BYTES + end as usize,
            );
        }
        for (slots, what) in [(SECTION_ID_SLOTS, "id"), (SECTION_ENTRY_SLOTS, "entry")] {
            let (start, end) = sections[slots];
            if end - start != count * SLOT_BYTES {
                return Err(ProjectionProblem::SlotCount { what, count });
            }
        }
        let (start, end) = sections[SECTION_TAG_SLOTS];
        if !(end - start).is_multiple_of(SLOT_BYTES) {
            return Err(ProjectionProblem::TagSlots);
        }
        let (start, end) = sections[SECTION_META];
        let meta = rkyv::access::<ArchivedProjectionMeta, rancor::Error>(&bytes[start..end])
            .map_err(|e| ProjectionProblem::Facts {
                detail: e.to_string(),
            })?;
        let Some(catalog) = catalog_version(meta.catalog_version) else {
            return Err(ProjectionProblem::CatalogVersion {
                found: meta.catalog_version,
            });
        };
        for (field, value) in [
            ("content_digest", meta.content_digest.as_str()),
            (
                "material_snapshot_digest",
                meta.material_snapshot_digest.as_str(),
            ),
            (
                "installation_snapshot_digest",
                meta.installation_snapshot_digest.as_str(),
            ),
        ] {
            if !is_sha(value) {
                return Err(ProjectionProblem::FactDigest {
                    field,
                    value: value.to_owned(),
                });
            }
        }
        let namespace = meta.namespace.as_str().to_owned();
        let digests = [
            meta.content_digest.as_str().to_owned(),
            meta.material_snapshot_digest.as_str().to_owned(),
            meta.installation_snapshot_digest.as_str().to_owned(),
        ];
        let mut projection = Projection {
            bytes,
            sections,
            count,
            version: catalog,
            namespace,
            digests,
            total_length: 0,
        };
        // Every id and tag slot must name bytes of its section that are UTF-8, in strictly
        // increasing order; binary search relies on it.
        for (slots, bytes, what, n) in [
            (SECTION_ID_SLOTS, SECTION_ID_BYTES, "id", count),
            (
                SECTION_TAG_SLOTS,
                SECTION_TAG_BYTES,
                "tag",
                projection.tag_count(),
            ),
            (
                SECTION_TERM_SLOTS,
                SECTION_TERM_BYTES,
                "term",
                projection.term_count(),
            ),
        ] {
            let mut previous: Option<&str> = None;
            for i in 0..n {
                let Some(s) = projection.slot_str(slots, bytes, i) else {
                    return Err(ProjectionProblem::Slot { what, index: i });
                };
                if previous.is_some_and(|p| p >= s) {
                    return Err(ProjectionProblem::Order {
                        what,
                        value: s.to_owned(),
                    });
                }
                previous = Some(s);
            }
        }
        projection.total_length = projection.check_index()?;
        Ok(projection)
    }

    /// Checks the retrieval index sections (invariant P7 of spec/catalog.md §8.3) and returns
    /// the sum of the entry lengths: every range table has one more element than what it
    /// indexes, starts at 0, never decreases and ends at the length of what it ranges over;
    /// every posting and neighbour names an entry; every weight is positive.
    fn check_index(&self) -> Result<u64, ProjectionProblem> {
        let bad = |what| ProjectionProblem::Index { what };
        for (section, width, what) in [
            (SECTION_TERM_SLOTS, SLOT_BYTES, "term slots"),
            (SECTION_TERM_OFFSETS, 4, "term offsets"),
            (SECTION_POSTINGS, POSTING_BYTES, "postings"),
            (SECTION_DOC_LENGTHS, 4, "entry lengths"),
            (SECTION_NEIGHBOUR_OFFSETS, 4, "neighbour offsets"),
            (SECTION_NEIGHBOURS, 4, "neighbours"),
        ] {
            if !self.section(section).len().is_multiple_of(width) {
                return Err(bad(what));
            }
        }
        let postings = self.section(SECTION_POSTINGS).len() / POSTING_BYTES;
        let neighbours = self.section(SECTION_NEIGHBOURS).len() / 4;
        for (offsets, items, ranges, what) in [
            (
                SECTION_TERM_OFFSETS,
                postings,
                self.term_count(),
                "term offsets",
            ),
            (
                SECTION_NEIGHBOUR_OFFSETS,
                neighbours,
                self.count,
                "neighbour offsets",
            ),
        ] {
            let table = self.section(offsets);
            if table.len() / 4 != ranges + 1 {
                return Err(bad(what));
            }
            let mut previous = 0u32;
            for (i, word) in table.chunks_exact(4).enumerate() {
                let v = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
                if (i == 0 && v != 0) || v < previous {
                    return Err(bad(what));
                }
                previous = v;
            }
            if previous as usize != items {
                return Err(bad(what));
            }
        }
        for posting in self.section(SECTION_POSTINGS).chunks_exact(POSTING_BYTES) {
            let entry = u32::from_le_bytes([posting[0], posting[1], posting[2], posting[3]]);
            let weight = u32::from_le_bytes([posting[4], posting[5], posting[6], posting[7]]);
            if entry as usize >= self.count || weight == 0 {
                return Err(bad("postings"));
            }
        }
        for word in self.section(SECTION_NEIGHBOURS).chunks_exact(4) {
            if u32::from_le_bytes([word[0], word[1], word[2], word[3]]) as usize >= self.count {
                return Err(bad("neighbours"));
            }
        }
        let lengths = self.section(SECTION_DOC_LENGTHS);
        if lengths.len() / 4 != self.count {
            return Err(bad("entry lengths"));
        }
        Ok(lengths
            .chunks_exact(4)
            .map(|w| u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .sum())
    }

    fn term_count(&self) -> usize {
        self.section(SECTION_TERM_SLOTS).len() / SLOT_BYTES
    }

    /// The `i`th little-endian `u32` of a word section.
    fn word(&self, section: usize, i: usize) -> u32 {
        le_u32(self.section(section), i.saturating_mul(4)).unwrap_or(0)
    }

    /// Position of `term` among the sorted terms.
    fn term_position(&self, term: &str) -> Option<usize> {
        let (mut low, mut high) = (0usize, self.term_count());
        while low < high {
            let mid = low + (high - low) / 2;
            match self
                .slot_str(SECTION_TERM_SLOTS, SECTION_TERM_BYTES, mid)?
                .cmp(term)
            {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// The posting range of `term`, as posting indices.
    fn posting_range(&self, term: &str) -> std::ops::Range<usize> {
        self.term_position(term).map_or(0..0, |i| {
            let start = self.word(SECTION_TERM_OFFSETS, i) as usize;
            let end = self.word(SECTION_TERM_OFFSETS, i + 1) as usize;
            start..end
        })
    }

    fn section(&self, index: usize) -> &[u8] {
        let (start, end) = self.sections[index];
        &self.bytes[start..end]
    }

    /// The `i`th `(offset, length)` slot of a slot section, as a range of its byte section.
    fn slot(&self, slots: usize, bytes: usize, i: usize) -> Option<&[u8]> {
        let table = self.section(slots);
        let at = i.checked_mul(SLOT_BYTES)?;
        let offset = le_u32(table, at)? as usize;
        let len = le_u32(table, at + 4)? as usize;
        self.section(bytes).get(offset..offset.checked_add(len)?)
    }

    fn slot_str(&self, slots: usize, bytes: usize, i: usize) -> Option<&str> {
        std::str::from_utf8(self.slot(slots, bytes, i)?).ok()
    }

    fn tag_count(&self) -> usize {
        self.section(SECTION_TAG_SLOTS).len() / SLOT_BYTES
    }

    pub(crate) fn version(&self) -> CatalogVersion {
        self.version
    }

    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `[content, material snapshot, installation snapshot]` digests.
    pub(crate) fn digests(&self) -> &[String; 3] {
        &self.digests
    }

    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The id at position `i` (ids were checked to be UTF-8 and sorted when decoded).
    pub(crate) fn id(&self, i: usize) -> Option<&str> {
        self.slot_str(SECTION_ID_SLOTS, SECTION_ID_BYTES, i)
    }

    /// Position of the entry `id`, by binary search over the sorted ids.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        let (mut low, mut high) = (0usize, self.count);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.id(mid)?.cmp(id) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Whether `tag` is a tag of some entry.
    pub(crate) fn has_tag(&self, tag: &str) -> bool {
        let (mut low, mut high) = (0usize, self.tag_count());
        while low < high {
            let mid = low + (high - low) / 2;
            let Some(t) = self.slot_str(SECTION_TAG_SLOTS, SECTION_TAG_BYTES, mid) else {
                return false;
            };
            match t.cmp(tag) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }

    /// The entry at position `i` as the parser produced it, after its archive validates and
    /// agrees with the id table (invariant P6).
    pub(crate) fn entry(&self, i: usize) -> Result<CatalogEntry, ProjectionProblem> {
        let archive = self
            .slot(SECTION_ENTRY_SLOTS, SECTION_ENTRY_ARCHIVES, i)
            .ok_or(ProjectionProblem::Slot {
                what: "entry",
                index: i,
            })?;
        let archived =
            rkyv::access::<ArchivedProjectedEntry, rancor::Error>(archive).map_err(|e| {
                ProjectionProblem::Entry {
                    index: i,
                    detail: e.to_string(),
                }
            })?;
        let id = archived.id.as_str();
        if self.id(i) != Some(id) {
            return Err(ProjectionProblem::EntryId {
                index: i,
                id: id.to_owned(),
            });
        }
        let Some(kind) = CapabilityKind::ALL.get(usize::from(archived.kind)) else {
            return Err(ProjectionProblem::EntryKind {
                id: id.to_owned(),
                kind: archived.kind,
            });
        };
        if id
            .strip_prefix(kind.as_str())
            .and_then(|r| r.strip_prefix(':'))
            != Some(archived.name.as_str())
        {
            return Err(ProjectionProblem::EntryName {
                id: id.to_owned(),
                kind: *kind,
                name: archived.name.as_str().to_owned(),
            });
        }
        Ok(materialize(archived, *kind))
    }
}

/// The projection's retrieval index read in place (spec/catalog.md §8.2): the ranges were
/// checked when the file was decoded, so a read past them yields nothing rather than a panic.
impl RetrievalSource for Projection {
    fn entry_count(&self) -> u32 {
        u32::try_from(self.count).unwrap_or(u32::MAX)
    }

    fn total_length(&self) -> u64 {
        self.total_length
    }

    fn doc_length(&self, entry: u32) -> u32 {
        self.word(SECTION_DOC_LENGTHS, entry as usize)
    }

    fn postings(&self, term: &str) -> impl Iterator<Item = Posting> + '_ {
        let range = self.posting_range(term);
        let bytes = self
            .section(SECTION_POSTINGS)
            .get(range.start * POSTING_BYTES..range.end * POSTING_BYTES)
            .unwrap_or(&[]);
        bytes.chunks_exact(POSTING_BYTES).map(|p| Posting {
            entry: u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            weight: u32::from_le_bytes([p[4], p[5], p[6], p[7]]),
        })
    }

    fn document_frequency(&self, term: &str) -> u32 {
        u32::try_from(self.posting_range(term).len()).unwrap_or(u32::MAX)
    }

    fn id(&self, entry: u32) -> &str {
        Projection::id(self, entry as usize).unwrap_or("")
    }

    fn neighbours(&self, entry: u32) -> impl Iterator<Item = u32> + '_ {
        let e = entry as usize;
        let start = self.word(SECTION_NEIGHBOUR_OFFSETS, e) as usize;
        let end = self.word(SECTION_NEIGHBOUR_OFFSETS, e + 1) as usize;
        (start..end.max(start)).map(|i| self.word(SECTION_NEIGHBOURS, i))
    }
}

fn strings(items: &rkyv::vec::ArchivedVec<rkyv::string::ArchivedString>) -> Vec<String> {
    items.iter().map(|s| s.as_str().to_owned()).collect()
}

fn body(b: &ArchivedProjectedBody) -> BodyRef {
    BodyRef {
        path: b.path.as_str().to_owned(),
        sha256: b.sha256.as_str().to_owned(),
        size_bytes: b.size_bytes.to_native(),
        tree: b.tree,
    }
}

fn materialize(e: &ArchivedProjectedEntry, kind: CapabilityKind) -> CatalogEntry {
    CatalogEntry {
        id: e.id.as_str().to_owned(),
        kind,
        name: e.name.as_str().to_owned(),
        label: e.label.as_str().to_owned(),
        tags: strings(&e.tags),
        related: strings(&e.related),
        material: e.material.as_ref().map(|m| MaterialSpec {
            body: body(&m.body),
            estimated_tokens: m.estimated_tokens.to_native(),
        }),
        install: e.install.as_ref().map(|i| InstallSpec {
            installer_id: i.installer_id.as_str().to_owned(),
            plan_digest: i.plan_digest.as_str().to_owned(),
            permission_expansion: i.permission_expansion,
            credential_requirement: i.credential_requirement,
            result: body(&i.result),
        }),
        source: e.source.as_ref().map(|s| SourceSpec {
            origin: s.origin.as_str().to_owned(),
            version: s.version.as_ref().map(|v| v.as_str().to_owned()),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.
    use super::*;
    use crate::catalog::{
        Catalog, WorkObservation, load_catalog_dir, retrieve, sample_catalog_dir,
    };

    fn sample() -> Catalog {
        load_catalog_dir(&sample_catalog_dir())
            .expect("the sample loads")
            .catalog()
            .clone()
    }

    fn aligned(bytes: &[u8]) -> AlignedVec<ALIGN_BYTES> {
        let mut v = AlignedVec::new();
        v.extend_from_slice(bytes);
        v
    }

    #[test]
    fn a_projected_catalog_serves_every_entry_digest_and_descriptor_of_the_parsed_one() {
        let parsed = sample();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(PROJECTION_FILE_NAME),
            parsed.projection_bytes().expect("encodes"),
        )
        .expect("write");
        let projected = Catalog::open_projection(dir.path()).expect("opens");
        assert!(projected.is_projected() && !parsed.is_projected());
        assert_eq!(projected, parsed);
        assert_eq!(projected.len(), parsed.len());
        for entry in parsed.entries() {
            let id = entry.id.as_str();
            assert_eq!(projected.entry(id), Some(entry), "{id}");
            assert_eq!(
                projected.material_descriptor(id),
                parsed.material_descriptor(id)
            );
            assert_eq!(
                projected.install_descriptor(id),
                parsed.install_descriptor(id)
            );
            for tag in &entry.tags {
                assert!(projected.has_tag(tag), "{tag}");
            }
        }
        assert_eq!(projected.entries(), parsed.entries());
        assert_eq!(projected.entry("skill:no-such-entry"), None);
        assert!(!projected.has_tag("no-such-tag-anywhere"));
        for (a, b) in [
            (projected.content_digest(), parsed.content_digest()),
            (projected.namespace_digest(), parsed.namespace_digest()),
            (
                projected.retrieval_snapshot_digest(),
                parsed.retrieval_snapshot_digest(),
            ),
            (
                projected.material_snapshot_digest(),
                parsed.material_snapshot_digest(),
            ),
            (
                projected.installation_snapshot_digest(),
                parsed.installation_snapshot_digest(),
            ),
        ] {
            assert_eq!(a, b);
        }
        // Retrieval reads the index in the file and answers as the parsed catalog's owned index.
        for (signals, languages) in [
            (&["testing"][..], &["rust"][..]),
            (&["pull", "request", "review", "security"][..], &[][..]),
            (&["python"][..], &["python"][..]),
            (&["terraform"][..], &[][..]),
            (&["excel", "spreadsheets"][..], &["python"][..]),
            (&["nothing-known-here"][..], &[][..]),
        ] {
            let observation = WorkObservation::new(signals, languages).expect("observation");
            assert_eq!(
                retrieve(&projected, &observation),
                retrieve(&parsed, &observation),
                "{signals:?}"
            );
        }
        for word in ["spreadsheet", "requests", "kubernetes", "haiku", "the", "x"] {
            assert_eq!(
                projected.knows_word(word),
                parsed.knows_word(word),
                "{word}"
            );
        }
        // The projection of a projected catalog is the same bytes.
        assert_eq!(
            projected.projection_bytes().expect("encodes"),
            parsed.projection_bytes().expect("encodes")
        );
    }

    #[test]
    fn a_damaged_projection_is_refused_with_its_reason() {
        let bytes = sample().projection_bytes().expect("encodes");
        let refused = |b: &[u8]| {
            Projection::decode(aligned(b))
                .expect_err("refused")
                .to_string()
        };
        assert!(refused(&bytes[..10]).contains("fewer than its 64-byte header"));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(refused(&magic).contains("magic"));
        let mut version = bytes.clone();
        version[8] = 9;
        assert!(refused(&version).contains("format version is 9"));
        let mut body = bytes.clone();
        let last = body.len() - 1;
        body[last] ^= 0x40;
        assert!(refused(&body).contains("BLAKE3"));
        let truncated = &bytes[..bytes.len() - 1];
        assert!(refused(truncated).contains("body bytes"));
        assert!(Projection::decode(aligned(&bytes)).is_ok());
        // A retrieval index that names an entry the catalog does not hold is refused even when
        // the digest was recomputed over it (invariant P7).
        let body_at = |b: &[u8], i: usize| {
            let at = PROJECTION_HEADER_BYTES + i;
            u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes")) as usize
        };
        let rehash = |b: &mut Vec<u8>| {
            let digest = blake3::hash(&b[PROJECTION_HEADER_BYTES..]);
            b[24..56].copy_from_slice(digest.as_bytes());
        };
        let mut posting = bytes.clone();
        let at = PROJECTION_HEADER_BYTES + body_at(&bytes, SECTION_POSTINGS * 16);
        posting[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        rehash(&mut posting);
        assert!(refused(&posting).contains("retrieval index is not whole: postings"));
        let mut offsets = bytes.clone();
        let at = PROJECTION_HEADER_BYTES + body_at(&bytes, SECTION_TERM_OFFSETS * 16) + 4;
        offsets[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        rehash(&mut offsets);
        assert!(refused(&offsets).contains("term offsets"));
    }
}
