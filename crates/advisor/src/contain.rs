//! The agent's processes, contained: a run is bounded in time and output,
//! every process it starts (setsid'd ones too) ends with the run, and a
//! signal to sentinel ends them first.
//!
//! Three nets catch what an agent leaves: its process group (`kill -PGID`),
//! the marker in the environment of everything it starts (a process that
//! left the group and the session still carries it), and, in the binary,
//! sentinel as the child subreaper: whatever is orphaned below it is
//! re-parented to sentinel, not to init, and is found among its children.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, Signal};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// In the environment of every agent run (and all it starts); its value
/// names the run. `sentinel tick` refuses to start where it is set.
pub const MARKER: &str = "SENTINEL_AGENT_RUN";

/// Set once `main` made sentinel the subreaper: then every child still
/// alive after a run is the agent's, and is ended.
static SUBREAPER: AtomicBool = AtomicBool::new(false);
/// The last of SIGTERM, SIGINT, SIGHUP received, or 0.
static SIGNAL: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));
/// The self-pipe's read end: on each of those signals signal-hook's
/// handler writes a byte to the other, and the agent's wait loop polls it.
static WAKE: OnceLock<OwnedFd> = OnceLock::new();

/// Make sentinel the child subreaper of everything it starts.
pub fn become_subreaper() {
    // Any pid sets the attribute (none clears it); sentinel's own reads best.
    let ok = rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok();
    SUBREAPER.store(ok, Ordering::SeqCst);
}

/// From now on SIGTERM, SIGINT and SIGHUP only set a flag: the agent's
/// wait loop and the tick between files stop on it, so the agent's tree is
/// ended and the lock released before sentinel exits. signal-hook's
/// handler is async-signal-safe and keeps `errno` for the code it
/// interrupted.
pub fn catch_signals() {
    use rustix::pipe::{PipeFlags, pipe_with};
    if WAKE.get().is_some() {
        return;
    }
    let pipe = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC).ok();
    for sig in [SIGTERM, SIGINT, SIGHUP] {
        // The flag first (actions run in the order registered): by the
        // time the wait loop wakes, it says which signal came.
        let _ = signal_hook::flag::register_usize(sig, Arc::clone(&SIGNAL), sig as usize);
        if let Some(write) = pipe.as_ref().and_then(|(_, w)| w.try_clone().ok()) {
            let _ = signal_hook::low_level::pipe::register(sig, write);
        }
    }
    if let Some((read, _)) = pipe {
        let _ = WAKE.set(read);
    }
}

/// The signal that asked sentinel to stop, if one did.
pub fn interrupted() -> Option<i32> {
    let sig = SIGNAL.load(Ordering::SeqCst);
    i32::try_from(sig).ok().filter(|s| *s != 0)
}

/// `d` as poll's timeout, at least a millisecond so a short wait is a wait.
fn timeout(d: Duration) -> Timespec {
    Timespec::try_from(d.max(Duration::from_millis(1))).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    })
}

/// Sleep `d`, or less when a caught signal asks sentinel to stop.
pub fn sleep(d: Duration) {
    let Some(wake) = WAKE.get() else {
        std::thread::sleep(d);
        return;
    };
    let deadline = Instant::now() + d;
    while interrupted().is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let mut fd = [PollFd::new(wake, PollFlags::IN)];
        let _ = rustix::event::poll(&mut fd, Some(&timeout(left)));
    }
}

fn signal_name(sig: i32) -> String {
    match sig {
        SIGTERM => "SIGTERM".into(),
        SIGINT => "SIGINT".into(),
        SIGHUP => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

/// A tick stopped by a signal: exit 128 + the signal's number.
#[derive(Debug)]
pub struct Interrupted {
    pub signal: i32,
    /// What was running, in words (`while the agent judged `a.js``).
    pub during: String,
}

impl Interrupted {
    pub fn exit_code(&self) -> u8 {
        u8::try_from(128 + self.signal).unwrap_or(1)
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sentinel: stopped by {} {}; the agent's processes were ended and nothing was lost \
             (the state is as the last save left it, the decision journal keeps what was paid for, \
             the next tick takes it in)",
            signal_name(self.signal),
            self.during
        )
    }
}

impl std::error::Error for Interrupted {}

/// How a run may go.
#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    /// Stdout past this is not read (the agent gets EPIPE).
    pub max_stdout: usize,
    /// Only the last this many bytes of stderr are kept.
    pub max_stderr: usize,
}

