//! The remembered tree: the per-file records, grouped in buckets by a hash of
//! the path so that a wake loads and saves only the buckets it touches.
//!
//! A state read from the sharded layout (`shards`) starts with no bucket
//! loaded; a lookup loads the one bucket that can hold the path. Walking the
//! whole tree loads every bucket, so the tick walks it only on the rare paths
//! that need it and otherwise asks the per-bucket summaries the manifest
//! keeps (`Summary`). A state built in memory or read from the single-file
//! layout of schema 1 has every bucket loaded.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::schema::{FileRecord, NextReview, Outcome};

mod records;
pub use records::Records;

/// The bucket of `path` among `buckets` (a power of two): the low bits of
/// its 64-bit FNV-1a hash. Fixed forever: a saved state depends on it.
pub fn bucket_of(path: &str, buckets: usize) -> usize {
    // One bucket (a first run's tree in memory): every lookup lands there,
    // without hashing the path.
    if buckets <= 1 {
        return 0;
    }
    (fnv1a(path) as usize) & (buckets - 1)
}

/// What the tick needs to know of a bucket without loading it. Exact for the
/// records it was computed from (and for the locks of `Files::locks`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Summary {
    /// Records in the bucket.
    pub n: usize,
    /// The earliest not-before time of a retry that has not given up.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::ts::option"
    )]
    pub retry: Option<DateTime<Utc>>,
    /// Decisions handed over as needs_review.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub awaiting: u64,
    /// The model's remembered decisions per advisor.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided_by: BTreeMap<String, u64>,
    /// The earliest scheduled review (outside the locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<NextReview>,
    /// Records marked stuck.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stuck: u64,
    /// Records whose fingerprint says their imports did not all resolve.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unknown_deps: u64,
    /// Records (outside the locks) with a rollback streak or unresolved imports.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub triggers: u64,
    /// With `unknown_deps`: the directories where the imports of those
    /// records could resolve, as a filter in hex (`DirFilter`); a
    /// path added elsewhere resolves none of them, and the shard is not read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unknown_dirs: String,
}

/// A set of directories, two bits each among at least 16 bits per
/// directory (a power of two, 256 at least): it says yes for a directory it
/// does not hold about 1.5% of the time, never no for one it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct DirFilter(Vec<u64>);

impl DirFilter {
    /// The filter of `dirs`.
    pub fn of<'a>(dirs: impl ExactSizeIterator<Item = &'a String>) -> DirFilter {
        let bits = (dirs.len() * 16).next_power_of_two().max(256);
        let mut f = DirFilter(vec![0; bits / 64]);
        for d in dirs {
            for b in f.bits(d) {
                f.0[b / 64] |= 1 << (b % 64);
            }
        }
        f
    }

    fn bits(&self, dir: &str) -> [usize; 2] {
        let h = fnv1a(dir);
        let mask = self.0.len() * 64 - 1;
        [(h as usize) & mask, ((h >> 32) as usize) & mask]
    }

    pub fn may_hold(&self, dir: &str) -> bool {
        self.bits(dir)
            .iter()
            .all(|b| self.0[b / 64] & (1 << (b % 64)) != 0)
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|w| format!("{w:016x}")).collect()
    }

    /// A missing filter (a summary saved before there were filters) or an
    /// unreadable one holds every directory: the shard is read.
    pub fn from_hex(hex: &str) -> DirFilter {
        let words: Option<Vec<u64>> = (0..hex.len() / 16)
            .map(|i| u64::from_str_radix(hex.get(i * 16..(i + 1) * 16)?, 16).ok())
            .collect();
        match words {
            Some(w)
                if hex.len() >= 64 && hex.len().is_multiple_of(16) && w.len().is_power_of_two() =>
            {
                DirFilter(w)
            }
            _ => DirFilter(vec![u64::MAX; 4]),
        }
    }
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a summary asks of the rules above the state, which the state itself
/// does not know: whether a `--lock` pattern matches a path, and when an
/// unchanged record is next due for review under the locks. The tick hands
/// them over (`Files::set_rules`), so the state layer imports nothing of it.
#[derive(Clone, Copy)]
pub struct Rules {
    pub locked: fn(&str, &[String]) -> bool,
    pub review_due: fn(&FileRecord, &str, &[String]) -> Option<DateTime<Utc>>,
    /// The directories where a record's imports could resolve.
    pub import_dirs: fn(&str, &FileRecord) -> BTreeSet<String>,
}

