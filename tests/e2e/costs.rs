//! `sentinel costs` end to end: the binary against a fake OpenAI Admin API
//! on 127.0.0.1 (`util::admin`) serving the pages of
//! `fixtures/openai-admin/`, over states prepared by real advisor ticks
//! against the fake OpenAI (`util::openai`). Time is injected with `--now`;
//! the only real wait is the timeout test's, on the server's thread.

use std::time::Duration;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::admin::{ADMIN_KEY, COSTS, FakeAdmin, Reply, USAGE};
use crate::util::openai::FakeOpenAi;
use crate::util::{Output, Sandbox, at, hold_lock, snapshot};

/// High risk (`auth`, `session`): both are sent to the model.
const AUTH: &str = "src/auth.js";
const SESSION: &str = "src/session.js";
/// The time of every costs run: the window is 2026-06-10 ..= 2026-06-16.
const NOON: &str = "2026-06-16T12:00:00Z";
/// 2026-06-10T00:00:00Z, the start of the default 7-day window.
const WINDOW_START: &str = "1781049600";

fn content(path: &str, version: u64) -> String {
    format!("// {path}\nmodule.exports = {version};\n")
}

/// A repository with AUTH and SESSION, after one advisor tick at 00:00 on
/// 2026-06-16: two calls to the model, each billed by the fake OpenAI with
/// the fixture's usage ($0.0012 a call for gpt-4o-mini).
fn advised(ai: &FakeOpenAi, extra: &[&str]) -> Sandbox {
    let sb = Sandbox::new();
    for path in [AUTH, SESSION] {
        sb.repo.write(path, content(path, 1));
    }
    sb.repo.commit("initial files");
    let out = sb.advisor_tick_cmd(ai, &at(0)).args(extra).output();
    expect_code(&out, 10);
    assert_eq!(ai.posts(), 2, "two files sent to the model");
    sb
}

/// A costs run that must exit 0; its `--json` report.
#[track_caller]
fn costs(sb: &Sandbox, admin: &FakeAdmin, extra: &[&str]) -> Value {
    let out = sb.costs_cmd(admin, NOON).args(extra).output();
    expect_code(&out, 0);
    out.json()
}

fn kinds(report: &Value) -> Vec<String> {
    report["advisories"]
        .as_array()
        .expect("advisories is an array")
        .iter()
        .map(|a| a["kind"].as_str().unwrap().to_string())
        .collect()
}

fn messages(report: &Value) -> Vec<String> {
    report["advisories"]
        .as_array()
        .expect("advisories is an array")
        .iter()
        .map(|a| a["message"].as_str().unwrap().to_string())
        .collect()
}

#[track_caller]
fn assert_close(v: &Value, expected: f64) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"));
    assert!((got - expected).abs() < 1e-9, "{got} != {expected}");
}

/// The key never appears in anything sentinel printed.
#[track_caller]
fn no_key(out: &Output) {
    assert!(!out.stdout.contains(ADMIN_KEY), "stdout: {}", out.stdout);
    assert!(!out.stderr.contains(ADMIN_KEY), "stderr: {}", out.stderr);
}

#[test]
fn a_tick_keeps_the_advisors_day_beside_the_budget() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let state = sentinel::state::store::load(&sb.state).unwrap().unwrap();
    let day = &state.llm.days[&"2026-06-16".parse().unwrap()];
    assert_eq!(
        (day.calls, day.attempts, day.models.clone()),
        (2, 2, [("gpt-4o-mini".to_string(), 2)].into())
    );
    assert!((day.measured - 0.0024).abs() < 1e-12, "{}", day.measured);
    assert_eq!(day.estimated, 0.0);
    assert_eq!(day.calls, state.llm.budget.calls_today);
    assert_eq!(day.measured, state.llm.budget.measured_today);
}

