//! Claude on Amazon Bedrock (feature `bedrock`), three surfaces:
//!
//! - **InvokeModel** (`POST /model/{modelId}/invoke`) and
//!   **InvokeModelWithResponseStream** (`.../invoke-with-response-stream`):
//!   a Messages body without `model` (it is in the path, URL-encoded) and
//!   `stream`, with `anthropic_version: "bedrock-2023-05-31"`; the stream is
//!   an AWS event stream whose `chunk` events carry Anthropic events. The
//!   Anthropic rules judge them (`messages.rs`, `BedrockInvokeModel`).
//! - **Converse** (`.../converse`) and **ConverseStream**
//!   (`.../converse-stream`): Bedrock's own message shape, judged on its
//!   own terms: `stopReason` `content_filtered` or `guardrail_intervened`
//!   is a refusal (`converse.rs`).
//! - **The Messages API on Bedrock** (`POST /anthropic/v1/messages` on
//!   `bedrock-mantle.{region}.api.aws` or `bedrock-runtime` hosts): the
//!   first-party wire, without server-side fallbacks or fallback credit
//!   (`messages.rs`, `BedrockMessages`).
//!
//! No surface has server-side fallbacks. InvokeModel has fallback credit
//! under Bedrock's own beta (`fallback-credit-2026-06-09` in the body's
//! `anthropic_beta`): a fallback presents the refusal's token when the client's
//! request opted in.
//!
//! Bedrock's error shape (`errors.rs`) and its place in the translation of
//! fallbacks (`translate.rs`) are built without the feature too: a request
//! to a Bedrock path gets Bedrock's errors either way.

#[cfg(feature = "bedrock")]
#[cfg_attr(docsrs, doc(cfg(feature = "bedrock")))]
pub mod aws;
#[cfg(feature = "bedrock")]
mod converse;
#[cfg(feature = "bedrock")]
pub(crate) mod eventstream;
#[cfg(feature = "bedrock")]
pub(crate) mod frames;
#[cfg(feature = "bedrock")]
mod messages;

#[cfg(feature = "bedrock")]
pub(crate) use converse::BedrockConverse;
#[cfg(feature = "bedrock")]
pub(crate) use messages::{BedrockInvokeModel, BedrockMessages};
