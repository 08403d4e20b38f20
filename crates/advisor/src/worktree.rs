//! The agent's own working copy: a directory outside the state and outside
//! the watched clone (a private temporary directory per tick), checked out
//! at the watched head before each run, so the file on disk is the content
//! the agent was handed and nothing it writes is read back as state, journal,
//! refs or objects of the clone.
//!
//! Two git directories serve it. sentinel's own (`<tmp>/git`, outside the
//! working copy) holds the index sentinel checks out with, and borrows the
//! clone's objects through `alternates`; the kernel sandbox keeps the agent
//! out of it. The agent's (`<tmp>/work/.git`) is made fresh before every run
//! with the same index, so `git status`, `git diff` and `git commit` work
//! there; its commits, objects, config and hooks stay in it and are thrown
//! away with it, and sentinel never runs git in it: every command names
//! sentinel's git directory and the working copy, with hooks and fsmonitor
//! off. Whatever the agent left in place of its `.git` or the working copy
//! itself (a link, a repository pointing elsewhere) is removed, never
//! followed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use sentinel_io::git_env::{HooksOff, REDIRECTING_ENV};
use sentinel_io::safe_fs;

#[derive(Debug)]
pub struct Worktree {
    /// The clone sentinel watches.
    pub repo: PathBuf,
    /// The watched revision, to notice the agent moving it.
    watched: String,
    /// What is read of a file the agent left (`--max-file-bytes`).
    max_bytes: u64,
    /// The clone's git directory, common git directory and object format,
    /// asked once.
    dirs: OnceLock<Result<GitDirs, String>>,
    /// The working copy, made at the first prepare and shared by the clones
    /// of this value: removed when the last of them is dropped.
    place: Arc<OnceLock<Result<Place, String>>>,
    /// The clone's refs as they were when the working copy was last prepared.
    before: Mutex<Option<Refs>>,
    /// Reads a ref of the clone in-process (the source's reader, handed in
    /// so the advisor needs no source); `None` sends the question to git.
    read_tip: ReadTip,
}

/// A commit id for `rev` in the clone at `repo`, or `None` when it cannot be
/// read exactly.
pub type ReadTip = fn(repo: &Path, rev: &str) -> Option<String>;

/// Where the agent works, and sentinel's git directory for it.
#[derive(Debug)]
struct Place {
    /// Removed with everything under it when the tick is over.
    dir: tempfile::TempDir,
    /// sentinel's git directory: its index and `HEAD`, the clone's objects.
    git: PathBuf,
    /// The agent's working copy.
    work: PathBuf,
}

#[derive(Debug, Clone)]
struct GitDirs {
    /// The clone's own git directory (where its `HEAD` is).
    git: PathBuf,
    /// The common git directory, whose `objects/` the working copy borrows.
    common: PathBuf,
    /// `sha1` or `sha256`, so the copies read the clone's objects.
    format: String,
}

/// The refs of the clone an agent could move.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refs {
    /// `HEAD` as written: `ref: refs/heads/main` or a commit id.
    head_file: Option<String>,
    head: Option<String>,
    watched: Option<String>,
}

/// A ref of the clone that moved while the agent ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// `HEAD` or the watched revision as given.
    pub name: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// `HEAD` now names another branch (or none): its commits are not the
    /// agent's own work.
    pub switched: bool,
}

impl Worktree {
    /// The agent's working copy of the clone at `repo`, watching `rev`,
    /// reading at most `max_bytes` of a file the agent left. Nothing is made
    /// until the first `prepare`.
    pub fn of(repo: &Path, rev: &str, max_bytes: u64, read_tip: ReadTip) -> Worktree {
        let repo = std::path::absolute(repo).unwrap_or_else(|_| repo.to_path_buf());
        Worktree {
            repo,
            watched: rev.to_string(),
            max_bytes,
            dirs: OnceLock::new(),
            place: Arc::new(OnceLock::new()),
            before: Mutex::new(None),
            read_tip,
        }
    }

    /// The agent's working copy, once a `prepare` made it.
    pub fn path(&self) -> Option<&Path> {
        match self.place.get() {
            Some(Ok(place)) => Some(&place.work),
            _ => None,
        }
    }

