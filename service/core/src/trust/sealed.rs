//! The passphrase-sealed device key (spec/decisions.md §13): an Ed25519 seed stored only
//! encrypted, under a key derived from the person's passphrase with argon2id, by
//! XChaCha20-Poly1305. The public key stays in the clear so that the file names its verifier
//! without the passphrase; it is authenticated as associated data, so a swapped public key fails
//! to open like a wrong passphrase does.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::decision::{ED25519_PUBLIC_KEY_BYTES, ED25519_SEED_BYTES, Ed25519Signer};

/// The first bytes of every sealed key file.
pub const SEALED_KEY_MAGIC: [u8; 8] = *b"CTXSEAL1";
/// The format version this build writes and reads.
pub const SEALED_KEY_FORMAT_VERSION: u16 = 1;
/// The exact size of a sealed key file, in bytes (spec/decisions.md §13.1).
pub const SEALED_KEY_BYTES: usize = 144;
/// The KDF parameters `ctx key init` seals with: 64 MiB, three passes, one lane.
pub const SEAL_MEMORY_KIB: u32 = 65_536;
pub const SEAL_ITERATIONS: u32 = 3;
pub const SEAL_LANES: u32 = 1;
/// The weakest parameters a sealed file may name (RFC 9106's second recommended option and the
/// usual 19 MiB floor); weaker files are refused rather than opened.
pub const SEAL_MEMORY_MIN_KIB: u32 = 19_456;
pub const SEAL_ITERATIONS_MIN: u32 = 2;
/// The strongest parameters opened: a file may not make `ctx` allocate or spin without bound.
pub const SEAL_MEMORY_MAX_KIB: u32 = 4 * 1024 * 1024;
pub const SEAL_ITERATIONS_MAX: u32 = 64;
pub const SEAL_LANES_MAX: u32 = 16;
/// A passphrase's bounds: at least 8 characters, at most 1 KiB.
pub const PASSPHRASE_MIN_CHARS: usize = 8;
pub const PASSPHRASE_MAX_BYTES: usize = 1024;

const KDF_ARGON2ID_V13: u8 = 1;
const AEAD_XCHACHA20_POLY1305: u8 = 1;
const SALT_BYTES: usize = 16;
const NONCE_BYTES: usize = 24;
const HEADER_BYTES: usize = 8 + 2 + 1 + 1 + 4 + 4 + 4 + SALT_BYTES + NONCE_BYTES;
const TAG_BYTES: usize = 16;

/// The cost of deriving the sealing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealParams {
    pub memory_kib: u32,
    pub iterations: u32,
    pub lanes: u32,
}

impl SealParams {
    /// What `ctx key init` uses.
    pub const DEFAULT: SealParams = SealParams {
        memory_kib: SEAL_MEMORY_KIB,
        iterations: SEAL_ITERATIONS,
        lanes: SEAL_LANES,
    };
}

/// Why a key could not be sealed or a sealed file could not be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SealError {
    #[error("a sealed device key is exactly {SEALED_KEY_BYTES} bytes; this one has {len}")]
    Size { len: usize },
    #[error("the file does not start with the sealed device key magic CTXSEAL1")]
    Magic,
    #[error("sealed device key format version {found} is not {SEALED_KEY_FORMAT_VERSION}")]
    Version { found: u16 },
    #[error(
        "sealed device key names KDF {kdf} and cipher {aead}; only argon2id (1) with XChaCha20-Poly1305 (1) is read"
    )]
    Algorithm { kdf: u8, aead: u8 },
    #[error(
        "sealed device key KDF parameters ({memory_kib} KiB, {iterations} passes, {lanes} lanes) \
         are outside {SEAL_MEMORY_MIN_KIB}..={SEAL_MEMORY_MAX_KIB} KiB, \
         {SEAL_ITERATIONS_MIN}..={SEAL_ITERATIONS_MAX} passes, 1..={SEAL_LANES_MAX} lanes"
    )]
    Params {
        memory_kib: u32,
        iterations: u32,
        lanes: u32,
    },
    #[error(
        "a passphrase must have at least {PASSPHRASE_MIN_CHARS} characters and at most \
         {PASSPHRASE_MAX_BYTES} bytes; this one has {chars} characters"
    )]
    Passphrase { chars: usize },
    #[error("the passphrase does not open this device key (or the file was altered)")]
    WrongPassphrase,
    #[error("the sealed device key's public key does not belong to its sealed seed")]
    KeyMismatch,
    #[error("the key derivation failed: {0}")]
    Kdf(String),
}