#[derive(Debug)]
pub enum Ended {
    Exited(ExitStatus),
    TimedOut,
    Interrupted,
}

#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    pub stdout: Vec<u8>,
    /// The end of what it wrote to stderr.
    pub stderr: Vec<u8>,
}

/// Run `cmd` in its own process group with `input` on stdin, and end it
/// and everything it started when it exits, when `limits.timeout` passes or
/// when sentinel is asked to stop, whichever comes first. `pidfile` names
/// the run while it lasts, so a tick after a sentinel that was killed
/// (SIGKILL leaves no chance to clean up) ends what that one left.
pub fn run(
    mut cmd: Command,
    input: &[u8],
    limits: &Limits,
    pidfile: Option<&Path>,
) -> io::Result<Finished> {
    if let Some(p) = pidfile {
        end_leftover(p);
    }
    let run = RunName::new();
    // Named before it starts, so even a sentinel killed at once leaves the
    // run's marker to find. Not synced: a machine that went down took the
    // run's processes with it.
    if let Some(p) = pidfile {
        let _ = name_run(p, &run);
    }
    cmd.env(MARKER, &run.token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let mut io = Pump::new(&mut child, input, limits);
    let ended = io.until_done(&mut child, limits.timeout);
    end_tree(pid, &run);
    let ended = match ended {
        Some(e) => e,
        None => match child.wait() {
            Ok(_) if interrupted().is_some() => Ended::Interrupted,
            _ => Ended::TimedOut,
        },
    };
    // Whatever was written before the end is in the pipes; never wait for more.
    io.drain();
    if let Some(p) = pidfile {
        let _ = std::fs::remove_file(p);
    }
    Ok(Finished {
        ended,
        stdout: io.out,
        stderr: io.err.tail(),
    })
}

/// Unique to this run: sentinel's pid and the time.
fn run_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}.{nanos}", std::process::id())
}

/// The agent's pipes and what came out of them.
struct Pump {
    stdin: Option<std::process::ChildStdin>,
    input: Vec<u8>,
    written: usize,
    stdout: Option<std::process::ChildStdout>,
    stderr: Option<std::process::ChildStderr>,
    out: Vec<u8>,
    max_out: usize,
    err: Tail,
    pidfd: Option<OwnedFd>,
}

impl Pump {
    fn new(child: &mut Child, input: &[u8], limits: &Limits) -> Pump {
        let pump = Pump {
            stdin: child.stdin.take(),
            input: input.to_vec(),
            written: 0,
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            out: Vec::new(),
            max_out: limits.max_stdout,
            err: Tail::new(limits.max_stderr),
            pidfd: pidfd_open(child),
        };
        for fd in [pump.fd_in(), pump.fd_out(), pump.fd_err()]
            .into_iter()
            .flatten()
        {
            nonblocking(fd);
        }
        pump
    }

