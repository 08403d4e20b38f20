//! The git source: a local clone read through the `git` command.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;

use super::{Change, Entry, RequestCounts, Source, SourceError};

/// Environment that would point git at another repository, work tree or
/// object store than the one we were given (set, for instance, when we run
/// from inside a git hook).
pub(crate) const REDIRECTING_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

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
    /// Started on the first read, so sources that never read pay nothing.
    cat_file: Option<CatFile>,
    /// The ids announced by `prefetch`, all written at once to a child of
    /// their own; `read` takes their answers in order.
    stream: Option<Stream>,
    /// A `cat-file --batch` started by `warm` (`--buffer`) or by `begin`
    /// (the one the walk read its objects through), waiting for the ids of
    /// `prefetch`: git's own start-up runs while the state loads.
    warm: Option<CatFile>,
    /// The walk since the remembered head that answered this tick's head
    /// lookup; its compare and rollback lookup are answered from it.
    walk: Option<super::git_walk::Walk>,
    /// A walk started by `begin`, not read yet, with the tip it was read at.
    begun: Option<Begun>,
    /// The clone's own object files, opened on first use (`None` inside:
    /// the repository is one git must read, see `git_odb`).
    odb: Option<Option<super::git_odb::Odb>>,
}

/// The `cat-file --batch` the walk since the remembered head reads its
/// objects through, started early so that git's start-up runs while the
/// tick loads its state. Without `--buffer`: the walk asks one object at a
/// time and needs each answer before the next question.
struct Begun {
    from: String,
    tip: String,
    cat_file: CatFile,
}

impl Begun {
    fn kill(self) {
        self.cat_file.kill();
    }
}

/// `git_objects`' view of a `cat-file --batch` child; `broken` when the
/// pipe went out of step and the child must not be used again.
struct Asking<'a> {
    cat_file: &'a mut CatFile,
    broken: bool,
}

