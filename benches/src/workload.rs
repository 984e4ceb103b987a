//! The shared workload: a small domain-like event, its rkyv and JSON encodings (about 200 bytes
//! each), random-looking event ids and derived stream ids.

use ctx_journal::{
    BATCH_RECORDS_MAX, BATCH_STREAMS_MAX, ExpectedRevision, NewRecord, StreamAppend, StreamId,
    Timestamp,
};
use rkyv::rancor;
use rkyv::util::AlignedVec;
use sha2::{Digest as _, Sha256};

use crate::BenchResult;

/// The record kind every bench record carries.
pub const KIND: &str = "bench.capability_decided";

/// Number of distinct prebuilt payloads; records cycle through them.
pub const PAYLOAD_POOL: usize = 1024;

/// Number of streams the multi-stream workloads cycle through.
pub const STREAMS: usize = 1000;

/// Records per commit in the batch workloads.
pub const BATCH_RECORDS: usize = 1000;

/// Timestamp base of generated records (2026-01-01T00:00:00Z in microseconds).
const EPOCH_MICROS: i64 = 1_767_225_600_000_000;

/// A small event shaped like the domain's: a scope, a capability, a decision and a reason.
#[derive(
    rkyv::Archive, rkyv::Serialize, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq,
)]
pub struct BenchEvent {
    pub scope: String,
    pub capability: String,
    pub decision: u32,
    pub sequence: u64,
    pub reason: String,
}

const CAPABILITIES: [&str; 8] = [
    "skill:repo-search",
    "skill:release-notes",
    "agent:code-reviewer",
    "agent:test-runner",
    "mcp:issue-tracker",
    "mcp:docs-index",
    "harness:sandbox",
    "harness:gpu-runner",
];

const REASON: &str = "operator approved after consent challenge; policy allows install in this scope; \
                      catalog signature verified";

impl BenchEvent {
    /// The `i`-th event of the pool.
    pub fn nth(i: usize) -> BenchEvent {
        BenchEvent {
            scope: format!("scope-{:04}", i % STREAMS),
            capability: CAPABILITIES[i % CAPABILITIES.len()].to_owned(),
            decision: (i % 3) as u32,
            sequence: i as u64,
            reason: REASON.to_owned(),
        }
    }
}

/// One prebuilt event and both of its encodings.
#[derive(Debug, Clone)]
pub struct PooledPayload {
    pub event: BenchEvent,
    /// The rkyv archive of `event` (what the journal stores).
    pub rkyv: Vec<u8>,
    /// The JSON of `event` (what the SQLite peer stores).
    pub json: Vec<u8>,
}

/// Prebuilt payloads, so no measured loop pays for encoding.
#[derive(Debug, Clone)]
pub struct Payloads {
    pool: Vec<PooledPayload>,
}

impl Payloads {
    pub fn new() -> BenchResult<Payloads> {
        let mut pool = Vec::with_capacity(PAYLOAD_POOL);
        for i in 0..PAYLOAD_POOL {
            let event = BenchEvent::nth(i);
            let rkyv = rkyv::to_bytes::<rancor::Error>(&event)?.to_vec();
            let json = serde_json::to_vec(&event)?;
            pool.push(PooledPayload { event, rkyv, json });
        }
        Ok(Payloads { pool })
    }

    /// The payload for record number `seq`.
    pub fn get(&self, seq: u64) -> &PooledPayload {
        &self.pool[(seq % PAYLOAD_POOL as u64) as usize]
    }

    /// Average sizes in bytes of the rkyv and JSON encodings.
    pub fn average_sizes(&self) -> (f64, f64) {
        let n = self.pool.len().max(1) as f64;
        let rkyv: usize = self.pool.iter().map(|p| p.rkyv.len()).sum();
        let json: usize = self.pool.iter().map(|p| p.json.len()).sum();
        (rkyv as f64 / n, json as f64 / n)
    }
}

/// splitmix64: a cheap bijective mix, so ids look random but never repeat.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 36-character event id that looks like a random UUID (so the event-id index sees keys in
/// random order, as it would in production), unique per (`tag`, `seq`).
pub fn event_id(tag: u64, seq: u64) -> String {
    let (hi, lo) = event_id_parts(tag, seq);
    format!("evt-{hi:016x}{lo:016x}")
}

/// The 128 bits behind [`event_id`], for peers that store an event id as a UUID.
pub fn event_id_parts(tag: u64, seq: u64) -> (u64, u64) {
    (mix(seq ^ tag.rotate_left(40)), mix(seq).wrapping_add(tag))
}

/// The occurred-at timestamp of record number `seq` (one millisecond apart).
pub fn occurred_at(seq: u64) -> Timestamp {
    Timestamp(EPOCH_MICROS + (seq as i64) * 1000)
}

/// A journal record for sequence number `seq`.
pub fn new_record(payloads: &Payloads, tag: u64, seq: u64) -> NewRecord {
    NewRecord::new(
        event_id(tag, seq),
        KIND,
        occurred_at(seq),
        payloads.get(seq).rkyv.clone(),
    )
}

/// The `count` stream ids `bench/stream-{i}`.
pub fn stream_ids(count: usize) -> BenchResult<Vec<StreamId>> {
    (0..count)
        .map(|i| Ok(StreamId::derive("bench", format!("stream-{i}").as_bytes())?))
        .collect()
}

