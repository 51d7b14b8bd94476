//! The recorder of the crate's request contract
//! ([`refusal_guard_testkit::contract`]) for the test upstreams: each
//! upstream checks every request through one and answers a broken request
//! with the provider's error. The test fails when the upstream's handle,
//! which the test holds, goes (outside a panic) if any violation is left
//! that the test did not take on purpose ([`Violations::take`]): never
//! when the recorder's last clone goes, since that may be in a task a
//! guard spawned, where a panic is lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use refusal_guard_testkit::contract::{Contract, Violation};

/// The violations one upstream answered, shared by its clones.
#[derive(Clone, Default, Debug)]
pub struct Violations(Arc<Recorded>);

#[derive(Default, Debug)]
struct Recorded {
    contract: Contract,
    list: Mutex<Vec<Violation>>,
    /// Every violation recorded, taken or not.
    count: AtomicUsize,
}

fn assert_none(list: &[Violation]) {
    assert!(
        list.is_empty(),
        "the upstream received requests the real API rejects:\n{}",
        list.iter()
            .map(|v| format!("  {v}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

impl Violations {
    /// A recorder for an upstream keeping `contract` (the default: a
    /// first-party upstream, [`Contract::new`]).
    pub fn keeping(contract: Contract) -> Self {
        Violations(Arc::new(Recorded {
            contract,
            list: Mutex::default(),
            count: AtomicUsize::new(0),
        }))
    }

    /// Checks a request (`path` with its query) and records, and logs to
    /// stderr, what it broke.
    pub fn check(
        &self,
        method: &str,
        path: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(), Violation> {
        self.0
            .contract
            .check(method, path, headers, body)
            .inspect_err(|violation| {
                eprintln!("CONTRACT VIOLATION: {violation}");
                self.0.count.fetch_add(1, Ordering::SeqCst);
                self.0.list.lock().unwrap().push(violation.clone());
            })
    }

    /// The violations so far, cleared (for a test that sends a broken
    /// request on purpose).
    pub fn take(&self) -> Vec<Violation> {
        std::mem::take(&mut *self.0.list.lock().unwrap())
    }

    /// How many violations were recorded, those taken included: what a
    /// harness's exit status says, however often it was asked for the list.
    pub fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// The violations so far.
    pub fn list(&self) -> Vec<Violation> {
        self.0.list.lock().unwrap().clone()
    }

    /// Panics listing them, if there are any.
    pub fn assert_none(&self) {
        assert_none(&self.list());
    }
}

/// Asserts, when dropped outside a panic, that its recorder holds no
/// violation: the part of an upstream the test holds, while the recorder
/// lives on in the service's clones, which tasks may keep past the test
/// (a panic in a task the runtime drops fails nothing).
#[derive(Debug)]
pub struct Tripwire(pub Violations);

impl Drop for Tripwire {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.0.assert_none();
        }
    }
}

/// Headers given as (name, value) pairs, as a `HeaderMap` (pairs that are
/// not valid header names or values are left out).
pub fn header_map(pairs: &[(String, String)]) -> http::HeaderMap {
    pairs
        .iter()
        .filter_map(|(name, value)| {
            Some((
                http::HeaderName::from_bytes(name.as_bytes()).ok()?,
                http::HeaderValue::from_str(value).ok()?,
            ))
        })
        .collect()
}

/// A recorder for a hand-written upstream service that the test builds
/// and keeps: the copy made first ([`Checked::default`], [`Checked::keeping`])
/// fails the test when dropped outside a panic if a violation is left; its
/// clones, which the service hands the guard and the guard its tasks, only
/// record. So the check runs where the test drops its upstream, never in a
/// task the runtime drops later.
#[derive(Debug)]
pub struct Checked {
    violations: Violations,
    _tripwire: Option<Tripwire>,
}

impl Checked {
    /// A checking recorder for an upstream keeping `contract`.
    pub fn keeping(contract: Contract) -> Self {
        let violations = Violations::keeping(contract);
        Checked {
            _tripwire: Some(Tripwire(violations.clone())),
            violations,
        }
    }
}

impl Default for Checked {
    /// A checking recorder for a first-party upstream ([`Contract::new`]).
    fn default() -> Self {
        Checked::keeping(Contract::new())
    }
}

impl Clone for Checked {
    /// A copy that records into the same list, without the check.
    fn clone(&self) -> Self {
        Checked {
            violations: self.violations.clone(),
            _tripwire: None,
        }
    }
}

impl std::ops::Deref for Checked {
    type Target = Violations;

    fn deref(&self) -> &Violations {
        &self.violations
    }
}
