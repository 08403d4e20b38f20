//! Finite retries: when a file whose judgement did not happen (held,
//! deferred, failed, bad_response) may be tried again, and when it gives up.
//! Pure functions of the outcome, the circuit and `now`.

use chrono::{DateTime, Duration, Utc};

use crate::llm::protocol::{Class, next_utc_midnight};
use crate::state::Outcome;
pub use crate::state::records::retry::{Retry, Wait};

/// Failures at one fingerprint after which a file gives up.
pub const MAX_FAILURES: u32 = 5;

/// The wait after the `failures`-th failure at one fingerprint: 10 min,
/// 1 h, 6 h, then 24 h.
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::minutes(10),
        2 => Duration::hours(1),
        3 => Duration::hours(6),
        _ => Duration::hours(24),
    }
}

impl Retry {
    /// Failed `MAX_FAILURES` times at its fingerprint: tried again only when
    /// the fingerprint changes or a person resets it.
    pub fn given_up(&self) -> bool {
        self.failures >= MAX_FAILURES
    }

    /// May be tried again at `now`.
    pub fn due(&self, now: DateTime<Utc>) -> bool {
        !self.given_up() && self.not_before <= now
    }
}

/// How a file waits after `outcome` at `fingerprint`; `None` for a decision,
/// which waits for nothing. `circuit` is the provider's open circuit after
/// the call (its class and end). Held files wait for the circuit; the
/// budget and the quota for the next UTC day (running out of money is not
/// the file's failure); any other failure counts, and waits for its backoff
/// or for the circuit it opened, whichever ends later.
pub fn after(
    prev: Option<&Retry>,
    fingerprint: &str,
    outcome: Outcome,
    circuit: Option<(Class, DateTime<Utc>)>,
    now: DateTime<Utc>,
) -> Option<Retry> {
    let failures = prev
        .filter(|r| r.fingerprint == fingerprint)
        .map_or(0, |r| r.failures);
    let (failures, not_before, wait) = match (outcome, circuit) {
        (Outcome::Held, Some((_, until))) => (failures, until, Wait::Circuit),
        // Held without a circuit cannot happen; should it, try at once.
        (Outcome::Held, None) => (failures, now, Wait::Circuit),
        (Outcome::Deferred, _) => (failures, next_utc_midnight(now), Wait::NextDay),
        // Out of money: the quota circuit ends at the next 00:00 UTC.
        (Outcome::Failed | Outcome::BadResponse, Some((Class::Quota, until))) => {
            (failures, until, Wait::Circuit)
        }
        (Outcome::Failed | Outcome::BadResponse, circuit) => {
            let n = failures.saturating_add(1);
            let backed_off = now + backoff(n);
            match circuit {
                Some((_, until)) if until > backed_off => (n, until, Wait::Circuit),
                _ => (n, backed_off, Wait::Backoff),
            }
        }
        _ => return None,
    };
    Some(Retry {
        fingerprint: fingerprint.to_string(),
        failures,
        not_before,
        wait,
        at_once: false,
    })
}

/// `sentinel reset`: the failures and the wait forgotten, due at `now`.
pub fn reset(fingerprint: &str, now: DateTime<Utc>) -> Retry {
    Retry {
        fingerprint: fingerprint.to_string(),
        failures: 0,
        not_before: now,
        wait: Wait::Reset,
        at_once: false,
    }
}

/// The earliest time a waiting file may be tried again, for the header: the
/// wake gate sees it without reading the files.
pub fn next_due<'a>(retries: impl Iterator<Item = &'a Retry>) -> Option<DateTime<Utc>> {
    retries
        .filter(|r| !r.given_up())
        .map(|r| r.not_before)
        .min()
}

