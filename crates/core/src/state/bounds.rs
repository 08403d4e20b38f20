//! The bounds every number of the state keeps, so that the state always
//! loads (invariant 27): a cost is bounded before it is added, sums and
//! counters saturate below what the loader refuses, and a value outside the
//! bounds met on load is damage, named, never read as zero.

use std::collections::BTreeMap;

use super::schema::State;

/// The most one call can be counted at (USD). A cost above it (a peer's
/// `1e308`, a mistyped `--cost-usd`) is counted at the ceiling: it still
/// exhausts any sane daily budget, and two of them cannot overflow a sum.
pub const MAX_CALL_USD: f64 = 1000.0;

/// Where a sum of USD saturates. Far beyond any real spend, far below the
/// largest float: a saturated sum stays finite, so it is written as a number.
pub const MAX_USD: f64 = 1e12;

/// Where a counter saturates: 2^53, the largest count a JSON reader that
/// holds numbers as doubles reads exactly. A count above it cannot have
/// been written by sentinel, so the loader refuses it as damage.
pub const MAX_COUNT: u64 = 1 << 53;

/// A call's cost as the budget counts it, and whether it was above the
/// ceiling. A cost that cannot be real (NaN, negative) counts as nothing;
/// infinity and anything above the ceiling count at the ceiling.
pub fn call_usd(cost: f64) -> (f64, bool) {
    if cost.is_nan() || cost <= 0.0 {
        (0.0, false)
    } else if cost > MAX_CALL_USD {
        (MAX_CALL_USD, true)
    } else {
        (cost, false)
    }
}

/// `sum + usd`, saturating at `MAX_USD`; `usd` is bounded first.
pub fn add_usd(sum: f64, usd: f64) -> f64 {
    let usd = if usd.is_nan() { 0.0 } else { usd.max(0.0) };
    let sum = if sum.is_nan() { 0.0 } else { sum.max(0.0) };
    (sum + usd).min(MAX_USD)
}

/// `n + k`, saturating at `MAX_COUNT`.
pub fn add_count(n: u64, k: u64) -> u64 {
    n.saturating_add(k).min(MAX_COUNT)
}

/// Add one to the count of `key`, saturating.
pub fn bump(counts: &mut BTreeMap<String, u64>, key: &str, k: u64) {
    let n = counts.entry(key.to_string()).or_default();
    *n = add_count(*n, k);
}

/// A value the loader refuses: the field as a path in the document, the
/// value as read, and what it should be.
#[derive(Debug, Clone, PartialEq)]
pub struct Damage {
    pub field: String,
    pub value: String,
    pub expected: &'static str,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "`{}` is {}, and {}",
            self.field, self.value, self.expected
        )
    }
}

const USD_RULE: &str = "a spend is a finite number of dollars, never negative, at most 1e12";
const CALL_RULE: &str =
    "a cost per call is a finite number of dollars, never negative, at most 1000";
const COUNT_RULE: &str = "a count is at most 2^53";

