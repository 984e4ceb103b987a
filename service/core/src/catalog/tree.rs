//! Skill trees (spec/skill-tree.md): a skill is a directory, `SKILL.md` plus the scripts,
//! references and assets it ships, pinned as a whole by one digest over every file's path,
//! executable bit and content.
//!
//! The walk follows the catalog's file rules (spec/catalog.md §3, "File rules") for every file of
//! the tree: each directory is opened relative to its parent with `O_NOFOLLOW | O_DIRECTORY`, and
//! each file relative to its directory with `O_NOFOLLOW`, so no symbolic link is ever followed;
//! the type, link count and size are checked on the open descriptor (`fstat`), and the bytes are
//! read from that same descriptor, so the check and the read see one file. The digest vouches for
//! the bytes a person reviewed in the skill directory, which a link (to anywhere) or a second
//! name (changeable from another path) would undo.

use std::fmt;
use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use ctx_fs::{EntryType, FileStat, S_IFMT};
use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

use super::format::is_body_path;

/// Most bytes of one file of a skill tree: a quarter of the tree limit, so no single asset can
/// take the whole budget (spec/skill-tree.md §3).
pub const SKILL_FILE_MAX_BYTES: u64 = 4 * 1024 * 1024;
/// Most bytes of the top-level `SKILL.md`, the text a host loads into a model's context; the
/// measured median is 5.6 KB and the maximum 74 KB (spec/skill-tree.md §3).
pub const SKILL_MD_MAX_BYTES: u64 = 256 * 1024;
/// Most bytes of all files of a skill tree together; the measured median is 14 KB, p90 48 KB
/// and maximum 5.5 MB (spec/skill-tree.md §3).
pub const SKILL_TREE_MAX_BYTES: u64 = 16 * 1024 * 1024;
/// Most files of a skill tree; the measured median is 2, p90 5, maximum 83 (spec/skill-tree.md
/// §3).
pub const SKILL_TREE_MAX_FILES: usize = 1_000;
/// Most directory levels below the skill directory (`a/b/c/d/e/f/g/h/file` is 8 levels deep);
/// it also bounds the walk's recursion and the descriptors it holds open (spec/skill-tree.md §3).
pub const SKILL_TREE_MAX_DEPTH: usize = 8;
/// Most bytes of a path relative to the skill directory, the catalog's body-path limit
/// (spec/catalog.md §1.3 `BODY_PATH_MAX_BYTES`, spec/skill-tree.md §3).
pub const SKILL_PATH_MAX_BYTES: usize = 256;
/// Most directory entries the walk lists in all, skipped ones included: the file limit does not
/// bound empty directories or skipped names, and every listing must be bounded
/// (spec/skill-tree.md §3).
pub const SKILL_TREE_MAX_ENTRIES: usize = 4_096;

/// The name of the file every skill has at its top level (spec/skill-tree.md §2, rule W7).
const SKILL_MD_NAME: &str = "SKILL.md";
/// Names skipped wherever they appear, whatever they are (spec/skill-tree.md §2, rule W3): a
/// version-control or package-manager directory is not content a person reviewed as the skill.
const SKIPPED_NAMES: [&[u8]; 2] = [b".git", b"node_modules"];
/// A prefix of names skipped wherever they appear (macOS Finder metadata, rule W3).
const SKIPPED_PREFIX: &[u8] = b".DS_Store";
/// The domain string that starts every leaf hash (spec/skill-tree.md §4).
const FILE_DOMAIN: &[u8] = b"ctx.skill-tree.file.v1\0";
/// The domain string that starts the tree digest (spec/skill-tree.md §4).
const TREE_DOMAIN: &[u8] = b"ctx.skill-tree.v1\0";
/// Any execute bit (owner, group, other): the one mode bit a skill tree keeps (spec/skill-tree.md
/// §4).
const MODE_ANY_EXECUTE: u32 = 0o111;
// The remaining POSIX file types, named only to say which one was refused; their values are the
// same on every Unix (ctx-fs names the common ones, spec/fs.md rule 6).
const S_IFIFO: u32 = 0o010_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFBLK: u32 = 0o060_000;
const S_IFSOCK: u32 = 0o140_000;

/// One file of a skill tree.
#[derive(Clone, PartialEq, Eq)]
pub struct SkillFile {
    path: String,
    executable: bool,
    bytes: Vec<u8>,
}

impl SkillFile {
    /// The path relative to the skill directory, `/`-separated.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Whether any execute bit (owner, group or other) was set.
    pub fn executable(&self) -> bool {
        self.executable
    }

    /// The file's content.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The file's leaf hash (spec/skill-tree.md §4): a verifier holding the leaves can recheck
    /// one file without the others.
    pub fn leaf_hash(&self) -> [u8; 32] {
        leaf_hash(&self.path, self.executable, &self.bytes)
    }
}

impl fmt::Debug for SkillFile {
    // The content can be megabytes; its length says enough in a debug line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillFile")
            .field("path", &self.path)
            .field("executable", &self.executable)
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// A skill's whole file tree as read under the walk rules, with its digest. Only the walk builds
/// one, so the digest always covers exactly these files.
#[derive(Clone, PartialEq, Eq)]
pub struct SkillTree {
    files: Vec<SkillFile>,
    digest: [u8; 32],
    total_bytes: u64,
}

impl SkillTree {
    /// The files, sorted by the bytes of their paths.
    pub fn files(&self) -> &[SkillFile] {
        &self.files
    }

    /// The tree digest (spec/skill-tree.md §4).
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The digest as 64 lowercase hex characters.
    pub fn digest_hex(&self) -> String {
        hex(&self.digest)
    }

    /// The bytes of all files together.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The content of the top-level `SKILL.md` (every tree has one: the walk refuses a tree
    /// without it).
    pub fn skill_md(&self) -> &[u8] {
        self.files
            .binary_search_by(|f| f.path.as_bytes().cmp(SKILL_MD_NAME.as_bytes()))
            .ok()
            .and_then(|i| self.files.get(i))
            .map_or(&[], |f| f.bytes.as_slice())
    }
}

impl fmt::Debug for SkillTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillTree")
            .field("digest", &self.digest_hex())
            .field("total_bytes", &self.total_bytes)
            .field("files", &self.files)
            .finish()
    }
}

