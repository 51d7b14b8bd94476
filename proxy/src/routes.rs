//! Which upstream each request goes to: the route table.
//!
//! By default the proxy has one upstream and every request goes there
//! ([`Routes::single`]). With routing on ([`Routes::public`], the binary's
//! `--routes` or any `--upstream-<provider>` flag), each provider's own API goes
//! to that provider's upstream and everything else to the default upstream:
//!
//! | route | what goes there | public endpoint |
//! |---|---|---|
//! | [`Route::Anthropic`] | `/v1/messages` (and `count_tokens`, batches), `/v1/complete`, `/v1/organizations/...`, `/v1/skills/...`; `/v1/models` and `/v1/files` from an Anthropic client | `https://api.anthropic.com` |
//! | [`Route::OpenAi`] | `/v1/chat/completions`, `/v1/responses`, `/v1/completions`, `/v1/embeddings`, `/v1/batches`, `/v1/audio/...` and OpenAI's other `/v1/...` resources; `/v1/models` and `/v1/files` otherwise | `https://api.openai.com` |
//! | [`Route::Gemini`] | `/v1beta/...`, `/v1alpha/...`, `/v1/models/{model}:{method}`, `/upload/...`, `/download/...`; `/v1/models` from a Google client | `https://generativelanguage.googleapis.com` |
//! | [`Route::Default`] | everything else: Vertex AI (`/v1/projects/...`, `/v1beta1/...`), Azure OpenAI (`/openai/...`), Bedrock (`/model/...`), paths under a prefix, unknown paths | the default upstream |
//!
//! Paths are matched from their first segment, as each provider's SDK sends
//! them with its default base URL. `/v1/models` and `/v1/files` are served
//! by more than one provider; the request's headers decide: Anthropic's SDKs
//! and Claude Code send `anthropic-version` (and `x-api-key`), Google's send
//! `x-goog-api-key` or `x-goog-api-client` (or the key in a `key=` query);
//! the rest is OpenAI's.
//!
//! The cloud platforms' own paths go to the default upstream because no
//! provider's public endpoint serves them: an Azure deployment path sent to
//! `api.openai.com` would fail, and carry an Azure key to another party.
//! Point the default upstream at the platform (`--upstream
//! https://RESOURCE.openai.azure.com`), or give a provider route a base URL
//! with a path prefix that maps the provider's paths onto the platform
//! (`--upstream-openai https://RESOURCE.openai.azure.com/openai` for Azure's
//! `/openai/v1/...` API).
//!
//! A route changes where a request goes, nothing else: the headers,
//! credentials included, are the client's, as with one upstream.
//!
//! ```
//! use refusal_guard_proxy::{Route, Routes, Upstream};
//!
//! let routes = Routes::public(Upstream::parse("https://api.anthropic.com")?)
//!     .route(Route::OpenAi, Upstream::parse("http://127.0.0.1:9001/openai")?);
//! let headers = http::HeaderMap::new();
//! let (route, upstream) = routes.select(&"/v1/chat/completions".parse()?, &headers);
//! assert_eq!(route, Route::OpenAi);
//! assert_eq!(upstream.to_string(), "http://127.0.0.1:9001/openai");
//! let (route, upstream) = routes.select(&"/v1beta/models/gemini-2.5-pro:generateContent".parse()?, &headers);
//! assert_eq!((route, upstream.to_string().as_str()), (Route::Gemini, "https://generativelanguage.googleapis.com"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use http::{HeaderMap, Uri};

use super::Upstream;
use refusal_guard::refusal::WireApi;

/// A route of the proxy's table: one provider's API, or the default upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Route {
    /// Anthropic's API (Messages and its other `/v1/...` resources).
    Anthropic,
    /// OpenAI's API (Chat Completions, Responses and its other resources).
    OpenAi,
    /// Google's Gemini API (`generativelanguage.googleapis.com`).
    Gemini,
    /// The default upstream: the cloud platforms' paths and anything
    /// unrecognised.
    Default,
}

/// The provider routes, in the order the banner and the probes list them.
const PROVIDERS: [Route; 3] = [Route::Anthropic, Route::OpenAi, Route::Gemini];

