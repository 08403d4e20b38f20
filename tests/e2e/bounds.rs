//! Hostile peers that lie about sizes or answer without measure: sizes are
//! counted, never taken from a header; reads stop at their limit and say
//! so; findings, reports and the dashboard stay within their bounds; and
//! patches keep a file's mode, refuse links and names that are not UTF-8,
//! and bound the commit message.

use std::fs;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::gitlab::{Api, Endpoint, Reply};
use crate::util::openai::{self, FakeOpenAi};
use crate::util::{Output, Sandbox, WATCHED, at, notes};

/// The state file as JSON.
fn state_of(sb: &Sandbox) -> Value {
    // The records live in the shards the manifest names.
    crate::util::layout::state_doc(&sb.state)
}

#[test]
fn a_blob_read_announcing_2_gb_with_18_bytes_records_18_bytes() {
    let sb = Sandbox::new();
    let rel = format!("{WATCHED}/a.js");
    let content = b"module.exports=1;\n";
    assert_eq!(content.len(), 18);
    sb.repo.write(&rel, content);
    sb.repo.commit("one small file");
    let gl = sb.gitlab();
    // The whole file, under a length that claims 2 GB; then the connection
    // closes. The bytes hash to the content id asked for: they are the file.
    gl.push(
        Endpoint::BlobRaw,
        Reply::Truncated {
            status: 200,
            declared: 2_147_483_648,
            body: content.to_vec(),
        },
    );
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(0)).output();
    expect_code(&out, 10);
    let report = out.json();
    let file = &state_of(&sb)["files"][&rel];
    assert_eq!(file["content"]["chars"], 18, "{file}");
    let judged = &report["files"][0];
    assert_ne!(judged["outcome"], "too_large", "{report}");

    // A reuse counts the tokens of 18 bytes, not of 2 GB.
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(2)).output();
    let saved = state_of(&sb)["files"][&rel]["tokens_saved"].as_u64();
    assert!(saved.unwrap_or(0) < 1_000, "{saved:?}; {}", out.stdout);
}

#[test]
fn a_blob_read_stops_at_the_limit_and_says_so() {
    let sb = Sandbox::new();
    let rel = format!("{WATCHED}/big.js");
    sb.repo.write(&rel, "// x\n".repeat(20_000));
    sb.repo.commit("one 100 kB file");
    let gl = sb.gitlab();
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(0)).output();
    expect_code(&out, 10);
    let report = out.json();
    assert!(
        notes(&report).contains(&format!(
            "`{rel}`: the read stopped at the limit of 65536 bytes (--max-file-bytes)"
        )),
        "{report}"
    );
    let file = &state_of(&sb)["files"][&rel];
    assert_eq!(file["content"]["chars"], 65_537, "the most counted: {file}");
}

/// An advisor tick watching the whole repository, writing the Code Quality
/// report and the dashboard file next to the state.
fn reporting_tick(sb: &Sandbox, ai: &FakeOpenAi, now: &str) -> Output {
    let dir = sb.state.parent().unwrap();
    sb.advisor_tick_cmd(ai, now)
        .args(["--batch", "0", "--daily-budget", "1000"])
        .arg("--codequality")
        .arg(dir.join("gl-code-quality.json"))
        .arg("--dashboard-file")
        .arg(dir.join("dashboard.md"))
        .output()
}

fn report_file(sb: &Sandbox, name: &str) -> Vec<u8> {
    fs::read(sb.state.parent().unwrap().join(name)).expect("the report was written")
}

