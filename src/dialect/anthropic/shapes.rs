//! The shapes of a whole message and of a stream event, as typed fields
//! borrowed from the body's bytes: read without building a `Value` when
//! they fit.

use serde::Deserialize;

use crate::dialect::fields::{Count, Flag, Obj, RawText, Str};
use crate::dialect::{known, Finding, Iterations, RefusalInfo, ServerFallback};

use super::signals::*;
use crate::refusal::Prefill as ClaimState;
use crate::refusal::{FallbackCredit, RefusalSignal, Usage};

/// The fields of a whole message that [`AnthropicMessages`] judges, read
/// straight from the body's bytes (strings borrowed where they hold no
/// escape). A body these types do not fit (a key twice, an object or a list
/// where none belongs) is read as a whole `Value` instead.
#[derive(Deserialize)]
pub(super) struct MessageFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(default, borrow)]
    pub(super) id: Str<'a>,
    #[serde(default, borrow)]
    pub(super) model: Str<'a>,
    #[serde(default, borrow)]
    pub(super) content: Option<Vec<Obj<BlockFields<'a>>>>,
    #[serde(default, borrow)]
    pub(super) stop_reason: Str<'a>,
    #[serde(default, borrow)]
    pub(super) stop_details: Option<Obj<StopDetailsFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) usage: Option<Obj<UsageFields<'a>>>,
}

#[derive(Deserialize)]
pub(super) struct BlockFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    /// Read raw: it is most of a message's bytes.
    #[serde(default, borrow)]
    pub(super) text: Option<RawText<'a>>,
    /// A `fallback` block's models and trigger.
    #[serde(default, borrow)]
    pub(super) from: Option<Obj<ModelFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) to: Option<Obj<ModelFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) trigger: Option<Obj<TriggerFields<'a>>>,
}

#[derive(Deserialize)]
pub(super) struct ModelFields<'a> {
    #[serde(default, borrow)]
    pub(super) model: Str<'a>,
}

#[derive(Deserialize)]
pub(super) struct TriggerFields<'a> {
    #[serde(default, borrow)]
    pub(super) category: Str<'a>,
}

#[derive(Deserialize)]
pub(super) struct StopDetailsFields<'a> {
    #[serde(default, borrow)]
    pub(super) category: Str<'a>,
    #[serde(default, borrow)]
    pub(super) explanation: Str<'a>,
    #[serde(default, borrow)]
    pub(super) fallback_credit_token: Str<'a>,
    #[serde(default)]
    pub(super) fallback_has_prefill_claim: Flag,
    #[serde(default, borrow)]
    pub(super) recommended_model: Str<'a>,
}

#[derive(Deserialize)]
pub(super) struct UsageFields<'a> {
    #[serde(default)]
    pub(super) input_tokens: Count,
    #[serde(default)]
    pub(super) output_tokens: Count,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Count,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Count,
    #[serde(default, borrow)]
    pub(super) iterations: Option<Vec<Obj<IterationFields<'a>>>>,
    #[serde(default, borrow)]
    pub(super) fallback_credit: Option<Obj<CreditFields<'a>>>,
}

/// One `usage.iterations` entry.
#[derive(Deserialize)]
pub(super) struct IterationFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(default, borrow)]
    pub(super) model: Str<'a>,
    #[serde(default)]
    pub(super) input_tokens: Count,
    #[serde(default)]
    pub(super) output_tokens: Count,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Count,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Count,
}

#[derive(Deserialize)]
pub(super) struct CreditFields<'a> {
    #[serde(default, borrow)]
    pub(super) status: Option<Obj<CreditStatusFields<'a>>>,
}

#[derive(Deserialize)]
pub(super) struct CreditStatusFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(default, borrow)]
    pub(super) reason: Str<'a>,
    #[serde(default, borrow)]
    pub(super) remove_to_redeem: Option<Vec<Str<'a>>>,
}

impl MessageFields<'_> {
    /// What [`AnthropicMessages::judge_json`] finds in the same body.
    pub(super) fn judge(&self, keep_text: bool) -> Finding {
        let usage = self.usage.as_ref().map(|Obj(u)| u);
        let mut seen = Finding {
            model: self.model.owned(),
            message_id: self.id.owned(),
            error: self.kind.is("error"),
            fallback_credit: usage.and_then(UsageFields::fallback_credit),
            iterations: usage.and_then(UsageFields::iterations),
            ..Finding::default()
        };
        for Obj(block) in self.content.iter().flatten() {
            seen.real_output |= block.is_output();
            seen.tool_call |= block.is_tool_call();
            if keep_text && block.kind.is("text") {
                if let Some(text) = block.text.as_ref().and_then(RawText::text) {
                    seen.text.push_str(text);
                }
            }
            ServerFallback::merge(&mut seen.server_fallback, block.server_fallback());
        }
        if self.stop_reason.is("refusal") {
            let mut refused = StopDetailsFields::refusal(&self.stop_details);
            refused.usage = self.usage.as_ref().and_then(|Obj(u)| u.usage());
            seen.refusal = Some(refused);
        }
        seen
    }
}

