//! Whether the sandbox branch already holds a proposed content: asked before
//! committing a content that an earlier tick may have committed already (its
//! commit intent is in the decision journal, its commit id is not), so a
//! crash between the commit and the journal never commits the same patch twice.

use super::{GitBranch, GitLabBranch};
use crate::source::gitlab::encode;
use crate::state::decisions::content_id;

/// The last sandbox commit touching `path`, when the file there is exactly
/// `content`; `None` when the branch or the file does not exist or differs.
pub(super) fn on_git(b: &GitBranch, path: &str, content: &str) -> Result<Option<String>, String> {
    let reference = crate::branch::sandbox_ref(&b.branch)?;
    let at = format!("{reference}:{path}");
    // `--verify -q` fails quietly for a branch or a file that is not there.
    let Ok(blob) = b.git(&["rev-parse", "--verify", "-q", &at], None, None) else {
        return Ok(None);
    };
    // hash-object without -w names the content the way this repository
    // does (SHA-1 or SHA-256) and writes nothing.
    let wanted = b.git(&["hash-object", "--stdin"], None, Some(content.as_bytes()))?;
    if blob != wanted {
        return Ok(None);
    }
    b.git(
        &["log", "-1", "--format=%H", &reference, "--", path],
        None,
        None,
    )
    .map(Some)
}

/// The same over the GitLab files API: the blob id and last commit of `path`
/// on the sandbox branch.
pub(super) fn on_gitlab(
    b: &GitLabBranch,
    path: &str,
    content: &str,
) -> Result<Option<String>, String> {
    let url = b.url(&format!(
        "repository/files/{}?ref={}",
        encode(path),
        encode(&b.branch)
    ));
    let mut get = b.agent.get(&url);
    if let Some(t) = &b.cfg.token {
        get = get.header("PRIVATE-TOKEN", t.expose());
    }
    let mut r = get.call().map_err(|e| crate::http::transport_message(&e))?;
    match r.status().as_u16() {
        200 => {}
        404 => return Ok(None),
        s => return Err(format!("GitLab answered the sandbox file lookup with {s}")),
    }
    let answer: serde_json::Value = r
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_vec()
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null);
    let (Some(blob), Some(commit)) = (
        answer["blob_id"].as_str(),
        answer["last_commit_id"].as_str(),
    ) else {
        return Err("GitLab's sandbox file lookup has no blob_id or last_commit_id".into());
    };
    if blob.len() != 40 {
        return Err(format!(
            "cannot compare the {}-digit blob id {blob}",
            blob.len()
        ));
    }
    Ok((blob.eq_ignore_ascii_case(&content_id(content))).then(|| commit.to_string()))
}
