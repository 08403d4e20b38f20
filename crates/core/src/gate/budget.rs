//! The daily LLM budget: reserve an estimate before a call, settle the real cost after it.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};

use crate::llm::prices::Price;
use crate::state::bounds;
pub use crate::state::records::budget::Budget;

/// Why `admit` refused; the seed's wording, kept so its reports still read the same.
pub const EXHAUSTED: &str = "daily-budget-exhausted";

/// Costs are sums of float products; without slack a call that exactly fits the
/// limit could be refused over a rounding error. A nanodollar is far below any call.
const SLACK_USD: f64 = 1e-9;

/// Start a new UTC day when `now` is on a later day (daily figures reset; lifetime kept).
/// A clock that went backwards to an earlier day does not reset anything (no negative windows).
pub fn roll(b: &mut Budget, now: DateTime<Utc>) {
    let today = now.date_naive();
    match b.day {
        Some(day) if today <= day => {}
        // A budget with no day yet adopts today without clearing anything: if it
        // already holds figures (an older or edited state), counting them errs on
        // the side of refusing early rather than spending twice.
        None => b.day = Some(today),
        Some(_) => {
            b.day = Some(today);
            b.calls_today = 0;
            b.measured_today = 0.0;
            b.estimated_today = 0.0;
        }
    }
}

/// Today's spend: measured plus estimated (USD).
pub fn spent_today(b: &Budget) -> f64 {
    b.measured_today + b.estimated_today
}

/// Admit a call whose reserved estimate is `reserve` USD under a daily `limit`: refused
/// (Err("daily-budget-exhausted")) when spent + reserve > limit. Counts the refusal.
/// Rolls the day first.
pub fn admit(
    b: &mut Budget,
    limit: f64,
    reserve: f64,
    now: DateTime<Utc>,
) -> Result<(), &'static str> {
    roll(b, now);
    // A NaN anywhere compares as None and refuses: an unknown cost must not pass.
    match (spent_today(b) + reserve).partial_cmp(&(limit + SLACK_USD)) {
        Some(Ordering::Less | Ordering::Equal) => Ok(()),
        Some(Ordering::Greater) | None => {
            b.refusals = bounds::add_count(b.refusals, 1);
            Err(EXHAUSTED)
        }
    }
}

/// After the call: count it with its real cost (`estimated` = the model had no price).
/// Returns whether the cost was above `bounds::MAX_CALL_USD` and counted at it.
pub fn settle(b: &mut Budget, cost: f64, estimated: bool, now: DateTime<Utc>) -> bool {
    roll(b, now);
    // One NaN would poison the lifetime totals for good, and one 1e308 twice
    // would make them infinite, which JSON cannot hold: a cost that cannot be
    // real counts as nothing, one above the ceiling at the ceiling (the call
    // itself is counted either way), and every sum saturates.
    let (cost, capped) = bounds::call_usd(cost);
    if capped {
        b.capped = bounds::add_count(b.capped, 1);
    }
    b.calls_today = bounds::add_count(b.calls_today, 1);
    b.lifetime_calls = bounds::add_count(b.lifetime_calls, 1);
    if estimated {
        b.estimated_today = bounds::add_usd(b.estimated_today, cost);
        b.lifetime_estimated = bounds::add_usd(b.lifetime_estimated, cost);
    } else {
        b.measured_today = bounds::add_usd(b.measured_today, cost);
        b.lifetime_measured = bounds::add_usd(b.lifetime_measured, cost);
    }
    capped
}

