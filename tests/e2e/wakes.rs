//! All nine wake reasons, end to end: one repository, one fake model
//! provider, injected time, and the exit code of each tick checked in the
//! order the precedence gives them.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Sandbox, at, git_calls};

const AUTH: &str = "src/auth.js";
const DOC_A: &str = "docs/a.md";
const DOC_B: &str = "docs/b.md";

/// A tick that must exit with `code`; returns its report.
#[track_caller]
fn tick(sb: &Sandbox, ai: &FakeOpenAi, minutes: i64, extra: &[&str], code: i32) -> Value {
    let out = sb.advisor_tick_cmd(ai, &at(minutes)).args(extra).output();
    expect_code(&out, code);
    out.json()
}

#[test]
fn invariant_4_every_wake_reason_works_end_to_end_with_its_exit_code() {
    let mut sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.write(DOC_A, "# a\n");
    sb.repo.write(DOC_B, "# b\n");
    sb.repo.commit("three files");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::skip("fine as it is"));
    let day = 24 * 60;
    // Everything after the evidence change runs with the same model.
    let model = ["--model", "gpt-4.1-mini"];

    // 10 first_run: two of three files fit the read limit.
    let r = tick(&sb, &ai, 0, &["--max-reads", "2"], 10);
    assert_eq!(r["pending"], 1);
    // 14 backlog: the third file.
    let r = tick(&sb, &ai, 2, &["--max-reads", "2"], 14);
    assert_eq!(r["pending"], 0);
    // 0 none: nothing happened; the state is not written.
    let r = tick(&sb, &ai, 4, &[], 0);
    assert_eq!(r["state_written"], false);
    // 11 sha_unavailable: the head lookup fails for a passing reason (the
    // tip moved, so git is asked).
    sb.repo.merge_tip();
    sb.fake_git_log("echo 'fatal: simulated outage' >&2; exit 128");
    let r = tick(&sb, &ai, 6, &[], 11);
    sb.real_git();
    assert_eq!(r["verdict"]["reason"], "sha_unavailable");
    // 12 repo_changed: a commit under the watched path.
    sb.repo.write(DOC_A, "# a, edited\n");
    sb.repo.commit("edit a");
    let r = tick(&sb, &ai, 8, &[], 12);
    assert_eq!(r["files"][0]["path"], DOC_A);
    // 13 evidence_changed: another model judges differently.
    let r = tick(&sb, &ai, 10, &model, 13);
    assert_eq!(r["files"].as_array().unwrap().len(), 3);
    // 15 observation_due: the first run's bets come due after 24 h.
    let r = tick(&sb, &ai, day, &model, 15);
    assert_eq!(r["file_reads"], 0, "grading reads nothing");
    assert_eq!(r["llm_calls"], 0);
    // 16 opportunity_due: mature files are reviewed, one per wake.
    let mut reviewed = Vec::new();
    let mut t = 11 * day;
    loop {
        let out = sb.advisor_tick_cmd(&ai, &at(t)).args(model).output();
        match out.code {
            16 => reviewed.push(out.json()["files"][0]["path"].as_str().unwrap().to_string()),
            15 => {}
            0 => break,
            other => panic!("unexpected exit {other}: {}", out.stderr),
        }
        t += 2;
        assert!(reviewed.len() <= 3, "{reviewed:?}");
    }
    reviewed.sort();
    let mut expected = vec![DOC_A.to_string(), DOC_B.to_string(), AUTH.to_string()];
    expected.sort();
    assert_eq!(reviewed, expected);
    // 17 autonomy_due: a fresh runtime error reconsiders the file once.
    let signals = sb.root().join("signals.jsonl");
    fs::write(
        &signals,
        format!(
            "{{\"path\":\"{AUTH}\",\"kind\":\"runtime_error\",\"message\":\"TypeError in sign()\",\"ts\":\"{}\"}}\n",
            at(t - 5)
        ),
    )
    .unwrap();
    let autonomy = [
        "--model",
        "gpt-4.1-mini",
        "--autonomy",
        "controlled",
        "--signals",
        signals.to_str().unwrap(),
    ];
    let before = ai.posts();
    let r = tick(&sb, &ai, t, &autonomy, 17);
    assert_eq!(r["files"][0]["path"], AUTH);
    assert_eq!(
        ai.posts(),
        before + 1,
        "a reconsideration asks the model once"
    );
    // The same signal cannot reopen the same file: later ticks are no-ops.
    let r = tick(&sb, &ai, t + 2 * day, &autonomy, 0);
    assert_eq!(r["verdict"]["detail"]["autonomy"], "no_trigger");
    // 20 busy: another tick holds the lock.
    let _held = crate::util::hold_lock(&sb.state);
    let r = tick(&sb, &ai, t + 2 * day + 2, &autonomy, 20);
    assert_eq!(r["verdict"]["reason"], "busy");
}

/// A no-op whose branch tip has not moved answers its head from the pair
/// the last wake found, read from the ref files: no git process at all,
/// still one head request. A tip that moved is read from the object files,
/// and a commit under the watched path still wakes, loose or packed refs alike.
#[test]
fn a_noop_whose_tip_has_not_moved_starts_no_git() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let log = sb.log_git_calls();

    let out = sb.tick_cmd(&at(2)).output();
    expect_code(&out, 0);
    assert_eq!(out.json()["requests"], 1, "{}", out.stdout);
    assert_eq!(git_calls(&log), Vec::<String>::new());

    // The tip moves outside the watched path: the objects since the
    // remembered head are read from the object files, nothing wakes.
    sb.repo.move_tip();
    expect_code(&sb.tick(&at(4), &[]), 0);
    assert_eq!(git_calls(&log), Vec::<String>::new());

    // Packed refs are read too; the change under the path wakes.
    sb.repo.git(&["pack-refs", "--all", "--prune"]);
    sb.repo
        .write(&format!("{}/a.js", crate::util::WATCHED), "// a, edited\n");
    let head = sb.repo.commit("edit a");
    sb.repo.git(&["pack-refs", "--all", "--prune"]);
    expect_code(&sb.tick(&at(6), &[]), 12);
    git_calls(&log);
    let out = sb.tick_cmd(&at(8)).output();
    expect_code(&out, 0);
    assert_eq!(git_calls(&log), Vec::<String>::new(), "packed, unmoved");
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
}
