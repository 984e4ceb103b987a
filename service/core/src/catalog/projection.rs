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

use std::borrow::Cow;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ctx_model::{CapabilityKind, is_sha};
use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::format::{BodyRef, CatalogEntry, CatalogVersion, InstallSpec, MaterialSpec, SourceSpec};
use super::open::{CatalogFileKind, open_catalog_file};
use super::retrieval::{Posting, RetrievalIndex, RetrievalSource};

/// File name of the projection inside a catalog directory or a registry artifact.
pub const PROJECTION_FILE_NAME: &str = "catalog.projection";
/// The projection format version this build writes and reads.
pub const PROJECTION_FORMAT_VERSION: u32 = 2;
/// Size of one integrity chunk of the body, in bytes: the unit a reader reads and checks.
pub const PROJECTION_CHUNK_BYTES: usize = 64 * 1024;
/// Length of the fixed header, in bytes.
pub const PROJECTION_HEADER_BYTES: usize = 64;
/// Largest projection archive accepted, in bytes: a catalog's text limit plus room for the
/// archive's offsets (spec/catalog.md §8).
pub const PROJECTION_ARCHIVE_MAX_BYTES: u64 = 256 * 1024 * 1024;

/// The magic at offset 0.
const MAGIC: [u8; 8] = *b"CTXCATP\0";
/// Sections of a format-2 body, in order (spec/catalog.md §8.2).
const SECTION_COUNT: usize = 12;
const SECTION_META: usize = 0;
const SECTION_ID_SLOTS: usize = 1;
const SECTION_ID_BYTES: usize = 2;
const SECTION_ENTRY_SLOTS: usize = 3;
const SECTION_ENTRY_ARCHIVES: usize = 4;
/// The retrieval index (spec/catalog.md §5.2, §8.2): sorted terms as slots and bytes, each term's
/// posting range, postings as `(entry u32, weight u32)`, entry lengths, and the relation graph
/// as neighbour ranges and neighbours; every integer a little-endian `u32`.
const SECTION_TERM_SLOTS: usize = 5;
const SECTION_TERM_BYTES: usize = 6;
const SECTION_TERM_OFFSETS: usize = 7;
const SECTION_POSTINGS: usize = 8;
const SECTION_DOC_LENGTHS: usize = 9;
const SECTION_NEIGHBOUR_OFFSETS: usize = 10;
const SECTION_NEIGHBOURS: usize = 11;
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
    #[error("its header describes a file of {declared} bytes but it has {actual}")]
    Length { declared: u64, actual: u64 },
    #[error("its chunk table or a chunk of its body does not match its BLAKE3 digest")]
    Digest,
    #[error("its chunk count or chunk size does not describe its body")]
    Chunks,
    #[error("its section {index} lies outside the body or is misaligned")]
    Section { index: usize },
    #[error("its {what} slots do not number its {count} entries")]
    SlotCount { what: &'static str, count: usize },
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
    /// Sum of the entries' retrieval lengths (spec/catalog.md §5.2).
    pub total_length: u64,
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
    #[error("the catalog projection just encoded does not verify: {0}")]
    Unverified(ProjectionProblem),
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
        total_length: index
            .parts()
            .doc_lengths
            .iter()
            .map(|&l| u64::from(l))
            .sum(),
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
    let table: Vec<u8> = body
        .chunks(PROJECTION_CHUNK_BYTES)
        .flat_map(|c| *blake3::hash(c).as_bytes())
        .collect();
    let chunks = u32_of(table.len() / 32, "chunk table")?;
    let mut out = Vec::with_capacity(PROJECTION_HEADER_BYTES + table.len() + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&PROJECTION_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&chunks.to_le_bytes());
    out.extend_from_slice(&(PROJECTION_CHUNK_BYTES as u32).to_le_bytes());
    out.extend_from_slice(blake3::hash(&table).as_bytes());
    out.extend_from_slice(&table);
    out.extend_from_slice(&body);
    Ok(out)
}

