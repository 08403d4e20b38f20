//! Harness for the end-to-end tests: a sandbox directory, a git repository
//! built with the real `git`, and a runner for the `sentinel` binary whose
//! environment is cleared so that a developer's `SENTINEL_*`, `GIT_*` or
//! locale settings cannot leak into a test.

#![allow(dead_code)]

pub mod admin;
pub mod gitlab;
pub mod http;
pub mod layout;
pub mod openai;

use std::cell::Cell;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde_json::Value;
use tempfile::TempDir;

/// The day the tests replay: 2026-06-16T00:00:00Z.
pub const DAY: &str = "2026-06-16T00:00:00Z";

/// The directory most tests watch.
pub const WATCHED: &str = "libs/shared";

/// `DAY` plus `minutes`, as RFC 3339 (`2026-06-16T00:02:00Z`).
pub fn at(minutes: i64) -> String {
    let base: DateTime<Utc> = DAY.parse().expect("DAY is RFC 3339");
    (base + Duration::minutes(minutes)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The seed's file content: `// a.js\nmodule.exports = 1;\n`.
pub fn plain_js(name: &str) -> String {
    format!("// {name}\nmodule.exports = 1;\n")
}

/// The PATH the child processes get: the test runner's own, so `git` is found.
fn inherited_path() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

/// A fresh temporary directory holding a home, a git repository and the
/// place of the state file (outside the repository, under `run/`).
pub struct Sandbox {
    dir: TempDir,
    pub repo: Repo,
    pub state: PathBuf,
    /// Directories put in front of PATH for sentinel (fake `git` wrappers).
    path_prefix: Vec<PathBuf>,
    /// Whether sentinel must leave the clone to git (so that a fake `git`
    /// stands in for it): git's own `GIT_NO_REPLACE_OBJECTS` does that,
    /// gix would not read the clone as git then does.
    git_reads: bool,
}

impl Sandbox {
    /// A sandbox with an empty repository (no commit yet).
    pub fn new() -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("sentinel-e2e-")
            .tempdir()
            .expect("temporary directory");
        let home = dir.path().join("home");
        fs::create_dir_all(&home).expect("home directory");
        let repo = Repo::init(dir.path().join("repo"), home);
        let state = dir.path().join("run").join("state.json");
        Sandbox {
            dir,
            repo,
            state,
            path_prefix: Vec::new(),
            git_reads: false,
        }
    }

    /// A sandbox whose repository has one commit with `libs/shared/{names}`,
    /// each holding `plain_js(name)`.
    pub fn with_files(names: &[&str]) -> Sandbox {
        let sb = Sandbox::new();
        for name in names {
            sb.repo.write(&format!("{WATCHED}/{name}"), plain_js(name));
        }
        sb.repo.commit("initial files");
        sb
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn home(&self) -> PathBuf {
        self.root().join("home")
    }

    /// `<state>.noops`.
    pub fn journal(&self) -> PathBuf {
        sidecar(&self.state, ".noops")
    }

    /// `<state>.lock`.
    pub fn lock(&self) -> PathBuf {
        sidecar(&self.state, ".lock")
    }

    /// `sentinel` with the given arguments, a cleared environment and the
    /// sandbox as its working directory.
    pub fn sentinel<I, S>(&self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sentinel"));
        // The tests of other guarantees run the agent without the kernel
        // sandbox (their agents report to files beside the state); the
        // sandbox's own tests name `--agent-sandbox require`.
        cmd.env_clear()
            .env("SENTINEL_AGENT_SANDBOX", "off")
            .env("PATH", self.path_env())
            .env("HOME", self.home())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .current_dir(self.root())
            .stdin(Stdio::null())
            .args(args);
        if self.git_reads {
            cmd.env("GIT_NO_REPLACE_OBJECTS", "1");
        }
        Run { cmd }
    }

    /// `sentinel tick --repo R --path libs/shared --state S --now T --json`.
    pub fn tick_cmd(&self, now: &str) -> Run {
        self.sentinel(["tick", "--json", "--now", now, "--path", WATCHED])
            .arg("--repo")
            .arg(&self.repo.root)
            .arg("--state")
            .arg(&self.state)
    }

    /// One tick at `now`, with `extra` flags.
    pub fn tick(&self, now: &str, extra: &[&str]) -> Output {
        self.tick_cmd(now).args(extra).output()
    }

    /// `sentinel stats --state S --json`, which must succeed.
    pub fn stats(&self) -> Value {
        let out = self
            .sentinel(["stats", "--json"])
            .arg("--state")
            .arg(&self.state)
            .output();
        assert_eq!(out.code, 0, "stats failed: {}", out.stderr);
        out.json()
    }

    /// `sentinel explain FILE --repo R --path libs/shared --state S [--json]`.
    pub fn explain(&self, file: &str, json: bool) -> Output {
        let mut run = self
            .sentinel(["explain", file, "--path", WATCHED])
            .arg("--repo")
            .arg(&self.repo.root)
            .arg("--state")
            .arg(&self.state);
        if json {
            run = run.arg("--json");
        }
        run.output()
    }

    /// Put a `git` in front of PATH for sentinel: a shell script that runs
    /// `on_log` (shell code) when the git subcommand is `log`, and the real
    /// git otherwise. Lets a test break the head lookup alone.
    pub fn fake_git_log(&mut self, on_log: &str) {
        let real = find_in_path("git").expect("git on PATH");
        let bin = self.root().join("fakebin");
        fs::create_dir_all(&bin).expect("fakebin");
        let script = format!(
            "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = log ]; then\n    {on_log}\n  fi\ndone\nexec '{}' \"$@\"\n",
            real.display()
        );
        let path = bin.join("git");
        fs::write(&path, script).expect("write fake git");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod fake git");
        self.path_prefix.push(bin);
        self.git_reads = true;
    }

    /// Put an executable `name` running the shell code `body` in front of
    /// sentinel's PATH (a stub of a tool an agent adapter calls).
    pub fn stub(&mut self, name: &str, body: &str) {
        let bin = self.root().join("stubbin");
        fs::create_dir_all(&bin).expect("stubbin");
        let path = bin.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write stub");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod stub");
        if !self.path_prefix.contains(&bin) {
            self.path_prefix.push(bin);
        }
    }

    /// Put a `git` in front of PATH for sentinel that appends its arguments,
    /// one line per process, to the returned file and then runs the real
    /// git: lets a test count the git processes a tick starts.
    pub fn log_git_calls(&mut self) -> PathBuf {
        let real = find_in_path("git").expect("git on PATH");
        let bin = self.root().join("loggingbin");
        fs::create_dir_all(&bin).expect("loggingbin");
        let log = self.root().join("git-calls.log");
        let script = format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            log.display(),
            real.display()
        );
        let path = bin.join("git");
        fs::write(&path, script).expect("write logging git");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod logging git");
        self.path_prefix.push(bin);
        log
    }

    /// Remove the fake `git` wrappers from sentinel's PATH.
    pub fn real_git(&mut self) {
        self.path_prefix.clear();
        self.git_reads = false;
    }

    fn path_env(&self) -> OsString {
        let mut dirs: Vec<PathBuf> = self.path_prefix.clone();
        dirs.extend(std::env::split_paths(&inherited_path()));
        std::env::join_paths(dirs).expect("PATH")
    }
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&inherited_path())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `<state>` + `suffix`.
pub fn sidecar(state: &Path, suffix: &str) -> PathBuf {
    let mut name = state.file_name().expect("state file name").to_os_string();
    name.push(suffix);
    state.with_file_name(name)
}

