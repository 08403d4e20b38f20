//! The LLM advisor end to end: the `sentinel` binary against a fake
//! OpenAI-compatible server on 127.0.0.1 (`util::openai`), on real git
//! repositories. The server records every request, so each test counts the
//! attempts sentinel really made. Every tick runs with `--fake-sleep`, so
//! waits are recorded in `slept_ms` and nothing sleeps; time is injected with
//! `--now`. The only real wait is the timeout test's, and there it is the
//! server's connection thread that sleeps, never the test's.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::gitlab::closed_port;
use crate::util::openai::{
    COMPLETIONS, FIXTURE_USAGE, FakeOpenAi, KEY, NOT_JSON_USAGE, Reply, fixture_text,
};
use crate::util::{Output, Sandbox, at};

/// High risk (the path says `auth`): always consulted.
const AUTH: &str = "src/auth.js";
/// High risk too (`session`).
const SESSION: &str = "src/session.js";
/// A doc: a local skip, never sent to the model.
const GUIDE: &str = "docs/guide.md";

/// gpt-4o-mini's built-in price (input, cached input, output), USD per million.
const MINI: (f64, f64, f64) = (0.15, 0.075, 0.60);

/// The bytes of `path` at `version`.
fn content(path: &str, version: u64) -> String {
    if path.ends_with(".md") {
        format!("# {path}\n\nversion {version}\n")
    } else {
        format!("// {path}\nmodule.exports = {version};\n")
    }
}

/// A sandbox whose repository has one commit holding `paths` at version 1.
fn sandbox(paths: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    for path in paths {
        sb.repo.write(path, content(path, 1));
    }
    sb.repo.commit("initial files");
    sb
}

/// Commit `path` at `version`.
fn change(sb: &Sandbox, path: &str, version: u64) {
    sb.repo.write(path, content(path, version));
    sb.repo.commit(&format!("{path} v{version}"));
}

/// A tick against `ai` that must exit with `code`; returns its `--json` report.
#[track_caller]
fn tick(sb: &Sandbox, ai: &FakeOpenAi, now: &str, extra: &[&str], code: i32) -> Value {
    let out = sb.advisor_tick_cmd(ai, now).args(extra).output();
    expect_code(&out, code);
    let report = out.json();
    assert_eq!(report["exit_code"], code, "exit_code field of {report}");
    report
}

/// The report's entry for `path`.
#[track_caller]
fn file<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the report: {report}"))
}

#[track_caller]
fn outcome<'a>(report: &'a Value, path: &str) -> &'a str {
    file(report, path)["outcome"].as_str().expect("outcome")
}

#[track_caller]
fn reason<'a>(report: &'a Value, path: &str) -> &'a str {
    file(report, path)["reason"].as_str().expect("reason")
}

/// The paths a tick looked at, in order.
fn paths(report: &Value) -> Vec<&str> {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .map(|f| f["path"].as_str().expect("path"))
        .collect()
}

#[track_caller]
fn slept(report: &Value) -> Vec<u64> {
    serde_json::from_value(report["slept_ms"].clone()).expect("slept_ms is a list of ms")
}

#[track_caller]
fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[track_caller]
fn close_to(actual: &Value, expected: f64) {
    let a = num(actual);
    assert!(
        (a - expected).abs() < 1e-12,
        "{a} is not {expected} (off by {})",
        a - expected
    );
}

/// Exactly `n` requests reached the server, and every one was a
/// chat-completions POST carrying the key.
#[track_caller]
fn assert_posts(ai: &FakeOpenAi, n: usize) {
    let requests = ai.requests();
    assert_eq!(
        requests.len(),
        n,
        "requests: {:?}",
        requests
            .iter()
            .map(|r| format!("{} {}", r.method, r.target))
            .collect::<Vec<_>>()
    );
    for r in &requests {
        assert!(r.is_completion(), "{} {}", r.method, r.target);
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

/// What `tick` reports for a failed call: `<class> after N attempt(s): <why>`
/// and, when the class holds the provider, `; provider held until <until>`.
fn failed(class: &str, attempts: u32, why: &str, until: Option<&str>) -> String {
    let s = if attempts == 1 { "" } else { "s" };
    let held = until
        .map(|u| format!("; provider held until {u}"))
        .unwrap_or_default();
    format!("{class} after {attempts} attempt{s}: {why}{held}")
}

/// One risky file and a doc; `reply` answers every call; one first-run tick
/// at 10:00. Returns the sandbox, the server and the report.
fn first_run_answered_by(reply: Reply) -> (Sandbox, FakeOpenAi, Value) {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(reply);
    let report = tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(outcome(&report, GUIDE), "local_skip");
    assert_eq!(report["advisor"], "on");
    (sb, ai, report)
}

/// The stats' circuit at `now`: (class, until, open).
#[track_caller]
fn circuit(sb: &Sandbox, now: &str) -> Value {
    let c = &sb.stats_at(now, 2.0)["llm"]["circuit"];
    if c.is_null() {
        return Value::Null;
    }
    json!([c["class"], c["until"], c["open"]])
}

// ---------------------------------------------------------------------------
// 1. Attempts per error class, counted at the server
// ---------------------------------------------------------------------------

#[test]
fn advisor_quota_429_is_one_attempt_and_holds_until_the_next_utc_midnight() {
    let (sb, ai, r) = first_run_answered_by(Reply::quota());
    assert_posts(&ai, 1);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "quota",
            1,
            "HTTP 429 insufficient_quota: You exceeded your current quota, please check your plan and billing details.",
            Some("2026-06-17T00:00:00+00:00")
        )
    );

    let s = sb.stats_at(&at(600), 2.0);
    let l = &s["llm"];
    assert_eq!(l["circuit"]["class"], "quota");
    assert_eq!(l["circuit"]["until"], "2026-06-17T00:00:00Z");
    assert_eq!(l["circuit"]["open"], true);
    assert!(
        l["circuit"]["advice"]
            .as_str()
            .unwrap()
            .contains("00:00 UTC"),
        "{l}"
    );
    assert_eq!(l["failures_by_class"], json!({"quota": 1}));
    assert_eq!(l["attempts"], 1);
    // Nothing was billed: a refused call is not a call.
    assert_eq!(l["calls_today"], 0);
    assert_eq!(num(&l["cost_today_measured"]), 0.0);

    assert_eq!(
        circuit(&sb, "2026-06-16T23:59:59Z"),
        json!(["quota", "2026-06-17T00:00:00Z", true])
    );
    assert_eq!(
        circuit(&sb, "2026-06-17T00:00:00Z"),
        json!(["quota", "2026-06-17T00:00:00Z", false])
    );
}

