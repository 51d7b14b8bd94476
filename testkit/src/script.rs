//! The script: what the simulator answers ([`Reply`]) and to which requests
//! ([`When`]), and the seeded draw that `rate` rules compare against.

use std::fmt;

use http::StatusCode;
use sha2::{Digest, Sha256};

/// The category a refusal carries when neither the reply nor the prompt's
/// category (see [`Simulator::categorize`](super::Simulator::categorize))
/// names one.
///
/// ```
/// use refusal_guard_testkit::{Reply, Simulator, When, CATEGORY};
///
/// let simulator = Simulator::answering().when(When::any(), Reply::refusal());
/// let (parts, ()) = http::Request::post("/v1/responses").body(()).unwrap().into_parts();
/// simulator.respond(&parts, br#"{"model":"gpt-5","input":"hi"}"#);
/// let reply = simulator.received()[0].reply.clone().unwrap();
/// assert_eq!(reply.category_named(), Some(CATEGORY));
/// ```
pub const CATEGORY: &str = "cyber";

/// The explanation a refusal carries unless the reply gives its own.
///
/// ```
/// use refusal_guard_testkit::{Reply, EXPLANATION};
///
/// assert_eq!(Reply::refusal().explanation_sent(), EXPLANATION);
/// ```
pub const EXPLANATION: &str = "Simulated refusal: the simulator's script declined this request.";

/// The text of a simulated answer, unless the reply gives its own.
///
/// ```
/// use refusal_guard_testkit::{Reply, ANSWER};
///
/// assert_eq!(Reply::answer().text_sent(), ANSWER);
/// ```
pub const ANSWER: &str = "Simulated answer: here is the defensive version of what you asked \
     for, step by step, with nothing that would help an attacker.";

/// The message of an error-shaped Anthropic refusal, as the Messages API
/// sends it.
///
/// ```
/// use refusal_guard_testkit::{Reply, Simulator, When, OUTPUT_BLOCKED};
///
/// let simulator = Simulator::answering().when(When::any(), Reply::blocked());
/// let (parts, ()) = http::Request::post("/v1/messages").body(()).unwrap().into_parts();
/// let body = br#"{"model":"claude-opus-4-7","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
/// let response = simulator.respond(&parts, body);
/// assert_eq!(response.status(), 400);
/// # let _ = OUTPUT_BLOCKED;
/// ```
pub const OUTPUT_BLOCKED: &str = "Output blocked by content filtering policy";

/// What kind of reply a [`Reply`] is.
///
/// ```
/// use refusal_guard_testkit::{Reply, ReplyKind};
///
/// assert_eq!(Reply::partial("Step 1: ").kind(), ReplyKind::Partial);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyKind {
    /// A plain answer.
    Answer,
    /// An empty refusal: the API's refusal signal before any output.
    Refusal,
    /// A partial refusal: some text, then the API's refusal signal.
    Partial,
    /// An error-shaped refusal: Anthropic's 400 "Output blocked", OpenAI's
    /// 400 policy error, Gemini's blocked prompt.
    Blocked,
    /// A plain error of the provider (429, 500, 529 …) in the API's shape.
    Error,
}

impl ReplyKind {
    /// The snake-case name (`answer`, `refusal`, `partial`, `blocked`,
    /// `error`).
    ///
    /// ```
    /// use refusal_guard_testkit::ReplyKind;
    ///
    /// assert_eq!(ReplyKind::Blocked.as_str(), "blocked");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyKind::Answer => "answer",
            ReplyKind::Refusal => "refusal",
            ReplyKind::Partial => "partial",
            ReplyKind::Blocked => "blocked",
            ReplyKind::Error => "error",
        }
    }

    /// Whether it is a refusal of some shape (empty, partial or blocked).
    ///
    /// ```
    /// use refusal_guard_testkit::ReplyKind;
    ///
    /// assert!(ReplyKind::Partial.is_refusal());
    /// assert!(!ReplyKind::Error.is_refusal());
    /// ```
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            ReplyKind::Refusal | ReplyKind::Partial | ReplyKind::Blocked
        )
    }
}

