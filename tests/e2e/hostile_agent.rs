//! A hostile agent, one attack per test: it hunts the secrets it was denied,
//! leaves processes behind, holds the tick, outlives a signal to sentinel,
//! ticks sentinel itself, cannot start, or has something to say. Each agent
//! is a real shell script; what it saw is written to files the test reads.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::expect_code;
use crate::util::{Output, Sandbox, WATCHED, at};

/// An executable script in the sandbox; returns its path.
fn script(sb: &Sandbox, name: &str, body: &str) -> String {
    let path = sb.root().join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

const SKIP: &str = r#"{"action":"SKIP","reason":"fine as it is","findings":[]}"#;

/// Secret values sentinel is given; none may reach the agent.
const SECRETS: [(&str, &str); 5] = [
    ("OPENAI_API_KEY", "sk-hostile-test-openai-0123456789"),
    ("OPENAI_ADMIN_KEY", "sk-admin-hostile-test-0123456789"),
    ("SENTINEL_GITLAB_TOKEN", "glpat-hostile-sentinel-0123456789"),
    ("GITLAB_TOKEN", "glpat-hostile-gitlab-0123456789"),
    ("CI_JOB_TOKEN", "ci-job-hostile-token-0123456789"),
];

/// Dead, or a zombie nobody reaped yet: in either case it runs no more.
fn gone(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

fn fifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The first line written to the FIFO at `path`: blocks until the agent
/// opens it, so the test learns that the agent runs without sleeping.
fn first_line_of(path: &Path) -> String {
    let mut line = String::new();
    BufReader::new(fs::File::open(path).unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_string()
}

#[test]
fn an_agent_finds_no_secret_in_sentinels_own_environ_block() {
    let sb = Sandbox::with_files(&["a.js"]);
    let dump = sb.root().join("environs.txt");
    // Every ancestor's environment block, as /proc shows it (also as root).
    let body = format!(
        "p=$PPID\nwhile [ \"$p\" -gt 1 ]; do\n  echo \"== $p\" >> '{d}'\n  tr '\\0' '\\n' < /proc/$p/environ >> '{d}' 2>/dev/null\n  p=$(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f2)\ndone\nprintf '%s' '{SKIP}'\n",
        d = dump.display()
    );
    let cmd = script(&sb, "hunt.sh", &body);
    let mut run = sb.tick_cmd(&at(0)).args(["--agent", &cmd]);
    for (k, v) in SECRETS {
        run = run.env(k, v);
    }
    let out = run.output();
    expect_code(&out, 10);
    let seen = fs::read_to_string(&dump).unwrap();
    // It did read sentinel's block: the names are there, the values not.
    assert!(seen.contains("OPENAI_API_KEY="), "{seen}");
    for (k, v) in SECRETS {
        assert!(!seen.contains(v), "{k}'s value was readable by the agent");
    }
}

#[test]
fn a_setsid_child_holding_stdout_does_not_hold_the_tick() {
    let sb = Sandbox::with_files(&["a.js"]);
    let late = sb.root().join("late");
    let body = format!(
        "setsid sh -c 'sleep 5; echo late > {}' &\nprintf '%s' '{SKIP}'\n",
        late.display()
    );
    let cmd = script(&sb, "hold.sh", &body);
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &cmd, "--agent-timeout", "2"])
        .output();
    expect_code(&out, 10);
    assert_eq!(out.json()["files"][0]["outcome"], "llm_skip");
    // The tick did not wait for it, and it did not live on after the tick.
    assert!(!late.exists(), "the tick waited for the agent's child");
    let out = sb
        .tick_cmd(&at(1))
        .args(["--agent", &cmd, "--agent-timeout", "2"])
        .output();
    expect_code(&out, 0);
    assert!(!late.exists(), "the agent's child outlived its run");
}

#[test]
fn a_detached_child_of_the_agent_ends_with_its_run() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let pids = sb.root().join("pids");
    let spawned = sb.root().join("spawned");
    fifo(&spawned);
    // The agent goes on only once its child is in a session of its own.
    let body = format!(
        "setsid sh -c 'echo $$ > {f}; exec sleep 300' </dev/null >/dev/null 2>&1 &\nread pid < '{f}'\necho $pid >> '{p}'\nprintf '%s' '{SKIP}'\n",
        f = spawned.display(),
        p = pids.display()
    );
    let cmd = script(&sb, "detach.sh", &body);
    let out = sb.tick_cmd(&at(0)).args(["--agent", &cmd]).output();
    expect_code(&out, 10);
    let started = fs::read_to_string(&pids).unwrap();
    assert_eq!(started.lines().count(), 2);
    for pid in started.lines() {
        assert!(gone(pid), "setsid'd process {pid} outlived the tick");
    }
}

