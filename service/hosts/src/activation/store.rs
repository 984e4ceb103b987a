//! The activation store: every skill ctx activates, written once into a directory named by its
//! content digest, so host entries only point at content that can never change under them
//! (spec/activation.md §3, §5). A single body goes to `<store_root>/<sha256 of SKILL.md>/SKILL.md`;
//! a whole skill tree to `<store_root>/<sha256 of its skill pack>/`, every file at its relative
//! path (spec/skill-tree.md §7).
//!
//! A store directory is created under a unique staging name, filled, fsynced and renamed into
//! place without replacing anything (`RENAME_NOREPLACE`), then the root is fsynced: a reader sees
//! a complete directory or none. An existing directory is reused only after its content is
//! checked against its name; one that does not match is reported and left for a person.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ctx_model::sha256_hex_bytes;
use ctx_service::{SkillTree, SkillTreeError, skill_pack_identity, verify_skill_tree};

use super::error::ActivationError;
use ctx_fs::{MODE_GROUP_OTHER, MODE_GROUP_OTHER_WRITE, effective_uid};

use super::fsx::{Content, DIR_MODE, Dir, EntryType, FILE_MODE};

/// The one file of a store directory.
pub const SKILL_FILE: &str = "SKILL.md";
/// Prefix of the store's staging directories.
const STAGE_PREFIX: &str = ".stage-";
/// Mode of a tree's executable files: the executable bit is what the tree digest pins
/// (spec/skill-tree.md §4), and nobody but the person may read or write them.
pub(crate) const EXEC_FILE_MODE: u32 = 0o700;
/// Levels below a store directory that [`Dir::remove_tree`] descends when discarding a stage:
/// deeper than any tree the walk accepts (spec/skill-tree.md §3), so a stage is removed whole.
const STAGE_REMOVE_DEPTH: usize = 16;

/// A materialized skill: its store directory (absolute, canonical) and the SHA-256 of the
/// `SKILL.md` in it (for a single body, also the directory's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredSkill {
    pub(crate) dir: PathBuf,
    pub(crate) sha256: String,
}

