//! Byte layouts of everything the journal stores (spec/journal.md, "Tables and layouts").

use std::cell::RefCell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::LocalKey;

use hmac::{Hmac, KeyInit, Mac};
use rkyv::rancor;
use rkyv::util::AlignedVec;
use sha2::{Digest as _, Sha256};

use crate::limits::{
    EVENT_ID_MAX_BYTES, KIND_MAX_BYTES, PAYLOAD_COMPRESS_MIN_BYTES, PAYLOAD_MAX_BYTES,
    STREAM_CHUNK_REVISIONS,
};
use crate::types::{Digest, NewRecord, Record, StreamId, Timestamp, record_digest};

/// Format version of the journal, kept in the meta table (spec/journal.md §11): 2 since record
/// values may be version 2 (compressed payloads), so that a build that reads only version-1
/// values refuses the journal at open instead of reporting every newer record as corrupt.
/// Record values carry their own version ([`RECORD_FORMAT_VERSION`]), since old values stay as
/// they were written.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The format version of journals written before compressed record values; this build upgrades
/// it to [`FORMAT_VERSION`] at its first writing open (spec/journal.md §11).
pub(crate) const FORMAT_VERSION_1: u32 = 1;
/// Version of a stream head value (`journal.streams`, spec/journal.md §4); unchanged since 1.
pub(crate) const HEAD_FORMAT_VERSION: u8 = 1;
pub(crate) const RECORD_MAGIC: [u8; 4] = *b"CTXR";
/// Version of the record values this build writes: 2, the payload stored as is or compressed.
/// Version 1 values (payload always as is) are still read.
pub(crate) const RECORD_FORMAT_VERSION: u16 = 2;
/// The first record value version; its prefix bytes 6 and 7 are 0.
const RECORD_FORMAT_VERSION_1: u16 = 1;
/// magic (4) + version u16 + codec u8 + reserved u8 + header length u32 (version 1: magic +
/// version u16 + reserved u16 + header length u32; the same offsets).
pub(crate) const RECORD_PREFIX_BYTES: usize = 12;
/// Payload codec of a version-2 value (prefix byte 6): the payload bytes as they are.
pub(crate) const CODEC_STORED: u8 = 0;
/// Payload codec of a version-2 value (prefix byte 6): one zstd frame that declares its content
/// size, no dictionary. Written by builds before the records dictionary; still read.
pub(crate) const CODEC_ZSTD: u8 = 1;
/// Payload codec of a version-2 value (prefix byte 6): one zstd frame that declares its content
/// size, made with [`RECORDS_DICTIONARY`] and naming its id. What this build writes.
pub(crate) const CODEC_ZSTD_DICT: u8 = 2;
/// The journal's payload dictionary 1 (spec/journal.md §4 R9): 32 KiB trained by
/// `ctx-bench zstd-dictionary` on the payloads of hook-built journals. Part of the record format:
/// frames written with it must decode forever, so these bytes never change; a better dictionary
/// would be another codec id beside this one.
pub(crate) const RECORDS_DICTIONARY: &[u8] = include_bytes!("records-v1.zdict");
/// The id [`RECORDS_DICTIONARY`] declares, which every codec-2 frame names.
pub(crate) const RECORDS_DICTIONARY_ID: u32 = 870_048_847;
/// zstd's default level: on the hook path's real payloads 2.83x smaller at ~12 us per record.
/// Level 1 writes 1.6 % more bytes for 30 % less CPU; levels 6 and 19 gain 2-4 % for 2x and 35x
/// the time (spec/journal.md §4). Changing it changes no format: any level's frames decode.
const ZSTD_LEVEL: i32 = 3;
/// A header holds fixed fields plus an event id and a kind; anything longer is corrupt.
const HEADER_MAX_BYTES: usize = 512;

/// Short on purpose: domain ‖ position ‖ digest (12 + 8 + 32 bytes) fits one SHA-256 block with
/// its padding, so the inner hash of the HMAC is a single compression.
const RECORD_MAC_DOMAIN: &[u8] = b"ctx.jmac.v1\0";

