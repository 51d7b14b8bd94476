//! A scripted Amazon Bedrock runtime on a real loopback HTTP server.
//!
//! It keeps Bedrock's rules where the guard could break them:
//! - every request must carry a SigV4 signature that this module recomputes
//!   on its own (a hand-written canonical request and HMAC-SHA256 over
//!   `sha2`, not the `aws-sigv4` crate the guard signs with) from the
//!   request exactly as received; a mismatch gets Bedrock's 403
//!   `InvalidSignatureException`, `{"message": ...}`, and no reply is used;
//! - streams are real AWS event streams: frames encoded here by hand with
//!   their CRC32s (`crc32fast`), `chunk` payloads base64 with a `p` pad;
//! - the model is in the path; replies are scripted per request in order;
//! - every request keeps Bedrock's request contract
//!   ([`Contract::bedrock`]): a broken one gets Bedrock's error, is
//!   recorded, and fails the test when the runtime's last clone goes.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::contract::{Contract, Tripwire, Violation, Violations};

/// The operator's test credentials.
pub const ACCESS_KEY_ID: &str = "AKIDEXAMPLEBEDROCK";
pub const SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
pub const SESSION_TOKEN: &str = "FQoGZXIvYXdzEXAMPLEsessiontoken==";
pub const REGION: &str = "us-east-1";

/// One frame of an AWS event stream, string headers only.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded_headers = Vec::new();
    for (name, value) in headers {
        encoded_headers.push(name.len() as u8);
        encoded_headers.extend_from_slice(name.as_bytes());
        encoded_headers.push(7); // string
        encoded_headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
        encoded_headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + encoded_headers.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(encoded_headers.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&encoded_headers);
    out.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// An InvokeModelWithResponseStream `chunk` carrying one Anthropic event.
pub fn chunk(event: &Value) -> Vec<u8> {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
    let payload = json!({"bytes": bytes, "p": "abcdefghijklmnopqrstuvwxyzABCDEF"});
    frame(
        &[
            (":event-type", "chunk"),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// A ConverseStream event.
pub fn converse_event(name: &str, payload: &Value) -> Vec<u8> {
    frame(
        &[
            (":event-type", name),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// An exception frame, as Bedrock ends a stream that failed.
pub fn exception(kind: &str, message: &str) -> Vec<u8> {
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": message}).to_string().as_bytes(),
    )
}

/// The Anthropic events of an answer: `text` as one delta.
pub fn answer_events(model: &str, text: &str) -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_b", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop", "amazon-bedrock-invocationMetrics": {"inputTokenCount": 10,
            "outputTokenCount": 5, "invocationLatency": 100, "firstByteLatency": 50}}),
    ]
}

/// The Anthropic events of an empty refusal, optionally after thinking.
pub fn refusal_events(model: &str, think_first: bool) -> Vec<Value> {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_r", "type": "message",
        "role": "assistant", "model": model, "content": [], "stop_reason": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ];
    if think_first {
        events.push(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}));
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "The user asks about..."}}));
        events.push(json!({"type": "content_block_stop", "index": 0}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_sequence": null,
        "stop_details": {"type": "refusal", "category": "cyber", "explanation": "No."}}, "usage": {"output_tokens": 3}}));
    events.push(json!({"type": "message_stop"}));
    events
}

/// An InvokeModel stream of these events, one frame per chunk.
pub fn invoke_stream(events: &[Value]) -> Vec<Bytes> {
    events.iter().map(|e| Bytes::from(chunk(e))).collect()
}

/// A scripted reply.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    /// Sent as separate writes, in order.
    pub chunks: Vec<Bytes>,
}

impl Reply {
    pub fn stream(chunks: Vec<Bytes>) -> Self {
        Reply {
            status: 200,
            content_type: "application/vnd.amazon.eventstream",
            headers: vec![("x-amzn-requestid", "req-1".into())],
            chunks,
        }
    }

    pub fn json(body: &Value) -> Self {
        Reply {
            status: 200,
            content_type: "application/json",
            headers: vec![("x-amzn-requestid", "req-1".into())],
            chunks: vec![Bytes::from(body.to_string())],
        }
    }
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// `Ok` when its signature verified (or it carried a bearer key).
    pub verified: Result<(), String>,
}