#[test]
fn sixty_thousand_findings_at_line_u64_max_are_bounded_in_the_state_and_the_reports() {
    let sb = Sandbox::new();
    let path = "src/auth.js";
    sb.repo.write(path, "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("a 2-line file");
    let ai = FakeOpenAi::start();
    // Lines past the end, 0, and in the file; the first message is 200 kB.
    let findings: Vec<Value> = (0..60_000u64)
        .map(|i| {
            let line = [u64::MAX, 0, 2][(i % 3) as usize];
            let message = if i == 0 {
                "m".repeat(200_000)
            } else {
                "m".into()
            };
            json!({"line": line, "severity": "info", "message": message})
        })
        .collect();
    ai.answer_always(openai::Reply::evolve("too much", Value::from(findings)));
    let out = reporting_tick(&sb, &ai, &at(600));
    expect_code(&out, 10);
    assert_eq!(ai.posts(), 1);
    let report = out.json();
    assert!(
        notes(&report)
            .contains("`src/auth.js`: the model sent 60000 findings; the first 50 are kept"),
        "{}",
        notes(&report)
    );

    let state = fs::read(&sb.state).unwrap();
    let sizes = ["gl-code-quality.json", "dashboard.md"].map(|f| report_file(&sb, f).len());
    eprintln!(
        "60,000 findings: state {} bytes, Code Quality {} bytes, dashboard {} bytes",
        state.len(),
        sizes[0],
        sizes[1]
    );
    assert!(state.len() < 200_000, "the state is {} bytes", state.len());
    let kept = state_of(&sb)["llm"]["proposals"][path]["findings"].clone();
    let kept = kept.as_array().expect("the proposal's findings");
    assert_eq!(kept.len(), 50);
    assert!(
        kept.iter()
            .all(|f| matches!(f["line"].as_u64(), Some(1 | 2))),
        "{kept:?}"
    );
    let first = kept[0]["message"].as_str().unwrap();
    assert_eq!(first.chars().count(), 1_000);
    assert!(first.ends_with('…'), "cut with an ellipsis");

    let quality: Value = serde_json::from_slice(&report_file(&sb, "gl-code-quality.json")).unwrap();
    let issues = quality.as_array().unwrap();
    assert_eq!(issues.len(), 50);
    for issue in issues {
        let line = issue["location"]["lines"]["begin"].as_u64().unwrap();
        assert!((1..=2).contains(&line), "line {line} is not in the file");
    }
    let page = String::from_utf8(report_file(&sb, "dashboard.md")).unwrap();
    assert!(
        page.len() < 100_000,
        "the dashboard is {} bytes",
        page.len()
    );
    assert!(!page.contains("18446744073709551615"), "{}", &page[..2_000]);
}

#[test]
fn eighty_files_of_50_long_findings_keep_both_reports_under_their_bounds_and_say_what_was_left_out()
{
    let sb = Sandbox::new();
    for i in 0..80 {
        sb.repo.write(
            &format!("src/f{i:02}.js"),
            format!("// {i}\nmodule.exports = {i};\n"),
        );
    }
    sb.repo.commit("80 files");
    let ai = FakeOpenAi::start();
    let findings: Vec<Value> = (0..50)
        .map(|i| json!({"line": 1 + i % 2, "severity": "major", "message": format!("{i} {}", "x".repeat(1_100))}))
        .collect();
    ai.answer_always(openai::Reply::evolve(
        "long findings",
        Value::from(findings),
    ));
    let out = reporting_tick(&sb, &ai, &at(600));
    expect_code(&out, 10);
    assert_eq!(ai.posts(), 80);

    let quality = report_file(&sb, "gl-code-quality.json");
    eprintln!(
        "80 files of 50 findings: Code Quality {} bytes, dashboard {} bytes",
        quality.len(),
        report_file(&sb, "dashboard.md").len()
    );
    assert!(
        quality.len() <= 4 << 20,
        "the report is {} bytes",
        quality.len()
    );
    let issues: Value = serde_json::from_slice(&quality).unwrap();
    let last = issues.as_array().unwrap().last().unwrap();
    assert_eq!(last["check_name"], "sentinel/left-out", "{last}");
    let said = last["description"].as_str().unwrap();
    let left_out: usize = said
        .strip_prefix("sentinel: ")
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(
        issues.as_array().unwrap().len() - 1 + left_out,
        80 * 50,
        "{said}"
    );

    let page = String::from_utf8(report_file(&sb, "dashboard.md")).unwrap();
    assert!(
        page.len() <= 1_000_000,
        "the dashboard is {} bytes",
        page.len()
    );
    let rows = page.lines().filter(|l| l.starts_with("| `src/f")).count();
    let tail = page.lines().last().unwrap();
    assert!(
        tail.starts_with(&format!(
            "{} finding(s) of {} more file(s) are left out",
            (80 - rows) * 50,
            80 - rows
        )),
        "{rows} rows, then: {tail}"
    );
}

#[test]
fn a_failed_dashboard_after_a_good_save_says_the_state_was_saved_and_which_write_failed() {
    // The dashboard file, in a directory that does not exist.
    let sb = Sandbox::with_files(&["a.js"]);
    let page = sb.root().join("no-such-dir").join("dashboard.md");
    let out = sb
        .tick_cmd(&at(0))
        .arg("--dashboard-file")
        .arg(&page)
        .output();
    expect_code(&out, 10);
    let saved = format!(
        "the state `{}` was saved; only the dashboard failed: ",
        sb.state.display()
    );
    assert!(out.stderr.contains(&saved), "{}", out.stderr);
    assert!(
        out.stderr.contains("the dashboard file was not written"),
        "{}",
        out.stderr
    );
    assert!(sb.state.is_file());

    // The dashboard issue, refused by GitLab with a 500.
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    gl.push(Endpoint::Issues, Reply::error(500, "500.json"));
    let out = sb
        .api_tick_cmd(&Api::new(&gl), &at(0))
        .arg("--dashboard")
        .output();
    expect_code(&out, 10);
    let saved = format!(
        "the state `{}` was saved; only the dashboard failed: ",
        sb.state.display()
    );
    assert!(out.stderr.contains(&saved), "{}", out.stderr);
    assert!(out.stderr.contains("500"), "{}", out.stderr);
    let writes = out.json()["writes"].clone();
    assert!(
        writes
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["kind"] == "dashboard" && w["ok"] == false),
        "{writes}"
    );
}

