//! The files that wait: held, deferred, failed or given up. What the
//! operator is told about them, and the waits of states written before
//! files had a not-before time.

use chrono::{DateTime, Utc};

use super::report::FileReport;
use crate::gate::retry::{self, MAX_FAILURES};
use crate::llm::protocol::{self, Class};
use crate::state::{Outcome, State};

/// Give every waiting file of a state written before not-before times a
/// wait, as if it had waited since its decision: it is then retried like any
/// other instead of only when another wake takes it along. Only the loaded
/// records: a state of the sharded layout was adopted whole when it was
/// migrated, and every record written since has its wait.
pub(super) fn adopt(state: &mut State, now: DateTime<Utc>) {
    let circuit = state
        .llm
        .circuit
        .as_ref()
        .filter(|c| protocol::is_open(c, now))
        .map(|c| (c.class, c.until));
    for (_, r) in state.files.loaded_mut().filter(|(_, r)| r.retry.is_none()) {
        let (Some(d), Some(fp)) = (&r.decision, &r.fingerprint) else {
            continue;
        };
        r.retry = retry::after(None, fp, d.outcome, circuit, d.ts);
    }
}

/// One note per kind of wait in this tick: until when, why, and the command
/// that ends the wait sooner. Nothing secret: the circuit's reason is the
/// status and the error code.
pub(super) fn notes(state: &State, files: &[FileReport], now: DateTime<Utc>) -> Vec<String> {
    let count = |o: Outcome| files.iter().filter(|f| f.outcome == o).count();
    let earliest = |o: Outcome| {
        files
            .iter()
            .filter(|f| f.outcome == o)
            .filter_map(|f| state.files.get(&f.path)?.retry.as_ref())
            .map(|r| r.not_before)
            .min()
    };
    let mut out = Vec::new();
    let held = count(Outcome::Held);
    let failed = count(Outcome::Failed) + count(Outcome::BadResponse);
    if let Some(c) = state
        .llm
        .circuit
        .as_ref()
        .filter(|c| protocol::is_open(c, now) && held + failed > 0)
    {
        let what = match held {
            0 => "the provider is held".to_string(),
            n => format!("{n} held"),
        };
        out.push(format!(
            "{what} until {} ({}: {}); {}",
            when(c.until, now),
            c.class.as_str(),
            c.reason,
            reset_hint(c.class)
        ));
    }
    for outcome in [Outcome::Failed, Outcome::BadResponse] {
        if let Some(t) = earliest(outcome) {
            let n = count(outcome);
            let what = outcome.as_str();
            out.push(format!("{n} {what}, asked again from {}", when(t, now)));
        }
    }
    if let Some(t) = earliest(Outcome::Deferred) {
        let n = count(Outcome::Deferred);
        out.push(format!(
            "{n} deferred by the daily budget until {}",
            when(t, now)
        ));
    }
    if let Some(note) = given_up_note(state, files) {
        out.push(note);
    }
    out
}

/// The given-up files of this tick, by why each gave up: at once (asking
/// again about the same content cannot help) or after `MAX_FAILURES`
/// failures at one fingerprint.
fn given_up_note(state: &State, files: &[FileReport]) -> Option<String> {
    let given_up: Vec<&FileReport> = files
        .iter()
        .filter(|f| f.outcome == Outcome::GivenUp)
        .collect();
    if given_up.is_empty() {
        return None;
    }
    let at_once = given_up
        .iter()
        .filter(|f| {
            state
                .files
                .get(&f.path)
                .and_then(|r| r.retry.as_ref())
                .is_some_and(|r| r.at_once)
        })
        .count();
    let mut why = Vec::new();
    if at_once > 0 {
        why.push(format!(
            "{at_once} at once, as the provider can never accept the file as it is"
        ));
    }
    let after = given_up.len() - at_once;
    if after > 0 {
        why.push(format!(
            "{after} after {MAX_FAILURES} failures at one fingerprint"
        ));
    }
    Some(format!(
        "{} given_up ({}); `sentinel reset --given-up` (or `sentinel reset PATH`) asks again",
        given_up.len(),
        why.join(", ")
    ))
}

/// What a person does about a circuit of this class, naming the command.
fn reset_hint(class: Class) -> &'static str {
    match class {
        Class::Auth => "run `sentinel reset --circuit` after fixing the key",
        Class::Quota => "run `sentinel reset --circuit` after topping up, or wait",
        Class::Request => "run `sentinel reset --circuit` after fixing the model or the prompt",
        _ => "asked again then, or sooner after `sentinel reset --circuit`",
    }
}

/// `11:00 UTC` on the day of `now`, `2026-06-17 00:00 UTC` on another.
fn when(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if t.date_naive() == now.date_naive() {
        t.format("%H:%M UTC").to_string()
    } else {
        t.format("%Y-%m-%d %H:%M UTC").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_short_on_the_same_day_and_dated_on_another() {
        let now: DateTime<Utc> = "2026-06-16T10:00:00Z".parse().unwrap();
        assert_eq!(
            when("2026-06-16T11:00:00Z".parse().unwrap(), now),
            "11:00 UTC"
        );
        assert_eq!(
            when("2026-06-17T00:00:00Z".parse().unwrap(), now),
            "2026-06-17 00:00 UTC"
        );
    }

    #[test]
    fn every_hint_names_the_reset_command() {
        for class in Class::ALL {
            assert!(reset_hint(class).contains("`sentinel reset --circuit`"));
        }
    }
}
