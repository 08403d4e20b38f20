//! One merge request of the sandbox branch on GitLab (`--merge-request`),
//! against the fake GitLab: opened once when the first proposal lands,
//! edited only when the open proposals change, closed when none is open,
//! and a merged one makes its files own output without a call.

use serde_json::{Value, json};

use crate::util::gitlab::{Api, FakeGitLab};
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Sandbox, WATCHED, at};

fn evolve(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "compare tokens in constant time",
        "findings": [{"line": 1, "severity": "major", "message": "timing leak"}],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

fn tick(sb: &Sandbox, gl: &FakeGitLab, ai: &FakeOpenAi, minute: i64) -> Value {
    let out = sb
        .api_tick_cmd(&Api::new(gl), &at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches", "--merge-request"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert!(
        [0, 10, 12].contains(&out.code),
        "minute {minute}: {}",
        out.stderr
    );
    if out.stdout.is_empty() {
        Value::Null
    } else {
        out.json()
    }
}

/// The merge request writes the fake received: (method, target).
fn mr_writes(gl: &FakeGitLab) -> Vec<String> {
    gl.requests()
        .iter()
        .filter(|r| r.target.contains("/merge_requests") && r.method != "GET")
        .map(|r| format!("{} {}", r.method, r.target))
        .collect()
}

fn human_commit(sb: &Sandbox, name: &str, content: &str) {
    sb.repo.write(&format!("{WATCHED}/{name}"), content);
    sb.repo.commit(&format!("a person edits {name}"));
}

#[test]
fn the_merge_request_is_opened_once_edited_when_the_set_changes_and_closed_when_empty() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve("// fixed\n"));
    let r = tick(&sb, &gl, &ai, 0);
    let mrs = gl.merge_requests();
    assert_eq!(mrs.len(), 1, "{r}");
    assert_eq!(mrs[0]["state"], "opened");
    assert_eq!(mrs[0]["source_branch"], "sentinel-sandbox");
    assert_eq!(mrs[0]["target_branch"], "main");
    let described = mrs[0]["description"].as_str().unwrap().to_string();
    for file in ["a.js", "b.js"] {
        assert!(
            described.contains(&format!("{WATCHED}/{file}")),
            "{described}"
        );
    }
    assert!(described.contains("timing leak"), "{described}");
    assert!(
        described.contains("compare tokens in constant time"),
        "{described}"
    );

    // A no-op: no call. A wake whose proposals stay the same (a new file,
    // judged SKIP, moves the tip): the sandbox is rebuilt, the merge
    // request is not edited.
    ai.answer_always(Reply::skip("fine as it is"));
    gl.clear_requests();
    tick(&sb, &gl, &ai, 2);
    human_commit(&sb, "c.js", "// c.js\n");
    let r = tick(&sb, &gl, &ai, 4);
    assert_eq!(r["sandbox"]["rebuilt"], true, "{r}");
    assert_eq!(mr_writes(&gl), Vec::<String>::new());
    assert_eq!(gl.merge_requests()[0]["edits"], 0);
    sb.repo
        .git(&["merge-base", "--is-ancestor", "main", "sentinel-sandbox"]);

    // b.js changes: its proposal is dropped, the description edited once.
    human_commit(&sb, "b.js", "// b.js, by a person\n");
    tick(&sb, &gl, &ai, 6);
    let mr = &gl.merge_requests()[0];
    assert_eq!(
        (mr["edits"].clone(), mr["state"].clone()),
        (json!(1), json!("opened"))
    );
    let described = mr["description"].as_str().unwrap();
    assert!(
        !described.contains(&format!("{WATCHED}/b.js")),
        "{described}"
    );
    assert_eq!(mr["title"], "sentinel: 1 proposed change");

    // a.js changes too: nothing is open, the merge request is closed.
    human_commit(&sb, "a.js", "// a.js, by a person\n");
    let r = tick(&sb, &gl, &ai, 8);
    let mrs = gl.merge_requests();
    assert_eq!(mrs.len(), 1, "opened once: {mrs:?}");
    assert_eq!(mrs[0]["state"], "closed", "{r}");
    assert_eq!(
        (mrs[0]["edits"].clone(), mrs[0]["state_changes"].clone()),
        (json!(1), json!(1))
    );
    // Nothing more to do on the next wake.
    gl.clear_requests();
    human_commit(&sb, "c.js", "// c.js v2\n");
    tick(&sb, &gl, &ai, 10);
    assert!(
        gl.requests()
            .iter()
            .all(|r| !r.target.contains("/merge_requests")),
        "{:?}",
        gl.requests()
            .iter()
            .map(|r| r.target.clone())
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_merged_merge_request_makes_its_files_own_output_without_a_call() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve("// fixed\n"));
    tick(&sb, &gl, &ai, 0);
    let calls = ai.count();
    assert_eq!(calls, 2);
    // A person merges it.
    sb.repo
        .git(&["merge", "-q", "--ff-only", "sentinel-sandbox"]);
    gl.mark_merged(1);
    let r = tick(&sb, &gl, &ai, 2);
    assert_eq!(ai.count(), calls, "own output costs no call: {r}");
    let mr = &gl.merge_requests()[0];
    assert_eq!(mr["state"], "merged");
    assert_eq!(
        mr["state_changes"], 0,
        "a merged merge request is not closed"
    );
    assert_eq!(mr_writes(&gl).len(), 1, "only the POST that opened it");
}
