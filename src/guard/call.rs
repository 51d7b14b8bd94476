//! One guarded call: what every step of it and every record reads (the
//! configuration, the dialect, the model, the conversation, the handle),
//! and the clones of it that outlive the exchange (in a body's settling,
//! in spawned tasks).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Response;

use crate::dialect::{Dialect, RefusalInfo};
use crate::guard::caller::Caller;
use crate::guard::config::Config;
use crate::guard::request::conversation::Conversation;
use crate::guard::request::original::Original;
use crate::guard::request::Incoming;
use crate::guard::timeout::{TimeoutKind, UpstreamTimeout};
use crate::outcome::CallOutcome;
use crate::refusal::{
    Attempt, DeadReason, Outcome, Refusal, RefusalHandle, RefusalKind, RefusalSignal, StickyRoute,
};
use crate::store::StoreFuture;
use crate::telemetry::RefusalRecord;

pin_project_lite::pin_project! {
    /// [`Call::within_deadline`]'s future.
    pub(crate) struct WithinDeadline<F> {
        #[pin]
        timeout: tokio::time::Timeout<F>,
        limit: Duration,
    }
}

impl<F: Future> Future for WithinDeadline<F> {
    type Output = Result<F::Output, UpstreamTimeout>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let limit = *this.limit;
        this.timeout
            .poll(cx)
            .map(|done| done.map_err(|_| UpstreamTimeout::new(TimeoutKind::Hold, limit)))
    }
}

/// Everything known about the call that records and settles need.
#[derive(Clone)]
pub(crate) struct Call {
    /// Metrics and the span of the request; counted when the last clone goes.
    pub(crate) request: Arc<crate::telemetry::metrics::GuardedRequest>,
    /// Set when sticky routing sent the request to another model.
    pub(crate) route: Option<StickyRoute>,
    pub(crate) config: Arc<Config>,
    pub(crate) dialect: &'static dyn Dialect,
    pub(crate) model: Option<String>,
    pub(crate) conversation: Conversation,
    pub(crate) started: Instant,
    pub(crate) handle: RefusalHandle,
    /// The handle the caller attached, filled when the call settles.
    pub(crate) caller: Option<Arc<Caller>>,
}

impl Call {
    /// The call of the guardable request `incoming` whose original is
    /// `original`: counted and traced from here on.
    pub(crate) fn start(incoming: Incoming, original: &Original) -> Self {
        let Incoming {
            config,
            dialect,
            started,
            caller,
            ..
        } = incoming;
        let handle = RefusalHandle::default();
        let request = crate::telemetry::metrics::GuardedRequest::start(
            dialect.provider(),
            dialect.wire_api(),
            original.model.as_deref(),
            original.streaming,
            &handle,
            config.tenant.name(),
        );
        Call {
            request,
            route: original.route.clone(),
            config,
            dialect,
            model: original.model.clone(),
            conversation: original.conversation.clone(),
            started,
            handle,
            caller,
        }
    }

    /// The typed refusal for `info`: empty, of the client's model, with
    /// this outcome; callers set what else they know with struct update.
    pub(crate) fn refusal(&self, info: &RefusalInfo, outcome: Outcome) -> Refusal {
        Refusal {
            provider: self.dialect.provider(),
            wire_api: self.dialect.wire_api(),
            signal: info.signal.unwrap_or(RefusalSignal::StopReason),
            category: info.category.clone(),
            explanation: info.explanation.clone(),
            model: self.model.clone(),
            request_id: None,
            kind: RefusalKind::Empty,
            outcome,
            reason: None,
            served_model: None,
            recommended_model: info.recommended_model.clone(),
            prefill: info.prefill,
        }
    }

