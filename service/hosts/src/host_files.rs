//! The agent hosts' own configuration files (`~/.claude/settings.json`, `$CODEX_HOME/hooks.json`,
//! a project's `.mcp.json`), edited in place: under ctx's advisory lock, atomically, and without
//! changing a byte ctx does not own (spec/activation.md §7).
//!
//! Two parts:
//! - [`update_locked`]: one read–modify–write of one file. The caller's `edit` turns the current
//!   bytes into the new bytes; the file is replaced by a rename of a fsynced temporary file, so a
//!   reader (the host) sees either the old or the new file, never a mix.
//! - The JSON editor: [`parse_json`] reads a document; [`set_member`], [`remove_member`] and
//!   [`append_element`] change one member or array element of a JSON text and keep every other
//!   byte (key order, whitespace, unknown keys) exactly as it was.
//!
//! The hosts write these files too and do not take ctx's lock. Re-reading the file just before
//! the rename narrows that race to the instant between the check and the rename; a change seen
//! there makes ctx start over from a fresh read instead of losing the host's write.
//!
//! Unix only, like the rest of the service (permission bits, `O_NOFOLLOW`, directory fsync).

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ctx_fs::{
    DIR_MODE_PRIVATE, DirLock, LockError, LockOptions, MODE_GROUP_OTHER, MODE_GROUP_OTHER_WRITE,
    MODE_PERMISSION_BITS, ModeRule, PrivateError, ReadError, SyncError, check_dir, effective_uid,
    fsync_dir, read_bounded_file,
};
use rustix::fs::{Mode, OFlags};
use sha2::{Digest as _, Sha256};

/// Largest host file ctx reads or writes. Settings files are a few KiB; anything near this is
/// not a file ctx should be rewriting, and the bound keeps one read from exhausting memory.
pub const HOST_FILE_MAX_BYTES: u64 = 4 * 1024 * 1024;

/// How many times [`update_locked`] starts over when the file changed between its read and its
/// rename (a host writing the file without ctx's lock) before it gives up.
pub const HOST_FILE_ATTEMPTS: u32 = 3;

/// How long [`update_locked`] waits for another ctx process to release the file's lock, in
/// milliseconds.
pub const HOST_FILE_LOCK_WAIT_MAX_MS: u64 = 10_000;
/// How long [`update_locked`] waits for another ctx process to release the file's lock.
pub const HOST_FILE_LOCK_WAIT: Duration = Duration::from_millis(HOST_FILE_LOCK_WAIT_MAX_MS);

/// Deepest nesting the JSON editor accepts; deeper text is refused before it can exhaust the
/// stack. Host settings nest a handful of levels.
pub const JSON_EDIT_DEPTH_MAX: usize = 128;

/// Pause between two attempts at a host file's lock, in milliseconds.
const HOST_FILE_LOCK_POLL_MS: u64 = 10;
const LOCK_SUFFIX: &str = ".ctx-lock";
const TEMP_SUFFIX: &str = ".ctx-tmp";
/// Mode of a file ctx creates, less the umask: what any editor would create. Files that exist
/// keep their own mode.
const NEW_FILE_MODE: u32 = 0o666;

/// Why a host file could not be read, edited or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostFileError {
    /// A filesystem call failed; `action` says which, `path` on what.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The path names a directory, a device or another non-regular file.
    #[error("{} is not a regular file, so ctx does not edit it", path.display())]
    NotAFile { path: PathBuf },
    /// The path is a symbolic link whose target does not exist; ctx does not create files
    /// through a link it did not make.
    #[error("{} is a symbolic link to a missing file, so ctx does not write through it", path.display())]
    DanglingLink { path: PathBuf },
    /// The path has no file name or no parent directory (`/`, `..`).
    #[error("{} does not name a file in a directory", path.display())]
    BadPath { path: PathBuf },
    /// The file (or the edit's result) is larger than [`HOST_FILE_MAX_BYTES`].
    #[error("{} would hold more than {limit} bytes; ctx does not edit host files that large", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    /// Another ctx process held the file's lock for longer than [`HOST_FILE_LOCK_WAIT`].
    #[error(
        "{} is being edited by another ctx process (lock file {}), still after {} s",
        path.display(),
        lock.display(),
        waited.as_secs()
    )]
    LockTimeout {
        path: PathBuf,
        lock: PathBuf,
        waited: Duration,
    },
    /// The file changed between ctx's read and its rename on every one of `attempts` tries.
    #[error("{} kept changing while ctx edited it ({attempts} attempts); nothing was written", path.display())]
    Contended { path: PathBuf, attempts: u32 },
    /// The file's text is not JSON the editor accepts, or an edit does not fit its shape.
    #[error("{} cannot be edited as JSON: {source}", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: JsonEditError,
    },
}

impl HostFileError {
    /// True when the file itself is refused (its kind, size or content) and the person must fix
    /// it; false for I/O failures, lock timeouts and contention, which are the machine's.
    pub fn is_bad_file(&self) -> bool {
        matches!(
            self,
            HostFileError::NotAFile { .. }
                | HostFileError::DanglingLink { .. }
                | HostFileError::BadPath { .. }
                | HostFileError::TooLarge { .. }
                | HostFileError::Json { .. }
        )
    }
}

/// What [`update_locked`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// The file read and (when `written`) replaced: the path given, or the file its symbolic link
    /// points to (the link itself is kept).
    pub target: PathBuf,
    /// SHA-256 of the bytes read before the edit; `None` when the file did not exist.
    pub before: Option<[u8; 32]>,
    /// SHA-256 of the bytes the file holds afterwards: the new bytes when `written`, else
    /// `before`.
    pub after: Option<[u8; 32]>,
    /// Whether the file was replaced. False when `edit` returned `None` or the bytes it had.
    pub written: bool,
}

