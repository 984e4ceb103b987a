//! The activation ledger: what ctx intended and did at each host target, on the ctx journal.
//!
//! One stream per target (namespace [`HOST_ACTIVATION_NAMESPACE`], key `host ‖ 0 ‖ kind ‖ 0 ‖ path
//! [‖ 0 ‖ entry]`), holding records of kind [`HOST_ACTIVATION_RECORD_KIND`] that alternate intent,
//! outcome, intent, outcome. One more stream (namespace [`HOST_ACTIVATION_INDEX_NAMESPACE`]) lists
//! every target once, written in the same atomic append as the target's first record, so
//! recovery and inspection read one short stream instead of scanning the journal.
//! Layout and invariants: `spec/activation.md` §4.

use std::fmt;
use std::ops::ControlFlow;
use std::time::{SystemTime, UNIX_EPOCH};

use ctx_journal::{
    AppendError, ExpectedRevision, Journal, NewRecord, StreamAppend, StreamId, Timestamp,
};
use ctx_model::{Json, is_capability_identity, is_sha, sha256_hex_bytes};

use crate::hosts::AgentHost;

use super::error::LedgerError;
use super::error::LedgerRecordError;
use ctx_model::CapabilityKind;
use ctx_projections::streams::{
    HOST_ACTIVATION_INDEX_NAMESPACE, HOST_ACTIVATION_NAMESPACE, HOST_ACTIVATION_RECORD_KIND,
    HOST_ACTIVATION_TARGET_KIND,
};

/// Key of the target index stream.
pub const ACTIVATION_INDEX_KEY: &[u8] = b"targets";
/// Longest target path plus entry, in bytes: the stream key must stay within the journal's
/// `STREAM_KEY_MAX_BYTES` (1024) with the host and kind in front.
pub const TARGET_TEXT_MAX_BYTES: usize = 960;
/// Records read per journal call while folding a target's stream.
const READ_CHUNK_RECORDS: usize = 1024;

/// Which host place a ledger stream is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetKey {
    pub host: AgentHost,
    pub kind: CapabilityKind,
    /// The canonical path of the target entry (skill link, agent file) or config file.
    pub path: String,
    /// For an entry inside a config file, its key path (`mcpServers.<name>`,
    /// `mcp_servers.<name>`); `None` for a directory entry.
    pub entry: Option<String>,
}

impl TargetKey {
    /// The stream key: `host ‖ 0x00 ‖ kind ‖ 0x00 ‖ path`, then `0x00 ‖ entry` when there is one.
    /// Paths hold no NUL byte, so the parts cannot run into each other.
    pub fn stream_key(&self) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.path.len() + 32);
        key.extend_from_slice(self.host.as_str().as_bytes());
        key.push(0);
        key.extend_from_slice(self.kind.as_str().as_bytes());
        key.push(0);
        key.extend_from_slice(self.path.as_bytes());
        if let Some(entry) = &self.entry {
            key.push(0);
            key.extend_from_slice(entry.as_bytes());
        }
        key
    }

    /// The target's stream in the ctx journal.
    pub fn stream(&self) -> Result<StreamId, LedgerError> {
        Ok(StreamId::derive(
            HOST_ACTIVATION_NAMESPACE,
            &self.stream_key(),
        )?)
    }

    /// A short name for the staging entries of one intent: 16 hex digits of the stream key's
    /// SHA-256 and the intent's revision. Deterministic, so recovery finds what a crashed attempt
    /// left behind.
    pub(crate) fn tag(&self, revision: u64) -> String {
        let digest = sha256_hex_bytes(&self.stream_key());
        format!("{}-{revision}", digest.get(..16).unwrap_or(&digest))
    }

    /// The path and entry as people read them.
    pub fn display(&self) -> String {
        match &self.entry {
            Some(e) => format!("{} ({e})", self.path),
            None => self.path.clone(),
        }
    }

    fn to_json(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("entry", Json::opt_str(self.entry.as_deref())),
            ("host", Json::str(self.host.as_str())),
            ("kind", Json::str(self.kind.as_str())),
            ("path", Json::str(&self.path)),
        ]
    }

    fn from_json(value: &Json) -> Result<TargetKey, LedgerRecordError> {
        let host = value
            .get_str("host")
            .and_then(AgentHost::parse)
            .ok_or(LedgerRecordError::Host)?;
        let kind = value
            .get_str("kind")
            .and_then(CapabilityKind::parse)
            .filter(|k| k.is_installable())
            .ok_or(LedgerRecordError::Kind)?;
        let path = value
            .get_str("path")
            .filter(|p| p.starts_with('/') && !p.contains('\0'))
            .ok_or(LedgerRecordError::Path)?
            .to_owned();
        let entry = match value.get("entry") {
            Some(Json::Null) => None,
            Some(Json::Str(e)) if !e.is_empty() && !e.contains('\0') => Some(e.clone()),
            _ => return Err(LedgerRecordError::Entry),
        };
        let key = TargetKey {
            host,
            kind,
            path,
            entry,
        };
        if key.path.len() + key.entry.as_ref().map_or(0, String::len) > TARGET_TEXT_MAX_BYTES {
            return Err(LedgerRecordError::TargetTooLong);
        }
        Ok(key)
    }
}

