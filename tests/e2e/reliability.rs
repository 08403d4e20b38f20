//! Reliability (docs/reliability.md): many ticks at once, ticks
//! killed at random instants, bad state files, hostile peers, hostile
//! repositories, a clock that goes backwards and secrets that must never be
//! repeated. Every test asserts a defined outcome: an exit code, what the
//! report and the files say, and that no process panicked or hung.
//!
//! Time is injected with `--now`, and the fakes' waits with `--fake-sleep`.
//! The one exception is the crash test: its test thread sleeps a few
//! milliseconds before each kill, because a tick can only be interrupted
//! mid-flight in real time.

use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::gitlab::{Api, Endpoint, FakeGitLab, PROJECT, Reply, TOKEN};
use crate::util::layout;
use crate::util::openai::{self, FakeOpenAi};
use crate::util::{Output, Sandbox, WATCHED, at, files, plain_js, snapshot};
use crate::{FIVE, expect_code};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// No process may panic, whatever a peer or a file threw at it.
#[track_caller]
fn no_panic(out: &Output) {
    assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("RUST_BACKTRACE"),
        "sentinel panicked:\n{}",
        out.stderr
    );
}

/// A tick that must exit `code` without panicking; its `--json` report.
#[track_caller]
fn report_of(out: &Output, code: i32) -> Value {
    no_panic(out);
    expect_code(out, code);
    let report = out.json();
    assert_eq!(report["exit_code"], code, "{report}");
    report
}

/// `sentinel stats --json --state STATE`, which must succeed.
#[track_caller]
fn stats_of(sb: &Sandbox, state: &Path) -> Value {
    let out = sb
        .sentinel(["stats", "--json", "--state"])
        .arg(state)
        .output();
    no_panic(&out);
    expect_code(&out, 0);
    out.json()
}

/// Every number in `v` is 0 or more (no negative window, count or cost).
#[track_caller]
fn assert_no_negative(v: &Value, at: &str) {
    match v {
        Value::Number(n) => assert!(
            n.as_f64().is_some_and(|f| f >= 0.0),
            "{at} is negative: {n}"
        ),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                assert_no_negative(x, &format!("{at}[{i}]"));
            }
        }
        Value::Object(o) => {
            for (k, x) in o {
                assert_no_negative(x, &format!("{at}.{k}"));
            }
        }
        _ => {}
    }
}

/// The notes of a report, joined.
fn notes(report: &Value) -> String {
    report["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

/// The paths a report looked at.
fn paths(report: &Value) -> Vec<String> {
    files(report).into_iter().map(|f| f.0).collect()
}

/// The report's entry for `path`.
#[track_caller]
fn entry<'a>(report: &'a Value, path: &str) -> &'a Value {
    report["files"]
        .as_array()
        .expect("files")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the report: {report}"))
}

/// Whether this process may read any file whatever its mode (root, or
/// CAP_DAC_OVERRIDE): then chmod cannot make a file unreadable.
fn permissions_are_ignored(probe_dir: &Path) -> bool {
    let probe = probe_dir.join("permission-probe");
    fs::write(&probe, b"x").unwrap();
    set_mode(&probe, 0o000);
    let readable = fs::read(&probe).is_ok();
    set_mode(&probe, 0o600);
    fs::remove_file(&probe).unwrap();
    readable
}