#[test]
fn costs_without_an_admin_key_names_the_variable_and_the_kind_of_key() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    let before = snapshot(&sb.state);
    // OPENAI_API_KEY is the advisor's project key: never used for the bill.
    let out = sb
        .sentinel(["costs", "--now", NOON, "--admin-url", &admin.base_url()])
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", "sk-proj-advisor-key")
        .output();
    expect_code(&out, 1);
    let err = out.stderr_line();
    assert!(
        err.starts_with("error: OPENAI_ADMIN_KEY is not set"),
        "{err}"
    );
    assert!(err.contains("organization admin key"), "{err}");
    assert!(err.contains("not a project API key"), "{err}");
    assert!(!err.contains("sk-proj-advisor-key"), "{err}");
    assert_eq!(out.stdout, "");

    let out = sb
        .sentinel(["costs", "--now", NOON, "--admin-url", &admin.base_url()])
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_ADMIN_KEY", "sk-proj-not-an-admin-key")
        .output();
    expect_code(&out, 1);
    let err = out.stderr_line();
    assert!(err.contains("project API key"), "{err}");
    assert!(!err.contains("sk-proj-not-an-admin-key"), "{err}");

    assert_eq!(admin.requests().len(), 0, "no request without an admin key");
    assert_eq!(snapshot(&sb.state), before);
}

#[test]
fn costs_without_a_state_says_to_tick_first_and_reads_nothing() {
    let sb = Sandbox::new();
    let admin = FakeAdmin::start();
    let out = sb.costs_cmd(&admin, NOON).output();
    expect_code(&out, 1);
    assert!(out.stderr.contains("no state file"), "{}", out.stderr);
    assert_eq!(admin.requests().len(), 0);
    assert!(!sb.state.parent().unwrap().exists(), "nothing created");
}

#[test]
fn a_refused_admin_key_exits_1_naming_the_key_and_the_scope_it_needs() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    let before = snapshot(&sb.state);

    admin.answer_always(Reply::fixture(401, "admin-401.json"));
    let out = sb.costs_cmd(&admin, NOON).output();
    expect_code(&out, 1);
    no_key(&out);
    let err = out.stderr_line();
    assert!(err.contains("refused OPENAI_ADMIN_KEY (401"), "{err}");
    assert!(err.contains("organization admin key"), "{err}");
    assert!(err.contains("not a project API key"), "{err}");
    assert!(
        !err.contains("abcd"),
        "the masked key the provider echoes: {err}"
    );
    assert_eq!(out.stdout, "");
    let requests = admin.requests();
    assert_eq!(requests.len(), 1, "no retry");
    assert_eq!(requests[0].method, "GET");
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {ADMIN_KEY}").as_str())
    );

    admin.answer_always(Reply::fixture(403, "admin-403.json"));
    let out = sb.costs_cmd(&admin, NOON).output();
    expect_code(&out, 1);
    no_key(&out);
    let err = out.stderr_line();
    assert!(
        err.contains("OPENAI_ADMIN_KEY may not read the organization's costs and usage (403"),
        "{err}"
    );
    assert!(err.contains("Missing scopes: api.usage.read"), "{err}");
    assert!(err.contains("read access to Usage"), "{err}");
    assert_eq!(admin.requests().len(), 2);
    assert_eq!(snapshot(&sb.state), before, "a failed run saves nothing");
}

#[test]
fn a_failing_admin_api_says_try_again_later_after_one_request() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    let before = snapshot(&sb.state);

    admin.answer_always(Reply::fixture(500, "server-500.json"));
    let out = sb.costs_cmd(&admin, NOON).output();
    expect_code(&out, 1);
    assert!(
        out.stderr_line()
            .contains("(500 on /organization/costs); try again later")
    );
    assert_eq!(admin.requests().len(), 1, "a costs run never retries");

    admin.answer_always(Reply::page("costs-empty.json").after(Duration::from_secs(5)));
    let out = sb
        .costs_cmd(&admin, NOON)
        .args(["--admin-timeout", "1"])
        .output();
    expect_code(&out, 1);
    let err = out.stderr_line();
    assert!(
        err.contains("did not answer /organization/costs within 1 s"),
        "{err}"
    );
    assert!(err.ends_with("try again later"), "{err}");
    assert_eq!(admin.requests().len(), 2);

    // SENTINEL_ADMIN_TIMEOUT binds the same bound.
    let out = sb
        .costs_cmd(&admin, NOON)
        .env("SENTINEL_ADMIN_TIMEOUT", "1")
        .output();
    expect_code(&out, 1);
    let err = out.stderr_line();
    assert!(
        err.contains("did not answer /organization/costs within 1 s"),
        "{err}"
    );
    assert_eq!(admin.requests().len(), 3);
    assert_eq!(snapshot(&sb.state), before);
}

