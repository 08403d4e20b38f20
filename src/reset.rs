//! `sentinel reset`: a person ends a wait. The named files (or every
//! given-up file) forget their failures and their not-before time, or the
//! provider's circuit closes, so that the next tick asks again.

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};

use crate::gate::retry::{self, Wait};
use crate::llm::protocol;
use crate::state::{Outcome, State};

/// What a person asked to reset.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Paths from the repository root.
    pub paths: Vec<String>,
    pub circuit: bool,
    pub given_up: bool,
}

/// What a reset did: one line per thing reset (or found with nothing to
/// reset), and whether the state changed and must be saved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    pub lines: Vec<String>,
    pub changed: bool,
}

/// Apply `req` to `state` at `now`. Every path is checked first: a path the
/// state does not know resets nothing at all.
pub fn apply(state: &mut State, req: &Request, now: DateTime<Utc>) -> Result<Done> {
    let paths: Vec<&str> = req
        .paths
        .iter()
        .map(|p| p.trim_start_matches("./"))
        .collect();
    let unknown: Vec<String> = paths
        .iter()
        .filter(|p| !state.files.contains_key(p))
        .map(|p| format!("`{p}`"))
        .collect();
    if !unknown.is_empty() {
        bail!(
            "{} not in the state; give the path from the repository root, as `sentinel tick --json` prints it (nothing was reset)",
            unknown.join(", ")
        );
    }
    let mut done = Done::default();
    if req.circuit {
        close_circuit(state, now, &mut done);
    }
    if req.given_up {
        bring_back(state, now, &mut done);
    }
    for path in paths {
        reset_file(state, path, now, &mut done);
    }
    if done.changed {
        // The header is what the next tick's wake gate reads.
        state.provider_held_until = state
            .llm
            .circuit
            .as_ref()
            .filter(|c| protocol::is_open(c, now))
            .map(|c| c.until);
        state.next_retry = retry::next_due(state.files.values().filter_map(|r| r.retry.as_ref()));
    }
    Ok(done)
}

/// Close the circuit and make due every file that waits for it.
fn close_circuit(state: &mut State, now: DateTime<Utc>, done: &mut Done) {
    let circuit = state.llm.circuit.take();
    let mut released = 0;
    for r in state.files.values_mut() {
        if let Some(w) = r
            .retry
            .as_mut()
            .filter(|w| w.wait == Wait::Circuit && !w.given_up())
        {
            w.not_before = now;
            w.wait = Wait::Reset;
            released += 1;
        }
    }
    done.changed |= circuit.is_some() || released > 0;
    let what = match &circuit {
        Some(c) => format!(
            "closed the provider circuit ({} until {}: {})",
            c.class.as_str(),
            c.until.to_rfc3339(),
            c.reason
        ),
        None => "the provider circuit was not open".to_string(),
    };
    done.lines.push(format!(
        "{what}; {released} file(s) that waited for it are asked again by the next tick"
    ));
}

/// Every given-up file starts over.
fn bring_back(state: &mut State, now: DateTime<Utc>, done: &mut Done) {
    let mut back = Vec::new();
    for (path, r) in &mut state.files {
        if let Some(w) = r.retry.as_mut().filter(|w| w.given_up()) {
            *w = retry::reset(&w.fingerprint, now);
            back.push(path.as_str());
        }
    }
    if back.is_empty() {
        done.lines
            .push("no file has given up; nothing to bring back".to_string());
        return;
    }
    done.changed = true;
    done.lines.push(format!(
        "brought back {} given-up file(s), asked again by the next tick: {}",
        back.len(),
        back.join(", ")
    ));
}

