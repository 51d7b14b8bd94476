//! refusal-guard: a tower middleware that keeps a provider's safety-classifier
//! refusal from silently ending an agent's turn.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod body;
mod dialect;
pub mod env;
pub mod layer;
pub mod ledger;
#[cfg(feature = "proxy")]
pub mod proxy;
pub mod recovery;
pub mod refusal;
pub mod replay;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod service;
pub mod simulate;
pub mod soft;
pub mod sse;
pub mod telemetry;

pub use body::GuardBody;
pub use layer::RefusalGuardLayer;
pub use refusal::{Outcome, Refusal, RefusalHandle};
pub use replay::ReplayBody;
pub use service::RefusalGuard;