#[test]
fn a_busy_state_exits_20_and_reads_nothing() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    let _held = hold_lock(&sb.state);
    let out = sb.costs_cmd(&admin, NOON).output();
    expect_code(&out, 20);
    assert!(
        out.stderr_line().starts_with("sentinel: busy"),
        "{}",
        out.stderr
    );
    assert_eq!(out.json()["busy"], true);
    assert_eq!(admin.requests().len(), 0);
}

#[test]
fn an_empty_bill_says_nothing_billed_and_leaves_the_state_alone() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    let before = snapshot(&sb.state);

    let out = sb
        .sentinel(["costs", "--now", NOON])
        .args(["--admin-url", &admin.base_url()])
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_ADMIN_KEY", ADMIN_KEY)
        .output();
    expect_code(&out, 0);
    no_key(&out);
    let text = &out.stdout;
    assert!(
        text.starts_with("sentinel costs: 2026-06-10 .. 2026-06-16 (7 UTC days)\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "nothing billed from 2026-06-10 to 2026-06-16: no cost and no completions request\n"
        ),
        "{text}"
    );
    assert!(text.contains("no advisory\n"), "{text}");
    assert!(text.ends_with("state unchanged\n"), "{text}");

    let report = costs(&sb, &admin, &[]);
    assert_eq!(report["advisories"], json!([]));
    assert_eq!(report["state_written"], false);
    assert_eq!(report["billed_requests"], 0);
    assert_close(&report["billed_usd"], 0.0);
    assert_eq!(report["pages"], json!({"costs": 1, "usage": 1}));
    assert_eq!(report["complete"], true);
    assert_eq!(
        snapshot(&sb.state),
        before,
        "nothing found, nothing written"
    );

    let costs_req = &admin.requests_to(COSTS)[0];
    assert_eq!(
        costs_req.query(),
        [
            ("start_time".to_string(), WINDOW_START.to_string()),
            ("bucket_width".into(), "1d".into()),
            ("limit".into(), "7".into()),
        ]
    );
    let usage_req = &admin.requests_to(USAGE)[0];
    assert_eq!(usage_req.param("group_by").as_deref(), Some("model"));
    assert_eq!(usage_req.param("start_time").as_deref(), Some(WINDOW_START));
}

#[test]
fn every_flag_of_costs_has_an_environment_binding() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-day.json", "usage-day.json");
    let out = sb
        .sentinel(["costs"])
        .env("OPENAI_ADMIN_KEY", ADMIN_KEY)
        .env("OPENAI_ADMIN_BASE_URL", admin.base_url())
        .env("SENTINEL_STATE", &sb.state)
        .env("SENTINEL_NOW", NOON)
        .env("SENTINEL_COST_DAYS", "3")
        .env("SENTINEL_JSON", "1")
        .env("SENTINEL_DAILY_BUDGET", "0.002")
        .env("OPENAI_PROJECT_ID", "proj_abc")
        .output();
    expect_code(&out, 0);
    let report = out.json();
    assert_eq!(
        (&report["from"], &report["days"], &report["project"]),
        (&json!("2026-06-14"), &json!(3), &json!("proj_abc"))
    );
    assert_eq!(kinds(&report), ["over-daily-budget"]);
    let req = &admin.requests_to(COSTS)[0];
    assert_eq!(req.param("limit").as_deref(), Some("3"));
    assert_eq!(req.param("project_ids").as_deref(), Some("proj_abc"));
    assert_eq!(req.param("start_time").as_deref(), Some("1781395200"));
    // SENTINEL_CALIBRATE and SENTINEL_ADMIN_TIMEOUT are observed where they
    // change something: the calibration and the timeout tests.

    // SENTINEL_ADMIN_URL wins over OPENAI_ADMIN_BASE_URL.
    let out = sb
        .sentinel(["costs", "--json", "--now", NOON])
        .env("OPENAI_ADMIN_KEY", ADMIN_KEY)
        .env("SENTINEL_ADMIN_URL", admin.base_url())
        .env("OPENAI_ADMIN_BASE_URL", "http://127.0.0.1:9/v1")
        .env("SENTINEL_STATE", &sb.state)
        .output();
    expect_code(&out, 0);
}