impl BlockFields<'_> {
    /// Whether the block is real output, as [`block_is_output`] tells from a
    /// `Value`.
    pub(super) fn is_output(&self) -> bool {
        match self.kind.as_deref() {
            Some("text") => self.text.as_ref().is_some_and(RawText::is_real),
            Some(kind) => is_tool_call_block(kind),
            None => false,
        }
    }

    pub(super) fn is_tool_call(&self) -> bool {
        self.kind.as_deref().is_some_and(is_tool_call_block)
    }

    /// A `fallback` block's models and trigger, as [`server_fallback`]
    /// reads them from a `Value`.
    pub(super) fn server_fallback(&self) -> Option<ServerFallback> {
        let model = |m: &Option<Obj<ModelFields<'_>>>| m.as_ref().and_then(|m| m.0.model.owned());
        self.kind.is("fallback").then(|| ServerFallback {
            from: model(&self.from),
            to: model(&self.to),
            category: self.trigger.as_ref().and_then(|t| t.0.category.owned()),
        })
    }
}

/// The fields of a stream event that [`AnthropicStream`] judges, read
/// like [`MessageFields`]: an event these types do not fit is read as a
/// whole `Value` instead.
#[derive(Deserialize)]
pub(super) struct EventFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(default, borrow)]
    pub(super) message: Option<Obj<MessageFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) content_block: Option<Obj<BlockFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) delta: Option<Obj<DeltaFields<'a>>>,
    #[serde(default, borrow)]
    pub(super) usage: Option<Obj<UsageFields<'a>>>,
}

/// A `content_block_delta`'s or a `message_delta`'s `delta`.
#[derive(Deserialize)]
pub(super) struct DeltaFields<'a> {
    #[serde(default, borrow, rename = "type")]
    pub(super) kind: Str<'a>,
    #[serde(default, borrow)]
    pub(super) text: Option<RawText<'a>>,
    #[serde(default, borrow)]
    pub(super) stop_reason: Str<'a>,
    #[serde(default, borrow)]
    pub(super) stop_details: Option<Obj<StopDetailsFields<'a>>>,
}

impl UsageFields<'_> {
    pub(super) fn usage(&self) -> Option<Usage> {
        known(Usage {
            input_tokens: self.input_tokens.0,
            output_tokens: self.output_tokens.0,
            cache_read_tokens: self.cache_read_input_tokens.0,
            cache_write_tokens: self.cache_creation_input_tokens.0,
        })
    }

    /// As [`iterations`] reads them from a `Value`.
    pub(super) fn iterations(&self) -> Option<Iterations> {
        chain_of(self.iterations.as_ref()?.iter().map(|Obj(entry)| {
            let cost = known(Usage {
                input_tokens: entry.input_tokens.0,
                output_tokens: entry.output_tokens.0,
                cache_read_tokens: entry.cache_read_input_tokens.0,
                cache_write_tokens: entry.cache_creation_input_tokens.0,
            });
            (entry.kind.as_deref(), entry.model.owned(), cost)
        }))
    }

    /// As [`fallback_credit`] reads it from a `Value`.
    pub(super) fn fallback_credit(&self) -> Option<FallbackCredit> {
        let Obj(status) = self.fallback_credit.as_ref()?.0.status.as_ref()?;
        let fields = status.remove_to_redeem.iter().flatten();
        credit_status(
            status.kind.as_deref(),
            status.reason.owned(),
            fields.filter_map(Str::owned).collect(),
        )
    }
}

impl StopDetailsFields<'_> {
    /// A refusal with these details, if any (usage added by the caller).
    pub(super) fn refusal(details: &Option<Obj<StopDetailsFields<'_>>>) -> RefusalInfo {
        let details = details.as_ref().map(|Obj(d)| d);
        RefusalInfo {
            signal: Some(RefusalSignal::StopReason),
            category: details.and_then(|d| d.category.owned()),
            explanation: details.and_then(|d| d.explanation.owned()),
            credit_token: details.and_then(|d| d.fallback_credit_token.owned()),
            usage: None,
            recommended_model: details.and_then(|d| d.recommended_model.owned()),
            prefill: ClaimState::from_field(details.and_then(|d| d.fallback_has_prefill_claim.0)),
        }
    }
}
