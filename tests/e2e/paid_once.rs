//! A paid answer is paid once (invariant 16): the binary against a fake
//! OpenAI-compatible server, with a state that cannot be saved, a tick
//! killed between the answer and the save, and a decision journal that
//! cannot be written.
//!
//! A save fails through the file-size limit (`ulimit -f`, with SIGXFSZ
//! ignored, as a full disk fails a write): the state is larger than the
//! limit, the journal's few lines are not, and this works for any user. The
//! kill lands on a tick between two paid calls: the fake provider answers
//! the first and holds the second, so the first answer is journaled and
//! nothing is saved yet.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Output, Sandbox, at, sidecar};

/// High risk (the path says `auth`): always consulted.
const AUTH: &str = "src/auth.js";

/// Larger than the journal of one paid call, smaller than the state.
const FILE_SIZE_LIMIT: u64 = 4096;

/// A repository with `AUTH` and enough docs (local skips) that the state is
/// well over `FILE_SIZE_LIMIT`.
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    for i in 0..30 {
        sb.repo
            .write(&format!("docs/guide-{i:02}.md"), format!("# guide {i}\n"));
    }
    sb.repo.commit("initial files");
    sb
}

fn decisions(sb: &Sandbox) -> PathBuf {
    sidecar(&sb.state, ".decisions")
}

/// `sentinel tick --json` over the whole repository against `ai`, with
/// files limited to `limit` bytes when given.
fn tick(sb: &Sandbox, ai: &FakeOpenAi, minute: i64, limit: Option<u64>, extra: &[&str]) -> Output {
    let script = match limit {
        Some(bytes) => format!(
            "trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"",
            bytes / 512
        ),
        None => "exec \"$0\" \"$@\"".to_string(),
    };
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_sentinel"))
        .args(["tick", "--json", "--fake-sleep", "--now", &at(minute)])
        .args(["--llm-url", &ai.base_url()])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("OPENAI_API_KEY", KEY)
        .current_dir(sb.root())
        .stdin(Stdio::null())
        .output()
        .expect("run sentinel under sh");
    Output::from(out)
}

/// A tick that must exit `code`; its `--json` report.
#[track_caller]
fn report(out: &Output, code: i32) -> Value {
    expect_code(out, code);
    out.json()
}

#[track_caller]
fn entry<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in {report}"))
}

fn notes(report: &Value) -> String {
    report["notes"].to_string()
}