/// Activate or deactivate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Activate,
    Deactivate,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Activate => "activate",
            Operation::Deactivate => "deactivate",
        }
    }

    fn parse(s: &str) -> Option<Operation> {
        [Operation::Activate, Operation::Deactivate]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// What an outcome says happened at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeResult {
    /// The target holds the intent's new state.
    Applied,
    /// The target still holds the intent's prior state; nothing was changed.
    NotApplied,
    /// The atomic step found the target changed and wrote nothing (a conflict at apply time).
    Refused,
    /// The target holds neither state: a person must look.
    Indeterminate,
}

impl OutcomeResult {
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeResult::Applied => "applied",
            OutcomeResult::NotApplied => "not-applied",
            OutcomeResult::Refused => "refused",
            OutcomeResult::Indeterminate => "indeterminate",
        }
    }

    fn parse(s: &str) -> Option<OutcomeResult> {
        [
            OutcomeResult::Applied,
            OutcomeResult::NotApplied,
            OutcomeResult::Refused,
            OutcomeResult::Indeterminate,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

/// Who wrote an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// The operation that wrote the intent, after its atomic step.
    Apply,
    /// `recover()`, by inspecting the target after a crash.
    Recovery,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Apply => "apply",
            Resolution::Recovery => "recovery",
        }
    }

    fn parse(s: &str) -> Option<Resolution> {
        [Resolution::Apply, Resolution::Recovery]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// The outcome part of an outcome record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub result: OutcomeResult,
    /// The state found at the target when the outcome was decided (`None` = absent).
    pub observed_state: Option<String>,
    pub resolved_by: Resolution,
    /// The revision of the intent this outcome resolves (always the revision just before).
    pub intent_revision: u64,
}

/// One ledger record: an intent (`outcome` is `None`) or an outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRecord {
    pub operation: Operation,
    pub target: TargetKey,
    pub name: String,
    pub capability_id: String,
    /// The state digest found before the atomic step (`None` = absent).
    pub prior_state: Option<String>,
    /// The state digest the atomic step produces (`None` = absent, for a deactivation).
    pub new_state: Option<String>,
    pub outcome: Option<Outcome>,
}