/// An agent that, on its first run only, tells the test its pid through
/// the FIFO `ready` and then hangs with a child; later runs answer SKIP.
fn hang_once(sb: &Sandbox) -> (String, PathBuf) {
    let ready = sb.root().join("ready");
    fifo(&ready);
    let first = sb.root().join("first-run-done");
    let body = format!(
        "if [ ! -e '{f}' ]; then\n  touch '{f}'\n  sleep 300 &\n  echo \"$$ $!\" > '{r}'\n  wait\nfi\nprintf '%s' '{SKIP}'\n",
        f = first.display(),
        r = ready.display()
    );
    (script(sb, "hang-once.sh", &body), ready)
}

#[test]
fn sigterm_mid_run_ends_the_agent_releases_the_lock_and_exits_143() {
    let sb = Sandbox::with_files(&["a.js"]);
    let (cmd, ready) = hang_once(&sb);
    let child = sb.tick_cmd(&at(0)).args(["--agent", &cmd]).spawn();
    let pids = first_line_of(&ready);
    // SAFETY: kill(2) on the sentinel process this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = Output::wait(child);
    expect_code(&out, 143);
    assert_eq!(out.stdout, "");
    let line = out.stderr_line();
    assert!(
        line.contains("SIGTERM")
            && line.contains(&format!("{WATCHED}/a.js"))
            && line.contains("nothing was lost"),
        "{line}"
    );
    for pid in pids.split_whitespace() {
        assert!(gone(pid), "agent process {pid} outlived sentinel");
    }
    // The lock is free and the state whole: the next tick runs, takes in
    // the killed call, and asks again once the retry allows it.
    let out = sb.tick_cmd(&at(1)).args(["--agent", &cmd]).output();
    expect_code(&out, 10);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "failed",
        "{}",
        out.stdout
    );
}

#[test]
fn sigint_and_sighup_mid_run_end_the_agent_and_exit_130_and_129() {
    for (signal, name, code) in [(libc::SIGINT, "SIGINT", 130), (libc::SIGHUP, "SIGHUP", 129)] {
        let sb = Sandbox::with_files(&["a.js"]);
        let (cmd, ready) = hang_once(&sb);
        let child = sb.tick_cmd(&at(0)).args(["--agent", &cmd]).spawn();
        let pids = first_line_of(&ready);
        // SAFETY: kill(2) on the sentinel process this test started.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let out = Output::wait(child);
        expect_code(&out, code);
        assert!(out.stderr_line().contains(name), "{}", out.stderr);
        for pid in pids.split_whitespace() {
            assert!(gone(pid), "{name}: agent process {pid} outlived sentinel");
        }
    }
}

#[test]
fn sigkill_mid_run_leaves_a_whole_state_and_the_next_tick_ends_the_leftover_agent() {
    let sb = Sandbox::with_files(&["a.js"]);
    let (cmd, ready) = hang_once(&sb);
    let mut child = sb.tick_cmd(&at(0)).args(["--agent", &cmd]).spawn();
    let pids = first_line_of(&ready);
    child.kill().unwrap();
    child.wait().unwrap();
    for pid in pids.split_whitespace() {
        assert!(
            !gone(pid),
            "the agent {pid} should have outlived a SIGKILLed sentinel"
        );
    }
    let out = sb.tick_cmd(&at(1)).args(["--agent", &cmd]).output();
    expect_code(&out, 10);
    for pid in pids.split_whitespace() {
        assert!(gone(pid), "the next tick left the old agent {pid} running");
    }
    // The killed call was taken in from the journal: counted once, no loss.
    let stats = sb.stats();
    assert_eq!(stats["novelty"]["tracked_files"], 1, "{stats}");
    assert_eq!(stats["llm"]["lifetime_calls"], 1, "{stats}");
}

#[test]
fn sentinel_tick_inside_an_agent_run_exits_2_and_record_is_busy() {
    let sb = Sandbox::with_files(&["a.js"]);
    let bin = env!("CARGO_BIN_EXE_sentinel");
    let seen = sb.root().join("nested.txt");
    let depth = sb.root().join("depth");
    let repo = sb.repo.root.display().to_string();
    let state = sb.state.display().to_string();
    // Nested once at most, so that the test itself ends on a build that recurses.
    let body = format!(
        "if [ -e '{d}' ]; then printf '%s' '{SKIP}'; exit 0; fi\ntouch '{d}'\n\
         '{bin}' tick --repo \"$SENTINEL_WORKTREE\" --path {WATCHED} > /dev/null 2>> '{s}'\necho \"tick $?\" >> '{s}'\n\
         if [ -e \"$SENTINEL_WORKTREE/.sentinel/state.json\" ]; then echo 'state made' >> '{s}'; else echo 'state none' >> '{s}'; fi\n\
         '{bin}' record {WATCHED}/a.js --decision skip --repo '{repo}' --state '{state}' 2>> '{s}'\necho \"record $?\" >> '{s}'\n\
         printf '%s' '{SKIP}'\n",
        d = depth.display(),
        s = seen.display(),
    );
    let cmd = script(&sb, "nest.sh", &body);
    // The first tick makes the state; the agent nests on the second.
    fs::write(&depth, "").unwrap();
    expect_code(&sb.tick_cmd(&at(0)).args(["--agent", &cmd]).output(), 10);
    fs::remove_file(&depth).unwrap();
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo.commit("edit a");
    let out = sb
        .tick_cmd(&at(2))
        .args(["--agent", &cmd])
        .env("SENTINEL_AGENT", &cmd)
        .output();
    expect_code(&out, 12);
    let seen = fs::read_to_string(&seen).unwrap();
    assert!(seen.contains("tick 2\n"), "{seen}");
    assert!(seen.contains("SENTINEL_AGENT_RUN"), "{seen}");
    assert!(seen.contains("record 20\n"), "{seen}");
    // The nested tick made no state of its own in the working copy.
    assert!(seen.contains("state none\n"), "{seen}");
}

