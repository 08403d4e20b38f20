//! End-to-end tests of the `sentinel` binary against real git repositories,
//! read directly or through a fake GitLab on 127.0.0.1 (`util::gitlab`):
//! exit codes, the `--json` report, the stderr line and the bytes of the
//! files a tick leaves behind. Time is injected with `--now` and sentinel's
//! waits are only recorded (`--fake-sleep`); nothing leaves 127.0.0.1. The
//! few real sleeps are the reliability suite's: a server that trickles its
//! answer, and kills timed against a running tick.

mod util;

#[path = "e2e/adapters.rs"]
mod adapters;
#[path = "e2e/advisor.rs"]
mod advisor;
#[path = "e2e/agents.rs"]
mod agents;
#[path = "e2e/bounds.rs"]
mod bounds;
#[path = "e2e/canaries.rs"]
mod canaries;
#[path = "e2e/careful_record.rs"]
mod careful_record;
#[path = "e2e/costs.rs"]
mod costs;
#[path = "e2e/dashboard.rs"]
mod dashboard;
#[path = "e2e/escaping.rs"]
mod escaping;
#[path = "e2e/fleet.rs"]
mod fleet;
#[path = "e2e/front_door.rs"]
mod front_door;
#[path = "e2e/git_processes.rs"]
mod git_processes;
#[path = "e2e/gitlab_archive.rs"]
mod gitlab_archive;
#[path = "e2e/hostile_agent.rs"]
mod hostile_agent;
#[path = "e2e/hostile_files.rs"]
mod hostile_files;
#[path = "e2e/hostile_local.rs"]
mod hostile_local;
#[path = "e2e/hostile_worktree.rs"]
mod hostile_worktree;
#[path = "e2e/identity.rs"]
mod identity;
#[path = "e2e/litellm.rs"]
mod litellm;
#[path = "e2e/loops.rs"]
mod loops;
#[path = "e2e/merge_request.rs"]
mod merge_request;
#[path = "e2e/merged_results.rs"]
mod merged_results;
#[path = "e2e/mr_report.rs"]
mod mr_report;
#[path = "e2e/newcomer.rs"]
mod newcomer;
#[path = "e2e/no_wording.rs"]
mod no_wording;
#[path = "e2e/object_store.rs"]
mod object_store;
#[path = "e2e/outages.rs"]
mod outages;
#[path = "e2e/paid_once.rs"]
mod paid_once;
#[path = "e2e/patches.rs"]
mod patches;
#[path = "e2e/peer_lengths.rs"]
mod peer_lengths;
#[path = "e2e/peer_redaction.rs"]
mod peer_redaction;
#[path = "e2e/properties.rs"]
mod properties;
#[path = "e2e/reliability.rs"]
mod reliability;
#[path = "e2e/retries.rs"]
mod retries;
#[path = "e2e/sandbox.rs"]
mod sandbox;
#[path = "e2e/sandbox_agent.rs"]
mod sandbox_agent;
#[path = "e2e/sandbox_strangers.rs"]
mod sandbox_strangers;
#[path = "e2e/scheduler.rs"]
mod scheduler;
#[path = "e2e/state_bounds.rs"]
mod state_bounds;
#[path = "e2e/state_layout.rs"]
mod state_layout;
#[path = "e2e/stuck_ends.rs"]
mod stuck_ends;
#[path = "e2e/templates.rs"]
mod templates;
#[path = "e2e/wake_reads.rs"]
mod wake_reads;
#[path = "e2e/wake_walk.rs"]
mod wake_walk;
#[path = "e2e/wakes.rs"]
mod wakes;
#[path = "e2e/way_two.rs"]
mod way_two;

use std::fs;

use serde_json::{Value, json};

use util::gitlab::{Api, Endpoint, FakeGitLab, Reply, TOKEN};
use util::{Output, Sandbox, WATCHED, at, files, fingerprint_of, hold_lock, parts, snapshot};

const FIVE: [&str; 5] = ["a.js", "b.js", "c.js", "d.js", "e.js"];
const SEVEN: [&str; 7] = ["a.js", "b.js", "c.js", "d.js", "e.js", "f.js", "g.js"];
const PART_NAMES: [&str; 9] = [
    "content",
    "risk",
    "role",
    "confidence",
    "status",
    "rollback_streak",
    "penalty",
    "evidence",
    "dependencies",
];
const NEEDS_REVIEW: &str = "needs_review";

fn p(name: &str) -> String {
    format!("{WATCHED}/{name}")
}

fn short(id: &str) -> &str {
    &id[..7]
}

/// Fails with the process's output when the exit code is not `code`.
#[track_caller]
fn expect_code(out: &Output, code: i32) {
    assert_eq!(
        out.code, code,
        "unexpected exit code\n--- stdout\n{}\n--- stderr\n{}",
        out.stdout, out.stderr
    );
}

/// A tick that must exit with `code`; returns its `--json` report.
#[track_caller]
fn tick(sb: &Sandbox, now: &str, extra: &[&str], code: i32) -> Value {
    let out = sb.tick(now, extra);
    expect_code(&out, code);
    let report = out.json();
    assert_eq!(report["exit_code"], code, "exit_code field of {report}");
    report
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

fn evaluated(path: &str, novelty: &str) -> (String, String, String) {
    (p(path), NEEDS_REVIEW.into(), novelty.into())
}

// ---------------------------------------------------------------------------
// The seed's ordinary day and the no-op path
// ---------------------------------------------------------------------------

/// Which source a scenario runs over: the local clone, or the fake GitLab
/// serving the same repository (same heads, same blob ids).
enum Via {
    Git,
    GitLab(FakeGitLab),
}

impl Via {
    fn new(sb: &Sandbox, gitlab: bool) -> Via {
        if gitlab {
            Via::GitLab(sb.gitlab())
        } else {
            Via::Git
        }
    }

    /// One tick at `now`; over GitLab, also checks that the report counts
    /// exactly the requests the server received.
    #[track_caller]
    fn tick(&self, sb: &Sandbox, now: &str) -> Output {
        self.tick_with(sb, now, &[])
    }

    #[track_caller]
    fn tick_with(&self, sb: &Sandbox, now: &str, extra: &[&str]) -> Output {
        match self {
            Via::Git => sb.tick(now, extra),
            Via::GitLab(gl) => {
                let before = gl.requests().len();
                let out = sb.api_tick_cmd(&Api::new(gl), now).args(extra).output();
                let received = gl.requests().len() - before;
                if let Ok(report) = serde_json::from_str::<Value>(&out.stdout) {
                    assert_eq!(
                        report["requests"], received,
                        "requests reported vs received by the server, at {now}"
                    );
                }
                out
            }
        }
    }
}

/// The seed's ordinary day (5 files, a tick every 2 minutes, one commit at
/// noon), with the same assertions whichever source serves it.
fn ordinary_day(gitlab: bool) {
    let sb = Sandbox::with_files(&FIVE);
    let via = Via::new(&sb, gitlab);
    let first_head = sb.repo.head();
    let mut noon_head = String::new();

    let mut wakes: Vec<(String, i32, String)> = Vec::new();
    let (mut noops, mut fresh, mut reads, mut writes) = (0u64, 0u64, 0u64, 0u64);
    let mut heads = 0u64;
    for i in 0..720 {
        let minute = i * 2;
        let now = at(minute);
        if minute == 12 * 60 {
            sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
            noon_head = sb.repo.commit("change c.js at noon");
        }
        let before = snapshot(&sb.state);
        let out = via.tick(&sb, &now);
        let report = out.json();
        assert_eq!(report["exit_code"], out.code, "at {now}");
        let kinds = &report["requests_by_kind"];
        assert_eq!(kinds["head"], 1, "one head lookup per tick, at {now}");
        heads += u(&kinds["head"]);
        fresh += u(&report["fresh_evaluations"]);
        reads += u(&report["file_reads"]);
        writes += u64::from(report["state_written"] == true);
        if out.code == 0 {
            noops += 1;
            assert_eq!(report["requests"], 1, "a no-op makes one request, at {now}");
            assert_eq!(report["file_reads"], 0, "at {now}");
            assert_eq!(report["files"], json!([]), "at {now}");
            let after = snapshot(&sb.state);
            assert!(before.is_some(), "a no-op before any state, at {now}");
            assert!(
                after == before,
                "the no-op at {now} changed the state file's bytes or mtime"
            );
        } else {
            let reason = report["verdict"]["reason"].as_str().unwrap().to_string();
            wakes.push((now.clone(), out.code, reason));
            match out.code {
                10 => {
                    assert_eq!(report["head"], first_head.as_str());
                    assert_eq!(
                        report["requests_by_kind"],
                        json!({"head": 1, "list": 1, "read": 5, "compare": 0, "history": 0}),
                        "head + listing + 5 reads"
                    );
                    assert_eq!(report["requests"], 7);
                    assert_eq!(
                        files(&report),
                        FIVE.map(|f| evaluated(f, "first-seen")).to_vec()
                    );
                }
                12 => {
                    assert_eq!(report["head"], noon_head.as_str());
                    assert_eq!(
                        report["verdict"]["detail"],
                        json!({"from": first_head, "to": noon_head})
                    );
                    assert_eq!(
                        (&kinds["head"], &kinds["list"], &kinds["read"]),
                        (&json!(1), &json!(0), &json!(1)),
                        "the changed path comes from the compare, not a listing: {kinds}"
                    );
                    assert!(u(&kinds["compare"]) >= 1, "{kinds}");
                    if let Via::Git = via {
                        assert_eq!(
                            *kinds,
                            json!({"head": 1, "list": 0, "read": 1, "compare": 1, "history": 1}),
                            "head + compare + rollback lookup + 1 read"
                        );
                    }
                    assert_eq!(files(&report), vec![evaluated("c.js", "changed")]);
                }
                _ => {}
            }
        }
    }

    assert_eq!(
        wakes,
        vec![
            (at(0), 10, "first_run".to_string()),
            (at(720), 12, "repo_changed".to_string()),
        ]
    );
    assert_eq!(heads, 720);
    assert_eq!(noops, 718);
    assert!(fresh <= 6, "{fresh} fresh evaluations");
    assert_eq!(fresh, 6);
    assert!(reads <= 6, "{reads} file reads");
    assert_eq!(reads, 6);
    assert_eq!(writes, 2);
    if let Via::GitLab(gl) = &via {
        assert_eq!(gl.requests_to(Endpoint::Commits).len(), 720);
        assert_eq!(gl.requests_to(Endpoint::Tree).len(), 1);
        assert_eq!(gl.requests_to(Endpoint::BlobRaw).len(), 6);
        assert_eq!(gl.requests_to(Endpoint::Compare).len(), 1);
    }

    let stats = sb.stats();
    let evidence = stats["wake"]["last_evidence"].as_str().unwrap();
    assert!(
        evidence.len() == 12 && evidence.bytes().all(|b| b.is_ascii_hexdigit()),
        "{evidence}"
    );
    assert_eq!(
        stats["wake"],
        json!({
            "ticks": 720,
            "wakes": 2,
            "noops": 718,
            "noop_rate": 0.9972,
            "by_reason": {"first_run": 1, "repo_changed": 1, "none": 718},
            "unsaved_noops": 359,
            "malformed_noop_lines": 0,
            "last_wake_reason": "repo_changed",
            "last_head": noon_head,
            "last_evidence": evidence,
            "reader": if matches!(via, Via::GitLab(_)) { json!(null) } else { json!("gix") },
        })
    );
    assert_eq!(stats["novelty"]["fresh_evaluations"], 6);
    assert_eq!(stats["novelty"]["file_reads"], 6);
    let journal = fs::read_to_string(sb.journal()).unwrap();
    assert_eq!(journal.lines().count(), 1 + 359, "epoch line + 359 no-ops");
}

#[test]
fn ordinary_day_wakes_twice_and_noops_718_times() {
    ordinary_day(false);
}

/// Runs `scenario` over the git source and over the fake GitLab serving the
/// same repository: every tick must end the same way and report the same
/// files with the same fingerprints.
fn over_both_sources(scenario: fn(bool) -> Vec<Value>) {
    let git = scenario(false);
    let gitlab = scenario(true);
    assert_eq!(git.len(), gitlab.len());
    for (i, (a, b)) in git.iter().zip(&gitlab).enumerate() {
        for key in [
            "exit_code",
            "verdict",
            "head",
            "files",
            "pending",
            "fresh_evaluations",
        ] {
            assert_eq!(
                a[key], b[key],
                "tick {i}: `{key}` differs between git and gitlab"
            );
        }
    }
}

/// A tick over `via` that must exit with `code`.
#[track_caller]
fn via_tick(sb: &Sandbox, via: &Via, now: &str, code: i32) -> Value {
    let out = via.tick(sb, now);
    expect_code(&out, code);
    out.json()
}

fn a_revert(gitlab: bool) -> Vec<Value> {
    let sb = Sandbox::with_files(&FIVE);
    let via = Via::new(&sb, gitlab);
    let first = via_tick(&sb, &via, &at(0), 10);
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit("change c.js");
    let changed = via_tick(&sb, &via, &at(2), 12);
    assert_eq!(parts(&fingerprint_of(&changed, &p("c.js")))[5], "0");
    sb.repo.git(&["revert", "--no-edit", "HEAD"]);
    let reverted = via_tick(&sb, &via, &at(4), 12);
    assert_eq!(
        parts(&fingerprint_of(&reverted, &p("c.js")))[5],
        "1",
        "the revert raised c.js's rollback streak: {reverted}"
    );
    assert_eq!(reverted["requests_by_kind"]["history"], 1, "{reverted}");
    if let Via::GitLab(gl) = &via {
        let diffs = gl.requests_to(Endpoint::CommitDiff);
        assert_eq!(diffs.len(), 1);
        assert_eq!(diffs[0].segments[6], sb.repo.head());
    }
    vec![first, changed, reverted]
}

#[test]
fn a_revert_raises_the_rollback_streak_over_both_sources() {
    over_both_sources(a_revert);
}

fn a_rename(gitlab: bool) -> Vec<Value> {
    let sb = Sandbox::with_files(&FIVE);
    let via = Via::new(&sb, gitlab);
    let first = via_tick(&sb, &via, &at(0), 10);
    sb.repo.git(&["mv", &p("b.js"), &p("renamed.js")]);
    sb.repo.write("elsewhere/in.js", util::plain_js("in"));
    sb.repo.commit("rename b.js");
    sb.repo.git(&["mv", "elsewhere/in.js", &p("in.js")]);
    sb.repo.commit("move in.js into the watched path");
    let renamed = via_tick(&sb, &via, &at(2), 12);
    let paths: Vec<String> = files(&renamed).into_iter().map(|f| f.0).collect();
    assert!(paths.contains(&p("renamed.js")), "{renamed}");
    assert!(paths.contains(&p("in.js")), "{renamed}");
    assert!(!paths.contains(&p("b.js")), "{renamed}");
    let next = via_tick(&sb, &via, &at(4), 0);
    vec![first, renamed, next]
}

#[test]
fn a_rename_forgets_the_old_path_and_judges_the_new_one_over_both_sources() {
    over_both_sources(a_rename);
}

#[test]
fn ordinary_day_over_the_gitlab_api_wakes_twice_and_noops_718_times() {
    ordinary_day(true);
}

#[test]
fn a_noop_does_nothing() {
    let sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    tick(&sb, &at(0), &[], 10);
    let before = snapshot(&sb.state).expect("the first run saved a state");
    assert!(!sb.journal().exists());

    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 0);
    assert_eq!(
        out.json(),
        json!({
            "exit_code": 0,
            "verdict": {"wake": false, "reason": "none", "detail": {"head": head}},
            "head": head,
            "files": [],
            "counts": {},
            "pending": 0,
            "pending_paths": [],
            "requests": 1,
            "requests_by_kind": {"head": 1, "list": 0, "read": 0, "compare": 0, "history": 0},
            "reader": "gix",
            "slept_ms": [],
            "advisor": "off",
            "llm_calls": 0,
            "file_reads": 0,
            "fresh_evaluations": 0,
            "state_written": false,
            "dry_run": false,
            "writes": [],
            "notes": [],
        })
    );
    assert_eq!(
        out.stderr_line(),
        format!(
            "sentinel: none (head {} unchanged); nothing written",
            short(&head)
        )
    );
    assert_eq!(snapshot(&sb.state), Some(before.clone()));
    assert_eq!(
        fs::read_to_string(sb.journal()).unwrap(),
        format!(
            "sentinel-noops epoch=1\n2026-06-16T00:02:00Z {}\n",
            short(&head)
        )
    );

    let stats = sb.stats();
    assert_eq!(
        (
            &stats["wake"]["ticks"],
            &stats["wake"]["noops"],
            &stats["wake"]["unsaved_noops"],
            &stats["wake"]["by_reason"],
        ),
        (
            &json!(2),
            &json!(1),
            &json!(1),
            &json!({"first_run": 1, "none": 1})
        )
    );

    sb.repo.write(&p("a.js"), "// a.js\nmodule.exports = 2;\n");
    let new_head = sb.repo.commit("change a.js");
    tick(&sb, &at(4), &[], 12);
    assert!(
        !sb.journal().exists(),
        "the waking tick removes the folded journal"
    );
    let stats = sb.stats();
    assert_eq!(
        (
            &stats["wake"]["ticks"],
            &stats["wake"]["wakes"],
            &stats["wake"]["noops"],
            &stats["wake"]["unsaved_noops"],
            &stats["wake"]["by_reason"],
        ),
        (
            &json!(3),
            &json!(2),
            &json!(1),
            &json!(0),
            &json!({"first_run": 1, "none": 1, "repo_changed": 1})
        )
    );

    // The next journal starts a new epoch, so a crash between save and
    // clear could never count the same no-op twice.
    tick(&sb, &at(6), &[], 0);
    assert_eq!(
        fs::read_to_string(sb.journal()).unwrap(),
        format!(
            "sentinel-noops epoch=2\n2026-06-16T00:06:00Z {}\n",
            short(&new_head)
        )
    );
    assert_eq!(sb.stats()["wake"]["unsaved_noops"], 1);
}