impl LedgerRecord {
    /// `intent` or `outcome`.
    pub fn phase(&self) -> &'static str {
        if self.outcome.is_some() {
            "outcome"
        } else {
            "intent"
        }
    }

    /// The canonical JSON payload (spec/activation.md §4.2): sorted keys, no whitespace.
    pub fn encode(&self) -> Vec<u8> {
        let state = |s: &Option<String>| Json::opt_str(s.as_deref());
        let mut fields = self.target.to_json();
        fields.extend([
            ("capability_id", Json::str(&self.capability_id)),
            ("name", Json::str(&self.name)),
            ("new_state", state(&self.new_state)),
            ("operation", Json::str(self.operation.as_str())),
            ("phase", Json::str(self.phase())),
            ("prior_state", state(&self.prior_state)),
        ]);
        if let Some(o) = &self.outcome {
            fields.extend([
                ("intent_revision", Json::from(o.intent_revision)),
                ("observed_state", state(&o.observed_state)),
                ("resolved_by", Json::str(o.resolved_by.as_str())),
                ("result", Json::str(o.result.as_str())),
            ]);
        }
        Json::object(fields).to_cj().into_bytes()
    }

    /// Decodes a payload strictly: exactly the keys of its phase, valid values, and canonical
    /// bytes (re-encoding gives the same payload).
    pub fn decode(payload: &[u8]) -> Result<LedgerRecord, LedgerRecordError> {
        let text = std::str::from_utf8(payload).map_err(|_| LedgerRecordError::NotUtf8)?;
        let value = Json::parse(text)?;
        let map = value.as_obj().ok_or(LedgerRecordError::NotObject)?;
        let phase = value
            .get_str("phase")
            .ok_or(LedgerRecordError::Missing { field: "phase" })?;
        let expected: &'static [&'static str] = match phase {
            "intent" => &INTENT_KEYS,
            "outcome" => &OUTCOME_KEYS,
            _ => {
                return Err(LedgerRecordError::Phase {
                    phase: phase.to_owned(),
                });
            }
        };
        if !map.keys().map(String::as_str).eq(expected.iter().copied()) {
            return Err(LedgerRecordError::Keys { expected });
        }
        let state = |key: &'static str| -> Result<Option<String>, LedgerRecordError> {
            match value.get(key) {
                Some(Json::Null) => Ok(None),
                Some(Json::Str(s)) if is_sha(s) => Ok(Some(s.clone())),
                _ => Err(LedgerRecordError::State { field: key }),
            }
        };
        let target = TargetKey::from_json(&value)?;
        let operation = value
            .get_str("operation")
            .and_then(Operation::parse)
            .ok_or(LedgerRecordError::Operation)?;
        let name = value
            .get_str("name")
            .ok_or(LedgerRecordError::Missing { field: "name" })?
            .to_owned();
        if !super::names::is_recorded_name(&name) {
            return Err(LedgerRecordError::Name { name });
        }
        let capability_id = value
            .get_str("capability_id")
            .filter(|id| is_capability_identity(target.kind.as_str(), id))
            .ok_or(LedgerRecordError::CapabilityId)?
            .to_owned();
        let outcome = if phase == "outcome" {
            Some(Outcome {
                result: value
                    .get_str("result")
                    .and_then(OutcomeResult::parse)
                    .ok_or(LedgerRecordError::Result)?,
                observed_state: state("observed_state")?,
                resolved_by: value
                    .get_str("resolved_by")
                    .and_then(Resolution::parse)
                    .ok_or(LedgerRecordError::ResolvedBy)?,
                intent_revision: value
                    .get("intent_revision")
                    .and_then(Json::as_i64)
                    .and_then(|r| u64::try_from(r).ok())
                    .filter(|r| *r >= 1)
                    .ok_or(LedgerRecordError::IntentRevision)?,
            })
        } else {
            None
        };
        let record = LedgerRecord {
            operation,
            target,
            name,
            capability_id,
            prior_state: state("prior_state")?,
            new_state: state("new_state")?,
            outcome,
        };
        if record.encode() != payload {
            return Err(LedgerRecordError::NotCanonical);
        }
        Ok(record)
    }
}

const INTENT_KEYS: [&str; 10] = [
    "capability_id",
    "entry",
    "host",
    "kind",
    "name",
    "new_state",
    "operation",
    "path",
    "phase",
    "prior_state",
];

