//! The span side of the export: a bounded queue between the spans that
//! end (on the requests' tasks) and the exporter, drained in batches by a
//! task on the runtime.
//!
//! Hand-written rather than the SDK's `BatchSpanProcessor`, which does the
//! same but keeps its count of dropped spans to itself (a log line at
//! shutdown) and does not count a batch the collector refused: here both
//! are counted, as `refusal_guard_otlp_dropped_spans_total`, beside the
//! spans delivered.

use std::time::Duration;

use metrics::counter;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, oneshot};

use refusal_guard::telemetry::metrics::{OTLP_DROPPED_SPANS, OTLP_EXPORTED_SPANS};

/// The queue's bounds and pace, from the `OTEL_BSP_*` variables (the SDK's
/// batch processor's own, with its defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueSettings {
    /// Spans queued at most; more are dropped.
    capacity: usize,
    /// Spans sent in one export at most.
    batch: usize,
    /// How long a span may wait for a batch to fill.
    delay: Duration,
    /// How long one export may take before its spans count as dropped.
    timeout: Duration,
}

impl QueueSettings {
    pub(crate) fn from_env(var: &impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str, default: u64| {
            var(name)
                .and_then(|value| value.trim().parse::<u64>().ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        let capacity = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048) as usize;
        QueueSettings {
            capacity,
            batch: (number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512) as usize).min(capacity),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
            timeout: Duration::from_millis(number("OTEL_BSP_EXPORT_TIMEOUT", 30_000)),
        }
    }
}

/// What the queue's task is asked besides spans.
enum Control {
    /// Send everything queued, then say so.
    Flush(oneshot::Sender<()>),
    /// Send everything queued, shut the exporter down, say so and stop.
    Shutdown(oneshot::Sender<()>),
}

/// The processor the tracer provider hands ended spans to: it only queues
/// them, never waiting.
#[derive(Debug)]
pub(crate) struct SpanQueue {
    spans: mpsc::Sender<SpanData>,
    control: mpsc::Sender<Control>,
}

/// The queue's controls, kept by [`super::Otlp`] for its shutdown.
#[derive(Debug, Clone)]
pub(crate) struct Flush {
    control: mpsc::Sender<Control>,
}

impl SpanQueue {
    /// Starts the task that drains the queue into `exporter`, on the
    /// current runtime.
    pub(crate) fn start<E>(exporter: E, settings: QueueSettings) -> (SpanQueue, Flush)
    where
        E: SpanExporter + 'static,
    {
        let (spans, queued) = mpsc::channel(settings.capacity);
        let (control, asked) = mpsc::channel(4);
        let drain = Drain {
            exporter,
            settings,
            batch: Vec::with_capacity(settings.batch),
            failing: false,
        };
        tokio::spawn(drain.run(queued, asked));
        let flush = Flush {
            control: control.clone(),
        };
        (SpanQueue { spans, control }, flush)
    }
}

impl Flush {
    /// Asks the task to send what is queued and stop; completes when it
    /// has (or at once, if it already stopped).
    pub(crate) async fn shutdown(self) {
        let (done, sent) = oneshot::channel();
        if self.control.send(Control::Shutdown(done)).await.is_ok() {
            let _ = sent.await;
        }
    }

    /// Asks the task to send what is queued; completes when it has.
    #[cfg(test)]
    pub(crate) async fn flush(&self) {
        let (done, sent) = oneshot::channel();
        if self.control.send(Control::Flush(done)).await.is_ok() {
            let _ = sent.await;
        }
    }
}

impl SpanProcessor for SpanQueue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.spans.try_send(span).is_err() {
            dropped("queue_full", 1);
        }
    }

    /// Asks for a flush without waiting for it: this runs on a request's
    /// thread, which must not block on the collector.
    fn force_flush(&self) -> OTelSdkResult {
        let (done, _) = oneshot::channel();
        let _ = self.control.try_send(Control::Flush(done));
        Ok(())
    }

    /// Asks the task to stop without waiting ([`Flush::shutdown`] waits).
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        let (done, _) = oneshot::channel();
        let _ = self.control.try_send(Control::Shutdown(done));
        Ok(())
    }
}

/// Counts `count` spans dropped for `reason`.
fn dropped(reason: &'static str, count: u64) {
    counter!(OTLP_DROPPED_SPANS, "reason" => reason).increment(count);
}

/// The task's side: the exporter and the batch being filled.
struct Drain<E> {
    exporter: E,
    settings: QueueSettings,
    batch: Vec<SpanData>,
    /// The last export failed (said once, not per batch).
    failing: bool,
}

