//! A tracing subscriber that keeps every event, so tests can assert what
//! was logged. Install it with `tracing::subscriber::set_default` on a
//! current-thread runtime, so every task logs to it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

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
}

/// The subscriber; clones share the captured events.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<Logged>>>);

impl LogCapture {
    /// The events at `level` from `target`.
    pub fn events(&self, level: Level, target: &str) -> Vec<Logged> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| e.level == level && e.target == target)
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

impl Subscriber for LogCapture {
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
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
