//! Clock jumps: a remembered day or time far ahead of `now` (one tick run
//! with `--now 2036-01-01`, a host clock that jumped forward and back) is
//! never trusted, for it would freeze what it dates: the budget's day would
//! never roll, a hold would never end. It is reset and said, once: the
//! reset state no longer holds it (invariant 27).

use chrono::{DateTime, Days, Duration, Utc};

use crate::state::State;

/// The longest wait sentinel itself sets is a 25 h hold; a time further
/// ahead than this was not set by a tick at a `now` that was right.
const AHEAD: Duration = Duration::hours(26);

/// Reset what is dated ahead of `now`; one note saying what was found.
pub(super) fn reset_jumps(state: &mut State, now: DateTime<Utc>) -> Option<String> {
    let today = now.date_naive();
    let tomorrow = today.checked_add_days(Days::new(1)).unwrap_or(today);
    let later = now.checked_add_signed(AHEAD).unwrap_or(now);
    let mut found: Vec<String> = Vec::new();

    let b = &mut state.llm.budget;
    if let Some(day) = b.day.filter(|d| *d > tomorrow) {
        found.push(format!("the budget's day {day}"));
        b.day = Some(today);
        b.calls_today = 0;
        b.measured_today = 0.0;
        b.estimated_today = 0.0;
    }
    let history = state.llm.days.len();
    state.llm.days.retain(|d, _| *d <= tomorrow);
    if state.llm.days.len() < history {
        let n = history - state.llm.days.len();
        found.push(format!("{n} day(s) of the spend history"));
    }
    let a = &mut state.autonomy;
    if let Some(day) = a.day.filter(|d| *d > tomorrow) {
        found.push(format!("the autonomy allowance's day {day}"));
        a.day = Some(today);
        a.used_today = 0;
    }
    if let Some(t) = a.last_ts.filter(|t| *t > later) {
        found.push(format!("the last reconsideration at {}", t.to_rfc3339()));
        a.last_ts = None;
    }
    let cooling = a.cooldowns.len();
    a.cooldowns.retain(|_, t| *t <= later);
    if a.cooldowns.len() < cooling {
        found.push(format!("{} cooldown(s)", cooling - a.cooldowns.len()));
    }
    if let Some(c) = state.llm.circuit.as_ref().filter(|c| c.until > later) {
        found.push(format!("a provider hold until {}", c.until.to_rfc3339()));
        state.llm.circuit = None;
        state.provider_held_until = None;
    }
    let waits = reset_waits(state, now, later);
    if waits > 0 {
        found.push(format!("{waits} file wait(s)"));
    }
    (!found.is_empty()).then(|| {
        format!(
            "clock jump: {} dated more than a day after now ({}); not trusted, reset to now (check the host clock and --now / SENTINEL_NOW)",
            found.join(", "),
            now.to_rfc3339()
        )
    })
}

/// Files waiting until a time ahead of `later` may be tried now. Every
/// record is looked at only when the earliest wait is itself ahead.
fn reset_waits(state: &mut State, now: DateTime<Utc>, later: DateTime<Utc>) -> usize {
    if state.next_retry.is_some_and(|t| t > later) {
        state.files.load_all();
    }
    let mut n = 0;
    for (_, r) in state.files.loaded_mut() {
        if let Some(w) = r.retry.as_mut().filter(|w| w.not_before > later) {
            w.not_before = now;
            n += 1;
        }
    }
    if n > 0 || state.next_retry.is_some_and(|t| t > later) {
        state.next_retry =
            crate::gate::retry::next_due(state.files.values().filter_map(|r| r.retry.as_ref()));
    }
    n
}
