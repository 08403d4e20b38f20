//! "I didn't decide" is retried, finitely: held, deferred and failed files
//! wait for a not-before time and are retried once when it passes, also on a
//! repository that does not change; after 5 failures at one fingerprint a
//! file gives up until it changes or `sentinel reset` brings it back. The
//! binary runs against the fake provider (`util::openai`) on real git
//! repositories; time is injected with `--now` and nothing sleeps.

use serde_json::Value;

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Output, Sandbox, at, hold_lock, snapshot};

/// High risk: always sent to the model.
pub const AUTH: &str = "src/auth.js";
pub const SESSION: &str = "src/session.js";
/// A doc: a local skip, never sent to the model.
pub const GUIDE: &str = "docs/guide.md";

/// The bytes of `path` at `version`.
pub fn content(path: &str, version: u64) -> String {
    if path.ends_with(".md") {
        format!("# {path}\n\nversion {version}\n")
    } else {
        format!("// {path}\nmodule.exports = {version};\n")
    }
}

/// A sandbox whose repository has one commit holding `paths` at version 1.
pub fn sandbox(paths: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    for path in paths {
        sb.repo.write(path, content(path, 1));
    }
    sb.repo.commit("initial files");
    sb
}

/// Commit `path` at `version`.
pub fn change(sb: &Sandbox, path: &str, version: u64) {
    sb.repo.write(path, content(path, version));
    sb.repo.commit(&format!("{path} v{version}"));
}

/// A tick with the key, at `now`, that must exit with `code`; returns the
/// whole output (the report is `out.json()`, the verdict `out.stderr_line()`).
#[track_caller]
pub fn tick_out(sb: &Sandbox, ai: &FakeOpenAi, now: &str, extra: &[&str], code: i32) -> Output {
    let out = sb.advisor_tick_cmd(ai, now).args(extra).output();
    expect_code(&out, code);
    out
}

/// A tick with the key, at `now`, that must exit with `code`; returns its report.
#[track_caller]
pub fn tick(sb: &Sandbox, ai: &FakeOpenAi, now: &str, extra: &[&str], code: i32) -> Value {
    tick_out(sb, ai, now, extra, code).json()
}

/// A tick on the quiet repository that must not ask the model: a no-op, or
/// an observation wake (the watches of the skips come due on their own).
#[track_caller]
pub fn quiet(sb: &Sandbox, ai: &FakeOpenAi, now: &str, extra: &[&str]) {
    let posts = ai.posts();
    let out = sb.advisor_tick_cmd(ai, now).args(extra).output();
    assert!(
        matches!(out.code, 0 | 15),
        "a quiet tick at {now} exited {}: {}",
        out.code,
        out.stderr
    );
    assert_eq!(ai.posts(), posts, "a quiet tick at {now} asked the model");
}

/// The outcome the report gives `path`.
#[track_caller]
pub fn outcome(report: &Value, path: &str) -> String {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the report: {report}"))["outcome"]
        .as_str()
        .expect("outcome")
        .to_string()
}

/// The state as one JSON document (the manifest with its shards' records).
pub fn state(sb: &Sandbox) -> Value {
    crate::util::layout::state_doc(&sb.state)
}

/// `sentinel reset ARGS... --state S --now T`.
fn reset(sb: &Sandbox, now: &str, args: &[&str]) -> Output {
    sb.sentinel(["reset", "--now", now])
        .args(args)
        .arg("--state")
        .arg(&sb.state)
        .output()
}

/// `DAY` plus `days`, `hours` and `minutes`.
fn at_dhm(days: i64, hours: i64, minutes: i64) -> String {
    at(days * 24 * 60 + hours * 60 + minutes)
}

#[test]
fn held_files_are_retried_after_the_circuit_ends_on_a_quiet_repo() {
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.push(Reply::fixture(401, "bad-key.json"));
    ai.answer_always(Reply::skip("nothing to change"));
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(ai.posts(), 1);
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(outcome(&r, SESSION), "held");

    // Nothing changes in the repository. Before the circuit ends: no-ops.
    for now in [at(602), at(630), at(659)] {
        quiet(&sb, &ai, &now, &[]);
    }
    assert_eq!(ai.posts(), 1);

    // At 11:00 the circuit ends: the tick wakes on its own and retries each
    // waiting file once.
    let r = tick(&sb, &ai, &at(660), &[], 14);
    assert_eq!(r["verdict"]["reason"], "backlog");
    assert_eq!(ai.posts(), 3, "one call per waiting file");
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, SESSION), "llm_skip");

    // Answered: nothing waits any more.
    quiet(&sb, &ai, &at(662), &[]);
    quiet(&sb, &ai, &at(6000), &[]);
    assert_eq!(ai.posts(), 3);
}

