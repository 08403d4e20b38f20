//! Tick-level tests over the in-memory source: exact calls, exact outcomes.

use std::fs;
use std::path::Path;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::source::memory::{Calls, MemorySource};
use crate::state::store;

fn t0() -> DateTime<Utc> {
    "2026-06-16T00:00:00Z".parse().unwrap()
}

fn cfg(dir: &Path, now: DateTime<Utc>) -> TickConfig {
    TickConfig {
        state: dir.join("state.json"),
        rev: "HEAD".into(),
        batch: 5,
        dry_run: false,
        max_files: 200_000,
        max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        evidence: "ev1".into(),
        now,
        advisor: None,
    }
}

fn five_files() -> MemorySource {
    let mut src = MemorySource::new();
    src.commit(&[
        ("libs/shared/a.js", "// a\nmodule.exports = 1;\n"),
        ("libs/shared/b.js", "const a = require('./a');\n"),
        ("libs/shared/c.js", "// c\n"),
        ("libs/shared/README.md", "# shared\n"),
        ("libs/shared/auth.js", "// auth\n"),
    ]);
    src
}

/// Run a tick and return the report and the calls it made.
fn tick(cfg: &TickConfig, src: &mut MemorySource) -> (TickReport, Calls) {
    let before = src.calls;
    let report = run(cfg, src).unwrap();
    let after = src.calls;
    let calls = Calls {
        head: after.head - before.head,
        list: after.list - before.list,
        changes: after.changes - before.changes,
        read: after.read - before.read,
    };
    (report, calls)
}

fn outcomes(r: &TickReport) -> Vec<(String, &'static str)> {
    r.files
        .iter()
        .map(|f| (f.path.clone(), f.outcome.as_str()))
        .collect()
}

fn load(dir: &Path) -> State {
    store::load(&dir.join("state.json")).unwrap().unwrap()
}

#[test]
fn invariant_2_a_noop_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    let path = dir.path().join("state.json");
    let bytes = fs::read(&path).unwrap();
    let mtime = fs::metadata(&path).unwrap().modified().unwrap();

    let (r, calls) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);

    assert_eq!(r.verdict.reason, "none");
    assert_eq!(r.exit_code, 0);
    assert_eq!(
        calls,
        Calls {
            head: 1,
            ..Calls::default()
        }
    );
    assert!(r.files.is_empty());
    assert!(!r.state_written);
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    let journal = journal::read(&path).unwrap();
    assert_eq!(journal.unfolded(load(dir.path()).journal), 1);
}

#[test]
fn invariant_1_unknown_is_never_unchanged_and_never_overwrites_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    let remembered = load(dir.path()).wake.last_head;

    src.fail_head = Some("connection reset".into());
    let (r, calls) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);

    assert_eq!(r.verdict.reason, "sha_unavailable");
    assert_eq!(r.exit_code, 11);
    assert_eq!(load(dir.path()).wake.last_head, remembered);
    // The listing is compared by content id: nothing changed, nothing is read.
    assert_eq!((calls.list, calls.read), (1, 0));
    assert!(r.files.iter().all(|f| f.outcome == Outcome::Reused));
}

#[test]
fn invariant_3_a_needs_review_hand_over_happens_once_per_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let (first, _) = tick(&cfg(dir.path(), t0()), &mut src);
    let handed: Vec<_> = first
        .files
        .iter()
        .filter(|f| f.outcome == Outcome::NeedsReview)
        .map(|f| f.path.clone())
        .collect();
    assert_eq!(
        handed,
        [
            "libs/shared/a.js",
            "libs/shared/auth.js",
            "libs/shared/b.js",
            "libs/shared/c.js"
        ]
    );

    src.fail_head = Some("down".into());
    let (again, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(again.counts.get("needs_review"), None);
    assert_eq!(again.counts.get("reused"), Some(&5));
}

#[test]
fn repo_changed_reads_only_the_changed_file_and_rechecks_its_dependent() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    src.amend(&[("libs/shared/a.js", "// a v2\nmodule.exports = 2;\n")]);

    let (r, calls) = tick(&cfg(dir.path(), t0() + Duration::hours(12)), &mut src);

    assert_eq!(r.exit_code, 12);
    assert_eq!(
        calls,
        Calls {
            head: 1,
            list: 0,
            changes: 1,
            read: 1
        }
    );
    let novelty: Vec<_> = r
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.novelty.map(Novelty::as_str)))
        .collect();
    assert_eq!(
        novelty,
        [
            ("libs/shared/a.js", Some("changed")),
            ("libs/shared/b.js", Some("changed"))
        ]
    );
    assert_eq!(r.fresh_evaluations, 2);
}

#[test]
fn repo_changed_falls_back_to_the_listing_when_the_compare_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    src.amend(&[("libs/shared/c.js", "// c v2\n")]);
    src.fail_changes = true;

    let (r, calls) = tick(&cfg(dir.path(), t0() + Duration::hours(1)), &mut src);

    assert_eq!((calls.changes, calls.list, calls.read), (1, 1, 1));
    assert_eq!(outcomes(&r), [("libs/shared/c.js".into(), "needs_review")]);
    assert!(r.notes[0].starts_with("compare failed"));
}

