//! The adapters in `examples/agents/` against stubs of `claude` and `codex`
//! that print recorded output in the documented shapes: what sentinel
//! makes of a success, a failure and the cost each reports.

use serde_json::Value;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at};

fn fixture(name: &str) -> String {
    format!("{}/fixtures/agents/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn adapter(name: &str) -> String {
    format!("{}/examples/agents/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A stub that records its arguments and prints `fixture`, exiting `code`.
fn stub(sb: &mut Sandbox, tool: &str, fixture_name: &str, code: i32) {
    stub_doing(sb, tool, fixture_name, code, "");
}

/// `stub`, running the shell commands `before` first (the edit the tool
/// makes in its working copy).
fn stub_doing(sb: &mut Sandbox, tool: &str, fixture_name: &str, code: i32, before: &str) {
    let args = sb.root().join(format!("{tool}-args"));
    sb.stub(
        tool,
        &format!(
            "printf '%s\\0' \"$@\" > '{}'\n{before}\ncat '{}'\nexit {code}",
            args.display(),
            fixture(fixture_name)
        ),
    );
}

#[track_caller]
fn tick(sb: &Sandbox, script: &str, code: i32) -> Value {
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &adapter(script), "--fake-sleep"])
        .output();
    expect_code(&out, code);
    out.json()
}

fn args(sb: &Sandbox, tool: &str) -> Vec<String> {
    std::fs::read_to_string(sb.root().join(format!("{tool}-args")))
        .unwrap()
        .split('\0')
        .map(str::to_string)
        .collect()
}

#[test]
fn claude_code_behind_sentinel_answers_and_reports_its_cost() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "claude", "claude-success.json", 0);
    let r = tick(&sb, "claude-code.sh", 10);
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "llm_skip", "{f}");
    assert_eq!(f["reason"], "a constant export with nothing to fix");
    let argv = args(&sb, "claude");
    assert_eq!(argv[0], "-p");
    assert!(argv[1].contains(&format!("{WATCHED}/a.js")), "{}", argv[1]);
    assert_eq!(argv[2..4], ["--output-format", "json"]);
    let llm = &sb.stats()["llm"];
    assert_eq!(llm["lifetime_cost_measured"], 0.0412, "{llm}");
    assert_eq!(llm["lifetime_cost_estimated"], 0.0, "{llm}");
}

#[test]
fn claude_code_out_of_credit_is_a_quota_error_asked_once() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js"]);
    stub(&mut sb, "claude", "claude-credit.json", 1);
    let r = tick(&sb, "claude-code.sh", 10);
    assert_eq!(r["llm_calls"], 1, "{r}");
    assert_eq!(r["counts"]["held"], 1, "{r}");
    let failed = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["outcome"] == "failed")
        .expect("a failed file");
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .starts_with("quota after 1 attempt"),
        "{failed}"
    );
}

#[test]
fn codex_behind_sentinel_answers_with_its_findings_and_usage() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    let edit = "printf 'export const a = 1;\\n' > \"$SENTINEL_FILE\"";
    stub_doing(&mut sb, "codex", "codex-success.jsonl", 0, edit);
    let r = tick(&sb, "codex.sh", 10);
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "evolve", "{f}");
    assert_eq!(f["findings"][0]["line"], 2);
    let argv = args(&sb, "codex");
    assert_eq!(argv[..2], ["exec", "--json"]);
    // Codex reports no cost: the per-call estimate counts, flagged as such.
    let llm = &sb.stats()["llm"];
    assert_eq!(llm["lifetime_cost_measured"], 0.0, "{llm}");
    assert!(
        llm["lifetime_cost_estimated"].as_f64().unwrap() > 0.0,
        "{llm}"
    );
}

#[test]
fn a_failed_codex_turn_is_a_rate_limit_retried_with_backoff() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "codex", "codex-failed.jsonl", 1);
    let r = tick(&sb, "codex.sh", 10);
    assert_eq!(r["llm_calls"], 3, "{r}");
    assert_eq!(r["slept_ms"], serde_json::json!([5000, 15000]));
    let reason = r["files"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("rate_limit after 3 attempts"),
        "{reason}"
    );
}
