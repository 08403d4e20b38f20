//! Trigger admission: a push or webhook pokes, it does not decide. At most
//! one triggered tick starts per window; the timer is never limited.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

/// What started the tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The scheduler's clock (cron, a schedule, a timer).
    Schedule,
    Push,
    Webhook,
    Api,
    /// A person, by hand.
    Manual,
}

impl Trigger {
    /// Pokes from outside are admitted at most once per window; the clock and
    /// a person at a terminal are not limited.
    pub fn is_triggered(self) -> bool {
        matches!(self, Trigger::Push | Trigger::Webhook | Trigger::Api)
    }

    /// The trigger of a GitLab pipeline, from `CI_PIPELINE_SOURCE`; outside
    /// CI (`None`) a tick is manual.
    pub fn from_pipeline_source(source: Option<&str>) -> Trigger {
        match source {
            None => Trigger::Manual,
            Some("schedule") => Trigger::Schedule,
            Some("push" | "merge_request_event" | "external_pull_request_event") => Trigger::Push,
            // Someone pressed "Run pipeline": still a poke, limited like one.
            Some(
                "trigger" | "pipeline" | "parent_pipeline" | "api" | "web" | "webide" | "chat",
            ) => Trigger::Api,
            Some(_) => Trigger::Webhook,
        }
    }
}

/// The verdict of the admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Start,
    /// Inside the window of the last admitted start; try again after this.
    RateLimited {
        retry_after: Duration,
    },
}

/// Admit a tick. Only triggered ticks are limited, and only by the last
/// admitted start: a tick refused because another held the lock never got
/// here, so busy refusals cannot consume the window. A last start in the
/// future (the clock went backwards) does not hold anything back.
pub fn admit(
    trigger: Trigger,
    last_start: Option<DateTime<Utc>>,
    min_interval: Duration,
    now: DateTime<Utc>,
) -> Admission {
    if !trigger.is_triggered() {
        return Admission::Start;
    }
    match last_start {
        Some(last) if last <= now && now - last < min_interval => Admission::RateLimited {
            retry_after: min_interval - (now - last),
        },
        _ => Admission::Start,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn twenty_rapid_triggers_start_exactly_one_cycle() {
        // 20 pokes in 10 s, one every 500 ms; a cycle takes 3 s, during which
        // the lock refuses (busy) before the admission is even asked.
        let mut last = None;
        let (mut started, mut busy, mut limited) = (0, 0, 0);
        let mut busy_until = t0();
        for i in 0..20 {
            let now = t0() + Duration::milliseconds(500 * i);
            if now < busy_until {
                busy += 1;
                continue;
            }
            match admit(Trigger::Push, last, Duration::seconds(30), now) {
                Admission::Start => {
                    started += 1;
                    last = Some(now);
                    busy_until = now + Duration::seconds(3);
                }
                Admission::RateLimited { .. } => limited += 1,
            }
        }
        assert_eq!((started, busy, limited), (1, 5, 14));
    }

    #[test]
    fn invariant_10_a_busy_refusal_does_not_consume_the_window() {
        // Busy ticks never reach the admission, so the window stays where the
        // last start put it: nowhere, here.
        assert_eq!(
            admit(Trigger::Webhook, None, Duration::seconds(30), t0()),
            Admission::Start
        );
    }

    #[test]
    fn the_refusal_says_how_long_to_wait() {
        let last = t0();
        assert_eq!(
            admit(
                Trigger::Push,
                Some(last),
                Duration::seconds(30),
                last + Duration::seconds(12)
            ),
            Admission::RateLimited {
                retry_after: Duration::seconds(18)
            }
        );
        assert_eq!(
            admit(
                Trigger::Push,
                Some(last),
                Duration::seconds(30),
                last + Duration::seconds(30)
            ),
            Admission::Start
        );
    }

    #[test]
    fn the_timer_and_a_person_are_never_limited() {
        let last = Some(t0());
        for trigger in [Trigger::Schedule, Trigger::Manual] {
            assert_eq!(
                admit(trigger, last, Duration::seconds(30), t0()),
                Admission::Start
            );
        }
    }

    #[test]
    fn a_clock_that_went_backwards_holds_nothing_back() {
        let last = Some(t0() + Duration::hours(1));
        assert_eq!(
            admit(Trigger::Api, last, Duration::seconds(30), t0()),
            Admission::Start
        );
    }

    #[test]
    fn pipeline_sources_map_to_triggers() {
        let cases = [
            (None, Trigger::Manual),
            (Some("schedule"), Trigger::Schedule),
            (Some("push"), Trigger::Push),
            (Some("merge_request_event"), Trigger::Push),
            (Some("trigger"), Trigger::Api),
            (Some("api"), Trigger::Api),
            (Some("web"), Trigger::Api),
            (Some("something_new"), Trigger::Webhook),
        ];
        for (source, expected) in cases {
            assert_eq!(
                Trigger::from_pipeline_source(source),
                expected,
                "{source:?}"
            );
            assert_eq!(
                expected.is_triggered(),
                !matches!(expected, Trigger::Schedule | Trigger::Manual)
            );
        }
    }
}