#[test]
fn advisor_spend_limit_429_is_quota_too() {
    let (sb, ai, r) = first_run_answered_by(Reply::fixture(429, "spend-limit.json"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "quota",
            1,
            "HTTP 429 project_spend_limit_exceeded: You exceeded your current quota, please check your plan and billing details.",
            Some("2026-06-17T00:00:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["quota", "2026-06-17T00:00:00Z", true])
    );
}

#[test]
fn advisor_bad_key_401_is_one_attempt_then_a_60_minute_hold() {
    let (sb, ai, r) = first_run_answered_by(Reply::fixture(401, "bad-key.json"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "auth",
            1,
            "HTTP 401 invalid_api_key: Incorrect API key provided: sk-***.",
            Some("2026-06-16T11:00:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["auth", "2026-06-16T11:00:00Z", true])
    );

    // 30 minutes later the file changes: held, no call.
    change(&sb, AUTH, 2);
    let r = tick(&sb, &ai, &at(630), &[], 12);
    assert_posts(&ai, 1);
    assert_eq!(r["llm_calls"], 0);
    assert_eq!(outcome(&r, AUTH), "held");
    assert!(
        reason(&r, AUTH).starts_with("provider held until 2026-06-16T11:00:00+00:00 (auth): "),
        "{}",
        reason(&r, AUTH)
    );

    // 61 minutes after the 401 a wake (a doc change) retries the held file.
    ai.answer_always(Reply::skip("nothing to change"));
    change(&sb, GUIDE, 2);
    let r = tick(&sb, &ai, &at(661), &[], 12);
    assert_posts(&ai, 2);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(file(&r, AUTH)["novelty"], "prev-not-reusable");
    assert_eq!(outcome(&r, GUIDE), "local_skip");
    let l = &sb.stats_at(&at(661), 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null, "a success closes the circuit");
    assert_eq!(l["failures_by_class"], json!({"auth": 1}));
    assert_eq!(l["attempts"], 2);
}

/// 500 and 503 alike: three attempts 2 s and 4 s apart, then a 10-minute
/// hold that holds the next risky file of the same tick without a call.
fn a_server_error_is_three_attempts_then_a_10_minute_hold(status: u16, fixture: &str, words: &str) {
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::fixture(status, fixture));
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 3);
    assert_eq!(r["llm_calls"], 3);
    assert_eq!(slept(&r), [2000, 4000]);
    assert_eq!(paths(&r), [GUIDE, AUTH, SESSION]);
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "server",
            3,
            &format!("HTTP {status} server_error: {words}"),
            Some("2026-06-16T10:10:00+00:00")
        )
    );
    assert_eq!(outcome(&r, SESSION), "held");
    assert!(
        reason(&r, SESSION).starts_with("provider held until 2026-06-16T10:10:00+00:00 (server)"),
        "{}",
        reason(&r, SESSION)
    );
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(
        json!([l["circuit"]["class"], l["circuit"]["until"]]),
        json!(["server", "2026-06-16T10:10:00Z"])
    );
    assert_eq!(l["failures_by_class"], json!({"server": 1}));
    assert_eq!(l["attempts"], 3);

    // Nine minutes later a change is still held without a call.
    change(&sb, AUTH, 2);
    let r = tick(&sb, &ai, &at(609), &[], 12);
    assert_posts(&ai, 3);
    assert_eq!(paths(&r), [AUTH]);
    assert_eq!(outcome(&r, AUTH), "held");

    // At 10:10 the hold is over: the next wake retries both, one call each.
    ai.answer_always(Reply::completion());
    change(&sb, GUIDE, 2);
    let r = tick(&sb, &ai, &at(610), &[], 12);
    assert_posts(&ai, 5);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    assert_eq!(sb.stats_at(&at(610), 2.0)["llm"]["circuit"], Value::Null);
}

#[test]
fn advisor_server_500_is_three_attempts_then_a_10_minute_hold() {
    a_server_error_is_three_attempts_then_a_10_minute_hold(
        500,
        "server-500.json",
        "The server had an error processing your request.",
    );
}

#[test]
fn advisor_overloaded_503_is_handled_like_a_500() {
    a_server_error_is_three_attempts_then_a_10_minute_hold(
        503,
        "overloaded-503.json",
        "That model is currently overloaded with other requests.",
    );
}

#[test]
fn advisor_rate_limit_429_honours_retry_after_and_succeeds_on_the_third_attempt() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.push_n(
        2,
        Reply::fixture(429, "rate-limit.json").header("retry-after", "3"),
    );
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 3);
    assert_eq!(ai.queued(), 0);
    assert_eq!(r["llm_calls"], 3);
    assert_eq!(slept(&r), [3000, 3000]);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null);
    assert_eq!(l["failures_by_class"], json!({}));
    assert_eq!(l["attempts"], 3);
    assert_eq!(l["calls_today"], 1);
}

#[test]
fn advisor_the_longer_of_retry_after_ms_and_retry_after_wins() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.push(
        Reply::fixture(429, "rate-limit.json")
            .header("retry-after-ms", "1500")
            .header("retry-after", "3"),
    );
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 2);
    assert_eq!(slept(&r), [3000]);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
}

#[test]
fn advisor_rate_limit_429_without_a_usable_wait_backs_off_by_the_table_then_holds_2_minutes() {
    // `retry-after: 0` is not a wait, and this message names none.
    let body = json!({"error": {"message": "Too many requests.", "type": "requests", "param": null, "code": "rate_limit_exceeded"}});
    let (sb, ai, r) = first_run_answered_by(Reply::json(429, &body).header("retry-after", "0"));
    assert_posts(&ai, 3);
    assert_eq!(slept(&r), [5000, 15000]);
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "rate_limit",
            3,
            "HTTP 429 rate_limit_exceeded: Too many requests.",
            Some("2026-06-16T10:02:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["rate_limit", "2026-06-16T10:02:00Z", true])
    );
}

#[test]
fn advisor_a_tokens_per_minute_429_is_held_until_its_spent_window_resets() {
    // OpenAI's own headers: the tokens window is spent (remaining 0) and
    // resets in 6m0s; the requests window has room, its 120ms is no wait.
    let (sb, ai, r) = first_run_answered_by(Reply::rate_limit().header("retry-after", "0"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["rate_limit", "2026-06-16T10:06:00Z", true])
    );
}

#[test]
fn advisor_a_retry_after_over_60_seconds_is_not_slept_and_opens_the_circuit_that_long() {
    let (sb, ai, r) =
        first_run_answered_by(Reply::fixture(429, "rate-limit.json").header("retry-after", "120"));
    assert_posts(&ai, 1);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["rate_limit", "2026-06-16T10:02:00Z", true])
    );
    assert_eq!(
        circuit(&sb, "2026-06-16T10:01:59Z"),
        json!(["rate_limit", "2026-06-16T10:02:00Z", true])
    );
    assert_eq!(
        circuit(&sb, "2026-06-16T10:02:00Z"),
        json!(["rate_limit", "2026-06-16T10:02:00Z", false])
    );

    // A longer wait than the class's own 2 minutes holds for that long.
    let (sb, ai, r) = first_run_answered_by(Reply::rate_limit().header("retry-after", "600"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["rate_limit", "2026-06-16T10:10:00Z", true])
    );
}

#[test]
fn advisor_an_answer_that_is_not_the_expected_json_is_two_attempts_and_bad_response() {
    let (sb, ai, r) = first_run_answered_by(Reply::not_json());
    assert_posts(&ai, 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(slept(&r), [1000]);
    assert_eq!(outcome(&r, AUTH), "bad_response");
    let why = reason(&r, AUTH);
    assert!(
        why.starts_with(
            "bad_response after 2 attempts: the answer is not the expected JSON object"
        ),
        "{why}"
    );
    assert!(!why.contains("provider held"), "{why}");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null, "bad_response opens no circuit");
    assert_eq!(l["failures_by_class"], json!({"bad_response": 1}));
    // Both useless answers were billed, and both are counted.
    assert_eq!(l["calls_today"], 1);
    close_to(
        &l["cost_today_measured"],
        2.0 * NOT_JSON_USAGE.cost(MINI.0, MINI.1, MINI.2),
    );

    // Not a decision: asked again once its 10-minute wait is over (by a
    // wake of its own), not by a wake before that.
    ai.answer_always(Reply::completion());
    change(&sb, GUIDE, 2);
    let r = tick(&sb, &ai, &at(602), &[], 12);
    assert_posts(&ai, 2);
    assert_eq!(paths(&r), [GUIDE]);
    let r = tick(&sb, &ai, &at(610), &[], 14);
    assert_posts(&ai, 3);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
}