/// A projection opened for reading (spec/catalog.md §8.3). Opening reads the header, the chunk
/// table and the per-catalog facts; every other byte is read in its 64 KiB chunk, whose BLAKE3
/// is checked against the table, the first time it is needed. So a prompt reads the chunks its
/// lookups touch, the same few at 50 entries as at 100,000. Every read is bounds-checked: data
/// that does not hold together yields nothing, never a panic, and [`Projection::verify_all`]
/// (run where the projection is written) checks every invariant over every byte.
pub(crate) struct Projection {
    body: Body,
    /// `(start, end)` of every section, as offsets into the body, checked against its length.
    sections: [(usize, usize); SECTION_COUNT],
    count: usize,
    version: CatalogVersion,
    namespace: String,
    digests: [String; 3],
    total_length: u64,
}

impl std::fmt::Debug for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projection")
            .field("body_bytes", &self.body.len)
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

/// Where a body's chunks are read from.
enum BodySource {
    /// An open projection file and the offset of the body in it.
    File { file: std::fs::File, offset: u64 },
    /// A whole file already in memory (tests, and decoding bytes just encoded).
    Memory { bytes: Vec<u8>, offset: usize },
}

/// A projection body read chunk by chunk, each chunk checked against its digest once.
struct Body {
    source: BodySource,
    len: usize,
    digests: Vec<[u8; 32]>,
    /// Each chunk once read: `None` when it could not be read or its digest differs.
    chunks: Vec<OnceLock<Option<AlignedVec<ALIGN_BYTES>>>>,
}

/// Bytes of a body: borrowed from one chunk, or copied when they span several. Either way the
/// first byte is as aligned as its body offset (chunks are 64 KiB-aligned in the body).
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedVec<ALIGN_BYTES>),
}

impl std::ops::Deref for Bytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) => b,
            Bytes::Owned(v) => v,
        }
    }
}

impl<'a> Bytes<'a> {
    /// The bytes as UTF-8 text, borrowed when they lie in one chunk.
    fn into_str(self) -> Option<Cow<'a, str>> {
        match self {
            Bytes::Borrowed(b) => std::str::from_utf8(b).ok().map(Cow::Borrowed),
            Bytes::Owned(v) => std::str::from_utf8(&v)
                .ok()
                .map(|s| Cow::Owned(s.to_owned())),
        }
    }
}

impl Body {
    /// Chunk `i`, read and checked on first use.
    fn chunk(&self, i: usize) -> Option<&AlignedVec<ALIGN_BYTES>> {
        let slot = self.chunks.get(i)?;
        slot.get_or_init(|| {
            let start = i.checked_mul(PROJECTION_CHUNK_BYTES)?;
            let end = start.saturating_add(PROJECTION_CHUNK_BYTES).min(self.len);
            let mut buffer = AlignedVec::<ALIGN_BYTES>::with_capacity(end.checked_sub(start)?);
            buffer.resize(end - start, 0);
            match &self.source {
                BodySource::File { file, offset } => {
                    use std::os::unix::fs::FileExt as _;
                    file.read_exact_at(&mut buffer, offset.checked_add(start as u64)?)
                        .ok()?;
                }
                BodySource::Memory { bytes, offset } => {
                    buffer.copy_from_slice(bytes.get(offset + start..offset + end)?);
                }
            }
            (blake3::hash(&buffer).as_bytes() == self.digests.get(i)?).then_some(buffer)
        })
        .as_ref()
    }

    /// The body bytes `start..end`.
    fn get(&self, start: usize, end: usize) -> Option<Bytes<'_>> {
        if start > end || end > self.len {
            return None;
        }
        if start == end {
            return Some(Bytes::Borrowed(&[]));
        }
        let (first, last) = (
            start / PROJECTION_CHUNK_BYTES,
            (end - 1) / PROJECTION_CHUNK_BYTES,
        );
        let base = first * PROJECTION_CHUNK_BYTES;
        if first == last {
            return self
                .chunk(first)?
                .get(start - base..end - base)
                .map(Bytes::Borrowed);
        }
        let mut out = AlignedVec::<ALIGN_BYTES>::with_capacity(end - start);
        for c in first..=last {
            let chunk = self.chunk(c)?;
            let chunk_start = c * PROJECTION_CHUNK_BYTES;
            let from = start.max(chunk_start) - chunk_start;
            let to = end.min(chunk_start + chunk.len()) - chunk_start;
            out.extend_from_slice(chunk.get(from..to)?);
        }
        Some(Bytes::Owned(out))
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        le_u32(&self.get(at, at.checked_add(4)?)?, 0)
    }
}

