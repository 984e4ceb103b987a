//! The advisory process lock on `ctx.lock` in the data directory. redb locks its own file; this
//! separate lock lets a second process wait for a bounded time and name the holder in its error.

use std::fs::{File, OpenOptions as FsOpen, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::OpenError;

pub const LOCK_FILE: &str = "ctx.lock";

#[derive(Debug)]
pub(crate) struct ProcessLock {
    _file: File,
}

/// How long an open waits for a lock that names this very process (see `acquire`).
const SELF_HELD_GRACE: Duration = Duration::from_secs(2);

fn own_holder_prefix() -> String {
    format!("pid {} ", std::process::id())
}

pub(crate) fn acquire(dir: &Path, wait: Duration) -> Result<ProcessLock, OpenError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| OpenError::Io {
        path: path.clone(),
        source,
    };
    let mut file = open_private(&path).map_err(io)?;
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) => {
                let waited = started.elapsed();
                let holder = read_holder(&mut file);
                // The caller has checked that this process has the directory open nowhere, so a
                // lock that names this process is a copy inherited by a child between fork and
                // exec (flock locks belong to the open file, which fork shares); it goes away at
                // the child's exec or exit, so wait for it a little even when told not to wait.
                let limit = if holder.starts_with(&own_holder_prefix()) {
                    wait.max(SELF_HELD_GRACE)
                } else {
                    wait
                };
                if waited >= limit {
                    return Err(OpenError::Locked {
                        path: dir.to_path_buf(),
                        holder,
                        waited,
                    });
                }
                std::thread::sleep(pause.min(limit - waited));
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    // The holder line is informational: it lets a waiting process say who holds the directory.
    let holder = format!(
        "{}({})\n",
        own_holder_prefix(),
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown program".to_owned())
    );
    file.set_len(0).map_err(io)?;
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    file.write_all(holder.as_bytes()).map_err(io)?;
    Ok(ProcessLock { _file: file })
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let read = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(256).read_to_string(&mut text));
    match read {
        Ok(_) if !text.trim().is_empty() => text.trim().to_owned(),
        _ => "an unknown holder".to_owned(),
    }
}

pub(crate) fn open_private(path: &Path) -> std::io::Result<File> {
    let mut options = FsOpen::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}
