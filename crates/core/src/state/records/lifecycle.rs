//! A mature file's review schedule, as the state keeps it; `gate::lifecycle`
//! decides it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A mature file's review schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Review {
    #[serde(with = "crate::state::ts")]
    pub next: DateTime<Utc>,
    pub interval_days: u32,
}
