//! The real bill beside sentinel's own count (`sentinel costs`): a bounded
//! per-day history of the advisor's calls, kept by the tick, and the pure
//! comparison of that history with the provider's bill, day by day.
//!
//! Each advisory says what happened, with the numbers: what was billed, what
//! sentinel counted, and by how much they differ. None of them blocks a call;
//! `--calibrate` is the one feedback into the budget.

use std::collections::BTreeMap;

use chrono::{DateTime, Days, NaiveDate, Utc};
use serde::Serialize;

use crate::gate::budget::Budget;
use crate::state::bounds;
pub use crate::state::records::costs::{Advisory, DaySpend};

/// Real spend on a UTC day above `--daily-budget`.
pub const OVER_DAILY_BUDGET: &str = "over-daily-budget";
/// The real cost per call is at least `DRIFT_RATIO` times sentinel's own figure.
pub const ESTIMATE_TOO_LOW: &str = "estimate-too-low";
/// A model was billed that sentinel did not use that day.
pub const UNEXPECTED_MODEL: &str = "unexpected-model";
/// More requests were billed than sentinel made that day.
pub const FOREIGN_CALLS: &str = "foreign-calls";

/// UTC days of history kept in the state (today included).
pub const HISTORY_DAYS: u64 = 60;
/// Advisories kept in the state (the oldest days are dropped first).
pub const ADVISORIES_KEPT: usize = 50;
/// Real cost per call at or above this multiple of sentinel's own figure is `estimate-too-low`.
pub const DRIFT_RATIO: f64 = 2.0;
/// Rounding slack for the budget comparison (as in the budget gate).
const SLACK_USD: f64 = 1e-9;

/// One UTC day of the provider's bill.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct BilledDay {
    /// The costs endpoint's amounts for the day, summed (USD).
    pub usd: f64,
    /// `num_model_requests` of the completions usage, summed over the models.
    pub requests: u64,
    /// `num_model_requests` per billed model name.
    pub models: BTreeMap<String, u64>,
}

/// A measured real cost per call, from days where the bill holds only sentinel's calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// The model as sentinel asks for it (`--model`).
    pub model: String,
    /// USD per call: the billed amount over the billed requests of those days.
    pub per_call: f64,
    pub days: u64,
    pub requests: u64,
    pub usd: f64,
}

/// After one `ask` of the advisor: mirror the budget's current day into the
/// history (so both always agree), add the call's attempts and model, and
/// drop days older than `HISTORY_DAYS`. Call it after the budget was settled.
pub fn record(
    days: &mut BTreeMap<NaiveDate, DaySpend>,
    budget: &Budget,
    model: &str,
    attempts: u64,
) {
    let Some(day) = budget.day else {
        return;
    };
    let entry = days.entry(day).or_default();
    entry.calls = budget.calls_today;
    entry.measured = budget.measured_today;
    entry.estimated = budget.estimated_today;
    entry.attempts = bounds::add_count(entry.attempts, attempts);
    bounds::bump(&mut entry.models, model, 1);
    prune(days, day);
}

/// After `record`: count where the call's cost came from, on the budget's day.
pub fn record_source(
    days: &mut BTreeMap<NaiveDate, DaySpend>,
    budget: &Budget,
    source: crate::llm::prices::CostSource,
) {
    if let Some(entry) = budget.day.and_then(|day| days.get_mut(&day)) {
        bounds::bump(&mut entry.sources, source.as_str(), 1);
    }
}

/// After `record`: `n` timed-out attempts counted at `usd` in all, on the budget's day.
pub fn record_timed_out(
    days: &mut BTreeMap<NaiveDate, DaySpend>,
    budget: &Budget,
    n: u64,
    usd: f64,
) {
    if let Some(entry) = budget.day.and_then(|day| days.get_mut(&day)) {
        entry.timed_out = bounds::add_count(entry.timed_out, n);
        entry.timed_out_usd = bounds::add_usd(entry.timed_out_usd, usd);
    }
}

/// Days a real price is remembered for a reservation.
pub const REAL_PRICE_DAYS: u64 = 7;

/// After `record`: a call to `model` really cost `usd` (reported by
/// whoever answered, or priced from its usage); the day keeps the highest.
pub fn record_real_cost(
    days: &mut BTreeMap<NaiveDate, DaySpend>,
    budget: &Budget,
    model: &str,
    usd: f64,
) {
    if !usd.is_finite() || usd <= 0.0 {
        return;
    }
    if let Some(entry) = budget.day.and_then(|day| days.get_mut(&day)) {
        let max = entry.max_call_usd.entry(model.to_string()).or_default();
        *max = max.max(usd);
    }
}