/// A patching tick: the model's answer holds `content` for the file, with
/// `reason`.
fn patching_tick(sb: &Sandbox, reason: &str, content: &str) -> Output {
    let ai = FakeOpenAi::start();
    let answer = json!({
        "action": "EVOLVE",
        "reason": reason,
        "findings": [{"line": 1, "severity": "major", "message": "timing leak"}],
        "content": content,
    });
    ai.answer_always(openai::Reply::json(
        200,
        &openai::completion(&answer.to_string(), None),
    ));
    sb.tick_cmd(&at(0))
        .args([
            "--fake-sleep",
            "--llm-url",
            &ai.base_url(),
            "--propose",
            "patches",
        ])
        .env("OPENAI_API_KEY", openai::KEY)
        .output()
}

/// The `kind: patch` write of a report.
fn patch_write(report: &Value) -> Value {
    report["writes"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["kind"] == "patch"))
        .cloned()
        .unwrap_or_else(|| panic!("no patch write in {report}"))
}

#[test]
fn an_executable_file_keeps_mode_100755_on_the_sandbox_branch() {
    use std::os::unix::fs::PermissionsExt;
    let sb = Sandbox::new();
    let rel = format!("{WATCHED}/deploy.js");
    sb.repo
        .write(&rel, "#!/usr/bin/env node\nmodule.exports = 1;\n");
    fs::set_permissions(sb.repo.root.join(&rel), fs::Permissions::from_mode(0o755)).unwrap();
    sb.repo.commit("an executable script");
    assert!(
        sb.repo
            .git(&["ls-tree", "HEAD", "--", &rel])
            .starts_with("100755 ")
    );
    let out = patching_tick(
        &sb,
        "check the token",
        "#!/usr/bin/env node\nmodule.exports = 2;\n",
    );
    expect_code(&out, 10);
    assert_eq!(patch_write(&out.json())["ok"], true, "{}", out.stdout);
    let entry = sb.repo.git(&["ls-tree", "sentinel-sandbox", "--", &rel]);
    assert!(entry.starts_with("100755 blob "), "{entry}");
}