/// The rules, and the summaries of the loaded buckets computed by them: the
/// header's figures and the save ask for each bucket's summary several
/// times, and a summary costs a pass over the bucket's records. A bucket's
/// entry is dropped whenever its records can change (`Files::bucket_mut`,
/// the `_mut` walks) and all of them when the locks do.
#[derive(Clone)]
pub struct Summarizer {
    rules: Rules,
    cache: std::cell::RefCell<Vec<Option<Summary>>>,
}

impl Summarizer {
    fn forget(&mut self, i: usize) {
        if let Some(s) = self.cache.get_mut().get_mut(i) {
            *s = None;
        }
    }

    fn forget_all(&mut self) {
        self.cache.get_mut().clear();
    }
}

/// Whether a fingerprint says the file's imports did not all resolve.
pub fn deps_unknown(r: &FileRecord) -> bool {
    r.fingerprint
        .as_deref()
        .is_some_and(|fp| fp.ends_with("|deps:unknown"))
}

impl Summary {
    /// The summary of `records` under `locks`.
    pub fn of<'a>(
        records: impl Iterator<Item = (&'a String, &'a FileRecord)>,
        locks: &[String],
        rules: &Rules,
    ) -> Summary {
        let mut t = Tally::new(locks, rules);
        for (path, r) in records {
            t.add(path, r);
        }
        t.finish()
    }
}

/// A summary being computed one record at a time (`Summary::of`), so a
/// walk that visits the records for something else can summarise them on
/// the way, while they are in the cache.
pub struct Tally<'a> {
    s: Summary,
    dirs: BTreeSet<String>,
    locks: &'a [String],
    rules: &'a Rules,
}

impl<'a> Tally<'a> {
    pub fn new(locks: &'a [String], rules: &'a Rules) -> Tally<'a> {
        Tally {
            s: Summary::default(),
            dirs: BTreeSet::new(),
            locks,
            rules,
        }
    }

    pub fn add(&mut self, path: &str, r: &FileRecord) {
        self.add_figures(path, r);
        let (s, rules, locks) = (&mut self.s, self.rules, self.locks);
        s.stuck += u64::from(r.stuck);
        let unknown = deps_unknown(r);
        s.unknown_deps += u64::from(unknown);
        let locked = (rules.locked)(path, locks);
        s.triggers += u64::from(!locked && (unknown || r.rollback_streak > 0));
        if unknown {
            self.dirs.extend((rules.import_dirs)(path, r));
        }
    }

    /// The parts of the summary the header adds up (`Figures`): they read
    /// only the record itself, none of the strings it points to (but the
    /// advisor's name of a model decision).
    fn add_figures(&mut self, path: &str, r: &FileRecord) {
        let (s, rules, locks) = (&mut self.s, self.rules, self.locks);
        s.n += 1;
        if let Some(w) = r.retry.as_ref().filter(|w| !w.given_up()) {
            s.retry = Some(s.retry.map_or(w.not_before, |t| t.min(w.not_before)));
        }
        if let Some(d) = &r.decision {
            match (d.outcome, &d.by) {
                (Outcome::LlmSkip | Outcome::Evolve, Some(by)) => {
                    *s.decided_by.entry(by.clone()).or_default() += 1;
                }
                (Outcome::NeedsReview, _) => s.awaiting += 1,
                _ => {}
            }
        }
        if let Some(at) = (rules.review_due)(r, path, locks) {
            let better = s
                .review
                .as_ref()
                .is_none_or(|n| (at, path) < (n.at, n.path.as_str()));
            if better {
                s.review = Some(NextReview {
                    at,
                    path: path.to_string(),
                });
            }
        }
    }

    pub fn finish(self) -> Summary {
        let mut s = self.s;
        if s.unknown_deps > 0 {
            s.unknown_dirs = DirFilter::of(self.dirs.iter()).to_hex();
        }
        s
    }
}

/// What the header adds up from the summaries of every bucket: the model's
/// decisions per advisor, the hand-overs, the earliest retry and review.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Figures {
    pub decided_by: BTreeMap<String, u64>,
    pub awaiting: u64,
    pub retry: Option<DateTime<Utc>>,
    pub review: Option<NextReview>,
}

