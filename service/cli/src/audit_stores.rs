//! The `stores` check of `ctx audit` (spec/cli.md §5.1): every content-addressed item of the data
//! directory's stores holds exactly the content its name says. The skill CAS and the material
//! store hold files named by the SHA-256 of their bytes (spec/skill-cas.md §2); the activation
//! store holds directories named by the SHA-256 of their one `SKILL.md` or of the pack of their
//! skill tree (spec/activation.md §3, spec/skill-tree.md §7).
//!
//! Nothing here follows a symbolic link (every entry is inspected with `fstatat` without following
//! and opened with `O_NOFOLLOW` relative to its directory), every read is bounded, and every
//! listing is bounded. The check only reads.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use ctx_fs::{EntryType, FileStat, ReadError, read_bounded_at};
use ctx_model::{Json, is_sha, parse_hex, sha256_hex_bytes};
use ctx_service::{
    Layout, SKILL_PACK_MAX_BYTES, SKILL_PACK_SCHEMA, SKILL_TREE_MAX_ENTRIES, SkillTree,
    SkillTreeDifference, SkillTreeError, read_skill_tree_at, skill_pack_identity,
};
use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

/// Most entries listed at the top level of one store. Past it the audit stops listing that store
/// and reports it (kind `listing-stopped`); the entries listed so far are still checked.
pub(crate) const STORE_LIST_MAX_ENTRIES: usize = 1_000_000;

/// The one file of a single-body store directory (spec/activation.md §3).
const SKILL_MD: &str = "SKILL.md";
/// A lock file of a content store: `<hex>` + this (spec/skill-cas.md §2).
const LOCK_SUFFIX: &str = ".lock";
/// A stage of a content store: this + `<hex>-<hex>` + [`STAGE_SUFFIX`] (spec/skill-cas.md §2).
const STAGE_PREFIX: &str = ".ctx-skill-";
const STAGE_SUFFIX: &str = ".pending";
/// A staging directory of the activation store (spec/activation.md §3).
const ACTIVATION_STAGE_PREFIX: &str = ".stage-";

/// What the audit saw in one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreLine {
    /// The store's directory relative to the data directory: `skills`, `materials`,
    /// `activation-store`.
    pub(crate) name: String,
    /// False when the directory does not exist (nothing was ever stored there).
    pub(crate) present: bool,
    /// Items whose content is their name.
    pub(crate) verified: u64,
    /// Lock files left alone (content stores only).
    pub(crate) locks: u64,
    /// Stages left alone: a content store's `.ctx-skill-….pending` files, the activation store's
    /// `.stage-…` directories (a crash leaves them; they are never taken for content).
    pub(crate) stages: u64,
}

impl StoreLine {
    pub(crate) fn to_json(&self) -> Json {
        Json::object([
            ("present", Json::Bool(self.present)),
            ("verified", Json::from(self.verified)),
            ("locks", Json::from(self.locks)),
            ("stages", Json::from(self.stages)),
        ])
    }
}

/// One item that is not what its name says, or could not be checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreProblem {
    /// `mismatch`, `unexpected`, `too-large`, `tree-refused`, `unreadable`, `listing-stopped`
    /// (spec/cli.md §5.1).
    pub(crate) kind: &'static str,
    /// A sentence naming the path relative to the data directory.
    pub(crate) detail: String,
}

impl StoreProblem {
    fn new(kind: &'static str, detail: String) -> StoreProblem {
        StoreProblem { kind, detail }
    }
}

/// Everything the stores check found, in store order (skills, materials, activation store) and,
/// within a store, in name order.
#[derive(Debug, Default)]
pub(crate) struct StoresAudit {
    pub(crate) stores: Vec<StoreLine>,
    pub(crate) problems: Vec<StoreProblem>,
}

/// Checks the three stores of `layout`.
pub(crate) fn check_stores(layout: &Layout) -> StoresAudit {
    let mut audit = StoresAudit::default();
    for path in [layout.skills(), layout.materials()] {
        let line = check_content_store(layout, &path, &mut audit.problems);
        audit.stores.push(line);
    }
    let line = check_activation_store(layout, &mut audit.problems);
    audit.stores.push(line);
    audit
}

