//! Commits on the sandbox branch that sentinel did not make (invariant 23):
//! found before anything is built on the branch, and named (author,
//! subject, files), so that a commit pushed there (a `.gitlab-ci.yml` with
//! `curl … | sh`, a reviewer's suggestion) never rides along with the
//! proposals unseen, nor is discarded without a word.

use serde_json::Value;

use super::{GitBranch, GitLabBranch};
use crate::source::gitlab::encode;

/// Strangers named in full; the rest are counted.
pub const NAMED: usize = 3;
/// Files named per stranger; the rest are counted.
const FILES_NAMED: usize = 5;
/// The most characters of a stranger's author or subject kept.
const TEXT_CHARS: usize = 120;

/// One commit on the sandbox branch that is not sentinel's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stranger {
    pub id: String,
    pub author: String,
    pub subject: String,
    /// The files it changed (the first `FILES_NAMED`), and how many in all.
    pub files: Vec<String>,
    pub changed: usize,
}

impl std::fmt::Display for Stranger {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use crate::report::escape::terminal;
        let cap = |s: &str| crate::llm::bounds::cap(&terminal(s), TEXT_CHARS);
        let mut files: Vec<String> = self.files.iter().map(|p| format!("`{}`", cap(p))).collect();
        if self.changed > files.len() {
            files.push(format!("{} more", self.changed - files.len()));
        }
        write!(
            f,
            "{} by {} \"{}\" ({})",
            crate::tick::short_id(&self.id),
            cap(&self.author),
            cap(&self.subject),
            if files.is_empty() {
                "no file".to_string()
            } else {
                files.join(", ")
            }
        )
    }
}

/// The strangers in `on_branch` (the branch's commits after `base`, oldest
/// first): every commit that is not one of `own`.
fn not_own(on_branch: Vec<String>, own: &[String]) -> Vec<String> {
    on_branch
        .into_iter()
        .filter(|id| !own.iter().any(|o| o == id))
        .collect()
}

impl GitBranch {
    /// The commits of the sandbox branch in neither `base` nor `tip` that
    /// are not `own`: one `git rev-list`, then two git calls per named one.
    pub(super) fn strangers_on(
        &self,
        base: &str,
        tip: &str,
        own: &[String],
    ) -> Result<Vec<Stranger>, String> {
        let reference = crate::branch::sandbox_ref(&self.branch)?;
        if self
            .git(&["rev-parse", "--verify", "-q", &reference], None, None)
            .is_err()
        {
            return Ok(Vec::new());
        }
        let (not_base, not_tip) = (format!("^{base}"), format!("^{tip}"));
        let listed = self.git(
            &["rev-list", "--reverse", &reference, &not_base, &not_tip],
            None,
            None,
        )?;
        let ids = not_own(listed.lines().map(str::to_string).collect(), own);
        let mut out = Vec::with_capacity(ids.len().min(NAMED));
        for id in &ids {
            if out.len() == NAMED {
                out.push(Stranger {
                    id: id.clone(),
                    author: String::new(),
                    subject: String::new(),
                    files: Vec::new(),
                    changed: 0,
                });
                continue;
            }
            let shown = self.git(&["show", "-s", "--format=%an <%ae>%x00%s", id], None, None)?;
            let (author, subject) = shown.split_once('\0').unwrap_or((&shown, ""));
            let files = self.git(
                &[
                    "-c",
                    "core.quotePath=false",
                    "diff-tree",
                    "--no-commit-id",
                    "--name-only",
                    "-r",
                    "--root",
                    id,
                ],
                None,
                None,
            )?;
            let files: Vec<String> = files.lines().map(str::to_string).collect();
            out.push(Stranger {
                id: id.clone(),
                author: author.to_string(),
                subject: subject.to_string(),
                changed: files.len(),
                files: files.into_iter().take(FILES_NAMED).collect(),
            });
        }
        Ok(out)
    }
}

impl GitLabBranch {
    /// The same over GitLab's compare API (`from` the watched tip `to` the
    /// sandbox branch), then one commit diff per named stranger. A sandbox
    /// branch that does not exist holds no stranger.
    pub(super) fn strangers_on(&self, tip: &str, own: &[String]) -> Result<Vec<Stranger>, String> {
        let url = self.url(&format!(
            "repository/compare?from={}&to={}",
            encode(tip),
            encode(&self.branch)
        ));
        let listed = match self.send("GET", &url, None)? {
            (200, v) => v,
            (404, _) => return Ok(Vec::new()),
            (s, _) => return Err(format!("GitLab answered the sandbox's compare with {s}")),
        };
        let commits: Vec<&Value> = listed["commits"].as_array().into_iter().flatten().collect();
        let ids: Vec<String> = commits
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_string))
            .collect();
        let ids = not_own(ids, own);
        let mut out = Vec::with_capacity(ids.len().min(NAMED + 1));
        for id in ids {
            let c = commits.iter().find(|c| c["id"] == id.as_str());
            let text = |k: &str| {
                c.and_then(|c| c[k].as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let (author, subject) = (
                format!("{} <{}>", text("author_name"), text("author_email")),
                text("title"),
            );
            let files = if out.len() < NAMED {
                self.files_of(&id)?
            } else {
                Vec::new()
            };
            out.push(Stranger {
                id,
                author,
                subject,
                changed: files.len(),
                files: files.into_iter().take(FILES_NAMED).collect(),
            });
        }
        Ok(out)
    }

    /// The files commit `id` changed: its diff's new paths (one page).
    fn files_of(&self, id: &str) -> Result<Vec<String>, String> {
        let url = self.url(&format!(
            "repository/commits/{}/diff?per_page=100",
            encode(id)
        ));
        match self.send("GET", &url, None)? {
            (200, Value::Array(diffs)) => Ok(diffs
                .iter()
                .filter_map(|d| d["new_path"].as_str().map(str::to_string))
                .collect()),
            (s, _) => Err(format!(
                "GitLab answered the diff of {} with {s}",
                crate::tick::short_id(id)
            )),
        }
    }
}

/// What a tick says of the strangers it found on `target`.
pub fn describe(target: &str, strangers: &[Stranger]) -> String {
    let named: Vec<String> = strangers
        .iter()
        .take(NAMED)
        .map(|s| s.to_string())
        .collect();
    let more = strangers.len().saturating_sub(NAMED);
    format!(
        "sandbox {target} holds {} commit(s) sentinel did not make: {}{}",
        strangers.len(),
        named.join("; "),
        if more > 0 {
            format!("; and {more} more")
        } else {
            String::new()
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stranger_is_named_with_its_author_subject_and_files_escaped() {
        let s = Stranger {
            id: "0123456789abcdef".into(),
            author: "Intruder <intruder@example.com>".into(),
            subject: "ci: \u{1b}[2J speed up".into(),
            files: vec![".gitlab-ci.yml".into()],
            changed: 3,
        };
        assert_eq!(
            s.to_string(),
            "0123456 by Intruder <intruder@example.com> \"ci: \\u{1b}[2J speed up\" (`.gitlab-ci.yml`, 2 more)"
        );
        assert_eq!(
            not_own(
                vec!["a".into(), "x".into(), "b".into()],
                &["a".into(), "b".into()]
            ),
            ["x"]
        );
    }
}
