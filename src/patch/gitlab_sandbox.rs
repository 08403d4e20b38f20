//! The sandbox follows the watched branch on GitLab: the watched tip from
//! the branches API, and a rebuild through the commits API, the first
//! commit with `force` from `start_sha` (the tip), the others on top.

use serde_json::{Value, json};

use super::{Carried, GitLabBranch};
use crate::source::gitlab::encode;

impl GitLabBranch {
    /// One request with the token; the status and the JSON body (`Null`
    /// when it is not JSON).
    pub(super) fn send(
        &self,
        method: &str,
        url: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let token = self.cfg.token.as_ref().map(|t| t.expose());
        let (status, bytes) = crate::http::gitlab_send(&self.agent, token, method, url, body)?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// The raw bytes of `path` at `commit`, as text.
    fn content_at(&self, path: &str, commit: &str) -> Result<String, String> {
        let url = self.url(&format!(
            "repository/files/{}/raw?ref={}",
            encode(path),
            encode(commit)
        ));
        let token = self.cfg.token.as_ref().map(|t| t.expose().to_string());
        let mut get = self.agent.get(&url);
        if let Some(t) = &token {
            get = get.header("PRIVATE-TOKEN", t);
        }
        let mut r = get.call().map_err(|e| crate::http::transport_message(&e))?;
        if r.status().as_u16() != 200 {
            return Err(format!(
                "GitLab answered the proposal's content at {} with {}",
                crate::tick::short_id(commit),
                r.status().as_u16()
            ));
        }
        let bytes = r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| crate::http::transport_message(&e))?;
        String::from_utf8(bytes).map_err(|_| "the proposal's content is not UTF-8".to_string())
    }

    /// The watched branch's tip: `commit.id` of the branches API.
    pub(super) fn tip(&self) -> Result<String, String> {
        let name = crate::branch::gitlab_name(&self.cfg.branch);
        let url = self.url(&format!("repository/branches/{}", encode(name)));
        match self.send("GET", &url, None)? {
            (200, v) => v["commit"]["id"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| "GitLab's branch has no commit id".to_string()),
            (s, _) => Err(format!(
                "GitLab answered the watched branch lookup with {s}"
            )),
        }
    }

    /// Whether the sandbox's history is `base` then the chain's commits.
    fn already(&self, base: &str, chain: &[Carried]) -> bool {
        let url = self.url(&format!(
            "repository/commits?ref_name={}&first_parent=true&per_page={}",
            encode(&self.branch),
            chain.len() + 1
        ));
        let Ok((200, Value::Array(list))) = self.send("GET", &url, None) else {
            return false;
        };
        let ids: Vec<&str> = list.iter().filter_map(|c| c["id"].as_str()).collect();
        let mut expected: Vec<&str> = chain.iter().rev().map(|c| c.from.as_str()).collect();
        expected.push(base);
        ids == expected
    }

    /// Rebuild the sandbox on `base`: one commit per entry, the first one
    /// replacing the branch (`force`) from `start_sha`.
    pub(super) fn rebuild_on(
        &self,
        base: &str,
        chain: &[Carried],
    ) -> Result<Vec<Option<String>>, String> {
        if chain.is_empty() || self.already(base, chain) {
            return Ok(chain.iter().map(|c| Some(c.from.clone())).collect());
        }
        let contents = chain
            .iter()
            .map(|c| self.content_at(&c.path, &c.from))
            .collect::<Result<Vec<_>, _>>()?;
        let mut made = Vec::with_capacity(chain.len());
        for (i, (c, content)) in chain.iter().zip(contents).enumerate() {
            let mut body = json!({
                "branch": self.branch,
                "commit_message": c.message,
                "actions": [{"action": "update", "file_path": c.path, "content": content}],
            });
            if i == 0 {
                body["start_sha"] = base.into();
                body["force"] = true.into();
            }
            let (status, answer) =
                self.send("POST", &self.url("repository/commits"), Some(body))?;
            match (
                status,
                answer["id"].as_str().filter(|id| super::is_commit_id(id)),
            ) {
                (200..=299, Some(id)) => made.push(Some(id.to_string())),
                _ => {
                    return Err(format!(
                        "GitLab refused the rebuilt commit of `{}` ({status}{})",
                        crate::report::escape::terminal(&c.path),
                        answer["message"]
                            .as_str()
                            .map(|m| format!(
                                ": {}",
                                super::merge_request::peer_text(
                                    m,
                                    super::merge_request::MAX_MESSAGE_CHARS
                                )
                            ))
                            .unwrap_or_default()
                    ));
                }
            }
        }
        Ok(made)
    }
}
