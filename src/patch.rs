//! Opt-in patches: the advisor's proposed content, committed to a sandbox
//! branch. sentinel watches another branch, so its own commits can never
//! wake it: the echo loop is closed by structure.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::source::gitlab::{GitLabConfig, encode};

mod gitlab_sandbox;
mod holds;
pub mod merge_request;
mod sandbox;
pub mod strangers;
mod temp_index;

pub use merge_request::Review;
pub use sandbox::Carried;
pub use strangers::Stranger;

/// The default sandbox branch.
pub const SANDBOX: &str = "sentinel-sandbox";

pub trait Patcher {
    /// Commit `content` as the new `path` on the sandbox branch; the commit
    /// id, or why not (reported, and tried again on a later wake).
    fn commit(&mut self, path: &str, content: &str, message: &str) -> Result<String, String>;
    /// Where patches go, for the write log.
    fn target(&self) -> String;
    /// The sandbox commit whose `path` is exactly `content`, when the
    /// sandbox branch holds it: asked before committing a content an earlier
    /// tick may have committed already. `Err` when it cannot tell.
    fn holds(&mut self, path: &str, content: &str) -> Result<Option<String>, String> {
        let _ = (path, content);
        Err("this sandbox cannot say what it holds".into())
    }
    /// The watched branch's tip, which the sandbox follows; `None` for a
    /// sandbox that does not follow it (it is then never rebuilt).
    fn watched_tip(&mut self) -> Result<Option<String>, String> {
        Ok(None)
    }
    /// Make the sandbox `base` plus one commit per entry of `chain`, in
    /// order, each the entry's file as its commit carries it: the new commit
    /// of each, `None` where `base` already holds that content (no empty
    /// commit). A sandbox that already is exactly that is left as it is.
    fn rebuild(&mut self, base: &str, chain: &[Carried]) -> Result<Vec<Option<String>>, String> {
        let _ = (base, chain);
        Err("this sandbox cannot be rebuilt".into())
    }
    /// The command that would take the sandbox's proposals, for the tick's line.
    fn merge_hint(&self) -> Option<String> {
        None
    }
    /// The commits of the sandbox branch after `base` (the base it was
    /// built on) and not in the watched `tip` (where a merged one went)
    /// that are not `own` (sentinel's commits, as it remembers them),
    /// oldest first: none when the branch holds exactly what sentinel
    /// says, or does not exist.
    fn strangers(
        &mut self,
        base: &str,
        tip: &str,
        own: &[String],
    ) -> Result<Vec<Stranger>, String> {
        let _ = (base, tip, own);
        Ok(Vec::new())
    }
    /// Whether people work on the sandbox branch too (a merge request on
    /// GitLab): a stranger there stops proposing until a person resolves
    /// it. A branch that is sentinel's own (git) is rebuilt without it.
    fn shared(&self) -> bool {
        false
    }
    /// Build nothing more on the sandbox this tick: every commit and
    /// rebuild answers `why`, and the merge request is left as it is.
    fn stop(&mut self, why: String) {
        let _ = why;
    }
    /// Keep the sandbox's one merge request up to date: `page` describes
    /// the open proposals, `None` closes it; `known` is the one the state
    /// remembers. `Ok(None)`: this sandbox keeps no merge request.
    fn review(
        &mut self,
        known: Option<u64>,
        title: &str,
        page: Option<&str>,
    ) -> Result<Option<Review>, String> {
        let _ = (known, title, page);
        Ok(None)
    }
}

/// The most characters of a commit message's body: a model's reason can be
/// any length, and a commit that fails on its message fails on every wake.
pub const MAX_MESSAGE_BODY_CHARS: usize = 4_000;

/// The start of a refusal that waiting cannot change (a link, a name that is
/// not UTF-8): the proposal is not tried again until the file changes.
pub const REFUSED: &str = "refused: ";

/// Why a proposed content is not committed: it carries the value of a
/// secret sentinel holds (never named, never altered; see
/// docs/threat-model.md).
pub fn secret_refusal(path: &str) -> String {
    format!(
        "{REFUSED}the content proposed for `{}` carries the value of a secret sentinel holds; it is not committed, and a secret is never edited out of code",
        crate::report::escape::terminal(path)
    )
}

