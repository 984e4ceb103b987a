//! Opening the files of a catalog directory (spec/catalog.md §3, "File rules"): `catalog.json`
//! and every body it pins are opened relative to the catalog directory, one `openat` per path
//! segment, never following a symbolic link, and must be regular files with one link.
//!
//! A body's digest vouches for the bytes a person reviewed in the catalog directory. A symbolic
//! link (final or on the way) could point anywhere, and a hard link makes the same file reachable
//! from another path that anyone able to write there can change, so either would let the digest
//! vouch for a file nobody reviewed as part of the catalog (a system file whose hash the catalog
//! pins, say).

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use ctx_fs::{EntryType, FileStat};
use rustix::fs::{CWD, Mode, OFlags};
use rustix::io::Errno;

/// Which file of a catalog directory is meant; every sentence names it so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatalogFileKind {
    /// `catalog.json`.
    Catalog,
    /// A body file the catalog pins.
    Body,
}

impl CatalogFileKind {
    /// How a sentence names a file of this kind: "catalog file DIR/catalog.json".
    fn label(self) -> &'static str {
        match self {
            CatalogFileKind::Catalog => "catalog file",
            CatalogFileKind::Body => "catalog body",
        }
    }

    /// What the hard-link refusal says ctx refuses: "a body", "a catalog file".
    fn noun(self) -> &'static str {
        match self {
            CatalogFileKind::Catalog => "catalog file",
            CatalogFileKind::Body => "body",
        }
    }
}

