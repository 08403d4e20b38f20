//! Pure decisions over (state, inputs, now): no clock, no file, no network.

pub mod admission;
pub mod autonomy;
pub mod budget;
pub mod costs;
pub mod deps;
pub mod lifecycle;
pub mod novelty;
pub mod observation;
pub mod outage;
pub mod policy;
pub mod retry;
pub mod rewrites;
pub mod wake;
