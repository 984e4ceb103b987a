//! The workspace identity of a data directory (spec/cli.md §2, "Workspace identity"): the
//! `workspace_identity_digest` every consent challenge of its broker is bound to, stored once in
//! the data directory's `workspace-identity` file rather than derived from where the directory
//! lies, so a data directory copied (`cp -a`) or moved (`mv`) keeps its pending challenges
//! answerable.
//!
//! A new data directory draws the identity from randomness once, at its first open. A data
//! directory of an earlier version, whose challenges are bound to the digest of its canonical
//! path, keeps that digest: it is written as its stored identity at the first open that finds
//! challenges in the journal and no file.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use ctx_fs::{FILE_MODE_PRIVATE, ReadError, create_private_dir_all, fsync_dir, read_bounded};
use ctx_journal::Journal;
use ctx_model::{Json, cj_digest, hex, is_sha, sha256_hex};
use ctx_projections::consent_store::identity_stream;

use crate::data_dir::Layout;

/// Schema of the `workspace-identity` file.
pub const WORKSPACE_IDENTITY_SCHEMA: &str = "ctx.workspace-identity-v1";
/// Largest `workspace-identity` file read, in bytes: the file holds a schema, a derivation word
/// and one 64-digit digest (about 150 bytes), so anything near the bound is not one.
pub const WORKSPACE_IDENTITY_MAX_BYTES: u64 = 1024;
/// Bytes of randomness a new identity is drawn from.
const WORKSPACE_IDENTITY_RANDOM_BYTES: usize = 32;

/// How a data directory's identity came to be (the `derivation` of its file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityDerivation {
    /// Drawn from randomness at the data directory's first open.
    Random,
    /// The digest earlier versions derived from the canonical path, kept for a data directory
    /// that already had challenges when it was first opened by this version.
    Path,
}

impl IdentityDerivation {
    fn as_str(self) -> &'static str {
        match self {
            IdentityDerivation::Random => "random",
            IdentityDerivation::Path => "path",
        }
    }

    fn parse(word: &str) -> Option<IdentityDerivation> {
        match word {
            "random" => Some(IdentityDerivation::Random),
            "path" => Some(IdentityDerivation::Path),
            _ => None,
        }
    }
}

/// A data directory's stored workspace identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceIdentity {
    pub digest: String,
    pub derivation: IdentityDerivation,
}

/// Why the workspace identity of a data directory could not be read or created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceIdentityError {
    /// The file could not be read, written or published.
    #[error("the workspace identity file {} could not be {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    /// The file holds something other than a workspace identity. It is never replaced: a new
    /// identity would leave every pending challenge of the directory unanswerable.
    #[error(
        "the workspace identity file {} is not valid: {reason}; restore it from a copy of the \
         data directory",
        path.display()
    )]
    Invalid { path: PathBuf, reason: String },
    /// The operating system gave no randomness for a new identity.
    #[error("no randomness for the workspace identity of {}: {source}", root.display())]
    NoRandomness {
        root: PathBuf,
        source: std::io::Error,
    },
    /// The journal could not say whether the directory already has challenges.
    #[error(
        "the journal of {} could not be read to tell whether it holds consent challenges: {detail}",
        root.display()
    )]
    Journal { root: PathBuf, detail: String },
}

impl WorkspaceIdentityError {
    /// The stable wire code (spec/cli.md §4): a damaged file is `integrity`, the rest `internal`.
    pub fn code(&self) -> &'static str {
        match self {
            WorkspaceIdentityError::Invalid { .. } => "integrity",
            _ => "internal",
        }
    }
}

/// The digest earlier versions bound a data directory's challenges to: of its canonical path
/// (the path as given when it cannot be resolved).
pub fn legacy_path_identity_digest(layout: &Layout) -> String {
    let root = layout
        .root()
        .canonicalize()
        .unwrap_or_else(|_| layout.root().to_path_buf());
    sha256_hex(&format!("ctx-data-dir:{}", root.display()))
}

/// Schema of the target identity a data directory's store is named by in execution bindings.
pub const STORE_TARGET_SCHEMA: &str = "ctx.data-dir-store-target-v1";