/// The commit message of a patch: one subject line naming the file (its
/// control characters escaped, so a name cannot add lines), then the
/// reason, capped, then the decision and the fingerprint it answered, so a
/// reviewer can ask `sentinel explain` about exactly that question.
pub fn commit_message(path: &str, reason: &str, fingerprint: &str) -> String {
    format!(
        "sentinel: proposed change to {}\n\n{}\n\nDecision: evolve\nFingerprint: {}\n",
        crate::report::escape::terminal(path),
        crate::llm::bounds::cap(reason.trim(), MAX_MESSAGE_BODY_CHARS),
        crate::report::escape::terminal(fingerprint)
    )
}

/// A full SHA-1 or SHA-256 commit id, as a peer may only send one: any
/// other text (of any length) is not kept in the state as one.
pub fn is_commit_id(id: &str) -> bool {
    (id.len() == 40 || id.len() == 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Check a proposed content before it is committed.
pub fn validate(current: &[u8], proposed: &str, limit: u64) -> Result<(), String> {
    if proposed.len() as u64 > limit {
        return Err(format!(
            "the proposed content is {} bytes, over --max-file-bytes {limit}",
            proposed.len()
        ));
    }
    if proposed.as_bytes() == current {
        return Err("the proposed content is identical to the file".into());
    }
    if proposed.contains('\0') {
        return Err("the proposed content holds NUL bytes".into());
    }
    Ok(())
}

/// A local clone: a commit on the sandbox branch made with plumbing, so the
/// working tree, the index and the watched branch are never touched.
pub struct GitBranch {
    pub repo: PathBuf,
    /// The watched revision, the sandbox branch's start.
    pub base: String,
    /// The sandbox branch, in any spelling; written as `refs/heads/<name>`.
    pub branch: String,
}

impl GitBranch {
    fn git(
        &self,
        args: &[&str],
        index: Option<&std::path::Path>,
        input: Option<&[u8]>,
    ) -> Result<String, String> {
        // A hook the agent planted in the clone (`reference-transaction`
        // runs on every ref update) must not run as sentinel.
        let hooks_off = sentinel_io::git_env::HooksOff::new()
            .map_err(|e| format!("cannot create an empty hooks directory: {e}"))?;
        let mut cmd = Command::new("git");
        cmd.arg("-C")
            .arg(&self.repo)
            .args(hooks_off.args())
            .args(args);
        for var in ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"] {
            cmd.env_remove(var);
        }
        crate::redact::scrub_env(&mut cmd);
        if let Some(index) = index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        cmd.env("GIT_AUTHOR_NAME", "sentinel")
            .env("GIT_AUTHOR_EMAIL", "sentinel@localhost")
            .env("GIT_COMMITTER_NAME", "sentinel")
            .env("GIT_COMMITTER_EMAIL", "sentinel@localhost")
            .env("LC_ALL", "C")
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("could not run git: {e}"))?;
        if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(data)
                .map_err(|e| format!("could not feed git: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("git failed: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "git {} failed: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Commit `blob` as `path` on top of `parent` and move the sandbox branch
    /// there, if it still points at `previous` (`None`: it must not exist).
    fn commit_blob(
        &self,
        parent: &str,
        (blob, mode): (&str, &str),
        path: &str,
        message: &str,
        previous: Option<&str>,
    ) -> Result<String, String> {
        let reference = crate::branch::sandbox_ref(&self.branch)?;
        // A private index, so the clone's own index is never touched; read-tree
        // creates it in the git directory, where a killed tick's is swept.
        let git_dir = PathBuf::from(self.git(&["rev-parse", "--absolute-git-dir"], None, None)?);
        temp_index::sweep(&git_dir);
        let index_path = temp_index::path(&git_dir, blob);
        let result = (|| {
            self.git(&["read-tree", parent], Some(&index_path), None)?;
            self.git(
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("{mode},{blob},{path}"),
                ],
                Some(&index_path),
                None,
            )?;
            let tree = self.git(&["write-tree"], Some(&index_path), None)?;
            // The message on stdin: an argument is limited in length (E2BIG).
            let commit = self.git(
                &["commit-tree", &tree, "-p", parent],
                None,
                Some(message.as_bytes()),
            )?;
            let old = previous.map_or_else(|| "0".repeat(40), str::to_string);
            self.git(&["update-ref", &reference, &commit, &old], None, None)?;
            Ok(commit)
        })();
        let _ = std::fs::remove_file(&index_path);
        result
    }
}

impl GitBranch {
    /// The mode to commit `path` with: the one it has on `parent`, else on
    /// the watched revision. A link, a submodule or a directory is refused,
    /// and so is a name found in neither tree: the listing shows a name that
    /// is not UTF-8 with U+FFFD, and a patch there would add a new file.
    fn mode_of(&self, parent: &str, path: &str) -> Result<&'static str, String> {
        for tree in [parent, self.base.as_str()] {
            let entry = self.git(
                &["--literal-pathspecs", "ls-tree", tree, "--", path],
                None,
                None,
            )?;
            let Some(mode) = entry.split(' ').next().filter(|m| !m.is_empty()) else {
                continue;
            };
            return match mode {
                "100644" => Ok("100644"),
                "100755" => Ok("100755"),
                "120000" => Err(format!(
                    "{REFUSED}`{}` is a symbolic link on the sandbox branch; a link is never patched",
                    crate::report::escape::terminal(path)
                )),
                other => Err(format!(
                    "{REFUSED}`{}` is not a regular file (mode {other}); only files are patched",
                    crate::report::escape::terminal(path)
                )),
            };
        }
        Err(if path.contains('\u{FFFD}') {
            format!(
                "{REFUSED}the name of `{}` is not valid UTF-8; a patch would create a file under a changed name",
                crate::report::escape::terminal(path)
            )
        } else {
            format!(
                "{REFUSED}`{}` is in neither the sandbox branch nor the watched revision",
                crate::report::escape::terminal(path)
            )
        })
    }
}

impl Patcher for GitBranch {
    fn commit(&mut self, path: &str, content: &str, message: &str) -> Result<String, String> {
        // A full ref, so that `refs/heads/x` never becomes `refs/heads/refs/heads/x`.
        let reference = crate::branch::sandbox_ref(&self.branch)?;
        // Checked at the tick's start; checked again because a long tick
        // leaves time to switch branches in the clone.
        let current = self
            .git(&["symbolic-ref", "-q", "HEAD"], None, None)
            .unwrap_or_default();
        if current == reference {
            return Err(format!(
                "the clone's checked-out branch is the sandbox branch `{reference}`; a commit there would move it under the work tree: choose another `--sandbox-branch`"
            ));
        }
        let previous = self
            .git(&["rev-parse", "--verify", "-q", &reference], None, None)
            .ok();
        let parent = match &previous {
            Some(p) => p.clone(),
            None => self.git(
                &[
                    "rev-parse",
                    "--verify",
                    &format!("{}^{{commit}}", self.base),
                ],
                None,
                None,
            )?,
        };
        let mode = self.mode_of(&parent, path)?;
        let blob = self.git(
            &["hash-object", "-w", "--stdin"],
            None,
            Some(content.as_bytes()),
        )?;
        self.commit_blob(&parent, (&blob, mode), path, message, previous.as_deref())
    }

    fn target(&self) -> String {
        let name = self.branch.strip_prefix(crate::branch::HEADS);
        format!(
            "branch {} of {}",
            name.unwrap_or(&self.branch),
            self.repo.display()
        )
    }

    fn holds(&mut self, path: &str, content: &str) -> Result<Option<String>, String> {
        holds::on_git(self, path, content)
    }

    fn watched_tip(&mut self) -> Result<Option<String>, String> {
        self.tip().map(Some)
    }

    fn rebuild(&mut self, base: &str, chain: &[Carried]) -> Result<Vec<Option<String>>, String> {
        self.rebuild_on(base, chain)
    }

    fn strangers(
        &mut self,
        base: &str,
        tip: &str,
        own: &[String],
    ) -> Result<Vec<Stranger>, String> {
        self.strangers_on(base, tip, own)
    }

    fn merge_hint(&self) -> Option<String> {
        let name = self.branch.strip_prefix(crate::branch::HEADS);
        Some(format!("git merge {}", name.unwrap_or(&self.branch)))
    }
}

/// GitLab: one commit through the commits API, creating the sandbox branch
/// from the watched one when it does not exist yet.
pub struct GitLabBranch {
    agent: ureq::Agent,
    cfg: GitLabConfig,
    pub branch: String,
    /// `--merge-request`: keep one merge request of the sandbox branch.
    pub merge_request: bool,
    /// Why nothing more is built on the branch this tick (`Patcher::stop`).
    stopped: Option<String>,
}

impl GitLabBranch {
    pub fn new(cfg: GitLabConfig, branch: String) -> Result<GitLabBranch, String> {
        let agent = crate::http::agent(
            cfg.timeout.max(Duration::from_secs(1)),
            cfg.ca_file.as_deref(),
        )?;
        Ok(GitLabBranch {
            agent,
            cfg,
            branch,
            merge_request: false,
            stopped: None,
        })
    }

    fn url(&self, rest: &str) -> String {
        format!(
            "{}/projects/{}/{rest}",
            self.cfg.base.trim_end_matches('/'),
            encode(&self.cfg.project)
        )
    }
}

impl Patcher for GitLabBranch {
    fn commit(&mut self, path: &str, content: &str, message: &str) -> Result<String, String> {
        if let Some(why) = &self.stopped {
            return Err(why.clone());
        }
        let branch = self.url(&format!("repository/branches/{}", encode(&self.branch)));
        let exists = match self.send("GET", &branch, None)?.0 {
            200 => true,
            404 => false,
            s => return Err(format!("GitLab answered the branch lookup with {s}")),
        };
        let mut body = serde_json::json!({
            "branch": self.branch,
            "commit_message": message,
            "actions": [{"action": "update", "file_path": path, "content": content}],
        });
        if !exists {
            body["start_branch"] = crate::branch::gitlab_name(&self.cfg.branch).into();
        }
        // Through `gitlab_send`, where every request's words are redacted.
        let (status, answer) = self.send("POST", &self.url("repository/commits"), Some(body))?;
        match status {
            // The id is kept in the state: only an object id is taken.
            200..=299 => Ok(answer["id"]
                .as_str()
                .filter(|id| is_commit_id(id))
                .unwrap_or("committed")
                .to_string()),
            401 | 403 => Err(format!(
                "GitLab refused the patch ({status}): committing needs a token with the api scope and Developer access"
            )),
            s => Err(format!(
                "GitLab refused the patch ({s}{}); tried again on a later wake",
                answer["message"]
                    .as_str()
                    .map(|m| format!(
                        ": {}",
                        merge_request::peer_text(m, merge_request::MAX_MESSAGE_CHARS)
                    ))
                    .unwrap_or_default()
            )),
        }
    }

    fn target(&self) -> String {
        format!("branch {} of project {}", self.branch, self.cfg.project)
    }

    fn holds(&mut self, path: &str, content: &str) -> Result<Option<String>, String> {
        // A commit on a branch holding strangers may be a stranger's: it is
        // never taken for sentinel's own.
        if let Some(why) = &self.stopped {
            return Err(why.clone());
        }
        holds::on_gitlab(self, path, content)
    }

    fn watched_tip(&mut self) -> Result<Option<String>, String> {
        self.tip().map(Some)
    }

    fn rebuild(&mut self, base: &str, chain: &[Carried]) -> Result<Vec<Option<String>>, String> {
        if let Some(why) = &self.stopped {
            return Err(why.clone());
        }
        self.rebuild_on(base, chain)
    }

    fn strangers(
        &mut self,
        _base: &str,
        tip: &str,
        own: &[String],
    ) -> Result<Vec<Stranger>, String> {
        // GitLab's compare lists what the branch holds beyond its merge
        // base with the tip, which holds the base.
        self.strangers_on(tip, own)
    }

    fn shared(&self) -> bool {
        true
    }

    fn stop(&mut self, why: String) {
        self.stopped = Some(why);
    }

    fn review(
        &mut self,
        known: Option<u64>,
        title: &str,
        page: Option<&str>,
    ) -> Result<Option<Review>, String> {
        if !self.merge_request || self.stopped.is_some() {
            return Ok(None);
        }
        self.review_on(known, title, page).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_id_from_a_peer_is_kept_only_when_it_is_an_object_id() {
        assert!(is_commit_id(&"a1".repeat(20)));
        assert!(is_commit_id(&"0f".repeat(32)));
        assert!(!is_commit_id(&"a".repeat(3 << 20)));
        assert!(!is_commit_id("committed"));
        assert!(!is_commit_id(&"g".repeat(40)));
    }

    #[test]
    fn a_proposal_is_validated_before_it_is_committed() {
        assert!(validate(b"a", "b", 10).is_ok());
        assert!(validate(b"a", "a", 10).unwrap_err().contains("identical"));
        assert!(
            validate(b"a", "0123456789ab", 10)
                .unwrap_err()
                .contains("over")
        );
        assert!(validate(b"a", "x\0y", 10).unwrap_err().contains("NUL"));
    }
}
