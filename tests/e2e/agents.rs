//! Any agent behind sentinel's gates: a real shell script as `--agent`,
//! a real git repository, and the agent protocol of docs/agents.md checked from both
//! ends (what the agent received, what sentinel made of its answer).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at};

const FILES: [&str; 3] = ["a.js", "b.js", "c.js"];

/// An executable script in the sandbox; returns its path.
fn script(sb: &Sandbox, name: &str, body: &str) -> PathBuf {
    let path = sb.root().join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// An agent that logs each run, keeps its last stdin and environment, and
/// answers with `answer` (shell-quoted JSON) and exit code `code`.
fn agent(sb: &Sandbox, answer: &str, code: i32) -> String {
    let log = sb.root().join("runs.log");
    let input = sb.root().join("last-input.json");
    let env = sb.root().join("last-env.txt");
    let path = script(
        sb,
        "agent.sh",
        &format!(
            "echo \"$SENTINEL_FILE\" >> '{}'\ncat > '{}'\nenv > '{}'\nprintf '%s' '{answer}'\nexit {code}\n",
            log.display(),
            input.display(),
            env.display()
        ),
    );
    path.display().to_string()
}

fn runs(sb: &Sandbox) -> Vec<String> {
    fs::read_to_string(sb.root().join("runs.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[track_caller]
fn tick(sb: &Sandbox, minute: i64, cmd: &str, extra: &[&str], code: i32) -> Value {
    let out = sb
        .tick_cmd(&at(minute))
        .args(["--agent", cmd])
        .args(extra)
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
        .output();
    expect_code(&out, code);
    out.json()
}

const SKIP: &str = r#"{"action":"SKIP","reason":"fine as it is","findings":[],"cost_usd":0.25}"#;

#[test]
fn an_agent_is_asked_once_per_new_question_behind_every_gate() {
    let sb = Sandbox::with_files(&FILES);
    let cmd = agent(&sb, SKIP, 0);
    let r = tick(&sb, 0, &cmd, &[], 10);
    assert_eq!(runs(&sb).len(), 3);
    assert_eq!(r["counts"], json!({"llm_skip": 3}));
    assert_eq!(r["advisor"], "on");
    // Unchanged: a no-op, and no run.
    tick(&sb, 2, &cmd, &[], 0);
    assert_eq!(runs(&sb).len(), 3);
    // One human change: one run, for that file.
    sb.repo.write(&format!("{WATCHED}/b.js"), "// b, edited\n");
    sb.repo.commit("edit b");
    let r = tick(&sb, 4, &cmd, &[], 12);
    assert_eq!(runs(&sb)[3..], [format!("{WATCHED}/b.js")]);
    assert_eq!(r["counts"]["llm_skip"], 1);
    // The batch bounds agent runs like model calls.
    let sb = Sandbox::with_files(&FILES);
    let cmd = agent(&sb, SKIP, 0);
    let r = tick(&sb, 0, &cmd, &["--batch", "2"], 10);
    assert_eq!((runs(&sb).len(), r["pending"].clone()), (2, json!(1)));
}

#[test]
fn the_agent_gets_the_documented_stdin_and_environment_without_secrets() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, SKIP, 0);
    let r = tick(&sb, 0, &cmd, &[], 10);
    let input: Value =
        serde_json::from_str(&fs::read_to_string(sb.root().join("last-input.json")).unwrap())
            .unwrap();
    let mut keys: Vec<&str> = input
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "budget_left_usd",
            "content",
            "fingerprint",
            "head",
            "path",
            "previous",
            "trigger",
            "wake_reason"
        ]
    );
    assert_eq!(input["path"], format!("{WATCHED}/a.js"));
    assert_eq!(
        input["content"],
        fs::read_to_string(sb.repo.root.join(WATCHED).join("a.js")).unwrap()
    );
    assert_eq!(input["wake_reason"], "first_run");
    assert_eq!(input["head"], sb.repo.head().as_str());
    assert_eq!(input["previous"], Value::Null);
    assert_eq!(input["fingerprint"], r["files"][0]["fingerprint"]);
    assert_eq!(input["budget_left_usd"], 2.0);
    let env = fs::read_to_string(sb.root().join("last-env.txt")).unwrap();
    assert!(
        env.contains(&format!("SENTINEL_FILE={WATCHED}/a.js\n")),
        "{env}"
    );
    assert!(env.contains("SENTINEL_WAKE_REASON=first_run\n"), "{env}");
    assert!(
        env.contains(&format!("SENTINEL_HEAD={}\n", sb.repo.head())),
        "{env}"
    );
    assert!(env.contains("SENTINEL_WORKTREE="), "{env}");
    assert!(!env.contains("sk-must-not-reach-the-agent"), "{env}");

    // Named on purpose, a secret is passed on.
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, SKIP, 0);
    tick(&sb, 0, &cmd, &["--agent-env", "OPENAI_API_KEY"], 10);
    let env = fs::read_to_string(sb.root().join("last-env.txt")).unwrap();
    assert!(env.contains("OPENAI_API_KEY=sk-must-not-reach-the-agent\n"));
}

