//! The conversation a call belongs to, named only when someone asks.
//!
//! The default key is a SHA-256 over the system prompt and the first user
//! turn, serialised for it: on a 20 KB request that is most of what the guard
//! spends on a request that needs no recovery. Most requests never need the
//! key (no refusal, no sticky route to look up, nothing in the store to
//! clear), so the default key is computed from the request's original bytes
//! the first time it is asked for, and never otherwise. The bytes are the
//! ones the request was parsed from before any rewrite, so the key is the
//! one an eager computation would give: the same across replicas sharing a
//! store, and across versions.
//!
//! What is kept for it is only the part of the body the key reads
//! ([`seed_part`](crate::dialect::seed_part): the system prompt and the
//! turns up to the first user turn), not the whole conversation: a call's
//! record may be written at the end of a stream that lasts minutes, long
//! after the request's own copy was given back.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::dialect::Dialect;
use crate::store::ConversationKey;

/// A call's conversation: known at once (the user's closure or the
/// guard's header named it), or derived from the request when first asked.
#[derive(Clone)]
pub(crate) struct Conversation(Arc<Naming>);

struct Naming {
    key: OnceLock<Option<ConversationKey>>,
    /// The dialect and the part of the original body the default key is
    /// derived from.
    seed: Option<(&'static dyn Dialect, Bytes)>,
}

impl Conversation {
    /// A conversation already named (or known to have no name).
    pub(crate) fn named(key: Option<ConversationKey>) -> Self {
        Conversation(Arc::new(Naming {
            key: OnceLock::from(key),
            seed: None,
        }))
    }

    /// A conversation named, when asked, from what stays the same across
    /// it in `body`, the request as the client sent it.
    pub(crate) fn derived(dialect: &'static dyn Dialect, body: &Bytes) -> Self {
        let part = crate::dialect::seed_part(&dialect.seed_source(), body)
            .map_or_else(|| body.clone(), Bytes::from);
        Conversation(Arc::new(Naming {
            key: OnceLock::new(),
            seed: Some((dialect, part)),
        }))
    }

    /// The key, computed on the first call.
    pub(crate) fn key(&self) -> Option<&ConversationKey> {
        self.0
            .key
            .get_or_init(|| {
                let (dialect, body) = self.0.seed.as_ref()?;
                let json = serde_json::from_slice::<Value>(body).ok()?;
                let seed = dialect.conversation_seed(&json)?;
                let mut keyed = dialect.wire_api().as_str().as_bytes().to_vec();
                keyed.extend_from_slice(&seed);
                Some(ConversationKey::from_bytes(&keyed))
            })
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::anthropic::AnthropicMessages;

    fn body(later_turns: usize) -> Bytes {
        let turns: Vec<Value> = (0..later_turns)
            .map(|i| serde_json::json!({"role": "assistant", "content": "x".repeat(1000 + i)}))
            .collect();
        let mut messages = vec![serde_json::json!({"role": "user", "content": "first"})];
        messages.extend(turns);
        let body = serde_json::json!({"model": "m", "system": "s", "messages": messages});
        Bytes::from(body.to_string())
    }

    #[test]
    fn a_derived_conversation_keeps_only_what_names_it_and_names_it_as_the_whole_body_does() {
        let long = body(200);
        let conversation = Conversation::derived(&AnthropicMessages, &long);
        let (_, kept) = conversation.0.seed.as_ref().unwrap();
        assert!(
            kept.len() < 100,
            "kept {} of {} bytes",
            kept.len(),
            long.len()
        );
        let whole: Value = serde_json::from_slice(&long).unwrap();
        let seed = AnthropicMessages.conversation_seed(&whole).unwrap();
        let mut keyed = b"anthropic_messages".to_vec();
        keyed.extend_from_slice(&seed);
        assert_eq!(
            conversation.key().map(ConversationKey::as_str),
            Some(ConversationKey::from_bytes(&keyed).as_str())
        );
        // The same conversation a turn later has the same key.
        let later = Conversation::derived(&AnthropicMessages, &body(201));
        assert_eq!(later.key(), conversation.key());
    }
}