/// What a path holds, to prove it was not touched: a file's bytes (or,
/// when they cannot be read, its length), mode and mtime; a directory's
/// entries with theirs.
fn print_of(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs::symlink_metadata(path) else {
        return "absent".into();
    };
    let head = format!(
        "mode {:o} len {} mtime {}.{}",
        meta.mode(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    );
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        let inner: Vec<String> = entries.iter().map(|e| print_of(e)).collect();
        return format!("dir {head} [{}]", inner.join(", "));
    }
    match fs::read(path) {
        Ok(bytes) => format!("file {head} {:?}", String::from_utf8_lossy(&bytes)),
        Err(e) => format!("file {head} unreadable ({})", e.kind()),
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Who holds a flock on `path`, from /proc/locks: `pid (cmdline)` each.
fn lock_holders(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(ino) = fs::metadata(path).map(|m| m.ino()) else {
        return "no lock file".into();
    };
    let locks = fs::read_to_string("/proc/locks").unwrap_or_default();
    locks
        .lines()
        .filter(|l| l.contains(&format!(":{ino} ")))
        .map(|l| {
            let pid = l.split_whitespace().nth(4).unwrap_or("?").to_string();
            let cmd = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_else(|e| e.to_string());
            let status = fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("State") || l.starts_with("PPid"))
                .collect::<Vec<_>>()
                .join(" ");
            format!("{l} -> {pid} ({cmd}) {status}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A tiny xorshift64: reproducible pseudo-random numbers without a crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `sentinel` with `args`: its output and its peak resident set in KiB,
/// read from the kernel (`VmHWM` in `/proc/PID/status`) while sentinel is
/// still alive. Its stderr is a pipe filled to the brim beforehand, so its
/// first write there (the verdict line, after all the work of the tick)
/// blocks; the peak is read then, and the pipe drained. No tool has to be
/// installed, and the figure is sentinel's own, not its children's nor a
/// parent's inherited across `exec`.
fn with_peak_rss(sb: &Sandbox, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> (Output, u64) {
    use std::os::fd::AsRawFd;
    let (mut reader, mut writer) = std::io::pipe().expect("a pipe");
    // SAFETY: F_GETPIPE_SZ only reads the capacity of a pipe we own.
    let capacity = unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_GETPIPE_SZ) };
    let capacity = usize::try_from(capacity).expect("the pipe's capacity");
    writer
        .write_all(&vec![b'.'; capacity])
        .expect("fill the pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sentinel"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .envs(env.iter().copied())
        .current_dir(sb.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(writer))
        .args(args)
        .spawn()
        .expect("run sentinel");
    let mut stdout_pipe = child.stdout.take().expect("stdout");
    let stdout = thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout_pipe.read_to_string(&mut text);
        text
    });
    let pid = child.id();
    let peak = loop {
        // `write(2, ...)`: blocked on the full pipe, every byte of work done.
        let call = fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        if call.starts_with("1 0x2 ") {
            break vm_hwm_kib(pid).expect("VmHWM of a live process");
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "sentinel exited before writing its verdict line"
        );
        thread::sleep(Duration::from_millis(1));
    };
    let mut stderr = Vec::new();
    reader.read_to_end(&mut stderr).expect("drain stderr");
    let status = child.wait().expect("wait for sentinel");
    let out = Output {
        code: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: String::from_utf8_lossy(&stderr[capacity..]).into_owned(),
    };
    (out, peak)
}

/// The peak resident set of a live process, in KiB.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---------------------------------------------------------------------------
// 1. Concurrency
// ---------------------------------------------------------------------------

#[test]
fn a_hundred_concurrent_ticks_after_a_commit_run_exactly_one_wake_and_keep_the_counters_consistent()
{
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let before = sb.stats();
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");

    let children: Vec<_> = (0..100).map(|_| sb.tick_cmd(&at(2)).spawn()).collect();
    let outs: Vec<Output> = children.into_iter().map(Output::wait).collect();
    let codes: Vec<i32> = outs.iter().map(|o| o.code).collect();
    for out in &outs {
        no_panic(out);
        assert!([0, 12, 20].contains(&out.code), "{out:#?}");
        let report = out.json();
        let reason = report["verdict"]["reason"].as_str().unwrap().to_string();
        let expected = match out.code {
            0 => "none",
            12 => "repo_changed",
            _ => "busy",
        };
        assert_eq!(reason, expected, "{report}");
        if out.code == 20 {
            assert_eq!(report["state_written"], false);
            assert_eq!(report["requests"], 0, "a busy tick makes no request");
        }
    }
    let woke = codes.iter().filter(|c| (10..=17).contains(*c)).count();
    assert_eq!(woke, 1, "exactly one tick ran a waking tick: {codes:?}");
    let noops = codes.iter().filter(|c| **c == 0).count() as u64;

    let after = sb.stats();
    let n = |s: &Value, k: &str| s["wake"][k].as_u64().unwrap();
    assert_eq!(n(&after, "wakes"), n(&before, "wakes") + 1);
    assert_eq!(after["wake"]["by_reason"]["repo_changed"], 1);
    assert_eq!(n(&after, "ticks"), n(&before, "ticks") + 1 + noops);
    assert_eq!(n(&after, "noops"), n(&before, "noops") + noops);
    assert_eq!(n(&after, "unsaved_noops"), noops);
    assert_eq!(n(&after, "ticks"), n(&after, "wakes") + n(&after, "noops"));
    assert_eq!(after["wake"]["last_head"], sb.repo.head());
    assert_eq!(after["novelty"]["tracked_files"], 5);
    // The survivors leave no temp file behind.
    let leftovers: Vec<_> = fs::read_dir(sb.state.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

// ---------------------------------------------------------------------------
// 2. Crash safety
// ---------------------------------------------------------------------------

/// Files in the crash test's repository: enough that a debug build's tick
/// takes tens of milliseconds, so a kill can land anywhere in it.
const CRASH_FILES: usize = 150;
const CRASH_TRIALS: usize = 200;

/// A repository whose branches `a` and `b` differ in every one of
/// `CRASH_FILES` files, so a tick switching branch re-reads them all.
fn two_branch_repo() -> Sandbox {
    let sb = Sandbox::new();
    for version in ["a", "b"] {
        for i in 0..CRASH_FILES {
            sb.repo.write(
                &format!("{WATCHED}/f{i:04}.js"),
                format!("// f{i}\nmodule.exports = '{version}{i}';\n"),
            );
        }
        sb.repo.commit(&format!("version {version}"));
        sb.repo.git(&["branch", version]);
    }
    sb
}

#[test]
fn a_tick_killed_at_any_instant_leaves_the_old_or_a_whole_new_state_and_counts_no_noop_twice() {
    let sb = two_branch_repo();
    let head_of = |b: &str| sb.repo.git(&["rev-parse", b]);
    let heads = [head_of("a"), head_of("b")];
    let minute = std::cell::Cell::new(0);
    // One watched branch that the test moves between the heads of `a` and
    // `b`: a state belongs to one branch, so the branch name stays put.
    let tick = |branch: &str| {
        minute.set(minute.get() + 1);
        let head = &heads[usize::from(branch == "b")];
        sb.repo.git(&["update-ref", "refs/heads/watched", head]);
        sb.sentinel([
            "tick",
            "--batch",
            "0",
            "--path",
            WATCHED,
            "--now",
            &at(minute.get()),
        ])
        .args(["--branch", "watched"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
    };
    let other = |b: usize| 1 - b;
    let name = |b: usize| ["a", "b"][b];

    // Counted from the exit codes of the runs that completed.
    let (mut started, mut wakes_done, mut noops_done, mut killed) = (0u64, 0u64, 0u64, 0u64);
    // Right after a kill the lock can still be held for an instant by a
    // child the killed tick was starting (a forked process keeps the lock's
    // file description until it execs): such a tick is refused as busy,
    // starts nothing and is simply run again (at most 100 times).
    let lock = sb.lock();
    let busy = std::cell::Cell::new(0u64);
    let run_to_end = |make: &dyn Fn() -> crate::util::Run, code: i32| {
        for _ in 0..100 {
            let out = make().output();
            no_panic(&out);
            if out.code == 20 {
                if busy.get() < 3 {
                    eprintln!("busy after a kill: {}", lock_holders(&lock));
                }
                busy.set(busy.get() + 1);
                continue;
            }
            expect_code(&out, code);
            return;
        }
        panic!("the lock stayed held: {}", lock_holders(&lock));
    };

    // The tick's length, measured once: three complete branch switches.
    run_to_end(&|| tick("a"), 10);
    let mut branch = 0;
    let mut lengths = Vec::new();
    for _ in 0..3 {
        branch = other(branch);
        let t = Instant::now();
        let out = tick(name(branch)).output();
        expect_code(&out, 12);
        lengths.push(t.elapsed());
    }
    started += 4;
    wakes_done += 4;
    lengths.sort();
    let tick_us = lengths[1].as_micros() as u64;

    let mut rng = XorShift(0x5EED_CAFE_F00D_0001);
    let (mut unchanged, mut replaced, mut completed_kills) = (0, 0, 0);
    // Killed ticks whose save had already landed: they count as wakes.
    let mut killed_after_save = 0u64;
    // The seeded trials, then (should none of them have landed after a
    // save, which a loaded machine can make rare) trials aimed at the end
    // of a tick until one does, at most `CRASH_TRIALS` more.
    let mut trial = 0;
    // Where the aimed trials kill: it moves towards the save from either
    // side (earlier after a tick that finished, later after one killed
    // before its save), so a tick length measured while the machine was
    // busier or quieter than during the trials still finds the window.
    let mut aim = tick_us;
    while trial < CRASH_TRIALS || (killed_after_save == 0 && trial < 2 * CRASH_TRIALS) {
        trial += 1;
        let before = fs::read(&sb.state).unwrap();
        // Always a waking tick: it switches to the branch the state is not on.
        let target = other(branch);
        let aimed = trial > CRASH_TRIALS;
        let delay = if aimed {
            Duration::from_micros(aim * 9 / 10 + rng.below(aim / 5 + 1))
        } else {
            Duration::from_micros(rng.below(tick_us * 5 / 4))
        };
        let mut child = tick(name(target)).spawn();
        started += 1;
        thread::sleep(delay);
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        match out.status.code() {
            Some(12) => {
                wakes_done += 1;
                completed_kills += 1;
                if aimed {
                    aim = aim * 9 / 10;
                }
            }
            Some(code) => panic!("trial {trial}: exit {code}: {stderr}"),
            None => killed += 1,
        }

        // The state is the old bytes or a whole new document, never torn.
        let after = fs::read(&sb.state).unwrap();
        let state = sentinel::state::store::load(&sb.state)
            .unwrap_or_else(|e| panic!("trial {trial}: torn state: {e:#}"))
            .expect("the state exists");
        if after == before {
            unchanged += 1;
            if aimed {
                aim = aim * 21 / 20 + 1;
            }
        } else {
            replaced += 1;
            if out.status.code().is_none() {
                killed_after_save += 1;
            }
            let s = stats_of(&sb, &sb.state);
            assert_eq!(s["wake"]["last_head"], heads[target], "trial {trial}");
            let header = sentinel::state::store::load_header(&sb.state)
                .unwrap()
                .unwrap();
            assert_eq!(header, state.header(), "trial {trial}");
        }
        let head = state.wake.last_head.expect("a head is remembered");
        branch = heads.iter().position(|h| *h == head).unwrap();

        // Interleave complete no-op ticks (journal lines) and, now and then,
        // a complete waking tick that folds them.
        for _ in 0..rng.below(3) {
            run_to_end(&|| tick(name(branch)), 0);
            started += 1;
            noops_done += 1;
        }
        if trial % 10 == 9 {
            branch = other(branch);
            run_to_end(&|| tick(name(branch)), 12);
            started += 1;
            wakes_done += 1;
        }
    }
    // Leftover temp files of killed ticks do not stop the next one, and
    // the next save removes them.
    let temp_files = || {
        fs::read_dir(sb.state.parent().unwrap())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".tmp-")
            })
            .count()
    };
    let leftovers = temp_files();
    branch = other(branch);
    run_to_end(&|| tick(name(branch)), 12);
    started += 1;
    wakes_done += 1;
    assert_eq!(temp_files(), 0, "the final save left temp files behind");

    let s = stats_of(&sb, &sb.state);
    let n = |k: &str| s["wake"][k].as_u64().unwrap();
    eprintln!(
        "crash test: tick {tick_us} µs, {trial} trials: {killed} killed, \
         {completed_kills} finished before the kill; state unchanged {unchanged}, \
         replaced {replaced}; {leftovers} temp files left; {started} ticks started, \
         {wakes_done} wakes and {noops_done} no-ops completed, {} busy retries; \
         counted {} ticks",
        busy.get(),
        n("ticks")
    );
    // The kills landed: some mid-tick before the save (the state kept its
    // old bytes), some after it; the old or the new state, never a torn one.
    assert!(killed > 0, "no kill landed");
    assert!(unchanged > 0, "no kill landed before a save");
    assert!(replaced > completed_kills, "no kill landed after a save");
    assert_eq!(n("unsaved_noops"), 0, "the last wake folded the journal");
    // Killed ticks were all waking ones: every no-op counted is one that
    // completed, exactly once.
    assert_eq!(n("noops"), noops_done, "{s}");
    assert_eq!(s["wake"]["by_reason"]["none"], noops_done, "{s}");
    // A killed tick counts as a wake exactly when its save landed.
    assert_eq!(n("wakes"), wakes_done + killed_after_save, "{s}");
    assert_eq!(
        n("ticks"),
        wakes_done + killed_after_save + noops_done,
        "{s}"
    );
    assert_eq!(s["wake"]["last_head"], heads[branch]);
    assert_eq!(s["novelty"]["tracked_files"], CRASH_FILES as u64);
}

#[test]
fn temp_files_left_by_killed_ticks_are_removed_by_the_next_save() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let dir = sb.state.parent().unwrap();
    // What a tick killed mid-save leaves: a partial copy under its pid.
    let good = fs::read(&sb.state).unwrap();
    for pid in [4_000_001, 4_000_002] {
        fs::write(
            dir.join(format!("state.json.tmp-{pid}")),
            &good[..good.len() / 2],
        )
        .unwrap();
    }
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");
    report_of(&sb.tick(&at(2), &[]), 12);
    let mut left: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["state.json", "state.json.d", "state.json.lock"]);
}

// ---------------------------------------------------------------------------
// 3. Bad state (git source)
// ---------------------------------------------------------------------------

/// After a first run, `mutate` the state file and commit a change so the
/// next tick would wake; that tick and `stats` must both exit 1 with one
/// line that names the file and says what to do, and leave it untouched.
#[track_caller]
fn bad_state(mutate: impl Fn(&Path, &[u8]), what: &str, todo: &str) {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let good = fs::read(&sb.state).unwrap();
    fs::remove_file(&sb.state).unwrap();
    mutate(&sb.state, &good);
    let before = print_of(&sb.state);
    let listing = || -> Vec<_> {
        let mut v: Vec<_> = fs::read_dir(sb.state.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let dir_before = listing();
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");

    let named = format!("`{}`", sb.state.display());
    for (label, out) in [
        ("tick", sb.tick(&at(2), &[])),
        (
            "stats",
            sb.sentinel(["stats", "--json", "--state"])
                .arg(&sb.state)
                .output(),
        ),
    ] {
        no_panic(&out);
        expect_code(&out, 1);
        assert_eq!(out.stdout, "", "{label}: no report on an error");
        let line = out.stderr_line();
        assert!(line.starts_with("error: "), "{label}: {line}");
        assert!(line.contains(&named), "{label} names the file: {line}");
        assert!(line.contains(what), "{label}: {line}\nwanted: {what}");
        assert!(line.contains(todo), "{label} says what to do: {line}");
        assert_eq!(print_of(&sb.state), before, "{label} touched the state");
        assert_eq!(listing(), dir_before, "{label} wrote next to the state");
    }
}

const RESTORE: &str = "restore it from a backup, or move it away to start over";

#[test]
fn an_empty_state_file_exits_1_naming_it_and_is_left_untouched() {
    bad_state(|p, _| fs::write(p, b"").unwrap(), "is empty", RESTORE);
}

#[test]
fn a_truncated_state_file_exits_1_naming_it_and_is_left_untouched() {
    bad_state(
        |p, good| fs::write(p, &good[..good.len() * 3 / 5]).unwrap(),
        "is truncated (line ",
        RESTORE,
    );
}

#[test]
fn a_wrong_type_in_the_header_exits_1_naming_the_field_type_and_is_left_untouched() {
    bad_state(
        |p, good| {
            let text = String::from_utf8(good.to_vec()).unwrap();
            let bad = text.replacen("\"wakes\":1,", "\"wakes\":\"three\",", 1);
            assert_ne!(bad, text);
            fs::write(p, bad).unwrap();
        },
        "is not a valid state document: invalid type: string \"three\", expected u64",
        RESTORE,
    );
}

#[test]
fn a_wrong_type_in_a_file_record_exits_1_on_the_next_wake_and_is_left_untouched() {
    bad_state(
        |p, good| {
            // A state of schema 1 holds its records itself.
            fs::write(p, good).unwrap();
            let text = layout::state_doc(p).to_string();
            let bad = text.replacen("\"evaluations\":1,", "\"evaluations\":[],", 1);
            assert_ne!(bad, text);
            layout::write_single(p, &serde_json::from_str(&bad).unwrap());
        },
        "is not a valid state document: invalid type: sequence, expected u64",
        RESTORE,
    );
}

#[test]
fn a_newer_schema_exits_1_asking_for_an_upgrade_and_is_left_untouched() {
    bad_state(
        |p, good| {
            let text = String::from_utf8(good.to_vec()).unwrap();
            fs::write(p, text.replacen("{\"schema\":2,", "{\"schema\":3,", 1)).unwrap();
        },
        "has schema 3, newer than the 2 this sentinel understands",
        "upgrade sentinel",
    );
}

#[test]
fn a_newer_schema_whose_fields_changed_shape_still_says_upgrade_not_corrupt() {
    bad_state(
        |p, _| fs::write(p, br#"{"schema":7,"wake":"a new shape","files":[1,2]}"#).unwrap(),
        "has schema 7, newer than the 2 this sentinel understands",
        "upgrade sentinel",
    );
}

#[test]
fn a_directory_where_the_state_file_should_be_exits_1_and_nothing_is_written_into_it() {
    bad_state(
        |p, _| {
            fs::create_dir(p).unwrap();
            fs::write(p.join("keep"), b"mine").unwrap();
        },
        "cannot read state file",
        "it is a directory; point --state at a file path",
    );
}

#[test]
fn an_unknown_top_level_field_is_ignored_on_load_and_not_written_back() {
    let readme =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains("**Unknown fields:** ignored on load and not written back."),
        "the README documents what happens to unknown fields"
    );
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let good = String::from_utf8(fs::read(&sb.state).unwrap()).unwrap();
    // One in the header line (read by every tick), one among the body's keys.
    let with_unknown = good
        .replacen(
            "{\"schema\":2,",
            "{\"schema\":2,\"from_the_future\":{\"x\":[1,2]},",
            1,
        )
        .replacen(
            "\n\"backlog\":",
            "\n\"also_from_the_future\":\"y\",\n\"backlog\":",
            1,
        );
    assert_eq!(with_unknown.matches("from_the_future").count(), 2);
    fs::write(&sb.state, &with_unknown).unwrap();

    // A no-op reads the header line and ignores the field.
    let r = report_of(&sb.tick(&at(2), &[]), 0);
    assert_eq!(r["state_written"], false);
    assert_eq!(fs::read_to_string(&sb.state).unwrap(), with_unknown);
    let s = sb.stats();
    assert_eq!(s["wake"]["ticks"], 2);

    // A wake loads it all, and saves without the unknown fields.
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");
    let r = report_of(&sb.tick(&at(4), &[]), 12);
    assert_eq!(r["state_written"], true);
    let saved = fs::read_to_string(&sb.state).unwrap();
    assert!(!saved.contains("from_the_future"), "{saved}");
    let s = sb.stats();
    assert_eq!(s["wake"]["ticks"], 3);
    assert_eq!(s["wake"]["wakes"], 2);
}

#[test]
fn an_unreadable_state_file_exits_1_naming_it_and_is_left_untouched() {
    let probe = Sandbox::new();
    if !permissions_are_ignored(probe.root()) {
        bad_state(
            |p, good| {
                fs::write(p, good).unwrap();
                set_mode(p, 0o000);
            },
            "cannot read state file",
            "check that the file is readable",
        );
        return;
    }
    // Root reads any file whatever its mode: run sentinel as `nobody`
    // instead, so the file really is unreadable to it.
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    set_mode(sb.root(), 0o755);
    let run_dir = sb.state.parent().unwrap().to_path_buf();
    set_mode(&run_dir, 0o777);
    give_lock_to_nobody(&sb.state);
    set_mode(&sb.state, 0o000);
    let before = print_of(&sb.state);
    let named = format!("`{}`", sb.state.display());
    for args in [
        vec!["tick", "--now", "2026-06-16T00:02:00Z", "--repo"],
        vec!["stats", "--json", "--repo"],
    ] {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_sentinel"))
            .args(&args)
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent")
            .output()
            .expect("run setpriv");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: cannot read state file "),
            "{stderr}"
        );
        assert!(stderr.contains(&named), "{stderr}");
        assert!(
            stderr.contains("check that the file is readable"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(print_of(&sb.state), before, "{args:?} touched the state");
    }
    set_mode(&sb.state, 0o600);
}

/// The lock is its owner's (0600): a tick run as `nobody` needs a lock of
/// its own, as a state of its own would have.
fn give_lock_to_nobody(state: &std::path::Path) {
    let lock = crate::util::sidecar(state, ".lock");
    std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
    set_mode(&lock, 0o600);
}

/// `sentinel tick` at `now` as `nobody` (via `setpriv`), for the checks a
/// root process would walk through: git is told the root-owned clone is safe.
fn tick_as_nobody(sb: &Sandbox, now: &str) -> Output {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_sentinel"))
        .args(["tick", "--json", "--now", now, "--path", WATCHED, "--repo"])
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .output()
        .expect("run setpriv (util-linux); install it to run this test as root");
    Output::from(out)
}

#[test]
fn a_read_only_state_directory_at_save_time_exits_1_and_keeps_the_previous_state() {
    let sb = Sandbox::with_files(&FIVE);
    // Root writes into a read-only directory: run that tick as `nobody`.
    let as_root = permissions_are_ignored(sb.root());
    expect_code(&sb.tick(&at(0), &[]), 10);
    let dir = sb.state.parent().unwrap().to_path_buf();
    let before = snapshot(&sb.state);
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");
    if as_root {
        set_mode(sb.root(), 0o755);
        give_lock_to_nobody(&sb.state);
        set_mode(&sb.state, 0o644);
    }
    set_mode(&dir, 0o555);
    let out = if as_root {
        tick_as_nobody(&sb, &at(2))
    } else {
        sb.tick(&at(2), &[])
    };
    set_mode(&dir, 0o755);
    if as_root {
        // The lock is root's again, for root's ticks below.
        std::os::unix::fs::chown(crate::util::sidecar(&sb.state, ".lock"), Some(0), Some(0))
            .unwrap();
    }
    no_panic(&out);
    expect_code(&out, 1);
    let line = out.stderr_line();
    assert!(
        line.starts_with(&format!(
            "error: cannot save state file `{}`",
            sb.state.display()
        )),
        "{line}"
    );
    assert!(line.contains("the previous state was kept, check that the directory is writable"));
    assert_eq!(snapshot(&sb.state), before);
    // Once the directory is writable again the same wake succeeds.
    report_of(&sb.tick(&at(4), &[]), 12);
}

// ---------------------------------------------------------------------------
// 4. Hostile peers: GitLab
// ---------------------------------------------------------------------------

/// A GitLab tick at minute `minute`, recording waits instead of sleeping,
/// with a 5 s request timeout unless `extra` sets one: a peer that hangs
/// ends the tick within its timeouts, never the test.
fn gl_tick(sb: &Sandbox, api: &Api, minute: i64, extra: &[&str]) -> Output {
    let mut run = sb.api_tick_cmd(api, &at(minute)).arg("--fake-sleep");
    if !extra.contains(&"--http-timeout") {
        run = run.args(["--http-timeout", "5"]);
    }
    run.args(extra).output()
}

/// What the fake GitLab itself answers to `url` (with the token): the
/// status, the headers a replay needs, and the body.
fn fetch(url: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut response = agent
        .get(url)
        .header("PRIVATE-TOKEN", TOKEN)
        .call()
        .expect("the fake answers");
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap().to_string()))
        // The fake writes these itself.
        .filter(|(k, _)| !["content-length", "x-request-id", "cache-control"].contains(&k.as_str()))
        .collect();
    let body = response
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()
        .unwrap();
    (status, headers, body)
}

/// The first page of the listing a first run asks for.
fn first_page_url(sb: &Sandbox, gl: &FakeGitLab) -> String {
    format!(
        "{}/projects/group%2Fproject/repository/tree?ref={}&recursive=true&per_page=100&pagination=keyset&path=libs%2Fshared",
        gl.url(),
        sb.repo.head()
    )
}

/// The `<...>` of a `Link: <...>; rel="next"` header.
fn next_of(headers: &[(String, String)]) -> String {
    let link = &headers.iter().find(|(k, _)| k == "link").expect("a Link").1;
    link.trim_start_matches('<')
        .split('>')
        .next()
        .unwrap()
        .to_string()
}

fn fixed(status: u16, headers: Vec<(String, String)>, body: Vec<u8>) -> Reply {
    Reply::Fixed {
        status,
        headers,
        body,
    }
}

/// A first run whose listing failed: no file looked at, the reason in the
/// notes; nothing was learned, so the next tick (with GitLab behaving
/// again) is a first run over all five files.
#[track_caller]
fn listing_failed_then_recovers(sb: &Sandbox, api: &Api, out: Output, why: &str) {
    let r = report_of(&out, 10);
    assert_eq!(paths(&r), Vec::<String>::new(), "{r}");
    let notes = notes(&r);
    assert!(notes.starts_with("listing failed: "), "{notes}");
    assert!(notes.contains(why), "{notes}\nwanted: {why}");
    assert!(!notes.contains(TOKEN));
    let s = sb.stats();
    assert_eq!(
        s["wake"]["last_head"],
        Value::Null,
        "unknown is never unchanged"
    );
    let r = report_of(&gl_tick(sb, api, 2, &[]), 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 5, "{r}");
    assert_eq!(r["pending"], 0);
}

#[test]
fn gitlab_an_html_sign_in_page_instead_of_the_listing_fails_the_listing_and_the_next_tick_starts_over()
 {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    gl.push(Endpoint::Tree, Reply::html(200, "sign-in.html"));
    let out = gl_tick(&sb, &api, 0, &[]);
    listing_failed_then_recovers(
        &sb,
        &api,
        out,
        "GitLab's answer to the tree listing is not the expected JSON (expected value at line 1 column 1; it starts with `<!DOCTYPE html>",
    );
}

#[test]
fn gitlab_a_truncated_listing_page_fails_the_listing_and_the_next_tick_starts_over() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (_, _, body) = fetch(&first_page_url(&sb, &gl));
    gl.push(
        Endpoint::Tree,
        Reply::Truncated {
            status: 200,
            declared: body.len(),
            body: body[..body.len() / 2].to_vec(),
        },
    );
    let out = gl_tick(&sb, &api, 0, &[]);
    listing_failed_then_recovers(&sb, &api, out, "/repository/tree: connection error");
}

/// `body` with the byte at the first `needle` + `offset` replaced by `byte`.
fn poke(body: &[u8], needle: &str, offset: usize, byte: u8) -> Vec<u8> {
    let i = body
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap_or_else(|| panic!("{needle} is not in {}", String::from_utf8_lossy(body)));
    let mut out = body.to_vec();
    out[i + offset] = byte;
    out
}

#[test]
fn gitlab_invalid_utf8_in_a_listed_path_fails_the_listing_and_the_next_tick_starts_over() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (status, headers, body) = fetch(&first_page_url(&sb, &gl));
    let needle = "\"path\":\"libs/shared/a.js\"";
    gl.push(
        Endpoint::Tree,
        fixed(status, headers, poke(&body, needle, 20, 0xFF)),
    );
    let out = gl_tick(&sb, &api, 0, &[]);
    listing_failed_then_recovers(
        &sb,
        &api,
        out,
        "GitLab's answer to the tree listing is not the expected JSON (invalid unicode code point",
    );
}

#[test]
fn gitlab_invalid_utf8_in_a_field_sentinel_does_not_read_is_ignored() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (status, headers, body) = fetch(&first_page_url(&sb, &gl));
    // `name` is not read (the path is): the listing stands.
    let needle = "\"name\":\"a.js\"";
    gl.push(
        Endpoint::Tree,
        fixed(status, headers, poke(&body, needle, 9, 0xFF)),
    );
    let r = report_of(&gl_tick(&sb, &api, 0, &[]), 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 5, "{r}");
    // Nor is a commit's title on the head lookup: a no-op.
    let (status, headers, body) = fetch(&commits_url(&gl));
    gl.push(
        Endpoint::Commits,
        fixed(status, headers, poke(&body, "\"title\":\"", 9, 0xC3)),
    );
    let r = report_of(&gl_tick(&sb, &api, 2, &[]), 0);
    assert_eq!(r["verdict"]["reason"], "none");
}