impl Projection {
    /// Opens the projection file `relative` of the directory `dir`, opened under the catalog
    /// file rules (spec/catalog.md §3), and checks what opening checks (§8.3).
    pub(crate) fn read(dir: &Path, relative: &str) -> Result<Projection, ProjectionError> {
        let path = dir.join(relative);
        let io = |source| ProjectionError::Io {
            path: path.clone(),
            source,
        };
        let invalid = |problem| ProjectionError::Invalid {
            path: path.clone(),
            problem,
        };
        let mut file = open_catalog_file(dir, relative, CatalogFileKind::Catalog)
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let size = file.metadata().map_err(io)?.len();
        let mut header = [0u8; PROJECTION_HEADER_BYTES];
        let got = (&mut file)
            .take(PROJECTION_HEADER_BYTES as u64)
            .read(&mut header)
            .map_err(io)?;
        let (chunk_count, body_len) = check_header(&header[..got], size).map_err(&invalid)?;
        let mut table = vec![0u8; chunk_count * 32];
        file.read_exact(&mut table).map_err(io)?;
        let offset = (PROJECTION_HEADER_BYTES + table.len()) as u64;
        Projection::open(BodySource::File { file, offset }, &header, &table, body_len)
            .map_err(invalid)
    }

    /// Decodes a projection file's bytes (spec/catalog.md §8.3), as [`Projection::read`] does.
    pub(crate) fn decode(bytes: Vec<u8>) -> Result<Projection, ProjectionProblem> {
        let header: [u8; PROJECTION_HEADER_BYTES] = bytes
            .get(..PROJECTION_HEADER_BYTES)
            .and_then(|h| h.try_into().ok())
            .ok_or(ProjectionProblem::Short {
                size_bytes: bytes.len(),
            })?;
        let (chunk_count, body_len) = check_header(&header, bytes.len() as u64)?;
        let offset = PROJECTION_HEADER_BYTES + chunk_count * 32;
        let table = bytes
            .get(PROJECTION_HEADER_BYTES..offset)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        Projection::open(
            BodySource::Memory { bytes, offset },
            &header,
            &table,
            body_len,
        )
    }