#[test]
fn a_link_on_the_sandbox_branch_is_never_patched() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let rel = format!("{WATCHED}/auth.js");
    // Whoever can push makes the file a link on the sandbox branch.
    sb.repo.git(&["checkout", "-q", "-b", "sentinel-sandbox"]);
    sb.repo.remove(&rel);
    std::os::unix::fs::symlink("/etc/passwd", sb.repo.root.join(&rel)).unwrap();
    sb.repo.commit("a link in place of the file");
    sb.repo.git(&["checkout", "-q", "main"]);
    let link = sb.repo.git(&["rev-parse", "sentinel-sandbox"]);
    let out = patching_tick(&sb, "check the token", "// fixed\n");
    expect_code(&out, 10);
    let report = out.json();
    // The commit sentinel did not make is named and never built upon: the
    // sandbox is rebuilt without it, and the file patched as the regular
    // file the watched branch holds.
    let said = notes(&report);
    assert!(said.contains("did not make"), "{report}");
    assert!(said.contains("a link in place of the file"), "{report}");
    let carried = std::process::Command::new("git")
        .args(["merge-base", "--is-ancestor", &link, "sentinel-sandbox"])
        .current_dir(&sb.repo.root)
        .status()
        .unwrap();
    assert!(!carried.success(), "the link's commit is not built upon");
    assert_eq!(patch_write(&report)["ok"], true, "{report}");
    let entry = sb.repo.git(&["ls-tree", "sentinel-sandbox", "--", &rel]);
    assert!(entry.starts_with("100644 "), "{entry}");
}

#[test]
fn a_name_that_is_not_utf8_is_never_patched_at_a_mangled_name() {
    use std::os::unix::ffi::OsStrExt;
    let sb = Sandbox::new();
    let dir = sb.repo.root.join(WATCHED);
    fs::create_dir_all(&dir).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xff.js");
    fs::write(dir.join(name), "// cafe\nmodule.exports = 1;\n").unwrap();
    sb.repo.commit("a name in Latin-1");
    let out = patching_tick(&sb, "check the token", "// fixed\n");
    expect_code(&out, 10);
    let report = out.json();
    let write = patch_write(&report);
    assert_eq!(write["ok"], false, "{write}");
    assert!(
        write["detail"]
            .as_str()
            .unwrap()
            .contains("not valid UTF-8"),
        "{write}"
    );
    assert!(notes(&report).contains("not valid UTF-8"), "{report}");
    let sandbox = sb
        .repo
        .git(&["for-each-ref", "refs/heads/sentinel-sandbox"]);
    if !sandbox.is_empty() {
        // `-z` would show raw bytes; quoted names show U+FFFD as \357\277\275.
        let names = sb
            .repo
            .git(&["ls-tree", "-r", "--name-only", "sentinel-sandbox"]);
        assert!(!names.contains("\\357\\277\\275"), "{names}");
    }
}

#[test]
fn a_200_kb_reason_is_committed_with_a_bounded_message_that_keeps_its_subject() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let reason = format!("compare in constant time {}", "r".repeat(200_000));
    let out = patching_tick(&sb, &reason, "// fixed\n");
    expect_code(&out, 10);
    let write = patch_write(&out.json());
    assert_eq!(write["ok"], true, "{write}");
    let message = sb
        .repo
        .git(&["log", "-1", "--format=%B", "sentinel-sandbox"]);
    assert!(
        message.starts_with(&format!(
            "sentinel: proposed change to {WATCHED}/auth.js\n\ncompare in constant time r"
        )),
        "{}",
        &message[..200.min(message.len())]
    );
    assert!(message.len() < 10_000, "{} bytes", message.len());
}