/// The rkyv-archived header of a stored record. Fixed-size fields first; the two strings are short
/// tokens, so validation stays cheap.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug)]
pub(crate) struct RecordHeader {
    pub stream: [u8; 32],
    pub revision: u64,
    pub position: u64,
    pub occurred_at: i64,
    pub payload_len: u32,
    pub previous_digest: [u8; 32],
    pub digest: [u8; 32],
    pub mac: [u8; 32],
    pub event_id: String,
    pub kind: String,
}

/// A zero-copy view of one record: scalars are copied out of the archive, strings and the payload
/// borrow the bytes they were read from (a compressed payload: the bytes it was decompressed
/// into). `payload` is always the record's uncompressed payload, the one D covers.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    pub stream: StreamId,
    pub revision: u64,
    pub position: u64,
    pub event_id: &'a str,
    pub kind: &'a str,
    pub occurred_at: Timestamp,
    pub payload: &'a [u8],
    pub previous_digest: Digest,
    pub digest: Digest,
    pub(crate) mac: [u8; 32],
}

impl RecordView<'_> {
    pub fn to_record(&self) -> Record {
        Record {
            stream: self.stream,
            revision: self.revision,
            position: self.position,
            event_id: self.event_id.to_owned(),
            kind: self.kind.to_owned(),
            occurred_at: self.occurred_at,
            payload: self.payload.to_vec(),
            previous_digest: self.previous_digest,
            digest: self.digest,
        }
    }
}

const EVENT_KEY_DOMAIN: &[u8] = b"ctx.journal.event-id.v1\0";

/// Key of an event id in the on-disk event index: the first 8 bytes of SHA-256 over a domain
/// prefix and the id, little-endian. Fixed-width keys keep the index small and its comparisons
/// cheap; collisions are resolved by reading the record (spec/journal.md, `journal.event_ids`).
pub(crate) fn event_key(event_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(EVENT_KEY_DOMAIN);
    h.update(event_id.as_bytes());
    let digest: [u8; 32] = h.finalize().into();
    u64::from_le_bytes(array(&digest[..8]))
}

/// A pre-keyed HMAC-SHA256 state; cloned per record so the key schedule runs once.
#[derive(Clone)]
pub(crate) struct MacKey(Hmac<Sha256>);

impl MacKey {
    pub(crate) fn new(key: &[u8; 32]) -> MacKey {
        // A 32-byte key is always a valid HMAC key, so this branch is unreachable; it is kept
        // as an assertion because it can only fail through a programming error.
        match Hmac::<Sha256>::new_from_slice(key) {
            Ok(mac) => MacKey(mac),
            Err(_) => panic!("HMAC-SHA256 accepts keys of any length"),
        }
    }

    fn state(&self, position: u64, digest: &Digest) -> Hmac<Sha256> {
        let mut m = self.0.clone();
        m.update(RECORD_MAC_DOMAIN);
        m.update(&position.to_le_bytes());
        m.update(digest.as_bytes());
        m
    }

    /// Formula M: HMAC-SHA256(key, domain ‖ position u64 LE ‖ digest).
    pub(crate) fn tag(&self, position: u64, digest: &Digest) -> [u8; 32] {
        self.state(position, digest).finalize().into_bytes().into()
    }

    pub(crate) fn verify(&self, position: u64, digest: &Digest, tag: &[u8; 32]) -> bool {
        self.state(position, digest).verify_slice(tag).is_ok()
    }
}

/// Encodes a complete record value (version 2): prefix, header archive, payload. The payload is
/// stored compressed when that saves bytes (at least [`PAYLOAD_COMPRESS_MIN_BYTES`] long and a
/// zstd frame shorter than it), else as it is; D and M are over the uncompressed payload either
/// way, so the choice never changes what a reader sees.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_record(
    stream: &StreamId,
    revision: u64,
    position: u64,
    record: &NewRecord,
    previous: &Digest,
    digest: &Digest,
    mac: [u8; 32],
    out: &mut Vec<u8>,
) {
    let archived = archive_header(stream, revision, position, record, previous, digest, mac);
    out.clear();
    out.reserve(RECORD_PREFIX_BYTES + archived.len() + record.payload.len());
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&RECORD_FORMAT_VERSION.to_le_bytes());
    out.push(CODEC_STORED);
    out.push(0);
    out.extend_from_slice(&(archived.len() as u32).to_le_bytes());
    out.extend_from_slice(&archived);
    let start = out.len();
    if compress_after(&record.payload, out, start) {
        out[6] = CODEC_ZSTD_DICT;
    } else {
        out.truncate(start);
        out.extend_from_slice(&record.payload);
    }
}