#[test]
fn a_deleted_file_leaves_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    src.commit(&[("libs/shared/a.js", "// a\nmodule.exports = 1;\n")]);

    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::hours(1)), &mut src);

    assert_eq!(r.exit_code, 12);
    let state = load(dir.path());
    assert_eq!(state.files.keys().collect::<Vec<_>>(), ["libs/shared/a.js"]);
}

#[test]
fn backlog_keeps_every_file_and_evaluates_each_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = MemorySource::new();
    let files: Vec<(String, String)> = (0..7)
        .map(|i| (format!("src/f{i}.rs"), format!("// {i}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    src.commit(&refs);
    let mut evaluated = Vec::new();
    let mut codes = Vec::new();
    for i in 0..5 {
        let mut c = cfg(dir.path(), t0() + Duration::minutes(2 * i));
        c.batch = 2;
        let (r, _) = tick(&c, &mut src);
        codes.push(r.exit_code);
        evaluated.extend(
            r.files
                .iter()
                .filter(|f| f.outcome != Outcome::Pending)
                .map(|f| f.path.clone()),
        );
    }
    assert_eq!(codes, [10, 14, 14, 14, 0]);
    evaluated.sort();
    let expected: Vec<String> = files.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(evaluated, expected);
}

#[test]
fn evidence_changed_rechecks_every_file_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.batch = 0;
    tick(&c, &mut src);

    c.evidence = "ev2".into();
    c.batch = 3;
    c.now = t0() + Duration::minutes(2);
    let (r, calls) = tick(&c, &mut src);

    assert_eq!(r.exit_code, 13);
    assert_eq!(
        (calls.list, calls.read),
        (0, 0),
        "bytes are known by content id"
    );
    assert_eq!(r.fresh_evaluations, 3);
    assert_eq!(r.pending, 2);
    assert!(r.files.iter().all(|f| f.novelty == Some(Novelty::Changed)));
    c.now += Duration::minutes(2);
    let (r, _) = tick(&c, &mut src);
    assert_eq!((r.exit_code, r.fresh_evaluations, r.pending), (14, 2, 0));
}

#[test]
fn invariant_11_an_evicted_file_is_simply_first_seen_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.max_files = 3;
    let (r, _) = tick(&c, &mut src);
    assert_eq!(load(dir.path()).files.len(), 3);
    assert!(r.notes.iter().any(|n| n.contains("--max-files")));

    src.fail_head = Some("down".into());
    c.max_files = 10;
    c.now += Duration::minutes(2);
    let (r, _) = tick(&c, &mut src);
    let first_seen = r
        .files
        .iter()
        .filter(|f| f.novelty == Some(Novelty::FirstSeen))
        .count();
    assert_eq!(first_seen, 2);
    assert_eq!(load(dir.path()).files.len(), 5);
}

#[test]
fn invariant_12_time_is_injected() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let now: DateTime<Utc> = "2031-01-02T03:04:05Z".parse().unwrap();
    tick(&cfg(dir.path(), now), &mut src);
    let state = load(dir.path());
    assert_eq!(state.wake.last_wake_ts, Some(now));
    assert!(state.files.values().all(|r| r.last_ts == now));
}

#[test]
fn a_first_run_without_a_head_is_a_setup_error_and_saves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = MemorySource::new();
    let err = run(&cfg(dir.path(), t0()), &mut src)
        .unwrap_err()
        .to_string();
    assert!(err.contains("check --repo, --branch and --path"), "{err}");
    assert!(!dir.path().join("state.json").exists());
    src.commit(&[("a.rs", "// a\n")]);
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(r.exit_code, 10);
    assert_eq!(outcomes(&r), [("a.rs".into(), "needs_review")]);
}

#[test]
fn a_wake_that_cannot_learn_the_tree_keeps_head_and_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    let before = load(dir.path()).wake;
    src.amend(&[("libs/shared/c.js", "// c v2\n")]);
    src.fail_changes = true;
    src.fail_list = true;
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(r.exit_code, 12);
    assert_eq!(r.notes.len(), 2, "{:?}", r.notes);
    let after = load(dir.path()).wake;
    assert_eq!(after.last_head, before.last_head);
    assert_eq!(after.wakes, 2);
    // The next tick sees the same change again and, with a working source, settles it.
    src.fail_changes = false;
    src.fail_list = false;
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(4)), &mut src);
    assert_eq!(outcomes(&r), [("libs/shared/c.js".into(), "needs_review")]);
}

#[test]
fn dry_run_writes_nothing_and_reports_what_it_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(&dir.path().join("sub"), t0());
    c.dry_run = true;
    let (r, _) = tick(&c, &mut src);
    assert_eq!((r.exit_code, r.dry_run, r.state_written), (10, true, false));
    assert_eq!(r.files.len(), 5);
    assert!(!dir.path().join("sub").exists());
}