fn commits_url(gl: &FakeGitLab) -> String {
    format!(
        "{}/projects/group%2Fproject/repository/commits?ref_name=main&per_page=1&path=libs%2Fshared",
        gl.url()
    )
}

#[test]
fn gitlab_invalid_utf8_in_the_head_commit_id_wakes_sha_unavailable() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    report_of(&gl_tick(&sb, &api, 0, &[]), 10);
    let (status, headers, body) = fetch(&commits_url(&gl));
    // A lead byte with no continuation inside the commit id.
    gl.push(
        Endpoint::Commits,
        fixed(status, headers, poke(&body, "\"id\":\"", 8, 0xC3)),
    );
    let r = report_of(&gl_tick(&sb, &api, 2, &[]), 11);
    let error = r["verdict"]["detail"]["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "GitLab's answer to the head lookup is not the expected JSON (invalid unicode code point"
        ),
        "{error}"
    );
    // The listing still works: every file is known and reused.
    assert_eq!(r["files"].as_array().unwrap().len(), 5);
    assert!(files(&r).iter().all(|f| f.1 == "reused"), "{r}");
    assert_eq!(sb.stats()["wake"]["last_head"], sb.repo.head());
}

/// The first listing page as the fake serves it, plus one directory entry
/// carrying `pad` bytes of padding: still valid JSON, still the same files.
fn padded_page(sb: &Sandbox, gl: &FakeGitLab, pad: usize) -> Reply {
    let (status, headers, body) = fetch(&first_page_url(sb, gl));
    let mut page: Value = serde_json::from_slice(&body).unwrap();
    let mut dir = page[0].clone();
    dir["type"] = json!("tree");
    dir["mode"] = json!("040000");
    dir["path"] = json!(format!("{WATCHED}/padding"));
    dir["name"] = json!("x".repeat(pad));
    page.as_array_mut().unwrap().push(dir);
    fixed(status, headers, serde_json::to_vec(&page).unwrap())
}