impl Seen {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

struct State {
    replies: VecDeque<Reply>,
    seen: Vec<Seen>,
    token: Option<String>,
    bearer: Option<String>,
    violations: Violations,
}

/// The scripted Bedrock runtime.
#[derive(Clone)]
pub struct BedrockUpstream {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Held by the clones only, not by the server's tasks.
    _tripwire: Arc<Tripwire>,
}

impl BedrockUpstream {
    /// Serves `replies` in order to requests signed with the test keys
    /// (with `session_token` when given), or carrying `bearer`.
    pub async fn start(
        replies: Vec<Reply>,
        session_token: Option<&str>,
        bearer: Option<&str>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let violations = Violations::keeping(Contract::new().bedrock());
        let tripwire = Arc::new(Tripwire(violations.clone()));
        let state = Arc::new(Mutex::new(State {
            replies: replies.into(),
            seen: Vec::new(),
            token: session_token.map(str::to_owned),
            bearer: bearer.map(str::to_owned),
            violations,
        }));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(answer(state, request).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        BedrockUpstream {
            addr,
            state,
            _tripwire: tripwire,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// The requests answered with Bedrock's contract error, cleared (for a
    /// test that sends a broken request on purpose).
    pub fn take_violations(&self) -> Vec<Violation> {
        self.state.lock().unwrap().violations.take()
    }
}

async fn answer(
    state: Arc<Mutex<State>>,
    request: Request<hyper::body::Incoming>,
) -> Response<ChunkBody> {
    let (parts, body) = request.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let (token, bearer, violations) = {
        let state = state.lock().unwrap();
        (
            state.token.clone(),
            state.bearer.clone(),
            state.violations.clone(),
        )
    };
    let verified = match (
        &bearer,
        parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok()),
    ) {
        (Some(key), Some(sent)) if sent.starts_with("Bearer ") => (sent == format!("Bearer {key}"))
            .then_some(())
            .ok_or_else(|| "wrong bearer key".to_owned()),
        _ => verify_sigv4(
            &BEDROCK_KEYS,
            parts.method.as_str(),
            &path,
            &parts.headers,
            &body,
            token.as_deref(),
        ),
    };
    let broken = violations
        .check(parts.method.as_str(), &path, &parts.headers, &body)
        .err();
    let seen = Seen {
        method: parts.method.to_string(),
        path: path.clone(),
        headers: parts.headers.clone(),
        body,
        verified: verified.clone(),
    };
    let reply = {
        let mut state = state.lock().unwrap();
        state.seen.push(seen);
        match (&verified, &broken) {
            (Ok(()), None) => state.replies.pop_front(),
            _ => None,
        }
    };
    if let Err(why) = verified {
        return json_response(403, "InvalidSignatureException", &format!(
            "The request signature we calculated does not match the signature you provided. ({why})"));
    }
    // What the real runtime rejects is rejected here too, as it answers.
    if let Some(broken) = broken {
        return broken.response().map(|body| ChunkBody::new(vec![body]));
    }
    if path.starts_with("/inference-profiles") {
        if let Some(reply) = reply {
            return respond(reply);
        }
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(ChunkBody::new(vec![Bytes::from(
                json!({"inferenceProfileSummaries": []}).to_string(),
            )]))
            .unwrap();
    }
    match reply {
        Some(reply) => respond(reply),
        None => json_response(
            500,
            "InternalServerException",
            "the script has no reply left",
        ),
    }
}

fn respond(reply: Reply) -> Response<ChunkBody> {
    let mut builder = Response::builder()
        .status(reply.status)
        .header("content-type", reply.content_type);
    for (name, value) in &reply.headers {
        builder = builder.header(*name, value.as_str());
    }
    builder.body(ChunkBody::new(reply.chunks)).unwrap()
}

fn json_response(status: u16, kind: &str, message: &str) -> Response<ChunkBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header(
            "x-amzn-errortype",
            format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        )
        .body(ChunkBody::new(vec![Bytes::from(
            json!({"message": message}).to_string(),
        )]))
        .unwrap()
}

/// A body sent as separate chunks, a moment apart, so that the client reads
/// them as separate network reads.
pub struct ChunkBody {
    chunks: VecDeque<Bytes>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ChunkBody {
    fn new(chunks: Vec<Bytes>) -> Self {
        ChunkBody {
            chunks: chunks.into(),
            pause: None,
        }
    }
}

impl Body for ChunkBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(pause) = self.pause.as_mut() {
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.pause = None;
        }
        match self.chunks.pop_front() {
            Some(chunk) => {
                self.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(2))));
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            None => Poll::Ready(None),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104), written out so the check shares no code with
/// the signer under test.
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// RFC 3986 encoding of every byte but the unreserved ones.
fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' && at + 2 < bytes.len() {
            if let Ok(byte) = u8::from_str_radix(&text[at + 1..at + 3], 16) {
                out.push(byte);
                at += 3;
                continue;
            }
        }
        out.push(bytes[at]);
        at += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whose signature [`verify_sigv4`] expects.
