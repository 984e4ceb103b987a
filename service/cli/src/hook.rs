//! `ctx hook claude|codex EVENT`: one hook call of an agent host (spec/cli.md §7), as
//! stdin/stdout glue over the hook session library (`ctx_hosts::run_hook`).
//!
//! The host runs this as a short-lived process with its hook JSON on standard input and reads at
//! most one JSON object from standard output. A hook never blocks the host because of ctx: every
//! failure, bad input included, becomes a `systemMessage` and exit status 0 (an exit status 2
//! would erase the person's prompt). Standard output carries only that JSON object.

use std::io::{Read, Write};

use ctx_hosts::{
    AgentHost, HookContext, HookEvent, HookInput, HostHome, HostHomeError, SessionError,
    failure_json, run_hook,
};
use ctx_journal::Timestamp;
use ctx_model::Json;
use ctx_service::Layout;

use crate::error::{CliError, EXIT_OK};

#[allow(clippy::too_many_arguments)]
pub(crate) fn hook(
    host: AgentHost,
    event: &HookEvent,
    layout: Result<Layout, CliError>,
    home: Result<HostHome, HostHomeError>,
    now: Timestamp,
    input: &mut dyn Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    // The host kills a hook at its timeout; no lock this call takes may wait past a share of it,
    // so a busy data directory is answered with a sentence, not a killed hook (spec/cli.md §7.4).
    ctx_fs::bound_lock_waits(std::time::Instant::now() + event.lock_wait());
    let reply = match run(host, event, layout, home, now, input) {
        Ok(reply) => reply,
        Err(failure) => {
            // The sentence goes to the host's log (standard error) and to the person.
            let mut message = failure.to_string();
            if ctx_fs::lock_deadline_reached() {
                message = format!(
                    "another ctx process kept the data directory busy for longer than this hook \
                     may wait ({:.1} s of the host's {} s timeout), so ctx did nothing for this \
                     {}; it is tried again at the next one: {message}",
                    event.lock_wait().as_secs_f64(),
                    event.timeout_seconds,
                    what_is_skipped(event.ctx_name),
                );
            }
            let _ = writeln!(err, "ctx: hook {host} {}: {message}", event.ctx_name);
            Some(failure_json(&message))
        }
    };
    if let Some(reply) = reply {
        // A host that closed our standard output gets nothing; the exit status stays 0.
        let _ = writeln!(out, "{reply}");
    }
    EXIT_OK
}

/// What a hook that gave up waiting did not handle, in the person's words.
fn what_is_skipped(ctx_name: &str) -> &'static str {
    match ctx_name {
        "user-prompt-submit" => "prompt",
        "session-start" => "session start",
        "session-end" => "session end",
        _ => "event",
    }
}

/// Why a hook call did nothing: the data directory could not be chosen, or the session refused.
#[derive(Debug, thiserror::Error)]
enum HookFailure {
    #[error(transparent)]
    DataDir(#[from] CliError),
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// The reply to print, or why the call did nothing. The data directory is checked before the
/// input is read, as it always was.
fn run(
    host: AgentHost,
    event: &HookEvent,
    layout: Result<Layout, CliError>,
    home: Result<HostHome, HostHomeError>,
    now: Timestamp,
    input: &mut dyn Read,
) -> Result<Option<Json>, HookFailure> {
    let layout = layout?;
    let input = HookInput::read(host, event, input)?;
    let context = HookContext {
        host,
        layout: &layout,
        home,
        now,
    };
    Ok(run_hook(&context, event, &input)?.to_json())
}
