//! Redaction that never corrupts data, and local files that cannot hang,
//! lock out or flood sentinel: a secret is masked in words and refused in
//! content, never edited out of code or a path; a FIFO, a foreign lock, a
//! huge sidecar or a manifest that lies about its size ends a tick with
//! exit 1 naming the file, never a hang or an abort.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Output, Sandbox, WATCHED, at};

/// Human code that a header rule applied to content used to rewrite.
const HUMAN_CODE: &str = "const h = {\n    Authorization: `Bearer ${token}`,\n};\nconst c = \"PRIVATE-TOKEN: $GITLAB_TOKEN\";\nAuthorization: `Bearer ${token}`\n";

fn evolve_with(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "add a comment",
        "findings": [],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

fn patch_tick(sb: &Sandbox, ai: &FakeOpenAi, minute: i64, key: &str) -> Output {
    sb.tick_cmd(&at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches"])
        .env("OPENAI_API_KEY", key)
        .output()
}

#[test]
fn the_patch_keeps_an_authorization_template_line_byte_for_byte() {
    let sb = Sandbox::new();
    let file = format!("{WATCHED}/client.js");
    sb.repo.write(&file, HUMAN_CODE);
    sb.repo.commit("client");
    let ai = FakeOpenAi::start();
    let proposed = format!("{HUMAN_CODE}// reviewed\n");
    ai.answer_always(evolve_with(&proposed));
    let out = patch_tick(&sb, &ai, 0, KEY);
    expect_code(&out, 10);
    let committed = sb
        .repo
        .git(&["cat-file", "blob", &format!("sentinel-sandbox:{file}")]);
    assert_eq!(format!("{committed}\n"), proposed);
}

#[test]
fn a_content_carrying_a_secret_is_refused_with_a_note_not_altered() {
    let sb = Sandbox::with_files(&["a.js"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with(&format!("// a\nconst key = '{KEY}';\n")));
    let out = patch_tick(&sb, &ai, 0, KEY);
    expect_code(&out, 10);
    let r = out.json();
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("carries the value of a secret sentinel holds"),
        "{notes}"
    );
    assert!(!out.stdout.contains(KEY), "{}", out.stdout);
    let branch = sb.repo.git(&["branch", "--list", "sentinel-sandbox"]);
    assert_eq!(branch, "", "nothing was committed");
    for f in [
        sb.state.clone(),
        crate::util::sidecar(&sb.state, ".decisions"),
    ] {
        if let Ok(text) = fs::read_to_string(&f) {
            assert!(!text.contains(KEY), "{}: {text}", f.display());
        }
    }
}

#[test]
fn explain_finds_a_path_spelled_like_a_placeholder_key() {
    let sb = Sandbox::new();
    let file = format!("{WATCHED}/lm-studio/client.js");
    sb.repo.write(&file, "// client\nmodule.exports = 1;\n");
    sb.repo.commit("client");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::skip("fine as it is"));
    let tick = |minute: i64| {
        sb.tick_cmd(&at(minute))
            .args(["--fake-sleep", "--llm-url", &ai.base_url()])
            .env("OPENAI_API_KEY", "lm-studio")
            .output()
    };
    let first = tick(0);
    expect_code(&first, 10);
    assert!(first.stdout.contains(&file), "{}", first.stdout);
    let explained = sb
        .sentinel(["explain", &file, "--json", "--path", WATCHED])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", "lm-studio")
        .output();
    expect_code(&explained, 0);
    let e = explained.json();
    assert_eq!(e["path"], file.as_str(), "{e}");
    assert_eq!(e["last_decision"]["outcome"], "llm_skip", "{e}");
    assert!(e["remembered_fingerprint"].is_string(), "{e}");
}
