//! ctx-fs: the one home of the POSIX file rules ctx relies on (spec/fs.md).
//!
//! A crash-safety product must get a few file-system rules exactly right every time: a new name
//! survives a crash only once its directory is synced; a file replaced in place must be written
//! to a temporary name, synced and renamed; a file read from disk must be bounded; a directory
//! that holds secrets must be owned by this user and closed to everyone else, and must not be a
//! symbolic link; and a lock that another process holds must be waited for a bounded time and
//! its holder named. Each rule is written once here, so every caller applies the same one.
//!
//! The crate is a leaf: it depends on no ctx crate. It targets Unix (the rules are POSIX ones).
#![forbid(unsafe_code)]

mod dir;
mod durable;
mod error;
mod lock;
mod mode;
mod read;
mod stat;

pub use dir::{
    ModeRule, check_dir, check_file, check_open_file, check_private_dir, create_private_dir_all,
    effective_uid, ensure_private_dir,
};
pub use durable::{fsync_dir, fsync_dir_fd, write_durable, write_durable_with_temp};
pub use error::{LockError, PrivateError, ReadError, SyncError, WriteError};
pub use lock::{
    DirLock, LOCK_POLL_MAX_MS, LOCK_POLL_MIN_MS, LOCK_SELF_HELD_GRACE_MS, LockOptions,
    bound_lock_waits, lock_deadline_reached,
};
pub use mode::{
    DIR_MODE_PRIVATE, FILE_MODE_PRIVATE, FILE_MODE_READ_ONLY, MODE_GROUP_OTHER,
    MODE_GROUP_OTHER_WRITE, MODE_PERMISSION_BITS, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG, S_ISVTX,
};
pub use read::{read_bounded, read_bounded_at, read_bounded_file};
pub use stat::{EntryType, FileId, FileStat};