/// The rkyv archive of a record's header; at most [`HEADER_MAX_BYTES`] for a validated record.
fn archive_header(
    stream: &StreamId,
    revision: u64,
    position: u64,
    record: &NewRecord,
    previous: &Digest,
    digest: &Digest,
    mac: [u8; 32],
) -> AlignedVec {
    let header = RecordHeader {
        stream: *stream.as_bytes(),
        revision,
        position,
        occurred_at: record.occurred_at.0,
        payload_len: record.payload.len() as u32,
        previous_digest: *previous.as_bytes(),
        digest: *digest.as_bytes(),
        mac,
        event_id: record.event_id.clone(),
        kind: record.kind.clone(),
    };
    // Serializing a plain struct of integers, arrays and strings into an in-memory buffer cannot
    // fail; a failure here would be a bug in rkyv or in this type.
    let archived = match rkyv::to_bytes::<rancor::Error>(&header) {
        Ok(bytes) => bytes,
        Err(e) => panic!("archiving a record header failed: {e}"),
    };
    assert!(
        archived.len() <= HEADER_MAX_BYTES,
        "validated header fits its limit"
    );
    archived
}

/// [`RECORDS_DICTIONARY`] digested for compression at [`ZSTD_LEVEL`], once per process: a hook
/// process writes a few dozen records, and preparing the dictionary costs about as much as
/// compressing ten of them.
/// `None` only if zstd could not allocate it; the writer then stores payloads as they are.
fn encoder_dictionary() -> Option<&'static zstd::dict::EncoderDictionary<'static>> {
    static PREPARED: OnceLock<Option<zstd::dict::EncoderDictionary<'static>>> = OnceLock::new();
    PREPARED
        .get_or_init(|| {
            zstd::dict::EncoderDictionary::try_copy(RECORDS_DICTIONARY, ZSTD_LEVEL).ok()
        })
        .as_ref()
}

/// [`RECORDS_DICTIONARY`] digested for decompression, once per process; `None` only if zstd
/// could not allocate it, and a codec-2 read then fails as "no context could be made".
fn decoder_dictionary() -> Option<&'static zstd::dict::DecoderDictionary<'static>> {
    static PREPARED: OnceLock<Option<zstd::dict::DecoderDictionary<'static>>> = OnceLock::new();
    PREPARED
        .get_or_init(|| zstd::dict::DecoderDictionary::try_copy(RECORDS_DICTIONARY).ok())
        .as_ref()
}

thread_local! {
    /// One zstd compression context per writing thread: a context costs an allocation of its
    /// tables, and records are compressed one by one inside the write transaction.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
    /// One zstd decompression context per reading thread and codec: a context that references
    /// the dictionary would start a plain frame from the dictionary's repeat offsets and decode
    /// it wrongly, so codec 1 and codec 2 never share one.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
    static DICT_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

fn new_compressor() -> Option<zstd::bulk::Compressor<'static>> {
    zstd::bulk::Compressor::with_prepared_dictionary(encoder_dictionary()?).ok()
}

fn new_decompressor(dictionary: bool) -> Option<zstd::bulk::Decompressor<'static>> {
    if dictionary {
        zstd::bulk::Decompressor::with_prepared_dictionary(decoder_dictionary()?).ok()
    } else {
        zstd::bulk::Decompressor::new().ok()
    }
}

/// How many [`StorePayloadsAsIs`] guards live in this process.
static PAYLOADS_STORED_AS_IS: AtomicUsize = AtomicUsize::new(0);

/// While a value of this type lives, every record this process appends or imports stores its
/// payload as it is (record value version 2, codec 0) instead of compressed. For tests that edit
/// stored payload bytes in place, as an attacker with the file would after decompressing them;
/// reads, D and M are the same either way (spec/journal.md §4, R7). Never used by ctx itself.
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "payloads are stored as is only while the guard lives"]
pub struct StorePayloadsAsIs(());

