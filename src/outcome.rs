//! What one call came to, for a caller whose client crate keeps the
//! response to itself.
//!
//! A guarded response carries its [`Refusal`] and
//! [`RefusalHandle`](crate::RefusalHandle) in its extensions, but client
//! crates (async-openai, rig, most SDKs) read the `http::Response` and hand
//! the caller only what they parsed. A [`CallHandle`] goes the other way: the
//! caller attaches it to the request, as a request extension or, when the
//! client crate builds the request itself, by running the call inside
//! [`CallHandle::scope`]; the guard fills it with the call's
//! [`CallOutcome`] (its refusal, attempts and served model) when the call
//! settles, whatever the client crate then did with the response.
//!
//! ```
//! use refusal_guard_testkit::Simulator;
//! use refusal_guard::{CallHandle, Outcome, RefusalGuardLayer};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let guard = RefusalGuardLayer::new().layer(Simulator::new().shared());
//! let handle = CallHandle::new();
//! let request = http::Request::post("http://simulated/v1/messages")
//!     .header("content-type", "application/json")
//!     .extension(handle.clone())
//!     .body(http_body_util::Full::new(bytes::Bytes::from(
//!         r#"{"model":"claude-opus-4-7","max_tokens":64,
//!             "messages":[{"role":"user","content":"Audit my SSH config"}]}"#,
//!     )))?;
//! // A client crate would read the body and drop the response here.
//! drop(guard.oneshot(request).await?);
//!
//! let outcome = handle.settled().await;
//! assert_eq!(outcome.refusal.map(|r| r.outcome), Some(Outcome::Rescued));
//! assert_eq!(outcome.attempts, 2);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::refusal::Refusal;

/// What one call through the guard came to.
///
/// ```
/// use refusal_guard::outcome::CallOutcome;
/// use refusal_guard::refusal::{Outcome, Refusal, WireApi};
///
/// let refusal = Refusal::new(WireApi::AnthropicMessages, Outcome::Rescued).category("cyber");
/// let outcome = CallOutcome::refused(refusal, 2);
/// assert_eq!(outcome.to_string(), "rescued (cyber)");
/// assert_eq!(CallOutcome::answered(1, Some("claude-x".into())).to_string(), "answered");
/// assert_eq!(CallOutcome::unguarded("not a wire API the guard judges").to_string(),
///            "unguarded: not a wire API the guard judges");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOutcome {
    /// Why the guard judged no response of this call (a request it does not
    /// guard, a body it could not read, a response it does not judge such
    /// as an error status, a timeout, a call that failed before any
    /// response), or `None` when it did.
    pub unguarded: Option<&'static str>,
    /// The refusal the call met, recovered or not, if any.
    pub refusal: Option<Refusal>,
    /// The requests sent upstream for the call, the original included.
    pub attempts: usize,
    /// The model whose response the client received, when known.
    pub served_model: Option<String>,
}

impl CallOutcome {
    /// A call whose response held `refusal`, after `attempts` requests.
    pub fn refused(refusal: Refusal, attempts: usize) -> Self {
        CallOutcome {
            unguarded: None,
            served_model: refusal.served_model.clone(),
            refusal: Some(refusal),
            attempts,
        }
    }

    /// A call answered without a refusal, served by `served_model`.
    pub fn answered(attempts: usize, served_model: Option<String>) -> Self {
        CallOutcome {
            unguarded: None,
            refusal: None,
            attempts,
            served_model,
        }
    }

    /// A call the guard did not judge, and why.
    pub fn unguarded(reason: &'static str) -> Self {
        CallOutcome {
            unguarded: Some(reason),
            refusal: None,
            attempts: 0,
            served_model: None,
        }
    }

    /// Whether the client received a recovered response.
    pub fn recovered(&self) -> bool {
        self.refusal.as_ref().is_some_and(Refusal::recovered)
    }
}

/// `answered`, `unguarded: why`, or the refusal's outcome and category
/// (`rescued (cyber)`, `dead (cyber): rescue_off`).
impl fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.refusal, self.unguarded) {
            (Some(refusal), _) => {
                write!(f, "{} ({})", refusal.outcome, refusal.code())?;
                match refusal.reason {
                    Some(reason) => write!(f, ": {reason}"),
                    None => Ok(()),
                }
            }
            (None, Some(reason)) => write!(f, "unguarded: {reason}"),
            (None, None) => f.write_str("answered"),
        }
    }
}

/// A slot the caller attaches to a request, which the guard fills with the
/// call's [`CallOutcome`] when the call settles (its response body read to
/// the end or dropped; at once for a call it does not judge).
///
/// Attach it as a request extension (`http::request::Builder::extension`,
/// reqwest-middleware's `RequestBuilder::with_extension`), or run the call
/// inside [`scope`](CallHandle::scope) when the client crate builds the
/// request itself. Clones share the slot. Several calls may fill one
/// handle (a retry, an agent's turns in one scope): it keeps the last
/// outcome and counts them.
///
/// ```
/// let handle = refusal_guard::CallHandle::new();
/// assert_eq!(handle.get(), None);
/// assert_eq!(handle.calls(), 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallHandle {
    inner: Arc<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    last: Mutex<(usize, Option<CallOutcome>)>,
    notify: tokio::sync::Notify,
}

tokio::task_local! {
    static SCOPED: CallHandle;
}

impl CallHandle {
    /// An empty handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// The outcome of the last call that settled with this handle.
    pub fn get(&self) -> Option<CallOutcome> {
        self.lock().1.clone()
    }

    /// How many calls have settled with this handle.
    pub fn calls(&self) -> usize {
        self.lock().0
    }

    /// Waits until a call has settled with this handle, then returns the
    /// last outcome. Await it once the call has returned (and its body is
    /// read or dropped): every call the handle reaches settles, but a
    /// handle no call reached waits for one.
    pub async fn settled(&self) -> CallOutcome {
        loop {
            let notified = self.inner.notify.notified();
            if let Some(outcome) = self.get() {
                return outcome;
            }
            notified.await;
        }
    }

    /// Runs `future` with this handle attached to every request the guard
    /// sees while polling it (unless the request carries one of its own):
    /// for client crates that build the request themselves. The guard must
    /// be called from within `future`'s task: a client that spawns the
    /// call onto a task of its own leaves the handle behind.
    ///
    /// ```
    /// # async fn call() {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let handle = refusal_guard::CallHandle::new();
    /// handle.scope(call()).await;
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        SCOPED.scope(self.clone(), future)
    }

    /// The handle of the [`scope`](CallHandle::scope) being polled, if any.
    pub fn current() -> Option<CallHandle> {
        SCOPED.try_with(CallHandle::clone).ok()
    }

    /// Records one call's outcome.
    pub(crate) fn settle(&self, outcome: CallOutcome) {
        {
            let mut last = self.lock();
            last.0 += 1;
            last.1 = Some(outcome);
        }
        self.inner.notify.notify_waiters();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Option<CallOutcome>)> {
        // The slot holds plain values: a panic elsewhere cannot leave it torn.
        self.inner
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
