//! `ctx hook claude|codex EVENT`: one hook call of an agent host (spec/cli.md §7).

use std::io::{Read, Write};

use ctx_journal::Timestamp;

use crate::data_dir::Layout;
use crate::error::{CliError, EXIT_OK};
use crate::hosts::{AgentHost, HookEvent, HostHome, HostHomeError};

#[allow(clippy::too_many_arguments)]
pub(crate) fn hook(
    _host: AgentHost,
    _event: &HookEvent,
    _layout: Result<Layout, CliError>,
    _home: Result<HostHome, HostHomeError>,
    _now: Timestamp,
    _input: &mut dyn Read,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
) -> u8 {
    EXIT_OK
}
