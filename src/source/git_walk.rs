//! One `git log` over the commits since the remembered head, answering a
//! small wake's head lookup, compare and rollback lookup at once.
//!
//! Each git process costs about what a whole no-op does, so a wake that
//! asked git three times for what one walk of the same commits holds paid
//! three times for it. The answers are exact only when the commits form one
//! line from the remembered head to the tip (no merge, nothing else in
//! between): then the changes between the two heads are the per-commit
//! changes composed, and the head is the newest commit touching the
//! watched path. Anything else (a merge, a rewritten branch, a long range,
//! an answer not understood) gives `None`, and the source asks git the way
//! it always did.
//!
//! A wake first computes the same walk from the objects (`git_objects`),
//! through the `cat-file` that reads its contents; this log is its fallback
//! and the reference it is tested against.

use std::collections::BTreeMap;

use super::Change;
use super::git::{is_object_id, is_regular_file};

/// The most commits the walk takes; a longer range is asked the usual way,
/// so the walk's answer stays small.
pub(crate) const MAX_COMMITS: usize = 64;

/// The most bytes of the walk's answer read.
pub(crate) const MAX_BYTES: u64 = 4 << 20;

/// What the walk from `from` to the tip found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walk {
    /// The remembered head the walk started from.
    pub from: String,
    /// The newest commit touching the watched path: the new head.
    pub head: String,
    /// What `diff-tree -r from head -- path` would answer, in its order.
    pub changes: Vec<Change>,
    /// What the rollback lookup over `from..head` would answer.
    pub reverts: Vec<Vec<String>>,
}

/// The arguments of the walk (after the options the source always adds).
/// No pathspec: the commits outside the watched path are needed to see
/// that the range is one line; the changes are filtered here instead.
pub(crate) fn args(from: &str, tip: &str) -> Vec<String> {
    [
        "log",
        "--no-renames",
        "--no-show-signature",
        "--no-follow",
        "--no-abbrev",
        "--raw",
        "-z",
        // A user's `diff.ignoreSubmodules` must not hide a gitlink change
        // that `diff-tree` would report.
        "--ignore-submodules=none",
        "--format=%x01%H %P%x02%s",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("--max-count={}", MAX_COMMITS + 1),
        "--end-of-options".to_string(),
        format!("{from}..{tip}"),
        "--".to_string(),
    ])
    .collect()
}

/// One changed path of one commit, as `--raw` prints it.
struct Raw {
    src: (String, String),
    dst: (String, String),
    status: String,
    path: Vec<u8>,
}

struct Commit {
    id: String,
    parents: Vec<String>,
    subject: String,
    raws: Vec<Raw>,
}

/// The walk's answer, when the log of `from..tip` is one line of commits
/// from `from` to `tip`.
pub(crate) fn read(stdout: &[u8], from: &str, tip: &str, watched: Option<&str>) -> Option<Walk> {
    let commits = parse(stdout, watched)?;
    if commits.is_empty() || commits.len() > MAX_COMMITS || commits[0].id != tip {
        return None;
    }
    for (i, c) in commits.iter().enumerate() {
        let next = commits.get(i + 1).map_or(from, |n| n.id.as_str());
        if c.parents.len() != 1 || c.parents[0] != next {
            return None;
        }
    }
    // No commit of the line touching the path leaves the head where it was:
    // `from` touches it (a head lookup found it), and nothing above does.
    let head = commits
        .iter()
        .find(|c| !c.raws.is_empty())
        .map_or(from, |c| c.id.as_str())
        .to_string();
    Some(Walk {
        from: from.to_string(),
        head,
        changes: composed(&commits)?,
        reverts: reverts(&commits),
    })
}

/// Whether git's literal pathspec `watched` matches `path`.
fn in_scope(path: &[u8], watched: Option<&str>) -> bool {
    let Some(w) = watched else { return true };
    let w = w.as_bytes();
    path.starts_with(w) && (path.len() == w.len() || path[w.len()] == b'/')
}

