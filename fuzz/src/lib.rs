//! Fuzz harness code for the ctx journal, kept in a library so the targets stay one-liners and the
//! harness itself can be unit-tested with `cargo test` in this directory.

pub mod canary;
pub mod decode_record;
pub mod decode_untrusted;
pub mod exactly_once;
pub mod journal_model;
pub mod replay_determinism;

use std::path::{Path, PathBuf};

/// Empties `dir` (a missing directory is already empty).
pub fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot empty the fuzz directory {}: {e}", dir.display()),
    }
}

/// A target's directory for this process: `<base>/<prefix><pid>`, where the base is
/// `$CTX_FUZZ_TMPDIR`, else `/dev/shm` when it exists (no disk I/O), else the temp dir. The
/// directories of dead processes with the same prefix are removed, so crashed runs leave nothing
/// behind for long. Call it once per process (each target keeps the path in a `OnceLock`).
pub fn process_dir(prefix: &str) -> PathBuf {
    let base = std::env::var_os("CTX_FUZZ_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| {
            Path::new("/dev/shm")
                .is_dir()
                .then(|| PathBuf::from("/dev/shm"))
        })
        .unwrap_or_else(std::env::temp_dir);
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    base.join(format!("{prefix}{}", std::process::id()))
}
