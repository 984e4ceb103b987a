//! The values callers hand the journal and get back (stream ids, digests, records, outcomes), the
//! record digest (formula D) and the refusals of caller values ([`InputError`]). The bottom of
//! the vocabulary: it uses only `limits`; `error` and `codec` build on it, never the other way
//! round.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::limits::{
    EVENT_ID_MAX_BYTES, KIND_MAX_BYTES, NAMESPACE_MAX_BYTES, PAYLOAD_MAX_BYTES,
    STREAM_KEY_MAX_BYTES,
};

const STREAM_ID_DOMAIN: &[u8] = b"ctx.journal.stream-id.v1\0";
const RECORD_DIGEST_DOMAIN: &[u8] = b"ctx.journal.record.v1\0";

/// A 32-byte stream identifier derived from a namespace and a key.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId([u8; 32]);

impl StreamId {
    /// Derives the id as SHA-256 over a domain prefix, the namespace and the key, each
    /// length-prefixed (spec/journal.md, "Stream ids").
    pub fn derive(namespace: &str, key: &[u8]) -> Result<StreamId, InputError> {
        if namespace.is_empty()
            || namespace.len() > NAMESPACE_MAX_BYTES
            || !namespace.bytes().all(is_token_byte)
        {
            return Err(InputError::Namespace {
                namespace: namespace.escape_debug().to_string(),
            });
        }
        if key.len() > STREAM_KEY_MAX_BYTES {
            return Err(InputError::StreamKeyTooLong {
                len: key.len(),
                max: STREAM_KEY_MAX_BYTES,
            });
        }
        let mut hasher = Sha256::new();
        hasher.update(STREAM_ID_DOMAIN);
        hasher.update((namespace.len() as u32).to_le_bytes());
        hasher.update(namespace.as_bytes());
        hasher.update((key.len() as u32).to_le_bytes());
        hasher.update(key);
        Ok(StreamId(hasher.finalize().into()))
    }

    /// Wraps raw bytes, for ids read back from elsewhere (an export, a report).
    pub const fn from_bytes(bytes: [u8; 32]) -> StreamId {
        StreamId(bytes)
    }

    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64-character lowercase hex form.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamId({})", self.to_hex())
    }
}

/// A SHA-256 record digest, shown as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The all-zero digest stands for "no previous record" at revision 1.
    pub const ZERO: Digest = Digest([0; 32]);

    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// Microseconds since the Unix epoch (UTC), as given by the caller. The journal never reads a
/// clock; it stores what it is told.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Timestamp(pub i64);

/// The revision an append expects its stream to be at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExpectedRevision {
    /// Append regardless of the stream's head.
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream's head must be exactly this revision (at least 1).
    Exact(u64),
}

impl fmt::Display for ExpectedRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedRevision::Any => f.write_str("any revision"),
            ExpectedRevision::NoStream => f.write_str("no stream"),
            ExpectedRevision::Exact(n) => write!(f, "revision {n}"),
        }
    }
}

/// One record to append.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NewRecord {
    pub event_id: String,
    pub kind: String,
    pub occurred_at: Timestamp,
    pub payload: Vec<u8>,
}

impl NewRecord {
    /// The digest (spec/journal.md formula D) this record will have when appended at `revision`
    /// of `stream` after a record of digest `previous` (`Digest::ZERO` for revision 1). D depends on
    /// neither the position nor the installation key, so a caller can name a record in another
    /// record of the same atomic batch before the journal assigns it.
    pub fn digest_at(&self, stream: &StreamId, revision: u64, previous: &Digest) -> Digest {
        record_digest(
            stream,
            revision,
            &self.event_id,
            &self.kind,
            self.occurred_at,
            previous,
            &self.payload,
        )
    }

    pub fn new(
        event_id: impl Into<String>,
        kind: impl Into<String>,
        occurred_at: Timestamp,
        payload: impl Into<Vec<u8>>,
    ) -> NewRecord {
        NewRecord {
            event_id: event_id.into(),
            kind: kind.into(),
            occurred_at,
            payload: payload.into(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), InputError> {
        validate_event_id(&self.event_id)?;
        if self.kind.is_empty()
            || self.kind.len() > KIND_MAX_BYTES
            || !self.kind.bytes().all(is_token_byte)
        {
            return Err(InputError::Kind {
                event_id: self.event_id.clone(),
                kind: truncated(&self.kind),
            });
        }
        if self.payload.len() > PAYLOAD_MAX_BYTES {
            return Err(InputError::PayloadTooLarge {
                event_id: self.event_id.clone(),
                len: self.payload.len(),
                max: PAYLOAD_MAX_BYTES,
            });
        }
        Ok(())
    }
}

/// The records of one stream inside an (optionally multi-stream) atomic append.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct StreamAppend {
    pub stream: StreamId,
    pub expected: ExpectedRevision,
    pub records: Vec<NewRecord>,
}

impl StreamAppend {
    pub fn new(stream: StreamId, expected: ExpectedRevision, records: Vec<NewRecord>) -> Self {
        StreamAppend {
            stream,
            expected,
            records,
        }
    }
}

/// What the journal stored for one record of an append.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct AppendedRecord {
    pub revision: u64,
    pub position: u64,
    pub digest: Digest,
}

