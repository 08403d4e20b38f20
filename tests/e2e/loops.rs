//! Loops that reopen in real conditions: a mistyped flag, a state moved on
//! purpose. Each test is named after the loop it closes.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, snapshot};

#[track_caller]
fn report(out: &crate::util::Output, code: i32) -> Value {
    expect_code(out, code);
    out.json()
}

/// Files under the watched path and one beside it.
fn two_dirs() -> Sandbox {
    let sb = Sandbox::new();
    for name in ["a.js", "b.js", "c.md"] {
        sb.repo
            .write(&format!("{WATCHED}/{name}"), format!("// {name}\n"));
    }
    sb.repo.write("libs/other/x.js", "// x\n");
    sb.repo.commit("two directories");
    sb
}

#[test]
fn invariant_14_a_mistyped_path_forgets_nothing() {
    let sb = two_dirs();
    report(&sb.tick(&at(0), &[]), 10);
    let before = snapshot(&sb.state).expect("a state");

    for (minute, typo) in [(2, "libs/sharde"), (4, "libs")] {
        let out = sb
            .sentinel(["tick", "--json", "--now", &at(minute), "--path", typo])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .output();
        expect_code(&out, 1);
        assert_eq!(out.stdout, "");
        assert!(
            out.stderr
                .contains(&format!("path `{WATCHED}`, not to this tick's"))
                && out.stderr.contains(&format!("path `{typo}`"))
                && out.stderr.contains("--rescope")
                && out.stderr.contains("--state"),
            "{}",
            out.stderr
        );
        assert_eq!(snapshot(&sb.state), Some(before.clone()), "state untouched");
        assert!(!sb.journal().exists(), "no journal line for a refused tick");
    }

    // The right path again: nothing was forgotten, nothing to do.
    let r = report(&sb.tick(&at(6), &[]), 0);
    assert_eq!(r["verdict"]["reason"], "none");
    assert_eq!(sb.stats()["novelty"]["tracked_files"], 3);
}

#[test]
fn a_mistyped_branch_is_refused_before_a_lookup_on_a_scoped_state() {
    let sb = two_dirs();
    report(&sb.tick(&at(0), &[]), 10);
    let before = snapshot(&sb.state);
    let out = sb.tick(&at(2), &["--branch", "mian"]);
    expect_code(&out, 1);
    assert!(out.stderr.contains("branch `mian`"), "{}", out.stderr);
    assert_eq!(snapshot(&sb.state), before);
    assert!(!sb.journal().exists());
}

#[test]
fn rescope_moves_the_state_on_purpose_and_keeps_the_decisions_of_files_that_stay() {
    let sb = two_dirs();
    report(&sb.tick(&at(0), &[]), 10);
    let wider = |minute: i64, extra: &[&str]| {
        sb.sentinel(["tick", "--json", "--now", &at(minute), "--path", "libs"])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .args(extra)
            .output()
    };
    let r = report(&wider(2, &["--rescope"]), 12);
    let outcome = |path: &str| -> String {
        r["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .map(|f| f["outcome"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("{path} missing from {r}"))
    };
    assert_eq!(outcome(&format!("{WATCHED}/a.js")), "reused");
    assert_eq!(outcome(&format!("{WATCHED}/c.md")), "reused");
    assert_eq!(outcome("libs/other/x.js"), "needs_review");
    assert_eq!(r["requests_by_kind"]["list"], 1, "listed whole");
    assert_eq!(
        r["requests_by_kind"]["read"], 1,
        "only the new file is read"
    );
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("new scope")),
        "{r}"
    );
    // The state now belongs to the wider scope: the old one is refused.
    report(&wider(4, &[]), 0);
    expect_code(&sb.tick(&at(6), &[]), 1);
}

#[test]
fn a_state_without_a_scope_adopts_the_first_ticks() {
    let sb = two_dirs();
    report(&sb.tick(&at(0), &[]), 10);
    // A state written before scopes existed: the same document without one.
    let text = fs::read_to_string(&sb.state).unwrap();
    let start = text.find("\"scope\":").expect("a scope in the header");
    let end = start + text[start..].find("},").unwrap() + 2;
    fs::write(&sb.state, format!("{}{}", &text[..start], &text[end..])).unwrap();
    assert!(!fs::read_to_string(&sb.state).unwrap().contains("\"scope\""));

    // Another path is adopted, not refused: there is no scope to refuse.
    let out = sb
        .sentinel(["tick", "--json", "--now", &at(2), "--path", "libs"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    let code = out.code;
    assert!([0, 12].contains(&code), "{}", out.stderr);
    // Adopted on the next save: the first waking tick writes the scope.
    sb.repo.write("libs/other/y.js", "// y\n");
    sb.repo.commit("one more");
    let out = sb
        .sentinel(["tick", "--json", "--now", &at(4), "--path", "libs"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    report(&out, 12);
    assert!(
        fs::read_to_string(&sb.state)
            .unwrap()
            .contains("\"path\":\"libs\"")
    );
    expect_code(&sb.tick(&at(6), &[]), 1);
}

/// The head a tick finds at a branch tip belongs to its watched path: a
/// state moved to another path at the same tip asks git again instead of
/// reusing the old path's head.
#[test]
fn a_rescope_at_the_same_tip_asks_git_for_the_new_paths_head() {
    let sb = two_dirs();
    sb.repo.write("libs/other/x.js", "// x, edited\n");
    let tip = sb.repo.commit("only the other directory");
    report(&sb.tick(&at(0), &[]), 10);
    assert_ne!(sb.stats()["wake"]["last_head"], tip.as_str());
    let other = |minute: i64, extra: &[&str]| {
        sb.sentinel(["tick", "--json", "--now", &at(minute)])
            .args(["--path", "libs/other"])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .args(extra)
            .output()
    };
    report(&other(2, &["--rescope"]), 12);
    assert_eq!(sb.stats()["wake"]["last_head"], tip.as_str());
    report(&other(4, &[]), 0);
}