#[test]
fn each_noop_appends_exactly_one_line_to_the_journal() {
    let sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    tick(&sb, &at(0), &[], 10);
    tick(&sb, &at(2), &[], 0);
    let before = fs::read(sb.journal()).unwrap();
    tick(&sb, &at(4), &[], 0);
    let after = fs::read(sb.journal()).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the journal is append-only"
    );
    assert_eq!(
        String::from_utf8(after[before.len()..].to_vec()).unwrap(),
        format!("2026-06-16T00:04:00Z {}\n", short(&head))
    );
    assert_eq!(sb.stats()["wake"]["unsaved_noops"], 2);
}

// ---------------------------------------------------------------------------
// The state file: corrupt, locked, dry runs
// ---------------------------------------------------------------------------

/// The bytes of a real state after a first run over five files.
fn real_state() -> Vec<u8> {
    let sb = Sandbox::with_files(&FIVE);
    tick(&sb, &at(0), &[], 10);
    fs::read(&sb.state).unwrap()
}

#[test]
fn corrupt_state_exits_1_and_leaves_the_file_untouched() {
    let real = real_state();
    let first_line = real.iter().position(|b| *b == b'\n').unwrap() + 1;
    let newer_header = String::from_utf8(real.clone())
        .unwrap()
        .replacen("{\"schema\":2,", "{\"schema\":99,", 1)
        .into_bytes();
    assert_ne!(newer_header, real);

    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "half.json",
            real[..real.len() / 2].to_vec(),
            "is truncated (line ".into(),
        ),
        (
            "half-header.json",
            real[..first_line / 2].to_vec(),
            "is truncated (line ".into(),
        ),
        (
            "garbage.json",
            b"<html>502 Bad Gateway</html>\n".to_vec(),
            "is not a valid state document: ".into(),
        ),
        ("empty.json", Vec::new(), "is empty; ".into()),
        (
            "newer-minimal.json",
            br#"{"schema":99}"#.to_vec(),
            "has schema 99, newer than the 2 this sentinel understands".into(),
        ),
        (
            "newer-header.json",
            newer_header,
            "has schema 99, newer than the 2 this sentinel understands".into(),
        ),
    ];

    let sb = Sandbox::with_files(&FIVE);
    for (name, bytes, what) in cases {
        let state = sb.root().join("corrupt").join(name);
        fs::create_dir_all(state.parent().unwrap()).unwrap();
        fs::write(&state, &bytes).unwrap();
        let before = snapshot(&state);
        let prefix = format!("error: state file `{}` {what}", state.display());

        let out = sb
            .sentinel(["tick", "--json", "--now", &at(2), "--path", WATCHED])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&state)
            .output();
        expect_code(&out, 1);
        assert_eq!(out.stdout, "", "{name}: no report on an error");
        let line = out.stderr_line();
        assert!(
            line.starts_with(&prefix),
            "{name}: {line}\nwanted: {prefix}"
        );
        assert!(line.contains("untouched"), "{name}: {line}");
        assert_eq!(snapshot(&state), before, "{name}: the state file changed");
        assert!(
            !util::sidecar(&state, ".noops").exists(),
            "{name}: a journal line was written for a corrupt state"
        );

        let out = sb
            .sentinel(["stats", "--json", "--state"])
            .arg(&state)
            .output();
        expect_code(&out, 1);
        assert_eq!(out.stdout, "");
        assert!(
            out.stderr_line().starts_with(&prefix),
            "{name}: {}",
            out.stderr
        );
        assert_eq!(
            snapshot(&state),
            before,
            "{name}: stats changed the state file"
        );
    }
}

#[test]
fn a_directory_where_the_state_file_should_be_exits_1_with_a_clear_message() {
    let sb = Sandbox::with_files(&FIVE);
    let dir = sb.root().join("run").join("state.json");
    fs::create_dir_all(&dir).unwrap();
    let out = sb
        .sentinel(["tick", "--now", &at(0), "--path", WATCHED])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&dir)
        .output();
    expect_code(&out, 1);
    assert_eq!(
        out.stderr_line(),
        format!(
            "error: cannot read state file `{}`: it is a directory; point --state at a file path",
            dir.display()
        )
    );
    assert_eq!(
        fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written into it"
    );
}