/// How an installed tree differs from the expected one, at the first differing path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkillTreeDifference {
    /// The expected tree has the file; the installed one does not.
    Missing,
    /// The installed tree has a file the expected one does not.
    Extra,
    /// Both have the file, with different content.
    Content,
    /// Both have the file with the same content, but the executable bit differs.
    Executable {
        /// Whether the installed file is executable.
        installed: bool,
    },
}

impl fmt::Display for SkillTreeDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkillTreeDifference::Missing => "is missing",
            SkillTreeDifference::Extra => "is not part of the expected tree",
            SkillTreeDifference::Content => "has different content",
            SkillTreeDifference::Executable { installed: true } => {
                "is executable, but the expected file is not"
            }
            SkillTreeDifference::Executable { installed: false } => {
                "is not executable, but the expected file is"
            }
        })
    }
}

/// Why a skill tree was refused (spec/skill-tree.md §6).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillTreeError {
    /// The skill directory's path is not a plain relative path (the body-path rule,
    /// spec/catalog.md §1.2).
    #[error(
        "skill directory path {relative:?} does not stay inside the catalog directory {}; ctx \
         reads only regular files inside the catalog directory",
        root.display()
    )]
    OutsideDirectory { root: PathBuf, relative: String },
    /// The skill directory itself is a symbolic link.
    #[error(
        "skill directory {} is a symbolic link; ctx reads only regular files inside the catalog \
         directory",
        path.display()
    )]
    DirectorySymlink { path: PathBuf },
    /// A directory on the way to the skill directory is a symbolic link.
    #[error(
        "skill directory {} passes through the symbolic link {}; ctx reads only regular files \
         inside the catalog directory",
        path.display(),
        link.display()
    )]
    PassesThroughSymlink { path: PathBuf, link: PathBuf },
    /// The skill directory, or a segment on the way to it, is not a directory.
    #[error(
        "skill directory {} passes through {}, which is not a directory",
        path.display(),
        through.display()
    )]
    NotDirectory { path: PathBuf, through: PathBuf },
    /// An entry of the tree is a symbolic link (to a file or a directory alike).
    #[error(
        "skill file {} is a symbolic link; ctx reads only regular files inside the skill directory",
        path.display()
    )]
    Symlink { path: PathBuf },
    /// An entry of the tree is a FIFO, a socket or a device.
    #[error(
        "skill file {} is a {what}; ctx reads only regular files inside the skill directory",
        path.display()
    )]
    NotRegularFile { path: PathBuf, what: &'static str },
    /// A file of the tree has more than one name.
    #[error(
        "skill file {} has {links} hard links; ctx refuses a skill file that another path can \
         change",
        path.display()
    )]
    HardLinks { path: PathBuf, links: u64 },
    /// An entry's name is not valid UTF-8, or has a control character or a backslash.
    #[error(
        "skill directory {} has an entry named {name:?}, which {fault}; skill file names are \
         UTF-8 without control characters or backslashes",
        dir.display()
    )]
    BadName {
        dir: PathBuf,
        /// The name, invalid UTF-8 replaced by U+FFFD.
        name: String,
        fault: &'static str,
    },
    /// The tree has no regular file `SKILL.md` at its top level.
    #[error(
        "skill directory {} has no regular file SKILL.md at its top level; every skill has one",
        dir.display()
    )]
    MissingSkillMd { dir: PathBuf },
    /// A path relative to the skill directory is longer than [`SKILL_PATH_MAX_BYTES`].
    #[error(
        "skill path {} is {size_bytes} bytes relative to the skill directory, more than the \
         limit of {limit_bytes} bytes",
        path.display()
    )]
    PathTooLong {
        path: PathBuf,
        size_bytes: usize,
        limit_bytes: usize,
    },
    /// A directory is nested deeper than [`SKILL_TREE_MAX_DEPTH`].
    #[error(
        "skill subdirectory {} is {depth} levels deep, more than the limit of {limit} levels",
        path.display()
    )]
    TooDeep {
        path: PathBuf,
        depth: usize,
        limit: usize,
    },
    /// A file is larger than its limit ([`SKILL_FILE_MAX_BYTES`], or [`SKILL_MD_MAX_BYTES`] for
    /// the top-level `SKILL.md`); the size is the open file's, from `fstat`.
    #[error(
        "skill file {} is {size_bytes} bytes, more than the limit of {limit_bytes} bytes",
        path.display()
    )]
    FileTooLarge {
        path: PathBuf,
        size_bytes: u64,
        limit_bytes: u64,
    },
    /// The files together are larger than [`SKILL_TREE_MAX_BYTES`]; the walk stops at the file
    /// that crosses the limit, so the size is a lower bound.
    #[error(
        "skill directory {} has at least {size_bytes} bytes of files, more than the limit of \
         {limit_bytes} bytes",
        dir.display()
    )]
    TreeTooLarge {
        dir: PathBuf,
        size_bytes: u64,
        limit_bytes: u64,
    },
    /// The tree has more than [`SKILL_TREE_MAX_FILES`] files.
    #[error(
        "skill directory {} has at least {count} files, more than the limit of {limit} files",
        dir.display()
    )]
    TooManyFiles {
        dir: PathBuf,
        count: usize,
        limit: usize,
    },
    /// The walk listed more than [`SKILL_TREE_MAX_ENTRIES`] directory entries.
    #[error(
        "skill directory {} has at least {count} directory entries, more than the limit of \
         {limit} entries",
        dir.display()
    )]
    TooManyEntries {
        dir: PathBuf,
        count: usize,
        limit: usize,
    },
    /// The file's size changed between its check and its read.
    #[error(
        "skill file {} changed while it was read: it was {checked_bytes} bytes when checked and \
         {read_bytes} bytes when read",
        path.display()
    )]
    Changed {
        path: PathBuf,
        checked_bytes: u64,
        read_bytes: u64,
    },
    /// The installed tree differs from the expected one; `path` is the first differing path
    /// (relative to `root`) in path order.
    #[error(
        "skill tree {} does not match the expected tree {expected}: file {path} {difference}",
        root.display()
    )]
    Mismatch {
        root: PathBuf,
        /// The expected tree's digest, lowercase hex.
        expected: String,
        path: String,
        difference: SkillTreeDifference,
    },
    /// The operating system refused an open, a listing, a `stat` or a read; `path` is as far as
    /// the walk got.
    #[error("skill path {} could not be {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl SkillTreeError {
    /// True when the skill directory (or a directory on its way) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, SkillTreeError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Reads the skill directory `relative_dir` of the catalog directory `root` (spec/skill-tree.md
