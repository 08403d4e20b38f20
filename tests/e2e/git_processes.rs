//! How many git processes a small wake starts on the git source: each costs
//! about what a whole no-op does, so a 1-file wake reads the commits since
//! the remembered head and the file it judges from the object files.

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
}