#[test]
fn lock_busy_exits_20_and_touches_nothing() {
    // Without a state: nothing is created but the lock the test holds.
    let sb = Sandbox::with_files(&FIVE);
    let lock = hold_lock(&sb.state);
    let out = sb.tick(&at(0), &[]);
    expect_code(&out, 20);
    assert_eq!(
        out.stderr_line(),
        format!(
            "sentinel: busy (another tick holds `{}`); nothing started",
            sb.lock().display()
        )
    );
    assert_eq!(
        out.json(),
        json!({
            "exit_code": 20,
            "verdict": {"wake": false, "reason": "busy", "detail": {"lock": sb.lock()}},
            "head": null,
            "files": [],
            "counts": {},
            "pending": 0,
            "pending_paths": [],
            "requests": 0,
            "requests_by_kind": {"head": 0, "list": 0, "read": 0, "compare": 0, "history": 0},
            "reader": null,
            "slept_ms": [],
            "advisor": "off",
            "llm_calls": 0,
            "file_reads": 0,
            "fresh_evaluations": 0,
            "state_written": false,
            "dry_run": false,
            "writes": [],
            "notes": [format!("another tick holds `{}`", sb.lock().display())],
        })
    );
    assert!(!sb.state.exists());
    assert!(!sb.journal().exists());
    drop(lock);

    // With a state and a journal, on a tick that would wake.
    tick(&sb, &at(0), &[], 10);
    tick(&sb, &at(2), &[], 0);
    sb.repo.write(&p("a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change a.js");
    let state = snapshot(&sb.state);
    let journal = snapshot(&sb.journal());
    assert!(journal.is_some());
    let lock = hold_lock(&sb.state);
    let out = sb.tick(&at(4), &[]);
    expect_code(&out, 20);
    assert!(out.stderr_line().contains("busy"), "{}", out.stderr);
    assert_eq!(snapshot(&sb.state), state, "a busy tick changed the state");
    assert_eq!(
        snapshot(&sb.journal()),
        journal,
        "a busy tick wrote the journal"
    );
    drop(lock);

    // The refused tick started nothing: the next one does the wake.
    tick(&sb, &at(6), &[], 12);
    let stats = sb.stats();
    assert_eq!(stats["wake"]["ticks"], 3, "busy refusals are not ticks");
    assert_eq!(
        stats["wake"]["by_reason"],
        json!({"first_run": 1, "none": 1, "repo_changed": 1})
    );
}

#[test]
fn dry_run_writes_nothing() {
    // No state, default state path inside the clone.
    let sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    let out = sb
        .sentinel([
            "tick",
            "--json",
            "--dry-run",
            "--now",
            &at(0),
            "--path",
            WATCHED,
        ])
        .arg("--repo")
        .arg(&sb.repo.root)
        .output();
    expect_code(&out, 10);
    let report = out.json();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["state_written"], false);
    assert_eq!(report["verdict"]["reason"], "first_run");
    assert_eq!(report["fresh_evaluations"], 5);
    assert_eq!(
        files(&report),
        FIVE.map(|f| evaluated(f, "first-seen")).to_vec()
    );
    assert_eq!(
        out.stderr_line(),
        format!(
            "sentinel: woke (first_run at {}): 5 files — 5 needs_review; dry run, nothing written; advisor off: set OPENAI_API_KEY to have a model judge the needs_review files",
            short(&head)
        )
    );
    assert!(
        !sb.repo.root.join(".sentinel").exists(),
        "created .sentinel"
    );

    // No state, explicit state path in a directory that does not exist.
    let out = sb.tick(&at(0), &["--dry-run"]);
    expect_code(&out, 10);
    assert_eq!(out.json()["state_written"], false);
    let run_dir = sb.state.parent().unwrap();
    assert!(!run_dir.exists(), "created {}", run_dir.display());
    assert!(!sb.state.exists() && !sb.journal().exists() && !sb.lock().exists());

    // With a state: a dry-run no-op journals nothing, a dry-run wake saves nothing.
    tick(&sb, &at(0), &[], 10);
    let state = snapshot(&sb.state);
    let out = sb.tick(&at(2), &["--dry-run"]);
    expect_code(&out, 0);
    assert_eq!(out.json()["dry_run"], true);
    assert_eq!(
        out.stderr_line(),
        format!(
            "sentinel: none (head {} unchanged); dry run, nothing written",
            short(&head)
        )
    );
    assert!(!sb.journal().exists(), "a dry-run no-op wrote the journal");
    assert_eq!(snapshot(&sb.state), state);

    sb.repo.write(&p("a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change a.js");
    let report = tick(&sb, &at(4), &["--dry-run"], 12);
    assert_eq!(report["state_written"], false);
    assert_eq!(files(&report), vec![evaluated("a.js", "changed")]);
    assert_eq!(snapshot(&sb.state), state, "a dry-run wake saved the state");
    assert!(!sb.journal().exists());

    // The dry runs consumed nothing: the real tick still wakes for the change.
    let report = tick(&sb, &at(6), &[], 12);
    assert_eq!(files(&report), vec![evaluated("a.js", "changed")]);
    assert_eq!(sb.stats()["wake"]["ticks"], 2, "dry runs are not counted");
}

// ---------------------------------------------------------------------------
// Wake reasons
// ---------------------------------------------------------------------------

#[test]
fn concurrent_ticks_run_one_first_run_and_refuse_or_noop_the_rest() {
    let sb = Sandbox::with_files(&FIVE);
    let children: Vec<_> = (0..16).map(|_| sb.tick_cmd(&at(0)).spawn()).collect();
    let outs: Vec<Output> = children.into_iter().map(Output::wait).collect();
    let codes: Vec<i32> = outs.iter().map(|o| o.code).collect();
    assert!(
        codes.iter().all(|c| [0, 10, 20].contains(c)),
        "{codes:?}\n{outs:#?}"
    );
    assert_eq!(codes.iter().filter(|c| **c == 10).count(), 1, "{codes:?}");
    let noops = codes.iter().filter(|c| **c == 0).count() as u64;
    let stats = sb.stats();
    assert_eq!(
        stats["wake"]["ticks"],
        1 + noops,
        "busy refusals are not ticks"
    );
    assert_eq!(stats["wake"]["unsaved_noops"], noops);
    assert_eq!(stats["novelty"]["fresh_evaluations"], 5);
}

#[test]
fn a_commit_outside_the_watched_path_is_a_noop() {
    let sb = Sandbox::with_files(&FIVE);
    tick(&sb, &at(0), &[], 10);
    let state = snapshot(&sb.state);
    sb.repo.write("README.md", "# elsewhere\n");
    sb.repo.write("libs/other/x.js", "module.exports = 3;\n");
    sb.repo.commit("outside libs/shared");
    let report = tick(&sb, &at(2), &[], 0);
    assert_eq!(report["requests"], 1);
    assert_eq!(snapshot(&sb.state), state);
}

#[test]
fn backlog_with_max_reads_2_on_7_files_evaluates_each_file_exactly_once() {
    let sb = Sandbox::with_files(&SEVEN);
    let mut seen: Vec<String> = Vec::new();
    let mut reads = 0;
    let expected = [
        // (exit code, detail, evaluated, pending afterwards, requests)
        (10, json!(null), vec!["a.js", "b.js"], 5, 4),
        (14, json!({"pending": 5}), vec!["c.js", "d.js"], 3, 3),
        (14, json!({"pending": 3}), vec!["e.js", "f.js"], 1, 3),
        (14, json!({"pending": 1}), vec!["g.js"], 0, 2),
    ];
    for (i, (code, detail, done, pending, requests)) in expected.into_iter().enumerate() {
        let now = at(2 * i as i64);
        let report = tick(&sb, &now, &["--max-reads", "2", "--all-pending"], code);
        assert_eq!(report["verdict"]["detail"], detail, "at {now}");
        assert_eq!(report["pending"], pending, "at {now}");
        assert_eq!(report["requests"], requests, "at {now}");
        assert_eq!(report["fresh_evaluations"], done.len(), "at {now}");
        let rows = files(&report);
        let decided: Vec<String> = rows
            .iter()
            .filter(|(_, o, _)| o != "pending" && o != "reused")
            .map(|(path, _, _)| path.clone())
            .collect();
        assert_eq!(
            decided,
            done.iter().map(|f| p(f)).collect::<Vec<_>>(),
            "at {now}"
        );
        let waiting = rows.iter().filter(|(_, o, _)| o == "pending").count();
        assert_eq!(waiting, pending, "at {now}");
        assert_eq!(
            report["counts"],
            if pending > 0 {
                json!({"needs_review": done.len(), "pending": pending})
            } else {
                json!({"needs_review": done.len()})
            },
            "at {now}"
        );
        seen.extend(decided);
        reads += u(&report["file_reads"]);
    }
    tick(&sb, &at(8), &["--max-reads", "2"], 0);

    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        seen.len(),
        "a file was evaluated twice: {seen:?}"
    );
    assert_eq!(seen, SEVEN.map(p).to_vec());
    assert_eq!(reads, 7);
    let stats = sb.stats();
    assert_eq!(stats["novelty"]["tracked_files"], 7);
    assert_eq!(stats["novelty"]["fresh_evaluations"], 7);
    assert_eq!(stats["novelty"]["pending"], 0);
    assert_eq!(
        stats["wake"]["by_reason"],
        json!({"first_run": 1, "backlog": 3, "none": 1})
    );
}

#[test]
fn the_file_a_wake_is_about_goes_first_even_when_it_sorts_last() {
    let sb = Sandbox::with_files(&SEVEN);
    tick(&sb, &at(0), &["--max-reads", "2"], 10);
    sb.repo.write(&p("g.js"), "// g.js\nmodule.exports = 2;\n");
    sb.repo.commit("change g.js");
    let report = tick(&sb, &at(2), &["--max-reads", "2", "--all-pending"], 12);
    assert_eq!(
        files(&report),
        vec![
            evaluated("g.js", "first-seen"),
            evaluated("c.js", "first-seen"),
            (p("d.js"), "pending".into(), "first-seen".into()),
            (p("e.js"), "pending".into(), "first-seen".into()),
            (p("f.js"), "pending".into(), "first-seen".into()),
        ]
    );
    assert_eq!(report["pending"], 3);
    assert_eq!(report["file_reads"], 2);
}

