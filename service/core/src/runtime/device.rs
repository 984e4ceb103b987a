//! Device key files and the consent verifier registry of a data directory (spec/decisions.md
//! §13, §14): a person's key file — sealed under their passphrase, or a plain file key for CI
//! and the demo — and the trusted registry of consent verifiers, composed from the signed
//! `ctx.trust` stream, never from loose files.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;

use ctx_model::{Json, hex, parse_hex};

use super::{CONSENT_AUDIENCE, RuntimeError, component, io, read_limited_file, utf8};
use crate::decision::{
    Ed25519Signer, HumanDecisionVerifierRegistration, TrustedHumanDecisionVerifierRegistry,
};
use crate::trust::{
    SEALED_KEY_MAGIC, SealParams, TrustState, VerifierEntry, VerifierKind, seal_signer,
    sealed_public_key, unseal_signer,
};

/// Schema of a plain (file-key) device key file.
const DEVICE_KEY_SCHEMA: &str = "ctx.device-key-v1";
/// Largest device key file read, in bytes: a plain file holds a schema, a 64-digit seed and an
/// authenticator id (a few hundred bytes) and a sealed one 144 bytes, so anything near the
/// bound is not a key.
pub const DEVICE_KEY_MAX_BYTES: u64 = 4 * 1024;

/// A device key file as read: a plain seed (a file key) or a sealed one (spec/decisions.md §13).
pub enum DeviceKeyFile {
    Plain(Ed25519Signer),
    Sealed {
        bytes: Vec<u8>,
        public_key: [u8; 32],
    },
}

impl std::fmt::Debug for DeviceKeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKeyFile::Plain(_) => f.write_str("<plain device key>"),
            DeviceKeyFile::Sealed { .. } => f.write_str("<sealed device key>"),
        }
    }
}

impl DeviceKeyFile {
    /// The verifier entry this key registers as.
    pub fn entry(&self) -> VerifierEntry {
        match self {
            DeviceKeyFile::Plain(signer) => {
                VerifierEntry::ed25519(VerifierKind::FileKey, signer.verifying_key_bytes())
            }
            DeviceKeyFile::Sealed { public_key, .. } => {
                VerifierEntry::ed25519(VerifierKind::SealedKey, *public_key)
            }
        }
    }

    pub fn is_sealed(&self) -> bool {
        matches!(self, DeviceKeyFile::Sealed { .. })
    }

    /// The signer: a plain key's at once, a sealed key's with `passphrase` (which the caller read
    /// from the person's terminal).
    pub fn open(&self, passphrase: Option<&str>) -> Result<Ed25519Signer, RuntimeError> {
        match (self, passphrase) {
            (DeviceKeyFile::Plain(signer), _) => Ok(Ed25519Signer::from_seed(&signer.seed_bytes())),
            (DeviceKeyFile::Sealed { bytes, .. }, Some(passphrase)) => {
                unseal_signer(bytes, passphrase).map_err(|e| RuntimeError::Invalid(e.to_string()))
            }
            (DeviceKeyFile::Sealed { .. }, None) => Err(RuntimeError::Invalid(
                "a sealed device key opens only with its passphrase".to_owned(),
            )),
        }
    }
}

/// A fresh signer from the OS's randomness.
pub fn fresh_signer() -> Result<Ed25519Signer, RuntimeError> {
    Ed25519Signer::generate_from_os()
        .map_err(|e| RuntimeError::Invalid(format!("no randomness for a device key: {e}")))
}

/// Writes `bytes` as a new private file at `out` (mode 0600, never over an existing file).
fn write_new_private(out: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(io(out))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io(out))?;
    if let Some(parent) = out.parent() {
        ctx_fs::fsync_dir(parent).map_err(|e| io(parent)(std::io::Error::other(e)))?;
    }
    Ok(())
}

/// Writes a plain file key at `out` (a low-assurance kind for CI and the demo). Registers
/// nothing: a key becomes a verifier only through the registry (spec/decisions.md §14).
pub fn write_plain_key(out: &Path, signer: &Ed25519Signer) -> Result<VerifierEntry, RuntimeError> {
    let entry = VerifierEntry::ed25519(VerifierKind::FileKey, signer.verifying_key_bytes());
    let private = Json::object([
        ("authenticator_id", Json::str(&entry.authenticator_id)),
        ("principal_digest", Json::str(&entry.principal_digest)),
        ("schema", Json::str(DEVICE_KEY_SCHEMA)),
        ("seed", Json::str(hex(&signer.seed_bytes()))),
    ]);
    write_new_private(out, private.to_string().as_bytes())?;
    Ok(entry)
}

