//! Facts about one file: its lifecycle status, its content facts and its fingerprint.
//! Shared by the tick and by `explain`.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::gate::deps;
use crate::gate::lifecycle::{self, Status};
use crate::gate::novelty::{self, Parts};
use crate::gate::policy::{self, Risk, Role};
use crate::source::{Source, SourceError};
use crate::state::files::{Files, Rules};
use crate::state::{ContentFacts, FileRecord, Outcome, State};

/// Files larger than this are fingerprinted by content id instead of read.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 10;

/// The rules a shard's summary is computed by, handed to the state, which
/// knows nothing of locks or reviews.
pub const SUMMARY_RULES: Rules = Rules {
    locked: is_locked,
    review_due,
    import_dirs,
};

fn import_dirs(path: &str, record: &FileRecord) -> std::collections::BTreeSet<String> {
    let imports = record.content.as_ref().map_or(&[][..], |c| &c.imports[..]);
    deps::candidate_dirs(path, imports)
}

fn is_locked(path: &str, locks: &[String]) -> bool {
    lifecycle::locked(path, locks)
}

/// The lifecycle status of a file at `now`.
pub fn status_of(record: &FileRecord, path: &str, locks: &[String], now: DateTime<Utc>) -> Status {
    let locked = is_locked(path, locks);
    let last_was_skip = record
        .decision
        .as_ref()
        .is_some_and(|d| matches!(d.outcome, Outcome::LocalSkip | Outcome::LlmSkip));
    let changed = record
        .changed_ts
        .or(record.first_ts)
        .unwrap_or(record.last_ts);
    lifecycle::status(changed, last_was_skip, record.rollback_streak, locked, now)
}

/// When a file would next be reviewed if it stays unchanged: never for a
/// locked file or one whose last decision is not a SKIP.
pub fn review_due(record: &FileRecord, path: &str, locks: &[String]) -> Option<DateTime<Utc>> {
    if is_locked(path, locks) {
        return None;
    }
    let skip = record
        .decision
        .as_ref()
        .is_some_and(|d| matches!(d.outcome, Outcome::LocalSkip | Outcome::LlmSkip));
    if !skip {
        return None;
    }
    let changed = record
        .changed_ts
        .or(record.first_ts)
        .unwrap_or(record.last_ts);
    // Mature by then: a file unchanged this long is stable or certified.
    lifecycle::due_at(changed, record.review.as_ref(), Status::Stable)
}

/// Learn the facts of one content id: one read, unless it is over the limit,
/// in which case the content id itself stands for the bytes. The flag says
/// whether the bytes were read, and hands them over. A read that stopped at
/// the limit is noted: its size is the limit plus one, the most counted,
/// and the file is never judged on the part that was read.
pub(crate) fn read_facts(
    source: &mut dyn Source,
    path: &str,
    blob: &str,
    limit: u64,
    notes: &mut Vec<String>,
) -> Result<(ContentFacts, Option<Vec<u8>>), SourceError> {
    match source.read(blob, limit) {
        Ok(bytes) => Ok((
            ContentFacts {
                hash: content_hash(&bytes),
                chars: bytes.len() as u64,
                imports: deps::extract(path, &bytes),
            },
            Some(bytes),
        )),
        Err(SourceError::TooLarge { size, .. }) => Ok((by_id(blob, size), None)),
        Err(SourceError::ReadStopped { limit }) => {
            notes.push(format!(
                "`{path}`: the read stopped at the limit of {limit} bytes (--max-file-bytes); \
                 the file is fingerprinted by its content id and not sent to the model"
            ));
            Ok((by_id(blob, limit.saturating_add(1)), None))
        }
        Err(e) => Err(e),
    }
}

/// The facts of a file not read: its content id stands for its bytes.
fn by_id(blob: &str, size: u64) -> ContentFacts {
    ContentFacts {
        hash: blob.get(..16).unwrap_or(blob).to_string(),
        chars: size,
        imports: Vec::new(),
    }
}