#[test]
fn a_dependency_change_rechecks_its_dependent() {
    let sb = Sandbox::new();
    for name in FIVE {
        sb.repo.write(&p(name), util::plain_js(name));
    }
    sb.repo.write(
        &p("b.js"),
        "// b.js\nconst a = require('./a');\nmodule.exports = a;\n",
    );
    sb.repo.commit("b depends on a");
    let first = tick(&sb, &at(0), &[], 10);

    sb.repo.write(&p("a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change only a.js");
    let report = tick(&sb, &at(2), &[], 12);
    assert_eq!(
        files(&report),
        vec![evaluated("a.js", "changed"), evaluated("b.js", "changed")]
    );
    assert_eq!(report["file_reads"], 1, "b.js is not read again");
    assert_eq!(report["fresh_evaluations"], 2);
    assert_eq!(
        report["requests_by_kind"],
        json!({"head": 1, "list": 0, "read": 1, "compare": 1, "history": 1}),
        "head + compare + rollback lookup + 1 read"
    );

    let (a0, a1) = (
        fingerprint_of(&first, &p("a.js")),
        fingerprint_of(&report, &p("a.js")),
    );
    let (a0, a1) = (parts(&a0), parts(&a1));
    assert_ne!(a0[0], a1[0], "a.js: content part");
    assert_eq!(a0[1..], a1[1..], "a.js: only the content part differs");
    assert_eq!(a1[8], "deps:-");

    let (b0, b1) = (
        fingerprint_of(&first, &p("b.js")),
        fingerprint_of(&report, &p("b.js")),
    );
    let (b0, b1) = (parts(&b0), parts(&b1));
    assert_eq!(b0[..8], b1[..8], "b.js: all but the deps part are equal");
    assert_ne!(b0[8], b1[8], "b.js: the deps part differs");
    assert!(b1[8].starts_with("deps:") && b1[8] != "deps:-" && b1[8] != "deps:unknown");
}

#[test]
fn deleting_an_imported_file_makes_its_importer_dependencies_unknown() {
    let sb = Sandbox::new();
    sb.repo.write(&p("a.js"), util::plain_js("a.js"));
    sb.repo.write(&p("b.js"), "const a = require('./a');\n");
    sb.repo.write(&p("c.js"), util::plain_js("c.js"));
    sb.repo.commit("b depends on a");
    tick(&sb, &at(0), &[], 10);

    sb.repo.remove(&p("a.js"));
    sb.repo.commit("remove a.js");
    let report = tick(&sb, &at(2), &[], 12);
    assert_eq!(
        files(&report),
        vec![evaluated("b.js", "dependencies-unknown")]
    );
    assert_eq!(report["file_reads"], 0);
    let fp = fingerprint_of(&report, &p("b.js"));
    assert_eq!(parts(&fp)[8], "deps:unknown");
    assert!(
        report["files"][0]["reason"]
            .as_str()
            .unwrap()
            .ends_with("; unresolved imports: ./a"),
        "{}",
        report["files"][0]["reason"]
    );
    assert_eq!(sb.stats()["novelty"]["tracked_files"], 2);
}

#[test]
fn an_import_that_appears_later_rechecks_the_file_that_could_not_resolve_it() {
    let sb = Sandbox::new();
    sb.repo
        .write(&p("x.js"), "const later = require('./later');\n");
    sb.repo.commit("x imports a file that does not exist yet");
    let first = tick(&sb, &at(0), &[], 10);
    assert_eq!(
        parts(&fingerprint_of(&first, &p("x.js")))[8],
        "deps:unknown"
    );
    assert_eq!(
        first["files"][0]["reason"],
        "source file of medium risk needs judgement; advisor off; unresolved imports: ./later"
    );

    sb.repo.write(&p("later.js"), util::plain_js("later.js"));
    sb.repo.commit("add later.js");
    let report = tick(&sb, &at(2), &[], 12);
    assert_eq!(
        files(&report),
        vec![
            evaluated("later.js", "first-seen"),
            evaluated("x.js", "changed")
        ]
    );
    assert_eq!(report["file_reads"], 1, "x.js is not read again");
    let deps = parts(&fingerprint_of(&report, &p("x.js")))[8].to_string();
    assert!(deps != "deps:unknown" && deps != "deps:-", "{deps}");
}

#[test]
fn sha_unavailable_never_masquerades_as_unchanged() {
    let mut sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    tick(&sb, &at(0), &[], 10);

    // A lookup that fails for a passing reason (a busy repository), once
    // the tip has moved so that git is asked.
    sb.repo.merge_tip();
    sb.fake_git_log("echo 'fatal: simulated outage' >&2; exit 128");
    let report = tick(&sb, &at(2), &[], 11);
    sb.real_git();
    assert_eq!(report["verdict"]["wake"], true);
    assert_eq!(report["verdict"]["reason"], "sha_unavailable");
    let error = report["verdict"]["detail"]["error"].as_str().unwrap();
    assert!(
        error.starts_with("git log in `") && error.contains("simulated outage"),
        "{error}"
    );
    assert_eq!(report["head"], Value::Null);
    // It wakes and compares content ids from the listing: nothing differs.
    assert_eq!(
        files(&report),
        FIVE.map(|f| (p(f), "reused".to_string(), "unchanged".to_string()))
            .to_vec()
    );
    assert_eq!(report["file_reads"], 0);

    let stats = sb.stats();
    assert_eq!(
        stats["wake"]["last_head"],
        head.as_str(),
        "the remembered head was overwritten"
    );
    assert_eq!(
        stats["wake"]["by_reason"],
        json!({"first_run": 1, "sha_unavailable": 1})
    );

    // The remembered head is intact, so the next good lookup is a no-op.
    tick(&sb, &at(4), &[], 0);
}

#[test]
fn an_unparsable_head_lookup_wakes_with_sha_unavailable() {
    let mut sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    tick(&sb, &at(0), &[], 10);

    sb.repo.merge_tip();
    sb.fake_git_log("echo 'not-a-commit-id'; exit 0");
    let report = tick(&sb, &at(2), &[], 11);
    let error = report["verdict"]["detail"]["error"].as_str().unwrap();
    assert!(
        error.contains("unexpected answer `not-a-commit-id`"),
        "{error}"
    );
    // The listing still works, so the tree is compared: nothing differs.
    assert_eq!(
        files(&report),
        FIVE.map(|f| (p(f), "reused".to_string(), "unchanged".to_string()))
            .to_vec()
    );
    assert_eq!(report["file_reads"], 0);
    assert_eq!(report["fresh_evaluations"], 0);
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());

    sb.real_git();
    tick(&sb, &at(4), &[], 0);
}

#[test]
fn a_failed_head_lookup_still_finds_the_changed_file_and_keeps_the_old_head() {
    let mut sb = Sandbox::with_files(&FIVE);
    let old = sb.repo.head();
    tick(&sb, &at(0), &[], 10);
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    let new = sb.repo.commit_as_merge("change c.js");

    sb.fake_git_log("echo 'fatal: simulated outage' >&2; exit 128");
    let report = tick(&sb, &at(2), &[], 11);
    assert_eq!(
        report["verdict"]["detail"]["error"],
        format!(
            "git log in `{}` failed: fatal: simulated outage",
            sb.repo.root.display()
        )
    );
    let mut expected: Vec<_> = FIVE
        .map(|f| (p(f), "reused".to_string(), "unchanged".to_string()))
        .to_vec();
    expected[2] = evaluated("c.js", "changed");
    assert_eq!(files(&report), expected);
    assert_eq!(report["file_reads"], 1);
    assert_eq!(sb.stats()["wake"]["last_head"], old.as_str());

    // With the lookup back, the head differs from the remembered one; the
    // change was already judged, so nothing is judged again.
    sb.real_git();
    let report = tick(&sb, &at(4), &[], 12);
    assert_eq!(report["verdict"]["detail"], json!({"from": old, "to": new}));
    assert_eq!(
        files(&report),
        vec![(p("c.js"), "reused".into(), "unchanged".into())]
    );
    assert_eq!(report["fresh_evaluations"], 0);
    assert_eq!(sb.stats()["wake"]["last_head"], new.as_str());
}

#[test]
fn an_already_known_content_id_is_not_read_again_after_a_failed_head_lookup() {
    let mut sb = Sandbox::with_files(&FIVE);
    tick(&sb, &at(0), &[], 10);
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit_as_merge("change c.js");
    sb.fake_git_log("exit 128");
    let report = tick(&sb, &at(2), &[], 11);
    assert_eq!(report["file_reads"], 1);

    sb.real_git();
    let report = tick(&sb, &at(4), &[], 12);
    assert_eq!(
        files(&report),
        vec![(p("c.js"), "reused".into(), "unchanged".into())]
    );
    assert_eq!(
        report["file_reads"], 0,
        "the bytes of this content id were read by the previous tick"
    );
}

#[test]
fn a_first_run_without_a_head_is_a_setup_error_and_saves_nothing() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb.tick(&at(0), &["--branch", "does-not-exist"]);
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr_line(),
        format!(
            "error: reading `{}` in-process (head lookup) failed: unknown revision \
             `does-not-exist`; the branch or revision `does-not-exist` does not exist here (mistyped, deleted, or not fetched): \
             check `--branch` / `SENTINEL_BRANCH` (the state was not saved; only its lock `{}` \
             was written)",
            sb.repo.root.display(),
            sb.lock().display()
        )
    );
    assert!(!sb.state.exists() && !sb.journal().exists());

    // Nothing was learned, so the next good tick is the first run.
    let report = tick(&sb, &at(2), &[], 10);
    assert_eq!(report["fresh_evaluations"], 5);
}

/// A tick that must fail for a configuration error: exit 1, one line on
/// stderr naming what to fix, and every file left as it was (the state, no
/// journal line, no `.start` sidecar). Returns the stderr line.
#[track_caller]
fn loud(sb: &Sandbox, run: util::Run, fix: &str) -> String {
    let before = snapshot(&sb.state);
    let out = run.output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    let line = out.stderr_line().to_string();
    assert!(line.starts_with("error: "), "{line}");
    assert!(line.contains(fix), "{line} does not name {fix}");
    assert!(
        line.ends_with(&format!(
            "(the state was not saved; only its lock `{}` was written)",
            sb.lock().display()
        )),
        "{line}"
    );
    assert_eq!(snapshot(&sb.state), before, "the state changed");
    assert!(!sb.journal().exists(), "a no-op was counted");
    assert!(
        !util::sidecar(&sb.state, ".start").exists(),
        "a triggered start was recorded"
    );
    line
}

/// The state as a state written before states had a scope: such a state
/// adopts the scope of the next tick, so only the lookup can tell a typo.
fn without_scope(state: &std::path::Path) {
    let text = fs::read_to_string(state).unwrap();
    let start = text.find("\"scope\":{").expect("a scope in the header");
    let end = start + text[start..].find("},").expect("the end of the scope") + 2;
    fs::write(state, format!("{}{}", &text[..start], &text[end..])).unwrap();
}

#[test]
fn invariant_13_a_mistyped_branch_is_loud_every_tick() {
    let sb = Sandbox::with_files(&FIVE);
    tick(&sb, &at(0), &["--branch", "main"], 10);
    without_scope(&sb.state);
    for minute in [2, 4, 6] {
        let run = sb.tick_cmd(&at(minute)).args(["--branch", "mian"]);
        let line = loud(&sb, run, "`--branch` / `SENTINEL_BRANCH`");
        assert!(line.contains("`mian`"), "{line}");
    }
    // The state is as the first run left it: the right branch is a no-op.
    tick(&sb, &at(8), &["--branch", "main"], 0);
}

#[test]
fn a_deleted_watched_branch_exits_1_and_writes_nothing() {
    let sb = Sandbox::with_files(&FIVE);
    sb.repo.git(&["branch", "feature"]);
    tick(&sb, &at(0), &["--branch", "feature"], 10);
    sb.repo.git(&["branch", "-D", "feature"]);
    for (minute, trigger) in [(2, "schedule"), (4, "push"), (6, "push"), (8, "schedule")] {
        let run = sb
            .tick_cmd(&at(minute))
            .args(["--branch", "feature", "--trigger", trigger]);
        let line = loud(&sb, run, "`--branch` / `SENTINEL_BRANCH`");
        assert!(line.contains("unknown revision `feature`"), "{line}");
    }
    assert_eq!(sb.stats()["wake"]["ticks"], 1);
}

#[test]
fn a_path_that_never_existed_is_loud() {
    let sb = Sandbox::with_files(&FIVE);
    let mistyped = || {
        sb.sentinel(["tick", "--json", "--now", &at(0), "--path", "libs/sahred"])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
    };
    let line = loud(&sb, mistyped(), "`--path` / `SENTINEL_PATH`");
    assert!(line.contains("`libs/sahred`"), "{line}");
    assert!(!sb.state.exists());

    // After a first run: the branch's history is rewritten without the path.
    tick(&sb, &at(2), &[], 10);
    sb.repo.git(&["checkout", "-q", "--orphan", "rewritten"]);
    sb.repo.git(&["rm", "-r", "-q", "-f", "libs"]);
    sb.repo
        .write("README", "the libraries moved to their own project\n");
    sb.repo.commit("a history without libs/shared");
    sb.repo.git(&["branch", "-M", "main"]);
    for minute in [4, 6] {
        loud(&sb, sb.tick_cmd(&at(minute)), "`--path` / `SENTINEL_PATH`");
    }
}

