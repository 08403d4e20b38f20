//! `sentinel report`: the Code Quality report of the last known findings,
//! written outside a tick for a merge request pipeline. A real tick with a
//! fake model makes the findings; the report reads them read-only (no lock,
//! no request, the state's bytes and mtime untouched), of every file or of
//! the files `git diff REF...HEAD` names, and refuses what it must refuse.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Output, Sandbox, WATCHED, at, hold_lock, snapshot};

const MESSAGE: &str = "use a constant-time comparison";

/// A repository with `libs/shared/{a,b,c}.js` and `docs/guide.md`, and a
/// state saved by a real first tick over `libs/shared` in which the model
/// proposed a change (one finding) for each of the three files.
fn with_findings() -> (Sandbox, FakeOpenAi) {
    let sb = Sandbox::new();
    for name in ["a.js", "b.js", "c.js"] {
        sb.repo.write(
            &format!("{WATCHED}/{name}"),
            format!("// {name}\nif (token == given) {{ ok(); }}\n"),
        );
    }
    sb.repo.write("docs/guide.md", "# guide\n");
    sb.repo.commit("initial files");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "tokens compared in variable time",
        json!([{"line": 2, "severity": "critical", "message": MESSAGE}]),
    ));
    let out = sb
        .advisor_tick_cmd(&ai, &at(0))
        .args(["--path", WATCHED, "--batch", "0"])
        .output();
    expect_code(&out, 10);
    assert_eq!(
        out.json()["counts"],
        json!({"evolve": 3}),
        "the fixture needs a finding on every file"
    );
    (sb, ai)
}

fn report_path(sb: &Sandbox) -> PathBuf {
    sb.root().join("out").join("gl-code-quality-report.json")
}

/// `sentinel report --codequality FILE --state S` with `extra` flags.
fn report(sb: &Sandbox, file: &Path, extra: &[&str]) -> Output {
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    sb.sentinel(["report", "--codequality"])
        .arg(file)
        .arg("--state")
        .arg(&sb.state)
        .args(extra)
        .output()
}

