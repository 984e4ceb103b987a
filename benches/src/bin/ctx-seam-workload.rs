//! `ctx-seam-workload --dir DIR [--budget-ms N] [--read-records N]`: one run of the
//! `ctx-bench seam-ab` workload (see `benches/src/seam_ab/workload.rs`), printed as one JSON line.
//! `ctx-bench seam-ab` builds this binary at HEAD and, with the same two files copied in, at the
//! older revision, and runs the two alternately.

use std::process::ExitCode;

#[path = "../seam_ab/workload.rs"]
mod workload;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match workload::main_with_args(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctx-seam-workload: {e}");
            ExitCode::FAILURE
        }
    }
}
