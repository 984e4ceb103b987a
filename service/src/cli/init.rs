//! `ctx init --host claude|codex`: registers ctx's hooks with an agent host (spec/cli.md §8).

use std::io::Write;
use std::path::Path;

use crate::data_dir::Layout;
use crate::error::{CliError, EXIT_OK};
use crate::hosts::{AgentHost, HostHome};

pub(crate) fn init(
    _host: AgentHost,
    _layout: &Layout,
    _data_dir_option: Option<&Path>,
    _home: &HostHome,
    _exe: &Path,
    _out: &mut dyn Write,
) -> Result<u8, CliError> {
    Ok(EXIT_OK)
}
