//! `ctx init --host` and `ctx doctor`.
