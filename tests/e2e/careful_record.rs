//! `record` and `reset` are as careful as `tick`: the agent's work tree is
//! read as hostile (a link to `/dev/zero` or a FIFO cannot flood or hang
//! `record` under the state lock), what they print is escaped, and a cost
//! or a reason a person gives is bounded or refused as a usage error.

use std::fs;
use std::path::Path;
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

use crate::expect_code;
use crate::util::{Output, Run, Sandbox, WATCHED, at};

/// Far more than `record` needs, far less than forever: a regression
/// fails the test instead of hanging the suite.
const WATCHDOG: Duration = Duration::from_secs(10);

/// Wait for `child`; one still running after `WATCHDOG` is killed and the
/// test fails naming `what`.
fn within_watchdog(child: Child, what: &str) -> Output {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(out) => Output::from(out.expect("wait for sentinel")),
        Err(_) => {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what}: `record` still runs after {WATCHDOG:?}: it hangs");
        }
    }
}

fn file(name: &str) -> String {
    format!("{WATCHED}/{name}")
}

/// A state that knows `name` (handed over by a tick without an advisor).
fn handed_over(name: &str) -> Sandbox {
    let sb = Sandbox::with_files(&[name]);
    expect_code(&sb.tick_cmd(&at(0)).args(["--llm", "off"]).output(), 10);
    sb
}

/// `sentinel record FILE --decision DECISION` for the sandbox, with `extra`.
fn record(sb: &Sandbox, name: &str, decision: &str, extra: &[&str]) -> Run {
    sb.sentinel(["record", &file(name), "--decision", decision])
        .args(["--now", &at(1), "--path", WATCHED])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .args(extra)
}

/// The agent left `name` as something else than a regular file.
fn replace_in_work_tree(sb: &Sandbox, name: &str, make: impl FnOnce(&Path)) {
    let at = sb.repo.root.join(file(name));
    fs::remove_file(&at).unwrap();
    make(&at);
}

#[track_caller]
fn refused(out: &Output, what: &str) {
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
    expect_code(out, 1);
    assert!(out.stderr.contains("`libs/shared/a.js`"), "{}", out.stderr);
    assert!(out.stderr.contains(what), "{}", out.stderr);
}

#[test]
fn record_evolved_on_a_link_to_dev_zero_exits_1_instead_of_reading_forever() {
    let sb = handed_over("a.js");
    let before = fs::read(&sb.state).unwrap();
    replace_in_work_tree(&sb, "a.js", |p| {
        std::os::unix::fs::symlink("/dev/zero", p).unwrap()
    });
    // Bounded, so that a build that reads the device fails, not the machine.
    let run = record(&sb, "a.js", "evolved", &[]).memory_limit(1 << 30);
    let out = within_watchdog(run.spawn(), "a link to /dev/zero");
    refused(&out, "symbolic link");
    assert_eq!(fs::read(&sb.state).unwrap(), before, "nothing recorded");
}

#[test]
fn record_evolved_on_a_fifo_exits_1_instead_of_hanging_with_the_lock() {
    let sb = handed_over("a.js");
    replace_in_work_tree(&sb, "a.js", |p| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    });
    let out = within_watchdog(record(&sb, "a.js", "evolved", &[]).spawn(), "a FIFO");
    refused(&out, "FIFO");
    // The lock was let go: the next tick is not busy.
    let tick = sb.tick_cmd(&at(2)).args(["--llm", "off"]).output();
    assert_ne!(tick.code, 20, "{}", tick.stderr);
}

#[test]
fn a_cost_that_cannot_be_a_cost_is_a_usage_error_not_silently_dropped() {
    let sb = handed_over("a.js");
    let before = fs::read(&sb.state).unwrap();
    for cost in ["-5", "NaN", "inf", "1e308", "1000.01"] {
        let flag = format!("--cost-usd={cost}");
        let out = record(&sb, "a.js", "skip", &[&flag]).output();
        expect_code(&out, 2);
        assert!(
            out.stderr.contains("is not a cost"),
            "{cost}: {}",
            out.stderr
        );
    }
    assert_eq!(fs::read(&sb.state).unwrap(), before, "nothing recorded");
    let out = record(&sb, "a.js", "skip", &["--cost-usd=1000"]).output();
    expect_code(&out, 0);
}

#[test]
fn a_reason_of_100_kb_is_capped_as_a_models_reason_is() {
    let sb = handed_over("a.js");
    // One argument holds at most 128 KiB on Linux.
    let long = "x".repeat(100_000);
    let out = record(&sb, "a.js", "skip", &["--reason", &long]).output();
    expect_code(&out, 0);
    assert!(out.stdout.len() < 3_000, "{} bytes", out.stdout.len());
    let state = fs::read_dir(sb.state.parent().unwrap())
        .unwrap()
        .map(|e| fs::metadata(e.unwrap().path()).unwrap().len())
        .sum::<u64>();
    assert!(state < 100_000, "the state holds {state} bytes");
}

/// Escapes that retitle the terminal, clear the screen and fake an error line.
const HOSTILE: &str = "\u{1b}]0;pwned\u{7}\u{1b}[2J\nerror: fake\u{202e}";

#[track_caller]
fn printed_escaped(out: &Output) {
    expect_code(out, 0);
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!out.stdout.contains(raw), "{:?}", out.stdout);
    }
    assert!(!out.stdout.contains("\nerror: fake"), "{:?}", out.stdout);
    assert!(out.stdout.contains("\\u{1b}"), "{:?}", out.stdout);
}

#[test]
fn record_and_reset_print_a_hostile_path_and_reason_escaped() {
    let name = "\u{1b}[2Jb.js";
    let sb = handed_over(name);
    let out = record(&sb, name, "failed", &["--reason", HOSTILE]).output();
    printed_escaped(&out);
    let out = sb
        .sentinel(["reset", &file(name), "--now", &at(2)])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    printed_escaped(&out);
}