/// A prompt too long for the model is this file's problem, not the
/// provider's: the file fails at once and the next file is still asked.
#[test]
fn a_context_length_error_holds_only_that_file() {
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.push(Reply::fixture(400, "context-length.json"));
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 2);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(outcome(&r, AUTH), "given_up");
    let why = reason(&r, AUTH);
    assert!(
        why.starts_with(&failed(
            "file_request",
            1,
            "HTTP 400 context_length_exceeded",
            None
        )) && why.contains("gave up at once"),
        "{why}"
    );
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null, "the provider is not held");
    assert_eq!(l["failures_by_class"], json!({"file_request": 1}));
    assert_eq!(l["given_up"], json!([AUTH]));
    // Later wakes and retries never ask about that content again.
    for minute in [602, 700, 2000] {
        tick(&sb, &ai, &at(minute), &[], 0);
    }
    assert_posts(&ai, 2);
}

#[test]
fn advisor_model_not_found_404_is_one_attempt_and_a_60_minute_hold() {
    let (sb, ai, r) = first_run_answered_by(Reply::fixture(404, "model-not-found.json"));
    assert_posts(&ai, 1);
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "request",
            1,
            "HTTP 404 model_not_found: The model `gpt-4o` does not exist or you do not have access to it.",
            Some("2026-06-16T11:00:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["request", "2026-06-16T11:00:00Z", true])
    );
}

#[test]
fn advisor_request_too_large_429_is_not_retried_as_a_rate_limit() {
    let (sb, ai, r) = first_run_answered_by(
        Reply::fixture(429, "request-too-large.json").header("retry-after", "1"),
    );
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    // This file can never fit the per-minute limit; other files still can.
    let why = reason(&r, AUTH);
    assert!(
        why.starts_with(&failed(
            "file_request",
            1,
            "HTTP 429 rate_limit_exceeded",
            None
        )) && why.contains("gave up at once"),
        "{why}"
    );
    assert_eq!(circuit(&sb, &at(600)), Value::Null);
}

/// The one test that waits for real: two client timeouts of 1 s. The
/// server's connection threads sleep; the test thread only waits for the
/// process.
#[test]
fn advisor_a_timeout_is_two_attempts_with_a_wait_of_1_second_then_a_5_minute_hold() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::completion().after(Duration::from_secs(3)));
    let r = tick(&sb, &ai, &at(600), &["--llm-timeout", "1"], 10);
    assert_posts(&ai, 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(slept(&r), [1000]);
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "timeout",
            2,
            "the request timed out",
            Some("2026-06-16T10:05:00+00:00")
        )
    );
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(l["circuit"]["class"], "timeout");
    assert_eq!(l["failures_by_class"], json!({"timeout": 1}));
}

#[test]
fn advisor_a_refused_connection_is_three_attempts_then_a_5_minute_hold() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let url = format!("http://127.0.0.1:{}/v1", closed_port());
    let out = sb
        .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
        .args(["--llm-url", &url])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, 10);
    let r = out.json();
    assert_eq!(r["llm_calls"], 3);
    assert_eq!(slept(&r), [2000, 4000]);
    assert_eq!(outcome(&r, AUTH), "failed");
    let why = reason(&r, AUTH);
    assert!(why.starts_with("network after 3 attempts: "), "{why}");
    assert!(
        why.ends_with("; provider held until 2026-06-16T10:05:00+00:00"),
        "{why}"
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["network", "2026-06-16T10:05:00Z", true])
    );
}

#[test]
fn advisor_a_truncated_answer_is_a_network_failure_not_a_bad_response() {
    let (sb, ai, r) = first_run_answered_by(Reply::completion().truncated());
    assert_posts(&ai, 3);
    assert_eq!(slept(&r), [2000, 4000]);
    assert_eq!(outcome(&r, AUTH), "failed");
    let why = reason(&r, AUTH);
    assert!(why.starts_with("network after 3 attempts: "), "{why}");
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["network", "2026-06-16T10:05:00Z", true])
    );
}

#[test]
fn advisor_a_redirect_is_not_followed_so_the_key_stays_with_the_configured_host() {
    let elsewhere = FakeOpenAi::start();
    let location = format!("{}/chat/completions", elsewhere.base_url());
    let (sb, ai, r) = first_run_answered_by(
        Reply::json(307, &json!({"error": {"message": "moved", "type": "redirect", "param": null, "code": null}}))
            .header("Location", &location),
    );
    assert_posts(&ai, 1);
    assert_eq!(elsewhere.count(), 0, "the redirect was followed");
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "unknown",
            1,
            "HTTP 307 redirect: moved",
            Some("2026-06-16T10:05:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["unknown", "2026-06-16T10:05:00Z", true])
    );
}

// ---------------------------------------------------------------------------
// 2. The seed's quota wall
// ---------------------------------------------------------------------------

/// `count` commits on top of HEAD, each changing `path` to the next version
/// from `first` on, built by one `git fast-import` on a side branch; their
/// ids, oldest first. HEAD does not move.
fn prebuilt_changes(sb: &Sandbox, path: &str, first: u64, count: u64) -> Vec<String> {
    let parent = sb.repo.head();
    let mut stream = String::new();
    for i in 0..count {
        let body = content(path, first + i);
        let message = format!("{path} v{}", first + i);
        stream.push_str(&format!(
            "commit refs/heads/prebuilt\ncommitter t <t@example.invalid> {} +0000\ndata {}\n{message}\n",
            1_781_600_000 + i,
            message.len()
        ));
        if i == 0 {
            stream.push_str(&format!("from {parent}\n"));
        }
        stream.push_str(&format!(
            "M 100644 inline {path}\ndata {}\n{body}\n",
            body.len()
        ));
    }
    let mut child = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start git fast-import");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stream.as_bytes())
        .expect("feed git fast-import");
    assert!(child.wait().expect("git fast-import").success());
    let ids: Vec<String> = sb
        .repo
        .git(&["rev-list", "--reverse", &format!("{parent}..prebuilt")])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len() as u64, count);
    ids
}

