#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
//! A scripted, simulated LLM provider for tests: the four wire APIs the
//! guard speaks, refusing on cue, with no network and no API key.
//!
//! For an agent's author who wants to see their agent (or the guard in
//! front of it) meet a refusal in their own `cargo test`: script which
//! requests are refused and how, run the simulator in process (as a tower
//! service) or on a loopback port (for a client that takes a base URL),
//! then read what the agent sent and whether every request kept the
//! providers' documented rules.
//!
//! It serves, streamed and not:
//!
//! - Anthropic Messages (`POST …/v1/messages`), and its token counting
//!   (`…/v1/messages/count_tokens`, answered `{"input_tokens": N}`);
//! - OpenAI Chat Completions (`POST …/chat/completions`);
//! - OpenAI Responses (`POST …/responses`);
//! - Gemini (`POST …/models/{model}:generateContent`, or
//!   `:streamGenerateContent`: with `alt=sse` a stream, without it one JSON
//!   array).
//!
//! **The script.** [`Simulator::new`] refuses the first request of every
//! conversation with an empty refusal (category `cyber`) and answers every
//! later one, so the guard's rescue (or a fallback to another model) is
//! answered. [`Simulator::answering`] answers everything. Rules added with
//! [`when`](Simulator::when) come first, in order: the first whose
//! [`When`] matches the request gives the [`Reply`] — per model, per
//! category (the prompt's, from [`categorize`](Simulator::categorize) or
//! [`keywords`](Simulator::keywords)), per attempt, per call, or a seeded
//! [rate](When::rate). A conversation is a wire API, a system prompt and a
//! first user message; its *prompt* is that message's first text.
//!
//! **Server-side fallback.** An Anthropic request whose `fallbacks` lists
//! models, and whose own model gives an empty refusal, is handed within
//! the one request to each listed model in turn, as the API does (each hop
//! a request of the conversation to that model, for the script); the
//! first that does not refuse serves it, with the API's `fallback` blocks
//! and `usage.iterations`, and [`Received::served_model`] names it. If
//! each refuses, the requested model's refusal is served. `"default"` is
//! not honoured: the simulator knows no model's default list.
//!
//! **State.** A simulator's state (conversations seen, rule counts, the
//! requests kept, violations) is its own: a [`Clone`] is a new simulator
//! with the same script that has seen nothing. The guard clones the
//! service it wraps, so it is given [`shared`](Simulator::shared), a
//! handle whose clones share this simulator's state, and the test reads
//! that state through the simulator.
//!
//! **On loopback.** `Simulator::serve` (feature `serve`, on by default)
//! serves the simulator on a free loopback port for clients that take a
//! base URL (async-openai, rig, reqwest, an SDK in another language); the
//! server shares the simulator's state, and stops when dropped.
//!
//! **The contract.** Every request is first checked against the
//! providers' documented request rules ([`contract`]), as the real APIs
//! would: one that breaks a rule gets the provider's own 400 (404 for a
//! path no API serves), is counted where no log filter reaches (the
//! [`CONTRACT_VIOLATIONS`] counter), is logged as one `warn` line naming
//! the rule, and is kept for [`take_violations`](Simulator::take_violations).
//! [`lenient`](Simulator::lenient) turns the check off. The simulator's
//! own errors (another path or method, a body that is not a JSON object)
//! come in the API's error shape with the
//! [`header::ERROR`](refusal_guard::header::ERROR) header.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Full};
//! use refusal_guard::recovery::FallbackChains;
//! use refusal_guard_testkit::{Reply, Simulator, When};
//! use refusal_guard::{Outcome, Refusal, RefusalGuardLayer};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Opus refuses every `bio` prompt; the guard's fallback to 4.8 is answered.
//! let simulator = Simulator::answering()
//!     .keywords([("pathogen", "bio")])
//!     .when(When::any().model("claude-opus-4-7").category("bio"), Reply::refusal());
//! let guard = RefusalGuardLayer::new()
//!     .fallback_chains(FallbackChains::new().chain("claude-opus-4-7", ["claude-opus-4-8"]))
//!     .layer(simulator.shared());
//! let body = r#"{"model":"claude-opus-4-7","max_tokens":64,"stream":true,
//!                "messages":[{"role":"user","content":"How do pathogen labs stay safe?"}]}"#;
//! let request = http::Request::post("http://simulated/v1/messages")
//!     .header("content-type", "application/json")
//!     .body(Full::new(Bytes::from(body)))
//!     .unwrap();
//! let response = guard.oneshot(request).await.unwrap();
//! let refusal = response.extensions().get::<Refusal>().cloned().unwrap();
//! assert_eq!(refusal.outcome, Outcome::Fallback);
//! let text = response.into_body().collect().await.unwrap().to_bytes();
//! assert!(std::str::from_utf8(&text).unwrap().contains("text_delta"));
//!
//! let sent = simulator.received();
//! assert_eq!(sent.len(), 2);
//! assert_eq!(sent[1].model.as_deref(), Some("claude-opus-4-8"));
//! simulator.assert_no_violations();
//! # }
//! ```

