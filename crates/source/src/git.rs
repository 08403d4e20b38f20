//! The git source: a local clone, read in-process through gix (see
//! `git_store`), or through the `git` command where gix declines the clone.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::git_store::{Failure, Store};
use super::{Change, Entry, RequestCounts, Source, SourceError};

pub use sentinel_io::git_env::REDIRECTING_ENV;

/// How git says that a revision does not name a commit (`git log`, 2.x).
const UNKNOWN_REVISION: &[&str] = &[
    "bad revision",
    "unknown revision",
    "ambiguous argument",
    "bad default revision",
    "not a valid object name",
    "invalid object name",
];

/// The most header bytes accepted from `cat-file --batch` before the answer
/// is deemed garbage; a real header is an id, a type and a size.
const MAX_HEADER: u64 = 1024;

/// A local clone, watched at one revision and (optionally) one directory.
pub struct GitSource {
    repo: PathBuf,
    rev: String,
    /// `None` watches the whole repository.
    path: Option<String>,
    counts: RequestCounts,
    /// The `cat-file --batch` of a clone git reads, started on its first
    /// read, so sources that never read pay nothing.
    cat_file: Option<CatFile>,
    /// The reader, chosen on first use for the whole clone: gix, or
    /// (`Some(None)`) git where gix declines it.
    store: Option<Option<Store>>,
}

impl GitSource {
    /// `repo`: the clone's directory; `rev`: branch or revision to watch (None = "HEAD", the clone's current branch);
    /// `path`: watched directory relative to the repo root (None or "" or "." = whole repository).
    pub fn new(repo: PathBuf, rev: Option<String>, path: Option<String>) -> GitSource {
        GitSource {
            repo,
            rev: rev.unwrap_or_else(|| "HEAD".to_string()),
            path: path.and_then(normalize_path),
            counts: RequestCounts::default(),
            cat_file: None,
            store: None,
        }
    }

    /// The clone through gix, opened on first use; `None` inside when
    /// gix declines it (see `git_store`) and git reads everything.
    fn store(&mut self) -> Option<&Store> {
        let (repo, rev) = (&self.repo, &self.rev);
        self.store
            .get_or_insert_with(|| Store::open(repo, rev))
            .as_ref()
    }

    /// Which reader answers for this clone: `gix`, or `git` where gix
    /// declines it.
    pub fn reader(&mut self) -> &'static str {
        if self.store().is_some() { "gix" } else { "git" }
    }

    /// The watched path's components (none: the whole repository).
    fn watched(&self) -> Vec<Vec<u8>> {
        self.path
            .as_deref()
            .map(|p| p.split('/').map(|c| c.as_bytes().to_vec()).collect())
            .unwrap_or_default()
    }

    /// What a failure of the gix reader tells the tick, worded as git's.
    fn store_error(&self, what: &str, failure: Failure) -> SourceError {
        match failure {
            Failure::TooLarge { size, limit } => SourceError::TooLarge { size, limit },
            Failure::NoRevision(reason) => SourceError::Config(format!(
                "{}: {reason}; the branch or revision `{}` does not exist here (mistyped, deleted, or not fetched): check `--branch` / `SENTINEL_BRANCH`",
                self.in_process(what),
                self.rev
            )),
            Failure::Broken(reason) => {
                SourceError::Unavailable(format!("{}: {reason}", self.in_process(what)))
            }
        }
    }

    /// The start of a message about the gix reader's `what` (`head
    /// lookup`, `listing`, `compare`, `read`, `rollback lookup`).
    fn in_process(&self, what: &str) -> String {
        format!(
            "reading `{}` in-process ({what}) failed",
            self.repo.display()
        )
    }

    /// The revision being watched, as given ("HEAD" when none).
    pub fn rev(&self) -> &str {
        &self.rev
    }

    fn git(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.arg("-C").arg(&self.repo);
        // The watched path is a directory name, not a pattern: `docs[1]` or
        // `:x` must mean exactly that directory.
        cmd.arg("--literal-pathspecs");
        for var in REDIRECTING_ENV {
            cmd.env_remove(var);
        }
        sentinel_core::redact::scrub_env(&mut cmd);
        // Never wait on a credential prompt nobody will answer, and keep
        // messages in English so they read the same in every report.
        cmd.env("GIT_TERMINAL_PROMPT", "0").env("LC_ALL", "C");
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs one git command (one request) and returns its stdout.
    fn run(&mut self, what: &str, args: &[&str]) -> Result<Vec<u8>, SourceError> {
        match what {
            "ls-tree" => self.counts.list += 1,
            "diff-tree" => self.counts.compare += 1,
            "history" => self.counts.history += 1,
            _ => self.counts.head += 1,
        }
        let output = self.git().args(args).output().map_err(|err| {
            let reason = format!("could not run git: {err}");
            if err.kind() == io::ErrorKind::NotFound {
                self.config_error(what, &reason, "install git, or put it on `PATH`")
            } else {
                self.failure(what, &reason)
            }
        })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let stderr = stderr.trim();
            let reason = if stderr.is_empty() {
                output.status.to_string()
            } else {
                stderr.to_string()
            };
            return Err(self.classified(what, &reason));
        }
        Ok(output.stdout)
    }

    /// What a failed git command means, from git's own message (`LC_ALL=C`
    /// keeps it in English). A missing repository, or an unknown revision in
    /// the head lookup (the one command that names the configured branch),
    /// will not pass by itself: a configuration error. A held lock, and
    /// anything not known here, may pass: the tick carries on without it.
    fn classified(&self, what: &str, reason: &str) -> SourceError {
        let msg = reason.to_ascii_lowercase();
        let held_lock = msg.contains(".lock': file exists") || msg.contains("another git process");
        let fix = if held_lock {
            None
        } else if msg.contains("not a git repository") || msg.contains("cannot change to") {
            Some(format!(
                "`{}` is not a git clone: check `--repo` / `SENTINEL_REPO`",
                self.repo.display()
            ))
        } else if msg.contains("dubious ownership") {
            Some("git does not trust the clone's owner: run as its owner, or add it to git's `safe.directory`".to_string())
        } else if what == "log" && UNKNOWN_REVISION.iter().any(|m| msg.contains(m)) {
            Some(format!(
                "the branch or revision `{}` does not exist here (mistyped, deleted, or not fetched): check `--branch` / `SENTINEL_BRANCH`",
                self.rev
            ))
        } else {
            None
        };
        match fix {
            Some(fix) => self.config_error(what, reason, &fix),
            None => self.failure(what, reason),
        }
    }

    /// A file of the clone's git directory that git and gix would open and
    /// wait on forever (a FIFO, a socket, a device): loud every tick.
    fn special(&self, odd: &std::path::Path) -> SourceError {
        SourceError::Config(format!(
            "`{}` in the clone `{}` is not a regular file (a FIFO, a socket or a device), and git would wait on it forever: restore it from another clone, or clone again",
            odd.display(),
            self.repo.display()
        ))
    }

    fn config_error(&self, what: &str, reason: &str, fix: &str) -> SourceError {
        SourceError::Config(format!(
            "git {what} in `{}` failed: {reason}; {fix}",
            self.repo.display()
        ))
    }

    fn failure(&self, what: &str, reason: &str) -> SourceError {
        SourceError::Unavailable(format!(
            "git {what} in `{}` failed: {reason}",
            self.repo.display()
        ))
    }

    /// The files a merge request changes: `git diff --name-only
    /// base...until`, as paths from the repository root whatever directory
    /// of the clone `repo` is and whatever `diff.relative` says. Files it
    /// deletes are left out: their findings went with them. `Err` is git's
    /// own message.
    pub fn changed_since(&self, base: &str, until: &str) -> Result<Vec<String>, String> {
        let range = format!("{base}...{until}");
        let output = self
            .git()
            .args([
                "diff",
                "--name-only",
                "-z",
                "--no-relative",
                "--no-renames",
                "--no-ext-diff",
                "--diff-filter=d",
                "--end-of-options",
                &range,
                "--",
            ])
            .output()
            .map_err(|e| format!("could not run git: {e}"))?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(match stderr.trim() {
                "" => output.status.to_string(),
                e => e.to_string(),
            });
        }
        Ok(output
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// What a failed read tells the tick: an oversized blob as such, any
    /// other refusal or a broken pipe as a failure that may pass.
    fn read_error(&self, failure: ReadFailure) -> SourceError {
        match failure {
            ReadFailure::Refused(SourceError::Unavailable(reason))
            | ReadFailure::Broken(reason) => self.failure("cat-file", &reason),
            ReadFailure::Refused(other) => other,
        }
    }

    fn describe_path(&self) -> &str {
        self.path.as_deref().unwrap_or(".")
    }
}