#[test]
fn a_repo_that_is_not_a_repository_is_loud_every_tick() {
    let sb = Sandbox::with_files(&FIVE);
    tick(&sb, &at(0), &[], 10);
    fs::rename(sb.repo.root.join(".git"), sb.root().join("moved.git")).unwrap();
    for minute in [2, 4] {
        let line = loud(&sb, sb.tick_cmd(&at(minute)), "`--repo` / `SENTINEL_REPO`");
        assert!(line.contains("not a git repository"), "{line}");
    }
}

#[test]
fn a_held_git_lock_is_transient() {
    let mut sb = Sandbox::with_files(&FIVE);
    let head = sb.repo.head();
    tick(&sb, &at(0), &[], 10);
    let lock = sb.repo.root.join(".git/index.lock");
    sb.repo.merge_tip();
    sb.fake_git_log(&format!(
        "echo \"fatal: Unable to create '{}': File exists.\" >&2; exit 128",
        lock.display()
    ));
    for minute in [2, 4] {
        let report = tick(&sb, &at(minute), &[], 11);
        assert_eq!(report["verdict"]["reason"], "sha_unavailable");
        let error = report["verdict"]["detail"]["error"].as_str().unwrap();
        assert!(error.contains("index.lock': File exists"), "{error}");
        assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
    }
    // The lock is gone: the remembered head is intact, so a no-op.
    sb.real_git();
    tick(&sb, &at(6), &[], 0);
}

#[test]
fn evidence_version_is_part_of_every_fingerprint() {
    let sb = Sandbox::with_files(&FIVE);
    let first = tick(&sb, &at(0), &[], 10);
    let evidence = sb.stats()["wake"]["last_evidence"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(evidence.len(), 12);
    for f in FIVE {
        assert_eq!(
            parts(&fingerprint_of(&first, &p(f)))[7],
            format!("ev:{evidence}")
        );
    }

    // A state written under other rules: the same document with another
    // evidence version everywhere (same length, so the layout stays valid).
    let other = if evidence == "000000000000" {
        "111111111111"
    } else {
        "000000000000"
    };
    let text = util::layout::state_doc(&sb.state).to_string();
    assert_eq!(
        text.matches(evidence.as_str()).count(),
        1 + 5,
        "wake + 5 fingerprints"
    );
    let doc = serde_json::from_str(&text.replace(evidence.as_str(), other)).unwrap();
    util::layout::write_single(&sb.state, &doc);

    let out = sb.explain(&p("a.js"), true);
    expect_code(&out, 0);
    assert_eq!(out.json()["verdict"], "changed: evidence differs");

    let report = tick(&sb, &at(2), &[], 13);
    assert_eq!(
        report["verdict"]["detail"],
        json!({"from": other, "to": evidence})
    );
    assert_eq!(
        files(&report),
        FIVE.map(|f| evaluated(f, "changed")).to_vec()
    );
    assert_eq!(
        report["file_reads"], 0,
        "the bytes are known: no file is read"
    );
    assert_eq!(report["requests"], 1, "only the head lookup");
    for f in FIVE {
        assert_eq!(
            fingerprint_of(&report, &p(f)),
            fingerprint_of(&first, &p(f))
        );
    }
    assert_eq!(sb.stats()["wake"]["last_evidence"], evidence.as_str());
    tick(&sb, &at(4), &[], 0);
}

#[test]
fn a_file_over_the_size_limit_is_fingerprinted_by_its_content_id_without_a_read() {
    let sb = Sandbox::with_files(&FIVE);
    let report = tick(&sb, &at(0), &["--max-file-bytes", "10"], 10);
    assert_eq!(report["file_reads"], 0);
    assert_eq!(report["fresh_evaluations"], 5);
    for f in FIVE {
        let blob = sb.repo.blob(&p(f));
        assert_eq!(parts(&fingerprint_of(&report, &p(f)))[0], &blob[..16]);
    }
}

// ---------------------------------------------------------------------------
// explain and stats
// ---------------------------------------------------------------------------

#[test]
fn explain_an_unchanged_file_says_unchanged_and_shows_every_part() {
    let sb = Sandbox::with_files(&FIVE);
    let first = tick(&sb, &at(0), &[], 10);
    let fp = fingerprint_of(&first, &p("a.js"));
    let state = snapshot(&sb.state);

    let out = sb.explain(&p("a.js"), false);
    expect_code(&out, 0);
    let text = &out.stdout;
    assert!(text.starts_with(&format!(
        "file: libs/shared/a.js\nverdict: unchanged: the next look reuses the remembered decision without a read\nremembered: {fp}\ncurrent:    {fp}\n"
    )), "{text}");
    let header = text.lines().find(|l| l.contains("part")).expect("a table");
    assert!(
        header.contains("remembered") && header.contains("current"),
        "{header}"
    );
    for (name, value) in PART_NAMES.iter().zip(parts(&fp)) {
        let row = text
            .lines()
            .find(|l| {
                l.trim_start_matches('│')
                    .trim_start()
                    .starts_with(&format!("{name} "))
            })
            .unwrap_or_else(|| panic!("no row for {name}:\n{text}"));
        assert_eq!(row.matches(value).count(), 2, "{row}");
        assert!(!row.contains("differs"), "{row}");
    }

    let out = sb.explain(&p("a.js"), true);
    expect_code(&out, 0);
    let e = out.json();
    assert_eq!(e["remembered_fingerprint"], fp.as_str());
    assert_eq!(e["current_fingerprint"], fp.as_str());
    let names: Vec<&str> = e["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect();
    assert_eq!(names, PART_NAMES);
    assert!(
        e["parts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["differs"] == false)
    );
    assert_eq!(e["last_decision"]["outcome"], NEEDS_REVIEW);
    assert_eq!(snapshot(&sb.state), state, "explain wrote the state");
}

#[test]
fn explain_a_committed_but_unticked_change_names_the_part_that_differs() {
    let sb = Sandbox::new();
    sb.repo.write(&p("a.js"), util::plain_js("a.js"));
    sb.repo.write(&p("b.js"), "const a = require('./a');\n");
    sb.repo.commit("b depends on a");
    tick(&sb, &at(0), &[], 10);
    sb.repo.write(&p("a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("change a.js");

    let out = sb.explain(&p("a.js"), false);
    expect_code(&out, 0);
    assert!(
        out.stdout.contains("\nverdict: changed: content differs\n"),
        "{}",
        out.stdout
    );
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("│ content "))
        .unwrap_or_else(|| panic!("no content row:\n{}", out.stdout));
    assert!(row.trim_end().ends_with("│ yes     │"), "{row}");

    let differing = |file: &str| -> (String, Vec<String>) {
        let out = sb.explain(&p(file), true);
        expect_code(&out, 0);
        let e = out.json();
        let parts = e["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["differs"] == true)
            .map(|p| p["part"].as_str().unwrap().to_string())
            .collect();
        (e["verdict"].as_str().unwrap().to_string(), parts)
    };
    assert_eq!(
        differing("a.js"),
        ("changed: content differs".into(), vec!["content".into()])
    );
    assert_eq!(
        differing("b.js"),
        (
            "changed: dependencies differ".into(),
            vec!["dependencies".into()]
        )
    );
}

#[test]
fn stats_without_a_state_exits_1_and_says_to_tick_first() {
    let sb = Sandbox::new();
    let out = sb.sentinel(["stats", "--state"]).arg(&sb.state).output();
    expect_code(&out, 1);
    assert_eq!(
        out.stderr_line(),
        format!(
            "error: no state file at `{}` yet; run `sentinel tick` first, or point --state at an existing one",
            sb.state.display()
        )
    );
    assert_eq!(out.stdout, "");
}

#[test]
fn state_example_json_loads() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/state.example.json");
    let sb = Sandbox::new();
    let out = sb.sentinel(["stats", "--state", example]).output();
    expect_code(&out, 0);
    assert_eq!(out.stderr, "");
    let text = &out.stdout;
    let titles: Vec<usize> = ["│ wake gate ", "│ novelty gate ", "│ outcomes "]
        .iter()
        .map(|t| {
            text.find(t)
                .unwrap_or_else(|| panic!("no {t} table:\n{text}"))
        })
        .collect();
    assert!(
        titles.windows(2).all(|w| w[0] < w[1]),
        "tables out of order:\n{text}"
    );

    let out = sb
        .sentinel(["stats", "--json", "--state", example])
        .output();
    expect_code(&out, 0);
    let s = out.json();
    let w = &s["wake"];
    assert_eq!(u(&w["ticks"]), u(&w["wakes"]) + u(&w["noops"]), "{w}");
    let by_reason: u64 = w["by_reason"].as_object().unwrap().values().map(u).sum();
    assert_eq!(by_reason, u(&w["ticks"]), "{w}");
}

// ---------------------------------------------------------------------------
// The command line
// ---------------------------------------------------------------------------

#[test]
fn help_names_every_exit_code() {
    let sb = Sandbox::new();
    let out = sb.sentinel(["tick", "--help"]).output();
    expect_code(&out, 0);
    let help = &out.stdout;
    for needle in [
        "10..17",
        "10 first_run",
        "11 sha_unavailable",
        "12 repo_changed",
        "13 evidence_changed",
        "14 backlog",
        "observation_due",
        "opportunity_due",
        "autonomy_due",
        "[env: SENTINEL_STATE=]",
        "[env: SENTINEL_NOW=]",
    ] {
        assert!(
            help.contains(needle),
            "--help does not mention {needle}:\n{help}"
        );
    }
    for (code, word) in [
        ("0", "none:"),
        ("20", "busy:"),
        ("1", "error"),
        ("2", "usage"),
    ] {
        assert!(
            help.lines()
                .any(|l| l.split_whitespace().take(2).eq([code, word])),
            "--help has no line for exit code {code}:\n{help}"
        );
    }
}

#[test]
fn a_usage_error_exits_2_and_touches_nothing() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb.tick(&at(0), &["--batch", "x"]);
    expect_code(&out, 2);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("error: invalid value 'x' for '--batch <N>'"),
        "{}",
        out.stderr
    );
    assert!(!sb.state.parent().unwrap().exists());
}

#[test]
fn a_lock_pattern_that_is_no_glob_is_a_usage_error_not_a_lock_dropped() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb.tick(&at(0), &["--lock", "src/["]);
    expect_code(&out, 2);
    assert!(
        out.stderr
            .starts_with("error: invalid value 'src/[' for '--lock <GLOB>': `src/[` is not a glob"),
        "{}",
        out.stderr
    );
    assert!(!sb.state.parent().unwrap().exists());
}

#[test]
fn a_time_that_is_not_rfc3339_is_a_usage_error_naming_rfc3339() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb.tick("yesterday", &[]);
    expect_code(&out, 2);
    assert!(
        out.stderr.starts_with(
            "error: invalid value 'yesterday' for '--now <RFC3339>': `yesterday` is not an RFC 3339 time"
        ),
        "{}",
        out.stderr
    );

    let out = sb
        .sentinel(["tick", "--path", WATCHED])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("SENTINEL_NOW", "yesterday")
        .output();
    expect_code(&out, 2);
    assert!(out.stderr.contains("RFC 3339"), "{}", out.stderr);
    assert!(!sb.state.parent().unwrap().exists());
}