impl fmt::Display for ReplyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the simulator answers one request with, in the request's wire API
/// (streamed when the request asked for a stream). Built by one of the
/// constructors, then refined:
///
/// | | Anthropic Messages | Chat Completions | Responses | Gemini |
/// |---|---|---|---|---|
/// | [`answer`](Self::answer) | `end_turn` | `stop` | `completed` | `STOP` |
/// | [`refusal`](Self::refusal) | `stop_reason: "refusal"`, `stop_details` | `content_filter`, no content | `incomplete`, `content_filter` | `finishReason: "SAFETY"`, no parts |
/// | [`partial`](Self::partial) | text, then `refusal` | text, then `content_filter` | text, then `incomplete` | text, then `SAFETY` |
/// | [`blocked`](Self::blocked) | 400 "Output blocked by content filtering policy" | 400, `error.code` | 400, `error.code` | `promptFeedback.blockReason` |
/// | [`error`](Self::error) | the API's error shape | the same | the same | the same |
///
/// ```
/// use refusal_guard_testkit::{Reply, ReplyKind};
///
/// let reply = Reply::refusal().category("bio").explanation("Declined.");
/// assert_eq!(reply.kind(), ReplyKind::Refusal);
/// assert_eq!(reply.category_named(), Some("bio"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    kind: ReplyKind,
    text: Option<String>,
    category: Option<String>,
    explanation: Option<String>,
    code: Option<String>,
    status: StatusCode,
    retry_after: Option<u64>,
}

impl Reply {
    fn of(kind: ReplyKind) -> Self {
        Reply {
            kind,
            text: None,
            category: None,
            explanation: None,
            code: None,
            status: StatusCode::OK,
            retry_after: None,
        }
    }

    /// A plain answer ([`ANSWER`] unless [`text`](Self::text) gives
    /// another).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::answer().text("Done.").text_sent(), "Done.");
    /// ```
    pub fn answer() -> Self {
        Reply::of(ReplyKind::Answer)
    }

    /// An empty refusal: the API's refusal signal before any output.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::refusal().text_sent(), "");
    /// ```
    pub fn refusal() -> Self {
        Reply::of(ReplyKind::Refusal)
    }

    /// A partial refusal: `text`, then the API's refusal signal ("refuse
    /// after this text"). The guard passes it through as sent.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::partial("Step 1: ").text_sent(), "Step 1: ");
    /// ```
    pub fn partial(text: impl Into<String>) -> Self {
        Reply {
            text: Some(text.into()),
            ..Reply::of(ReplyKind::Partial)
        }
    }

    /// An error-shaped refusal, as each API sends one: Anthropic's HTTP 400
    /// `invalid_request_error` "Output blocked by content filtering policy";
    /// OpenAI's HTTP 400 policy error (`error.code` `cyber_policy` for the
    /// category `cyber`, on Responses `bio_policy` for `bio`, else
    /// `invalid_prompt`; [`code`](Self::code) sets another); Gemini's
    /// blocked prompt, `promptFeedback.blockReason` `SAFETY` (or the
    /// [`code`](Self::code)) with no candidates.
    ///
    /// ```
    /// use refusal_guard_testkit::{Reply, ReplyKind};
    ///
    /// assert_eq!(Reply::blocked().kind(), ReplyKind::Blocked);
    /// ```
    pub fn blocked() -> Self {
        Reply::of(ReplyKind::Blocked)
    }

    /// OpenAI's policy error with this `error.code` ("fail with
    /// `cyber_policy`"): [`blocked`](Self::blocked) with
    /// [`code`](Self::code).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::policy_error("bio_policy"), Reply::blocked().code("bio_policy"));
    /// ```
    pub fn policy_error(code: impl Into<String>) -> Self {
        Reply::blocked().code(code)
    }

    /// A plain provider error with this status (a 429, a 500, Anthropic's
    /// 529 …), in the API's own error shape; not a refusal.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::error(http::StatusCode::TOO_MANY_REQUESTS).retry_after(2);
    /// assert_eq!(reply.retry_after_seconds(), Some(2));
    /// ```
    pub fn error(status: StatusCode) -> Self {
        Reply {
            status,
            ..Reply::of(ReplyKind::Error)
        }
    }

    /// The text an answer carries.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::answer().text("Here you go.");
    /// # assert_eq!(reply.text_sent(), "Here you go.");
    /// ```
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// The category a refusal carries (Anthropic `stop_details.category`;
    /// it picks OpenAI's policy code for [`blocked`](Self::blocked)).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::refusal().category("bio");
    /// # assert_eq!(reply.category_named(), Some("bio"));
    /// ```
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// The explanation a refusal carries (Anthropic
    /// `stop_details.explanation`, OpenAI's error `message`).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::refusal().explanation("Not this one.");
    /// # let _ = reply;
    /// ```
    pub fn explanation(mut self, explanation: impl Into<String>) -> Self {
        self.explanation = Some(explanation.into());
        self
    }

    /// The code of an error-shaped refusal: OpenAI's `error.code`, Gemini's
    /// `blockReason` (Anthropic's has none).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::blocked().code("PROHIBITED_CONTENT");
    /// # let _ = reply;
    /// ```
    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// A `retry-after` header, in seconds, on an [`error`](Self::error).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// let reply = Reply::error(http::StatusCode::TOO_MANY_REQUESTS).retry_after(1);
    /// # let _ = reply;
    /// ```
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// What kind of reply it is.
    ///
    /// ```
    /// use refusal_guard_testkit::{Reply, ReplyKind};
    ///
    /// assert_eq!(Reply::answer().kind(), ReplyKind::Answer);
    /// ```
    pub fn kind(&self) -> ReplyKind {
        self.kind
    }

