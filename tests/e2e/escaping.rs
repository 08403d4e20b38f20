//! What reaches a terminal or the dashboard is escaped: a path, a model
//! message or a peer's error can hold control characters, bidi overrides,
//! quick actions and links, and none of them reaches the screen or the page
//! raw.

use std::fs;

use serde_json::json;

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply};
use crate::util::{Sandbox, WATCHED, at};

const EVIL: &str = "e\u{1b}[2J\u{202e}vil\nx";

#[track_caller]
fn no_raw_controls(text: &str) {
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "raw control: {text:?}"
    );
}

#[test]
fn an_error_naming_a_hostile_path_shows_its_control_characters_escaped() {
    let sb = Sandbox::with_files(&["a.js"]);
    let state = sb.root().join(EVIL).join("state.json");
    fs::create_dir_all(&state).unwrap();
    let out = sb.sentinel(["stats", "--state"]).arg(&state).output();
    expect_code(&out, 1);
    no_raw_controls(&out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    assert!(
        out.stderr.contains("e\\u{1b}[2J\\u{202e}vil\\nx"),
        "{:?}",
        out.stderr
    );
}

#[test]
fn the_verdict_line_shows_a_hostile_note_escaped_on_one_line() {
    let sb = Sandbox::with_files(&["a.js"]);
    let page = sb.root().join(EVIL).join("dashboard.md");
    let out = sb.tick(&at(0), &["--dashboard-file", page.to_str().unwrap()]);
    expect_code(&out, 10);
    no_raw_controls(&out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{:?}", out.stderr);
    assert!(out.stderr.contains("\\u{1b}[2J"), "{:?}", out.stderr);
}

#[test]
fn explain_shows_a_hostile_file_name_escaped() {
    let name = "n\u{1b}]0;pwned\u{7}.js";
    let sb = Sandbox::with_files(&[name]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let out = sb.explain(&format!("{WATCHED}/{name}"), false);
    expect_code(&out, 0);
    no_raw_controls(&out.stdout);
    assert!(!out.stdout.contains('\u{7}'), "{:?}", out.stdout);
    assert!(
        out.stdout.contains("n\\u{1b}]0;pwned\\u{7}.js"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_dashboard_page_cannot_be_given_a_quick_action_a_link_or_a_broken_table() {
    let sb = Sandbox::with_files(&["auth|x.js"]);
    let ai = FakeOpenAi::start();
    let message = "leak\n/label ~evil\n[click](https://evil.example)<img src=x>";
    ai.answer_always(Reply::evolve(
        "x)](https://evil.example)\n/close",
        json!([
            {"line": 1, "severity": "major", "message": message}
        ]),
    ));
    let page = sb.root().join("dashboard.md");
    let out = sb
        .tick_cmd(&at(0))
        .args(["--dashboard-file", page.to_str().unwrap(), "--fake-sleep"])
        .args(["--llm-url", &ai.base_url(), "--all-pending"])
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, 10);
    let page = fs::read_to_string(&page).unwrap();
    assert!(page.contains("leak"), "the proposal is listed: {page}");
    for line in page.lines() {
        assert!(!line.starts_with('/'), "a quick action: {line:?}\n{page}");
        if line.starts_with("| ") && !line.starts_with("| file") {
            let cells = line.split('|').count() - line.matches("\\|").count();
            assert_eq!(cells, 6, "four cells: {line:?}");
        }
    }
    // Outside its code spans (where a URL is text), no link can open.
    let outside: String = page.lines().flat_map(|l| l.split('`').step_by(2)).collect();
    assert!(!outside.contains("](https://evil"), "a link: {page}");
    assert!(
        !outside.replace("\\<", "").contains("<img"),
        "a tag: {page}"
    );
}

#[test]
fn the_stats_tables_show_a_hostile_state_value_escaped() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let text = fs::read_to_string(&sb.state).unwrap();
    let head = sb.stats()["wake"]["last_head"]
        .as_str()
        .unwrap()
        .to_string();
    // An edited state: the full parse reads it, the tables print it.
    let edited = text.replacen(&head, "\\u001b[2J\\u202evil\\nx", 1);
    fs::write(&sb.state, edited).unwrap();
    let out = sb.sentinel(["stats", "--state"]).arg(&sb.state).output();
    expect_code(&out, 0);
    no_raw_controls(&out.stdout);
    assert!(
        out.stdout.contains("\\u{1b}[2J\\u{202e}vil\\nx"),
        "{}",
        out.stdout
    );
}
