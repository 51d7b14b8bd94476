//! The opt-in text refusal detector alone: the hand-written table, the
//! adversarial cases and the labelled corpus (in sample and held out, each
//! file scored by a classifier trained without it).

mod adversarial;
mod corpus;
mod table;
