//! The journal's one rule for its mutexes.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, ignoring poison. A panic while holding one of these locks is handled where it can
/// happen (the group commit catches it and fail-stops), so the data behind a poisoned lock is
/// still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