/// Ten ticks whose save fails, each at a new minute.
#[track_caller]
fn ten_failed_saves(sb: &Sandbox, ai: &FakeOpenAi, extra: &[&str]) {
    for t in 0..10 {
        let out = tick(sb, ai, 2 * t, Some(FILE_SIZE_LIMIT), extra);
        expect_code(&out, 1);
        assert!(
            out.stderr.contains("cannot save state file"),
            "tick {t}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains(KEY));
    }
    assert!(!sb.state.exists(), "no save got through the limit");
}

#[test]
fn invariant_16_a_failed_save_never_pays_twice() {
    let sb = sandbox();
    let ai = FakeOpenAi::start();
    ten_failed_saves(&sb, &ai, &[]);
    assert_eq!(ai.posts(), 1, "ten ticks whose save failed, one paid call");
    let journal = fs::read_to_string(decisions(&sb)).unwrap();
    assert!(!journal.contains(KEY), "{journal}");
    assert_eq!(
        journal.matches("\"kind\":\"reserve\"").count(),
        1,
        "{journal}"
    );
    assert_eq!(
        journal.matches("\"kind\":\"answer\"").count(),
        1,
        "{journal}"
    );

    // Once the state can be saved, the answer paid for is the decision.
    let r = report(&tick(&sb, &ai, 20, None, &[]), 10);
    assert_eq!(ai.posts(), 1);
    assert_eq!(r["llm_calls"], 0);
    assert_eq!(entry(&r, AUTH)["outcome"], "llm_skip");
    assert!(notes(&r).contains("taken from the decision journal"), "{r}");
    assert!(
        !decisions(&sb).exists(),
        "folded into the state, then removed"
    );
    let llm = &sb.stats_at(&at(20), 2.0)["llm"];
    assert_eq!(
        (&llm["calls_today"], &llm["attempts"]),
        (&json!(1), &json!(1)),
        "{llm}"
    );
    // And the next tick is a no-op.
    report(&tick(&sb, &ai, 22, None, &[]), 0);
    assert_eq!(ai.posts(), 1);
}

fn evolve_with(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "compare tokens in constant time",
        "findings": [{"line": 1, "severity": "major", "message": "timing leak"}],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

#[test]
fn a_failed_save_never_commits_the_same_patch_twice() {
    let sb = sandbox();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// auth, fixed\nmodule.exports = 2;\n"));
    let patches = ["--propose", "patches"];
    ten_failed_saves(&sb, &ai, &patches);
    let sandbox_commits = || {
        sb.repo
            .git(&["rev-list", "--count", "sentinel-sandbox", "^main"])
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(ai.posts(), 1, "ten ticks whose save failed, one paid call");
    assert_eq!(sandbox_commits(), 1, "and one sandbox commit");

    let r = report(&tick(&sb, &ai, 20, None, &patches), 10);
    assert_eq!((ai.posts(), sandbox_commits()), (1, 1));
    assert_eq!(entry(&r, AUTH)["outcome"], "evolve");
    let tip = sb.repo.git(&["rev-parse", "sentinel-sandbox"]);
    let state: Value = serde_json::from_str(&fs::read_to_string(&sb.state).unwrap()).unwrap();
    assert_eq!(
        state["llm"]["proposals"][AUTH]["patch_commit"],
        tip.as_str()
    );
    assert!(state["llm"]["proposals"][AUTH]["patch_pending"].is_null());
}

/// Wait, without sleeping, until `ready` holds; panics when `child` ends first.
fn until(child: &mut Child, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("sentinel ended before it was killed: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "sentinel never reached its second call"
        );
        std::thread::yield_now();
    }
}

/// A second high-risk file: the call the tick is killed in.
const TOKEN: &str = "src/auth-token.js";

/// The completions whose question is about `path`.
fn asked_about(ai: &FakeOpenAi, path: &str) -> usize {
    ai.requests()
        .iter()
        .filter(|r| r.is_completion() && String::from_utf8_lossy(&r.body).contains(path))
        .count()
}

#[test]
fn a_tick_killed_after_the_answer_and_before_the_save_pays_once() {
    let sb = sandbox();
    sb.repo.write(TOKEN, "// token\nmodule.exports = 3;\n");
    sb.repo.commit("a second high-risk file");
    fs::create_dir_all(sb.state.parent().unwrap()).unwrap();
    let ai = FakeOpenAi::start();
    // The first call is answered; the tick is killed waiting for the second,
    // after the first answer was journaled and before any save.
    ai.hold_after(1);
    let mut child = sb.advisor_tick_cmd(&ai, &at(0)).spawn();
    let journal = decisions(&sb);
    until(&mut child, || {
        ai.posts() == 2
            && fs::read_to_string(&journal).is_ok_and(|j| j.contains("\"kind\":\"answer\""))
    });
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(status.code().is_none(), "killed, not exited: {status}");
    assert!(!sb.state.exists(), "killed before the save");
    ai.release();
    let answered = ai
        .requests()
        .iter()
        .find(|r| r.is_completion())
        .map(|r| String::from_utf8_lossy(&r.body).contains(TOKEN));
    let first = if answered == Some(true) { TOKEN } else { AUTH };

    let r = report(&sb.advisor_tick_cmd(&ai, &at(2)).output(), 10);
    assert_eq!(asked_about(&ai, first), 1, "the answer was paid for once");
    assert_eq!(entry(&r, first)["outcome"], "llm_skip");
}

#[test]
fn no_call_is_made_when_the_decision_journal_cannot_be_written() {
    let sb = sandbox();
    let ai = FakeOpenAi::start();
    // A directory in the way of the journal: nothing can be appended to it.
    fs::create_dir_all(decisions(&sb)).unwrap();
    let r = report(&tick(&sb, &ai, 0, None, &["--all-pending"]), 10);
    assert_eq!(ai.posts(), 0, "no call without the journal");
    let auth = entry(&r, AUTH);
    assert_eq!(auth["outcome"], "pending");
    let named = format!("`{}`", decisions(&sb).display());
    let reason = auth["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot write the decision journal"),
        "{reason}"
    );
    assert!(reason.contains(&named), "{reason}");
    assert!(
        reason.contains("make the state directory writable"),
        "{reason}"
    );
    assert!(notes(&r).contains(&named), "the tick says why: {r}");
    assert_eq!(entry(&r, "docs/guide-00.md")["outcome"], "local_skip");
    assert!(sb.state.exists(), "local decisions are saved");
    assert!(decisions(&sb).is_dir(), "what is in the way is left alone");

    // The journal can be written again: the file waiting in the backlog is asked.
    fs::remove_dir(decisions(&sb)).unwrap();
    let r = report(&tick(&sb, &ai, 2, None, &[]), 14);
    assert_eq!(ai.posts(), 1);
    assert_eq!(entry(&r, AUTH)["outcome"], "llm_skip");
}