/// One locked, atomic read–modify–write of the host file `path`.
///
/// 1. Creates missing parent directories (default mode: `~/.claude` is the person's, not a
///    private ctx directory) and takes an exclusive advisory lock on the sidecar
///    [`lock_path`] (never removed: removing a lock file races with a waiter that has it open),
///    waiting up to [`HOST_FILE_LOCK_WAIT`].
/// 2. Reads the file (`None` when absent; more than [`HOST_FILE_MAX_BYTES`] is refused) and
///    calls `edit` with it. `edit` returns the new bytes, or `None` for "nothing to change".
/// 3. Writes the new bytes to `<dir>/.<name>.ctx-tmp` with the file's permission bits, fsyncs
///    it, re-reads the file and, if its bytes changed since step 2, starts over at step 2 (at
///    most [`HOST_FILE_ATTEMPTS`] times, then [`HostFileError::Contended`]); otherwise renames
///    the temporary file over the file and fsyncs the directory.
///
/// `edit` may therefore run more than once, each time on a fresh read; it must not have side
/// effects beyond its result. A symbolic link at `path` is followed: the file it points to is
/// replaced and the link stays (dotfile managers keep settings that way). Its errors are
/// returned as they are; file errors are converted with `E::from`.
pub fn update_locked<E>(
    path: &Path,
    mut edit: impl FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, E>,
) -> Result<UpdateOutcome, E>
where
    E: From<HostFileError>,
{
    let target = resolve_target(path)?;
    let (dir, name) = split(&target)?;
    create_parent(&dir)?;
    let _lock = lock_sidecar(&dir, &name, &target)?;
    for _ in 0..HOST_FILE_ATTEMPTS {
        let current = read_regular(&target)?;
        let before = current.as_ref().map(|(bytes, _)| sha256(bytes));
        let unchanged = UpdateOutcome {
            target: target.clone(),
            before,
            after: before,
            written: false,
        };
        let Some(new) = edit(current.as_ref().map(|(bytes, _)| bytes.as_slice()))? else {
            return Ok(unchanged);
        };
        if current.as_ref().map(|(bytes, _)| bytes) == Some(&new) {
            return Ok(unchanged);
        }
        if new.len() as u64 > HOST_FILE_MAX_BYTES {
            return Err(HostFileError::TooLarge {
                path: target,
                limit: HOST_FILE_MAX_BYTES,
            }
            .into());
        }
        let temp = write_temp(&dir, &name, &new, current.as_ref().map(|(_, mode)| *mode))?;
        let now = match read_regular(&target) {
            Ok(now) => now.map(|(bytes, _)| bytes),
            Err(e) => {
                remove_quietly(&temp);
                return Err(e.into());
            }
        };
        if now != current.map(|(bytes, _)| bytes) {
            // Someone (the host) wrote the file without ctx's lock: their write wins, and the
            // edit is redone on top of it.
            remove_quietly(&temp);
            continue;
        }
        if let Err(source) = fs::rename(&temp, &target) {
            remove_quietly(&temp);
            return Err(HostFileError::Io {
                action: "rename the new version over",
                path: target,
                source,
            }
            .into());
        }
        fsync_dir(&dir).map_err(sync_error)?;
        return Ok(UpdateOutcome {
            target,
            before,
            after: Some(sha256(&new)),
            written: true,
        });
    }
    Err(HostFileError::Contended {
        path: target,
        attempts: HOST_FILE_ATTEMPTS,
    }
    .into())
}

/// The bytes of the host file `path` without taking ctx's lock (for reports such as
/// `ctx doctor`): `None` when absent. Follows a symbolic link; refuses non-regular files and
/// files larger than [`HOST_FILE_MAX_BYTES`].
pub fn read_host_file(path: &Path) -> Result<Option<Vec<u8>>, HostFileError> {
    Ok(read_regular(path)?.map(|(bytes, _)| bytes))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The file `path` stands for: itself, or where its symbolic link points.
fn resolve_target(path: &Path) -> Result<PathBuf, HostFileError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match fs::canonicalize(path) {
            Ok(real) => Ok(real),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(HostFileError::DanglingLink {
                path: path.to_path_buf(),
            }),
            Err(source) => Err(HostFileError::Io {
                action: "follow the symbolic link",
                path: path.to_path_buf(),
                source,
            }),
        },
        Ok(meta) if !meta.is_file() => Err(HostFileError::NotAFile {
            path: path.to_path_buf(),
        }),
        Ok(_) => Ok(path.to_path_buf()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path.to_path_buf()),
        Err(source) => Err(HostFileError::Io {
            action: "inspect",
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn split(target: &Path) -> Result<(PathBuf, OsString), HostFileError> {
    let bad = || HostFileError::BadPath {
        path: target.to_path_buf(),
    };
    let name = target.file_name().ok_or_else(bad)?;
    let dir = match target.parent().ok_or_else(bad)? {
        dir if dir.as_os_str().is_empty() => Path::new("."),
        dir => dir,
    };
    Ok((dir.to_path_buf(), name.to_os_string()))
}

/// `.<name><suffix>` next to the file; a name that already starts with a dot is not given a
/// second one (`.mcp.json` → `.mcp.json.ctx-lock`).
fn sidecar_name(name: &OsStr, suffix: &str) -> OsString {
    let mut out = OsString::new();
    if !name.as_encoded_bytes().starts_with(b".") {
        out.push(".");
    }
    out.push(name);
    out.push(suffix);
    out
}

fn create_parent(dir: &Path) -> Result<(), HostFileError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|source| HostFileError::Io {
        action: "create the directory",
        path: dir.to_path_buf(),
        source,
    })?;
    // The new directory's own entry must be durable too, or a crash could lose the file
    // renamed into it.
    match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => fsync_dir(parent).map_err(sync_error),
        _ => Ok(()),
    }
}

/// The exclusive lock on a file's sidecar; released when dropped (closing the descriptor
/// releases the `flock`).
struct SidecarLock {
    _lock: DirLock,
}

/// The lock file of the host file `<dir>/<name>`: in a private per-user directory of the system's
/// temporary directory, named by the SHA-256 of the file's canonical path, so that no lock file is
/// left in the person's directories (a `.mcp.json` lock in a repository would show in `git
/// status`). The directory must be a real directory owned by this user and private to it.
pub fn lock_path(dir: &Path, name: &OsStr) -> Result<PathBuf, HostFileError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: io::Error| HostFileError::Io {
            action,
            path,
            source,
        }
    };
    let canonical = fs::canonicalize(dir).map_err(io("resolve", dir))?;
    let uid = effective_uid();
    let locks = std::env::temp_dir().join(format!("ctx-host-locks-{uid}"));
    match fs::DirBuilder::new().mode(DIR_MODE_PRIVATE).create(&locks) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("create the lock directory", &locks)(e)),
    }
    match check_dir(&locks, ModeRule::NoneOf(MODE_GROUP_OTHER)) {
        Ok(_) => {}
        Err(PrivateError::Io { source, .. }) => {
            return Err(io("inspect the lock directory", &locks)(source));
        }
        Err(_) => return Err(HostFileError::BadPath { path: locks }),
    }
    let mut key = canonical.into_os_string();
    key.push("/");
    key.push(name);
    let digest = Sha256::digest(key.as_encoded_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(locks.join(format!("{hex}{LOCK_SUFFIX}")))
}