/// Eight ticks of an agent that cannot start: each exits 1 and says what
/// to check; then one that can, and it is the only call ever counted.
#[track_caller]
fn eight_ticks_spend_nothing(sb: &Sandbox, broken: &str, says: &str) {
    for minute in 0..8 {
        let out = sb
            .tick_cmd(&at(minute * 10))
            .args(["--agent", broken])
            .output();
        expect_code(&out, 1);
        assert!(
            out.stderr.contains(says) && out.stderr.contains("PATH"),
            "tick {minute}: {}",
            out.stderr
        );
    }
    let good = script(sb, "good.sh", &format!("printf '%s' '{SKIP}'\n"));
    let out = sb.tick_cmd(&at(90)).args(["--agent", &good]).output();
    expect_code(&out, 10);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "llm_skip",
        "{}",
        out.stdout
    );
    let llm: &Value = &sb.stats()["llm"];
    assert_eq!(llm["lifetime_calls"], 1, "{llm}");
    assert_eq!(llm["attempts"], 1, "{llm}");
    assert_eq!(llm["lifetime_cost_estimated"], 0.05, "{llm}");
    assert_eq!(llm["failures_by_class"], serde_json::json!({}), "{llm}");
}

#[test]
fn an_agent_missing_from_path_over_8_ticks_exits_1_and_spends_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    eight_ticks_spend_nothing(
        &sb,
        "no-such-claude -p",
        "`no-such-claude` is on no directory",
    );
}

#[test]
fn an_agent_missing_from_path_fails_a_no_op_tick_too() {
    let sb = Sandbox::with_files(&["a.js"]);
    let good = script(&sb, "good.sh", &format!("printf '%s' '{SKIP}'\n"));
    expect_code(&sb.tick_cmd(&at(0)).args(["--agent", &good]).output(), 10);
    let out = sb
        .tick_cmd(&at(5))
        .args(["--agent", "no-such-claude -p"])
        .output();
    expect_code(&out, 1);
    assert!(
        out.stderr
            .contains("`no-such-claude` is on no directory of PATH"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_agent_that_exits_127_over_8_ticks_exits_1_and_spends_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    let wrapper = script(&sb, "wrapper.sh", "no-such-tool-inside --json\n");
    eight_ticks_spend_nothing(&sb, &wrapper, "it exited with 127");
}

#[test]
fn a_relative_agent_path_is_found_where_sentinel_was_started() {
    let sb = Sandbox::with_files(&["a.js"]);
    script(&sb, "agent.sh", &format!("printf '%s' '{SKIP}'\n"));
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", "./agent.sh"])
        .current_dir(sb.root())
        .output();
    expect_code(&out, 10);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "llm_skip",
        "{}",
        out.stderr
    );
}

#[test]
fn an_agents_error_message_and_stderr_are_kept_and_shown() {
    let sb = Sandbox::with_files(&["a.js"]);
    let body = r#"{"error":{"type":"insufficient_quota","message":"Credit balance is too low"}}"#;
    let cmd = script(
        &sb,
        "broke.sh",
        &format!(
            "echo 'agent: checking billing' >&2\necho 'agent: top up at the console' >&2\nprintf '%s' '{body}'\nexit 1\n"
        ),
    );
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &cmd, "--fake-sleep"])
        .output();
    expect_code(&out, 10);
    let said = "Credit balance is too low";
    assert!(out.stderr.contains(said), "tick line: {}", out.stderr);
    let reason = out.json()["files"][0]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reason.starts_with("quota")
            && reason.contains(said)
            && reason.contains("top up at the console"),
        "{reason}"
    );
    let explained = sb.explain(&format!("{WATCHED}/a.js"), false);
    assert!(explained.stdout.contains(said), "{}", explained.stdout);
    let stats = sb.stats();
    let circuit = &stats["llm"]["circuit"];
    assert!(
        circuit["reason"].as_str().unwrap().contains(said),
        "{circuit}"
    );
    let table = sb
        .sentinel(["stats", "--now", &at(1)])
        .arg("--state")
        .arg(&sb.state)
        .output();
    // The table wraps long values at 100 columns: read the value column
    // back as one text.
    let values: Vec<&str> = table
        .stdout
        .lines()
        .filter_map(|l| l.split('│').nth(2))
        .map(str::trim)
        .collect();
    assert!(values.join(" ").contains(said), "{}", table.stdout);
}