/// §2). `root` is opened as named (the caller chose it); `relative_dir` must obey the body-path
/// rule (spec/catalog.md §1.2), and each of its segments is opened with `O_NOFOLLOW` relative to
/// the directory before it, as the catalog opens a body (spec/catalog.md §3, rule F2).
pub fn read_skill_tree(root: &Path, relative_dir: &str) -> Result<SkillTree, SkillTreeError> {
    if !is_body_path(relative_dir) {
        return Err(SkillTreeError::OutsideDirectory {
            root: root.to_path_buf(),
            relative: relative_dir.to_owned(),
        });
    }
    let target = root.join(relative_dir);
    let mut dir = open_named_dir(root)?;
    let mut walked = root.to_path_buf();
    let segments: Vec<&str> = relative_dir.split('/').collect();
    let last = segments.len().saturating_sub(1);
    for (i, segment) in segments.iter().enumerate() {
        walked.push(segment);
        dir = match rustix::fs::openat(&dir, *segment, dir_flags(), Mode::empty()) {
            Ok(next) => next,
            // Which refusal it was is read from the entry itself: the errno of a link opened with
            // O_NOFOLLOW | O_DIRECTORY differs between systems (ELOOP, ENOTDIR, EMLINK).
            Err(e) => {
                return Err(match entry_type(&dir, segment) {
                    Some(EntryType::Symlink) if i == last => {
                        SkillTreeError::DirectorySymlink { path: target }
                    }
                    Some(EntryType::Symlink) => SkillTreeError::PassesThroughSymlink {
                        path: target,
                        link: walked,
                    },
                    Some(EntryType::File | EntryType::Other) => SkillTreeError::NotDirectory {
                        path: target,
                        through: walked,
                    },
                    Some(EntryType::Directory) | None => io(&walked, "opened", e),
                });
            }
        };
    }
    Walk::new(&target).run(&dir)
}

/// Reads the skill tree at `dir`, opened as named (the caller chose it, as the catalog directory
/// is chosen); everything below it follows the walk rules of [`read_skill_tree`]. For an
/// installed copy, or a skill directory given by path.
pub fn read_skill_tree_at(dir: &Path) -> Result<SkillTree, SkillTreeError> {
    let fd = open_named_dir(dir)?;
    Walk::new(dir).run(&fd)
}

/// Re-reads the installed copy at `tree_root` under the walk rules and checks it holds exactly
/// the files of `expected` (spec/skill-tree.md §5). A difference is a `Mismatch` naming the first
/// differing path: a file missing, extra, with changed content or a changed executable bit.
/// Comparing file by file, not only the digests, is what lets the sentence name the path.
pub fn verify_skill_tree(
    tree_root: &Path,
    expected: &SkillTree,
) -> Result<SkillTree, SkillTreeError> {
    let installed = read_skill_tree_at(tree_root)?;
    match first_difference(expected.files(), installed.files()) {
        None => Ok(installed),
        Some((path, difference)) => Err(SkillTreeError::Mismatch {
            root: tree_root.to_path_buf(),
            expected: expected.digest_hex(),
            path,
            difference,
        }),
    }
}

/// The first path, in path order, where two sorted file lists differ.
fn first_difference(
    expected: &[SkillFile],
    installed: &[SkillFile],
) -> Option<(String, SkillTreeDifference)> {
    let (mut e, mut i) = (expected.iter().peekable(), installed.iter().peekable());
    loop {
        match (e.peek(), i.peek()) {
            (None, None) => return None,
            (Some(want), None) => return Some((want.path.clone(), SkillTreeDifference::Missing)),
            (None, Some(have)) => return Some((have.path.clone(), SkillTreeDifference::Extra)),
            (Some(want), Some(have)) => match want.path.as_bytes().cmp(have.path.as_bytes()) {
                std::cmp::Ordering::Less => {
                    return Some((want.path.clone(), SkillTreeDifference::Missing));
                }
                std::cmp::Ordering::Greater => {
                    return Some((have.path.clone(), SkillTreeDifference::Extra));
                }
                std::cmp::Ordering::Equal => {
                    if want.bytes != have.bytes {
                        return Some((want.path.clone(), SkillTreeDifference::Content));
                    }
                    if want.executable != have.executable {
                        return Some((
                            want.path.clone(),
                            SkillTreeDifference::Executable {
                                installed: have.executable,
                            },
                        ));
                    }
                    e.next();
                    i.next();
                }
            },
        }
    }
}

/// The leaf hash of one file (spec/skill-tree.md §4).
fn leaf_hash(path: &str, executable: bool, bytes: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(FILE_DOMAIN);
    hasher.update(&[u8::from(executable)]);
    // A path is at most SKILL_PATH_MAX_BYTES and a file at most SKILL_FILE_MAX_BYTES, so neither
    // length saturates.
    hasher.update(&u32::try_from(path.len()).unwrap_or(u32::MAX).to_le_bytes());
    hasher.update(path.as_bytes());
    hasher.update(&u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
    hasher.update(bytes);
    *hasher.finalize().as_bytes()
}

/// The tree digest over files sorted by path (spec/skill-tree.md §4).
fn tree_digest(files: &[SkillFile]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(TREE_DOMAIN);
    // At most SKILL_TREE_MAX_FILES files, so the count never saturates.
    hasher.update(&u32::try_from(files.len()).unwrap_or(u32::MAX).to_le_bytes());
    for file in files {
        hasher.update(&file.leaf_hash());
    }
    *hasher.finalize().as_bytes()
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `O_NOFOLLOW | O_DIRECTORY` for every directory below the one the caller named.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the directory the caller named, following the caller's own path as given.
fn open_named_dir(path: &Path) -> Result<OwnedFd, SkillTreeError> {
    rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(path, "opened", e))
}

fn io(path: &Path, action: &'static str, e: Errno) -> SkillTreeError {
    SkillTreeError::Io {
        path: path.to_path_buf(),
        action,
        source: e.into(),
    }
}

/// The type of the entry `name` of `dir`, not following a link; `None` when it cannot be told.
fn entry_type(dir: impl AsFd, name: &str) -> Option<EntryType> {
    FileStat::at(dir, name).ok().map(|s| s.entry_type())
}

/// How a refusal names a file that is neither regular nor a directory nor a link.
fn other_type_name(mode: u32) -> &'static str {
    match mode & S_IFMT {
        S_IFIFO => "FIFO",
        S_IFSOCK => "socket",
        S_IFCHR => "character device",
        S_IFBLK => "block device",
        _ => "file of an unknown type",
    }
}

