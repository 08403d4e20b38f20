//! A file's retry record, as the state keeps it; `gate::retry` decides when
//! it is due and when it gives up.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a waiting file waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// The end of the provider's circuit, the quota's included (the next
    /// 00:00 UTC); `sentinel reset --circuit` ends it.
    Circuit,
    /// The next 00:00 UTC: the daily budget.
    NextDay,
    /// The backoff after a failure.
    Backoff,
    /// `sentinel reset` asked for the next tick.
    Reset,
}

/// A file whose judgement did not happen: when it may be tried again, and
/// the failures counted at its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// The fingerprint the failures were counted at; another one starts over.
    pub fingerprint: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// Not tried again before this time.
    #[serde(with = "crate::state::ts")]
    pub not_before: DateTime<Utc>,
    pub wait: Wait,
    /// Given up at once, as asking again about this content cannot help
    /// (a `file_request`): not after `MAX_FAILURES` failures.
    #[serde(default, skip_serializing_if = "is_false")]
    pub at_once: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
