//! The `ctx` binary: gathers arguments, environment, the wall clock and the standard streams, and
//! hands them to [`ctx_cli::run`].

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use ctx_journal::Timestamp;

fn main() -> ExitCode {
    // A clock before 1970 is stamped as 0 rather than refused; the engine refuses what it must.
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let stderr = std::io::stderr();
    let err_is_terminal = stderr.is_terminal();
    let code = ctx_cli::run(
        std::env::args_os().skip(1),
        |name| std::env::var_os(name),
        Timestamp(micros),
        ctx_cli::Streams {
            input: &mut std::io::stdin().lock(),
            out: &mut std::io::stdout().lock(),
            err: &mut stderr.lock(),
            err_is_terminal,
        },
    );
    ExitCode::from(code)
}
