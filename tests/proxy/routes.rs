//! Routes through the real proxy: three provider upstreams and a default one,
//! each a real loopback server keeping its provider's contract. Each API
//! reaches its own upstream with the client's own credentials, a refusal on
//! each is recovered by a fallback on the same upstream, unrecognised and
//! platform paths reach the default, and `--upstream` alone sends all of it
//! to one upstream as before.
//!
//! The models are this file's own: the flags test runs the binary's layer,
//! which counts refused tokens into the recorder another test of this binary
//! installs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use refusal_guard::recovery::FallbackChains;
use refusal_guard::telemetry::MemorySink;
use refusal_guard::{Outcome, RefusalGuardLayer};
use refusal_guard_proxy::{Proxy, Route, Routes, Upstream};
use serde_json::json;
use support::fixture;
use support::mock_upstream::{MockUpstream, SeenRequest};
use support::proxy::{client, run_proxy};

const CLAUDE_REFUSAL: &str = "usage/anthropic-refusal.sse";
const CLAUDE_ANSWER: &str = "anthropic/anthropic-sdk-python/basic_response.txt";
const CHAT_FILTERED: &str = "openai/hand-written/chat_content_filter_empty.sse";
const CHAT_ANSWER: &str = "usage/chat-answer.sse";
const GEMINI_BLOCKED: &str = "usage/gemini-safety.sse";
const GEMINI_ANSWER: &str = "usage/gemini-answer.sse";
const RESPONSES_ANSWER: &str = "usage/responses-answer.json";

/// The four upstreams: Anthropic, OpenAI, Gemini and the default.
struct Upstreams {
    anthropic: MockUpstream,
    openai: MockUpstream,
    gemini: MockUpstream,
    default: MockUpstream,
}

impl Upstreams {
    async fn start() -> Upstreams {
        Upstreams {
            anthropic: MockUpstream::start().await.unwrap(),
            openai: MockUpstream::start().await.unwrap(),
            gemini: MockUpstream::start().await.unwrap(),
            default: MockUpstream::start().await.unwrap(),
        }
    }

    /// The paths each upstream received, in order: Anthropic, OpenAI,
    /// Gemini, default.
    fn paths(&self) -> [Vec<String>; 4] {
        let paths = |mock: &MockUpstream| mock.seen().into_iter().map(|s| s.path).collect();
        [
            paths(&self.anthropic),
            paths(&self.openai),
            paths(&self.gemini),
            paths(&self.default),
        ]
    }
}

fn chains() -> FallbackChains {
    FallbackChains::new()
        .chain("claude-opus-routes", ["claude-sonnet-routes"])
        .chain("gpt-routes", ["gpt-mini-routes"])
        .chain("gemini-pro-routes", ["gemini-flash-routes"])
}

/// A routed proxy (in process, access lines captured), serving until the
/// test ends.
async fn start_routed(up: &Upstreams, sink: MemorySink) -> (String, Arc<Mutex<Vec<String>>>) {
    let url = |mock: &MockUpstream, prefix: &str| {
        Upstream::parse(&format!("{}{prefix}", mock.url())).unwrap()
    };
    let routes = Routes::single(url(&up.default, ""))
        .route(Route::Anthropic, url(&up.anthropic, ""))
        .route(Route::OpenAi, url(&up.openai, "/openai-base"))
        .route(Route::Gemini, url(&up.gemini, ""));
    let layer = RefusalGuardLayer::new()
        .rescue(false)
        .fallback_chains(chains())
        .telemetry(sink);
    let lines = Arc::new(Mutex::new(Vec::new()));
    let written = lines.clone();
    let proxy = Proxy::new(routes, &layer)
        .unwrap()
        .access_log_to(move |line| written.lock().unwrap().push(line.to_owned()));
    assert_eq!(
        proxy.routes().base_for(Route::OpenAi).to_string(),
        format!("{}/openai-base", up.openai.url())
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(proxy.serve(listener, std::future::pending()));
    (base, lines)
}

/// A client request: `path` with `headers`, the mock script `script` under
/// the id `id`, the JSON `body`.
async fn send(
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
    script: &str,
    id: &str,
    body: Option<serde_json::Value>,
) -> (u16, Bytes) {
    let url = format!("{base}{path}");
    let mut request = match &body {
        Some(body) => client()
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string()),
        None => client().get(url),
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .header("x-mock-script", script)
        .header("x-mock-id", id)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap())
}

const ANTHROPIC_CLIENT: &[(&str, &str)] = &[
    ("x-api-key", "sk-ant-route-test"),
    ("anthropic-version", "2023-06-01"),
];
const OPENAI_CLIENT: &[(&str, &str)] = &[("authorization", "Bearer sk-openai-route-test")];
const GEMINI_CLIENT: &[(&str, &str)] = &[
    ("x-goog-api-key", "AIza-route-test"),
    ("x-goog-api-client", "google-genai-sdk/3.3.0 gl-python/3.11"),
];