/// The report's entries as `(path, line, severity, description)`.
fn entries(file: &Path) -> Vec<(String, u64, String, String)> {
    let issues: Value = serde_json::from_slice(&fs::read(file).unwrap()).unwrap();
    issues
        .as_array()
        .expect("one JSON array")
        .iter()
        .map(|i| {
            (
                i["location"]["path"].as_str().unwrap().to_string(),
                i["location"]["lines"]["begin"].as_u64().unwrap(),
                i["severity"].as_str().unwrap().to_string(),
                i["description"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn finding(name: &str) -> (String, u64, String, String) {
    (
        format!("{WATCHED}/{name}"),
        2,
        "critical".to_string(),
        MESSAGE.to_string(),
    )
}

/// A merge request branch `mr` off main that changes `libs/shared/b.js`,
/// adds `libs/shared/new.js`, edits `docs/guide.md` and deletes `c.js`.
fn merge_request(sb: &Sandbox) {
    sb.repo.git(&["checkout", "-q", "-b", "mr"]);
    sb.repo
        .write(&format!("{WATCHED}/b.js"), "// b.js\nmodule.exports = 2;\n");
    sb.repo.write(
        &format!("{WATCHED}/new.js"),
        "// new\nmodule.exports = 3;\n",
    );
    sb.repo.write("docs/guide.md", "# guide, edited\n");
    sb.repo.remove(&format!("{WATCHED}/c.js"));
    sb.repo.commit("the merge request");
}

#[test]
fn a_report_of_every_file_holds_the_last_known_findings_and_touches_nothing() {
    let (sb, ai) = with_findings();
    let before = snapshot(&sb.state).unwrap();
    let calls = ai.count();
    let file = report_path(&sb);
    // A tick holds the lock: the report never waits for it, nor takes it.
    let held = hold_lock(&sb.state);
    let out = report(&sb, &file, &["--json"]);
    drop(held);
    expect_code(&out, 0);
    assert_eq!(
        entries(&file),
        vec![finding("a.js"), finding("b.js"), finding("c.js")]
    );
    assert_eq!(
        out.json(),
        json!({
            "exit_code": 0,
            "codequality": file.display().to_string(),
            "state": sb.state.display().to_string(),
            "state_found": true,
            "changed_since": null,
            "changed_files": null,
            "files": 3,
            "issues": 3,
        })
    );
    assert_eq!(
        out.stderr_line(),
        format!(
            "sentinel: report: 3 findings in 3 files written to `{}`",
            file.display()
        )
    );
    assert_eq!(snapshot(&sb.state), Some(before), "the state was touched");
    assert!(
        !sb.journal().exists(),
        "a report is no tick: no journal line"
    );
    assert_eq!(ai.count(), calls, "no request to the model");
}

#[test]
fn the_report_is_the_same_bytes_as_the_waking_ticks_codequality() {
    let sb = Sandbox::new();
    sb.repo
        .write("src/auth.js", "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("auth");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "tokens compared in variable time",
        json!([{"line": 1, "severity": "critical", "message": MESSAGE}]),
    ));
    let by_tick = sb.root().join("by-tick.json");
    let out = sb
        .advisor_tick_cmd(&ai, &at(0))
        .arg("--codequality")
        .arg(&by_tick)
        .output();
    expect_code(&out, 10);
    let file = report_path(&sb);
    expect_code(&report(&sb, &file, &[]), 0);
    assert_eq!(fs::read(&file).unwrap(), fs::read(&by_tick).unwrap());
}

#[test]
fn with_changed_since_only_the_files_the_merge_request_changes_are_reported() {
    let (sb, _ai) = with_findings();
    merge_request(&sb);
    let file = report_path(&sb);
    let repo = sb.repo.root.to_str().unwrap().to_string();
    let out = report(
        &sb,
        &file,
        &["--changed-since", "main", "--repo", &repo, "--json"],
    );
    expect_code(&out, 0);
    // a.js is not in the merge request, c.js is deleted by it, new.js and
    // docs/guide.md have no finding.
    assert_eq!(entries(&file), vec![finding("b.js")]);
    let written = out.json();
    assert_eq!(
        (&written["changed_files"], &written["issues"]),
        (&json!(3), &json!(1))
    );
    assert!(
        out.stderr_line()
            .contains("1 finding in 1 file (of 3 changed files)"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_subdirectory_checkout_with_diff_relative_still_maps_to_the_state_paths() {
    let (sb, _ai) = with_findings();
    merge_request(&sb);
    // A user's config that makes `git diff` print paths relative to the
    // current directory; the state's paths are from the repository root.
    sb.repo.git(&["config", "diff.relative", "true"]);
    let file = report_path(&sb);
    let inside = sb.repo.root.join(WATCHED);
    let out = report(
        &sb,
        &file,
        &[
            "--changed-since",
            "main",
            "--repo",
            inside.to_str().unwrap(),
        ],
    );
    expect_code(&out, 0);
    assert_eq!(entries(&file), vec![finding("b.js")]);
}

#[test]
fn an_env_only_configuration_reports_the_changed_files() {
    let (sb, _ai) = with_findings();
    merge_request(&sb);
    let file = report_path(&sb);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let out = sb
        .sentinel(["report"])
        .env("SENTINEL_CODEQUALITY", &file)
        .env("SENTINEL_STATE", &sb.state)
        .env("SENTINEL_REPO", &sb.repo.root)
        .env("SENTINEL_CHANGED_SINCE", "main")
        .output();
    expect_code(&out, 0);
    assert_eq!(entries(&file), vec![finding("b.js")]);
}

#[test]
fn a_missing_state_writes_an_empty_report_and_exits_0() {
    let sb = Sandbox::with_files(&["a.js"]);
    let file = report_path(&sb);
    let out = report(&sb, &file, &[]);
    expect_code(&out, 0);
    assert_eq!(fs::read_to_string(&file).unwrap(), "[]\n");
    assert!(
        out.stderr.starts_with(&format!(
            "sentinel: no state at `{}` yet (no tick has saved one): the report is empty\n",
            sb.state.display()
        )),
        "{}",
        out.stderr
    );
    assert!(!sb.state.exists(), "a report creates no state");
    assert!(!sb.lock().exists(), "a report creates no lock file");
}

#[test]
fn a_corrupt_state_exits_1_and_writes_nothing() {
    let (sb, _ai) = with_findings();
    let mut bytes = fs::read(&sb.state).unwrap();
    bytes.truncate(bytes.len() / 2);
    fs::write(&sb.state, &bytes).unwrap();
    let file = report_path(&sb);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, "previous\n").unwrap();
    let out = report(&sb, &file, &[]);
    expect_code(&out, 1);
    assert!(
        out.stderr_line().starts_with("error: state file `"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("truncated"), "{}", out.stderr);
    assert_eq!(fs::read_to_string(&file).unwrap(), "previous\n");
    assert_eq!(fs::read(&sb.state).unwrap(), bytes, "the state was touched");
}

#[test]
fn a_bad_ref_exits_1_names_what_to_pass_and_writes_nothing() {
    let (sb, _ai) = with_findings();
    let file = report_path(&sb);
    let repo = sb.repo.root.to_str().unwrap().to_string();
    for bad in ["no-such-branch", "", "--output=/tmp/x"] {
        let flag = format!("--changed-since={bad}");
        let out = report(&sb, &file, &["--repo", &repo, &flag]);
        expect_code(&out, 1);
        let line = out.stderr_line();
        assert!(
            line.contains("CI_MERGE_REQUEST_DIFF_BASE_SHA"),
            "`{bad}`: {line}"
        );
        assert!(line.contains("nothing was written"), "`{bad}`: {line}");
        assert!(!file.exists(), "`{bad}` wrote the report");
    }
}

#[test]
fn a_planted_link_at_the_report_is_never_written_through() {
    let (sb, _ai) = with_findings();
    let file = report_path(&sb);
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let victim = sb.root().join("victim");
    fs::write(&victim, "not sentinel's\n").unwrap();
    symlink(&victim, &file).unwrap();
    let out = report(&sb, &file, &[]);
    expect_code(&out, 1);
    assert!(
        out.stderr.contains(&format!("`{}`", file.display())),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("symbolic link"), "{}", out.stderr);
    assert_eq!(fs::read_to_string(&victim).unwrap(), "not sentinel's\n");
    assert!(
        fs::symlink_metadata(&file)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}
