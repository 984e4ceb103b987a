//! Record verification shared by every reader: the handle's scans, the commit's reads of
//! stored records, projection hooks and maintenance replays all refuse exactly the same records
//! (spec/journal.md §7).

use rkyv::util::AlignedVec;

use crate::codec::{Integrity, MacKey, RecordView, authenticate, decode_record};
use crate::error::ReadError;

/// Decodes the record stored under `position` and authenticates it: its structure, the position
/// its header names, D and M. Shared by `scan` and maintenance replays, so both refuse exactly the
/// same records.
pub(crate) fn verified_at<'a>(
    value: &'a [u8],
    position: u64,
    scratch: &'a mut AlignedVec<16>,
    mac: &MacKey,
) -> Result<RecordView<'a>, ReadError> {
    let view = decode_record(value, scratch).map_err(|reason| ReadError::Corrupt {
        position,
        reason: reason.to_owned(),
    })?;
    if view.position != position {
        return Err(auth_failed(&view, Integrity::Digest));
    }
    authenticate(&view, mac).map_err(|kind| auth_failed(&view, kind))?;
    Ok(view)
}

pub(crate) fn auth_failed(view: &RecordView<'_>, kind: Integrity) -> ReadError {
    ReadError::AuthenticationFailed {
        stream: view.stream,
        revision: view.revision,
        position: view.position,
        reason: match kind {
            Integrity::Digest => "the record digest does not match its content",
            Integrity::Mac => "the record MAC does not match the installation key",
        },
    }
}
