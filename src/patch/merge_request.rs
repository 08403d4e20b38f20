//! One merge request from the sandbox branch to the watched branch on
//! GitLab (`--merge-request`): opened when the first proposal lands, its
//! description edited only when the open proposals change, closed when none
//! is open. Shapes from GitLab's Merge Requests API: list (`GET
//! merge_requests?state=opened&source_branch=&target_branch=`), create
//! (`POST merge_requests`), get (`GET merge_requests/:iid`) and update
//! (`PUT merge_requests/:iid`, `state_event: close`).

use serde_json::{Value, json};

use super::GitLabBranch;
use crate::source::gitlab::encode;

/// What the merge request call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// Opened: its iid and web address.
    Opened(u64, String),
    /// Its description (and title) edited.
    Edited(u64, String),
    /// Closed: no proposal is open.
    Closed(u64),
    /// Nothing open to close: merged or closed by a person, or never opened.
    Gone,
}

impl GitLabBranch {
    fn refused(&self, what: &str, status: u16, answer: &Value) -> String {
        let hint = match status {
            401 | 403 => ": a merge request needs a token with the api scope and Developer access",
            _ => "; tried again on a later wake",
        };
        format!(
            "GitLab refused to {what} the merge request ({status}{}){hint}",
            answer["message"]
                .as_str()
                .map(|m| format!(": {}", peer_text(m, MAX_MESSAGE_CHARS)))
                .unwrap_or_default()
        )
    }

    /// Whether merge request `iid` is still open.
    fn is_open(&self, iid: u64) -> Result<bool, String> {
        let (status, answer) =
            self.send("GET", &self.url(&format!("merge_requests/{iid}")), None)?;
        match status {
            200 => Ok(answer["state"] == "opened"),
            404 => Ok(false),
            s => Err(self.refused("read", s, &answer)),
        }
    }

    /// An open merge request of these branches that an earlier tick opened
    /// (its state lost): adopted rather than duplicated. One a person
    /// opened is theirs: never adopted, its title and description never
    /// overwritten; the tick says so and opens none.
    fn find_open(&self) -> Result<Option<u64>, String> {
        let target = crate::branch::gitlab_name(&self.cfg.branch);
        let url = self.url(&format!(
            "merge_requests?state=opened&source_branch={}&target_branch={}&per_page=1",
            encode(&self.branch),
            encode(target)
        ));
        let found = match self.send("GET", &url, None)? {
            (200, Value::Array(list)) => list.into_iter().next(),
            (s, answer) => return Err(self.refused("find", s, &answer)),
        };
        let Some(mr) = found else {
            return Ok(None);
        };
        let iid = mr["iid"].as_u64();
        let sentinels = mr["description"]
            .as_str()
            .is_some_and(|d| d.starts_with(OPENING));
        match iid {
            Some(iid) if sentinels => Ok(Some(iid)),
            _ => Err(format!(
                "merge request !{} from `{}` to `{target}` was not opened by sentinel; it is left as it is, and sentinel opens none beside it: close it, or choose another --sandbox-branch",
                iid.unwrap_or_default(),
                crate::report::escape::terminal(&self.branch)
            )),
        }
    }

    fn edit(&self, iid: u64, body: Value) -> Result<String, String> {
        let url = self.url(&format!("merge_requests/{iid}"));
        match self.send("PUT", &url, Some(body))? {
            (200..=299, answer) => Ok(web_url(&answer)),
            (s, answer) => Err(self.refused("edit", s, &answer)),
        }
    }

    /// Open, edit or close the sandbox's merge request. `known` is the iid
    /// the state remembers; `page` the description, `None` to close.
    pub(super) fn review_on(
        &self,
        known: Option<u64>,
        title: &str,
        page: Option<&str>,
    ) -> Result<Review, String> {
        let open = match known {
            Some(iid) if self.is_open(iid)? => Some(iid),
            _ if page.is_some() => self.find_open()?,
            _ => None,
        };
        let Some(page) = page else {
            return match open {
                Some(iid) => self
                    .edit(iid, json!({ "state_event": "close" }))
                    .map(|_| Review::Closed(iid)),
                None => Ok(Review::Gone),
            };
        };
        if let Some(iid) = open {
            let url = self.edit(iid, json!({ "title": title, "description": page }))?;
            return Ok(Review::Edited(iid, url));
        }
        let body = json!({
            "source_branch": self.branch,
            "target_branch": crate::branch::gitlab_name(&self.cfg.branch),
            "title": title,
            "description": page,
        });
        match self.send("POST", &self.url("merge_requests"), Some(body))? {
            (200..=299, answer) => match answer["iid"].as_u64() {
                Some(iid) => Ok(Review::Opened(iid, web_url(&answer))),
                None => Err("GitLab's new merge request has no iid".into()),
            },
            (s, answer) => Err(self.refused("open", s, &answer)),
        }
    }
}

/// The most characters of a merge request's address sentinel repeats (in
/// its line, its notes and `--json`): a peer may send any length, and a
/// real address is far shorter.
pub const MAX_URL_CHARS: usize = 2_000;
/// The most characters of a message GitLab sends with a refusal.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// Text a peer sent, as sentinel repeats it: redacted, its control
/// characters escaped, at most `max` characters.
pub fn peer_text(text: &str, max: usize) -> String {
    let redacted = crate::redact::text(text);
    crate::llm::bounds::cap(&crate::report::escape::terminal(&redacted), max)
}

/// The merge request's `web_url`, bounded.
fn web_url(answer: &Value) -> String {
    peer_text(
        answer["web_url"].as_str().unwrap_or_default(),
        MAX_URL_CHARS,
    )
}

/// How every description sentinel writes begins: how it knows its own
/// merge request when the state that remembered it was lost.
pub const OPENING: &str = "Proposed by sentinel:";

/// The most bytes of a description: GitLab's limit is 1,048,576 characters.
pub const MAX_DESCRIPTION_BYTES: usize = 1_000_000;

/// One open proposal as the merge request lists it.
pub struct Listed<'a> {
    pub path: &'a str,
    pub proposal: &'a crate::state::Proposal,
}

/// The title: how many proposals are open.
pub fn title(n: usize) -> String {
    format!(
        "sentinel: {n} proposed change{}",
        if n == 1 { "" } else { "s" }
    )
}

/// The description: each open proposal's file, reason, findings and
/// fingerprint, every text from the model escaped as Markdown.
pub fn description(listed: &[Listed<'_>]) -> String {
    use crate::report::escape::{code, markdown};
    let mut out = format!(
        "{OPENING} one commit per file on this branch, based on the watched branch's tip.\n\n"
    );
    let mut left = 0;
    for (i, l) in listed.iter().enumerate() {
        let p = l.proposal;
        let mut part = format!("### {}\n\n{}\n\n", code(l.path), markdown(p.reason.trim()));
        for f in &p.findings {
            part.push_str(&format!(
                "- line {} ({}): {}\n",
                f.line,
                markdown(&format!("{:?}", f.severity).to_lowercase()),
                markdown(&f.message)
            ));
        }
        part.push_str(&format!("\nFingerprint: {}\n\n", code(&p.fingerprint)));
        if out.len() + part.len() > MAX_DESCRIPTION_BYTES - 200 {
            left = listed.len() - i;
            break;
        }
        out.push_str(&part);
    }
    if left > 0 {
        out.push_str(&format!(
            "{left} more proposal(s) left out: the description is full.\n"
        ));
    }
    out
}