/// The answers through git, for a clone gix declines.
impl GitSource {
    fn git_head(&mut self) -> Result<String, SourceError> {
        let rev = self.rev.clone();
        let path = self.path.clone();
        // `--no-show-signature` and `--no-follow` keep a user's log.* settings
        // from adding lines to the answer or changing which commits count.
        let mut args = vec![
            "log",
            "-1",
            "--format=%H",
            "--no-show-signature",
            "--no-follow",
            "--end-of-options",
            &rev,
            // Even without a pathspec, `--` stops a branch that shares its
            // name with a file from being ambiguous.
            "--",
        ];
        if let Some(path) = &path {
            args.push(path);
        }
        let stdout = self.run("log", &args)?;
        let stdout = String::from_utf8_lossy(&stdout);
        let commit = stdout.trim();
        if commit.is_empty() {
            // git answers a path that no commit of the branch ever touched
            // with nothing at all (a deleted path still names the commit that
            // deleted it): the path never existed on this branch.
            return Err(self.config_error(
                "log",
                &format!("no commit on `{rev}` touches `{}`", self.describe_path()),
                "the path never existed on this branch: check `--path` / `SENTINEL_PATH` (and `--branch` / `SENTINEL_BRANCH`)",
            ));
        }
        if !is_object_id(commit) {
            return Err(self.failure("log", &format!("unexpected answer `{commit}`")));
        }
        Ok(commit.to_string())
    }

    fn git_list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
        let path = self.path.clone();
        // No `--` here: after `--end-of-options` ls-tree would take it for a
        // path, and every argument after the tree is a path anyway.
        let mut args = vec!["ls-tree", "-r", "-z", "--full-tree", "--end-of-options", at];
        if let Some(path) = &path {
            args.push(path);
        }
        let stdout = self.run("ls-tree", &args)?;
        let mut entries =
            parse_ls_tree(&stdout).map_err(|reason| self.failure("ls-tree", &reason))?;
        // Git lists a tree in path order already; the sort (and its scratch
        // buffer of half the listing) is for what it would not.
        if !entries.is_sorted_by(|a, b| a.path <= b.path) {
            entries.sort_by(|a, b| a.path.cmp(&b.path));
        }
        Ok(entries)
    }

    fn git_changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError> {
        let path = self.path.clone();
        let mut args = vec![
            "diff-tree",
            "-r",
            "-z",
            "--no-renames",
            "--no-commit-id",
            "--end-of-options",
            from,
            to,
            "--",
        ];
        if let Some(path) = &path {
            args.push(path);
        }
        let stdout = self.run("diff-tree", &args)?;
        parse_diff_tree(&stdout).map_err(|reason| self.failure("diff-tree", &reason))
    }

    fn git_read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError> {
        self.counts.read += 1;
        if self.cat_file.is_none() {
            let child = CatFile::spawn(self.git())
                .map_err(|err| self.failure("cat-file", &format!("could not run git: {err}")))?;
            self.cat_file = Some(child);
        }
        let cat_file = self.cat_file.as_mut().expect("started just above");
        match cat_file.read(blob, limit) {
            Ok(bytes) => Ok(bytes),
            Err(failure) => {
                if matches!(failure, ReadFailure::Broken(_)) {
                    // The pipe is out of step (or the child is gone); only a
                    // fresh child can answer the next read reliably.
                    if let Some(cat_file) = self.cat_file.take() {
                        cat_file.kill();
                    }
                }
                Err(self.read_error(failure))
            }
        }
    }

    fn git_reverts(&mut self, from: &str, to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        let path = self.path.clone();
        let range = format!("{from}..{to}");
        let mut args = vec![
            "log",
            "--no-renames",
            "--no-show-signature",
            "--format=%x01%s%x00",
            "--name-only",
            "-z",
            "--end-of-options",
            &range,
            "--",
        ];
        if let Some(path) = &path {
            args.push(path);
        }
        let stdout = self.run("history", &args)?;
        Ok(parse_reverts(&stdout))
    }
}

impl Source for GitSource {
    fn scope(&self) -> super::Scope {
        super::Scope {
            source: "git".into(),
            project: super::scope::clone_identity(&self.repo),
            branch: self.rev.clone(),
            path: self.path.clone().unwrap_or_default(),
        }
    }

