//! Claude on Bedrock: the AWS event-stream framer at every split point,
//! recovery through the SigV4 layer against a scripted Bedrock runtime that
//! verifies every signature, and the proxy in gateway mode (its client key).

mod contract;
mod framing;
mod gateway;
mod recovery;
mod startup;
