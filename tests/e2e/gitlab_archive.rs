//! A GitLab first run costs a handful of requests: against the fake GitLab,
//! a tick with many files to read downloads the repository archive once and
//! judges every file from it; the next 1-file wake costs its few requests.
//! A refused, cut or oversized archive falls back to per-file reads with a
//! note, still bounded by `--max-reads`; an entry whose bytes are not the
//! listed blob, a link and a `../` entry are never judged from it.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::util::gitlab::{Api, Endpoint, FakeGitLab, Reply, Tamper, rate_limited};
use crate::util::{Sandbox, WATCHED, at, files, notes};
use crate::{expect_code, fast_import, import_files};

fn path_of(i: usize) -> String {
    format!("{WATCHED}/d{:02}/f{i:05}.js", i / 100)
}

/// A sandbox whose `main` holds `n` files of about `size` bytes under the
/// watched path, in one commit.
fn project(n: usize, size: usize) -> Sandbox {
    let sb = Sandbox::new();
    import_files(&sb, n, path_of, |i| {
        let pad = "/".repeat(size.saturating_sub(40));
        format!("// f{i:05}.js {pad}\nmodule.exports = {i};\n")
    });
    sb
}

#[track_caller]
fn tick(sb: &Sandbox, gl: &FakeGitLab, now: &str, extra: &[&str], code: i32) -> Value {
    let out = sb.api_tick_cmd(&Api::new(gl), now).args(extra).output();
    expect_code(&out, code);
    out.json()
}

/// The blob ids read one by one.
fn blob_reads(gl: &FakeGitLab) -> BTreeSet<String> {
    gl.requests_to(Endpoint::BlobRaw)
        .iter()
        .map(|r| r.segments[6].clone())
        .collect()
}

#[test]
fn a_2000_file_gitlab_first_run_is_judged_whole_in_30_requests_and_a_1_file_wake_in_6() {
    let sb = project(2_000, 60);
    let gl = sb.gitlab();
    let first = tick(&sb, &gl, &at(0), &[], 10);
    assert_eq!(first["fresh_evaluations"], 2_000, "{}", notes(&first));
    assert_eq!(first["pending"], 0, "{}", notes(&first));
    let requests = gl.requests().len();
    assert!(
        requests <= 30,
        "{requests} requests: {}",
        first["requests_by_kind"]
    );
    assert_eq!(gl.requests_to(Endpoint::Archive).len(), 1);
    assert!(
        blob_reads(&gl).is_empty(),
        "every file came from the archive"
    );
    // The documented request: the head it listed, the watched path.
    let archive = &gl.requests_to(Endpoint::Archive)[0];
    assert_eq!(archive.param("sha"), first["head"].as_str());
    assert_eq!(archive.param("path"), Some(WATCHED));
    assert_eq!(first["requests"], requests);

    let changed = path_of(1_234);
    let change = format!(
        "commit refs/heads/main\ncommitter t <t@example.invalid> 1781481660 +0000\ndata 7\nchange\n\
         from refs/heads/main^0\nM 100644 inline {changed}\ndata 21\nmodule.exports = -1;\n\n"
    );
    fast_import(&sb, change.as_bytes());
    gl.clear_requests();
    let wake = tick(&sb, &gl, &at(10), &[], 12);
    let requests = gl.requests().len();
    assert!(
        requests <= 6,
        "{requests} requests: {}",
        wake["requests_by_kind"]
    );
    assert_eq!(
        gl.requests_to(Endpoint::Archive).len(),
        0,
        "one file is read by itself"
    );
    assert_eq!(
        files(&wake)
            .into_iter()
            .map(|(p, _, novelty)| (p, novelty))
            .collect::<Vec<_>>(),
        vec![(changed, "changed".to_string())]
    );
    assert_eq!(wake["pending"], 0);
}