/// The entry name as text, or why it is refused (spec/skill-tree.md §2, rule W4). NUL cannot
/// occur in a name the system lists, and is a control character besides.
fn plain_name(name: &[u8]) -> Result<&str, &'static str> {
    match std::str::from_utf8(name) {
        Err(_) => Err("is not valid UTF-8"),
        Ok(s) if s.chars().any(char::is_control) => Err("has a control character"),
        Ok(s) if s.contains('\\') => Err("has a backslash"),
        Ok(s) => Ok(s),
    }
}

/// Whether the walk skips an entry by its name alone (spec/skill-tree.md §2, rule W3).
fn is_skipped(name: &[u8]) -> bool {
    SKIPPED_NAMES.contains(&name) || name.starts_with(SKIPPED_PREFIX)
}

/// Reads at most `checked_bytes + 1` bytes of `file` and requires exactly `checked_bytes`: one
/// byte more tells a file that grew after its size was checked, fewer one that shrank.
fn read_checked(file: File, path: &Path, checked_bytes: u64) -> Result<Vec<u8>, SkillTreeError> {
    let mut bytes = Vec::with_capacity(usize::try_from(checked_bytes).unwrap_or(0));
    file.take(checked_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| SkillTreeError::Io {
            path: path.to_path_buf(),
            action: "read",
            source,
        })?;
    let read_bytes = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read_bytes != checked_bytes {
        return Err(SkillTreeError::Changed {
            path: path.to_path_buf(),
            checked_bytes,
            read_bytes,
        });
    }
    Ok(bytes)
}

/// Opens the entry `name` of `dir` without following a link; a failed open is told apart by
/// the entry's type, since the errno of a link opened with `O_NOFOLLOW` differs between
/// systems.
fn open_entry(
    dir: &OwnedFd,
    name: &str,
    path: &Path,
    flags: OFlags,
) -> Result<OwnedFd, SkillTreeError> {
    rustix::fs::openat(dir, name, flags, Mode::empty()).map_err(|e| match entry_type(dir, name) {
        Some(EntryType::Symlink) => SkillTreeError::Symlink {
            path: path.to_path_buf(),
        },
        _ => io(path, "opened", e),
    })
}

/// One walk of a skill directory: the files found so far and the counters the limits bound.
struct Walk<'a> {
    /// The skill directory as named in sentences.
    top: &'a Path,
    files: Vec<SkillFile>,
    total_bytes: u64,
    entries: usize,
}