/// Checks a passphrase's bounds before it is used to seal.
pub fn check_passphrase(passphrase: &str) -> Result<(), SealError> {
    let chars = passphrase.chars().count();
    if chars < PASSPHRASE_MIN_CHARS || passphrase.len() > PASSPHRASE_MAX_BYTES {
        return Err(SealError::Passphrase { chars });
    }
    Ok(())
}

fn derive_key(
    passphrase: &str,
    salt: &[u8],
    params: SealParams,
) -> Result<Zeroizing<[u8; 32]>, SealError> {
    let argon_params = Params::new(params.memory_kib, params.iterations, params.lanes, Some(32))
        .map_err(|e| SealError::Kdf(e.to_string()))?;
    let mut key = Zeroizing::new([0u8; 32]);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, argon_params)
        .hash_password_into(passphrase.as_bytes(), salt, key.as_mut())
        .map_err(|e| SealError::Kdf(e.to_string()))?;
    Ok(key)
}

fn header(params: SealParams, salt: &[u8; SALT_BYTES], nonce: &[u8; NONCE_BYTES]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SEALED_KEY_BYTES);
    out.extend_from_slice(&SEALED_KEY_MAGIC);
    out.extend_from_slice(&SEALED_KEY_FORMAT_VERSION.to_le_bytes());
    out.push(KDF_ARGON2ID_V13);
    out.push(AEAD_XCHACHA20_POLY1305);
    out.extend_from_slice(&params.memory_kib.to_le_bytes());
    out.extend_from_slice(&params.iterations.to_le_bytes());
    out.extend_from_slice(&params.lanes.to_le_bytes());
    out.extend_from_slice(salt);
    out.extend_from_slice(nonce);
    out
}

/// Seals `signer`'s seed under `passphrase`. `salt` and `nonce` come from the caller's randomness
/// (the OS in production), so the format is testable byte for byte.
pub fn seal_signer(
    signer: &Ed25519Signer,
    passphrase: &str,
    params: SealParams,
    salt: [u8; SALT_BYTES],
    nonce: [u8; NONCE_BYTES],
) -> Result<Vec<u8>, SealError> {
    check_passphrase(passphrase)?;
    check_params(params)?;
    let mut out = header(params, &salt, &nonce);
    out.extend_from_slice(&signer.verifying_key_bytes());
    let key = derive_key(passphrase, &salt, params)?;
    let cipher = XChaCha20Poly1305::new(key.as_ref().into());
    let seed = Zeroizing::new(signer.seed_bytes());
    let sealed = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: seed.as_ref(),
                aad: &out,
            },
        )
        .map_err(|_| SealError::Kdf("the cipher refused to seal".to_owned()))?;
    out.extend_from_slice(&sealed);
    assert_eq!(out.len(), SEALED_KEY_BYTES, "the sealed layout is fixed");
    Ok(out)
}