#[test]
fn the_agents_cost_is_measured_cost() {
    let sb = Sandbox::with_files(&FILES);
    let cmd = agent(&sb, SKIP, 0);
    tick(&sb, 0, &cmd, &[], 10);
    let llm = &sb.stats()["llm"];
    assert_eq!(llm["lifetime_cost_estimated"], 0.0, "{llm}");
    let measured = llm["lifetime_cost_measured"].as_f64().unwrap();
    assert!((measured - 0.75).abs() < 1e-9, "{llm}");
}

#[test]
fn an_agent_exiting_75_is_a_server_error_tried_three_times() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, "", 75);
    let r = tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
    assert_eq!(runs(&sb).len(), 3);
    assert_eq!(r["llm_calls"], 3);
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "failed");
    assert!(
        f["reason"]
            .as_str()
            .unwrap()
            .starts_with("server after 3 attempts: the agent exited with 75"),
        "{f}"
    );
}

#[test]
fn an_agent_out_of_quota_is_asked_once_and_held_until_midnight_utc() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let body = r#"{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"out of credit"}}"#;
    let cmd = agent(&sb, body, 1);
    let r = tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
    assert_eq!(runs(&sb).len(), 1, "the second file is held without a run");
    assert_eq!(r["counts"], json!({"failed": 1, "held": 1}));
    let held = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["outcome"] == "held")
        .unwrap();
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .starts_with("provider held until 2026-06-17T00:00:00+00:00 (quota)"),
        "{held}"
    );
}

#[test]
fn garbage_from_an_agent_is_a_bad_response_tried_twice() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, "I looked at it and it seems fine!", 0);
    let r = tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
    assert_eq!(runs(&sb).len(), 2);
    assert_eq!(r["files"][0]["outcome"], "bad_response");
}

#[test]
fn a_hanging_agent_is_killed_with_everything_it_started() {
    let sb = Sandbox::with_files(&["a.js"]);
    let pids = sb.root().join("pids");
    let cmd = script(
        &sb,
        "hang.sh",
        &format!("sleep 300 &\necho $! >> '{}'\nsleep 300\n", pids.display()),
    );
    let r = tick(
        &sb,
        0,
        &cmd.display().to_string(),
        &["--agent-timeout", "0.3", "--fake-sleep"],
        10,
    );
    let f = &r["files"][0];
    assert_eq!(f["outcome"], "failed");
    assert!(
        f["reason"]
            .as_str()
            .unwrap()
            .starts_with("timeout after 2 attempts"),
        "{f}"
    );
    // Every background child of every attempt is gone.
    let started = fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 2);
    for pid in started.lines() {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "process {pid} outlived its agent"
        );
    }
}