/// A sentinel invocation being built.
pub struct Run {
    cmd: Command,
}

impl Run {
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Run {
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Run {
        self.cmd.env(key, value);
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Run {
        self.cmd.current_dir(dir);
        self
    }

    pub fn output(mut self) -> Output {
        Output::from(self.cmd.output().expect("run the sentinel binary"))
    }

    /// Limit the address space of sentinel (and what it starts) to `bytes`:
    /// a read that grows without bound fails instead of filling the machine.
    pub fn memory_limit(mut self, bytes: u64) -> Run {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe and touches no shared state.
        unsafe {
            self.cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self
    }

    /// Start it as a CI job script does: a child of a `bash` whose own
    /// environment holds every variable given so far and any set later
    /// (what `/proc/<bash>/environ` shows), which waits for it.
    pub fn under_bash(self) -> Run {
        let mut sh = Command::new("bash");
        sh.env_clear();
        for (k, v) in self.cmd.get_envs() {
            if let Some(v) = v {
                sh.env(k, v);
            }
        }
        if let Some(dir) = self.cmd.get_current_dir() {
            sh.current_dir(dir);
        }
        // Not the last command, so bash waits instead of exec'ing it.
        sh.arg("-c")
            .arg("\"$0\" \"$@\"; exit $?")
            .arg(self.cmd.get_program())
            .args(self.cmd.get_args())
            .stdin(Stdio::null());
        Run { cmd: sh }
    }

    /// Start it behind a shell that waits for one line on stdin and then
    /// execs sentinel under its own pid: a test learns the pid first.
    pub fn spawn_gated(self) -> Child {
        let mut gate = Command::new("sh");
        gate.arg("-c")
            .arg("read _ && exec \"$0\" \"$@\"")
            .arg(self.cmd.get_program())
            .args(self.cmd.get_args())
            .env_clear();
        for (key, value) in self.cmd.get_envs() {
            if let Some(value) = value {
                gate.env(key, value);
            }
        }
        if let Some(dir) = self.cmd.get_current_dir() {
            gate.current_dir(dir);
        }
        gate.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the sentinel binary behind its gate")
    }

    /// Start the process without waiting for it; see `Output::wait`.
    pub fn spawn(mut self) -> Child {
        self.cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the sentinel binary")
    }
}

impl From<std::process::Output> for Output {
    fn from(out: std::process::Output) -> Output {
        Output {
            code: out
                .status
                .code()
                .unwrap_or_else(|| panic!("sentinel died by a signal: {:?}", out.status)),
            stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
            stderr: String::from_utf8(out.stderr).expect("stderr is UTF-8"),
        }
    }
}

/// What one sentinel process did.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Wait for a process started with `Run::spawn`.
    pub fn wait(child: Child) -> Output {
        Output::from(child.wait_with_output().expect("wait for sentinel"))
    }

    /// stdout as exactly one JSON document on one line.
    pub fn json(&self) -> Value {
        let body = self
            .stdout
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("stdout does not end with a newline: {:?}", self.stdout));
        assert!(
            !body.contains('\n'),
            "stdout is more than one line: {:?}",
            self.stdout
        );
        serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// stderr as exactly one line, without its newline.
    pub fn stderr_line(&self) -> &str {
        let line = self
            .stderr
            .strip_suffix('\n')
            .unwrap_or_else(|| panic!("stderr does not end with a newline: {:?}", self.stderr));
        assert!(
            !line.contains('\n'),
            "stderr is more than one line: {:?}",
            self.stderr
        );
        line
    }
}

/// A file's bytes and modification time, to prove a file was not touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub bytes: Vec<u8>,
    pub mtime: SystemTime,
}

/// The snapshot of `path`, `None` when it does not exist.
pub fn snapshot(path: &Path) -> Option<Snapshot> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("metadata of {}: {e}", path.display()),
    };
    Some(Snapshot {
        bytes: fs::read(path).expect("read file"),
        mtime: meta.modified().expect("mtime"),
    })
}