    /// The status of an [`error`](Self::error), `None` for the other
    /// kinds (whose status each API decides: see [`blocked`](Self::blocked)).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::error(http::StatusCode::BAD_GATEWAY).error_status(), Some(http::StatusCode::BAD_GATEWAY));
    /// assert_eq!(Reply::answer().error_status(), None);
    /// ```
    pub fn error_status(&self) -> Option<StatusCode> {
        (self.kind == ReplyKind::Error).then_some(self.status)
    }

    /// The text it sends before it ends (or refuses): the answer's, the
    /// partial refusal's, none for the others.
    ///
    /// ```
    /// use refusal_guard_testkit::{Reply, ANSWER};
    ///
    /// assert_eq!(Reply::answer().text_sent(), ANSWER);
    /// ```
    pub fn text_sent(&self) -> &str {
        match self.kind {
            ReplyKind::Answer => self.text.as_deref().unwrap_or(ANSWER),
            ReplyKind::Partial => self.text.as_deref().unwrap_or(""),
            _ => "",
        }
    }

    /// The category it was given, if any (the simulator falls back to the
    /// prompt's category, then [`CATEGORY`]).
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::refusal().category_named(), None);
    /// ```
    pub fn category_named(&self) -> Option<&str> {
        self.category.as_deref()
    }

    /// The explanation it was given, else [`EXPLANATION`].
    ///
    /// ```
    /// use refusal_guard_testkit::{Reply, EXPLANATION};
    ///
    /// assert_eq!(Reply::refusal().explanation_sent(), EXPLANATION);
    /// ```
    pub fn explanation_sent(&self) -> &str {
        self.explanation.as_deref().unwrap_or(EXPLANATION)
    }

    /// The code it was given, if any.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::policy_error("cyber_policy").code_named(), Some("cyber_policy"));
    /// ```
    pub fn code_named(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The `retry-after` seconds it was given, if any.
    ///
    /// ```
    /// use refusal_guard_testkit::Reply;
    ///
    /// assert_eq!(Reply::answer().retry_after_seconds(), None);
    /// ```
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after
    }

    /// The same reply with the category filled in when it named none.
    pub(crate) fn with_category_or(mut self, category: Option<&str>) -> Self {
        if self.category.is_none() && self.kind.is_refusal() {
            self.category = Some(category.unwrap_or(CATEGORY).to_owned());
        }
        self
    }
}

/// Which requests a scripted reply is for; every condition given must
/// hold, and [`When::any`] alone matches every request.
///
/// ```
/// use refusal_guard_testkit::{Reply, Simulator, When};
///
/// let simulator = Simulator::answering()
///     .when(When::any().model("claude-opus-4-7").category("cyber").rate(0.3), Reply::refusal())
///     .when(When::any().call(1), Reply::refusal().category("bio"));
/// # let _ = simulator;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct When {
    pub(crate) model: Option<String>,
    pub(crate) category: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) call: Option<u64>,
    pub(crate) rate: Option<f64>,
}

impl When {
    /// Every request.
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let every = When::any();
    /// # let _ = every;
    /// ```
    pub fn any() -> Self {
        When::default()
    }