/// OpenAI's top-level `/v1/{resource}` names that no other provider serves at
/// the same path (OpenAI API reference; openai-python's resources).
const OPENAI_RESOURCES: &[&str] = &[
    "chat",
    "completions",
    "responses",
    "embeddings",
    "batches",
    "audio",
    "images",
    "moderations",
    "uploads",
    "fine_tuning",
    "assistants",
    "threads",
    "vector_stores",
    "realtime",
    "conversations",
    "evals",
    "containers",
    "organization",
    "chatkit",
    "videos",
];

/// Anthropic's top-level `/v1/{resource}` names that no other provider serves
/// at the same path (Anthropic API reference: Messages, Text Completions,
/// the Admin API, Skills).
const ANTHROPIC_RESOURCES: &[&str] = &["messages", "complete", "organizations", "skills"];

impl Route {
    /// The lower-case name used in the access log, the metrics and the
    /// banner (`anthropic`, `openai`, `gemini`, `default`).
    ///
    /// ```
    /// assert_eq!(refusal_guard_proxy::Route::OpenAi.as_str(), "openai");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Anthropic => "anthropic",
            Route::OpenAi => "openai",
            Route::Gemini => "gemini",
            Route::Default => "default",
        }
    }

    /// The provider's public endpoint, used when routing is on and the route
    /// was given no base URL of its own; `None` for [`Route::Default`].
    ///
    /// ```
    /// use refusal_guard_proxy::Route;
    /// assert_eq!(Route::Gemini.public_endpoint(), Some("https://generativelanguage.googleapis.com"));
    /// assert_eq!(Route::Default.public_endpoint(), None);
    /// ```
    pub fn public_endpoint(self) -> Option<&'static str> {
        match self {
            Route::Anthropic => Some("https://api.anthropic.com"),
            Route::OpenAi => Some("https://api.openai.com"),
            Route::Gemini => Some("https://generativelanguage.googleapis.com"),
            Route::Default => None,
        }
    }

    /// The route that serves a wire API (Bedrock's go to the default
    /// upstream, as do the platforms' paths).
    ///
    /// ```
    /// use refusal_guard_proxy::Route;
    /// use refusal_guard::refusal::WireApi;
    /// assert_eq!(Route::serving(WireApi::OpenAiResponses), Route::OpenAi);
    /// assert_eq!(Route::serving(WireApi::BedrockConverse), Route::Default);
    /// ```
    pub fn serving(api: WireApi) -> Route {
        match api {
            WireApi::AnthropicMessages => Route::Anthropic,
            WireApi::OpenAiChatCompletions | WireApi::OpenAiResponses => Route::OpenAi,
            WireApi::GeminiGenerateContent => Route::Gemini,
            _ => Route::Default,
        }
    }

    /// The route of a request, from its path (and, where providers share a
    /// path, its headers and query); see the module's table.
    ///
    /// ```
    /// use refusal_guard_proxy::Route;
    ///
    /// let mut headers = http::HeaderMap::new();
    /// let route = |uri: &str, headers: &http::HeaderMap| Route::recognise(&uri.parse().unwrap(), headers);
    /// assert_eq!(route("/v1/messages?beta=true", &headers), Route::Anthropic);
    /// assert_eq!(route("/v1/models", &headers), Route::OpenAi);
    /// headers.insert("anthropic-version", "2023-06-01".parse().unwrap());
    /// assert_eq!(route("/v1/models", &headers), Route::Anthropic);
    /// assert_eq!(route("/openai/deployments/gpt/chat/completions", &headers), Route::Default);
    /// ```
    pub fn recognise(uri: &Uri, headers: &HeaderMap) -> Route {
        let mut segments = uri.path().split('/').skip(1);
        let first = segments.next().unwrap_or_default();
        let second = segments.next().unwrap_or_default();
        match first {
            "v1beta" | "v1alpha" => Route::Gemini,
            "upload" | "download" if matches!(second, "v1beta" | "v1alpha" | "v1") => Route::Gemini,
            "v1" => Route::of_v1(uri, headers, second, segments.next()),
            _ => Route::Default,
        }
    }

    /// The route of a `/v1/{second}/{third}...` path.
    fn of_v1(uri: &Uri, headers: &HeaderMap, second: &str, third: Option<&str>) -> Route {
        if ANTHROPIC_RESOURCES.contains(&second) {
            return Route::Anthropic;
        }
        if OPENAI_RESOURCES.contains(&second) {
            return Route::OpenAi;
        }
        match second {
            // Gemini's v1 methods: `/v1/models/{model}:generateContent`.
            "models" if third.is_some_and(|model| model.contains(':')) => Route::Gemini,
            "models" | "files" => Route::from_client(uri, headers),
            _ => Route::Default,
        }
    }

    /// Whose client sent a request for a path several providers serve.
    fn from_client(uri: &Uri, headers: &HeaderMap) -> Route {
        let has = |name: &str| headers.contains_key(name);
        if has("anthropic-version") || has("x-api-key") || has("anthropic-beta") {
            return Route::Anthropic;
        }
        let key_in_query = uri
            .query()
            .is_some_and(|q| q.split('&').any(|pair| pair.starts_with("key=")));
        if has("x-goog-api-key") || has("x-goog-api-client") || key_in_query {
            return Route::Gemini;
        }
        Route::OpenAi
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The proxy's route table: a default upstream and, with routing on, one
/// base URL per provider route.
///
/// ```
/// use refusal_guard_proxy::{Route, Routes, Upstream};
///
/// let one = Routes::single(Upstream::parse("http://127.0.0.1:9000")?);
/// assert!(!one.is_routed());
/// assert_eq!(one.base_for(Route::OpenAi).to_string(), "http://127.0.0.1:9000");
///
/// let routed = Routes::public(Upstream::parse("http://127.0.0.1:9000")?);
/// assert_eq!(routed.base_for(Route::OpenAi).to_string(), "https://api.openai.com");
/// assert_eq!(routed.base_for(Route::Default).to_string(), "http://127.0.0.1:9000");
/// # Ok::<(), refusal_guard_proxy::UpstreamError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    default: Upstream,
    /// Each provider route's base, in [`PROVIDERS`] order; `None` everywhere
    /// when routing is off.
    providers: [Option<Upstream>; 3],
}

