//! Pure decisions over (state, inputs, now): no clock, no file, no network.

pub mod budget;
pub mod deps;
pub mod novelty;
pub mod policy;
pub mod wake;