#[test]
fn a_missing_agent_command_is_a_clear_exit_1_and_saves_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", "no-such-agent-command --flag"])
        .output();
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.starts_with(
            "error: the agent command `no-such-agent-command --flag` could not be run ("
        ) && out.stderr.contains("SENTINEL_AGENT"),
        "{}",
        out.stderr
    );
    assert!(!sb.state.exists());
}

#[test]
fn invariant_18_an_agent_that_commits_never_wakes_sentinel_with_its_own_commits() {
    const RISKY: [&str; 5] = ["a.js", "b.js", "c.js", "d.js", "e.js"];
    let sb = Sandbox::with_files(&RISKY);
    let log = sb.root().join("runs.log");
    let cmd = script(
        &sb,
        "committer.sh",
        &format!(
            "echo \"$SENTINEL_FILE\" >> '{}'\n\
             cat > /dev/null\n\
             printf '// touched by the agent\\n' >> \"$SENTINEL_FILE\"\n\
             git -c user.name=agent -c user.email=agent@example.invalid commit -qam \"agent: $SENTINEL_FILE\"\n\
             printf '%s' '{{\"action\":\"EVOLVE\",\"reason\":\"appended a line\",\"findings\":[]}}'\n",
            log.display()
        ),
    )
    .display()
    .to_string();
    let mut codes = Vec::new();
    for t in 0..24 {
        if t == 12 {
            sb.repo
                .write(&format!("{WATCHED}/c.js"), "// c.js, by a person\n");
            sb.repo.commit("a person edits c");
        }
        let out = sb.tick_cmd(&at(2 * t)).args(["--agent", &cmd]).output();
        codes.push(out.code);
        assert!([0, 10, 12].contains(&out.code), "tick {t}: {}", out.stderr);
    }
    assert_eq!(runs(&sb).len(), 6, "{:?}", runs(&sb));
    let woke: Vec<usize> = (0..24).filter(|t| codes[*t] != 0).collect();
    assert_eq!(woke, [0, 12], "{codes:?}");
    // The watched branch holds the person's commits only.
    let subjects = sb.repo.git(&["log", "--format=%s", "HEAD"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        ["a person edits c", "initial files"]
    );
    // The agent's work is on the sandbox branch, rebuilt on the person's
    // commit: one commit per open proposal, the superseded one of c.js gone.
    let sandbox = sb
        .repo
        .git(&["log", "--format=%s", "refs/heads/sentinel-sandbox"]);
    let agent_commits = sandbox
        .lines()
        .filter(|s| s.starts_with("sentinel: proposed change to"))
        .count();
    assert_eq!(agent_commits, 5, "{sandbox}");
    let c = sb.repo.git(&[
        "show",
        &format!("refs/heads/sentinel-sandbox:{WATCHED}/c.js"),
    ]);
    assert!(
        c.starts_with("// c.js, by a person") && c.ends_with("// touched by the agent"),
        "{c}"
    );
}

/// `sentinel record PATH --decision D` for the sandbox's clone and state.
#[track_caller]
fn record(sb: &Sandbox, minute: i64, path: &str, decision: &str, code: i32) -> crate::util::Output {
    let out = sb
        .sentinel([
            "record",
            path,
            "--decision",
            decision,
            "--now",
            &at(minute),
            "--path",
            WATCHED,
        ])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, code);
    out
}

/// The files a `tick --llm off --json` hands over.
fn handed_over(r: &Value) -> Vec<String> {
    r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] == "needs_review")
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

/// What an outer-loop agent does with a file: append a line, commit it on
/// the watched branch, and tell sentinel.
fn outer_agent_works_on(sb: &Sandbox, minute: i64, path: &str) {
    let full = sb.repo.root.join(path);
    let mut text = fs::read_to_string(&full).unwrap();
    text.push_str("// touched by the agent\n");
    fs::write(&full, text).unwrap();
    sb.repo.commit(&format!("agent: {path}"));
    record(sb, minute, path, "evolved", 0);
}