async fn claude(base: &str, id: &str) -> (u16, Bytes) {
    let body = json!({"model": "claude-opus-routes", "max_tokens": 256, "stream": true,
                      "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    let script = format!("{CLAUDE_REFUSAL},{CLAUDE_ANSWER}");
    send(
        base,
        "/v1/messages",
        ANTHROPIC_CLIENT,
        &script,
        id,
        Some(body),
    )
    .await
}

async fn chat(base: &str, id: &str) -> (u16, Bytes) {
    let body = json!({"model": "gpt-routes", "stream": true,
                      "messages": [{"role": "user", "content": "Audit my SSH config"}]});
    let script = format!("{CHAT_FILTERED},{CHAT_ANSWER}");
    let path = "/v1/chat/completions";
    send(base, path, OPENAI_CLIENT, &script, id, Some(body)).await
}

async fn gemini(base: &str, id: &str) -> (u16, Bytes) {
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Audit my SSH config"}]}]});
    let script = format!("{GEMINI_BLOCKED},{GEMINI_ANSWER}");
    let path = "/v1beta/models/gemini-pro-routes:streamGenerateContent?alt=sse";
    send(base, path, GEMINI_CLIENT, &script, id, Some(body)).await
}

/// The header's value in every request an upstream saw.
fn every<'a>(seen: &'a [SeenRequest], name: &str) -> Vec<Option<&'a str>> {
    seen.iter().map(|s| s.header(name)).collect()
}

#[tokio::test]
async fn each_api_reaches_its_own_upstream_and_recovers_there() {
    let up = Upstreams::start().await;
    let sink = MemorySink::new();
    let (base, lines) = start_routed(&up, sink.clone()).await;
    let (claude, chat, gemini) = tokio::join!(
        claude(&base, "claude"),
        chat(&base, "chat"),
        gemini(&base, "gemini")
    );
    assert_eq!(claude, (200, fixture(CLAUDE_ANSWER)), "Claude's fallback");
    assert_eq!(chat, (200, fixture(CHAT_ANSWER)), "OpenAI's fallback");
    assert_eq!(gemini, (200, fixture(GEMINI_ANSWER)), "Gemini's fallback");

    let [anthropic, openai, google, default] = up.paths();
    assert_eq!(anthropic, ["/v1/messages", "/v1/messages"]);
    assert_eq!(
        openai,
        [
            "/openai-base/v1/chat/completions",
            "/openai-base/v1/chat/completions"
        ],
        "under the route's path prefix"
    );
    assert_eq!(
        google,
        [
            "/v1beta/models/gemini-pro-routes:streamGenerateContent?alt=sse",
            "/v1beta/models/gemini-flash-routes:streamGenerateContent?alt=sse"
        ]
    );
    assert!(default.is_empty(), "{default:?}");

    // The fallbacks asked for each chain's next model, on the same upstream.
    assert_eq!(
        up.anthropic.seen()[1].json()["model"],
        "claude-sonnet-routes"
    );
    assert_eq!(up.openai.seen()[1].json()["model"], "gpt-mini-routes");
    // Each upstream got the client's own credentials, and no other's, with
    // its own Host.
    let (a, o, g) = (up.anthropic.seen(), up.openai.seen(), up.gemini.seen());
    assert_eq!(every(&a, "x-api-key"), [Some("sk-ant-route-test"); 2]);
    assert_eq!(
        every(&o, "authorization"),
        [Some("Bearer sk-openai-route-test"); 2]
    );
    assert_eq!(every(&g, "x-goog-api-key"), [Some("AIza-route-test"); 2]);
    for (seen, mock) in [(&a, &up.anthropic), (&o, &up.openai), (&g, &up.gemini)] {
        for request in seen.iter() {
            let host = mock.addr().to_string();
            assert_eq!(request.header("host"), Some(host.as_str()));
            let foreign = ["x-api-key", "authorization", "x-goog-api-key"]
                .iter()
                .filter(|name| request.header(name).is_some())
                .count();
            assert_eq!(foreign, 1, "one credential only: {:?}", request.headers);
        }
    }

    let mut outcomes: Vec<_> = sink
        .records()
        .iter()
        .map(|r| (r.model.clone().unwrap_or_default(), r.outcome))
        .collect();
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    let fallback = |model: &str| (model.to_owned(), Outcome::Fallback);
    assert_eq!(
        outcomes,
        [
            fallback("claude-opus-routes"),
            fallback("gemini-pro-routes"),
            fallback("gpt-routes")
        ]
    );
    // The access log names each request's route.
    let lines = wait_for_lines(&lines, 3).await;
    for (path, route) in [
        ("/v1/messages", "anthropic"),
        ("/v1/chat/completions", "openai"),
        (
            "/v1beta/models/gemini-pro-routes:streamGenerateContent",
            "gemini",
        ),
    ] {
        let line = lines.iter().find(|l| l.contains(&format!(" {path} ")));
        let line = line.unwrap_or_else(|| panic!("no line for {path}: {lines:?}"));
        assert!(line.contains(&format!(" route={route}")), "{line}");
    }
}

