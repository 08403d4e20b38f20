//! What a newcomer meets first: a fresh clone judged by its first tick, a
//! `--json` report that stays small and keeps its shape on every kind of
//! tick, the read limit of the GitLab source, and `explain` of a wrong path.

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::gitlab::{Api, Endpoint};
use crate::util::{Sandbox, WATCHED, at, hold_lock};

/// `n` files under the watched path: most are source files that would need
/// a model, a few are docs and tests that local policy settles.
fn clone_of(n: usize) -> (Sandbox, Vec<String>) {
    let sb = Sandbox::new();
    let mut paths = Vec::with_capacity(n);
    for i in 0..n {
        let rel = match i % 10 {
            0 => format!("{WATCHED}/docs/d{i}.md"),
            1 => format!("{WATCHED}/test/t{i}.test.js"),
            _ => format!("{WATCHED}/src/m{}/f{i}.js", i % 7),
        };
        sb.repo
            .write(&rel, format!("// {i}\nmodule.exports = {i};\n"));
        paths.push(rel);
    }
    sb.repo.commit("a fresh clone");
    paths.sort();
    (sb, paths)
}

#[track_caller]
fn report(out: &crate::util::Output, code: i32) -> Value {
    expect_code(out, code);
    out.json()
}

/// docs/json.md: a report grows with the files judged, not with the backlog.
#[test]
fn a_tick_that_leaves_205_of_213_files_pending_lists_8_files_and_20_pending_paths_in_about_2_kb() {
    let (sb, _) = clone_of(213);
    let out = sb.tick(&at(0), &["--max-reads", "8"]);
    let size = out.stdout.len();
    let r = report(&out, 10);
    assert_eq!(r["pending"], 205);
    assert_eq!(r["files"].as_array().unwrap().len(), 8);
    assert_eq!(r["pending_paths"].as_array().unwrap().len(), 20);
    assert!((1_000..3_000).contains(&size), "{size} bytes");
}

#[test]
fn a_fresh_clone_of_213_files_with_no_model_is_judged_by_its_first_tick() {
    let (sb, paths) = clone_of(213);
    // The default batch (5) bounds paid consultations; with no model there
    // are none, so nothing waits.
    let out = sb.tick(&at(0), &[]);
    // docs/json.md: about 50 KB.
    let size = out.stdout.len();
    assert!((40_000..60_000).contains(&size), "{size} bytes");
    let r = report(&out, 10);
    assert_eq!(r["pending"], 0);
    assert_eq!(r["pending_paths"], json!([]));
    assert_eq!(r["fresh_evaluations"], 213);
    assert_eq!(r["file_reads"], 213);
    assert_eq!(r["requests_by_kind"]["read"], 213);
    let judged: Vec<&str> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    let mut sorted = judged.clone();
    sorted.sort();
    assert_eq!(sorted, paths);
    let counts = &r["counts"];
    assert_eq!(
        counts["local_skip"].as_u64().unwrap() + counts["needs_review"].as_u64().unwrap(),
        213,
        "{counts}"
    );
    assert!(counts.get("pending").is_none(), "{counts}");

    // The next tick is a no-op, and says so with an empty list of writes.
    let r = report(&sb.tick(&at(2), &[]), 0);
    assert_eq!(r["writes"], json!([]));
    assert_eq!(r["state_written"], false);
}

#[test]
fn json_names_the_first_20_pending_paths_unless_asked_for_all() {
    let (sb, paths) = clone_of(30);
    let out = sb.tick(&at(0), &["--max-reads", "4"]);
    let r = report(&out, 10);
    assert_eq!(r["pending"], 26);
    let listed = r["pending_paths"].as_array().unwrap();
    assert_eq!(listed.len(), 20);
    let files = r["files"].as_array().unwrap();
    assert_eq!(files.len(), 4, "pending files are summarised, not listed");
    assert!(files.iter().all(|f| f["outcome"] != "pending"));
    // The listed paths are the first of the queue: the repository's order.
    let unread: Vec<&str> = paths
        .iter()
        .map(String::as_str)
        .filter(|p| !files.iter().any(|f| f["path"] == *p))
        .collect();
    assert_eq!(
        listed[..],
        unread[..20].iter().map(|p| json!(p)).collect::<Vec<_>>()[..]
    );

    let r = report(&sb.tick(&at(2), &["--max-reads", "4", "--all-pending"]), 14);
    assert_eq!(r["pending"], 22);
    assert_eq!(r["pending_paths"].as_array().unwrap().len(), 22);
    let pending_rows = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] == "pending")
        .count();
    assert_eq!(pending_rows, 22);
}

