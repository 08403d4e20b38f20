//! A stuck file (rewritten by an agent more often than `--max-rewrites`
//! allows) ends: `sentinel reset PATH` hands it over at the next tick, the
//! mark expires once its rewrites left the window, and `explain` shows the
//! count and the expiry.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at};

const MINUTES_PER_DAY: i64 = 24 * 60;

fn file() -> String {
    format!("{WATCHED}/a.js")
}

/// `tick --llm off` at `minute`; its report.
#[track_caller]
fn tick(sb: &Sandbox, minute: i64) -> (i32, Value) {
    let out = sb.tick_cmd(&at(minute)).args(["--llm", "off"]).output();
    assert!(
        [0, 10, 12, 14].contains(&out.code),
        "minute {minute}: {}",
        out.stderr
    );
    let code = out.code;
    (code, if code == 0 { Value::Null } else { out.json() })
}

fn outcome(r: &Value) -> String {
    r["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["path"] == file().as_str())
        .map(|f| f["outcome"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

/// An outer-loop agent rewrites the file and records it; a formatter then
/// rewrites the agent's work, so every tick hands the file over again,
/// until the fourth finds it stuck. Returns the minute of that tick.
fn make_stuck(sb: &Sandbox) -> i64 {
    for round in 0..4 {
        let minute = 10 * round;
        let (_, r) = tick(sb, minute);
        if round == 3 {
            assert_eq!(outcome(&r), "stuck", "{r}");
            return minute;
        }
        assert_eq!(outcome(&r), "needs_review", "round {round}: {r}");
        let full = sb.repo.root.join(file());
        let mut text = fs::read_to_string(&full).unwrap();
        text.push_str("// touched by the agent\n");
        fs::write(&full, &text).unwrap();
        sb.repo.commit("agent");
        let out = sb
            .sentinel([
                "record",
                &file(),
                "--decision",
                "evolved",
                "--path",
                WATCHED,
            ])
            .args(["--now", &at(minute + 1)])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .output();
        expect_code(&out, 0);
        fs::write(&full, text.replace("// touched", "//  touched")).unwrap();
        sb.repo.commit("formatter");
    }
    unreachable!()
}

#[test]
fn a_reset_stuck_file_is_handed_over_by_the_next_tick_without_a_change() {
    let sb = Sandbox::with_files(&["a.js"]);
    let minute = make_stuck(&sb);
    let out = sb
        .sentinel(["reset", &file(), "--now", &at(minute + 1)])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 0);
    assert!(out.stdout.contains("no longer stuck"), "{}", out.stdout);
    // Nothing changed in the clone: the reset alone wakes the next tick.
    let (code, r) = tick(&sb, minute + 2);
    assert_eq!((code, outcome(&r)), (14, "needs_review".to_string()), "{r}");
    // Handed over once: the tick after is a no-op.
    assert_eq!(tick(&sb, minute + 3).0, 0);
}

#[test]
fn a_stuck_mark_expires_when_the_rewrite_window_has_passed() {
    let sb = Sandbox::with_files(&["a.js"]);
    let minute = make_stuck(&sb);
    // Six days on, a person's edit finds it still stuck.
    sb.repo.write(&file(), "// a.js, by a person\n");
    sb.repo.commit("a person");
    let (_, r) = tick(&sb, minute + 6 * MINUTES_PER_DAY);
    assert_eq!(outcome(&r), "stuck", "{r}");
    // Eleven days on, the rewrites left the 7-day window: handed over.
    sb.repo.write(&file(), "// a.js, by a person again\n");
    sb.repo.commit("a person again");
    let (_, r) = tick(&sb, minute + 11 * MINUTES_PER_DAY);
    assert_eq!(outcome(&r), "needs_review", "{r}");
}

#[test]
fn explain_shows_the_rewrite_count_and_when_a_stuck_file_is_handed_over_again() {
    let sb = Sandbox::with_files(&["a.js"]);
    let minute = make_stuck(&sb);
    let explain = |m: i64| {
        let out = sb
            .sentinel(["explain", &file(), "--json", "--path", WATCHED])
            .args(["--now", &at(m), "--llm", "off"])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .output();
        expect_code(&out, 0);
        out.json()
    };
    let e = explain(minute + 1);
    // The first of the three rewrites was at minute 1: it leaves the window 7 days on.
    let until = at(1 + 7 * MINUTES_PER_DAY);
    assert_eq!(e["rewrites"]["in_window"], 3, "{e}");
    assert_eq!(e["rewrites"]["max"], 3, "{e}");
    let shown = e["rewrites"]["stuck_until"].as_str().unwrap().to_string();
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(&shown).unwrap(),
        chrono::DateTime::parse_from_rfc3339(&until).unwrap()
    );
    let verdict = e["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with("stuck: rewritten 3 time(s) in 7 days (--max-rewrites 3)"),
        "{verdict}"
    );
    let e = explain(minute + 8 * MINUTES_PER_DAY);
    assert_eq!(e["rewrites"]["stuck_until"], Value::Null, "{e}");
    assert!(
        e["verdict"]
            .as_str()
            .unwrap()
            .starts_with("stuck mark expired"),
        "{e}"
    );
}
