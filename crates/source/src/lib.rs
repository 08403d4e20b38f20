//! Where the watched files come from: one trait, so the tick is the same for every source.

pub mod git;
mod git_store;
pub mod gitlab;
pub mod memory;
pub mod peer_path;
pub mod scope;
pub mod tip;

use std::fmt;

/// One file of the watched tree: its path from the repository root and its content id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub blob: String,
}

/// What a listing saw, and whether that is the whole tree. Only a complete
/// listing can tell that a file is gone: a file it did not see may simply be
/// on a page that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// Why the listing stopped before the end; `None` when it is complete.
    pub incomplete: Option<String>,
}

impl Listing {
    /// Every file of the tree.
    pub fn complete(entries: Vec<Entry>) -> Listing {
        Listing {
            entries,
            incomplete: None,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.incomplete.is_none()
    }
}

/// One changed path between two commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Added or modified: the path now has this content id.
    Upsert { path: String, blob: String },
    /// Removed (or no longer a regular file).
    Delete { path: String },
}

/// Why a source request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    /// The request failed or its answer could not be understood; trying
    /// again later may help.
    Unavailable(String),
    /// The configuration is wrong (credentials, project, branch): no retry
    /// can help, so the tick stops and writes nothing.
    Config(String),
    /// The object is larger than the limit; it was not read into memory.
    TooLarge { size: u64, limit: u64 },
    /// The object's bytes went past the limit while they were counted: the
    /// read stopped there, and its size is only known to be over it.
    ReadStopped { limit: u64 },
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Unavailable(msg) | SourceError::Config(msg) => write!(f, "{msg}"),
            SourceError::TooLarge { size, limit } => {
                write!(f, "{size} bytes is over the limit of {limit} bytes")
            }
            SourceError::ReadStopped { limit } => {
                write!(f, "the read stopped at the limit of {limit} bytes")
            }
        }
    }
}

impl std::error::Error for SourceError {}

pub use scope::Scope;
/// A read-only view of the watched path on the watched branch.
///
/// Every method that talks to the outside world counts one request, so the
/// tick can report (and tests can pin) exactly how many it made.
pub use sentinel_core::state::schema::TipHead;

pub trait Source {
    /// The latest commit id that touches the watched path on the branch.
    fn head(&mut self) -> Result<String, SourceError>;
    /// Every regular file under the watched path at commit `at`: all of
    /// them, or an error.
    fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError>;
    /// The files seen under the watched path at commit `at`, saying whether
    /// they are all of them. A source that can see part of a tree (a paged
    /// API) overrides this; `list` then fails where the listing is partial.
    fn listing(&mut self, at: &str) -> Result<Listing, SourceError> {
        self.list(at).map(Listing::complete)
    }
    /// The paths under the watched path that differ between two commits.
    fn changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError>;
    /// The bytes of one content id, refused when larger than `limit` bytes.
    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError>;
    /// The content ids `read` is about to be asked for, in that order, so
    /// a source can fetch them without a round trip each. Only a hint:
    /// costs no request, and reads of other ids, in another order, or
    /// fewer of them, are answered all the same.
    fn prefetch(&mut self, _blobs: &[String]) {}
    /// The tick is about to load its state and will most likely read
    /// contents: a source may start now what reading them needs, so that it
    /// starts while the state loads. Only a hint, costing no request.
    fn warm(&mut self) {}
    /// Start now what the next `head_at_tip(known)` will wait for, and
    /// say whether there was anything to start: the tip moved, so the tick
    /// most likely wakes and may load its state while the source answers.
    fn begin(&mut self, _known: Option<&TipHead>) -> bool {
        false
    }
    /// All the content ids the tick wants read (whatever the read limit),
    /// at commit `at`, each kept up to `limit` bytes, out of `tracked`
    /// files: a source with a cheaper way than one read each (GitLab's
    /// repository archive) may fetch them now and then `holds` them. The
    /// notes say what could not be fetched that way; those ids are read
    /// one by one.
    fn gather(
        &mut self,
        _at: &str,
        _blobs: &[String],
        _limit: u64,
        _tracked: usize,
    ) -> Vec<String> {
        Vec::new()
    }
    /// Whether a `read` of this id is answered without a request, from
    /// bytes `gather` fetched: such a read is not bounded by `--max-reads`.
    fn holds(&self, _blob: &str) -> bool {
        false
    }
    /// The head, and the branch tip it was found at when the source can
    /// read the tip without a request (`None` otherwise). `known` is a
    /// (tip, head) pair found by an earlier tick of the same scope: when
    /// the tip reads the same, its head is answered without asking, since
    /// the same tip always has the same head. Counts one head request
    /// either way.
    fn head_at_tip(
        &mut self,
        known: Option<&TipHead>,
    ) -> (Result<String, SourceError>, Option<String>) {
        let _ = known;
        (self.head(), None)
    }
    /// For each revert commit (title `Revert "...`) between two commits, the
    /// watched paths it touched. Call after `changes` for the same pair.
    fn reverts(&mut self, _from: &str, _to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        Ok(Vec::new())
    }
    /// Requests made so far, per kind.
    fn request_counts(&self) -> RequestCounts;
    /// What the source has to say since it was last asked (a path it
    /// refused to hand over), for the tick's notes.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// How many requests this source has made so far.
    fn requests(&self) -> u64 {
        self.request_counts().total()
    }
    /// Waits the source asked for (from `Retry-After`), in milliseconds.
    fn waits_ms(&self) -> Vec<u64> {
        Vec::new()
    }
    /// What this source watches, for the state's scope. Costs no request.
    fn scope(&self) -> Scope {
        Scope {
            source: "memory".into(),
            ..Scope::default()
        }
    }
}

/// Requests made to a source, per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RequestCounts {
    /// Which reader answered a git source: `gix`, or `git` for a clone gix
    /// declines; `None` for other sources, or before the clone was read.
    /// The tick's report shows it on its own (`reader`).
    #[serde(skip)]
    pub reader: Option<&'static str>,
    pub head: u64,
    pub list: u64,
    pub read: u64,
    pub compare: u64,
    pub history: u64,
}

impl RequestCounts {
    pub fn total(&self) -> u64 {
        self.head + self.list + self.read + self.compare + self.history
    }
}
