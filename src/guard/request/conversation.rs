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

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::Value;

use crate::dialect::skim::{locate, Located};
use crate::dialect::{seed_part, Dialect};
use crate::replay::chunks::Chunks;
use crate::store::ConversationKey;

/// A call's conversation: known at once (the user's closure or the
/// guard's header named it), or derived from the request when first asked.
#[derive(Clone)]
pub(crate) struct Conversation(Arc<Naming>);

/// Bodies up to this long are cut down to the key's part whenever that is
/// shorter; longer ones only when it is at most a quarter of them.
const SHORT_BODY: usize = 64 * 1024;

struct Naming {
    key: OnceLock<Option<ConversationKey>>,
    /// What the default key is derived from, until it is.
    seed: Mutex<Option<Seed>>,
}

/// The dialect and the request as the client sent it (once the call is
/// decided, only the part of it the key reads), with where its top-level
/// members are when the head's skim found them.
struct Seed {
    dialect: &'static dyn Dialect,
    body: Chunks,
    members: Option<Vec<Located>>,
    compacted: bool,
    /// Whose conversations these are, when not the default tenant's.
    scope: Option<String>,
}

impl Conversation {
    /// A conversation already named (or known to have no name).
    pub(crate) fn named(key: Option<ConversationKey>) -> Self {
        Conversation(Arc::new(Naming {
            key: OnceLock::from(key),
            seed: Mutex::new(None),
        }))
    }

    /// A conversation named, when asked, from what stays the same across
    /// it in `body`, the request as the client sent it; `members`: where
    /// its top-level members are, if known.
    pub(crate) fn derived(
        dialect: &'static dyn Dialect,
        body: Chunks,
        members: Option<Vec<Located>>,
    ) -> Self {
        let seed = Seed {
            dialect,
            body,
            members,
            compacted: false,
            scope: None,
        };
        Conversation(Arc::new(Naming {
            key: OnceLock::new(),
            seed: Mutex::new(Some(seed)),
        }))
    }

    /// Keeps the derived key apart from every other scope's (a tenant's
    /// name): the same conversation of two tenants has two keys. `None`
    /// (the default tenant) leaves the key as it always was.
    pub(crate) fn scoped(self, scope: Option<&str>) -> Self {
        if let (Some(scope), Ok(mut seed)) = (scope, self.0.seed.lock()) {
            if let Some(seed) = seed.as_mut() {
                seed.scope = Some(scope.to_owned());
            }
        }
        self
    }

    /// The call is decided, and only the key may still need the request:
    /// of a request kept for the key, only the part the key reads is kept
    /// from now on ([`seed_part`]), and nothing once the key is known. A
    /// stream may run for minutes after its decision, with an agent's
    /// whole conversation as its request.
    pub(crate) fn compact(&self) {
        let Ok(mut seed) = self.0.seed.lock() else {
            return;
        };
        if self.0.key.get().is_some() {
            *seed = None;
            return;
        }
        let Some(seed) = seed.as_mut().filter(|seed| !seed.compacted) else {
            return;
        };
        seed.compacted = true;
        let Some(reach) = seed.dialect.seed_reach() else {
            return;
        };
        // A short body is one piece, cheap to cut from; of a long one, a
        // part most of its length would cost a copy for little room.
        let len = seed.body.len();
        let budget = if len <= SHORT_BODY {
            len.saturating_sub(1)
        } else {
            len / 4
        };
        let body = seed.body.as_slice();
        let located = seed.members.take().or_else(|| locate(body));
        if let Some(part) = located.and_then(|members| seed_part(body, &members, &reach, budget)) {
            seed.body = Chunks::from(Bytes::from(part));
        }
    }

    /// The key, computed on the first call.
    pub(crate) fn key(&self) -> Option<&ConversationKey> {
        self.0
            .key
            .get_or_init(|| {
                let Seed {
                    dialect,
                    body,
                    scope,
                    ..
                } = self.0.seed.lock().ok()?.take()?;
                let json = serde_json::from_slice::<Value>(&body.join()).ok()?;
                let seed = dialect.conversation_seed(&json)?;
                let mut keyed = scoped(scope.as_deref(), dialect.wire_api().as_str().as_bytes());
                keyed.extend_from_slice(&seed);
                Some(ConversationKey::from_bytes(&keyed))
            })
            .as_ref()
    }
}

