//! The agent's own checkout: a git worktree under `.sentinel/`, detached at
//! the watched head before each run, so the file on disk is the content the
//! agent was handed and nothing it does moves a branch sentinel watches.
//!
//! The agent is untrusted and works inside this directory, so nothing it
//! leaves there decides where sentinel's git acts: every command names the
//! worktree's admin directory (`--git-dir`) and the directory sentinel made
//! (`--work-tree`) itself, with hooks and fsmonitor off. A worktree whose
//! `.git` does not name an admin directory that names it back, or whose
//! path is a link, is removed (never following a link) and made again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::source::hooks_off::HooksOff;
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
    /// The common git directory, whose `worktrees/` holds the worktree's
    /// admin directory.
    common: PathBuf,
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
        let hooks =
            HooksOff::new().map_err(|e| format!("cannot create an empty hooks directory: {e}"))?;
        match self.admin_of(&dirs.common) {
            Some(admin) => {
                let checkout = ["checkout", "--quiet", "--force", "--detach", head];
                self.git_in(&admin, &hooks, &checkout)?;
                self.git_in(&admin, &hooks, &["clean", "--quiet", "-fdx"])?;
            }
            None => {
                self.recreate(&dirs.common, &hooks, head)?;
            }
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
    pub fn read(&self, file: &str) -> Result<Option<Vec<u8>>, String> {
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

    /// What the agent's own git in the worktree writes besides the work
    /// tree (its admin directory: index, `HEAD`) and the clone's object
    /// directory it reads: the kernel sandbox lets it write the first only.
    pub fn agent_git(&self) -> Option<(PathBuf, PathBuf)> {
        let dirs = self.dirs().ok()?;
        let admin = self.admin_of(&dirs.common)?;
        Some((admin, dirs.common.join("objects")))
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

    /// The admin directory of the worktree when it is the one sentinel
    /// made: a directory, not a link, whose `.git` (read without following
    /// a link) names an admin directory right under `<common>/worktrees`
    /// that names this worktree back. Anything else is `None`.
    fn admin_of(&self, common: &Path) -> Option<PathBuf> {
        if !fs::symlink_metadata(&self.path).is_ok_and(|m| m.is_dir()) {
            return None;
        }
        let dot_git = safe_fs::read_beneath(&self.path, ".git", 4096).ok()??;
        let admin = PathBuf::from(
            std::str::from_utf8(&dot_git)
                .ok()?
                .strip_prefix("gitdir: ")?
                .strip_suffix('\n')?,
        );
        let under = admin.parent() == Some(common.join("worktrees").as_path());
        let real_dir = fs::symlink_metadata(&admin).is_ok_and(|m| m.is_dir());
        let common_ok = fs::read(admin.join("commondir")).is_ok_and(|c| c == b"../..\n");
        (under && real_dir && common_ok && self.names_us(&admin)).then_some(admin)
    }

    /// Whether the admin directory `admin` registers this worktree: its
    /// `gitdir` names `<path>/.git`, as written or after resolving the
    /// directories above the worktree (never the worktree itself, which
    /// may be the agent's link).
    fn names_us(&self, admin: &Path) -> bool {
        let Ok(text) = fs::read_to_string(admin.join("gitdir")) else {
            return false;
        };
        let named = admin.join(text.trim_end_matches('\n'));
        let mine = self.path.join(".git");
        let resolved = |p: &Path| {
            let worktree = p.parent()?;
            let above = fs::canonicalize(worktree.parent()?).ok()?;
            Some(above.join(worktree.file_name()?).join(".git"))
        };
        named == mine || resolved(&named).is_some_and(|n| Some(n) == resolved(&mine))
    }

    /// Remove what stands at the worktree and every registration of it, and
    /// let git make it again; returns its new admin directory. A worktree of
    /// the user's is never touched: only admin directories naming this path.
    fn recreate(&self, common: &Path, hooks: &HooksOff, head: &str) -> Result<PathBuf, String> {
        remove(&self.path)?;
        if let Ok(entries) = fs::read_dir(common.join("worktrees")) {
            for admin in entries.flatten().map(|e| e.path()) {
                if self.names_us(&admin) {
                    remove(&admin)?;
                }
            }
        }
        let path = self.path.to_string_lossy().into_owned();
        let mut cmd = self.command(hooks);
        cmd.arg("-C").arg(&self.repo);
        cmd.args([
            "worktree", "add", "--quiet", "--force", "--detach", &path, head,
        ]);
        self.run(cmd, "worktree")?;
        // Nothing but git has run since it wrote `.git`: it names the admin
        // directory git chose (`agent`, or `agent1` when a worktree of the
        // user's is called `agent` too).
        self.admin_of(common).ok_or_else(|| {
            format!(
                "cannot prepare the agent's worktree `{}`: git made it, but its `.git` does not \
                 name an admin directory under `{}`; run `git worktree prune` in the clone",
                self.path.display(),
                common.join("worktrees").display()
            )
        })
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
                ]);
                let out = self.run(cmd, "rev-parse")?;
                let text = String::from_utf8_lossy(&out);
                let mut lines = text.lines();
                match (lines.next(), lines.next()) {
                    (Some(git), Some(common)) => Ok(GitDirs {
                        git: PathBuf::from(git),
                        common: PathBuf::from(common),
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
    fn command(&self, hooks: &HooksOff) -> Command {
        let mut cmd = Command::new("git");
        crate::redact::scrub_env(&mut cmd);
        for var in crate::source::git::REDIRECTING_ENV {
            cmd.env_remove(var);
        }
        cmd.args(hooks.args()).stdin(Stdio::null());
        cmd
    }

    /// A git command on the worktree, naming its git dir and work tree.
    fn git_in(&self, admin: &Path, hooks: &HooksOff, args: &[&str]) -> Result<(), String> {
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

    /// Prepare twice; a mark left in the admin directory after the first
    /// survives the second only when the worktree was kept, not made again.
    fn kept_on_the_second_prepare(wt: &Worktree, head: &str) -> bool {
        wt.prepare(head).unwrap();
        let admin = wt.admin_of(&wt.dirs().unwrap().common).unwrap();
        fs::write(admin.join("mark"), "").unwrap();
        wt.prepare(head).unwrap();
        admin.join("mark").exists()
    }

    #[test]
    fn a_prepared_worktree_is_kept_from_run_to_run() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        assert!(kept_on_the_second_prepare(
            &Worktree::of(&repo, "HEAD", 100),
            &head
        ));
        // Also when the clone is reached through a link.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&repo, &link).unwrap();
        assert!(kept_on_the_second_prepare(
            &Worktree::of(&link, "HEAD", 100),
            &head
        ));
    }

    #[test]
    fn a_worktree_of_the_users_called_agent_is_never_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let head = clone_at(&repo);
        let users = tmp.path().join("agent");
        git(
            &repo,
            &[
                "worktree",
                "add",
                "-q",
                "--detach",
                &users.to_string_lossy(),
            ],
        );
        fs::write(users.join("work.txt"), "mine\n").unwrap();
        let wt = Worktree::of(&repo, "HEAD", 100);
        assert!(kept_on_the_second_prepare(&wt, &head));
        // The agent points `.git` at the user's worktree: sentinel makes its own again.
        let admin = repo.join(".git/worktrees/agent");
        fs::write(
            wt.path.join(".git"),
            format!("gitdir: {}\n", admin.display()),
        )
        .unwrap();
        wt.prepare(&head).unwrap();
        assert_eq!(
            fs::read_to_string(users.join("work.txt")).unwrap(),
            "mine\n"
        );
        assert_eq!(
            fs::read_to_string(admin.join("gitdir")).unwrap().trim_end(),
            users.join(".git").to_string_lossy()
        );
        assert!(git(&users, &["status", "--porcelain"]).contains("work.txt"));
    }
}
