//! Device keys and the verifier registry of a data directory (spec/cli.md §4 "Device keys",
//! spec/decisions.md §6 and §7): the private key file a person signs with, its public
//! registration under `verifiers/`, and the trusted registry composed from those registrations.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctx_fs::create_private_dir_all;
use ctx_model::{Json, sha256_hex};

use super::{
    CONSENT_AUDIENCE, RuntimeError, component, io, read_limited, read_limited_file, utf8,
    write_atomically,
};
use crate::data_dir::Layout;
use crate::decision::{
    Ed25519Signer, Ed25519Verifier, HumanDecisionVerifierRegistration,
    TrustedHumanDecisionVerifierRegistry,
};

/// Schema of a registered device key (public part) and of a device key file (private part).
const VERIFIER_SCHEMA: &str = "ctx.verifier-v1";
const DEVICE_KEY_SCHEMA: &str = "ctx.device-key-v1";
/// Largest device key file read, in bytes: the file holds a schema, a 64-digit seed and an
/// authenticator id (a few hundred bytes), so anything near the bound is not a key.
pub const DEVICE_KEY_MAX_BYTES: u64 = 4 * 1024;
/// Largest verifier registration (`verifiers/<authenticator id>.json`) read, in bytes: the file
/// holds a schema, an audience, an authenticator id, a principal digest and a public key.
pub const VERIFIER_REGISTRATION_MAX_BYTES: u64 = 4 * 1024;

// ------------------------------------------------------------------------------------------------
// Device keys
// ------------------------------------------------------------------------------------------------

/// A registered human device key: its identity and public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub authenticator_id: String,
    pub principal_digest: String,
    pub public_key_hex: String,
}

impl DeviceIdentity {
    fn of(signer: &Ed25519Signer) -> DeviceIdentity {
        let public_key_hex = hex(&signer.verifying_key_bytes());
        DeviceIdentity {
            authenticator_id: format!("ctx-device-{}", &public_key_hex[..16]),
            principal_digest: sha256_hex(&format!("ctx-principal:{public_key_hex}")),
            public_key_hex,
        }
    }

    pub fn to_json(&self) -> Json {
        Json::object([
            ("audience", Json::str(CONSENT_AUDIENCE)),
            ("authenticator_id", Json::str(&self.authenticator_id)),
            ("principal_digest", Json::str(&self.principal_digest)),
            ("public_key", Json::str(&self.public_key_hex)),
            ("schema", Json::str(VERIFIER_SCHEMA)),
        ])
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Generates a device key, writes its private file at `out` (mode 0600, never over an existing
/// file) and registers its public key in the data directory.
pub fn generate_device_key(layout: &Layout, out: &Path) -> Result<DeviceIdentity, RuntimeError> {
    let signer = Ed25519Signer::generate_from_os()
        .map_err(|e| RuntimeError::Invalid(format!("no randomness for a device key: {e}")))?;
    write_device_key(layout, out, &signer)
}

/// [`generate_device_key`] with a given signer (tests and the demo use fresh ones too).
pub(crate) fn write_device_key(
    layout: &Layout,
    out: &Path,
    signer: &Ed25519Signer,
) -> Result<DeviceIdentity, RuntimeError> {
    let identity = DeviceIdentity::of(signer);
    let private = Json::object([
        ("authenticator_id", Json::str(&identity.authenticator_id)),
        ("principal_digest", Json::str(&identity.principal_digest)),
        ("schema", Json::str(DEVICE_KEY_SCHEMA)),
        ("seed", Json::str(hex(&signer.seed_bytes()))),
    ]);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(io(out))?;
    file.write_all(private.to_string().as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(out))?;
    register_device(layout, &identity)?;
    Ok(identity)
}

/// Registers a device's public key as a trusted verifier of the data directory (idempotent).
pub fn register_device(layout: &Layout, identity: &DeviceIdentity) -> Result<(), RuntimeError> {
    let dir = layout.verifiers();
    create_private_dir_all(&dir)?;
    let path = dir.join(format!("{}.json", identity.authenticator_id));
    write_atomically(&path, identity.to_json().to_string().as_bytes())
}

/// Reads a device key file written by [`generate_device_key`].
pub fn read_device_key(path: &Path) -> Result<(Ed25519Signer, DeviceIdentity), RuntimeError> {
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
    let text = utf8(
        path,
        read_limited_file(&mut file, path, DEVICE_KEY_MAX_BYTES)?,
    )?;
    let value = Json::parse(&text).map_err(|e| corrupt(&e.to_string()))?;
    if value.get_str("schema") != Some(DEVICE_KEY_SCHEMA) {
        return Err(corrupt(&format!("its schema is not {DEVICE_KEY_SCHEMA}")));
    }
    let seed: [u8; 32] = value
        .get_str("seed")
        .and_then(unhex)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| corrupt("its seed is not 64 hex digits"))?;
    let signer = Ed25519Signer::from_seed(&seed);
    let identity = DeviceIdentity::of(&signer);
    if value.get_str("authenticator_id") != Some(identity.authenticator_id.as_str()) {
        return Err(corrupt("its authenticator id does not belong to its key"));
    }
    Ok((signer, identity))
}

/// The verifier registry of every device key registered in the data directory, or `None` when
/// there is none.
pub(super) fn verifier_registry(
    layout: &Layout,
) -> Result<Option<Arc<TrustedHumanDecisionVerifierRegistry>>, RuntimeError> {
    let dir = layout.verifiers();
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut registrations = Vec::new();
    for path in paths {
        let corrupt = |reason: &str| RuntimeError::Corrupt {
            path: path.clone(),
            what: "verifier registration",
            reason: reason.to_owned(),
        };
        let text = utf8(&path, read_limited(&path, VERIFIER_REGISTRATION_MAX_BYTES)?)?;
        let value = Json::parse(&text).map_err(|e| corrupt(&e.to_string()))?;
        if value.get_str("schema") != Some(VERIFIER_SCHEMA) {
            return Err(corrupt(&format!("its schema is not {VERIFIER_SCHEMA}")));
        }
        let key: [u8; 32] = value
            .get_str("public_key")
            .and_then(unhex)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| corrupt("its public key is not 64 hex digits"))?;
        let verifier =
            Ed25519Verifier::from_public_key_bytes(&key).map_err(|e| corrupt(&e.to_string()))?;
        let registration = HumanDecisionVerifierRegistration::new(
            value.get_str("audience").unwrap_or_default(),
            value.get_str("authenticator_id").unwrap_or_default(),
            value.get_str("principal_digest").unwrap_or_default(),
            Arc::new(verifier),
        )
        .map_err(|e| corrupt(&e.to_string()))?;
        registrations.push(registration);
    }
    if registrations.is_empty() {
        return Ok(None);
    }
    let registry = TrustedHumanDecisionVerifierRegistry::new(registrations)
        .map_err(|e| component("the verifier registry refused")(e.to_string()))?;
    Ok(Some(Arc::new(registry)))
}