impl std::fmt::Display for CatalogFileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Why a file of a catalog directory was refused before a byte of it was read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogFileError {
    /// The relative path is empty, absolute, or has an empty, `.` or `..` segment.
    #[error(
        "{kind} path {relative:?} does not stay inside the catalog directory {}; ctx reads only \
         regular files inside the catalog directory",
        root.display()
    )]
    OutsideDirectory {
        kind: CatalogFileKind,
        root: PathBuf,
        relative: String,
    },
    /// The file itself is a symbolic link.
    #[error(
        "{kind} {} is a symbolic link; ctx reads only regular files inside the catalog directory",
        path.display()
    )]
    Symlink {
        kind: CatalogFileKind,
        path: PathBuf,
    },
    /// A directory on the way to the file is a symbolic link.
    #[error(
        "{kind} {} passes through the symbolic link {}; ctx reads only regular files inside the \
         catalog directory",
        path.display(),
        link.display()
    )]
    SymlinkedDirectory {
        kind: CatalogFileKind,
        path: PathBuf,
        link: PathBuf,
    },
    /// A segment on the way to the file is not a directory.
    #[error(
        "{kind} {} passes through {}, which is not a directory",
        path.display(),
        through.display()
    )]
    NotDirectory {
        kind: CatalogFileKind,
        path: PathBuf,
        through: PathBuf,
    },
    /// The file is a directory, a FIFO, a device or a socket.
    #[error(
        "{kind} {} is not a regular file; ctx reads only regular files inside the catalog directory",
        path.display()
    )]
    NotRegularFile {
        kind: CatalogFileKind,
        path: PathBuf,
    },
    /// The file has more than one name.
    #[error(
        "{kind} {} has {links} hard links; ctx refuses a {} that another path can change",
        path.display(),
        kind.noun()
    )]
    HardLinks {
        kind: CatalogFileKind,
        path: PathBuf,
        links: u64,
    },
    /// The operating system refused an open or a `stat`; `path` is as far as the walk got (a
    /// missing directory on the way names that directory).
    #[error("{kind} {} could not be {action}: {source}", path.display())]
    Io {
        kind: CatalogFileKind,
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl CatalogFileError {
    /// True when the file (or a directory on its way) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, CatalogFileError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Whether `relative` names a path below its directory: not empty, not absolute, no NUL, and no
/// empty, `.` or `..` segment (the catalog's own body-path rule, spec/catalog.md §1.2, checked
/// again here so no caller can open a path that leaves the directory).
fn stays_inside(relative: &str) -> bool {
    !relative.is_empty()
        && !relative.contains('\0')
        && relative
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Opens the file `relative` of the catalog directory `root` for reading (spec/catalog.md §3,
/// "File rules"). `root` itself is opened as named (the caller chose it); below it every segment
/// is opened with `O_NOFOLLOW` relative to the directory before it, the file non-blocking (a FIFO
/// never hangs the open), and the open file must be a regular file with exactly one link.
pub fn open_catalog_file(
    root: &Path,
    relative: &str,
    kind: CatalogFileKind,
) -> Result<File, CatalogFileError> {
    if !stays_inside(relative) {
        return Err(CatalogFileError::OutsideDirectory {
            kind,
            root: root.to_path_buf(),
            relative: relative.to_owned(),
        });
    }
    let target = root.join(relative);
    let io = |path: &Path, action: &'static str, e: Errno| CatalogFileError::Io {
        kind,
        path: path.to_path_buf(),
        action,
        source: e.into(),
    };
    let mut dir: OwnedFd = rustix::fs::openat(
        CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(root, "opened", e))?;
    let segments: Vec<&str> = relative.split('/').collect();
    let (last, on_the_way) = match segments.split_last() {
        Some(split) => split,
        None => {
            return Err(CatalogFileError::OutsideDirectory {
                kind,
                root: root.to_path_buf(),
                relative: relative.to_owned(),
            });
        }
    };
    let mut walked = root.to_path_buf();
    for segment in on_the_way {
        walked.push(segment);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        dir = match rustix::fs::openat(&dir, *segment, flags, Mode::empty()) {
            Ok(next) => next,
            // Which refusal it was is read from the entry itself: the errno of a link opened
            // with O_NOFOLLOW | O_DIRECTORY differs between systems (ELOOP, ENOTDIR, EMLINK).
            Err(e) => {
                return Err(match entry_type(&dir, segment) {
                    Some(EntryType::Symlink) => CatalogFileError::SymlinkedDirectory {
                        kind,
                        path: target,
                        link: walked,
                    },
                    Some(EntryType::File | EntryType::Other) => CatalogFileError::NotDirectory {
                        kind,
                        path: target,
                        through: walked,
                    },
                    Some(EntryType::Directory) | None => io(&walked, "opened", e),
                });
            }
        };
    }
    let flags =
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match rustix::fs::openat(&dir, *last, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => {
            return Err(match entry_type(&dir, last) {
                Some(EntryType::Symlink) => CatalogFileError::Symlink { kind, path: target },
                _ => io(&target, "opened", e),
            });
        }
    };
    let stat = FileStat::of_fd(&fd).map_err(|e| io(&target, "inspected", e))?;
    if !stat.is_regular() {
        return Err(CatalogFileError::NotRegularFile { kind, path: target });
    }
    if stat.nlink != 1 {
        return Err(CatalogFileError::HardLinks {
            kind,
            path: target,
            links: stat.nlink,
        });
    }
    Ok(File::from(fd))
}

/// The type of the entry `name` of `dir`, not following a link; `None` when it cannot be told.
fn entry_type(dir: impl AsFd, name: &str) -> Option<EntryType> {
    FileStat::at(dir, name).ok().map(|s| s.entry_type())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;
    use std::os::unix::fs::symlink;

    fn refused(root: &Path, relative: &str, kind: CatalogFileKind) -> CatalogFileError {
        open_catalog_file(root, relative, kind).expect_err("refused")
    }

    #[test]
    fn a_plain_file_opens_and_every_way_around_the_rules_is_refused_with_its_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("skills/x")).unwrap();
        std::fs::write(root.join("skills/x/SKILL.md"), b"body").unwrap();
        std::fs::write(root.join("catalog.json"), b"{}").unwrap();
        let mut opened = open_catalog_file(root, "skills/x/SKILL.md", CatalogFileKind::Body)
            .expect("a plain body opens");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut opened, &mut text).unwrap();
        assert_eq!(text, "body");
        let shown = root.display();

        // A final symbolic link, even to a file inside the directory.
        symlink(root.join("catalog.json"), root.join("linked.json")).unwrap();
        assert_eq!(
            refused(root, "linked.json", CatalogFileKind::Catalog).to_string(),
            format!(
                "catalog file {shown}/linked.json is a symbolic link; ctx reads only regular \
                 files inside the catalog directory"
            )
        );

        // A symbolic link on the way.
        symlink(root.join("skills"), root.join("via")).unwrap();
        assert_eq!(
            refused(root, "via/x/SKILL.md", CatalogFileKind::Body).to_string(),
            format!(
                "catalog body {shown}/via/x/SKILL.md passes through the symbolic link \
                 {shown}/via; ctx reads only regular files inside the catalog directory"
            )
        );

        // A second name.
        std::fs::hard_link(root.join("skills/x/SKILL.md"), root.join("other.md")).unwrap();
        let err = refused(root, "skills/x/SKILL.md", CatalogFileKind::Body);
        assert!(
            matches!(err, CatalogFileError::HardLinks { links: 2, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "catalog body {shown}/skills/x/SKILL.md has 2 hard links; ctx refuses a body \
                 that another path can change"
            )
        );
        std::fs::hard_link(root.join("catalog.json"), root.join("copy.json")).unwrap();
        assert_eq!(
            refused(root, "catalog.json", CatalogFileKind::Catalog).to_string(),
            format!(
                "catalog file {shown}/catalog.json has 2 hard links; ctx refuses a catalog file \
                 that another path can change"
            )
        );

        // Paths that leave the directory are refused before anything is opened.
        for relative in [
            "../x.md",
            "/etc/passwd",
            "skills/../x.md",
            "",
            "a//b",
            "./a",
        ] {
            assert_eq!(
                refused(root, relative, CatalogFileKind::Body).to_string(),
                format!(
                    "catalog body path {relative:?} does not stay inside the catalog directory \
                     {shown}; ctx reads only regular files inside the catalog directory"
                )
            );
        }

        // A directory, a file on the way, a missing file.
        assert_eq!(
            refused(root, "skills/x", CatalogFileKind::Body).to_string(),
            format!(
                "catalog body {shown}/skills/x is not a regular file; ctx reads only regular \
                 files inside the catalog directory"
            )
        );
        assert_eq!(
            refused(root, "other.md/y.md", CatalogFileKind::Body).to_string(),
            format!(
                "catalog body {shown}/other.md/y.md passes through {shown}/other.md, which is \
                 not a directory"
            )
        );
        let err = refused(root, "skills/none/SKILL.md", CatalogFileKind::Body);
        assert!(err.is_not_found(), "{err:?}");
        assert!(
            matches!(&err, CatalogFileError::Io { path, .. } if path == &root.join("skills/none")),
            "{err:?}"
        );
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        rustix::fs::mknodat(
            CWD,
            dir.path().join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let err = refused(dir.path(), "fifo", CatalogFileKind::Body);
        assert!(
            matches!(err, CatalogFileError::NotRegularFile { .. }),
            "{err:?}"
        );
    }
}
