//! ctx-hosts: the agent-host adapters of ctx, the only crate that names Claude Code or Codex
//! (spec/activation.md, spec/cli.md §6–§7).
//!
//! - [`AgentHost`], [`HookEvent`] and [`HostHome`]: the hosts, the hook events ctx registers with
//!   each, and where each keeps its files.
//! - The host files (`settings.json`, `hooks.json`, `.mcp.json`), edited in place under ctx's
//!   lock without changing a byte ctx does not own ([`update_locked`] and the JSON editor).
//! - [`activation`]: making a consented, installed capability visible to a host on disk, and
//!   [`HostActivationDriver`], the service's activation driver over it.
//! - The hook session ([`run_hook`]): one call per host hook event, recorded on the session's
//!   journal stream; the `ctx hook` command is stdin/stdout glue over it.
//!
//! Dependencies point one way: hosts → service → projections → journal.
#![forbid(unsafe_code)]

// Public, with its own curated list: at the root its `ActivationReport` and `failpoints` would
// collide with ctx-service's root names of the same spelling and another meaning (the engine's
// activation report, the managed service's fail points), which the adapters and tests import
// beside them.
pub mod activation;
mod host_actuator;
mod host_files;
mod hosts;
mod profile;
mod session;

pub use host_actuator::HostActivationDriver;
pub use host_files::{
    HOST_FILE_ATTEMPTS, HOST_FILE_LOCK_WAIT, HOST_FILE_MAX_BYTES, HostFileError,
    JSON_EDIT_DEPTH_MAX, JsonEditError, JsonNode, UpdateOutcome, append_element, json_text,
    lock_path, parse_json, read_host_file, remove_member, set_member, update_locked,
};
pub use hosts::{
    AgentHost, CLAUDE_HOOK_EVENTS, CLAUDE_TOOL_MATCHER, CODEX_HOOK_EVENTS,
    HOOK_LOCK_WAIT_SHARE_PERCENT, HookEvent, HostHome, HostHomeError,
};
pub use profile::{AgentLayout, CLAUDE, CODEX, HandlerStyle, HostProfile, McpLayout};
pub use session::{
    HOOK_INPUT_MAX_BYTES, HOOK_SESSION_ID_MAX_BYTES, HOOK_TEXT_MAX_CHARS, HookContext, HookInput,
    HookReply, SessionError, failure_json, is_hook_session, read_session, run_hook, session_stream,
};

/// True when the fail point `name` is configured to fire (feature `failpoints`, which exists only
/// for tests). Used to simulate a crash at a named seam of an activation.
#[cfg(feature = "failpoints")]
pub(crate) fn failpoint_fired(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}