    fn fd_in(&self) -> Option<BorrowedFd<'_>> {
        self.stdin.as_ref().map(|p| p.as_fd())
    }
    fn fd_out(&self) -> Option<BorrowedFd<'_>> {
        self.stdout.as_ref().map(|p| p.as_fd())
    }
    fn fd_err(&self) -> Option<BorrowedFd<'_>> {
        self.stderr.as_ref().map(|p| p.as_fd())
    }

    /// Move bytes until the child exits (`Some(Exited)`), or `None` when
    /// the deadline passed or a signal came first (the child still runs).
    fn until_done(&mut self, child: &mut Child, timeout: Duration) -> Option<Ended> {
        let deadline = Instant::now() + timeout;
        loop {
            if interrupted().is_some() {
                return None;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Ended::Exited(status));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            // Without a pidfd nothing tells of the exit: look again soon.
            let cap = if self.pidfd.is_some() {
                left
            } else {
                left.min(Duration::from_millis(10))
            };
            self.step(cap);
        }
    }

    /// One poll of every open pipe, the pidfd and the self-pipe.
    fn step(&mut self, wait: Duration) {
        let wake = WAKE.get().map(|w| w.as_fd());
        // What each polled descriptor is: 0 stdin, 1 stdout, 2 stderr, 3 the
        // pidfd, 4 the self-pipe.
        let mut slots = Vec::with_capacity(5);
        let mut fds = Vec::with_capacity(5);
        let pidfd = self.pidfd.as_ref().map(|f| f.as_fd());
        for (slot, fd, events) in [
            (0, self.fd_in(), PollFlags::OUT),
            (1, self.fd_out(), PollFlags::IN),
            (2, self.fd_err(), PollFlags::IN),
            (3, pidfd, PollFlags::IN),
            (4, wake, PollFlags::IN),
        ] {
            if let Some(fd) = fd {
                slots.push(slot);
                fds.push(PollFd::from_borrowed_fd(fd, events));
            }
        }
        if !matches!(rustix::event::poll(&mut fds, Some(&timeout(wait))), Ok(n) if n > 0) {
            return;
        }
        let ready: Vec<usize> = slots
            .into_iter()
            .zip(&fds)
            .filter(|(_, p)| !p.revents().is_empty())
            .map(|(slot, _)| slot)
            .collect();
        drop(fds);
        if ready.contains(&0) {
            self.feed();
        }
        if ready.contains(&1) {
            self.read_out();
        }
        if ready.contains(&2) {
            self.read_err();
        }
        if let Some(wake) = WAKE.get().filter(|_| ready.contains(&4)) {
            let mut buf = [0u8; 64];
            while rustix::io::read(wake, &mut buf).is_ok_and(|n| n > 0) {}
        }
    }

    fn feed(&mut self) {
        let Some(stdin) = self.stdin.as_mut() else {
            return;
        };
        loop {
            if self.written >= self.input.len() {
                self.stdin = None;
                return;
            }
            match stdin.write(&self.input[self.written..]) {
                Ok(0) => {}
                Ok(n) => {
                    self.written += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The agent closed its stdin: it read what it wanted.
                Err(_) => {}
            }
            self.stdin = None;
            return;
        }
    }

    fn read_out(&mut self) {
        let Some(pipe) = self.stdout.as_mut() else {
            return;
        };
        let room = self.max_out.saturating_sub(self.out.len());
        // Past the limit, at the end of the pipe or on an error: stop reading.
        match read_some(pipe, room).filter(|_| room > 0) {
            Some(bytes) => self.out.extend(bytes),
            None => self.stdout = None,
        }
    }

    fn read_err(&mut self) {
        let Some(pipe) = self.stderr.as_mut() else {
            return;
        };
        match read_some(pipe, 64 << 10) {
            Some(bytes) if !bytes.is_empty() => self.err.push(&bytes),
            Some(_) => {}
            None => self.stderr = None,
        }
    }

    /// What is left in the pipes, without waiting.
    fn drain(&mut self) {
        self.stdin = None;
        for _ in 0..1024 {
            let before = (self.out.len(), self.err.total);
            self.read_out();
            self.read_err();
            if (self.out.len(), self.err.total) == before {
                break;
            }
        }
    }
}

/// Up to `max` bytes: `Some(empty)` when none is there yet, `None` at the
/// end of the pipe or on an error.
fn read_some(pipe: &mut impl Read, max: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; max.min(64 << 10)];
    loop {
        return match pipe.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some(buf)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Some(Vec::new()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => None,
        };
    }
}

/// The last `max` bytes of a stream.
struct Tail {
    max: usize,
    buf: Vec<u8>,
    total: usize,
}

