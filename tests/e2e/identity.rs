//! Which advisor made a decision: the evidence version covers the rules and
//! the policy only, and each decision names the advisor and model that made
//! it. Switching the advisor off and on re-bills nothing; a deliberate model
//! change re-judges only what the model judged, once. Calls are counted at
//! the fake provider (`util::openai`).

use serde_json::Value;

use crate::expect_code;
use crate::retries::{AUTH, GUIDE, SESSION, change, outcome, sandbox, state, tick};
use crate::util::openai::{FakeOpenAi, KEY};
use crate::util::{Output, Sandbox, at};

const A: &str = "src/a.js";
const B: &str = "src/b.js";

/// A tick at `now` without `OPENAI_API_KEY` (the advisor off), otherwise
/// like the advisor's ticks.
fn tick_without_key(sb: &Sandbox, ai: &FakeOpenAi, now: &str) -> Output {
    sb.sentinel(["tick", "--json", "--fake-sleep", "--now", now])
        .args(["--llm-url", &ai.base_url()])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output()
}

/// The remembered decision of `path`.
fn decision(sb: &Sandbox, path: &str) -> Value {
    state(sb)["files"][path]["decision"].clone()
}

#[test]
fn advisor_off_for_one_tick_rebills_nothing() {
    let sb = sandbox(&[AUTH, SESSION, A, B, GUIDE]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(ai.posts(), 4);

    // One tick without the key on the quiet repository, one after a doc
    // changed, then the key is back.
    let quiet = tick_without_key(&sb, &ai, &at(602));
    change(&sb, GUIDE, 2);
    let doc = tick_without_key(&sb, &ai, &at(604));
    let back = sb.advisor_tick_cmd(&ai, &at(606)).output();
    assert_eq!(
        ai.posts() - 4,
        0,
        "model calls after the advisor-off ticks (back: {})",
        back.stderr
    );

    expect_code(&quiet, 0);
    expect_code(&doc, 12);
    assert_eq!(outcome(&doc.json(), GUIDE), "local_skip");
    expect_code(&back, 0);
    for path in [AUTH, SESSION, A, B] {
        let d = decision(&sb, path);
        assert_eq!(d["outcome"], "llm_skip", "{path}");
        assert_eq!(d["by"], "openai:gpt-4o-mini", "{path}");
    }
    assert_eq!(decision(&sb, GUIDE)["by"], "local");
}

#[test]
fn a_file_handed_over_while_the_advisor_was_off_is_offered_to_the_model_once() {
    let sb = sandbox(&[AUTH, A, GUIDE]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(ai.posts(), 2);

    // Without the key a change is handed over as needs_review, once.
    change(&sb, A, 2);
    let off = tick_without_key(&sb, &ai, &at(602));
    expect_code(&off, 12);
    assert_eq!(outcome(&off.json(), A), "needs_review");
    expect_code(&tick_without_key(&sb, &ai, &at(604)), 0);
    assert_eq!(decision(&sb, AUTH)["outcome"], "llm_skip");

    // The key is back: the hand-over is offered to the model, once.
    let r = tick(&sb, &ai, &at(606), &[], 14);
    assert_eq!(outcome(&r, A), "llm_skip");
    assert_eq!(ai.posts(), 3);
    tick(&sb, &ai, &at(608), &[], 0);
    assert_eq!(ai.posts(), 3);
}

#[test]
fn a_model_change_rejudges_only_what_the_model_judged() {
    let sb = sandbox(&[AUTH, SESSION, A, GUIDE, "docs/other.md"]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(ai.posts(), 3);

    let other = ["--model", "gpt-4o"];
    let r = tick(&sb, &ai, &at(602), &other, 13);
    assert_eq!(ai.posts(), 6, "each file the model judged, once");
    assert_eq!(
        r["fresh_evaluations"], 3,
        "the local skips are not judged again"
    );
    for path in [AUTH, SESSION, A] {
        assert_eq!(outcome(&r, path), "llm_skip", "{path}");
        assert_eq!(decision(&sb, path)["by"], "openai:gpt-4o", "{path}");
    }
    for path in [GUIDE, "docs/other.md"] {
        assert_eq!(outcome(&r, path), "reused", "{path}");
    }
    tick(&sb, &ai, &at(604), &other, 0);
    assert_eq!(ai.posts(), 6);
}

/// `sentinel explain PATH --json` with the key and `extra` flags.
fn explain(sb: &Sandbox, path: &str, extra: &[&str]) -> Value {
    let out = sb
        .sentinel(["explain", path, "--json"])
        .args(extra)
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, 0);
    out.json()
}

#[test]
fn explain_says_when_another_model_would_judge_again() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    // `explain` reads the clock (a file's lifecycle status depends on it):
    // the tick runs at the clock's time too.
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    tick(&sb, &ai, &now, &[], 10);
    let e = explain(&sb, AUTH, &[]);
    assert!(
        e["verdict"].as_str().unwrap().starts_with("unchanged"),
        "{e}"
    );
    let e = explain(&sb, AUTH, &["--model", "gpt-4o"]);
    assert_eq!(
        e["verdict"],
        "advisor-changed: decided by openai:gpt-4o-mini; the next look asks openai:gpt-4o again"
    );
    assert_eq!(e["last_decision"]["by"], "openai:gpt-4o-mini");
    let e = explain(&sb, GUIDE, &["--model", "gpt-4o"]);
    assert!(e["verdict"].as_str().unwrap().starts_with("unchanged"));
}
