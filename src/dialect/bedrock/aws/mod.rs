//! Signing below the guard (feature `bedrock`): [`SigV4Layer`] signs every
//! request it forwards to Amazon Bedrock with the operator's credentials.
//!
//! A SigV4 signature covers the method, the path, the host and a hash of
//! the body, so any recovery (another model in the path, the rescue note in
//! the body) breaks the client's own signature. Placed under the guard, the
//! layer signs each attempt as it is sent: the original, every fallback, the
//! rescue. It takes off whatever authentication the request came with
//! (`Authorization`, `X-Amz-Date`, `X-Amz-Security-Token`,
//! `X-Amz-Content-Sha256`) and signs the request as it stands, every header
//! but `Connection`-style hop-by-hop ones, for the service `bedrock` (or
//! `bedrock-mantle` on the Messages API's `bedrock-mantle` hosts). With a
//! Bedrock API key instead ([`Credentials::Bearer`]) it sets
//! `Authorization: Bearer`, which binds no body.
//!
//! ```
//! use refusal_guard::aws::{Credentials, SigV4Layer};
//! use refusal_guard::RefusalGuardLayer;
//! use tower::ServiceBuilder;
//!
//! let keys = Credentials::keys("AKIDEXAMPLE", "secret", None);
//! let stack = ServiceBuilder::new()
//!     .layer(RefusalGuardLayer::new())
//!     .layer(SigV4Layer::new(keys, "us-east-1"));
//! # let _ = stack;
//! ```

mod credentials;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, HOST};
use http::Request;
use http_body_util::BodyExt;
use tower_layer::Layer;
use tower_service::Service;

pub use credentials::{Credentials, CredentialsError};

use crate::replay::ReplayBody;
use crate::BoxError;

/// The SigV4 service name of Bedrock's runtime.
pub const BEDROCK_SERVICE: &str = "bedrock";

/// The SigV4 service name of the Messages API on `bedrock-mantle` hosts.
pub const MANTLE_SERVICE: &str = "bedrock-mantle";

/// Headers that carry a request's authentication: replaced when signing.
const AUTH_HEADERS: &[&str] = &[
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// Bedrock takes request bodies up to 25 MB; a body larger than this is
/// not read into memory to be signed.
const MAX_SIGNED_BODY: usize = 32 << 20;

/// What the layer signs with and for.
#[derive(Clone)]
struct Signer {
    credentials: Credentials,
    region: String,
    service: Option<String>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("credentials", &self.credentials)
            .field("region", &self.region)
            .field("service", &self.service)
            .finish()
    }
}

/// Signs every request with SigV4 (or sets a Bedrock API key), so that
/// requests the guard rewrote still authenticate.
#[derive(Debug, Clone)]
pub struct SigV4Layer {
    signer: Arc<Signer>,
}

impl SigV4Layer {
    /// A layer that signs with `credentials` for `region`.
    pub fn new(credentials: Credentials, region: impl Into<String>) -> Self {
        SigV4Layer {
            signer: Arc::new(Signer {
                credentials,
                region: region.into(),
                service: None,
            }),
        }
    }

    /// Signs for this service name whatever the host (by default `bedrock`,
    /// or `bedrock-mantle` for `bedrock-mantle` hosts).
    pub fn service(mut self, service: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.signer).service = Some(service.into());
        self
    }
}

impl<S> Layer<S> for SigV4Layer {
    type Service = SigV4<S>;

    fn layer(&self, inner: S) -> SigV4<S> {
        SigV4 {
            inner,
            signer: self.signer.clone(),
        }
    }
}

/// The service [`SigV4Layer`] builds.
#[derive(Debug, Clone)]
pub struct SigV4<S> {
    inner: S,
    signer: Arc<Signer>,
}

/// Why a request could not be signed. Its text names no secret.
#[derive(Debug)]
pub struct SignError(String);

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refusal-guard: cannot sign the request for Bedrock: {}",
            self.0
        )
    }
}

impl std::error::Error for SignError {}

