//! The wake's lookups over the commits since the remembered head are read
//! from the objects in-process (gix), merges included; a clone whose
//! objects only git can fetch (a partial clone) is read through git, and
//! the report says which reader answered.

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, git_calls};

#[test]
fn a_partial_clone_is_read_through_git_and_says_so() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js", "c.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    // Objects a promisor remote may fetch on demand: only git knows them.
    sb.repo.git(&["config", "remote.origin.promisor", "true"]);
    let log = sb.log_git_calls();
    sb.repo.move_tip();
    sb.repo.write(&format!("{WATCHED}/b.js"), "// b, edited\n");
    let head = sb.repo.commit("edit b");
    sb.repo.move_tip();

    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    // gix declines the clone once: git answers every lookup.
    let calls = git_calls(&log);
    for lookup in [
        " log -1 ",
        " diff-tree ",
        " log --no-renames",
        " cat-file --batch",
    ] {
        assert!(
            calls.iter().any(|c| c.contains(lookup)),
            "{lookup} {calls:#?}"
        );
    }
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
    let out = out.json();
    assert_eq!(out["verdict"]["reason"], "repo_changed");
    assert_eq!(out["files"][0]["path"], format!("{WATCHED}/b.js"));
    assert_eq!(out["files"].as_array().unwrap().len(), 1);
    assert_eq!(
        out["requests_by_kind"],
        serde_json::json!({"head": 1, "list": 0, "read": 1, "compare": 1, "history": 1})
    );
    assert_eq!(out["reader"], "git");
}

#[test]
fn a_tip_moved_outside_the_watched_path_costs_no_git_process_and_no_wake() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let before = sb.stats()["wake"]["last_head"].clone();
    let log = sb.log_git_calls();
    sb.repo.write("elsewhere/x.js", "// not watched\n");
    sb.repo.commit("outside");

    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 0);
    assert_eq!(git_calls(&log), Vec::<String>::new());
    assert_eq!(out.json()["files"].as_array().map_or(0, Vec::len), 0);
    assert_eq!(sb.stats()["wake"]["last_head"], before);
}

#[test]
fn a_merge_wakes_without_a_git_process_and_judges_both_sides() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js", "c.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let main = sb.repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]);
    sb.repo.git(&["checkout", "-q", "-b", "side"]);
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a, on the side\n");
    sb.repo.commit("side");
    sb.repo.git(&["checkout", "-q", &main]);
    sb.repo.write(&format!("{WATCHED}/c.js"), "// c, on main\n");
    sb.repo.commit("main");
    sb.repo.git(&["merge", "-q", "--no-edit", "side"]);
    let merged = sb.repo.head();
    let log = sb.log_git_calls();

    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    // The head past a merge is found as `git log -1` finds it; only the
    // rollback lookup over a range that is not one line asks git.
    let calls = git_calls(&log);
    assert!(
        calls.iter().all(|c| c.contains(" log --no-renames")),
        "{calls:#?}"
    );
    assert_eq!(sb.stats()["wake"]["last_head"], merged.as_str());
    let out = out.json();
    let mut judged: Vec<&str> = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    judged.sort();
    let (a, c) = (format!("{WATCHED}/a.js"), format!("{WATCHED}/c.js"));
    assert_eq!(judged, [a.as_str(), c.as_str()]);
}
