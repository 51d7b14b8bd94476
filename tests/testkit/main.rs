//! The testkit as an agent's author uses it: the simulated provider on
//! loopback, in front of the guard started in process, read by a plain
//! HTTP client as each API's client reads it.
//!
//! - `as_documented`: the testkit used exactly as its README shows;
//! - `replies`: each scripted reply, per wire API, streamed and not, as the
//!   client sees it through the guard (recovered, or passed through as
//!   sent);
//! - `rates`: seeded refusal rates reproducible, whatever the order, and
//!   computable without sending anything;
//! - `state`: a simulator's state is its own, shared only when asked.

mod as_documented;
mod rates;
mod replies;
mod state;

use refusal_guard::refusal::WireApi;
use refusal_guard::{header, RefusalGuardLayer};
use refusal_guard_proxy::{Proxy, RunningProxy, Upstream};
use refusal_guard_testkit::{SimulatedServer, Simulator};
use serde_json::Value;

/// The simulator on loopback, and the guard (`layer`) started in process
/// in front of it.
async fn guarded(
    simulator: &Simulator,
    layer: &RefusalGuardLayer,
) -> (SimulatedServer, RunningProxy) {
    let server = simulator.serve().await;
    let upstream = Upstream::parse(&server.base_url()).unwrap();
    let guard = Proxy::new(upstream, layer)
        .unwrap()
        .access_log(false)
        .start()
        .await
        .unwrap();
    (server, guard)
}

/// What a client got: the status, the guard's recovery header, the
/// `retry-after` header, the body.
#[derive(Debug)]
struct Got {
    status: u16,
    recovery: Option<String>,
    retry_after: Option<String>,
    body: String,
}

/// Posts `body` to `path` under `base` with `client`, as a client with no
/// middleware hook does.
async fn post(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> Got {
    let response = client
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .timeout(std::time::Duration::from_secs(20))
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Got {
        status: response.status().as_u16(),
        recovery: header(header::RECOVERY),
        retry_after: header("retry-after"),
        body: response.text().await.unwrap(),
    }
}

/// A request of `api` to `model` with `prompt`, posted to `base` with
/// `client`.
async fn ask(
    client: &reqwest::Client,
    base: &str,
    (api, model): (WireApi, &str),
    prompt: &str,
    stream: bool,
) -> Got {
    let (path, body) = support::wire::request(api, model, prompt, stream);
    post(client, base, &path, &body).await
}
