//! Why an activation, deactivation, recovery or inspection did not do what was asked.
//!
//! Every message is a sentence naming the offending path, name or value, so `ctx` can print it
//! as it is. Conflicts are their own variant: they are the expected, safe refusal (ctx found
//! something it did not write and left it alone), not a failure.

use std::path::PathBuf;

use ctx_journal::{AppendError, InputError, ReadError};

use crate::hosts::AgentHost;

use ctx_model::CapabilityKind;

/// Why the target holds something ctx will not replace or remove.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictReason {
    /// Something is there that ctx never wrote (a person's own skill, agent file or server).
    Foreign,
    /// ctx wrote this target, and it has been changed since (by a person or another tool).
    EditedSinceActivation,
    /// Another agent file in the host's agent tree declares the same `name`; the host would load
    /// one of the two in an undefined order.
    DuplicateAgentName { other: PathBuf },
    /// The target changed between ctx's check and its atomic step; nothing was written.
    ChangedDuringApply,
}

impl std::fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConflictReason::Foreign => f.write_str("it holds something ctx did not write"),
            ConflictReason::EditedSinceActivation => {
                f.write_str("it was changed after ctx activated it")
            }
            ConflictReason::DuplicateAgentName { other } => write!(
                f,
                "{} already declares an agent of that name",
                other.display()
            ),
            ConflictReason::ChangedDuringApply => {
                f.write_str("it changed while ctx was writing it, so ctx wrote nothing")
            }
        }
    }
}

/// The failure of one activation operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActivationError {
    #[error("the {kind} name {name:?} is not allowed: {reason}")]
    InvalidName {
        kind: CapabilityKind,
        name: String,
        reason: &'static str,
    },
    #[error("the capability id {id:?} is not a valid {kind} capability id")]
    InvalidCapabilityId { kind: CapabilityKind, id: String },
    #[error("the material of {name:?} is {len} bytes, more than the limit of {max} bytes")]
    BodyTooLarge {
        name: String,
        len: usize,
        max: usize,
    },
    #[error("the material of {name:?} is not usable: {reason}")]
    InvalidMaterial { name: String, reason: String },
    #[error(
        "the server {name:?} holds what looks like a literal secret in {field}; ctx writes secrets \
         only as ${{VAR}} references"
    )]
    LiteralSecret { name: String, field: String },
    #[error("{host} cannot take {name:?} as it is written: {reason}")]
    UnsupportedForHost {
        host: AgentHost,
        name: String,
        reason: String,
    },
    #[error("the Claude Code MCP server {name:?} needs an absolute project directory")]
    ProjectDirRequired { name: String },
    #[error("the project directory {} is not an absolute path", .path.display())]
    ProjectDirNotAbsolute { path: PathBuf },
    #[error("the path {path:?} is not valid UTF-8, which the activation ledger needs")]
    NonUtf8Path { path: PathBuf },
    #[error("the target {path:?} is longer than {max} bytes")]
    TargetTooLong { path: PathBuf, max: usize },
    #[error("ctx will not touch {}{}: {reason}", .path.display(), entry_suffix(.entry))]
    Conflict {
        path: PathBuf,
        entry: Option<String>,
        reason: ConflictReason,
    },
    #[error("ctx has nothing active at {}{}", .path.display(), entry_suffix(.entry))]
    NotActive {
        path: PathBuf,
        entry: Option<String>,
    },
    #[error(
        "{}{} has an unresolved activation intent (ledger revision {revision}); run recovery \
         first",
        .path.display(),
        entry_suffix(.entry)
    )]
    PendingIntent {
        path: PathBuf,
        entry: Option<String>,
        revision: u64,
    },
    #[error(
        "{}{} holds neither what was there before nor what ctx wrote; a person must look at it",
        .path.display(),
        entry_suffix(.entry)
    )]
    Indeterminate {
        path: PathBuf,
        entry: Option<String>,
    },
    /// A store directory (spec/activation.md §3) does not hold what its name says; nothing was
    /// replaced. `file` is the first differing path relative to it, when one file is at fault.
    #[error("the content store entry {} is not what ctx wrote there: {reason}", .path.display())]
    StoreCorrupt {
        path: PathBuf,
        file: Option<String>,
        reason: String,
    },
    #[error(
        "the {kind} {name:?} cannot be activated as a directory tree: only a skill is a directory"
    )]
    TreeNotSkill { kind: CapabilityKind, name: String },
    #[error("{} cannot be used: {reason}", .path.display())]
    UnsafeDirectory { path: PathBuf, reason: &'static str },
    #[error("the config file {} cannot be edited: {reason}", .path.display())]
    Config { path: PathBuf, reason: String },
    #[error(transparent)]
    HostFile(#[from] crate::host_files::HostFileError),
    #[error(
        "the agent tree {} is too large to check for duplicate names (limit {max} entries)",
        .path.display()
    )]
    AgentTreeTooLarge { path: PathBuf, max: usize },
    #[error("could not {action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A simulated crash at a named fail point; only with the `failpoints` feature (tests).
    #[cfg(feature = "failpoints")]
    #[error("fail point {name} fired (a simulated crash)")]
    FailPoint { name: &'static str },
}