    fn head(&mut self) -> Result<String, SourceError> {
        if let Some(odd) = super::scope::special_git_file(&self.repo, &self.rev) {
            return Err(self.special(&odd));
        }
        let watched = self.watched();
        let parts: Vec<&[u8]> = watched.iter().map(Vec::as_slice).collect();
        let rev = self.rev.clone();
        let Some(answer) = self
            .store()
            .map(|s| s.tip(&rev).and_then(|tip| s.head(tip, &parts)))
        else {
            return self.git_head();
        };
        self.counts.head += 1;
        match answer {
            Ok(Some(head)) => Ok(head.to_string()),
            Ok(None) => Err(SourceError::Config(format!(
                "{}: no commit on `{rev}` touches `{}`; the path never existed on this branch: check `--path` / `SENTINEL_PATH` (and `--branch` / `SENTINEL_BRANCH`)",
                self.in_process("head lookup"),
                self.describe_path()
            ))),
            Err(failure) => Err(self.store_error("head lookup", failure)),
        }
    }

    fn head_at_tip(
        &mut self,
        known: Option<&super::TipHead>,
    ) -> (Result<String, SourceError>, Option<String>) {
        // Read before the head is looked up: a tip that moves in between
        // makes the pair remembered older than the head, never newer, so
        // the next tick asks again.
        if let Some(odd) = super::scope::special_git_file(&self.repo, &self.rev) {
            return (Err(self.special(&odd)), None);
        }
        let rev = self.rev.clone();
        // A ref that names the remembered tip's id names that very commit
        // (an id is the hash of its bytes), so its head is the one found
        // then; nothing else is read. A tag, or a tip that moved, is
        // peeled and checked below as before.
        if let Some(k) = known
            && self.store().is_some_and(|s| s.names(&rev, &k.tip))
        {
            self.counts.head += 1;
            return (Ok(k.head.clone()), Some(k.tip.clone()));
        }
        let tip = self
            .store()
            .and_then(|s| s.tip(&rev).ok())
            .map(|t| t.to_string());
        if let (Some(t), Some(k)) = (&tip, known)
            && *t == k.tip
        {
            self.counts.head += 1;
            return (Ok(k.head.clone()), tip);
        }
        (self.head(), tip)
    }

    fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
        let watched = self.watched();
        let parts: Vec<&[u8]> = watched.iter().map(Vec::as_slice).collect();
        let Some(answer) = self.store().map(|s| s.list(at, &parts)) else {
            return self.git_list(at);
        };
        self.counts.list += 1;
        answer.map_err(|failure| self.store_error("listing", failure))
    }

    fn changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError> {
        let watched = self.watched();
        let parts: Vec<&[u8]> = watched.iter().map(Vec::as_slice).collect();
        let Some(answer) = self.store().map(|s| s.changes(from, to, &parts)) else {
            return self.git_changes(from, to);
        };
        self.counts.compare += 1;
        answer.map_err(|failure| self.store_error("compare", failure))
    }

    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError> {
        // The batch protocol is line based: anything but a plain id could
        // smuggle a second request or a `HEAD:path` lookup into the pipe.
        if !is_object_id(blob) {
            return Err(self.failure("cat-file", &format!("`{blob}` is not an object id")));
        }
        let Some(answer) = self.store().map(|s| s.read(blob, limit)) else {
            return self.git_read(blob, limit);
        };
        self.counts.read += 1;
        answer.map_err(|failure| self.store_error("read", failure))
    }

    fn reverts(&mut self, from: &str, to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        let watched = self.watched();
        let parts: Vec<&[u8]> = watched.iter().map(Vec::as_slice).collect();
        match self.store().map(|s| s.reverts(from, to, &parts)) {
            Some(Ok(Some(reverts))) => {
                self.counts.history += 1;
                Ok(reverts)
            }
            Some(Err(failure)) => {
                self.counts.history += 1;
                Err(self.store_error("rollback lookup", failure))
            }
            // Not one line of commits (a merge, a long range): git walks it.
            Some(Ok(None)) | None => self.git_reverts(from, to),
        }
    }

    fn request_counts(&self) -> RequestCounts {
        RequestCounts {
            reader: self
                .store
                .as_ref()
                .map(|s| if s.is_some() { "gix" } else { "git" }),
            ..self.counts
        }
    }
}

impl Drop for GitSource {
    fn drop(&mut self) {
        if let Some(cat_file) = self.cat_file.take() {
            cat_file.close();
        }
    }
}

/// A running `git cat-file --batch`.
struct CatFile {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// Why a batch read gave no bytes.
enum ReadFailure {
    /// git answered, and the pipe is ready for the next request.
    Refused(SourceError),
    /// The pipe is in an unknown state: the child must be replaced.
    Broken(String),
}

impl CatFile {
    fn spawn(mut cmd: Command) -> io::Result<CatFile> {
        let mut child = cmd
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("cat-file started without its pipes"));
        };
        Ok(CatFile {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
        })
    }

    /// Asks for `blob` and waits for its answer.
    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, ReadFailure> {
        let broken = |err: io::Error| ReadFailure::Broken(format!("cat-file stopped: {err}"));
        let stdin = self.stdin.as_mut().ok_or_else(|| {
            ReadFailure::Broken("cat-file takes its ids from another writer".to_string())
        })?;
        stdin
            .write_all(format!("{blob}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(broken)?;
        self.answer(blob, limit)
    }

    /// The answer for `blob`, the next one in the pipe: its bytes, or why
    /// not. The header comes first, so a blob over `limit` is skipped
    /// without ever being held.
    fn answer(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, ReadFailure> {
        let broken = |err: io::Error| ReadFailure::Broken(format!("cat-file stopped: {err}"));
        let (kind, size) = self.read_header(blob)?;

        if kind != "blob" || size > limit {
            // Drain the answer so the pipe stays in step for the next read,
            // without ever holding the refused bytes.
            self.skip(size)?;
            return Err(ReadFailure::Refused(if kind != "blob" {
                SourceError::Unavailable(format!("object {blob} is a {kind}, not a blob"))
            } else {
                SourceError::TooLarge { size, limit }
            }));
        }

        let len = usize::try_from(size)
            .map_err(|_| ReadFailure::Broken(format!("{size} bytes do not fit in memory")))?;
        let mut bytes = vec![0; len];
        self.stdout.read_exact(&mut bytes).map_err(broken)?;
        self.end_of_answer()?;
        Ok(bytes)
    }

    /// The header cat-file answers for `blob`: its kind and size, or why the
    /// object cannot be read (refused) or the pipe cannot be trusted (broken).
    fn read_header(&mut self, blob: &str) -> Result<(String, u64), ReadFailure> {
        let broken = |err: io::Error| ReadFailure::Broken(format!("cat-file stopped: {err}"));
        let mut header = Vec::new();
        (&mut self.stdout)
            .take(MAX_HEADER)
            .read_until(b'\n', &mut header)
            .map_err(broken)?;
        if header.pop() != Some(b'\n') {
            return Err(ReadFailure::Broken(if header.is_empty() {
                "cat-file stopped answering".to_string()
            } else {
                "cat-file sent an unfinished header".to_string()
            }));
        }
        let header = String::from_utf8_lossy(&header);
        let fields: Vec<&str> = header.split(' ').collect();
        match fields.as_slice() {
            [oid, "missing" | "ambiguous"] if *oid == blob => Err(ReadFailure::Refused(
                SourceError::Unavailable(format!("object {blob} is {}", fields[1])),
            )),
            [oid, kind, size] if *oid == blob => match size.parse::<u64>() {
                Ok(size) => Ok((kind.to_string(), size)),
                Err(_) => Err(ReadFailure::Broken(format!(
                    "cat-file sent a bad header `{header}`"
                ))),
            },
            _ => Err(ReadFailure::Broken(format!(
                "cat-file sent an unexpected header `{header}`"
            ))),
        }
    }

    /// Reads past `size` bytes of content and the newline after them.
    fn skip(&mut self, size: u64) -> Result<(), ReadFailure> {
        let mut chunk = vec![0; 64 * 1024];
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left).map_or(chunk.len(), |left| left.min(chunk.len()));
            self.stdout
                .read_exact(&mut chunk[..n])
                .map_err(|err| ReadFailure::Broken(format!("cat-file stopped: {err}")))?;
            left -= n as u64;
        }
        self.end_of_answer()
    }

    fn end_of_answer(&mut self) -> Result<(), ReadFailure> {
        let mut newline = [0u8; 1];
        match self.stdout.read_exact(&mut newline) {
            Ok(()) if newline == *b"\n" => Ok(()),
            Ok(()) => Err(ReadFailure::Broken(
                "cat-file sent more bytes than announced".to_string(),
            )),
            Err(err) => Err(ReadFailure::Broken(format!("cat-file stopped: {err}"))),
        }
    }

    /// Ends the child politely: on end of input cat-file exits by itself.
    fn close(self) {
        let CatFile {
            mut child,
            stdin,
            stdout,
        } = self;
        drop(stdin);
        // Closing our end too means a child still writing gets an error
        // instead of blocking the wait below forever.
        drop(stdout);
        let _ = child.wait();
    }

    /// Ends a child whose pipe can no longer be trusted.
    fn kill(self) {
        let CatFile {
            mut child,
            stdin,
            stdout,
        } = self;
        drop(stdin);
        drop(stdout);
        let _ = child.kill();
        let _ = child.wait();
    }
}
/// `None` for the whole repository, else the directory without the
/// decorations (`./`, `/`) that git would not read as part of the name.
fn normalize_path(path: String) -> Option<String> {
    let trimmed = path.trim_matches('/');
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    let trimmed = trimmed.trim_start_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        None
    } else {
        Some(trimmed.to_string())
    }
}