/// `bytes` within `scope`: the scope's name and a NUL before them, or
/// them alone without one.
pub(crate) fn scoped(scope: Option<&str>, bytes: &[u8]) -> Vec<u8> {
    match scope {
        Some(scope) => [scope.as_bytes(), b"\0", bytes].concat(),
        None => bytes.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dialect(path: &str) -> &'static dyn Dialect {
        crate::dialect::recognise(&http::Method::POST, &path.parse().unwrap())
            .unwrap()
            .dialect
    }

    /// The key of `body`, from the whole request and from the part kept
    /// once the call is decided, and how long that part is.
    fn keys(path: &str, body: &str) -> (Option<ConversationKey>, Option<ConversationKey>, usize) {
        let whole = Conversation::derived(
            dialect(path),
            Chunks::from(Bytes::from(body.to_owned())),
            None,
        );
        let members = locate(&[body.as_bytes()]);
        let kept = Conversation::derived(
            dialect(path),
            Chunks::from(Bytes::from(body.to_owned())),
            members,
        );
        kept.compact();
        let len = kept
            .0
            .seed
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |seed| seed.body.len());
        (whole.key().cloned(), kept.key().cloned(), len)
    }

    #[test]
    fn a_decided_call_keeps_only_what_its_key_reads_and_the_key_is_the_same() {
        let history = "x".repeat(10_000);
        let cases = [
            (
                "/v1/messages",
                format!(
                    r#"{{"model":"m","max_tokens":9,"messages":[{{"role":"user","content":[{{"type":"text","text":"fix it","cache_control":{{"type":"ephemeral"}}}}]}},{{"role":"assistant","content":"{history}"}},{{"role":"user","content":"more"}}],"system":[{{"type":"text","text":"be brief"}}],"tools":[{{"name":"t","input_schema":{{}},"description":"{history}"}}],"stream":true}}"#
                ),
            ),
            (
                "/v1/messages",
                format!(
                    r#"{{"system":"s","messages":[{{"role":"assistant","content":"prefill"}},{{"content":"q","role":"user"}},{{"role":"assistant","content":"{history}"}}]}}"#
                ),
            ),
            (
                "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
                format!(
                    r#"{{"contents":[{{"parts":[{{"text":"q"}}]}},{{"role":"model","parts":[{{"text":"{history}"}}]}}],"systemInstruction":{{"parts":[{{"text":"s"}}]}}}}"#
                ),
            ),
            (
                "/v1/responses",
                format!(
                    r#"{{"model":"m","instructions":"s","input":[{{"role":"developer","content":"d"}},{{"role":"user","content":"q"}},{{"type":"message","role":"assistant","content":"{history}"}}],"stream":true}}"#
                ),
            ),
        ];
        for (path, body) in &cases {
            let (whole, kept, len) = keys(path, body);
            assert!(whole.is_some(), "{path}: a key");
            assert_eq!(whole, kept, "{path}: the same key from the part kept");
            assert!(len < 1_000, "{path}: {len} bytes kept of {}", body.len());
        }
    }

    #[test]
    fn what_cannot_be_cut_exactly_is_kept_whole() {
        let history = "x".repeat(10_000);
        // Chat's seed reads system messages anywhere in the conversation.
        let chat = format!(
            r#"{{"messages":[{{"role":"user","content":"q"}},{{"role":"assistant","content":"{history}"}},{{"role":"system","content":"late"}}]}}"#
        );
        // An escaped role is only told apart by a full parse.
        let escaped = format!(
            r#"{{"messages":[{{"role":"us\u0065r","content":"q"}},{{"role":"assistant","content":"{history}"}}]}}"#
        );
        for (path, body) in [("/v1/chat/completions", &chat), ("/v1/messages", &escaped)] {
            let (whole, kept, len) = keys(path, body);
            assert!(whole.is_some());
            assert_eq!(whole, kept, "{path}");
            assert_eq!(len, body.len(), "{path}: kept whole");
        }
    }

    #[test]
    fn a_long_request_is_cut_only_when_the_key_reads_little_of_it() {
        let long = "x".repeat(100_000);
        let agent = format!(
            r#"{{"system":"s","messages":[{{"role":"user","content":"q"}},{{"role":"assistant","content":"{long}"}}]}}"#
        );
        let (whole, kept, len) = keys("/v1/messages", &agent);
        assert_eq!(whole, kept);
        assert!(len < 100, "cut to {len} bytes");
        // Most of it is the system prompt: a copy would free little.
        let prompt = format!(
            r#"{{"system":"{long}","messages":[{{"role":"user","content":"q"}},{{"role":"assistant","content":"{long}"}}]}}"#
        );
        let (whole, kept, len) = keys("/v1/messages", &prompt);
        assert_eq!(whole, kept);
        assert_eq!(len, prompt.len(), "kept whole");
    }

    #[test]
    fn a_key_already_known_leaves_nothing_kept() {
        let body = r#"{"messages":[{"role":"user","content":"q"}]}"#;
        let conversation = Conversation::derived(
            dialect("/v1/messages"),
            Chunks::from(Bytes::from(body)),
            None,
        );
        let key = conversation.key().cloned();
        conversation.compact();
        assert!(conversation.0.seed.lock().unwrap().is_none());
        assert_eq!(conversation.key().cloned(), key);
    }

    fn key_of(dialect: &'static dyn Dialect, body: &Value) -> String {
        let body = Chunks::from(Bytes::from(body.to_string()));
        let conversation = Conversation::derived(dialect, body, None);
        conversation.key().unwrap().as_str().to_owned()
    }

    /// Keys of conversations with no prompt-caching mark, as the guard has
    /// always computed them: a change to what the seed leaves out must not
    /// move them (a shared store and sticky routes outlive an upgrade).
    #[test]
    fn an_unmarked_conversation_keeps_its_key() {
        use crate::dialect::anthropic::AnthropicMessages;
        use crate::dialect::openai::chat::OpenAiChat;

        let anthropic = json!({"model": "m", "system": [{"type": "text", "text": "You are an agent."}],
            "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "build failed"}]},
                {"type": "text", "text": "fix the build"}]},
                {"role": "assistant", "content": "done"}]});
        assert_eq!(
            key_of(&AnthropicMessages, &anthropic),
            "4d590e46ac64fa507a2388d2ede06d57"
        );
        let chat = json!({"model": "m", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are an agent."}]},
            {"role": "user", "content": [{"type": "text", "text": "fix the build"}]}]});
        assert_eq!(
            key_of(&OpenAiChat, &chat),
            "fded4092e1fa2d4420b82e12b141786e"
        );
        #[cfg(feature = "bedrock")]
        {
            use crate::dialect::bedrock::BedrockConverse;
            let converse = json!({"system": [{"text": "You are an agent."}],
                "messages": [{"role": "user", "content": [
                    {"toolResult": {"toolUseId": "t1", "content": [{"text": "build failed"}]}},
                    {"text": "fix the build"}]}]});
            assert_eq!(
                key_of(&BedrockConverse, &converse),
                "287eb0dd19cb8b14aef26655ddfd53f0"
            );
        }
    }
}