impl StorePayloadsAsIs {
    pub fn new() -> StorePayloadsAsIs {
        PAYLOADS_STORED_AS_IS.fetch_add(1, Ordering::SeqCst);
        StorePayloadsAsIs(())
    }
}

impl Default for StorePayloadsAsIs {
    fn default() -> StorePayloadsAsIs {
        StorePayloadsAsIs::new()
    }
}

impl Drop for StorePayloadsAsIs {
    fn drop(&mut self) {
        PAYLOADS_STORED_AS_IS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f` on this thread's zstd context in `local`, made by `make` on first use, or on a context
/// of its own when the thread-local is unavailable (the thread is exiting) or already borrowed.
/// `None` when no context could be made.
fn with_context<C, R>(
    local: &'static LocalKey<RefCell<Option<C>>>,
    make: impl Fn() -> Option<C>,
    mut f: impl FnMut(&mut C) -> R,
) -> Option<R> {
    local
        .try_with(|cell| match cell.try_borrow_mut() {
            Ok(mut slot) => {
                if slot.is_none() {
                    *slot = make();
                }
                slot.as_mut().map(&mut f)
            }
            Err(_) => None,
        })
        .ok()
        .flatten()
        .or_else(|| make().map(|mut c| f(&mut c)))
}

/// Compresses `payload` with [`RECORDS_DICTIONARY`] into `out[start..]` when the frame is shorter
/// than the payload, and returns whether it did; `out` then ends with the frame. On `false` (too
/// short, incompressible, or no context could be made) the caller stores the payload as it is;
/// its `out` beyond `start` is garbage then.
fn compress_after(payload: &[u8], out: &mut Vec<u8>, start: usize) -> bool {
    if payload.len() < PAYLOAD_COMPRESS_MIN_BYTES
        || PAYLOADS_STORED_AS_IS.load(Ordering::SeqCst) > 0
    {
        return false;
    }
    // A destination one byte shorter than the payload: zstd fails with "destination too small"
    // instead of writing a frame that saves nothing.
    out.resize(start + payload.len() - 1, 0);
    let dest = &mut out[start..];
    let written = with_context(&COMPRESSOR, new_compressor, |c| {
        c.compress_to_buffer(payload, &mut *dest)
    });
    match written {
        Some(Ok(n)) if n > 0 && n < payload.len() => {
            out.truncate(start + n);
            true
        }
        _ => false,
    }
}

/// The uncompressed length a stored zstd payload declares, checked before anything is
/// decompressed: exactly one frame spanning all of `stored`, naming [`RECORDS_DICTIONARY_ID`]
/// when `dictionary` and no dictionary otherwise, declaring a content size that is at most
/// [`PAYLOAD_MAX_BYTES`] and longer than `stored`.
fn zstd_payload_len(stored: &[u8], dictionary: bool) -> Result<usize, &'static str> {
    if zstd::zstd_safe::find_frame_compressed_size(stored) != Ok(stored.len()) {
        return Err("compressed payload is not exactly one zstd frame");
    }
    let named = zstd::zstd_safe::get_dict_id_from_frame(stored).map(|id| id.get());
    match (dictionary, named) {
        (true, Some(RECORDS_DICTIONARY_ID)) | (false, None) => {}
        (true, _) => return Err("compressed payload does not name the records dictionary"),
        (false, Some(_)) => return Err("compressed payload names a dictionary its codec has not"),
    }
    let declared = match zstd::zstd_safe::get_frame_content_size(stored) {
        Ok(Some(n)) => n,
        _ => return Err("compressed payload does not declare its length"),
    };
    if declared > PAYLOAD_MAX_BYTES as u64 {
        return Err("compressed payload declares a length out of range");
    }
    let declared = declared as usize;
    if declared <= stored.len() {
        return Err("compressed payload is not shorter than its length");
    }
    Ok(declared)
}

/// Decompresses one zstd frame into exactly `dest` (its declared length): more output than
/// `dest` holds is refused by zstd itself, less by the count.
fn decompress_into(stored: &[u8], dest: &mut [u8], dictionary: bool) -> Result<(), &'static str> {
    let local = if dictionary {
        &DICT_DECOMPRESSOR
    } else {
        &DECOMPRESSOR
    };
    let result = with_context(
        local,
        || new_decompressor(dictionary),
        |d| d.decompress_to_buffer(stored, &mut *dest),
    );
    match result {
        Some(Ok(n)) if n == dest.len() => Ok(()),
        Some(_) => Err("compressed payload does not decompress to its length"),
        None => Err("no zstd decompression context could be made"),
    }
}

/// How many bytes decoding `value` may produce beyond the value itself: the content size its
/// zstd frame declares (at most [`PAYLOAD_MAX_BYTES`], which decoding enforces), or 0 for a
/// payload stored as it is. Reads only the prefix and the frame header, and never fails: a value
/// it cannot read yields 0, and decoding it reports why. Bounds the memory of a parallel scan's
/// pages (spec/journal.md §7).
pub(crate) fn decoded_extra_bytes(value: &[u8]) -> usize {
    let Some(prefix) = value.get(..RECORD_PREFIX_BYTES) else {
        return 0;
    };
    if prefix[6] != CODEC_ZSTD && prefix[6] != CODEC_ZSTD_DICT {
        return 0;
    }
    let header_len = u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]) as usize;
    let Some(stored) = value.get(RECORD_PREFIX_BYTES.saturating_add(header_len)..) else {
        return 0;
    };
    frame_content_size(stored).map_or(0, |n| {
        usize::try_from(n).map_or(PAYLOAD_MAX_BYTES, |n| n.min(PAYLOAD_MAX_BYTES))
    })
}

/// The content size a zstd frame header declares (RFC 8878, section 3.1.1.1), read by hand: the
/// library's reader costs as much as a tenth of a record's whole check, and this runs on the
/// scan's one sequential thread. Only a size hint: decoding checks the frame itself.
fn frame_content_size(frame: &[u8]) -> Option<u64> {
    const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    if frame.get(..4)? != MAGIC {
        return None;
    }
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let window = usize::from(!single_segment);
    let dictionary = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let size = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => return None,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let start = 5 + window + dictionary;
    let field = frame.get(start..start + size)?;
    // Byte by byte rather than a copy into an array: a copy of a variable 1 to 8 bytes is a
    // library call whose stores the following 8-byte load waits for, once per record.
    let n = field
        .iter()
        .rev()
        .fold(0u64, |n, &byte| (n << 8) | u64::from(byte));
    Some(if size == 2 { n + 256 } else { n })
}

/// Decodes a record value (version 1 or 2) without checking its digest or MAC. `scratch` is an
/// aligned buffer the caller reuses: redb's value bytes have alignment 1, and rkyv's default
/// format needs the header at alignment 8, so the (small) header is copied there and validated
/// with bytecheck. A payload stored as it is is borrowed in place; a compressed one is
/// decompressed into `scratch` after the header, bounded by the length the header and the frame
/// both declare (equal, at most [`PAYLOAD_MAX_BYTES`]). Nothing here panics on any input; every
/// refusal is a reason, which readers report as corruption.
pub(crate) fn decode_record<'a>(
    value: &'a [u8],
    scratch: &'a mut AlignedVec<16>,
) -> Result<RecordView<'a>, &'static str> {
    if value.len() < RECORD_PREFIX_BYTES {
        return Err("value is shorter than the record prefix");
    }
    if value[0..4] != RECORD_MAGIC {
        return Err("record magic is wrong");
    }
    let version = u16::from_le_bytes([value[4], value[5]]);
    // None: stored as is; Some(d): a zstd frame, with the records dictionary when d.
    let compressed = match (version, value[6], value[7]) {
        (RECORD_FORMAT_VERSION_1, 0, 0) | (RECORD_FORMAT_VERSION, CODEC_STORED, 0) => None,
        (RECORD_FORMAT_VERSION, CODEC_ZSTD, 0) => Some(false),
        (RECORD_FORMAT_VERSION, CODEC_ZSTD_DICT, 0) => Some(true),
        (RECORD_FORMAT_VERSION_1 | RECORD_FORMAT_VERSION, _, _) => {
            return Err("record payload codec or reserved byte is unknown");
        }
        _ => return Err("record format version is unknown"),
    };
    let header_len = u32::from_le_bytes([value[8], value[9], value[10], value[11]]) as usize;
    if header_len > HEADER_MAX_BYTES || header_len > value.len() - RECORD_PREFIX_BYTES {
        return Err("record header length is out of range");
    }
    let (header_bytes, stored) = value[RECORD_PREFIX_BYTES..].split_at(header_len);
    scratch.clear();
    let (header, payload): (&'a ArchivedRecordHeader, &'a [u8]) =
        if let Some(dictionary) = compressed {
            let payload_len = zstd_payload_len(stored, dictionary)?;
            scratch.resize(header_len + payload_len, 0);
            let (header_buf, payload_buf) = scratch.as_mut_slice().split_at_mut(header_len);
            header_buf.copy_from_slice(header_bytes);
            let header_buf: &'a [u8] = header_buf;
            let header = rkyv::access::<ArchivedRecordHeader, rancor::Failure>(header_buf)
                .map_err(|_| "record header does not validate")?;
            // The header's length bounds the output before a byte is decompressed.
            if header.payload_len.to_native() as usize != payload_len {
                return Err("payload length disagrees with the header");
            }
            decompress_into(stored, payload_buf, dictionary)?;
            let payload: &'a [u8] = payload_buf;
            (header, payload)
        } else {
            scratch.extend_from_slice(header_bytes);
            let header_buf: &'a [u8] = scratch.as_slice();
            let header = rkyv::access::<ArchivedRecordHeader, rancor::Failure>(header_buf)
                .map_err(|_| "record header does not validate")?;
            if header.payload_len.to_native() as usize != stored.len() {
                return Err("payload length disagrees with the header");
            }
            (header, stored)
        };
    let event_id = header.event_id.as_str();
    let kind = header.kind.as_str();
    if event_id.is_empty() || event_id.len() > EVENT_ID_MAX_BYTES {
        return Err("event id length is out of range");
    }
    if kind.is_empty() || kind.len() > KIND_MAX_BYTES || payload.len() > PAYLOAD_MAX_BYTES {
        return Err("kind or payload length is out of range");
    }
    Ok(RecordView {
        stream: StreamId::from_bytes(header.stream),
        revision: header.revision.to_native(),
        position: header.position.to_native(),
        event_id,
        kind,
        occurred_at: Timestamp(header.occurred_at.to_native()),
        payload,
        previous_digest: Digest::from_bytes(header.previous_digest),
        digest: Digest::from_bytes(header.digest),
        mac: header.mac,
    })
}

/// Which check a stored record failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Integrity {
    Digest,
    Mac,
}

/// Recomputes the digest and checks the MAC of a decoded record.
pub(crate) fn authenticate(view: &RecordView<'_>, mac: &MacKey) -> Result<(), Integrity> {
    let digest = record_digest(
        &view.stream,
        view.revision,
        view.event_id,
        view.kind,
        view.occurred_at,
        &view.previous_digest,
        view.payload,
    );
    if digest != view.digest {
        return Err(Integrity::Digest);
    }
    if !mac.verify(view.position, &view.digest, &view.mac) {
        return Err(Integrity::Mac);
    }
    Ok(())
}

/// The stored head of a stream, with the positions of the revisions that are not yet sealed into
/// a chunk (`tail.len() == revision % STREAM_CHUNK_REVISIONS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeadState {
    pub revision: u64,
    pub position: u64,
    pub digest: Digest,
    pub tail: Vec<u64>,
}

const HEAD_FIXED_BYTES: usize = 56;

impl HeadState {
    /// The head of a stream with no records yet.
    pub(crate) fn empty() -> HeadState {
        HeadState {
            revision: 0,
            position: 0,
            digest: Digest::ZERO,
            tail: Vec::new(),
        }
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(HEAD_FORMAT_VERSION);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&(self.tail.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.revision.to_le_bytes());
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(self.digest.as_bytes());
        for p in &self.tail {
            out.extend_from_slice(&p.to_le_bytes());
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<HeadState, &'static str> {
        if bytes.len() < HEAD_FIXED_BYTES || bytes[0] != HEAD_FORMAT_VERSION {
            return Err("stream head has a wrong length or version");
        }
        let count = u32::from_le_bytes(array(&bytes[4..8])) as usize;
        let revision = u64::from_le_bytes(array(&bytes[8..16]));
        let position = u64::from_le_bytes(array(&bytes[16..24]));
        let digest = Digest::from_bytes(array(&bytes[24..56]));
        if revision == 0
            || revision >= crate::limits::POSITION_MAX
            || count as u64 != revision % STREAM_CHUNK_REVISIONS
            || bytes.len() != HEAD_FIXED_BYTES + 8 * count
        {
            return Err("stream head's unsealed positions disagree with its revision");
        }
        let tail = bytes[HEAD_FIXED_BYTES..]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(array(c)))
            .collect();
        Ok(HeadState {
            revision,
            position,
            digest,
            tail,
        })
    }
}

/// Key of a sealed chunk: stream id ‖ chunk number (u64 big-endian, so chunks sort in order).
pub(crate) fn chunk_key(stream: &StreamId, chunk: u64) -> [u8; 40] {
    let mut key = [0u8; 40];
    key[..32].copy_from_slice(stream.as_bytes());
    key[32..].copy_from_slice(&chunk.to_be_bytes());
    key
}

pub(crate) fn encode_chunk(positions: &[u64]) -> Vec<u8> {
    assert_eq!(
        positions.len() as u64,
        STREAM_CHUNK_REVISIONS,
        "a sealed chunk is full"
    );
    positions.iter().flat_map(|p| p.to_le_bytes()).collect()
}

pub(crate) fn chunk_position(chunk: &[u8], index: u64) -> Result<u64, &'static str> {
    if chunk.len() as u64 != 8 * STREAM_CHUNK_REVISIONS {
        return Err("stream chunk has a wrong length");
    }
    let at = (index * 8) as usize;
    Ok(u64::from_le_bytes(array(&chunk[at..at + 8])))
}

/// Copies a slice of known length into an array. Callers pass ranges whose lengths they checked.
pub(crate) fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

/// Decodes a stored record value (as found in the `journal.records` table or an export) and
/// checks its structure and digest. The MAC needs the installation key and is not checked here.
pub fn decode_record_value(value: &[u8]) -> Result<Record, crate::error::DecodeError> {
    let mut scratch = AlignedVec::<16>::new();
    let view = decode_record(value, &mut scratch)
        .map_err(|reason| crate::error::DecodeError { reason })?;
    let digest = record_digest(
        &view.stream,
        view.revision,
        view.event_id,
        view.kind,
        view.occurred_at,
        &view.previous_digest,
        view.payload,
    );
    if digest != view.digest {
        return Err(crate::error::DecodeError {
            reason: "the record digest does not match its content",
        });
    }
    Ok(view.to_record())
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;

#[cfg(test)]
mod frame_size_tests {
    #![allow(clippy::unwrap_used)]

    /// The hand-read content size agrees with zstd's reader on frames of many sizes, with and
    /// without the records dictionary, and on every truncation of a header.
    #[test]
    fn frame_content_size_agrees_with_zstd() {
        let mut with_dict =
            zstd::bulk::Compressor::with_dictionary(3, super::RECORDS_DICTIONARY).unwrap();
        let mut plain = zstd::bulk::Compressor::new(3).unwrap();
        for len in [
            0usize, 1, 63, 64, 255, 256, 257, 300, 65_535, 65_791, 65_792, 200_000,
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            for frame in [
                with_dict.compress(&data).unwrap(),
                plain.compress(&data).unwrap(),
            ] {
                let expected = zstd::zstd_safe::get_frame_content_size(&frame).unwrap();
                assert_eq!(super::frame_content_size(&frame), expected, "len {len}");
                for cut in 0..frame.len().min(20) {
                    let got = super::frame_content_size(&frame[..cut]);
                    let want = zstd::zstd_safe::get_frame_content_size(&frame[..cut])
                        .ok()
                        .flatten();
                    assert!(got.is_none() || got == want, "len {len} cut {cut}");
                }
            }
        }
    }
}
