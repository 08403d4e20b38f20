//! Invariant 24, no wording reopens the loop, and the cap that learns the
//! real price: the `sentinel` binary against the fake provider serving what
//! a real LiteLLM 1.108.7 proxy answered (`fixtures/peers/litellm-1.108.7/`,
//! status, every header and body as recorded), 2 minutes apart, the file
//! changing before each tick so that every tick has a reason to ask.

use serde_json::Value;

use crate::litellm::{AUTH, SESSION, TOKEN, body, file, sandbox, tick};
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Sandbox, at};

/// `ticks` ticks 2 minutes apart from 10:00, `AUTH` changing before each
/// one after the first; the calls that reached the provider.
fn ticks_two_minutes_apart(sb: &Sandbox, ai: &FakeOpenAi, ticks: u64, extra: &[&str]) -> usize {
    for n in 0..ticks {
        if n > 0 {
            sb.repo.write(AUTH, body(AUTH, n + 1));
            sb.repo.commit(&format!("v{}", n + 1));
        }
        tick(sb, ai, &at(600 + 2 * n as i64), extra);
    }
    ai.posts()
}

#[test]
fn litellm_out_of_credits_said_in_words_no_list_holds_costs_one_call_in_30_ticks() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // "You have run out of credits for this billing period.", relabelled
    // `throttling_error` with code "429" by the proxy.
    ai.answer_always(Reply::recorded("credits-429"));
    let calls = ticks_two_minutes_apart(&sb, &ai, 30, &[]);
    assert!(calls <= 3, "{calls} calls in 30 ticks");
    let c = &sb.stats_at(&at(659), 2.0)["llm"]["circuit"];
    assert_eq!(c["class"], "quota", "{c}");
    assert_eq!(c["until"], "2026-06-17T00:00:00Z", "{c}");
}

#[test]
fn litellm_a_per_day_limit_is_held_until_the_reset_it_names() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // RPD: "Please try again in 8h38m24s" in the message, and
    // `llm_provider-x-ratelimit-reset-requests: 8h38m24s` with 0 remaining.
    ai.answer_always(Reply::recorded("requests-per-day-429"));
    let calls = ticks_two_minutes_apart(&sb, &ai, 30, &[]);
    assert!(calls <= 3, "{calls} calls in 30 ticks");
    let c = &sb.stats_at(&at(659), 2.0)["llm"]["circuit"];
    assert_eq!(c["class"], "rate_limit", "{c}");
    assert_eq!(c["until"], "2026-06-16T18:38:24Z", "{c}");
}

#[test]
fn litellm_a_two_day_retry_after_is_held_for_a_day_never_thrown_away() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // `llm_provider-retry-after: 172800`: two days, over the 24 h cap.
    ai.answer_always(Reply::recorded("retry-after-two-days-429"));
    let calls = ticks_two_minutes_apart(&sb, &ai, 30, &[]);
    assert!(calls <= 3, "{calls} calls in 30 ticks");
    let c = &sb.stats_at(&at(659), 2.0)["llm"]["circuit"];
    assert_eq!(c["until"], "2026-06-17T10:00:00Z", "{c}");
}