fn entry_suffix(entry: &Option<String>) -> String {
    match entry {
        Some(e) => format!(" (entry {e})"),
        None => String::new(),
    }
}

/// Why the activation ledger could not be read or appended to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    #[error("the activation ledger could not be read: {0}")]
    Read(#[from] ReadError),
    #[error("the activation ledger could not be appended to: {0}")]
    Append(#[from] AppendError),
    #[error("the activation ledger key is invalid: {0}")]
    Input(#[from] InputError),
    #[error(
        "the activation ledger of {path} moved on while ctx was working on it (expected revision \
         {expected}); retry"
    )]
    Moved { path: String, expected: u64 },
    #[error("the activation ledger record {event_id} is invalid: {reason}")]
    Corrupt { event_id: String, reason: String },
}

/// Why an activation ledger record (or activation index entry) does not decode; the sentence
/// names the field at fault and becomes the reason of [`LedgerError::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerRecordError {
    #[error("kind {kind:?} in {place}")]
    StrayKind { kind: String, place: &'static str },
    #[error("the payload is not UTF-8")]
    NotUtf8,
    #[error(transparent)]
    Json(#[from] ctx_model::JsonError),
    #[error("the payload is not an object")]
    NotObject,
    #[error("{field} is missing")]
    Missing { field: &'static str },
    #[error("phase {phase:?} is neither intent nor outcome")]
    Phase { phase: String },
    #[error("the keys are not exactly {expected:?}")]
    Keys { expected: &'static [&'static str] },
    #[error("{field} is neither null nor a SHA-256 digest")]
    State { field: &'static str },
    #[error("host is not claude or codex")]
    Host,
    #[error("kind is not skill, agent or mcp-server")]
    Kind,
    #[error("path is not an absolute path")]
    Path,
    #[error("entry is neither null nor a key path")]
    Entry,
    #[error("the target is longer than the ledger allows")]
    TargetTooLong,
    #[error("operation is not activate or deactivate")]
    Operation,
    #[error("name {name:?} is not a name ctx records")]
    Name { name: String },
    #[error("capability_id is not a capability id of the target's kind")]
    CapabilityId,
    #[error("result is not a known result")]
    Result,
    #[error("resolved_by is not apply or recovery")]
    ResolvedBy,
    #[error("intent_revision is not a revision")]
    IntentRevision,
    #[error("the payload is not in canonical form")]
    NotCanonical,
}

impl ActivationError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> ActivationError {
        let path = path.into();
        move |source| ActivationError::Io {
            action,
            path,
            source,
        }
    }

    /// True for the safe refusals: a conflict at the target.
    pub fn is_conflict(&self) -> bool {
        matches!(self, ActivationError::Conflict { .. })
    }
}
