//! What a state is about, as the state keeps it; `source` builds it and
//! tells two apart.

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