fn lock_sidecar(dir: &Path, name: &OsStr, target: &Path) -> Result<SidecarLock, HostFileError> {
    let lock = lock_path(dir, name)?;
    let poll = Duration::from_millis(HOST_FILE_LOCK_POLL_MS);
    // The lock directory is private to this user (checked by `lock_path`); a lock file there
    // that others could write is still refused.
    let options = LockOptions::new(HOST_FILE_LOCK_WAIT)
        .poll(poll, poll)
        .self_held_grace(Duration::ZERO)
        .file_rule(ModeRule::NoneOf(MODE_GROUP_OTHER_WRITE));
    match DirLock::acquire(&lock, &options) {
        Ok(held) => Ok(SidecarLock { _lock: held }),
        Err(LockError::Held { .. }) => Err(HostFileError::LockTimeout {
            path: target.to_path_buf(),
            lock,
            waited: HOST_FILE_LOCK_WAIT,
        }),
        Err(LockError::Io { action, source, .. }) => Err(HostFileError::Io {
            action: if action == "locked" {
                "lock"
            } else {
                "open the lock file"
            },
            path: lock,
            source,
        }),
        Err(other) => Err(HostFileError::Io {
            action: "open the lock file",
            path: lock,
            source: io::Error::other(other),
        }),
    }
}

/// The bytes and permission bits of the regular file `path`, `None` when it does not exist.
/// Opened non-blocking so that a FIFO at the path cannot hang ctx before the type check.
fn read_regular(path: &Path) -> Result<Option<(Vec<u8>, u32)>, HostFileError> {
    let io_error = |source: io::Error| HostFileError::Io {
        action: "read",
        path: path.to_path_buf(),
        source,
    };
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(io_error(e.into())),
    };
    let mut file = File::from(fd);
    let meta = file.metadata().map_err(io_error)?;
    // The name may be a link the person made (a dotfile manager's); it was followed on purpose,
    // and the bound applies to what it reaches.
    let bytes = match read_bounded_file(&mut file, path, HOST_FILE_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::NotRegularFile { .. }) => {
            return Err(HostFileError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        Err(ReadError::TooLarge { .. }) => {
            return Err(HostFileError::TooLarge {
                path: path.to_path_buf(),
                limit: HOST_FILE_MAX_BYTES,
            });
        }
        Err(ReadError::Io { source, .. }) => return Err(io_error(source)),
        Err(other) => return Err(io_error(io::Error::other(other))),
    };
    Ok(Some((
        bytes,
        meta.permissions().mode() & MODE_PERMISSION_BITS,
    )))
}

/// Writes and fsyncs `<dir>/.<name>.ctx-tmp`. One fixed name is safe because only the lock
/// holder writes it, and a leftover of a crashed run is simply replaced.
fn write_temp(
    dir: &Path,
    name: &OsStr,
    bytes: &[u8],
    mode: Option<u32>,
) -> Result<PathBuf, HostFileError> {
    let temp = dir.join(sidecar_name(name, TEMP_SUFFIX));
    match fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(HostFileError::Io {
                action: "remove the leftover temporary file",
                path: temp,
                source,
            });
        }
    }
    let written = (|| -> io::Result<()> {
        // create_new is O_CREAT|O_EXCL: a link planted at the name is never followed.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode.unwrap_or(NEW_FILE_MODE))
            .open(&temp)?;
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            // The umask may have cleared bits the file had.
            file.set_permissions(Permissions::from_mode(mode))?;
        }
        file.sync_all()
    })();
    match written {
        Ok(()) => Ok(temp),
        Err(source) => {
            remove_quietly(&temp);
            Err(HostFileError::Io {
                action: "write the temporary file",
                path: temp,
                source,
            })
        }
    }
}

/// Cleanup on a path that already failed: the first error is the one worth reporting, and a
/// leftover temporary file is replaced by the next run.
fn remove_quietly(path: &Path) {
    let _ = fs::remove_file(path);
}

/// A failed ctx-fs `fsync_dir`, in this module's words.
fn sync_error(e: SyncError) -> HostFileError {
    match e {
        SyncError::Io { path, source, .. } => HostFileError::Io {
            action: "fsync the directory",
            path,
            source,
        },
        other => HostFileError::Io {
            action: "fsync the directory",
            path: PathBuf::new(),
            source: io::Error::other(other),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// The JSON editor.
// ---------------------------------------------------------------------------------------------

/// Why a JSON text was refused or an edit could not be made. Offsets are byte offsets into the
/// text; lines and columns count from 1 (columns in bytes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonEditError {
    /// The bytes are not UTF-8, so they are not JSON.
    #[error("the text is not UTF-8 at byte {offset}")]
    NotUtf8 { offset: usize },
    /// The text is not strict JSON (RFC 8259: no comments, no trailing commas).
    #[error("the text is not valid JSON at byte {offset} (line {line}, column {column}): {reason}")]
    Syntax {
        offset: usize,
        line: usize,
        column: usize,
        reason: &'static str,
    },
    /// Objects and arrays nest deeper than [`JSON_EDIT_DEPTH_MAX`].
    #[error("the JSON nests deeper than {max} levels at byte {offset}")]
    TooDeep { offset: usize, max: usize },
    /// The value at `path` has to be an object for the edit, and is not.
    #[error("{path} is {found}, not an object")]
    NotAnObject { path: String, found: &'static str },
    /// The value at `path` has to be an array for the edit, and is not.
    #[error("{path} is {found}, not an array")]
    NotAnArray { path: String, found: &'static str },
    /// A member edit was asked for with an empty key path.
    #[error("a member edit needs at least one key")]
    EmptyPath,
    /// The value to write is not one valid JSON value.
    #[error("the value to write is not valid JSON: {0}")]
    InvalidValue(Box<JsonEditError>),
}

/// A parsed JSON value. Objects keep their members in document order, duplicates included;
/// numbers keep their literal text (ctx compares and rewrites them, never computes with them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonNode {
    Null,
    Bool(bool),
    /// The number's literal text, as written (`10`, `1.5e3`).
    Number(String),
    String(String),
    Array(Vec<JsonNode>),
    Object(Vec<(String, JsonNode)>),
}

impl JsonNode {
    /// The member `key` of an object: its last occurrence, as JavaScript's `JSON.parse` (which
    /// Claude Code uses) resolves duplicates. `None` for a missing key or a non-object.
    pub fn get(&self, key: &str) -> Option<&JsonNode> {
        match self {
            JsonNode::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|m| &m.1),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            JsonNode::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[JsonNode]> {
        match self {
            JsonNode::Array(items) => Some(items),
            _ => None,
        }
    }

    /// `null`, `a boolean`, `a number`, `a string`, `an array` or `an object`, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            JsonNode::Null => "null",
            JsonNode::Bool(_) => "a boolean",
            JsonNode::Number(_) => "a number",
            JsonNode::String(_) => "a string",
            JsonNode::Array(_) => "an array",
            JsonNode::Object(_) => "an object",
        }
    }

    /// Equality of what a host reads: objects compare as maps (member order does not matter, the
    /// last of duplicate keys counts), arrays in order, numbers by their literal text.
    pub fn same_value(&self, other: &JsonNode) -> bool {
        match (self, other) {
            (JsonNode::Object(a), JsonNode::Object(b)) => {
                fn keys(members: &[(String, JsonNode)]) -> Vec<&str> {
                    let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
                    keys.sort_unstable();
                    keys.dedup();
                    keys
                }
                let (ka, kb) = (keys(a), keys(b));
                ka == kb
                    && ka.iter().all(|k| match (self.get(k), other.get(k)) {
                        (Some(x), Some(y)) => x.same_value(y),
                        _ => false,
                    })
            }
            (JsonNode::Array(a), JsonNode::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_value(y))
            }
            _ => self == other,
        }
    }

    /// Compact JSON text, members in their order: `{"a":1,"b":[true]}`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        render(self, None, "", &mut out);
        out
    }
}

