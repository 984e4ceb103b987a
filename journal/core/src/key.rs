//! The installation key: 32 random bytes created with the journal, kept in a 0600 file, used only
//! as the HMAC key of record MACs. It never appears in `Debug`, `Display` or an error.

use std::fs::File;
use std::path::Path;

use ctx_fs::{ModeRule, PrivateError};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::OpenError;

pub const KEY_FILE: &str = "installation.key";
const KEY_FILE_BYTES: usize = 32;

/// The source of the installation key's randomness; an injected seam so tests are repeatable.
pub type KeySource = dyn Fn() -> Result<[u8; 32], KeySourceError> + Send + Sync;

/// Why a key source could not supply a key (reported as `OpenError::KeyGeneration`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct KeySourceError {
    reason: String,
}

impl KeySourceError {
    /// A key source failure, for `reason` (a sentence naming what failed).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

pub(crate) fn os_random_key() -> Result<[u8; 32], KeySourceError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| KeySourceError::new(e.to_string()))?;
    Ok(key)
}

pub(crate) struct InstallationKey([u8; 32]);

impl std::fmt::Debug for InstallationKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InstallationKey(<redacted>)")
    }
}

impl InstallationKey {
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// Domain of the sub-key derivation: `K_kd = HMAC-SHA256(installation key, this)`.
const KEYED_DIGEST_KEY_DOMAIN: &[u8] = b"ctx.journal.keyed-digest-key.v1\0";

/// The keyed-digest sub-key (spec/journal.md §3, formula K). Callers choose the domain of a keyed
/// digest, so a digest under the installation key itself could be asked for the record-MAC domain
/// and would then forge record MACs (formula M). A sub-key derived under a domain no caller can
/// reach separates the two uses while keeping the digests installation-keyed.
#[derive(Clone)]
pub(crate) struct KeyedDigestKey(Hmac<Sha256>);

impl std::fmt::Debug for KeyedDigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyedDigestKey(<redacted>)")
    }
}

fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this branch is unreachable; it is kept as an assertion
    // because it can only fail through a programming error (as in `codec::MacKey::new`).
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => panic!("HMAC-SHA256 accepts keys of any length"),
    }
}

impl KeyedDigestKey {
    pub(crate) fn derive(key: &InstallationKey) -> KeyedDigestKey {
        let mut m = hmac_sha256(key.bytes());
        m.update(KEYED_DIGEST_KEY_DOMAIN);
        let sub: [u8; 32] = m.finalize().into_bytes().into();
        KeyedDigestKey(hmac_sha256(&sub))
    }

    /// `HMAC-SHA256(K_kd, domain ‖ 0x00 ‖ body)`.
    pub(crate) fn digest(&self, domain: &[u8], body: &[u8]) -> [u8; 32] {
        let mut m = self.0.clone();
        m.update(domain);
        m.update(&[0]);
        m.update(body);
        m.finalize().into_bytes().into()
    }
}

/// Loads the key, or creates it when `may_create` (a brand-new journal). Creation is ctx-fs's
/// durable write (spec/fs.md rule 2: a temporary 0600 file, synced, renamed into place, directory
/// synced), so a crash leaves either no key or a whole one. Runs under the process lock, which
/// serializes the writers of the temporary name.
pub(crate) fn load_or_create(
    dir: &Path,
    may_create: bool,
    source: &KeySource,
) -> Result<InstallationKey, OpenError> {
    let path = dir.join(KEY_FILE);
    match File::open(&path) {
        Ok(mut file) => {
            check_private(&file, &path)?;
            let not_32 = || OpenError::KeyInvalid {
                path: path.clone(),
                reason: "it is not exactly 32 bytes long",
            };
            let bytes = match ctx_fs::read_bounded_file(&mut file, &path, KEY_FILE_BYTES as u64) {
                Ok(bytes) => bytes,
                Err(ctx_fs::ReadError::TooLarge { .. }) => return Err(not_32()),
                Err(other) => return Err(OpenError::fs(&path, other)),
            };
            let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| not_32())?;
            Ok(InstallationKey(key))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !may_create {
                return Err(OpenError::KeyMissing {
                    path: dir.to_path_buf(),
                });
            }
            let key = source().map_err(|error| OpenError::KeyGeneration {
                reason: error.to_string(),
            })?;
            ctx_fs::write_durable(&path, &key, ctx_fs::FILE_MODE_PRIVATE)
                .map_err(|e| OpenError::fs_named(&path, e))?;
            Ok(InstallationKey(key))
        }
        Err(source) => Err(OpenError::Io { path, source }),
    }
}

/// The key file must be a regular file of this user that no other user may read or write
/// (spec/fs.md rule 5; the key is the root of every record MAC).
fn check_private(file: &File, path: &Path) -> Result<(), OpenError> {
    let invalid = |reason| OpenError::KeyInvalid {
        path: path.to_path_buf(),
        reason,
    };
    match ctx_fs::check_open_file(file, path, ModeRule::NoneOf(ctx_fs::MODE_GROUP_OTHER)) {
        Ok(_) => Ok(()),
        Err(PrivateError::ModeForbidden { .. } | PrivateError::ModeNotExact { .. }) => Err(
            invalid("it is readable or writable by other users (mode must be 0600)"),
        ),
        Err(PrivateError::Owner { .. }) => Err(invalid("it is owned by another user")),
        Err(PrivateError::NotRegularFile { .. }) => Err(invalid("it is not a regular file")),
        Err(other) => Err(OpenError::fs(path, other)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use hmac::{Hmac, KeyInit, Mac};
    use sha2::Sha256;

    use crate::journal::{Journal, OpenOptions};

    fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    fn open(dir: &std::path::Path, key: [u8; 32]) -> Journal {
        Journal::open(dir, &OpenOptions::new().key_source(move || Ok(key))).unwrap()
    }

    #[test]
    fn keyed_digest_follows_formula_k_and_depends_on_the_installation_key() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let key_a = [7u8; 32];
        let ja = open(a.path(), key_a);
        let jb = open(b.path(), [8u8; 32]);

        let sub = hmac(&key_a, &[b"ctx.journal.keyed-digest-key.v1\0"]);
        let expected = hmac(&sub, &[b"ctx.test-ref-v1", b"\0", b"body"]);
        assert_eq!(ja.keyed_digest(b"ctx.test-ref-v1", b"body"), expected);

        // Stable on one installation, across handles and reopening.
        assert_eq!(ja.keyed_digest(b"d", b"x"), ja.keyed_digest(b"d", b"x"));
        drop(ja);
        let ja = open(a.path(), [0u8; 32]); // the stored key is used, not the source
        assert_eq!(ja.keyed_digest(b"ctx.test-ref-v1", b"body"), expected);
        // Another installation, domain or body gives another digest.
        assert_ne!(jb.keyed_digest(b"ctx.test-ref-v1", b"body"), expected);
        assert_ne!(ja.keyed_digest(b"ctx.test-ref-v2", b"body"), expected);
        assert_ne!(ja.keyed_digest(b"ctx.test-ref-v1", b"bodz"), expected);
        // The NUL separator keeps the domain/body split apart.
        assert_ne!(ja.keyed_digest(b"ab", b"c"), ja.keyed_digest(b"a", b"bc"));
        // It is never the raw-key HMAC, so it cannot stand in for a record MAC (formula M).
        assert_ne!(
            ja.keyed_digest(b"ctx.jmac.v1", b"body"),
            hmac(&key_a, &[b"ctx.jmac.v1\0body"])
        );
    }
}
