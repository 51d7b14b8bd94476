//! What one simulator has seen: the conversations (how many requests of
//! each, per model), how often each rule met its conditions, the counts,
//! the violations and the requests kept for the test. Bounded: the oldest
//! conversations, violations and requests are forgotten first.

use std::collections::{HashMap, VecDeque};

use super::contract::Violation;
use super::received::Received;

/// Conversations remembered before the oldest are forgotten.
const CONVERSATIONS: usize = 10_000;

/// Violations kept for [`Simulator::take_violations`](super::Simulator::take_violations);
/// older ones are counted only.
pub(crate) const KEPT_VIOLATIONS: usize = 64;

/// Requests kept for [`Simulator::received`](super::Simulator::received)
/// unless set otherwise.
pub(crate) const KEPT_REQUESTS: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct State {
    conversations: HashMap<[u8; 32], Conversation>,
    order: VecDeque<[u8; 32]>,
    /// Per rule, how many requests met its conditions but `call`.
    rule_calls: Vec<u64>,
    pub(crate) requests: u64,
    pub(crate) violations: u64,
    pub(crate) broken: VecDeque<Violation>,
    pub(crate) received: VecDeque<Received>,
}

#[derive(Debug, Default)]
struct Conversation {
    attempts: u32,
    /// Requests per model (a conversation meets few models).
    per_model: Vec<(String, u32)>,
}

impl State {
    /// Counts one more request of `conversation` to `model`: which request
    /// of the conversation it is, and which to that model.
    pub(crate) fn attempt(&mut self, conversation: [u8; 32], model: &str) -> (u32, u32) {
        if !self.conversations.contains_key(&conversation) {
            self.order.push_back(conversation);
            if self.order.len() > CONVERSATIONS {
                if let Some(old) = self.order.pop_front() {
                    self.conversations.remove(&old);
                }
            }
        }
        let seen = self.conversations.entry(conversation).or_default();
        seen.attempts += 1;
        let on_model = match seen.per_model.iter_mut().find(|(m, _)| m == model) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                seen.per_model.push((model.to_owned(), 1));
                1
            }
        };
        (seen.attempts, on_model)
    }

    /// Counts one more request meeting rule `rule`'s conditions; returns
    /// which one it is (from 1).
    pub(crate) fn rule_call(&mut self, rule: usize) -> u64 {
        if self.rule_calls.len() <= rule {
            self.rule_calls.resize(rule + 1, 0);
        }
        self.rule_calls[rule] += 1;
        self.rule_calls[rule]
    }

    pub(crate) fn violated(&mut self, violation: Violation) {
        self.violations += 1;
        if self.broken.len() == KEPT_VIOLATIONS {
            self.broken.pop_front();
        }
        self.broken.push_back(violation);
    }

    pub(crate) fn record(&mut self, received: Received, keep: usize) {
        self.requests += 1;
        if keep == 0 {
            return;
        }
        while self.received.len() >= keep {
            self.received.pop_front();
        }
        self.received.push_back(received);
    }
}
