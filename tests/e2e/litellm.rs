//! Behind a LiteLLM proxy, end to end: the `sentinel` binary against the
//! fake provider of `util::openai` answering as LiteLLM does (its bodies
//! from `fixtures/peers/`, its `x-litellm-*` headers, the upstream's waits
//! under the `llm_provider-` prefix). Every tick runs with `--fake-sleep`
//! and `--now`; the one real wait is the client-timeout test's, where the
//! server's connection thread sleeps, never the test's.

use std::time::Duration;

use serde_json::Value;

use crate::util::openai::{FakeOpenAi, KEY, Reply};
use crate::util::{Output, Sandbox, at};

/// High risk (the path says `auth`): always consulted.
pub(crate) const AUTH: &str = "src/auth.js";
/// High risk too (`session`, `token`).
pub(crate) const SESSION: &str = "src/session.js";
pub(crate) const TOKEN: &str = "src/token.js";

/// The headers every answer of LiteLLM 1.108 carries (peer-shapes.md).
fn through_litellm(reply: Reply) -> Reply {
    reply
        .header("x-litellm-version", "1.108.7")
        .header("x-litellm-call-id", "4f0c1a2e-2b7d-4c55-9a57-0e3f5d1c8b21")
        .header("x-litellm-model-id", "a1b2c3")
        .header("x-litellm-model-group", "gpt-4o-mini")
}

/// A sandbox whose repository holds `paths`, each at version 1.
pub(crate) fn sandbox(paths: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    for path in paths {
        sb.repo.write(path, body(path, 1));
    }
    sb.repo.commit("initial files");
    sb
}

pub(crate) fn body(path: &str, version: u64) -> String {
    format!("// {path}\nmodule.exports = {version};\n")
}

/// One tick against `ai` at `now`; any exit of a tick that ran (0 or a wake).
#[track_caller]
pub(crate) fn tick(sb: &Sandbox, ai: &FakeOpenAi, now: &str, extra: &[&str]) -> (Value, Output) {
    let out = sb.advisor_tick_cmd(ai, now).args(extra).output();
    assert!(
        out.code == 0 || (10..=17).contains(&out.code),
        "exit {}: {}",
        out.code,
        out.stderr
    );
    (out.json(), out)
}

#[track_caller]
pub(crate) fn file<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the report: {report}"))
}

#[track_caller]
fn reason<'a>(report: &'a Value, path: &str) -> &'a str {
    file(report, path)["reason"].as_str().expect("reason")
}

fn notes(report: &Value) -> Vec<String> {
    report["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn litellm_an_upstream_retry_after_of_an_hour_is_honoured_across_30_ticks() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // The upstream said `retry-after: 3600`; LiteLLM passes it on prefixed only.
    ai.answer_always(through_litellm(
        Reply::peer(429, "litellm-rate-limit.json").header("llm_provider-retry-after", "3600"),
    ));
    // A 2-minute schedule for an hour, the file changing on every tick: each
    // tick has a reason to ask, and only the wait says not to.
    for n in 0..30 {
        if n > 0 {
            sb.repo.write(AUTH, body(AUTH, n + 1));
            sb.repo.commit(&format!("v{}", n + 1));
        }
        tick(&sb, &ai, &at(600 + 2 * n as i64), &[]);
    }
    assert!(ai.posts() <= 3, "{} calls in 30 ticks", ai.posts());
    let c = &sb.stats_at(&at(659), 2.0)["llm"]["circuit"];
    assert_eq!(c["class"], "rate_limit");
    assert_eq!(c["until"], "2026-06-16T11:00:00Z");
}

#[test]
fn litellm_a_provider_that_always_times_out_is_asked_at_most_4_times_a_tick_then_held() {
    let sb = sandbox(&[AUTH, SESSION, TOKEN]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::completion().after(Duration::from_secs(3)));
    let (r, _) = tick(&sb, &ai, &at(600), &["--llm-timeout", "1", "--batch", "5"]);
    let first = ai.posts();
    assert!(first <= 4, "{first} attempts in one tick");
    let c = &sb.stats_at(&at(601), 2.0)["llm"];
    assert_eq!(c["circuit"]["class"], "timeout", "{c}");
    assert_eq!(c["circuit"]["open"], true, "{c}");
    // The other files wait for the hold; none was asked.
    let held = [AUTH, SESSION, TOKEN]
        .iter()
        .filter(|p| file(&r, p)["outcome"] == "held")
        .count();
    assert_eq!(held, 2, "{r}");
    // Every timed-out attempt may be billed: counted at the reservation.
    assert_eq!(c["timed_out_today"], first as u64, "{c}");
    assert!(c["timed_out_cost_today"].as_f64().unwrap() > 0.0, "{c}");
    assert_eq!(c["calls_today"], first as u64, "{c}");
    // Still timing out after the hold: the next hold is longer.
    let until_first = c["circuit"]["until"].as_str().unwrap().to_string();
    assert_eq!(until_first, "2026-06-16T10:05:00Z");
    tick(&sb, &ai, &at(606), &["--llm-timeout", "1", "--batch", "5"]);
    assert!(ai.posts() - first <= 4, "{} attempts", ai.posts() - first);
    let c = &sb.stats_at(&at(607), 2.0)["llm"]["circuit"];
    assert_eq!(c["until"], "2026-06-16T10:16:00Z", "{c}");
}

#[test]
fn litellm_its_own_408_is_a_timeout_that_holds_the_provider() {
    let sb = sandbox(&[AUTH, SESSION]);
    let ai = FakeOpenAi::start();
    ai.answer_always(through_litellm(Reply::peer(408, "litellm-timeout.json")));
    let (r, _) = tick(&sb, &ai, &at(600), &[]);
    assert_eq!(
        ai.posts(),
        2,
        "two timeouts in a row, then the tick stops calling"
    );
    let why = reason(&r, AUTH);
    assert!(
        why.starts_with("timeout after 2 attempts: HTTP 408 invalid_request_error (code 408): Request timed out."),
        "{why}"
    );
    assert_eq!(file(&r, SESSION)["outcome"], "held");
}

#[test]
fn litellm_a_loopback_proxy_without_a_cost_header_is_not_free() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // A model LiteLLM has no price for: no `x-litellm-response-cost`.
    ai.answer_always(through_litellm(Reply::completion()));
    tick(&sb, &ai, &at(600), &["--model", "fast"]);
    let l = &sb.stats_at(&at(601), 2.0)["llm"];
    let spent =
        l["cost_today_measured"].as_f64().unwrap() + l["cost_today_estimated"].as_f64().unwrap();
    assert!(spent > 0.0, "{l}");
    assert_eq!(l["proxy"], "LiteLLM", "{l}");
    assert_eq!(l["cost_sources_today"]["per_call"], 1, "{l}");
    // Known as LiteLLM now: the next call asks it not to retry on its own.
    sb.repo.write(AUTH, body(AUTH, 2));
    sb.repo.commit("v2");
    tick(&sb, &ai, &at(610), &["--model", "fast"]);
    let last = ai.requests().pop().expect("a request");
    assert_eq!(
        last.json()["num_retries"],
        0,
        "{}",
        String::from_utf8_lossy(&last.body)
    );
    assert_eq!(
        last.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[test]
fn litellm_a_key_it_cannot_check_is_auth_and_not_advised_as_a_model_problem() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    ai.answer_always(through_litellm(Reply::peer(400, "litellm-no-db.json")));
    let (r, out) = tick(&sb, &ai, &at(600), &[]);
    let why = reason(&r, AUTH);
    assert!(why.starts_with("auth after 1 attempt: "), "{why}");
    assert!(why.contains("the proxy rejected the key"), "{why}");
    let said = format!("{}\n{}", out.stderr, notes(&r).join("\n"));
    assert!(!said.contains("fixing the model or the prompt"), "{said}");
    assert!(said.contains("after fixing the key"), "{said}");
}

#[test]
fn litellm_a_quota_reason_keeps_the_upstreams_words_in_the_line_and_explain() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    ai.answer_always(through_litellm(Reply::peer(429, "litellm-quota.json")));
    let (r, out) = tick(&sb, &ai, &at(600), &[]);
    let words = "You exceeded your current quota";
    assert!(reason(&r, AUTH).contains(words), "{}", reason(&r, AUTH));
    assert!(!reason(&r, AUTH).contains("litellm.RateLimitError"));
    assert!(out.stderr.contains(words), "{}", out.stderr);
    let explain = sb
        .sentinel(["explain", AUTH])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    assert_eq!(explain.code, 0, "{}", explain.stderr);
    assert!(explain.stdout.contains(words), "{}", explain.stdout);
}