/// `tick` over the fake GitLab: the output and its peak RSS in KiB.
fn gl_tick_with_peak_rss(sb: &Sandbox, api: &Api, minute: i64) -> (Output, u64) {
    let now = at(minute);
    let args: Vec<std::ffi::OsString> = [
        "tick",
        "--json",
        "--fake-sleep",
        "--http-timeout",
        "5",
        "--now",
        &now,
        "--source",
        "gitlab",
        "--gitlab-url",
        &api.url,
        "--project",
        PROJECT,
        "--branch",
        &api.branch,
        "--path",
        WATCHED,
        "--state",
    ]
    .iter()
    .map(Into::into)
    .chain([sb.state.clone().into_os_string()])
    .collect();
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    with_peak_rss(sb, &refs, &[("SENTINEL_GITLAB_TOKEN", TOKEN)])
}

#[test]
fn gitlab_a_10_mb_listing_page_is_read_and_a_40_mb_one_is_refused_unread() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);

    // 40 MB: over the 32 MB limit for a JSON answer, refused by its length.
    gl.push(Endpoint::Tree, padded_page(&sb, &gl, 40 << 20));
    let (out, peak) = gl_tick_with_peak_rss(&sb, &api, 0);
    let r = report_of(&out, 10);
    assert_eq!(paths(&r), Vec::<String>::new());
    assert_eq!(
        notes(&r),
        format!(
            "listing failed: GitLab announced {} bytes for the tree listing, over the limit of 33554432 bytes; not read",
            answer_len(&sb, &gl, 40 << 20)
        )
    );
    // The documented bound (docs/reliability.md): refused unread, under 24 MiB.
    eprintln!("a 40 MB listing page, refused: peak RSS {peak} KiB");
    assert!(peak < 24 * 1024, "peak RSS {peak} KiB: the 40 MB were read");

    // 10 MB: a legitimate (if odd) answer, read and used.
    gl.push(Endpoint::Tree, padded_page(&sb, &gl, 10 << 20));
    let (out, peak) = gl_tick_with_peak_rss(&sb, &api, 2);
    let r = report_of(&out, 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 5, "{}", notes(&r));
    assert_eq!(r["requests_by_kind"]["list"], 1);
    eprintln!("a 10 MB listing page: peak RSS {peak} KiB");
    assert!(peak < 128 * 1024, "peak RSS {peak} KiB");
    report_of(&gl_tick(&sb, &api, 4, &[]), 0);
}

/// The byte length of `padded_page(pad)`.
fn answer_len(sb: &Sandbox, gl: &FakeGitLab, pad: usize) -> usize {
    match padded_page(sb, gl, pad) {
        Reply::Fixed { body, .. } => body.len(),
        _ => unreachable!(),
    }
}

#[test]
fn gitlab_a_listing_slower_than_http_timeout_fails_the_listing_within_the_timeout() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    gl.push(
        Endpoint::Tree,
        Reply::Slow {
            delay: Duration::from_secs(5),
            then: None,
        },
    );
    let started = Instant::now();
    let out = gl_tick(&sb, &api, 0, &["--http-timeout", "1"]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    listing_failed_then_recovers(&sb, &api, out, "/repository/tree: timed out");
}

#[test]
fn gitlab_a_redirect_of_a_file_read_to_another_host_is_not_followed_and_nothing_is_saved() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let other = FakeGitLab::start(&sb.repo.root);
    other.require_token(None);
    let api = Api::new(&gl);
    gl.push(
        Endpoint::BlobRaw,
        Reply::Redirect {
            status: 302,
            origin: other.origin(),
        },
    );
    let out = gl_tick(&sb, &api, 0, &[]);
    no_panic(&out);
    expect_code(&out, 1);
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr_line(),
        format!(
            "error: GitLab redirected to another host ({}); the token is not sent there: set SENTINEL_GITLAB_URL to the new address (the state was not saved; only its lock `{}` was written)",
            other.origin(),
            sb.lock().display()
        )
    );
    assert_eq!(other.requests().len(), 0, "the redirect was followed");
    assert!(!sb.state.exists(), "nothing was saved");

    // The same server under another name is another host too.
    gl.push(
        Endpoint::Tree,
        Reply::Redirect {
            status: 301,
            origin: gl.other_host_origin(),
        },
    );
    gl.clear_requests();
    let out = gl_tick(&sb, &api, 2, &[]);
    no_panic(&out);
    expect_code(&out, 1);
    assert!(
        out.stderr_line().starts_with(&format!(
            "error: GitLab redirected to another host ({}); the token is not sent there",
            gl.other_host_origin()
        )),
        "{}",
        out.stderr
    );
    for req in gl.requests() {
        assert!(
            req.header("host")
                .is_some_and(|h| h.starts_with("127.0.0.1:")),
            "followed to {:?}",
            req.header("host")
        );
    }
    assert!(!sb.state.exists(), "nothing was saved");
}

/// 250 files: three listing pages of 100, 100 and 50.
fn two_hundred_and_fifty() -> (Sandbox, Vec<String>) {
    let names: Vec<String> = (0..250).map(|i| format!("m{i:03}.js")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let sb = Sandbox::with_files(&refs);
    let all = names.iter().map(|n| format!("{WATCHED}/{n}")).collect();
    (sb, all)
}

#[test]
fn gitlab_a_listing_page_without_its_link_header_ends_the_listing_there() {
    let (sb, all) = two_hundred_and_fifty();
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (s1, h1, b1) = fetch(&first_page_url(&sb, &gl));
    let (s2, h2, b2) = fetch(&next_of(&h1));
    gl.clear_requests();
    gl.push(Endpoint::Tree, fixed(s1, h1, b1));
    let h2: Vec<_> = h2.into_iter().filter(|(k, _)| k != "link").collect();
    gl.push(Endpoint::Tree, fixed(s2, h2, b2));
    let r = report_of(&gl_tick(&sb, &api, 0, &["--max-reads", "0"]), 10);
    // GitLab's keyset pagination has no other sign of a next page: the
    // listing ends with page 2, and the 50 files of page 3 stay unseen.
    assert_eq!(r["requests_by_kind"]["list"], 2);
    assert_eq!(paths(&r), all[..200].to_vec());
    assert_eq!(gl.queued(), 0);
}

#[test]
fn gitlab_two_link_headers_are_read_as_one_list_and_the_listing_goes_on() {
    let (sb, all) = two_hundred_and_fifty();
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (s1, h1, b1) = fetch(&first_page_url(&sb, &gl));
    let next = next_of(&h1);
    let mut headers: Vec<_> = h1.into_iter().filter(|(k, _)| k != "link").collect();
    headers.push((
        "Link".into(),
        format!("<{}>; rel=\"first\"", first_page_url(&sb, &gl)),
    ));
    headers.push(("Link".into(), format!("<{next}>; rel=\"next\"")));
    gl.clear_requests();
    gl.push(Endpoint::Tree, fixed(s1, headers, b1));
    let r = report_of(&gl_tick(&sb, &api, 0, &["--max-reads", "0"]), 10);
    assert_eq!(r["requests_by_kind"]["list"], 3, "{}", notes(&r));
    assert_eq!(paths(&r), all);
}

#[test]
fn gitlab_a_listing_whose_next_page_links_back_to_itself_ends_instead_of_looping() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let url = first_page_url(&sb, &gl);
    // An empty page whose rel="next" is the page itself, again and again
    // (1,000 times here; a broken server would go on for ever).
    let looping = fixed(
        200,
        vec![
            ("Content-Type".into(), "application/json".into()),
            ("Link".into(), format!("<{url}>; rel=\"next\"")),
        ],
        b"[]".to_vec(),
    );
    gl.push_n(Endpoint::Tree, 1000, looping);
    let out = gl_tick(&sb, &api, 0, &[]);
    let r = report_of(&out, 10);
    let pages = r["requests_by_kind"]["list"].as_u64().unwrap();
    assert!(
        pages <= 3,
        "{pages} requests for one listing that went round in a circle"
    );
    assert_eq!(paths(&r), Vec::<String>::new());
    assert!(notes(&r).starts_with("listing failed: "), "{}", notes(&r));
}