    /// Sends the record to the sink and settles the handle.
    pub(crate) fn emit(&self, refusal: &Refusal, attempts: Vec<Attempt>) {
        let latency_ms = millis(self.started.elapsed());
        let attempts_sent = attempts.len();
        self.request.settled(refusal, attempts.len());
        tracing::info!(
            provider = %refusal.provider,
            category = refusal.code(),
            outcome = %refusal.outcome,
            reason = refusal.reason.map(DeadReason::as_str),
            attempts = attempts.len(),
            latency_ms,
            "refusal"
        );
        let mut record = RefusalRecord::new(refusal)
            .attempts(attempts)
            .latency_ms(latency_ms);
        record.conversation = self.conversation.key().map(|k| k.as_str().to_owned());
        record.tenant = Some(self.config.tenant.name().to_owned());
        // A sink (or a routing source) that panics must not take the
        // request down with it.
        let sink = self.config.telemetry.clone();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.record(&record))).is_err()
        {
            tracing::warn!("telemetry sink panicked; record dropped");
        }
        let routing = &self.config.routing;
        let observed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            routing.learn(&record);
        }));
        if observed.is_err() {
            tracing::warn!("routing source panicked on a record");
        }
        self.handle.settle(Some(refusal.clone()));
        if let Some(caller) = &self.caller {
            caller.settle(CallOutcome::refused(refusal.clone(), attempts_sent));
        }
    }

    /// Settles a call whose response held no refusal, after `attempts`
    /// requests upstream.
    pub(crate) fn settle_answered(&self, attempts: usize) {
        self.handle.settle(None);
        if let Some(caller) = &self.caller {
            let served = self
                .route
                .as_ref()
                .map(|route| route.routed_to.clone())
                .or_else(|| self.model.clone());
            caller.settle(CallOutcome::answered(attempts, served));
        }
    }

    /// Settles a call whose response the guard did not judge (an error
    /// status, another content type, a timeout), saying why.
    pub(crate) fn settle_unjudged(&self, why: &'static str) {
        self.handle.settle(None);
        if let Some(caller) = &self.caller {
            caller.settle(CallOutcome {
                attempts: 1,
                ..CallOutcome::unguarded(why)
            });
        }
    }

    /// Puts what every guarded response carries in its extensions.
    pub(crate) fn mark<T>(&self, response: &mut Response<T>) {
        response.extensions_mut().insert(self.handle.clone());
        if let Some(route) = &self.route {
            response.extensions_mut().insert(route.clone());
        }
    }

    /// When holding and recovering must be over.
    pub(crate) fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.started + self.config.budget.deadline)
    }

    /// A deadline as long as the call's, counted from now: for work that
    /// begins once the original was served (continuing a partial refusal).
    pub(crate) fn deadline_from_now(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.config.budget.deadline
    }

    /// `work` (holding the original, in every mode) bounded by the call's
    /// deadline; past it, the hold's timeout. A plain future rather than an
    /// `async fn`: one of those would keep `work` twice, as its argument and
    /// as what it awaits, and the hold is the largest part of every guarded
    /// call's state.
    pub(crate) fn within_deadline<F: Future>(&self, work: F) -> WithinDeadline<F> {
        WithinDeadline {
            timeout: tokio::time::timeout_at(self.deadline(), work),
            limit: self.config.budget.deadline,
        }
    }

    /// Tells the store the conversation produced real output. It never
    /// delays the response: a store that answers at once has done so on
    /// return, a slower one finishes on its own task.
    pub(crate) fn record_output(&self) {
        // A store that holds nothing has nothing to clear: the key is not
        // worth computing.
        let store = self.config.store.clone();
        if !store.may_hold_any() {
            return;
        }
        let Some(key) = self.conversation.key().cloned() else {
            return;
        };
        detach(Box::pin(async move { store.record_output(&key).await }));
    }

    /// Asks the store, within what is left of the call's deadline; a store
    /// that does not answer in time counts as `fallback`.
    pub(crate) async fn ask_store<T>(&self, question: StoreFuture<'_, T>, fallback: T) -> T {
        match tokio::time::timeout_at(self.deadline(), question).await {
            Ok(answer) => answer,
            Err(_elapsed) => {
                tracing::warn!("the conversation store did not answer within the deadline");
                fallback
            }
        }
    }
}

/// Runs `work` as far as it goes now, and the rest on its own task.
fn detach(mut work: StoreFuture<'static, ()>) {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    let waker = std::task::Waker::from(Arc::new(Noop));
    if work
        .as_mut()
        .poll(&mut std::task::Context::from_waker(&waker))
        .is_ready()
    {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(work);
        }
        Err(_) => tracing::warn!("no runtime to finish a conversation store update on"),
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