/// The bytes of a host file as text, or the offset of the first byte that is not UTF-8.
pub fn json_text(bytes: &[u8]) -> Result<&str, JsonEditError> {
    std::str::from_utf8(bytes).map_err(|e| JsonEditError::NotUtf8 {
        offset: e.valid_up_to(),
    })
}

/// Parses strict JSON (a leading UTF-8 byte order mark is allowed). Duplicate keys are kept in
/// order; [`JsonNode::get`] resolves them to the last one.
pub fn parse_json(text: &str) -> Result<JsonNode, JsonEditError> {
    Ok(parse_document(text)?.to_node())
}

/// Sets the member at `path` (keys from the root object down) to the JSON value `value`,
/// creating missing intermediate objects. An existing member (its last occurrence, when the key
/// is duplicated) has its value replaced; a missing one is added after the object's last member.
/// Every byte outside the replaced value or the added member stays as it was.
pub fn set_member(text: &str, path: &[&str], value: &str) -> Result<String, JsonEditError> {
    if path.is_empty() {
        return Err(JsonEditError::EmptyPath);
    }
    let value = parse_value(value)?;
    let root = parse_document(text)?;
    let style = Style::detect(text);
    let mut node = &root;
    for (i, key) in path.iter().enumerate() {
        let members = match &node.value {
            Value::Obj(members) => members,
            other => {
                return Err(JsonEditError::NotAnObject {
                    path: path_name(&path[..i]),
                    found: other.kind(),
                });
            }
        };
        match members.iter().rev().find(|m| m.key == *key) {
            Some(member) if i + 1 == path.len() => {
                let indent = style.multiline.then(|| line_indent(text, member.key_start));
                let mut rendered = String::new();
                render(
                    &value,
                    indent.map(|_| &style),
                    indent.unwrap_or(""),
                    &mut rendered,
                );
                return Ok(splice(
                    text,
                    member.value.start,
                    member.value.end,
                    &rendered,
                ));
            }
            Some(member) => node = &member.value,
            None => {
                let nested = path[i + 1..].iter().rev().fold(value, |inner, k| {
                    JsonNode::Object(vec![((*k).to_owned(), inner)])
                });
                return Ok(insert_member(text, node, members, key, &nested, &style));
            }
        }
    }
    // The loop returns at the last key; a non-empty path always reaches it.
    Err(JsonEditError::EmptyPath)
}

/// Removes the member at `path`, every occurrence of it when its key is duplicated (removing
/// only the last would make an earlier one visible). A missing member or missing parent is not
/// an error: the text is returned unchanged. Commas are kept correct; every other byte stays.
pub fn remove_member(text: &str, path: &[&str]) -> Result<String, JsonEditError> {
    let Some((last, parents)) = path.split_last() else {
        return Err(JsonEditError::EmptyPath);
    };
    let mut text = text.to_owned();
    loop {
        let root = parse_document(&text)?;
        let Some(object) = walk(&root, parents)? else {
            return Ok(text);
        };
        let Value::Obj(members) = &object.value else {
            return Err(JsonEditError::NotAnObject {
                path: path_name(parents),
                found: object.value.kind(),
            });
        };
        let Some(i) = members.iter().rposition(|m| m.key == *last) else {
            return Ok(text);
        };
        let (start, end) = if members.len() == 1 {
            // The only member: the object becomes `{}`.
            (object.start + 1, object.end - 1)
        } else if i + 1 < members.len() {
            // The member, its comma and the space up to the next member's key; the space before
            // this member now precedes the next one.
            (members[i].key_start, members[i + 1].key_start)
        } else {
            // The last member: the comma after the previous member's value up to this value's end.
            (members[i - 1].value.end, members[i].value.end)
        };
        text = splice(&text, start, end, "");
    }
}

/// Appends the JSON value `value` to the array at `path` (the root when `path` is empty),
/// creating the array (and missing intermediate objects) when the member is missing. Every
/// other byte stays as it was.
pub fn append_element(text: &str, path: &[&str], value: &str) -> Result<String, JsonEditError> {
    let element = parse_value(value)?;
    let root = parse_document(text)?;
    let Some(array) = walk(&root, path)? else {
        let created = JsonNode::Array(vec![element]).to_text();
        return set_member(text, path, &created);
    };
    let Value::Arr(items) = &array.value else {
        return Err(JsonEditError::NotAnArray {
            path: path_name(path),
            found: array.value.kind(),
        });
    };
    let style = Style::detect(text);
    let mut out = String::new();
    match items.last() {
        Some(last) => {
            let sep = whitespace_before(text, last.start);
            out.push(',');
            out.push_str(sep);
            match sep.rfind('\n') {
                Some(nl) => render(&element, Some(&style), &sep[nl + 1..], &mut out),
                None => render(&element, None, "", &mut out),
            }
            Ok(splice(text, last.end, last.end, &out))
        }
        None if style.multiline => {
            let outer = line_indent(text, array.start);
            let inner = format!("{outer}{}", style.unit);
            out.push_str(style.newline);
            out.push_str(&inner);
            render(&element, Some(&style), &inner, &mut out);
            out.push_str(style.newline);
            out.push_str(outer);
            Ok(splice(text, array.start + 1, array.end - 1, &out))
        }
        None => {
            render(&element, None, "", &mut out);
            Ok(splice(text, array.start + 1, array.end - 1, &out))
        }
    }
}