/// Estimate a call before making it: prompt tokens (ceil(chars/4) + overhead) at the input
/// price plus `max_tokens` at the output price; without a price, `per_call` USD.
/// The prompt is priced uncached: a reservation may overshoot, never undershoot.
pub fn reserve(
    price: Option<&Price>,
    prompt_chars: u64,
    overhead_tokens: u64,
    max_tokens: u64,
    per_call: f64,
) -> f64 {
    let Some(price) = price else {
        return per_call;
    };
    let prompt_tokens = prompt_chars.div_ceil(4).saturating_add(overhead_tokens);
    (prompt_tokens as f64 * price.input + max_tokens as f64 * price.output) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::prices::{Usage, builtin, cost};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn noon() -> DateTime<Utc> {
        at("2026-06-16T12:00:00Z")
    }

    fn day(s: &str) -> Option<chrono::NaiveDate> {
        Some(s.parse().unwrap())
    }

    fn spent(measured: f64) -> Budget {
        let mut b = Budget::default();
        settle(&mut b, measured, false, noon());
        b
    }

    #[test]
    fn a_call_that_fits_is_admitted_and_one_that_would_cross_the_limit_is_refused() {
        let mut b = spent(1.80);
        assert_eq!(admit(&mut b, 2.00, 0.15, noon()), Ok(()));
        assert_eq!(
            admit(&mut b, 2.00, 0.25, noon()),
            Err("daily-budget-exhausted")
        );
        assert_eq!(b.refusals, 1);
    }

    #[test]
    fn a_call_that_lands_exactly_on_the_limit_is_admitted() {
        let mut b = spent(1.90);
        assert_eq!(admit(&mut b, 2.00, 0.10, noon()), Ok(()));
    }

    #[test]
    fn admitting_reserves_nothing_until_the_call_is_settled() {
        let mut b = Budget::default();
        admit(&mut b, 2.0, 0.5, noon()).unwrap();
        assert_eq!(spent_today(&b), 0.0);
        assert_eq!(b.calls_today, 0);
    }

    #[test]
    fn every_refusal_is_counted_for_the_lifetime() {
        let mut b = spent(2.0);
        for _ in 0..3 {
            assert!(admit(&mut b, 2.0, 0.01, noon()).is_err());
        }
        assert_eq!(b.refusals, 3);
        roll(&mut b, at("2026-06-17T00:00:00Z"));
        assert_eq!(b.refusals, 3);
    }

    #[test]
    fn an_unknown_reserve_or_limit_is_refused() {
        let mut b = Budget::default();
        assert!(admit(&mut b, 2.0, f64::NAN, noon()).is_err());
        assert!(admit(&mut b, f64::NAN, 0.01, noon()).is_err());
    }

    #[test]
    fn the_day_rolls_at_00_00_utc_and_keeps_the_lifetime_figures() {
        let mut b = spent(2.0);
        settle(&mut b, 0.5, true, noon());
        assert!(admit(&mut b, 2.0, 0.01, at("2026-06-16T23:59:59Z")).is_err());
        assert_eq!(admit(&mut b, 2.0, 0.01, at("2026-06-17T00:00:00Z")), Ok(()));
        assert_eq!(b.day, day("2026-06-17"));
        assert_eq!(
            (b.calls_today, b.measured_today, b.estimated_today),
            (0, 0.0, 0.0)
        );
        assert_eq!(
            (b.lifetime_calls, b.lifetime_measured, b.lifetime_estimated),
            (2, 2.0, 0.5)
        );
    }

    #[test]
    fn a_local_midnight_that_is_not_utc_midnight_does_not_roll() {
        let mut b = spent(2.0);
        // 00:30 in UTC+02:00 is still 22:30 on the previous UTC day.
        let local: DateTime<chrono::FixedOffset> = "2026-06-17T00:30:00+02:00".parse().unwrap();
        roll(&mut b, local.with_timezone(&Utc));
        assert_eq!(b.day, day("2026-06-16"));
        assert_eq!(spent_today(&b), 2.0);
    }

    #[test]
    fn a_clock_that_went_backwards_resets_nothing() {
        let mut b = spent(1.5);
        roll(&mut b, at("2026-06-15T23:00:00Z"));
        assert_eq!(b.day, day("2026-06-16"));
        assert_eq!(spent_today(&b), 1.5);
        settle(&mut b, 0.25, false, at("2026-06-15T23:00:00Z"));
        assert_eq!(b.day, day("2026-06-16"));
        assert_eq!((b.calls_today, b.measured_today), (2, 1.75));
    }

    #[test]
    fn a_fresh_budget_adopts_the_current_utc_day() {
        let mut b = Budget::default();
        roll(&mut b, noon());
        assert_eq!(b.day, day("2026-06-16"));
    }

    #[test]
    fn a_budget_without_a_day_keeps_the_figures_it_already_holds() {
        let mut b = Budget {
            measured_today: 1.0,
            calls_today: 3,
            ..Budget::default()
        };
        roll(&mut b, noon());
        assert_eq!((b.calls_today, spent_today(&b)), (3, 1.0));
    }

    #[test]
    fn settle_splits_measured_and_estimated_cost() {
        let mut b = Budget::default();
        settle(&mut b, 0.25, false, noon());
        settle(&mut b, 0.01, true, noon());
        settle(&mut b, 0.5, false, noon());
        assert_eq!(b.calls_today, 3);
        assert_eq!(b.measured_today, 0.75);
        assert_eq!(b.estimated_today, 0.01);
        assert_eq!(spent_today(&b), 0.76);
        assert_eq!(
            (b.lifetime_calls, b.lifetime_measured, b.lifetime_estimated),
            (3, 0.75, 0.01)
        );
    }

    #[test]
    fn a_cost_that_cannot_be_real_counts_the_call_but_not_the_cost() {
        let mut b = Budget::default();
        settle(&mut b, f64::NAN, false, noon());
        settle(&mut b, -1.0, true, noon());
        assert_eq!(b.calls_today, 2);
        assert_eq!(spent_today(&b), 0.0);
        assert_eq!(b.lifetime_measured + b.lifetime_estimated, 0.0);
    }

    #[test]
    fn a_cost_of_1e308_twice_is_counted_at_the_ceiling_and_the_sums_stay_finite() {
        let mut b = Budget::default();
        assert!(settle(&mut b, 1.7976931348623157e308, false, noon()));
        assert!(settle(&mut b, f64::INFINITY, true, noon()));
        assert!(!settle(&mut b, 0.5, false, noon()));
        assert_eq!((b.measured_today, b.estimated_today), (1000.5, 1000.0));
        assert_eq!((b.lifetime_measured, b.capped), (1000.5, 2));
        assert!(serde_json::to_string(&b).unwrap().contains("1000.5"));
    }

    #[test]
    fn counters_saturate_rather_than_wrap() {
        let mut b = Budget {
            calls_today: u64::MAX,
            refusals: u64::MAX,
            ..Budget::default()
        };
        b.day = Some(noon().date_naive());
        settle(&mut b, 0.1, false, noon());
        assert!(admit(&mut b, 0.0, 1.0, noon()).is_err());
        assert_eq!(
            (b.calls_today, b.refusals),
            (bounds::MAX_COUNT, bounds::MAX_COUNT)
        );
    }

    #[test]
    fn reserve_prices_the_prompt_at_input_and_max_tokens_at_output() {
        let price = Price {
            input: 2.0,
            cached_input: 0.5,
            output: 8.0,
        };
        // 4001 chars -> 1001 tokens, plus 99 overhead = 1100 prompt tokens.
        assert_eq!(
            reserve(Some(&price), 4001, 99, 500, 0.01),
            (1100.0 * 2.0 + 500.0 * 8.0) / 1e6
        );
        assert_eq!(reserve(Some(&price), 0, 0, 0, 0.01), 0.0);
    }

    #[test]
    fn reserve_without_a_price_is_the_per_call_estimate() {
        assert_eq!(reserve(None, 1_000_000, 500, 4096, 0.01), 0.01);
    }

    /// The seed's blind spot (seed 12.7): a flat $0.01 a call let 200 calls "fit" a $2
    /// day while each really cost about $0.15, a ~$30 real ceiling. Counting real cost
    /// stops at the 14th call.
    #[test]
    fn a_real_cost_budget_stops_where_a_flat_estimate_would_not() {
        let limit = 2.00;
        let price = builtin("gpt-4o").unwrap();
        // A long-context review: 52,000 prompt tokens and 2,000 out cost $0.15 on gpt-4o.
        let real = Usage {
            prompt_tokens: 52_000,
            cached_tokens: 0,
            completion_tokens: 2_000,
        };
        let real_cost = cost(&price, &real);
        assert!((real_cost - 0.15).abs() < 1e-12, "{real_cost}");
        let reserved = reserve(Some(&price), 52_000 * 4, 0, 2_000, 0.01);

        let mut flat = Budget::default();
        let mut flat_admitted = 0;
        while admit(&mut flat, limit, 0.01, noon()).is_ok() {
            settle(&mut flat, 0.01, true, noon());
            flat_admitted += 1;
        }
        assert_eq!(
            flat_admitted, 200,
            "the flat estimate lets 200 calls through"
        );
        let billed_under_flat = flat_admitted as f64 * real_cost;
        assert!(
            billed_under_flat > 29.9,
            "while the invoice says ${billed_under_flat:.2}"
        );

        let mut counted = Budget::default();
        let mut admitted = 0;
        while admit(&mut counted, limit, reserved, noon()).is_ok() {
            settle(&mut counted, real_cost, false, noon());
            admitted += 1;
        }
        assert_eq!(admitted, 13, "the 14th call is refused");
        assert_eq!(counted.refusals, 1);
        assert!(spent_today(&counted) <= limit);
    }

    #[test]
    fn a_budget_round_trips_through_json() {
        let mut b = spent(0.42);
        settle(&mut b, 0.01, true, noon());
        b.refusals = 30;
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(serde_json::from_str::<Budget>(&json).unwrap(), b);
    }
}