/// `path` relative to the data directory, as the sentences name it.
fn shown(layout: &Layout, path: &Path) -> String {
    path.strip_prefix(layout.root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The entry `raw` of `dir` without following a link, or `None` after recording why it could not
/// be inspected.
fn inspect_entry(
    dir: &impl rustix::fd::AsFd,
    raw: &[u8],
    item: &str,
    problems: &mut Vec<StoreProblem>,
) -> Option<FileStat> {
    match FileStat::at(dir, raw) {
        Ok(stat) => Some(stat),
        Err(e) => {
            problems.push(StoreProblem::new(
                "unreadable",
                format!("{item} could not be inspected: {}", io_sentence(e)),
            ));
            None
        }
    }
}

fn io_sentence(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

fn type_name(stat: &FileStat) -> &'static str {
    match stat.entry_type() {
        EntryType::File => "a regular file",
        EntryType::Directory => "a directory",
        EntryType::Symlink => "a symbolic link",
        EntryType::Other => "neither a file nor a directory",
    }
}

/// Opens the store directory `path` without following a link: `Ok(None)` when it does not exist.
fn open_store(path: &Path, name: &str) -> Result<Option<OwnedFd>, StoreProblem> {
    let stat = match FileStat::at(CWD, path) {
        Ok(stat) => stat,
        Err(e) if e == Errno::NOENT => return Ok(None),
        Err(e) => {
            return Err(StoreProblem::new(
                "unreadable",
                format!("{name} could not be inspected: {}", io_sentence(e)),
            ));
        }
    };
    if stat.entry_type() != EntryType::Directory {
        return Err(StoreProblem::new(
            "unexpected",
            format!(
                "{name} is {}, not a directory; the audit does not follow links",
                type_name(&stat)
            ),
        ));
    }
    rustix::fs::openat(CWD, path, dir_flags(), Mode::empty())
        .map(Some)
        .map_err(|e| {
            StoreProblem::new(
                "unreadable",
                format!("{name} could not be opened: {}", io_sentence(e)),
            )
        })
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The names of the open directory `dir` (without `.` and `..`), sorted by their bytes, at most
/// `limit`; the flag says the listing stopped there.
fn list(dir: &OwnedFd, limit: usize) -> Result<(Vec<Vec<u8>>, bool), Errno> {
    let entries = rustix::fs::Dir::read_from(dir)?;
    let mut names = Vec::new();
    let mut stopped = false;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() >= limit {
            stopped = true;
            break;
        }
        names.push(name.to_vec());
    }
    names.sort_unstable();
    Ok((names, stopped))
}

/// Opens and lists a store, reporting what stops it. `None` when there is nothing to check.
fn open_and_list(
    path: &Path,
    name: &str,
    line: &mut StoreLine,
    problems: &mut Vec<StoreProblem>,
) -> Option<(OwnedFd, Vec<Vec<u8>>)> {
    let dir = match open_store(path, name) {
        Ok(Some(dir)) => dir,
        Ok(None) => return None,
        Err(problem) => {
            line.present = true;
            problems.push(problem);
            return None;
        }
    };
    line.present = true;
    match list(&dir, STORE_LIST_MAX_ENTRIES) {
        Ok((names, stopped)) => {
            if stopped {
                problems.push(StoreProblem::new(
                    "listing-stopped",
                    format!(
                        "{name} has more than {STORE_LIST_MAX_ENTRIES} entries; the audit stopped \
                         listing it there and checked only the {STORE_LIST_MAX_ENTRIES} it listed"
                    ),
                ));
            }
            Some((dir, names))
        }
        Err(e) => {
            problems.push(StoreProblem::new(
                "unreadable",
                format!("{name} could not be listed: {}", io_sentence(e)),
            ));
            None
        }
    }
}

fn is_hex_pair(s: &str) -> bool {
    s.split_once('-')
        .is_some_and(|(a, b)| is_sha(a) && is_sha(b))
}

/// The skill CAS or the material store (spec/skill-cas.md §2).
fn check_content_store(
    layout: &Layout,
    path: &Path,
    problems: &mut Vec<StoreProblem>,
) -> StoreLine {
    let store = shown(layout, path);
    let mut line = StoreLine {
        name: store.clone(),
        present: false,
        verified: 0,
        locks: 0,
        stages: 0,
    };
    let Some((dir, names)) = open_and_list(path, &store, &mut line, problems) else {
        return line;
    };
    for raw in names {
        let name = String::from_utf8_lossy(&raw).into_owned();
        let item = format!("{store}/{name}");
        let Some(stat) = inspect_entry(&dir, &raw, &item, problems) else {
            continue;
        };
        let regular = stat.entry_type() == EntryType::File;
        if is_sha(&name) {
            if !regular {
                problems.push(StoreProblem::new(
                    "unexpected",
                    format!(
                        "{item} is {}; a published item is a regular file (spec/skill-cas.md §2), \
                         and the audit does not follow links",
                        type_name(&stat)
                    ),
                ));
                continue;
            }
            match check_content_file(&dir, &raw, &item, &name, &stat) {
                Ok(()) => line.verified += 1,
                Err(problem) => problems.push(problem),
            }
        } else if name.strip_suffix(LOCK_SUFFIX).is_some_and(is_sha) {
            if regular {
                line.locks += 1;
            } else {
                problems.push(StoreProblem::new(
                    "unexpected",
                    format!(
                        "{item} is {}; a lock file is a regular file (spec/skill-cas.md §2)",
                        type_name(&stat)
                    ),
                ));
            }
        } else if name
            .strip_prefix(STAGE_PREFIX)
            .and_then(|rest| rest.strip_suffix(STAGE_SUFFIX))
            .is_some_and(is_hex_pair)
        {
            if regular {
                line.stages += 1;
            } else {
                problems.push(StoreProblem::new(
                    "unexpected",
                    format!(
                        "{item} is {}; a stage is a regular file (spec/skill-cas.md §2)",
                        type_name(&stat)
                    ),
                ));
            }
        } else {
            problems.push(StoreProblem::new(
                "unexpected",
                format!(
                    "{item} is not a content address (64 lowercase hex), a lock file or a stage \
                     (spec/skill-cas.md §2)"
                ),
            ));
        }
    }
    line
}

/// Reads the published file `raw` of `dir` (bounded) and compares its SHA-256 with its name.
fn check_content_file(
    dir: &OwnedFd,
    raw: &[u8],
    item: &str,
    name: &str,
    stat: &FileStat,
) -> Result<(), StoreProblem> {
    let too_large = |size: u64| {
        StoreProblem::new(
            "too-large",
            format!(
                "{item} is {size} bytes, more than the {SKILL_PACK_MAX_BYTES} bytes any published \
                 item may hold (SKILL_PACK_MAX_BYTES); it was not read whole"
            ),
        )
    };
    let size = u64::try_from(stat.size).unwrap_or(0);
    if size > SKILL_PACK_MAX_BYTES {
        return Err(too_large(size));
    }
    let bytes =
        read_bounded_at(dir, raw, Path::new(item), SKILL_PACK_MAX_BYTES).map_err(|e| match e {
            ReadError::TooLarge { size_bytes, .. } => too_large(size_bytes),
            other => StoreProblem::new("unreadable", format!("{item} could not be read: {other}")),
        })?;
    let actual = sha256_hex_bytes(&bytes);
    if actual != name {
        return Err(StoreProblem::new(
            "mismatch",
            format!("{item} holds content whose SHA-256 is {actual}, not its name"),
        ));
    }
    Ok(())
}

/// The activation store (spec/activation.md §3).
fn check_activation_store(layout: &Layout, problems: &mut Vec<StoreProblem>) -> StoreLine {
    let path = layout.activation_store();
    let store = shown(layout, &path);
    let mut line = StoreLine {
        name: store.clone(),
        present: false,
        verified: 0,
        locks: 0,
        stages: 0,
    };
    let Some((dir, names)) = open_and_list(&path, &store, &mut line, problems) else {
        return line;
    };
    for raw in names {
        let name = String::from_utf8_lossy(&raw).into_owned();
        let item = format!("{store}/{name}");
        if name.starts_with(ACTIVATION_STAGE_PREFIX) {
            line.stages += 1;
            continue;
        }
        if !is_sha(&name) {
            problems.push(StoreProblem::new(
                "unexpected",
                format!(
                    "{item} is not a content address (64 lowercase hex) or a stage \
                     (spec/activation.md §3)"
                ),
            ));
            continue;
        }
        let Some(stat) = inspect_entry(&dir, &raw, &item, problems) else {
            continue;
        };
        if stat.entry_type() != EntryType::Directory {
            problems.push(StoreProblem::new(
                "unexpected",
                format!(
                    "{item} is {} where a store directory belongs (spec/activation.md §3); the \
                     audit does not follow links",
                    type_name(&stat)
                ),
            ));
            continue;
        }
        match check_store_dir(layout, &dir, &path.join(&name), &name, &item) {
            Ok(()) => line.verified += 1,
            Err(problem) => problems.push(problem),
        }
    }
    line
}

/// One store directory: either exactly a `SKILL.md` whose SHA-256 is the name, or a skill tree
/// whose pack's SHA-256 is the name; and nothing beside the tree's files.
fn check_store_dir(
    layout: &Layout,
    store: &OwnedFd,
    path: &Path,
    name: &str,
    item: &str,
) -> Result<(), StoreProblem> {
    let tree = read_skill_tree_at(path).map_err(|e| {
        let kind = match e {
            SkillTreeError::Io { .. } => "unreadable",
            _ => "tree-refused",
        };
        StoreProblem::new(kind, format!("{item} does not read as a skill tree: {e}"))
    })?;
    let one_body = tree.files().len() == 1 && sha256_hex_bytes(tree.skill_md()) == name;
    if !one_body {
        let (pack_sha, _) = skill_pack_identity(&tree);
        if pack_sha != name {
            return Err(StoreProblem::new(
                "mismatch",
                mismatch_sentence(layout, &tree, &pack_sha, name, item),
            ));
        }
    }
    check_exact_entries(store, &tree, name, item)
}

/// A file as the content a store directory's name pins has it.
struct ExpectedFile {
    path: String,
    executable: bool,
    bytes: Vec<u8>,
}

/// The sentence for a store directory whose content is not its name: the first differing file
/// when an intact copy of the named content is in the skill CAS or the material store (the pack
/// of a tree, or a single body), else the digests.
fn mismatch_sentence(
    layout: &Layout,
    tree: &SkillTree,
    pack_sha: &str,
    name: &str,
    item: &str,
) -> String {
    if let Some((source, expected)) = expected_content(layout, name)
        && let Some((path, difference)) = first_difference(&expected, tree)
    {
        return format!(
            "{item}/{path} {difference}: the directory's name pins the content of {source}, \
             whose SHA-256 is that name"
        );
    }
    if tree.files().len() == 1 {
        format!(
            "{item}/{SKILL_MD} holds content whose SHA-256 is {}, not its directory's name (as a \
             skill tree, the directory's pack SHA-256 is {pack_sha})",
            sha256_hex_bytes(tree.skill_md())
        )
    } else {
        format!(
            "{item} holds a skill tree whose pack SHA-256 is {pack_sha}, not its name \
             (spec/skill-tree.md §7); no intact copy of that content in the skill CAS or the \
             material store says which file changed"
        )
    }
}

/// The content named `name`, from the first content store that holds it intact (its SHA-256 is
/// its name): a skill pack's files, or else a single body as `SKILL.md`.
fn expected_content(layout: &Layout, name: &str) -> Option<(String, Vec<ExpectedFile>)> {
    for path in [layout.skills(), layout.materials()] {
        let store = shown(layout, &path);
        let Ok(Some(dir)) = open_store(&path, &store) else {
            continue;
        };
        let source = format!("{store}/{name}");
        let Ok(bytes) = read_bounded_at(&dir, name, Path::new(&source), SKILL_PACK_MAX_BYTES)
        else {
            continue;
        };
        if sha256_hex_bytes(&bytes) != name {
            continue;
        }
        let files = pack_files(&bytes).unwrap_or_else(|| {
            vec![ExpectedFile {
                path: SKILL_MD.to_owned(),
                executable: false,
                bytes,
            }]
        });
        return Some((source, files));
    }
    None
}

/// The files of a skill pack (spec/skill-tree.md §7), in path order; `None` when `bytes` is not
/// one.
fn pack_files(bytes: &[u8]) -> Option<Vec<ExpectedFile>> {
    let pack = Json::parse_bytes(bytes).ok()?;
    if pack.get_str("schema") != Some(SKILL_PACK_SCHEMA) {
        return None;
    }
    let mut files = pack
        .get("files")?
        .as_arr()?
        .iter()
        .map(|file| {
            let bytes = match (file.get_str("text"), file.get_str("hex")) {
                (Some(text), None) => text.as_bytes().to_vec(),
                (None, Some(hex)) => parse_hex(hex)?,
                _ => return None,
            };
            Some(ExpectedFile {
                path: file.get_str("path")?.to_owned(),
                executable: file.get("executable")?.as_bool()?,
                bytes,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    files.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
    Some(files)
}

/// The first path, in path order, where the expected files and the tree read differ.
fn first_difference(
    expected: &[ExpectedFile],
    tree: &SkillTree,
) -> Option<(String, SkillTreeDifference)> {
    let (mut e, mut i) = (expected.iter().peekable(), tree.files().iter().peekable());
    loop {
        match (e.peek(), i.peek()) {
            (None, None) => return None,
            (Some(want), None) => return Some((want.path.clone(), SkillTreeDifference::Missing)),
            (None, Some(have)) => {
                return Some((have.path().to_owned(), SkillTreeDifference::Extra));
            }
            (Some(want), Some(have)) => match want.path.as_bytes().cmp(have.path().as_bytes()) {
                std::cmp::Ordering::Less => {
                    return Some((want.path.clone(), SkillTreeDifference::Missing));
                }
                std::cmp::Ordering::Greater => {
                    return Some((have.path().to_owned(), SkillTreeDifference::Extra));
                }
                std::cmp::Ordering::Equal => {
                    if want.bytes != have.bytes() {
                        return Some((want.path.clone(), SkillTreeDifference::Content));
                    }
                    if want.executable != have.executable() {
                        return Some((
                            want.path.clone(),
                            SkillTreeDifference::Executable {
                                installed: have.executable(),
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

/// Every directory of the store directory holds exactly the entries the tree's paths imply: the
/// walk skips some names (spec/skill-tree.md §2) and records no empty directory, so a name it
/// passed over would otherwise go unseen.
fn check_exact_entries(
    store: &OwnedFd,
    tree: &SkillTree,
    name: &str,
    item: &str,
) -> Result<(), StoreProblem> {
    let mut expected: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for file in tree.files() {
        let path = file.path();
        // The byte length of the parent's path within `path`: 0 at the top.
        let mut parent_len = 0;
        for segment in path.split('/') {
            let parent = path.get(..parent_len).unwrap_or_default();
            expected.entry(parent).or_default().insert(segment);
            parent_len = if parent_len == 0 {
                segment.len()
            } else {
                parent_len + 1 + segment.len()
            };
        }
    }
    let unreadable = |at: &str, action: &str, e: Errno| {
        StoreProblem::new(
            "unreadable",
            format!("{item}{at} could not be {action}: {}", io_sentence(e)),
        )
    };
    for (dir_rel, children) in &expected {
        let at = if dir_rel.is_empty() {
            String::new()
        } else {
            format!("/{dir_rel}")
        };
        let mut dir = rustix::fs::openat(store, name, dir_flags(), Mode::empty())
            .map_err(|e| unreadable("", "opened", e))?;
        if !dir_rel.is_empty() {
            for segment in dir_rel.split('/') {
                dir = rustix::fs::openat(dir.as_fd(), segment, dir_flags(), Mode::empty())
                    .map_err(|e| unreadable(&at, "opened", e))?;
            }
        }
        // The walk listed at most SKILL_TREE_MAX_ENTRIES entries in all, so one more shows a
        // directory that grew since.
        let (names, _) = list(&dir, SKILL_TREE_MAX_ENTRIES.saturating_add(1))
            .map_err(|e| unreadable(&at, "listed", e))?;
        if let Some(extra) = names
            .iter()
            .find(|n| !std::str::from_utf8(n).is_ok_and(|n| children.contains(n)))
        {
            return Err(StoreProblem::new(
                "mismatch",
                format!(
                    "{item}{at}/{} is not part of the skill tree the directory's name pins (a \
                     name the skill-tree walk skips, or a directory without files): a store \
                     directory holds its tree's files and nothing else (spec/activation.md §3)",
                    String::from_utf8_lossy(extra)
                ),
            ));
        }
    }
    Ok(())
}
