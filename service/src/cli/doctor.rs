//! `ctx doctor [--json]`: what ctx has installed with the agent hosts, and what is untrusted,
//! drifted or conflicting (spec/cli.md §8).

use std::io::Write;
use std::path::Path;

use crate::data_dir::Layout;
use crate::error::{CliError, EXIT_OK};
use crate::hosts::HostHome;

pub(crate) fn doctor(
    _layout: &Layout,
    _home: &HostHome,
    _exe: &Path,
    _json: bool,
    _out: &mut dyn Write,
) -> Result<u8, CliError> {
    Ok(EXIT_OK)
}