/// 150 files: two listing pages of 100 and 50.
fn one_hundred_and_fifty() -> Sandbox {
    let names: Vec<String> = (0..150).map(|i| format!("m{i:03}.js")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    Sandbox::with_files(&refs)
}

/// How many files the state remembers.
fn tracked(sb: &Sandbox) -> u64 {
    sb.stats()["novelty"]["tracked_files"].as_u64().unwrap()
}

/// The first listing page as GitLab serves it, with its `Link: rel="next"`
/// pointed at `origin`; and that link.
fn first_page_linking_to(sb: &Sandbox, gl: &FakeGitLab, origin: &str) -> (Reply, String) {
    let (status, headers, body) = fetch(&first_page_url(sb, gl));
    let next = next_of(&headers).replacen(&gl.origin(), origin, 1);
    assert!(next.starts_with(origin), "{next}");
    let mut headers: Vec<_> = headers.into_iter().filter(|(k, _)| k != "link").collect();
    headers.push(("Link".into(), format!("<{next}>; rel=\"next\"")));
    (fixed(status, headers, body), next)
}

/// A state that knows all 150 files; then a tick whose head lookup fails
/// (so the tree is listed) and whose first page links to `origin`: all 150
/// files are kept, a note names the link, and the other origin is never
/// asked (the token goes nowhere else).
#[track_caller]
fn a_next_link_to(origin: impl Fn(&FakeGitLab) -> String) {
    let sb = one_hundred_and_fifty();
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    report_of(&gl_tick(&sb, &api, 0, &["--max-reads", "0"]), 10);
    assert_eq!(tracked(&sb), 150);

    let (page, next) = first_page_linking_to(&sb, &gl, &origin(&gl));
    gl.push(Endpoint::Commits, Reply::error(500, "500.json"));
    gl.push(Endpoint::Tree, page);
    gl.clear_requests();
    let r = report_of(&gl_tick(&sb, &api, 2, &[]), 11);
    assert_eq!(r["requests_by_kind"]["list"], 1);
    let notes = notes(&r);
    assert!(notes.contains("the listing is incomplete: "), "{notes}");
    assert!(notes.contains(&next), "{notes}\ndoes not name {next}");
    assert!(notes.contains("no file was forgotten"), "{notes}");
    assert!(!notes.contains(TOKEN));
    assert_eq!(tracked(&sb), 150, "a file that was not seen was forgotten");
    let home = gl.origin().replace("http://", "");
    for request in gl.requests() {
        assert_eq!(request.header("host"), Some(home.as_str()), "{request:?}");
    }
    assert_eq!(gl.queued(), 0);
}

#[test]
fn a_next_link_to_another_origin_forgets_nothing() {
    a_next_link_to(FakeGitLab::other_host_origin);
}

#[test]
fn a_next_link_to_https_on_the_same_host_and_port_is_another_origin() {
    a_next_link_to(|gl| gl.origin().replace("http://", "https://"));
}

/// A state that knows all 150 files; one file of the first page changes,
/// the head lookup fails (so the tree is listed), and the second page is
/// answered by `page_two`: the first page is learned, nothing is forgotten,
/// and once GitLab is back the tick settles.
#[track_caller]
fn a_second_page(page_two: impl Fn(&Sandbox, &FakeGitLab) -> Reply, why: &str) {
    let sb = one_hundred_and_fifty();
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    report_of(&gl_tick(&sb, &api, 0, &["--max-reads", "0"]), 10);
    let changed = format!("{WATCHED}/m000.js");
    sb.repo.write(&changed, "// m000.js\nmodule.exports = 2;\n");
    let head = sb.repo.commit("change m000.js");

    let (status, headers, body) = fetch(&first_page_url(&sb, &gl));
    let second = page_two(&sb, &gl);
    gl.push(Endpoint::Commits, Reply::error(500, "500.json"));
    gl.push(Endpoint::Tree, fixed(status, headers, body));
    gl.push(Endpoint::Tree, second);
    let r = report_of(&gl_tick(&sb, &api, 2, &[]), 11);
    assert_eq!(r["requests_by_kind"]["list"], 2);
    let notes = notes(&r);
    let wanted = format!("the listing is incomplete: page 2 failed: {why}");
    assert!(notes.contains(&wanted), "{notes}\nwanted: {wanted}");
    assert_eq!(tracked(&sb), 150, "a file that was not seen was forgotten");
    // What the first page showed was learned: the changed file was judged.
    assert_eq!(entry(&r, &changed)["novelty"], "changed", "{r}");

    // GitLab is back: the head moved, one compare, and the tick settles.
    let r = report_of(&gl_tick(&sb, &api, 4, &[]), 12);
    assert_eq!(r["fresh_evaluations"], 0, "{r}");
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
    report_of(&gl_tick(&sb, &api, 6, &[]), 0);
}

#[test]
fn a_failed_listing_page_forgets_nothing() {
    a_second_page(
        |_, _| Reply::error(500, "500.json"),
        "GitLab answered the tree listing with 500 (Internal Server Error)",
    );
}

#[test]
fn a_listing_page_cut_short_forgets_nothing() {
    a_second_page(
        |sb, gl| {
            let (_, headers, _) = fetch(&first_page_url(sb, gl));
            let (_, _, body) = fetch(&next_of(&headers));
            Reply::Truncated {
                status: 200,
                declared: body.len(),
                body: body[..body.len() / 2].to_vec(),
            }
        },
        "GET ",
    );
}

#[test]
fn an_incomplete_first_listing_is_listed_again_until_it_is_complete() {
    let sb = one_hundred_and_fifty();
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    let (page, _) = first_page_linking_to(&sb, &gl, &gl.other_host_origin());
    gl.push(Endpoint::Tree, page.clone());
    let r = report_of(&gl_tick(&sb, &api, 0, &["--max-reads", "0"]), 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 100);
    assert_eq!(tracked(&sb), 100);
    assert_eq!(sb.stats()["wake"]["last_head"], Value::Null, "not settled");

    // The same cut again: another first run, and the files seen are reused
    // without a read.
    gl.push(Endpoint::Tree, page);
    let r = report_of(&gl_tick(&sb, &api, 2, &["--max-reads", "0"]), 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 100);
    assert_eq!(
        (r["file_reads"].as_u64(), r["fresh_evaluations"].as_u64()),
        (Some(0), Some(0))
    );

    // A complete listing settles the tick; the next one is a no-op.
    let r = report_of(&gl_tick(&sb, &api, 4, &["--max-reads", "0"]), 10);
    assert_eq!(r["files"].as_array().unwrap().len(), 150);
    assert_eq!(r["fresh_evaluations"], 50);
    assert_eq!(tracked(&sb), 150);
    assert_eq!(sb.stats()["wake"]["last_head"], sb.repo.head().as_str());
    report_of(&gl_tick(&sb, &api, 6, &[]), 0);
}

#[test]
fn gitlab_two_retry_after_headers_on_a_listing_429_wait_the_first_and_retry() {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    gl.push(
        Endpoint::Tree,
        fixed(
            429,
            vec![
                ("Content-Type".into(), "text/plain".into()),
                ("Retry-After".into(), "1".into()),
                ("Retry-After".into(), "120".into()),
            ],
            b"Retry later\n".to_vec(),
        ),
    );
    let r = report_of(&gl_tick(&sb, &api, 0, &[]), 10);
    assert_eq!(r["slept_ms"], json!([1000]), "{r}");
    assert_eq!(r["requests_by_kind"]["list"], 2);
    assert_eq!(r["files"].as_array().unwrap().len(), 5);
    assert_eq!(
        notes(&r),
        "advisor off: set OPENAI_API_KEY to have a model judge the needs_review files"
    );
}

#[test]
fn gitlab_a_sign_in_page_served_as_a_file_s_content_is_not_taken_for_it() {
    use sha2::{Digest, Sha256};
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    let api = Api::new(&gl);
    // A proxy answers the first content read with its sign-in page, 200.
    gl.push(Endpoint::BlobRaw, Reply::html(200, "sign-in.html"));
    let r = report_of(&gl_tick(&sb, &api, 0, &["--all-pending"]), 10);
    let first = format!("{WATCHED}/a.js");
    let real: String = Sha256::digest(plain_js("a.js").as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Either the read failed (the file waits for a later tick) or the bytes
    // judged are the file's: never the page's.
    let f = entry(&r, &first);
    if f["outcome"] != "pending" {
        let fp = f["fingerprint"].as_str().unwrap();
        assert_eq!(fp.split('|').next().unwrap(), real, "{f}");
    }
    let r = report_of(
        &gl_tick(&sb, &api, 2, &[]),
        if f["outcome"] == "pending" { 14 } else { 0 },
    );
    let s = sb.stats();
    assert_eq!(s["novelty"]["tracked_files"], 5, "{r}");
    let e = {
        let out = sb
            .sentinel(["explain", &first, "--json", "--source", "gitlab"])
            .args(["--gitlab-url", &api.url, "--project", PROJECT])
            .args(["--branch", "main", "--path", WATCHED])
            .arg("--state")
            .arg(&sb.state)
            .env("SENTINEL_GITLAB_TOKEN", TOKEN)
            .output();
        json_of(&out)
    };
    assert_eq!(
        e["remembered_fingerprint"]
            .as_str()
            .unwrap()
            .split('|')
            .next(),
        Some(real.as_str()),
        "{e}"
    );
}

// ---------------------------------------------------------------------------
// 4. Hostile peers: the model provider
// ---------------------------------------------------------------------------

const AUTH: &str = "src/auth.js";
const GUIDE: &str = "docs/guide.md";

/// One risky file and a doc; `reply` answers every call; a first run at
/// 10:00 (with `extra` flags) that must exit 10. Returns the report of
/// `AUTH`, the report, and what the provider saw.
fn first_run_answered_by(reply: openai::Reply, extra: &[&str]) -> (Sandbox, FakeOpenAi, Value) {
    let sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.write(GUIDE, "# guide\n");
    sb.repo.commit("two files");
    let ai = FakeOpenAi::start();
    ai.answer_always(reply);
    let mut run = sb.advisor_tick_cmd(&ai, &at(600));
    if !extra.contains(&"--llm-timeout") {
        run = run.args(["--llm-timeout", "5"]);
    }
    let r = report_of(&run.args(extra).output(), 10);
    assert_eq!(entry(&r, GUIDE)["outcome"], "local_skip");
    (sb, ai, r)
}

/// The circuit `stats` shows at 10:00, as `[class, until]`, or null.
fn circuit_at_ten(sb: &Sandbox) -> Value {
    let c = &sb.stats_at(&at(600), 2.0)["llm"]["circuit"];
    if c.is_null() {
        Value::Null
    } else {
        json!([c["class"], c["until"]])
    }
}

#[test]
fn advisor_an_html_page_with_200_is_a_bad_response_after_two_attempts() {
    let html = openai::Reply::Fixed {
        status: 200,
        headers: vec![("Content-Type".into(), "text/html".into())],
        body: b"<!DOCTYPE html><html><body>Welcome to the proxy</body></html>".to_vec(),
    };
    let (sb, ai, r) = first_run_answered_by(html, &[]);
    assert_eq!(ai.posts(), 2);
    assert_eq!(r["slept_ms"], json!([1000]));
    let f = entry(&r, AUTH);
    assert_eq!(f["outcome"], "bad_response");
    assert_eq!(
        f["reason"],
        "bad_response after 2 attempts: the response is not JSON (expected value at line 1 column 1)"
    );
    assert_eq!(circuit_at_ten(&sb), Value::Null);
}

#[test]
fn advisor_an_html_error_page_with_502_is_a_server_error_and_holds_10_minutes() {
    let html = openai::Reply::Fixed {
        status: 502,
        headers: vec![("Content-Type".into(), "text/html".into())],
        body: b"<html><head><title>502 Bad Gateway</title></head></html>".to_vec(),
    };
    let (sb, ai, r) = first_run_answered_by(html, &[]);
    assert_eq!(ai.posts(), 3);
    assert_eq!(r["slept_ms"], json!([2000, 4000]));
    assert_eq!(
        entry(&r, AUTH)["reason"],
        "server after 3 attempts: HTTP 502; provider held until 2026-06-16T10:10:00+00:00"
    );
    assert_eq!(
        circuit_at_ten(&sb),
        json!(["server", "2026-06-16T10:10:00Z"])
    );
}

#[test]
fn advisor_a_body_cut_inside_a_utf8_character_is_a_network_failure() {
    let answer = json!({"action": "SKIP", "reason": "déjà vu, rien à changer", "findings": []});
    let body = openai::completion(&answer.to_string(), None)
        .to_string()
        .into_bytes();
    let cut = body.windows(2).position(|w| w == "é".as_bytes()).unwrap() + 1;
    let (sb, ai, r) = first_run_answered_by(
        openai::Reply::Truncated {
            status: 200,
            declared: body.len(),
            body: body[..cut].to_vec(),
        },
        &[],
    );
    assert_eq!(ai.posts(), 3);
    assert_eq!(r["slept_ms"], json!([2000, 4000]));
    let why = entry(&r, AUTH)["reason"].as_str().unwrap().to_string();
    assert!(why.starts_with("network after 3 attempts: "), "{why}");
    assert_eq!(
        circuit_at_ten(&sb),
        json!(["network", "2026-06-16T10:05:00Z"])
    );
}

#[test]
fn advisor_invalid_utf8_in_the_answer_is_a_bad_response_never_a_decision() {
    let body = openai::completion("PLACEHOLDER", None).to_string();
    let mut bytes = body.into_bytes();
    let i = bytes.windows(11).position(|w| w == b"PLACEHOLDER").unwrap();
    bytes.splice(i..i + 11, b"SKIP \xff\xfe".iter().copied());
    let (sb, ai, r) = first_run_answered_by(
        openai::Reply::Fixed {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: bytes,
        },
        &[],
    );
    assert_eq!(ai.posts(), 2);
    let f = entry(&r, AUTH);
    assert_eq!(f["outcome"], "bad_response");
    assert!(
        f["reason"].as_str().unwrap().starts_with(
            "bad_response after 2 attempts: the response is not JSON (invalid unicode code point"
        ),
        "{f}"
    );
    assert_eq!(circuit_at_ten(&sb), Value::Null);
    // Not remembered as a decision: the next wake asks again.
    ai.answer_always(openai::Reply::skip("fine"));
    sb.repo.write(GUIDE, "# guide, edited\n");
    sb.repo.commit("edit guide");
    let r = report_of(&sb.advisor_tick_cmd(&ai, &at(610)).output(), 12);
    assert_eq!(entry(&r, AUTH)["outcome"], "llm_skip");
}

#[test]
fn advisor_a_10_mb_answer_is_over_the_4_mb_limit_and_a_bad_response() {
    let padding = "x".repeat(10 << 20);
    let answer = json!({"action": "SKIP", "reason": padding, "findings": []});
    let (sb, ai, r) = first_run_answered_by(
        openai::Reply::json(200, &openai::completion(&answer.to_string(), None)),
        &[],
    );
    assert_eq!(ai.posts(), 2);
    assert_eq!(r["slept_ms"], json!([1000]));
    assert_eq!(
        entry(&r, AUTH)["reason"],
        "bad_response after 2 attempts: the response is over 4194304 bytes"
    );
    assert_eq!(circuit_at_ten(&sb), Value::Null);
    let state = fs::metadata(&sb.state).unwrap().len();
    assert!(
        state < 64 * 1024,
        "the answer did not land in the state: {state} bytes"
    );
}

/// A server on 127.0.0.1 that answers every request at once with a head
/// announcing a large JSON body, then trickles that body one byte every
/// 100 ms (at most for 30 s). Stops when dropped.
struct Trickle {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    accept: Option<JoinHandle<()>>,
}

impl Trickle {
    fn start() -> Trickle {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), connections.clone());
        let accept = thread::spawn(move || {
            let mut served = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        let flag = flag.clone();
                        served.push(thread::spawn(move || trickle(stream, &flag)));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(10)),
                }
            }
            for t in served {
                let _ = t.join();
            }
        });
        Trickle {
            addr,
            stop,
            connections,
            accept: Some(accept),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn trickle(mut stream: TcpStream, stop: &AtomicBool) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(5);
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && Instant::now() < until {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
    let body = br#"{"choices":[{"message":{"content":"{\"action\":\"SKIP\",\"reason\":\"slow\",\"findings\":[]}"}}]}"#;
    let _ = stream.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    for byte in body.iter().cycle().take(300) {
        if stop.load(Ordering::SeqCst) || stream.write_all(&[*byte]).is_err() {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let _ = stream.shutdown(Shutdown::Both);
}

#[test]
fn advisor_an_answer_that_trickles_in_is_cut_by_llm_timeout_twice_then_held() {
    let sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("one file");
    let slow = Trickle::start();
    let started = Instant::now();
    let out = sb
        .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
        .args(["--llm-url", &slow.url(), "--llm-timeout", "1"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", openai::KEY)
        .output();
    let took = started.elapsed();
    let r = report_of(&out, 10);
    assert!(
        took < Duration::from_secs(8),
        "two 1 s attempts took {took:?}"
    );
    assert_eq!(slow.connections.load(Ordering::SeqCst), 2);
    assert_eq!(r["llm_calls"], 2);
    assert_eq!(r["slept_ms"], json!([1000]));
    assert_eq!(
        entry(&r, AUTH)["reason"],
        "timeout after 2 attempts: the request timed out; provider held until 2026-06-16T10:05:00+00:00"
    );
    assert_eq!(
        circuit_at_ten(&sb),
        json!(["timeout", "2026-06-16T10:05:00Z"])
    );
}

// ---------------------------------------------------------------------------
// 5. Hostile repositories (git source)
// ---------------------------------------------------------------------------

/// The JSON of a command that must succeed without panicking.
#[track_caller]
fn json_of(out: &Output) -> Value {
    no_panic(out);
    expect_code(out, 0);
    out.json()
}

/// `sentinel explain FILE --json` for the git source, which must succeed.
#[track_caller]
fn explain_ok(sb: &Sandbox, file: &str) -> Value {
    json_of(&sb.explain(file, true))
}

#[test]
fn binary_files_are_fingerprinted_and_judged_like_any_other_and_the_next_tick_is_a_noop() {
    let sb = Sandbox::new();
    let mut rng = XorShift(0xB1A5);
    let random: Vec<u8> = (0..8192).map(|_| rng.next() as u8).collect();
    sb.repo.write(&format!("{WATCHED}/random.bin"), &random);
    // NUL bytes, invalid UTF-8 and a relative import in a source file.
    sb.repo.write(
        &format!("{WATCHED}/nul.js"),
        b"const a = 1;\0\0\0\nconst b = require('./a');\n\xff\xfe\0",
    );
    sb.repo.write(&format!("{WATCHED}/a.js"), plain_js("a.js"));
    sb.repo.commit("binary files");

    let r = report_of(&sb.tick(&at(0), &["--batch", "0"]), 10);
    assert_eq!(
        files(&r),
        [
            ("a.js", "needs_review"),
            ("nul.js", "needs_review"),
            ("random.bin", "local_skip"),
        ]
        .map(|(f, o)| (
            format!("{WATCHED}/{f}"),
            o.to_string(),
            "first-seen".to_string()
        ))
    );
    for f in r["files"].as_array().unwrap() {
        let fp = f["fingerprint"].as_str().unwrap();
        assert_eq!(fp.split('|').count(), 9, "{fp}");
    }
    // The import among the binary noise was found and resolved.
    let nul = entry(&r, &format!("{WATCHED}/nul.js"));
    assert!(
        !nul["fingerprint"].as_str().unwrap().ends_with("|deps:-"),
        "{nul}"
    );
    assert_eq!(r["file_reads"], 3);

    report_of(&sb.tick(&at(2), &[]), 0);
    let e = explain_ok(&sb, &format!("{WATCHED}/nul.js"));
    assert!(
        e["verdict"].as_str().unwrap().starts_with("unchanged"),
        "{e}"
    );
}

#[test]
fn binary_content_reaches_the_model_as_valid_json_and_gets_an_answer() {
    let sb = Sandbox::new();
    let mut bytes = b"// auth\n\0\x01\x02".to_vec();
    let mut rng = XorShift(7);
    bytes.extend((0..2048).map(|_| rng.next() as u8));
    sb.repo.write(AUTH, &bytes);
    sb.repo.commit("binary auth");
    let ai = FakeOpenAi::start();
    ai.answer_always(openai::Reply::skip("binary; nothing to review"));
    let r = report_of(&sb.advisor_tick_cmd(&ai, &at(600)).output(), 10);
    assert_eq!(entry(&r, AUTH)["outcome"], "llm_skip");
    let sent = ai.requests()[0].json();
    let user = sent["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains('\u{FFFD}'),
        "invalid bytes are replaced, not dropped"
    );
    assert!(user.contains("// auth\n\0\u{1}\u{2}"), "{user:?}");
}

#[test]
fn a_100_mb_file_is_too_large_fingerprinted_by_its_content_id_never_read_nor_sent() {
    const SIZE: u64 = 100 << 20;
    let sb = Sandbox::new();
    let huge = "src/huge.js";
    sb.repo.write(huge, b"");
    fs::File::options()
        .write(true)
        .open(sb.repo.root.join(huge))
        .unwrap()
        .set_len(SIZE)
        .unwrap();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("a sparse 100 MB file");
    let blob = sb.repo.blob(huge);
    let ai = FakeOpenAi::start();
    ai.answer_always(openai::Reply::skip("fine"));

    let now = at(600);
    let url = ai.base_url();
    let flags = [
        "tick",
        "--json",
        "--fake-sleep",
        "--now",
        &now,
        "--llm-url",
        &url,
        "--batch",
        "0",
    ];
    let args: Vec<&std::ffi::OsStr> = flags
        .iter()
        .map(std::ffi::OsStr::new)
        .chain([
            std::ffi::OsStr::new("--repo"),
            sb.repo.root.as_os_str(),
            std::ffi::OsStr::new("--state"),
            sb.state.as_os_str(),
        ])
        .collect();
    let (out, peak) = with_peak_rss(&sb, &args, &[("OPENAI_API_KEY", openai::KEY)]);
    let r = report_of(&out, 10);
    let f = entry(&r, huge);
    assert_eq!(f["outcome"], "too_large");
    assert_eq!(
        f["reason"],
        format!("{SIZE} bytes is over --max-file-bytes 65536; not sent to the model")
    );
    let fp = f["fingerprint"].as_str().unwrap();
    assert_eq!(
        fp.split('|').next().unwrap(),
        &blob[..16],
        "fingerprinted by id"
    );
    assert_eq!(r["file_reads"], 1, "only auth.js was read");
    assert_eq!(ai.posts(), 1, "only auth.js was sent");
    assert_eq!(entry(&r, AUTH)["outcome"], "llm_skip");
    // The documented bound (docs/reliability.md): never read, under 24 MiB
    // (the debug binary's own pages are about 14 MiB of it).
    eprintln!("a 100 MB file: peak RSS {peak} KiB");
    assert!(
        peak < 24 * 1024,
        "peak RSS {peak} KiB: the 100 MB file was read"
    );
    let r = report_of(&sb.advisor_tick_cmd(&ai, &at(602)).output(), 0);
    assert_eq!(r["requests"], 1);
}

#[test]
fn file_names_with_a_newline_or_invalid_utf8_are_watched_under_a_lossy_name() {
    let sb = Sandbox::new();
    let dir = sb.repo.root.join(WATCHED);
    fs::create_dir_all(&dir).unwrap();
    let named = |bytes: &[u8]| dir.join(std::ffi::OsStr::from_bytes(bytes));
    fs::write(named(b"new\nline.js"), plain_js("newline")).unwrap();
    fs::write(named(b"tab\there.js"), plain_js("tab")).unwrap();
    fs::write(named(b"bad\xff.js"), plain_js("ff")).unwrap();
    // Lossily the same name as the one above: the two share one record.
    fs::write(named(b"bad\xfe.js"), plain_js("fe")).unwrap();
    sb.repo.commit("odd names");

    let out = sb.tick(&at(0), &["--batch", "0"]);
    let r = report_of(&out, 10);
    out.stderr_line();
    let lossy = format!("{WATCHED}/bad\u{FFFD}.js");
    assert_eq!(
        paths(&r),
        [
            lossy.clone(),
            format!("{WATCHED}/new\nline.js"),
            format!("{WATCHED}/tab\there.js"),
        ]
    );
    assert!(files(&r).iter().all(|f| f.1 == "needs_review"), "{r}");
    assert_eq!(r["fresh_evaluations"], 3);
    let e = explain_ok(&sb, &format!("{WATCHED}/new\nline.js"));
    assert!(
        e["verdict"].as_str().unwrap().starts_with("unchanged"),
        "{e}"
    );

    report_of(&sb.tick(&at(2), &[]), 0);
    // A change to either invalid name is a change to the shared record.
    fs::write(named(b"bad\xfe.js"), "// fe, edited\n").unwrap();
    sb.repo.commit("edit fe");
    let out = sb.tick(&at(4), &[]);
    let r = report_of(&out, 12);
    out.stderr_line();
    assert_eq!(paths(&r), [lossy]);
    report_of(&sb.tick(&at(6), &[]), 0);
}

#[test]
fn symlinks_and_submodules_are_not_watched_and_never_followed() {
    let sb = Sandbox::new();
    let dir = sb.repo.root.join(WATCHED);
    sb.repo.write(&format!("{WATCHED}/a.js"), plain_js("a.js"));
    std::os::unix::fs::symlink("a.js", dir.join("link.js")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("passwd.js")).unwrap();
    sb.repo.git(&["add", "-A"]);
    let sub = sb.repo.git(&["hash-object", "-w", "--stdin"]);
    // A gitlink: what a submodule leaves in its parent's tree.
    sb.repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{sub},{WATCHED}/sub"),
    ]);
    sb.repo.git(&["commit", "-q", "-m", "links"]);
    let tree = sb.repo.git(&["ls-tree", "-r", "HEAD"]);
    assert!(
        tree.contains("120000 blob") && tree.contains("160000 commit"),
        "{tree}"
    );

    let r = report_of(&sb.tick(&at(0), &["--batch", "0"]), 10);
    assert_eq!(paths(&r), [format!("{WATCHED}/a.js")]);
    assert_eq!(r["file_reads"], 1);
    report_of(&sb.tick(&at(2), &[]), 0);

    // Added on a repo_changed wake: still not watched.
    std::os::unix::fs::symlink("a.js", dir.join("link2.js")).unwrap();
    sb.repo.write(&format!("{WATCHED}/b.js"), plain_js("b.js"));
    sb.repo.git(&["add", "-A"]);
    sb.repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{sub},{WATCHED}/sub2"),
    ]);
    sb.repo.git(&["commit", "-q", "-m", "more links"]);
    let r = report_of(&sb.tick(&at(4), &[]), 12);
    assert_eq!(paths(&r), [format!("{WATCHED}/b.js")]);
    assert_eq!(sb.stats()["novelty"]["tracked_files"], 2);
}

/// `git ARGS` in the sandbox's repository with `input` on stdin; stdout.
fn git_with_input(sb: &Sandbox, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(out.status.success(), "git {args:?} failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// One commit on `main` with `count` files `libs/shared/big/fNNNNN.js`
/// (1,000 distinct contents), built from objects rather than a checkout.
fn one_big_directory(count: usize) -> Sandbox {
    const DISTINCT: usize = 1000;
    let sb = Sandbox::new();
    let mut blobs = Vec::new();
    for i in 0..DISTINCT {
        let content = format!("// content {i}\nmodule.exports = {i};\n");
        write!(
            blobs,
            "blob\nmark :{}\ndata {}\n{content}\n",
            i + 1,
            content.len()
        )
        .unwrap();
    }
    let marks = sb.root().join("marks");
    let export = format!("--export-marks={}", marks.display());
    git_with_input(&sb, &["fast-import", "--quiet", &export], &blobs);
    let ids: Vec<String> = fs::read_to_string(&marks)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1).unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), DISTINCT);
    let mut listing = String::new();
    for i in 0..count {
        listing.push_str(&format!("100644 blob {}\tf{i:05}.js\n", ids[i % DISTINCT]));
    }
    let mut tree = git_with_input(&sb, &["mktree"], listing.as_bytes());
    for dir in ["big", "shared", "libs"] {
        tree = git_with_input(
            &sb,
            &["mktree"],
            format!("040000 tree {tree}\t{dir}\n").as_bytes(),
        );
    }
    let commit = sb
        .repo
        .git(&["commit-tree", &tree, "-m", "one big directory"]);
    sb.repo.git(&["update-ref", "refs/heads/main", &commit]);
    sb
}