/// One file starts over, if it waits or gave up.
fn reset_file(state: &mut State, path: &str, now: DateTime<Utc>, done: &mut Done) {
    let r = state.files.get_mut(path).expect("checked by `apply`");
    if r.stuck {
        let n = r.rewrites.len();
        r.stuck = false;
        r.rewrites.clear();
        if let Some(fp) = r.fingerprint.clone() {
            r.retry = Some(retry::reset(&fp, now));
        }
        // The backlog wakes the next tick whether an advisor is on or not, and
        // that tick looks at the file although it did not change.
        if !state.backlog.iter().any(|p| p == path) {
            state.backlog.push(path.to_string());
        }
        done.changed = true;
        done.lines.push(format!(
            "`{path}` is no longer stuck ({n} rewrite(s) forgotten); the next tick hands it over"
        ));
        return;
    }
    let outcome = r.decision.as_ref().map(|d| d.outcome);
    let waits = matches!(
        outcome,
        Some(
            Outcome::Held
                | Outcome::Deferred
                | Outcome::Failed
                | Outcome::BadResponse
                | Outcome::GivenUp
        )
    );
    let (Some(outcome), Some(fp), true) = (outcome, r.fingerprint.clone(), waits) else {
        let last = outcome.map_or("none yet", Outcome::as_str);
        done.lines.push(format!(
            "`{path}` has nothing to reset: its last outcome is {last}"
        ));
        return;
    };
    let failures = r.retry.as_ref().map_or(0, |w| w.failures);
    r.retry = Some(retry::reset(&fp, now));
    done.changed = true;
    done.lines.push(format!(
        "`{path}` is asked again by the next tick (it was {}, after {failures} failure(s))",
        outcome.as_str()
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::protocol::{Circuit, Class};
    use crate::state::{Decision, FileRecord};

    fn now() -> DateTime<Utc> {
        "2026-06-16T10:00:00Z".parse().unwrap()
    }

    fn waiting(outcome: Outcome, retry: Option<retry::Retry>) -> FileRecord {
        FileRecord {
            blob: "b".into(),
            fingerprint: Some("fp".into()),
            decision: Some(Decision {
                answered_by: None,
                outcome,
                reason: "r".into(),
                ts: now(),
                by: None,
            }),
            last_ts: now(),
            retry,
            ..FileRecord::default()
        }
    }

    fn given_up() -> retry::Retry {
        let mut r = retry::reset("fp", now());
        r.failures = retry::MAX_FAILURES;
        r
    }

    #[test]
    fn an_unknown_path_resets_nothing() {
        let mut state = State::new();
        state
            .files
            .insert("a.js".into(), waiting(Outcome::GivenUp, Some(given_up())));
        let before = state.clone();
        let req = Request {
            paths: vec!["a.js".into(), "nope.js".into()],
            ..Request::default()
        };
        let err = apply(&mut state, &req, now()).unwrap_err().to_string();
        assert!(err.starts_with("`nope.js` not in the state"), "{err}");
        assert_eq!(state, before);
    }

    #[test]
    fn a_reset_file_is_due_now_and_the_header_says_so() {
        let mut state = State::new();
        state
            .files
            .insert("a.js".into(), waiting(Outcome::GivenUp, Some(given_up())));
        let req = Request {
            paths: vec!["./a.js".into()],
            ..Request::default()
        };
        let done = apply(&mut state, &req, now()).unwrap();
        assert!(done.changed);
        assert!(state.files["a.js"].retry.as_ref().unwrap().due(now()));
        assert_eq!(state.next_retry, Some(now()));
    }

    #[test]
    fn closing_the_circuit_releases_the_files_that_wait_for_it() {
        let mut state = State::new();
        let until = now() + chrono::Duration::hours(1);
        state.llm.circuit = Some(Circuit::new(Class::Auth, "HTTP 401", until));
        state.provider_held_until = Some(until);
        let held = retry::after(None, "fp", Outcome::Held, Some((Class::Auth, until)), now());
        state
            .files
            .insert("a.js".into(), waiting(Outcome::Held, held));
        let deferred = retry::after(None, "fp", Outcome::Deferred, None, now());
        state
            .files
            .insert("b.js".into(), waiting(Outcome::Deferred, deferred));
        let req = Request {
            circuit: true,
            ..Request::default()
        };
        let done = apply(&mut state, &req, now()).unwrap();
        assert!(done.lines[0].starts_with("closed the provider circuit (auth"));
        assert!(state.llm.circuit.is_none() && state.provider_held_until.is_none());
        assert!(state.files["a.js"].retry.as_ref().unwrap().due(now()));
        // The budget's wait is not the circuit's.
        assert!(!state.files["b.js"].retry.as_ref().unwrap().due(now()));
    }

    #[test]
    fn a_reset_stuck_file_waits_in_the_backlog_once() {
        let mut state = State::new();
        let mut stuck = waiting(Outcome::Stuck, None);
        stuck.stuck = true;
        stuck.rewrites = vec![now(); 3];
        state.files.insert("a.js".into(), stuck);
        let req = Request {
            paths: vec!["a.js".into(), "a.js".into()],
            ..Request::default()
        };
        let done = apply(&mut state, &req, now()).unwrap();
        assert!(
            done.lines[0].ends_with("the next tick hands it over"),
            "{done:?}"
        );
        assert_eq!(state.backlog, ["a.js"]);
        assert!(!state.files["a.js"].stuck && state.files["a.js"].rewrites.is_empty());
    }

    #[test]
    fn nothing_to_reset_is_said_and_changes_nothing() {
        let mut state = State::new();
        state
            .files
            .insert("a.js".into(), waiting(Outcome::LlmSkip, None));
        let req = Request {
            paths: vec!["a.js".into()],
            given_up: true,
            ..Request::default()
        };
        let done = apply(&mut state, &req, now()).unwrap();
        assert!(!done.changed);
        assert_eq!(
            done.lines,
            [
                "no file has given up; nothing to bring back",
                "`a.js` has nothing to reset: its last outcome is llm_skip"
            ]
        );
    }
}
