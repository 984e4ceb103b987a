//! File-type and mode bits (spec/fs.md rule 6). `std` exposes the raw `st_mode` but no names for
//! its bits, and rustix's names differ between platforms, so the POSIX values are written here
//! once.

/// Mask of the file-type bits of `st_mode`.
pub const S_IFMT: u32 = 0o170_000;
/// File type: regular file.
pub const S_IFREG: u32 = 0o100_000;
/// File type: directory.
pub const S_IFDIR: u32 = 0o040_000;
/// File type: symbolic link.
pub const S_IFLNK: u32 = 0o120_000;
/// The sticky bit: in a shared directory, only an entry's owner may rename or remove it.
pub const S_ISVTX: u32 = 0o1_000;

/// Mask of the permission bits of `st_mode` (including set-id and sticky bits).
pub const MODE_PERMISSION_BITS: u32 = 0o7_777;
/// Every permission bit of the group and of other users.
pub const MODE_GROUP_OTHER: u32 = 0o077;
/// The write bits of the group and of other users.
pub const MODE_GROUP_OTHER_WRITE: u32 = 0o022;

/// Mode of an owner-private directory.
pub const DIR_MODE_PRIVATE: u32 = 0o700;
/// Mode of an owner-private file.
pub const FILE_MODE_PRIVATE: u32 = 0o600;
/// Mode of a published, read-only file.
pub const FILE_MODE_READ_ONLY: u32 = 0o400;
