//! A tracing subscriber that keeps every event, so tests can assert what
//! was logged; and [`SharedBuffer`], where a formatting subscriber writes.
//!
//! It is installed once as the global default: a subscriber set per thread
//! races with tracing's per-callsite cache when tests run in parallel (a
//! callsite first reached by another test can stay disabled). Each test
//! reads the events of its own thread, so run it on a current-thread
//! runtime (`#[tokio::test]`'s default), where every task logs there.

use std::io::Write;
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
    /// Every field, `str` values as they are and the rest by `Debug`.
    pub fields: Vec<(String, String)>,
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
        self.all()
            .into_iter()
            .filter(|e| e.level == level && e.target == target)
            .collect()
    }

    /// Every event, in the order logged.
    pub fn all(&self) -> Vec<Logged> {
        let events = self.events.lock().unwrap();
        events[self.from..]
            .iter()
            .filter(|e| e.thread == self.thread)
            .cloned()
            .collect()
    }
}

/// What an event carries: its message, and every field.
#[derive(Default)]
struct Message {
    message: String,
    fields: Vec<(String, String)>,
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
        self.fields
            .push((field.name().to_owned(), value.to_owned()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.message = value.clone();
        }
        self.fields.push((field.name().to_owned(), value));
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
        let mut message = Message::default();
        event.record(&mut message);
        let meta = event.metadata();
        self.0.lock().unwrap().push(Logged {
            level: *meta.level(),
            target: meta.target().to_owned(),
            message: message.message,
            fields: message.fields,
            thread: std::thread::current().id(),
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// A writer into a buffer its clones share: give a formatting subscriber
/// `move || buffer.clone()` and read what it wrote from `buffer.0`.
#[derive(Clone, Default)]
pub struct SharedBuffer(pub Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
