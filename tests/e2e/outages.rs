//! A GitLab outage is visible and costs no upload: against a fake GitLab on
//! 127.0.0.1 that answers 503, each outage tick says on stderr what failed,
//! since when and how many ticks in a row; one that learns nothing (head
//! lookup and listing both fail) leaves the state byte for byte as it was
//! and is counted in the no-op journal; `stats` and the Prometheus output
//! count the outage ticks; the next save folds them in.

use std::fs;

use serde_json::{Value, json};

use crate::util::gitlab::{Api, Endpoint, FakeGitLab, Reply};
use crate::util::{Output, Sandbox, at, snapshot};
use crate::{FIVE, expect_code};

/// A sandbox with five files, a fake GitLab and a first run behind it.
fn after_first_run() -> (Sandbox, FakeGitLab) {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    expect_code(&sb.api_tick_cmd(&Api::new(&gl), &at(0)).output(), 10);
    (sb, gl)
}

/// The next answer of `endpoint` is GitLab's 503 page.
fn down(gl: &FakeGitLab, endpoint: Endpoint) {
    gl.push(endpoint, Reply::html(503, "503.html"));
}

#[track_caller]
fn tick(sb: &Sandbox, gl: &FakeGitLab, now: &str, code: i32) -> (Output, Value) {
    let out = sb.api_tick_cmd(&Api::new(gl), now).output();
    expect_code(&out, code);
    let report = out.json();
    (out, report)
}

fn stats_text(sb: &Sandbox, format: &str) -> String {
    let out = sb
        .sentinel(["stats", "--format", format, "--state"])
        .arg(&sb.state)
        .output();
    expect_code(&out, 0);
    out.stdout
}

#[test]
fn an_outage_that_learns_nothing_leaves_the_state_byte_for_byte_and_says_so_every_tick() {
    let (sb, gl) = after_first_run();
    let before = snapshot(&sb.state).unwrap();
    for (i, minute) in [2, 4, 6].into_iter().enumerate() {
        down(&gl, Endpoint::Commits);
        down(&gl, Endpoint::Tree);
        let (out, report) = tick(&sb, &gl, &at(minute), 11);
        assert_eq!(
            snapshot(&sb.state).as_ref(),
            Some(&before),
            "outage tick {} rewrote the state",
            i + 1
        );
        assert_eq!(report["state_written"], false);
        assert_eq!(
            report["requests_by_kind"],
            json!({"head": 1, "list": 1, "read": 0, "compare": 0, "history": 0})
        );
        let n = i as u64 + 1;
        assert_eq!(
            report["outage"],
            json!({"ticks": n, "consecutive": n, "since": at(2), "last": at(minute)})
        );
        let line = out.stderr_line();
        let ticks = if n == 1 { "tick" } else { "ticks" };
        assert!(
            line.starts_with("sentinel: outage (sha_unavailable: "),
            "{line}"
        );
        assert!(line.contains("503"), "what failed: {line}");
        assert!(
            line.contains(&format!(
                "): {n} {ticks} in a row since {} ({n} in all); 0 files",
                at(2)
            )),
            "{line}"
        );
        assert!(line.contains("listing failed"), "{line}");
        assert!(
            line.ends_with("; nothing was learned: the state was left as it was"),
            "{line}"
        );
    }
    assert_eq!(gl.queued(), 0);
    let journal = fs::read_to_string(sb.journal()).unwrap();
    assert_eq!(
        journal,
        format!(
            "sentinel-noops epoch=1\n{} !outage\n{} !outage\n{} !outage\n",
            at(2),
            at(4),
            at(6)
        )
    );
}

