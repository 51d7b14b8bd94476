//! A tracing subscriber that keeps every event, so tests can assert what
//! was logged.
//!
//! It is installed once as the global default: a subscriber set per thread
//! races with tracing's per-callsite cache when tests run in parallel (a
//! callsite first reached by another test can stay disabled). Each test
//! reads the events of its own thread, so run it on a current-thread
//! runtime (`#[tokio::test]`'s default), where every task logs there.
#![allow(dead_code)]

use std::sync::{Arc, Mutex, OnceLock};
use std::thread::ThreadId;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// One captured event.
#[derive(Debug, Clone)]
pub struct Logged {
    pub level: Level,
    pub target: String,
    pub message: String,
    thread: ThreadId,
}

/// The subscriber; clones share the captured events.
#[derive(Clone, Default)]
struct Subscribed(Arc<Mutex<Vec<Logged>>>);

/// The events logged on one thread from the moment it was created.
pub struct LogCapture {
    events: Arc<Mutex<Vec<Logged>>>,
    thread: ThreadId,
    from: usize,
}

impl LogCapture {
    /// Starts capturing what the current thread logs.
    pub fn this_thread() -> LogCapture {
        static GLOBAL: OnceLock<Subscribed> = OnceLock::new();
        let subscribed = GLOBAL.get_or_init(|| {
            let subscribed = Subscribed::default();
            tracing::subscriber::set_global_default(subscribed.clone())
                .expect("no other global subscriber in this test binary");
            subscribed
        });
        let from = subscribed.0.lock().unwrap().len();
        LogCapture {
            events: subscribed.0.clone(),
            thread: std::thread::current().id(),
            from,
        }
    }

    /// The events at `level` from `target`.
    pub fn events(&self, level: Level, target: &str) -> Vec<Logged> {
        let events = self.events.lock().unwrap();
        events[self.from..]
            .iter()
            .filter(|e| e.thread == self.thread && e.level == level && e.target == target)
            .cloned()
            .collect()
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Subscribed {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut message = Message(String::new());
        event.record(&mut message);
        let meta = event.metadata();
        self.0.lock().unwrap().push(Logged {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: message.0,
            thread: std::thread::current().id(),
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