pub struct Keys<'a> {
    pub id: &'a str,
    pub secret: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

/// What the scripted runtime expects: service `bedrock`, the test region
/// and keys.
pub const BEDROCK_KEYS: Keys<'static> = Keys {
    id: ACCESS_KEY_ID,
    secret: SECRET_ACCESS_KEY,
    region: REGION,
    service: "bedrock",
};

/// Recomputes a SigV4 signature of these keys from a request as received,
/// as AWS does: the path encoded once more (non-S3 services), the query
/// sorted, the signed headers trimmed.
pub fn verify_sigv4(
    keys: &Keys<'_>,
    method: &str,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &[u8],
    token: Option<&str>,
) -> Result<(), String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let auth = header("authorization").ok_or("no authorization header")?;
    let rest = auth
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or("not AWS4-HMAC-SHA256")?;
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',') {
        let (key, value) = part
            .trim()
            .split_once('=')
            .ok_or("malformed authorization")?;
        match key {
            "Credential" => credential = Some(value),
            "SignedHeaders" => signed = Some(value),
            "Signature" => signature = Some(value),
            _ => return Err(format!("unknown authorization part {key}")),
        }
    }
    let (credential, signed, signature) = (
        credential.ok_or("no Credential")?,
        signed.ok_or("no SignedHeaders")?,
        signature.ok_or("no Signature")?,
    );
    let scope: Vec<&str> = credential.split('/').collect();
    if scope.len() != 5
        || scope[0] != keys.id
        || scope[2] != keys.region
        || scope[3] != keys.service
        || scope[4] != "aws4_request"
    {
        return Err(format!("unexpected credential scope {credential}"));
    }
    let date = header("x-amz-date").ok_or("no x-amz-date")?;
    if !date.starts_with(scope[1]) {
        return Err("x-amz-date is not the scope's date".into());
    }
    let names: Vec<&str> = signed.split(';').collect();
    for needed in ["host", "x-amz-date"] {
        if !names.contains(&needed) {
            return Err(format!("{needed} is not signed"));
        }
    }
    let sent_token = header("x-amz-security-token");
    let token_ok = match token {
        Some(token) => sent_token == Some(token) && names.contains(&"x-amz-security-token"),
        None => sent_token.is_none(),
    };
    if !token_ok {
        return Err("the session token is missing, unsigned or unexpected".into());
    }
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let canonical_path = uri_encode(path, true);
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k), false),
                uri_encode(&percent_decode(v), false),
            )
        })
        .collect();
    pairs.sort();
    let canonical_query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in &names {
        let values: Vec<String> = headers
            .get_all(*name)
            .iter()
            .map(|v| {
                v.to_str()
                    .unwrap_or_default()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        if values.is_empty() {
            return Err(format!("signed header {name} is missing"));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let canonical = format!(
        "{method}\n{canonical_path}\n{canonical_query}\n{canonical_headers}\n{signed}\n{}",
        hex(&Sha256::digest(body))
    );
    let scope_text = scope[1..].join("/");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope_text}\n{}",
        hex(&Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac(
        format!("AWS4{}", keys.secret).as_bytes(),
        scope[1].as_bytes(),
    );
    for part in [scope[2], scope[3], "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    let expected = hex(&hmac(&key, to_sign.as_bytes()));
    if expected == signature {
        Ok(())
    } else {
        Err("signature mismatch".into())
    }
}
