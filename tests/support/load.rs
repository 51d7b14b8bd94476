//! Traffic shaped as `shared/perf/loadgen` sends it, without building it:
//! each client on one kept-alive HTTP/1.1 connection of its own, posting
//! ~20 KB streamed Messages requests (a system prompt and five turns)
//! back to back and reading each streamed answer to its end.

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// Words as loadgen's filler repeats them.
const WORDS: [&str; 12] = [
    "the", "proxy", "streams", "each", "token", "back", "to", "the", "client", "under", "load",
    "again",
];

fn filler(seed: usize, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 16);
    let mut n = seed;
    while text.len() < bytes {
        text.push_str(WORDS[n % WORDS.len()]);
        text.push(if n % 17 == 0 { '.' } else { ' ' });
        n += 1;
    }
    text.truncate(bytes);
    text
}

/// A streamed Messages request of about `kb` KiB as loadgen builds it (a
/// system prompt, then user, assistant, user, assistant, user), its first
/// user turn opening with `first`: a conversation of its own per `first`.
pub fn loadgen_request(model: &str, kb: usize, first: &str) -> Value {
    let total = kb * 1024;
    let part = |seed, share: f64| filler(seed, (total as f64 * share) as usize);
    json!({
        "model": model, "max_tokens": 1024, "stream": true, "temperature": 0.7,
        "system": [{"type": "text", "text": part(1, 0.40)}],
        "messages": [
            {"role": "user", "content": format!("{first} {}", part(2, 0.15))},
            {"role": "assistant", "content": part(3, 0.10)},
            {"role": "user", "content": [{"type": "text", "text": part(4, 0.15)}]},
            {"role": "assistant", "content": part(5, 0.08)},
            {"role": "user", "content": part(6, 0.10)},
        ],
        "metadata": {"user_id": "user_perf_0001"},
    })
}

/// One kept-alive HTTP/1.1 connection, as each loadgen worker holds.
pub struct KeepAlive {
    host: String,
    sender: SendRequest<Full<Bytes>>,
}

impl KeepAlive {
    /// Connects to `url` (`http://HOST:PORT`).
    pub async fn connect(url: &str) -> KeepAlive {
        let host = url.trim_start_matches("http://").to_owned();
        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        KeepAlive { host, sender }
    }

    /// Posts `body` to `path` with `headers` on this connection and reads
    /// the answer to its end: its status and body, or why the connection
    /// failed it (a connection the server closed is not reopened).
    pub async fn post(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut request = Request::post(path)
            .header("host", &self.host)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection: {e}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?;
        Ok((status, body.to_bytes()))
    }
}