#[test]
fn every_setting_can_come_from_the_environment() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb
        .sentinel(["tick"])
        .env("SENTINEL_REPO", &sb.repo.root)
        .env("SENTINEL_PATH", WATCHED)
        .env("SENTINEL_STATE", &sb.state)
        .env("SENTINEL_NOW", at(0))
        .env("SENTINEL_MAX_READS", "2")
        .env("SENTINEL_JSON", "1")
        .output();
    expect_code(&out, 10);
    let report = out.json();
    assert_eq!(report["fresh_evaluations"], 2);
    assert_eq!(report["pending"], 3);
    assert!(sb.state.is_file());
    let stats = sb
        .sentinel(["stats", "--json"])
        .env("SENTINEL_STATE", &sb.state)
        .output();
    expect_code(&stats, 0);
    let stats = stats.json();
    assert_eq!(stats["wake"]["ticks"], 1);
    assert_eq!(stats["novelty"]["pending"], 3);
}

#[test]
fn a_repo_that_is_not_a_directory_exits_1_naming_it() {
    let sb = Sandbox::new();
    let missing = sb.root().join("no-such-clone");
    let out = sb
        .sentinel(["tick", "--now", &at(0)])
        .arg("--repo")
        .arg(&missing)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 1);
    assert_eq!(
        out.stderr_line(),
        format!(
            "error: --repo `{}` is not a directory; run sentinel inside a git clone or point --repo at one",
            missing.display()
        )
    );
    assert!(!sb.state.parent().unwrap().exists());
}

#[test]
fn the_default_state_lives_in_the_clone_and_stays_out_of_git_status() {
    let sb = Sandbox::with_files(&FIVE);
    let out = sb
        .sentinel(["tick", "--now", &at(0), "--path", WATCHED])
        .current_dir(&sb.repo.root)
        .output();
    expect_code(&out, 10);
    let state = sb.repo.root.join(".sentinel").join("state.json");
    assert!(state.is_file());
    assert_eq!(sb.repo.git(&["status", "--porcelain"]), "");
    let out = sb
        .sentinel(["tick", "--now", &at(2), "--path", WATCHED])
        .current_dir(&sb.repo.root)
        .output();
    expect_code(&out, 0);
    assert!(util::sidecar(&state, ".noops").is_file());
}

// ---------------------------------------------------------------------------
// The GitLab source, against the fake GitLab in `util::gitlab`
// ---------------------------------------------------------------------------

/// A tick over the API that must exit with `code`; returns its report.
#[track_caller]
fn api_tick(sb: &Sandbox, api: &Api, now: &str, extra: &[&str], code: i32) -> Value {
    let out = sb.api_tick_cmd(api, now).args(extra).output();
    expect_code(&out, code);
    let report = out.json();
    assert_eq!(report["exit_code"], code, "exit_code field of {report}");
    report
}

/// `(path, outcome, novelty)` for files reused unchanged.
fn reused(names: &[&str]) -> Vec<(String, String, String)> {
    names
        .iter()
        .map(|f| (p(f), "reused".to_string(), "unchanged".to_string()))
        .collect()
}

#[test]
fn gitlab_listing_follows_link_rel_next_across_three_pages() {
    let names: Vec<String> = (0..250).map(|i| format!("m{i:03}.js")).collect();
    let mut refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // A directory: listed by GitLab as a `tree` entry, which is not a file.
    refs.push("sub/z.js");
    let sb = Sandbox::with_files(&refs);
    let head = sb.repo.head();
    let gl = sb.gitlab();
    let api = Api::new(&gl);

    let report = api_tick(&sb, &api, &at(0), &["--max-reads", "0"], 10);
    // The 251 files come in one archive download (`read`).
    assert_eq!(
        report["requests_by_kind"],
        json!({"head": 1, "list": 3, "read": 1, "compare": 0, "history": 0})
    );
    assert_eq!(report["fresh_evaluations"], 251);
    assert_eq!(report["pending"], 0);
    let mut expected: Vec<String> = refs.iter().map(|n| p(n)).collect();
    expected.sort();
    let got: Vec<String> = files(&report).into_iter().map(|f| f.0).collect();
    assert_eq!(got, expected);
    assert!(
        files(&report).iter().all(|f| f.2 == "first-seen"),
        "{report}"
    );

    let pages = gl.requests_to(Endpoint::Tree);
    assert_eq!(pages.len(), 3, "251 files and a directory: 3 pages of 100");
    for page in &pages {
        assert_eq!(page.param("path"), Some(WATCHED));
        assert_eq!(page.param("ref"), Some(head.as_str()));
        assert_eq!(page.param("recursive"), Some("true"));
        assert_eq!(page.param("per_page"), Some("100"));
        assert_eq!(page.param("pagination"), Some("keyset"));
    }
    let tokens: Vec<Option<&str>> = pages.iter().map(|r| r.param("page_token")).collect();
    assert_eq!(
        tokens,
        [
            None,
            Some("libs/shared/m099.js"),
            Some("libs/shared/m199.js")
        ],
        "each page resumes where the server's Link said"
    );

    api_tick(&sb, &api, &at(2), &[], 0);
}

#[test]
fn gitlab_paths_and_the_project_are_url_encoded() {
    let sb = Sandbox::new();
    let dir = "libs/spaß #1";
    let odd = format!("{dir}/100% ok?.js");
    let plain = format!("{dir}/plain.js");
    sb.repo.write(&odd, util::plain_js("odd"));
    sb.repo.write(&plain, util::plain_js("plain"));
    sb.repo.write("libs/other/x.js", util::plain_js("x"));
    // 101 files: the second page resumes after an odd name, so the Link the
    // server sends carries it encoded (`+` for a space, as Rails does).
    let fillers: Vec<String> = (0..99).map(|i| format!("{dir}/z {i:02}ü.txt")).collect();
    for f in &fillers {
        sb.repo.write(f, "filler\n");
    }
    let first = sb.repo.commit("odd names");
    let gl = sb.gitlab();
    let api = Api {
        path: Some(dir.into()),
        ..Api::new(&gl)
    };

    let report = api_tick(&sb, &api, &at(0), &["--max-reads", "0"], 10);
    assert_eq!(report["head"], first.as_str());
    let got = files(&report);
    assert_eq!(got.len(), 101);
    assert_eq!(
        got[..2],
        [
            (odd.clone(), NEEDS_REVIEW.into(), "first-seen".into()),
            (plain.clone(), NEEDS_REVIEW.into(), "first-seen".into()),
        ]
    );
    let listed: Vec<&str> = got[2..].iter().map(|f| f.0.as_str()).collect();
    assert_eq!(
        listed,
        fillers.iter().map(String::as_str).collect::<Vec<_>>()
    );

    let heads = gl.requests_to(Endpoint::Commits);
    let head = &heads[0];
    assert_eq!(head.param("path"), Some(dir), "{}", head.target);
    assert_eq!(head.param("ref_name"), Some("main"));
    assert!(
        head.target
            .starts_with("/api/v4/projects/group%2Fproject/repository/commits?"),
        "{}",
        head.target
    );
    assert!(
        !head.target.contains(' ') && !head.target.contains('#'),
        "{}",
        head.target
    );
    assert!(head.target.contains("spa%C3%9F"), "{}", head.target);
    let trees = gl.requests_to(Endpoint::Tree);
    assert_eq!(trees.len(), 2);
    assert_eq!(trees[0].param("path"), Some(dir), "{}", trees[0].target);
    assert_eq!(trees[1].param("path"), Some(dir), "{}", trees[1].target);
    let token = trees[1].param("page_token").expect("a page token");
    assert!(token.starts_with("libs/spaß #1/z "), "{token}");
    assert!(
        trees[1].target.contains("spa%C3%9F+%231"),
        "{}",
        trees[1].target
    );

    api_tick(&sb, &api, &at(2), &[], 0);

    sb.repo.write(&odd, "// odd\nmodule.exports = 2;\n");
    let second = sb.repo.commit("change the odd one");
    let report = api_tick(&sb, &api, &at(4), &[], 12);
    assert_eq!(
        report["verdict"]["detail"],
        json!({"from": first, "to": second})
    );
    assert_eq!(
        files(&report),
        vec![(odd.clone(), NEEDS_REVIEW.into(), "changed".into())]
    );
    // Whatever names the file in a path segment names it whole.
    for r in gl.requests_to(Endpoint::File) {
        assert_eq!(r.segments[6], odd, "{}", r.target);
    }
}

#[test]
fn gitlab_a_cut_compare_falls_back_to_the_listing() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    api_tick(&sb, &api, &at(0), &[], 10);

    gl.cut_compare(true);
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit("change c.js");
    let report = api_tick(&sb, &api, &at(2), &[], 12);
    let kinds = &report["requests_by_kind"];
    assert_eq!(
        (
            &kinds["head"],
            &kinds["compare"],
            &kinds["list"],
            &kinds["read"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(1)),
        "{kinds}"
    );
    let changed: Vec<_> = files(&report)
        .into_iter()
        .filter(|f| f.2 != "unchanged")
        .collect();
    assert_eq!(changed, vec![evaluated("c.js", "changed")]);
    assert_eq!(report["file_reads"], 1);
    assert_eq!(gl.requests_to(Endpoint::Compare).len(), 1);
}

#[test]
fn gitlab_a_revert_behind_a_cut_compare_still_raises_the_rollback_streak() {
    let (sb, gl) = after_first_run();
    let api = Api::new(&gl);
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit("change c.js");
    api_tick(&sb, &api, &at(2), &[], 12);
    sb.repo.git(&["revert", "--no-edit", "HEAD"]);
    // The diff list is cut, the commit list is whole: the revert is known.
    gl.cut_compare(true);
    let report = api_tick(&sb, &api, &at(4), &[], 12);
    assert_eq!(report["requests_by_kind"]["list"], 1, "{report}");
    assert_eq!(
        parts(&fingerprint_of(&report, &p("c.js")))[5],
        "1",
        "the git source raises the streak for the same history: {report}"
    );
}

#[test]
fn gitlab_watching_the_whole_repository_sends_no_path() {
    let sb = Sandbox::with_files(&["a.js"]);
    sb.repo.write("README.md", "# top\n");
    sb.repo.commit("a readme");
    let gl = sb.gitlab();
    let api = Api {
        path: None,
        ..Api::new(&gl)
    };
    let report = api_tick(&sb, &api, &at(0), &[], 10);
    let paths: Vec<String> = files(&report).into_iter().map(|f| f.0).collect();
    assert_eq!(paths, ["README.md", "libs/shared/a.js"]);
    let head = &gl.requests_to(Endpoint::Commits)[0];
    assert_eq!(head.param("path"), None, "{}", head.target);
    assert_eq!(gl.requests_to(Endpoint::Tree)[0].param("path"), None);
    api_tick(&sb, &api, &at(2), &[], 0);
}

/// After a first run, one tick whose head lookup fails for a passing reason:
/// it wakes with `sha_unavailable`, keeps the remembered head, finds nothing
/// changed, and the next good lookup is a no-op. Returns the failing tick's
/// report.
#[track_caller]
fn transient_head_failure(sb: &Sandbox, gl: &FakeGitLab, api: &Api, extra: &[&str]) -> Value {
    let good = Api::new(gl);
    let head = sb.repo.head();
    let before = gl.requests_to(Endpoint::Commits).len();
    let mut args = vec!["--fake-sleep"];
    args.extend_from_slice(extra);
    let report = api_tick(sb, api, &at(2), &args, 11);
    assert_eq!(report["verdict"]["reason"], "sha_unavailable");
    let error = report["verdict"]["detail"]["error"].as_str().unwrap();
    assert!(!error.is_empty());
    assert!(!error.contains(TOKEN), "{error}");
    assert_eq!(report["head"], Value::Null);
    assert_eq!(report["requests_by_kind"]["head"], 1, "{report}");
    assert_eq!(report["file_reads"], 0);
    assert_eq!(report["fresh_evaluations"], 0);
    assert_eq!(
        sb.stats()["wake"]["last_head"],
        head.as_str(),
        "the remembered head was overwritten"
    );
    if api.url == good.url {
        assert_eq!(gl.requests_to(Endpoint::Commits).len(), before + 1);
    }
    api_tick(sb, &good, &at(4), &[], 0);
    report
}

