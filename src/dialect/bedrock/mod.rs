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

pub(crate) mod errors;
pub(crate) mod translate;

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

use crate::dialect::facts::{Api, Folder};
use crate::dialect::Dialect;
use crate::refusal::{Provider, WireApi};

/// Bedrock's folder: Anthropic's models on Amazon Bedrock. A chain entry
/// never names Bedrock: a fallback to it goes through the client's own API.
pub(crate) static FOLDER: Folder = Folder {
    provider: None,
    apis: &[&MESSAGES, &INVOKE_MODEL, &CONVERSE],
};

/// The Messages API on Bedrock: Anthropic's error shape.
static MESSAGES: Api = Api {
    wire_api: WireApi::BedrockMessages,
    name: "bedrock_messages",
    dialect: built::MESSAGES,
    errors: &crate::dialect::anthropic::errors::SHAPE,
    ..BEDROCK
};

/// InvokeModel and InvokeModelWithResponseStream.
static INVOKE_MODEL: Api = Api {
    wire_api: WireApi::BedrockInvokeModel,
    name: "bedrock_invoke_model",
    dialect: built::INVOKE_MODEL,
    ..BEDROCK
};

/// Converse and ConverseStream.
static CONVERSE: Api = Api {
    wire_api: WireApi::BedrockConverse,
    name: "bedrock_converse",
    dialect: built::CONVERSE,
    ..BEDROCK
};

/// What Bedrock's surfaces share.
const BEDROCK: Api = Api {
    wire_api: WireApi::BedrockConverse,
    name: "",
    provider: Provider::Anthropic,
    platform: "bedrock",
    gen_ai_system: "aws.bedrock",
    errors: &errors::SHAPE,
    translation: &translate::TRANSLATION,
    dialect: None,
};

/// The dialects, when the `bedrock` feature builds them.
#[cfg(feature = "bedrock")]
mod built {
    use super::{BedrockConverse, BedrockInvokeModel, BedrockMessages, Dialect};

    pub(super) const MESSAGES: Option<&'static dyn Dialect> = Some(&BedrockMessages);
    pub(super) const INVOKE_MODEL: Option<&'static dyn Dialect> = Some(&BedrockInvokeModel);
    pub(super) const CONVERSE: Option<&'static dyn Dialect> = Some(&BedrockConverse);
}

#[cfg(not(feature = "bedrock"))]
mod built {
    use super::Dialect;

    pub(super) const MESSAGES: Option<&'static dyn Dialect> = None;
    pub(super) const INVOKE_MODEL: Option<&'static dyn Dialect> = None;
    pub(super) const CONVERSE: Option<&'static dyn Dialect> = None;
}
