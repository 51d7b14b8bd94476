//! Errors the guard or the proxy answers with itself, in the error shape of
//! the API the request was for (Anthropic, OpenAI or Gemini JSON), so that
//! SDKs raise them as the provider's own errors.

// The provider JSON they are made of lives with the dialects; this module
// is their public face.
pub use crate::dialect::errors::{api_error, api_error_for, provider_error, provider_error_for};
