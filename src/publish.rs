//! Where the dashboard goes: one GitLab issue, or a Markdown file. Only the
//! tick decides when to publish (on a wake, when the page changed).

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::report::dashboard::{LABEL, TITLE};
use crate::source::gitlab::{GitLabConfig, encode};

/// One write sentinel made, for `--json`: what was written where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteLog {
    pub kind: &'static str,
    pub target: String,
    pub ok: bool,
    pub detail: String,
}

pub trait Publisher {
    /// Publish the page. `Err` says why not; the tick goes on and a later
    /// wake tries again (never a retry loop within the tick).
    fn publish(&mut self, page: &str) -> Result<String, String>;
    /// Where it publishes, for the write log.
    fn target(&self) -> String;
}

/// The dashboard as a Markdown file (the git source has no issues).
pub struct FilePublisher {
    pub path: PathBuf,
}

impl Publisher for FilePublisher {
    fn publish(&mut self, page: &str) -> Result<String, String> {
        let body = format!("# {TITLE}\n\n{page}");
        crate::state::store::write_report(&self.path, body.as_bytes())
            .map(|()| format!("wrote {} bytes", body.len()))
            .map_err(|e| format!("the dashboard file was not written: {e:#}"))
    }
    fn target(&self) -> String {
        self.path.display().to_string()
    }
}

/// The one issue labelled `sentinel-dashboard`, created when missing.
pub struct GitLabIssue {
    agent: ureq::Agent,
    cfg: GitLabConfig,
}

impl GitLabIssue {
    pub fn new(cfg: GitLabConfig) -> Result<GitLabIssue, String> {
        let agent = crate::http::agent(
            cfg.timeout.max(Duration::from_secs(1)),
            cfg.ca_file.as_deref(),
        )?;
        Ok(GitLabIssue { agent, cfg })
    }

    fn url(&self, rest: &str) -> String {
        format!(
            "{}/projects/{}/{rest}",
            self.cfg.base.trim_end_matches('/'),
            encode(&self.cfg.project)
        )
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        body: Option<serde_json::Value>,
    ) -> Result<(u16, Vec<u8>), String> {
        let token = self.cfg.token.as_ref().map(|t| t.expose());
        crate::http::gitlab_send(&self.agent, token, method, url, body)
    }
}

fn refused(status: u16) -> String {
    match status {
        401 | 403 => format!(
            "GitLab refused the dashboard ({status}): it needs a token with the api scope in SENTINEL_GITLAB_TOKEN; carrying on without it"
        ),
        s => format!("GitLab answered the dashboard with {s}; tried again on a later wake"),
    }
}

impl Publisher for GitLabIssue {
    fn publish(&mut self, page: &str) -> Result<String, String> {
        let find = self.url(&format!(
            "issues?labels={}&state=opened&per_page=1&order_by=created_at&sort=asc",
            encode(LABEL)
        ));
        let (status, body) = self.send("GET", &find, None)?;
        if !(200..300).contains(&status) {
            return Err(refused(status));
        }
        let found: Vec<serde_json::Value> = serde_json::from_slice(&body).map_err(|_| {
            "GitLab's issue list is not JSON; tried again on a later wake".to_string()
        })?;
        match found.first().and_then(|i| i["iid"].as_u64()) {
            Some(iid) => {
                let url = self.url(&format!("issues/{iid}"));
                let (status, _) = self.send(
                    "PUT",
                    &url,
                    Some(serde_json::json!({ "description": page })),
                )?;
                if (200..300).contains(&status) {
                    Ok(format!("updated issue #{iid}"))
                } else {
                    Err(refused(status))
                }
            }
            None => {
                let url = self.url("issues");
                let (status, body) = self.send(
                    "POST",
                    &url,
                    Some(serde_json::json!({
                        "title": TITLE,
                        "description": page,
                        "labels": LABEL,
                    })),
                )?;
                if (200..300).contains(&status) {
                    let iid = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v["iid"].as_u64());
                    Ok(match iid {
                        Some(iid) => format!("created issue #{iid}"),
                        None => "created the issue".into(),
                    })
                } else {
                    Err(refused(status))
                }
            }
        }
    }

    fn target(&self) -> String {
        format!("issue labelled {LABEL} in project {}", self.cfg.project)
    }
}