#[test]
fn an_outer_loop_agent_that_records_its_work_is_handed_each_file_once_per_human_change() {
    let sb = Sandbox::with_files(&["a.js", "b.js", "c.js", "d.js", "e.js"]);
    let mut hand_overs = 0;
    for round in 0..10 {
        let minute = 10 * round;
        if round == 5 {
            sb.repo
                .write(&format!("{WATCHED}/c.js"), "// c.js, by a person\n");
            sb.repo.commit("a person edits c");
        }
        let out = sb.tick_cmd(&at(minute)).args(["--llm", "off"]).output();
        assert!(
            [0, 10, 12].contains(&out.code),
            "round {round}: {}",
            out.stderr
        );
        let files = handed_over(&out.json());
        hand_overs += files.len();
        for f in files {
            outer_agent_works_on(&sb, minute + 1, &f);
        }
    }
    assert_eq!(hand_overs, 6);
}

#[test]
fn a_formatter_that_undoes_the_agent_makes_the_file_stuck_after_three_hand_overs() {
    let sb = Sandbox::with_files(&["a.js"]);
    let file = format!("{WATCHED}/a.js");
    let mut hand_overs = 0;
    let mut last = Value::Null;
    for round in 0..8 {
        let minute = 10 * round;
        let out = sb.tick_cmd(&at(minute)).args(["--llm", "off"]).output();
        assert!(
            [0, 10, 12].contains(&out.code),
            "round {round}: {}",
            out.stderr
        );
        let r = out.json();
        if r["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["outcome"] == "stuck")
        {
            last = r.clone();
        }
        let files = handed_over(&r);
        hand_overs += files.len();
        for f in &files {
            outer_agent_works_on(&sb, minute + 1, f);
        }
        // A formatter rewrites what the agent wrote, every round.
        let full = sb.repo.root.join(&file);
        let before = fs::read_to_string(&full).unwrap();
        let after = before.replace("// touched", "//  touched");
        if after != before {
            fs::write(&full, after).unwrap();
            sb.repo.commit("formatter");
        }
    }
    assert_eq!(hand_overs, 3);
    let stuck = last["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == file.as_str())
        .unwrap();
    assert_eq!(stuck["outcome"], "stuck", "{last}");
    assert!(
        stuck["reason"].as_str().unwrap().contains("sentinel reset"),
        "{stuck}"
    );

    // Stuck shows in stats (JSON and Prometheus) and in the Code Quality report.
    assert_eq!(
        sb.stats()["llm"]["stuck"],
        serde_json::json!([file.clone()])
    );
    let prom = sb
        .sentinel(["stats", "--format", "prometheus"])
        .arg("--state")
        .arg(&sb.state)
        .output();
    assert!(
        prom.stdout.contains("sentinel_stuck_files 1"),
        "{}",
        prom.stdout
    );
    let report = sb.root().join("gl-code-quality.json");
    sb.repo.write(&format!("{WATCHED}/z.md"), "# z\n");
    sb.repo.commit("a doc");
    let out = sb
        .tick_cmd(&at(90))
        .args(["--llm", "off", "--codequality"])
        .arg(&report)
        .output();
    expect_code(&out, 12);
    let cq = fs::read_to_string(&report).unwrap();
    assert!(cq.contains("sentinel/stuck") && cq.contains(&file), "{cq}");

    // A person resets it: the next wake hands it over again.
    let out = sb
        .sentinel(["reset", &file, "--now", &at(100)])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 0);
    assert!(out.stdout.contains("no longer stuck"), "{}", out.stdout);
    sb.repo.write(&file, "// a.js, rewritten by a person\n");
    sb.repo.commit("a person");
    let r = sb.tick_cmd(&at(110)).args(["--llm", "off"]).output().json();
    assert_eq!(handed_over(&r), vec![file.clone()]);
}

#[test]
fn record_skip_is_reused_and_a_file_the_state_does_not_know_is_refused() {
    let sb = Sandbox::with_files(&["a.js"]);
    let file = format!("{WATCHED}/a.js");
    let out = sb.tick_cmd(&at(0)).args(["--llm", "off"]).output();
    assert_eq!(handed_over(&out.json()), vec![file.clone()]);
    let out = record(&sb, 1, &file, "skip", 0);
    assert!(
        out.stdout.starts_with(&format!("recorded `{file}`: skip")),
        "{}",
        out.stdout
    );
    let out = record(&sb, 2, "libs/shared/nosuch.js", "skip", 1);
    assert!(out.stderr.contains("is not in the state"), "{}", out.stderr);
    // A wake for another reason reuses the recorded skip.
    sb.repo.write(&format!("{WATCHED}/b.md"), "# b\n");
    sb.repo.commit("a doc");
    let r = sb.tick_cmd(&at(4)).args(["--llm", "off"]).output().json();
    assert!(handed_over(&r).is_empty(), "{r}");
    let a = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == file.as_str());
    assert!(a.is_none_or(|f| f["outcome"] == "reused"), "{r}");
}

