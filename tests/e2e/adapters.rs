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
    let env = sb.root().join(format!("{tool}-env"));
    sb.stub(
        tool,
        &format!(
            "printf '%s\\0' \"$@\" > '{}'\nenv > '{}'\n{before}\ncat '{}'\nexit {code}",
            args.display(),
            env.display(),
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

/// The value that follows `flag` in the recorded arguments.
fn after<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    let at = argv.iter().position(|a| a == flag)?;
    argv.get(at + 1).map(String::as_str)
}

#[test]
fn claude_behind_the_adapter_makes_one_request_per_try_within_the_budget_and_may_edit_as_root() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "claude", "claude-success.json", 0);
    tick(&sb, "claude-code.sh", 10);
    let argv = args(&sb, "claude");
    // Not bypassPermissions: refused as root, the user of every CI job.
    assert_eq!(
        after(&argv, "--permission-mode"),
        Some("acceptEdits"),
        "{argv:?}"
    );
    assert!(!argv.iter().any(|a| a.contains("dangerously")), "{argv:?}");
    // What today's budget has left caps the run inside the tool.
    assert_eq!(after(&argv, "--max-budget-usd"), Some("2.0000"), "{argv:?}");
    // Its own retries (up to 10 per run) are off: sentinel retries.
    let env = std::fs::read_to_string(sb.root().join("claude-env")).unwrap();
    assert!(env.contains("CLAUDE_CODE_MAX_RETRIES=0\n"), "{env}");
}

#[test]
fn a_claude_edit_refused_by_its_permission_check_is_no_evolve_and_says_so() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "claude", "claude-denied.json", 0);
    let r = tick(&sb, "claude-code.sh", 10);
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "failed", "{f}");
    let reason = f["reason"].as_str().unwrap();
    assert!(
        reason.contains("EVOLVE without an edit (a permission denial)")
            && reason.contains("permission_denials): Edit"),
        "{reason}"
    );
    assert_eq!(sb.stats()["llm"]["open_proposals"], serde_json::json!([]));
}

#[test]
fn a_claude_api_error_is_read_with_its_own_code_not_its_subtype() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "claude", "claude-429.json", 1);
    let r = tick(&sb, "claude-code.sh", 10);
    let reason = r["files"][0]["reason"].as_str().unwrap();
    assert!(
        reason
            .starts_with("rate_limit after 3 attempts: the agent exited with 1: rate_limit_error"),
        "{reason}"
    );
    assert!(!reason.contains("success"), "{reason}");
}

#[test]
fn codex_behind_the_adapter_has_its_providers_retries_off_and_may_write_its_working_copy() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    let home = sb.root().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        "model = \"gpt-5\"\nmodel_provider = \"proxy\"\n\n[model_providers.proxy]\nname = \"proxy\"\nbase_url = \"http://127.0.0.1:4000/v1\"\nenv_key = \"OPENAI_API_KEY\"\n",
    )
    .unwrap();
    let edit = "printf 'export const a = 1;\\n' > \"$SENTINEL_FILE\"";
    stub_doing(&mut sb, "codex", "codex-success.jsonl", 0, edit);
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &adapter("codex.sh"), "--fake-sleep"])
        .env("CODEX_HOME", &home)
        .output();
    expect_code(&out, 10);
    let argv = args(&sb, "codex");
    assert_eq!(
        after(&argv, "--sandbox"),
        Some("workspace-write"),
        "{argv:?}"
    );
    let configs: Vec<&str> = argv
        .windows(2)
        .filter(|w| w[0] == "-c")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(
        configs,
        [
            "model_providers.proxy.request_max_retries=0",
            "model_providers.proxy.stream_max_retries=0"
        ],
        "{argv:?}"
    );
}

#[test]
fn a_codex_patch_rejected_by_its_sandbox_is_no_evolve_and_says_so() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    stub(&mut sb, "codex", "codex-rejected.jsonl", 0);
    let r = tick(&sb, "codex.sh", 10);
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "failed", "{f}");
    let reason = f["reason"].as_str().unwrap();
    assert!(
        reason.contains("EVOLVE without an edit (a rejected patch)")
            && reason.contains("libs/shared/a.js"),
        "{reason}"
    );
}