#[test]
fn litellm_an_alias_that_refuses_temperature_names_it_and_the_flag() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // As LiteLLM 1.108.7 answered `temperature: 0` for an alias of gpt-5-mini.
    ai.answer_always(through_litellm(Reply::peer(
        400,
        "litellm-unsupported-temperature.json",
    )));
    let (r, _) = tick(&sb, &ai, &at(600), &["--model", "fast"]);
    let why = reason(&r, AUTH);
    assert!(why.contains("`temperature`"), "{why}");
    assert!(why.contains("--reasoning-models"), "{why}");
}

#[test]
fn litellm_retries_of_its_own_are_told_with_what_they_cost() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    ai.answer_always(
        through_litellm(Reply::completion()).header("x-litellm-attempted-retries", "2"),
    );
    let (r, _) = tick(&sb, &ai, &at(600), &[]);
    let note = notes(&r)
        .into_iter()
        .find(|n| n.contains("retried on its own"))
        .unwrap_or_else(|| panic!("no note of the proxy's retries: {r}"));
    assert!(note.contains("3 upstream calls"), "{note}");
    assert!(note.contains("docs/proxy.md"), "{note}");
}

#[test]
fn litellm_a_file_given_up_after_one_attempt_is_not_said_to_have_failed_5_times() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    ai.answer_always(through_litellm(Reply::peer(
        400,
        "vllm-context-length.json",
    )));
    let (r, out) = tick(&sb, &ai, &at(600), &[]);
    assert_eq!(file(&r, AUTH)["outcome"], "given_up", "{r}");
    let note = notes(&r)
        .into_iter()
        .find(|n| n.contains("given_up"))
        .unwrap_or_else(|| panic!("no given_up note: {r}"));
    assert!(note.contains("1 at once"), "{note}");
    assert!(!note.contains("5 failures"), "{note}");
    assert!(!out.stderr.contains("after 5 failures"), "{}", out.stderr);
}

#[test]
fn litellm_waits_it_passes_on_never_keep_a_tick_past_the_models_90_seconds() {
    let sb = sandbox(&[AUTH, SESSION, TOKEN]);
    let ai = FakeOpenAi::start();
    // A minute is still slept; two would end past the tick's 90 s.
    ai.answer_always(through_litellm(
        Reply::peer(429, "litellm-rate-limit.json").header("llm_provider-retry-after", "60"),
    ));
    let (r, _) = tick(&sb, &ai, &at(600), &["--batch", "5"]);
    assert_eq!(ai.posts(), 2, "{r}");
    assert_eq!(r["slept_ms"], serde_json::json!([60000]));
    let why = reason(&r, AUTH);
    assert!(
        why.contains("not retried: the tick's 90 s for the model are spent"),
        "{why}"
    );
    assert_eq!(file(&r, SESSION)["outcome"], "held", "{r}");
}
