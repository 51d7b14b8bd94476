//! The [`CallHandle`] a caller attached to a guarded call, held by the call
//! from its request's head on, and filled once.

use std::sync::Arc;

use crate::outcome::{CallHandle, CallOutcome};

/// The [`CallHandle`] a caller attached to one call: filled once, when the
/// call settles, or, should the call end without settling (a request the
/// guard did not judge, an original that failed), as unguarded.
pub(crate) struct Caller {
    handle: CallHandle,
    settled: std::sync::atomic::AtomicBool,
}

impl Caller {
    /// The handle `parts` carries, if any.
    pub(crate) fn of(parts: &http::request::Parts) -> Option<Arc<Caller>> {
        let handle = parts.extensions.get::<CallHandle>()?.clone();
        Some(Arc::new(Caller {
            handle,
            settled: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    pub(crate) fn settle(&self, outcome: CallOutcome) {
        if !self.settled.swap(true, std::sync::atomic::Ordering::AcqRel) {
            self.handle.settle(outcome);
        }
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.settle(CallOutcome::unguarded(
            "no response judged: a request body or shape the guard does not judge, or no response",
        ));
    }
}
