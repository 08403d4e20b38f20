//! Tick-level tests over the in-memory source: exact calls, exact outcomes.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::gate::novelty::Novelty;
use crate::llm::client::Advisor;
use crate::source::memory::{Calls, MemorySource};
use crate::source::{Change, Entry, RequestCounts};
use crate::state::journal;
use crate::state::storage::FileStorage;
use crate::state::store;

/// One tick over files in `cfg.state`, with the advisor off.
fn run(cfg: &TickConfig, source: &mut dyn Source) -> Result<TickReport> {
    run_with(cfg, source, None)
}

/// One tick over files in `cfg.state`, asking `advisor` when given.
fn run_with(
    cfg: &TickConfig,
    source: &mut dyn Source,
    advisor: Option<&mut dyn Advisor>,
) -> Result<TickReport> {
    let mut storage = FileStorage::new(&cfg.state);
    let advisor = advisor.map(|a| a as &mut dyn Advisor);
    super::run(
        cfg,
        &mut Effects::new(source, &mut storage).with_advisor(advisor),
    )
}

fn t0() -> DateTime<Utc> {
    "2026-06-16T00:00:00Z".parse().unwrap()
}

fn cfg(dir: &Path, now: DateTime<Utc>) -> TickConfig {
    TickConfig {
        state: dir.join("state.json"),
        rev: "HEAD".into(),
        batch: 5,
        max_reads: 0,
        rescope: false,
        max_rewrites: 3,
        dry_run: false,
        max_files: 200_000,
        max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        evidence: "ev1".into(),
        legacy_evidence: Vec::new(),
        now,
        advisor: None,
        locks: Vec::new(),
        autonomy: crate::gate::autonomy::Settings::default(),
        signals: Vec::new(),
        watch_limit: 500,
        resolved_limit: 200,
        trigger: crate::gate::admission::Trigger::Schedule,
        min_interval: Duration::seconds(30),
        codequality: None,
        web_url: None,
        patches: false,
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
    let mut state = store::load(&dir.join("state.json")).unwrap().unwrap();
    state.files.set_rules(super::SUMMARY_RULES);
    state
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
fn invariant_15_an_incomplete_listing_forgets_no_file_and_leaves_the_head_to_a_later_tick() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    let before = load(dir.path()).wake;
    // A commit keeps two files and changes one; the compare fails, and the
    // listing that stands in for it sees only the first file.
    let head = src.commit(&[
        ("libs/shared/README.md", "# shared v2\n"),
        ("libs/shared/a.js", "// a\nmodule.exports = 1;\n"),
    ]);
    src.fail_changes = true;
    src.cut_list = Some(1);
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(r.exit_code, 12);
    let note = "the listing is incomplete: cut after 1 of 2 files; no file was forgotten";
    assert!(r.notes.iter().any(|n| n == note), "{:?}", r.notes);
    let state = load(dir.path());
    assert_eq!(
        state.files.len(),
        5,
        "a file that was not seen was forgotten"
    );
    let readme = &state.files["libs/shared/README.md"].blob;
    assert_eq!(readme, &crate::source::memory::blob_id(b"# shared v2\n"));
    assert_eq!(
        state.wake.last_head, before.last_head,
        "the head was settled"
    );

    // The next tick wakes for the same change; a complete listing settles it.
    src.cut_list = None;
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(4)), &mut src);
    assert_eq!(r.exit_code, 12);
    let state = load(dir.path());
    assert_eq!(
        state.files.keys().collect::<Vec<_>>(),
        ["libs/shared/README.md", "libs/shared/a.js"]
    );
    assert_eq!(state.wake.last_head.as_deref(), Some(head.as_str()));
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(6)), &mut src);
    assert_eq!(r.exit_code, 0);
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
        c.max_reads = 2;
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
fn evidence_changed_rechecks_every_file_without_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.batch = 1;
    tick(&c, &mut src);

    c.evidence = "ev2".into();
    c.now = t0() + Duration::minutes(2);
    let (r, calls) = tick(&c, &mut src);

    assert_eq!(r.exit_code, 13);
    assert_eq!(
        (calls.list, calls.read),
        (0, 0),
        "bytes are known by content id"
    );
    // With the advisor off every decision is local: the batch does not bound it.
    assert_eq!((r.fresh_evaluations, r.pending), (5, 0));
    assert!(r.files.iter().all(|f| f.novelty == Some(Novelty::Changed)));
}