const OUTCOME_KEYS: [&str; 14] = [
    "capability_id",
    "entry",
    "host",
    "intent_revision",
    "kind",
    "name",
    "new_state",
    "observed_state",
    "operation",
    "path",
    "phase",
    "prior_state",
    "resolved_by",
    "result",
];

/// Where ctx keeps its activation records. Records of one target are read and appended with
/// optimistic concurrency: an append names the revision it expects the target's stream at.
pub trait ActivationLedger: Send + Sync + fmt::Debug {
    /// Every record of `target`, in order (record `i` is at revision `i + 1`).
    fn read(&self, target: &TargetKey) -> Result<Vec<LedgerRecord>, LedgerError>;

    /// Appends `records` atomically after revision `expected` (0: the target has no records
    /// yet) and returns the new head revision. A stream that moved is
    /// [`LedgerError::Moved`].
    fn append(
        &self,
        target: &TargetKey,
        expected: u64,
        records: &[LedgerRecord],
    ) -> Result<u64, LedgerError>;

    /// Every target that has records, each once.
    fn targets(&self) -> Result<Vec<TargetKey>, LedgerError>;
}

/// The ledger on the ctx journal.
#[derive(Debug, Clone)]
pub struct JournalLedger {
    journal: Journal,
}

impl JournalLedger {
    pub fn new(journal: Journal) -> JournalLedger {
        JournalLedger { journal }
    }

    fn index_stream() -> Result<StreamId, LedgerError> {
        Ok(StreamId::derive(
            HOST_ACTIVATION_INDEX_NAMESPACE,
            ACTIVATION_INDEX_KEY,
        )?)
    }
}

/// Microseconds since the Unix epoch; a clock before 1970 reads as 0. The journal stores the
/// time it is given and never orders by it.
fn now() -> Timestamp {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    Timestamp(micros)
}

impl ActivationLedger for JournalLedger {
    fn read(&self, target: &TargetKey) -> Result<Vec<LedgerRecord>, LedgerError> {
        let stream = target.stream()?;
        let mut out = Vec::new();
        let mut failure = None;
        loop {
            let from = out.len() as u64 + 1;
            let before = out.len();
            self.journal
                .visit_stream(&stream, from, READ_CHUNK_RECORDS, |view| {
                    let decoded = if view.kind == HOST_ACTIVATION_RECORD_KIND {
                        LedgerRecord::decode(view.payload)
                    } else {
                        Err(LedgerRecordError::StrayKind {
                            kind: view.kind.to_owned(),
                            place: "an activation stream",
                        })
                    };
                    match decoded {
                        Ok(record) if record.target == *target => {
                            out.push(record);
                            ControlFlow::Continue(())
                        }
                        Ok(_) => {
                            failure = Some(LedgerError::Corrupt {
                                event_id: view.event_id.to_owned(),
                                reason: "it names another target than its stream".to_owned(),
                            });
                            ControlFlow::Break(())
                        }
                        Err(reason) => {
                            failure = Some(LedgerError::Corrupt {
                                event_id: view.event_id.to_owned(),
                                reason: reason.to_string(),
                            });
                            ControlFlow::Break(())
                        }
                    }
                })?;
            if let Some(e) = failure {
                return Err(e);
            }
            if out.len() - before < READ_CHUNK_RECORDS {
                return Ok(out);
            }
        }
    }

