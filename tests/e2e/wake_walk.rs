//! The wake's walk over the commits since the remembered head is read from
//! the objects: from the object files themselves, or, in a clone whose
//! objects git must read (a partial clone), through the same `git cat-file
//! --batch` that then reads the changed files. A merge is left to the usual
//! lookups (`git log -1`, `git diff-tree`, `git log`) as before.

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, git_calls};

#[test]
fn a_partial_clones_one_file_wake_starts_exactly_one_git_process() {
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
    let calls = git_calls(&log);
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert!(calls[0].ends_with(" cat-file --batch"), "{calls:#?}");
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
    let out = out.json();
    assert_eq!(out["verdict"]["reason"], "repo_changed");
    assert_eq!(out["files"][0]["path"], format!("{WATCHED}/b.js"));
    assert_eq!(out["files"].as_array().unwrap().len(), 1);
    assert_eq!(
        out["requests_by_kind"],
        serde_json::json!({"head": 1, "list": 0, "read": 1, "compare": 1, "history": 1})
    );
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
fn a_merge_wakes_through_the_usual_lookups_and_judges_both_sides() {
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
    // The objects show a merge: the head is asked of `git log -1`, and no
    // `git log --raw` is started to meet the same merge.
    let calls = git_calls(&log);
    assert!(calls.iter().any(|c| c.contains(" log -1 ")), "{calls:#?}");
    assert!(!calls.iter().any(|c| c.contains("--raw")), "{calls:#?}");
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