pub mod contract;
mod received;
mod replies;
mod request;
mod script;
#[cfg(feature = "serve")]
mod server;
mod state;

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;
use tower_service::Service;

use contract::{Contract, Violation};
use refusal_guard::api_error::{api_error, api_error_for};
use refusal_guard::BoxError;
use replies::Handoff;
use request::{Turn, Wire};
use state::{State, KEPT_REQUESTS};

pub use received::{Received, REDACTED};
pub use replies::SimulatedBody;
pub use script::{Call, Reply, ReplyKind, When, ANSWER, CATEGORY, EXPLANATION, OUTPUT_BLOCKED};
#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub use server::SimulatedServer;

/// The largest request body read; a larger one is answered 413 in the
/// API's shape (providers take a few MB: Anthropic 32 MB, OpenAI less).
///
/// ```
/// use refusal_guard_testkit::{Simulator, MAX_REQUEST_BYTES};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let huge = vec![b' '; MAX_REQUEST_BYTES + 1];
/// let request = http::Request::post("/v1/responses").body(http_body_util::Full::new(bytes::Bytes::from(huge))).unwrap();
/// let response = Simulator::new().shared().oneshot(request).await.unwrap();
/// assert_eq!(response.status(), 413);
/// # }
/// ```
pub const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;

/// The counter, through the [`metrics`] facade, of the requests a strict
/// simulator answered with a contract error: a channel no log filter turns
/// off (the proxy's `/metrics` with `--simulate --strict --admin`, where it
/// is registered at 0 from the start, so that a reader tells "none" from
/// "not counted"). [`Simulator::violations`] counts the same per simulator.
///
/// ```
/// use refusal_guard_testkit::CONTRACT_VIOLATIONS;
///
/// assert_eq!(CONTRACT_VIOLATIONS, "refusal_guard_contract_violations_total");
/// ```
pub const CONTRACT_VIOLATIONS: &str = "refusal_guard_contract_violations_total";

/// The hook that names a prompt's category.
type Categorize = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The script: the rules, the seed, the category hook.
#[derive(Clone)]
struct Script {
    /// The rules added with `when`, in order.
    rules: Vec<(When, Reply)>,
    /// The rules of the constructor, after them.
    defaults: Vec<(When, Reply)>,
    seed: u64,
    categorize: Option<Categorize>,
    keep: usize,
}

/// The simulated provider: its script, and what it has seen. The
/// [crate's docs](crate) say what it serves and how it is scripted.
///
/// ```
/// use refusal_guard_testkit::{Reply, Simulator, When};
///
/// let simulator = Simulator::answering()
///     .seed(7)
///     .keywords([("exploit", "cyber"), ("virus", "bio")])
///     .when(When::any().call(1), Reply::refusal().category("bio"))
///     .when(When::any().model("gpt-5").category("cyber").rate(0.3), Reply::policy_error("cyber_policy"));
/// assert_eq!(simulator.requests(), 0);
/// ```
pub struct Simulator {
    script: Arc<Script>,
    state: Arc<Mutex<State>>,
    /// The rules every request is checked against first, when strict.
    contract: Option<Arc<Contract>>,
}

impl Default for Simulator {
    fn default() -> Self {
        Simulator::new()
    }
}

/// A new simulator with the same script, the same strictness, and nothing
/// seen: clones do not share state (see [`Simulator::shared`] for a handle
/// that does).
///
/// ```
/// use refusal_guard_testkit::Simulator;
///
/// let first = Simulator::new();
/// let (parts, ()) = http::Request::post("/v1/responses").body(()).unwrap().into_parts();
/// first.respond(&parts, br#"{"model":"gpt-5","input":"hi"}"#);
/// let second = first.clone();
/// assert_eq!((first.requests(), second.requests()), (1, 0));
/// ```
impl Clone for Simulator {
    fn clone(&self) -> Self {
        Simulator {
            script: self.script.clone(),
            state: Arc::default(),
            contract: self.contract.clone(),
        }
    }
}

impl fmt::Debug for Simulator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Simulator")
            .field("rules", &self.script.rules)
            .field("defaults", &self.script.defaults)
            .field("seed", &self.script.seed)
            .field("categorize", &self.script.categorize.is_some())
            .field("strict", &self.contract.is_some())
            .field("requests", &self.requests())
            .finish()
    }
}

