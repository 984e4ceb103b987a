//! Clean-up of what interrupted writers leave in a data directory (spec/cli.md §2): catalog
//! staging and retired directories of an ingest (`.catalog.new-PID`, `.catalog.old-PID`) and the
//! temporary files of atomic writes (`.NAME.tmp-SUFFIX`). A leftover is removed only when no
//! writer can still be using it, so a clean-up never races a live ingest or write.

use std::path::Path;

use ctx_model::UtcMicros;

use super::catalog_lock::CatalogLock;
use crate::data_dir::Layout;

/// A temporary file whose writer cannot be asked (its suffix names no process) is a leftover
/// once it is this old: no atomic write of ctx takes an hour.
pub const LEFTOVER_AGE_MAX_SECS: u64 = 3_600;

/// Most entries of one directory a sweep looks at, so a huge directory costs a bounded time.
pub const SWEEP_ENTRIES_MAX: usize = 100_000;

/// What one sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Directory entries removed, by name.
    pub removed: Vec<String>,
}

/// Removes the catalog's leftover staging and retired directories and the leftover temporary
/// files of the data directory's root and catalog. Staging directories are written only under
/// the exclusive catalog lock, so they are removed only when that lock is free at once: taken
/// without waiting, it proves no ingest is running. Errors leave the entry for a later sweep:
/// clean-up never fails the call it runs in.
pub(crate) fn sweep_root(layout: &Layout, now: UtcMicros) -> SweepReport {
    let mut report = SweepReport::default();
    let staging: Vec<String> = names(layout.root())
        .into_iter()
        .filter(|n| n.starts_with(".catalog.new-") || n.starts_with(".catalog.old-"))
        .collect();
    if !staging.is_empty()
        && let Ok(_exclusive) = CatalogLock::try_exclusive(layout)
    {
        for name in staging {
            if remove_entry(&layout.root().join(&name)) {
                report.removed.push(name);
            }
        }
    }
    sweep_temporaries(layout.root(), now, &mut report);
    sweep_temporaries(&layout.catalog(), now, &mut report);
    report
}

/// Removes the leftover temporary files of the work directory (one file per observed prompt, so
/// it is swept at a session's start rather than at every open).
pub fn sweep_work(layout: &Layout, now: UtcMicros) -> SweepReport {
    let mut report = SweepReport::default();
    sweep_temporaries(&layout.work(), now, &mut report);
    report
}

/// Removes the temporary files `.NAME.tmp-SUFFIX` of `dir` whose writer is gone: a numeric suffix
/// names the writing process, gone when no such process exists (this process's own are never
/// touched); any other suffix is gone when the file is older than [`LEFTOVER_AGE_MAX_SECS`] by
/// the injected clock `now`. Only regular files owned by this user are removed.
fn sweep_temporaries(dir: &Path, now: UtcMicros, report: &mut SweepReport) {
    for name in names(dir) {
        let Some(suffix) = temporary_suffix(&name) else {
            continue;
        };
        let path = dir.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.file_type().is_file() || !owned_by_this_user(&meta) {
            continue;
        }
        // `PID` or `PID-N`: the writing process first.
        let writer = suffix.split('-').next().unwrap_or(suffix);
        let writer_gone = match writer.parse::<u32>() {
            Ok(pid) if pid == std::process::id() => false,
            Ok(pid) => !process_exists(pid) || older_than_limit(&meta, now),
            Err(_) => older_than_limit(&meta, now),
        };
        if writer_gone && std::fs::remove_file(&path).is_ok() {
            report.removed.push(name);
        }
    }
}

/// The suffix of a temporary name `.NAME.tmp-SUFFIX`, or `None` for any other name.
fn temporary_suffix(name: &str) -> Option<&str> {
    let rest = name.strip_prefix('.')?;
    let (_, suffix) = rest.rsplit_once(".tmp-")?;
    let plain = suffix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    (!suffix.is_empty() && plain).then_some(suffix)
}

fn names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .take(SWEEP_ENTRIES_MAX)
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// Removes a staging directory (or a file or link at its name), never following a link.
fn remove_entry(path: &Path) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_dir() => std::fs::remove_dir_all(path).is_ok(),
        Ok(_) => std::fs::remove_file(path).is_ok(),
        Err(_) => false,
    }
}

fn owned_by_this_user(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    meta.uid() == rustix::process::geteuid().as_raw()
}

/// Whether a process `pid` exists (signal 0: permission refused still means it exists).
fn process_exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(rustix::io::Errno::SRCH)
    )
}

fn older_than_limit(meta: &std::fs::Metadata, now: UtcMicros) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let modified_micros = meta.mtime().saturating_mul(1_000_000);
    let age_micros = now.0.saturating_sub(modified_micros);
    age_micros > (LEFTOVER_AGE_MAX_SECS * 1_000_000) as i64
}

#[cfg(test)]
mod tests {
    use super::temporary_suffix;

    #[test]
    fn only_the_temporary_names_of_atomic_writes_have_a_suffix() {
        assert_eq!(temporary_suffix(".abc.json.tmp-4242"), Some("4242"));
        assert_eq!(temporary_suffix(".policy.tmp-9f3a"), Some("9f3a"));
        assert_eq!(temporary_suffix(".policy.json.tmp-77-3"), Some("77-3"));
        assert_eq!(temporary_suffix("abc.json.tmp-4242"), None);
        assert_eq!(temporary_suffix(".abc.json"), None);
        assert_eq!(temporary_suffix(".abc.tmp-"), None);
        assert_eq!(temporary_suffix(".abc.tmp-../x"), None);
    }
}