#[test]
fn deferred_files_are_retried_after_midnight_on_a_quiet_repo() {
    // 100 / 50 / 200 USD per million: the fixture's usage costs $0.70 and a
    // reservation about $0.25, so the second call of the day would cross $0.90.
    let price = ["--price", "gpt-4o-mini=100,50,200", "--daily-budget", "0.9"];
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &price, 10);
    assert_eq!(ai.posts(), 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, SESSION), "deferred");

    // Before midnight the deferred file waits.
    for now in [at(602), at(23 * 60 + 58)] {
        quiet(&sb, &ai, &now, &price);
    }
    assert_eq!(ai.posts(), 1);

    // 00:00 UTC: a new budget day, and the deferred file is retried once.
    let r = tick(&sb, &ai, "2026-06-17T00:00:00Z", &price, 14);
    assert_eq!(ai.posts(), 2);
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    quiet(&sb, &ai, "2026-06-17T00:02:00Z", &price);
    assert_eq!(ai.posts(), 2);
}

/// Five ticks that each fail on AUTH (an answer that is not JSON, 2 attempts
/// a call), at 10:00 and then exactly when each wait ends: 10 min, 1 h,
/// 6 h, 24 h. Returns the report of the fifth.
fn fail_five_times(sb: &Sandbox, ai: &FakeOpenAi) -> Output {
    ai.answer_always(Reply::not_json());
    let r = tick(sb, ai, &at(600), &[], 10);
    assert_eq!(outcome(&r, AUTH), "bad_response");
    let waits = [
        (at(609), at(610)),
        (at(669), at(670)),
        (at(17 * 60 + 9), at(17 * 60 + 10)),
        (at_dhm(1, 17, 9), at_dhm(1, 17, 10)),
    ];
    let mut last = None;
    for (i, (before, due)) in waits.iter().enumerate() {
        quiet(sb, ai, before, &[]);
        assert_eq!(ai.posts(), 2 * (i + 1), "no call before {due}");
        let out = tick_out(sb, ai, due, &[], 14);
        assert_eq!(ai.posts(), 2 * (i + 2), "one call at {due}");
        last = Some(out);
    }
    last.expect("four retries")
}

#[test]
fn invariant_17_a_failing_file_backs_off_10m_1h_6h_24h_then_gives_up() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let fifth = fail_five_times(&sb, &ai);
    let r = fifth.json();
    assert_eq!(outcome(&r, AUTH), "given_up");
    assert_eq!(r["counts"]["given_up"], 1);
    let line = fifth.stderr_line();
    assert!(line.contains("1 given_up"), "{line}");
    assert!(line.contains("sentinel reset"), "{line}");

    // Given up: 100 hours later nothing has been asked again.
    quiet(&sb, &ai, &at_dhm(1, 17, 12), &[]);
    quiet(&sb, &ai, &at_dhm(5, 21, 10), &[]);
    assert_eq!(ai.posts(), 10);
    let s = sb.stats_at(&at_dhm(5, 21, 10), 2.0);
    assert_eq!(s["outcomes"]["given_up"], 1);
    assert_eq!(s["llm"]["given_up"], serde_json::json!([AUTH]));

    // A new content is a new question: asked again.
    ai.answer_always(Reply::skip("fine now"));
    change(&sb, AUTH, 2);
    let r = tick(&sb, &ai, &at_dhm(5, 21, 12), &[], 12);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(ai.posts(), 11);
}