impl Tail {
    fn new(max: usize) -> Tail {
        Tail {
            max,
            buf: Vec::new(),
            total: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        self.buf.extend_from_slice(bytes);
        if self.buf.len() > 2 * self.max.max(1) {
            let cut = self.buf.len() - self.max;
            self.buf.drain(..cut);
        }
    }

    fn tail(&self) -> Vec<u8> {
        let from = self.buf.len().saturating_sub(self.max);
        self.buf[from..].to_vec()
    }
}

fn nonblocking(fd: BorrowedFd<'_>) {
    use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
    if let Ok(flags) = fcntl_getfl(fd) {
        let _ = fcntl_setfl(fd, flags | OFlags::NONBLOCK);
    }
}

/// A descriptor that becomes readable when `child` exits (Linux 5.3 and
/// later); `None` elsewhere, and the wait loop looks every 10 ms instead.
fn pidfd_open(child: &Child) -> Option<OwnedFd> {
    use rustix::process::{PidfdFlags, pidfd_open};
    pidfd_open(Pid::from_child(child), PidfdFlags::empty()).ok()
}

/// A run's name: the value of its marker, and when it began in the clock
/// ticks since boot `/proc/<pid>/stat` counts start times in. Only a
/// process started since is looked at for the marker.
struct RunName {
    token: String,
    since: u64,
}

impl RunName {
    fn new() -> RunName {
        RunName {
            token: run_token(),
            // A second early: the two clocks are read at different moments.
            since: ticks_since_boot().saturating_sub(clock_ticks_per_second()),
        }
    }
}

fn ticks_since_boot() -> u64 {
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let secs: f64 = uptime
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0);
    (secs * clock_ticks_per_second() as f64) as u64
}

fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// SIGKILL to `pid`; one that is already gone is no error worth a word.
fn kill(pid: i32) {
    if let Some(pid) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

/// End the run of `pid` (the leader of the agent's group) and everything
/// it started: the group, every process carrying the run's marker, and, as
/// the subreaper, every process of another group re-parented to sentinel.
fn end_tree(pid: i32, run: &RunName) {
    if let Some(group) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
    }
    end_marked(run);
    if SUBREAPER.load(Ordering::SeqCst) {
        reap_orphans(pid);
    }
}

/// Kill and reap every child of sentinel's outside sentinel's own process
/// group (the agent's leftovers: its group, or a session of their own) and
/// every process below them, until none is left. sentinel's own children
/// (a `git` a reading thread runs) stay in its group and are left alone.
fn reap_orphans(agent: i32) {
    let me = std::process::id() as i32;
    let mine = rustix::process::getpgrp().as_raw_nonzero().get();
    for _ in 0..64 {
        let table = processes();
        let kids: Vec<i32> = table
            .iter()
            .filter(|p| p.ppid == me && p.pid != agent && p.pgid != mine)
            .map(|p| p.pid)
            .collect();
        if kids.is_empty() {
            return;
        }
        for p in below(&table, &kids) {
            kill(p);
        }
        for k in kids.into_iter().filter_map(Pid::from_raw) {
            let _ = rustix::process::waitpid(Some(k), rustix::process::WaitOptions::empty());
        }
    }
}

/// `roots` and all their descendants in `table`.
fn below(table: &[Proc], roots: &[i32]) -> Vec<i32> {
    let mut out = roots.to_vec();
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            table
                .iter()
                .filter(|p| p.ppid == parent && !out.contains(&p.pid))
                .map(|p| p.pid)
                .collect::<Vec<_>>(),
        );
        i += 1;
    }
    out
}

#[derive(Debug, PartialEq)]
struct Proc {
    pid: i32,
    ppid: i32,
    pgid: i32,
    /// Clock ticks after boot.
    start: u64,
}

/// Every process, from `/proc/<pid>/stat`.
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            parse_stat(
                pid,
                &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
            )
        })
        .collect()
}

/// A `/proc/<pid>/stat` line: the fields after the command name, which may
/// itself hold spaces and parentheses, are state, ppid, pgrp, ..., and the
/// 20th is the start time.
fn parse_stat(pid: i32, stat: &str) -> Option<Proc> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgid: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The processes started since the run began whose environment names it.
fn carrying(run: &RunName) -> Vec<i32> {
    let needle = format!("{MARKER}={}", run.token);
    let me = std::process::id() as i32;
    processes()
        .into_iter()
        .filter(|p| p.start >= run.since && p.pid != me && environ_has(p.pid, &needle))
        .map(|p| p.pid)
        .collect()
}