/// The billing quota runs out at 09:00. A commit changes `src/auth.js`
/// before every tick, and a tick runs every 2 minutes until 23:58: 450
/// ticks. sentinel makes one call, sees "out of money", and holds the
/// file on every later tick. After 00:00 UTC a change is judged again.
///
/// Speed: 450 `git commit`s plus 450 ticks took 13-16 s on a 2-core machine,
/// 7 s of it in git. So the 450 commits are built up front by one `git
/// fast-import`, and before each tick the branch moves to the next one
/// (`git update-ref`, a few ms): every tick still sees a new head whose only
/// change is the risky file.
#[test]
fn advisor_quota_wall_one_call_after_09_00_until_midnight() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(0), &["--batch", "0"], 10);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_posts(&ai, 1);

    let commits = prebuilt_changes(&sb, AUTH, 2, 450);
    ai.answer_always(Reply::quota());
    let mut held = 0;
    for (i, commit) in commits.iter().enumerate() {
        let now = at(9 * 60 + 2 * i as i64);
        sb.repo.git(&["update-ref", "HEAD", commit]);
        let r = tick(&sb, &ai, &now, &["--batch", "0"], 12);
        assert_eq!(r["head"], commit.as_str(), "at {now}");
        assert_eq!(paths(&r), [AUTH], "at {now}");
        if i == 0 {
            assert_eq!(r["llm_calls"], 1);
            assert_eq!(outcome(&r, AUTH), "failed");
            assert!(reason(&r, AUTH).starts_with("quota after 1 attempt"));
        } else {
            assert_eq!(r["llm_calls"], 0, "at {now}");
            assert_eq!(outcome(&r, AUTH), "held", "at {now}");
            held += 1;
        }
        assert_eq!(slept(&r), Vec::<u64>::new());
    }
    assert_eq!(at(9 * 60 + 2 * 449), "2026-06-16T23:58:00Z");
    assert_eq!(held, 449);
    assert_posts(&ai, 2);
    let posts_after_nine = ai.posts() - 1;
    assert_eq!(posts_after_nine, 1, "one call after 09:00");

    let s = sb.stats_at("2026-06-16T23:58:00Z", 2.0);
    assert_eq!(s["llm"]["failures_by_class"], json!({"quota": 1}));
    assert_eq!(s["llm"]["attempts"], 2);
    assert_eq!(s["outcomes"]["held"], 449);
    assert_eq!(s["outcomes"]["failed"], 1);
    assert_eq!(
        s["wake"]["by_reason"],
        json!({"first_run": 1, "repo_changed": 450})
    );
    assert_eq!(s["llm"]["circuit"]["open"], true);
    assert_eq!(s["llm"]["circuit"]["until"], "2026-06-17T00:00:00Z");

    // A new UTC day, a working provider: the next change costs one call.
    ai.answer_always(Reply::completion());
    sb.repo.git(&["checkout", "-q", "-f", "HEAD"]);
    change(&sb, AUTH, 1000);
    let r = tick(&sb, &ai, "2026-06-17T00:00:00Z", &["--batch", "0"], 12);
    assert_eq!(paths(&r), [AUTH]);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_posts(&ai, 3);
    let l = &sb.stats_at("2026-06-17T00:00:00Z", 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null);
    assert_eq!(l["calls_today"], 1);
}

// ---------------------------------------------------------------------------
// 3-6. What calls cost
// ---------------------------------------------------------------------------

#[test]
fn advisor_a_call_that_would_cross_the_daily_budget_is_deferred() {
    // 100 / 50 / 200 USD per million: the fixture's usage costs $0.70, and
    // each reservation (the prompt plus 1024 tokens out) about $0.25.
    let (input, cached, output) = (100.0, 50.0, 200.0);
    let price = ["--price", "gpt-4o-mini=100,50,200", "--daily-budget", "0.9"];
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &price, 10);
    assert_posts(&ai, 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, SESSION), "deferred");

    let spent = FIXTURE_USAGE.cost(input, cached, output);
    assert!((spent - 0.70).abs() < 1e-12, "{spent}");
    let chars = content(SESSION, 1).len() as u64;
    let reserve = ((chars.div_ceil(4) + 400) as f64 * input + 1024.0 * output) / 1e6;
    assert!(
        spent + reserve > 0.9 && reserve <= 0.9,
        "{spent} + {reserve}"
    );
    // Once a call's real cost is known, a reservation is at least that.
    let reserve = reserve.max(spent);
    assert_eq!(
        reason(&r, SESSION),
        format!(
            "daily-budget-exhausted: $0.7000 spent today, this call could cost ${reserve:.4} of the $0.90 limit"
        )
    );
    assert!(reason(&r, SESSION).starts_with("daily-budget-exhausted"));

    // A deferred file waits for the next UTC day: no wake before it.
    let out = sb.advisor_tick_cmd(&ai, &at(602)).args(price).output();
    expect_code(&out, 0);
    assert_posts(&ai, 1);

    let l = &sb.stats_at(&at(602), 0.9)["llm"];
    close_to(&l["cost_today_measured"], spent);
    close_to(&l["lifetime_cost_measured"], spent);
    assert_eq!(num(&l["cost_today_estimated"]), 0.0);
    assert_eq!(l["calls_today"], 1);
    assert_eq!(l["budget_refusals"], 1);
    close_to(&l["budget_left"], 0.9 - spent);

    // The next UTC day, the next wake (a doc change) asks about it.
    change(&sb, GUIDE, 2);
    let r = tick(&sb, &ai, "2026-06-17T00:00:00Z", &price, 12);
    assert_posts(&ai, 2);
    assert_eq!(paths(&r), [GUIDE, SESSION]);
    assert_eq!(outcome(&r, SESSION), "llm_skip");
}

#[test]
fn advisor_cached_tokens_are_priced_at_the_cached_rate() {
    let (sb, ai, r) = first_run_answered_by(Reply::completion());
    assert_posts(&ai, 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let expected = (2000.0 * 0.15 + 8000.0 * 0.075 + 500.0 * 0.60) / 1e6;
    assert_eq!(FIXTURE_USAGE.cost(MINI.0, MINI.1, MINI.2), expected);
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(&l["cost_today_measured"], expected);
    close_to(&l["lifetime_cost_measured"], expected);
    assert_eq!(num(&l["cost_today_estimated"]), 0.0);
    assert_eq!(l["calls_today"], 1);
    assert_eq!(l["lifetime_calls"], 1);
    close_to(&l["budget_left"], 2.0 - expected);
}

#[test]
fn advisor_a_model_without_a_price_is_counted_at_the_per_call_estimate() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let model = ["--model", "my-local-model", "--cost-per-call", "0.03"];
    let r = tick(&sb, &ai, &at(600), &model, 10);
    assert_posts(&ai, 1);
    assert_eq!(ai.requests()[0].json()["model"], "my-local-model");
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(&l["cost_today_estimated"], 0.03);
    close_to(&l["lifetime_cost_estimated"], 0.03);
    assert_eq!(num(&l["cost_today_measured"]), 0.0);
    assert_eq!(num(&l["lifetime_cost_measured"]), 0.0);
    assert_eq!(l["calls_today"], 1);
    close_to(&l["budget_left"], 1.97);
}

// ---------------------------------------------------------------------------
// 5. What the answers mean
// ---------------------------------------------------------------------------

#[test]
fn advisor_evolve_is_an_open_proposal_never_reused_and_skip_is_reused() {
    let mut sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    let findings = json!([
        {"line": 2, "severity": "major", "message": "the module exports a constant instead of a verifier"},
        {"line": 1, "severity": "info", "message": "the header comment names the file only"}
    ]);
    ai.push(Reply::evolve("exports no verifier", findings.clone()));
    ai.push(Reply::skip("a constant; nothing to change"));
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(outcome(&r, AUTH), "evolve");
    assert_eq!(reason(&r, AUTH), "exports no verifier");
    assert_eq!(file(&r, AUTH)["findings"], findings);
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    assert_eq!(reason(&r, SESSION), "a constant; nothing to change");
    assert!(file(&r, SESSION).get("findings").is_none(), "{r}");
    assert_eq!(
        r["counts"],
        json!({"evolve": 1, "llm_skip": 1, "local_skip": 1})
    );
    assert_eq!(
        sb.stats_at(&at(600), 2.0)["llm"]["open_proposals"],
        json!([AUTH])
    );

    // A later look at every file (the head lookup fails, so the tree is
    // compared): the SKIP is reused, the EVOLVE is asked again.
    sb.repo.merge_tip();
    sb.fake_git_log("exit 1");
    ai.answer_always(Reply::evolve("exports no verifier", findings.clone()));
    let r = tick(&sb, &ai, &at(602), &[], 11);
    assert_posts(&ai, 3);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(outcome(&r, AUTH), "evolve");
    assert_eq!(file(&r, AUTH)["novelty"], "prev-not-reusable");
    assert_eq!(file(&r, AUTH)["findings"], findings);
    assert_eq!(outcome(&r, SESSION), "reused");
    assert_eq!(file(&r, SESSION)["novelty"], "unchanged");
    assert!(
        reason(&r, SESSION).starts_with("unchanged since llm_skip: "),
        "{}",
        reason(&r, SESSION)
    );
    assert_eq!(outcome(&r, GUIDE), "reused");
    assert_eq!(
        sb.stats_at(&at(602), 2.0)["llm"]["open_proposals"],
        json!([AUTH])
    );

    // A change judged SKIP closes the proposal.
    sb.real_git();
    ai.answer_always(Reply::completion());
    change(&sb, AUTH, 2);
    let r = tick(&sb, &ai, &at(604), &[], 12);
    assert_posts(&ai, 4);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let s = sb.stats_at(&at(604), 2.0);
    assert_eq!(s["llm"]["open_proposals"], json!([]));
    assert_eq!(s["outcomes"]["evolve"], 2);
    assert_eq!(s["outcomes"]["llm_skip"], 2);
}