    fn append(
        &self,
        target: &TargetKey,
        expected: u64,
        records: &[LedgerRecord],
    ) -> Result<u64, LedgerError> {
        let stream = target.stream()?;
        let at = now();
        let new_records = records
            .iter()
            .zip(expected + 1..)
            .map(|(r, revision)| {
                NewRecord::new(
                    format!("ctx-activation:{}:{revision}", stream.to_hex()),
                    HOST_ACTIVATION_RECORD_KIND,
                    at,
                    r.encode(),
                )
            })
            .collect();
        let expected_revision = if expected == 0 {
            ExpectedRevision::NoStream
        } else {
            ExpectedRevision::Exact(expected)
        };
        let mut batch = vec![StreamAppend::new(stream, expected_revision, new_records)];
        if expected == 0 {
            // The target's first record: list the target in the index in the same commit.
            batch.push(StreamAppend::new(
                Self::index_stream()?,
                ExpectedRevision::Any,
                vec![NewRecord::new(
                    format!("ctx-activation-target:{}", stream.to_hex()),
                    HOST_ACTIVATION_TARGET_KIND,
                    at,
                    Json::object(target.to_json()).to_cj().into_bytes(),
                )],
            ));
        }
        match self.journal.append_batch(batch) {
            Ok(outcomes) => {
                // An intent alone comes right before the host's files change: inside a unit of
                // work it is made durable first (spec/journal.md §14, U2; spec/activation.md §4).
                if records.last().is_some_and(|r| r.outcome.is_none()) {
                    self.journal.make_durable()?;
                }
                Ok(outcomes.first().map_or(expected, |o| o.last_revision()))
            }
            Err(AppendError::WrongRevision { .. }) => Err(LedgerError::Moved {
                path: target.display(),
                expected,
            }),
            Err(e) => Err(e.into()),
        }
    }