#[test]
fn record_under_a_running_tick_is_busy_and_records_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    let file = format!("{WATCHED}/a.js");
    sb.tick_cmd(&at(0)).args(["--llm", "off"]).output();
    let before = fs::read(&sb.state).unwrap();
    let _lock = crate::util::hold_lock(&sb.state);
    let out = record(&sb, 1, &file, "skip", 20);
    assert!(
        out.stderr.contains("nothing was recorded"),
        "{}",
        out.stderr
    );
    assert_eq!(fs::read(&sb.state).unwrap(), before);
}

#[test]
fn a_planted_link_at_the_worktrees_gitignore_is_never_written_through() {
    let sb = Sandbox::with_files(&["a.js"]);
    let dot = sb.repo.root.join(".sentinel");
    fs::create_dir_all(&dot).unwrap();
    let target = sb.root().join("outside.txt");
    std::os::unix::fs::symlink(&target, dot.join(".gitignore")).unwrap();
    let cmd = agent(&sb, SKIP, 0);
    tick(&sb, 0, &cmd, &[], 10);
    assert_eq!(runs(&sb).len(), 1);
    assert!(!target.exists(), "sentinel wrote through the planted link");
}

/// An agent that answers EVOLVE but whose tool was refused the write: it
/// says so in its answer's `error` (Claude Code's `permission_denials`) or
/// on stderr (`EACCES` when it runs as another user), and leaves the file.
fn refused_agent(sb: &Sandbox, error: &str, stderr: &str) -> String {
    let log = sb.root().join("runs.log");
    script(
        sb,
        "refused.sh",
        &format!(
            "echo \"$SENTINEL_FILE\" >> '{}'\ncat > /dev/null\necho '{stderr}' >&2\n\
             printf '%s' '{{\"action\":\"EVOLVE\",\"reason\":\"the export has no name\",\"findings\":[]{error}}}'\n",
            log.display()
        ),
    )
    .display()
    .to_string()
}