#[test]
fn a_fresh_clone_with_no_model_is_judged_in_one_tick_whatever_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = MemorySource::new();
    let files: Vec<(String, String)> = (0..40)
        .map(|i| (format!("src/f{i}.js"), format!("// {i}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    src.commit(&refs);
    let (r, calls) = tick(&cfg(dir.path(), t0()), &mut src);
    assert_eq!((r.exit_code, r.pending, r.fresh_evaluations), (10, 0, 40));
    assert_eq!(calls.read, 40);
    let (r, _) = tick(&cfg(dir.path(), t0() + Duration::minutes(2)), &mut src);
    assert_eq!(r.exit_code, 0);
}

#[test]
fn a_first_run_announces_exactly_the_reads_it_makes_within_the_read_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.max_reads = 3;
    let (r, _) = tick(&c, &mut src);
    assert_eq!(r.exit_code, 10);
    // One announcement, no longer than the read limit, in the order read:
    // a streaming source fetches nothing the tick will not ask for.
    assert_eq!(src.announced, [src.read_ids.clone()]);
    assert_eq!(src.read_ids.len(), 3);

    // The next tick announces the two files left, and reads them.
    c.now += Duration::minutes(2);
    tick(&c, &mut src);
    assert_eq!(src.announced.len(), 2);
    assert_eq!(src.announced[1], src.read_ids[3..]);
    assert_eq!(src.read_ids.len(), 5);

    // Without a limit every file is announced at once, and each read once.
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    tick(&cfg(dir.path(), t0()), &mut src);
    assert_eq!(src.announced, [src.read_ids.clone()]);
    assert_eq!(src.read_ids.len(), 5);
}

#[test]
fn the_read_limit_leaves_unread_files_in_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let mut src = five_files();
    let mut c = cfg(dir.path(), t0());
    c.max_reads = 3;
    let (r, calls) = tick(&c, &mut src);
    assert_eq!((r.exit_code, calls.read, r.pending), (10, 3, 2));
    let pending: Vec<&str> = r
        .files
        .iter()
        .filter(|f| f.outcome == Outcome::Pending)
        .map(|f| f.reason.as_str())
        .collect();
    assert_eq!(
        pending,
        ["first-seen; left for a later tick: the read limit (--max-reads 3) is reached"; 2]
    );
    c.now += Duration::minutes(2);
    let (r, calls) = tick(&c, &mut src);
    assert_eq!((r.exit_code, calls.read, r.pending), (14, 2, 0));
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

mod advisor {
    //! The advisor inside the tick: a scripted provider behind the real
    //! error protocol, so attempts, holds and budgets are exact.

    use super::*;
    use crate::llm::client::{AdviceRequest, Advisor, Answer, Attempt, Call, with_protocol};
    use crate::llm::prices::{Price, Usage};
    use crate::llm::protocol::{self, Circuit, Failure};

    const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    const SERVER: &str = r#"{"error":{"message":"The server had an error processing your request.","type":"server_error","param":null,"code":null}}"#;

    /// A provider that answers each attempt with `respond(attempt_number)`.
    pub struct Scripted<F: FnMut(u64) -> Attempt> {
        pub respond: F,
        pub calls: u64,
        pub waits: Vec<u64>,
    }

    impl<F: FnMut(u64) -> Attempt> Advisor for Scripted<F> {
        fn model(&self) -> &str {
            "gpt-4o-mini"
        }
        fn ask(&mut self, _req: &AdviceRequest, now: DateTime<Utc>) -> Call {
            let mut waits = std::mem::take(&mut self.waits);
            let calls = &mut self.calls;
            let respond = &mut self.respond;
            let call = with_protocol(now, &mut waits, true, || {
                *calls += 1;
                respond(*calls)
            });
            self.waits = waits;
            call
        }
        fn calls(&self) -> u64 {
            self.calls
        }
        fn waits_ms(&self) -> Vec<u64> {
            self.waits.clone()
        }
    }

    pub fn scripted<F: FnMut(u64) -> Attempt>(respond: F) -> Scripted<F> {
        Scripted {
            respond,
            calls: 0,
            waits: Vec::new(),
        }
    }

    fn http(status: u16, body: &str) -> Attempt {
        Err((
            Failure::Http {
                status,
                body: body.into(),
                headers: Vec::new(),
            },
            None,
        ))
    }

    fn skip() -> Attempt {
        Ok((
            Answer {
                action: crate::llm::client::Action::Skip,
                reason: "fine as it is".into(),
                findings: vec![],
                content: None,
            },
            Some(Usage {
                prompt_tokens: 1_000,
                cached_tokens: 0,
                completion_tokens: 100,
            }),
        ))
    }

    fn advised(dir: &Path, now: DateTime<Utc>) -> TickConfig {
        let mut c = cfg(dir, now);
        c.advisor = Some(AdvisorSettings {
            id: "openai:gpt-4o-mini".into(),
            daily_budget: 2.0,
            price: crate::llm::prices::builtin("gpt-4o-mini"),
            per_call: 0.05,
            proxied_per_call: 0.05,
            max_tokens: 1024,
            fleet: None,
            agent_sandbox: None,
        });
        c
    }

    fn one_risky_file() -> MemorySource {
        let mut src = MemorySource::new();
        src.commit(&[("src/auth.js", "// v0\n"), ("docs/a.md", "# a\n")]);
        src
    }

    /// Six source files that need the advisor, four docs that do not.
    fn six_for_the_model() -> MemorySource {
        let mut src = MemorySource::new();
        let files: Vec<(String, String)> = (0..6)
            .map(|i| (format!("src/auth{i}.js"), format!("// {i}\n")))
            .chain((0..4).map(|i| (format!("docs/d{i}.md"), format!("# {i}\n"))))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        src.commit(&refs);
        src
    }

    #[test]
    fn the_batch_bounds_paid_consultations_not_local_decisions() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = six_for_the_model();
        let mut p = scripted(|_| skip());
        let mut c = advised(dir.path(), t0());
        c.batch = 2;
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(r.exit_code, 10);
        assert_eq!(p.calls, 2);
        assert_eq!(r.counts.get("llm_skip"), Some(&2));
        assert_eq!(r.counts.get("local_skip"), Some(&4));
        assert_eq!(r.pending, 4);
        assert_eq!(r.fresh_evaluations, 6);
        // Every file was read once: the pending ones are not read again.
        assert_eq!(r.file_reads, 10);
        let reasons: Vec<&str> = r
            .files
            .iter()
            .filter(|f| f.outcome == Outcome::Pending)
            .map(|f| f.reason.as_str())
            .collect();
        assert_eq!(
            reasons,
            ["first-seen; left for a later tick: the batch limit (--batch 2) is reached"; 4]
        );

        c.now += Duration::minutes(2);
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(
            (r.exit_code, p.calls, r.pending, r.file_reads),
            (14, 4, 2, 2)
        );
    }

    #[test]
    fn a_held_provider_does_not_use_up_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = six_for_the_model();
        let mut p = scripted(|_| skip());
        let mut c = advised(dir.path(), t0());
        c.batch = 2;
        let mut state = State::new();
        state.llm.circuit = Some(Circuit::new(
            protocol::Class::Auth,
            "rejected key",
            t0() + Duration::hours(1),
        ));
        store::save(&c.state, &state).unwrap();
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 0);
        assert_eq!((r.counts.get("held"), r.pending), (Some(&6), 0));
    }

    #[test]
    fn the_quota_wall_costs_one_call_until_midnight_utc() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let nine: DateTime<Utc> = "2026-06-16T09:00:00Z".parse().unwrap();
        let mut ok = scripted(|_| skip());
        run_with(
            &advised(dir.path(), nine - Duration::hours(9)),
            &mut src,
            Some(&mut ok),
        )
        .unwrap();
        assert_eq!(ok.calls, 1);

        let mut broke = scripted(|_| http(429, QUOTA));
        let mut held = 0;
        let mut t = nine;
        let mut i = 0;
        while t < nine + Duration::hours(15) {
            src.amend(&[("src/auth.js", &format!("// v{}\n", i + 1))]);
            let r = run_with(&advised(dir.path(), t), &mut src, Some(&mut broke)).unwrap();
            assert_eq!(r.exit_code, 12);
            held += r.counts.get("held").copied().unwrap_or(0);
            t += Duration::minutes(2);
            i += 1;
        }
        assert_eq!(i, 450);
        assert_eq!(
            broke.calls, 1,
            "one call after 09:00, then held until midnight"
        );
        assert_eq!(held, 449);
        let circuit = load(dir.path()).llm.circuit.unwrap();
        assert_eq!(
            circuit.until,
            "2026-06-17T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );

        // After 00:00 UTC the provider is asked again (and has been topped up).
        let mut topped_up = scripted(|_| skip());
        src.amend(&[("src/auth.js", "// next day\n")]);
        let r = run_with(&advised(dir.path(), t), &mut src, Some(&mut topped_up)).unwrap();
        assert_eq!(topped_up.calls, 1);
        assert_eq!(outcomes(&r), [("src/auth.js".into(), "llm_skip")]);
        assert!(
            load(dir.path()).llm.circuit.is_none(),
            "a success closes the circuit"
        );
    }

    #[test]
    fn a_server_error_takes_three_attempts_holds_ten_minutes_and_holds_the_next_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[("src/a.js", "// a\n"), ("src/b.js", "// b\n")]);
        let now = t0();
        let mut down = scripted(|_| http(500, SERVER));
        let r = run_with(&advised(dir.path(), now), &mut src, Some(&mut down)).unwrap();
        assert_eq!(down.calls, 3);
        assert_eq!(down.waits, [2000, 4000]);
        assert_eq!(
            outcomes(&r),
            [("src/a.js".into(), "failed"), ("src/b.js".into(), "held")]
        );
        let circuit = load(dir.path()).llm.circuit.unwrap();
        assert_eq!(circuit.until, now + Duration::minutes(10));
        // Not remembered as decisions: the next wake retries both.
        let mut up = scripted(|_| skip());
        src.amend(&[("src/c.md", "# c\n")]);
        let r = run_with(
            &advised(dir.path(), now + Duration::minutes(11)),
            &mut src,
            Some(&mut up),
        )
        .unwrap();
        assert_eq!(up.calls, 2);
        assert_eq!(r.counts.get("llm_skip"), Some(&2));
    }

    #[test]
    fn an_auth_error_takes_one_attempt_and_holds_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let bad_key = r#"{"error":{"message":"Incorrect API key provided: sk-VKMI***wjh3.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        let mut p = scripted(|_| http(401, bad_key));
        run_with(&advised(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 1);
        let circuit = load(dir.path()).llm.circuit.unwrap();
        assert_eq!(circuit.until, t0() + Duration::minutes(60));
        assert!(!format!("{circuit:?}").contains("sk-VKMI"));
    }

    #[test]
    fn a_bad_answer_is_retried_once_and_never_a_decision() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut p = scripted(|_| Err((Failure::BadResponse("not JSON".into()), None)));
        let r = run_with(&advised(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 2);
        assert_eq!(p.waits, [1000]);
        assert_eq!(r.counts.get("bad_response"), Some(&1));
        assert!(load(dir.path()).llm.circuit.is_none());
    }

    #[test]
    fn the_budget_refuses_the_call_that_would_cross_the_limit_and_the_file_waits_for_a_wake() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[("src/a.js", "// a\n"), ("src/b.js", "// b\n")]);
        let mut c = advised(dir.path(), t0());
        // gpt-4o: a reservation (402 prompt + 1,024 answer tokens) costs $0.0112;
        // after the first call settles at $0.0035, the second would reach $0.0147.
        c.advisor.as_mut().unwrap().price = Some(Price {
            input: 2.5,
            cached_input: 1.25,
            output: 10.0,
        });
        c.advisor.as_mut().unwrap().daily_budget = 0.014;
        let mut p = scripted(|_| skip());
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 1);
        assert_eq!(
            outcomes(&r),
            [
                ("src/a.js".into(), "llm_skip"),
                ("src/b.js".into(), "deferred")
            ]
        );
        assert!(r.files[1].reason.starts_with("daily-budget-exhausted"));
        // Real cost settled: 1,000 prompt + 100 completion tokens at gpt-4o prices.
        let spent = load(dir.path()).llm.budget.measured_today;
        assert!(
            (spent - (1000.0 * 2.5 + 100.0 * 10.0) / 1e6).abs() < 1e-12,
            "{spent}"
        );
        // A deferred file waits for the next UTC day: the next tick is a no-op.
        c.now += Duration::minutes(2);
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(r.exit_code, 0);
        // The next UTC day, a wake retries it.
        c.now = "2026-06-17T00:02:00Z".parse().unwrap();
        src.amend(&[("docs/x.md", "# x\n")]);
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(r.counts.get("llm_skip"), Some(&1));
        assert_eq!(p.calls, 2);
    }

    #[test]
    fn an_llm_skip_is_reused_and_an_evolve_is_an_open_proposal() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[("src/a.js", "// a\n"), ("src/b.js", "// b\n")]);
        let mut p = scripted(|n| {
            if n == 1 {
                skip()
            } else {
                Ok((
                    Answer {
                        action: crate::llm::client::Action::Evolve,
                        reason: "unchecked input".into(),
                        findings: vec![crate::llm::client::Finding {
                            line: 1,
                            severity: crate::llm::client::Severity::Major,
                            message: "validate".into(),
                        }],
                        content: None,
                    },
                    None,
                ))
            }
        });
        let r = run_with(&advised(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        assert_eq!(
            outcomes(&r),
            [
                ("src/a.js".into(), "llm_skip"),
                ("src/b.js".into(), "evolve")
            ]
        );
        assert_eq!(r.files[1].findings.as_ref().unwrap().len(), 1);
        let state = load(dir.path());
        assert_eq!(state.llm.proposals.keys().collect::<Vec<_>>(), ["src/b.js"]);
        // An answer without usage is counted at its reservation, flagged estimated.
        assert!(state.llm.budget.estimated_today > 0.0);
        // A listing (head unknown) looks at both again: the SKIP is reused, the
        // EVOLVE is not replayed but asked again.
        src.fail_head = Some("down".into());
        let r = run_with(
            &advised(dir.path(), t0() + Duration::minutes(2)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_eq!(
            outcomes(&r),
            [("src/a.js".into(), "reused"), ("src/b.js".into(), "evolve")]
        );
        assert_eq!(p.calls, 3);
    }

    #[test]
    fn a_quiet_year_of_five_files_costs_a_handful_of_review_wakes_not_one_per_tick() {
        // The seed's agent spent 1,063 of 1,114 wakes on reviews of files that
        // came back identical. Identical reviews double the interval here.
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[
            ("src/a.js", "// a\n"),
            ("src/b.js", "// b\n"),
            ("src/c.js", "// c\n"),
            ("src/d.js", "// d\n"),
            ("src/e.js", "// e\n"),
        ]);
        let mut p = scripted(|_| skip());
        let mut by_reason: BTreeMap<u8, u64> = BTreeMap::new();
        let mut reviewed: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for hour in 0..365 * 24 {
            let now = t0() + Duration::hours(hour);
            let r = run_with(&advised(dir.path(), now), &mut src, Some(&mut p)).unwrap();
            *by_reason.entry(r.exit_code).or_default() += 1;
            if r.exit_code == 16 {
                assert_eq!(r.files.len(), 1, "a review wake is about one file");
                reviewed
                    .entry(r.files[0].path.clone())
                    .or_default()
                    .push(hour / 24);
            }
        }
        // Days after the first run: stable at 3, first review 7 days later,
        // then 14, 28, 56 and 90-day intervals.
        for days in reviewed.values() {
            assert_eq!(days, &[10, 24, 52, 108, 198, 288]);
        }
        assert_eq!(reviewed.len(), 5);
        assert_eq!(by_reason.get(&16), Some(&30), "{by_reason:?}");
        assert_eq!(by_reason.get(&10), Some(&1));
        // The first run's five bets are graded together a day later; reviews
        // of certified files are NO_VALUE and open no watch.
        assert_eq!(by_reason.get(&15), Some(&1));
        assert_eq!(by_reason.values().sum::<u64>(), 365 * 24);
        // One call at the first run and one per review, nothing else.
        assert_eq!(p.calls, 5 + 30);
    }

    #[test]
    fn invariant_5_scheduled_reviews_punch_through_the_cache_and_push_the_next_one_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[("src/auth.js", "// v0\n")]);
        let mut p = scripted(|_| skip());
        run_with(&advised(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        // The first run's bet is graded after a day (observation_due).
        let r = run_with(
            &advised(dir.path(), t0() + Duration::hours(25)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_eq!(r.exit_code, 15);
        let calls = p.calls;
        // Ten days later the unchanged file is due: the review asks the model
        // although the remembered SKIP would be reused.
        let due = load(dir.path()).next_review.expect("a review is scheduled");
        assert_eq!(due.path, "src/auth.js");
        let r = run_with(&advised(dir.path(), due.at), &mut src, Some(&mut p)).unwrap();
        assert_eq!(r.exit_code, 16);
        assert_eq!(outcomes(&r), [("src/auth.js".into(), "llm_skip")]);
        assert_eq!(p.calls, calls + 1, "the cache did not swallow the review");
        // The identical answer pushes the next review out: never due forever.
        let after = load(dir.path());
        let next = after.next_review.unwrap();
        assert_eq!(next.path, "src/auth.js");
        assert_eq!(next.at, due.at + Duration::days(14));
        let r = run_with(
            &advised(dir.path(), due.at + Duration::minutes(2)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_ne!(r.exit_code, 16);
    }

    #[test]
    fn a_locked_file_is_never_judged_and_never_reviewed() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut c = advised(dir.path(), t0());
        c.locks = vec!["src/auth.js".into()];
        let mut p = scripted(|_| skip());
        let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 0);
        let auth = r.files.iter().find(|f| f.path == "src/auth.js").unwrap();
        assert_eq!(auth.outcome, Outcome::LocalSkip);
        assert!(auth.fingerprint.as_deref().unwrap().contains("|locked|"));
        assert!(
            load(dir.path())
                .next_review
                .is_none_or(|r| r.path != "src/auth.js")
        );
    }

    fn controlled(dir: &Path, now: DateTime<Utc>) -> TickConfig {
        let mut c = advised(dir, now);
        c.autonomy = crate::gate::autonomy::Settings {
            mode: crate::gate::autonomy::Mode::Controlled,
            daily_tokens: 10,
            spacing: Duration::minutes(30),
        };
        c
    }

    #[test]
    fn an_observation_due_wake_grades_from_state_and_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut p = scripted(|_| skip());
        run_with(&advised(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        // Both SKIPs are young bets: watched for 24 h.
        let open = load(dir.path()).observations.open;
        assert_eq!(
            open.keys().collect::<Vec<_>>(),
            ["docs/a.md", "src/auth.js"]
        );
        let before = src.calls;

        let r = run_with(
            &advised(dir.path(), t0() + Duration::hours(24)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_eq!(r.exit_code, 15);
        assert!(r.state_written);
        assert_eq!(src.calls.read - before.read, 0);
        assert_eq!(src.calls.list - before.list, 0);
        assert_eq!(p.calls, 1, "grading asks no model");
        let state = load(dir.path());
        assert!(state.observations.open.is_empty());
        assert_eq!(state.observations.totals.resolved_correct, 2);
        assert_eq!(state.next_observation_due, None);
        // Nothing else is due: the next tick is a no-op.
        let r = run_with(
            &advised(dir.path(), t0() + Duration::hours(25)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_eq!(r.exit_code, 0);
    }

    #[test]
    fn a_wrong_stability_prediction_is_a_trigger_a_correct_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut p = scripted(|_| skip());
        run_with(&controlled(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        // A revert touches the file mid-window: the bet is graded wrong.
        src.amend(&[("src/auth.js", "// reverted\n")]);
        src.reverts = vec![vec!["src/auth.js".to_string()]];
        let r = run_with(
            &controlled(dir.path(), t0() + Duration::hours(1)),
            &mut src,
            Some(&mut p),
        )
        .unwrap();
        assert_eq!(r.exit_code, 12);
        let state = load(dir.path());
        assert_eq!(state.observations.totals.resolved_wrong, 1);
        let kinds: Vec<_> = state
            .autonomy_triggers
            .iter()
            .map(|t| t.kind.as_str())
            .collect();
        assert!(kinds.contains(&"wrong_prediction"), "{kinds:?}");

        // A correct prediction is no trigger: grade a quiet file's bet.
        let dir2 = tempfile::tempdir().unwrap();
        let mut quiet = one_risky_file();
        let mut p2 = scripted(|_| skip());
        run_with(&controlled(dir2.path(), t0()), &mut quiet, Some(&mut p2)).unwrap();
        run_with(
            &controlled(dir2.path(), t0() + Duration::hours(24)),
            &mut quiet,
            Some(&mut p2),
        )
        .unwrap();
        let state = load(dir2.path());
        assert_eq!(state.observations.totals.resolved_correct, 2);
        assert!(state.autonomy_triggers.is_empty());
    }

    #[test]
    fn invariant_8_think_again_only_for_a_new_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut p = scripted(|_| skip());
        run_with(&controlled(dir.path(), t0()), &mut src, Some(&mut p)).unwrap();
        src.amend(&[("src/auth.js", "// reverted\n")]);
        src.reverts = vec![vec!["src/auth.js".to_string()]];
        let mut t = t0() + Duration::hours(1);
        run_with(&controlled(dir.path(), t), &mut src, Some(&mut p)).unwrap();
        assert_eq!(p.calls, 2);
        // The next tick reconsiders it for the rollback (a concrete trigger).
        t += Duration::minutes(40);
        let r = run_with(&controlled(dir.path(), t), &mut src, Some(&mut p)).unwrap();
        assert_eq!(r.exit_code, 17, "{:?}", r.verdict);
        assert_eq!(outcomes(&r), [("src/auth.js".into(), "llm_skip")]);
        assert_eq!(p.calls, 3, "a reconsideration bypasses the cache and asks");
        let state = load(dir.path());
        assert_eq!(state.autonomy.used_today, 1);
        // Days later the rollback is still unresolved, but that question was
        // answered (and the wrong prediction was followed by a correct one):
        // no reconsideration, no call.
        let mut reasons = Vec::new();
        for h in [48, 72] {
            let r = run_with(
                &controlled(dir.path(), t + Duration::hours(h)),
                &mut src,
                Some(&mut p),
            )
            .unwrap();
            reasons.push((r.exit_code, r.verdict.detail.clone()));
        }
        assert!(
            reasons.iter().all(|(code, _)| *code != 17),
            "the same trigger cannot reopen the same file twice: {reasons:?}"
        );
        assert_eq!(p.calls, 3, "{reasons:?}");
    }

    #[test]
    fn a_failed_reconsideration_refunds_the_token_cooldown_and_answered_marker() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut ok = scripted(|_| skip());
        run_with(&controlled(dir.path(), t0()), &mut src, Some(&mut ok)).unwrap();
        src.amend(&[("src/auth.js", "// reverted\n")]);
        src.reverts = vec![vec!["src/auth.js".to_string()]];
        run_with(
            &controlled(dir.path(), t0() + Duration::hours(1)),
            &mut src,
            Some(&mut ok),
        )
        .unwrap();
        let mut down = scripted(|_| http(500, SERVER));
        let t = t0() + Duration::hours(2);
        let r = run_with(&controlled(dir.path(), t), &mut src, Some(&mut down)).unwrap();
        assert_eq!(r.exit_code, 17);
        assert_eq!(outcomes(&r), [("src/auth.js".into(), "failed")]);
        let state = load(dir.path());
        assert_eq!(state.autonomy.used_today, 0, "the token came back");
        assert!(
            state
                .autonomy
                .answered
                .get("src/auth.js")
                .is_none_or(|a| a.is_empty())
        );
        // While the circuit is open the admission refuses with llm_provider_held.
        let r = run_with(
            &controlled(dir.path(), t + Duration::minutes(5)),
            &mut src,
            Some(&mut down),
        )
        .unwrap();
        assert_eq!(r.exit_code, 0);
        assert_eq!(
            r.verdict.detail.unwrap()["autonomy"],
            serde_json::json!("llm_provider_held")
        );
    }

    #[test]
    fn the_advisor_is_not_part_of_the_evidence_version() {
        // Each decision names its advisor instead (`Decision::by`).
        assert_eq!(current_evidence(), current_evidence());
        for legacy in legacy_evidence("gpt-4o-mini") {
            assert_ne!(legacy.evidence, current_evidence());
        }
    }

    /// A state as a build before `Decision::by` wrote it: the model in the
    /// evidence version, decisions without a maker.
    fn legacy_state(dir: &Path, src: &mut MemorySource) -> u64 {
        let mut c = advised(dir, t0());
        c.evidence = legacy_evidence("gpt-4o-mini")[1].evidence.clone();
        c.batch = 0;
        let mut p = scripted(|_| skip());
        run_with(&c, src, Some(&mut p)).unwrap();
        let mut state = load(dir);
        for r in state.files.values_mut() {
            r.decision.as_mut().unwrap().by = None;
        }
        store::save(&c.state, &state).unwrap();
        p.calls
    }

    #[test]
    fn a_state_written_before_decisions_named_their_advisor_is_carried_over_unbilled() {
        for advisor_on in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let mut src = six_for_the_model();
            assert_eq!(legacy_state(dir.path(), &mut src), 6);

            let mut c = advised(dir.path(), t0() + Duration::minutes(2));
            c.evidence = current_evidence();
            c.legacy_evidence = legacy_evidence("gpt-4o-mini");
            if !advisor_on {
                c.advisor = None;
            }
            let mut p = scripted(|_| skip());
            let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
            assert_eq!((r.exit_code, p.calls), (13, 0), "advisor on: {advisor_on}");
            assert_eq!(r.counts.get("reused"), Some(&10));
            assert!(
                r.notes[0].starts_with("carried 10 fingerprint(s) over"),
                "{:?}",
                r.notes
            );
            let state = load(dir.path());
            let by = |p: &str| state.files[p].decision.as_ref().unwrap().by.clone();
            assert_eq!(by("src/auth0.js").as_deref(), Some("openai:gpt-4o-mini"));
            assert_eq!(by("docs/d0.md").as_deref(), Some("local"));

            c.now += Duration::minutes(2);
            let r = run_with(&c, &mut src, Some(&mut p)).unwrap();
            assert_eq!((r.exit_code, p.calls), (0, 0));
        }
    }

    /// What a real LiteLLM sent for an upstream 429 whose type, code and
    /// words sentinel has never seen, and no wait header.
    fn unknown_429() -> String {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/peers/litellm-1.108.7/unknown-429.json"
        );
        let rec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        rec["body"].as_str().unwrap().to_string()
    }

    #[test]
    fn invariant_24_no_wording_reopens_the_loop_an_unknown_429_makes_at_most_36_calls_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let body = unknown_429();
        let mut flux = scripted(|_| http(429, &body));
        for i in 0..24 * 30 {
            // The file changes before every tick: each one has a reason to ask.
            src.amend(&[("src/auth.js", &format!("// auth v{i}\n"))]);
            let now = t0() + Duration::minutes(2 * i);
            run_with(&advised(dir.path(), now), &mut src, Some(&mut flux)).unwrap();
        }
        // Without the doubling: one 2-minute hold after every tick's three
        // attempts, 720 calling ticks. With it, 10 holds cover the day.
        assert!(flux.calls <= 36, "{} calls in a day", flux.calls);
        let circuit = load(dir.path()).llm.circuit.unwrap();
        assert_eq!(circuit.class, crate::llm::protocol::Class::RateLimit);
        assert!(circuit.streak >= 9, "{circuit:?}");
    }

    #[test]
    fn a_provider_down_for_three_days_costs_finitely_many_calls_and_wakes() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = MemorySource::new();
        src.commit(&[("src/a.js", "// a\n"), ("src/b.js", "// b\n")]);
        let mut down = scripted(|_| http(500, SERVER));
        let mut wakes = 0;
        let mut last_wake = t0();
        for i in 0..4 * 24 * 30 {
            let now = t0() + Duration::minutes(2 * i);
            let r = run_with(&advised(dir.path(), now), &mut src, Some(&mut down)).unwrap();
            if r.exit_code != 0 {
                wakes += 1;
                last_wake = now;
            }
        }
        // Five failures each (three attempts a call), then both give up.
        assert_eq!(down.calls, 2 * 5 * 3);
        assert!(wakes <= 12, "{wakes} wakes");
        let state = load(dir.path());
        // Each failed call after a hold doubled the next (10 min to 24 h):
        // the tenth and last failure came late on the third day.
        let circuit = state.llm.circuit.as_ref().unwrap();
        assert_eq!(circuit.streak, 9);
        assert_eq!(Some(last_wake), circuit.opened);
        for path in ["src/a.js", "src/b.js"] {
            let d = state.files[path].decision.as_ref().unwrap();
            assert_eq!(d.outcome, Outcome::GivenUp, "{path}");
        }
        assert_eq!(state.next_retry, None);
    }

    #[test]
    fn a_wake_before_the_not_before_time_does_not_take_the_file_along() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = one_risky_file();
        let mut bad = scripted(|_| Err((Failure::BadResponse("not JSON".into()), None)));
        run_with(&advised(dir.path(), t0()), &mut src, Some(&mut bad)).unwrap();
        assert_eq!(bad.calls, 2);
        src.amend(&[("docs/a.md", "# a v2\n")]);
        let r = run_with(
            &advised(dir.path(), t0() + Duration::minutes(2)),
            &mut src,
            Some(&mut bad),
        )
        .unwrap();
        assert_eq!(r.exit_code, 12);
        assert_eq!(outcomes(&r), [("docs/a.md".into(), "local_skip")]);
        assert_eq!(bad.calls, 2);
    }

    mod paid_once {
        //! Invariant 16, a paid answer is paid once: storages whose save or
        //! decision journal fails, and a sandbox that counts its commits.

        use anyhow::anyhow;

        use super::*;
        use crate::llm::client::{Action, Finding, Severity};
        use crate::patch::Patcher;
        use crate::state::decisions::{Journal, Line};
        use crate::state::storage::MemoryStorage;
        use crate::state::{Header, JournalMark};

        /// A storage that fails what it is told to: the state's save (as on
        /// a full disk), or appends to the decision journal of some kinds.
        struct Flaky<S: Storage> {
            inner: S,
            fail_save: bool,
            /// Entry kinds (`reserve`, `answer`, `intent`, `commit`) whose
            /// append fails.
            fail_journal: Vec<&'static str>,
        }

        fn flaky<S: Storage>(inner: S) -> Flaky<S> {
            Flaky {
                inner,
                fail_save: false,
                fail_journal: Vec::new(),
            }
        }

        impl<S: Storage> Storage for Flaky<S> {
            fn try_lock(&mut self) -> Result<std::result::Result<(), std::path::PathBuf>> {
                self.inner.try_lock()
            }
            fn load_header(&mut self) -> Result<Option<Header>> {
                self.inner.load_header()
            }
            fn load(&mut self) -> Result<Option<State>> {
                self.inner.load()
            }
            fn save(&mut self, state: &State) -> Result<u64> {
                if self.fail_save {
                    return Err(anyhow!(
                        "cannot save state file `state.json`: no space left"
                    ));
                }
                self.inner.save(state)
            }
            fn journal_read(&mut self) -> Result<journal::Contents> {
                self.inner.journal_read()
            }
            fn journal_append(
                &mut self,
                mark: JournalMark,
                now: DateTime<Utc>,
                head: &str,
            ) -> Result<()> {
                self.inner.journal_append(mark, now, head)
            }
            fn outage_append(&mut self, mark: JournalMark, now: DateTime<Utc>) -> Result<()> {
                self.inner.outage_append(mark, now)
            }
            fn journal_clear(&mut self) -> Result<()> {
                self.inner.journal_clear()
            }
            fn decisions_read(&mut self) -> Result<Journal> {
                self.inner.decisions_read()
            }
            fn decisions_append(&mut self, epoch: u64, line: &Line) -> Result<()> {
                let kind = serde_json::to_value(line).unwrap()["kind"].clone();
                if self.fail_journal.iter().any(|k| kind == *k) {
                    return Err(anyhow!(
                        "cannot write the decision journal `state.json.decisions`: no space left"
                    ));
                }
                self.inner.decisions_append(epoch, line)
            }
            fn decisions_clear(&mut self, mark: JournalMark) -> Result<()> {
                self.inner.decisions_clear(mark)
            }
            fn read_start(&mut self) -> Result<Option<DateTime<Utc>>> {
                self.inner.read_start()
            }
            fn write_start(&mut self, now: DateTime<Utc>) -> Result<()> {
                self.inner.write_start(now)
            }
            fn write_report(&mut self, path: &Path, bytes: &[u8]) -> Result<()> {
                self.inner.write_report(path, bytes)
            }
        }

        /// A sandbox branch in memory: every commit, in order.
        #[derive(Default)]
        struct Branch {
            commits: Vec<(String, String)>,
        }

        impl Patcher for Branch {
            fn commit(&mut self, path: &str, content: &str, _: &str) -> Result<String, String> {
                self.commits.push((path.into(), content.into()));
                Ok(format!("c{}", self.commits.len()))
            }
            fn target(&self) -> String {
                "branch sandbox".into()
            }
            fn holds(&mut self, path: &str, content: &str) -> Result<Option<String>, String> {
                let last = self.commits.iter().rposition(|(p, _)| p == path);
                Ok(last
                    .filter(|i| self.commits[*i].1 == content)
                    .map(|i| format!("c{}", i + 1)))
            }
        }

        fn tick_on(
            c: &TickConfig,
            src: &mut MemorySource,
            storage: &mut dyn Storage,
            advisor: &mut dyn Advisor,
            patcher: Option<&mut Branch>,
        ) -> Result<TickReport> {
            let mut fx = Effects::new(src, storage).with_advisor(Some(advisor));
            fx.patcher = patcher.map(|p| p as &mut dyn Patcher);
            crate::tick::run(c, &mut fx)
        }

        /// `advised` at minute `m`, with patches on or off.
        fn at(dir: &Path, m: i64, patches: bool) -> TickConfig {
            let mut c = advised(dir, t0() + Duration::minutes(m));
            c.patches = patches;
            c
        }

        /// What a full disk costs over ten ticks, on `inner`: the calls,
        /// then the tick that can save again. `next` is the storage of the
        /// next process (a new one on disk, which takes the lock again; the
        /// same one in memory).
        fn ten_failed_saves<S: Storage>(inner: S, dir: &Path, next: impl Fn(S) -> S) -> Flaky<S> {
            let mut storage = flaky(inner);
            storage.fail_save = true;
            let mut src = one_risky_file();
            let mut p = scripted(|_| skip());
            for i in 0..10 {
                let err = tick_on(&at(dir, 2 * i, false), &mut src, &mut storage, &mut p, None)
                    .unwrap_err();
                assert!(err.to_string().contains("no space left"), "{err:#}");
                storage.inner = next(storage.inner);
            }
            assert_eq!(p.calls, 1, "ten ticks whose save failed, one paid call");

            // The next process, with its own advisor.
            storage.fail_save = false;
            let mut p = scripted(|_| skip());
            let r = tick_on(&at(dir, 20, false), &mut src, &mut storage, &mut p, None).unwrap();
            assert_eq!(p.calls, 0, "the answer paid for is the decision");
            assert_eq!(
                outcomes(&r),
                [
                    ("docs/a.md".into(), "local_skip"),
                    ("src/auth.js".into(), "llm_skip")
                ]
            );
            assert!(
                r.notes.iter().any(|n| n.contains("decision journal")),
                "{:?}",
                r.notes
            );
            let state = storage.load().unwrap().unwrap();
            let budget = &state.llm.budget;
            assert_eq!((budget.lifetime_calls, state.llm.attempts), (1, 1));
            // gpt-4o-mini: 1,000 prompt and 100 completion tokens, once.
            let one = (1000.0 * 0.15 + 100.0 * 0.60) / 1e6;
            assert!((budget.measured_today - one).abs() < 1e-12, "{budget:?}");
            assert_eq!(storage.decisions_read().unwrap(), Journal::default());
            storage
        }

        #[test]
        fn invariant_16_a_failed_save_never_pays_twice() {
            let dir = tempfile::tempdir().unwrap();
            let state = dir.path().join("state.json");
            ten_failed_saves(FileStorage::new(&state), dir.path(), |_| {
                FileStorage::new(&state)
            });
            // `simulate` keeps its journal in memory, like its state.
            let memory = ten_failed_saves(MemoryStorage::new(), dir.path(), |m| m);
            assert_eq!(
                memory.inner.decision_lines, 2,
                "a reservation and an answer"
            );
        }

        fn evolve_with(content: &str) -> Attempt {
            Ok((
                Answer {
                    action: Action::Evolve,
                    reason: "unchecked input".into(),
                    findings: vec![Finding {
                        line: 1,
                        severity: Severity::Major,
                        message: "validate".into(),
                    }],
                    content: Some(content.into()),
                },
                None,
            ))
        }

        #[test]
        fn a_failed_save_never_commits_the_same_patch_twice() {
            let dir = tempfile::tempdir().unwrap();
            let mut storage = flaky(MemoryStorage::new());
            storage.fail_save = true;
            let mut src = one_risky_file();
            let mut p = scripted(|_| evolve_with("// v1\n"));
            let mut branch = Branch::default();
            for i in 0..10 {
                let c = at(dir.path(), 2 * i, true);
                tick_on(&c, &mut src, &mut storage, &mut p, Some(&mut branch)).unwrap_err();
            }
            assert_eq!((p.calls, branch.commits.len()), (1, 1));

            storage.fail_save = false;
            let c = at(dir.path(), 20, true);
            let r = tick_on(&c, &mut src, &mut storage, &mut p, Some(&mut branch)).unwrap();
            assert_eq!((p.calls, branch.commits.len()), (1, 1));
            let patch = r.writes.iter().find(|w| w.kind == "patch").unwrap();
            assert!(
                patch.ok && patch.detail.contains("made by an earlier tick"),
                "{patch:?}"
            );
            let proposal = &storage.load().unwrap().unwrap().llm.proposals["src/auth.js"];
            assert_eq!(proposal.patch_commit.as_deref(), Some("c1"));
            assert_eq!(proposal.patch_pending, None);
        }

        #[test]
        fn a_commit_whose_id_never_reached_the_journal_is_found_on_the_sandbox_branch() {
            let dir = tempfile::tempdir().unwrap();
            let mut storage = flaky(MemoryStorage::new());
            // The commit is made, its id cannot be written, the save fails.
            storage.fail_save = true;
            storage.fail_journal = vec!["commit"];
            let mut src = one_risky_file();
            let mut p = scripted(|_| evolve_with("// v1\n"));
            let mut branch = Branch::default();
            let c = at(dir.path(), 0, true);
            tick_on(&c, &mut src, &mut storage, &mut p, Some(&mut branch)).unwrap_err();
            assert_eq!((p.calls, branch.commits.len()), (1, 1));

            storage.fail_save = false;
            storage.fail_journal.clear();
            let c = at(dir.path(), 2, true);
            let r = tick_on(&c, &mut src, &mut storage, &mut p, Some(&mut branch)).unwrap();
            assert_eq!((p.calls, branch.commits.len()), (1, 1), "{:?}", r.writes);
            let patch = r.writes.iter().find(|w| w.kind == "patch").unwrap();
            assert!(
                patch.detail.contains("found in the sandbox branch"),
                "{patch:?}"
            );
            let proposal = &storage.load().unwrap().unwrap().llm.proposals["src/auth.js"];
            assert_eq!(proposal.patch_commit.as_deref(), Some("c1"));
        }

        #[test]
        fn no_call_is_made_when_the_decision_journal_cannot_be_written() {
            let dir = tempfile::tempdir().unwrap();
            let mut storage = flaky(MemoryStorage::new());
            storage.fail_journal = vec!["reserve"];
            let mut src = MemorySource::new();
            src.commit(&[("src/auth.js", "// a\n"), ("src/session.js", "// s\n")]);
            let mut p = scripted(|_| skip());
            let r = tick_on(
                &at(dir.path(), 0, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap();
            assert_eq!(p.calls, 0);
            assert_eq!(
                outcomes(&r),
                [
                    ("src/auth.js".into(), "pending"),
                    ("src/session.js".into(), "pending")
                ]
            );
            for f in &r.files {
                assert!(f.reason.contains("`state.json.decisions`"), "{}", f.reason);
            }
            assert!(
                r.notes
                    .iter()
                    .any(|n| n.contains("cannot write the decision journal"))
            );
            assert!(r.state_written, "what was decided without a call is saved");

            // The journal can be written again: the backlog is asked.
            storage.fail_journal.clear();
            let r = tick_on(
                &at(dir.path(), 2, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap();
            assert_eq!((r.exit_code, p.calls), (14, 2));
        }

        #[test]
        fn a_call_whose_answer_never_reached_the_journal_counts_its_reservation_and_decides_nothing()
         {
            let dir = tempfile::tempdir().unwrap();
            let mut storage = flaky(MemoryStorage::new());
            storage.fail_save = true;
            storage.fail_journal = vec!["answer"];
            let mut src = one_risky_file();
            let mut p = scripted(|_| skip());
            tick_on(
                &at(dir.path(), 0, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap_err();
            assert_eq!(p.calls, 1);

            storage.fail_save = false;
            storage.fail_journal.clear();
            let r = tick_on(
                &at(dir.path(), 2, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap();
            assert_eq!(p.calls, 1, "not asked again in the tick that replays");
            let auth = r.files.iter().find(|f| f.path == "src/auth.js").unwrap();
            assert_eq!(auth.outcome, Outcome::Failed);
            assert!(
                auth.reason.contains("is counted as spent"),
                "{}",
                auth.reason
            );
            let state = storage.load().unwrap().unwrap();
            let budget = &state.llm.budget;
            assert_eq!(budget.lifetime_calls, 1);
            assert!(
                budget.estimated_today > 0.0,
                "the reservation is spent: {budget:?}"
            );
            assert_eq!(state.llm.failures.get("unknown"), Some(&1));

            // A failure is retried by the first wake after its backoff.
            src.amend(&[("docs/b.md", "# b\n")]);
            let r = tick_on(
                &at(dir.path(), 14, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap();
            assert_eq!(p.calls, 2);
            assert_eq!(r.counts.get("llm_skip"), Some(&1));
        }

        #[test]
        fn an_answer_no_file_took_waits_in_the_journal_for_a_later_tick() {
            let dir = tempfile::tempdir().unwrap();
            let mut storage = flaky(MemoryStorage::new());
            storage.fail_save = true;
            let mut src = one_risky_file();
            let mut p = scripted(|_| skip());
            tick_on(
                &at(dir.path(), 0, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap_err();

            // One read: the doc is read, the file the answer is for is not.
            storage.fail_save = false;
            let mut c = at(dir.path(), 2, false);
            c.max_reads = 1;
            let r = tick_on(&c, &mut src, &mut storage, &mut p, None).unwrap();
            assert_eq!(r.counts.get("pending"), Some(&1));
            assert_ne!(storage.decisions_read().unwrap(), Journal::default());

            let r = tick_on(
                &at(dir.path(), 4, false),
                &mut src,
                &mut storage,
                &mut p,
                None,
            )
            .unwrap();
            assert_eq!(r.exit_code, 14);
            assert_eq!(outcomes(&r), [("src/auth.js".into(), "llm_skip")]);
            assert_eq!(p.calls, 1);
            let state = storage.load().unwrap().unwrap();
            assert_eq!(
                state.llm.budget.lifetime_calls, 1,
                "carried, not counted again"
            );
            assert_eq!(storage.decisions_read().unwrap(), Journal::default());
        }
    }
}