/// Each path's state at the oldest commit's parent against its state at
/// the newest commit, the way `diff-tree` compares the two trees.
fn composed(commits: &[Commit]) -> Option<Vec<Change>> {
    let mut ends: BTreeMap<&[u8], (&Raw, &Raw)> = BTreeMap::new();
    for raw in commits.iter().flat_map(|c| &c.raws) {
        ends.entry(&raw.path)
            .and_modify(|(_, oldest)| *oldest = raw)
            .or_insert((raw, raw));
    }
    let mut changes = Vec::new();
    for (path, (newest, oldest)) in ends {
        if oldest.src == newest.dst {
            continue;
        }
        // Lossy, as the compare's own paths are.
        let path = String::from_utf8_lossy(path).into_owned();
        let (mode, blob) = &newest.dst;
        let change = if newest.status == "D" || !is_regular_file(mode) {
            Change::Delete { path }
        } else if is_object_id(blob) {
            Change::Upsert {
                path,
                blob: blob.clone(),
            }
        } else {
            return None;
        };
        changes.push(change);
    }
    Some(changes)
}

/// For each revert commit touching the watched path, newest first, the
/// paths it touched: sorted, once each (as the rollback lookup answers).
fn reverts(commits: &[Commit]) -> Vec<Vec<String>> {
    commits
        .iter()
        .filter(|c| !c.raws.is_empty() && c.subject.starts_with("Revert \""))
        .map(|c| {
            let mut paths: Vec<String> = c
                .raws
                .iter()
                .map(|r| {
                    String::from_utf8_lossy(&r.path)
                        .trim_matches('\n')
                        .to_string()
                })
                .filter(|p| !p.is_empty())
                .collect();
            paths.sort();
            paths.dedup();
            paths
        })
        .collect()
}

/// Fields split at NUL: a commit `\x01<id> <parents>\x02<subject>`, then
/// its raw changes `:<mode> <mode> <id> <id> <status>` each followed by its
/// path (a newline may start a field). Read in order, so a path or a
/// subject holding any byte cannot pass for a record.
/// Only the changes under `watched` are kept.
fn parse(stdout: &[u8], watched: Option<&str>) -> Option<Vec<Commit>> {
    let mut commits: Vec<Commit> = Vec::new();
    let mut fields = stdout.split(|b| *b == 0);
    while let Some(field) = fields.next() {
        let field = field.strip_prefix(b"\n").unwrap_or(field);
        if field.is_empty() {
            continue;
        }
        if let Some(header) = field.strip_prefix(b"\x01") {
            commits.push(commit(header)?);
            continue;
        }
        let meta = std::str::from_utf8(field).ok()?.strip_prefix(':')?;
        let [m1, m2, s1, s2, status] = meta.split(' ').collect::<Vec<_>>()[..] else {
            return None;
        };
        if !matches!(status, "A" | "M" | "T" | "D") {
            return None;
        }
        let path = fields.next().filter(|p| !p.is_empty())?.to_vec();
        let commit = commits.last_mut()?;
        if !in_scope(&path, watched) {
            continue;
        }
        commit.raws.push(Raw {
            src: (m1.to_string(), s1.to_string()),
            dst: (m2.to_string(), s2.to_string()),
            status: status.to_string(),
            path,
        });
    }
    Some(commits)
}

/// `<id> <parents>\x02<subject>`.
fn commit(header: &[u8]) -> Option<Commit> {
    let sep = header.iter().position(|b| *b == 2)?;
    let ids = std::str::from_utf8(&header[..sep]).ok()?;
    let mut ids = ids.split(' ');
    let id = ids.next()?.to_string();
    let parents: Vec<String> = ids.map(str::to_string).collect();
    if !is_object_id(&id) || !parents.iter().all(|p| is_object_id(p)) {
        return None;
    }
    Some(Commit {
        id,
        parents,
        subject: String::from_utf8_lossy(&header[sep + 1..]).into_owned(),
        raws: Vec::new(),
    })
}