impl Figures {
    /// Add one bucket's summary, copying only what the sum keeps of it.
    fn add(&mut self, s: &Summary) {
        for (by, n) in &s.decided_by {
            match self.decided_by.get_mut(by) {
                Some(total) => *total += n,
                None => {
                    self.decided_by.insert(by.clone(), *n);
                }
            }
        }
        self.awaiting += s.awaiting;
        self.retry = match (self.retry, s.retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(r) = &s.review {
            let better = self
                .review
                .as_ref()
                .is_none_or(|n| (r.at, &r.path) < (n.at, &n.path));
            if better {
                self.review = Some(r.clone());
            }
        }
    }
}

/// One bucket's records and its part of the reverse-import index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bucket {
    pub files: Records,
    /// For each path that hashes to this bucket: the files that import it,
    /// as of the last save.
    pub importers: BTreeMap<String, Vec<String>>,
    /// Each record's dependencies as loaded, to update the index on save.
    pub deps_at_load: BTreeMap<String, Vec<String>>,
}

/// A bucket as the manifest names it: its shard file and its summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saved {
    /// sha256 of the shard file's bytes, which is also its name.
    pub id: String,
    #[serde(flatten)]
    pub summary: Summary,
}

impl<'de> Deserialize<'de> for Saved {
    /// The fields of `Summary` beside `id`, read as one struct: serde's
    /// `flatten` would buffer every line of the manifest's 512 first.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Saved, D::Error> {
        #[derive(Deserialize)]
        struct Line {
            id: String,
            n: usize,
            #[serde(default, with = "super::ts::option")]
            retry: Option<DateTime<Utc>>,
            #[serde(default)]
            awaiting: u64,
            #[serde(default)]
            decided_by: BTreeMap<String, u64>,
            #[serde(default)]
            review: Option<NextReview>,
            #[serde(default)]
            stuck: u64,
            #[serde(default)]
            unknown_deps: u64,
            #[serde(default)]
            triggers: u64,
            #[serde(default)]
            unknown_dirs: String,
        }
        let l = Line::deserialize(d)?;
        Ok(Saved {
            id: l.id,
            summary: Summary {
                n: l.n,
                retry: l.retry,
                awaiting: l.awaiting,
                decided_by: l.decided_by,
                review: l.review,
                stuck: l.stuck,
                unknown_deps: l.unknown_deps,
                triggers: l.triggers,
                unknown_dirs: l.unknown_dirs,
            },
        })
    }
}

/// Reads a bucket's shard in two steps, so that a lookup can read a record
/// from the checked bytes without decoding the rest (`Files::contains_key`).
pub trait ShardReader {
    /// The shard's bytes, checked against its summary and its name.
    fn bytes(&self, saved: &Saved) -> anyhow::Result<Vec<u8>>;
    /// Bucket `i` of `of` decoded from what `bytes` gave.
    fn bucket(&self, saved: &Saved, bytes: &[u8], i: usize, of: usize) -> anyhow::Result<Bucket>;
    /// `path`'s record read from bucket `i`'s bytes alone, the bucket holding
    /// `n` records; `None` when only decoding the whole bucket can tell.
    fn peek(
        &self,
        bytes: &[u8],
        i: usize,
        of: usize,
        n: usize,
        path: &str,
    ) -> Option<Option<FileRecord>>;
}

/// Reads a bucket's shard; set for a state read from the sharded layout.
pub type Loader = std::rc::Rc<dyn ShardReader>;

#[derive(Clone, Default)]
pub struct Slot {
    pub saved: Option<Saved>,
    pub cell: OnceCell<Bucket>,
    /// The shard's checked bytes, read by a lookup before the bucket was
    /// loaded: loading it decodes them rather than reading the file again.
    /// `None`: the read failed, and a load reads it again for the error.
    pub peeked: OnceCell<Option<Vec<u8>>>,
}

/// The records of the watched tree, by path.
#[derive(Clone)]
pub struct Files {
    pub slots: Vec<Slot>,
    pub len: usize,
    pub loader: Option<Loader>,
    /// The first shard that could not be read: the save refuses to go on.
    pub error: OnceCell<String>,
    /// The locks the summaries were computed under.
    pub locks: Vec<String>,
    /// How to summarise a bucket; without them a save keeps the saved
    /// summary of a bucket whose bytes did not change, and refuses otherwise.
    pub rules: Option<Summarizer>,
    /// The index of the loaded buckets does not reflect the records (a
    /// state built in memory or read from one file): rebuilt on save.
    pub index_stale: bool,
}