async fn wait_for_lines(lines: &Arc<Mutex<Vec<String>>>, count: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = lines.lock().unwrap().clone();
        if now.len() >= count || std::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shared_and_platform_paths_go_where_their_client_belongs() {
    let up = Upstreams::start().await;
    let (base, _) = start_routed(&up, MemorySink::new()).await;
    let json = RESPONSES_ANSWER;
    // `/v1/models` is served by all three: the headers decide.
    for (headers, id) in [
        (ANTHROPIC_CLIENT, "models-a"),
        (OPENAI_CLIENT, "models-o"),
        (GEMINI_CLIENT, "models-g"),
    ] {
        let (status, _) = send(&base, "/v1/models", headers, json, id, None).await;
        assert_eq!(status, 200, "{id}");
    }
    // Vertex, Azure and unknown paths go to the default upstream.
    let vertex =
        "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-routes:rawPredict";
    let vertex_body = json!({"anthropic_version": "vertex-2023-10-16", "max_tokens": 64,
                             "messages": [{"role": "user", "content": "hi"}]});
    let vertex_script = "e2e/message_text.json";
    let (status, _) = send(
        &base,
        vertex,
        &[("authorization", "Bearer ya29.vertex")],
        vertex_script,
        "vertex",
        Some(vertex_body),
    )
    .await;
    assert_eq!(status, 200);
    let azure = "/openai/deployments/gpt-routes/chat/completions?api-version=2024-10-21";
    let azure_body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let azure_script = "e2e/chat_completion.json";
    let (status, _) = send(
        &base,
        azure,
        &[("api-key", "azure-key")],
        azure_script,
        "azure",
        Some(azure_body),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = send(&base, "/v1/unknown", OPENAI_CLIENT, json, "unknown", None).await;
    assert_eq!(status, 200);

    let [anthropic, openai, google, default] = up.paths();
    assert_eq!(anthropic, ["/v1/models"]);
    assert_eq!(openai, ["/openai-base/v1/models"]);
    assert_eq!(google, ["/v1/models"]);
    assert_eq!(default, [vertex, azure, "/v1/unknown"]);
    assert_eq!(
        up.default.seen()[1].header("api-key"),
        Some("azure-key"),
        "the Azure key reached the default upstream only"
    );
}

#[tokio::test]
async fn the_flags_route_and_upstream_alone_does_not() {
    let up = Upstreams::start().await;
    let chain = "--chain=claude-opus-routes=claude-sonnet-routes;gpt-routes=gpt-mini-routes;gemini-pro-routes=gemini-flash-routes";
    let routed = run_proxy(&[
        "--upstream",
        &up.default.url(),
        "--upstream-anthropic",
        &up.anthropic.url(),
        "--upstream-openai",
        &up.openai.url(),
        "--upstream-gemini",
        &up.gemini.url(),
        "--rescue=off",
        chain,
    ])
    .await;
    assert_eq!(claude(&routed, "flags-claude").await.0, 200);
    assert_eq!(chat(&routed, "flags-chat").await.0, 200);
    assert_eq!(gemini(&routed, "flags-gemini").await.0, 200);
    let [anthropic, openai, google, default] = up.paths();
    assert_eq!((anthropic.len(), openai.len(), google.len()), (2, 2, 2));
    assert!(default.is_empty(), "{default:?}");

    // `--upstream` alone: every API to that one upstream, as before routes.
    let one = MockUpstream::start().await.unwrap();
    let alone = run_proxy(&["--upstream", &one.url(), "--rescue=off", chain]).await;
    assert_eq!(
        claude(&alone, "alone-claude").await,
        (200, fixture(CLAUDE_ANSWER))
    );
    assert_eq!(
        chat(&alone, "alone-chat").await,
        (200, fixture(CHAT_ANSWER))
    );
    assert_eq!(
        gemini(&alone, "alone-gemini").await,
        (200, fixture(GEMINI_ANSWER))
    );
    let paths: Vec<String> = one.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths.len(), 6, "{paths:?}");
    assert_eq!(paths[0], "/v1/messages");
    assert_eq!(paths[2], "/v1/chat/completions");
    assert!(
        paths[4].starts_with("/v1beta/models/gemini-pro-routes:"),
        "{paths:?}"
    );
    assert_eq!(
        up.paths().map(|p| p.len()),
        [2, 2, 2, 0],
        "the routed upstreams saw nothing more"
    );
}