/// A value with the byte span of its text.
struct Spanned {
    start: usize,
    end: usize,
    value: Value,
}

enum Value {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Arr(Vec<Spanned>),
    Obj(Vec<Member>),
}

struct Member {
    key: String,
    /// Offset of the key's opening quote.
    key_start: usize,
    /// Offset just after the key's closing quote.
    key_end: usize,
    value: Spanned,
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::Str(_) => "a string",
            Value::Arr(_) => "an array",
            Value::Obj(_) => "an object",
        }
    }
}

impl Spanned {
    fn to_node(&self) -> JsonNode {
        match &self.value {
            Value::Null => JsonNode::Null,
            Value::Bool(b) => JsonNode::Bool(*b),
            Value::Number(n) => JsonNode::Number(n.clone()),
            Value::Str(s) => JsonNode::String(s.clone()),
            Value::Arr(items) => JsonNode::Array(items.iter().map(Spanned::to_node).collect()),
            Value::Obj(members) => JsonNode::Object(
                members
                    .iter()
                    .map(|m| (m.key.clone(), m.value.to_node()))
                    .collect(),
            ),
        }
    }
}

/// `hooks.SessionStart`, or `the document` for the root.
fn path_name(path: &[&str]) -> String {
    if path.is_empty() {
        "the document".to_owned()
    } else {
        format!("`{}`", path.join("."))
    }
}

