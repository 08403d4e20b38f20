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
    assert_eq!(code, 2, "a usage error");
    // A dry run is how a configuration is tried: it is refused there too.
    let (code, _) = tick(&sb, &ai, 0, &["--sandbox-branch", "main", "--dry-run"]);
    assert_eq!(code, 2);
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
    // Four commits through the API: both files at the first run; at half
    // past, auth.js carried to the new tip (b.js changed, so its proposal
    // is dropped), then b.js's new proposal on top.
    let posts: Vec<_> = gl
        .requests_to(Endpoint::Commits)
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 4);
    sb.repo
        .git(&["merge-base", "--is-ancestor", "main", "sentinel-sandbox"]);
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

/// Every ref of the sandbox's repository, full names, one per line.
fn refs(sb: &Sandbox) -> String {
    sb.repo.git(&["for-each-ref", "--format=%(refname)"])
}

/// A refused tick: exit 2, a message that names the flag and says `why`, no
/// call, no state and no ref moved.
fn assert_refused(sb: &Sandbox, ai: &FakeOpenAi, extra: &[&str], why: &str) {
    let before = sb
        .repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    let out = sb
        .tick_cmd(&at(0))
        .args(["--llm-url", &ai.base_url(), "--propose", "patches"])
        .args(extra)
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert_eq!(out.code, 2, "{extra:?}: {}", out.stderr);
    assert!(
        out.stderr.contains("`--sandbox-branch") && out.stderr.contains(why),
        "{extra:?}: {}",
        out.stderr
    );
    assert_eq!(ai.count(), 0, "{extra:?}: no call before the refusal");
    assert!(!sb.state.exists(), "{extra:?}: no state written");
    let after = sb
        .repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"]);
    assert_eq!(after, before, "{extra:?}: no ref moved or created");
}

#[test]
fn a_sandbox_spelled_like_the_watched_branch_is_refused() {
    let sb = Sandbox::with_files(&[FILE]);
    // Another branch is checked out, so only the watched branch can refuse.
    sb.repo.git(&["checkout", "-q", "-b", "elsewhere"]);
    sb.repo
        .git(&["update-ref", "refs/remotes/origin/main", "main"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// fixed\n"));
    for (watched, sandbox) in [
        ("heads/main", "main"),
        ("main", "heads/main"),
        ("refs/heads/main", "main"),
        ("main", "refs/heads/main"),
    ] {
        assert_refused(
            &sb,
            &ai,
            &["--branch", watched, "--sandbox-branch", sandbox],
            "is the watched branch `refs/heads/main`",
        );
    }
    // `refs/heads/origin/main` would be what git reads `origin/main` as on
    // the next tick: the sandbox would become the watched branch.
    for sandbox in ["origin/main", "heads/origin/main"] {
        assert_refused(
            &sb,
            &ai,
            &["--branch", "origin/main", "--sandbox-branch", sandbox],
            "a branch that `--branch` names too",
        );
    }
    assert_eq!(
        refs(&sb),
        "refs/heads/elsewhere\nrefs/heads/main\nrefs/remotes/origin/main"
    );
}

#[test]
fn a_full_ref_sandbox_creates_no_nested_ref() {
    for sandbox in ["refs/heads/proposals", "heads/proposals"] {
        let sb = Sandbox::with_files(&[FILE]);
        let ai = FakeOpenAi::start();
        ai.answer_always(evolve_with("// fixed\n"));
        let (code, r) = tick(&sb, &ai, 0, &["--sandbox-branch", sandbox]);
        assert_eq!(code, 10, "{sandbox}: {r}");
        assert_eq!(
            refs(&sb),
            "refs/heads/main\nrefs/heads/proposals",
            "{sandbox}"
        );
        let content = sb
            .repo
            .git(&["show", &format!("refs/heads/proposals:{WATCHED}/{FILE}")]);
        assert_eq!(content, "// fixed", "{sandbox}");
    }
}

#[test]
fn a_sandbox_that_is_the_checked_out_branch_is_refused() {
    let sb = Sandbox::with_files(&[FILE]);
    sb.repo.git(&["checkout", "-q", "-b", "feature"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// fixed\n"));
    for sandbox in ["feature", "heads/feature", "refs/heads/feature"] {
        assert_refused(
            &sb,
            &ai,
            &["--branch", "main", "--sandbox-branch", sandbox],
            "the branch checked out in",
        );
    }
    // With no --branch the checked-out branch is also the watched one.
    assert_refused(
        &sb,
        &ai,
        &["--sandbox-branch", "refs/heads/feature"],
        "is the watched branch",
    );
    // A linked worktree has its own checked-out branch, which `.git/HEAD`
    // of the main clone does not name.
    sb.repo.git(&["checkout", "-q", "main"]);
    let linked = sb.root().join("linked");
    let linked_arg = linked.to_str().unwrap();
    sb.repo
        .git(&["worktree", "add", "-q", linked_arg, "feature"]);
    let out = sb
        .sentinel(["tick", "--json", "--now", &at(0), "--path", WATCHED])
        .args(["--repo", linked_arg, "--state"])
        .arg(&sb.state)
        .args(["--llm-url", &ai.base_url(), "--propose", "patches"])
        .args(["--branch", "main", "--sandbox-branch", "feature"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("checked out in"), "{}", out.stderr);
    assert_eq!(ai.count(), 0);
    assert_eq!(
        sb.repo.git(&["rev-parse", "feature"]),
        sb.repo.git(&["rev-parse", "main"]),
        "the linked worktree's branch did not move"
    );
}

#[test]
fn over_the_gitlab_api_a_sandbox_spelled_like_the_watched_branch_is_refused() {
    use crate::util::gitlab::Api;
    let sb = Sandbox::with_files(&[FILE]);
    let gl = sb.gitlab();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// fixed\n"));
    for (watched, sandbox) in [("main", "refs/heads/main"), ("refs/heads/main", "main")] {
        let mut api = Api::new(&gl);
        api.branch = watched.into();
        let out = sb
            .api_tick_cmd(&api, &at(0))
            .args(["--llm-url", &ai.base_url(), "--propose", "patches"])
            .args(["--sandbox-branch", sandbox])
            .env("OPENAI_API_KEY", KEY)
            .output();
        assert_eq!(out.code, 2, "{watched} / {sandbox}: {}", out.stderr);
        assert!(
            out.stderr.contains("`--sandbox-branch")
                && out.stderr.contains("is the watched branch `main`"),
            "{}",
            out.stderr
        );
    }
    assert!(gl.requests().is_empty(), "refused before any request");
    assert_eq!(ai.count(), 0);
    assert_eq!(refs(&sb), "refs/heads/main");
}

#[test]
fn a_tick_without_patches_resolves_no_branch() {
    let mut sb = Sandbox::with_files(&[FILE]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let log = sb.log_git_calls();
    expect_code(&sb.tick(&at(2), &[]), 0);
    // The tip has not moved: the head is the one found at it, so no git
    // process runs at all (the log is never created).
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(calls.lines().count(), 0, "no git at all: {calls}");
    // With patches on, one `git rev-parse` resolves the branches up front,
    // so a misconfigured sandbox is refused on every tick, a no-op too.
    expect_code(&sb.tick(&at(4), &["--propose", "patches"]), 0);
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(calls.lines().count(), 1, "{calls}");
    assert!(
        calls
            .lines()
            .next()
            .unwrap()
            .contains("rev-parse --symbolic-full-name HEAD"),
        "{calls}"
    );
}
