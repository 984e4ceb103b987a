//! Every limit the journal enforces, named with its unit last (spec/journal.md, "Limits").

/// Longest event id accepted, in bytes.
pub const EVENT_ID_MAX_BYTES: usize = 128;
/// Longest record kind accepted, in bytes.
pub const KIND_MAX_BYTES: usize = 64;
/// Largest payload of one record, in bytes.
pub const PAYLOAD_MAX_BYTES: usize = 1024 * 1024;
/// Shortest payload the journal stores compressed (record value version 2, spec/journal.md §4):
/// with the records dictionary the hook path's 64-127-byte payloads shrink 2.1x and 128-255-byte
/// ones 2.4x for about 2 us of zstd per write (without it, 128-255 bytes shrank only 1.13x, hence
/// the earlier threshold of 256). A writer's choice, not a format rule: readers accept a
/// compressed payload of any length the frame makes shorter.
pub(crate) const PAYLOAD_COMPRESS_MIN_BYTES: usize = 64;
/// Most records in one append request (all of its streams together).
pub const BATCH_RECORDS_MAX: usize = 4096;
/// Most payload bytes in one append request (all of its streams together).
pub const BATCH_PAYLOAD_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Most streams named by one atomic multi-stream append.
pub const BATCH_STREAMS_MAX: usize = 64;
/// Longest namespace accepted by [`crate::StreamId::derive`], in bytes.
pub const NAMESPACE_MAX_BYTES: usize = 64;
/// Longest stream key accepted by [`crate::StreamId::derive`], in bytes.
pub const STREAM_KEY_MAX_BYTES: usize = 1024;
/// Most records the group committer puts into one write transaction. Requests are never split, so
/// a single request may exceed this on its own (it is bounded by [`BATCH_RECORDS_MAX`]).
pub const GROUP_RECORDS_MAX: usize = 8192;
/// Number of event ids kept in the unmerged, in-memory part of the event-id index before they are
/// merged into the on-disk index in one sorted pass (spec/journal.md, invariant J9).
pub const EVENT_INDEX_MERGE_RECORDS: u64 = 32 * 1024;
/// Revisions per sealed chunk of the per-stream position index (spec/journal.md, "streams").
pub const STREAM_CHUNK_REVISIONS: u64 = 16;
/// Largest position or revision a valid journal holds (J11); values from disk above it are corrupt.
pub(crate) const POSITION_MAX: u64 = 1 << 63;