impl Routes {
    /// One upstream for every request: the proxy without routing.
    pub fn single(upstream: Upstream) -> Routes {
        Routes {
            default: upstream,
            providers: [None, None, None],
        }
    }

    /// Routing on: each provider route to the provider's public endpoint
    /// ([`Route::public_endpoint`]), the rest to `default`. Change a route
    /// with [`Routes::route`].
    pub fn public(default: Upstream) -> Routes {
        let public = |route: Route| {
            let url = route.public_endpoint().expect("a provider route");
            Some(Upstream::parse(url).expect("a valid URL"))
        };
        Routes {
            default,
            providers: PROVIDERS.map(public),
        }
    }

    /// Sends `route`'s requests to `upstream` (for [`Route::Default`], the
    /// default upstream). Setting a provider route turns routing on, the other
    /// provider routes going to their public endpoints unless set too.
    pub fn route(mut self, route: Route, upstream: Upstream) -> Routes {
        let Some(slot) = PROVIDERS.iter().position(|provider| *provider == route) else {
            self.default = upstream;
            return self;
        };
        if !self.is_routed() {
            self = Routes::public(self.default);
        }
        self.providers[slot] = Some(upstream);
        self
    }

    /// Whether requests are routed by API (else all go to the default
    /// upstream).
    pub fn is_routed(&self) -> bool {
        self.providers.iter().any(Option::is_some)
    }

    /// The base URL a route's requests go to: the provider's when routing is
    /// on, else the default upstream. A cross-provider fallback to another
    /// provider's API takes its base from here, so that it goes where that
    /// provider's own clients' requests go.
    pub fn base_for(&self, route: Route) -> &Upstream {
        self.provider(route).unwrap_or(&self.default)
    }

    /// The default upstream (the binary's `--upstream`).
    pub fn default_upstream(&self) -> &Upstream {
        &self.default
    }

    /// The route a request takes and the upstream it goes to. Without
    /// routing it is always [`Route::Default`].
    pub fn select(&self, uri: &Uri, headers: &HeaderMap) -> (Route, &Upstream) {
        if !self.is_routed() {
            return (Route::Default, &self.default);
        }
        let route = Route::recognise(uri, headers);
        match self.provider(route) {
            Some(upstream) => (route, upstream),
            None => (Route::Default, &self.default),
        }
    }