    /// Put the working copy at `head`, detached, with no leftover of an
    /// earlier run, and give the agent a git directory of its own in it.
    pub fn prepare(&self, head: &str) -> Result<(), String> {
        let dirs = self.dirs()?;
        let place = self.place(&dirs)?;
        let hooks =
            HooksOff::new().map_err(|e| format!("cannot create an empty hooks directory: {e}"))?;
        // The copy itself first: through a link left in its place, the
        // `.git` removed later would be another directory's.
        if !fs::symlink_metadata(&place.work).is_ok_and(|m| m.is_dir()) {
            remove(&place.work)?;
            fs::create_dir(&place.work).map_err(|e| self.cannot(&format!("mkdir: {e}")))?;
        }
        let id = self.resolve(&hooks, head)?;
        self.git_in(
            place,
            &hooks,
            &["checkout", "--quiet", "--force", "--detach", &id],
        )?;
        self.git_in(place, &hooks, &["clean", "--quiet", "-ffdx"])?;
        self.agents_git(place, &dirs, &id)?;
        *self.before.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.refs(&dirs));
        Ok(())
    }

    /// The refs that moved since `prepare`: the agent moved them.
    pub fn moved(&self) -> Vec<Moved> {
        let Some(before) = self.before.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Vec::new();
        };
        let Ok(dirs) = self.dirs() else {
            return Vec::new();
        };
        let after = self.refs(&dirs);
        let mut moved = Vec::new();
        if before.head != after.head || before.head_file != after.head_file {
            moved.push(Moved {
                name: "HEAD".into(),
                from: before.head.clone(),
                to: after.head.clone(),
                switched: before.head_file != after.head_file && !is_id(&after.head_file),
            });
        }
        if self.watched != "HEAD" && before.watched != after.watched {
            moved.push(Moved {
                name: self.watched.clone(),
                from: before.watched,
                to: after.watched,
                switched: false,
            });
        }
        moved
    }

    /// The bytes of `file` in the working copy as the agent left them,
    /// committed or not; `Ok(None)` when the agent removed it. A link
    /// (anywhere on the way), a FIFO, a device, a directory or a file over
    /// the limit is refused with the reason: nothing outside the working
    /// copy is read.
    pub fn read(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
        let Some(work) = self.path() else {
            return Ok(None);
        };
        safe_fs::read_beneath(work, file, self.max_bytes).map_err(|r| {
            let why = match r {
                safe_fs::Refusal::TooLarge(n) => format!("it is over --max-file-bytes {n}"),
                other => other.to_string(),
            };
            format!(
                "the file the agent left at `{file}` was not read ({why}): sentinel reads only \
                 a regular file, opened without following a link, up to --max-file-bytes"
            )
        })
    }

    /// Let `user` reach the working copy (the directory above it may be
    /// passed, not listed) and make the copy its own.
    pub fn share_with(&self, user: &super::agent_user::AgentUser) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let Some(Ok(place)) = self.place.get() else {
            return Ok(());
        };
        fs::set_permissions(place.dir.path(), fs::Permissions::from_mode(0o711))
            .map_err(|e| self.cannot(&format!("chmod: {e}")))?;
        user.give(&place.work)
    }

    /// The working copy's place, made once: a private temporary directory
    /// holding sentinel's git directory (borrowing the clone's objects) and
    /// the empty working copy.
    fn place(&self, dirs: &GitDirs) -> Result<&Place, String> {
        self.place
            .get_or_init(|| {
                let dir = tempfile::Builder::new()
                    .prefix("sentinel-agent-copy-")
                    .tempdir()
                    .map_err(|e| self.cannot(&format!("a temporary directory: {e}")))?;
                let git = dir.path().join("git");
                let work = dir.path().join("work");
                fs::create_dir(&work).map_err(|e| self.cannot(&format!("mkdir: {e}")))?;
                git_dir(&git, &git_files(dirs, None)).map_err(|e| self.cannot(&e))?;
                Ok(Place { dir, git, work })
            })
            .as_ref()
            .map_err(String::clone)
    }

    /// The agent's git directory in its working copy: `HEAD` at `id`,
    /// sentinel's index (so the checkout shows clean), the clone's objects
    /// borrowed read-only, objects and refs of its own. Kept when it is
    /// exactly as sentinel wrote it (its index aside); anything else (a
    /// commit, a hook, a config, a link) is removed, never followed, and it
    /// is made again. Keeping it is what makes a run cheap: on this
    /// machine's disk, removing and making its eight entries cost 15 to 25
    /// ms a run, more than the two git commands.
    fn agents_git(&self, place: &Place, dirs: &GitDirs, id: &str) -> Result<(), String> {
        let mine = place.work.join(".git");
        let files = git_files(dirs, Some(id));
        if !kept(&mine, &files) {
            remove(&mine)?;
            git_dir(&mine, &files).map_err(|e| self.cannot(&e))?;
        }
        let index = fs::read(place.git.join("index"))
            .map_err(|e| self.cannot(&format!("reading the index: {e}")))?;
        let theirs = safe_fs::read_beneath(&mine, "index", MAX_INDEX_BYTES);
        if theirs.ok().flatten().as_deref() != Some(index.as_slice()) {
            safe_fs::replace(&mine.join("index"), &index, None)
                .map_err(|e| self.cannot(&format!("writing the index: {e}")))?;
        }
        Ok(())
    }

    /// The commit `head` names in the clone (a full id is taken as it is).
    fn resolve(&self, hooks: &HooksOff, head: &str) -> Result<String, String> {
        if is_hex_id(head) {
            return Ok(head.to_string());
        }
        let mut cmd = self.command(hooks);
        cmd.arg("-C").arg(&self.repo).args([
            "rev-parse",
            "--verify",
            "--end-of-options",
            &format!("{head}^{{commit}}"),
        ]);
        let out = self.run(cmd, "rev-parse")?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    fn dirs(&self) -> Result<GitDirs, String> {
        self.dirs
            .get_or_init(|| {
                let hooks = HooksOff::new().map_err(|e| e.to_string())?;
                let mut cmd = self.command(&hooks);
                cmd.arg("-C").arg(&self.repo).args([
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-dir",
                    "--git-common-dir",
                    "--show-object-format",
                ]);
                let out = self.run(cmd, "rev-parse")?;
                let text = String::from_utf8_lossy(&out);
                let mut lines = text.lines();
                match (lines.next(), lines.next(), lines.next()) {
                    (Some(git), Some(common), Some(format)) => Ok(GitDirs {
                        git: PathBuf::from(git),
                        common: PathBuf::from(common),
                        format: format.to_string(),
                    }),
                    _ => Err(format!(
                        "cannot find the git directory of `{}`",
                        self.repo.display()
                    )),
                }
            })
            .clone()
    }

    /// The clone's `HEAD` and watched tip, read from its ref files (git is
    /// asked only when they cannot be read exactly).
    fn refs(&self, dirs: &GitDirs) -> Refs {
        let head_file = fs::read_to_string(dirs.git.join("HEAD")).ok();
        let mut head = (self.read_tip)(&self.repo, "HEAD");
        let mut watched = (self.read_tip)(&self.repo, &self.watched);
        if head.is_none() || watched.is_none() {
            let mut cmd = Command::new("git");
            sentinel_core::redact::scrub_env(&mut cmd);
            cmd.arg("-C").arg(&self.repo).args([
                "rev-parse",
                "--end-of-options",
                "HEAD",
                &self.watched,
            ]);
            if let Ok(out) = cmd.stdin(Stdio::null()).stderr(Stdio::null()).output() {
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let mut ids = text.lines().map(str::to_string);
                head = head.or(ids.next());
                watched = watched.or(ids.next());
            }
        }
        Refs {
            head_file,
            head,
            watched,
        }
    }

    /// `git` with hooks and fsmonitor off and sentinel's secrets removed.
    fn command(&self, hooks: &HooksOff) -> Command {
        let mut cmd = Command::new("git");
        sentinel_core::redact::scrub_env(&mut cmd);
        for var in REDIRECTING_ENV {
            cmd.env_remove(var);
        }
        cmd.args(hooks.args()).stdin(Stdio::null());
        cmd
    }

    /// A git command on the working copy, naming sentinel's git directory
    /// for it and the working copy.
    fn git_in(&self, place: &Place, hooks: &HooksOff, args: &[&str]) -> Result<(), String> {
        let mut cmd = self.command(hooks);
        cmd.arg(format!("--git-dir={}", place.git.display()))
            .arg(format!("--work-tree={}", place.work.display()))
            .current_dir(&place.work)
            .args(args);
        self.run(cmd, args.first().copied().unwrap_or_default())
            .map(|_| ())
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<Vec<u8>, String> {
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run git for the agent's working copy: {e}"))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").trim();
        Err(self.cannot(&format!("git {what}: {first}")))
    }

    fn cannot(&self, why: &str) -> String {
        format!(
            "cannot prepare the agent's working copy of `{}` ({why}); check that the \
             temporary directory (TMPDIR) is writable",
            self.repo.display()
        )
    }
}

impl Clone for Worktree {
    fn clone(&self) -> Worktree {
        Worktree {
            repo: self.repo.clone(),
            watched: self.watched.clone(),
            max_bytes: self.max_bytes,
            dirs: self.dirs.clone(),
            place: Arc::clone(&self.place),
            before: Mutex::new(None),
            read_tip: self.read_tip,
        }
    }
}

/// The most of an index sentinel compares before writing it again; a
/// larger one is always written.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The directories of a git directory sentinel makes, and its files.
const GIT_DIRS: [&str; 5] = ["objects", "objects/info", "refs", "refs/heads", "refs/tags"];

/// The files of a git directory sentinel makes by hand: `HEAD` detached at
/// `head` (or unborn), a config that names the clone's object format and
/// nothing else, the clone's objects borrowed through `alternates`.
fn git_files(dirs: &GitDirs, head: Option<&str>) -> [(&'static str, String); 3] {
    let config = if dirs.format == "sha1" {
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n".to_string()
    } else {
        format!(
            "[core]\n\trepositoryformatversion = 1\n\tfilemode = true\n\tbare = false\n\
             [extensions]\n\tobjectformat = {}\n",
            dirs.format
        )
    };
    let head = head.map_or("ref: refs/heads/agent\n".to_string(), |id| {
        format!("{id}\n")
    });
    let alternates = format!("{}\n", dirs.common.join("objects").display());
    [
        ("config", config),
        ("HEAD", head),
        ("objects/info/alternates", alternates),
    ]
}

/// Make a git directory at `dir` (which must not exist) holding `files`.
/// No hook, no template.
fn git_dir(dir: &Path, files: &[(&str, String)]) -> Result<(), String> {
    fs::create_dir(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    for sub in GIT_DIRS {
        fs::create_dir(dir.join(sub)).map_err(|e| format!("mkdir {sub}: {e}"))?;
    }
    for (rel, text) in files {
        let path = dir.join(rel);
        fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Whether the git directory at `dir` is exactly what `git_dir` made with
/// `files` (plus an index): the same entries, each a real directory or
/// file (never a link), the files' bytes the same. Read only.
fn kept(dir: &Path, files: &[(&str, String)]) -> bool {
    if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
        return false;
    }
    let mut expected: Vec<String> = GIT_DIRS.iter().map(|d| format!("{d}/")).collect();
    expected.extend(files.iter().map(|(rel, _)| rel.to_string()));
    expected.push("index".into());
    expected.sort();
    let mut found = Vec::new();
    let mut todo = vec![String::new()];
    while let Some(rel) = todo.pop() {
        let Ok(entries) = fs::read_dir(dir.join(&rel)) else {
            return false;
        };
        for e in entries.flatten() {
            let name = format!("{rel}{}", e.file_name().to_string_lossy());
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    found.push(format!("{name}/"));
                    todo.push(format!("{name}/"));
                }
                Ok(t) if t.is_file() => found.push(name),
                _ => return false,
            }
            if found.len() > expected.len() {
                return false;
            }
        }
    }
    found.sort();
    found == expected
        && files.iter().all(|(rel, text)| {
            safe_fs::read_beneath(dir, rel, 4096)
                .ok()
                .flatten()
                .as_deref()
                == Some(text.as_bytes())
        })
}

/// Whether `rev` is a full commit id (SHA-1 or SHA-256), not a name.
fn is_hex_id(rev: &str) -> bool {
    matches!(rev.len(), 40 | 64) && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `HEAD` as written is a commit id (detached), not a branch.
fn is_id(head_file: &Option<String>) -> bool {
    head_file
        .as_deref()
        .is_some_and(|h| !h.trim_end().starts_with("ref: "))
}

/// Remove whatever stands at `path`: a link is unlinked, never followed, and
/// a directory is removed without following the links inside it.
fn remove(path: &Path) -> Result<(), String> {
    let removed = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    };
    removed.map_err(|e| {
        format!(
            "cannot remove `{}` to make the agent's working copy again: {e}; remove it by hand",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .trim_end()
            .to_string()
    }

    /// A clone with one commit; its head.
    fn clone_at(dir: &Path) -> String {
        fs::create_dir_all(dir).unwrap();
        git(dir, &["init", "-q"]);
        fs::write(dir.join("a.js"), "// a\n").unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", "one"]);
        git(dir, &["rev-parse", "HEAD"])
    }

    /// Every path under `dir`, relative, sorted.
    fn tree(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            out.push(name.clone());
            if e.file_type().unwrap().is_dir() {
                out.extend(tree(&e.path()).into_iter().map(|n| format!("{name}/{n}")));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn the_working_copy_lies_outside_the_clone_and_its_git() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        let before = tree(&repo);
        let wt = Worktree::of(&repo, "HEAD", 100, |_, _| None);
        wt.prepare(&head).unwrap();
        let work = wt.path().unwrap().to_path_buf();
        assert!(!work.starts_with(&repo), "{}", work.display());
        assert_eq!(fs::read_to_string(work.join("a.js")).unwrap(), "// a\n");
        // Nothing was added to the clone, its work tree or its `.git`.
        assert_eq!(tree(&repo), before);
        drop(wt);
        assert!(!work.exists(), "the working copy outlived its tick");
    }

    #[test]
    fn the_agents_commit_stays_in_its_copy_and_the_next_run_starts_clean() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        let objects = tree(&repo.join(".git/objects"));
        let wt = Worktree::of(&repo, "HEAD", 100, |_, _| None);
        wt.prepare(&head).unwrap();
        let work = wt.path().unwrap().to_path_buf();
        assert_eq!(git(&work, &["status", "--porcelain"]), "");
        fs::write(work.join("a.js"), "// edited\n").unwrap();
        assert_eq!(git(&work, &["diff", "--name-only"]), "a.js");
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "the agent's"]);
        git(
            &work,
            &["config", "core.fsmonitor", "touch /nonexistent/planted"],
        );
        fs::write(work.join("left.txt"), "x").unwrap();
        assert_eq!(wt.read("a.js").unwrap().unwrap(), b"// edited\n");
        // The clone's objects and refs are as they were.
        assert_eq!(tree(&repo.join(".git/objects")), objects);
        assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head);
        wt.prepare(&head).unwrap();
        assert_eq!(fs::read_to_string(work.join("a.js")).unwrap(), "// a\n");
        assert!(!work.join("left.txt").exists());
        assert_eq!(git(&work, &["rev-parse", "HEAD"]), head);
        assert!(
            !fs::read_to_string(work.join(".git/config"))
                .unwrap()
                .contains("fsmonitor")
        );
    }

    #[test]
    fn an_untouched_agents_git_is_kept_and_a_planted_hook_is_not() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        let wt = Worktree::of(&repo, "HEAD", 100, |_, _| None);
        wt.prepare(&head).unwrap();
        let dot = wt.path().unwrap().join(".git");
        let inode = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
        let config = inode(&dot.join("config"));
        wt.prepare(&head).unwrap();
        assert_eq!(inode(&dot.join("config")), config, "made again untouched");
        fs::create_dir(dot.join("hooks")).unwrap();
        fs::write(dot.join("hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        wt.prepare(&head).unwrap();
        assert!(!dot.join("hooks").exists());
        // An index the agent's git refreshed is given back as sentinel's.
        fs::write(dot.join("index"), "not an index").unwrap();
        wt.prepare(&head).unwrap();
        assert_eq!(git(wt.path().unwrap(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_link_left_in_place_of_the_copy_or_its_git_is_removed_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        fs::write(repo.join("mine.txt"), "mine\n").unwrap();
        let wt = Worktree::of(&repo, "HEAD", 100, |_, _| None);
        wt.prepare(&head).unwrap();
        let work = wt.path().unwrap().to_path_buf();
        fs::remove_dir_all(work.join(".git")).unwrap();
        std::os::unix::fs::symlink(repo.join(".git"), work.join(".git")).unwrap();
        wt.prepare(&head).unwrap();
        assert!(fs::symlink_metadata(work.join(".git")).unwrap().is_dir());
        fs::remove_dir_all(&work).unwrap();
        std::os::unix::fs::symlink(&repo, &work).unwrap();
        wt.prepare(&head).unwrap();
        assert!(fs::symlink_metadata(&work).unwrap().is_dir());
        assert_eq!(fs::read_to_string(repo.join("mine.txt")).unwrap(), "mine\n");
        assert_eq!(git(&repo, &["status", "--porcelain"]), "?? mine.txt");
    }

    #[test]
    fn a_name_is_resolved_in_the_clone_not_in_the_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        let wt = Worktree::of(&repo, "HEAD", 100, |_, _| None);
        wt.prepare("HEAD").unwrap();
        assert_eq!(git(wt.path().unwrap(), &["rev-parse", "HEAD"]), head);
    }
}