impl<S, B> Service<Request<B>> for SigV4<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: ReplayBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The inner service that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let signer = self.signer.clone();
        Box::pin(async move {
            let request = signer.sign(request).await?;
            inner.call(request).await.map_err(Into::into)
        })
    }
}

impl Signer {
    async fn sign<B>(&self, request: Request<B>) -> Result<Request<B>, BoxError>
    where
        B: ReplayBody<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = request.into_parts();
        for name in AUTH_HEADERS {
            parts.headers.remove(*name);
        }
        let (access_key_id, secret_access_key, session_token) = match &self.credentials {
            Credentials::Bearer(token) => {
                let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    SignError("the Bedrock API key is not a valid header value".into())
                })?;
                let mut value = value;
                value.set_sensitive(true);
                parts.headers.insert(AUTHORIZATION, value);
                return Ok(Request::from_parts(parts, body));
            }
            Credentials::Keys {
                access_key_id,
                secret_access_key,
                session_token,
            } => (access_key_id, secret_access_key, session_token),
        };
        let body = read_bounded(body).await?;
        if !parts.headers.contains_key(HOST) {
            let host = parts
                .uri
                .authority()
                .ok_or_else(|| SignError("the request has no host".into()))?;
            let host = HeaderValue::from_str(host.as_str())
                .map_err(|_| SignError("the host is not a valid header value".into()))?;
            parts.headers.insert(HOST, host);
        }
        parts
            .headers
            .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        self.sign_v4(
            &mut parts,
            (access_key_id, secret_access_key, session_token),
            &body,
        )?;
        Ok(Request::from_parts(parts, B::from_bytes(body)))
    }

    /// Adds SigV4's headers for `body` to `parts`, signed with the access
    /// key, the secret and the session token.
    fn sign_v4(
        &self,
        parts: &mut http::request::Parts,
        (access_key_id, secret_access_key, session_token): (&String, &String, &Option<String>),
        body: &Bytes,
    ) -> Result<(), SignError> {
        let service = self.service.as_deref().unwrap_or_else(|| {
            let host = parts.uri.host().unwrap_or_default();
            if host.to_ascii_lowercase().starts_with("bedrock-mantle") {
                MANTLE_SERVICE
            } else {
                BEDROCK_SERVICE
            }
        });
        let identity = aws_credential_types::Credentials::new(
            access_key_id,
            secret_access_key,
            session_token.clone(),
            None,
            "refusal-guard",
        )
        .into();
        let settings = aws_sigv4::http_request::SigningSettings::default();
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(service)
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|error| SignError(error.to_string()))?
            .into();
        let uri = parts.uri.to_string();
        let headers: Vec<(&str, &str)> = parts
            .headers
            .iter()
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
            .collect();
        let signable = aws_sigv4::http_request::SignableRequest::new(
            parts.method.as_str(),
            uri.as_str(),
            headers.into_iter(),
            aws_sigv4::http_request::SignableBody::Bytes(body),
        )
        .map_err(|error| SignError(error.to_string()))?;
        let (instructions, _signature) = aws_sigv4::http_request::sign(signable, &params)
            .map_err(|error| SignError(error.to_string()))?
            .into_parts();
        let (added, _query) = instructions.into_parts();
        for header in added {
            let name = HeaderName::from_static(header.name());
            let mut value = HeaderValue::from_str(header.value())
                .map_err(|_| SignError("a signed header is not a valid header value".into()))?;
            value.set_sensitive(header.sensitive());
            parts.headers.insert(name, value);
        }
        Ok(())
    }
}

/// The whole body, if it is within [`MAX_SIGNED_BODY`].
async fn read_bounded<B>(mut body: B) -> Result<Bytes, BoxError>
where
    B: ReplayBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(mut data) = frame.map_err(Into::into)?.into_data() {
            if whole.len() + data.remaining() > MAX_SIGNED_BODY {
                return Err(SignError(format!(
                    "the request body is over {} MiB",
                    MAX_SIGNED_BODY >> 20
                ))
                .into());
            }
            whole.extend_from_slice(&data.copy_to_bytes(data.remaining()));
        }
    }
    Ok(whole.freeze())
}