/// An open proposal is "kept in the state" (README) until the file is
/// judged again. A provider that fails, or a held circuit, judges nothing,
/// yet `Work::process_one` removes the proposal for every outcome other
/// than `evolve` (`if outcome != Outcome::Evolve { proposals.remove(path) }`).
#[test]
fn advisor_an_open_proposal_survives_a_provider_failure_on_a_later_look() {
    let mut sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let findings = json!([{"line": 2, "severity": "major", "message": "no verifier"}]);
    ai.push(Reply::evolve("exports no verifier", findings));
    tick(&sb, &ai, &at(600), &[], 10);
    assert_eq!(
        sb.stats_at(&at(600), 2.0)["llm"]["open_proposals"],
        json!([AUTH])
    );

    sb.repo.merge_tip();
    sb.fake_git_log("exit 1");
    ai.answer_always(Reply::fixture(500, "server-500.json"));
    let r = tick(&sb, &ai, &at(602), &[], 11);
    assert_posts(&ai, 4);
    assert_eq!(outcome(&r, AUTH), "failed");
    assert_eq!(
        sb.stats_at(&at(602), 2.0)["llm"]["open_proposals"],
        json!([AUTH]),
        "a failed re-ask closed the proposal"
    );
    // While the circuit is open, a look holds the file: still open.
    let r = tick(&sb, &ai, &at(604), &[], 11);
    assert_posts(&ai, 4);
    assert_eq!(outcome(&r, AUTH), "held");
    assert_eq!(
        sb.stats_at(&at(604), 2.0)["llm"]["open_proposals"],
        json!([AUTH]),
        "a held look closed the proposal"
    );
}

#[test]
fn advisor_the_call_carries_the_key_the_model_and_the_file() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(600), &["--max-tokens", "256"], 10);
    assert_posts(&ai, 1);
    let request = &ai.requests()[0];
    assert_eq!(request.target, COMPLETIONS);
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body = request.json();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["temperature"], 0);
    assert_eq!(body["max_tokens"], 256);
    // gpt-4o-mini takes structured outputs: the answer's schema, strict.
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    let messages = body["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.contains(r#""action":"SKIP"|"EVOLVE""#), "{system}");
    assert_eq!(messages[1]["role"], "user");
    let user = messages[1]["content"].as_str().unwrap();
    for part in ["path: src/auth.js", "risk: high", &content(AUTH, 1)] {
        assert!(user.contains(part), "{part:?} is not in {user:?}");
    }
    assert!(!user.contains("docs/guide.md"), "{user}");

    // A reasoning model takes max_completion_tokens and no temperature.
    // (A trailing slash on the base changes nothing.)
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    let out = sb
        .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
        .args([
            "--model",
            "o4-mini",
            "--llm-url",
            &format!("{}/", ai.base_url()),
        ])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, 10);
    assert_posts(&ai, 1);
    let body = ai.requests()[0].json();
    assert_eq!(body["model"], "o4-mini");
    // With room to reason: at least 4096 whatever --max-tokens says.
    assert_eq!(body["max_completion_tokens"], 4096);
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert!(body.get("temperature").is_none(), "{body}");
}

#[test]
fn advisor_a_file_over_max_file_bytes_is_too_large_and_never_sent() {
    let sb = Sandbox::new();
    let big = format!("// {AUTH}\n{}", "module.exports = 1;\n".repeat(10));
    assert_eq!(big.len(), 215);
    sb.repo.write(AUTH, &big);
    sb.repo.write(SESSION, content(SESSION, 1));
    sb.repo.commit("a big file and a small one");
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &["--max-file-bytes", "100"], 10);
    assert_posts(&ai, 1);
    assert_eq!(r["llm_calls"], 1);
    assert_eq!(outcome(&r, AUTH), "too_large");
    assert_eq!(
        reason(&r, AUTH),
        "215 bytes is over --max-file-bytes 100; not sent to the model"
    );
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    let user = ai.requests()[0].json()["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(user.contains("path: src/session.js"), "{user}");
}

// ---------------------------------------------------------------------------
// 7. Off, and on without a key
// ---------------------------------------------------------------------------

#[test]
fn advisor_off_with_a_key_makes_no_request_and_hands_files_over() {
    for how in ["flag", "env", "empty key"] {
        let sb = sandbox(&[AUTH, GUIDE]);
        let ai = FakeOpenAi::start();
        let cmd = sb.advisor_tick_cmd(&ai, &at(600));
        let out = match how {
            "flag" => cmd.args(["--llm", "off"]).output(),
            "env" => cmd.env("SENTINEL_LLM", "off").output(),
            // An empty key is no key: the advisor is off by default.
            _ => cmd.env("OPENAI_API_KEY", "").output(),
        };
        expect_code(&out, 10);
        let r = out.json();
        assert_eq!(ai.count(), 0, "{how}: the server was called");
        assert_eq!(r["advisor"], "off", "{how}");
        assert_eq!(r["llm_calls"], 0, "{how}");
        assert_eq!(outcome(&r, AUTH), "needs_review", "{how}");
        assert!(
            reason(&r, AUTH).ends_with("needs judgement; advisor off"),
            "{how}: {}",
            reason(&r, AUTH)
        );
        let l = &sb.stats_at(&at(600), 2.0)["llm"];
        assert_eq!(l["attempts"], 0, "{how}");
        assert_eq!(l["calls_today"], 0, "{how}");
    }
}

/// README: "With it off, they are reported as `needs_review` ... and the
/// tick says that the advisor is off." `run_with` pushes that note onto
/// `report.notes`, then replaces `report.notes` with the work's notes.
#[test]
fn advisor_off_the_tick_says_so_in_its_notes_and_on_stderr() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let out = sb
        .advisor_tick_cmd(&ai, &at(600))
        .args(["--llm", "off"])
        .output();
    expect_code(&out, 10);
    let r = out.json();
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("advisor off")),
        "notes: {notes:?}"
    );
    assert!(out.stderr_line().contains("advisor off"), "{}", out.stderr);
}

#[test]
fn advisor_llm_openai_without_a_key_exits_1_naming_openai_api_key() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    for key in [None, Some("")] {
        let mut cmd = sb
            .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
            .args(["--llm", "openai", "--llm-url", &ai.base_url()])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state);
        if let Some(k) = key {
            cmd = cmd.env("OPENAI_API_KEY", k);
        }
        let out = cmd.output();
        expect_code(&out, 1);
        assert!(out.stderr.contains("OPENAI_API_KEY"), "{}", out.stderr);
        assert_eq!(out.stdout, "", "{key:?}");
        assert!(!sb.state.exists(), "{key:?}: a state was saved");
    }
    assert_eq!(ai.count(), 0);
}