/// The value at `path` below `root`: `None` when a member on the way is missing; an error when
/// a value on the way is not an object.
fn walk<'a>(root: &'a Spanned, path: &[&str]) -> Result<Option<&'a Spanned>, JsonEditError> {
    let mut node = root;
    for (i, key) in path.iter().enumerate() {
        let Value::Obj(members) = &node.value else {
            return Err(JsonEditError::NotAnObject {
                path: path_name(&path[..i]),
                found: node.value.kind(),
            });
        };
        match members.iter().rev().find(|m| m.key == *key) {
            Some(member) => node = &member.value,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

fn parse_value(value: &str) -> Result<JsonNode, JsonEditError> {
    parse_json(value).map_err(|e| JsonEditError::InvalidValue(Box::new(e)))
}

fn splice(text: &str, start: usize, end: usize, with: &str) -> String {
    let mut out = String::with_capacity(text.len() + with.len());
    out.push_str(&text[..start]);
    out.push_str(with);
    out.push_str(&text[end..]);
    out
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The JSON whitespace that ends at `offset`.
fn whitespace_before(text: &str, offset: usize) -> &str {
    let bytes = text.as_bytes();
    let mut start = offset;
    while start > 0 && is_ws(bytes[start - 1]) {
        start -= 1;
    }
    &text[start..offset]
}

/// The spaces and tabs that open the line holding `offset`.
fn line_indent(text: &str, offset: usize) -> &str {
    let line_start = text[..offset].rfind('\n').map_or(0, |nl| nl + 1);
    let line = &text[line_start..];
    let width = line
        .bytes()
        .take_while(|b| matches!(b, b' ' | b'\t'))
        .count();
    &line[..width]
}

/// How new text is laid out: multi-line documents get new members on their own lines, indented
/// one `unit` deeper than their parent's line and ended like the document's lines (`\r\n` when
/// it uses them); one-line documents get compact members.
struct Style {
    multiline: bool,
    unit: String,
    newline: &'static str,
}

impl Style {
    fn detect(text: &str) -> Style {
        // The indentation of the first indented line is the document's unit (two spaces when no
        // line is indented).
        let unit = text
            .split('\n')
            .skip(1)
            .map(|line| {
                let width = line
                    .bytes()
                    .take_while(|b| matches!(b, b' ' | b'\t'))
                    .count();
                &line[..width]
            })
            .find(|indent| !indent.is_empty())
            .unwrap_or("  ");
        Style {
            multiline: text.contains('\n'),
            unit: unit.to_owned(),
            newline: if text.contains("\r\n") { "\r\n" } else { "\n" },
        }
    }
}

/// Adds `"key": value` to the object `object` (whose members are `members`).
fn insert_member(
    text: &str,
    object: &Spanned,
    members: &[Member],
    key: &str,
    value: &JsonNode,
    style: &Style,
) -> String {
    let mut out = String::new();
    match members.last() {
        Some(last) => {
            // Copy the layout of the last member: the space before its key and around its colon.
            let sep = whitespace_before(text, last.key_start);
            let colon = &text[last.key_end..last.value.start];
            out.push(',');
            out.push_str(sep);
            write_string(key, &mut out);
            out.push_str(colon);
            match sep.rfind('\n') {
                Some(nl) => render(value, Some(style), &sep[nl + 1..], &mut out),
                None => render(value, None, "", &mut out),
            }
            splice(text, last.value.end, last.value.end, &out)
        }
        None if style.multiline => {
            let outer = line_indent(text, object.start);
            let inner = format!("{outer}{}", style.unit);
            out.push_str(style.newline);
            out.push_str(&inner);
            write_string(key, &mut out);
            out.push_str(": ");
            render(value, Some(style), &inner, &mut out);
            out.push_str(style.newline);
            out.push_str(outer);
            splice(text, object.start + 1, object.end - 1, &out)
        }
        None => {
            write_string(key, &mut out);
            out.push(':');
            render(value, None, "", &mut out);
            splice(text, object.start + 1, object.end - 1, &out)
        }
    }
}

/// Writes `value`: compact when `pretty` is `None`, else one member or element per line,
/// indented by `indent` plus one unit per level (the value's own first line is already placed).
fn render(value: &JsonNode, pretty: Option<&Style>, indent: &str, out: &mut String) {
    match value {
        JsonNode::Null => out.push_str("null"),
        JsonNode::Bool(true) => out.push_str("true"),
        JsonNode::Bool(false) => out.push_str("false"),
        JsonNode::Number(n) => out.push_str(n),
        JsonNode::String(s) => write_string(s, out),
        JsonNode::Array(items) if items.is_empty() => out.push_str("[]"),
        JsonNode::Object(members) if members.is_empty() => out.push_str("{}"),
        JsonNode::Array(items) => {
            out.push('[');
            let inner = pretty.map(|p| format!("{indent}{}", p.unit));
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let (Some(p), Some(inner)) = (pretty, &inner) {
                    out.push_str(p.newline);
                    out.push_str(inner);
                }
                render(item, pretty, inner.as_deref().unwrap_or(""), out);
            }
            if let Some(p) = pretty {
                out.push_str(p.newline);
                out.push_str(indent);
            }
            out.push(']');
        }
        JsonNode::Object(members) => {
            out.push('{');
            let inner = pretty.map(|p| format!("{indent}{}", p.unit));
            for (i, (key, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let (Some(p), Some(inner)) = (pretty, &inner) {
                    out.push_str(p.newline);
                    out.push_str(inner);
                }
                write_string(key, out);
                out.push_str(if pretty.is_some() { ": " } else { ":" });
                render(item, pretty, inner.as_deref().unwrap_or(""), out);
            }
            if let Some(p) = pretty {
                out.push_str(p.newline);
                out.push_str(indent);
            }
            out.push('}');
        }
    }
}

/// A JSON string literal: quotes, backslashes and control characters escaped, the rest raw.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn parse_document(text: &str) -> Result<Spanned, JsonEditError> {
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    if text.starts_with('\u{feff}') {
        parser.pos = '\u{feff}'.len_utf8();
    }
    parser.skip_ws();
    let value = parser.value(0)?;
    parser.skip_ws();
    if parser.pos != parser.bytes.len() {
        return Err(parser.error("unexpected text after the JSON value"));
    }
    Ok(value)
}

/// A strict recursive-descent JSON parser that records each value's byte span. Recursion is
/// bounded by [`JSON_EDIT_DEPTH_MAX`].
struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error_at(&self, offset: usize, reason: &'static str) -> JsonEditError {
        let before = &self.bytes[..offset.min(self.bytes.len())];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let column = offset
            - before
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |nl| nl + 1)
            + 1;
        JsonEditError::Syntax {
            offset,
            line,
            column,
            reason,
        }
    }

    fn error(&self, reason: &'static str) -> JsonEditError {
        self.error_at(self.pos, reason)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(is_ws) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Result<(), JsonEditError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(reason))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Spanned, JsonEditError> {
        let start = self.pos;
        let value = match self.peek() {
            None => return Err(self.error("the text ends where a value was expected")),
            Some(b'{') => self.object(depth)?,
            Some(b'[') => self.array(depth)?,
            Some(b'"') => Value::Str(self.string()?),
            Some(b't') => self.literal("true", Value::Bool(true))?,
            Some(b'f') => self.literal("false", Value::Bool(false))?,
            Some(b'n') => self.literal("null", Value::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(_) => return Err(self.error("expected a JSON value")),
        };
        Ok(Spanned {
            start,
            end: self.pos,
            value,
        })
    }

    fn enter(&self, depth: usize) -> Result<usize, JsonEditError> {
        if depth >= JSON_EDIT_DEPTH_MAX {
            return Err(JsonEditError::TooDeep {
                offset: self.pos,
                max: JSON_EDIT_DEPTH_MAX,
            });
        }
        Ok(depth + 1)
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonEditError> {
        let depth = self.enter(depth)?;
        self.pos += 1;
        let mut members = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Obj(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a member name in double quotes"));
            }
            let key_start = self.pos;
            let key = self.string()?;
            let key_end = self.pos;
            self.skip_ws();
            self.expect(b':', "expected `:` after a member name")?;
            self.skip_ws();
            let value = self.value(depth)?;
            members.push(Member {
                key,
                key_start,
                key_end,
                value,
            });
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Obj(members));
                }
                _ => return Err(self.error("expected `,` or `}` after an object member")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonEditError> {
        let depth = self.enter(depth)?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Arr(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Arr(items));
                }
                _ => return Err(self.error("expected `,` or `]` after an array element")),
            }
        }
    }

    fn literal(&mut self, word: &'static str, value: Value) -> Result<Value, JsonEditError> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a JSON value"))
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Value, JsonEditError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after the decimal point"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Value::Number(self.text[start..self.pos].to_owned()))
    }

    fn hex4(&mut self) -> Result<u32, JsonEditError> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("expected four hexadecimal digits after `\\u`"))?;
        let code = u32::from_str_radix(digits, 16)
            .map_err(|_| self.error("expected four hexadecimal digits after `\\u`"))?;
        self.pos += 4;
        Ok(code)
    }

    /// A string literal at `pos` (its opening quote), decoded.
    fn string(&mut self) -> Result<String, JsonEditError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let run = self.pos;
            while self
                .peek()
                .is_some_and(|b| b != b'"' && b != b'\\' && b >= 0x20)
            {
                self.pos += 1;
            }
            // The run stops at ASCII bytes only, so it ends on a character boundary.
            out.push_str(&self.text[run..self.pos]);
            match self.peek() {
                None => return Err(self.error("the text ends inside a string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    let escape = self.pos;
                    self.pos += 1;
                    let c = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let high = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&high) {
                                if !self.bytes[self.pos..].starts_with(b"\\u") {
                                    return Err(
                                        self.error_at(escape, "a `\\u` escape is a lone surrogate")
                                    );
                                }
                                self.pos += 2;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return Err(
                                        self.error_at(escape, "a `\\u` escape is a lone surrogate")
                                    );
                                }
                                0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
                            } else {
                                high
                            };
                            let c = char::from_u32(code).ok_or_else(|| {
                                self.error_at(escape, "a `\\u` escape is a lone surrogate")
                            })?;
                            out.push(c);
                            continue;
                        }
                        _ => return Err(self.error_at(escape, "an unknown escape in a string")),
                    };
                    self.pos += 1;
                    out.push(c);
                }
                Some(_) => return Err(self.error("a control character inside a string")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    fn set(text: &str, path: &[&str], value: &str) -> String {
        let out = set_member(text, path, value).unwrap();
        parse_json(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        out
    }

    fn remove(text: &str, path: &[&str]) -> String {
        let out = remove_member(text, path).unwrap();
        parse_json(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        out
    }

    fn syntax_offset(text: &str) -> usize {
        match parse_json(text) {
            Err(JsonEditError::Syntax { offset, .. }) => offset,
            other => panic!("{text:?}: {other:?}"),
        }
    }

    #[test]
    fn insert_into_empty_objects() {
        assert_eq!(set("{}", &["a"], "1"), r#"{"a":1}"#);
        assert_eq!(
            set("{ }", &["a"], r#"{"b": [1, 2]}"#),
            r#"{"a":{"b":[1,2]}}"#
        );
        assert_eq!(set("{}\n", &["a"], "[1]"), "{\n  \"a\": [\n    1\n  ]\n}\n");
        // The unit comes from the document.
        assert_eq!(
            set("{\n\t\"x\": {}\n}", &["x", "y"], "true"),
            "{\n\t\"x\": {\n\t\t\"y\": true\n\t}\n}"
        );
    }

    #[test]
    fn insert_creates_missing_nested_objects() {
        assert_eq!(
            set("{\"k\":0}", &["mcpServers", "github", "command"], "\"gh\""),
            r#"{"k":0,"mcpServers":{"github":{"command":"gh"}}}"#
        );
        let text = "{\n    \"model\": \"opus\"\n}\n";
        assert_eq!(
            set(text, &["hooks", "Stop"], "[]"),
            "{\n    \"model\": \"opus\",\n    \"hooks\": {\n        \"Stop\": []\n    }\n}\n"
        );
    }

    #[test]
    fn replace_keeps_everything_else() {
        let text = "{ \"a\" :1 ,\n  \"b\":  {\"x\": [1,2]},\t\"c\":null }";
        let out = set(text, &["b"], "7");
        assert_eq!(out, "{ \"a\" :1 ,\n  \"b\":  7,\t\"c\":null }");
        let out = set(text, &["b", "x"], "\"s\"");
        assert_eq!(out, "{ \"a\" :1 ,\n  \"b\":  {\"x\": \"s\"},\t\"c\":null }");
        // A new member copies the last member's layout.
        let out = set(text, &["d"], "false");
        assert_eq!(
            out,
            "{ \"a\" :1 ,\n  \"b\":  {\"x\": [1,2]},\t\"c\":null,\t\"d\":false }"
        );
    }

    #[test]
    fn new_lines_follow_the_documents_line_endings() {
        assert_eq!(
            set("{\r\n  \"a\": 1\r\n}\r\n", &["b"], r#"{"c":[1]}"#),
            "{\r\n  \"a\": 1,\r\n  \"b\": {\r\n    \"c\": [\r\n      1\r\n    ]\r\n  }\r\n}\r\n"
        );
        assert_eq!(
            append_element("{\r\n  \"a\": []\r\n}", &["a"], "2").unwrap(),
            "{\r\n  \"a\": [\r\n    2\r\n  ]\r\n}"
        );
    }

    #[test]
    fn remove_keeps_commas_right() {
        let text = "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}";
        assert_eq!(remove(text, &["a"]), "{\n  \"b\": 2,\n  \"c\": 3\n}");
        assert_eq!(remove(text, &["b"]), "{\n  \"a\": 1,\n  \"c\": 3\n}");
        assert_eq!(remove(text, &["c"]), "{\n  \"a\": 1,\n  \"b\": 2\n}");
        assert_eq!(remove("{ \"only\": [1] }", &["only"]), "{}");
        assert_eq!(
            remove(r#"{"a":{"b":1,"c":2}}"#, &["a", "c"]),
            r#"{"a":{"b":1}}"#
        );
        // Missing members and parents leave the text as it is.
        assert_eq!(remove(text, &["zz"]), text);
        assert_eq!(remove(text, &["zz", "y"]), text);
        assert!(matches!(
            remove_member(text, &["a", "y"]),
            Err(JsonEditError::NotAnObject { .. })
        ));
    }

    #[test]
    fn unknown_keys_and_odd_whitespace_survive_byte_for_byte() {
        let text = "\u{feff}{\r\n\"zeta\" : [ 1 ,2 ],\t\"$schema\":\"x\",\r\n   \"env\":{ \"K\" : \"v\\u00e9\" },\n\"hooks\" :{\n}}\r\n";
        let out = set(text, &["hooks", "Stop"], r#"[{"hooks":[]}]"#);
        let (head, tail) = text.split_at(text.find("\"hooks\" :{").unwrap() + "\"hooks\" :{".len());
        assert!(out.starts_with(head), "{out}");
        assert!(out.ends_with(&tail[1..]), "{out}");
        let back = remove(&out, &["hooks", "Stop"]);
        assert_eq!(back, text.replace("{\n}}", "{}}"));
    }

    #[test]
    fn append_to_arrays() {
        assert_eq!(
            append_element("{\"a\":[1]}", &["a"], "{\"b\":2}").unwrap(),
            r#"{"a":[1,{"b":2}]}"#
        );
        assert_eq!(
            append_element("{\n  \"a\": [\n    1\n  ]\n}", &["a"], "[2]").unwrap(),
            "{\n  \"a\": [\n    1,\n    [\n      2\n    ]\n  ]\n}"
        );
        assert_eq!(
            append_element("{\n  \"a\": []\n}", &["a"], "3").unwrap(),
            "{\n  \"a\": [\n    3\n  ]\n}"
        );
        assert_eq!(
            append_element("{}", &["x", "y"], "3").unwrap(),
            r#"{"x":{"y":[3]}}"#
        );
        assert_eq!(append_element("[]", &[], "null").unwrap(), "[null]");
        assert!(matches!(
            append_element("{\"a\":{}}", &["a"], "1"),
            Err(JsonEditError::NotAnArray {
                found: "an object",
                ..
            })
        ));
    }

    #[test]
    fn malformed_input_is_refused_with_its_offset() {
        assert_eq!(syntax_offset(""), 0);
        assert_eq!(syntax_offset("{\"a\":1,}"), 7);
        assert_eq!(syntax_offset("{\"a\" 1}"), 5);
        assert_eq!(syntax_offset("[1 2]"), 3);
        assert_eq!(syntax_offset("{} x"), 3);
        assert_eq!(syntax_offset("// c\n{}"), 0);
        assert_eq!(syntax_offset("[01]"), 2);
        assert_eq!(syntax_offset("[1.]"), 3);
        assert_eq!(syntax_offset("[\"\\x\"]"), 2);
        assert_eq!(syntax_offset("[\"\\ud800\"]"), 2);
        assert_eq!(syntax_offset("[\"a\nb\"]"), 3);
        assert_eq!(syntax_offset("[tru]"), 1);
        assert!(matches!(
            parse_json("{\n  \"a\": ,\n}"),
            Err(JsonEditError::Syntax {
                line: 2,
                column: 8,
                ..
            })
        ));
        let deep = "[".repeat(JSON_EDIT_DEPTH_MAX + 1);
        assert!(matches!(
            parse_json(&deep),
            Err(JsonEditError::TooDeep { .. })
        ));
        assert!(matches!(
            json_text(b"{\"a\xff\"}"),
            Err(JsonEditError::NotUtf8 { offset: 3 })
        ));
        assert!(matches!(
            set_member("{}", &["a"], "{,}"),
            Err(JsonEditError::InvalidValue(_))
        ));
        assert!(matches!(
            set_member("{\"a\":[]}", &["a", "b"], "1"),
            Err(JsonEditError::NotAnObject {
                found: "an array",
                ..
            })
        ));
        assert!(matches!(
            set_member("[]", &["a"], "1"),
            Err(JsonEditError::NotAnObject { .. })
        ));
        assert_eq!(set_member("{}", &[], "1"), Err(JsonEditError::EmptyPath));
    }

    #[test]
    fn duplicate_keys_resolve_to_the_last_occurrence() {
        let text = r#"{"a":1,"b":0,"a":2}"#;
        let parsed = parse_json(text).unwrap();
        assert_eq!(parsed.get("a"), Some(&JsonNode::Number("2".into())));
        // Set replaces the visible (last) one; remove removes every occurrence.
        assert_eq!(set(text, &["a"], "3"), r#"{"a":1,"b":0,"a":3}"#);
        assert_eq!(remove(text, &["a"]), r#"{"b":0}"#);
        let same = parse_json(r#"{"b":0,"a":2}"#).unwrap();
        assert!(parsed.same_value(&same));
        assert!(!parsed.same_value(&parse_json(r#"{"a":1,"b":0}"#).unwrap()));
    }

    #[test]
    fn strings_round_trip_through_the_renderer() {
        let value = JsonNode::Object(vec![(
            "k\"\\".into(),
            JsonNode::Array(vec![
                JsonNode::String("a\nb\u{1}é😀".into()),
                JsonNode::Null,
            ]),
        )]);
        let text = value.to_text();
        assert_eq!(parse_json(&text).unwrap(), value);
        assert_eq!(
            parse_json("\"\\ud83d\\ude00\\/\"").unwrap(),
            JsonNode::String("😀/".into())
        );
    }

    #[test]
    fn update_locked_writes_atomically_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("settings.json");
        let outcome = update_locked::<HostFileError>(&path, |current| {
            assert_eq!(current, None);
            Ok(Some(b"{}\n".to_vec()))
        })
        .unwrap();
        assert!(outcome.written);
        assert_eq!(outcome.before, None);
        assert_eq!(outcome.after, Some(sha256(b"{}\n")));
        assert_eq!(fs::read(&path).unwrap(), b"{}\n");
        assert!(
            lock_path(&dir.path().join("nested"), OsStr::new("settings.json"))
                .unwrap()
                .exists()
        );
        assert!(
            !dir.path()
                .join("nested")
                .join(".settings.json.ctx-lock")
                .exists(),
            "no lock file among the person's files"
        );
        assert!(
            !dir.path()
                .join("nested")
                .join(".settings.json.ctx-tmp")
                .exists()
        );

        fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        let outcome = update_locked::<HostFileError>(&path, |current| {
            assert_eq!(current, Some(&b"{}\n"[..]));
            Ok(Some(b"{\"a\":1}".to_vec()))
        })
        .unwrap();
        assert_eq!(outcome.before, Some(sha256(b"{}\n")));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o640
        );

        // No change: nothing written, digests equal.
        let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&path).unwrap());
        for result in [None, Some(b"{\"a\":1}".to_vec())] {
            let outcome = update_locked::<HostFileError>(&path, |_| Ok(result.clone())).unwrap();
            assert!(!outcome.written);
            assert_eq!(outcome.before, outcome.after);
        }
        let after = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&path).unwrap());
        assert_eq!(inode, after);
    }

    #[test]
    fn update_locked_follows_links_and_refuses_what_it_must() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        fs::write(&real, b"{}").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let outcome = update_locked::<HostFileError>(&link, |_| Ok(Some(b"[]".to_vec()))).unwrap();
        assert!(outcome.written);
        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&real).unwrap(), b"[]");

        let dangling = dir.path().join("dangling.json");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let e = update_locked::<HostFileError>(&dangling, |_| Ok(None)).unwrap_err();
        assert!(
            matches!(e, HostFileError::DanglingLink { .. }) && e.is_bad_file(),
            "{e}"
        );

        let e = update_locked::<HostFileError>(dir.path(), |_| Ok(None)).unwrap_err();
        assert!(matches!(e, HostFileError::NotAFile { .. }), "{e}");

        let big = dir.path().join("big.json");
        let e = update_locked::<HostFileError>(&big, |_| {
            Ok(Some(vec![b' '; HOST_FILE_MAX_BYTES as usize + 1]))
        })
        .unwrap_err();
        assert!(matches!(e, HostFileError::TooLarge { .. }), "{e}");
        assert!(!big.exists());
        fs::write(&big, vec![b' '; HOST_FILE_MAX_BYTES as usize + 1]).unwrap();
        let e = read_host_file(&big).unwrap_err();
        assert!(e.to_string().contains("big.json"), "{e}");
    }

    #[test]
    fn update_locked_redoes_the_edit_when_the_file_changes_underneath() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        fs::write(&path, b"0").unwrap();
        // A writer that ignores ctx's lock changes the file during the first edit only.
        let mut calls = 0;
        let outcome = update_locked::<HostFileError>(&path, |current| {
            calls += 1;
            if calls == 1 {
                fs::write(&path, b"1").unwrap();
            }
            let mut next = current.unwrap().to_vec();
            next.push(b'0');
            Ok(Some(next))
        })
        .unwrap();
        assert_eq!(calls, 2);
        assert!(outcome.written);
        assert_eq!(fs::read(&path).unwrap(), b"10");

        // One that always changes it: ctx gives up and writes nothing.
        let mut n = 0u8;
        let e = update_locked::<HostFileError>(&path, |_| {
            n += 1;
            fs::write(&path, [b'a' + n]).unwrap();
            Ok(Some(b"ctx".to_vec()))
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                HostFileError::Contended {
                    attempts: HOST_FILE_ATTEMPTS,
                    ..
                }
            ),
            "{e}"
        );
        assert_ne!(fs::read(&path).unwrap(), b"ctx");

        // The edit's own error comes back as it is.
        let e = update_locked::<HostFileError>(&path, |_| {
            Err(HostFileError::BadPath { path: "x".into() })
        })
        .unwrap_err();
        assert!(matches!(e, HostFileError::BadPath { .. }));
    }

    #[test]
    fn a_second_process_waits_for_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.json");
        let lock = File::create(lock_path(dir.path(), OsStr::new("f.json")).unwrap()).unwrap();
        lock.lock().unwrap();
        let path2 = path.clone();
        let writer = std::thread::spawn(move || {
            update_locked::<HostFileError>(&path2, |_| Ok(Some(b"x".to_vec())))
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!path.exists(), "the writer must wait for the lock");
        drop(lock);
        assert!(writer.join().unwrap().unwrap().written);
        assert_eq!(fs::read(&path).unwrap(), b"x");
    }
}