impl Simulator {
    /// The default script: the first request of every conversation gets an
    /// empty refusal, every later one the answer. Strict.
    ///
    /// ```
    /// use refusal_guard_testkit::{ReplyKind, Simulator};
    ///
    /// let simulator = Simulator::new();
    /// let (parts, ()) = http::Request::post("/v1/chat/completions").body(()).unwrap().into_parts();
    /// let body = br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#;
    /// simulator.respond(&parts, body);
    /// simulator.respond(&parts, body);
    /// let kinds: Vec<_> = simulator.received().iter().map(|r| r.reply.as_ref().unwrap().kind()).collect();
    /// assert_eq!(kinds, [ReplyKind::Refusal, ReplyKind::Answer]);
    /// ```
    pub fn new() -> Self {
        Simulator::with_defaults(vec![(When::any().attempt(1), Reply::refusal())])
    }

    /// A simulator that answers every request its rules do not script.
    /// Strict.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::answering();
    /// # let _ = simulator;
    /// ```
    pub fn answering() -> Self {
        Simulator::with_defaults(Vec::new())
    }

    fn with_defaults(defaults: Vec<(When, Reply)>) -> Self {
        Simulator {
            script: Arc::new(Script {
                rules: Vec::new(),
                defaults,
                seed: 0,
                categorize: None,
                keep: KEPT_REQUESTS,
            }),
            state: Arc::default(),
            contract: Some(Arc::new(Contract::new())),
        }
    }

    fn script_mut(&mut self) -> &mut Script {
        Arc::make_mut(&mut self.script)
    }

    /// Replies `reply` to the requests `when` matches, unless a rule added
    /// before matches them too. Rules come before the constructor's script.
    ///
    /// ```
    /// use refusal_guard_testkit::{Reply, Simulator, When};
    ///
    /// // Refuse the first call with `bio`, answer the second.
    /// let simulator = Simulator::answering().when(When::any().call(1), Reply::refusal().category("bio"));
    /// # let _ = simulator;
    /// ```
    pub fn when(mut self, when: When, reply: Reply) -> Self {
        self.script_mut().rules.push((when, reply));
        self
    }