#[test]
fn litellm_a_context_window_error_on_one_of_three_files_leaves_the_other_two_answered() {
    let sb = sandbox(&[AUTH, SESSION, TOKEN]);
    let ai = FakeOpenAi::start();
    ai.push(Reply::recorded("context-window-400"));
    ai.answer_always(Reply::recorded("cache-miss-200"));
    let (r, _) = tick(&sb, &ai, &at(600), &["--batch", "5"]);
    let outcomes: Vec<(String, String)> = [AUTH, SESSION, TOKEN]
        .iter()
        .map(|p| {
            (
                p.to_string(),
                file(&r, p)["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Asking again about the same bytes cannot help: given up until it changes.
    let failed: Vec<&(String, String)> = outcomes.iter().filter(|(_, o)| o == "given_up").collect();
    assert_eq!(failed.len(), 1, "{outcomes:?}");
    let answered = outcomes.iter().filter(|(_, o)| o == "llm_skip").count();
    assert_eq!(answered, 2, "{outcomes:?}");
    let why = file(&r, &failed[0].0)["reason"].as_str().unwrap();
    let size = body(&failed[0].0, 1).len();
    assert!(why.starts_with("file_request after 1 attempt"), "{why}");
    assert!(why.contains(&format!("the file is {size} bytes")), "{why}");
    assert!(why.contains("the model's limit: 16385 tokens"), "{why}");
    let l = &sb.stats_at(&at(601), 2.0)["llm"];
    assert_eq!(l["circuit"], Value::Null, "{l}");
}

#[test]
fn litellm_three_cache_hits_count_nothing_and_are_counted_as_cache_hits() {
    let sb = sandbox(&[AUTH, SESSION, TOKEN]);
    let ai = FakeOpenAi::start();
    // A hit carries `x-litellm-cache-key` and no `x-litellm-response-cost`.
    ai.answer_always(Reply::recorded("cache-hit-200"));
    tick(&sb, &ai, &at(600), &["--batch", "5"]);
    assert_eq!(ai.posts(), 3);
    let l = &sb.stats_at(&at(601), 2.0)["llm"];
    assert_eq!(l["cost_today_measured"], 0.0, "{l}");
    assert_eq!(l["cost_today_estimated"], 0.0, "{l}");
    assert_eq!(l["cost_sources_today"]["cache_hit"], 3, "{l}");
}

#[test]
fn litellm_a_reported_price_near_the_cap_never_carries_the_day_past_it() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // `x-litellm-response-cost: 0.0906` on every answer.
    ai.answer_always(Reply::recorded("priced-0.0906-200"));
    let budget = ["--daily-budget", "0.25", "--model", "priced"];
    let calls = ticks_two_minutes_apart(&sb, &ai, 30, &budget);
    let l = &sb.stats_at(&at(659), 0.25)["llm"];
    let counted =
        l["cost_today_measured"].as_f64().unwrap() + l["cost_today_estimated"].as_f64().unwrap();
    assert!(
        counted <= 0.25 + 1e-9,
        "counted ${counted} of a $0.25 cap: {l}"
    );
    assert_eq!(calls, 2, "{l}");
}

#[test]
fn litellm_after_one_call_costs_more_than_the_cap_the_next_day_calls_nothing_and_says_why() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    ai.answer_always(
        Reply::recorded("priced-0.0906-200").with_header_value("x-litellm-response-cost", "1.2506"),
    );
    let budget = ["--daily-budget", "0.25", "--model", "priced"];
    tick(&sb, &ai, &at(600), &budget);
    assert_eq!(ai.posts(), 1);
    // The next day, the file changed: one call would cost more than the cap.
    sb.repo.write(AUTH, body(AUTH, 2));
    sb.repo.commit("v2");
    let out = sb
        .advisor_tick_cmd(&ai, &at(24 * 60 + 600))
        .args(budget)
        .output();
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(ai.posts(), 1, "no call the next day");
    for said in ["$1.2506", "$0.25", "--daily-budget", "nothing was spent"] {
        assert!(out.stderr.contains(said), "{said}: {}", out.stderr);
    }
}

#[test]
fn litellm_a_fallback_model_is_named_in_the_line_explain_and_stats_and_owns_its_answer() {
    let sb = sandbox(&[AUTH]);
    let ai = FakeOpenAi::start();
    // Asked for `fb-mini`, answered by the `gpt-4o` group (openai/gpt-4o).
    ai.answer_always(Reply::recorded("fallback-200"));
    let (r, out) = tick(&sb, &ai, &at(600), &["--model", "fb-mini"]);
    let why = file(&r, AUTH)["reason"].as_str().unwrap();
    assert!(
        why.contains("answered by gpt-4o (openai/gpt-4o), the proxy's fallback for fb-mini"),
        "{why}"
    );
    assert!(
        out.stderr.contains("fallback for `fb-mini`"),
        "{}",
        out.stderr
    );
    let explain = sb
        .sentinel(["explain", AUTH, "--now", &at(601), "--model", "fb-mini"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", crate::util::openai::KEY)
        .output();
    assert_eq!(explain.code, 0, "{}", explain.stderr);
    assert!(
        explain
            .stdout
            .contains("answered by: openai:gpt-4o (the proxy's fallback for openai:fb-mini)"),
        "{}",
        explain.stdout
    );
    let l = &sb.stats_at(&at(601), 2.0)["llm"];
    assert_eq!(l["fallbacks_today"]["fb-mini -> gpt-4o"], 1, "{l}");
    // Switching to the model that answered re-asks nothing it decided.
    let (r, _) = tick(&sb, &ai, &at(610), &["--model", "gpt-4o"]);
    assert_eq!(ai.posts(), 1, "{r}");
}