/// The result of one stream's part of an append.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct AppendOutcome {
    pub stream: StreamId,
    /// One entry per record, in the order given.
    pub records: Vec<AppendedRecord>,
    /// True when every record was already in the journal with identical content and nothing was
    /// written: the original result is returned.
    pub replayed: bool,
}

impl AppendOutcome {
    /// The stream's revision after this append (the last record's revision).
    pub fn last_revision(&self) -> u64 {
        self.records.last().map_or(0, |r| r.revision)
    }

    pub fn last_digest(&self) -> Digest {
        self.records.last().map_or(Digest::ZERO, |r| r.digest)
    }
}

/// The head of a stream: its last revision, that record's global position and digest.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StreamHead {
    pub revision: u64,
    pub position: u64,
    pub digest: Digest,
}

/// A record read back from the journal, verified, and owned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    pub stream: StreamId,
    pub revision: u64,
    pub position: u64,
    pub event_id: String,
    pub kind: String,
    pub occurred_at: Timestamp,
    pub payload: Vec<u8>,
    pub previous_digest: Digest,
    pub digest: Digest,
}

impl Record {
    /// True when this stored record holds exactly `new`'s content in `stream`: what makes a
    /// re-append an idempotent retry rather than a conflict.
    pub(crate) fn same_content(&self, stream: &StreamId, new: &NewRecord) -> bool {
        self.stream == *stream
            && self.event_id == new.event_id
            && self.kind == new.kind
            && self.occurred_at == new.occurred_at
            && self.payload == new.payload
    }
}

/// The record digest: SHA-256 over the domain prefix and the canonical encoding of the record's
/// content and its predecessor's digest (spec/journal.md, formula D).
pub(crate) fn record_digest(
    stream: &StreamId,
    revision: u64,
    event_id: &str,
    kind: &str,
    occurred_at: Timestamp,
    previous: &Digest,
    payload: &[u8],
) -> Digest {
    let mut h = Sha256::new();
    h.update(RECORD_DIGEST_DOMAIN);
    h.update(stream.as_bytes());
    h.update(revision.to_le_bytes());
    h.update((event_id.len() as u32).to_le_bytes());
    h.update(event_id.as_bytes());
    h.update((kind.len() as u32).to_le_bytes());
    h.update(kind.as_bytes());
    h.update(occurred_at.0.to_le_bytes());
    h.update(previous.as_bytes());
    h.update((payload.len() as u64).to_le_bytes());
    h.update(payload);
    Digest::from_bytes(h.finalize().into())
}

/// A caller value that the journal refuses before touching storage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    #[error("namespace \"{namespace}\" is not a token of 1 to 64 printable ASCII bytes")]
    Namespace { namespace: String },
    #[error("stream key is {len} bytes long; the limit is {max} bytes")]
    StreamKeyTooLong { len: usize, max: usize },
    #[error("event id \"{event_id}\" is not a token of 1 to 128 printable ASCII bytes")]
    EventId { event_id: String },
    #[error(
        "record kind \"{kind}\" of event {event_id} is not a token of 1 to 64 printable ASCII bytes"
    )]
    Kind { event_id: String, kind: String },
    #[error("payload of event {event_id} is {len} bytes; the limit is {max} bytes")]
    PayloadTooLarge {
        event_id: String,
        len: usize,
        max: usize,
    },
    #[error("the append holds {count} records; the limit is {max} records")]
    TooManyRecords { count: usize, max: usize },
    #[error("the append holds {bytes} payload bytes; the limit is {max} bytes")]
    BatchTooLarge { bytes: usize, max: usize },
    #[error("the append names {count} streams; the limit is {max} streams")]
    TooManyStreams { count: usize, max: usize },
    #[error("the append holds no records")]
    Empty,
    #[error("stream {stream} is given no records")]
    EmptyStream { stream: StreamId },
    #[error("stream {stream} appears twice in one atomic append")]
    DuplicateStream { stream: StreamId },
    #[error("event id {event_id} appears twice in one append")]
    DuplicateEventId { event_id: String },
    #[error("expected revision 0 of stream {stream} is not a revision; use NoStream")]
    ExactZero { stream: StreamId },
}

pub(crate) fn validate_event_id(event_id: &str) -> Result<(), InputError> {
    if event_id.is_empty()
        || event_id.len() > EVENT_ID_MAX_BYTES
        || !event_id.bytes().all(is_token_byte)
    {
        return Err(InputError::EventId {
            event_id: truncated(event_id),
        });
    }
    Ok(())
}

/// Tokens are printable ASCII without spaces, so they can be shown in messages verbatim.
pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_graphic()
}

/// Shows at most 160 characters of a caller value in an error message, escaped.
fn truncated(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(160)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if value.chars().count() > 160 {
        out.push('…');
    }
    out
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}
