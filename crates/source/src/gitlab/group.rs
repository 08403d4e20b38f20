//! A fleet's discovery: the projects of a GitLab group, subgroups included
//! and archived ones left out, every page followed as GitLab documents the
//! pagination of `GET /groups/:id/projects`, bounded.

use serde::Deserialize;

use super::{GitLabSource, Kind, encode};
use crate::SourceError;

/// Pages of 100 projects read at most: 10,000 projects. A larger group is
/// split with `--include`, `--exclude` or `--topic`.
pub const MAX_GROUP_PAGES: usize = 100;

/// One project of the listing, with what a tick of it needs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GroupProject {
    pub id: u64,
    pub path_with_namespace: String,
    /// `None` for a project without a repository yet.
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub archived: bool,
}

/// What discovery found, and whether it saw the whole group.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    pub projects: Vec<GroupProject>,
    /// Why the listing stopped before its last page, if it did.
    pub incomplete: Option<String>,
    pub pages: usize,
}

impl GitLabSource {
    /// The projects of `group` (its id or full path), oldest first,
    /// subgroups included, archived ones left out, with `topic` when given.
    /// A failed page is an error: a fleet ticks no project on a listing it
    /// cannot trust. A next link to another origin or the page bound ends
    /// the listing, said in `incomplete`.
    pub fn group_projects(
        &mut self,
        group: &str,
        topic: Option<&str>,
    ) -> Result<Discovered, SourceError> {
        let topic = topic
            .map(|t| format!("&topic={}", encode(t)))
            .unwrap_or_default();
        let mut url = Some(format!(
            "{}/groups/{}/projects?include_subgroups=true&archived=false&with_shared=false&simple=true&order_by=id&sort=asc&per_page=100{topic}",
            self.cfg.base,
            encode(group)
        ));
        let mut found = Discovered::default();
        while let Some(page) = url.take() {
            if found.pages == MAX_GROUP_PAGES {
                found.incomplete = Some(format!(
                    "the group has more than {MAX_GROUP_PAGES} pages of projects; narrow it with --include, --exclude or --topic"
                ));
                break;
            }
            let (projects, next): (Vec<GroupProject>, _) = self
                .get_json(Kind::Group, &page)
                .map_err(|e| group_error(group, e))?;
            found.pages += 1;
            found
                .projects
                .extend(projects.into_iter().filter(|p| !p.archived));
            match self.next_page(next) {
                Ok(next) => url = next,
                Err(why) => found.incomplete = Some(why),
            }
        }
        Ok(found)
    }
}

/// A listing GitLab does not know names the group and what fixes it.
fn group_error(group: &str, e: SourceError) -> SourceError {
    match e {
        SourceError::Unavailable(why) if why.contains("with 404") => SourceError::Config(format!(
            "GitLab has no group `{group}` visible to this token ({why}): set --group to its numeric id or full path"
        )),
        other => other,
    }
}

impl GitLabSource {
    /// One project as `GET /projects/:id` shows it (`id_or_path` is its
    /// numeric id or its path with namespace): a `--project-list` line.
    pub fn project_entry(&mut self, id_or_path: &str) -> Result<GroupProject, SourceError> {
        let url = format!("{}/projects/{}", self.cfg.base, encode(id_or_path));
        // Asked as a listing page is (retried on 429, bounded the same), but
        // its errors name what was asked.
        let said = |m: String| m.replace("the group's project listing", "the project lookup");
        let (project, _): (GroupProject, _) =
            self.get_json(Kind::Group, &url).map_err(|e| match e {
                SourceError::Unavailable(m) => SourceError::Unavailable(said(m)),
                SourceError::Config(m) => SourceError::Config(said(m)),
                other => other,
            })?;
        Ok(project)
    }
}