impl super::git_objects::Objects for Asking<'_> {
    fn objects(&mut self, ids: &[String], limit: u64) -> Vec<Option<super::git_objects::Object>> {
        let mut answers = Vec::with_capacity(ids.len());
        if self.broken || self.cat_file.ask(ids).is_err() {
            self.broken = true;
        }
        for id in ids {
            if self.broken {
                answers.push(None);
                continue;
            }
            answers.push(match self.cat_file.object(id, limit) {
                Ok(answer) => Some(answer),
                Err(ReadFailure::Refused(_)) => None,
                Err(ReadFailure::Broken(_)) => {
                    self.broken = true;
                    None
                }
            });
        }
        answers
    }
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
            stream: None,
            warm: None,
            walk: None,
            begun: None,
            odb: None,
        }
    }

    /// The object files, when this reader may read them itself.
    fn odb(&mut self) -> Option<&mut super::git_odb::Odb> {
        let repo = &self.repo;
        self.odb
            .get_or_insert_with(|| {
                super::tip::git_dir(repo).and_then(|g| super::git_odb::Odb::open(&g))
            })
            .as_mut()
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
        crate::redact::scrub_env(&mut cmd);
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

    /// The answer for `blob` from the prefetch stream when it was announced
    /// there; `None` leaves the read to the one-at-a-time child.
    fn streamed(&mut self, blob: &str, limit: u64) -> Option<Result<Vec<u8>, SourceError>> {
        let stream = self.stream.as_mut()?;
        let answer = stream.read(blob, limit)?;
        let finished = stream.pending.is_empty();
        if finished || matches!(answer, Err(ReadFailure::Broken(_))) {
            // A broken pipe cannot be trusted for the ids still queued:
            // they are read one at a time from here on.
            let stream = self.stream.take().expect("taken from just above");
            if finished {
                stream.close();
            } else {
                stream.kill();
            }
        }
        Some(answer.map_err(|failure| self.read_error(failure)))
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

    /// The head at `tip` from one walk of the commits since `from` (the
    /// head remembered with an older tip), kept for the compare and the
    /// rollback lookup of the same range; `None` when the walk cannot
    /// answer exactly (see `git_walk`), and git is asked the usual way.
    /// A walk that fails costs nothing but its process: the usual lookup
    /// then meets the same failure and says what it means.
    fn walked(&mut self, from: &str, tip: &str) -> Option<String> {
        if !is_object_id(from) || !is_object_id(tip) {
            return None;
        }
        let walk = match self.object_walk(from, tip) {
            Ok(walk) => walk,
            // `git log` would meet the same merge, root or long range.
            Err(super::git_objects::GaveWay::NotOneLine) => return None,
            Err(super::git_objects::GaveWay::Unsure) => self.log_walk(from, tip)?,
        };
        let head = walk.head.clone();
        self.walk = Some(walk);
        Some(head)
    }

    /// The walk from the objects, read through the child `begin` started
    /// (or one started now), which then stays to read the wake's contents.
    fn object_walk(
        &mut self,
        from: &str,
        tip: &str,
    ) -> Result<super::git_walk::Walk, super::git_objects::GaveWay> {
        let path = self.path.clone();
        if let Some(odb) = self.odb() {
            match super::git_objects::walk(odb, from, tip, path.as_deref()) {
                // An object the files did not show (or could not be read
                // here) is asked of git's child below.
                Err(super::git_objects::GaveWay::Unsure) => {}
                answer => return answer,
            }
        }
        let mut cat_file = match self.begun.take() {
            Some(b) if b.from == from && b.tip == tip => b.cat_file,
            other => {
                if let Some(stale) = other {
                    stale.kill();
                }
                CatFile::spawn(self.git()).map_err(|_| super::git_objects::GaveWay::Unsure)?
            }
        };
        let mut asking = Asking {
            cat_file: &mut cat_file,
            broken: false,
        };
        let walk = super::git_objects::walk(&mut asking, from, tip, self.path.as_deref());
        if asking.broken {
            cat_file.kill();
        } else if self.warm.is_none() && self.stream.is_none() {
            self.warm = Some(cat_file);
        } else {
            cat_file.close();
        }
        walk
    }

    /// The walk from one `git log --raw`: what answers when the objects
    /// could not (and the reference the object walk is tested against).
    fn log_walk(&mut self, from: &str, tip: &str) -> Option<super::git_walk::Walk> {
        let mut child = self.spawn_walk(from, tip).ok()?;
        // Bounded: commits far outside the watched path may list many
        // files; past the bound the usual lookups answer instead.
        let limit = super::git_walk::MAX_BYTES;
        let mut stdout = Vec::new();
        let read = child
            .stdout
            .take()?
            .take(limit + 1)
            .read_to_end(&mut stdout);
        if read.is_err() || stdout.len() as u64 > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        if !child.wait().ok()?.success() {
            return None;
        }
        super::git_walk::read(&stdout, from, tip, self.path.as_deref())
    }

    fn spawn_walk(&self, from: &str, tip: &str) -> io::Result<Child> {
        let args = super::git_walk::args(from, tip);
        self.git()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
    }

    fn describe_path(&self) -> &str {
        self.path.as_deref().unwrap_or(".")
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

    fn head_at_tip(
        &mut self,
        known: Option<&super::TipHead>,
    ) -> (Result<String, SourceError>, Option<String>) {
        // Read before git answers: a tip that moves in between makes the
        // pair remembered older than the head, never newer, so the next
        // tick asks again. A walk begun early was read the same way.
        let tip = match &self.begun {
            Some(b) => Some(b.tip.clone()),
            None => super::tip::read(&self.repo, &self.rev),
        };
        if let (Some(t), Some(k)) = (&tip, known)
            && *t == k.tip
        {
            self.counts.head += 1;
            return (Ok(k.head.clone()), tip);
        }
        if let (Some(t), Some(k)) = (&tip, known)
            && let Some(head) = self.walked(&k.head, t)
        {
            self.counts.head += 1;
            return (Ok(head), tip);
        }
        (self.head(), tip)
    }

    fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
        let path = self.path.clone();
        // Read from the object files where they answer exactly; counted as
        // the listing it stands for.
        if is_object_id(at)
            && let Some(odb) = self.odb()
            && let Some(mut entries) = super::git_list::list(odb, at, path.as_deref())
        {
            self.counts.list += 1;
            if !entries.is_sorted_by(|a, b| a.path <= b.path) {
                entries.sort_by(|a, b| a.path.cmp(&b.path));
            }
            return Ok(entries);
        }
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

    fn changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError> {
        if let Some(w) = self
            .walk
            .as_ref()
            .filter(|w| w.from == from && w.head == to)
        {
            // Counted as the compare it stands for, so the request counts
            // read the same whichever way git was asked.
            let changes = w.changes.clone();
            self.counts.compare += 1;
            return Ok(changes);
        }
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

    fn prefetch(&mut self, blobs: &[String]) {
        if let Some(old) = self.stream.take() {
            old.close();
        }
        // Only plain ids go down the pipe (see `read`): any other name is
        // left to `read`, which refuses it.
        let ids: VecDeque<String> = blobs.iter().filter(|b| is_object_id(b)).cloned().collect();
        if ids.is_empty() {
            return;
        }
        // Reads come from the object files as they are asked for: a few
        // always, many (a first run, a large wake) once the pack indexes
        // are held in memory. Only a history too large for that streams
        // from git, which inflates in a process of its own.
        let few = ids.len() <= FEW_READS;
        if self.odb().is_some_and(|odb| few || odb.bulk()) {
            return;
        }
        // A child that cannot start leaves every read to the one-at-a-time
        // child, whose failure then says why.
        let child = match self.warm.take() {
            Some(child) => Ok(child),
            None => CatFile::spawn_with(self.git(), STREAM_ARGS),
        };
        self.stream = child.and_then(|c| Stream::start(c, ids)).ok();
    }

    fn begin(&mut self, known: Option<&super::TipHead>) -> bool {
        let Some(k) = known else {
            return false;
        };
        let Some(tip) = super::tip::read(&self.repo, &self.rev) else {
            return false;
        };
        if tip == k.tip || !is_object_id(&k.head) || !is_object_id(&tip) {
            return false;
        }
        if let Some(old) = self.begun.take() {
            old.kill();
        }
        if self.odb().is_some() {
            // The walk reads the object files: nothing to start.
            return true;
        }
        match CatFile::spawn(self.git()) {
            Ok(cat_file) => {
                self.begun = Some(Begun {
                    from: k.head.clone(),
                    tip,
                    cat_file,
                });
                true
            }
            Err(_) => false,
        }
    }

    fn warm(&mut self) {
        // A wake's few reads come from the object files; a child is started
        // when one is needed (`prefetch` of many, or a read they cannot do).
        if self.odb().is_some() {
            return;
        }
        if self.warm.is_none() && self.stream.is_none() {
            self.warm = CatFile::spawn_with(self.git(), STREAM_ARGS).ok();
        }
    }

    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError> {
        // The batch protocol is line based: anything but a plain id could
        // smuggle a second request or a `HEAD:path` lookup into the pipe.
        if !is_object_id(blob) {
            return Err(self.failure("cat-file", &format!("`{blob}` is not an object id")));
        }
        self.counts.read += 1;
        if let Some(answer) = self.streamed(blob, limit) {
            return answer;
        }
        // A blob the object files hold is the blob git would give; anything
        // else (too large, another kind, not found) is git's to answer.
        if let Some((super::git_odb::Kind::Blob, bytes)) =
            self.odb().and_then(|odb| odb.read(blob, limit))
        {
            return Ok(bytes);
        }
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

    fn reverts(&mut self, from: &str, to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        if let Some(w) = self
            .walk
            .as_ref()
            .filter(|w| w.from == from && w.head == to)
        {
            let reverts = w.reverts.clone();
            self.counts.history += 1;
            return Ok(reverts);
        }
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

    fn request_counts(&self) -> RequestCounts {
        self.counts
    }
}

impl Drop for GitSource {
    fn drop(&mut self) {
        if let Some(cat_file) = self.cat_file.take() {
            cat_file.close();
        }
        if let Some(stream) = self.stream.take() {
            stream.close();
        }
        if let Some(warm) = self.warm.take() {
            warm.close();
        }
        if let Some(begun) = self.begun.take() {
            begun.kill();
        }
    }
}

/// A running `git cat-file --batch`.
struct CatFile {
    child: Child,
    /// `None` when a writer thread feeds the ids (`Stream`).
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// A `git cat-file --batch` that was handed every announced id at once by a
/// writer thread, so git never waits for the next question and this
/// process never waits for a round trip: the answers come back in the order
/// of `pending`. Reading them one by one keeps memory to one blob, and git
/// blocks on a full pipe while the tick judges.
struct Stream {
    cat_file: CatFile,
    /// The ids written whose answers are not taken yet, oldest first.
    pending: VecDeque<String>,
    writer: Option<JoinHandle<()>>,
}

/// A `Stream`'s child. `--buffer`: git fills its output buffer instead of
/// flushing after every object; the closed input at the end flushes the
/// rest (so only a child fed all its ids at once may be started so).
/// The most reads `prefetch` leaves to the object files.
const FEW_READS: usize = 64;

const STREAM_ARGS: &[&str] = &["cat-file", "--batch", "--buffer"];

impl Stream {
    fn start(mut cat_file: CatFile, ids: VecDeque<String>) -> io::Result<Stream> {
        let stdin = cat_file.stdin.take().expect("spawned with a pipe");
        let mut list = Vec::with_capacity(ids.len() * 41);
        for id in &ids {
            list.extend_from_slice(id.as_bytes());
            list.push(b'\n');
        }
        let writer = std::thread::Builder::new()
            .name("cat-file ids".into())
            .spawn(move || {
                // A child that stopped reading (it died, or the answers are
                // no longer wanted) ends the writing: the reader notices.
                let mut stdin = BufWriter::with_capacity(64 * 1024, stdin);
                let _ = stdin.write_all(&list).and_then(|()| stdin.flush());
            });
        match writer {
            Ok(writer) => Ok(Stream {
                cat_file,
                pending: ids,
                writer: Some(writer),
            }),
            Err(err) => {
                cat_file.kill();
                Err(err)
            }
        }
    }

    /// The answer for `blob`, after discarding the answers queued before it
    /// (ids announced but never asked for); `None` when it was not queued.
    fn read(&mut self, blob: &str, limit: u64) -> Option<Result<Vec<u8>, ReadFailure>> {
        let at = if self.pending.front().is_some_and(|id| id == blob) {
            0
        } else {
            self.pending.iter().position(|id| id == blob)?
        };
        for id in self.pending.drain(..at).collect::<Vec<_>>() {
            if let Err(failure) = self.cat_file.discard(&id) {
                return Some(Err(failure));
            }
        }
        self.pending.pop_front();
        Some(self.cat_file.answer(blob, limit))
    }

    /// Ends the child (answers still queued are dropped, which makes git
    /// stop) and then the writer, which fails on the closed pipe if it was
    /// still writing.
    fn close(mut self) {
        self.cat_file.close();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }

    fn kill(mut self) {
        self.cat_file.kill();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Why a batch read gave no bytes.
enum ReadFailure {
    /// git answered, and the pipe is ready for the next request.
    Refused(SourceError),
    /// The pipe is in an unknown state: the child must be replaced.
    Broken(String),
}

impl CatFile {
    fn spawn(cmd: Command) -> io::Result<CatFile> {
        CatFile::spawn_with(cmd, &["cat-file", "--batch"])
    }

    fn spawn_with(mut cmd: Command, args: &[&str]) -> io::Result<CatFile> {
        let mut child = cmd
            .args(args)
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

    /// Asks for all of `ids` in one write; their answers are then read in
    /// order with `object`. Only ids, and few enough to fit in the pipe
    /// (`git_objects` asks at most 64 at once).
    fn ask(&mut self, ids: &[String]) -> io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| io::Error::other("cat-file takes its ids from another writer"))?;
        let mut list = Vec::with_capacity(ids.len() * 41);
        for id in ids {
            if !is_object_id(id) {
                return Err(io::Error::other(format!("`{id}` is not an object id")));
            }
            list.extend_from_slice(id.as_bytes());
            list.push(b'\n');
        }
        stdin.write_all(&list).and_then(|()| stdin.flush())
    }

    /// The next answer, for `id` (asked with `ask`): its kind and bytes;
    /// one over `limit` is refused without being held.
    fn object(&mut self, id: &str, limit: u64) -> Result<(String, Vec<u8>), ReadFailure> {
        let broken = |err: io::Error| ReadFailure::Broken(format!("cat-file stopped: {err}"));
        let (kind, size) = self.read_header(id)?;
        if size > limit {
            self.skip(size)?;
            return Err(ReadFailure::Refused(SourceError::TooLarge { size, limit }));
        }
        let len = usize::try_from(size)
            .map_err(|_| ReadFailure::Broken(format!("{size} bytes do not fit in memory")))?;
        let mut bytes = vec![0; len];
        self.stdout.read_exact(&mut bytes).map_err(broken)?;
        self.end_of_answer()?;
        Ok((kind, bytes))
    }

    /// Passes over the answer for `blob`, asked for but no longer wanted,
    /// without holding its bytes.
    fn discard(&mut self, blob: &str) -> Result<(), ReadFailure> {
        match self.read_header(blob) {
            Ok((_, size)) => self.skip(size),
            Err(ReadFailure::Refused(_)) => Ok(()),
            Err(broken) => Err(broken),
        }
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
            let repo = Repo {
                dir: TempDir::new().expect("temporary directory"),
            };
            repo.git(&["-c", "init.defaultBranch=main", "init", "-q"]);
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
        /// its children (the object files' reader has tests of its own,
        /// and `reads_from_the_object_files_answer_what_git_answers`).
        fn source(&self, path: Option<&str>) -> GitSource {
            let mut source =
                GitSource::new(self.path().to_path_buf(), None, path.map(str::to_string));
            source.odb = Some(None);
            source
        }

        fn source_reading_objects(&self, path: Option<&str>) -> GitSource {
            GitSource::new(self.path().to_path_buf(), None, path.map(str::to_string))
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
        let mut source = GitSource::new(repo.path().to_path_buf(), Some("--all".into()), None);
        assert!(config(source.head()).contains("bad revision '--all'"));
        unavailable(source.list("--name-only"));
        unavailable(source.changes("--stat", "HEAD"));
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
    fn a_warmed_child_answers_the_prefetch_and_one_never_used_ends_with_the_source() {
        let repo = Repo::new();
        repo.write("a", "alpha\n");
        repo.write("b", "beta\n");
        repo.commit("one");
        let (a, b) = (repo.blob("HEAD:a"), repo.blob("HEAD:b"));

        let mut source = repo.source(None);
        source.warm();
        let pid = source.warm.as_ref().unwrap().child.id();
        source.prefetch(&[a.clone(), b.clone()]);
        assert!(source.warm.is_none(), "the warm child was handed over");
        assert_eq!(source.stream.as_ref().unwrap().cat_file.child.id(), pid);
        assert_eq!(source.read(&a, 1 << 20), Ok(b"alpha\n".to_vec()));
        assert_eq!(source.read(&b, 1 << 20), Ok(b"beta\n".to_vec()));
        assert!(source.cat_file.is_none(), "no other child was started");

        let mut idle = repo.source(None);
        idle.warm();
        let pid = idle.warm.as_ref().unwrap().child.id();
        drop(idle);
        // Reaped by the drop: no such process, not even a zombie.
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn reads_from_the_object_files_answer_what_git_answers() {
        let repo = Repo::new();
        repo.write("src/a.js", "a");
        repo.write("src/b.js", "b");
        repo.write("elsewhere/c.js", "c");
        let first = repo.commit("one");
        repo.write("src/a.js", "a2");
        repo.remove("src/b.js");
        repo.write("src/d/e.js", "e");
        let second = repo.commit("two");
        // Half of the objects packed, half loose.
        repo.git(&["repack", "-adq"]);
        repo.write("src/a.js", "a3");
        let third = repo.commit("three");
        let known = crate::state::schema::TipHead {
            tip: first.clone(),
            head: first.clone(),
        };
        let mut by_git = repo.source(Some("src"));
        let mut by_files = repo.source_reading_objects(Some("src"));
        assert!(by_files.begin(Some(&known)));
        assert!(by_files.begun.is_none(), "nothing started");
        let answers = |s: &mut GitSource| {
            let head = s.head_at_tip(Some(&known));
            let changes = s.changes(&first, &third);
            let reverts = s.reverts(&first, &third);
            (
                format!("{head:?}"),
                format!("{changes:?}"),
                format!("{reverts:?}"),
            )
        };
        assert_eq!(answers(&mut by_files), answers(&mut by_git));
        assert_eq!(by_files.walk.as_ref().unwrap().head, third);
        let blobs: Vec<String> = [&first, &second, &third]
            .iter()
            .map(|c| repo.blob(&format!("{c}:src/a.js")))
            .collect();
        by_files.warm();
        by_files.prefetch(&blobs);
        assert!(by_files.warm.is_none() && by_files.stream.is_none());
        for blob in &blobs {
            assert_eq!(
                by_files.read(blob, 100).unwrap(),
                by_git.read(blob, 100).unwrap()
            );
        }
        assert!(by_files.cat_file.is_none(), "no git child was needed");
        // Too large for the object files' reader: git answers, as before.
        let refused = by_files.read(&blobs[2], 1).unwrap_err();
        assert_eq!(
            format!("{refused:?}"),
            format!("{:?}", by_git.read(&blobs[2], 1).unwrap_err())
        );
    }

    #[test]
    fn a_walk_begun_early_answers_the_head_lookup_and_a_stale_one_is_replaced() {
        let repo = Repo::new();
        repo.write("src/a.js", "a");
        let first = repo.commit("one");
        repo.write("src/a.js", "a2");
        let second = repo.commit("two");
        let known = crate::state::schema::TipHead {
            tip: first.clone(),
            head: first.clone(),
        };

        let mut source = repo.source(Some("src"));
        assert!(source.begin(Some(&known)));
        let pid = source.begun.as_ref().unwrap().cat_file.child.id();
        let (head, tip) = source.head_at_tip(Some(&known));
        assert_eq!(
            (head, tip.as_deref()),
            (Ok(second.clone()), Some(second.as_str()))
        );
        assert!(source.begun.is_none(), "the begun walk was read");
        assert_eq!(source.walk.as_ref().unwrap().from, first);
        // Its child stays to read the wake's contents, and no other starts.
        assert_eq!(source.warm.as_ref().map(|w| w.child.id()), Some(pid));
        source.warm();
        assert_eq!(source.warm.as_ref().map(|w| w.child.id()), Some(pid));
        let blob = repo.blob(&format!("{second}:src/a.js"));
        source.prefetch(std::slice::from_ref(&blob));
        assert_eq!(source.read(&blob, 100).unwrap(), b"a2");
        drop(source);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "and reaped");

        // Nothing to begin when the tip has not moved.
        let unmoved = crate::state::schema::TipHead {
            tip: second.clone(),
            head: second.clone(),
        };
        assert!(!repo.source(Some("src")).begin(Some(&unmoved)));

        // A walk begun for another remembered head is ended, not used.
        let mut source = repo.source(Some("src"));
        assert!(source.begin(Some(&known)));
        let stale = source.begun.as_ref().unwrap().cat_file.child.id();
        let other = crate::state::schema::TipHead {
            tip: "0".repeat(40),
            head: first.clone(),
        };
        let _ = source.walked(&"1".repeat(40), &second);
        assert!(source.begun.is_none());
        assert!(!Path::new(&format!("/proc/{stale}")).exists());
        let (head, _) = source.head_at_tip(Some(&other));
        assert_eq!(head, Ok(second));
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

    /// The pid of the child the announced reads stream from.
    fn stream_pid(source: &GitSource) -> Option<u32> {
        source.stream.as_ref().map(|s| s.cat_file.child.id())
    }

    #[test]
    fn announced_reads_stream_from_one_child_in_order_without_a_round_trip_each() {
        let repo = Repo::new();
        let names: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
        for (i, name) in names.iter().enumerate() {
            repo.write(name, format!("file {i}\n").repeat(i + 1));
        }
        repo.commit("one");
        let blobs: Vec<String> = names
            .iter()
            .map(|n| repo.blob(&format!("HEAD:{n}")))
            .collect();

        let mut source = repo.source(None);
        source.prefetch(&blobs);
        let pid = stream_pid(&source).expect("the announced ids are streamed");
        for (i, blob) in blobs.iter().enumerate() {
            assert_eq!(
                source.read(blob, 1 << 20),
                Ok(format!("file {i}\n").repeat(i + 1).into_bytes())
            );
            if i + 1 < blobs.len() {
                assert_eq!(stream_pid(&source), Some(pid));
            }
        }
        // Every answer came from the stream: the one-at-a-time child was
        // never needed, and the finished stream is closed.
        assert!(source.cat_file.is_none());
        assert!(source.stream.is_none());
        assert_eq!(source.requests(), 50);
        // A read of an id announced earlier is answered all the same.
        assert_eq!(source.read(&blobs[0], 100), Ok(b"file 0\n".to_vec()));
    }

    #[test]
    fn a_missing_object_in_the_middle_of_a_stream_fails_alone() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.write("b", "b");
        repo.commit("one");
        let (a, b, missing) = (repo.blob("HEAD:a"), repo.blob("HEAD:b"), "2".repeat(40));

        let mut source = repo.source(None);
        source.prefetch(&[a.clone(), missing.clone(), b.clone()]);
        let pid = stream_pid(&source);
        assert_eq!(source.read(&a, 100), Ok(b"a".to_vec()));
        let msg = unavailable(source.read(&missing, 100));
        assert!(msg.contains("missing"), "{msg}");
        assert_eq!(stream_pid(&source), pid, "the stream is still in step");
        assert_eq!(source.read(&b, 100), Ok(b"b".to_vec()));
        assert!(source.cat_file.is_none());
    }

    #[test]
    fn a_huge_blob_in_a_stream_is_too_large_and_skipped_and_an_unasked_one_passed_over() {
        let repo = Repo::new();
        // Several chunks' and pipe buffers' worth, so skipping really loops.
        let big = vec![b'z'; 3 << 20];
        repo.write("big", &big);
        repo.write("other-big", vec![b'y'; 3 << 20]);
        repo.write("small", "small");
        repo.write("last", "last");
        repo.commit("one");
        let ids: Vec<String> = ["big", "other-big", "small", "last"]
            .iter()
            .map(|n| repo.blob(&format!("HEAD:{n}")))
            .collect();

        let mut source = repo.source(None);
        source.prefetch(&ids);
        let pid = stream_pid(&source);
        assert_eq!(
            source.read(&ids[0], 1000),
            Err(SourceError::TooLarge {
                size: 3 << 20,
                limit: 1000,
            })
        );
        // `other-big` was announced but is never asked for: passed over.
        assert_eq!(source.read(&ids[2], 5), Ok(b"small".to_vec()));
        assert_eq!(stream_pid(&source), pid);
        assert_eq!(source.read(&ids[3], 5), Ok(b"last".to_vec()));
        assert!(source.cat_file.is_none());
        // The same blob under the limit, asked again, is read whole.
        assert_eq!(source.read(&ids[0], 3 << 20), Ok(big));
    }

    #[test]
    fn a_read_of_an_id_that_was_not_announced_leaves_the_stream_in_step() {
        let repo = Repo::new();
        repo.write("a", "a");
        repo.write("b", "b");
        repo.write("c", "c");
        repo.commit("one");
        let (a, b, c) = (
            repo.blob("HEAD:a"),
            repo.blob("HEAD:b"),
            repo.blob("HEAD:c"),
        );

        let mut source = repo.source(None);
        source.prefetch(&[a.clone(), b.clone()]);
        assert_eq!(source.read(&c, 100), Ok(b"c".to_vec()));
        assert!(
            source.cat_file.is_some(),
            "asked of the one-at-a-time child"
        );
        assert_eq!(source.read(&a, 100), Ok(b"a".to_vec()));
        assert_eq!(source.read(&b, 100), Ok(b"b".to_vec()));
        assert_eq!(source.requests(), 3);
    }

    #[test]
    fn a_git_that_dies_mid_stream_is_unavailable_and_the_next_read_still_works() {
        let repo = Repo::new();
        // Larger than any pipe buffer: git cannot have answered it whole
        // before it is killed.
        repo.write("big", vec![b'z'; 4 << 20]);
        repo.write("small", "small");
        repo.commit("one");
        let (big, small) = (repo.blob("HEAD:big"), repo.blob("HEAD:small"));

        let mut source = repo.source(None);
        source.prefetch(&[big.clone(), small.clone()]);
        let child = &mut source.stream.as_mut().unwrap().cat_file.child;
        child.kill().unwrap();
        child.wait().unwrap();

        let msg = unavailable(source.read(&big, 8 << 20));
        assert!(msg.contains("cat-file stopped"), "{msg}");
        assert!(
            source.stream.is_none(),
            "a broken stream is not trusted again"
        );
        assert_eq!(source.read(&small, 100), Ok(b"small".to_vec()));
        assert_eq!(source.requests(), 2);
    }

    #[test]
    fn dropping_the_source_mid_stream_ends_its_child_and_writer() {
        let repo = Repo::new();
        let names: Vec<String> = (0..200).map(|i| format!("f{i}")).collect();
        for name in &names {
            // Answers that cannot all sit in the pipe: git blocks on it.
            repo.write(name, name.repeat(2000));
        }
        repo.commit("one");
        let blobs: Vec<String> = names
            .iter()
            .map(|n| repo.blob(&format!("HEAD:{n}")))
            .collect();

        let mut source = repo.source(None);
        source.prefetch(&blobs);
        source.read(&blobs[0], 1 << 20).unwrap();
        let pid = stream_pid(&source).unwrap();
        drop(source);
        if cfg!(target_os = "linux") {
            assert!(!Path::new(&format!("/proc/{pid}")).exists());
        }
    }

    /// Every (remembered head, tip) pair of a line of commits with the odd
    /// cases: the walk answers the head, the compare and the rollback
    /// lookup exactly as the three git commands do.
    #[test]
    fn a_walk_since_the_remembered_head_answers_what_the_three_lookups_do() {
        use std::os::unix::fs::PermissionsExt;
        let repo = Repo::new();
        repo.write("src/a.js", "a");
        repo.write("src/b.sh", "b");
        repo.write("src/dir/c.js", "c");
        repo.write("src/odd\n\x01name", "odd");
        repo.write("srcx/out.js", "not watched");
        repo.write("other/x", "x");
        let mut commits = vec![repo.commit("one")];
        repo.write("src/a.js", "a2");
        repo.write("srcx/out.js", "still not watched");
        commits.push(repo.commit("two"));
        repo.write("other/x", "x2");
        commits.push(repo.commit("outside only"));
        repo.write("src/tmp.js", "short-lived");
        repo.write("src/odd\n\x01name", "odd2");
        commits.push(repo.commit("add tmp"));
        repo.remove("src/tmp.js");
        let exec = repo.path().join("src/b.sh");
        fs::set_permissions(&exec, fs::Permissions::from_mode(0o755)).unwrap();
        commits.push(repo.commit("drop tmp"));
        repo.write("src/a.js", "a");
        repo.write("src/b.sh", "b2");
        commits.push(repo.commit("Revert \"two\""));
        repo.remove("src/dir/c.js");
        std::os::unix::fs::symlink("elsewhere", repo.path().join("src/dir/c.js")).unwrap();
        repo.write("src/dir/new.js", "new");
        commits.push(repo.commit("link"));
        repo.write("src/dir/new.js", "new");
        repo.write("other/y", "y");
        commits.push(repo.commit("outside at the tip"));
        let tip = commits.last().unwrap().clone();
        for path in [Some("src"), Some("src/dir"), None] {
            let head = repo.source(path).head().unwrap();
            for from in &commits[..commits.len() - 1] {
                let mut walker = repo.source(path);
                let Some(walked) = walker.walked(from, &tip) else {
                    panic!("no walk from {from} at {path:?}");
                };
                let mut asked = repo.source(path);
                assert_eq!(walked, head, "head from {from} at {path:?}");
                assert_eq!(
                    walker.changes(from, &walked).unwrap(),
                    asked.changes(from, &walked).unwrap(),
                    "changes from {from} at {path:?}"
                );
                assert_eq!(
                    walker.reverts(from, &walked).unwrap(),
                    asked.reverts(from, &walked).unwrap(),
                    "reverts from {from} at {path:?}"
                );
                assert_eq!(walker.request_counts().compare, 1);
                assert_eq!(walker.request_counts().history, 1);
            }
        }
        assert_eq!(
            repo.source(Some("src"))
                .reverts(&commits[0], &tip)
                .unwrap()
                .len(),
            1,
            "the range holds a revert"
        );
    }

    /// A merge, a branch rewritten under the remembered head, or a range
    /// longer than the walk takes is left to the usual lookups.
    #[test]
    fn a_walk_over_anything_but_a_short_line_of_commits_gives_way() {
        let repo = Repo::new();
        repo.write("src/a.js", "a");
        let base = repo.commit("one");
        repo.git(&["checkout", "-q", "-b", "side"]);
        repo.write("src/b.js", "b");
        repo.commit("side");
        repo.git(&["checkout", "-q", "main"]);
        repo.write("src/a.js", "a2");
        repo.commit("main");
        repo.git(&["merge", "-q", "--no-edit", "side"]);
        let merged = repo.git(&["rev-parse", "HEAD"]);
        assert_eq!(repo.source(Some("src")).walked(&base, &merged), None);
        let side = repo.git(&["rev-parse", "side"]);
        assert_eq!(repo.source(Some("src")).walked(&side, &merged), None);
        let mut last = merged.clone();
        for i in 0..=crate::source::git_walk::MAX_COMMITS {
            repo.write("src/a.js", format!("{i}"));
            last = repo.commit("again");
        }
        assert_eq!(repo.source(Some("src")).walked(&merged, &last), None);
        let unknown = format!("{:040x}", 7);
        assert_eq!(repo.source(Some("src")).walked(&unknown, &last), None);
    }

    /// The walk read from the objects through `cat-file` against the one
    /// read from `git log --raw` (the reference), for every range of a
    /// history holding every kind of change, at several watched paths.
    #[test]
    fn the_object_walk_answers_exactly_what_the_log_walk_does() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::PermissionsExt;
        let repo = Repo::new();
        let odd = |name: &[u8]| repo.path().join(std::ffi::OsStr::from_bytes(name));
        repo.write("src/a.js", "a");
        repo.write("src/b.sh", "b");
        repo.write("src/dir/c.js", "c");
        repo.write("src/dir/deep/d.js", "d");
        repo.write("src/dir2/e.js", "e");
        repo.write("src/f", "f");
        repo.write("src/odd\n\x01name", "odd");
        repo.write("src/with space.js", "space");
        repo.write("src.js", "next to it");
        repo.write("src-a/x", "next to it");
        repo.write("srcx/out.js", "not watched");
        repo.write("other/x", "x");
        fs::write(odd(b"src/\xff\xfe.js"), "not utf-8").unwrap();
        let mut commits = vec![repo.commit("one")];
        repo.write("src/a.js", "a2");
        commits.push(repo.commit("two"));
        repo.write("other/x", "x2");
        commits.push(repo.commit("outside only"));
        let exec = repo.path().join("src/b.sh");
        fs::set_permissions(&exec, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(odd(b"src/\xff\xfe.js"), "not utf-8, edited").unwrap();
        commits.push(repo.commit("exec bit"));
        repo.remove("src/dir/c.js");
        std::os::unix::fs::symlink("elsewhere", repo.path().join("src/dir/c.js")).unwrap();
        commits.push(repo.commit("link"));
        repo.remove("src/f");
        repo.write("src/f/g.js", "g");
        commits.push(repo.commit("file to directory"));
        fs::remove_dir_all(repo.path().join("src/dir2")).unwrap();
        repo.write("src/dir2", "now a file");
        commits.push(repo.commit("directory to file"));
        let sub = repo.path().join("src/sub");
        fs::create_dir_all(&sub).unwrap();
        repo.git(&["-C", "src/sub", "init", "-q"]);
        repo.git(&["-C", "src/sub", "commit", "-q", "--allow-empty", "-m", "s"]);
        commits.push(repo.commit("submodule"));
        repo.write("src/a.js", "a");
        commits.push(repo.commit("Revert \"two\"\n\nThis reverts it."));
        repo.write("src/dir/deep/d.js", "d2");
        commits.push(repo.commit("change"));
        repo.write("src/dir/deep/d.js", "d");
        repo.git(&["-C", "src/sub", "commit", "-q", "--allow-empty", "-m", "t"]);
        commits.push(repo.commit("\n\nRevert\n\"change\" (a subject of two lines)"));
        repo.remove("src/with space.js");
        repo.write("src/late/h.js", "h");
        commits.push(repo.commit("delete and add"));
        commits.push(repo.commit("empty"));
        repo.write("other/x", "x3");
        commits.push(repo.commit("Revert \"outside only\""));
        fs::remove_dir_all(repo.path().join("src/dir")).unwrap();
        commits.push(repo.commit("drop a watched directory"));
        repo.write("src/f/g.js", "g2");
        repo.write("src/odd\n\x01name", "odd2");
        commits.push(repo.commit("outside at the tip"));
        repo.write("other/y", "y");
        commits.push(repo.commit("outside at the tip"));

        let paths = [
            Some("src"),
            Some("src/dir"),
            Some("src/late"),
            Some("src/f"),
            Some("src/a.js"),
            Some("src/sub"),
            Some("nowhere"),
            None,
        ];
        let mut answered = 0;
        for path in paths {
            let mut source = repo.source(path);
            for (i, from) in commits.iter().enumerate() {
                for tip in &commits[i..] {
                    let reference = source.log_walk(from, tip);
                    let walked = source.object_walk(from, tip).ok();
                    assert_eq!(walked, reference, "from {from} to {tip} at {path:?}");
                    answered += usize::from(walked.is_some());
                }
            }
        }
        let ranges = commits.len() * (commits.len() - 1) / 2;
        assert_eq!(answered, ranges * paths.len(), "every range of one line");
    }

    /// Merges, roots, unknown commits and long ranges give way to the log
    /// walk, which gives way to the usual lookups.
    #[test]
    fn the_object_walk_gives_way_where_the_log_walk_does() {
        let repo = Repo::new();
        repo.write("src/a.js", "a");
        let root = repo.commit("one");
        repo.git(&["checkout", "-q", "-b", "side"]);
        repo.write("src/b.js", "b");
        let side = repo.commit("side");
        repo.git(&["checkout", "-q", "main"]);
        repo.write("src/a.js", "a2");
        repo.commit("main");
        repo.git(&["merge", "-q", "--no-edit", "side"]);
        let merged = repo.git(&["rev-parse", "HEAD"]);
        let mut last = merged.clone();
        let mut line = Vec::new();
        for i in 0..=crate::source::git_walk::MAX_COMMITS {
            repo.write("src/a.js", format!("{i}"));
            last = repo.commit("again");
            line.push(last.clone());
        }
        let unknown = format!("{:040x}", 7);
        let mut source = repo.source(Some("src"));
        use crate::source::git_objects::GaveWay::{NotOneLine, Unsure};
        // Not one line: `git log` is not asked, it would give way too.
        for (from, tip, why) in [
            (&root, &merged, NotOneLine),
            (&side, &merged, NotOneLine),
            (&merged, &last, NotOneLine),
            (&unknown, &last, NotOneLine),
            (&unknown, &unknown, Unsure),
            (&root, &root, Unsure),
        ] {
            assert_eq!(source.object_walk(from, tip), Err(why), "{from}..{tip}");
            assert_eq!(source.log_walk(from, tip), None, "{from}..{tip}");
        }
        // The longest range taken, and a root below it.
        let from = &line[0];
        assert!(source.object_walk(from, &last).is_ok());
        assert_eq!(
            source.object_walk(from, &last).ok(),
            source.log_walk(from, &last)
        );
        let mut orphan = repo.source(Some("src"));
        repo.git(&["checkout", "-q", "--orphan", "fresh"]);
        let fresh = repo.commit("root");
        assert_eq!(orphan.object_walk(&root, &fresh), Err(NotOneLine));
    }

    /// Each round trip to git waits for it to be scheduled: the walk asks
    /// for what it knows it needs together, one round trip per level.
    #[test]
    fn a_one_commit_walk_asks_git_once_per_level_not_once_per_object() {
        struct Counting<'a>(Asking<'a>, Vec<usize>);
        impl crate::source::git_objects::Objects for Counting<'_> {
            fn objects(
                &mut self,
                ids: &[String],
                limit: u64,
            ) -> Vec<Option<crate::source::git_objects::Object>> {
                self.1.push(ids.len());
                self.0.objects(ids, limit)
            }
        }
        let repo = Repo::new();
        repo.write("src/d/f.js", "f");
        repo.write("src/d/g.js", "g");
        repo.write("src/e/h.js", "h");
        let from = repo.commit("one");
        repo.write("src/d/f.js", "f2");
        let tip = repo.commit("two");
        let source = repo.source(Some("src"));
        let mut cat_file = CatFile::spawn(source.git()).unwrap();
        let mut counting = Counting(
            Asking {
                cat_file: &mut cat_file,
                broken: false,
            },
            Vec::new(),
        );
        let walk =
            crate::source::git_objects::walk(&mut counting, &from, &tip, Some("src")).unwrap();
        // The two commits, their root trees, the two `src`, the two `src/d`.
        assert_eq!(counting.1, [2, 2, 2, 2]);
        assert_eq!(walk.head, tip);
        assert_eq!(
            walk.changes,
            [Change::Upsert {
                path: "src/d/f.js".into(),
                blob: repo.blob(&format!("{tip}:src/d/f.js")),
            }]
        );
        cat_file.close();
    }

    /// More subtrees changed than one request takes are asked in several.
    #[test]
    fn a_walk_over_more_changed_directories_than_one_request_takes_still_answers() {
        let repo = Repo::new();
        for i in 0..150 {
            repo.write(&format!("src/d{i}/f.js"), "f");
        }
        let from = repo.commit("one");
        for i in 0..150 {
            repo.write(&format!("src/d{i}/f.js"), "f2");
        }
        let tip = repo.commit("two");
        let mut source = repo.source(Some("src"));
        let walked = source.object_walk(&from, &tip).unwrap();
        assert_eq!(walked.changes.len(), 150);
        assert_eq!(Some(walked), source.log_walk(&from, &tip));
    }
}
