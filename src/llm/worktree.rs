//! The agent's own checkout: a git worktree under `.sentinel/`, detached at
//! the watched head before each run, so the file on disk is the content the
//! agent was handed and nothing it does moves a branch sentinel watches.
//!
//! The agent is untrusted and works inside this directory, so nothing it
//! leaves there decides where sentinel's git acts: every command names the
//! worktree's admin directory (`--git-dir`) and the directory sentinel made
//! (`--work-tree`) itself, with hooks and fsmonitor off. A worktree whose
//! `.git` is not the file sentinel wrote, or whose path is a link, is
//! removed (never following a link) and made again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::state::safe_fs;

#[derive(Debug)]
pub struct Worktree {
    /// The clone sentinel watches.
    pub repo: PathBuf,
    /// Where the agent works: `<repo>/.sentinel/worktrees/agent`.
    pub path: PathBuf,
    /// The watched revision, to notice the agent moving it.
    watched: String,
    /// What is read of a file the agent left (`--max-file-bytes`).
    max_bytes: u64,
    /// The clone's git directory and common git directory, asked once.
    dirs: OnceLock<Result<GitDirs, String>>,
    /// The clone's refs as they were when the worktree was last prepared.
    before: Mutex<Option<Refs>>,
}

#[derive(Debug, Clone)]
struct GitDirs {
    /// The clone's own git directory (where its `HEAD` is).
    git: PathBuf,
    /// `<common git dir>/worktrees/agent`: the worktree's admin directory.
    admin: PathBuf,
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

/// Why a file the agent left was not taken as its answer.
pub type Refused = String;

impl Worktree {
    /// The agent's worktree of the clone at `repo`, watching `rev`, reading
    /// at most `max_bytes` of a file the agent left.
    pub fn of(repo: &Path, rev: &str, max_bytes: u64) -> Worktree {
        let repo = std::path::absolute(repo).unwrap_or_else(|_| repo.to_path_buf());
        Worktree {
            path: repo.join(".sentinel").join("worktrees").join("agent"),
            repo,
            watched: rev.to_string(),
            max_bytes,
            dirs: OnceLock::new(),
            before: Mutex::new(None),
        }
    }