    /// Checks the chunk table, the section table and the per-catalog facts (invariants P2–P4
    /// of spec/catalog.md §8.3, and the O(1) part of P7).
    fn open(
        source: BodySource,
        header: &[u8; PROJECTION_HEADER_BYTES],
        table: &[u8],
        body_len: usize,
    ) -> Result<Projection, ProjectionProblem> {
        if blake3::hash(table).as_bytes()[..] != header[32..64] {
            return Err(ProjectionProblem::Digest);
        }
        let digests: Vec<[u8; 32]> = table
            .chunks_exact(32)
            .filter_map(|d| d.try_into().ok())
            .collect();
        let count = le_u32(header, 12).unwrap_or(0) as usize;
        let body = Body {
            source,
            len: body_len,
            chunks: (0..digests.len()).map(|_| OnceLock::new()).collect(),
            digests,
        };
        let table_bytes = SECTION_COUNT * 16;
        let section_table = body.get(0, table_bytes).ok_or(ProjectionProblem::Digest)?;
        let mut sections = [(0usize, 0usize); SECTION_COUNT];
        for (i, section) in sections.iter_mut().enumerate() {
            let offset = le_u64(&section_table, i * 16).unwrap_or(u64::MAX);
            let len = le_u64(&section_table, i * 16 + 8).unwrap_or(u64::MAX);
            let end = offset.saturating_add(len);
            if end > body_len as u64
                || !offset.is_multiple_of(ALIGN_BYTES as u64)
                || offset < table_bytes as u64
            {
                return Err(ProjectionProblem::Section { index: i });
            }
            // Both fit in usize: they are at most the body's length.
            *section = (offset as usize, end as usize);
        }
        drop(section_table);
        let len = |s: usize| sections[s].1 - sections[s].0;
        for (slots, what) in [(SECTION_ID_SLOTS, "id"), (SECTION_ENTRY_SLOTS, "entry")] {
            if len(slots) != count * SLOT_BYTES {
                return Err(ProjectionProblem::SlotCount { what, count });
            }
        }
        let bad = |what| ProjectionProblem::Index { what };
        let terms = len(SECTION_TERM_SLOTS) / SLOT_BYTES;
        for (section, width, items, what) in [
            (SECTION_TERM_SLOTS, SLOT_BYTES, terms, "term slots"),
            (SECTION_TERM_OFFSETS, 4, terms + 1, "term offsets"),
            (SECTION_DOC_LENGTHS, 4, count, "entry lengths"),
            (SECTION_NEIGHBOUR_OFFSETS, 4, count + 1, "neighbour offsets"),
        ] {
            if len(section) != width * items {
                return Err(bad(what));
            }
        }
        for (section, width, what) in [
            (SECTION_POSTINGS, POSTING_BYTES, "postings"),
            (SECTION_NEIGHBOURS, 4, "neighbours"),
        ] {
            if !len(section).is_multiple_of(width) {
                return Err(bad(what));
            }
        }
        let (start, end) = sections[SECTION_META];
        let meta_bytes = body.get(start, end).ok_or(ProjectionProblem::Digest)?;
        let meta =
            rkyv::access::<ArchivedProjectionMeta, rancor::Error>(&meta_bytes).map_err(|e| {
                ProjectionProblem::Facts {
                    detail: e.to_string(),
                }
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
        let total_length = meta.total_length.to_native();
        drop(meta_bytes);
        Ok(Projection {
            body,
            sections,
            count,
            version: catalog,
            namespace,
            digests,
            total_length,
        })
    }

    /// Checks every invariant of spec/catalog.md §8.3 over every byte: every chunk's digest,
    /// P5 (ids and terms UTF-8 and strictly increasing), P6 for every entry and P7 (every
    /// range table, posting and neighbour). Run where a projection is written or published.
    pub(crate) fn verify_all(&self) -> Result<(), ProjectionProblem> {
        for c in 0..self.body.chunks.len() {
            if self.body.chunk(c).is_none() {
                return Err(ProjectionProblem::Digest);
            }
        }
        for (slots, bytes, what, n) in [
            (SECTION_ID_SLOTS, SECTION_ID_BYTES, "id", self.count),
            (
                SECTION_TERM_SLOTS,
                SECTION_TERM_BYTES,
                "term",
                self.term_count(),
            ),
        ] {
            let mut previous: Option<Cow<'_, str>> = None;
            for i in 0..n {
                let Some(s) = self.slot_str(slots, bytes, i) else {
                    return Err(ProjectionProblem::Slot { what, index: i });
                };
                if previous.as_ref().is_some_and(|p| *p >= s) {
                    return Err(ProjectionProblem::Order {
                        what,
                        value: s.into_owned(),
                    });
                }
                previous = Some(s);
            }
        }
        for i in 0..self.count {
            self.entry(i)?;
        }
        let bad = |what| ProjectionProblem::Index { what };
        let postings = self.section_len(SECTION_POSTINGS) / POSTING_BYTES;
        let neighbours = self.section_len(SECTION_NEIGHBOURS) / 4;
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
            let mut previous = 0u32;
            for i in 0..=ranges {
                let v = self.word(offsets, i).ok_or(bad(what))?;
                if (i == 0 && v != 0) || v < previous {
                    return Err(bad(what));
                }
                previous = v;
            }
            if previous as usize != items {
                return Err(bad(what));
            }
        }
        for i in 0..postings {
            let posting = self.posting(i).ok_or(bad("postings"))?;
            if posting.entry as usize >= self.count || posting.weight == 0 {
                return Err(bad("postings"));
            }
        }
        for i in 0..neighbours {
            let n = self.word(SECTION_NEIGHBOURS, i).ok_or(bad("neighbours"))?;
            if n as usize >= self.count {
                return Err(bad("neighbours"));
            }
        }
        let mut total = 0u64;
        for i in 0..self.count {
            total += u64::from(
                self.word(SECTION_DOC_LENGTHS, i)
                    .ok_or(bad("entry lengths"))?,
            );
        }
        if total != self.total_length {
            return Err(bad("entry lengths"));
        }
        Ok(())
    }

    fn section_len(&self, index: usize) -> usize {
        let (start, end) = self.sections[index];
        end - start
    }

    /// The bytes `start..end` of section `index`, relative to the section.
    fn section_bytes(&self, index: usize, start: usize, end: usize) -> Option<Bytes<'_>> {
        let (base, limit) = self.sections[index];
        let (from, to) = (base.checked_add(start)?, base.checked_add(end)?);
        if to > limit {
            return None;
        }
        self.body.get(from, to)
    }