/// A sandbox with five files, a fake GitLab and a first run behind it.
fn after_first_run() -> (Sandbox, FakeGitLab) {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    api_tick(&sb, &Api::new(&gl), &at(0), &[], 10);
    (sb, gl)
}

/// docs/ci.md and docs/benchmark.md: a no-op costs 1 request, writes no
/// byte of state and appends one 29-byte line to the no-op journal.
#[test]
fn gitlab_a_noop_costs_one_request_writes_no_state_and_journals_29_bytes() {
    let (sb, gl) = after_first_run();
    let state = snapshot(&sb.state);
    let journal_len = |sb: &Sandbox| fs::metadata(sb.journal()).map_or(0, |m| m.len());
    // The first no-op also writes the journal's header line.
    api_tick(&sb, &Api::new(&gl), &at(2), &[], 0);
    let before = journal_len(&sb);
    let report = api_tick(&sb, &Api::new(&gl), &at(4), &[], 0);
    assert_eq!(report["requests"], 1);
    assert_eq!(
        report["requests_by_kind"],
        json!({"head": 1, "list": 0, "read": 0, "compare": 0, "history": 0})
    );
    assert_eq!(report["state_written"], false);
    assert_eq!(snapshot(&sb.state), state, "a no-op wrote the state");
    assert_eq!(journal_len(&sb) - before, 29);
}

#[test]
fn gitlab_a_500_on_the_head_lookup_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    gl.push(Endpoint::Commits, Reply::error(500, "500.json"));
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
    assert_eq!(files(&report), reused(&FIVE), "the listing still works");
    assert!(
        report["verdict"]["detail"]["error"]
            .as_str()
            .unwrap()
            .contains("500"),
        "{report}"
    );
}

#[test]
fn gitlab_a_503_html_page_on_the_head_lookup_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    gl.push(Endpoint::Commits, Reply::html(503, "503.html"));
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
    assert_eq!(files(&report), reused(&FIVE));
}

#[test]
fn gitlab_a_429_on_the_head_lookup_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    gl.push(Endpoint::Commits, Reply::too_many_requests(7));
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
    assert_eq!(files(&report), reused(&FIVE));
}

#[test]
fn gitlab_an_html_page_with_200_on_the_head_lookup_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    gl.push(Endpoint::Commits, Reply::html(200, "sign-in.html"));
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
    assert_eq!(files(&report), reused(&FIVE));
}

#[test]
fn gitlab_a_truncated_head_answer_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    // The start of the real answer, cut by a connection that closed early.
    let whole = format!(
        r#"[{{"id":"{}","short_id":"{}","title":"initial files"}}]"#,
        sb.repo.head(),
        &sb.repo.head()[..11]
    );
    gl.push(
        Endpoint::Commits,
        Reply::Truncated {
            status: 200,
            declared: whole.len() + 300,
            body: whole.as_bytes()[..30].to_vec(),
        },
    );
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
    assert_eq!(files(&report), reused(&FIVE));
}

#[test]
fn gitlab_a_complete_looking_answer_shorter_than_announced_is_still_truncated() {
    let (sb, gl) = after_first_run();
    // Valid JSON naming the right head, but 300 bytes short of what the
    // headers announced: only the length tells it was cut.
    let whole = format!(r#"[{{"id":"{}"}}]"#, sb.repo.head());
    gl.push(
        Endpoint::Commits,
        Reply::Truncated {
            status: 200,
            declared: whole.len() + 300,
            body: whole.into_bytes(),
        },
    );
    transient_head_failure(&sb, &gl, &Api::new(&gl), &[]);
}

#[test]
fn gitlab_a_refused_connection_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    let api = Api {
        url: format!("http://127.0.0.1:{}/api/v4", util::gitlab::closed_port()),
        ..Api::new(&gl)
    };
    let report = transient_head_failure(&sb, &gl, &api, &[]);
    assert!(
        report["notes"].as_array().is_some_and(|n| !n.is_empty()),
        "the listing failed too, and says so: {report}"
    );
}

#[test]
fn gitlab_a_head_lookup_slower_than_http_timeout_wakes_sha_unavailable() {
    let (sb, gl) = after_first_run();
    // The server's thread waits 3 s and would then answer well (a no-op);
    // sentinel gives up after 1 s.
    gl.push(
        Endpoint::Commits,
        Reply::Slow {
            delay: std::time::Duration::from_secs(3),
            then: None,
        },
    );
    let report = transient_head_failure(&sb, &gl, &Api::new(&gl), &["--http-timeout", "1"]);
    assert_eq!(files(&report), reused(&FIVE));
    assert!(
        report["verdict"]["detail"]["error"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{report}"
    );
}

/// A tick refused for a reason no retry can fix exits 1, prints no report,
/// names `variable` and writes nothing: first before any state exists, then
/// after a first run. `prepare` queues what the server should answer.
#[track_caller]
fn config_failure(api: impl Fn(&FakeGitLab) -> Api, prepare: impl Fn(&FakeGitLab), variable: &str) {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    prepare(&gl);
    let out = sb.api_tick_cmd(&api(&gl), &at(0)).output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    let line = out.stderr_line().to_string();
    assert!(line.starts_with("error: "), "{line}");
    assert!(line.contains(variable), "{line} does not name {variable}");
    assert!(!line.contains(TOKEN), "{line}");
    assert!(!sb.state.exists(), "a state was written");
    assert!(!sb.journal().exists());

    api_tick(&sb, &Api::new(&gl), &at(2), &[], 10);
    let state = snapshot(&sb.state);
    prepare(&gl);
    let out = sb.api_tick_cmd(&api(&gl), &at(4)).output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert!(out.stderr_line().contains(variable), "{}", out.stderr);
    assert_eq!(snapshot(&sb.state), state, "the state changed");
    assert!(!sb.journal().exists(), "a journal line was written");
    assert_eq!(sb.stats()["wake"]["ticks"], 1);
}

#[test]
fn gitlab_a_401_exits_1_naming_the_token_variable() {
    config_failure(
        |gl| Api {
            token: Some("glpat-revoked".into()),
            ..Api::new(gl)
        },
        |_| {},
        "SENTINEL_GITLAB_TOKEN",
    );
}

#[test]
fn gitlab_a_403_insufficient_scope_exits_1_naming_the_token_variable() {
    config_failure(
        Api::new,
        |gl| {
            gl.push(
                Endpoint::Commits,
                Reply::error(403, "403-insufficient-scope.json"),
            )
        },
        "SENTINEL_GITLAB_TOKEN",
    );
}

#[test]
fn gitlab_a_404_project_exits_1_naming_the_project_variable() {
    config_failure(
        |gl| Api {
            project: "group/missing".into(),
            ..Api::new(gl)
        },
        |_| {},
        "SENTINEL_PROJECT",
    );
}

#[test]
fn gitlab_a_404_branch_exits_1_naming_the_branch_variable() {
    config_failure(
        |gl| Api {
            branch: "does-not-exist".into(),
            ..Api::new(gl)
        },
        |_| {},
        "SENTINEL_BRANCH",
    );
}

/// After a good first run, GitLab answers the head lookup with something
/// that will not pass by itself: every later tick exits 1 naming
/// `variable`, and writes nothing.
#[track_caller]
fn loud_after_a_first_run(prepare: impl Fn(&FakeGitLab), variable: &str) {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    api_tick(&sb, &api, &at(0), &[], 10);
    for minute in [2, 4, 6] {
        prepare(&gl);
        let run = sb
            .api_tick_cmd(&api, &at(minute))
            .args(["--trigger", "push"]);
        let line = loud(&sb, run, variable);
        assert!(!line.contains(TOKEN), "{line}");
    }
    assert_eq!(gl.queued(), 0);
    assert_eq!(sb.stats()["wake"]["ticks"], 1);
}

#[test]
fn gitlab_a_404_project_after_a_first_run_is_loud_every_tick() {
    loud_after_a_first_run(
        |gl| gl.push(Endpoint::Commits, Reply::error(404, "404-project.json")),
        "SENTINEL_PROJECT",
    );
}

#[test]
fn gitlab_a_404_branch_after_a_first_run_is_loud_every_tick() {
    loud_after_a_first_run(
        |gl| gl.push(Endpoint::Commits, Reply::error(404, "404-ref.json")),
        "`--branch` / `SENTINEL_BRANCH`",
    );
}

#[test]
fn gitlab_a_path_that_never_existed_is_loud() {
    loud_after_a_first_run(
        |gl| gl.push(Endpoint::Commits, Reply::json(200, &json!([]))),
        "`--path` / `SENTINEL_PATH`",
    );
}

#[test]
fn gitlab_a_429_on_the_listing_honours_retry_after_twice_then_succeeds() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    gl.push_n(Endpoint::Tree, 2, Reply::too_many_requests(7));
    let report = api_tick(&sb, &Api::new(&gl), &at(0), &["--fake-sleep"], 10);
    assert_eq!(report["slept_ms"], json!([7000, 7000]));
    assert_eq!(
        files(&report),
        FIVE.map(|f| evaluated(f, "first-seen")).to_vec()
    );
    assert_eq!(gl.requests_to(Endpoint::Tree).len(), 3);
    assert_eq!(report["requests_by_kind"]["list"], 3, "each attempt counts");
    assert_eq!(gl.queued(), 0);
}

#[test]
fn gitlab_a_429_on_content_three_times_leaves_the_file_pending() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    gl.push_n(Endpoint::BlobRaw, 3, Reply::too_many_requests(7));
    let report = api_tick(&sb, &api, &at(0), &["--fake-sleep", "--all-pending"], 10);
    assert_eq!(
        report["slept_ms"],
        json!([7000, 7000]),
        "2 retries, then no more"
    );
    assert_eq!(gl.requests_to(Endpoint::BlobRaw).len(), 3);
    let a = &files(&report)[0];
    assert_eq!(
        (a.0.as_str(), a.1.as_str()),
        (p("a.js").as_str(), "pending")
    );
    assert!(u(&report["pending"]) >= 1, "{report}");
    assert_eq!(report["file_reads"], 0);

    // The file waits in the backlog and is judged on the next tick.
    let report = api_tick(&sb, &api, &at(2), &["--fake-sleep"], 14);
    assert!(
        files(&report).contains(&evaluated("a.js", "first-seen")),
        "{report}"
    );
    assert_eq!(report["slept_ms"], json!([]));
}

#[test]
fn gitlab_a_retry_after_over_60_seconds_is_not_slept() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    gl.push(Endpoint::BlobRaw, Reply::too_many_requests(120));
    let report = api_tick(
        &sb,
        &Api::new(&gl),
        &at(0),
        &["--fake-sleep", "--all-pending"],
        10,
    );
    assert_eq!(report["slept_ms"], json!([]));
    assert_eq!(gl.requests_to(Endpoint::BlobRaw).len(), 1, "no retry");
    assert_eq!(files(&report)[0].1, "pending");
    assert_eq!(report["file_reads"], 0);
}

