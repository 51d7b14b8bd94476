//! The trace a sticky route leaves when it ends: the conversation's next
//! request went to the model the client asked for again.

use serde::{Deserialize, Serialize};

use super::format_ts;

/// A sticky fallback route that ended (its TTL ran out): the conversation's
/// next request went to its primary model again. Sent to
/// [`TelemetrySink::route_restored`](super::TelemetrySink::route_restored)
/// once per ended route, when the conversation's next request arrives.
///
/// As a JSON line it carries `"event": "route_restored"` and no `outcome`,
/// so readers of refusal records skip it and the
/// proxy's report (`refusal_guard_proxy::Report`) counts it apart.
///
/// ```
/// use refusal_guard::telemetry::RouteRestored;
///
/// let event = RouteRestored::new(Some("c0ffee".into()), Some("claude-opus-4-7".into()), "claude-sonnet-4-5");
/// let line = String::from_utf8(event.to_json_line()).unwrap();
/// assert!(line.contains(r#""event":"route_restored""#) && line.ends_with('\n'));
/// assert_eq!(RouteRestored::from_json_line(line.as_bytes()), Some(event));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RouteRestored {
    /// When, as [`format_ts`] writes it.
    pub ts: String,
    /// Always [`RouteRestored::EVENT`]: tells this line from a refusal record.
    pub event: String,
    /// The hashed key of the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// The primary model, asked for again (the request's own model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The model the sticky route had sent the conversation to.
    pub routed_to: String,
}

impl RouteRestored {
    /// The `event` word of these lines.
    pub const EVENT: &'static str = "route_restored";

    /// The event now, for a conversation routed to `routed_to` until now.
    pub fn new(
        conversation: Option<String>,
        model: Option<String>,
        routed_to: impl Into<String>,
    ) -> Self {
        RouteRestored {
            ts: format_ts(std::time::SystemTime::now()),
            event: Self::EVENT.to_owned(),
            conversation,
            model,
            routed_to: routed_to.into(),
        }
    }

    /// One JSON line, newline included.
    pub fn to_json_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// The event a log line holds, if it holds one.
    pub fn from_json_line(line: &[u8]) -> Option<Self> {
        serde_json::from_slice::<RouteRestored>(line)
            .ok()
            .filter(|event| event.event == Self::EVENT)
    }
}
