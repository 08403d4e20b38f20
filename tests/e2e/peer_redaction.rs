//! Every text that leaves for GitLab is redacted where the request is
//! built: a model that quotes the GitLab token and the provider key in its
//! reason and findings (the file it read held them) gets neither into a
//! commit, the merge request or the dashboard issue.

use serde_json::json;

use crate::util::gitlab::{Api, FakeGitLab, TOKEN};
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Sandbox, WATCHED, at};

/// An EVOLVE whose words echo both secrets; its content holds none.
fn evolve_echoing_secrets(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": format!("the config holds PRIVATE-TOKEN {TOKEN} and the key {KEY}"),
        "findings": [
            {"line": 1, "severity": "critical", "message": format!("hard-coded {KEY}")},
            {"line": 1, "severity": "major", "message": format!("token {TOKEN} in the clear")},
        ],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

fn tick(sb: &Sandbox, gl: &FakeGitLab, ai: &FakeOpenAi, minute: i64) {
    let out = sb
        .api_tick_cmd(&Api::new(gl), &at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches", "--merge-request", "--dashboard"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert!(
        [10, 12].contains(&out.code),
        "minute {minute}: {}",
        out.stderr
    );
}

#[test]
fn no_request_body_sent_to_gitlab_carries_a_secret_the_model_echoed() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_echoing_secrets("// fixed\n"));
    tick(&sb, &gl, &ai, 0);
    // A second wake changes the set of proposals: the merge request and
    // the dashboard are edited, the sandbox rebuilt.
    sb.repo
        .write(&format!("{WATCHED}/b.js"), "// b.js, by a person\n");
    sb.repo.commit("a person edits b");
    ai.answer_always(evolve_echoing_secrets("// fixed again\n"));
    tick(&sb, &gl, &ai, 2);

    let written: Vec<_> = gl
        .requests()
        .into_iter()
        .filter(|r| !r.body.is_empty())
        .collect();
    let kinds = |what: &str| written.iter().filter(|r| r.target.contains(what)).count();
    assert!(kinds("repository/commits") > 0, "a commit was sent");
    assert!(kinds("merge_requests") > 0, "the merge request was sent");
    assert!(kinds("issues") > 0, "the dashboard was sent");
    for r in &written {
        let body = String::from_utf8_lossy(&r.body);
        for secret in [TOKEN, KEY] {
            assert!(
                !body.contains(secret),
                "{} {} carries a secret: {body}",
                r.method,
                r.target
            );
        }
    }
    // The words are kept, only the secrets masked.
    let mr = &gl.merge_requests()[0];
    assert!(
        mr["description"].as_str().unwrap().contains("hard-coded"),
        "{mr}"
    );
}