/// Seals `signer` under `passphrase` and writes it at `out` (0600, never over an existing file).
pub fn write_sealed_key(
    out: &Path,
    signer: &Ed25519Signer,
    passphrase: &str,
) -> Result<VerifierEntry, RuntimeError> {
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 24];
    getrandom::fill(&mut salt)
        .and_then(|()| getrandom::fill(&mut nonce))
        .map_err(|e| RuntimeError::Invalid(format!("no randomness to seal a key: {e}")))?;
    let bytes = seal_signer(signer, passphrase, SealParams::DEFAULT, salt, nonce)
        .map_err(|e| RuntimeError::Invalid(e.to_string()))?;
    write_new_private(out, &bytes)?;
    Ok(VerifierEntry::ed25519(
        VerifierKind::SealedKey,
        signer.verifying_key_bytes(),
    ))
}

/// Reads a device key file (plain or sealed); refuses one other users could read.
pub fn read_device_key(path: &Path) -> Result<DeviceKeyFile, RuntimeError> {
    let corrupt = |reason: &str| RuntimeError::Corrupt {
        path: path.to_path_buf(),
        what: "device key file",
        reason: reason.to_owned(),
    };
    let mut file = fs::File::open(path).map_err(io(path))?;
    let mode = file.metadata().map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(corrupt(&format!(
            "its mode is {:o}; a device key must be readable by its owner only (chmod 600)",
            mode & 0o777
        )));
    }
    let bytes = read_limited_file(&mut file, path, DEVICE_KEY_MAX_BYTES)?;
    if bytes.starts_with(&SEALED_KEY_MAGIC) {
        let public_key = sealed_public_key(&bytes).map_err(|e| corrupt(&e.to_string()))?;
        return Ok(DeviceKeyFile::Sealed { bytes, public_key });
    }
    let text = utf8(path, bytes)?;
    let value = Json::parse(&text).map_err(|e| corrupt(&e.to_string()))?;
    if value.get_str("schema") != Some(DEVICE_KEY_SCHEMA) {
        return Err(corrupt(&format!("its schema is not {DEVICE_KEY_SCHEMA}")));
    }
    let seed: [u8; 32] = value
        .get_str("seed")
        .and_then(parse_hex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| corrupt("its seed is not 64 hex digits"))?;
    let signer = Ed25519Signer::from_seed(&seed);
    let entry = VerifierEntry::ed25519(VerifierKind::FileKey, signer.verifying_key_bytes());
    if value.get_str("authenticator_id") != Some(entry.authenticator_id.as_str()) {
        return Err(corrupt("its authenticator id does not belong to its key"));
    }
    Ok(DeviceKeyFile::Plain(signer))
}

/// The consent verifier registry of every active verifier of `trust`, or `None` when there is
/// none.
pub(super) fn verifier_registry(
    trust: &TrustState,
    admissions: &super::delegated::Admissions,
) -> Result<Option<Arc<TrustedHumanDecisionVerifierRegistry>>, RuntimeError> {
    let mut registrations = Vec::new();
    for registered in trust.active() {
        let entry = &registered.entry;
        let verifier: Arc<dyn crate::decision::HumanDecisionVerifier> =
            Arc::new(super::delegated::AdmittingVerifier {
                inner: entry
                    .verifier()
                    .map_err(|e| component("the verifier registry refused")(e.to_string()))?,
                authenticator_id: entry.authenticator_id.clone(),
                admissions: admissions.clone(),
            });
        registrations.push(
            HumanDecisionVerifierRegistration::new(
                CONSENT_AUDIENCE,
                &entry.authenticator_id,
                &entry.principal_digest,
                verifier,
            )
            .map_err(|e| component("the verifier registry refused")(e.to_string()))?,
        );
    }
    if registrations.is_empty() {
        return Ok(None);
    }
    let registry = TrustedHumanDecisionVerifierRegistry::new(registrations)
        .map_err(|e| component("the verifier registry refused")(e.to_string()))?;
    Ok(Some(Arc::new(registry)))
}