/// A full SHA-1 or SHA-256 object id, as git prints it.
pub(super) fn is_object_id(id: &str) -> bool {
    (id.len() == 40 || id.len() == 64)
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(super) fn is_regular_file(mode: &str) -> bool {
    mode == "100644" || mode == "100755"
}

/// Records of `ls-tree -r -z`: `<mode> SP <type> SP <object> TAB <name> NUL`.
pub(super) fn parse_ls_tree(stdout: &[u8]) -> Result<Vec<Entry>, String> {
    // About 70 bytes a record (mode, type, 40-digit id, a short path).
    let mut entries = Vec::with_capacity(stdout.len() / 64);
    for record in stdout.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let bad = || format!("unexpected record `{}`", String::from_utf8_lossy(record));
        let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
        let (meta, name) = (&record[..tab], &record[tab + 1..]);
        let meta = std::str::from_utf8(meta).map_err(|_| bad())?;
        let mut words = meta.split(' ');
        let (Some(mode), Some(kind), Some(object), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(bad());
        };
        if kind != "blob" || !is_regular_file(mode) {
            continue;
        }
        if !is_object_id(object) {
            return Err(bad());
        }
        entries.push(Entry {
            // Lossy for now: non-UTF-8 names get proper handling later.
            path: String::from_utf8_lossy(name).into_owned(),
            blob: object.to_string(),
        });
    }
    Ok(entries)
}

/// Records of `diff-tree -r -z`:
/// `:<mode1> SP <mode2> SP <sha1> SP <sha2> SP <status> NUL <path> NUL`.
/// Paths touched by each revert commit in `git log --format=%x01%s%x00 --name-only -z`.
fn parse_reverts(stdout: &[u8]) -> Vec<Vec<String>> {
    stdout
        .split(|b| *b == 1)
        .filter_map(|record| {
            let end = record.iter().position(|b| *b == 0)?;
            let subject = String::from_utf8_lossy(&record[..end]);
            if !subject.starts_with("Revert \"") {
                return None;
            }
            let mut paths: Vec<String> = record[end + 1..]
                .split(|b| *b == 0)
                .map(|p| String::from_utf8_lossy(p).trim_matches('\n').to_string())
                .filter(|p| !p.is_empty())
                .collect();
            paths.sort();
            paths.dedup();
            Some(paths)
        })
        .collect()
}

