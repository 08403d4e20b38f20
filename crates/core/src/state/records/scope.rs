//! What a state is about, as the state keeps it, and how two are told
//! apart; `source` builds it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a state is about. A tick of another scope must not touch it: a
/// mistyped flag would otherwise make sentinel forget what it knew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Scope {
    /// `git`, `gitlab` (or `memory` in tests and `simulate`).
    pub source: String,
    /// The clone's `origin` remote (or its directory when it has none), or
    /// the GitLab API base and project.
    pub project: String,
    /// The branch or revision as given.
    pub branch: String,
    /// The watched path; empty for the whole repository.
    pub path: String,
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(the whole repository)"
        } else {
            &self.path
        };
        write!(
            f,
            "{} `{}`, branch `{}`, path `{path}`",
            self.source, self.project, self.branch
        )
    }
}

impl Scope {
    /// What differs from `other`, each with the flag and variable that set it.
    pub fn differences(&self, other: &Scope) -> Vec<String> {
        let project = if self.source == "gitlab" {
            "the project differs: check --project / SENTINEL_PROJECT"
        } else {
            "the remote differs: check --repo / SENTINEL_REPO"
        };
        [
            (
                self.source != other.source,
                "the source differs: check --source / SENTINEL_SOURCE",
            ),
            (self.project != other.project, project),
            (
                self.branch != other.branch,
                "the branch differs: check --branch / SENTINEL_BRANCH",
            ),
            (
                self.path != other.path,
                "the path differs: check --path / SENTINEL_PATH",
            ),
        ]
        .into_iter()
        .filter(|(differs, _)| *differs)
        .map(|(_, what)| what.to_string())
        .collect()
    }
}