    /// The `i`th little-endian `u32` of a word section.
    fn word(&self, section: usize, i: usize) -> Option<u32> {
        let at = i.checked_mul(4)?;
        if at.checked_add(4)? > self.section_len(section) {
            return None;
        }
        self.body.u32_at(self.sections[section].0 + at)
    }

    /// The `i`th posting.
    fn posting(&self, i: usize) -> Option<Posting> {
        let at = i.checked_mul(POSTING_BYTES)?;
        let bytes = self.section_bytes(SECTION_POSTINGS, at, at.checked_add(POSTING_BYTES)?)?;
        Some(Posting {
            entry: le_u32(&bytes, 0)?,
            weight: le_u32(&bytes, 4)?,
        })
    }

    /// The `i`th `(offset, length)` slot of a slot section, as bytes of its byte section.
    fn slot(&self, slots: usize, bytes: usize, i: usize) -> Option<Bytes<'_>> {
        let at = i.checked_mul(SLOT_BYTES)?;
        let slot = self.section_bytes(slots, at, at.checked_add(SLOT_BYTES)?)?;
        let offset = le_u32(&slot, 0)? as usize;
        let len = le_u32(&slot, 4)? as usize;
        self.section_bytes(bytes, offset, offset.checked_add(len)?)
    }

    fn slot_str(&self, slots: usize, bytes: usize, i: usize) -> Option<Cow<'_, str>> {
        self.slot(slots, bytes, i)?.into_str()
    }

    /// Binary search of `key` among the `n` sorted strings of a slot section.
    fn search(&self, slots: usize, bytes: usize, n: usize, key: &str) -> Option<usize> {
        let (mut low, mut high) = (0usize, n);
        while low < high {
            let mid = low + (high - low) / 2;
            match (*self.slot_str(slots, bytes, mid)?).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    fn term_count(&self) -> usize {
        self.section_len(SECTION_TERM_SLOTS) / SLOT_BYTES
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

    /// The id at position `i`.
    pub(crate) fn id(&self, i: usize) -> Option<Cow<'_, str>> {
        self.slot_str(SECTION_ID_SLOTS, SECTION_ID_BYTES, i)
    }

    /// Position of the entry `id`, by binary search over the sorted ids.
    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.search(SECTION_ID_SLOTS, SECTION_ID_BYTES, self.count, id)
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
            rkyv::access::<ArchivedProjectedEntry, rancor::Error>(&archive).map_err(|e| {
                ProjectionProblem::Entry {
                    index: i,
                    detail: e.to_string(),
                }
            })?;
        let id = archived.id.as_str();
        if self.id(i).as_deref() != Some(id) {
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

    /// The posting range of `term`, as posting indices.
    fn posting_range(&self, term: &str) -> std::ops::Range<usize> {
        self.search(
            SECTION_TERM_SLOTS,
            SECTION_TERM_BYTES,
            self.term_count(),
            term,
        )
        .and_then(|i| {
            let start = self.word(SECTION_TERM_OFFSETS, i)? as usize;
            let end = self.word(SECTION_TERM_OFFSETS, i + 1)? as usize;
            Some(start..end.max(start))
        })
        .unwrap_or(0..0)
    }
}

/// The format version a projection file declares, when it starts with the projection magic.
pub fn projection_format_version(path: &Path) -> Option<u32> {
    let mut header = [0u8; 12];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    (header[..8] == MAGIC).then(|| le_u32(&header, 8)).flatten()
}

/// Checks the header against the file's size (invariants P1, P2) and returns the chunk count and
/// the body length.
fn check_header(header: &[u8], size: u64) -> Result<(usize, usize), ProjectionProblem> {
    if header.len() < PROJECTION_HEADER_BYTES {
        return Err(ProjectionProblem::Short {
            size_bytes: header.len(),
        });
    }
    if header[..8] != MAGIC {
        return Err(ProjectionProblem::Magic);
    }
    let version = le_u32(header, 8).unwrap_or(0);
    if version != PROJECTION_FORMAT_VERSION {
        return Err(ProjectionProblem::Version { found: version });
    }
    let body = le_u64(header, 16).unwrap_or(u64::MAX);
    if body > PROJECTION_ARCHIVE_MAX_BYTES {
        return Err(ProjectionProblem::TooLarge {
            limit_bytes: PROJECTION_ARCHIVE_MAX_BYTES,
        });
    }
    let chunks = u64::from(le_u32(header, 24).unwrap_or(0));
    if chunks != body.div_ceil(PROJECTION_CHUNK_BYTES as u64)
        || le_u32(header, 28) != Some(PROJECTION_CHUNK_BYTES as u32)
    {
        return Err(ProjectionProblem::Chunks);
    }
    let expected = PROJECTION_HEADER_BYTES as u64 + chunks * 32 + body;
    if size != expected {
        return Err(ProjectionProblem::Length {
            declared: expected,
            actual: size,
        });
    }
    // Both are bounded by the archive limit, so they fit in usize.
    Ok((chunks as usize, body as usize))
}

/// The projection's retrieval index read in place (spec/catalog.md §8.2). A range, posting or
/// neighbour that does not hold together reads as absent.
impl RetrievalSource for Projection {
    fn entry_count(&self) -> u32 {
        u32::try_from(self.count).unwrap_or(u32::MAX)
    }

    fn total_length(&self) -> u64 {
        self.total_length
    }

    fn doc_length(&self, entry: u32) -> u32 {
        self.word(SECTION_DOC_LENGTHS, entry as usize).unwrap_or(0)
    }

    fn postings(&self, term: &str) -> impl Iterator<Item = Posting> + '_ {
        self.posting_range(term)
            .filter_map(|i| self.posting(i))
            .filter(|p| (p.entry as usize) < self.count && p.weight > 0)
    }

    fn document_frequency(&self, term: &str) -> u32 {
        u32::try_from(self.posting_range(term).len()).unwrap_or(u32::MAX)
    }

    fn id(&self, entry: u32) -> Cow<'_, str> {
        Projection::id(self, entry as usize).unwrap_or(Cow::Borrowed(""))
    }

    fn neighbours(&self, entry: u32) -> impl Iterator<Item = u32> + '_ {
        let e = entry as usize;
        let start = self.word(SECTION_NEIGHBOUR_OFFSETS, e).unwrap_or(0) as usize;
        let end = self.word(SECTION_NEIGHBOUR_OFFSETS, e + 1).unwrap_or(0) as usize;
        (start..end.max(start))
            .filter_map(|i| self.word(SECTION_NEIGHBOURS, i))
            .filter(|&n| (n as usize) < self.count)
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
    use ctx_model::Json;

    fn sample() -> Catalog {
        load_catalog_dir(&sample_catalog_dir())
            .expect("the sample loads")
            .catalog()
            .clone()
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
                assert!(projected.knows_word(tag), "{tag}");
            }
        }
        assert_eq!(projected.entries(), parsed.entries());
        assert_eq!(projected.entry("skill:no-such-entry"), None);
        assert!(!projected.knows_word("no-such-tag-anywhere"));
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

    /// The body offset of a projection file's bytes (after the header and the chunk table).
    fn body_offset(bytes: &[u8]) -> usize {
        let chunks = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes")) as usize;
        PROJECTION_HEADER_BYTES + chunks * 32
    }

    /// Recomputes the chunk table and its digest over a changed body, as a writer would.
    fn rehash(bytes: &mut [u8]) {
        let body = body_offset(bytes);
        let table: Vec<u8> = bytes[body..]
            .chunks(PROJECTION_CHUNK_BYTES)
            .flat_map(|c| *blake3::hash(c).as_bytes())
            .collect();
        bytes[PROJECTION_HEADER_BYTES..body].copy_from_slice(&table);
        bytes[32..64].copy_from_slice(blake3::hash(&table).as_bytes());
    }

    /// A catalog of `n` entries, big enough for a body of several chunks.
    fn large(n: usize) -> Catalog {
        let capabilities: Vec<Json> = (0..n)
            .map(|i| {
                Json::object([
                    ("id", Json::str(format!("agent:helper-{i:05}"))),
                    ("kind", Json::str("agent")),
                    (
                        "label",
                        Json::str(format!("Helper number {i} for topic{}", i % 97)),
                    ),
                    (
                        "tags",
                        Json::Arr(vec![
                            Json::str(format!("topic{}", i % 97)),
                            Json::str(format!("area{}", i % 13)),
                        ]),
                    ),
                ])
            })
            .collect();
        let text = Json::object([
            ("schema", Json::str("ctx.catalog-v2")),
            ("namespace", Json::str("large")),
            ("capabilities", Json::Arr(capabilities)),
        ])
        .to_string();
        Catalog::parse(&text).expect("large catalog parses")
    }

    #[test]
    fn a_projection_is_read_chunk_by_chunk_and_a_damaged_chunk_is_found_where_it_is_read() {
        let catalog = large(3_000);
        let bytes = catalog.projection_bytes().expect("encodes");
        let projection = Projection::decode(bytes.clone()).expect("opens");
        let chunks = projection.body.chunks.len();
        assert!(chunks > 4, "{chunks} chunks");
        // Opening read the section table and the facts; one lookup reads a few chunks more.
        let read = |p: &Projection| p.body.chunks.iter().filter(|c| c.get().is_some()).count();
        let opened = read(&projection);
        assert!(opened <= 2, "{opened} chunks read to open");
        let observation = WorkObservation::new(&["topic5"], &[]).expect("observation");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(PROJECTION_FILE_NAME), &bytes).expect("write");
        let projected = Catalog::open_projection(dir.path()).expect("opens");
        assert_eq!(
            retrieve(&projected, &observation),
            retrieve(&catalog, &observation)
        );
        let _ = projection.position("agent:helper-02999").expect("found");
        assert!(read(&projection) < chunks, "a lookup reads what it touches");
        // A flipped byte in the last chunk: opening succeeds, reading that chunk does not, and
        // the full verification names the digest.
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        let damaged = Projection::decode(flipped).expect("opens: the damage is not read yet");
        assert_eq!(damaged.verify_all(), Err(ProjectionProblem::Digest));
        assert!(damaged.body.chunk(chunks - 1).is_none());
        assert!(damaged.body.chunk(0).is_some());
    }

    #[test]
    fn a_damaged_projection_is_refused_with_its_reason() {
        let bytes = sample().projection_bytes().expect("encodes");
        let refused = |b: &[u8]| match Projection::decode(b.to_vec()) {
            Err(problem) => problem.to_string(),
            Ok(p) => p.verify_all().expect_err("refused").to_string(),
        };
        assert!(refused(&bytes[..10]).contains("fewer than its 64-byte header"));
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert!(refused(&magic).contains("magic"));
        let mut version = bytes.clone();
        version[8] = 9;
        assert!(refused(&version).contains("format version is 9"));
        let mut table = bytes.clone();
        table[PROJECTION_HEADER_BYTES] ^= 1;
        assert!(refused(&table).contains("chunk table"));
        let mut chunk = bytes.clone();
        chunk[28] = 1;
        assert!(refused(&chunk).contains("chunk count or chunk size"));
        let mut body = bytes.clone();
        let last = body.len() - 1;
        body[last] ^= 0x40;
        assert!(refused(&body).contains("BLAKE3"));
        let truncated = &bytes[..bytes.len() - 1];
        assert!(refused(truncated).contains("bytes but it has"));
        let whole = Projection::decode(bytes.clone()).expect("opens");
        assert_eq!(whole.verify_all(), Ok(()));
        // A retrieval index that names an entry the catalog does not hold is refused even when
        // the digests were recomputed over it (invariant P7).
        let section_at = |b: &[u8], i: usize| {
            let at = body_offset(b) + i * 16;
            body_offset(b) + u64::from_le_bytes(b[at..at + 8].try_into().expect("8")) as usize
        };
        let mut posting = bytes.clone();
        let at = section_at(&bytes, SECTION_POSTINGS);
        posting[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        rehash(&mut posting);
        assert!(refused(&posting).contains("retrieval index is not whole: postings"));
        let mut offsets = bytes.clone();
        let at = section_at(&bytes, SECTION_TERM_OFFSETS) + 4;
        offsets[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        rehash(&mut offsets);
        assert!(refused(&offsets).contains("term offsets"));
        // Ids out of order.
        let mut ids = bytes.clone();
        let at = section_at(&bytes, SECTION_ID_BYTES);
        ids[at] = b'z';
        rehash(&mut ids);
        assert!(refused(&ids).contains("out of order") || refused(&ids).contains("entry 0"));
    }
}
