//! Scheduler integration end to end: trigger admission (exit 21) with
//! injected time and with real parallel processes, the Code Quality report
//! and the Prometheus output.

use std::fs;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Output, Run, Sandbox, WATCHED, at, plain_js};

const FILES: [&str; 2] = ["a.js", "b.js"];

fn sandbox() -> Sandbox {
    Sandbox::with_files(&FILES)
}

fn push_tick(sb: &Sandbox, now: &str) -> Run {
    sb.tick_cmd(now).args(["--trigger", "push"])
}

#[test]
fn twenty_triggered_ticks_in_ten_seconds_start_exactly_one_cycle() {
    let sb = sandbox();
    sb.tick(&at(0), &[]);
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change a");
    let base = chrono::DateTime::parse_from_rfc3339(&at(10)).unwrap();
    let mut codes = Vec::new();
    for i in 0..20 {
        let now = (base + chrono::Duration::milliseconds(500 * i)).to_rfc3339();
        codes.push(push_tick(&sb, &now).output().code);
    }
    assert_eq!(codes[0], 12, "the first poke starts the cycle");
    assert!(codes[1..].iter().all(|c| *c == 21), "{codes:?}");
    // The timer is never limited: a scheduled tick right after is a no-op.
    let out = sb
        .tick_cmd(&at(10))
        .args(["--trigger", "schedule"])
        .output();
    expect_code(&out, 0);
    // After the window a poke is admitted again.
    let out = push_tick(&sb, &at(11)).output();
    expect_code(&out, 0);
}

#[test]
fn a_refused_poke_names_the_wait_and_makes_no_request() {
    let sb = sandbox();
    sb.tick(&at(0), &[]);
    expect_code(&push_tick(&sb, "2026-06-16T00:01:00Z").output(), 0);
    let out = push_tick(&sb, "2026-06-16T00:01:12Z").output();
    expect_code(&out, 21);
    let r: Value = out.json();
    assert_eq!(r["verdict"]["reason"], "rate_limited");
    assert_eq!(r["verdict"]["detail"]["retry_after_s"], 18);
    assert_eq!(r["requests"], 0);
    assert_eq!(
        out.stderr_line(),
        "sentinel: rate_limited (a push tick within --min-interval of the last start; next in 18 s); nothing started"
    );
}

#[test]
fn invariant_10_a_busy_refusal_does_not_consume_the_window() {
    let sb = sandbox();
    sb.tick(&at(0), &[]);
    {
        let _held = crate::util::hold_lock(&sb.state);
        expect_code(&push_tick(&sb, &at(1)).output(), 20);
    }
    // The busy poke did not start anything, so this one is admitted.
    expect_code(&push_tick(&sb, &at(1)).output(), 0);
}

#[test]
fn twenty_parallel_triggered_processes_start_exactly_one_cycle() {
    let sb = sandbox();
    sb.tick(&at(0), &[]);
    sb.repo
        .write(&format!("{WATCHED}/b.js"), plain_js("b.js v2"));
    sb.repo.commit("change b");
    let children: Vec<_> = (0..20).map(|_| push_tick(&sb, &at(5)).spawn()).collect();
    let codes: Vec<i32> = children.into_iter().map(|c| Output::wait(c).code).collect();
    let started = codes.iter().filter(|c| !matches!(c, 20 | 21)).count();
    assert_eq!(started, 1, "{codes:?}");
    assert!(codes.contains(&12), "{codes:?}");
    let stats = sb.stats();
    assert_eq!(stats["wake"]["wakes"], 2);
}

#[test]
fn the_codequality_report_lists_open_findings_and_is_written_only_on_wake() {
    let sb = Sandbox::new();
    sb.repo
        .write("src/auth.js", "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("auth");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "tokens compared in variable time",
        serde_json::json!([{"line": 1, "severity": "critical", "message": "use a constant-time comparison"}]),
    ));
    let report = sb.root().join("gl-code-quality-report.json");
    let cq = ["--codequality", report.to_str().unwrap()];
    let out = sb.advisor_tick_cmd(&ai, &at(0)).args(cq).output();
    expect_code(&out, 10);
    let issues: Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    assert_eq!(issues.as_array().unwrap().len(), 1);
    let issue = &issues[0];
    assert_eq!(issue["severity"], "critical");
    assert_eq!(issue["location"]["path"], "src/auth.js");
    assert_eq!(issue["location"]["lines"]["begin"], 1);
    assert_eq!(issue["description"], "use a constant-time comparison");
    assert!(issue["fingerprint"].as_str().unwrap().len() >= 32);
    assert!(issue["check_name"].is_string());
    // A no-op writes nothing, not even the report.
    fs::remove_file(&report).unwrap();
    let out = sb.advisor_tick_cmd(&ai, &at(2)).args(cq).output();
    expect_code(&out, 0);
    assert!(!report.exists());
}

#[test]
fn stats_speak_prometheus() {
    let sb = sandbox();
    sb.tick(&at(0), &[]);
    sb.tick(&at(2), &[]);
    let out = sb
        .sentinel(["stats", "--format", "prometheus", "--state"])
        .arg(&sb.state)
        .output();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("# TYPE sentinel_ticks_total counter\nsentinel_ticks_total 2\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("sentinel_wakes_total{reason=\"first_run\"} 1\n")
    );
    assert!(out.stdout.contains("sentinel_noops_total 1\n"));
    assert!(out.stdout.contains("sentinel_unsaved_noops 1\n"));
}

#[test]
fn simulate_all_reproduces_the_seed_table() {
    let sb = Sandbox::new();
    let out = sb
        .sentinel(["simulate", "--scenario", "all", "--json"])
        .output();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = out.json();
    let day = &v["day"];
    let calls = |col: &str| day[col]["model_calls"].as_u64().unwrap();
    let reads = |col: &str| day[col]["file_reads"].as_u64().unwrap();
    assert_eq!(
        (calls("naive"), calls("novelty_only"), calls("sentinel")),
        (3600, 6, 6)
    );
    assert_eq!(
        (reads("naive"), reads("novelty_only"), reads("sentinel")),
        (3600, 3600, 6)
    );
    assert_eq!(day["sentinel"]["wakes"], 2);
    assert_eq!(day["sentinel"]["state_writes"], 2);
    assert_eq!(
        (&day["naive"]["ticks"], &day["naive"]["state_writes"]),
        (&json!(720), &json!(720))
    );
    assert_eq!(day["novelty_only"]["state_writes"], 720);
    assert_eq!(
        v["storm"]["refusals"],
        json!({"busy": 5, "rate_limited": 14})
    );
    assert_eq!(v["quota"]["held_files"], 2249);
    assert_eq!(
        (&v["quota"]["circuit_class"], &v["quota"]["circuit_until"]),
        (&json!("quota"), &json!("2026-06-17T00:00:00Z"))
    );
    assert_eq!(
        (
            v["storm"]["naive_cycles"].as_u64(),
            v["storm"]["cycles_started"].as_u64()
        ),
        (Some(20), Some(1))
    );
    assert_eq!(
        (
            v["quota"]["naive_calls"].as_u64(),
            v["quota"]["calls_after_nine"].as_u64()
        ),
        (Some(6750), Some(1))
    );
    // Nothing was written anywhere: the sandbox holds only what it made.
    assert!(!sb.state.exists());
}

#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    use std::process::{Command, Stdio};
    // `sentinel simulate | head -c 0`: the reader is gone before the
    // simulation (a fraction of a second) has anything to print.
    let mut child = Command::new(env!("CARGO_BIN_EXE_sentinel"))
        .args(["simulate", "--scenario", "all"])
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}
