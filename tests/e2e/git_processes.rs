//! How many git processes a small wake starts on the git source: each costs
//! about what a whole no-op does, so the clone is read in-process (gix):
//! the head, the compare, the rollback lookup and the file it judges.

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, git_calls};

#[test]
fn a_one_file_wake_starts_no_git_process() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js", "c.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let log = sb.log_git_calls();
    sb.repo.move_tip();
    sb.repo.write(&format!("{WATCHED}/b.js"), "// b, edited\n");
    let head = sb.repo.commit("edit b");
    sb.repo.move_tip();

    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    let calls = git_calls(&log);
    assert_eq!(calls, Vec::<String>::new());
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
    let out = out.json();
    assert_eq!(out["verdict"]["reason"], "repo_changed");
    assert_eq!(out["files"][0]["path"], format!("{WATCHED}/b.js"));
    assert_eq!(out["files"].as_array().unwrap().len(), 1);
    // The same requests as when the head, the compare and the rollback
    // lookup were a process each.
    assert_eq!(
        out["requests_by_kind"],
        serde_json::json!({"head": 1, "list": 0, "read": 1, "compare": 1, "history": 1})
    );
    assert_eq!(out["reader"], "gix");
}

#[test]
fn a_first_run_starts_no_git_process() {
    let names: Vec<String> = (0..80).map(|i| format!("f{i}.js")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut sb = Sandbox::with_files(&names);
    // More files than a wake reads one by one, packed as a clone's are.
    sb.repo.git(&["gc", "-q"]);
    let log = sb.log_git_calls();
    let out = sb.tick(&at(0), &[]);
    expect_code(&out, 10);
    // No `log -1`, no `ls-tree`, no `cat-file`.
    assert_eq!(git_calls(&log), Vec::<String>::new());
    let out = out.json();
    assert_eq!(out["files"].as_array().unwrap().len(), names.len());
    // Counted as the listing and the reads they stand for.
    assert_eq!(out["requests_by_kind"]["list"], 1);
    assert_eq!(out["requests_by_kind"]["read"], names.len());
}