/// The advisor is not part of the evidence version: turning it on offers it
/// the files handed over while it was off (a `backlog` wake), and a model
/// change re-checks what the model judged (`evidence_changed`).
#[test]
fn advisor_turning_it_on_offers_the_hand_overs_and_a_model_change_rechecks_them() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &["--llm", "off"], 10);
    assert_eq!(outcome(&r, AUTH), "needs_review");
    // Unchanged and off: handed over once, then a no-op.
    let out = sb
        .advisor_tick_cmd(&ai, &at(602))
        .args(["--llm", "off"])
        .output();
    expect_code(&out, 0);
    assert_eq!(ai.count(), 0);

    let r = tick(&sb, &ai, &at(604), &[], 14);
    assert_eq!(r["verdict"]["reason"], "backlog");
    assert_eq!(r["verdict"]["detail"]["awaiting_advisor"], 1);
    assert_posts(&ai, 1);
    assert_eq!(paths(&r), [AUTH], "the local skip is not looked at");
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let out = sb.advisor_tick_cmd(&ai, &at(606)).output();
    expect_code(&out, 0);
    assert_posts(&ai, 1);

    let r = tick(&sb, &ai, &at(608), &["--model", "gpt-4.1-mini"], 13);
    assert_eq!(
        r["verdict"]["detail"],
        json!({"from": "openai:gpt-4o-mini", "to": "openai:gpt-4.1-mini"})
    );
    assert_posts(&ai, 2);
    assert_eq!(ai.requests()[1].json()["model"], "gpt-4.1-mini");
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, GUIDE), "reused");
}

#[test]
fn advisor_a_dry_run_calls_no_model_and_writes_nothing() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &["--dry-run"], 10);
    assert_eq!(ai.count(), 0);
    assert_eq!(r["llm_calls"], 0);
    assert_eq!(r["dry_run"], true);
    assert_eq!(r["state_written"], false);
    assert!(!sb.state.exists());
}

/// A dry run "calls no LLM; it says what it would have done". With
/// the advisor on it reports `"advisor": "on"`, yet hands the risky file over
/// as `needs_review` with the reason "...; advisor off", because `app.rs`
/// passes no advisor to `run_with` and `process_one` then takes the
/// advisor-off branch. What a real tick would do (ask the model, or hold
/// the file while the circuit is open) is not said.
#[test]
fn advisor_a_dry_run_with_the_advisor_on_does_not_say_it_is_off() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &["--dry-run"], 10);
    assert_eq!(r["advisor"], "on");
    assert!(
        !reason(&r, AUTH).contains("advisor off"),
        "{}: {}",
        outcome(&r, AUTH),
        reason(&r, AUTH)
    );
    assert_ne!(outcome(&r, AUTH), "needs_review");
}

// ---------------------------------------------------------------------------
// 8. The key never appears
// ---------------------------------------------------------------------------

#[test]
fn advisor_the_key_never_appears_in_output_state_or_journal() {
    const CANARY: &str = "sk-canary-SECRET-42";
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    // OpenAI echoes a masked key on a 401; a hostile proxy might echo it whole.
    let masked = fixture_text("bad-key.json").replace("sk-VKMI***wjh3", "sk-cana***T-42");
    assert!(masked.contains("sk-cana***T-42"));
    let echoed = fixture_text("server-500.json").replace(
        "The server had an error",
        &format!("Bearer {CANARY}: the server had an error"),
    );
    assert!(echoed.contains(CANARY));

    let mut outputs: Vec<Output> = Vec::new();
    let mut journal_seen = false;
    let mut check_files = |when: &str| {
        journal_seen |= crate::assert_no_file_holds(&sb, CANARY, when);
    };
    // The base URL from the environment this time.
    let run = |now: &str, code: i32| {
        let out = sb
            .sentinel(["tick", "--json", "--fake-sleep", "--now", now])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .env("OPENAI_API_KEY", CANARY)
            .env("OPENAI_BASE_URL", ai.base_url())
            .output();
        expect_code(&out, code);
        out
    };

    outputs.push(run(&at(0), 10));
    check_files("first_run");
    outputs.push(run(&at(2), 0));
    check_files("a no-op");

    ai.push(Reply::Fixed {
        status: 401,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: masked.into_bytes(),
    });
    change(&sb, AUTH, 2);
    let out = run(&at(4), 12);
    assert_eq!(outcome(&out.json(), AUTH), "failed");
    outputs.push(out);
    check_files("a 401");
    outputs.push(run(&at(6), 0));
    check_files("a no-op with the circuit open");

    ai.push_n(
        3,
        Reply::Fixed {
            status: 500,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: echoed.into_bytes(),
        },
    );
    change(&sb, AUTH, 3);
    let out = run(&at(70), 12);
    assert_eq!(outcome(&out.json(), AUTH), "failed");
    outputs.push(out);
    check_files("a 500 that echoes the key");

    // The 500 came on the first call after the 60-minute hold: held twice as long.
    change(&sb, AUTH, 4);
    let out = run(&at(200), 12);
    assert_eq!(outcome(&out.json(), AUTH), "llm_skip");
    outputs.push(out);
    check_files("a success");
    assert!(journal_seen, "the journal was checked");

    for extra in [["stats", "--json"], ["stats", "--now"]] {
        let mut cmd = sb.sentinel(extra);
        if extra[1] == "--now" {
            cmd = cmd.arg(at(90));
        }
        let out = cmd
            .arg("--state")
            .arg(&sb.state)
            .env("OPENAI_API_KEY", CANARY)
            .output();
        expect_code(&out, 0);
        outputs.push(out);
    }
    let out = sb
        .sentinel(["explain", AUTH, "--json"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", CANARY)
        .output();
    expect_code(&out, 0);
    outputs.push(out);

    for out in &outputs {
        assert!(!out.stdout.contains(CANARY), "{}", out.stdout);
        assert!(!out.stderr.contains(CANARY), "{}", out.stderr);
    }
    // It was sent, in the Authorization header and nowhere else.
    let requests = ai.requests();
    assert_eq!(requests.len(), 1 + 1 + 3 + 1);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {CANARY}").as_str())
        );
        assert!(!r.target.contains(CANARY));
        assert!(!String::from_utf8_lossy(&r.body).contains(CANARY));
    }
}

// ---------------------------------------------------------------------------
// 9. Peers: a proxy, local servers and reasoning models
// ---------------------------------------------------------------------------

/// LiteLLM answers an upstream `insufficient_quota` with 429
/// `throttling_error` and the quota only in its message. Read as a rate
/// limit, every tick two minutes apart made 3 attempts until midnight; read
/// as quota, one call holds the provider until 00:00 UTC.
#[test]
fn a_quota_error_through_litellm_is_quota_not_a_rate_limit() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(0), &[], 10);
    assert_posts(&ai, 1);
    ai.answer_always(Reply::peer(429, "litellm-quota.json"));
    let times = [9 * 60, 9 * 60 + 2, 9 * 60 + 4, 12 * 60, 23 * 60 + 58];
    for (i, minute) in times.into_iter().enumerate() {
        change(&sb, AUTH, 2 + i as u64);
        let r = tick(&sb, &ai, &at(minute), &[], 12);
        assert_eq!(slept(&r), Vec::<u64>::new(), "at {}", at(minute));
        if i == 0 {
            assert_eq!(r["llm_calls"], 1);
            assert_eq!(
                reason(&r, AUTH),
                failed(
                    "quota",
                    1,
                    "HTTP 429 throttling_error (code 429): You exceeded your current quota, please check your plan and billing details.",
                    Some("2026-06-17T00:00:00+00:00")
                )
            );
        } else {
            assert_eq!(r["llm_calls"], 0, "at {}", at(minute));
            assert_eq!(outcome(&r, AUTH), "held", "at {}", at(minute));
        }
    }
    assert_eq!(ai.posts() - 1, 1, "one call from 09:00 until midnight");
    assert_eq!(
        circuit(&sb, "2026-06-16T23:58:00Z"),
        json!(["quota", "2026-06-17T00:00:00Z", true])
    );
}

