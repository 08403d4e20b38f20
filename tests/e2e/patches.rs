//! Acting on EVOLVE, the patch part: the model's proposed content is
//! committed to a sandbox branch, never to the watched one, so sentinel's
//! own commits never wake it.

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Sandbox, WATCHED, at};

const FILE: &str = "auth.js";

fn evolve_with(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "compare tokens in constant time",
        "findings": [{"line": 1, "severity": "major", "message": "timing leak"}],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

fn tick(sb: &Sandbox, ai: &FakeOpenAi, minutes: i64, extra: &[&str]) -> (i32, Value) {
    let out = sb
        .tick_cmd(&at(minutes))
        .args([
            "--fake-sleep",
            "--llm-url",
            &ai.base_url(),
            "--propose",
            "patches",
        ])
        .args(extra)
        .env("OPENAI_API_KEY", KEY)
        .output();
    let json = if out.stdout.is_empty() {
        Value::Null
    } else {
        out.json()
    };
    (out.code, json)
}

#[test]
fn a_day_of_sandbox_commits_causes_no_wake_of_its_own() {
    let sb = Sandbox::with_files(&[FILE, "b.js"]);
    let ai = FakeOpenAi::start();
    let watched_head = sb.repo.head();
    let mut codes = Vec::new();
    for t in 0..720 {
        // A different proposal every tick: if sandbox commits woke sentinel,
        // every tick would be a wake and make another commit.
        ai.answer_always(evolve_with(&format!("// {FILE}, proposal {t}\n")));
        if t == 360 {
            sb.repo.write(&format!("{WATCHED}/b.js"), "// b.js v2\n");
            sb.repo.commit("noon");
        }
        codes.push(tick(&sb, &ai, 2 * t, &[]).0);
    }
    let wakes = codes.iter().filter(|c| (10..=17).contains(*c)).count();
    assert_eq!(
        wakes,
        2,
        "{:?}",
        codes.iter().filter(|c| **c != 0).collect::<Vec<_>>()
    );
    // The sandbox branch holds sentinel's commits; the watched branch only
    // the user's, and the working tree is untouched.
    let sandbox_log = sb.repo.git(&["log", "--format=%s", "sentinel-sandbox"]);
    assert!(
        sandbox_log.contains("sentinel: proposed change to libs/shared/auth.js"),
        "{sandbox_log}"
    );
    let main_log = sb.repo.git(&["log", "--format=%s", "main"]);
    assert!(!main_log.contains("sentinel:"), "{main_log}");
    assert_ne!(
        sb.repo.head(),
        watched_head,
        "only the user's noon commit moved main"
    );
    let status = sb
        .repo
        .git(&["status", "--porcelain", "--untracked-files=no"]);
    assert_eq!(status, "", "the working tree and index are untouched");
}

#[test]
fn a_patch_is_logged_in_json_and_the_proposal_records_its_commit() {
    let sb = Sandbox::with_files(&[FILE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// fixed\n"));
    let (code, r) = tick(&sb, &ai, 0, &[]);
    assert_eq!(code, 10);
    let patch = r["writes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "patch")
        .unwrap_or_else(|| panic!("no patch write in {r}"));
    assert_eq!(patch["ok"], true);
    let commit = patch["detail"]
        .as_str()
        .unwrap()
        .trim_start_matches("commit ")
        .to_string();
    assert_eq!(sb.repo.git(&["rev-parse", "sentinel-sandbox"]), commit);
    let content = sb
        .repo
        .git(&["show", &format!("sentinel-sandbox:{WATCHED}/{FILE}")]);
    assert_eq!(content, "// fixed");
}

#[test]
fn an_identical_or_oversized_proposal_is_not_committed() {
    let sb = Sandbox::with_files(&[FILE]);
    let ai = FakeOpenAi::start();
    let current = sb.repo.git(&["show", &format!("HEAD:{WATCHED}/{FILE}")]) + "\n";
    ai.answer_always(evolve_with(&current));
    let (code, r) = tick(&sb, &ai, 0, &[]);
    assert_eq!(code, 10);
    let patch = r["writes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "patch")
        .unwrap();
    assert_eq!(patch["ok"], false);
    assert!(
        patch["detail"].as_str().unwrap().contains("identical"),
        "{patch}"
    );
    assert!(
        sb.repo
            .git(&["branch", "--list", "sentinel-sandbox"])
            .is_empty()
    );
}

#[test]
fn the_watched_branch_is_never_the_sandbox_and_a_dry_run_commits_nothing() {
    let sb = Sandbox::with_files(&[FILE]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// fixed\n"));
    let (code, _) = tick(&sb, &ai, 0, &["--sandbox-branch", "main"]);
    assert_eq!(code, 1);
    let (code, _) = tick(&sb, &ai, 0, &["--dry-run"]);
    assert_eq!(code, 10);
    assert!(
        sb.repo
            .git(&["branch", "--list", "sentinel-sandbox"])
            .is_empty()
    );
    expect_code(&sb.tick_cmd(&at(0)).output(), 10);
}

#[test]
fn over_the_gitlab_api_patches_go_to_the_sandbox_branch_and_never_wake_it() {
    use crate::util::gitlab::{Api, Endpoint};
    let sb = Sandbox::with_files(&[FILE, "b.js"]);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let ai = FakeOpenAi::start();
    let mut codes = Vec::new();
    for t in 0..60 {
        ai.answer_always(evolve_with(&format!("// {FILE}, proposal {t}\n")));
        if t == 30 {
            sb.repo.write(&format!("{WATCHED}/b.js"), "// b.js v2\n");
            sb.repo.commit("half past");
        }
        let out = sb
            .api_tick_cmd(&api, &at(2 * t))
            .args([
                "--fake-sleep",
                "--llm-url",
                &ai.base_url(),
                "--propose",
                "patches",
            ])
            .env("OPENAI_API_KEY", KEY)
            .output();
        codes.push(out.code);
    }
    let wakes = codes.iter().filter(|c| (10..=17).contains(*c)).count();
    assert_eq!(wakes, 2, "{codes:?}");
    // Three commits through the API: both files at the first run, b.js again
    // at half past; each on the sandbox branch.
    let posts: Vec<_> = gl
        .requests_to(Endpoint::Commits)
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 3);
    let log = sb.repo.git(&["log", "--format=%s", "sentinel-sandbox"]);
    assert!(
        log.contains("sentinel: proposed change to libs/shared/auth.js"),
        "{log}"
    );
    assert!(
        !sb.repo
            .git(&["log", "--format=%s", "main"])
            .contains("sentinel:")
    );
}