#[test]
fn a_held_lock_refuses_the_tick_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let c = cfg(dir.path(), t0());
    let store::LockAttempt::Acquired(_held) = store::try_lock(&c.state).unwrap() else {
        panic!("lock should be free");
    };
    let (r, calls) = tick(&c, &mut src);
    assert_eq!((r.exit_code, r.verdict.reason.as_str()), (20, "busy"));
    assert_eq!(calls, Calls::default());
    assert!(!c.state.exists());
}

#[test]
fn an_unresolvable_relative_import_makes_the_file_dependencies_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = MemorySource::new();
    src.commit(&[("lib/x.js", "const y = require('../outside/y');\n")]);
    tick(&cfg(dir.path(), t0()), &mut src);
    src.fail_head = Some("down".into());
    let (r, calls) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(r.files[0].novelty, Some(Novelty::DependenciesUnknown));
    assert_eq!(calls.read, 0, "imports are remembered per content id");
    assert!(
        r.files[0]
            .fingerprint
            .as_deref()
            .unwrap()
            .ends_with("|deps:unknown")
    );
}

#[test]
fn a_revert_raises_the_rollback_streak_and_an_ordinary_change_resets_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    src.amend(&[("libs/shared/c.js", "// c reverted\n")]);
    src.reverts = vec![vec!["libs/shared/c.js".to_string()]];
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::hours(1)), &mut src);
    let fp = r.files[0].fingerprint.clone().unwrap();
    assert!(fp.contains("|0.60|under_observation|1|0|"), "{fp}");
    assert_eq!(
        load(dir.path()).files["libs/shared/c.js"].rollback_streak,
        1
    );

    src.amend(&[("libs/shared/c.js", "// c fixed\n")]);
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::hours(2)), &mut src);
    let fp = r.files[0].fingerprint.clone().unwrap();
    assert!(fp.contains("|0.70|under_observation|0|0|"), "{fp}");
}

#[test]
fn a_configuration_error_from_the_source_stops_the_tick_and_saves_nothing() {
    struct Refusing;
    impl Source for Refusing {
        fn head(&mut self) -> Result<String, SourceError> {
            Err(SourceError::Config("401: set SENTINEL_GITLAB_TOKEN".into()))
        }
        fn list(&mut self, _: &str) -> Result<Vec<Entry>, SourceError> {
            unreachable!("nothing after a refused head")
        }
        fn changes(&mut self, _: &str, _: &str) -> Result<Vec<Change>, SourceError> {
            unreachable!("nothing after a refused head")
        }
        fn read(&mut self, _: &str, _: u64) -> Result<Vec<u8>, SourceError> {
            unreachable!("nothing after a refused head")
        }
        fn request_counts(&self) -> RequestCounts {
            RequestCounts::default()
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    let before = fs::read(dir.path().join("state.json")).unwrap();
    let err = run(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut Refusing)
        .unwrap_err()
        .to_string();
    assert!(err.contains("SENTINEL_GITLAB_TOKEN"), "{err}");
    assert_eq!(fs::read(dir.path().join("state.json")).unwrap(), before);
    assert!(!journal::path_for(&dir.path().join("state.json")).exists());
}

#[test]
fn a_read_the_source_cannot_answer_leaves_that_file_and_the_rest_pending() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.max_file_bytes = 1 << 20;
    tick(&c, &mut src);
    src.amend(&[
        ("libs/shared/a.js", "// a v2\n"),
        ("libs/shared/c.js", "// c v2\n"),
    ]);
    // Drop every stored version so reads fail as an unavailable server would.
    let mut down = MemorySource::new();
    std::mem::swap(&mut down, &mut src);
    let head = down.head().unwrap();
    let changes = down.changes(&format!("{:040x}", 1), &head).unwrap();
    assert_eq!(changes.len(), 2);
    struct NoReads(MemorySource);
    impl Source for NoReads {
        fn head(&mut self) -> Result<String, SourceError> {
            self.0.head()
        }
        fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
            self.0.list(at)
        }
        fn changes(&mut self, f: &str, t: &str) -> Result<Vec<Change>, SourceError> {
            self.0.changes(f, t)
        }
        fn read(&mut self, _: &str, _: u64) -> Result<Vec<u8>, SourceError> {
            Err(SourceError::Unavailable("429 three times".into()))
        }
        fn request_counts(&self) -> RequestCounts {
            self.0.request_counts()
        }
    }
    let mut flaky = NoReads(down);
    c.now += Duration::hours(1);
    let r = run(&c, &mut flaky).unwrap();
    assert_eq!(r.exit_code, 12);
    // b.js only imports a.js: its bytes are known, so it needs no read.
    assert_eq!(
        outcomes(&r),
        [
            ("libs/shared/a.js".into(), "pending"),
            ("libs/shared/c.js".into(), "pending"),
            ("libs/shared/b.js".into(), "needs_review")
        ]
    );
    assert_eq!(r.pending, 2);
    assert!(r.notes.iter().any(|n| n.starts_with("stopped reading")));
    // The next tick, with reads back, is a backlog wake that finishes the job.
    let mut back = flaky.0;
    c.now += Duration::minutes(2);
    let r = run(&c, &mut back).unwrap();
    assert_eq!(r.exit_code, 14);
    assert_eq!(r.pending, 0);
}