impl Default for Files {
    fn default() -> Files {
        Files::from(BTreeMap::new())
    }
}

impl From<BTreeMap<String, FileRecord>> for Files {
    fn from(files: BTreeMap<String, FileRecord>) -> Files {
        let len = files.len();
        let cell = OnceCell::new();
        let _ = cell.set(Bucket {
            files: files.into(),
            ..Bucket::default()
        });
        Files {
            slots: vec![Slot {
                saved: None,
                cell,
                peeked: OnceCell::new(),
            }],
            len,
            loader: None,
            error: OnceCell::new(),
            locks: Vec::new(),
            rules: None,
            index_stale: true,
        }
    }
}

impl std::fmt::Debug for Files {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for Files {
    fn eq(&self, other: &Files) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Files {
    /// Buckets, as saved.
    pub fn buckets(&self) -> usize {
        self.slots.len()
    }

    fn slot_of(&self, path: &str) -> usize {
        bucket_of(path, self.slots.len())
    }

    /// The bucket at `i`, loaded if it was not.
    pub fn bucket(&self, i: usize) -> &Bucket {
        self.slots[i].cell.get_or_init(|| self.read(i))
    }

    fn bucket_mut(&mut self, i: usize) -> &mut Bucket {
        self.bucket(i);
        if let Some(s) = &mut self.rules {
            s.forget(i);
        }
        self.slots[i].cell.get_mut().expect("loaded above")
    }

    fn read(&self, i: usize) -> Bucket {
        let (Some(saved), Some(loader)) = (&self.slots[i].saved, &self.loader) else {
            return Bucket::default();
        };
        let read = match self.slots[i].peeked.get() {
            Some(Some(bytes)) => loader.bucket(saved, bytes, i, self.slots.len()),
            _ => loader
                .bytes(saved)
                .and_then(|bytes| loader.bucket(saved, &bytes, i, self.slots.len())),
        };
        match read {
            Ok(mut b) => {
                b.deps_at_load = b
                    .files
                    .iter()
                    .filter(|(_, r)| !r.deps.is_empty())
                    .map(|(p, r)| (p.clone(), r.deps.clone()))
                    .collect();
                b
            }
            Err(e) => {
                let _ = self.error.set(format!("{e:#}"));
                Bucket::default()
            }
        }
    }

    /// The first shard that could not be read, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.get().map(String::as_str)
    }

    pub fn is_loaded(&self, i: usize) -> bool {
        self.slots[i].cell.get().is_some()
    }

    pub fn get(&self, path: &str) -> Option<&FileRecord> {
        self.bucket(self.slot_of(path)).files.get(path)
    }

    pub fn get_mut(&mut self, path: &str) -> Option<&mut FileRecord> {
        let i = self.slot_of(path);
        self.bucket_mut(i).files.get_mut(path)
    }

    /// Whether the tree holds `path`. A bucket not yet loaded is not
    /// loaded for it: a dependency's candidate paths each land in another
    /// shard, and decoding every record of each was most of a wake on a
    /// tree with imports. Its checked bytes are kept for a later load.
    pub fn contains_key(&self, path: &str) -> bool {
        let i = self.slot_of(path);
        if let Some(b) = self.slots[i].cell.get() {
            return b.files.get(path).is_some();
        }
        match self.peek(i, path) {
            Some(held) => held.is_some(),
            None => self.get(path).is_some(),
        }
    }

    /// The blob of `path`'s record, read as `contains_key` reads it: the
    /// fingerprint of a file names the blob of each of its dependencies.
    pub fn blob_of(&self, path: &str) -> Option<std::borrow::Cow<'_, str>> {
        let i = self.slot_of(path);
        if self.slots[i].cell.get().is_none()
            && let Some(held) = self.peek(i, path)
        {
            return held.map(|r| std::borrow::Cow::Owned(r.blob));
        }
        self.get(path)
            .map(|r| std::borrow::Cow::Borrowed(r.blob.as_str()))
    }

