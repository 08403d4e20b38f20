//! The agent's own checkout: a git worktree under `.sentinel/`, detached at
//! the watched head before each run, so the file on disk is the content the
//! agent was handed and nothing it does moves a branch sentinel watches.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(Debug, Clone)]
pub struct Worktree {
    /// The clone sentinel watches.
    pub repo: PathBuf,
    /// Where the agent works: `<repo>/.sentinel/worktrees/agent`.
    pub path: PathBuf,
}

impl Worktree {
    /// The agent's worktree of the clone at `repo`.
    pub fn of(repo: &Path) -> Worktree {
        Worktree {
            repo: repo.to_path_buf(),
            path: repo.join(".sentinel").join("worktrees").join("agent"),
        }
    }

    /// Put the worktree at `head`, detached, with no leftover of an earlier
    /// run: created on first use, reset and cleaned afterwards.
    pub fn prepare(&self, head: &str) -> Result<(), String> {
        let dot = self.repo.join(".sentinel");
        if !dot.join(".gitignore").exists() {
            // Keep the worktree out of the clone's `git status`.
            let _ = std::fs::create_dir_all(&dot);
            let _ = crate::state::safe_fs::replace(&dot.join(".gitignore"), b"*\n", None);
        }
        if self.path.join(".git").exists() {
            self.git(
                &self.path,
                &["checkout", "--quiet", "--force", "--detach", head],
            )?;
            self.git(&self.path, &["clean", "--quiet", "-fdx"])?;
            return Ok(());
        }
        let path = self.path.to_string_lossy().into_owned();
        // A worktree whose directory was removed is still registered.
        let _ = self.git(&self.repo, &["worktree", "prune"]);
        self.git(
            &self.repo,
            &[
                "worktree", "add", "--quiet", "--force", "--detach", &path, head,
            ],
        )
    }

    /// The bytes of `file` in the worktree as the agent left them, committed
    /// or not; `None` when the agent removed it.
    pub fn read(&self, file: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path.join(file)).ok()
    }

    fn git(&self, dir: &Path, args: &[&str]) -> Result<(), String> {
        let mut cmd = Command::new("git");
        crate::redact::scrub_env(&mut cmd);
        let out = cmd
            .arg("-C")
            .arg(dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run git for the agent's worktree: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().next().unwrap_or("").trim();
        Err(format!(
            "cannot prepare the agent's worktree `{}` (git {}): {first}",
            self.path.display(),
            args.first().copied().unwrap_or_default()
        ))
    }
}