#[test]
fn invariant_25_an_evolve_that_changed_nothing_is_a_failure_that_names_the_refusal() {
    let cases = [
        (
            r#","error":{"type":"permission_denied","message":"claude refused 1 tool call (permission_denials): Edit"}"#,
            "",
            "(a permission denial)",
            "permission_denials",
        ),
        (
            "",
            "sed: cannot open temporary file ./sedAbc: Permission denied (EACCES)",
            "(EACCES)",
            "sedAbc",
        ),
    ];
    for (error, stderr, kind, quoted) in cases {
        let sb = Sandbox::with_files(&["a.js", "b.js"]);
        let cmd = refused_agent(&sb, error, stderr);
        let r = tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
        let failed: Vec<&Value> = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["outcome"] == "failed")
            .collect();
        assert_eq!(failed.len(), 1, "{r}");
        let reason = failed[0]["reason"].as_str().unwrap();
        assert!(
            reason.contains(&format!("EVOLVE without an edit {kind}")) && reason.contains(quoted),
            "{reason}"
        );
        assert!(r["counts"].get("evolve").is_none(), "{r}");
        // No proposal is open and nothing reached the sandbox branch.
        assert_eq!(sb.stats()["llm"]["open_proposals"], json!([]));
        let sandbox = sb.repo.git(&["branch", "--list", "sentinel-sandbox"]);
        assert_eq!(sandbox.trim(), "", "{sandbox}");
        // Retried once its wait has passed, although nothing changed; a
        // second refusal is a configuration error that names the fix.
        let runs_before = runs(&sb).len();
        let out = sb
            .tick_cmd(&at(24 * 60))
            .args(["--agent", &cmd, "--fake-sleep"])
            .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
            .output();
        expect_code(&out, 1);
        assert_eq!(runs(&sb).len(), runs_before + 1, "{:?}", runs(&sb));
        assert!(
            out.stderr.contains("let the agent write its working copy"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn an_agent_failure_that_repeats_the_same_way_is_a_configuration_error_until_it_changes() {
    let sb = Sandbox::with_files(&["a.js"]);
    let log = sb.root().join("runs.log");
    // Codex with a provider whose `env_key` sentinel withholds.
    let cmd = script(
        &sb,
        "needs-key.sh",
        &format!(
            "echo \"$SENTINEL_FILE\" >> '{}'\ncat > /dev/null\n\
             echo \"Error: Missing environment variable: OPENAI_API_KEY (run $$)\" >&2\nexit 1\n",
            log.display()
        ),
    )
    .display()
    .to_string();
    let r = tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
    assert_eq!(r["files"][0]["outcome"], "failed", "{r}");
    assert_eq!(runs(&sb).len(), 1);
    // The next try fails the same way: the tick stops and says what to do.
    let out = sb
        .tick_cmd(&at(24 * 60))
        .args(["--agent", &cmd, "--fake-sleep"])
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
        .output();
    expect_code(&out, 1);
    assert_eq!(runs(&sb).len(), 2);
    assert!(
        out.stderr
            .contains("failed the same way on 2 ticks in a row")
            && out.stderr.contains("--agent-env NAME"),
        "{}",
        out.stderr
    );
    // Every tick after it, a no-op's too, stops without running the agent.
    for minute in [24 * 60 + 10, 48 * 60] {
        let out = sb
            .tick_cmd(&at(minute))
            .args(["--agent", &cmd, "--fake-sleep"])
            .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
            .output();
        expect_code(&out, 1);
        assert!(out.stderr.contains("configuration error"), "{}", out.stderr);
    }
    assert_eq!(runs(&sb).len(), 2);
    // Another configuration is tried again.
    let out = sb
        .tick_cmd(&at(48 * 60 + 10))
        .args([
            "--agent",
            &cmd,
            "--fake-sleep",
            "--agent-env",
            "OPENAI_API_KEY",
        ])
        .output();
    assert_ne!(out.code, 1, "{}", out.stderr);
    assert_eq!(runs(&sb).len(), 3);
}

#[test]
fn a_key_given_to_the_agent_that_it_writes_into_its_edit_is_refused_not_committed() {
    let cases = [
        // Given to the agent by name, as a Claude Code set-up gives it.
        (
            "ANTHROPIC_API_KEY",
            "sk-ant-api03-Q2xhdWRlS2V5Rm9yVGVzdHNPbmx5MTIzNDU2",
            &["--agent-env", "ANTHROPIC_API_KEY"][..],
        ),
        (
            "MY_GATEWAY_TOKEN",
            "gw-7f3a9c2e41b84d6fa0e5c1d2b3a49876",
            &["--agent-env", "MY_GATEWAY_TOKEN"][..],
        ),
    ];
    for (name, value, extra) in cases {
        let sb = Sandbox::with_files(&["a.js"]);
        let cmd = script(
            &sb,
            "leaky.sh",
            &format!(
                "cat > /dev/null\nprintf '// key: %s\\n' \"${name}\" >> \"$SENTINEL_FILE\"\n\
                 echo \"using ${name}\" >&2\n\
                 printf '%s' '{{\"action\":\"EVOLVE\",\"reason\":\"configured the client\",\"findings\":[]}}'\n"
            ),
        )
        .display()
        .to_string();
        let out = sb
            .tick_cmd(&at(0))
            .args(["--agent", &cmd])
            .args(extra)
            .env(name, value)
            .output();
        expect_code(&out, 10);
        assert!(
            !out.stdout.contains(value) && !out.stderr.contains(value),
            "{name} printed: {}{}",
            out.stdout,
            out.stderr
        );
        let r = out.json();
        let notes = r["notes"].to_string();
        assert!(notes.contains("refused"), "{name}: {notes}");
        let sandbox = sb.repo.git(&["log", "--all", "-p", "--format=%s"]);
        assert!(!sandbox.contains(value), "{name} was committed: {sandbox}");
    }
}

#[test]
fn explain_under_agent_names_the_agent_and_does_not_promise_a_model_call() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, SKIP, 0);
    tick(&sb, 0, &cmd, &[], 10);
    let file = format!("{WATCHED}/a.js");
    let out = sb
        .sentinel([
            "explain",
            &file,
            "--agent",
            &cmd,
            "--path",
            WATCHED,
            "--now",
            &at(1),
        ])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
        .output();
    expect_code(&out, 0);
    assert!(
        !out.stdout.contains("advisor-changed") && !out.stdout.contains("openai:"),
        "{}",
        out.stdout
    );
    // The next tick is a no-op, as explain said.
    tick(&sb, 2, &cmd, &[], 0);
}

#[test]
fn a_run_whose_cli_made_several_model_requests_counts_each_of_them() {
    let sb = Sandbox::with_files(&["a.js"]);
    // Claude Code's adapter sends `num_turns` as `requests`.
    let cmd = script(
        &sb,
        "turns.sh",
        "cat > /dev/null\nprintf '%s' '{\"action\":\"SKIP\",\"reason\":\"fine\",\"findings\":[],\"requests\":3}'\n",
    )
    .display()
    .to_string();
    let out = sb.tick_cmd(&at(0)).args(["--agent", &cmd]).output();
    expect_code(&out, 10);
    assert_eq!(out.json()["llm_calls"], 3, "{}", out.stdout);
    assert_eq!(sb.stats()["llm"]["attempts"], 3);
}

#[test]
fn reset_circuit_clears_an_agents_standing_failure() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = script(
        &sb,
        "not-logged-in.sh",
        "cat > /dev/null\necho 'Error: not logged in' >&2\nexit 1\n",
    )
    .display()
    .to_string();
    tick(&sb, 0, &cmd, &["--fake-sleep"], 10);
    let out = sb
        .tick_cmd(&at(24 * 60))
        .args(["--agent", &cmd, "--fake-sleep"])
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
        .output();
    expect_code(&out, 1);
    let out = sb
        .sentinel(["reset", "--circuit", "--now", &at(24 * 60 + 1)])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&out, 0);
    assert!(
        out.stdout.contains("cleared the agent's standing failure"),
        "{}",
        out.stdout
    );
    // The next tick runs the agent again instead of stopping before it.
    let out = sb
        .tick_cmd(&at(24 * 60 + 20))
        .args(["--agent", &cmd, "--fake-sleep"])
        .env("OPENAI_API_KEY", "sk-must-not-reach-the-agent")
        .output();
    assert!(
        !out.stderr.contains("configuration error"),
        "{}",
        out.stderr
    );
}