#[test]
fn fifty_thousand_files_in_one_directory_are_listed_and_taken_in_batches() {
    const N: usize = 50_000;
    let started = Instant::now();
    let sb = one_big_directory(N);
    let built = started.elapsed();
    let t = Instant::now();
    let r = report_of(&sb.tick(&at(0), &["--max-reads", "5"]), 10);
    let first = t.elapsed();
    assert_eq!(r["fresh_evaluations"], 5);
    assert_eq!(r["pending"], N as u64 - 5);
    assert_eq!(r["requests_by_kind"]["list"], 1);
    let t = Instant::now();
    let r = report_of(&sb.tick(&at(2), &["--max-reads", "100"]), 14);
    let backlog = t.elapsed();
    assert_eq!(r["fresh_evaluations"], 100);
    assert_eq!(r["pending"], N as u64 - 105);
    assert_eq!(
        r["requests_by_kind"]["list"], 0,
        "a backlog wake lists nothing"
    );
    eprintln!(
        "50,000 files in one directory: built in {built:.2?}, first_run {first:.2?}, \
         a backlog tick of 100 {backlog:.2?}"
    );
}

#[test]
fn a_path_that_leaves_the_repository_is_refused_naming_the_flag() {
    let sb = Sandbox::with_files(&FIVE);
    for path in ["..", "../x", "libs/../..", "./../etc", "libs/shared/.."] {
        let out = sb
            .sentinel(["tick", "--now", &at(0), "--path", path])
            .arg("--repo")
            .arg(&sb.repo.root)
            .arg("--state")
            .arg(&sb.state)
            .output();
        no_panic(&out);
        expect_code(&out, 1);
        assert_eq!(
            out.stderr_line(),
            format!(
                "error: --path `{path}` leaves the repository; give a directory inside it, relative to its root"
            )
        );
        assert!(
            !sb.state.exists() && !sb.lock().exists(),
            "{path}: nothing written"
        );
    }
}