/// After `record`: a proxy answered a call to `asked` from `answered`.
pub fn record_fallback(
    days: &mut BTreeMap<NaiveDate, DaySpend>,
    budget: &Budget,
    asked: &str,
    answered: &str,
) {
    if let Some(entry) = budget.day.and_then(|day| days.get_mut(&day)) {
        *entry
            .fallbacks
            .entry(format!("{asked} -> {answered}"))
            .or_default() += 1;
    }
}

/// The highest real cost of one call to `model` over the `REAL_PRICE_DAYS`
/// UTC days up to `today`: what one more call is known to be able to cost.
pub fn real_price(
    days: &BTreeMap<NaiveDate, DaySpend>,
    model: &str,
    today: NaiveDate,
) -> Option<f64> {
    let first = today.checked_sub_days(Days::new(REAL_PRICE_DAYS - 1))?;
    days.range(first..=today)
        .filter_map(|(_, d)| d.max_call_usd.get(model).copied())
        .filter(|v| v.is_finite() && *v > 0.0)
        .reduce(f64::max)
}

/// Keep the `HISTORY_DAYS` UTC days up to `today`, and never more entries than that.
pub fn prune(days: &mut BTreeMap<NaiveDate, DaySpend>, today: NaiveDate) {
    if let Some(first) = today.checked_sub_days(Days::new(HISTORY_DAYS - 1)) {
        days.retain(|d, _| *d >= first);
    }
    while days.len() as u64 > HISTORY_DAYS {
        days.pop_first();
    }
}

/// `-2024-07-18` or `-0125`: the suffix of a dated snapshot of a model family.
fn is_snapshot_suffix(rest: &str) -> bool {
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if digits(rest, 4) {
        return true;
    }
    let parts: Vec<&str> = rest.split('-').collect();
    matches!(parts.as_slice(), [y, m, d] if digits(y, 4) && digits(m, 2) && digits(d, 2))
}

/// Whether the bill's `billed` model is the model sentinel asked for as
/// `used`: the same name, or a dated snapshot of it (the bill names
/// `gpt-4o-mini-2024-07-18` for calls to `gpt-4o-mini`). `o3-pro` is not `o3`.
pub fn same_model(used: &str, billed: &str) -> bool {
    used == billed || billed.strip_prefix(used).is_some_and(is_snapshot_suffix)
}