#[test]
fn stats_count_the_outage_ticks_and_the_next_save_folds_them_in() {
    let (sb, gl) = after_first_run();
    for minute in [2, 4, 6] {
        down(&gl, Endpoint::Commits);
        down(&gl, Endpoint::Tree);
        tick(&sb, &gl, &at(minute), 11);
    }
    let stats = sb.stats();
    assert_eq!(
        stats["outage"],
        json!({"ticks": 3, "consecutive": 3, "since": at(2), "last": at(6), "unsaved": 3})
    );
    assert_eq!(
        (&stats["wake"]["ticks"], &stats["wake"]["wakes"]),
        (&json!(4), &json!(4))
    );
    assert_eq!(
        stats["wake"]["by_reason"],
        json!({"first_run": 1, "sha_unavailable": 3})
    );
    let prom = stats_text(&sb, "prometheus");
    let last = chrono::DateTime::parse_from_rfc3339(&at(6))
        .unwrap()
        .timestamp();
    for metric in [
        "sentinel_outage_ticks_total 3\n".to_string(),
        "sentinel_outage_consecutive_ticks 3\n".to_string(),
        format!("sentinel_last_outage_timestamp_seconds {last}\n"),
        "sentinel_wakes_total{reason=\"sha_unavailable\"} 3\n".to_string(),
    ] {
        assert!(prom.contains(&metric), "{metric} missing from\n{prom}");
    }
    let table = stats_text(&sb, "table");
    assert!(table.contains("│ consecutive     │ 3 "), "{table}");

    // GitLab answers again, nothing changed: a no-op, which ends the run.
    let before = snapshot(&sb.state);
    tick(&sb, &gl, &at(8), 0);
    assert_eq!(snapshot(&sb.state), before);
    let stats = sb.stats();
    assert_eq!(
        stats["outage"],
        json!({"ticks": 3, "consecutive": 0, "since": null, "last": at(6), "unsaved": 3})
    );
    assert!(stats_text(&sb, "prometheus").contains("sentinel_outage_consecutive_ticks 0\n"));

    // The next save folds the outage lines and the no-op in, once.
    sb.repo
        .write("libs/shared/a.js", "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change a");
    let (_, report) = tick(&sb, &gl, &at(10), 12);
    assert_eq!(report["state_written"], true);
    assert!(report.get("outage").is_none(), "{report}");
    assert!(!sb.journal().exists(), "the folded journal is removed");
    let stats = sb.stats();
    assert_eq!(
        stats["outage"],
        json!({"ticks": 3, "consecutive": 0, "since": null, "last": at(6), "unsaved": 0})
    );
    assert_eq!(stats["wake"]["ticks"], 6);
    assert_eq!(stats["wake"]["wakes"], 5);
    assert_eq!(
        stats["wake"]["by_reason"],
        json!({"first_run": 1, "sha_unavailable": 3, "none": 1, "repo_changed": 1})
    );
}

#[test]
fn an_outage_run_goes_on_across_a_saved_outage_tick_and_a_journalled_one() {
    let (sb, gl) = after_first_run();
    // The head lookup fails, the listing answers: the tick learns the tree
    // and saves, and the line still leads with the outage.
    down(&gl, Endpoint::Commits);
    let (out, report) = tick(&sb, &gl, &at(2), 11);
    assert_eq!(report["state_written"], true);
    let line = out.stderr_line();
    assert!(
        line.starts_with("sentinel: outage (sha_unavailable: ")
            && line.contains(&format!(
                "): 1 tick in a row since {} (1 in all); 5 files — 5 reused; state saved",
                at(2)
            )),
        "{line}"
    );
    // Then both fail: nothing learned, and the run counts on from 00:02.
    let saved = snapshot(&sb.state);
    down(&gl, Endpoint::Commits);
    down(&gl, Endpoint::Tree);
    let (out, report) = tick(&sb, &gl, &at(4), 11);
    assert_eq!(snapshot(&sb.state), saved);
    assert_eq!(
        report["outage"],
        json!({"ticks": 2, "consecutive": 2, "since": at(2), "last": at(4)})
    );
    assert!(
        out.stderr_line()
            .contains(&format!("): 2 ticks in a row since {} (2 in all);", at(2))),
        "{}",
        out.stderr
    );
    // The remembered head was never overwritten: the next good lookup is a no-op.
    tick(&sb, &gl, &at(6), 0);
    assert_eq!(sb.stats()["wake"]["last_head"], sb.repo.head().as_str());
}