#[test]
fn writes_is_a_list_on_every_kind_of_tick() {
    let (sb, _) = clone_of(3);
    let dry = report(&sb.tick(&at(0), &["--dry-run"]), 10);
    assert_eq!(dry["writes"], json!([]));
    let first = report(&sb.tick(&at(0), &[]), 10);
    let kinds: Vec<&str> = first["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["state"]);
    let noop = report(&sb.tick(&at(2), &[]), 0);
    assert_eq!(noop["writes"], json!([]));
    let _lock = hold_lock(&sb.state);
    let busy = report(&sb.tick(&at(4), &[]), 20);
    assert_eq!(busy["writes"], json!([]));
}

#[test]
fn gitlab_reads_at_most_100_files_a_tick_unless_told_otherwise() {
    let (sb, _) = clone_of(130);
    let gl = sb.gitlab();
    let api = Api {
        path: Some(WATCHED.into()),
        ..Api::new(&gl)
    };
    // With the archive off, every file is one request: the bound keeps a tick small.
    let no_archive = |now: &str| {
        sb.api_tick_cmd(&api, now)
            .env("SENTINEL_MAX_ARCHIVE_BYTES", "0")
    };
    let out = no_archive(&at(0)).output();
    let r = report(&out, 10);
    assert_eq!(r["requests_by_kind"]["read"], 100);
    assert_eq!(gl.requests_to(Endpoint::BlobRaw).len(), 100);
    assert_eq!(r["pending"], 30);
    let out = no_archive(&at(2)).output();
    let r = report(&out, 14);
    assert_eq!(
        (r["requests_by_kind"]["read"].clone(), r["pending"].clone()),
        (json!(30), json!(0))
    );

    // `--max-reads 0` lifts the bound (for a first run that may take a burst).
    let (sb, _) = clone_of(130);
    let gl = sb.gitlab();
    let api = Api {
        path: Some(WATCHED.into()),
        ..Api::new(&gl)
    };
    let out = sb
        .api_tick_cmd(&api, &at(0))
        .args(["--max-reads", "0", "--max-archive-bytes", "0"])
        .output();
    let r = report(&out, 10);
    assert_eq!(
        (r["requests_by_kind"]["read"].clone(), r["pending"].clone()),
        (json!(130), json!(0))
    );
}

#[test]
fn explain_of_a_file_that_is_not_there_exits_1_and_says_why() {
    let (sb, paths) = clone_of(3);
    report(&sb.tick(&at(0), &[]), 10);
    let out = sb.explain("nosuch.js", false);
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr.trim_end(),
        "error: `nosuch.js` is neither in the watched tree at the head nor in the state; give the path from the repository root, as `--json` and the dashboard print it"
    );

    // In the tree but not judged yet: a new commit the next tick will see.
    let fresh = format!("{WATCHED}/src/new.js");
    sb.repo.write(&fresh, "// new\n");
    sb.repo.commit("a new file");
    let out = sb.explain(&fresh, true);
    expect_code(&out, 1);
    assert!(
        out.stderr.contains("not in the state yet"),
        "{}",
        out.stderr
    );

    // A file that is in both is explained, exit 0.
    let out = sb.explain(&paths[0], true);
    expect_code(&out, 0);
    assert_eq!(out.json()["path"], paths[0].as_str());
}

/// The first column of the table under `## Top-level fields` in docs/json.md.
fn documented_fields() -> Vec<String> {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json.md"))
        .expect("docs/json.md");
    let table = page
        .split("## Top-level fields")
        .nth(1)
        .expect("a Top-level fields section");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.split('|')
                .nth(1)
                .unwrap()
                .trim()
                .trim_matches('`')
                .to_string()
        })
        .collect()
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn every_top_level_field_of_the_tick_report_is_documented() {
    let mut documented = documented_fields();
    documented.sort();
    let (sb, _) = clone_of(3);
    let woke = report(&sb.tick(&at(0), &[]), 10);
    let mut seen = keys(&woke);
    seen.sort();
    assert_eq!(seen, documented, "docs/json.md and the report disagree");
    // The same keys on a no-op and on a busy tick.
    let noop = report(&sb.tick(&at(2), &[]), 0);
    let _lock = hold_lock(&sb.state);
    let busy = report(&sb.tick(&at(4), &[]), 20);
    for other in [noop, busy] {
        let mut k = keys(&other);
        k.sort();
        assert_eq!(k, seen);
    }
}