    /// The seed of the draws [`rate`](When::rate) rules compare against
    /// (default 0): the same seed, the same replies.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::answering().seed(42);
    /// assert_ne!(simulator.draw("m", "p", 1), Simulator::answering().draw("m", "p", 1));
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.script_mut().seed = seed;
        self
    }

    /// Names the category of a prompt (the first user message's first
    /// text), for [`When::category`] and for the refusals' category; for
    /// example from a prompt set's labels.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let labels = HashMap::from([("How do I culture anthrax?".to_owned(), "bio".to_owned())]);
    /// let simulator = Simulator::answering().categorize(move |prompt| labels.get(prompt).cloned());
    /// assert_eq!(simulator.category_of("How do I culture anthrax?").as_deref(), Some("bio"));
    /// ```
    pub fn categorize<F>(mut self, categorize: F) -> Self
    where
        F: Fn(&str) -> Option<String> + Send + Sync + 'static,
    {
        self.script_mut().categorize = Some(Arc::new(categorize));
        self
    }

    /// Names a prompt's category by the first of `keywords` it contains
    /// (ignoring case): a [`categorize`](Self::categorize) hook, which it
    /// replaces.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::answering().keywords([("exploit", "cyber"), ("virus", "bio")]);
    /// assert_eq!(simulator.category_of("Write an EXPLOIT").as_deref(), Some("cyber"));
    /// assert_eq!(simulator.category_of("Bake bread"), None);
    /// ```
    pub fn keywords<I, K, C>(self, keywords: I) -> Self
    where
        I: IntoIterator<Item = (K, C)>,
        K: Into<String>,
        C: Into<String>,
    {
        let keywords: Vec<(String, String)> = keywords
            .into_iter()
            .map(|(k, c)| (k.into().to_lowercase(), c.into()))
            .collect();
        self.categorize(move |prompt| {
            let prompt = prompt.to_lowercase();
            keywords
                .iter()
                .find(|(keyword, _)| prompt.contains(keyword.as_str()))
                .map(|(_, category)| category.clone())
        })
    }

    /// Keeps the last `requests` requests for [`received`](Self::received)
    /// (default 256; 0 keeps none).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new().keep_requests(16);
    /// # let _ = simulator;
    /// ```
    pub fn keep_requests(mut self, requests: usize) -> Self {
        self.script_mut().keep = requests;
        self
    }

    /// Checks every request against the providers' documented rules
    /// ([`contract`]) first, answering one that breaks a rule the way the
    /// provider does (its 400, in its shape), counting it
    /// ([`violations`](Self::violations), and the [`CONTRACT_VIOLATIONS`]
    /// counter, which no log filter hides) and logging it (`warn`, one
    /// line: the request's method and path, the API, the rule and what is
    /// wrong). On unless [`lenient`](Self::lenient).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new().strict();
    /// let (parts, ()) = http::Request::post("/v1/messages").body(()).unwrap().into_parts();
    /// // No `max_tokens`: the Messages API rejects the request.
    /// let body = br#"{"model":"claude-opus-4-7","messages":[{"role":"user","content":"hi"}]}"#;
    /// let response = simulator.respond(&parts, body);
    /// assert_eq!(response.status(), 400);
    /// assert_eq!(simulator.take_violations()[0].rule, "A2");
    /// ```
    pub fn strict(mut self) -> Self {
        self.contract = Some(Arc::new(Contract::new()));
        self
    }

    /// Answers requests without checking them against the contract: for
    /// testing the simulator's own errors, or a client that is known to
    /// break a rule.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new().lenient();
    /// let (parts, ()) = http::Request::post("/v1/messages").body(()).unwrap().into_parts();
    /// let body = br#"{"model":"claude-opus-4-7","messages":[{"role":"user","content":"hi"}]}"#;
    /// assert_eq!(simulator.respond(&parts, body).status(), 200);
    /// ```
    pub fn lenient(mut self) -> Self {
        self.contract = None;
        self
    }

    /// A handle to this simulator: it and its clones share this
    /// simulator's state, and it is the [`Service`] a guard (or any tower
    /// layer) wraps.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    /// use refusal_guard::RefusalGuardLayer;
    /// use tower::Layer;
    ///
    /// let simulator = Simulator::new();
    /// let guard = RefusalGuardLayer::new().layer(simulator.shared());
    /// # let _ = guard;
    /// ```
    pub fn shared(&self) -> SharedSimulator {
        SharedSimulator(self.handle())
    }

    /// The same simulator: its script, its state.
    fn handle(&self) -> Simulator {
        Simulator {
            script: self.script.clone(),
            state: self.state.clone(),
            contract: self.contract.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the simulator has seen.
impl Simulator {
    /// How many requests it has answered.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// assert_eq!(Simulator::new().requests(), 0);
    /// ```
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    /// The requests it has received, oldest first (the latest 256, or as
    /// many as [`keep_requests`](Self::keep_requests) says).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// assert!(Simulator::new().received().is_empty());
    /// ```
    pub fn received(&self) -> Vec<Received> {
        self.lock().received.iter().cloned().collect()
    }

    /// The requests received since the last call, oldest first.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new();
    /// let (parts, ()) = http::Request::post("/v1/responses").body(()).unwrap().into_parts();
    /// simulator.respond(&parts, br#"{"model":"gpt-5","input":"hi"}"#);
    /// assert_eq!(simulator.take_received().len(), 1);
    /// assert!(simulator.take_received().is_empty());
    /// ```
    pub fn take_received(&self) -> Vec<Received> {
        self.lock().received.drain(..).collect()
    }

    /// How many requests it answered with a contract error.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// assert_eq!(Simulator::new().violations(), 0);
    /// ```
    pub fn violations(&self) -> u64 {
        self.lock().violations
    }

    /// The violations answered since the last call, oldest first (the
    /// latest 64 at most; [`violations`](Self::violations) counts them
    /// all).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// assert!(Simulator::new().take_violations().is_empty());
    /// ```
    pub fn take_violations(&self) -> Vec<Violation> {
        self.lock().broken.drain(..).collect()
    }

    /// Panics, listing each, if it answered any request with a contract
    /// error since the violations were last taken; takes them.
    ///
    /// ```should_panic
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::new();
    /// let (parts, ()) = http::Request::post("/v1/chat/completions").body(()).unwrap().into_parts();
    /// simulator.respond(&parts, br#"{"model":"gpt-5","messages":[]}"#);
    /// simulator.assert_no_violations(); // C2: `messages` is empty
    /// ```
    #[track_caller]
    pub fn assert_no_violations(&self) {
        let violations = self.take_violations();
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
            panic!(
                "the simulated provider answered {} request(s) with the provider's error \
                 (the contract's rules):\n{}",
                list.len(),
                list.join("\n")
            );
        }
    }
}

/// The script, asked without sending anything.
impl Simulator {
    /// The draw of a request to `model` with `prompt`, its
    /// `attempt_on_model`-th of the conversation to that model: a number in
    /// [0, 1), a pure function of them and the [seed](Self::seed) (not of
    /// what came before). A [`rate(p)`](When::rate) rule matches when it is
    /// below `p`.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let simulator = Simulator::answering().seed(1);
    /// let draw = simulator.draw("claude-opus-4-7", "Audit my SSH config", 1);
    /// assert!((0.0..1.0).contains(&draw));
    /// assert_eq!(draw, simulator.clone().draw("claude-opus-4-7", "Audit my SSH config", 1));
    /// ```
    pub fn draw(&self, model: &str, prompt: &str, attempt_on_model: u32) -> f64 {
        script::draw(self.script.seed, model, prompt, attempt_on_model)
    }

    /// The category the hook names for `prompt`, if any.
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// assert_eq!(Simulator::new().category_of("anything"), None);
    /// ```
    pub fn category_of(&self, prompt: &str) -> Option<String> {
        self.script.categorize.as_ref()?(prompt)
    }

    /// The reply the script gives `call`, its category named by the hook.
    /// Rules with [`When::call`] depend on what came before and are left
    /// out.
    ///
    /// ```
    /// use refusal_guard_testkit::{Call, ReplyKind, Simulator};
    ///
    /// let simulator = Simulator::new();
    /// assert_eq!(simulator.plan(&Call::new("gpt-5", "hi")).kind(), ReplyKind::Refusal);
    /// assert_eq!(simulator.plan(&Call::new("gpt-5", "hi").attempt(2)).kind(), ReplyKind::Answer);
    /// ```
    pub fn plan(&self, call: &Call<'_>) -> Reply {
        let category = self.category_of(call.prompt);
        let call = Call {
            category: category.as_deref(),
            ..*call
        };
        let draw = self.draw(call.model, call.prompt, call.attempt_on_model);
        self.rules()
            .filter(|(when, _)| when.call.is_none())
            .find(|(when, _)| when.admits(&call, draw))
            .map_or_else(Reply::answer, |(_, reply)| reply.clone())
            .with_category_or(category.as_deref())
    }

    fn rules(&self) -> impl Iterator<Item = &(When, Reply)> {
        self.script.rules.iter().chain(&self.script.defaults)
    }

    /// The scripted reply to `turn` if it went to `model`; counts it in the
    /// state. Also which request of the conversation it was, and which to
    /// `model`.
    fn scripted(&self, model: &str, turn: &Turn, category: Option<&str>) -> (Reply, u32, u32) {
        let mut state = self.lock();
        let (attempt, attempt_on_model) = state.attempt(turn.conversation, model);
        let call = Call {
            model,
            prompt: &turn.prompt,
            category,
            attempt,
            attempt_on_model,
        };
        let draw = self.draw(model, &turn.prompt, attempt_on_model);
        let mut chosen = None;
        for (index, (when, reply)) in self.rules().enumerate() {
            if !when.admits(&call, draw) {
                continue;
            }
            let n = state.rule_call(index);
            if chosen.is_none() && when.call.map_or(true, |wanted| wanted == n) {
                chosen = Some(reply.clone());
            }
        }
        let reply = chosen
            .unwrap_or_else(Reply::answer)
            .with_category_or(category);
        (reply, attempt, attempt_on_model)
    }

    /// The reply to `turn`, and the server-side fallback that served it, if
    /// any: an empty refusal of an Anthropic request that names
    /// `fallbacks` is passed to each model listed in turn, as the provider
    /// does, until one does not refuse.
    fn reply_to(
        &self,
        turn: &Turn,
        request: &Value,
        category: Option<&str>,
        received: &mut Received,
    ) -> (Reply, Option<Handoff>) {
        let (reply, attempt, attempt_on_model) = self.scripted(&turn.model, turn, category);
        (received.attempt, received.attempt_on_model) = (attempt, attempt_on_model);
        if turn.wire != Wire::Anthropic || reply.kind() != ReplyKind::Refusal {
            return (reply, None);
        }
        let listed = request["fallbacks"].as_array().into_iter().flatten();
        let mut refused = vec![turn.model.clone()];
        for model in listed.filter_map(|entry| entry["model"].as_str()) {
            let (hop, ..) = self.scripted(model, turn, category);
            if matches!(hop.kind(), ReplyKind::Answer | ReplyKind::Partial) {
                let handoff = Handoff {
                    refused,
                    category: reply.category_named().map(str::to_owned),
                    served: model.to_owned(),
                };
                received.served_model = Some(model.to_owned());
                return (hop, Some(handoff));
            }
            refused.push(model.to_owned());
        }
        (reply, None)
    }
}

/// Answering.
impl Simulator {
    /// Answers one request whose body has been read, and keeps it for
    /// [`received`](Self::received).
    ///
    /// ```
    /// use refusal_guard_testkit::Simulator;
    ///
    /// let (parts, ()) = http::Request::post("/v1/other").body(()).unwrap().into_parts();
    /// assert_eq!(Simulator::new().respond(&parts, b"{}").status(), 404);
    /// ```
    pub fn respond(&self, parts: &http::request::Parts, body: &[u8]) -> Response<SimulatedBody> {
        let mut received = Received::new(parts, body);
        let response = self.answer(parts, body, &mut received);
        received.status = response.status();
        self.lock().record(received, self.script.keep);
        response
    }

    fn answer(
        &self,
        parts: &http::request::Parts,
        body: &[u8],
        received: &mut Received,
    ) -> Response<SimulatedBody> {
        if let Some(broken) = self.broken(parts, body) {
            return replies::from_bytes(broken);
        }
        let path = parts.uri.path().trim_end_matches('/');
        let Some(wire) = Wire::recognise(&parts.uri) else {
            let served = "the simulated provider serves POST …/v1/messages (and \
                 …/v1/messages/count_tokens), …/chat/completions, …/responses and \
                 …/models/{model}:generateContent (or :streamGenerateContent)";
            let error = api_error(path, StatusCode::NOT_FOUND, "simulated_not_found", served);
            return replies::from_bytes(error);
        };
        let api = wire.api();
        received.api = Some(api);
        let own_error =
            |status, code, message| replies::from_bytes(api_error_for(api, status, code, message));
        if parts.method != http::Method::POST {
            let message = "the simulated provider answers POST only";
            return own_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "simulated_method_not_allowed",
                message,
            );
        }
        let Ok(request @ Value::Object(_)) = serde_json::from_slice::<Value>(body) else {
            let message = "the body must be a JSON object";
            return own_error(StatusCode::BAD_REQUEST, "simulated_invalid_body", message);
        };
        let turn = Turn::read(wire, &request);
        received.model = Some(turn.model.clone());
        received.prompt = Some(turn.prompt.clone());
        // Counting tokens is no attempt of a conversation: nothing to remember.
        if turn.wire == Wire::AnthropicCountTokens {
            return replies::render(&turn, &Reply::answer(), None);
        }
        let category = self.category_of(&turn.prompt);
        let (reply, handoff) = self.reply_to(&turn, &request, category.as_deref(), received);
        let response = replies::render(&turn, &reply, handoff.as_ref());
        received.category = category;
        received.reply = Some(reply);
        response
    }

    /// Answers a request whose body was read (at most
    /// [`MAX_REQUEST_BYTES`] of it): `Err` when reading it failed.
    fn respond_read(
        &self,
        parts: &http::request::Parts,
        read: Result<Bytes, BoxError>,
    ) -> Result<Response<SimulatedBody>, BoxError> {
        match read {
            Ok(body) => Ok(self.respond(parts, &body)),
            Err(error) if error.is::<LengthLimitError>() => Ok(self.too_large(parts)),
            Err(error) => Err(error),
        }
    }

    /// The answer to a request whose body is over [`MAX_REQUEST_BYTES`]: a
    /// 413 in the API's shape, counted and kept (without its body).
    fn too_large(&self, parts: &http::request::Parts) -> Response<SimulatedBody> {
        let mut received = Received::new(parts, b"");
        let path = parts.uri.path();
        let message = format!("the request body is over {MAX_REQUEST_BYTES} bytes");
        let status = StatusCode::PAYLOAD_TOO_LARGE;
        let response =
            replies::from_bytes(api_error(path, status, "simulated_too_large", &message));
        received.status = response.status();
        self.lock().record(received, self.script.keep);
        response
    }

    /// The provider's answer to a request that breaks the contract, when
    /// strict; logged and kept.
    fn broken(&self, parts: &http::request::Parts, body: &[u8]) -> Option<Response<Bytes>> {
        let contract = self.contract.as_ref()?;
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let violation = contract
            .check(parts.method.as_str(), path, &parts.headers, body)
            .err()?;
        tracing::warn!(
            rule = violation.rule,
            "simulated provider: contract violation: {violation}"
        );
        metrics::counter!(CONTRACT_VIOLATIONS).increment(1);
        let response = violation.response();
        self.lock().violated(violation);
        Some(response)
    }
}

