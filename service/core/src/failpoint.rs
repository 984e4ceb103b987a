//! Named fail points at the service's crash seams (feature `failpoints`, tests only;
//! spec/service.md). A fired point is its own small error, [`FailPointFired`], which each
//! operation's error type converts from, so the production error types carry no test-only
//! variant of their own.

/// True when the fail point `name` is configured to fire (feature `failpoints`; always false
/// otherwise). Used to simulate a crash at a named seam.
#[cfg(feature = "failpoints")]
pub(crate) fn failpoint_fired(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}

#[cfg(not(feature = "failpoints"))]
pub(crate) fn failpoint_fired(_name: &str) -> bool {
    false
}

/// A named fail point fired: the operation stopped where a crash would have stopped it.
/// `detail` says what had already happened durably at that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("fail point {name} fired: {detail}")]
pub struct FailPointFired {
    pub name: &'static str,
    pub detail: &'static str,
}

impl FailPointFired {
    /// The point `name` fired before anything of its step was durable.
    pub fn new(name: &'static str) -> FailPointFired {
        FailPointFired {
            name,
            detail: "simulated crash",
        }
    }

    /// The point `name` fired after part of its step was durable, as `detail` says.
    pub fn after(name: &'static str, detail: &'static str) -> FailPointFired {
        FailPointFired { name, detail }
    }
}

/// Returns `Err(FailPointFired)` (converted with `Into` to the function's error) when the fail
/// point fires.
macro_rules! fail_point {
    ($name:expr) => {
        if $crate::failpoint::failpoint_fired($name) {
            return Err($crate::failpoint::FailPointFired::new($name).into());
        }
    };
}
pub(crate) use fail_point;
