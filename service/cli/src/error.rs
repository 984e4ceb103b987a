//! What can go wrong on the command line, and the exit status each failure maps to.

use ctx_journal::{AppendError, ImportError, OpenError, ReadError, VerifyError, VerifyReport};

/// Success.
pub const EXIT_OK: u8 = 0;
/// A domain outcome the host must act on: consent is required, the data directory is busy, a
/// desired set conflicts or was superseded, a consent was denied or expired. The JSON on stdout
/// says which.
pub const EXIT_OUTCOME: u8 = 1;
/// Bad input: an unknown command or argument, malformed JSON, a value the request refuses, an
/// unusable data directory setting.
pub const EXIT_USAGE: u8 = 2;
/// An internal or integrity failure: I/O, storage, a lock not released within its bounded wait,
/// a record that does not authenticate, a broken chain, a corrupt file, a failed audit.
pub const EXIT_INTERNAL: u8 = 3;
/// Integrity failures share the internal failures' status.
pub const EXIT_INTEGRITY: u8 = EXIT_INTERNAL;

/// The `action` of [`CliError::File`] for an input file; reading one that is missing or
/// unreadable is bad input (exit 2).
pub(crate) const FILE_READ: &str = "read";

/// A failure of one `ctx` command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("could not open the journal: {0}")]
    Open(#[from] OpenError),
    #[error(transparent)]
    Compact(#[from] ctx_journal::CompactError),
    #[error("append failed: {0}")]
    Append(#[from] AppendError),
    #[error("read failed: {0}")]
    Read(#[from] ReadError),
    #[error("verification could not run: {0}")]
    Verify(#[from] VerifyError),
    #[error("verification found {} kind(s) of integrity failure", .0.failures.len())]
    VerifyFailed(VerifyReport),
    #[error("integrity check failed: {0}")]
    Integrity(String),
    #[error("the journal behaved unexpectedly: {0}")]
    Unexpected(String),
    #[error("could not write the output: {0}")]
    Output(#[from] std::io::Error),
    /// A step of `ctx demo` was refused; `exit` is the status the JSON command would return.
    #[error("{step}: {message}")]
    Step {
        step: &'static str,
        message: String,
        exit: u8,
    },
    /// `ctx audit`, `ctx inspect` or `ctx export` on a data directory whose journal does not
    /// exist; nothing is created.
    #[error("{} holds no journal; there is nothing to {action}", path.display())]
    NoJournal {
        path: std::path::PathBuf,
        action: &'static str,
    },
    /// `ctx audit` found at least one failure (the report on standard output lists them all).
    #[error("the audit failed: {summary}")]
    AuditFailed { summary: String },
    /// A file named on the command line could not be used (`--input`, `--output`).
    #[error("could not {action} {}: {source}", path.display())]
    File {
        action: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// `ctx export --output FILE` where FILE exists: an export never overwrites.
    #[error("{} already exists; `ctx export` writes only a new file", path.display())]
    OutputExists { path: std::path::PathBuf },
    /// An import line that is not a well-formed export line.
    #[error("import line {line}: {detail}")]
    ImportLine { line: u64, detail: String },
    /// An import line whose record the journal refused: its digest or chain does not reproduce,
    /// it is out of order, or its values are refused.
    #[error("import line {line}: {source}")]
    ImportRecord { line: u64, source: Box<ImportError> },
    /// The export ended before the records its header announces: it was cut short.
    #[error(
        "the export ends after {found} records in {found_streams} streams, but its header announces {announced} records in {announced_streams} streams; it was cut short or altered"
    )]
    ImportIncomplete {
        found: u64,
        found_streams: u64,
        announced: u64,
        announced_streams: u64,
    },
    /// A host's file (`settings.json`, `hooks.json`) could not be edited: the person's file is
    /// refused (not JSON, wrong shape, too large) or the machine failed. Nothing was written.
    #[error("{step}: {source}; nothing was written")]
    HostFile {
        step: &'static str,
        source: ctx_hosts::HostFileError,
    },
    /// The import as a whole was refused or failed (a non-empty target journal, storage).
    #[error("import failed: {0}")]
    Import(Box<ImportError>),
    /// A person's command was run without a controlling terminal (spec/decisions.md §12.3).
    #[error("{0}")]
    NoTerminal(String),
    /// A person's command was refused by the verifier registry, the key or the service.
    /// A passkey ceremony did not complete (spec/webauthn.md §4).
    #[error(transparent)]
    Browser(#[from] crate::browser::BrowserError),
    /// `ctx catalog build` could not write its catalog (spec/catalog-build.md).
    #[error(transparent)]
    Build(#[from] ctx_service::BuildError),
    #[error("{step}: {source}")]
    Person {
        step: &'static str,
        source: Box<ctx_service::RuntimeError>,
    },
}

impl From<ImportError> for CliError {
    fn from(e: ImportError) -> CliError {
        CliError::Import(Box::new(e))
    }
}

impl CliError {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Build(e) if e.is_bad_input() => EXIT_USAGE,
            CliError::Build(_) => EXIT_INTERNAL,
            CliError::NoTerminal(_) => EXIT_OUTCOME,
            CliError::Browser(crate::browser::BrowserError::Listen(_)) => EXIT_INTERNAL,
            CliError::Browser(_) => EXIT_OUTCOME,
            CliError::Person { source, .. } => match source.code() {
                "internal" => EXIT_INTERNAL,
                "integrity" => EXIT_INTEGRITY,
                _ => EXIT_OUTCOME,
            },
            CliError::Compact(ctx_journal::CompactError::Open(e)) | CliError::Open(e) => match e {
                OpenError::RelativePath { .. } => EXIT_USAGE,
                _ => EXIT_INTERNAL,
            },
            CliError::Append(AppendError::Input(_)) => EXIT_USAGE,
            CliError::Append(AppendError::Integrity { .. }) => EXIT_INTEGRITY,
            CliError::Append(AppendError::Read(e)) | CliError::Read(e) => read_exit_code(e),
            CliError::VerifyFailed(_) | CliError::Integrity(_) => EXIT_INTEGRITY,
            CliError::Compact(_) => EXIT_INTEGRITY,
            CliError::Step { exit, .. } => *exit,
            CliError::NoJournal { .. }
            | CliError::OutputExists { .. }
            | CliError::ImportLine { .. } => EXIT_USAGE,
            // A non-empty target and a refused value are bad input; a record whose digest or
            // chain does not reproduce is an integrity failure.
            CliError::Import(e) | CliError::ImportRecord { source: e, .. }
                if matches!(
                    **e,
                    ImportError::NotEmpty { .. } | ImportError::Input { .. }
                ) =>
            {
                EXIT_USAGE
            }
            // Input files that cannot be read are bad input; output files that cannot be written
            // are the machine's problem.
            CliError::File { action, .. } if *action == FILE_READ => EXIT_USAGE,
            // The person's file at fault is bad input; anything else is the machine's.
            CliError::HostFile { source, .. } if source.is_bad_file() => EXIT_USAGE,
            CliError::HostFile { .. } => EXIT_INTERNAL,
            CliError::AuditFailed { .. }
            | CliError::ImportRecord { .. }
            | CliError::ImportIncomplete { .. } => EXIT_INTEGRITY,
            CliError::File { .. } | CliError::Import(_) => EXIT_INTERNAL,
            CliError::Append(_)
            | CliError::Verify(_)
            | CliError::Unexpected(_)
            | CliError::Output(_) => EXIT_INTERNAL,
        }
    }
}

fn read_exit_code(_: &ReadError) -> u8 {
    EXIT_INTERNAL
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctx_journal::StreamId;

    #[test]
    fn exit_codes() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), EXIT_USAGE);
        assert_eq!(
            CliError::VerifyFailed(VerifyReport::default()).exit_code(),
            EXIT_INTEGRITY
        );
        let auth = ReadError::AuthenticationFailed {
            stream: StreamId::from_bytes([0; 32]),
            revision: 1,
            position: 1,
            reason: "test",
        };
        assert_eq!(CliError::Read(auth).exit_code(), EXIT_INTEGRITY);
        let wrong = AppendError::WrongRevision {
            stream: StreamId::from_bytes([0; 32]),
            expected: ctx_journal::ExpectedRevision::NoStream,
            current: 1,
        };
        assert_eq!(CliError::Append(wrong).exit_code(), EXIT_INTERNAL);
        assert_eq!(
            CliError::Open(OpenError::RelativePath { path: "x".into() }).exit_code(),
            EXIT_USAGE
        );
    }
}
