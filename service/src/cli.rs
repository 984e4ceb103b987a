//! The `ctx` command line: argument parsing by hand and dispatch. `main` only gathers the
//! process's arguments, environment and clock and calls [`run`].

use std::ffi::OsString;
use std::io::Write;

use ctx_journal::Timestamp;

use crate::data_dir::demo_data_dir;
use crate::demo::run_demo;
use crate::error::{CliError, EXIT_OK};

/// The `--help` text.
pub const USAGE: &str = "\
ctx: an embedded event-sourced engine for agent hosts (today: its journal)

Usage:
  ctx demo        append, read back and verify a few records in a demo journal
  ctx --help      show this help
  ctx --version   show the version

The demo keeps its journal in $CTX_DATA_DIR if set (an absolute path), else in
$XDG_DATA_HOME/ctx/demo, else in $HOME/.local/share/ctx/demo. Running it again reuses
the journal and appends new records.

Exit status: 0 success, 1 failure (I/O, storage, directory held by another process),
2 bad input, 3 integrity failure.
";

/// A parsed command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Help,
    Version,
    Demo,
}

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Command, CliError> {
    let mut words = Vec::new();
    for arg in args {
        match arg.into_string() {
            Ok(word) => words.push(word),
            Err(arg) => {
                return Err(CliError::Usage(format!(
                    "argument {arg:?} is not valid UTF-8"
                )));
            }
        }
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => Err(CliError::Usage(
            "no command given; try `ctx --help`".to_owned(),
        )),
        ["-h" | "--help" | "help", ..] => Ok(Command::Help),
        ["-V" | "--version"] => Ok(Command::Version),
        ["demo"] => Ok(Command::Demo),
        ["demo", rest @ ..] if rest.iter().any(|w| matches!(*w, "-h" | "--help")) => {
            Ok(Command::Help)
        }
        ["demo", extra, ..] => Err(CliError::Usage(format!(
            "`ctx demo` takes no arguments, got {extra:?}"
        ))),
        [other, ..] => Err(CliError::Usage(format!(
            "unknown command {other:?}; try `ctx --help`"
        ))),
    }
}

/// Runs one `ctx` command and returns its exit status. `env` looks up environment variables and
/// `now` is the wall-clock time the demo stamps on its records.
pub fn run(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    now: Timestamp,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    match execute(args, env, now, out) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            // If stderr is gone too there is nobody left to tell; the exit status still says it.
            let _ = writeln!(err, "ctx: error: {e}");
            if matches!(e, CliError::Usage(_)) {
                let _ = writeln!(err, "\n{USAGE}");
            }
            e.exit_code()
        }
    }
}

fn execute(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    now: Timestamp,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    match parse_args(args)? {
        Command::Help => out.write_all(USAGE.as_bytes())?,
        Command::Version => writeln!(out, "ctx {}", env!("CARGO_PKG_VERSION"))?,
        Command::Demo => {
            let dir = demo_data_dir(env)?;
            run_demo(&dir, now, out)?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{EXIT_INTEGRITY, EXIT_USAGE};

    fn parse(words: &[&str]) -> Result<Command, CliError> {
        parse_args(words.iter().map(OsString::from))
    }

    #[test]
    fn parses_commands() {
        assert!(matches!(parse(&["demo"]), Ok(Command::Demo)));
        assert!(matches!(parse(&["--help"]), Ok(Command::Help)));
        assert!(matches!(parse(&["-h"]), Ok(Command::Help)));
        assert!(matches!(parse(&["demo", "--help"]), Ok(Command::Help)));
        assert!(matches!(parse(&["--version"]), Ok(Command::Version)));
        assert!(matches!(parse(&[]), Err(CliError::Usage(_))));
        assert!(matches!(parse(&["demo", "x"]), Err(CliError::Usage(_))));
        assert!(matches!(parse(&["frobnicate"]), Err(CliError::Usage(_))));
    }

    #[test]
    fn bad_input_exits_2_with_usage() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            [OsString::from("nope")],
            |_| None,
            Timestamp(0),
            &mut out,
            &mut err,
        );
        assert_eq!(code, EXIT_USAGE);
        let err = String::from_utf8_lossy(&err);
        assert!(err.contains("unknown command \"nope\""), "{err}");
        assert!(err.contains("Usage:"), "{err}");
    }

    #[test]
    fn relative_data_dir_exits_2() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let env = |name: &str| (name == "CTX_DATA_DIR").then(|| OsString::from("rel/dir"));
        let code = run(
            [OsString::from("demo")],
            env,
            Timestamp(0),
            &mut out,
            &mut err,
        );
        assert_eq!(code, EXIT_USAGE);
    }

    #[test]
    fn demo_runs_twice_then_detects_tampering() -> Result<(), Box<dyn std::error::Error>> {
        let tmp = tempfile::tempdir()?;
        let dir = tmp.path().join("ctx");
        let env = |name: &str| (name == "CTX_DATA_DIR").then(|| dir.clone().into_os_string());
        for (run_no, reused) in [(1, false), (2, true)] {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = run(
                [OsString::from("demo")],
                env,
                Timestamp(1),
                &mut out,
                &mut err,
            );
            let out = String::from_utf8(out)?;
            assert_eq!(
                code,
                EXIT_OK,
                "run {run_no}: {out}{}",
                String::from_utf8_lossy(&err)
            );
            assert_eq!(out.contains("reused the existing journal"), reused, "{out}");
            assert!(out.contains("replayed = true"), "{out}");
            assert!(out.contains("is at revision"), "{out}");
            assert!(out.contains("verify: ok"), "{out}");
        }
        // An installation key that no longer matches the records: verification must fail.
        std::fs::write(dir.join(ctx_journal::files::KEY_FILE), [9u8; 32])?;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            [OsString::from("demo")],
            env,
            Timestamp(1),
            &mut out,
            &mut err,
        );
        assert_eq!(
            code,
            EXIT_INTEGRITY,
            "{}{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
        Ok(())
    }
}
