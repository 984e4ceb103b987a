//! `ctx audit`, `ctx inspect`, `ctx export` and `ctx import`: offline work on a data directory's
//! journal (spec/cli.md).

use std::io::{Read, Write};
use std::path::Path;

use crate::data_dir::Layout;
use crate::error::CliError;

/// `ctx audit`: returns the exit status.
pub(crate) fn audit(
    _layout: &Layout,
    _json: bool,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
    _progress: bool,
) -> Result<u8, CliError> {
    Err(CliError::Usage("`ctx audit` is not built yet".into()))
}

/// `ctx inspect`: returns the exit status.
pub(crate) fn inspect(_layout: &Layout, _json: bool, _out: &mut dyn Write) -> Result<u8, CliError> {
    Err(CliError::Usage("`ctx inspect` is not built yet".into()))
}

/// `ctx export`: returns the exit status.
pub(crate) fn export(
    _layout: &Layout,
    _output: Option<&Path>,
    _out: &mut dyn Write,
) -> Result<u8, CliError> {
    Err(CliError::Usage("`ctx export` is not built yet".into()))
}

/// `ctx import`: returns the exit status.
pub(crate) fn import(
    _layout: &Layout,
    _file: Option<&Path>,
    _input: &mut dyn Read,
    _out: &mut dyn Write,
) -> Result<u8, CliError> {
    Err(CliError::Usage("`ctx import` is not built yet".into()))
}
