//! Bedrock's part in the translation of fallbacks across providers: none.
//!
//! A client of a Bedrock surface is not served by another provider's
//! fallback (a chain entry naming a provider is skipped as untranslatable),
//! and a fallback is never sent to Bedrock: its answers come as AWS event
//! streams signed for the operator's account, which a translated fallback
//! would have to write and sign, and a chain entry names a provider, never
//! a platform. A fallback on the client's own Bedrock surface needs no
//! translation.

use crate::dialect::facts::Translation;

/// Every Bedrock surface's translation.
pub(crate) const TRANSLATION: Translation = Translation::NONE;