    fn targets(&self) -> Result<Vec<TargetKey>, LedgerError> {
        let stream = Self::index_stream()?;
        let mut out: Vec<TargetKey> = Vec::new();
        let mut failure = None;
        self.journal.visit_stream(&stream, 1, usize::MAX, |view| {
            let decoded = if view.kind == HOST_ACTIVATION_TARGET_KIND {
                std::str::from_utf8(view.payload)
                    .map_err(|_| LedgerRecordError::NotUtf8)
                    .and_then(|t| Ok(Json::parse(t)?))
                    .and_then(|v| TargetKey::from_json(&v))
            } else {
                Err(LedgerRecordError::StrayKind {
                    kind: view.kind.to_owned(),
                    place: "the activation index",
                })
            };
            match decoded {
                Ok(key) => {
                    if !out.contains(&key) {
                        out.push(key);
                    }
                    ControlFlow::Continue(())
                }
                Err(reason) => {
                    failure = Some(LedgerError::Corrupt {
                        event_id: view.event_id.to_owned(),
                        reason: reason.to_string(),
                    });
                    ControlFlow::Break(())
                }
            }
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// A target's records folded: what ctx last wrote there and whether an intent is unresolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetHistory {
    /// The stream's head revision (0: no records).
    pub revision: u64,
    /// The new state of the last applied activation, unless an applied deactivation followed:
    /// what ctx last wrote at the target and still answers for.
    pub written: Option<String>,
    /// The record of that last applied activation.
    pub written_by: Option<LedgerRecord>,
    /// The intent without an outcome, with its revision.
    pub pending: Option<(u64, LedgerRecord)>,
    /// The last outcome's result.
    pub last_result: Option<OutcomeResult>,
}

impl TargetHistory {
    /// Folds `records` (in revision order), checking that they alternate intent and outcome and
    /// that each outcome repeats its intent.
    pub fn fold(records: &[LedgerRecord]) -> Result<TargetHistory, LedgerError> {
        let mut h = TargetHistory::default();
        for (revision, record) in (1u64..).zip(records) {
            let corrupt = |reason: &str| LedgerError::Corrupt {
                event_id: format!("revision {revision} of {}", record.target.display()),
                reason: reason.to_owned(),
            };
            match (&record.outcome, h.pending.take()) {
                (None, None) => h.pending = Some((revision, record.clone())),
                (None, Some(_)) => return Err(corrupt("an intent follows an unresolved intent")),
                (Some(_), None) => return Err(corrupt("an outcome follows no intent")),
                (Some(outcome), Some((intent_revision, intent))) => {
                    let same = intent.operation == record.operation
                        && intent.prior_state == record.prior_state
                        && intent.new_state == record.new_state
                        && intent.name == record.name
                        && intent.capability_id == record.capability_id;
                    if outcome.intent_revision != intent_revision || !same {
                        return Err(corrupt("the outcome does not repeat its intent"));
                    }
                    h.last_result = Some(outcome.result);
                    if outcome.result == OutcomeResult::Applied {
                        h.written = record.new_state.clone();
                        h.written_by = match record.operation {
                            Operation::Activate => Some(record.clone()),
                            Operation::Deactivate => None,
                        };
                    }
                }
            }
            h.revision = revision;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn key() -> TargetKey {
        TargetKey {
            host: AgentHost::Codex,
            kind: CapabilityKind::McpServer,
            path: "/h/.codex/config.toml".to_owned(),
            entry: Some("mcp_servers.github".to_owned()),
        }
    }

    fn intent() -> LedgerRecord {
        LedgerRecord {
            operation: Operation::Activate,
            target: key(),
            name: "github".to_owned(),
            capability_id: "mcp-server:github".to_owned(),
            prior_state: None,
            new_state: Some("ab".repeat(32)),
            outcome: None,
        }
    }

    #[test]
    fn records_encode_canonically_and_decode_strictly() {
        let intent = intent();
        let bytes = intent.encode();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            format!(
                "{{\"capability_id\":\"mcp-server:github\",\"entry\":\"mcp_servers.github\",\
                 \"host\":\"codex\",\"kind\":\"mcp-server\",\"name\":\"github\",\"new_state\":\
                 \"{}\",\"operation\":\"activate\",\"path\":\"/h/.codex/config.toml\",\"phase\":\
                 \"intent\",\"prior_state\":null}}",
                "ab".repeat(32)
            )
        );
        assert_eq!(LedgerRecord::decode(&bytes).unwrap(), intent);
        let outcome = LedgerRecord {
            outcome: Some(Outcome {
                result: OutcomeResult::Applied,
                observed_state: Some("ab".repeat(32)),
                resolved_by: Resolution::Recovery,
                intent_revision: 1,
            }),
            ..intent.clone()
        };
        assert_eq!(LedgerRecord::decode(&outcome.encode()).unwrap(), outcome);
        // Whitespace, a missing key or an unknown key are refused.
        let spaced = String::from_utf8(bytes)
            .unwrap()
            .replace(",\"host\"", ", \"host\"");
        assert!(LedgerRecord::decode(spaced.as_bytes()).is_err());
        let extra = outcome.encode();
        assert!(LedgerRecord::decode(&extra[..extra.len() - 1]).is_err());
    }

    #[test]
    fn the_fold_tracks_what_ctx_wrote_and_the_pending_intent() {
        let a = intent();
        let applied = |r: &LedgerRecord, rev| LedgerRecord {
            outcome: Some(Outcome {
                result: OutcomeResult::Applied,
                observed_state: r.new_state.clone(),
                resolved_by: Resolution::Apply,
                intent_revision: rev,
            }),
            ..r.clone()
        };
        let h = TargetHistory::fold(std::slice::from_ref(&a)).unwrap();
        assert_eq!((h.revision, h.written.clone()), (1, None));
        assert_eq!(h.pending.as_ref().map(|p| p.0), Some(1));
        let h = TargetHistory::fold(&[a.clone(), applied(&a, 1)]).unwrap();
        assert_eq!(h.written, a.new_state);
        assert!(h.pending.is_none());
        let d = LedgerRecord {
            operation: Operation::Deactivate,
            prior_state: a.new_state.clone(),
            new_state: None,
            ..a.clone()
        };
        let h =
            TargetHistory::fold(&[a.clone(), applied(&a, 1), d.clone(), applied(&d, 3)]).unwrap();
        assert_eq!((h.revision, h.written), (4, None));
        assert!(TargetHistory::fold(&[a.clone(), a.clone()]).is_err());
        assert!(TargetHistory::fold(&[applied(&a, 1)]).is_err());
        assert!(TargetHistory::fold(&[a.clone(), applied(&d, 1)]).is_err());
    }
}