/// The target identity digest execution bindings name the store `store` (`skills`, `materials`)
/// of a data directory by (spec/cli.md §2, spec/skill-cas.md §3 "Named target"):
/// `H(CJ({schema, store, workspace_identity_digest}))`, so a consent bound to it survives a copy
/// or a move. `None` for a directory of an earlier version (derivation `path`): its pending
/// challenges are bound to the digest of the store's captured root, which it keeps.
pub fn store_target_identity_digest(identity: &WorkspaceIdentity, store: &str) -> Option<String> {
    match identity.derivation {
        IdentityDerivation::Path => None,
        IdentityDerivation::Random => Some(cj_digest(&Json::object([
            ("schema", Json::str(STORE_TARGET_SCHEMA)),
            ("store", Json::str(store)),
            ("workspace_identity_digest", Json::str(&identity.digest)),
        ]))),
    }
}

/// The workspace identity of `layout`'s data directory, created at its first open: randomness
/// from the operating system, or, when `journal` already holds consent challenges (a data
/// directory of an earlier version), the digest of its canonical path that they are bound to.
pub fn workspace_identity(
    layout: &Layout,
    journal: &Journal,
) -> Result<WorkspaceIdentity, WorkspaceIdentityError> {
    let has_challenges = || {
        let journal_error = |detail: String| WorkspaceIdentityError::Journal {
            root: layout.root().to_path_buf(),
            detail,
        };
        let stream = identity_stream().map_err(|e| journal_error(e.to_string()))?;
        journal
            .stream_head(&stream)
            .map(|head| head.is_some())
            .map_err(|e| journal_error(e.to_string()))
    };
    ensure_workspace_identity(layout, has_challenges, |bytes| {
        getrandom::fill(bytes).map_err(|e| std::io::Error::other(e.to_string()))
    })
}

/// [`workspace_identity`] with its two inputs injected: `has_challenges` tells whether the
/// journal already holds consent challenges (asked only when no file exists), `random` fills a
/// buffer with randomness (called only for a new directory without challenges).
pub(crate) fn ensure_workspace_identity(
    layout: &Layout,
    has_challenges: impl FnOnce() -> Result<bool, WorkspaceIdentityError>,
    random: impl FnOnce(&mut [u8]) -> Result<(), std::io::Error>,
) -> Result<WorkspaceIdentity, WorkspaceIdentityError> {
    let path = layout.workspace_identity();
    if let Some(identity) = read_identity(&path)? {
        return Ok(identity);
    }
    let identity = if has_challenges()? {
        WorkspaceIdentity {
            digest: legacy_path_identity_digest(layout),
            derivation: IdentityDerivation::Path,
        }
    } else {
        let mut bytes = [0u8; WORKSPACE_IDENTITY_RANDOM_BYTES];
        random(&mut bytes).map_err(|source| WorkspaceIdentityError::NoRandomness {
            root: layout.root().to_path_buf(),
            source,
        })?;
        WorkspaceIdentity {
            digest: hex(&bytes),
            derivation: IdentityDerivation::Random,
        }
    };
    publish(layout, &path, &identity)
}

