//! The client-side fallback chains the recovery tests configure: one per
//! model the tests refuse, so each test's model has exactly one chain.

use refusal_guard::recovery::FallbackChains;

/// Opus falls back to Sonnet then Haiku; GPT-4o to GPT-4o mini; GPT-5.5 to
/// GPT-5.4 mini then GPT-5.4 nano; Gemini 2.5 Pro to Gemini 2.5 Flash.
pub fn chains() -> FallbackChains {
    FallbackChains::new()
        .chain("claude-opus-4-7", ["claude-sonnet-4-5", "claude-haiku-4-5"])
        .chain("gpt-4o", ["gpt-4o-mini"])
        .chain("gpt-5.5", ["gpt-5.4-mini", "gpt-5.4-nano"])
        .chain("gemini-2.5-pro", ["gemini-2.5-flash"])
}