/// A handle to a [`Simulator`]: its clones share the simulator's script
/// and state, as a tower service's clones do, and it reads the same state
/// (it dereferences to the simulator). What a guard, or any layer that
/// clones its inner service, is given.
///
/// ```
/// use refusal_guard_testkit::Simulator;
///
/// let simulator = Simulator::new();
/// let handle = simulator.shared();
/// let (parts, ()) = http::Request::post("/v1/responses").body(()).unwrap().into_parts();
/// handle.clone().respond(&parts, br#"{"model":"gpt-5","input":"hi"}"#);
/// assert_eq!((simulator.requests(), handle.requests()), (1, 1));
/// ```
#[derive(Debug)]
pub struct SharedSimulator(Simulator);

impl Clone for SharedSimulator {
    fn clone(&self) -> Self {
        SharedSimulator(self.0.handle())
    }
}

impl Deref for SharedSimulator {
    type Target = Simulator;

    fn deref(&self) -> &Simulator {
        &self.0
    }
}

impl<B> Service<Request<B>> for SharedSimulator
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<SimulatedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let read = Limited::new(body, MAX_REQUEST_BYTES).collect().await;
            this.respond_read(&parts, read.map(|body| body.to_bytes()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(response: Response<SimulatedBody>) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let body = runtime.block_on(response.into_body().collect()).unwrap();
        String::from_utf8(body.to_bytes().to_vec()).unwrap()
    }

    fn parts(path: &str) -> http::request::Parts {
        Request::post(path).body(()).unwrap().into_parts().0
    }

    #[test]
    fn first_attempt_refused_then_answered() {
        let sim = Simulator::new();
        let body = br#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
        let first = bytes(sim.respond(&parts("/v1/messages"), body));
        assert!(first.contains("\"refusal\"") && first.contains("\"cyber\""));
        // The guard's continuation turns the content into blocks.
        let again = br#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[
            {"type":"text","text":"hi"},{"type":"text","text":"note"}]}]}"#;
        let second = bytes(sim.respond(&parts("/v1/messages"), again));
        assert!(second.contains("end_turn"));
        assert_eq!(sim.requests(), 2);
    }

    #[test]
    fn unknown_path_is_a_404_of_its_api_with_the_error_header() {
        let response = Simulator::new().respond(&parts("/v2/other"), b"{}");
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let gemini = "/v1beta/models/gemini-2.5-pro:generateContent";
        let response = Simulator::new().lenient().respond(&parts(gemini), b"[1]");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            response.headers()[refusal_guard::header::ERROR],
            "simulated_invalid_body"
        );
        let json: Value = serde_json::from_str(&bytes(response)).unwrap();
        assert_eq!(json["error"]["status"], "INVALID_ARGUMENT");
    }

    #[test]
    fn strict_answers_a_broken_request_as_its_provider_and_remembers_nothing() {
        let sim = Simulator::new();
        // A note before the tool results it follows: the API's 400.
        let broken = br#"{"model":"m","max_tokens":8,"messages":[
            {"role":"user","content":"x"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
            {"role":"user","content":[{"type":"text","text":"note"},
                {"type":"tool_result","tool_use_id":"t","content":"r"}]}]}"#;
        let response = sim.respond(&parts("/v1/messages"), broken);
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(response
            .headers()
            .get(refusal_guard::header::ERROR)
            .is_none());
        let json: Value = serde_json::from_str(&bytes(response)).unwrap();
        assert_eq!(json["error"]["type"], "invalid_request_error");
        assert!(json["error"]["message"].as_str().unwrap().contains("A4"));
        assert_eq!((sim.requests(), sim.violations()), (1, 1));
        assert_eq!(sim.received()[0].reply, None);
        assert_eq!(sim.take_violations()[0].rule, "A4");
        assert!(sim.take_violations().is_empty(), "taken");
        // The same conversation, kept to the rules: its first attempt yet.
        let kept = br#"{"model":"m","max_tokens":8,"messages":[
            {"role":"user","content":"x"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r"},
                {"type":"text","text":"note"}]}]}"#;
        assert!(bytes(sim.respond(&parts("/v1/messages"), kept)).contains("\"refusal\""));
        let lenient = Simulator::new()
            .lenient()
            .respond(&parts("/v1/messages"), broken);
        assert_eq!(lenient.status(), StatusCode::OK);
    }

    #[test]
    fn rules_come_first_in_order_and_calls_count_per_rule() {
        let sim = Simulator::answering()
            .keywords([("virus", "bio")])
            .when(When::any().model("a").call(2), Reply::partial("Step 1: "))
            .when(When::any().category("bio"), Reply::blocked());
        let chat = |model: &str, text: &str| {
            let body = serde_json::json!({"model": model,
                "messages": [{"role": "user", "content": text}]});
            let response = sim.respond(&parts("/v1/chat/completions"), body.to_string().as_bytes());
            (response.status(), bytes(response))
        };
        assert!(chat("a", "hello").1.contains("\"stop\""));
        let (_, partial) = chat("a", "hello again");
        assert!(partial.contains("Step 1: ") && partial.contains("content_filter"));
        let (status, blocked) = chat("b", "about a virus");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(blocked.contains("invalid_prompt"), "{blocked}");
        let replies: Vec<_> = sim
            .received()
            .iter()
            .map(|r| r.reply.clone().unwrap())
            .collect();
        assert_eq!(replies[2].category_named(), Some("bio"));
        assert_eq!(sim.received()[2].category.as_deref(), Some("bio"));
    }

    #[test]
    fn rates_split_by_the_draw_and_plan_agrees() {
        let sim = Simulator::answering()
            .seed(3)
            .when(When::any().rate(0.3), Reply::refusal())
            .when(When::any().rate(0.5), Reply::blocked());
        for n in 0..200 {
            let prompt = format!("prompt {n}");
            let draw = sim.draw("gpt-5", &prompt, 1);
            let expected = match draw {
                d if d < 0.3 => ReplyKind::Refusal,
                d if d < 0.5 => ReplyKind::Blocked,
                _ => ReplyKind::Answer,
            };
            assert_eq!(sim.plan(&Call::new("gpt-5", &prompt)).kind(), expected);
            let body = serde_json::json!({"model": "gpt-5", "input": prompt});
            sim.respond(&parts("/v1/responses"), body.to_string().as_bytes());
            let served = sim.take_received().pop().unwrap().reply.unwrap();
            assert_eq!(served.kind(), expected, "{prompt}");
        }
    }

    #[test]
    fn clones_are_apart_and_shared_handles_are_not() {
        let sim = Simulator::new();
        let body = br#"{"model":"gpt-5","input":"hi"}"#;
        sim.respond(&parts("/v1/responses"), body);
        let apart = sim.clone();
        let kind = |s: &Simulator| {
            s.respond(&parts("/v1/responses"), body);
            s.received().pop().unwrap().reply.unwrap().kind()
        };
        assert_eq!(kind(&apart), ReplyKind::Refusal, "a clone has seen nothing");
        let handle = sim.shared();
        assert_eq!(kind(&handle.clone()), ReplyKind::Answer, "a handle shares");
        assert_eq!((sim.requests(), apart.requests()), (2, 1));
    }

    #[test]
    fn a_server_side_fallback_hops_until_a_model_answers() {
        let sim = Simulator::answering()
            .when(When::any().model("a"), Reply::refusal().category("bio"))
            .when(When::any().model("b"), Reply::refusal());
        let request = |fallbacks: &str| {
            let body = format!(
                r#"{{"model":"a","max_tokens":8,"fallbacks":{fallbacks},
                    "messages":[{{"role":"user","content":"hops {}"}}]}}"#,
                fallbacks.len()
            );
            let parts = Request::post("/v1/messages")
                .header("anthropic-beta", "server-side-fallback-2026-07-01")
                .body(())
                .unwrap()
                .into_parts()
                .0;
            let json: Value =
                serde_json::from_str(&bytes(sim.respond(&parts, body.as_bytes()))).unwrap();
            (json, sim.take_received().pop().unwrap())
        };
        let (served, received) = request(r#"[{"model":"b"},{"model":"c"}]"#);
        assert_eq!(served["model"], "c");
        assert_eq!(served["stop_reason"], "end_turn");
        let hops: Vec<_> = served["content"].as_array().unwrap()[..2]
            .iter()
            .map(|b| {
                (
                    b["from"]["model"].clone(),
                    b["to"]["model"].clone(),
                    b["trigger"]["category"].clone(),
                )
            })
            .collect();
        assert_eq!(
            hops,
            [
                ("a".into(), "b".into(), "bio".into()),
                ("b".into(), "c".into(), "bio".into())
            ]
        );
        let kinds: Vec<_> = served["usage"]["iterations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].clone())
            .collect();
        assert_eq!(kinds, ["message", "message", "fallback_message"]);
        assert_eq!(received.served_model.as_deref(), Some("c"));
        // Every model listed refuses: the requested model's refusal.
        let (refused, received) = request(r#"[{"model":"b"}]"#);
        assert_eq!(
            (refused["model"].as_str(), refused["stop_reason"].as_str()),
            (Some("a"), Some("refusal"))
        );
        assert_eq!(received.served_model, None);
        sim.assert_no_violations();
    }

    #[test]
    fn the_log_is_bounded() {
        let sim = Simulator::new().keep_requests(2);
        for n in 0..5 {
            let body = format!(r#"{{"model":"gpt-5","input":"{n}"}}"#);
            sim.respond(&parts("/v1/responses"), body.as_bytes());
        }
        let kept: Vec<_> = sim
            .received()
            .into_iter()
            .map(|r| r.prompt.unwrap())
            .collect();
        assert_eq!(kept, ["3", "4"]);
        assert_eq!(sim.requests(), 5);
    }
}

/// The README's examples, compiled as doc tests (its `#[tokio::test]`
/// functions are run by the workspace's `testkit` test binary).
#[cfg(all(doctest, feature = "serve"))]
#[doc = include_str!("../README.md")]
struct Readme;