    /// Requests for this model (the body's `model`, or the path's for
    /// Gemini), exactly.
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let opus = When::any().model("claude-opus-4-7");
    /// # let _ = opus;
    /// ```
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Requests whose prompt is of this category (see
    /// [`Simulator::categorize`](super::Simulator::categorize)).
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let bio = When::any().category("bio");
    /// # let _ = bio;
    /// ```
    pub fn category(mut self, category: impl Into<String>) -> Self {
        self.category = Some(category.into());
        self
    }

    /// The `n`-th request of a conversation (from 1, whatever the model):
    /// `When::any().attempt(1)` is every conversation's first request.
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let first = When::any().attempt(1);
    /// # let _ = first;
    /// ```
    pub fn attempt(mut self, n: u32) -> Self {
        self.attempt = Some(n);
        self
    }

    /// The `n`-th request (from 1) that met this rule's other conditions,
    /// counted by the rule whether or not an earlier rule replied to it.
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let second_to_opus = When::any().model("claude-opus-4-7").call(2);
    /// # let _ = second_to_opus;
    /// ```
    pub fn call(mut self, n: u64) -> Self {
        self.call = Some(n);
        self
    }

    /// A seeded share (0 to 1) of the requests meeting the other
    /// conditions: those whose [draw](super::Simulator::draw) is below
    /// `share`. Every rule sees the same draw for a request, so rules with
    /// rising rates split the requests into bands: `rate(0.3)` then
    /// `rate(0.4)` reply to 30 % and 10 % of them.
    ///
    /// ```
    /// use refusal_guard_testkit::When;
    ///
    /// let three_in_ten = When::any().category("cyber").rate(0.3);
    /// # let _ = three_in_ten;
    /// ```
    pub fn rate(mut self, share: f64) -> Self {
        self.rate = Some(share.clamp(0.0, 1.0));
        self
    }

    /// Whether a request matches every condition but `call`.
    pub(crate) fn admits(&self, call: &Call<'_>, draw: f64) -> bool {
        self.model.as_deref().map_or(true, |m| m == call.model)
            && self
                .category
                .as_deref()
                .map_or(true, |c| Some(c) == call.category)
            && self.attempt.map_or(true, |n| n == call.attempt)
            && self.rate.map_or(true, |rate| draw < rate)
    }
}

/// A request as the script sees it: what [`Simulator::plan`](super::Simulator::plan)
/// takes to tell, without sending anything, what the script would reply.
///
/// ```
/// use refusal_guard_testkit::Call;
///
/// let rescue = Call::new("claude-opus-4-7", "Audit my SSH config").attempt(2).attempt_on_model(2);
/// # let _ = rescue;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Call<'a> {
    pub(crate) model: &'a str,
    pub(crate) prompt: &'a str,
    pub(crate) category: Option<&'a str>,
    pub(crate) attempt: u32,
    pub(crate) attempt_on_model: u32,
}

impl<'a> Call<'a> {
    /// The first request of a conversation whose prompt (its first user
    /// message's text) is `prompt`, to `model`.
    ///
    /// ```
    /// use refusal_guard_testkit::Call;
    ///
    /// let call = Call::new("gpt-5", "hello");
    /// # let _ = call;
    /// ```
    pub fn new(model: &'a str, prompt: &'a str) -> Self {
        Call {
            model,
            prompt,
            category: None,
            attempt: 1,
            attempt_on_model: 1,
        }
    }

    /// The `n`-th request of its conversation, whatever the model.
    ///
    /// ```
    /// use refusal_guard_testkit::Call;
    ///
    /// let fallback = Call::new("claude-opus-4-8", "hello").attempt(2);
    /// # let _ = fallback;
    /// ```
    pub fn attempt(mut self, n: u32) -> Self {
        self.attempt = n;
        self
    }

    /// The `n`-th request of its conversation to its model (2 for the
    /// guard's rescue on the model that refused).
    ///
    /// ```
    /// use refusal_guard_testkit::Call;
    ///
    /// let rescue = Call::new("gpt-5", "hello").attempt(2).attempt_on_model(2);
    /// # let _ = rescue;
    /// ```
    pub fn attempt_on_model(mut self, n: u32) -> Self {
        self.attempt_on_model = n;
        self
    }
}

/// The draw of a request: a number in [0, 1), a pure function of the seed,
/// the model, the prompt and the request's attempt on that model (SHA-256
/// of them, so the same on every platform and Rust version).
pub(crate) fn draw(seed: u64, model: &str, prompt: &str, attempt_on_model: u32) -> f64 {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    for part in [model, prompt] {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.update(attempt_on_model.to_le_bytes());
    let digest = hasher.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    // The top 53 bits: every value exactly representable, below 1.
    (u64::from_le_bytes(first) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_pure_and_spread() {
        assert_eq!(draw(7, "m", "p", 1), draw(7, "m", "p", 1));
        assert_ne!(draw(7, "m", "p", 1), draw(7, "m", "p", 2));
        assert_ne!(draw(7, "m", "p", 1), draw(8, "m", "p", 1));
        let below = (0..10_000)
            .filter(|n| draw(1, "m", &n.to_string(), 1) < 0.3)
            .count();
        assert!((2_800..3_200).contains(&below), "{below}");
    }

    #[test]
    fn a_rule_admits_what_meets_each_condition() {
        let call = Call {
            category: Some("cyber"),
            ..Call::new("a", "p")
        };
        assert!(When::any().admits(&call, 0.5));
        assert!(When::any().model("a").category("cyber").admits(&call, 0.5));
        assert!(!When::any().model("b").admits(&call, 0.5));
        assert!(!When::any().category("bio").admits(&call, 0.5));
        assert!(!When::any().attempt(2).admits(&call, 0.5));
        assert!(When::any().rate(0.6).admits(&call, 0.5));
        assert!(!When::any().rate(0.5).admits(&call, 0.5));
    }
}