/// `<state>.lock`, held the way a running tick holds it (flock, exclusive)
/// until dropped.
pub struct HeldLock {
    file: File,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        // Unlock explicitly rather than rely on closing: a child that another
        // test thread is forking at this instant holds a copy of the
        // descriptor until it execs, and the lock would outlive this guard.
        let _ = self.file.unlock();
    }
}

/// Take `<state>.lock` as a running tick would.
pub fn hold_lock(state: &Path) -> HeldLock {
    use std::os::unix::fs::OpenOptionsExt;
    let path = sidecar(state, ".lock");
    fs::create_dir_all(path.parent().expect("lock directory")).expect("lock directory");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .expect("open the lock file");
    file.try_lock().expect("take the lock");
    HeldLock { file }
}

/// `(path, outcome, novelty)` of each entry of a tick's `files`.
pub fn files(report: &Value) -> Vec<(String, String, String)> {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .map(|f| {
            (
                f["path"].as_str().expect("path").to_string(),
                f["outcome"].as_str().expect("outcome").to_string(),
                f["novelty"].as_str().unwrap_or("null").to_string(),
            )
        })
        .collect()
}

/// The notes of a `--json` report, one per line.
pub fn notes(report: &Value) -> String {
    report["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The fingerprint a tick reported for `path`.
pub fn fingerprint_of(report: &Value, path: &str) -> String {
    report["files"]
        .as_array()
        .expect("files is an array")
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} is not in the report"))["fingerprint"]
        .as_str()
        .unwrap_or_else(|| panic!("{path} has no fingerprint"))
        .to_string()
}

/// The nine `|`-separated parts of a fingerprint.
pub fn parts(fingerprint: &str) -> Vec<&str> {
    let parts: Vec<&str> = fingerprint.split('|').collect();
    assert_eq!(parts.len(), 9, "fingerprint {fingerprint} has 9 parts");
    parts
}

/// A git repository driven by the real `git`, isolated from the user's and
/// the system's configuration, with fixed identities and dates.
pub struct Repo {
    pub root: PathBuf,
    home: PathBuf,
    commits: Cell<i64>,
}

impl Repo {
    pub fn init(root: PathBuf, home: PathBuf) -> Repo {
        fs::create_dir_all(&root).expect("repository directory");
        let repo = Repo {
            root,
            home,
            commits: Cell::new(0),
        };
        repo.git(&["init", "-q"]);
        repo
    }

    /// Run git in the repository; panics unless it succeeds; stdout trimmed.
    pub fn git(&self, args: &[&str]) -> String {
        let date = self.date();
        let out = Command::new("git")
            .env_clear()
            .env("PATH", inherited_path())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .env("LC_ALL", "C")
            .arg("-C")
            .arg(&self.root)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run git");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("git output is UTF-8")
            .trim_end()
            .to_string()
    }

    /// Commits are dated one minute apart from 2026-06-15T00:00:00Z, the day
    /// before the replayed one.
    fn date(&self) -> String {
        let base: DateTime<Utc> = "2026-06-15T00:00:00Z".parse().expect("date");
        (base + Duration::minutes(self.commits.get())).to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let file = self.root.join(rel);
        fs::create_dir_all(file.parent().expect("parent")).expect("create directories");
        fs::write(file, content).expect("write file");
    }

    pub fn remove(&self, rel: &str) {
        fs::remove_file(self.root.join(rel)).expect("remove file");
    }

    /// Stage everything and commit; returns the new commit id.
    pub fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.commits.set(self.commits.get() + 1);
        self.head()
    }

    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// An empty commit: the branch tip moves and the watched path does not,
    /// so the next tick must ask git for the head (a tick whose tip has not
    /// moved reuses the head it found there without starting git).
    pub fn move_tip(&self) -> String {
        self.git(&["commit", "-q", "--allow-empty", "-m", "elsewhere"]);
        self.commits.set(self.commits.get() + 1);
        self.head()
    }

    /// Stage everything and commit it as a merge of HEAD and an empty side
    /// commit: the walk since the remembered head, from the objects or
    /// from `git log`, gives way on a merge, so the head lookup is asked of
    /// `git log` (and a test's fake of it). Returns the merge's id.
    pub fn commit_as_merge(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        let tree = self.git(&["write-tree"]);
        let side = self.git(&["commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "side"]);
        let merge = self.git(&[
            "commit-tree",
            &tree,
            "-p",
            "HEAD",
            "-p",
            &side,
            "-m",
            message,
        ]);
        self.git(&["update-ref", "HEAD", &merge]);
        self.commits.set(self.commits.get() + 1);
        merge
    }

    /// A merge that changes nothing: the tip moves, the watched path does
    /// not, and the head lookup is asked of `git log`.
    pub fn merge_tip(&self) -> String {
        self.commit_as_merge("elsewhere, merged")
    }

    /// The content id of `rel` at HEAD.
    pub fn blob(&self, rel: &str) -> String {
        self.git(&["rev-parse", &format!("HEAD:{rel}")])
    }
}

/// The `git` calls logged (`Sandbox::log_git_calls`) since the last look,
/// and the log emptied.
pub fn git_calls(log: &Path) -> Vec<String> {
    let calls = fs::read_to_string(log).unwrap_or_default();
    let _ = fs::remove_file(log);
    calls.lines().map(str::to_string).collect()
}
