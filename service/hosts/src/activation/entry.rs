//! Directory-entry targets: a skill's symbolic link and an agent's file
//! (spec/activation.md §3, §5).
//!
//! Both are created under a staging name in a ctx staging directory on the same filesystem but
//! outside any directory the host watches, then renamed onto the final name in one step:
//! - onto an absent name with `RENAME_NOREPLACE`, so an entry that appeared after ctx's check is
//!   never replaced;
//! - onto ctx's own earlier entry with `RENAME_EXCHANGE`, then the swapped-out entry is checked
//!   against what ctx expected there; if a person changed it meanwhile the swap is undone.
//!
//! Removal renames the entry into the staging directory, checks it is still exactly what ctx
//! wrote, and only then deletes it; otherwise it is renamed back. Staging names are derived
//! from the target and the intent's revision, so recovery finds what a crash left behind.

use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use ctx_model::sha256_hex_bytes;

use super::error::{ActivationError, ConflictReason};
use super::fsx::{Content, Dir, EntryType, read_followed};
use super::store::SKILL_FILE;
use super::{ACTIVATION_BODY_MAX_BYTES, TARGET_READ_MAX_BYTES};

/// Domain of the state digests that are not plain file hashes (spec/activation.md §3).
pub(crate) const STATE_DOMAIN: &[u8] = b"ctx.activation.state.v1";
/// Name of the staging directory next to the host's directories.
pub const STAGING_DIR_NAME: &str = ".ctx-staging";

/// `H(domain ‖ (u32le len ‖ part)*)`: a state digest over length-prefixed parts.
pub(crate) fn state_digest(parts: &[&[u8]]) -> String {
    let mut framed = Vec::with_capacity(64 + parts.iter().map(|p| p.len() + 4).sum::<usize>());
    framed.extend_from_slice(STATE_DOMAIN);
    for part in parts {
        framed.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_le_bytes());
        framed.extend_from_slice(part);
    }
    sha256_hex_bytes(&framed)
}

/// What kind of entry a place holds, which decides how its state is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A symbolic link to a store directory holding `SKILL.md`.
    SkillLink,
    /// A regular file.
    AgentFile,
}

/// What to put at an entry place.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Staged<'a> {
    Link(&'a Path),
    File(&'a [u8]),
}

/// The state of a skill link that points at `link` and through which `SKILL.md` reads as
/// `skill_sha` (a hex digest, or `unreadable` / `too-large`).
pub(crate) fn skill_link_state(link: &Path, skill_sha: &str) -> String {
    state_digest(&[
        b"skill-link",
        link.as_os_str().as_bytes(),
        skill_sha.as_bytes(),
    ])
}

/// The state of the entry `name` in `dir` (`None`: absent), read as the host reads it.
pub(crate) fn observe_in(
    dir: &Dir,
    name: &str,
    kind: EntryKind,
) -> Result<Option<String>, ActivationError> {
    let Some(found) = dir.entry_type(name)? else {
        return Ok(None);
    };
    let skill_md =
        || match read_followed(&dir.child(name).join(SKILL_FILE), ACTIVATION_BODY_MAX_BYTES) {
            Some(Content::Bytes(bytes)) => sha256_hex_bytes(&bytes),
            Some(Content::TooLarge(_)) => "too-large".to_owned(),
            None => "unreadable".to_owned(),
        };
    let state = match (found, kind) {
        (EntryType::Symlink, EntryKind::SkillLink) => {
            skill_link_state(&dir.read_link(name)?, &skill_md())
        }
        (EntryType::Symlink, EntryKind::AgentFile) => {
            state_digest(&[b"symlink", dir.read_link(name)?.as_os_str().as_bytes()])
        }
        (EntryType::File, EntryKind::AgentFile) => {
            match dir.read_file(name, TARGET_READ_MAX_BYTES)? {
                // An agent file's state is the plain SHA-256 of its bytes (`sha256sum` agrees).
                Content::Bytes(bytes) => sha256_hex_bytes(&bytes),
                Content::TooLarge(size) => {
                    state_digest(&[b"file-too-large", size.to_string().as_bytes()])
                }
            }
        }
        (EntryType::File, EntryKind::SkillLink) => state_digest(&[b"file"]),
        (EntryType::Directory, EntryKind::SkillLink) => {
            state_digest(&[b"directory", skill_md().as_bytes()])
        }
        (EntryType::Directory, EntryKind::AgentFile) => state_digest(&[b"directory"]),
        (EntryType::Other, _) => state_digest(&[b"other"]),
    };
    Ok(Some(state))
}

fn is_not_found(e: &ActivationError) -> bool {
    matches!(e, ActivationError::Io { source, .. } if source.kind() == ErrorKind::NotFound)
}

/// A directory-entry target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryPlace {
    /// The directory holding the entry.
    pub(crate) dir: PathBuf,
    /// The entry's name in it.
    pub(crate) entry: String,
    /// The staging directory (same filesystem, not watched by the host).
    pub(crate) staging: PathBuf,
    pub(crate) kind: EntryKind,
}

impl EntryPlace {
    pub(crate) fn path(&self) -> PathBuf {
        self.dir.join(&self.entry)
    }

