//! rkyv 0.8 archives as projection table values.
//!
//! redb hands out value bytes at alignment 1, and rkyv's default format (the workspace enables
//! `little_endian`, `aligned`, `pointer_width_32`) needs the archive at its natural alignment.
//! Readers therefore copy the value into an aligned buffer and validate it with bytecheck
//! (`rkyv::access`) before looking at it, as the journal does for record headers
//! (`journal/src/codec.rs`). `access_unchecked` is never used: the crate forbids unsafe code, and
//! table bytes come from disk.

use std::cell::RefCell;

use ctx_journal::HookError;
use rkyv::api::high::{HighDeserializer, HighSerializer, HighValidator};
use rkyv::bytecheck::CheckBytes;
use rkyv::rancor;
use rkyv::ser::allocator::ArenaHandle;
use rkyv::util::AlignedVec;

/// A scratch buffer larger than this is not kept for the next read, so one large value does not
/// pin its memory in every thread that ever read it.
const SCRATCH_KEEP_MAX_BYTES: usize = 64 * 1024;

thread_local! {
    /// Reused by [`with_archived`] so that reading a value allocates nothing in the common case.
    static SCRATCH: RefCell<AlignedVec<16>> = RefCell::new(AlignedVec::new());
}

/// Why a value could not be archived or an archive could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    #[error("a {len}-byte archive of {type_name} does not validate: {message}")]
    Invalid {
        len: usize,
        type_name: &'static str,
        message: String,
    },
    #[error("a value of {type_name} could not be archived: {message}")]
    Serialize {
        type_name: &'static str,
        message: String,
    },
}

/// Inside a projection's `apply`, an archive failure refuses the record with the code `archive`.
impl From<ArchiveError> for HookError {
    fn from(e: ArchiveError) -> Self {
        HookError::with_code("archive", e.to_string())
    }
}

/// Archives `value` into bytes to store as a table value. Fails only when the value does not fit
/// the 32-bit relative pointers of the workspace's rkyv format (about 2 GiB).
pub fn to_bytes<T>(value: &T) -> Result<Vec<u8>, ArchiveError>
where
    T: for<'a> rkyv::Serialize<HighSerializer<AlignedVec, ArenaHandle<'a>, rancor::Error>>,
{
    rkyv::to_bytes::<rancor::Error>(value)
        .map(AlignedVec::into_vec)
        .map_err(|e| ArchiveError::Serialize {
            type_name: std::any::type_name::<T>(),
            message: e.to_string(),
        })
}

/// Validates `bytes` as an archive of `T` and calls `f` with the archived value. The bytes are
/// copied into a reused, 16-byte aligned per-thread buffer first (nested calls get a buffer of
/// their own), so they may come straight from redb at any alignment.
pub fn with_archived<T, R>(
    bytes: &[u8],
    f: impl FnOnce(&T::Archived) -> R,
) -> Result<R, ArchiveError>
where
    T: rkyv::Archive,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>,
{
    let run = |scratch: &mut AlignedVec<16>| {
        scratch.clear();
        scratch.extend_from_slice(bytes);
        rkyv::access::<T::Archived, rancor::Error>(scratch)
            .map(f)
            .map_err(|e| invalid::<T>(bytes.len(), &e))
    };
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let result = run(&mut scratch);
            if scratch.capacity() > SCRATCH_KEEP_MAX_BYTES {
                *scratch = AlignedVec::new();
            }
            result
        }
        // `f` itself reads an archive: the shared buffer is in use, so take a fresh one.
        Err(_) => run(&mut AlignedVec::new()),
    })
}

/// Validates `bytes` as an archive of `T` and deserializes it into an owned value.
pub fn from_bytes<T>(bytes: &[u8]) -> Result<T, ArchiveError>
where
    T: rkyv::Archive,
    T::Archived: for<'a> CheckBytes<HighValidator<'a, rancor::Error>>
        + rkyv::Deserialize<T, HighDeserializer<rancor::Error>>,
{
    with_archived::<T, _>(bytes, |archived| {
        rkyv::deserialize::<T, rancor::Error>(archived)
    })?
    .map_err(|e| invalid::<T>(bytes.len(), &e))
}

fn invalid<T>(len: usize, e: &rancor::Error) -> ArchiveError {
    ArchiveError::Invalid {
        len,
        type_name: std::any::type_name::<T>(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[derive(Debug, Clone, PartialEq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
    struct Sample {
        count: u64,
        name: String,
        tags: Vec<u32>,
    }

    fn sample() -> Sample {
        Sample {
            count: 42,
            name: "forty-two".to_owned(),
            tags: vec![1, 2, 3],
        }
    }

    #[test]
    fn archives_round_trip_at_any_alignment() {
        let bytes = to_bytes(&sample()).unwrap();
        for offset in 0..16 {
            // Place the archive at every offset of a buffer, as redb may hand it out.
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(&bytes);
            let value = &shifted[offset..];
            let count = with_archived::<Sample, _>(value, |a| a.count.to_native()).unwrap();
            assert_eq!(count, 42);
            assert_eq!(from_bytes::<Sample>(value).unwrap(), sample());
        }
    }

    #[test]
    fn invalid_archives_are_typed_errors_naming_their_length() {
        let bytes = to_bytes(&sample()).unwrap();
        let truncated = &bytes[..bytes.len() / 2];
        let err = from_bytes::<Sample>(truncated).unwrap_err();
        assert!(
            matches!(&err, ArchiveError::Invalid { len, .. } if *len == truncated.len()),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("{}-byte", truncated.len()))
        );
        let empty = with_archived::<Sample, _>(&[], |_| ()).unwrap_err();
        assert!(
            matches!(empty, ArchiveError::Invalid { len: 0, .. }),
            "{empty}"
        );
        // A string that is not UTF-8 must not validate.
        let at = bytes.windows(9).position(|w| w == b"forty-two").unwrap();
        let mut corrupt = bytes.clone();
        corrupt[at] = 0xFF;
        let err = from_bytes::<Sample>(&corrupt).unwrap_err();
        assert!(matches!(err, ArchiveError::Invalid { .. }), "{err}");
        let hook: HookError = err.into();
        assert_eq!(hook.code(), Some("archive"));
    }

    #[test]
    fn nested_reads_use_their_own_buffer() {
        let outer = to_bytes(&sample()).unwrap();
        let inner = to_bytes(&Sample {
            count: 7,
            name: String::new(),
            tags: Vec::new(),
        })
        .unwrap();
        let (a, b) = with_archived::<Sample, _>(&outer, |o| {
            let b = with_archived::<Sample, _>(&inner, |i| i.count.to_native()).unwrap();
            (o.count.to_native(), b)
        })
        .unwrap();
        assert_eq!((a, b), (42, 7));
    }

    #[test]
    fn a_large_value_does_not_stay_in_the_scratch_buffer() {
        let big = Sample {
            count: 1,
            name: "x".repeat(SCRATCH_KEEP_MAX_BYTES * 2),
            tags: Vec::new(),
        };
        let bytes = to_bytes(&big).unwrap();
        assert_eq!(from_bytes::<Sample>(&bytes).unwrap(), big);
        SCRATCH.with(|s| assert!(s.borrow().capacity() <= SCRATCH_KEEP_MAX_BYTES));
    }
}
