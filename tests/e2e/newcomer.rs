//! The rough edges a newcomer hits: a tick from a subdirectory, an absolute
//! `--path`, a mistyped `--state`, `stats` on a narrow terminal, `explain`'s
//! wording, the advisor hint, and what a failed setup says it wrote.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply};
use crate::util::{Sandbox, WATCHED, at};

/// `sentinel ARGS` run in `dir` of the clone, with no `--repo` and no `--state`.
fn in_dir(sb: &Sandbox, dir: &str, args: &[&str]) -> crate::util::Output {
    sb.sentinel(args)
        .current_dir(sb.repo.root.join(dir))
        .output()
}

#[test]
fn a_tick_stats_and_explain_from_a_subdirectory_use_the_clones_state() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let tick = ["tick", "--path", WATCHED, "--now", &at(0), "--json"];
    let first = in_dir(&sb, "", &tick);
    expect_code(&first, 10);
    let state = sb.repo.root.join(".sentinel/state.json");
    assert!(state.is_file());
    // From a subdirectory: the same state, so a no-op, not a second first run.
    let tick = ["tick", "--path", WATCHED, "--now", &at(2), "--json"];
    let again = in_dir(&sb, WATCHED, &tick);
    expect_code(&again, 0);
    assert!(!sb.repo.root.join(WATCHED).join(".sentinel").exists());
    let stats = in_dir(&sb, WATCHED, &["stats", "--json"]);
    expect_code(&stats, 0);
    assert_eq!(stats.json()["wake"]["ticks"], 2, "{}", stats.stdout);
    let file = format!("{WATCHED}/a.js");
    let explain = in_dir(&sb, WATCHED, &["explain", &file, "--path", WATCHED]);
    expect_code(&explain, 0);
    assert!(
        explain.stdout.contains("verdict: unchanged"),
        "{}",
        explain.stdout
    );
}

#[test]
fn an_absolute_path_is_a_usage_error_that_names_the_relative_spelling() {
    let sb = Sandbox::with_files(&["a.js"]);
    let out = sb
        .sentinel(["tick", "--now", &at(0), "--path", "/libs/shared", "--repo"])
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 2);
    assert!(
        out.stderr.contains("`--path libs/shared`"),
        "{}",
        out.stderr
    );
    assert!(!sb.state.exists());
    // The clone's own directory spelled out is suggested as the part below it.
    let inside = sb.repo.root.canonicalize().unwrap().join(WATCHED);
    let out = sb
        .sentinel(["tick", "--now", &at(0), "--repo"])
        .arg(&sb.repo.root)
        .arg("--path")
        .arg(&inside)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 2);
    assert!(
        out.stderr.contains(&format!("`--path {WATCHED}`")),
        "{}",
        out.stderr
    );
}

#[test]
fn a_mistyped_state_warns_naming_the_state_at_the_default_place() {
    let sb = Sandbox::with_files(&["a.js"]);
    let tick = |state: Option<&str>, minute: i64| {
        let mut run = sb
            .sentinel(["tick", "--path", WATCHED, "--now", &at(minute), "--repo"])
            .arg(&sb.repo.root);
        if let Some(s) = state {
            run = run.args(["--state", s]);
        }
        run.output()
    };
    expect_code(&tick(None, 0), 10);
    let real = sb.repo.root.join(".sentinel/state.json");
    let typo = sb.root().join("stat.json");
    let out = tick(Some(typo.to_str().unwrap()), 2);
    expect_code(&out, 10);
    let warning = out.stderr.lines().next().unwrap_or_default();
    assert!(
        warning.starts_with("sentinel: warning: `--state ")
            && warning.contains(&format!("`{}` holds a state of this scope", real.display())),
        "{}",
        out.stderr
    );
    // Once it exists: no warning.
    let out = tick(Some(typo.to_str().unwrap()), 4);
    assert!(!out.stderr.contains("warning"), "{}", out.stderr);
}

