//! The audit's verdict on a damaged journal (spec/journal.md §13, "Integrity verdict"): an
//! offline audit that finds the storage or the records damaged leaves a file beside the database,
//! and every later open of the directory refuses writes until an audit finds it intact again. A
//! damaged record that no open happens to look at can then no longer be built upon.

use std::path::Path;

use ctx_fs::{FILE_MODE_PRIVATE, read_bounded, write_durable};

use crate::error::OpenError;

/// The verdict file in a journal directory.
pub const INTEGRITY_VERDICT_FILE: &str = "integrity-failed";

/// Most bytes of a verdict read back (the audit's first failure, in one line).
pub const INTEGRITY_VERDICT_MAX_BYTES: u64 = 4_096;

/// Records that the audit found the journal in `dir` damaged, `detail` saying what failed first.
pub fn record_integrity_failure(dir: &Path, detail: &str) -> Result<(), OpenError> {
    let mut text: String = detail
        .chars()
        .filter(|c| !c.is_control())
        .take(INTEGRITY_VERDICT_MAX_BYTES as usize / 4)
        .collect();
    text.push('\n');
    let path = dir.join(INTEGRITY_VERDICT_FILE);
    write_durable(&path, text.as_bytes(), FILE_MODE_PRIVATE).map_err(|e| OpenError::fs(&path, e))
}

/// Withdraws the verdict: an audit found the journal in `dir` intact.
pub fn clear_integrity_failure(dir: &Path) -> Result<(), OpenError> {
    let path = dir.join(INTEGRITY_VERDICT_FILE);
    match std::fs::remove_file(&path) {
        Ok(()) => ctx_fs::fsync_dir(dir).map_err(|e| OpenError::fs_named(dir, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(OpenError::Io { path, source }),
    }
}

/// The standing verdict of `dir`, as the reason writes are refused; `None` when there is none. A
/// verdict file that cannot be read is a verdict too: writes stay refused rather than resumed.
pub(crate) fn standing_verdict(dir: &Path) -> Option<String> {
    let path = dir.join(INTEGRITY_VERDICT_FILE);
    match read_bounded(&path, INTEGRITY_VERDICT_MAX_BYTES) {
        Ok(bytes) => Some(format!(
            "`ctx audit` found it damaged ({}); run `ctx audit` again once it is repaired",
            String::from_utf8_lossy(&bytes).trim()
        )),
        Err(e) if is_not_found(&e) => None,
        Err(e) => Some(format!(
            "`ctx audit` left a verdict that cannot be read ({e}); run `ctx audit` again"
        )),
    }
}

fn is_not_found(e: &ctx_fs::ReadError) -> bool {
    matches!(e, ctx_fs::ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}