    fn changed(&self) -> ActivationError {
        ActivationError::Conflict {
            path: self.path(),
            entry: None,
            reason: ConflictReason::ChangedDuringApply,
        }
    }

    /// The target's current state (`None`: absent, also when its directory is missing).
    pub(crate) fn observe(&self) -> Result<Option<String>, ActivationError> {
        match Dir::open(&self.dir) {
            Ok(dir) => observe_in(&dir, &self.entry, self.kind),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The atomic step of an activation: puts `staged` at the target, which must hold `prior`.
    /// A conflict means nothing was changed.
    pub(crate) fn install(
        &self,
        staged: Staged<'_>,
        prior: Option<&str>,
        tag: &str,
    ) -> Result<(), ActivationError> {
        let staging = Dir::ensure(&self.staging)?;
        let dir = Dir::ensure(&self.dir)?;
        let stage = format!("stage-{tag}");
        match staged {
            Staged::Link(target) => staging.symlink(target, &stage)?,
            Staged::File(bytes) => staging.write_new(&stage, bytes)?,
        }
        match prior {
            None => {
                if let Err(source) = staging.rename_noreplace(&stage, &dir, &self.entry) {
                    let _ = staging.unlink(&stage);
                    if source.kind() == ErrorKind::AlreadyExists {
                        return Err(self.changed());
                    }
                    return Err(ActivationError::Io {
                        action: "rename the staged entry onto",
                        path: self.path(),
                        source,
                    });
                }
            }
            Some(prior) => match staging.exchange(&stage, &dir, &self.entry) {
                Ok(true) => {
                    // The staging name now holds what was at the target: it must be what ctx
                    // expected, or the swap is undone and nothing is lost.
                    let old = observe_in(&staging, &stage, self.kind)?;
                    if old.as_deref() != Some(prior) {
                        staging
                            .exchange(&stage, &dir, &self.entry)
                            .map_err(ActivationError::io("swap back", self.path()))?;
                        staging.unlink(&stage)?;
                        dir.sync()?;
                        return Err(self.changed());
                    }
                    staging.unlink(&stage)?;
                }
                Ok(false) => {}
                Err(source) => {
                    let _ = staging.unlink(&stage);
                    if source.kind() == ErrorKind::NotFound {
                        return Err(self.changed());
                    }
                    return Err(ActivationError::Io {
                        action: "swap the staged entry with",
                        path: self.path(),
                        source,
                    });
                }
            },
        }
        dir.sync()?;
        staging.sync()
    }

    /// The atomic step of a deactivation: removes the target if it still holds `prior`.
    pub(crate) fn remove(&self, prior: &str, tag: &str) -> Result<(), ActivationError> {
        let dir = match Dir::open(&self.dir) {
            Ok(dir) => dir,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let staging = Dir::ensure(&self.staging)?;
        let trash = format!("trash-{tag}");
        match dir.rename_noreplace(&self.entry, &staging, &trash) {
            Ok(()) => {}
            Err(source) if source.kind() == ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(ActivationError::Io {
                    action: "move aside",
                    path: self.path(),
                    source,
                });
            }
        }
        let moved = observe_in(&staging, &trash, self.kind)?;
        if moved.as_deref() == Some(prior) {
            staging.unlink(&trash)?;
            dir.sync()?;
            return staging.sync();
        }
        // Changed after ctx's check: put it back where the person left it.
        staging
            .rename_noreplace(&trash, &dir, &self.entry)
            .map_err(ActivationError::io(
                "put back the changed entry ctx had moved aside to",
                staging.child(&trash),
            ))?;
        dir.sync()?;
        Err(self.changed())
    }

    /// After a crash: removes the staging entries of the intent `tag` that hold one of ctx's
    /// own states (`prior`, `new`), and puts a moved-aside entry that is not ctx's back at an
    /// empty target. Returns false when something that is not ctx's is left in staging.
    pub(crate) fn clean_leftovers(
        &self,
        prior: Option<&str>,
        new: Option<&str>,
        tag: &str,
    ) -> Result<bool, ActivationError> {
        let staging = match Dir::open(&self.staging) {
            Ok(dir) => dir,
            Err(e) if is_not_found(&e) => return Ok(true),
            Err(e) => return Err(e),
        };
        let mut clean = true;
        for (name, is_trash) in [
            (format!("stage-{tag}"), false),
            (format!("trash-{tag}"), true),
        ] {
            let Some(state) = observe_in(&staging, &name, self.kind)? else {
                continue;
            };
            let ours = Some(state.as_str()) == prior || Some(state.as_str()) == new;
            let removable = !matches!(staging.entry_type(&name)?, Some(EntryType::Directory));
            if ours && removable {
                staging.unlink(&name)?;
            } else if is_trash && self.observe()?.is_none() {
                let dir = Dir::ensure(&self.dir)?;
                clean = false;
                if staging.rename_noreplace(&name, &dir, &self.entry).is_ok() {
                    dir.sync()?;
                }
            } else {
                clean = false;
            }
        }
        staging.sync()?;
        Ok(clean)
    }
}