#[test]
fn the_bill_is_read_across_pages_through_next_page() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-empty.json", "usage-day.json");
    admin.push_costs(Reply::page("costs-page-1.json"));
    admin.push_costs(Reply::page("costs-page-2.json"));
    let report = costs(&sb, &admin, &[]);
    let pages = admin.requests_to(COSTS);
    assert_eq!(pages.len(), 2);
    assert_eq!(pages[0].param("page"), None);
    assert_eq!(
        pages[1].param("page").as_deref(),
        Some("page_AAAAAGhPcAA%2B%2F%3D"),
        "the cursor of next_page, percent-encoded"
    );
    assert_eq!(
        pages[1].param("start_time").as_deref(),
        Some(WINDOW_START),
        "same query"
    );
    assert_eq!(report["pages"], json!({"costs": 2, "usage": 1}));
    assert_close(&report["billed_usd"], 0.0025);
    let by_day = report["by_day"].as_array().unwrap();
    assert_eq!(by_day.len(), 2, "{by_day:?}");
    assert_eq!(by_day[0]["day"], "2026-06-15");
    assert_close(&by_day[0]["billed"]["usd"], 0.001);
    assert_eq!(
        by_day[0]["sentinel"],
        Value::Null,
        "before sentinel's history"
    );
    assert_eq!(by_day[1]["day"], "2026-06-16");
    assert_close(&by_day[1]["billed"]["usd"], 0.0015);
    assert_eq!(by_day[1]["billed"]["requests"], 2);
    assert_eq!(by_day[1]["sentinel"]["calls"], 2);
    assert_eq!(report["advisories"], json!([]));
}

#[test]
fn a_bill_that_agrees_with_sentinels_count_has_no_advisory() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-day.json", "usage-day.json");
    let report = costs(&sb, &admin, &[]);
    assert_eq!(report["advisories"], json!([]), "{report}");
    assert_eq!(report["history_since"], "2026-06-16");
    assert_eq!(report["state_written"], false);
}

#[test]
fn real_spend_over_the_daily_budget_is_over_daily_budget() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-day.json", "usage-day.json");
    let report = costs(&sb, &admin, &["--daily-budget", "0.002"]);
    assert_eq!(kinds(&report), ["over-daily-budget"]);
    assert_eq!(
        messages(&report),
        [
            "2026-06-16: billed $0.0025, over the daily budget of $0.0020; sentinel counted $0.0024 for 2 calls"
        ]
    );
    assert_eq!(report["advisories"][0]["day"], "2026-06-16");
    assert_eq!(report["advisories"][0]["found"], NOON);
    assert_eq!(report["state_written"], true);
}

#[test]
fn a_real_cost_per_call_far_above_sentinels_is_estimate_too_low() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-expensive.json", "usage-day.json");
    let report = costs(&sb, &admin, &[]);
    assert_eq!(kinds(&report), ["estimate-too-low"]);
    assert_eq!(
        messages(&report),
        [
            "2026-06-16: billed $0.050 for 2 requests ($0.025 per call); sentinel counted $0.0012 per call: 20.8× too low"
        ]
    );
}

#[test]
fn a_model_sentinel_did_not_use_is_unexpected_model() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-day.json", "usage-two-models.json");
    let report = costs(&sb, &admin, &[]);
    assert_eq!(kinds(&report), ["unexpected-model"]);
    assert_eq!(
        messages(&report),
        [
            "2026-06-16: billed gpt-4o-2024-08-06 (1 request), a model sentinel did not use; it asked only gpt-4o-mini"
        ]
    );
}

