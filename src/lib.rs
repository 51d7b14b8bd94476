//! refusal-guard: a tower middleware that keeps a provider's safety-classifier
//! refusal from silently ending an agent's turn.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod refusal;
pub mod soft;
