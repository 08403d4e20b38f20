//! What a peer sends is bounded before sentinel repeats it in its line and
//! its `--json`, as reasons are: a merge request's 3 MB `web_url` is not
//! repeated whole, three times (the notes, the writes, the sandbox report).

use serde_json::json;

use crate::util::gitlab::{Endpoint, Reply as GitLabReply};
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Sandbox, at, notes};

#[test]
fn a_3_mb_merge_request_url_is_cut_before_it_reaches_a_line_or_the_json() {
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    let answer = json!({
        "action": "EVOLVE",
        "reason": "compare tokens in constant time",
        "findings": [],
        "content": "// fixed\n",
    });
    ai.answer_always(Reply::json(200, &completion(&answer.to_string(), None)));
    let huge = "a".repeat(3 << 20);
    // The search for an open merge request, then the one it opens.
    gl.push(Endpoint::MergeRequests, GitLabReply::json(200, &json!([])));
    gl.push(
        Endpoint::MergeRequests,
        GitLabReply::json(
            201,
            &json!({ "iid": 1, "web_url": format!("https://gitlab.example/{huge}") }),
        ),
    );
    let out = sb
        .api_tick_cmd(&crate::util::gitlab::Api::new(&gl), &at(0))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches", "--merge-request"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert_eq!(out.code, 10, "{}", out.stderr);
    let head = &out.stdout[..out.stdout.len().min(3000)];
    assert!(notes(&out.json()).contains("opened !1"), "{head}");
    assert!(
        out.stdout.len() < 100_000,
        "{} bytes of --json",
        out.stdout.len()
    );
    assert!(
        out.stderr.len() < 20_000,
        "a line of {} bytes",
        out.stderr.len()
    );
}
