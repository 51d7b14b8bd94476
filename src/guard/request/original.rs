//! The request as the guard read it and sends it: the client's body,
//! parsed only once something rewrites it; the original as sent; and the
//! draft a recovery step rewrites.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderValue, Request};
use serde_json::Value;

use crate::chunks::Chunks;
use crate::dialect::{ComposedFallbacks, Dialect};
use crate::replay::ReplayBody;
use crate::reserve::Share;

/// A request body as the client sent it, parsed only once something
/// rewrites it: most requests go out as they came.
pub(crate) struct JsonBody {
    original: Chunks,
    parsed: Option<Value>,
}

impl JsonBody {
    /// The body as read; the caller has seen that it is a JSON object.
    pub(crate) fn new(original: Chunks) -> Self {
        JsonBody {
            original,
            parsed: None,
        }
    }

    /// The body as JSON to rewrite, parsed on the first call. `None` when it
    /// is JSON too deep for the parser, which the head read does not see.
    pub(crate) fn json_mut(&mut self) -> Option<&mut Value> {
        if self.parsed.is_none() {
            self.parsed = serde_json::from_slice(&self.original.join()).ok();
        }
        self.parsed.as_mut()
    }

    /// A copy of the body as JSON.
    pub(crate) fn to_json(&self) -> Option<Value> {
        match &self.parsed {
            Some(json) => Some(json.clone()),
            None => serde_json::from_slice(&self.original.join()).ok(),
        }
    }
}

/// The request as the guard sent it; recoveries start from a draft of it.
pub(crate) struct Original {
    pub(crate) parts: http::request::Parts,
    pub(crate) body: JsonBody,
    /// Whether an outbound rewrite changed the body.
    pub(crate) rewritten: bool,
    /// The server-side fallbacks the guard wrote into the request, to take
    /// back.
    pub(crate) composed: Option<ComposedFallbacks>,
    /// The layer-wide pool's part for the buffered request body, given back
    /// when the call is decided.
    pub(crate) _share: Arc<Share>,
}

impl Original {
    /// Takes back the server-side fallbacks the guard wrote, if it wrote
    /// any, leaving the request as the client wrote it there.
    pub(crate) fn withdraw_composed_fallbacks(&mut self, dialect: &dyn Dialect) {
        let composed = self.composed.take();
        if let (Some(composed), Some(features), Some(json)) =
            (composed, dialect.anthropic(), self.body.json_mut())
        {
            features.restore_fallbacks(&mut self.parts.headers, json, &composed);
        }
    }

    /// The request to send: the client's bytes, or the rewritten JSON.
    pub(crate) fn request<B: ReplayBody>(&self) -> Request<B> {
        match (&self.body.parsed, self.rewritten) {
            (Some(json), true) => request_of(self.parts.clone(), json),
            _ => with_body(self.parts.clone(), self.body.original.join(), false),
        }
    }

    /// A copy for a recovery step to rewrite; `None` when the body cannot
    /// be parsed whole.
    pub(crate) fn draft(&self) -> Option<Template> {
        Some(Template {
            parts: self.parts.clone(),
            json: self.body.to_json()?,
            composed: self.composed.clone(),
            _share: self._share.clone(),
        })
    }
}

/// A recovery step's request, before it is sent.
#[derive(Clone)]
pub(crate) struct Template {
    pub(crate) parts: http::request::Parts,
    pub(crate) json: Value,
    /// The server-side fallbacks the guard wrote into the original.
    pub(crate) composed: Option<ComposedFallbacks>,
    /// The layer-wide pool's part for the buffered request body, given back
    /// when the call is decided.
    pub(crate) _share: Arc<Share>,
}

impl Template {
    /// Aims the request at another model: the server-side fallbacks the
    /// guard wrote for the requested model (within its allowlist, never
    /// naming it) taken back first, the client's own kept for the dialect
    /// to fit to the new model.
    pub(crate) fn aim_at(
        &mut self,
        dialect: &dyn Dialect,
        model: &str,
    ) -> Result<(), crate::dialect::RewriteError> {
        if let (Some(composed), Some(features)) = (self.composed.take(), dialect.anthropic()) {
            features.restore_fallbacks(&mut self.parts.headers, &mut self.json, &composed);
        }
        dialect.swap_model(&mut self.parts.uri, &mut self.json, model)
    }

    pub(crate) fn request<B: ReplayBody>(&self, json: &Value) -> Request<B> {
        request_of(self.parts.clone(), json)
    }
}

fn request_of<B: ReplayBody>(parts: http::request::Parts, json: &Value) -> Request<B> {
    let bytes = Bytes::from(serde_json::to_vec(json).unwrap_or_default());
    with_body(parts, bytes, true)
}

/// Builds a request, making its length headers true of the new body.
pub(crate) fn with_body<B: ReplayBody>(
    mut parts: http::request::Parts,
    bytes: Bytes,
    rewritten: bool,
) -> Request<B> {
    if rewritten {
        parts.headers.remove(TRANSFER_ENCODING);
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    }
    Request::from_parts(parts, B::from_bytes(bytes))
}