#[test]
fn a_rate_limit_through_litellm_is_still_a_rate_limit() {
    let (sb, ai, r) = first_run_answered_by(Reply::peer(429, "litellm-rate-limit.json"));
    assert_posts(&ai, 3);
    assert_eq!(slept(&r), [5000, 15000]);
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["rate_limit", "2026-06-16T10:02:00Z", true])
    );
}

#[test]
fn a_litellm_budget_refusal_holds_until_midnight_not_for_an_hour() {
    for (status, body) in [
        (422, "litellm-key-budget.json"),
        (429, "litellm-provider-budget.json"),
    ] {
        let (sb, ai, r) = first_run_answered_by(Reply::peer(status, body));
        assert_posts(&ai, 1);
        assert_eq!(slept(&r), Vec::<u64>::new(), "{body}");
        assert!(
            reason(&r, AUTH).starts_with("budget after 1 attempt: "),
            "{body}: {}",
            reason(&r, AUTH)
        );
        assert_eq!(
            circuit(&sb, &at(600)),
            json!(["budget", "2026-06-17T00:00:00Z", true]),
            "{body}"
        );
    }
}

#[test]
fn llama_cpp_not_supported_is_permanent() {
    let (sb, ai, r) = first_run_answered_by(Reply::peer(501, "llamacpp-not-supported.json"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "request",
            1,
            "HTTP 501 not_supported_error (code 501): This server does not support tools/response_format",
            Some("2026-06-16T11:00:00+00:00")
        )
    );
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["request", "2026-06-16T11:00:00Z", true])
    );
}

#[test]
fn a_vllm_context_error_keeps_its_integer_code_and_holds_only_that_file() {
    let (sb, ai, r) = first_run_answered_by(Reply::peer(400, "vllm-context-length.json"));
    assert_posts(&ai, 1);
    let why = reason(&r, AUTH);
    let expected = failed(
        "file_request",
        1,
        "HTTP 400 BadRequestError (code 400)",
        None,
    );
    assert!(
        why.starts_with(&expected) && why.contains("gave up at once"),
        "{why}"
    );
    assert_eq!(circuit(&sb, &at(600)), Value::Null);
}

#[test]
fn a_think_block_before_the_json_is_not_a_bad_response() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::peer(200, "llamacpp-think-completion.json"));
    let r = tick(&sb, &ai, &at(600), &["--model", "qwen3-8b"], 10);
    assert_posts(&ai, 1);
    assert_eq!(outcome(&r, AUTH), "llm_skip", "{}", reason(&r, AUTH));
}

#[test]
fn a_gpt5_mini_request_has_no_temperature_and_no_max_tokens() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let r = tick(&sb, &ai, &at(600), &["--model", "gpt-5-mini"], 10);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_posts(&ai, 1);
    let body = ai.requests()[0].json();
    assert!(body.get("temperature").is_none(), "{body}");
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert_eq!(body["max_completion_tokens"], 4096);
    assert_eq!(body["response_format"]["type"], "json_schema");
    let schema = &body["response_format"]["json_schema"];
    assert_eq!(schema["strict"], true);
    assert_eq!(
        schema["schema"]["required"],
        json!(["action", "reason", "findings"])
    );

    // A model marked as reasoning by the user is asked the same way.
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let marked = [
        "--model",
        "qwen3-8b",
        "--reasoning-models",
        "deepseek-r1,qwen3-8b",
    ];
    tick(&sb, &ai, &at(600), &marked, 10);
    let body = ai.requests()[0].json();
    assert!(body.get("temperature").is_none(), "{body}");
    assert_eq!(body["max_completion_tokens"], 4096);
    // Not an OpenAI model: JSON mode, not a schema.
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
}

#[test]
fn a_reasoning_models_reservation_covers_its_larger_retry() {
    // gpt-5-mini costs $2 per million out: 4096 + 8192 tokens reserved
    // are $0.0246, over a $0.02 budget that 4096 alone ($0.0082) would fit.
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    let flags = ["--model", "gpt-5-mini", "--daily-budget", "0.02"];
    let r = tick(&sb, &ai, &at(600), &flags, 10);
    assert_eq!(ai.count(), 0);
    assert_eq!(outcome(&r, AUTH), "deferred");
    let chars = content(AUTH, 1).len() as u64;
    let reserve = ((chars.div_ceil(4) + 400) as f64 * 0.25 + 12288.0 * 2.0) / 1e6;
    assert!(
        reason(&r, AUTH).ends_with(&format!("could cost ${reserve:.4} of the $0.02 limit")),
        "{}",
        reason(&r, AUTH)
    );
}

#[test]
fn a_reasoning_answer_cut_by_the_limit_is_asked_once_with_a_larger_one() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.push(Reply::peer(200, "openai-reasoning-cut.json"));
    let r = tick(&sb, &ai, &at(600), &["--model", "gpt-5-mini"], 10);
    assert_posts(&ai, 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(slept(&r), Vec::<u64>::new(), "a new request, not a retry");
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let limits: Vec<Value> = ai
        .requests()
        .iter()
        .map(|q| q.json()["max_completion_tokens"].clone())
        .collect();
    assert_eq!(limits, [json!(4096), json!(8192)]);
    // Both answers were billed: the cut one and the whole one.
    let cut = crate::util::openai::Usage {
        prompt: 450,
        cached: 0,
        completion: 4096,
    };
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(
        &l["cost_today_measured"],
        cut.cost(0.25, 0.025, 2.0) + FIXTURE_USAGE.cost(0.25, 0.025, 2.0),
    );
    assert_eq!(l["calls_today"], 1);
    assert_eq!(l["attempts"], 2);

    // Cut again at the larger limit: bad_response, and nothing more.
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::peer(200, "openai-reasoning-cut.json"));
    let r = tick(&sb, &ai, &at(600), &["--model", "gpt-5-mini"], 10);
    assert_posts(&ai, 2);
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "bad_response",
            2,
            "the answer was cut at 8192 completion tokens (finish_reason length) before its JSON was complete",
            None
        )
    );
}

#[test]
fn an_answer_cut_by_max_tokens_is_not_asked_again_unchanged() {
    let (_sb, ai, r) = first_run_answered_by(Reply::peer(200, "openai-reasoning-cut.json"));
    assert_posts(&ai, 1);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(
        reason(&r, AUTH),
        failed(
            "bad_response",
            1,
            "the answer was cut at 1024 completion tokens (finish_reason length) before its JSON was complete",
            None
        )
    );
}

#[test]
fn a_server_refusing_the_schema_is_asked_in_json_mode_within_the_same_ask() {
    let sb = sandbox(&[AUTH, SESSION, GUIDE]);
    let ai = FakeOpenAi::start();
    let refusal = json!({"error": {
        "message": "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
        "type": "invalid_request_error", "param": "response_format", "code": null}});
    ai.push(Reply::json(400, &refusal));
    let r = tick(&sb, &ai, &at(600), &[], 10);
    assert_posts(&ai, 3);
    assert_eq!(slept(&r), Vec::<u64>::new());
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(outcome(&r, SESSION), "llm_skip");
    let formats: Vec<Value> = ai
        .requests()
        .iter()
        .map(|q| q.json()["response_format"]["type"].clone())
        .collect();
    // The fallback holds for the rest of the tick.
    assert_eq!(
        formats,
        [
            json!("json_schema"),
            json!("json_object"),
            json!("json_object")
        ]
    );
    assert_eq!(sb.stats_at(&at(600), 2.0)["llm"]["circuit"], Value::Null);
}