/// USD as a person reads it: cents above a dollar, more digits below.
pub fn usd(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || a >= 1.0 {
        format!("${v:.2}")
    } else if a >= 0.01 {
        format!("${v:.3}")
    } else if a >= 0.0001 {
        format!("${v:.4}")
    } else {
        format!("${v:.6}")
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The UTC days `from..=to`.
pub fn days_between(from: NaiveDate, to: NaiveDate) -> impl Iterator<Item = NaiveDate> {
    from.iter_days().take_while(move |d| *d <= to)
}

/// Compare the bill with sentinel's history over `from..=to` and say what
/// differs. Days before sentinel's history begins (its first recorded day)
/// are compared with the budget only: sentinel cannot tell what it did then.
pub fn compare(
    bill: &BTreeMap<NaiveDate, BilledDay>,
    ours: &BTreeMap<NaiveDate, DaySpend>,
    from: NaiveDate,
    to: NaiveDate,
    daily_budget: f64,
    now: DateTime<Utc>,
) -> Vec<Advisory> {
    let history_since = ours.keys().next().copied();
    let nothing = DaySpend::default();
    let mut out = Vec::new();
    for day in days_between(from, to) {
        let Some(billed) = bill.get(&day) else {
            continue;
        };
        let recorded = history_since.is_some_and(|first| day >= first);
        let mine = ours.get(&day).unwrap_or(&nothing);
        let mut found = vec![
            over_budget(billed, recorded.then_some(mine), daily_budget)
                .map(|m| (OVER_DAILY_BUDGET, m)),
        ];
        if recorded {
            found.extend([
                estimate_too_low(billed, mine).map(|m| (ESTIMATE_TOO_LOW, m)),
                unexpected_models(billed, mine).map(|m| (UNEXPECTED_MODEL, m)),
                foreign_calls(billed, mine).map(|m| (FOREIGN_CALLS, m)),
            ]);
        }
        out.extend(found.into_iter().flatten().map(|(kind, message)| Advisory {
            kind: kind.to_string(),
            day,
            message: format!("{day}: {message}"),
            found: now,
        }));
    }
    out
}

/// `over-daily-budget`: the day's bill above the budget, beside what
/// sentinel counted that day (`None`: it kept no record of it).
fn over_budget(billed: &BilledDay, mine: Option<&DaySpend>, daily_budget: f64) -> Option<String> {
    (billed.usd > daily_budget + SLACK_USD).then(|| {
        let counted = match mine {
            Some(mine) => format!(
                "sentinel counted {} for {}",
                usd(mine.cost()),
                plural(mine.calls, "call", "calls")
            ),
            None => "sentinel kept no record of that day".to_string(),
        };
        format!(
            "billed {}, over the daily budget of {}; {counted}",
            usd(billed.usd),
            usd(daily_budget)
        )
    })
}

/// `estimate-too-low`: the real cost per call at least `DRIFT_RATIO` times
/// sentinel's own figure, or sentinel counting nothing for calls that cost.
fn estimate_too_low(billed: &BilledDay, mine: &DaySpend) -> Option<String> {
    let comparable = billed.requests > 0 && mine.calls > 0 && billed.usd > 0.0;
    if !comparable {
        return None;
    }
    let real = billed.usd / billed.requests as f64;
    let counted = mine.cost() / mine.calls as f64;
    let head = format!(
        "billed {} for {} ({} per call); sentinel counted {} per call",
        usd(billed.usd),
        plural(billed.requests, "request", "requests"),
        usd(real),
        usd(counted)
    );
    if counted <= 0.0 {
        Some(head)
    } else if real / counted >= DRIFT_RATIO {
        Some(format!("{head}: {:.1}× too low", real / counted))
    } else {
        None
    }
}

/// `unexpected-model`: billed models that are none of the models sentinel
/// asked that day (nor a dated snapshot of one).
fn unexpected_models(billed: &BilledDay, mine: &DaySpend) -> Option<String> {
    let unexpected: Vec<String> = billed
        .models
        .iter()
        .filter(|(billed_model, n)| {
            **n > 0
                && !mine
                    .models
                    .keys()
                    .any(|used| same_model(used, billed_model))
        })
        .map(|(m, n)| format!("{m} ({})", plural(*n, "request", "requests")))
        .collect();
    if unexpected.is_empty() {
        return None;
    }
    let used = if mine.models.is_empty() {
        "it asked no model that day".to_string()
    } else {
        format!(
            "it asked only {}",
            mine.models.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    };
    let what = if unexpected.len() == 1 {
        "a model sentinel did not use"
    } else {
        "models sentinel did not use"
    };
    Some(format!("billed {}, {what}; {used}", unexpected.join(", ")))
}

/// `foreign-calls`: more requests billed than sentinel can have caused,
/// retries included.
fn foreign_calls(billed: &BilledDay, mine: &DaySpend) -> Option<String> {
    (billed.requests > mine.requests()).then(|| {
        format!(
            "billed {}; sentinel made {} ({}): {} came from another client on the same key or project",
            plural(billed.requests, "request", "requests"),
            plural(mine.calls, "call", "calls"),
            plural(mine.attempts, "HTTP attempt", "HTTP attempts"),
            plural(billed.requests - mine.requests(), "request", "requests"),
        )
    })
}

/// Keep `found` in `kept`: an advisory replaces the one of the same kind and
/// day (its numbers may have grown), an unchanged one keeps when it was first
/// found. At most `ADVISORIES_KEPT`, the oldest days dropped first. Returns
/// whether anything changed.
pub fn remember(kept: &mut Vec<Advisory>, found: &[Advisory]) -> bool {
    let before = kept.clone();
    for a in found {
        match kept.iter_mut().find(|k| k.kind == a.kind && k.day == a.day) {
            Some(k) if k.message == a.message => {}
            Some(k) => *k = a.clone(),
            None => kept.push(a.clone()),
        }
    }
    kept.sort_by(|a, b| (a.day, &a.kind).cmp(&(b.day, &b.kind)));
    if kept.len() > ADVISORIES_KEPT {
        let extra = kept.len() - ADVISORIES_KEPT;
        kept.drain(..extra);
    }
    *kept != before
}

/// The real cost per call of each model sentinel used, measured on the days
/// of `from..=to` where the bill holds only sentinel's calls: sentinel asked
/// one model, every billed model is that model, and no more requests were
/// billed than sentinel made. Only models for which `priced` is false.
pub fn calibrate(
    bill: &BTreeMap<NaiveDate, BilledDay>,
    ours: &BTreeMap<NaiveDate, DaySpend>,
    from: NaiveDate,
    to: NaiveDate,
    priced: impl Fn(&str) -> bool,
) -> Vec<Calibration> {
    let mut by_model: BTreeMap<String, Calibration> = BTreeMap::new();
    for day in days_between(from, to) {
        let (Some(billed), Some(mine)) = (bill.get(&day), ours.get(&day)) else {
            continue;
        };
        let [model] = mine.models.keys().collect::<Vec<_>>()[..] else {
            continue;
        };
        let clean = billed.requests > 0
            && billed.usd.is_finite()
            && billed.usd >= 0.0
            && billed.requests <= mine.requests()
            && billed.models.keys().all(|b| same_model(model, b));
        if !clean || priced(model) {
            continue;
        }
        let c = by_model.entry(model.clone()).or_insert(Calibration {
            model: model.clone(),
            per_call: 0.0,
            days: 0,
            requests: 0,
            usd: 0.0,
        });
        c.days += 1;
        c.requests = bounds::add_count(c.requests, billed.requests);
        c.usd = bounds::add_usd(c.usd, billed.usd);
    }
    by_model
        .into_values()
        .map(|mut c| {
            // Kept in the state as a per-call cost: bounded as one.
            c.per_call = bounds::call_usd(c.usd / c.requests as f64).0;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    fn now() -> DateTime<Utc> {
        "2026-09-29T14:44:00Z".parse().unwrap()
    }

    fn billed(usd: f64, models: &[(&str, u64)]) -> BilledDay {
        BilledDay {
            usd,
            requests: models.iter().map(|(_, n)| n).sum(),
            models: models.iter().map(|(m, n)| (m.to_string(), *n)).collect(),
        }
    }

    fn spent(calls: u64, measured: f64, estimated: f64, models: &[(&str, u64)]) -> DaySpend {
        DaySpend {
            calls,
            measured,
            estimated,
            attempts: calls,
            models: models.iter().map(|(m, n)| (m.to_string(), *n)).collect(),
            ..DaySpend::default()
        }
    }

    fn one_day(b: BilledDay, ours: Option<DaySpend>, budget: f64) -> Vec<Advisory> {
        let day = d("2026-09-29");
        let bill = BTreeMap::from([(day, b)]);
        let mut history = BTreeMap::new();
        if let Some(o) = ours {
            history.insert(day, o);
        }
        compare(&bill, &history, day, day, budget, now())
    }

    fn kinds(a: &[Advisory]) -> Vec<&str> {
        a.iter().map(|a| a.kind.as_str()).collect()
    }

    #[test]
    fn a_bill_that_matches_sentinels_count_says_nothing() {
        let a = one_day(
            billed(0.19, &[("gpt-4o-mini-2024-07-18", 16)]),
            Some(spent(16, 0.18, 0.0, &[("gpt-4o-mini", 16)])),
            2.0,
        );
        assert_eq!(a, vec![]);
    }

    #[test]
    fn the_seeds_fifteen_fold_undercount_is_estimate_too_low_with_its_numbers() {
        let a = one_day(
            billed(2.35, &[("o3-pro-2025-06-10", 16)]),
            Some(spent(16, 0.0, 0.152, &[("o3-pro", 16)])),
            2.0,
        );
        assert_eq!(kinds(&a), [OVER_DAILY_BUDGET, ESTIMATE_TOO_LOW]);
        assert_eq!(
            a[1].message,
            "2026-09-29: billed $2.35 for 16 requests ($0.147 per call); sentinel counted $0.0095 per call: 15.5× too low"
        );
        assert_eq!(
            a[0].message,
            "2026-09-29: billed $2.35, over the daily budget of $2.00; sentinel counted $0.152 for 16 calls"
        );
        assert_eq!(a[0].day, d("2026-09-29"));
        assert_eq!(a[0].found, now());
    }

    #[test]
    fn a_real_cost_just_under_twice_the_count_is_not_an_advisory() {
        let a = one_day(
            billed(0.39, &[("gpt-4o", 2)]),
            Some(spent(2, 0.2, 0.0, &[("gpt-4o", 2)])),
            2.0,
        );
        assert_eq!(a, vec![]);
        let a = one_day(
            billed(0.40, &[("gpt-4o", 2)]),
            Some(spent(2, 0.2, 0.0, &[("gpt-4o", 2)])),
            2.0,
        );
        assert_eq!(kinds(&a), [ESTIMATE_TOO_LOW]);
    }

    #[test]
    fn spend_exactly_at_the_budget_is_not_over_it() {
        let a = one_day(
            billed(2.0, &[("gpt-4o", 10)]),
            Some(spent(10, 2.0, 0.0, &[("gpt-4o", 10)])),
            2.0,
        );
        assert_eq!(a, vec![]);
    }

    #[test]
    fn a_snapshot_of_the_used_family_is_expected_and_another_model_is_not() {
        let a = one_day(
            billed(
                0.30,
                &[("gpt-4o-2024-08-06", 3), ("gpt-4o-mini-2024-07-18", 2)],
            ),
            Some(spent(5, 0.30, 0.0, &[("gpt-4o", 5)])),
            2.0,
        );
        assert_eq!(kinds(&a), [UNEXPECTED_MODEL]);
        assert_eq!(
            a[0].message,
            "2026-09-29: billed gpt-4o-mini-2024-07-18 (2 requests), a model sentinel did not use; it asked only gpt-4o"
        );
    }

    #[test]
    fn more_billed_requests_than_attempts_are_foreign_calls() {
        let mut mine = spent(12, 0.5, 0.0, &[("gpt-4o", 12)]);
        mine.attempts = 14;
        let a = one_day(billed(0.8, &[("gpt-4o", 40)]), Some(mine.clone()), 2.0);
        assert_eq!(kinds(&a), [FOREIGN_CALLS]);
        assert_eq!(
            a[0].message,
            "2026-09-29: billed 40 requests; sentinel made 12 calls (14 HTTP attempts): 26 requests came from another client on the same key or project"
        );
        // Retried attempts are requests too: 14 billed is no foreign call.
        let a = one_day(billed(0.58, &[("gpt-4o", 14)]), Some(mine), 2.0);
        assert_eq!(a, vec![]);
    }

    #[test]
    fn a_day_without_any_call_of_sentinels_after_its_history_began_is_all_foreign() {
        let day = d("2026-09-29");
        let bill = BTreeMap::from([(day, billed(0.1, &[("gpt-4o", 3)]))]);
        let history = BTreeMap::from([(d("2026-09-20"), spent(1, 0.01, 0.0, &[("gpt-4o", 1)]))]);
        let a = compare(&bill, &history, day, day, 2.0, now());
        assert_eq!(kinds(&a), [UNEXPECTED_MODEL, FOREIGN_CALLS]);
        assert!(
            a[0].message.ends_with("it asked no model that day"),
            "{}",
            a[0].message
        );
    }

    #[test]
    fn days_before_the_history_began_are_compared_with_the_budget_only() {
        let a = one_day(billed(5.09, &[("gpt-4o-mini-2024-07-18", 300)]), None, 2.0);
        assert_eq!(kinds(&a), [OVER_DAILY_BUDGET]);
        assert_eq!(
            a[0].message,
            "2026-09-29: billed $5.09, over the daily budget of $2.00; sentinel kept no record of that day"
        );
    }

    #[test]
    fn an_empty_bill_has_no_advisories() {
        let day = d("2026-09-29");
        let history = BTreeMap::from([(day, spent(3, 0.1, 0.0, &[("gpt-4o", 3)]))]);
        assert_eq!(
            compare(&BTreeMap::new(), &history, d("2026-09-23"), day, 2.0, now()),
            vec![]
        );
    }

    #[test]
    fn days_outside_the_window_are_not_compared() {
        let bill = BTreeMap::from([(d("2026-09-20"), billed(9.0, &[("gpt-4o", 3)]))]);
        assert_eq!(
            compare(
                &bill,
                &BTreeMap::new(),
                d("2026-09-23"),
                d("2026-09-29"),
                2.0,
                now()
            ),
            vec![]
        );
    }

    #[test]
    fn record_mirrors_the_budgets_day_and_counts_attempts_and_models() {
        let mut b = Budget::default();
        let at: DateTime<Utc> = "2026-09-29T10:00:00Z".parse().unwrap();
        crate::gate::budget::settle(&mut b, 0.25, false, at);
        let mut days = BTreeMap::new();
        record(&mut days, &b, "gpt-4o", 1);
        crate::gate::budget::settle(&mut b, 0.05, true, at);
        record(&mut days, &b, "my-model", 2);
        assert_eq!(
            days[&d("2026-09-29")],
            DaySpend {
                calls: 2,
                measured: 0.25,
                estimated: 0.05,
                attempts: 3,
                models: BTreeMap::from([("gpt-4o".into(), 1), ("my-model".into(), 1)]),
                ..DaySpend::default()
            }
        );
    }

    #[test]
    fn the_history_keeps_sixty_days() {
        let mut days = BTreeMap::new();
        let first = d("2026-01-01");
        for day in first.iter_days().take(100) {
            days.insert(day, DaySpend::default());
            prune(&mut days, day);
        }
        assert_eq!(days.len(), 60);
        assert_eq!(*days.keys().next().unwrap(), d("2026-02-10"));
        assert_eq!(*days.keys().last().unwrap(), d("2026-04-10"));
    }

    #[test]
    fn remember_replaces_same_kind_and_day_keeps_first_found_and_bounds_the_list() {
        let a = |kind: &str, day: &str, msg: &str, at: &str| Advisory {
            kind: kind.into(),
            day: d(day),
            message: msg.into(),
            found: at.parse().unwrap(),
        };
        let mut kept = vec![a(FOREIGN_CALLS, "2026-09-28", "x", "2026-09-28T10:00:00Z")];
        assert!(!remember(
            &mut kept,
            &[a(FOREIGN_CALLS, "2026-09-28", "x", "2026-09-29T10:00:00Z")]
        ));
        assert_eq!(
            kept[0].found,
            "2026-09-28T10:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert!(remember(
            &mut kept,
            &[a(FOREIGN_CALLS, "2026-09-28", "y", "2026-09-29T10:00:00Z")]
        ));
        assert_eq!((kept.len(), kept[0].message.as_str()), (1, "y"));
        let many: Vec<Advisory> = d("2026-01-01")
            .iter_days()
            .take(70)
            .map(|day| {
                a(
                    OVER_DAILY_BUDGET,
                    &day.to_string(),
                    "z",
                    "2026-09-29T10:00:00Z",
                )
            })
            .collect();
        assert!(remember(&mut kept, &many));
        assert_eq!(kept.len(), ADVISORIES_KEPT);
        assert_eq!(kept.last().unwrap().day, d("2026-09-28"));
    }

    #[test]
    fn calibration_uses_only_days_whose_bill_is_sentinels_alone() {
        let bill = BTreeMap::from([
            (d("2026-09-27"), billed(1.2, &[("o3-pro-2025-06-10", 8)])),
            (d("2026-09-28"), billed(1.8, &[("o3-pro-2025-06-10", 12)])),
            // Foreign calls: not a measure of sentinel's calls.
            (d("2026-09-29"), billed(9.0, &[("o3-pro-2025-06-10", 30)])),
        ]);
        let ours = BTreeMap::from([
            (d("2026-09-27"), spent(8, 0.0, 0.08, &[("o3-pro", 8)])),
            (d("2026-09-28"), spent(12, 0.0, 0.12, &[("o3-pro", 12)])),
            (d("2026-09-29"), spent(10, 0.0, 0.10, &[("o3-pro", 10)])),
        ]);
        let c = calibrate(&bill, &ours, d("2026-09-23"), d("2026-09-29"), |_| false);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].model.as_str(), c[0].days, c[0].requests),
            ("o3-pro", 2, 20)
        );
        assert!((c[0].per_call - 0.15).abs() < 1e-12, "{}", c[0].per_call);
        assert_eq!(
            calibrate(&bill, &ours, d("2026-09-23"), d("2026-09-29"), |_| true),
            vec![]
        );
    }

    #[test]
    fn same_model_accepts_dated_snapshots_only() {
        assert!(same_model("gpt-4o-mini", "gpt-4o-mini-2024-07-18"));
        assert!(same_model("gpt-3.5-turbo", "gpt-3.5-turbo-0125"));
        assert!(same_model("o3-pro", "o3-pro"));
        assert!(!same_model("gpt-4o", "gpt-4o-mini-2024-07-18"));
        assert!(!same_model("o3", "o3-pro"));
    }

    #[test]
    fn usd_shows_enough_digits_to_compare() {
        assert_eq!(usd(2.35), "$2.35");
        assert_eq!(usd(0.146875), "$0.147");
        assert_eq!(usd(0.0095), "$0.0095");
        assert_eq!(usd(0.0), "$0.00");
    }
}