fn parse_diff_tree(stdout: &[u8]) -> Result<Vec<Change>, String> {
    let mut changes = Vec::new();
    let mut fields = stdout.split(|&b| b == 0);
    while let Some(meta) = fields.next() {
        if meta.is_empty() {
            // Only the split after the final NUL is empty.
            continue;
        }
        let bad = || format!("unexpected record `{}`", String::from_utf8_lossy(meta));
        let meta = std::str::from_utf8(meta).map_err(|_| bad())?;
        let meta = meta.strip_prefix(':').ok_or_else(bad)?;
        let [_, mode2, _, sha2, status] = meta.split(' ').collect::<Vec<_>>()[..] else {
            return Err(bad());
        };
        let name = fields
            .next()
            .filter(|name| !name.is_empty())
            .ok_or_else(bad)?;
        // Lossy for now: non-UTF-8 names get proper handling later.
        let path = String::from_utf8_lossy(name).into_owned();
        let change = match status {
            "D" => Change::Delete { path },
            "A" | "M" | "T" if !is_regular_file(mode2) => Change::Delete { path },
            "A" | "M" | "T" if is_object_id(sha2) => Change::Upsert {
                path,
                blob: sha2.to_string(),
            },
            _ => return Err(bad()),
        };
        changes.push(change);
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {

    #[test]
    fn reverts_lists_the_paths_of_revert_commits_only() {
        let log =
            b"\x01Revert \"add b\"\x00\x00lib/b.js\x00lib/c.js\x00\x01add b\x00\x00lib/b.js\x00";
        assert_eq!(
            super::parse_reverts(log),
            vec![vec!["lib/b.js".to_string(), "lib/c.js".to_string()]]
        );
        assert!(super::parse_reverts(b"").is_empty());
    }
    use super::*;
    use std::fs;
    use std::path::Path;
    use tempfile::TempDir;

    /// A scratch repository driven by the real `git`, isolated from the
    /// user's configuration so every run makes the same commits.
    struct Repo {
        dir: TempDir,
    }

    impl Repo {
        fn new() -> Repo {
            Repo::with_format("sha1")
        }

        fn with_format(format: &str) -> Repo {
            let repo = Repo {
                dir: TempDir::new().expect("temporary directory"),
            };
            let format = format!("--object-format={format}");
            repo.git(&["-c", "init.defaultBranch=main", "init", "-q", &format]);
            repo
        }

        fn path(&self) -> &Path {
            self.dir.path()
        }

        fn git(&self, args: &[&str]) -> String {
            let mut cmd = Command::new("git");
            cmd.arg("-C").arg(self.path());
            cmd.args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"]);
            cmd.args(args);
            for var in REDIRECTING_ENV {
                cmd.env_remove(var);
            }
            let output = cmd
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
                .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z")
                .env("LC_ALL", "C")
                .stdin(Stdio::null())
                .output()
                .expect("run git");
            assert!(
                output.status.success(),
                "git {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout)
                .expect("utf-8 output")
                .trim_end_matches('\n')
                .to_string()
        }

        fn write(&self, path: &str, content: impl AsRef<[u8]>) {
            let file = self.path().join(path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(file, content).unwrap();
        }

        fn remove(&self, path: &str) {
            fs::remove_file(self.path().join(path)).unwrap();
        }

        fn commit(&self, message: &str) -> String {
            self.git(&["add", "-A"]);
            self.git(&["commit", "-q", "--allow-empty", "-m", message]);
            self.git(&["rev-parse", "HEAD"])
        }

        fn blob(&self, rev_and_path: &str) -> String {
            self.git(&["rev-parse", rev_and_path])
        }

        /// A source that reads through git only: these tests are about
        /// the fallback (`both_readers_answer_alike` holds gix to it).
        fn source(&self, path: Option<&str>) -> GitSource {
            let mut source =
                GitSource::new(self.path().to_path_buf(), None, path.map(str::to_string));
            source.store = Some(None);
            source
        }

        fn source_through_gix(&self, path: Option<&str>) -> GitSource {
            let mut source =
                GitSource::new(self.path().to_path_buf(), None, path.map(str::to_string));
            assert_eq!(source.reader(), "gix");
            source
        }
    }

    fn paths(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.path.as_str()).collect()
    }

    fn unavailable(result: Result<impl std::fmt::Debug, SourceError>) -> String {
        match result {
            Err(SourceError::Unavailable(msg)) => msg,
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    fn config(result: Result<impl std::fmt::Debug, SourceError>) -> String {
        match result {
            Err(SourceError::Config(msg)) => msg,
            other => panic!("expected Config, got {other:?}"),
        }
    }

    #[test]
    fn rev_defaults_to_head_and_keeps_what_was_given() {
        let repo = Repo::new();
        assert_eq!(repo.source(None).rev(), "HEAD");
        let source = GitSource::new(repo.path().to_path_buf(), Some("release".into()), None);
        assert_eq!(source.rev(), "release");
    }

    #[test]
    fn head_ignores_commits_outside_the_watched_path() {
        let repo = Repo::new();
        repo.write("docs/a.md", "a");
        let touching = repo.commit("docs");
        repo.write("src/main.rs", "fn main() {}");
        repo.write("docsx/b.md", "b");
        let outside = repo.commit("elsewhere");

        assert_eq!(repo.source(Some("docs")).head(), Ok(touching));
        assert_eq!(repo.source(None).head(), Ok(outside));
    }

    #[test]
    fn whole_repository_can_be_named_by_nothing_empty_or_dot() {
        let repo = Repo::new();
        repo.write("a", "a");
        let tip = repo.commit("one");
        for path in [None, Some(""), Some("."), Some("./"), Some("/")] {
            let mut source = repo.source(path);
            assert_eq!(source.head(), Ok(tip.clone()), "path {path:?}");
            assert_eq!(paths(&source.list(&tip).unwrap()), ["a"], "path {path:?}");
        }
    }

    #[test]
    fn head_follows_the_named_branch_not_the_checked_out_one() {
        let repo = Repo::new();
        repo.write("docs/a.md", "a");
        repo.commit("one");
        repo.git(&["checkout", "-q", "-b", "release"]);
        repo.write("docs/a.md", "release");
        let release = repo.commit("release");
        repo.git(&["checkout", "-q", "main"]);
        let main = repo.git(&["rev-parse", "main"]);

        let mut on_release = GitSource::new(
            repo.path().to_path_buf(),
            Some("release".into()),
            Some("docs".into()),
        );
        assert_eq!(on_release.head(), Ok(release));
        assert_eq!(repo.source(Some("docs")).head(), Ok(main));
    }

    /// A no-op asks only whether the ref still names the remembered tip:
    /// a branch, `HEAD` or the id itself does; a tip that moved does not,
    /// and neither does an annotated tag of it, which is peeled by the
    /// lookup that follows (so a tag is never taken for its commit).
    #[test]
    fn a_ref_names_the_remembered_tip_only_when_it_points_at_that_id() {
        let repo = Repo::new();
        repo.write("docs/a.md", "a");
        let first = repo.commit("one");
        repo.write("docs/a.md", "b");
        let tip = repo.commit("two");
        repo.git(&["tag", "-a", "-m", "v1", "v1", &tip]);
        let mut source = repo.source_through_gix(None);
        let store = source.store().expect("gix reads this clone");
        for rev in ["HEAD", "main", "refs/heads/main", tip.as_str()] {
            assert!(store.names(rev, &tip), "{rev}");
        }
        assert!(!store.names("HEAD", &first));
        assert!(!store.names("v1", &tip));
        assert!(!store.names("nowhere", &tip));
        assert!(!store.names("HEAD", "not an id"));
    }

    #[test]
    fn head_of_a_branch_that_shares_a_name_with_a_file_is_not_ambiguous() {
        let repo = Repo::new();
        repo.write("main", "a file called main");
        let tip = repo.commit("one");
        let mut source = GitSource::new(repo.path().to_path_buf(), Some("main".into()), None);
        assert_eq!(source.head(), Ok(tip));
    }

    #[test]
    fn head_in_a_directory_that_is_not_a_repository_is_a_configuration_error_naming_it() {
        let dir = TempDir::new().unwrap();
        let mut source = GitSource::new(dir.path().to_path_buf(), None, None);
        let msg = config(source.head());
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        assert!(msg.contains("not a git repository"), "{msg}");
        assert!(msg.contains("`--repo` / `SENTINEL_REPO`"), "{msg}");
    }

    #[test]
    fn head_in_a_missing_directory_is_a_configuration_error() {
        let dir = TempDir::new().unwrap();
        let missing = dir.path().join("nope");
        let mut source = GitSource::new(missing.clone(), None, None);
        let msg = config(source.head());
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(msg.contains("`--repo` / `SENTINEL_REPO`"), "{msg}");
    }

    #[test]
    fn head_of_an_unknown_revision_is_a_configuration_error() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let mut source = GitSource::new(repo.path().to_path_buf(), Some("nope".into()), None);
        let msg = config(source.head());
        assert!(msg.contains("`nope`"), "{msg}");
        assert!(msg.contains("`--branch` / `SENTINEL_BRANCH`"), "{msg}");
    }

    #[test]
    fn head_of_a_path_no_commit_touches_is_a_configuration_error() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let msg = config(repo.source(Some("docs")).head());
        assert!(msg.contains("`docs`"), "{msg}");
        assert!(msg.contains("`--path` / `SENTINEL_PATH`"), "{msg}");
    }

    #[test]
    fn head_of_a_path_that_was_deleted_is_the_commit_that_deleted_it() {
        let repo = Repo::new();
        repo.write("docs/a", "a");
        repo.write("b", "b");
        repo.commit("one");
        repo.remove("docs/a");
        let gone = repo.commit("two");
        assert_eq!(repo.source(Some("docs")).head(), Ok(gone));
    }

    #[test]
    fn head_of_an_empty_repository_is_a_configuration_error() {
        let repo = Repo::new();
        config(repo.source(None).head());
    }

    #[test]
    fn a_held_lock_or_an_unknown_failure_is_unavailable_and_the_rest_is_config() {
        let repo = Repo::new();
        let source = repo.source(None);
        let held = "fatal: Unable to create '/r/.git/index.lock': File exists.";
        for (what, reason) in [
            ("log", held),
            (
                "log",
                "fatal: bad object 1111111111111111111111111111111111111111",
            ),
            ("log", "fatal: unable to read tree 2222"),
            ("ls-tree", "fatal: Not a valid object name 3333"),
            ("diff-tree", "fatal: bad revision '4444'"),
            ("history", "fatal: ambiguous argument 'a..b'"),
        ] {
            unavailable(Err::<(), _>(source.classified(what, reason)));
        }
        for (what, reason) in [
            ("log", "fatal: bad revision 'mian'"),
            (
                "log",
                "fatal: ambiguous argument 'x': unknown revision or path",
            ),
            (
                "ls-tree",
                "fatal: not a git repository (or any of the parent directories): .git",
            ),
            (
                "log",
                "fatal: cannot change to '/nope': No such file or directory",
            ),
            (
                "log",
                "fatal: detected dubious ownership in repository at '/r'",
            ),
        ] {
            config(Err::<(), _>(source.classified(what, reason)));
        }
    }

    #[test]
    fn list_returns_only_files_under_the_watched_path_with_their_blob_ids() {
        let repo = Repo::new();
        repo.write("docs/b.md", "b");
        repo.write("docs/a.md", "a");
        repo.write("docs/deep/c.md", "c");
        repo.write("docsx/d.md", "d");
        repo.write("readme", "r");
        let tip = repo.commit("one");

        let entries = repo.source(Some("docs")).list(&tip).unwrap();
        let expected: Vec<Entry> = ["docs/a.md", "docs/b.md", "docs/deep/c.md"]
            .into_iter()
            .map(|path| Entry {
                path: path.to_string(),
                blob: repo.blob(&format!("HEAD:{path}")),
            })
            .collect();
        assert_eq!(entries, expected);
    }

    #[test]
    fn list_is_sorted_by_path() {
        let repo = Repo::new();
        // Git orders trees as if directories ended in `/`, which puts
        // `a.b` before `a/`; the list must be in plain string order.
        repo.write("a/x", "x");
        repo.write("a.b", "y");
        repo.write("a-c", "z");
        let tip = repo.commit("one");
        let entries = repo.source(None).list(&tip).unwrap();
        assert_eq!(paths(&entries), ["a-c", "a.b", "a/x"]);
    }

    #[test]
    fn list_keeps_names_with_spaces_and_newlines() {
        let repo = Repo::new();
        repo.write("docs/with space\nand newline.md", "odd");
        repo.write("docs/tab\tand \"quotes\".md", "odder");
        let tip = repo.commit("one");
        let entries = repo.source(Some("docs")).list(&tip).unwrap();
        assert_eq!(
            paths(&entries),
            [
                "docs/tab\tand \"quotes\".md",
                "docs/with space\nand newline.md"
            ]
        );
        assert_eq!(
            entries[1].blob,
            repo.blob("HEAD:docs/with space\nand newline.md")
        );
    }

    #[cfg(unix)]
    #[test]
    fn list_keeps_executables_and_skips_symlinks_and_submodules() {
        use std::os::unix::fs::PermissionsExt;
        let repo = Repo::new();
        repo.write("docs/plain.md", "plain");
        repo.write("docs/run.sh", "#!/bin/sh\n");
        let run = repo.path().join("docs/run.sh");
        fs::set_permissions(&run, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("plain.md", repo.path().join("docs/link.md")).unwrap();
        repo.commit("files");
        let gitlink = repo.git(&["rev-parse", "HEAD"]);
        repo.git(&[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{gitlink},docs/module"),
        ]);
        repo.git(&["commit", "-q", "-m", "submodule"]);
        let tip = repo.git(&["rev-parse", "HEAD"]);
        assert!(
            repo.git(&["ls-tree", "-r", "HEAD"])
                .contains("160000 commit")
        );

        let entries = repo.source(Some("docs")).list(&tip).unwrap();
        assert_eq!(paths(&entries), ["docs/plain.md", "docs/run.sh"]);
        assert_eq!(entries[1].blob, repo.blob("HEAD:docs/run.sh"));
    }

    #[test]
    fn list_of_an_unknown_commit_is_unavailable() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let msg = unavailable(repo.source(None).list(&"0".repeat(40)));
        assert!(msg.contains("ls-tree"), "{msg}");
    }

    #[test]
    fn list_of_a_path_absent_at_the_commit_is_empty() {
        let repo = Repo::new();
        repo.write("a", "a");
        let tip = repo.commit("one");
        assert_eq!(repo.source(Some("docs")).list(&tip), Ok(vec![]));
    }

    #[test]
    fn paths_starting_with_a_dash_are_not_taken_for_options() {
        let repo = Repo::new();
        repo.write("-n/a", "a");
        repo.write("--output=x/b", "b");
        let first = repo.commit("one");
        repo.write("-n/a", "a2");
        let second = repo.commit("two");

        let mut source = repo.source(Some("-n"));
        assert_eq!(source.head(), Ok(second.clone()));
        assert_eq!(paths(&source.list(&second).unwrap()), ["-n/a"]);
        assert_eq!(
            source.changes(&first, &second),
            Ok(vec![Change::Upsert {
                path: "-n/a".into(),
                blob: repo.blob("HEAD:-n/a"),
            }])
        );

        let mut source = repo.source(Some("--output=x"));
        assert_eq!(paths(&source.list(&second).unwrap()), ["--output=x/b"]);
        assert_eq!(source.head(), Ok(first));
    }

    #[test]
    fn revisions_starting_with_a_dash_are_not_taken_for_options() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        for mut source in [
            GitSource::new(repo.path().to_path_buf(), Some("--all".into()), None),
            repo.source(None),
        ] {
            source.rev = "--all".into();
            assert!(config(source.head()).contains("`--all`"));
            unavailable(source.list("--name-only"));
            unavailable(source.changes("--stat", "HEAD"));
        }
    }

    #[test]
    fn paths_are_names_not_patterns() {
        let repo = Repo::new();
        repo.write("d*/a", "a");
        repo.write("dx/b", "b");
        let tip = repo.commit("one");
        let mut source = repo.source(Some("d*"));
        assert_eq!(paths(&source.list(&tip).unwrap()), ["d*/a"]);
    }

    #[test]
    fn changes_give_upserts_and_deletes_only_under_the_watched_path() {
        let repo = Repo::new();
        repo.write("docs/keep.md", "keep");
        repo.write("docs/edit.md", "before");
        repo.write("docs/gone.md", "gone");
        repo.write("other/edit.md", "before");
        let from = repo.commit("one");
        repo.write("docs/edit.md", "after");
        repo.write("docs/new/added.md", "added");
        repo.remove("docs/gone.md");
        repo.write("other/edit.md", "after");
        repo.write("docsx/added.md", "added");
        let to = repo.commit("two");

        let changes = repo.source(Some("docs")).changes(&from, &to).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Upsert {
                    path: "docs/edit.md".into(),
                    blob: repo.blob("HEAD:docs/edit.md"),
                },
                Change::Delete {
                    path: "docs/gone.md".into(),
                },
                Change::Upsert {
                    path: "docs/new/added.md".into(),
                    blob: repo.blob("HEAD:docs/new/added.md"),
                },
            ]
        );
        assert_eq!(repo.source(None).changes(&from, &to).unwrap().len(), 5);
    }

    #[test]
    fn changes_between_equal_commits_are_empty() {
        let repo = Repo::new();
        repo.write("a", "a");
        let tip = repo.commit("one");
        assert_eq!(repo.source(None).changes(&tip, &tip), Ok(vec![]));
    }

    #[cfg(unix)]
    #[test]
    fn changes_treat_a_file_that_is_no_longer_regular_as_deleted() {
        use std::os::unix::fs::PermissionsExt;
        let repo = Repo::new();
        repo.write("docs/to-link.md", "soon a link");
        repo.write("docs/to-exec.sh", "soon executable");
        let from = repo.commit("one");
        repo.remove("docs/to-link.md");
        std::os::unix::fs::symlink("elsewhere", repo.path().join("docs/to-link.md")).unwrap();
        std::os::unix::fs::symlink("elsewhere", repo.path().join("docs/new-link.md")).unwrap();
        let exec = repo.path().join("docs/to-exec.sh");
        fs::set_permissions(&exec, fs::Permissions::from_mode(0o755)).unwrap();
        let to = repo.commit("two");

        let changes = repo.source(Some("docs")).changes(&from, &to).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Delete {
                    path: "docs/new-link.md".into(),
                },
                Change::Upsert {
                    path: "docs/to-exec.sh".into(),
                    blob: repo.blob("HEAD:docs/to-exec.sh"),
                },
                Change::Delete {
                    path: "docs/to-link.md".into(),
                },
            ]
        );
    }

    #[test]
    fn changes_from_an_unknown_commit_are_unavailable() {
        let repo = Repo::new();
        repo.write("a", "a");
        let tip = repo.commit("one");
        let msg = unavailable(repo.source(None).changes(&"1".repeat(40), &tip));
        assert!(msg.contains("diff-tree"), "{msg}");
        assert!(msg.contains(&repo.path().display().to_string()), "{msg}");
    }

    #[test]
    fn read_returns_the_exact_bytes_of_several_blobs_through_one_child() {
        let repo = Repo::new();
        let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        repo.write("text", "hello\nworld\n");
        repo.write("binary", &binary);
        repo.write("empty", "");
        repo.write("no-newline", "x");
        repo.commit("one");

        let mut source = repo.source(None);
        assert_eq!(
            source.read(&repo.blob("HEAD:text"), 1 << 20),
            Ok(b"hello\nworld\n".to_vec())
        );
        let pid = source.cat_file.as_ref().unwrap().child.id();
        assert_eq!(source.read(&repo.blob("HEAD:binary"), 1 << 20), Ok(binary));
        assert_eq!(source.read(&repo.blob("HEAD:empty"), 0), Ok(vec![]));
        assert_eq!(
            source.read(&repo.blob("HEAD:no-newline"), 1),
            Ok(b"x".to_vec())
        );
        assert_eq!(source.cat_file.as_ref().unwrap().child.id(), pid);
        assert_eq!(source.requests(), 4);
    }

    #[test]
    fn read_over_the_limit_is_too_large_and_the_next_read_still_works() {
        let repo = Repo::new();
        // Several chunks' worth, so the skipping really loops.
        let big = vec![b'z'; 200_000];
        repo.write("big", &big);
        repo.write("small", "small");
        repo.commit("one");

        let mut source = repo.source(None);
        assert_eq!(
            source.read(&repo.blob("HEAD:big"), 199_999),
            Err(SourceError::TooLarge {
                size: 200_000,
                limit: 199_999,
            })
        );
        let pid = source.cat_file.as_ref().unwrap().child.id();
        assert_eq!(
            source.read(&repo.blob("HEAD:small"), 5),
            Ok(b"small".to_vec())
        );
        assert_eq!(source.read(&repo.blob("HEAD:big"), 200_000), Ok(big));
        assert_eq!(source.cat_file.as_ref().unwrap().child.id(), pid);
    }

    #[test]
    fn read_of_a_missing_object_is_unavailable_and_the_next_read_still_works() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let mut source = repo.source(None);
        let msg = unavailable(source.read(&"2".repeat(40), 100));
        assert!(msg.contains("missing"), "{msg}");
        assert_eq!(source.read(&repo.blob("HEAD:a"), 100), Ok(b"a".to_vec()));
    }

    #[test]
    fn read_of_something_other_than_a_blob_is_unavailable_and_the_next_read_still_works() {
        let repo = Repo::new();
        repo.write("a", "a");
        let tip = repo.commit("one");
        let mut source = repo.source(None);
        let msg = unavailable(source.read(&tip, 1 << 20));
        assert!(msg.contains("commit"), "{msg}");
        assert_eq!(source.read(&repo.blob("HEAD:a"), 100), Ok(b"a".to_vec()));
    }

    #[test]
    fn read_refuses_names_that_are_not_object_ids() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let mut source = repo.source(None);
        for name in ["HEAD:a", "HEAD", "", &format!("{}\nHEAD", "a".repeat(40))] {
            unavailable(source.read(name, 100));
        }
        assert!(source.cat_file.is_none());
        assert_eq!(source.requests(), 0);
    }

    #[test]
    fn read_after_the_child_died_is_unavailable_and_the_next_read_starts_a_new_one() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let blob = repo.blob("HEAD:a");
        let mut source = repo.source(None);
        assert_eq!(source.read(&blob, 100), Ok(b"a".to_vec()));
        let child = &mut source.cat_file.as_mut().unwrap().child;
        let old_pid = child.id();
        child.kill().unwrap();
        child.wait().unwrap();

        unavailable(source.read(&blob, 100));
        assert!(source.cat_file.is_none());
        assert_eq!(source.read(&blob, 100), Ok(b"a".to_vec()));
        assert_ne!(source.cat_file.as_ref().unwrap().child.id(), old_pid);
        assert_eq!(source.requests(), 3);
    }

    #[test]
    fn read_in_a_directory_that_is_not_a_repository_is_unavailable() {
        let dir = TempDir::new().unwrap();
        let mut source = GitSource::new(dir.path().to_path_buf(), None, None);
        unavailable(source.read(&"3".repeat(40), 100));
        assert_eq!(source.requests(), 1);
    }

    #[test]
    fn requests_count_every_git_command_and_every_object_read() {
        let repo = Repo::new();
        repo.write("docs/a", "a");
        let first = repo.commit("one");
        repo.write("docs/b", "b");
        let second = repo.commit("two");

        let mut source = repo.source(Some("docs"));
        assert_eq!(source.requests(), 0);
        source.head().unwrap();
        assert_eq!(source.requests(), 1);
        let entries = source.list(&second).unwrap();
        assert_eq!(source.requests(), 2);
        source.changes(&first, &second).unwrap();
        assert_eq!(source.requests(), 3);
        for entry in &entries {
            source.read(&entry.blob, 100).unwrap();
        }
        assert_eq!(source.requests(), 5);
        source.read(&entries[0].blob, 0).unwrap_err();
        assert_eq!(source.requests(), 6);
        source.changes(&"4".repeat(40), &second).unwrap_err();
        assert_eq!(source.requests(), 7);
    }

    #[test]
    fn dropping_the_source_ends_its_child() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.commit("one");
        let mut source = repo.source(None);
        source.read(&repo.blob("HEAD:a"), 100).unwrap();
        let pid = source.cat_file.as_ref().unwrap().child.id();
        drop(source);
        // Reaped, not merely signalled: no zombie is left behind.
        if cfg!(target_os = "linux") {
            assert!(!Path::new(&format!("/proc/{pid}")).exists());
        }
    }

    /// A history of every kind of change (executables, links, a
    /// submodule, a file turned directory, names with spaces, a merge, a
    /// revert), in SHA-1 and SHA-256: gix answers every lookup exactly as
    /// git does, at several watched paths.
    #[test]
    fn both_readers_answer_alike() {
        for format in ["sha1", "sha256"] {
            let repo = Repo::with_format(format);
            let mut commits = vec![];
            repo.write("docs/a.md", "a");
            repo.write("docs/deep/b c.md", "b");
            repo.write("top", "t");
            commits.push(repo.commit("one"));
            repo.write("docs/a.md", "a2");
            repo.write("docs/run.sh", "#!/bin/sh");
            repo.git(&["update-index", "--add", "--chmod=+x", "docs/run.sh"]);
            std::os::unix::fs::symlink("a.md", repo.path().join("docs/link")).unwrap();
            commits.push(repo.commit("two"));
            let sub = repo.git(&["rev-parse", "HEAD"]);
            let cacheinfo = format!("160000,{sub},docs/sub");
            repo.git(&["update-index", "--add", "--cacheinfo", &cacheinfo]);
            repo.git(&["commit", "-q", "-m", "sub"]);
            commits.push(repo.git(&["rev-parse", "HEAD"]));
            repo.remove("docs/deep/b c.md");
            fs::remove_dir(repo.path().join("docs/deep")).unwrap();
            repo.write("docs/deep", "now a file");
            repo.write("elsewhere/x", "x");
            commits.push(repo.commit("three"));
            repo.git(&["revert", "--no-edit", "HEAD"]);
            commits.push(repo.git(&["rev-parse", "HEAD"]));
            repo.git(&["checkout", "-q", "-b", "side", &commits[1]]);
            repo.write("docs/side.md", "s");
            repo.commit("side");
            repo.git(&["checkout", "-q", "main"]);
            repo.git(&["merge", "-q", "--no-edit", "side"]);
            commits.push(repo.git(&["rev-parse", "HEAD"]));
            repo.write("elsewhere/y", "y");
            commits.push(repo.commit("outside"));
            for path in [
                None,
                Some("docs"),
                Some("docs/deep"),
                Some("top"),
                Some("none"),
            ] {
                let (mut git, mut gix) = (repo.source(path), repo.source_through_gix(path));
                // The same answer, or the same kind of error in other words.
                let (a, b) = (gix.head(), git.head());
                match (&a, &b) {
                    (Err(SourceError::Config(_)), Err(SourceError::Config(_))) => {}
                    _ => assert_eq!(a, b, "{format} {path:?}"),
                }
                for (i, a) in commits.iter().enumerate() {
                    let listed = gix.list(a).unwrap();
                    assert_eq!(listed, git.list(a).unwrap(), "{format} {path:?} {a}");
                    for e in &listed {
                        assert_eq!(gix.read(&e.blob, 1 << 20), git.read(&e.blob, 1 << 20));
                    }
                    for b in &commits[i..] {
                        let why = format!("{format} {path:?} {a}..{b}");
                        assert_eq!(gix.changes(a, b), git.changes(a, b), "{why}");
                        assert_eq!(gix.reverts(a, b), git.reverts(a, b), "{why}");
                    }
                }
                assert_eq!(gix.request_counts().reader, Some("gix"));
                assert_eq!(git.request_counts().reader, Some("git"));
            }
        }
    }
}