#[test]
fn stats_fits_a_100_column_terminal_with_the_circuit_open_and_times_to_the_second() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::quota());
    // A clock with a fraction of a second, as a real one has.
    let now = "2026-06-16T00:00:00.123456789Z";
    let out = sb
        .tick_cmd(now)
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .env("OPENAI_API_KEY", KEY)
        .output();
    assert_eq!(out.code, 10, "{}", out.stderr);
    let table = sb
        .sentinel(["stats", "--now", "2026-06-16T00:01:00.5Z", "--state"])
        .arg(&sb.state)
        .output();
    expect_code(&table, 0);
    assert!(table.stdout.contains("open: quota"), "{}", table.stdout);
    for line in table.stdout.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} wide: {line}",
            line.chars().count()
        );
    }
    assert!(!table.stdout.contains("+00:00"), "{}", table.stdout);
    assert!(!table.stdout.contains(".123"), "{}", table.stdout);
    let json = sb
        .sentinel([
            "stats",
            "--json",
            "--now",
            "2026-06-16T00:01:00.5Z",
            "--state",
        ])
        .arg(&sb.state)
        .output();
    let until = json.json()["llm"]["circuit"]["until"].clone();
    let until = until.as_str().unwrap_or_default().to_string();
    assert!(
        until.ends_with('Z') && !until.contains('.') && until.len() == 20,
        "{until}"
    );
    assert!(
        table.stdout.contains(&until),
        "the table and JSON agree: {until}"
    );
}

#[test]
fn every_stats_row_is_explained_in_the_docs() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::quota());
    sb.tick_cmd(&at(0))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .env("OPENAI_API_KEY", KEY)
        .output();
    let table = sb.sentinel(["stats", "--state"]).arg(&sb.state).output();
    expect_code(&table, 0);
    let docs = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/stats.md")).unwrap();
    let (mut missing, mut seen) = (Vec::new(), Vec::new());
    for line in table.stdout.lines() {
        let cells: Vec<&str> = line.split('│').map(str::trim).collect();
        let (Some(label), Some(value)) = (cells.get(1).copied(), cells.get(2)) else {
            continue;
        };
        // A wrapped value's continuation lines have no name of their own.
        if label.is_empty() {
            assert!(!value.is_empty(), "a row with no name and no value: {line}");
            continue;
        }
        seen.push(label.to_string());
        // Rows printed once per value are documented by their pattern.
        let documented = [
            ("by_reason.", "`by_reason.<reason>`"),
            ("failures.", "`failures.<class>`"),
            ("labelled ", "`labelled <category>`"),
            ("reviewed every ", "`reviewed every <N> d`"),
        ]
        .iter()
        .find(|(prefix, _)| label.starts_with(prefix))
        .map_or(format!("`{label}`"), |(_, pattern)| pattern.to_string());
        let is_title = docs.contains(&format!("## {label}"));
        if !is_title && !docs.contains(&format!("| {documented} |")) {
            missing.push(label.to_string());
        }
    }
    assert!(missing.is_empty(), "rows not in docs/stats.md: {missing:?}");
    assert!(seen.iter().any(|l| l == "circuit"), "{}", table.stdout);
}

#[test]
fn explain_says_which_part_differs_and_prints_no_empty_column() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js\nmodule.exports = 2;\n");
    sb.repo.commit("edit a");
    let out = sb.explain(&format!("{WATCHED}/a.js"), false);
    expect_code(&out, 0);
    assert!(
        out.stdout.contains("verdict: changed: content differs"),
        "{}",
        out.stdout
    );
    let header = out
        .stdout
        .lines()
        .find(|l| l.contains("remembered") && l.contains("current") && l.contains('│'))
        .unwrap_or_else(|| panic!("no table header: {}", out.stdout));
    let cells: Vec<&str> = header.split('│').map(str::trim).collect();
    assert_eq!(
        cells[1..cells.len() - 1],
        ["part", "remembered", "current", "differs"]
    );
    assert!(!out.stdout.contains("+00:00"), "{}", out.stdout);
}

#[test]
fn the_advisor_hint_is_given_only_when_the_advisor_is_off_by_default() {
    let sb = Sandbox::with_files(&["a.js"]);
    let hint = "set OPENAI_API_KEY";
    let by_default = sb.tick(&at(0), &["--dry-run"]);
    assert!(by_default.stderr.contains(hint), "{}", by_default.stderr);
    let said_off = sb.tick(&at(0), &["--dry-run", "--llm", "off"]);
    assert!(!said_off.stderr.contains(hint), "{}", said_off.stderr);
    let report: Value = said_off.json();
    assert!(!report["notes"].to_string().contains(hint), "{report}");
}

#[test]
fn the_readme_installs_with_the_locked_dependencies() {
    let readme = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(
        readme.contains("cargo install --locked --path ."),
        "README install"
    );
    assert!(
        !readme.contains("cargo install --path ."),
        "README install without --locked"
    );
}