impl<E: SpanExporter + 'static> Drain<E> {
    async fn run(
        mut self,
        mut queued: mpsc::Receiver<SpanData>,
        mut asked: mpsc::Receiver<Control>,
    ) {
        let mut tick = tokio::time::interval(self.settings.delay);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                control = asked.recv() => {
                    while let Ok(span) = queued.try_recv() {
                        self.add(span).await;
                    }
                    self.export().await;
                    match control {
                        Some(Control::Flush(done)) => {
                            let _ = done.send(());
                        }
                        Some(Control::Shutdown(done)) => {
                            let _ = self.exporter.shutdown();
                            let _ = done.send(());
                            return;
                        }
                        None => return,
                    }
                }
                span = queued.recv() => match span {
                    Some(span) => self.add(span).await,
                    None => {
                        self.export().await;
                        return;
                    }
                },
                _ = tick.tick() => self.export().await,
            }
        }
    }

    /// Adds a span to the batch, sending the batch once it is full.
    async fn add(&mut self, span: SpanData) {
        self.batch.push(span);
        if self.batch.len() >= self.settings.batch {
            self.export().await;
        }
    }

    /// Sends the batch, within the export timeout; its spans count as
    /// exported or as dropped.
    async fn export(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(self.settings.batch));
        let count = batch.len() as u64;
        let sent = tokio::time::timeout(self.settings.timeout, self.exporter.export(batch)).await;
        let failure = match sent {
            Ok(Ok(())) => {
                counter!(OTLP_EXPORTED_SPANS).increment(count);
                if std::mem::take(&mut self.failing) {
                    tracing::info!(target: "refusal_guard::otlp", "OTLP span export works again");
                }
                return;
            }
            Ok(Err(error)) => ("export_failed", error.to_string()),
            Err(_) => (
                "timeout",
                format!("no answer within {:?}", self.settings.timeout),
            ),
        };
        dropped(failure.0, count);
        if !std::mem::replace(&mut self.failing, true) {
            tracing::warn!(
                target: "refusal_guard::otlp",
                spans = count,
                error = %failure.1,
                "OTLP span export failed; spans are dropped (and counted) until it works again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::error::OTelSdkError;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A collector that takes batches, or fails every batch while `down`.
    #[derive(Debug, Default)]
    struct Collector {
        received: AtomicUsize,
        down: AtomicBool,
    }

    /// The exporter in front of a shared [`Collector`].
    #[derive(Debug)]
    struct To(Arc<Collector>);

    impl SpanExporter for To {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if self.0.down.load(Ordering::SeqCst) {
                return Err(OTelSdkError::InternalFailure("collector down".into()));
            }
            self.0.received.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn span() -> SpanData {
        use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "test".into(),
            start_time: std::time::SystemTime::now(),
            end_time: std::time::SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    fn settings(capacity: usize) -> QueueSettings {
        QueueSettings {
            capacity,
            batch: capacity,
            delay: Duration::from_secs(3600),
            timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_drops_spans_instead_of_waiting() {
        let collector = Arc::new(Collector::default());
        let (queue, flush) = SpanQueue::start(To(collector.clone()), settings(4));
        // The task has not run yet (one thread): the fifth span finds the
        // queue full and on_end returns at once.
        for _ in 0..6 {
            queue.on_end(span());
        }
        flush.flush().await;
        assert_eq!(collector.received.load(Ordering::SeqCst), 4);
        flush.shutdown().await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_batch_is_dropped_and_the_next_one_is_sent() {
        let collector = Arc::new(Collector::default());
        let (queue, flush) = SpanQueue::start(To(collector.clone()), settings(8));
        collector.down.store(true, Ordering::SeqCst);
        queue.on_end(span());
        queue.on_end(span());
        flush.flush().await;
        assert_eq!(collector.received.load(Ordering::SeqCst), 0);
        collector.down.store(false, Ordering::SeqCst);
        queue.on_end(span());
        flush.flush().await;
        assert_eq!(collector.received.load(Ordering::SeqCst), 1);
        flush.shutdown().await;
    }

    #[test]
    fn settings_follow_the_bsp_variables() {
        let none = QueueSettings::from_env(&|_: &str| None);
        assert_eq!(none.capacity, 2048);
        assert_eq!(none.batch, 512);
        assert_eq!(none.delay, Duration::from_secs(5));
        let set = |key: &str| match key {
            "OTEL_BSP_MAX_QUEUE_SIZE" => Some("100".to_owned()),
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" => Some("500".to_owned()),
            "OTEL_BSP_SCHEDULE_DELAY" => Some("nonsense".to_owned()),
            _ => None,
        };
        let set = QueueSettings::from_env(&set);
        assert_eq!((set.capacity, set.batch), (100, 100));
        assert_eq!(set.delay, Duration::from_secs(5));
    }
}
