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

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::chunks::Chunks;
use crate::dialect::Dialect;
use crate::store::ConversationKey;

/// A call's conversation: known at once (the user's closure or the
/// guard's header named it), or derived from the request when first asked.
#[derive(Clone)]
pub(crate) struct Conversation(Arc<Naming>);

struct Naming {
    key: OnceLock<Option<ConversationKey>>,
    /// The dialect and the original body the default key is derived from.
    seed: Option<(&'static dyn Dialect, Chunks)>,
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
    pub(crate) fn derived(dialect: &'static dyn Dialect, body: Chunks) -> Self {
        Conversation(Arc::new(Naming {
            key: OnceLock::new(),
            seed: Some((dialect, body)),
        }))
    }

    /// The key, computed on the first call.
    pub(crate) fn key(&self) -> Option<&ConversationKey> {
        self.0
            .key
            .get_or_init(|| {
                let (dialect, body) = self.0.seed.as_ref()?;
                let json = serde_json::from_slice::<Value>(&body.join()).ok()?;
                let seed = dialect.conversation_seed(&json)?;
                let mut keyed = dialect.wire_api().as_str().as_bytes().to_vec();
                keyed.extend_from_slice(&seed);
                Some(ConversationKey::from_bytes(&keyed))
            })
            .as_ref()
    }
}
