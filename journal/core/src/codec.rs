//! Byte layouts of everything the journal stores (spec/journal.md, "Tables and layouts").

use hmac::{Hmac, KeyInit, Mac};
use rkyv::rancor;
use rkyv::util::AlignedVec;
use sha2::{Digest as _, Sha256};

use crate::limits::{
    EVENT_ID_MAX_BYTES, KIND_MAX_BYTES, PAYLOAD_MAX_BYTES, STREAM_CHUNK_REVISIONS,
};
use crate::types::{Digest, NewRecord, Record, StreamId, Timestamp, record_digest};

/// Format version written to the meta table and to every record value.
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const RECORD_MAGIC: [u8; 4] = *b"CTXR";
/// magic (4) + version u16 + reserved u16 + header length u32.
pub(crate) const RECORD_PREFIX_BYTES: usize = 12;
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
/// borrow the bytes they were read from.
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

/// Encodes a complete record value: prefix, header archive, payload.
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
    out.clear();
    out.reserve(RECORD_PREFIX_BYTES + archived.len() + record.payload.len());
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&(FORMAT_VERSION as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(archived.len() as u32).to_le_bytes());
    out.extend_from_slice(&archived);
    out.extend_from_slice(&record.payload);
}

/// Decodes a record value without checking its digest or MAC. `scratch` is an aligned buffer the
/// caller reuses: redb's value bytes have alignment 1, and rkyv's default format needs the header
/// at alignment 8, so the (small) header is copied there and validated with bytecheck; the
/// payload is borrowed in place.
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
    if u32::from(version) != FORMAT_VERSION {
        return Err("record format version is unknown");
    }
    let header_len = u32::from_le_bytes([value[8], value[9], value[10], value[11]]) as usize;
    if header_len > HEADER_MAX_BYTES || header_len > value.len() - RECORD_PREFIX_BYTES {
        return Err("record header length is out of range");
    }
    let (header_bytes, payload) = value[RECORD_PREFIX_BYTES..].split_at(header_len);
    scratch.clear();
    scratch.extend_from_slice(header_bytes);
    let header = rkyv::access::<ArchivedRecordHeader, rancor::Failure>(scratch)
        .map_err(|_| "record header does not validate")?;
    if header.payload_len.to_native() as usize != payload.len() {
        return Err("payload length disagrees with the header");
    }
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
        out.push(FORMAT_VERSION as u8);
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
        if bytes.len() < HEAD_FIXED_BYTES || u32::from(bytes[0]) != FORMAT_VERSION {
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