/// Every checked number of `state` within its bounds, else the first that is not.
pub fn check(state: &State) -> Result<(), Damage> {
    let mut c = Checker::default();
    let b = &state.llm.budget;
    c.count("llm.budget.calls_today", b.calls_today);
    c.count("llm.budget.lifetime_calls", b.lifetime_calls);
    c.count("llm.budget.refusals", b.refusals);
    c.count("llm.budget.capped", b.capped);
    c.usd("llm.budget.measured_today", b.measured_today);
    c.usd("llm.budget.estimated_today", b.estimated_today);
    c.usd("llm.budget.lifetime_measured", b.lifetime_measured);
    c.usd("llm.budget.lifetime_estimated", b.lifetime_estimated);
    c.count("llm.attempts", state.llm.attempts);
    c.counts("llm.failures", &state.llm.failures);
    for (day, d) in &state.llm.days {
        let at = |f: &str| format!("llm.days.{day}.{f}");
        c.count(&at("calls"), d.calls);
        c.count(&at("attempts"), d.attempts);
        c.count(&at("timed_out"), d.timed_out);
        c.usd(&at("measured"), d.measured);
        c.usd(&at("estimated"), d.estimated);
        c.usd(&at("timed_out_usd"), d.timed_out_usd);
        c.counts(&at("models"), &d.models);
        c.counts(&at("sources"), &d.sources);
    }
    for (model, per_call) in &state.llm.calibrated {
        let field = format!("llm.calibrated.{model}");
        if !(per_call.is_finite() && (0.0..=MAX_CALL_USD).contains(per_call)) {
            c.refuse(&field, per_call.to_string(), CALL_RULE);
        }
    }
    let w = &state.wake;
    c.count("wake.ticks", w.ticks);
    c.count("wake.wakes", w.wakes);
    c.count("wake.noops", w.noops);
    c.counts("wake.by_reason", &w.by_reason);
    let n = &state.novelty;
    c.count("novelty.fresh_evaluations", n.fresh_evaluations);
    c.count("novelty.reuses", n.reuses);
    c.count("novelty.estimated_tokens_saved", n.estimated_tokens_saved);
    c.count("novelty.file_reads", n.file_reads);
    c.counts("outcomes", &state.outcomes);
    c.found.map_or(Ok(()), Err)
}

/// Keeps the first damage found.
#[derive(Default)]
struct Checker {
    found: Option<Damage>,
}

impl Checker {
    fn refuse(&mut self, field: &str, value: String, expected: &'static str) {
        self.found.get_or_insert(Damage {
            field: field.to_string(),
            value,
            expected,
        });
    }

    fn count(&mut self, field: &str, n: u64) {
        if n > MAX_COUNT {
            self.refuse(field, n.to_string(), COUNT_RULE);
        }
    }

    fn counts(&mut self, field: &str, counts: &BTreeMap<String, u64>) {
        for (key, n) in counts {
            self.count(&format!("{field}.{key}"), *n);
        }
    }

    fn usd(&mut self, field: &str, v: f64) {
        if !(v.is_finite() && (0.0..=MAX_USD).contains(&v)) {
            self.refuse(field, v.to_string(), USD_RULE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_above_the_ceiling_is_counted_at_the_ceiling_and_said() {
        assert_eq!(call_usd(1.7976931348623157e308), (MAX_CALL_USD, true));
        assert_eq!(call_usd(f64::INFINITY), (MAX_CALL_USD, true));
        assert_eq!(call_usd(MAX_CALL_USD), (MAX_CALL_USD, false));
        assert_eq!(call_usd(f64::NAN), (0.0, false));
        assert_eq!(call_usd(-5.0), (0.0, false));
    }

    #[test]
    fn sums_and_counters_saturate_below_what_the_loader_refuses() {
        assert_eq!(add_usd(MAX_USD, MAX_CALL_USD), MAX_USD);
        assert_eq!(add_count(u64::MAX, 1), MAX_COUNT);
        assert_eq!(add_count(MAX_COUNT, 1), MAX_COUNT);
        let mut s = State::new();
        s.llm.budget.lifetime_measured = add_usd(MAX_USD, 1.0);
        s.llm.budget.lifetime_calls = add_count(MAX_COUNT, 1);
        assert_eq!(check(&s), Ok(()));
    }

    #[test]
    fn a_negative_spend_or_an_impossible_count_is_named() {
        let mut s = State::new();
        s.llm.budget.measured_today = -1000.0;
        let d = check(&s).unwrap_err();
        assert_eq!(d.field, "llm.budget.measured_today");
        assert_eq!(d.value, "-1000");
        let mut s = State::new();
        s.llm.budget.calls_today = u64::MAX;
        assert_eq!(check(&s).unwrap_err().field, "llm.budget.calls_today");
    }
}