#[test]
fn gitlab_a_first_run_without_a_commit_under_the_path_saves_nothing() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api {
        path: Some("libs/nothing".into()),
        ..Api::new(&gl)
    };
    let out = sb.api_tick_cmd(&api, &at(0)).output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert!(out.stderr_line().contains("libs/nothing"), "{}", out.stderr);
    assert!(!sb.state.exists());
    assert_eq!(gl.requests().len(), 1, "the head lookup only");
}

#[test]
fn gitlab_a_redirect_to_another_host_never_carries_the_token() {
    let (sb, gl) = after_first_run();
    let other = sb.gitlab();
    other.require_token(None);
    gl.push(
        Endpoint::Commits,
        Reply::Redirect {
            status: 301,
            origin: other.other_host_origin(),
        },
    );
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(2)).output();
    for r in other.requests() {
        assert_eq!(
            r.header("private-token"),
            None,
            "the other host saw the token: {r:?}"
        );
        assert!(r.header("authorization").is_none(), "{r:?}");
    }
    // Not followed: a configuration to fix, named, and nothing saved.
    expect_code(&out, 1);
    assert!(
        out.stderr_line().contains("SENTINEL_GITLAB_URL"),
        "{}",
        out.stderr
    );
    assert_eq!(sb.stats()["wake"]["ticks"], 1);
    assert!(!out.stdout.contains(TOKEN) && !out.stderr.contains(TOKEN));
}

#[test]
fn gitlab_a_redirect_on_the_same_host_is_followed() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    gl.push(
        Endpoint::Commits,
        Reply::Redirect {
            status: 301,
            origin: gl.origin(),
        },
    );
    let report = api_tick(&sb, &Api::new(&gl), &at(0), &[], 10);
    assert_eq!(report["head"], sb.repo.head().as_str());
    let heads = gl.requests_to(Endpoint::Commits);
    assert_eq!(heads.len(), 2);
    assert!(
        heads
            .iter()
            .all(|r| r.header("private-token") == Some(TOKEN))
    );
}

#[test]
fn gitlab_only_a_ci_job_token_exits_1_naming_sentinel_gitlab_token() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api {
        token: None,
        ..Api::new(&gl)
    };
    let out = sb
        .api_tick_cmd(&api, &at(0))
        .env("CI_JOB_TOKEN", "job-token-abc")
        .output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    let line = out.stderr_line();
    assert!(line.contains("SENTINEL_GITLAB_TOKEN"), "{line}");
    assert!(!line.contains("job-token-abc"), "{line}");
    assert!(gl.requests().is_empty(), "nothing to ask without a token");
    assert!(!sb.state.exists());
}

#[test]
fn gitlab_ci_variables_alone_configure_the_source() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let out = sb
        .sentinel(["tick", "--json", "--now", &at(0), "--path", WATCHED])
        .arg("--state")
        .arg(&sb.state)
        .env("CI_API_V4_URL", gl.url())
        .env("CI_PROJECT_ID", "42")
        .env("CI_DEFAULT_BRANCH", "main")
        .env("CI_JOB_TOKEN", "job-token-abc")
        .env("GITLAB_TOKEN", TOKEN)
        .output();
    expect_code(&out, 10);
    assert_eq!(out.json()["head"], sb.repo.head().as_str());
    let head = &gl.requests_to(Endpoint::Commits)[0];
    assert!(
        head.target
            .starts_with("/api/v4/projects/42/repository/commits?"),
        "{}",
        head.target
    );
    assert_eq!(head.param("ref_name"), Some("main"));
    assert_eq!(head.header("private-token"), Some(TOKEN));
    assert!(head.header("job-token").is_none());
}

/// Every file under `dir`, recursively.
fn all_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Panics, naming the file, when any file under the sandbox but the
/// repository holds `secret`; says whether the journal was among them.
#[track_caller]
fn assert_no_file_holds(sb: &Sandbox, secret: &str, when: &str) -> bool {
    let mut journal_seen = false;
    for file in all_files(sb.root()) {
        if file.starts_with(&sb.repo.root) {
            continue;
        }
        journal_seen |= file == sb.journal();
        let bytes = fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds a secret after {when}",
            file.display()
        );
    }
    journal_seen
}

#[test]
fn gitlab_the_token_never_appears_in_output_state_or_journal() {
    const CANARY: &str = "glpat-SECRET-canary-1234";
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    gl.require_token(Some(CANARY));
    let api = Api {
        token: Some(CANARY.into()),
        ..Api::new(&gl)
    };
    let mut outputs = Vec::new();
    let mut journal_seen = false;
    let mut check_files = |when: &str| {
        journal_seen |= crate::assert_no_file_holds(&sb, CANARY, when);
    };

    let run = |now: &str, code: i32| {
        let out = sb.api_tick_cmd(&api, now).args(["--fake-sleep"]).output();
        expect_code(&out, code);
        out
    };
    outputs.push(run(&at(0), 10));
    check_files("first_run");
    outputs.push(run(&at(2), 0));
    check_files("a no-op");
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit("change c.js");
    outputs.push(run(&at(4), 12));
    check_files("repo_changed");
    gl.require_token(Some("glpat-another-one"));
    outputs.push(run(&at(6), 1));
    check_files("a 401");
    gl.require_token(Some(CANARY));
    gl.push(Endpoint::Commits, Reply::error(500, "500.json"));
    outputs.push(run(&at(8), 11));
    check_files("a 500");
    outputs.push(run(&at(10), 0));
    check_files("a no-op after the 500");
    assert!(journal_seen, "the journal was checked");

    for out in &outputs {
        assert!(!out.stdout.contains(CANARY), "{}", out.stdout);
        assert!(!out.stderr.contains(CANARY), "{}", out.stderr);
    }
    // It was sent, in the header and nowhere else.
    let requests = gl.requests();
    assert!(requests.iter().all(|r| !r.target.contains(CANARY)));
    assert_eq!(requests[0].header("private-token"), Some(CANARY));
}

/// The compare names paths, not content ids: each changed file costs one
/// `HEAD files/:path` for its blob id (counted with the compare) and one read.
#[test]
fn gitlab_repo_changed_costs_a_compare_plus_two_requests_per_changed_file() {
    let (sb, gl) = after_first_run();
    sb.repo.write(&p("c.js"), "// c.js\nmodule.exports = 2;\n");
    sb.repo.commit("change c.js");
    let report = api_tick(&sb, &Api::new(&gl), &at(2), &[], 12);
    assert_eq!(files(&report), vec![evaluated("c.js", "changed")]);
    assert_eq!(
        report["requests_by_kind"],
        json!({"head": 1, "list": 0, "read": 1, "compare": 2, "history": 0})
    );
}

/// Commits `n` generated files to `main` in one `git fast-import`: file `i`
/// at `path_of(i)`, holding `content_of(i)`.
fn import_files(
    sb: &Sandbox,
    n: usize,
    path_of: impl Fn(usize) -> String,
    content_of: impl Fn(usize) -> String,
) {
    use std::io::Write;
    let mut stream = Vec::new();
    for i in 0..n {
        let content = content_of(i);
        write!(
            stream,
            "blob\nmark :{}\ndata {}\n{content}\n",
            i + 1,
            content.len()
        )
        .unwrap();
    }
    writeln!(
        stream,
        "commit refs/heads/main\ncommitter t <t@example.invalid> 1781481600 +0000\ndata 6\nfiles\n"
    )
    .unwrap();
    for i in 0..n {
        writeln!(stream, "M 100644 :{} {}", i + 1, path_of(i)).unwrap();
    }
    fast_import(sb, &stream);
}

/// Feeds `stream` to `git fast-import` in the sandbox's repository.
fn fast_import(sb: &Sandbox, stream: &[u8]) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run git fast-import");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stream)
        .expect("feed git fast-import");
    assert!(child.wait().unwrap().success(), "git fast-import failed");
}

/// What the scale test measured: the three ticks' reports and wall times.
struct ScaleRun {
    first: Value,
    noop: Value,
    changed: Value,
    changed_path: String,
    walls: [std::time::Duration; 4],
}

/// Builds a repository of `n` files (1,000 to a directory), runs a first run
/// with `--batch 0` and no read bound, a no-op, and a tick after one file changed.
fn scale_run(n: usize) -> ScaleRun {
    use std::time::Instant;
    let started = Instant::now();
    let sb = Sandbox::new();
    let path_of = |i: usize| format!("{WATCHED}/d{:03}/f{i:06}.js", i / 1000);
    import_files(&sb, n, path_of, |i| {
        format!("// f{i:06}.js\nmodule.exports = {i};\n")
    });
    let built = started.elapsed();

    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let t = Instant::now();
    let reads = n.to_string();
    let first = api_tick(
        &sb,
        &api,
        &at(0),
        &["--batch", "0", "--max-reads", &reads],
        10,
    );
    let first_wall = t.elapsed();

    let t = Instant::now();
    let noop = api_tick(&sb, &api, &at(2), &[], 0);
    let noop_wall = t.elapsed();

    let changed_index = n * 42 / 100 + 42;
    let changed_path = path_of(changed_index);
    let content = format!("// f{changed_index:06}.js\nmodule.exports = -1;\n");
    let change = format!(
        "commit refs/heads/main\ncommitter t <t@example.invalid> 1781481660 +0000\ndata 7\nchange\n\
         from refs/heads/main^0\nM 100644 inline {changed_path}\ndata {}\n{content}\n",
        content.len()
    );
    fast_import(&sb, change.as_bytes());
    let t = Instant::now();
    let changed = api_tick(&sb, &api, &at(4), &[], 12);
    let changed_wall = t.elapsed();
    ScaleRun {
        first,
        noop,
        changed,
        changed_path,
        walls: [built, first_wall, noop_wall, changed_wall],
    }
}

/// The request counts docs/gitlab.md quotes for 100,000 files: a first run
/// lists 100 entries a page (files and their directories) and reads every
/// file from one archive download, a no-op costs `head 1`, one changed file
/// costs `head 1, compare 2, read 1`.
fn assert_scale_requests(n: usize, run: &ScaleRun) {
    let dirs = n.div_ceil(1000);
    let pages = (n + dirs).div_ceil(100);
    assert_eq!(run.first["fresh_evaluations"], n);
    assert_eq!(run.first["pending"], 0);
    assert_eq!(
        run.first["requests_by_kind"],
        json!({"head": 1, "list": pages, "read": 1, "compare": 0, "history": 0})
    );
    assert_eq!(
        run.noop["requests_by_kind"],
        json!({"head": 1, "list": 0, "read": 0, "compare": 0, "history": 0})
    );
    assert_eq!(
        files(&run.changed),
        vec![(
            run.changed_path.clone(),
            NEEDS_REVIEW.to_string(),
            "changed".to_string()
        )]
    );
    assert_eq!(
        run.changed["requests_by_kind"],
        json!({"head": 1, "list": 0, "read": 1, "compare": 2, "history": 0})
    );
}

#[test]
fn a_first_run_on_10000_files_reads_each_once_and_a_noop_then_costs_one_head() {
    let run = scale_run(10_000);
    assert_scale_requests(10_000, &run);
}

#[test]
#[ignore = "scale figure, about 30 s: cargo test --release -- --ignored --nocapture"]
fn repo_changed_on_100000_files_costs_requests_in_proportion_to_the_change() {
    let run = scale_run(100_000);
    let [built, first_wall, noop_wall, changed_wall] = run.walls;
    println!(
        "100,000 files: repository built in {built:.2?}; first_run (--batch 0) {first_wall:.2?} \
         with {}; no-op {noop_wall:.2?}; repo_changed {changed_wall:.2?} with {}",
        run.first["requests_by_kind"], run.changed["requests_by_kind"]
    );
    assert_scale_requests(100_000, &run);
}