fn environ_has(pid: i32, entry: &str) -> bool {
    let Ok(f) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut env = Vec::new();
    if f.take(1 << 20).read_to_end(&mut env).is_err() {
        return false;
    }
    env.split(|b| *b == 0).any(|e| e == entry.as_bytes())
}

/// Write the run's name at `path`, never through a link, readable by
/// sentinel's user only.
fn name_run(path: &Path, run: &RunName) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(sentinel_io::safe_fs::NO_LINK_NO_WAIT)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    f.write_all(format!("{} {}\n", run.token, run.since).as_bytes())
}

/// End what a run named in `pidfile` left: a sentinel killed with SIGKILL
/// could not. Every process carrying the run's marker, its first one (the
/// `sh` sentinel started) included.
pub fn end_leftover(pidfile: &Path) {
    let Ok(Some(f)) = sentinel_io::safe_fs::open_read(pidfile) else {
        return;
    };
    let mut text = String::new();
    let _ = f.take(256).read_to_string(&mut text);
    let mut words = text.split_whitespace();
    if let Some(token) = words.next() {
        let since = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        end_marked(&RunName {
            token: token.to_string(),
            since,
        });
    }
    let _ = std::fs::remove_file(pidfile);
}

/// Kill every process carrying the run's marker, again while new ones appear.
fn end_marked(run: &RunName) {
    for _ in 0..8 {
        let marked = carrying(run);
        if marked.is_empty() {
            return;
        }
        for p in marked {
            kill(p);
        }
    }
}

/// A relative command path (`./agent.sh`) as the directory sentinel was
/// started in names it: the agent runs in its worktree, where it does not
/// exist. Only a plain first word is rewritten; anything else is left to
/// the shell as written.
pub fn resolve(command: &str, start: &Path) -> String {
    let (first, rest) = split_first(command);
    if !plain(first) || first.starts_with('/') || !first.contains('/') {
        return command.to_string();
    }
    let full = start.join(first);
    format!("{}{rest}", quote(&full.to_string_lossy()))
}

fn split_first(command: &str) -> (&str, &str) {
    let trimmed = command.trim_start();
    let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
    trimmed.split_at(end)
}

/// A word the shell takes as it is: no quote, expansion or operator.
fn plain(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/+@%,:".contains(&b))
}