/// A first run of 60 files with `--max-reads 10` whose archive answers
/// `reply`: 10 files are read one by one, 50 wait, and a note says why.
fn falls_back_when_the_archive_answers(reply: Reply, said: &str) {
    let sb = project(60, 60);
    let gl = sb.gitlab();
    gl.push(Endpoint::Archive, reply);
    let report = tick(&sb, &gl, &at(0), &["--max-reads", "10"], 10);
    let notes = notes(&report);
    assert!(
        notes.contains("archive was not used") && notes.contains(said),
        "{notes}"
    );
    assert_eq!(
        gl.requests_to(Endpoint::Archive).len(),
        1,
        "asked once, no retry"
    );
    assert_eq!(blob_reads(&gl).len(), 10, "--max-reads bounds the fallback");
    assert_eq!(report["fresh_evaluations"], 10);
    assert_eq!(report["pending"], 50);
    assert_eq!(
        report["slept_ms"].as_array().map(Vec::len),
        Some(0),
        "no wait"
    );
}

#[test]
fn a_forbidden_archive_falls_back_to_reads_bounded_by_max_reads() {
    falls_back_when_the_archive_answers(Reply::error(403, "403.json"), "403");
}

#[test]
fn a_rate_limited_archive_falls_back_to_reads_bounded_by_max_reads() {
    falls_back_when_the_archive_answers(rate_limited(), "429");
}

#[test]
fn an_archive_download_that_fails_falls_back_to_reads_bounded_by_max_reads() {
    falls_back_when_the_archive_answers(Reply::Hangup, "the download failed");
}

#[test]
fn archive_entries_with_other_bytes_a_link_or_a_dotdot_path_are_not_judged_from_it() {
    let sb = project(30, 60);
    let gl = sb.gitlab();
    let (a, b, c) = (path_of(3), path_of(4), path_of(5));
    gl.tamper_archive(Tamper::Bytes {
        path: a.clone(),
        bytes: b"module.exports = 'not the listed blob';\n".to_vec(),
    });
    gl.tamper_archive(Tamper::Symlink {
        path: b.clone(),
        target: "../../etc/passwd".into(),
    });
    gl.tamper_archive(Tamper::Name {
        path: c.clone(),
        name: format!("../{c}"),
    });
    let report = tick(&sb, &gl, &at(0), &[], 10);
    assert_eq!(gl.requests_to(Endpoint::Archive).len(), 1);
    let blob = |p: &str| sb.repo.git(&["rev-parse", &format!("main:{p}")]);
    assert_eq!(
        blob_reads(&gl),
        BTreeSet::from([blob(&a), blob(&b), blob(&c)]),
        "exactly the three tampered files are read by themselves"
    );
    assert!(
        notes(&report).contains("held 27 of 30"),
        "{}",
        notes(&report)
    );
    assert_eq!(report["fresh_evaluations"], 30);
    assert_eq!(report["pending"], 0);
    let judged: Vec<String> = files(&report).into_iter().map(|(p, _, _)| p).collect();
    assert_eq!(judged.len(), 30);
    assert!(
        judged.iter().all(|p| p.starts_with(&format!("{WATCHED}/"))),
        "{judged:?}"
    );
}

#[test]
fn an_archive_over_the_whole_size_limit_stops_with_a_note_and_falls_back() {
    // 200 files of about 1 KiB: some 300 KB of tar, over a 60,000-byte limit.
    let sb = project(200, 1_000);
    let gl = sb.gitlab();
    let report = tick(
        &sb,
        &gl,
        &at(0),
        &["--max-reads", "10", "--max-archive-bytes", "60000"],
        10,
    );
    let notes = notes(&report);
    assert!(
        notes.contains("went past 60000 bytes (--max-archive-bytes)"),
        "{notes}"
    );
    assert_eq!(gl.requests_to(Endpoint::Archive).len(), 1);
    assert_eq!(blob_reads(&gl).len(), 10, "--max-reads bounds the fallback");
    let fresh = report["fresh_evaluations"].as_u64().unwrap();
    let pending = report["pending"].as_u64().unwrap();
    // What the archive gave before the limit was checked entry by entry.
    assert!(fresh > 10 && fresh < 60, "{fresh} judged");
    assert_eq!(fresh + pending, 200);
}
