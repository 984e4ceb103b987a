//! The `ctx` binary: gathers arguments, environment and the wall clock, and hands them to
//! [`ctx_service::run`].

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use ctx_journal::Timestamp;

fn main() -> ExitCode {
    // A clock before 1970 is stamped as 0 rather than refused: the demo only displays it.
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let code = ctx_service::run(
        std::env::args_os().skip(1),
        |name| std::env::var_os(name),
        Timestamp(micros),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}