#[test]
fn litellm_response_cost_is_the_measured_cost() {
    let (sb, _ai, r) =
        first_run_answered_by(Reply::completion().header("x-litellm-response-cost", "0.00042"));
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(&l["cost_today_measured"], 0.00042);
    assert_eq!(num(&l["cost_today_estimated"]), 0.0);
    assert_eq!(l["cost_sources_today"], json!({"reported": 1}));

    // A proxy's 0 for a call it could not price: the price table knows better.
    let (sb, _ai, _r) =
        first_run_answered_by(Reply::completion().header("x-litellm-response-cost", "0"));
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(
        &l["cost_today_measured"],
        FIXTURE_USAGE.cost(MINI.0, MINI.1, MINI.2),
    );
    assert_eq!(l["cost_sources_today"], json!({"price_table": 1}));
}

#[test]
fn a_local_endpoint_costs_nothing_per_call() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::peer(200, "ollama-completion.json"));
    let r = tick(&sb, &ai, &at(600), &["--model", "llama3.2"], 10);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    assert_eq!(num(&l["cost_today_estimated"]), 0.0);
    assert_eq!(num(&l["cost_today_measured"]), 0.0);
    assert_eq!(l["calls_today"], 1);
    assert_eq!(l["cost_sources_today"], json!({"per_call": 1}));
    close_to(&l["budget_left"], 2.0);
}

#[test]
fn a_dated_snapshot_keeps_its_own_price() {
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    tick(&sb, &ai, &at(600), &["--model", "gpt-4o-2024-05-13"], 10);
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    // $5 in (no cache discount), $15 out: not gpt-4o's $2.50 / $1.25 / $10.
    close_to(
        &l["cost_today_measured"],
        FIXTURE_USAGE.cost(5.0, 5.0, 15.0),
    );
}

// ---------------------------------------------------------------------------
// 10. The commands docs/proxy.md and docs/local-models.md show
// ---------------------------------------------------------------------------

/// One `sentinel tick` command of a page: its environment assignments and
/// its arguments, from a ```sh block (continuation lines joined; other
/// commands in the block, such as `ollama pull`, skipped).
struct Documented {
    env: Vec<(String, String)>,
    args: Vec<String>,
}

fn documented_ticks(page: &str) -> Vec<Documented> {
    let path = format!("{}/{page}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    for block in text.split("```sh\n").skip(1) {
        let block = block.split("```").next().unwrap_or("");
        for line in block.replace("\\\n", " ").lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| *w == "sentinel") else {
                continue;
            };
            if words.get(at + 1) != Some(&"tick") || words[..at].iter().any(|w| !w.contains('=')) {
                continue;
            }
            let env = words[..at]
                .iter()
                .map(|w| w.split_once('=').unwrap())
                .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                .collect();
            let args = words[at + 2..].iter().map(|w| w.to_string()).collect();
            out.push(Documented { env, args });
        }
    }
    out
}

/// Run a documented command against `ai` in place of the server it names:
/// the page's base URL becomes the fake's, a `$VARIABLE` key becomes the
/// test key, and the tick gets its repository, state and clock.
fn run_documented(sb: &Sandbox, ai: &FakeOpenAi, cmd: &Documented) -> Value {
    let mut run = sb
        .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
        .args(&cmd.args)
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state);
    for (key, value) in &cmd.env {
        let value = match key.as_str() {
            "OPENAI_BASE_URL" => ai.base_url(),
            _ if value.starts_with('$') => KEY.to_string(),
            _ => value.clone(),
        };
        run = run.env(key, value);
    }
    let out = run.output();
    expect_code(&out, 10);
    out.json()
}

/// The page's base URL of a command: which server the example is about.
fn documented_url(cmd: &Documented) -> &str {
    cmd.env
        .iter()
        .find(|(k, _)| k == "OPENAI_BASE_URL")
        .map(|(_, v)| v.as_str())
        .expect("the example sets OPENAI_BASE_URL")
}

#[test]
fn advisor_the_proxy_page_command_works_through_a_litellm_shaped_server() {
    let ticks = documented_ticks("docs/proxy.md");
    let through = ticks
        .iter()
        .find(|c| c.env.iter().any(|(k, _)| k == "OPENAI_BASE_URL"))
        .expect("docs/proxy.md shows a command through the proxy");
    assert_eq!(documented_url(through), "http://127.0.0.1:4000/v1");
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::completion().header("x-litellm-response-cost", "0.0009"));
    let r = run_documented(&sb, &ai, through);
    assert_eq!(outcome(&r, AUTH), "llm_skip");
    assert_eq!(
        ai.requests()[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let l = &sb.stats_at(&at(600), 2.0)["llm"];
    close_to(&l["cost_today_measured"], 0.0009);

    // The same command when the proxy's key budget is spent: one call, held until midnight.
    let sb = sandbox(&[AUTH, GUIDE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::peer(422, "litellm-key-budget.json"));
    run_documented(&sb, &ai, through);
    assert_posts(&ai, 1);
    assert_eq!(
        circuit(&sb, &at(600)),
        json!(["budget", "2026-06-17T00:00:00Z", true])
    );
}

#[test]
fn advisor_the_local_models_page_commands_work_against_each_servers_shapes() {
    let ticks = documented_ticks("docs/local-models.md");
    let urls: Vec<&str> = ticks.iter().map(documented_url).collect();
    assert_eq!(
        urls,
        [
            "http://127.0.0.1:11434/v1",
            "http://127.0.0.1:8000/v1",
            "http://127.0.0.1:8080/v1"
        ]
    );
    // Each server's success, and one of its permanent errors.
    let shapes = [
        (
            "ollama-completion.json",
            (404, "ollama-not-found.json", "request"),
        ),
        (
            "ollama-completion.json",
            (400, "vllm-context-length.json", "file_request"),
        ),
        (
            "llamacpp-think-completion.json",
            (501, "llamacpp-not-supported.json", "request"),
        ),
    ];
    for (cmd, (ok, (status, error, class))) in ticks.iter().zip(shapes) {
        let sb = sandbox(&[AUTH, SESSION, GUIDE]);
        let ai = FakeOpenAi::start();
        ai.push(Reply::peer(status, error));
        ai.answer_always(Reply::peer(200, ok));
        let r = run_documented(&sb, &ai, cmd);
        let url = documented_url(cmd);
        assert!(
            reason(&r, AUTH).starts_with(&format!("{class} after 1 attempt: HTTP {status}")),
            "{url}: {}",
            reason(&r, AUTH)
        );
        let model = &cmd.args[cmd.args.iter().position(|a| a == "--model").unwrap() + 1];
        assert_eq!(ai.requests()[0].json()["model"], model.as_str(), "{url}");
        let l = &sb.stats_at(&at(600), 2.0)["llm"];
        if class == "file_request" {
            // Only that file failed: the next one was asked, and cost nothing per call.
            assert_eq!(outcome(&r, SESSION), "llm_skip", "{url}");
            assert_eq!(l["cost_sources_today"], json!({"per_call": 1}), "{url}");
            assert_eq!(num(&l["cost_today_estimated"]), 0.0, "{url}");
        } else {
            assert_eq!(outcome(&r, SESSION), "held", "{url}");
        }
    }
}
