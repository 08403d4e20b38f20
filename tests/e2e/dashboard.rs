//! Acting on EVOLVE, the dashboard part: one GitLab issue (or a file) that
//! lists the open proposals, edited only on a wake and only when they
//! change, and never a cause of a wake itself.

use std::fs;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::gitlab::Api;
use crate::util::openai::{FakeOpenAi, KEY, Reply};
use crate::util::{Sandbox, WATCHED, at};

fn api_advised_tick(sb: &Sandbox, api: &Api, ai: &FakeOpenAi, minutes: i64, code: i32) -> Value {
    let out = sb
        .api_tick_cmd(api, &at(minutes))
        .args(["--dashboard", "--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--project-url", "https://gitlab.example.com/group/project"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, code);
    out.json()
}

#[test]
fn a_day_of_dashboard_edits_causes_no_wake_of_its_own() {
    let sb = Sandbox::with_files(&["auth.js", "b.js"]);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "tokens compared in variable time",
        json!([{"line": 2, "severity": "critical", "message": "use a constant-time comparison"}]),
    ));
    let mut codes = Vec::new();
    for tick in 0..720 {
        if tick == 360 {
            sb.repo
                .write(&format!("{WATCHED}/b.js"), "// b.js\nmodule.exports = 2;\n");
            sb.repo.commit("change b at noon");
        }
        let out = sb
            .api_tick_cmd(&api, &at(2 * tick))
            .args(["--dashboard", "--fake-sleep", "--llm-url", &ai.base_url()])
            .env("OPENAI_API_KEY", KEY)
            .output();
        codes.push(out.code);
    }
    let wakes = codes.iter().filter(|c| (10..=17).contains(*c)).count();
    assert_eq!(wakes, 2, "only the first run and the noon commit wake");
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 718);
    let issues = gl.issues();
    assert_eq!(issues.len(), 1, "exactly one dashboard issue");
    let page = issues[0]["description"].as_str().unwrap();
    assert!(page.contains("`libs/shared/auth.js`"), "{page}");
    assert!(page.contains("use a constant-time comparison"));
    // The noon wake changed b.js's proposal (a new fingerprint, same text):
    // the page's proposals did not change, so the issue was not edited.
    assert_eq!(issues[0]["edits"], 0, "{:?}", issues[0]);
}

#[test]
fn the_dashboard_is_edited_only_when_the_proposals_change() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "first",
        json!([{"line": 1, "severity": "major", "message": "first finding"}]),
    ));
    let r = api_advised_tick(&sb, &api, &ai, 0, 10);
    assert_eq!(r["writes"][0]["kind"], "dashboard");
    assert_eq!(r["writes"][0]["detail"], "created issue #1");
    let page = gl.issues()[0]["description"].as_str().unwrap().to_string();
    assert!(
        page.contains("[L1](https://gitlab.example.com/group/project/-/blob/"),
        "{page}"
    );
    // A new finding on the next change: one edit.
    ai.answer_always(Reply::evolve(
        "second",
        json!([{"line": 1, "severity": "major", "message": "second finding"}]),
    ));
    sb.repo.write(&format!("{WATCHED}/auth.js"), "// auth v2\n");
    sb.repo.commit("auth v2");
    let r = api_advised_tick(&sb, &api, &ai, 2, 12);
    assert_eq!(r["writes"][0]["detail"], "updated issue #1");
    assert_eq!(gl.issues()[0]["edits"], 1);
    assert!(
        gl.issues()[0]["description"]
            .as_str()
            .unwrap()
            .contains("second finding")
    );
}

#[test]
fn without_the_api_scope_the_tick_says_so_and_carries_on() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::skip("fine"));
    gl.push(
        crate::util::gitlab::Endpoint::Issues,
        crate::util::gitlab::Reply::error(403, "403-insufficient-scope.json"),
    );
    let r = api_advised_tick(&sb, &api, &ai, 0, 10);
    assert_eq!(r["writes"][0]["ok"], false);
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("api scope")),
        "{r}"
    );
    assert_eq!(r["state_written"], true);
    // Tried again on the next wake, not in a loop within the tick.
    assert_eq!(
        gl.requests_to(crate::util::gitlab::Endpoint::Issues).len(),
        1
    );
}

#[test]
fn the_git_source_writes_the_dashboard_to_a_file_and_a_dry_run_writes_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    let file = sb.root().join("dashboard.md");
    let out = sb
        .tick_cmd(&at(0))
        .args(["--dashboard-file", file.to_str().unwrap(), "--dry-run"])
        .output();
    expect_code(&out, 10);
    assert!(!file.exists(), "a dry run writes nothing");
    let out = sb
        .tick_cmd(&at(0))
        .args(["--dashboard-file", file.to_str().unwrap()])
        .output();
    expect_code(&out, 10);
    let page = fs::read_to_string(&file).unwrap();
    assert!(page.starts_with("# sentinel dashboard\n"), "{page}");
    assert!(page.contains("No open proposals."));
    let out = sb.tick_cmd(&at(0)).args(["--dashboard"]).output();
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("--dashboard-file"), "{}", out.stderr);
}