    /// Put the worktree at `head`, detached, with no leftover of an earlier
    /// run: created on first use (or when it is not the one sentinel made),
    /// reset and cleaned afterwards.
    pub fn prepare(&self, head: &str) -> Result<(), String> {
        self.own_dirs()?;
        let dirs = self.dirs()?;
        // An empty directory of sentinel's own, made for these commands only.
        let hooks = tempfile::Builder::new()
            .prefix("sentinel-no-hooks-")
            .tempdir()
            .map_err(|e| format!("cannot create an empty hooks directory: {e}"))?;
        if self.is_ours(&dirs.admin) {
            self.git_in(
                &dirs.admin,
                hooks.path(),
                &["checkout", "--quiet", "--force", "--detach", head],
            )?;
            self.git_in(&dirs.admin, hooks.path(), &["clean", "--quiet", "-fdx"])?;
        } else {
            self.recreate(&dirs.admin, hooks.path(), head)?;
        }
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

    /// The bytes of `file` in the worktree as the agent left them, committed
    /// or not; `Ok(None)` when the agent removed it. A link (anywhere on the
    /// way), a FIFO, a device, a directory or a file over the limit is refused
    /// with the reason: nothing outside the worktree is read.
    pub fn read(&self, file: &str) -> Result<Option<Vec<u8>>, Refused> {
        safe_fs::read_beneath(&self.path, file, self.max_bytes).map_err(|r| {
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

    /// `.sentinel` must not be a link (it may be the user's own choice, so it
    /// is refused, not removed); `.sentinel/worktrees` is sentinel's, and a
    /// link there is removed.
    fn own_dirs(&self) -> Result<(), String> {
        let dot = self.repo.join(".sentinel");
        if safe_fs::is_link(&dot) {
            return Err(format!(
                "`{}` is a symbolic link, and sentinel does not prepare the agent's worktree \
                 through one: make it a directory",
                dot.display()
            ));
        }
        if !dot.join(".gitignore").exists() {
            // Keep the worktree out of the clone's `git status`.
            let _ = fs::create_dir_all(&dot);
            let _ = safe_fs::replace(&dot.join(".gitignore"), b"*\n", None);
        }
        let worktrees = dot.join("worktrees");
        if safe_fs::is_link(&worktrees) {
            remove(&worktrees)?;
        }
        fs::create_dir_all(&worktrees).map_err(|e| {
            format!(
                "cannot create `{}`: {e}; check its permissions",
                worktrees.display()
            )
        })
    }

    /// Whether the worktree is the one sentinel made: a directory, not a
    /// link, whose `.git` is exactly the file sentinel wrote.
    fn is_ours(&self, admin: &Path) -> bool {
        let dir = fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir());
        let admin_ok = fs::symlink_metadata(admin).is_ok_and(|m| m.is_dir())
            && fs::read(admin.join("commondir")).is_ok_and(|c| c == b"../..\n");
        let dot_git = safe_fs::read_beneath(&self.path, ".git", 4096)
            .is_ok_and(|b| b.as_deref() == Some(dot_git_content(admin).as_bytes()));
        dir && admin_ok && dot_git
    }

    /// Remove what stands at the worktree and its admin directory, and let
    /// git make them again.
    fn recreate(&self, admin: &Path, hooks: &Path, head: &str) -> Result<(), String> {
        remove(&self.path)?;
        remove(admin)?;
        let path = self.path.to_string_lossy().into_owned();
        let mut cmd = self.command(hooks);
        cmd.arg("-C").arg(&self.repo);
        cmd.args([
            "worktree", "add", "--quiet", "--force", "--detach", &path, head,
        ]);
        self.run(cmd, "worktree")?;
        if !admin.is_dir() {
            return Err(format!(
                "cannot prepare the agent's worktree `{}`: git did not create `{}`; \
                 run `git worktree prune` in the clone and try again",
                self.path.display(),
                admin.display()
            ));
        }
        // Written by sentinel, so the next run can tell it is the same file.
        safe_fs::replace(
            &self.path.join(".git"),
            dot_git_content(admin).as_bytes(),
            None,
        )
        .map_err(|e| format!("cannot write `{}`: {e}", self.path.join(".git").display()))
    }

    fn dirs(&self) -> Result<GitDirs, String> {
        self.dirs
            .get_or_init(|| {
                let hooks = tempfile::tempdir().map_err(|e| e.to_string())?;
                let mut cmd = self.command(hooks.path());
                cmd.arg("-C").arg(&self.repo).args([
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-dir",
                    "--git-common-dir",
                ]);
                let out = self.run(cmd, "rev-parse")?;
                let text = String::from_utf8_lossy(&out);
                let mut lines = text.lines();
                match (lines.next(), lines.next()) {
                    (Some(git), Some(common)) => Ok(GitDirs {
                        git: PathBuf::from(git),
                        admin: Path::new(common).join("worktrees").join("agent"),
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
        let mut head = crate::source::tip::read(&self.repo, "HEAD");
        let mut watched = crate::source::tip::read(&self.repo, &self.watched);
        if head.is_none() || watched.is_none() {
            let mut cmd = Command::new("git");
            crate::redact::scrub_env(&mut cmd);
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
    fn command(&self, hooks: &Path) -> Command {
        let mut cmd = Command::new("git");
        crate::redact::scrub_env(&mut cmd);
        for var in crate::source::git::REDIRECTING_ENV {
            cmd.env_remove(var);
        }
        cmd.arg("-c")
            .arg(format!("core.hooksPath={}", hooks.display()))
            .args(["-c", "core.fsmonitor=false"])
            .stdin(Stdio::null());
        cmd
    }

    /// A git command on the worktree, naming its git dir and work tree.
    fn git_in(&self, admin: &Path, hooks: &Path, args: &[&str]) -> Result<(), String> {
        let mut cmd = self.command(hooks);
        cmd.arg(format!("--git-dir={}", admin.display()))
            .arg(format!("--work-tree={}", self.path.display()))
            .current_dir(&self.repo)
            .args(args);
        self.run(cmd, args.first().copied().unwrap_or_default())
            .map(|_| ())
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<Vec<u8>, String> {
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run git for the agent's worktree: {e}"))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").trim();
        Err(format!(
            "cannot prepare the agent's worktree `{}` (git {what}): {first}",
            self.path.display()
        ))
    }
}

impl Clone for Worktree {
    fn clone(&self) -> Worktree {
        Worktree {
            repo: self.repo.clone(),
            path: self.path.clone(),
            watched: self.watched.clone(),
            max_bytes: self.max_bytes,
            dirs: self.dirs.clone(),
            before: Mutex::new(None),
        }
    }
}

/// Whether `HEAD` as written is a commit id (detached), not a branch.
fn is_id(head_file: &Option<String>) -> bool {
    head_file
        .as_deref()
        .is_some_and(|h| !h.trim_end().starts_with("ref: "))
}

fn dot_git_content(admin: &Path) -> String {
    format!("gitdir: {}\n", admin.display())
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
            "cannot remove `{}` to make the agent's worktree again: {e}; remove it by hand",
            path.display()
        )
    })
}