/// Whether the provider may be asked at `now`, as the header says (the wake
/// gate and the retry set read the same, so a due retry is never a wake
/// that retries nothing).
pub fn provider_free(held_until: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    held_until.is_none_or(|u| u <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn now() -> DateTime<Utc> {
        at("2026-06-16T10:00:00Z")
    }

    #[test]
    fn successive_failures_at_one_fingerprint_wait_10m_1h_6h_24h_then_give_up() {
        let mut prev: Option<Retry> = None;
        let mut t = now();
        let mut waits = Vec::new();
        for _ in 0..MAX_FAILURES {
            let r = after(prev.as_ref(), "fp", Outcome::BadResponse, None, t).unwrap();
            waits.push((r.not_before - t, r.given_up()));
            t = r.not_before;
            prev = Some(r);
        }
        let m = Duration::minutes;
        assert_eq!(
            waits,
            [
                (m(10), false),
                (m(60), false),
                (m(360), false),
                (m(1440), false),
                (m(1440), true)
            ]
        );
        assert!(!prev.unwrap().due(t + Duration::days(365)));
    }

    #[test]
    fn another_fingerprint_starts_the_count_over() {
        let r = after(None, "fp1", Outcome::Failed, None, now()).unwrap();
        let r = after(Some(&r), "fp1", Outcome::Failed, None, now()).unwrap();
        assert_eq!(r.failures, 2);
        let r = after(Some(&r), "fp2", Outcome::Failed, None, now()).unwrap();
        assert_eq!(r.failures, 1);
    }

    #[test]
    fn held_waits_for_the_circuit_and_counts_no_failure() {
        let until = now() + Duration::minutes(60);
        let failed = after(None, "fp", Outcome::Failed, None, now()).unwrap();
        let r = after(
            Some(&failed),
            "fp",
            Outcome::Held,
            Some((Class::Auth, until)),
            now(),
        )
        .unwrap();
        assert_eq!(
            (r.not_before, r.wait, r.failures),
            (until, Wait::Circuit, 1)
        );
    }

    #[test]
    fn a_failure_that_opens_a_longer_circuit_waits_for_the_circuit() {
        let until = now() + Duration::minutes(60);
        let r = after(
            None,
            "fp",
            Outcome::Failed,
            Some((Class::Auth, until)),
            now(),
        )
        .unwrap();
        assert_eq!(
            (r.not_before, r.wait, r.failures),
            (until, Wait::Circuit, 1)
        );
        let short = now() + Duration::minutes(2);
        let r = after(
            None,
            "fp",
            Outcome::Failed,
            Some((Class::RateLimit, short)),
            now(),
        )
        .unwrap();
        assert_eq!(
            (r.not_before, r.wait),
            (now() + Duration::minutes(10), Wait::Backoff)
        );
    }

    #[test]
    fn budget_and_quota_wait_for_the_next_utc_day_and_count_no_failure() {
        let midnight = at("2026-06-17T00:00:00Z");
        let r = after(None, "fp", Outcome::Deferred, None, now()).unwrap();
        assert_eq!(
            (r.not_before, r.wait, r.failures),
            (midnight, Wait::NextDay, 0)
        );
        let r = after(
            None,
            "fp",
            Outcome::Failed,
            Some((Class::Quota, midnight)),
            now(),
        )
        .unwrap();
        assert_eq!(
            (r.not_before, r.wait, r.failures),
            (midnight, Wait::Circuit, 0)
        );
    }

    #[test]
    fn a_decision_waits_for_nothing() {
        for o in [
            Outcome::LocalSkip,
            Outcome::LlmSkip,
            Outcome::Evolve,
            Outcome::NeedsReview,
            Outcome::TooLarge,
        ] {
            assert_eq!(after(None, "fp", o, None, now()), None, "{o:?}");
        }
    }

    #[test]
    fn the_header_keeps_the_earliest_wait_of_the_files_not_given_up() {
        let a = after(None, "a", Outcome::Failed, None, now()).unwrap();
        let b = after(None, "b", Outcome::Deferred, None, now()).unwrap();
        let mut gone = reset("c", now() - Duration::hours(1));
        gone.failures = MAX_FAILURES;
        assert_eq!(next_due([&a, &b, &gone].into_iter()), Some(a.not_before));
        assert_eq!(next_due([&gone].into_iter()), None);
        assert!(reset("c", now()).due(now()));
    }
}