fn check_params(p: SealParams) -> Result<(), SealError> {
    let ok = (SEAL_MEMORY_MIN_KIB..=SEAL_MEMORY_MAX_KIB).contains(&p.memory_kib)
        && (SEAL_ITERATIONS_MIN..=SEAL_ITERATIONS_MAX).contains(&p.iterations)
        && (1..=SEAL_LANES_MAX).contains(&p.lanes);
    if ok {
        Ok(())
    } else {
        Err(SealError::Params {
            memory_kib: p.memory_kib,
            iterations: p.iterations,
            lanes: p.lanes,
        })
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The parsed, not yet opened, parts of a sealed file.
struct Parsed<'a> {
    params: SealParams,
    salt: &'a [u8],
    nonce: &'a [u8],
    public_key: [u8; ED25519_PUBLIC_KEY_BYTES],
    aad: &'a [u8],
    sealed: &'a [u8],
}

fn parse(bytes: &[u8]) -> Result<Parsed<'_>, SealError> {
    if bytes.len() != SEALED_KEY_BYTES {
        return Err(SealError::Size { len: bytes.len() });
    }
    if bytes[..8] != SEALED_KEY_MAGIC {
        return Err(SealError::Magic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != SEALED_KEY_FORMAT_VERSION {
        return Err(SealError::Version { found: version });
    }
    if bytes[10] != KDF_ARGON2ID_V13 || bytes[11] != AEAD_XCHACHA20_POLY1305 {
        return Err(SealError::Algorithm {
            kdf: bytes[10],
            aead: bytes[11],
        });
    }
    let params = SealParams {
        memory_kib: u32_at(bytes, 12),
        iterations: u32_at(bytes, 16),
        lanes: u32_at(bytes, 20),
    };
    check_params(params)?;
    let salt_at = 24;
    let nonce_at = salt_at + SALT_BYTES;
    let public_at = nonce_at + NONCE_BYTES;
    debug_assert_eq!(public_at, HEADER_BYTES);
    let sealed_at = public_at + ED25519_PUBLIC_KEY_BYTES;
    let mut public_key = [0u8; ED25519_PUBLIC_KEY_BYTES];
    public_key.copy_from_slice(&bytes[public_at..sealed_at]);
    Ok(Parsed {
        params,
        salt: &bytes[salt_at..nonce_at],
        nonce: &bytes[nonce_at..public_at],
        public_key,
        aad: &bytes[..sealed_at],
        sealed: &bytes[sealed_at..],
    })
}

/// The public key a sealed file names, without opening it (checks the header only).
pub fn sealed_public_key(bytes: &[u8]) -> Result<[u8; ED25519_PUBLIC_KEY_BYTES], SealError> {
    Ok(parse(bytes)?.public_key)
}

/// Opens a sealed file with `passphrase`: the signer, whose public key is the one the file names.
pub fn unseal_signer(bytes: &[u8], passphrase: &str) -> Result<Ed25519Signer, SealError> {
    let parsed = parse(bytes)?;
    debug_assert_eq!(parsed.sealed.len(), ED25519_SEED_BYTES + TAG_BYTES);
    let key = derive_key(passphrase, parsed.salt, parsed.params)?;
    let cipher = XChaCha20Poly1305::new(key.as_ref().into());
    let seed = Zeroizing::new(
        cipher
            .decrypt(
                XNonce::from_slice(parsed.nonce),
                Payload {
                    msg: parsed.sealed,
                    aad: parsed.aad,
                },
            )
            .map_err(|_| SealError::WrongPassphrase)?,
    );
    let seed: [u8; ED25519_SEED_BYTES] = seed
        .as_slice()
        .try_into()
        .map_err(|_| SealError::WrongPassphrase)?;
    let signer = Ed25519Signer::from_seed(&seed);
    if signer.verifying_key_bytes() != parsed.public_key {
        return Err(SealError::KeyMismatch);
    }
    Ok(signer)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // Tests panic on failure by design.
mod tests {
    use super::*;

    const WEAKEST: SealParams = SealParams {
        memory_kib: SEAL_MEMORY_MIN_KIB,
        iterations: SEAL_ITERATIONS_MIN,
        lanes: 1,
    };

    fn sealed() -> (Ed25519Signer, Vec<u8>) {
        let signer = Ed25519Signer::from_seed(&[7u8; 32]);
        let bytes = seal_signer(&signer, "correct horse", WEAKEST, [1; 16], [2; 24])
            .expect("sealing a valid key");
        (signer, bytes)
    }

    #[test]
    fn a_sealed_key_opens_only_with_its_passphrase() {
        let (signer, bytes) = sealed();
        assert_eq!(bytes.len(), SEALED_KEY_BYTES);
        assert_eq!(sealed_public_key(&bytes), Ok(signer.verifying_key_bytes()));
        // The seed never appears in the clear.
        assert!(!bytes.windows(32).any(|w| w == [7u8; 32]));
        let opened = unseal_signer(&bytes, "correct horse").expect("the right passphrase");
        assert_eq!(opened.seed_bytes(), signer.seed_bytes());
        assert_eq!(
            unseal_signer(&bytes, "correct horsE").err(),
            Some(SealError::WrongPassphrase)
        );
    }

    #[test]
    fn every_altered_byte_is_refused() {
        let (_, bytes) = sealed();
        for at in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[at] ^= 0x01;
            assert!(
                unseal_signer(&altered, "correct horse").is_err(),
                "byte {at} altered and still opened"
            );
        }
    }

    #[test]
    fn weak_or_huge_parameters_and_short_passphrases_are_refused() {
        let signer = Ed25519Signer::from_seed(&[7u8; 32]);
        let weak = SealParams {
            memory_kib: 1024,
            ..WEAKEST
        };
        assert!(matches!(
            seal_signer(&signer, "correct horse", weak, [1; 16], [2; 24]),
            Err(SealError::Params { .. })
        ));
        assert_eq!(
            seal_signer(&signer, "short", WEAKEST, [1; 16], [2; 24]).err(),
            Some(SealError::Passphrase { chars: 5 })
        );
        let (_, mut bytes) = sealed();
        bytes[12..16].copy_from_slice(&(SEAL_MEMORY_MAX_KIB + 1).to_le_bytes());
        assert!(matches!(
            unseal_signer(&bytes, "correct horse"),
            Err(SealError::Params { .. })
        ));
        assert_eq!(
            unseal_signer(&bytes[..100], "x").err(),
            Some(SealError::Size { len: 100 })
        );
    }
}