#[test]
fn names_that_merely_start_with_two_dots_are_ordinary_files_and_directories() {
    let sb = Sandbox::new();
    sb.repo
        .write("..dir/..something.js", plain_js("..something"));
    sb.repo.write("..dir/...js", plain_js("..."));
    sb.repo.write("..dir/a..b.js", plain_js("a..b"));
    sb.repo.commit("dots");
    let out = sb
        .sentinel(["tick", "--json", "--now", &at(0), "--path", "..dir"])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    let r = report_of(&out, 10);
    assert_eq!(
        paths(&r),
        ["..dir/...js", "..dir/..something.js", "..dir/a..b.js"]
    );
    assert!(files(&r).iter().all(|f| f.1 == "needs_review"), "{r}");
}

#[test]
fn a_python_file_with_a_backslash_before_a_multibyte_character_is_judged_not_a_crash() {
    let sb = Sandbox::new();
    sb.repo
        .write(&format!("{WATCHED}/odd.py"), "x = 1 \\é\nfrom . import a\n");
    sb.repo.write(&format!("{WATCHED}/a.py"), "A = 1\n");
    sb.repo.commit("odd python");
    let r = report_of(&sb.tick(&at(0), &[]), 10);
    assert_eq!(
        paths(&r),
        [format!("{WATCHED}/a.py"), format!("{WATCHED}/odd.py")]
    );
    assert!(files(&r).iter().all(|f| f.1 == "needs_review"), "{r}");
    report_of(&sb.tick(&at(2), &[]), 0);
}

// ---------------------------------------------------------------------------
// 6. A clock that goes backwards
// ---------------------------------------------------------------------------

const DAY_MIN: i64 = 24 * 60;
const YEAR_MIN: i64 = 365 * DAY_MIN;

/// `stats --json --now NOW` holds no negative number.
#[track_caller]
fn stats_never_negative(sb: &Sandbox, now: &str) -> Value {
    let s = sb.stats_at(now, 2.0);
    assert_no_negative(&s, "stats");
    s
}

#[test]
fn ticks_a_day_and_a_year_before_the_last_one_finish_a_backlog_without_negative_numbers() {
    let sb = Sandbox::with_files(&FIVE);
    let ten = 600;
    let tick = |minute: i64, extra: &[&str], code: i32| {
        let r = report_of(&sb.tick(&at(minute), extra), code);
        assert_no_negative(&r, "report");
        stats_never_negative(&sb, &at(minute));
        r
    };
    assert_eq!(tick(ten, &["--max-reads", "2"], 10)["pending"], 3);
    assert_eq!(tick(ten - DAY_MIN, &["--max-reads", "2"], 14)["pending"], 1);
    assert_eq!(
        tick(ten - YEAR_MIN, &["--max-reads", "2"], 14)["pending"],
        0
    );
    tick(ten - YEAR_MIN + 2, &[], 0);
    // Back at the real time, and later: everything works as usual.
    tick(ten + 2, &[], 0);
    sb.repo.write(&format!("{WATCHED}/c.js"), "// c, edited\n");
    sb.repo.commit("edit c");
    let r = tick(ten + 4, &[], 12);
    assert_eq!(paths(&r), [format!("{WATCHED}/c.js")]);
    let s = sb.stats();
    assert_eq!(s["wake"]["wakes"], 4);
    assert_eq!(s["novelty"]["fresh_evaluations"], 6);
    assert_no_negative(&s, "stats");
}

/// A first run at 10:00 whose call fails with a 500: a 10-minute circuit.
fn circuit_opened_at_ten() -> (Sandbox, FakeOpenAi) {
    let (sb, ai, r) = first_run_answered_by(openai::Reply::fixture(500, "server-500.json"), &[]);
    assert_eq!(entry(&r, AUTH)["outcome"], "failed");
    assert_eq!(
        circuit_at_ten(&sb),
        json!(["server", "2026-06-16T10:10:00Z"])
    );
    ai.answer_always(openai::Reply::skip("fine"));
    (sb, ai)
}

/// Change `AUTH` and tick at `minute`: the advisor's outcome for it.
fn change_and_ask(sb: &Sandbox, ai: &FakeOpenAi, minute: i64, version: u32) -> String {
    sb.repo
        .write(AUTH, format!("// auth\nmodule.exports = {version};\n"));
    sb.repo.commit(&format!("auth v{version}"));
    let r = report_of(&sb.advisor_tick_cmd(ai, &at(minute)).output(), 12);
    assert_no_negative(&r, "report");
    stats_never_negative(sb, &at(minute));
    entry(&r, AUTH)["outcome"].as_str().unwrap().to_string()
}

#[test]
fn a_circuit_opened_before_the_clock_went_back_a_year_is_closed_and_the_future_works_normally() {
    let (sb, ai) = circuit_opened_at_ten();
    let posts = ai.posts();
    assert_eq!(change_and_ask(&sb, &ai, 600 - YEAR_MIN, 2), "llm_skip");
    assert_eq!(ai.posts(), posts + 1);
    // The success closed it; at the real time a call is made as usual.
    assert_eq!(sb.stats_at(&at(605), 2.0)["llm"]["circuit"], Value::Null);
    assert_eq!(change_and_ask(&sb, &ai, 605, 3), "llm_skip");
    assert_eq!(ai.posts(), posts + 2);
}

#[test]
fn a_circuit_opened_before_the_clock_went_back_a_day_does_not_hold_for_a_day_and_ten_minutes() {
    let (sb, ai) = circuit_opened_at_ten();
    let posts = ai.posts();
    let back = 600 - DAY_MIN;
    // 11 minutes into the earlier timeline: longer than any server hold.
    assert_eq!(change_and_ask(&sb, &ai, back + 11, 2), "llm_skip");
    assert_eq!(ai.posts(), posts + 1);
    assert_eq!(
        sb.stats_at(&at(back + 11), 2.0)["llm"]["circuit"],
        Value::Null
    );
    // And at the real time, later, all is as usual.
    assert_eq!(change_and_ask(&sb, &ai, 620, 3), "llm_skip");
}

#[test]
fn an_autonomy_cooldown_and_an_observation_watch_survive_a_clock_that_went_back() {
    let sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.write(GUIDE, "# guide\n");
    sb.repo.commit("two files");
    let ai = FakeOpenAi::start();
    ai.answer_always(openai::Reply::skip("fine"));
    let signals = sb.root().join("signals.jsonl");
    let autonomy = [
        "--autonomy",
        "controlled",
        "--signals",
        signals.to_str().unwrap(),
    ];
    let signal = |message: &str, minute: i64| {
        fs::write(
            &signals,
            format!(
                "{{\"path\":\"{AUTH}\",\"kind\":\"runtime_error\",\"message\":\"{message}\",\"ts\":\"{}\"}}\n",
                at(minute)
            ),
        )
        .unwrap();
    };
    let tick = |minute: i64, code: i32| {
        let r = report_of(
            &sb.advisor_tick_cmd(&ai, &at(minute))
                .args(autonomy)
                .output(),
            code,
        );
        assert_no_negative(&r, "report");
        let s = stats_never_negative(&sb, &at(minute));
        (r, s)
    };
    let ten = 600;
    signal("nothing yet", ten - 3 * DAY_MIN);
    let (_, s) = tick(ten, 10);
    assert!(s["observations"]["watching"].as_u64().unwrap() >= 1, "{s}");
    let due = s["observations"]["due"].clone();
    assert_eq!(due, 0);

    // A runtime error an hour later: one reconsideration, a 24 h cooldown.
    signal("TypeError in sign()", ten + 55);
    let (r, _) = tick(ten + 60, 17);
    assert_eq!(paths(&r), [AUTH]);
    let posts = ai.posts();

    // The clock goes back a day, then a year, with a new error each time:
    // a time before the cooldown started reads as long ago (a clock
    // that went backwards never holds for as long as the jump), so each is
    // one more reconsideration, counted against the stored day's tokens.
    signal("RangeError in verify()", ten - DAY_MIN - 5);
    let (r, s) = tick(ten - DAY_MIN, 17);
    assert_eq!(paths(&r), [AUTH]);
    assert_eq!(
        s["observations"]["due"], 0,
        "a watch is not due before its start"
    );
    signal("EvalError in parse()", ten - YEAR_MIN - 5);
    let (r, _) = tick(ten - YEAR_MIN, 17);
    assert_eq!(paths(&r), [AUTH]);
    assert_eq!(ai.posts(), posts + 2);
    // Nothing new: a no-op, whatever the clock says.
    let (r, _) = tick(ten - YEAR_MIN + 2, 0);
    assert_eq!(r["verdict"]["reason"], "none");

    // At the real time the watches come due on their original checkpoint.
    let (r, s) = tick(ten + DAY_MIN + 1, 15);
    assert_eq!(r["file_reads"], 0);
    assert_eq!(s["observations"]["due"], 0);
    let (r, _) = tick(ten + DAY_MIN + 3, 0);
    assert_eq!(r["verdict"]["reason"], "none");
}