#[test]
fn reset_brings_a_given_up_file_back() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    fail_five_times(&sb, &ai);
    quiet(&sb, &ai, &at_dhm(2, 9, 0), &[]);

    // A path the state does not know is refused, and nothing is written.
    let before = snapshot(&sb.state);
    let out = reset(&sb, &at_dhm(2, 9, 1), &["src/nope.js"]);
    expect_code(&out, 1);
    assert!(out.stderr.contains("`src/nope.js`"), "{}", out.stderr);
    assert_eq!(snapshot(&sb.state), before);

    let out = reset(&sb, &at_dhm(2, 9, 1), &[AUTH]);
    expect_code(&out, 0);
    assert!(out.stdout.contains(AUTH), "{}", out.stdout);

    // The next tick, on a repository that did not change, asks again.
    ai.answer_always(Reply::skip("fine after all"));
    let r = tick(&sb, &ai, &at_dhm(2, 9, 2), &[], 14);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(ai.posts(), 11);
    quiet(&sb, &ai, &at_dhm(2, 9, 4), &[]);
    assert_eq!(ai.posts(), 11);
}

#[test]
fn reset_given_up_brings_every_given_up_file_back() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    fail_five_times(&sb, &ai);
    let out = reset(&sb, &at_dhm(2, 9, 1), &["--given-up"]);
    expect_code(&out, 0);
    assert!(out.stdout.contains(AUTH), "{}", out.stdout);
    ai.answer_always(Reply::skip("fine after all"));
    let r = tick(&sb, &ai, &at_dhm(2, 9, 2), &[], 14);
    assert_eq!(outcome(&r, AUTH), "llm_skip");

    // Nothing left to bring back: said so, still exit 0, nothing written.
    let before = snapshot(&sb.state);
    let out = reset(&sb, &at_dhm(2, 9, 3), &["--given-up"]);
    expect_code(&out, 0);
    assert!(out.stdout.contains("no file"), "{}", out.stdout);
    assert_eq!(snapshot(&sb.state), before);
}

#[test]
fn a_rejected_key_names_the_reset_command() {
    let paths = [AUTH, SESSION, "src/a.js", "src/b.js", "src/c.js", GUIDE];
    let sb = sandbox(&paths);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::fixture(401, "bad-key.json"));
    let out = tick_out(&sb, &ai, &at(600), &[], 10);
    let r = out.json();
    assert_eq!(ai.posts(), 1);
    assert_eq!(
        (r["counts"]["failed"].clone(), r["counts"]["held"].clone()),
        (1.into(), 4.into())
    );
    let expected = "4 held until 11:00 UTC (auth: HTTP 401 invalid_api_key: Incorrect API key provided: sk-***.); \
                    run `sentinel reset --circuit` after fixing the key";
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().expect("a note is a string"))
        .collect();
    assert!(notes.contains(&expected), "{notes:?}");
    let line = out.stderr_line();
    assert!(line.contains(expected), "{line}");
    assert!(!line.contains("sk-test"), "{line}");
    let advice = sb.stats_at(&at(600), 2.0)["llm"]["circuit"]["advice"].clone();
    assert!(
        advice
            .as_str()
            .unwrap_or("")
            .contains("sentinel reset --circuit"),
        "{advice}"
    );

    // The key is fixed; a person closes the circuit; the next tick retries
    // every waiting file at once instead of at 11:00.
    let out = reset(&sb, &at(604), &["--circuit"]);
    expect_code(&out, 0);
    assert!(out.stdout.contains("circuit"), "{}", out.stdout);
    ai.answer_always(Reply::skip("nothing to change"));
    let r = tick(&sb, &ai, &at(605), &[], 14);
    assert_eq!(r["counts"]["llm_skip"], 5);
    assert_eq!(ai.posts(), 6);
    assert_eq!(state(&sb)["llm"]["circuit"], Value::Null);
}

#[test]
fn reset_under_a_running_tick_is_busy_and_resets_nothing() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::fixture(401, "bad-key.json"));
    tick(&sb, &ai, &at(600), &[], 10);
    let before = snapshot(&sb.state);
    let _held = hold_lock(&sb.state);
    let out = reset(&sb, &at(601), &["--circuit"]);
    expect_code(&out, 20);
    assert!(out.stderr.contains("nothing was reset"), "{}", out.stderr);
    assert_eq!(snapshot(&sb.state), before);
}

#[test]
fn reset_needs_something_to_reset() {
    let sb = sandbox(&[AUTH]);
    let out = sb.sentinel(["reset"]).output();
    expect_code(&out, 2);
}