static STAGE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `body` into the store under `root` (created owner-only when missing), or reuses the
/// directory an earlier activation wrote.
pub(crate) fn materialize(root: &Path, body: &[u8]) -> Result<StoredSkill, ActivationError> {
    let store = Dir::ensure(root)?;
    check_private(&store)?;
    let canonical = std::fs::canonicalize(root).map_err(ActivationError::io("resolve", root))?;
    let sha = sha256_hex_bytes(body);
    let stored = StoredSkill {
        dir: canonical.join(&sha),
        sha256: sha.clone(),
    };
    if store.entry_type(&sha)?.is_some() {
        verify(&store, &sha, body.len())?;
        return Ok(stored);
    }
    let stage = format!(
        "{STAGE_PREFIX}{sha}-{}-{}",
        std::process::id(),
        STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    store.mkdir(&stage)?;
    let staged = store.open_child(&stage)?;
    let filled = staged
        .write_new(SKILL_FILE, body)
        .and_then(|()| staged.sync());
    if let Err(e) = filled {
        discard(&store, &stage);
        return Err(e);
    }
    match store.rename_noreplace(&stage, &store, &sha) {
        Ok(()) => store.sync()?,
        Err(e) if e.raw_os_error().is_some_and(is_exists) => {
            // Another activation stored the same body first: use its directory.
            discard(&store, &stage);
            verify(&store, &sha, body.len())?;
        }
        Err(source) => {
            discard(&store, &stage);
            return Err(ActivationError::Io {
                action: "publish the store directory",
                path: store.child(&sha),
                source,
            });
        }
    }
    Ok(stored)
}

fn is_exists(errno: i32) -> bool {
    let e = rustix::io::Errno::from_raw_os_error(errno);
    e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY
}

/// Removes a staging directory this call created (best effort: a leftover is inert and named
/// so it can never be taken for a content address).
fn discard(store: &Dir, stage: &str) {
    if let Ok(dir) = store.open_child(stage) {
        let _ = dir.unlink(SKILL_FILE);
    }
    let _ = store.rmdir(stage);
}

/// The store root must belong to this user and be writable by no one else: a host follows links
/// into it and runs what it finds.
fn check_private(store: &Dir) -> Result<(), ActivationError> {
    let (uid, mode) = store.owner_and_mode()?;
    if uid != effective_uid() || mode & MODE_GROUP_OTHER_WRITE != 0 {
        return Err(ActivationError::UnsafeDirectory {
            path: store.path().to_path_buf(),
            reason: "the store root must be owned by this user and writable by no one else",
        });
    }
    Ok(())
}

/// Checks the store directory `sha`: a private directory holding exactly `SKILL.md` whose
/// SHA-256 is its name.
pub(crate) fn verify(store: &Dir, sha: &str, len: usize) -> Result<(), ActivationError> {
    let corrupt = |reason: &str| ActivationError::StoreCorrupt {
        path: store.child(sha),
        file: None,
        reason: reason.to_owned(),
    };
    let dir = store
        .open_child(sha)
        .map_err(|_| corrupt("it is not a directory"))?;
    let (uid, mode) = dir.owner_and_mode()?;
    if uid != effective_uid() || mode & MODE_GROUP_OTHER != 0 {
        return Err(corrupt("it is not a directory only this user can use"));
    }
    if dir.names()? != [SKILL_FILE] {
        return Err(corrupt("it holds more or less than SKILL.md"));
    }
    match dir.read_file(SKILL_FILE, len) {
        Ok(Content::Bytes(bytes)) if sha256_hex_bytes(&bytes) == sha => Ok(()),
        _ => Err(corrupt(
            "its SKILL.md does not have the content its name says",
        )),
    }
}

/// Writes `tree` into the store under `root` (created owner-only when missing) as the directory
/// named by the SHA-256 of its skill pack, or reuses the directory an earlier activation wrote
/// once it verifies against `tree` (spec/activation.md §3).
pub(crate) fn materialize_tree(
    root: &Path,
    tree: &SkillTree,
) -> Result<StoredSkill, ActivationError> {
    let store = Dir::ensure(root)?;
    check_private(&store)?;
    let canonical = std::fs::canonicalize(root).map_err(ActivationError::io("resolve", root))?;
    let (name, _) = skill_pack_identity(tree);
    let stored = StoredSkill {
        dir: canonical.join(&name),
        sha256: sha256_hex_bytes(tree.skill_md()),
    };
    if store.entry_type(&name)?.is_some() {
        verify_tree(&store, &name, tree)?;
        return Ok(stored);
    }
    let stage = format!(
        "{STAGE_PREFIX}{name}-{}-{}",
        std::process::id(),
        STAGE_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    store.mkdir(&stage)?;
    if let Err(e) = fill_tree(&store, &stage, tree) {
        store.remove_tree(&stage, STAGE_REMOVE_DEPTH);
        return Err(e);
    }
    match store.rename_noreplace(&stage, &store, &name) {
        Ok(()) => store.sync()?,
        Err(e) if e.raw_os_error().is_some_and(is_exists) => {
            // Another activation stored the same tree first: use its directory.
            store.remove_tree(&stage, STAGE_REMOVE_DEPTH);
            verify_tree(&store, &name, tree)?;
        }
        Err(source) => {
            store.remove_tree(&stage, STAGE_REMOVE_DEPTH);
            return Err(ActivationError::Io {
                action: "publish the store directory",
                path: store.child(&name),
                source,
            });
        }
    }
    Ok(stored)
}

/// Fills the staging directory `stage` with the files of `tree`: directories 0700, executable
/// files 0700, others 0600, each file fsynced as it is written, then every directory fsynced
/// (deepest first, the stage itself last).
fn fill_tree(store: &Dir, stage: &str, tree: &SkillTree) -> Result<(), ActivationError> {
    let staged = store.open_child(stage)?;
    staged.chmod(DIR_MODE)?;
    let mut created: BTreeSet<String> = BTreeSet::new();
    for file in tree.files() {
        let (parent, leaf) = match file.path().rsplit_once('/') {
            Some((parent, leaf)) => (Some(parent), leaf),
            None => (None, file.path()),
        };
        check_segment(file.path(), leaf)?;
        let below;
        let dir = match parent {
            Some(parent) => {
                below = open_dirs(&staged, parent, &mut created)?;
                &below
            }
            None => &staged,
        };
        let mode = if file.executable() {
            EXEC_FILE_MODE
        } else {
            FILE_MODE
        };
        dir.write_new_mode(leaf, file.bytes(), mode)?;
    }
    for rel in created.iter().rev() {
        open_path(&staged, rel)?.sync()?;
    }
    staged.sync()
}

/// A path segment of a tree file must be a plain name. The walk that builds a [`SkillTree`]
/// already guarantees it (spec/skill-tree.md §2, W4); checked again because the store writes
/// where the path says.
fn check_segment(path: &str, segment: &str) -> Result<(), ActivationError> {
    if segment.is_empty() || segment == "." || segment == ".." || segment.contains('\0') {
        return Err(ActivationError::InvalidMaterial {
            name: path.to_owned(),
            reason: format!("the tree path {path:?} has the segment {segment:?}"),
        });
    }
    Ok(())
}

/// Opens the directory `rel` (`/`-separated) below `base`, creating each missing level (mode
/// 0700) and recording it in `created`.
fn open_dirs(
    base: &Dir,
    rel: &str,
    created: &mut BTreeSet<String>,
) -> Result<Dir, ActivationError> {
    let mut dir = base.duplicate()?;
    let mut walked = String::new();
    for segment in rel.split('/') {
        check_segment(rel, segment)?;
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(segment);
        if created.insert(walked.clone()) {
            dir.mkdir(segment)?;
            let next = dir.open_child(segment)?;
            next.chmod(DIR_MODE)?;
            dir = next;
        } else {
            dir = dir.open_child(segment)?;
        }
    }
    Ok(dir)
}

/// Opens the existing directory `rel` below `base`, one level at a time without following links.
fn open_path(base: &Dir, rel: &str) -> Result<Dir, ActivationError> {
    let mut dir = base.duplicate()?;
    for segment in rel.split('/') {
        dir = dir.open_child(segment)?;
    }
    Ok(dir)
}

/// Checks the store directory `name` against `tree`: a directory (not a link) that
/// [`verify_tree_open`] accepts.
fn verify_tree(store: &Dir, name: &str, tree: &SkillTree) -> Result<(), ActivationError> {
    let path = store.child(name);
    let dir = store
        .open_child(name)
        .map_err(|_| ActivationError::StoreCorrupt {
            path: path.clone(),
            file: None,
            reason: "it is not a directory".to_owned(),
        })?;
    verify_tree_open(&dir, &path, tree)
}

/// Checks, through the host's link at `link`, that the store directory `store_dir` it resolves
/// to holds exactly `tree` (step 7 of spec/activation.md §5.1).
pub(crate) fn verify_tree_through(
    link: &Path,
    store_dir: &Path,
    tree: &SkillTree,
) -> Result<(), ActivationError> {
    let dir = Dir::open(link).map_err(|_| ActivationError::StoreCorrupt {
        path: store_dir.to_path_buf(),
        file: None,
        reason: format!("{} does not open as a directory", link.display()),
    })?;
    verify_tree_open(&dir, store_dir, tree)
}

/// The open directory `dir` (a store directory, named `store_dir` in messages) must be private
/// to this user and hold exactly the files of `tree` (`verify_skill_tree`, spec/skill-tree.md
/// §5), and nothing else: no entry the tree walk skips, no empty directory, every directory and
/// file owned by this user and closed to group and others.
fn verify_tree_open(dir: &Dir, store_dir: &Path, tree: &SkillTree) -> Result<(), ActivationError> {
    let corrupt = |file: Option<String>, reason: String| ActivationError::StoreCorrupt {
        path: store_dir.to_path_buf(),
        file,
        reason,
    };
    let (uid, mode) = dir.owner_and_mode()?;
    if uid != effective_uid() || mode & MODE_GROUP_OTHER != 0 {
        return Err(corrupt(
            None,
            "it is not a directory only this user can use".to_owned(),
        ));
    }
    match verify_skill_tree(dir.path(), tree) {
        Ok(_) => {}
        Err(SkillTreeError::Mismatch {
            path, difference, ..
        }) => {
            let reason = format!("its file {} {difference}", store_dir.join(&path).display());
            return Err(corrupt(Some(path), reason));
        }
        Err(e) => return Err(corrupt(None, e.to_string())),
    }
    // The layout: each directory's entries, by name, with whether the entry is a directory.
    let mut layout: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    layout.entry(String::new()).or_default();
    for file in tree.files() {
        let mut parent = String::new();
        let segments: Vec<&str> = file.path().split('/').collect();
        let last = segments.len().saturating_sub(1);
        for (i, segment) in segments.iter().enumerate() {
            let is_dir = i < last;
            layout
                .entry(parent.clone())
                .or_default()
                .insert((*segment).to_owned(), is_dir);
            if is_dir {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(segment);
                layout.entry(parent.clone()).or_default();
            }
        }
    }
    check_layout(dir, "", &layout, store_dir)
}

/// Compares the directory `dir` (at `rel` below the store directory) entry by entry with the
/// `layout` the tree implies, and recurses into its subdirectories.
fn check_layout(
    dir: &Dir,
    rel: &str,
    layout: &BTreeMap<String, BTreeMap<String, bool>>,
    store_dir: &Path,
) -> Result<(), ActivationError> {
    let corrupt = |name: &str, reason: &str| {
        let file = if rel.is_empty() {
            name.to_owned()
        } else {
            format!("{rel}/{name}")
        };
        ActivationError::StoreCorrupt {
            path: store_dir.to_path_buf(),
            reason: format!("its entry {} {reason}", store_dir.join(&file).display()),
            file: Some(file),
        }
    };
    let empty = BTreeMap::new();
    let expected = layout.get(rel).unwrap_or(&empty);
    let found = dir.names()?;
    if let Some(extra) = found.iter().find(|n| !expected.contains_key(n.as_str())) {
        return Err(corrupt(extra, "is not part of the tree ctx wrote"));
    }
    for (name, is_dir) in expected {
        let Some(stat) = dir.stat_child(name)? else {
            return Err(corrupt(name, "is missing"));
        };
        let want = if *is_dir {
            EntryType::Directory
        } else {
            EntryType::File
        };
        if stat.entry_type() != want {
            return Err(corrupt(name, "is not the kind of entry ctx wrote there"));
        }
        if stat.uid != effective_uid() || stat.permissions() & MODE_GROUP_OTHER != 0 {
            return Err(corrupt(name, "is not private to this user"));
        }
        if *is_dir {
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            check_layout(&dir.open_child(name)?, &child, layout, store_dir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn write(dir: &Path, rel: &str, bytes: &[u8], mode: u32) {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A skill directory of three files, read under the walk rules.
    fn tree(root: &Path) -> SkillTree {
        let dir = root.join("src-skill");
        write(
            &dir,
            "SKILL.md",
            b"---\nname: t\ndescription: d\n---\nBody\n",
            0o644,
        );
        write(&dir, "scripts/run.sh", b"#!/bin/sh\necho run\n", 0o755);
        write(&dir, "references/deep/api.md", b"# API\n", 0o644);
        ctx_service::read_skill_tree_at(&dir).unwrap()
    }

    #[test]
    fn a_single_body_keeps_the_store_layout_it_always_had() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let body = b"---\nname: one\ndescription: d\n---\nOne body.\n";
        let stored = materialize(&root, body).unwrap();
        let sha = sha256_hex_bytes(body);
        assert_eq!(stored.sha256, sha);
        assert_eq!(stored.dir, fs::canonicalize(&root).unwrap().join(&sha));
        assert_eq!(names(&root), std::slice::from_ref(&sha));
        assert_eq!(names(&stored.dir), [SKILL_FILE]);
        assert_eq!(mode(&stored.dir), 0o700);
        assert_eq!(mode(&stored.dir.join(SKILL_FILE)), 0o600);
        assert_eq!(fs::read(stored.dir.join(SKILL_FILE)).unwrap(), body);
        // Reused as it is, and still refused when its file is not what its name says.
        assert_eq!(materialize(&root, body).unwrap(), stored);
        fs::write(stored.dir.join(SKILL_FILE), b"changed").unwrap();
        let err = materialize(&root, body).unwrap_err();
        assert!(
            matches!(&err, ActivationError::StoreCorrupt { file: None, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(&sha), "{err}");
    }

    #[test]
    fn a_tree_is_stored_under_its_pack_digest_with_private_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tree(tmp.path());
        let root = tmp.path().join("store");
        let stored = materialize_tree(&root, &tree).unwrap();
        let (pack_sha, _) = skill_pack_identity(&tree);
        assert_eq!(stored.dir, fs::canonicalize(&root).unwrap().join(&pack_sha));
        assert_eq!(stored.sha256, sha256_hex_bytes(tree.skill_md()));
        assert_eq!(names(&root), std::slice::from_ref(&pack_sha));
        assert_eq!(names(&stored.dir), ["SKILL.md", "references", "scripts"]);
        for (rel, want) in [
            ("", 0o700),
            ("references", 0o700),
            ("references/deep", 0o700),
            ("scripts", 0o700),
            ("scripts/run.sh", 0o700),
            ("references/deep/api.md", 0o600),
            ("SKILL.md", 0o600),
        ] {
            assert_eq!(mode(&stored.dir.join(rel)), want, "{rel}");
        }
        for file in tree.files() {
            assert_eq!(
                fs::read(stored.dir.join(file.path())).unwrap(),
                file.bytes()
            );
        }
        // The stored copy reads back as the same tree, and a second call reuses it.
        assert_eq!(
            ctx_service::read_skill_tree_at(&stored.dir)
                .unwrap()
                .digest_hex(),
            tree.digest_hex()
        );
        assert_eq!(materialize_tree(&root, &tree).unwrap(), stored);
        assert_eq!(names(&root), [pack_sha]);
    }

    fn refused(root: &Path, tree: &SkillTree, file: &str, says: &str) {
        let err = materialize_tree(root, tree).unwrap_err();
        let dir = root.join(skill_pack_identity(tree).0);
        match &err {
            ActivationError::StoreCorrupt { path, file: f, .. } => {
                assert_eq!(path, &dir);
                assert_eq!(f.as_deref(), Some(file));
            }
            other => panic!("{other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains(&dir.display().to_string()), "{text}");
        assert!(
            text.contains(&dir.join(file).display().to_string()),
            "{text}"
        );
        assert!(text.contains(says), "{text}");
    }

    #[test]
    fn a_changed_tree_in_the_store_is_refused_naming_the_file_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tree(tmp.path());
        let root = tmp.path().join("store");
        let stored = materialize_tree(&root, &tree).unwrap();
        let run = stored.dir.join("scripts/run.sh");

        fs::set_permissions(&run, fs::Permissions::from_mode(0o600)).unwrap();
        refused(&root, &tree, "scripts/run.sh", "is not executable");
        assert_eq!(mode(&run), 0o600, "nothing was replaced");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o700)).unwrap();

        fs::write(&run, b"#!/bin/sh\nrm -rf ~\n").unwrap();
        refused(&root, &tree, "scripts/run.sh", "has different content");
        assert_eq!(fs::read(&run).unwrap(), b"#!/bin/sh\nrm -rf ~\n");
        fs::write(&run, b"#!/bin/sh\necho run\n").unwrap();
        materialize_tree(&root, &tree).unwrap();

        // Group-readable is not private; an entry the tree walk skips, or an empty directory,
        // is not part of what ctx wrote.
        let api = stored.dir.join("references/deep/api.md");
        fs::set_permissions(&api, fs::Permissions::from_mode(0o640)).unwrap();
        refused(&root, &tree, "references/deep/api.md", "is not private");
        fs::set_permissions(&api, fs::Permissions::from_mode(0o600)).unwrap();
        fs::create_dir(stored.dir.join("scripts/node_modules")).unwrap();
        refused(
            &root,
            &tree,
            "scripts/node_modules",
            "is not part of the tree",
        );
        fs::remove_dir(stored.dir.join("scripts/node_modules")).unwrap();
        fs::write(stored.dir.join("extra.txt"), b"x").unwrap();
        fs::set_permissions(
            stored.dir.join("extra.txt"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        refused(
            &root,
            &tree,
            "extra.txt",
            "is not part of the expected tree",
        );
        fs::remove_file(stored.dir.join("extra.txt")).unwrap();
        materialize_tree(&root, &tree).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_no_stage_and_a_stage_leftover_is_inert() {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tree(tmp.path());
        let root = tmp.path().join("store");
        let store = Dir::ensure(&root).unwrap();
        // A crash leftover under a stage name does not stand for the content address.
        let leftover = format!("{STAGE_PREFIX}{}-1-0", skill_pack_identity(&tree).0);
        store.mkdir(&leftover).unwrap();
        let stored = materialize_tree(&root, &tree).unwrap();
        assert!(stored.dir.is_dir());
        // Filling into a stage that already has a file there fails and removes the stage.
        let stage = format!("{STAGE_PREFIX}x");
        store.mkdir(&stage).unwrap();
        store
            .open_child(&stage)
            .unwrap()
            .write_new("SKILL.md", b"x")
            .unwrap();
        let err = fill_tree(&store, &stage, &tree).unwrap_err();
        assert!(matches!(err, ActivationError::Io { .. }), "{err:?}");
        store.remove_tree(&stage, STAGE_REMOVE_DEPTH);
        assert!(!root.join(&stage).exists());
        assert_eq!(
            names(&root),
            [leftover, skill_pack_identity(&tree).0].map(String::from)
        );
    }
}
