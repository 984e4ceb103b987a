//! Seed 88: a service handle is bound to the process that opened it. A forked child that inherits
//! the handle must be refused with "forked process" before it can touch the journal.

use ctx_service::ServiceError;
use fork::Fork;

use super::fixture::setup;

/// Exit statuses the child reports through: the seed's `blocked`, `wrong-error` and `allowed`.
const BLOCKED: i32 = 0;
const WRONG_ERROR: i32 = 1;
const ALLOWED: i32 = 2;

#[test]
fn test_service_is_process_bound() {
    let setup = setup();
    let request = setup.request("forked-query");
    match fork::fork().expect("fork succeeds") {
        Fork::Child => {
            // Only this thread exists in the child; it makes one call and leaves at once.
            let outcome = match setup.service.prepare(&request) {
                Err(ServiceError::ForkedProcess) => BLOCKED,
                Err(e) if e.to_string().contains("forked process") => BLOCKED,
                Err(_) => WRONG_ERROR,
                Ok(_) => ALLOWED,
            };
            std::process::exit(outcome);
        }
        Fork::Parent(child) => {
            let status = fork::waitpid(child).expect("wait for the child");
            // A normal exit carries its code in bits 8..16 of the wait status.
            assert_eq!(
                status & 0x7f,
                0,
                "the child exited normally (status {status:#x})"
            );
            assert_eq!(
                (status >> 8) & 0xff,
                BLOCKED,
                "the forked child was refused"
            );
        }
    }
    // The parent's handle still works.
    setup
        .service
        .prepare(&request)
        .expect("the owner process may prepare");
}