// ---------------------------------------------------------------------------
// 7. Secrets
// ---------------------------------------------------------------------------

const GL_CANARY: &str = "glpat-CANARY-gl-7777";
const OA_CANARY: &str = "sk-CANARY-oa-8888";

/// Every file under the sandbox but the repository: none may hold a canary.
#[track_caller]
fn no_canary_in_files(sb: &Sandbox, when: &str) {
    crate::assert_no_file_holds(sb, "CANARY", when);
}

#[track_caller]
fn no_canary_in_output(out: &Output, what: &str) {
    no_panic(out);
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !text.contains("CANARY"),
            "{what}: the {stream} holds a secret:\n{text}"
        );
    }
}

#[test]
fn no_command_prints_or_stores_the_gitlab_token_or_the_openai_key() {
    let auth = format!("{WATCHED}/auth.js");
    let sb = Sandbox::new();
    sb.repo.write(&auth, "// auth\nmodule.exports = 1;\n");
    sb.repo.write(&format!("{WATCHED}/guide.md"), "# guide\n");
    sb.repo.commit("two files");
    let gl = sb.gitlab();
    gl.require_token(Some(GL_CANARY));
    let api = Api {
        token: Some(GL_CANARY.into()),
        ..Api::new(&gl)
    };
    let ai = FakeOpenAi::start();
    let report = sb.root().join("run").join("gl-code-quality-report.json");
    let secrets = |run: crate::util::Run| {
        run.env("SENTINEL_GITLAB_TOKEN", GL_CANARY)
            .env("OPENAI_API_KEY", OA_CANARY)
    };
    let tick = |minute: i64, extra: &[&str]| {
        secrets(sb.api_tick_cmd(&api, &at(minute)))
            .args(["--fake-sleep", "--llm-url", &ai.base_url()])
            .arg("--codequality")
            .arg(&report)
            .args(extra)
            .output()
    };
    let mut change = 1;
    let mut commit = || {
        change += 1;
        sb.repo
            .write(&auth, format!("// auth\nmodule.exports = {change};\n"));
        sb.repo.commit(&format!("auth v{change}"));
    };
    let mut checked = 0;
    let mut check = |out: &Output, code: i32, what: &str| {
        no_canary_in_output(out, what);
        expect_code(out, code);
        no_canary_in_files(&sb, what);
        checked += 1;
    };

    ai.push(openai::Reply::evolve(
        "exports a constant key",
        json!([{"line": 2, "severity": "major", "message": "hard-coded value"}]),
    ));
    check(&tick(0, &[]), 10, "a first run");
    assert!(
        fs::read_to_string(&report)
            .unwrap()
            .contains("hard-coded value")
    );
    check(&tick(2, &[]), 0, "a no-op");

    // The provider answers 500 three times, echoing the key it was sent.
    let echoed = openai::fixture_text("server-500.json").replace(
        "The server had an error",
        &format!("Bearer {OA_CANARY}: the server had an error"),
    );
    assert!(echoed.contains(OA_CANARY));
    ai.push_n(
        3,
        openai::Reply::Fixed {
            status: 500,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: echoed.into_bytes(),
        },
    );
    commit();
    check(
        &tick(4, &[]),
        12,
        "a repo_changed wake and a 500 that echoes the key",
    );
    commit();
    check(&tick(30, &["--dry-run"]), 12, "a dry run");
    check(&tick(32, &[]), 12, "a repo_changed wake");

    // GitLab refuses the token.
    gl.require_token(Some("glpat-someone-else"));
    commit();
    let out = tick(34, &[]);
    assert!(out.stderr.contains("401 Unauthorized"), "{}", out.stderr);
    check(&out, 1, "a 401 from GitLab");
    gl.require_token(Some(GL_CANARY));

    for format in ["table", "json", "prometheus"] {
        let out = secrets(sb.sentinel(["stats", "--format", format, "--state"]))
            .arg(&sb.state)
            .output();
        check(&out, 0, &format!("stats --format {format}"));
    }
    for json in [false, true] {
        let mut run = secrets(sb.sentinel(["explain", &auth, "--source", "gitlab"]))
            .args(["--gitlab-url", &api.url, "--project", PROJECT])
            .args(["--branch", "main", "--path", WATCHED])
            .arg("--state")
            .arg(&sb.state);
        if json {
            run = run.arg("--json");
        }
        check(&run.output(), 0, "explain");
    }
    for args in [
        &["simulate", "--scenario", "storm"][..],
        &[
            "simulate",
            "--scenario",
            "day",
            "--duration",
            "2h",
            "--json",
        ],
    ] {
        check(&secrets(sb.sentinel(args)).output(), 0, "simulate");
    }
    // The git source, with both secrets in the environment too.
    let git_state = sb.root().join("run").join("git-state.json");
    let out = secrets(sb.sentinel(["tick", "--json", "--fake-sleep", "--now", &at(40)]))
        .args(["--llm-url", &ai.base_url()])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&git_state)
        .output();
    check(&out, 10, "a git-source first run");
    assert_eq!(checked, 14);

    // Sent, and only where each belongs.
    let gl_requests = gl.requests();
    assert!(!gl_requests.is_empty());
    for r in &gl_requests {
        let token = r.header("private-token").unwrap_or("");
        assert!(token == GL_CANARY || token.is_empty(), "{r:?}");
        assert!(!r.target.contains("CANARY"));
        assert!(r.header("authorization").is_none());
    }
    let ai_requests = ai.requests();
    assert!(!ai_requests.is_empty());
    for r in &ai_requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {OA_CANARY}").as_str())
        );
        assert!(r.header("private-token").is_none());
        assert!(!String::from_utf8_lossy(&r.body).contains("CANARY"));
    }
}

#[test]
fn the_config_types_that_hold_secrets_print_without_them() {
    use sentinel::llm::client::{ApiKey, OpenAiConfig};
    use sentinel::source::gitlab::{GitLabConfig, Token};
    let gitlab = GitLabConfig {
        base: "https://gitlab.example.com/api/v4".into(),
        project: "group/project".into(),
        branch: "main".into(),
        path: Some(WATCHED.into()),
        token: Some(Token::new(GL_CANARY.into())),
        timeout: Duration::from_secs(30),
        ca_file: None,
        fake_sleep: false,
    };
    let openai = OpenAiConfig {
        base_url: "https://api.openai.com/v1".into(),
        key: ApiKey::new(OA_CANARY.into()),
        model: "gpt-4o-mini".into(),
        timeout: Duration::from_secs(60),
        max_tokens: 1024,
        fake_sleep: false,
        patches: false,
        reasoning_models: Vec::new(),
    };
    for printed in [
        format!("{gitlab:?}"),
        format!("{gitlab:#?}"),
        format!("{openai:?}"),
        format!("{openai:#?}"),
        format!("{:?}", sentinel::cli::SourceChoice::Gitlab(gitlab.clone())),
    ] {
        assert!(!printed.contains("CANARY"), "{printed}");
        assert!(
            printed.contains("***"),
            "the secret is shown masked: {printed}"
        );
    }
}

#[test]
fn the_environment_read_at_startup_prints_without_the_secrets() {
    let env = sentinel::cli::Environment::from_lookup(|k| match k {
        "SENTINEL_GITLAB_TOKEN" => Some(GL_CANARY.into()),
        "OPENAI_API_KEY" => Some(OA_CANARY.into()),
        _ => None,
    });
    let printed = format!("{env:?}");
    assert!(!printed.contains("CANARY"), "{printed}");
}

#[test]
fn a_provider_error_that_echoes_the_key_as_its_code_does_not_carry_it_into_report_or_state() {
    let body = json!({"error": {"message": "denied", "type": format!("Bearer {OA_CANARY}"), "code": OA_CANARY}});
    let sb = Sandbox::new();
    sb.repo.write(AUTH, "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("one file");
    let ai = FakeOpenAi::start();
    ai.answer_always(openai::Reply::json(500, &body));
    let out = sb
        .sentinel(["tick", "--json", "--fake-sleep", "--now", &at(600)])
        .args(["--llm-url", &ai.base_url()])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", OA_CANARY)
        .output();
    expect_code(&out, 10);
    no_canary_in_output(&out, "a 500 whose code is the key");
    no_canary_in_files(&sb, "a 500 whose code is the key");
}

/// A first run over the fake GitLab, wanting `GL_CANARY`, whose listing is
/// answered by `reply`: exit 10 with the listing failed, and no canary in
/// the output or the files.
fn listing_answered_by(reply: Reply, what: &str) {
    let sb = Sandbox::with_files(&FIVE);
    let gl = sb.gitlab();
    gl.require_token(Some(GL_CANARY));
    let api = Api {
        token: Some(GL_CANARY.into()),
        ..Api::new(&gl)
    };
    gl.push(Endpoint::Tree, reply);
    let out = gl_tick(&sb, &api, 0, &[]);
    expect_code(&out, 10);
    assert!(notes(&out.json()).starts_with("listing failed: "));
    no_canary_in_output(&out, what);
    no_canary_in_files(&sb, what);
}

#[test]
fn a_gitlab_error_message_that_echoes_the_token_does_not_carry_it_into_the_report() {
    listing_answered_by(
        Reply::json(
            500,
            &json!({"message": format!("500 token {GL_CANARY} was rejected upstream")}),
        ),
        "a 500 whose message echoes the token",
    );
}

#[test]
fn a_gitlab_answer_that_starts_with_the_token_does_not_carry_it_into_the_report() {
    listing_answered_by(
        fixed(
            200,
            vec![],
            format!("{GL_CANARY} is not allowed here").into_bytes(),
        ),
        "a 200 whose body starts with the token",
    );
}

#[test]
fn a_gitlab_answer_whose_quoted_start_cuts_the_token_does_not_carry_a_piece_of_it() {
    // The report quotes the first 40 bytes of an answer that is not JSON:
    // here they end inside the token.
    let body = format!("{}{GL_CANARY} is not allowed here", "x".repeat(26));
    assert!(body[..40].contains("CANARY") && !body[..40].contains(GL_CANARY));
    listing_answered_by(
        fixed(200, vec![], body.into_bytes()),
        "a 200 whose quoted start ends inside the token",
    );
}