fn quote(s: &str) -> String {
    if plain(s) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Shell words that are no file on PATH.
const SHELL_WORDS: [&str; 22] = [
    ".", ":", "[", "cd", "command", "eval", "exec", "exit", "export", "false", "for", "if", "read",
    "set", "test", "true", "trap", "type", "ulimit", "umask", "unset", "while",
];

/// Why the command's first word cannot be started, when that can be told
/// before it runs: a path that is no executable file, a name on no
/// directory of `path`, a script whose `#!` interpreter is missing.
pub fn cannot_start(command: &str, path: Option<&std::ffi::OsStr>) -> Option<String> {
    let first = literal_first(command)?;
    let first = first.as_str();
    if SHELL_WORDS.contains(&first) {
        return None;
    }
    let found = if first.contains('/') {
        let p = std::path::PathBuf::from(first);
        if !is_executable(&p) {
            return Some(format!("`{first}` is not an executable file"));
        }
        p
    } else {
        let dirs = path.unwrap_or_default();
        match std::env::split_paths(dirs)
            .map(|d| d.join(first))
            .find(|p| is_executable(p))
        {
            Some(p) => p,
            None => {
                return Some(format!(
                    "`{first}` is on no directory of PATH (`{}`)",
                    dirs.to_string_lossy()
                ));
            }
        }
    };
    missing_interpreter(&found).map(|i| {
        format!(
            "the `#!` interpreter `{i}` of `{}` does not exist",
            found.display()
        )
    })
}

/// The command's first word when the shell takes it literally: a plain
/// word, or one in single quotes (as `resolve` writes a path with spaces).
fn literal_first(command: &str) -> Option<String> {
    let trimmed = command.trim_start();
    if let Some(quoted) = trimmed.strip_prefix('\'') {
        let (word, rest) = quoted.split_once('\'')?;
        let ends = rest.is_empty() || rest.starts_with(char::is_whitespace);
        return (ends && !word.is_empty()).then(|| word.to_string());
    }
    let (first, _) = split_first(trimmed);
    plain(first).then(|| first.to_string())
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing_interpreter(script: &Path) -> Option<String> {
    let f = std::fs::File::open(script).ok()?;
    let mut head = Vec::new();
    f.take(256).read_to_end(&mut head).ok()?;
    let line = head.strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line);
    let interp = line.lines().next()?.split_whitespace().next()?.to_string();
    (interp.starts_with('/') && !Path::new(&interp).exists()).then_some(interp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_spaces() {
        let tail = "0 -1 4194304 73 77 0 0 0 0 0 0 20 0 1 0 109729 2654208";
        let line = format!("42 (a b) c) S 7 40 41 {tail}");
        let want = Proc {
            pid: 42,
            ppid: 7,
            pgid: 40,
            start: 109729,
        };
        assert_eq!(parse_stat(42, &line), Some(want));
        assert_eq!(parse_stat(1, "1 (init) S 0 1 1"), None);
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn a_relative_agent_path_is_the_start_directorys() {
        let start = Path::new("/srv/job");
        assert_eq!(
            resolve("./agent.sh --fast", start),
            "/srv/job/./agent.sh --fast"
        );
        assert_eq!(resolve("bin/agent", start), "/srv/job/bin/agent");
        assert_eq!(resolve("/usr/bin/agent x", start), "/usr/bin/agent x");
        assert_eq!(resolve("claude -p", start), "claude -p");
        assert_eq!(resolve("cd x && ./a", start), "cd x && ./a");
        assert_eq!(resolve("./a", Path::new("/my dir")), "'/my dir/./a'");
    }

    #[test]
    fn a_command_that_cannot_start_is_told_before_it_runs() {
        let path = Some(std::ffi::OsStr::new("/nonexistent-dir"));
        assert!(
            cannot_start("claude -p", path)
                .unwrap()
                .contains("no directory of PATH")
        );
        assert!(
            cannot_start("/nonexistent/agent.sh", path)
                .unwrap()
                .contains("not an executable")
        );
        assert_eq!(cannot_start("cd x && claude", path), None);
        assert_eq!(cannot_start("\"$AGENT\" x", path), None);
        assert_eq!(
            cannot_start("sh", std::env::var_os("PATH").as_deref()),
            None
        );
    }

    #[test]
    fn a_tail_keeps_the_last_bytes() {
        let mut t = Tail::new(4);
        for chunk in [&b"abc"[..], b"defgh", b"ij"] {
            t.push(chunk);
        }
        assert_eq!(t.tail(), b"ghij");
        assert_eq!(t.total, 10);
    }

    #[test]
    fn a_flood_on_stdout_and_stderr_is_cut_at_its_bounds() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("head -c 3000000 /dev/zero >&2 & head -c 3000000 /dev/zero; wait");
        let limits = Limits {
            timeout: Duration::from_secs(20),
            max_stdout: 1 << 20,
            max_stderr: 1 << 10,
        };
        let done = run(cmd, b"", &limits, None).unwrap();
        assert_eq!(done.stdout.len(), 1 << 20);
        assert_eq!(done.stderr.len(), 1 << 10);
    }

    #[test]
    fn a_signal_exits_128_plus_its_number() {
        let code = |signal| {
            Interrupted {
                signal,
                during: String::new(),
            }
            .exit_code()
        };
        assert_eq!((code(SIGHUP), code(SIGINT), code(SIGTERM)), (129, 130, 143));
    }

    #[test]
    fn a_run_past_its_timeout_ends_with_everything_it_started() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("(setsid sleep 30 &) ; echo started; sleep 30");
        let limits = Limits {
            timeout: Duration::from_millis(300),
            max_stdout: 1 << 20,
            max_stderr: 1 << 10,
        };
        let started = Instant::now();
        let done = run(cmd, b"", &limits, None).unwrap();
        assert!(matches!(done.ended, Ended::TimedOut), "{:?}", done.ended);
        assert_eq!(done.stdout, b"started\n");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
