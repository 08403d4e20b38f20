//! An in-memory source: a list of commits of a watched tree, for tests and
//! for `simulate`. Same contract as the git source, and it counts every call.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{Change, Entry, Listing, RequestCounts, Source, SourceError};

/// Calls made to a `MemorySource`, per method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    pub head: u64,
    pub list: u64,
    pub changes: u64,
    pub read: u64,
}

#[derive(Debug, Clone, Default)]
pub struct MemorySource {
    commits: Vec<(String, BTreeMap<String, Vec<u8>>)>,
    /// When set, `head` fails with this message.
    pub fail_head: Option<String>,
    /// When set, `changes` fails (so the tick falls back to the listing).
    pub fail_changes: bool,
    /// When set, `list` fails.
    pub fail_list: bool,
    /// When set, a listing sees only the first this many files, as a paged
    /// source whose later pages could not be read.
    pub cut_list: Option<usize>,
    /// What `reverts` answers: paths touched by each revert commit.
    pub reverts: Vec<Vec<String>>,
    pub calls: Calls,
    /// Every list of ids announced by `prefetch`, and every id read, in
    /// order: what the tick said it would read against what it read.
    pub announced: Vec<Vec<String>>,
    pub read_ids: Vec<String>,
}

/// The content id of some bytes.
pub fn blob_id(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..20])
}

impl MemorySource {
    pub fn new() -> MemorySource {
        MemorySource::default()
    }

    /// Add a commit whose tree is `files`; its id is derived from the count.
    pub fn commit(&mut self, files: &[(&str, &str)]) -> String {
        let id = format!("{:040x}", self.commits.len() + 1);
        let tree = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect();
        self.commits.push((id.clone(), tree));
        id
    }

    /// Add a commit that changes (or adds) some files of the last tree.
    pub fn amend(&mut self, files: &[(&str, &str)]) -> String {
        let mut tree = self.commits.last().map(|c| c.1.clone()).unwrap_or_default();
        for (p, c) in files {
            tree.insert(p.to_string(), c.as_bytes().to_vec());
        }
        let id = format!("{:040x}", self.commits.len() + 1);
        self.commits.push((id.clone(), tree));
        id
    }

    fn tree(&self, at: &str) -> Option<&BTreeMap<String, Vec<u8>>> {
        if at == "HEAD" {
            return self.commits.last().map(|c| &c.1);
        }
        self.commits.iter().find(|c| c.0 == at).map(|c| &c.1)
    }
}

impl Source for MemorySource {
    fn head(&mut self) -> Result<String, SourceError> {
        self.calls.head += 1;
        if let Some(msg) = &self.fail_head {
            return Err(SourceError::Unavailable(msg.clone()));
        }
        self.commits
            .last()
            .map(|c| c.0.clone())
            .ok_or_else(|| SourceError::Unavailable("no commits".into()))
    }

    fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
        let listing = self.listing(at)?;
        match listing.incomplete {
            None => Ok(listing.entries),
            Some(why) => Err(SourceError::Unavailable(why)),
        }
    }

    fn listing(&mut self, at: &str) -> Result<Listing, SourceError> {
        self.calls.list += 1;
        if self.fail_list {
            return Err(SourceError::Unavailable("listing failed".into()));
        }
        let tree = self
            .tree(at)
            .ok_or_else(|| SourceError::Unavailable(format!("unknown commit {at}")))?;
        let mut entries: Vec<Entry> = tree
            .iter()
            .map(|(p, c)| Entry {
                path: p.clone(),
                blob: blob_id(c),
            })
            .collect();
        let incomplete = match self.cut_list {
            Some(n) if n < entries.len() => {
                let total = entries.len();
                entries.truncate(n);
                Some(format!("cut after {n} of {total} files"))
            }
            _ => None,
        };
        Ok(Listing {
            entries,
            incomplete,
        })
    }

    fn changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError> {
        self.calls.changes += 1;
        if self.fail_changes {
            return Err(SourceError::Unavailable("compare failed".into()));
        }
        let unknown = |c: &str| SourceError::Unavailable(format!("unknown commit {c}"));
        let a = self.tree(from).ok_or_else(|| unknown(from))?;
        let b = self.tree(to).ok_or_else(|| unknown(to))?;
        let mut out = Vec::new();
        for (p, c) in b {
            if a.get(p) != Some(c) {
                out.push(Change::Upsert {
                    path: p.clone(),
                    blob: blob_id(c),
                });
            }
        }
        for p in a.keys().filter(|p| !b.contains_key(*p)) {
            out.push(Change::Delete { path: p.clone() });
        }
        Ok(out)
    }

    fn prefetch(&mut self, blobs: &[String]) {
        self.announced.push(blobs.to_vec());
    }

    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError> {
        self.calls.read += 1;
        self.read_ids.push(blob.to_string());
        let bytes = self
            .commits
            .iter()
            .rev()
            .flat_map(|c| c.1.values())
            .find(|c| blob_id(c) == blob)
            .ok_or_else(|| SourceError::Unavailable(format!("unknown object {blob}")))?;
        if bytes.len() as u64 > limit {
            return Err(SourceError::TooLarge {
                size: bytes.len() as u64,
                limit,
            });
        }
        Ok(bytes.clone())
    }

    fn reverts(&mut self, _from: &str, _to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        Ok(std::mem::take(&mut self.reverts))
    }

    fn request_counts(&self) -> RequestCounts {
        let c = self.calls;
        RequestCounts {
            reader: None,
            head: c.head,
            list: c.list,
            read: c.read,
            compare: c.changes,
            history: 0,
        }
    }
}