/// The stored identity, or `None` when the file does not exist.
fn read_identity(path: &Path) -> Result<Option<WorkspaceIdentity>, WorkspaceIdentityError> {
    let invalid = |reason: String| WorkspaceIdentityError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = match read_bounded(path, WORKSPACE_IDENTITY_MAX_BYTES) {
        Ok(bytes) => bytes,
        Err(ReadError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(ReadError::Io { source, .. }) => {
            return Err(WorkspaceIdentityError::Io {
                path: path.to_path_buf(),
                action: "read",
                source,
            });
        }
        Err(other) => return Err(invalid(other.to_string())),
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".into()))?;
    let json = Json::parse(text.trim_end())
        .map_err(|e| invalid(format!("it is not a JSON document ({e})")))?;
    let keys: Vec<&str> = json
        .as_obj()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    if keys != ["derivation", "schema", "workspace_identity_digest"] {
        return Err(invalid(
            "it is not an object of exactly derivation, schema and workspace_identity_digest"
                .into(),
        ));
    }
    if json.get_str("schema") != Some(WORKSPACE_IDENTITY_SCHEMA) {
        return Err(invalid(format!(
            "its schema is not {WORKSPACE_IDENTITY_SCHEMA:?}"
        )));
    }
    let derivation = json
        .get_str("derivation")
        .and_then(IdentityDerivation::parse)
        .ok_or_else(|| invalid("its derivation is neither \"random\" nor \"path\"".into()))?;
    let digest = json
        .get_str("workspace_identity_digest")
        .filter(|d| is_sha(d))
        .ok_or_else(|| {
            invalid("its workspace_identity_digest is not a lowercase SHA-256 digest".into())
        })?;
    Ok(Some(WorkspaceIdentity {
        digest: digest.to_owned(),
        derivation,
    }))
}

/// Writes `identity` as the file `path` unless another process did first, and returns the one
/// stored. The file is written whole under a temporary name and published with `link(2)`, which
/// never replaces: two first opens at once agree on the first one published, and no reader sees
/// a partial file (spec/fs.md rule 2).
fn publish(
    layout: &Layout,
    path: &Path,
    identity: &WorkspaceIdentity,
) -> Result<WorkspaceIdentity, WorkspaceIdentityError> {
    let io = |path: &Path, action: &'static str| {
        let path = path.to_path_buf();
        move |source| WorkspaceIdentityError::Io {
            path,
            action,
            source,
        }
    };
    create_private_dir_all(layout.root()).map_err(|e| WorkspaceIdentityError::Io {
        path: layout.root().to_path_buf(),
        action: "created",
        source: std::io::Error::other(e),
    })?;
    let document = Json::object([
        ("derivation", Json::str(identity.derivation.as_str())),
        ("schema", Json::str(WORKSPACE_IDENTITY_SCHEMA)),
        ("workspace_identity_digest", Json::str(&identity.digest)),
    ]);
    // `.NAME.tmp-PID`: what the leftover sweep removes once this process is gone (spec/cli.md §2).
    let temporary = layout
        .root()
        .join(format!(".workspace-identity.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE_PRIVATE)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(format!("{document}\n").as_bytes())?;
            file.sync_all()
        })
        .map_err(io(&temporary, "written"));
    let linked = written.and_then(|()| match std::fs::hard_link(&temporary, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(path, "published")(e)),
    });
    let _ = std::fs::remove_file(&temporary);
    let ours = linked?;
    fsync_dir(layout.root()).map_err(|e| WorkspaceIdentityError::Io {
        path: layout.root().to_path_buf(),
        action: "synced",
        source: std::io::Error::other(e),
    })?;
    if ours {
        return Ok(identity.clone());
    }
    read_identity(path)?.ok_or_else(|| WorkspaceIdentityError::Io {
        path: path.to_path_buf(),
        action: "read",
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "another process published it and it is gone again",
        ),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.

    use super::*;

    fn no_challenges() -> Result<bool, WorkspaceIdentityError> {
        Ok(false)
    }

    #[test]
    fn a_new_directory_draws_its_identity_once_and_keeps_it_when_moved() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&dir.path().join("ctx"));
        let first = ensure_workspace_identity(&layout, no_challenges, |b| {
            b.fill(7);
            Ok(())
        })
        .expect("created");
        assert_eq!(first.digest, "07".repeat(32));
        assert_eq!(first.derivation, IdentityDerivation::Random);
        // Later opens read it: neither the journal nor randomness is asked again.
        let again = ensure_workspace_identity(
            &layout,
            || panic!("the journal is not asked"),
            |_| panic!("no randomness is drawn"),
        )
        .expect("read");
        assert_eq!(again, first);
        // Moved, it is the same identity, and not the path's.
        let moved = Layout::new(&dir.path().join("moved"));
        std::fs::rename(layout.root(), moved.root()).unwrap();
        let after = ensure_workspace_identity(&moved, no_challenges, |b| {
            b.fill(9);
            Ok(())
        })
        .unwrap();
        assert_eq!(after, first);
        assert_ne!(after.digest, legacy_path_identity_digest(&moved));
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(moved.workspace_identity())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(moved.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["workspace-identity".to_owned()]);
    }

    #[test]
    fn a_directory_of_an_earlier_version_keeps_the_identity_its_challenges_are_bound_to() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(&dir.path().join("ctx"));
        std::fs::create_dir_all(layout.root()).unwrap();
        let expected = legacy_path_identity_digest(&layout);
        let identity =
            ensure_workspace_identity(&layout, || Ok(true), |_| panic!("no randomness is drawn"))
                .unwrap();
        assert_eq!(identity.digest, expected);
        assert_eq!(identity.derivation, IdentityDerivation::Path);
        // Stored, it no longer follows the path.
        let moved = Layout::new(&dir.path().join("moved"));
        std::fs::rename(layout.root(), moved.root()).unwrap();
        let after =
            ensure_workspace_identity(&moved, || Ok(true), |_| Err(std::io::Error::other("x")))
                .unwrap();
        assert_eq!(after.digest, expected);
    }

    #[test]
    fn a_damaged_file_is_refused_and_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let path = layout.workspace_identity();
        for (bytes, reason) in [
            (&b"\xff"[..], "it is not UTF-8 text"),
            (b"{", "it is not a JSON document"),
            (
                b"{\"schema\":\"ctx.workspace-identity-v1\"}",
                "it is not an object of exactly derivation, schema and workspace_identity_digest",
            ),
            (
                b"{\"derivation\":\"random\",\"schema\":\"ctx.workspace-identity-v1\",\
                  \"workspace_identity_digest\":\"ABC\"}",
                "its workspace_identity_digest is not a lowercase SHA-256 digest",
            ),
        ] {
            std::fs::write(&path, bytes).unwrap();
            let err = ensure_workspace_identity(&layout, no_challenges, |b| {
                b.fill(1);
                Ok(())
            })
            .expect_err("refused");
            assert_eq!(err.code(), "integrity");
            let message = err.to_string();
            assert!(
                message.starts_with(&format!(
                    "the workspace identity file {} is not valid: {reason}",
                    path.display()
                )) && message.ends_with("; restore it from a copy of the data directory"),
                "{message}"
            );
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "never replaced");
        }
        // A symbolic link is not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        let err = ensure_workspace_identity(&layout, no_challenges, |b| {
            b.fill(1);
            Ok(())
        })
        .expect_err("a link is refused");
        assert!(
            matches!(err, WorkspaceIdentityError::Invalid { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn no_randomness_is_an_error_naming_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let err = ensure_workspace_identity(&layout, no_challenges, |_| {
            Err(std::io::Error::other("closed"))
        })
        .expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "no randomness for the workspace identity of {}: closed",
                dir.path().display()
            )
        );
        assert!(!layout.workspace_identity().exists());
    }

    #[test]
    fn a_store_is_named_by_the_directory_identity_unless_it_is_of_an_earlier_version() {
        let identity = WorkspaceIdentity {
            digest: "ab".repeat(32),
            derivation: IdentityDerivation::Random,
        };
        let skills = store_target_identity_digest(&identity, "skills").expect("named");
        assert!(is_sha(&skills));
        assert_eq!(
            skills,
            cj_digest(
                &Json::parse(&format!(
                    "{{\"schema\":\"{STORE_TARGET_SCHEMA}\",\"store\":\"skills\",\
                     \"workspace_identity_digest\":\"{}\"}}",
                    identity.digest
                ))
                .unwrap()
            )
        );
        assert_ne!(
            store_target_identity_digest(&identity, "materials"),
            Some(skills)
        );
        let legacy = WorkspaceIdentity {
            derivation: IdentityDerivation::Path,
            ..identity
        };
        assert_eq!(store_target_identity_digest(&legacy, "skills"), None);
    }

    #[test]
    fn the_first_of_two_publications_wins() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let first = WorkspaceIdentity {
            digest: "11".repeat(32),
            derivation: IdentityDerivation::Random,
        };
        let second = WorkspaceIdentity {
            digest: "22".repeat(32),
            derivation: IdentityDerivation::Random,
        };
        let path = layout.workspace_identity();
        assert_eq!(publish(&layout, &path, &first).unwrap(), first);
        assert_eq!(publish(&layout, &path, &second).unwrap(), first);
    }
}
