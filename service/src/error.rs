//! What can go wrong on the command line, and the exit status each failure maps to.

use ctx_journal::{AppendError, OpenError, ReadError, VerifyError, VerifyReport};

/// Success.
pub const EXIT_OK: u8 = 0;
/// A failure that is neither bad input nor an integrity failure: I/O, a held lock, storage.
pub const EXIT_FAILURE: u8 = 1;
/// Bad input: an unknown command or argument, an unusable data directory setting.
pub const EXIT_USAGE: u8 = 2;
/// The journal failed an integrity check: a record that does not authenticate, a broken chain,
/// a corrupt file, a verification report with findings.
pub const EXIT_INTEGRITY: u8 = 3;

/// A failure of one `ctx` command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("could not open the journal: {0}")]
    Open(#[from] OpenError),
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
}

impl CliError {
    /// The process exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Open(e) => match e {
                OpenError::RelativePath { .. } => EXIT_USAGE,
                OpenError::Corrupt { .. }
                | OpenError::KeyMissing { .. }
                | OpenError::KeyInvalid { .. } => EXIT_INTEGRITY,
                _ => EXIT_FAILURE,
            },
            CliError::Append(AppendError::Input(_)) => EXIT_USAGE,
            CliError::Append(AppendError::Integrity { .. }) => EXIT_INTEGRITY,
            CliError::Append(AppendError::Read(e)) | CliError::Read(e) => read_exit_code(e),
            CliError::VerifyFailed(_) | CliError::Integrity(_) => EXIT_INTEGRITY,
            CliError::Append(_)
            | CliError::Verify(_)
            | CliError::Unexpected(_)
            | CliError::Output(_) => EXIT_FAILURE,
        }
    }
}

fn read_exit_code(e: &ReadError) -> u8 {
    match e {
        ReadError::AuthenticationFailed { .. } | ReadError::Corrupt { .. } => EXIT_INTEGRITY,
        _ => EXIT_FAILURE,
    }
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
        assert_eq!(CliError::Append(wrong).exit_code(), EXIT_FAILURE);
        assert_eq!(
            CliError::Open(OpenError::RelativePath { path: "x".into() }).exit_code(),
            EXIT_USAGE
        );
    }
}
