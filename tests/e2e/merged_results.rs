//! `sentinel report` in merged results pipelines and merge trains: there
//! HEAD is GitLab's merge commit, whose first parent is the target branch
//! (or the train car ahead), so `--changed-since` alone also names what the
//! target gained since the merge request's base. `--changed-until` with the
//! source branch's SHA reports the merge request's own change.

use std::fs;
use std::path::Path;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, Reply};
use crate::util::{Output, Sandbox, WATCHED, at};

/// A state whose first tick over `libs/shared/{a,b,c}.js` left one finding
/// on each file; the fake model is returned so it outlives the tick.
fn with_findings() -> (Sandbox, FakeOpenAi) {
    let sb = Sandbox::new();
    for name in ["a.js", "b.js", "c.js"] {
        sb.repo.write(
            &format!("{WATCHED}/{name}"),
            format!("// {name}\nif (token == given) {{ ok(); }}\n"),
        );
    }
    sb.repo.commit("initial files");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        "tokens compared in variable time",
        json!([{"line": 2, "severity": "critical", "message": "constant time"}]),
    ));
    let out = sb
        .advisor_tick_cmd(&ai, &at(0))
        .args(["--path", WATCHED, "--batch", "0"])
        .output();
    expect_code(&out, 10);
    (sb, ai)
}

/// The paths the report at `file` names, in order.
fn reported(file: &Path) -> Vec<String> {
    let issues: Value = serde_json::from_slice(&fs::read(file).unwrap()).unwrap();
    issues
        .as_array()
        .expect("one JSON array")
        .iter()
        .map(|i| i["location"]["path"].as_str().unwrap().to_string())
        .collect()
}

fn report(sb: &Sandbox, extra: &[&str]) -> (Output, Vec<String>) {
    let file = sb.root().join("out").join("gl-code-quality-report.json");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    let out = sb
        .sentinel(["report", "--codequality"])
        .arg(&file)
        .arg("--state")
        .arg(&sb.state)
        .arg("--repo")
        .arg(&sb.repo.root)
        .args(extra)
        .output();
    let paths = if out.code == 0 {
        reported(&file)
    } else {
        vec![]
    };
    (out, paths)
}

/// The merge request `mr` changes b.js off `base`; then another merge
/// request lands on main and changes a.js. Returns (diff base, target SHA,
/// source SHA).
fn diverged(sb: &Sandbox) -> (String, String, String) {
    let base = sb.repo.head();
    sb.repo.git(&["checkout", "-q", "-b", "mr"]);
    sb.repo
        .write(&format!("{WATCHED}/b.js"), "// b.js\nmodule.exports = 2;\n");
    let source = sb.repo.commit("the merge request");
    sb.repo.git(&["checkout", "-q", "main"]);
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js\nmodule.exports = 1;\n");
    let target = sb.repo.commit("another merge request, merged first");
    (base, target, source)
}

/// GitLab's merged results commit: the target with the source merged in,
/// checked out detached as the runner does.
fn merge_commit(sb: &Sandbox, onto: &str, source: &str) -> String {
    sb.repo.git(&["checkout", "-q", "--detach", onto]);
    sb.repo.git(&[
        "merge",
        "-q",
        "--no-ff",
        "--no-edit",
        "-m",
        "merged result",
        source,
    ]);
    sb.repo.head()
}

#[test]
fn a_merged_results_pipeline_reports_only_the_merge_requests_own_change() {
    let (sb, _ai) = with_findings();
    let (base, target, source) = diverged(&sb);
    merge_commit(&sb, &target, &source);

    // What the template passed before: the diff base against GitLab's merge
    // commit names a.js too, which the merge request never touched.
    let (out, paths) = report(&sb, &["--changed-since", &base]);
    expect_code(&out, 0);
    assert_eq!(
        paths,
        [format!("{WATCHED}/a.js"), format!("{WATCHED}/b.js")]
    );

    let (out, paths) = report(
        &sb,
        &[
            "--changed-since",
            &target,
            "--changed-until",
            &source,
            "--json",
        ],
    );
    expect_code(&out, 0);
    assert_eq!(paths, [format!("{WATCHED}/b.js")]);
    assert_eq!(out.json()["changed_until"], json!(source));
    assert_eq!(out.json()["changed_files"], json!(1));
}

#[test]
fn a_merge_train_car_reports_only_its_own_change_not_the_cars_ahead() {
    let (sb, _ai) = with_findings();
    let (_base, target, source) = diverged(&sb);
    // The car ahead in the train changes c.js; this car's merge commit is
    // built on that car's result, not on the target branch.
    sb.repo.git(&["checkout", "-q", "-b", "ahead", &target]);
    sb.repo
        .write(&format!("{WATCHED}/c.js"), "// c.js\nmodule.exports = 3;\n");
    let ahead = sb.repo.commit("the car ahead");
    merge_commit(&sb, &ahead, &source);

    let (out, paths) = report(&sb, &["--changed-since", &target]);
    expect_code(&out, 0);
    assert_eq!(
        paths,
        [format!("{WATCHED}/b.js"), format!("{WATCHED}/c.js")]
    );

    let (out, paths) = report(
        &sb,
        &["--changed-since", &target, "--changed-until", &source],
    );
    expect_code(&out, 0);
    assert_eq!(paths, [format!("{WATCHED}/b.js")]);
}

#[test]
fn a_changed_until_that_is_not_a_commit_exits_1_and_writes_nothing() {
    let (sb, _ai) = with_findings();
    let (_base, target, _source) = diverged(&sb);
    for bad in ["0000000000000000000000000000000000000001", "-x", ""] {
        let flag = format!("--changed-until={bad}");
        let (out, _) = report(&sb, &["--changed-since", &target, &flag]);
        expect_code(&out, 1);
        assert!(
            out.stderr.contains("--changed-until") || out.stderr.contains(bad),
            "{}",
            out.stderr
        );
        assert!(
            !sb.root().join("out/gl-code-quality-report.json").exists(),
            "nothing is written"
        );
    }
    // Without --changed-since it means nothing: a usage error.
    let (out, _) = report(&sb, &["--changed-until", &target]);
    expect_code(&out, 2);
}