/// The current fingerprint of `path` given the facts of its current bytes and
/// the remembered tree (for the content ids of its dependencies).
pub fn fingerprint_of(
    files: &Files,
    path: &str,
    facts: &ContentFacts,
    evidence: &str,
    status: Status,
) -> (String, deps::Resolved) {
    let streak = files.get(path).map_or(0, |r| r.rollback_streak);
    let class = policy::classify(path);
    fingerprint_as(files, path, facts, evidence, status, class, streak)
}

/// `fingerprint_of` for a file already classified, with its rollback
/// streak: the tick classifies and looks up each file once for both the
/// fingerprint and the decision.
pub(crate) fn fingerprint_as(
    files: &Files,
    path: &str,
    facts: &ContentFacts,
    evidence: &str,
    status: Status,
    (role, risk): (Role, Risk),
    record_streak: u32,
) -> (String, deps::Resolved) {
    let resolved = deps::resolve(path, &facts.imports, &|p| files.contains_key(p));
    let deps_known = resolved.unresolved.is_empty();
    // Read without loading the dependencies' buckets (`Files::blob_of`).
    let blobs: Vec<(&str, std::borrow::Cow<str>)> = resolved
        .paths
        .iter()
        .map(|p| (p.as_str(), files.blob_of(p).expect("resolved in the tree")))
        .collect();
    let dep_ids: Vec<(&str, &str)> = blobs.iter().map(|(p, b)| (*p, b.as_ref())).collect();
    let fp = novelty::fingerprint(&Parts {
        content: &facts.hash,
        risk: risk.as_str(),
        role: role.as_str(),
        confidence: policy::confidence(role, record_streak, 0),
        status: status.as_str(),
        rollback_streak: record_streak,
        penalty: 0,
        evidence,
        deps: deps_known.then_some(dep_ids.as_slice()),
    });
    (fp, resolved)
}

/// The settings a fingerprint depends on, for `explain`.
#[derive(Debug, Clone)]
pub struct Judging {
    pub max_file_bytes: u64,
    pub evidence: String,
    pub locks: Vec<String>,
    pub now: DateTime<Utc>,
}

/// What `explain` compares the remembered fingerprint with.
#[derive(Debug, Clone)]
pub struct Current {
    pub blob: Option<String>,
    pub fingerprint: Option<String>,
    pub unresolved: Vec<String>,
    pub error: Option<String>,
}

/// The file's fingerprint at the head of the watched branch: the tree is
/// listed (one request), and the file read only when its bytes are not known.
pub fn current_fingerprint(
    state: &State,
    source: &mut dyn Source,
    rev: &str,
    path: &str,
    judging: &Judging,
) -> Current {
    let Judging {
        max_file_bytes,
        evidence,
        locks,
        now,
    } = judging;
    let (max_file_bytes, now) = (*max_file_bytes, *now);
    let mut current = Current {
        blob: None,
        fingerprint: None,
        unresolved: Vec::new(),
        error: None,
    };
    let entries = match source
        .head()
        .and_then(|h| source.list(&h))
        .or_else(|_| source.list(rev))
    {
        Ok(e) => e,
        Err(e) => {
            current.error = Some(format!("listing failed: {e}"));
            return current;
        }
    };
    let mut files = Files::default();
    for e in entries {
        let mut r = state.files.get(&e.path).cloned().unwrap_or_default();
        if r.blob != e.blob {
            r.blob = e.blob;
            r.content = None;
        }
        files.insert(e.path, r);
    }
    let Some(record) = files.get(path) else {
        current.error = Some("the file is not in the watched tree at the head".into());
        return current;
    };
    current.blob = Some(record.blob.clone());
    let facts = match record.content.as_ref() {
        Some(f) => f.clone(),
        None => match read_facts(source, path, &record.blob, max_file_bytes, &mut Vec::new()) {
            Ok((f, _)) => f,
            Err(e) => {
                current.error = Some(format!("could not read the file: {e}"));
                return current;
            }
        },
    };
    let status = status_of(&files[path], path, locks, now);
    let (fp, resolved) = fingerprint_of(&files, path, &facts, evidence, status);
    current.fingerprint = Some(fp);
    current.unresolved = resolved.unresolved;
    current
}

/// The first 16 hex digits of the sha256 of the bytes.
pub fn content_hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}