impl<'a> Walk<'a> {
    fn new(top: &'a Path) -> Walk<'a> {
        Walk {
            top,
            files: Vec::new(),
            total_bytes: 0,
            entries: 0,
        }
    }

    fn run(mut self, dir: &OwnedFd) -> Result<SkillTree, SkillTreeError> {
        self.walk_dir(dir, "", 0)?;
        // Paths are unique, so sorting by their bytes is a total order.
        self.files
            .sort_unstable_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        let has_skill_md = self
            .files
            .binary_search_by(|f| f.path.as_bytes().cmp(SKILL_MD_NAME.as_bytes()))
            .is_ok();
        if !has_skill_md {
            return Err(SkillTreeError::MissingSkillMd {
                dir: self.top.to_path_buf(),
            });
        }
        let digest = tree_digest(&self.files);
        Ok(SkillTree {
            files: self.files,
            digest,
            total_bytes: self.total_bytes,
        })
    }

    /// The names of `dir` (without `.` and `..`), sorted by their bytes, so one tree always
    /// yields the same first error.
    fn list(&mut self, dir: &OwnedFd, shown: &Path) -> Result<Vec<Vec<u8>>, SkillTreeError> {
        let entries = rustix::fs::Dir::read_from(dir).map_err(|e| io(shown, "listed", e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io(shown, "listed", e))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > SKILL_TREE_MAX_ENTRIES {
                return Err(SkillTreeError::TooManyEntries {
                    dir: self.top.to_path_buf(),
                    count: self.entries,
                    limit: SKILL_TREE_MAX_ENTRIES,
                });
            }
            names.push(name.to_vec());
        }
        names.sort_unstable();
        Ok(names)
    }

    /// Walks the directory `dir`, whose path relative to the skill directory is `prefix` (empty
    /// at the top) and which is `depth` levels below it.
    fn walk_dir(
        &mut self,
        dir: &OwnedFd,
        prefix: &str,
        depth: usize,
    ) -> Result<(), SkillTreeError> {
        let shown = self.top.join(prefix);
        for raw in self.list(dir, &shown)? {
            if is_skipped(&raw) {
                continue;
            }
            let name = plain_name(&raw).map_err(|fault| SkillTreeError::BadName {
                dir: shown.clone(),
                name: String::from_utf8_lossy(&raw).into_owned(),
                fault,
            })?;
            let relative = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}/{name}")
            };
            let path = self.top.join(&relative);
            if relative.len() > SKILL_PATH_MAX_BYTES {
                return Err(SkillTreeError::PathTooLong {
                    path,
                    size_bytes: relative.len(),
                    limit_bytes: SKILL_PATH_MAX_BYTES,
                });
            }
            // The entry's own type (never a link's target) decides how it is opened, so a FIFO
            // or device is refused without being opened at all; the open descriptor is checked
            // again below, which settles an entry replaced in between.
            let stat = FileStat::at(dir, name).map_err(|e| io(&path, "inspected", e))?;
            match stat.entry_type() {
                EntryType::Symlink => return Err(SkillTreeError::Symlink { path }),
                EntryType::Other => {
                    return Err(SkillTreeError::NotRegularFile {
                        path,
                        what: other_type_name(stat.mode),
                    });
                }
                EntryType::Directory => {
                    let below = depth + 1;
                    if below > SKILL_TREE_MAX_DEPTH {
                        return Err(SkillTreeError::TooDeep {
                            path,
                            depth: below,
                            limit: SKILL_TREE_MAX_DEPTH,
                        });
                    }
                    let sub = open_entry(dir, name, &path, dir_flags())?;
                    self.walk_dir(&sub, &relative, below)?;
                }
                EntryType::File => {
                    let is_skill_md = prefix.is_empty() && name == SKILL_MD_NAME;
                    self.read_file(dir, name, relative, path, is_skill_md)?;
                }
            }
        }
        Ok(())
    }

    fn read_file(
        &mut self,
        dir: &OwnedFd,
        name: &str,
        relative: String,
        path: PathBuf,
        is_skill_md: bool,
    ) -> Result<(), SkillTreeError> {
        let count = self.files.len() + 1;
        if count > SKILL_TREE_MAX_FILES {
            return Err(SkillTreeError::TooManyFiles {
                dir: self.top.to_path_buf(),
                count,
                limit: SKILL_TREE_MAX_FILES,
            });
        }
        // Non-blocking, so a FIFO swapped in after the type check never hangs the open.
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        let fd = open_entry(dir, name, &path, flags)?;
        let stat = FileStat::of_fd(&fd).map_err(|e| io(&path, "inspected", e))?;
        if !stat.is_regular() {
            return Err(match stat.entry_type() {
                EntryType::Directory => SkillTreeError::NotRegularFile {
                    path,
                    what: "directory that replaced a file during the walk",
                },
                _ => SkillTreeError::NotRegularFile {
                    path,
                    what: other_type_name(stat.mode),
                },
            });
        }
        if stat.nlink != 1 {
            return Err(SkillTreeError::HardLinks {
                path,
                links: stat.nlink,
            });
        }
        let size_bytes = u64::try_from(stat.size).unwrap_or(0);
        let limit_bytes = if is_skill_md {
            SKILL_MD_MAX_BYTES
        } else {
            SKILL_FILE_MAX_BYTES
        };
        if size_bytes > limit_bytes {
            return Err(SkillTreeError::FileTooLarge {
                path,
                size_bytes,
                limit_bytes,
            });
        }
        let total = self.total_bytes.saturating_add(size_bytes);
        if total > SKILL_TREE_MAX_BYTES {
            return Err(SkillTreeError::TreeTooLarge {
                dir: self.top.to_path_buf(),
                size_bytes: total,
                limit_bytes: SKILL_TREE_MAX_BYTES,
            });
        }
        let bytes = read_checked(File::from(fd), &path, size_bytes)?;
        self.total_bytes = total;
        self.files.push(SkillFile {
            path: relative,
            executable: stat.mode & MODE_ANY_EXECUTE != 0,
            bytes,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::{PermissionsExt as _, symlink};

    const SKILL_MD: &[u8] = b"---\nname: pdf-tools\ndescription: Fill and split PDF forms\n\
        allowed-tools: Bash(scripts/run.sh:*)\n---\n\n# PDF tools\n\nRun `scripts/run.sh`.\n";
    const RUN_SH: &[u8] =
        b"#!/bin/sh\nset -eu\nexec python3 \"$(dirname \"$0\")/fill.py\" \"$@\"\n";
    const API_MD: &[u8] = b"# API\n\n`fill(form, values)` fills a form.\n";
    const NOTES_MD: &[u8] = b"Deeply nested notes.\n";
    const TEMPLATE: &[u8] = b"Dear {{name}},\n";
    const ENV_EXAMPLE: &[u8] = b"PDF_TOOLS_HOME=\n";

    fn write(path: &Path, bytes: &[u8], mode: u32) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The realistic skill directory at `dir`, with the names the walk must skip.
    fn fixture(dir: &Path) {
        write(&dir.join("SKILL.md"), SKILL_MD, 0o644);
        write(&dir.join("scripts/run.sh"), RUN_SH, 0o755);
        write(&dir.join("references/api.md"), API_MD, 0o644);
        write(&dir.join("references/deep/more/notes.md"), NOTES_MD, 0o600);
        write(&dir.join("assets/template.txt"), TEMPLATE, 0o644);
        write(&dir.join(".env.example"), ENV_EXAMPLE, 0o644);
        // Skipped: version control, package-manager output, Finder metadata, at any level.
        write(&dir.join(".git/HEAD"), b"ref: refs/heads/main\n", 0o644);
        write(&dir.join(".git/objects/ab/cdef"), b"blob", 0o444);
        write(
            &dir.join("node_modules/x/index.js"),
            b"module.exports = 1;\n",
            0o644,
        );
        write(&dir.join("scripts/node_modules/y.js"), b"1", 0o644);
        write(&dir.join(".DS_Store"), b"\0\0\0\x01Bud1", 0o644);
        write(&dir.join("assets/.DS_Store"), b"Bud1", 0o644);
    }

    /// The leaf hash computed from spec/skill-tree.md §4 with blake3 directly.
    fn spec_leaf(path: &str, executable: bool, content: &[u8]) -> [u8; 32] {
        let mut input = Vec::new();
        input.extend_from_slice(b"ctx.skill-tree.file.v1\x00");
        input.push(if executable { 0x01 } else { 0x00 });
        input.extend_from_slice(&(path.len() as u32).to_le_bytes());
        input.extend_from_slice(path.as_bytes());
        input.extend_from_slice(&(content.len() as u64).to_le_bytes());
        input.extend_from_slice(content);
        *blake3::hash(&input).as_bytes()
    }

    /// The tree digest computed from spec/skill-tree.md §4 with blake3 directly; `files` must
    /// already be in path order.
    fn spec_digest(files: &[(&str, bool, &[u8])]) -> [u8; 32] {
        let mut input = Vec::new();
        input.extend_from_slice(b"ctx.skill-tree.v1\x00");
        input.extend_from_slice(&(files.len() as u32).to_le_bytes());
        for (path, executable, content) in files {
            input.extend_from_slice(&spec_leaf(path, *executable, content));
        }
        *blake3::hash(&input).as_bytes()
    }

    fn refused_at(dir: &Path) -> SkillTreeError {
        read_skill_tree_at(dir).expect_err("refused")
    }

    /// A skill directory holding only a SKILL.md, in a fresh temporary directory.
    fn minimal() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let skill = tmp.path().join("skill");
        write(&skill.join("SKILL.md"), b"---\nname: x\n---\n", 0o644);
        (tmp, skill)
    }

    #[test]
    fn a_realistic_skill_reads_whole_in_path_order_with_the_spec_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let catalog = tmp.path();
        fixture(&catalog.join("skills/pdf-tools"));
        let tree = read_skill_tree(catalog, "skills/pdf-tools").unwrap();

        let expected: [(&str, bool, &[u8]); 6] = [
            (".env.example", false, ENV_EXAMPLE),
            ("SKILL.md", false, SKILL_MD),
            ("assets/template.txt", false, TEMPLATE),
            ("references/api.md", false, API_MD),
            ("references/deep/more/notes.md", false, NOTES_MD),
            ("scripts/run.sh", true, RUN_SH),
        ];
        let got: Vec<(&str, bool, &[u8])> = tree
            .files()
            .iter()
            .map(|f| (f.path(), f.executable(), f.bytes()))
            .collect();
        assert_eq!(got, expected);
        let total: usize = expected.iter().map(|(_, _, c)| c.len()).sum();
        assert_eq!(tree.total_bytes(), total as u64);
        assert_eq!(tree.skill_md(), SKILL_MD);

        let digest = spec_digest(&expected);
        assert_eq!(tree.digest(), &digest);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(tree.digest_hex(), hex);
        assert_eq!(
            tree.files()[5].leaf_hash(),
            spec_leaf("scripts/run.sh", true, RUN_SH)
        );

        // The same directory named directly reads the same tree.
        assert_eq!(
            read_skill_tree_at(&catalog.join("skills/pdf-tools")).unwrap(),
            tree
        );
    }

    #[test]
    fn any_execute_bit_counts_and_only_that_bit_is_kept() {
        let (_tmp, skill) = minimal();
        write(&skill.join("owner-x"), b"a", 0o744);
        write(&skill.join("other-x"), b"b", 0o641);
        write(&skill.join("group-x"), b"c", 0o650);
        write(&skill.join("plain"), b"d", 0o600);
        let before = read_skill_tree_at(&skill).unwrap();
        let flags: Vec<(&str, bool)> = before
            .files()
            .iter()
            .map(|f| (f.path(), f.executable()))
            .collect();
        assert_eq!(
            flags,
            [
                ("SKILL.md", false),
                ("group-x", true),
                ("other-x", true),
                ("owner-x", true),
                ("plain", false)
            ]
        );
        // Other mode bits change nothing.
        std::fs::set_permissions(skill.join("plain"), std::fs::Permissions::from_mode(0o444))
            .unwrap();
        std::fs::set_permissions(
            skill.join("owner-x"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        assert_eq!(
            read_skill_tree_at(&skill).unwrap().digest(),
            before.digest()
        );
    }

    #[test]
    fn a_byte_a_name_or_an_execute_bit_changes_the_digest_and_an_empty_directory_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let skill = tmp.path().join("s");
        fixture(&skill);
        let original = *read_skill_tree_at(&skill).unwrap().digest();

        std::fs::create_dir_all(skill.join("assets/empty/deeper")).unwrap();
        std::fs::create_dir(skill.join("empty")).unwrap();
        assert_eq!(read_skill_tree_at(&skill).unwrap().digest(), &original);

        let api = skill.join("references/api.md");
        let mut changed = API_MD.to_vec();
        changed[3] ^= 0x01;
        std::fs::write(&api, &changed).unwrap();
        let one_byte = *read_skill_tree_at(&skill).unwrap().digest();
        assert_ne!(one_byte, original);
        std::fs::write(&api, API_MD).unwrap();
        assert_eq!(read_skill_tree_at(&skill).unwrap().digest(), &original);

        std::fs::rename(&api, skill.join("references/api2.md")).unwrap();
        let renamed = *read_skill_tree_at(&skill).unwrap().digest();
        assert_ne!(renamed, original);
        std::fs::rename(skill.join("references/api2.md"), &api).unwrap();

        std::fs::set_permissions(&api, std::fs::Permissions::from_mode(0o755)).unwrap();
        let flipped = *read_skill_tree_at(&skill).unwrap().digest();
        assert_ne!(flipped, original);
        assert_ne!(flipped, one_byte);
        assert_ne!(flipped, renamed);
    }

    #[test]
    fn links_and_special_files_are_refused_with_their_sentences() {
        let (tmp, skill) = minimal();
        let shown = skill.display();
        let outside = tmp.path().join("outside");
        write(&outside.join("secret.txt"), b"secret", 0o644);

        // A symbolic link to a file, even one inside the tree.
        symlink(skill.join("SKILL.md"), skill.join("alias.md")).unwrap();
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {shown}/alias.md is a symbolic link; ctx reads only regular files \
                 inside the skill directory"
            )
        );
        std::fs::remove_file(skill.join("alias.md")).unwrap();

        // A symbolically linked subdirectory, nested.
        std::fs::create_dir(skill.join("references")).unwrap();
        symlink(&outside, skill.join("references/linked")).unwrap();
        let err = refused_at(&skill);
        assert!(matches!(err, SkillTreeError::Symlink { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "skill file {shown}/references/linked is a symbolic link; ctx reads only regular \
                 files inside the skill directory"
            )
        );
        std::fs::remove_file(skill.join("references/linked")).unwrap();

        // A second name, even outside the tree.
        std::fs::hard_link(skill.join("SKILL.md"), tmp.path().join("second")).unwrap();
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {shown}/SKILL.md has 2 hard links; ctx refuses a skill file that \
                 another path can change"
            )
        );
        std::fs::remove_file(tmp.path().join("second")).unwrap();

        // A FIFO: refused by its type, never opened (so never waited on).
        rustix::fs::mknodat(
            CWD,
            skill.join("references/pipe"),
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {shown}/references/pipe is a FIFO; ctx reads only regular files \
                 inside the skill directory"
            )
        );
        std::fs::remove_file(skill.join("references/pipe")).unwrap();

        // A socket.
        let _listener = std::os::unix::net::UnixListener::bind(skill.join("sock")).unwrap();
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {shown}/sock is a socket; ctx reads only regular files inside the \
                 skill directory"
            )
        );
        std::fs::remove_file(skill.join("sock")).unwrap();

        assert!(read_skill_tree_at(&skill).is_ok());
    }

    #[test]
    fn the_skill_directory_is_reached_without_links_and_inside_the_catalog() {
        let tmp = tempfile::tempdir().unwrap();
        let catalog = tmp.path();
        write(&catalog.join("skills/x/SKILL.md"), b"x", 0o644);
        write(&catalog.join("file"), b"f", 0o644);
        let shown = catalog.display();
        symlink(catalog.join("skills"), catalog.join("via")).unwrap();
        symlink(catalog.join("skills/x"), catalog.join("skills/y")).unwrap();
        let refused = |relative: &str| read_skill_tree(catalog, relative).unwrap_err().to_string();

        assert_eq!(
            refused("via/x"),
            format!(
                "skill directory {shown}/via/x passes through the symbolic link {shown}/via; ctx \
                 reads only regular files inside the catalog directory"
            )
        );
        assert_eq!(
            refused("skills/y"),
            format!(
                "skill directory {shown}/skills/y is a symbolic link; ctx reads only regular \
                 files inside the catalog directory"
            )
        );
        assert_eq!(
            refused("file/x"),
            format!(
                "skill directory {shown}/file/x passes through {shown}/file, which is not a \
                 directory"
            )
        );
        for relative in [
            "../x",
            "/etc",
            "skills/../skills/x",
            "",
            "a//b",
            "./x",
            "a\\b",
        ] {
            assert_eq!(
                refused(relative),
                format!(
                    "skill directory path {relative:?} does not stay inside the catalog \
                     directory {shown}; ctx reads only regular files inside the catalog directory"
                )
            );
        }
        let err = read_skill_tree(catalog, "skills/none").unwrap_err();
        assert!(err.is_not_found(), "{err:?}");
        assert!(read_skill_tree(catalog, "skills/x").is_ok());
    }

    #[test]
    fn skill_md_must_be_a_top_level_regular_file_with_its_exact_name() {
        let tmp = tempfile::tempdir().unwrap();
        let skill = tmp.path().join("s");
        let missing = format!(
            "skill directory {} has no regular file SKILL.md at its top level; every skill has one",
            skill.display()
        );
        write(&skill.join("skill.md"), b"lowercase", 0o644);
        write(&skill.join("docs/SKILL.md"), b"nested", 0o644);
        assert_eq!(refused_at(&skill).to_string(), missing);
        std::fs::create_dir(skill.join("SKILL.md")).unwrap();
        write(
            &skill.join("SKILL.md/inner"),
            b"a directory by that name",
            0o644,
        );
        assert_eq!(refused_at(&skill).to_string(), missing);
        std::fs::remove_dir_all(skill.join("SKILL.md")).unwrap();
        write(&skill.join("SKILL.md"), b"now", 0o644);
        assert_eq!(read_skill_tree_at(&skill).unwrap().skill_md(), b"now");
    }

    #[test]
    fn names_that_are_not_plain_utf8_are_refused_naming_the_directory() {
        for (raw, shown_name, fault) in [
            (&b"bad\xff.txt"[..], "bad\u{fffd}.txt", "is not valid UTF-8"),
            (&b"tab\there"[..], "tab\there", "has a control character"),
            (&b"back\\slash"[..], "back\\slash", "has a backslash"),
        ] {
            let (_tmp, skill) = minimal();
            write(
                &skill.join("assets").join(OsStr::from_bytes(raw)),
                b"x",
                0o644,
            );
            assert_eq!(
                refused_at(&skill).to_string(),
                format!(
                    "skill directory {}/assets has an entry named {shown_name:?}, which {fault}; \
                     skill file names are UTF-8 without control characters or backslashes",
                    skill.display()
                )
            );
        }
    }

    #[test]
    fn too_many_files_or_entries_are_refused() {
        let (_tmp, skill) = minimal();
        for i in 0..SKILL_TREE_MAX_FILES - 1 {
            write(&skill.join(format!("refs/f{i:04}")), b"", 0o644);
        }
        assert_eq!(read_skill_tree_at(&skill).unwrap().files().len(), 1_000);
        write(&skill.join("refs/one-more"), b"", 0o644);
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill directory {} has at least 1001 files, more than the limit of 1000 files",
                skill.display()
            )
        );

        // Skipped names are listed too, so they are bounded as well.
        let (_tmp, skill) = minimal();
        for i in 0..SKILL_TREE_MAX_ENTRIES {
            write(&skill.join(format!(".DS_Store{i}")), b"", 0o644);
        }
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill directory {} has at least 4097 directory entries, more than the limit of \
                 4096 entries",
                skill.display()
            )
        );
    }

    #[test]
    fn sizes_are_bounded_per_file_for_skill_md_and_for_the_tree() {
        let sparse = |path: &Path, len: u64| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::File::create(path).unwrap().set_len(len).unwrap();
        };

        // SKILL.md: 256 KiB passes, one byte more does not; a nested SKILL.md is an ordinary file.
        let (_tmp, skill) = minimal();
        sparse(&skill.join("SKILL.md"), 256 * 1024);
        sparse(&skill.join("docs/SKILL.md"), 300 * 1024);
        assert_eq!(
            read_skill_tree_at(&skill).unwrap().total_bytes(),
            556 * 1024
        );
        sparse(&skill.join("SKILL.md"), 256 * 1024 + 1);
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {}/SKILL.md is 262145 bytes, more than the limit of 262144 bytes",
                skill.display()
            )
        );

        // Any other file: 4 MiB at most.
        let (_tmp, skill) = minimal();
        sparse(&skill.join("assets/big.bin"), 4 * 1024 * 1024 + 1);
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill file {}/assets/big.bin is 4194305 bytes, more than the limit of 4194304 \
                 bytes",
                skill.display()
            )
        );

        // The tree: 16 MiB at most, counted up to the file that crosses it.
        let (_tmp, skill) = minimal();
        let skill_md_len = std::fs::metadata(skill.join("SKILL.md")).unwrap().len();
        for i in 0..4 {
            sparse(&skill.join(format!("assets/part{i}.bin")), 4 * 1024 * 1024);
        }
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill directory {} has at least {} bytes of files, more than the limit of \
                 16777216 bytes",
                skill.display(),
                16 * 1024 * 1024 + skill_md_len
            )
        );
        std::fs::remove_file(skill.join("assets/part3.bin")).unwrap();
        assert_eq!(
            read_skill_tree_at(&skill).unwrap().total_bytes(),
            12 * 1024 * 1024 + skill_md_len
        );
    }

    #[test]
    fn depth_and_path_length_are_bounded() {
        let (_tmp, skill) = minimal();
        write(
            &skill.join("1/2/3/4/5/6/7/8/deepest.md"),
            b"8 levels",
            0o644,
        );
        assert!(read_skill_tree_at(&skill).is_ok());
        std::fs::create_dir(skill.join("1/2/3/4/5/6/7/8/9")).unwrap();
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill subdirectory {}/1/2/3/4/5/6/7/8/9 is 9 levels deep, more than the limit \
                 of 8 levels",
                skill.display()
            )
        );

        let (_tmp, skill) = minimal();
        // "refs/" is 5 bytes; a 251-byte name makes 256 bytes, one more makes 257.
        write(
            &skill.join(format!("refs/{}", "n".repeat(251))),
            b"ok",
            0o644,
        );
        assert!(read_skill_tree_at(&skill).is_ok());
        let long = format!("refs/{}", "m".repeat(252));
        write(&skill.join(&long), b"too long", 0o644);
        assert_eq!(
            refused_at(&skill).to_string(),
            format!(
                "skill path {}/{long} is 257 bytes relative to the skill directory, more than \
                 the limit of 256 bytes",
                skill.display()
            )
        );
    }

    #[test]
    fn a_file_whose_size_changed_after_its_check_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let open = || std::fs::File::open(&path).unwrap();
        assert_eq!(read_checked(open(), &path, 10).unwrap(), b"0123456789");
        // It grew: one byte past the checked size is read, no more.
        assert_eq!(
            read_checked(open(), &path, 4).unwrap_err().to_string(),
            format!(
                "skill file {} changed while it was read: it was 4 bytes when checked and 5 \
                 bytes when read",
                path.display()
            )
        );
        // It shrank.
        assert!(matches!(
            read_checked(open(), &path, 11),
            Err(SkillTreeError::Changed {
                checked_bytes: 11,
                read_bytes: 10,
                ..
            })
        ));
    }

    /// The fixture at `tmp/source` and an identical installed copy at `tmp/installed`.
    fn source_and_copy() -> (tempfile::TempDir, SkillTree, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        fixture(&tmp.path().join("source"));
        fixture(&tmp.path().join("installed"));
        let expected = read_skill_tree_at(&tmp.path().join("source")).unwrap();
        let installed = tmp.path().join("installed");
        (tmp, expected, installed)
    }

    fn mismatch(installed: &Path, expected: &SkillTree, path: &str, difference: &str) -> String {
        format!(
            "skill tree {} does not match the expected tree {}: file {path} {difference}",
            installed.display(),
            expected.digest_hex()
        )
    }

    #[test]
    fn an_intact_copy_verifies_and_each_difference_names_its_path() {
        let (_tmp, expected, installed) = source_and_copy();
        let verified = verify_skill_tree(&installed, &expected).unwrap();
        assert_eq!(verified.digest(), expected.digest());

        let (_tmp, expected, installed) = source_and_copy();
        std::fs::write(installed.join("references/api.md"), b"# API\n\nchanged\n").unwrap();
        let err = verify_skill_tree(&installed, &expected).unwrap_err();
        assert!(
            matches!(&err, SkillTreeError::Mismatch { path, difference, .. }
                if path == "references/api.md" && *difference == SkillTreeDifference::Content),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            mismatch(
                &installed,
                &expected,
                "references/api.md",
                "has different content"
            )
        );

        let (_tmp, expected, installed) = source_and_copy();
        write(&installed.join("assets/extra.txt"), b"extra", 0o644);
        assert_eq!(
            verify_skill_tree(&installed, &expected)
                .unwrap_err()
                .to_string(),
            mismatch(
                &installed,
                &expected,
                "assets/extra.txt",
                "is not part of the expected tree"
            )
        );

        let (_tmp, expected, installed) = source_and_copy();
        std::fs::remove_file(installed.join("assets/template.txt")).unwrap();
        assert_eq!(
            verify_skill_tree(&installed, &expected)
                .unwrap_err()
                .to_string(),
            mismatch(&installed, &expected, "assets/template.txt", "is missing")
        );

        let (_tmp, expected, installed) = source_and_copy();
        let run = installed.join("scripts/run.sh");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            verify_skill_tree(&installed, &expected)
                .unwrap_err()
                .to_string(),
            mismatch(
                &installed,
                &expected,
                "scripts/run.sh",
                "is not executable, but the expected file is"
            )
        );
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let api = installed.join("references/api.md");
        std::fs::set_permissions(&api, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            verify_skill_tree(&installed, &expected)
                .unwrap_err()
                .to_string(),
            mismatch(
                &installed,
                &expected,
                "references/api.md",
                "is executable, but the expected file is not"
            )
        );

        // Several differences: the first in path order is named.
        std::fs::remove_file(installed.join("scripts/run.sh")).unwrap();
        write(&installed.join("assets/zz.txt"), b"z", 0o644);
        let err = verify_skill_tree(&installed, &expected).unwrap_err();
        assert!(
            matches!(&err, SkillTreeError::Mismatch { path, difference, .. }
                if path == "assets/zz.txt" && *difference == SkillTreeDifference::Extra),
            "{err:?}"
        );

        // The installed copy is read under the same rules.
        let (_tmp, expected, installed) = source_and_copy();
        symlink(installed.join("SKILL.md"), installed.join("assets/link.md")).unwrap();
        assert!(matches!(
            verify_skill_tree(&installed, &expected),
            Err(SkillTreeError::Symlink { .. })
        ));
    }
}