    /// Every route in use with its upstream: the provider routes (when
    /// routing is on), then the default.
    pub fn iter(&self) -> impl Iterator<Item = (Route, &Upstream)> {
        PROVIDERS
            .iter()
            .zip(&self.providers)
            .filter_map(|(route, upstream)| Some((*route, upstream.as_ref()?)))
            .chain(std::iter::once((Route::Default, &self.default)))
    }

    fn provider(&self, route: Route) -> Option<&Upstream> {
        let slot = PROVIDERS.iter().position(|provider| *provider == route)?;
        self.providers[slot].as_ref()
    }
}

impl From<Upstream> for Routes {
    fn from(upstream: Upstream) -> Routes {
        Routes::single(upstream)
    }
}

/// The upstream alone without routing; with routing, each route named
/// (`anthropic https://api.anthropic.com, ..., default http://...`).
impl fmt::Display for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.is_routed() {
            return write!(f, "{}", self.default);
        }
        let mut first = true;
        for (route, upstream) in self.iter() {
            let comma = if first { "" } else { ", " };
            write!(f, "{comma}{route} {upstream}")?;
            first = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(uri: &str, headers: &[(&str, &str)]) -> Route {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        Route::recognise(&uri.parse().unwrap(), &map)
    }

    /// The headers each provider's SDK sends on every request (anthropic-sdk-python
    /// `_client.py` default headers and auth; openai-python `_client.py`;
    /// google-genai `_api_client.py`).
    const ANTHROPIC_SDK: &[(&str, &str)] = &[
        ("x-api-key", "sk-ant-test"),
        ("anthropic-version", "2023-06-01"),
        ("x-stainless-lang", "python"),
    ];
    const OPENAI_SDK: &[(&str, &str)] = &[
        ("authorization", "Bearer sk-test"),
        ("x-stainless-lang", "python"),
    ];
    const GENAI_SDK: &[(&str, &str)] = &[
        ("x-goog-api-key", "AIza-test"),
        ("x-goog-api-client", "google-genai-sdk/3.3.0 gl-python/3.11"),
    ];

    #[test]
    fn anthropic_sdk_and_claude_code_paths() {
        for path in [
            "/v1/messages",
            "/v1/messages?beta=true",
            "/v1/messages/count_tokens?beta=true",
            "/v1/messages/batches",
            "/v1/messages/batches/msgbatch_01/results",
            "/v1/complete",
            "/v1/models?limit=20",
            "/v1/models/claude-opus-4-7",
            "/v1/files?beta=true",
            "/v1/files/file_011/content",
            "/v1/organizations/api_keys",
            "/v1/organizations/usage_report/messages",
            "/v1/skills?beta=true",
        ] {
            assert_eq!(route(path, ANTHROPIC_SDK), Route::Anthropic, "{path}");
        }
        // Claude Code authenticated with a token sends Authorization, but
        // still anthropic-version.
        let token = [
            ("authorization", "Bearer t"),
            ("anthropic-version", "2023-06-01"),
        ];
        assert_eq!(route("/v1/models", &token), Route::Anthropic);
    }

    #[test]
    fn openai_sdk_paths() {
        for path in [
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/responses/resp_123",
            "/v1/responses/resp_123/input_items",
            "/v1/responses/input_tokens",
            "/v1/completions",
            "/v1/embeddings",
            "/v1/models",
            "/v1/models/gpt-5",
            "/v1/files",
            "/v1/files/file-abc/content",
            "/v1/batches",
            "/v1/uploads/upload_abc/parts",
            "/v1/audio/transcriptions",
            "/v1/images/generations",
            "/v1/moderations",
            "/v1/fine_tuning/jobs",
            "/v1/vector_stores/vs_1/files",
            "/v1/conversations/conv_1/items",
            "/v1/realtime/client_secrets",
            "/v1/organization/projects",
        ] {
            assert_eq!(route(path, OPENAI_SDK), Route::OpenAi, "{path}");
        }
    }

    #[test]
    fn google_genai_paths() {
        for path in [
            "/v1beta/models/gemini-2.5-pro:generateContent",
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            "/v1beta/models/gemini-2.5-pro:countTokens",
            "/v1beta/models",
            "/v1beta/files/abc",
            "/v1beta/cachedContents",
            "/v1alpha/models/gemini-2.5-pro:generateContent",
            "/v1/models/gemini-2.5-pro:generateContent",
            "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            "/v1/models",
            "/upload/v1beta/files",
            "/download/v1beta/files/abc:download?alt=media",
        ] {
            assert_eq!(route(path, GENAI_SDK), Route::Gemini, "{path}");
        }
        // The key in the query (curl, REST samples) marks a Google client.
        assert_eq!(route("/v1/models?key=AIza", &[]), Route::Gemini);
        assert_eq!(
            route("/v1/models/gemini:generateContent", &[]),
            Route::Gemini
        );
    }

    #[test]
    fn platform_and_unknown_paths_go_to_the_default() {
        for path in [
            // Vertex AI: Claude and Gemini, and express mode.
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-7:rawPredict",
            "/v1/projects/p/locations/global/publishers/anthropic/models/claude-opus-4-7:streamRawPredict",
            "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            "/v1beta1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent",
            "/v1/publishers/google/models/gemini-2.5-pro:generateContent",
            // Azure OpenAI: deployments and the v1 API.
            "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            "/openai/v1/responses",
            // Bedrock.
            "/model/anthropic.claude-opus-4-7-v1%3A0/invoke-with-response-stream",
            "/model/amazon.nova-pro-v1:0/converse",
            "/anthropic/v1/messages",
            // Prefixed, unknown, root.
            "/proxy/v1/messages",
            "/v2/anything",
            "/v1/unknown",
            "/",
            "/healthz",
        ] {
            for headers in [ANTHROPIC_SDK, OPENAI_SDK, GENAI_SDK] {
                assert_eq!(route(path, headers), Route::Default, "{path} {headers:?}");
            }
        }
    }

    #[test]
    fn wire_apis_map_to_their_routes() {
        assert_eq!(Route::serving(WireApi::AnthropicMessages), Route::Anthropic);
        assert_eq!(
            Route::serving(WireApi::OpenAiChatCompletions),
            Route::OpenAi
        );
        assert_eq!(
            Route::serving(WireApi::GeminiGenerateContent),
            Route::Gemini
        );
        assert_eq!(Route::serving(WireApi::BedrockMessages), Route::Default);
    }

    #[test]
    fn single_sends_everything_to_one_upstream() {
        let up = Upstream::parse("http://127.0.0.1:9").unwrap();
        let routes = Routes::single(up.clone());
        let headers = HeaderMap::new();
        for path in [
            "/v1/chat/completions",
            "/v1beta/models/g:generateContent",
            "/x",
        ] {
            let (route, upstream) = routes.select(&path.parse().unwrap(), &headers);
            assert_eq!((route, upstream), (Route::Default, &up), "{path}");
        }
        assert_eq!(routes.to_string(), "http://127.0.0.1:9");
        assert_eq!(routes.iter().count(), 1);
    }

    #[test]
    fn a_set_route_turns_routing_on_with_public_defaults() {
        let default = Upstream::parse("http://127.0.0.1:9").unwrap();
        let openai = Upstream::parse("http://127.0.0.1:10/prefix").unwrap();
        let routes = Routes::single(default.clone()).route(Route::OpenAi, openai.clone());
        assert!(routes.is_routed());
        assert_eq!(routes.base_for(Route::OpenAi), &openai);
        assert_eq!(
            routes.base_for(Route::Anthropic).to_string(),
            "https://api.anthropic.com"
        );
        assert_eq!(routes.base_for(Route::Default), &default);
        assert_eq!(
            routes.to_string(),
            "anthropic https://api.anthropic.com, openai http://127.0.0.1:10/prefix, \
             gemini https://generativelanguage.googleapis.com, default http://127.0.0.1:9"
        );
        let headers = HeaderMap::new();
        let (route, upstream) = routes.select(&"/v1/unknown".parse().unwrap(), &headers);
        assert_eq!((route, upstream), (Route::Default, &default));
        let other = Upstream::parse("http://127.0.0.1:11").unwrap();
        let routes = routes.route(Route::Default, other.clone());
        assert_eq!(routes.default_upstream(), &other);
        assert_eq!(routes.base_for(Route::OpenAi), &openai);
    }
}
