//! The plain records the state stores for the gates and the advisor: their
//! shapes and serde forms live here, below the gates, so the state layer
//! names nothing above it; the functions that decide stay in `gate/` and
//! `llm/`, which re-export these types.

pub mod autonomy;
pub mod budget;
pub mod costs;
pub mod journal;
pub mod lifecycle;
pub mod llm;
pub mod observation;
pub mod outage;
pub mod retry;
pub mod scope;