#[test]
fn more_requests_than_sentinel_made_are_foreign_calls_and_stats_shows_them() {
    let ai = FakeOpenAi::start();
    let sb = advised(&ai, &[]);
    let admin = FakeAdmin::start();
    admin.bill("costs-foreign.json", "usage-foreign.json");
    let report = costs(&sb, &admin, &[]);
    assert_eq!(kinds(&report), ["foreign-calls"]);
    assert_eq!(
        messages(&report),
        [
            "2026-06-16: billed 40 requests; sentinel made 2 calls (2 HTTP attempts): 38 requests came from another client on the same key or project"
        ]
    );
    assert_eq!(report["state_written"], true);

    let stats = sb.stats();
    assert_eq!(
        stats["bill"]["advisories"],
        json!([{"kind": "foreign-calls", "day": "2026-06-16",
                "message": messages(&report)[0], "found": NOON}])
    );
    let out = sb
        .sentinel(["stats"])
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 0);
    assert!(
        out.stdout.contains("the bill (sentinel costs)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("│ foreign-calls "), "{}", out.stdout);

    // The same bill again: the advisory is kept once, the state untouched.
    let before = snapshot(&sb.state);
    let later = sb.costs_cmd(&admin, "2026-06-16T18:00:00Z").output();
    expect_code(&later, 0);
    assert_eq!(later.json()["state_written"], false);
    assert_eq!(snapshot(&sb.state), before);
    assert_eq!(sb.stats()["bill"]["advisories"][0]["found"], NOON);
}

#[test]
fn calibrate_stores_the_real_cost_per_call_and_the_budget_counts_it() {
    let ai = FakeOpenAi::start();
    let flags = ["--model", "my-local-model", "--cost-per-call", "0.01"];
    let sb = advised(&ai, &flags);
    assert_close(
        &sb.stats_at(&at(1), 2.0)["llm"]["cost_today_estimated"],
        0.02,
    );
    let admin = FakeAdmin::start();
    admin.bill("costs-unpriced.json", "usage-unpriced.json");

    // Without --calibrate the advisory says it; nothing is calibrated.
    let report = costs(&sb, &admin, &[]);
    assert_eq!(kinds(&report), ["estimate-too-low"]);
    assert_eq!(
        messages(&report),
        [
            "2026-06-16: billed $0.300 for 2 requests ($0.150 per call); sentinel counted $0.010 per call: 15.0× too low"
        ]
    );
    assert_eq!(sb.stats()["bill"]["calibrated"], json!({}));

    let report = costs(&sb, &admin, &["--calibrate"]);
    assert_eq!(report["calibrated"].as_array().unwrap().len(), 1);
    let c = &report["calibrated"][0];
    assert_eq!(
        (&c["model"], &c["days"], &c["requests"]),
        (&json!("my-local-model"), &json!(1), &json!(2))
    );
    assert_close(&c["per_call"], 0.15);
    assert_eq!(report["state_written"], true);
    assert_close(&sb.stats()["bill"]["calibrated"]["my-local-model"], 0.15);
    // SENTINEL_CALIBRATE binds the flag: the same model calibrated again.
    let out = sb
        .costs_cmd(&admin, NOON)
        .env("SENTINEL_CALIBRATE", "true")
        .output();
    expect_code(&out, 0);
    let again = out.json();
    assert_eq!(again["calibrated"].as_array().unwrap().len(), 1, "{again}");
    assert_eq!(again["calibrated"][0]["model"], "my-local-model");
    assert_close(&again["calibrated"][0]["per_call"], 0.15);

    // The next call to that model counts $0.15, not --cost-per-call.
    sb.repo.write(AUTH, content(AUTH, 2));
    sb.repo.commit("auth v2");
    let out = sb.advisor_tick_cmd(&ai, &at(10)).args(flags).output();
    expect_code(&out, 12);
    assert_eq!(ai.posts(), 3);
    let llm = &sb.stats_at(&at(11), 2.0)["llm"];
    assert_eq!(llm["calls_today"], 3);
    assert_close(&llm["cost_today_estimated"], 0.02 + 0.15);
}