    /// Whether the shard of unloaded bucket `i` holds `path`, read from its
    /// bytes alone; `None` when only loading it can tell (no shard, a read
    /// that failed, bytes not laid out as the writer lays them out), and
    /// the load then reads it, or fails, as it always did.
    fn peek(&self, i: usize, path: &str) -> Option<Option<FileRecord>> {
        let (Some(saved), Some(loader)) = (&self.slots[i].saved, &self.loader) else {
            return None;
        };
        let slot = &self.slots[i];
        let bytes = slot
            .peeked
            .get_or_init(|| loader.bytes(saved).ok())
            .as_ref()?;
        loader.peek(bytes, i, self.slots.len(), saved.summary.n, path)
    }

    pub fn insert(&mut self, path: String, record: FileRecord) -> Option<FileRecord> {
        let i = self.slot_of(&path);
        let old = self.bucket_mut(i).files.insert(path, record);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Add records for paths not in the tree, in path order (a first run's
    /// listing). A bucket that was empty keeps them in a vector until one
    /// comes out of order (`Records`): as many records as a first run
    /// builds, inserted one by one into a map, leave its nodes half full.
    pub fn extend_new(&mut self, records: impl ExactSizeIterator<Item = (String, FileRecord)>) {
        let per_bucket = records.len().div_ceil(self.slots.len());
        for slot in &mut self.slots {
            if let Some(b) = slot.cell.get_mut()
                && b.files.is_empty()
            {
                b.files = Records::sorted_with_capacity(per_bucket);
            }
        }
        for (path, r) in records {
            self.insert(path, r);
        }
    }

    pub fn remove(&mut self, path: &str) -> Option<FileRecord> {
        let i = self.slot_of(path);
        let old = self.bucket_mut(i).files.remove(path);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Records in the tree, loaded or not.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Load every bucket.
    pub fn load_all(&self) {
        for i in 0..self.slots.len() {
            self.bucket(i);
        }
    }

    /// Load the buckets whose saved summary says `wanted`: afterwards every
    /// record such a summary counts is loaded.
    pub fn load_where(&self, wanted: impl Fn(&Summary) -> bool) {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.cell.get().is_none() && slot.saved.as_ref().is_some_and(|s| wanted(&s.summary))
            {
                self.bucket(i);
            }
        }
    }

    /// The records of bucket `i`, loaded if it was not, in path order.
    pub fn bucket_records(&self, i: usize) -> impl Iterator<Item = (&String, &FileRecord)> {
        self.bucket(i).files.iter()
    }

    /// The loaded records, in path order.
    pub fn loaded(&self) -> std::vec::IntoIter<(&String, &FileRecord)> {
        let mut all: Vec<(&String, &FileRecord)> = self
            .slots
            .iter()
            .filter_map(|s| s.cell.get())
            .flat_map(|b| b.files.iter())
            .collect();
        if self.slots.len() > 1 {
            all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        all.into_iter()
    }

    /// Every record in path order (loads every bucket).
    pub fn iter(&self) -> std::vec::IntoIter<(&String, &FileRecord)> {
        self.load_all();
        self.loaded()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.iter().map(|(p, _)| p)
    }

    pub fn values(&self) -> impl Iterator<Item = &FileRecord> {
        self.iter().map(|(_, r)| r)
    }

    /// Every record in path order, to change (loads every bucket).
    pub fn iter_mut(&mut self) -> std::vec::IntoIter<(&String, &mut FileRecord)> {
        self.load_all();
        self.loaded_mut()
    }

    /// The loaded records in path order, to change.
    pub fn loaded_mut(&mut self) -> std::vec::IntoIter<(&String, &mut FileRecord)> {
        if let Some(s) = &mut self.rules {
            s.forget_all();
        }
        let many = self.slots.len() > 1;
        let mut all: Vec<(&String, &mut FileRecord)> = self
            .slots
            .iter_mut()
            .filter_map(|s| s.cell.get_mut())
            .flat_map(|b| b.files.iter_mut())
            .collect();
        if many {
            all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        }
        all.into_iter()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut FileRecord> {
        self.iter_mut().map(|(_, r)| r)
    }

    /// The summary of bucket `i`: computed from its records when loaded
    /// (and the rules are known), as saved otherwise.
    pub fn summary(&self, i: usize) -> Option<Summary> {
        let mut out = None;
        self.with_summary(i, |s| out = Some(s.clone()));
        out
    }

    /// `f` of bucket `i`'s summary, lent rather than cloned: the header's
    /// figures visit all 512 on every wake.
    fn with_summary(&self, i: usize, f: impl FnOnce(&Summary)) {
        match (self.slots[i].cell.get(), &self.rules) {
            (Some(b), Some(s)) => {
                let mut cache = s.cache.borrow_mut();
                if cache.len() != self.slots.len() {
                    *cache = vec![None; self.slots.len()];
                }
                f(cache[i]
                    .get_or_insert_with(|| Summary::of(b.files.iter(), &self.locks, &s.rules)));
            }
            _ => {
                if let Some(saved) = &self.slots[i].saved {
                    f(&saved.summary);
                }
            }
        }
    }

    /// The header's figures of the whole tree (`Figures`). From the
    /// buckets' summaries, which the save reuses; but a tree the save will
    /// re-bucket (a first run's, kept in memory in one bucket) has its
    /// summaries computed there, for the new buckets, so here the figures
    /// come from a walk that reads no more of a record than they need.
    pub fn figures(&self) -> Figures {
        let mut f = Figures::default();
        match &self.rules {
            Some(s) if self.loader.is_none() && self.slots.len() == 1 && self.is_loaded(0) => {
                let mut t = Tally::new(&self.locks, &s.rules);
                for (path, r) in &self.bucket(0).files {
                    t.add_figures(path, r);
                }
                f.add(&t.s);
            }
            _ => (0..self.slots.len()).for_each(|i| self.with_summary(i, |s| f.add(s))),
        }
        f
    }

    /// The rules the summaries are computed by from now on.
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = Some(Summarizer {
            rules,
            cache: Default::default(),
        });
    }

    pub fn rules(&self) -> Option<&Rules> {
        self.rules.as_ref().map(|s| &s.rules)
    }

    /// Every bucket's summary.
    pub fn summaries(&self) -> impl Iterator<Item = Summary> + '_ {
        (0..self.slots.len()).filter_map(|i| self.summary(i))
    }

    /// Compute the summaries under these locks from now on; when they differ
    /// from the saved ones, every bucket is loaded so no summary is stale.
    pub fn set_locks(&mut self, locks: &[String]) {
        if self.locks != locks {
            self.load_all();
            self.locks = locks.to_vec();
            if let Some(s) = &mut self.rules {
                s.forget_all();
            }
        }
    }

    /// The files that import `dep` (its dependents), in path order: the
    /// index as saved, corrected by the loaded records.
    pub fn importers_of(&self, dep: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if !self.index_stale {
            for p in self
                .bucket(self.slot_of(dep))
                .importers
                .get(dep)
                .into_iter()
                .flatten()
            {
                // A loaded record answers for itself below; one in a bucket
                // not read is as the index saw it.
                if !self.is_loaded(self.slot_of(p)) {
                    out.insert(p.clone());
                }
            }
        } else {
            self.load_all();
        }
        for (p, r) in self.loaded() {
            if r.deps.iter().any(|d| d == dep) {
                out.insert(p.clone());
            }
        }
        out
    }
}

impl<'a> IntoIterator for &'a Files {
    type Item = (&'a String, &'a FileRecord);
    type IntoIter = std::vec::IntoIter<(&'a String, &'a FileRecord)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Files {
    type Item = (&'a String, &'a mut FileRecord);
    type IntoIter = std::vec::IntoIter<(&'a String, &'a mut FileRecord)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl std::ops::Index<&str> for Files {
    type Output = FileRecord;
    fn index(&self, path: &str) -> &FileRecord {
        self.get(path)
            .unwrap_or_else(|| panic!("no record for `{path}`"))
    }
}

impl std::ops::Index<&String> for Files {
    type Output = FileRecord;
    fn index(&self, path: &String) -> &FileRecord {
        &self[path.as_str()]
    }
}

impl Serialize for Files {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Files {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Files, D::Error> {
        BTreeMap::<String, FileRecord>::deserialize(d).map(Files::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_line_reads_as_its_summary_reads_with_every_field_or_none() {
        let lines = [
            r#"{"id":"ab","n":3}"#,
            r#"{"id":"ab","n":196,"awaiting":196,"unknown_deps":12,"triggers":12,"unknown_dirs":"00c0"}"#,
            r#"{"id":"ab","n":5,"retry":1782864000000,"awaiting":1,"decided_by":{"m":2},"review":{"at":"2026-07-11T00:00:00Z","path":"src/a"},"stuck":1,"unknown_deps":1,"triggers":2,"unknown_dirs":"ff"}"#,
            r#"{"id":"ab","n":5,"retry":"2026-07-01T00:00:00Z","review":{"at":"2026-07-11T00:00:00.5+02:00","path":"p"}}"#,
        ];
        for line in lines {
            let saved: Saved = serde_json::from_str(line).unwrap();
            let summary: Summary = serde_json::from_str(line).unwrap();
            assert_eq!(
                saved,
                Saved {
                    id: "ab".into(),
                    summary
                },
                "{line}"
            );
            assert_eq!(
                serde_json::from_str::<Saved>(&serde_json::to_string(&saved).unwrap()).unwrap(),
                saved
            );
        }
        assert!(
            serde_json::from_str::<Saved>(r#"{"id":"ab"}"#).is_err(),
            "n is required"
        );
    }

    #[test]
    fn the_bucket_of_a_path_never_changes() {
        // A saved state depends on these: changing the hash loses every record.
        assert_eq!(bucket_of("src/a.js", 1), 0);
        let b = bucket_of("src/a.js", 512);
        assert_eq!(b, bucket_of("src/a.js", 512));
        assert_eq!(bucket_of("src/a.js", 1024) & 511, b);
    }

    #[test]
    fn a_directory_filter_holds_what_it_was_given_and_a_missing_one_holds_everything() {
        let dirs: BTreeSet<String> = (0..40).map(|i| format!("src/d{i}")).collect();
        let f = DirFilter::of(dirs.iter());
        assert!(dirs.iter().all(|d| f.may_hold(d)));
        let back = DirFilter::from_hex(&f.to_hex());
        assert_eq!(back, f);
        let strangers = (0..1000)
            .filter(|i| f.may_hold(&format!("lib/x{i}")))
            .count();
        assert!(strangers < 60, "{strangers} of 1000 strangers held");
        for broken in ["", "zz", &"0".repeat(48)] {
            assert!(
                DirFilter::from_hex(broken).may_hold("anything"),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn the_header_figures_of_a_tree_in_one_bucket_are_what_its_saved_buckets_add_up_to() {
        use crate::state::records::retry::{Retry, Wait};
        use crate::state::{Decision, Outcome};
        let rules = Rules {
            locked: |_, _| false,
            review_due: |r, _, _| r.changed_ts,
            import_dirs: |_, _| BTreeSet::new(),
        };
        let ts = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap();
        let record = |i: i64| FileRecord {
            decision: Some(Decision {
                answered_by: None,
                outcome: [Outcome::LlmSkip, Outcome::NeedsReview, Outcome::LocalSkip]
                    [i as usize % 3],
                reason: String::new(),
                ts: ts(0),
                by: Some(format!("m{}", i % 2)),
            }),
            retry: (i % 5 == 0).then(|| Retry {
                fingerprint: String::new(),
                failures: 1,
                not_before: ts(500 + (i * 37) % 101),
                wait: Wait::Backoff,
                at_once: false,
            }),
            changed_ts: Some(ts(1000 - (i * 13) % 41)),
            ..FileRecord::default()
        };
        let mut one = Files::default();
        let mut many = Files::from(BTreeMap::new());
        many.slots = vec![Slot::default(); 8];
        for i in 0..8 {
            let _ = many.slots[i].cell.set(Bucket::default());
        }
        for f in [&mut one, &mut many] {
            f.set_rules(rules);
            for i in 0..60 {
                f.insert(format!("f{i}.js"), record(i));
            }
        }
        let figures = one.figures();
        assert_eq!(figures, many.figures());
        assert_eq!(figures.awaiting, 20);
        assert_eq!(figures.decided_by.values().sum::<u64>(), 20);
        assert!(figures.retry.is_some() && figures.review.is_some());
    }

    #[test]
    fn a_files_map_iterates_in_path_order_whatever_its_buckets() {
        let mut f = Files::from(BTreeMap::new());
        f.slots = vec![Slot::default(); 8];
        for i in 0..8 {
            let _ = f.slots[i].cell.set(Bucket::default());
        }
        for p in ["b", "a", "d", "c", "e"] {
            f.insert(p.to_string(), FileRecord::default());
        }
        assert_eq!(f.len(), 5);
        let keys: Vec<&String> = f.keys().collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e"]);
        assert!(f.remove("c").is_some());
        assert_eq!(f.len(), 4);
    }
}
