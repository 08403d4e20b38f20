//! "I didn't decide" is retried, finitely: held, deferred and failed files
//! wait for a not-before time and are retried once when it passes, also on a
//! repository that does not change; after 5 failures at one fingerprint a
//! file gives up until it changes or `sentinel reset` brings it back. The
//! binary runs against the fake provider (`util::openai`) on real git
//! repositories; time is injected with `--now` and nothing sleeps.

use serde_json::Value;

use crate::expect_code;
use crate::util::openai::FakeOpenAi;
use crate::util::{Output, Sandbox};

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

/// The state document as JSON.
pub fn state(sb: &Sandbox) -> Value {
    let text = std::fs::read_to_string(&sb.state).expect("the state file");
    serde_json::from_str(&text).expect("the state is JSON")
}