/// The expected revision that matches a tracked head (0 means the stream does not exist).
pub fn expected(head: u64) -> ExpectedRevision {
    if head == 0 {
        ExpectedRevision::NoStream
    } else {
        ExpectedRevision::Exact(head)
    }
}

/// The multi-stream batch shape used for "1000-record commits over 1000 streams": one
/// `append_batch` may name at most [`BATCH_STREAMS_MAX`] streams, so each commit takes a window
/// of 64 consecutive streams (the window start advances by 64 each commit, wrapping at
/// [`STREAMS`]) and spreads [`BATCH_RECORDS`] records over them (15 or 16 each). Every 16
/// commits the windows have covered all 1000 streams.
#[derive(Debug)]
pub struct WindowedBatches {
    streams: Vec<StreamId>,
    heads: Vec<u64>,
    commit: usize,
    tag: u64,
    next_seq: u64,
}

impl WindowedBatches {
    pub fn new(tag: u64) -> BenchResult<WindowedBatches> {
        Ok(WindowedBatches {
            streams: stream_ids(STREAMS)?,
            heads: vec![0; STREAMS],
            commit: 0,
            tag,
            next_seq: 0,
        })
    }

    /// Streams named by each commit.
    pub const fn streams_per_commit() -> usize {
        BATCH_STREAMS_MAX
    }

    /// Builds the next commit's append (with exact expected revisions) and the stream indexes it
    /// touches, in order.
    pub fn next_batch(&mut self, payloads: &Payloads) -> (Vec<StreamAppend>, Vec<usize>) {
        let width = BATCH_STREAMS_MAX.min(STREAMS);
        let records = BATCH_RECORDS.min(BATCH_RECORDS_MAX);
        let start = (self.commit * width) % STREAMS;
        let mut batch = Vec::with_capacity(width);
        let mut touched = Vec::with_capacity(width);
        for k in 0..width {
            let s = (start + k) % STREAMS;
            let n = records / width + usize::from(k < records % width);
            let mut recs = Vec::with_capacity(n);
            for _ in 0..n {
                recs.push(new_record(payloads, self.tag, self.next_seq));
                self.next_seq += 1;
            }
            batch.push(StreamAppend::new(
                self.streams[s],
                expected(self.heads[s]),
                recs,
            ));
            touched.push(s);
        }
        self.commit += 1;
        (batch, touched)
    }

    /// Records the revisions an accepted batch produced.
    pub fn accepted(&mut self, touched: &[usize], last_revisions: impl Iterator<Item = u64>) {
        for (s, rev) in touched.iter().zip(last_revisions) {
            self.heads[*s] = rev;
        }
    }
}

/// The per-stream SHA-256 chain digest the SQLite peer stores: the same fields the journal
/// hashes (stream, revision, event id, kind, time, previous digest, payload), without its domain
/// prefix, length framing or MAC.
pub fn peer_digest(
    stream: &StreamId,
    revision: u64,
    event_id: &str,
    occurred_at: Timestamp,
    previous: &[u8; 32],
    payload: &[u8],
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(stream.as_bytes());
    h.update(revision.to_le_bytes());
    h.update(event_id.as_bytes());
    h.update(KIND.as_bytes());
    h.update(occurred_at.0.to_le_bytes());
    h.update(previous);
    h.update(payload);
    h.finalize().into()
}

/// Validates an rkyv payload (copied into `scratch` for alignment: the journal's payload bytes
/// have alignment 1) and returns a field read from the archive, so the work cannot be skipped.
pub fn access_payload(scratch: &mut AlignedVec<16>, payload: &[u8]) -> BenchResult<u64> {
    scratch.clear();
    scratch.extend_from_slice(payload);
    let event = rkyv::access::<ArchivedBenchEvent, rancor::Error>(scratch)?;
    Ok(event.sequence.to_native() + u64::from(event.decision.to_native()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_about_200_bytes_and_round_trip() -> BenchResult<()> {
        let p = Payloads::new()?;
        let (rkyv, json) = p.average_sizes();
        assert!((150.0..260.0).contains(&rkyv), "rkyv {rkyv}");
        assert!((150.0..260.0).contains(&json), "json {json}");
        let mut scratch = AlignedVec::new();
        let one = p.get(5);
        assert_eq!(access_payload(&mut scratch, &one.rkyv)?, 5 + 2);
        let back: BenchEvent = serde_json::from_slice(&one.json)?;
        assert_eq!(back, one.event);
        Ok(())
    }

    #[test]
    fn event_ids_are_unique_and_valid() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|i| event_id(7, i)).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id.len() == 36));
    }

    #[test]
    fn windowed_batches_cover_all_streams() -> BenchResult<()> {
        let p = Payloads::new()?;
        let mut w = WindowedBatches::new(1)?;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..16 {
            let (batch, touched) = w.next_batch(&p);
            assert_eq!(batch.len(), 64);
            assert_eq!(batch.iter().map(|b| b.records.len()).sum::<usize>(), 1000);
            seen.extend(touched);
        }
        assert_eq!(seen.len(), STREAMS);
        Ok(())
    }
}
