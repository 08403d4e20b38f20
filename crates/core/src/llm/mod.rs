//! What a provider's answers mean and cost: the error classes and when to
//! ask again, the waits read from a reply, and the price table. Decisions
//! only; the client that asks lives in sentinel-advisor.

pub mod prices;
pub mod protocol;
pub mod waits;
