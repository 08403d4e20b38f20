//! The sharded layout (schema 2): the state file is a small manifest, and
//! the per-file records live in content-addressed shard files in
//! `<state>.d/`, one per bucket of paths (`files::bucket_of`).
//!
//! A save writes only the shards whose bytes changed, each under a new
//! `O_EXCL` temporary name, fsynced and renamed to `<sha256>.json`; then it
//! fsyncs the directory and replaces the manifest atomically. Only once the
//! new manifest is durable are the shards it no longer names removed. A
//! crash at any instant leaves the old manifest with every shard it names.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::files::{Bucket, Files, Saved, ShardReader, Slot, Summary, Tally, bucket_of};
use super::limits;
use super::safe_fs;
use super::schema::{FileRecord, State};
use super::store::sidecar;

/// Records per shard a save aims at; the bucket count doubles once the
/// average passes twice this.
pub const TARGET_PER_SHARD: usize = 256;

/// A save reads the whole shard directory, to remove what killed saves left
/// there, on every wake whose counter is a multiple of this (and on a first
/// run, a reshard, and a save that rewrites many shards); any other save
/// removes only the shards it replaced, by name.
pub const SWEEP_EVERY: u64 = 64;

/// `<state>.d`: where the shards live.
pub fn dir_of(state: &Path) -> PathBuf {
    sidecar(state, ".d")
}

/// The manifest's description of the shards, after the header and the
/// state-wide parts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Layout {
    /// Buckets, a power of two; `shards` has one entry per bucket.
    pub buckets: usize,
    /// Records in all shards.
    pub records: usize,
    /// The locks the summaries were computed under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<String>,
}

/// What the manifest adds to the state-wide parts; a document of schema 1
/// has no `layout`.
#[derive(Deserialize)]
pub struct Tail {
    #[serde(default)]
    pub layout: Option<Layout>,
    #[serde(default)]
    pub shards: Vec<Option<Saved>>,
}

/// One shard file.
#[derive(Serialize, Deserialize)]
pub(super) struct ShardFile {
    pub bucket: usize,
    pub of: usize,
    pub files: BTreeMap<String, FileRecord>,
    #[serde(default)]
    pub importers: BTreeMap<String, Vec<String>>,
}

/// The buckets for `records` records.
pub fn buckets_for(records: usize) -> usize {
    records
        .div_ceil(TARGET_PER_SHARD)
        .max(1)
        .next_power_of_two()
}

/// Attach the manifest's shards to a state read from it: nothing is read yet.
pub fn attach(
    state: &mut State,
    path: &Path,
    layout: Layout,
    shards: Vec<Option<Saved>>,
) -> Result<()> {
    let dir = dir_of(path);
    if shards.len() != layout.buckets || !layout.buckets.is_power_of_two() {
        bail!(
            "state file `{}` names {} shards for {} buckets; the file was left untouched: restore it from a backup, or move it and `{}` away to start over",
            path.display(),
            shards.len(),
            layout.buckets,
            dir.display()
        );
    }
    if safe_fs::is_link(&dir) {
        bail!(
            "`{}` is a symbolic link, and sentinel never reads or writes through one; move it away and restore the shard directory",
            dir.display()
        );
    }
    check_counts(path, &dir, &layout, &shards)?;
    state.files = Files {
        slots: shards
            .into_iter()
            .map(|saved| Slot {
                saved,
                ..Slot::default()
            })
            .collect(),
        len: layout.records,
        loader: Some(Rc::new(Reader {
            dir,
            state: path.to_path_buf(),
        })),
        error: Default::default(),
        locks: layout.locks,
        rules: None,
        index_stale: false,
    };
    Ok(())
}

/// The counts the manifest claims add up: the records of the layout are
/// those of the summaries. Nothing is looked up on disk here: a wake reads
/// only the shards it needs (`read_shard` checks each against its summary),
/// and the commands that read every shard check every one.
fn check_counts(path: &Path, dir: &Path, layout: &Layout, shards: &[Option<Saved>]) -> Result<()> {
    let total = shards
        .iter()
        .flatten()
        .fold(0u64, |t, s| t.saturating_add(s.summary.n as u64));
    if layout.records as u64 != total {
        return Err(anyhow!(
            "damaged state: state file `{}` claims {} records where its shards count {total}; the files were left untouched: restore them from a backup, or move the state and `{}` away to start over",
            path.display(),
            layout.records,
            dir.display()
        ));
    }
    Ok(())
}

/// Reads the shards of one state's directory.
struct Reader {
    dir: PathBuf,
    state: PathBuf,
}

impl ShardReader for Reader {
    fn bytes(&self, saved: &Saved) -> Result<Vec<u8>> {
        read_shard(&self.dir, &self.state, saved)
    }

    fn bucket(&self, saved: &Saved, bytes: &[u8], i: usize, of: usize) -> Result<Bucket> {
        decode_shard(&self.dir, &self.state, saved, bytes, i, of)
    }

    fn peek(
        &self,
        bytes: &[u8],
        i: usize,
        of: usize,
        n: usize,
        path: &str,
    ) -> Option<Option<FileRecord>> {
        peek(bytes, i, of, n, path)
    }
}

/// Why shard `saved` of `state` cannot be used.
fn damaged(dir: &Path, state: &Path, saved: &Saved, what: String) -> anyhow::Error {
    anyhow!(
        "shard `{}` of state file `{}` {what}; restore the state and its shard directory from a backup, or move them away to start over",
        dir.join(format!("{}.json", saved.id)).display(),
        state.display()
    )
}

/// Read and check one shard: its bytes must hash to its name.
fn read_shard(dir: &Path, state: &Path, saved: &Saved) -> Result<Vec<u8>> {
    let path = dir.join(format!("{}.json", saved.id));
    let damaged = |what: String| damaged(dir, state, saved, what);
    let bytes = match safe_fs::read_bounded(&path, limits::max_shard_bytes(saved.summary.n)) {
        Ok(Some(b)) => b,
        Ok(None) => return Err(damaged("is missing".into())),
        Err(e) => return Err(damaged(format!("cannot be read: {e}"))),
    };
    // A count no shard of this size can hold is a lie of the manifest,
    // told before a single record is parsed.
    if saved.summary.n as u64 > bytes.len() as u64 / limits::MIN_RECORD_BYTES {
        return Err(anyhow!(
            "damaged state: state file `{}` counts {} records in shard `{}`, which has {} bytes; the files were left untouched: restore them from a backup, or move the state and `{}` away to start over",
            state.display(),
            saved.summary.n,
            path.display(),
            bytes.len(),
            dir.display()
        ));
    }
    if hex(&Sha256::digest(&bytes)) != saved.id {
        return Err(damaged(
            "does not match its name (it was changed or torn)".into(),
        ));
    }
    Ok(bytes)
}

/// Bucket `i` of `of` from the checked bytes of its shard.
fn decode_shard(
    dir: &Path,
    state: &Path,
    saved: &Saved,
    bytes: &[u8],
    i: usize,
    of: usize,
) -> Result<Bucket> {
    let damaged = |what: String| damaged(dir, state, saved, what);
    let file: ShardFile =
        serde_json::from_slice(bytes).map_err(|e| damaged(format!("is not a valid shard: {e}")))?;
    if file.bucket != i || file.of != of {
        return Err(damaged(format!(
            "holds bucket {} of {}, not {i} of {of}",
            file.bucket, file.of
        )));
    }
    Ok(Bucket {
        files: file.files.into(),
        importers: file.importers,
        deps_at_load: BTreeMap::new(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bucket as it will be saved: its records and its index, borrowed (in
/// path order: a first run would otherwise copy every record and path once
/// more); for a rebuilt one, its records already encoded and summarised.
struct Planned<'a> {
    files: Vec<(&'a String, &'a FileRecord)>,
    /// Borrowed from the records, or (rebuilt) copied while they were in
    /// the cache.
    importers: BTreeMap<Cow<'a, str>, Vec<Cow<'a, str>>>,
    /// The shard's bytes up to the end of its records (`shard_start`,
    /// `put_entry`), not yet checked for redaction.
    encoded: Option<Vec<u8>>,
    tally: Option<Tally<'a>>,
}

impl<'a> Planned<'a> {
    fn new(
        files: Vec<(&'a String, &'a FileRecord)>,
        importers: BTreeMap<Cow<'a, str>, Vec<Cow<'a, str>>>,
    ) -> Self {
        Planned {
            files,
            importers,
            encoded: None,
            tally: None,
        }
    }
}

/// Buckets encoded per walk over the records (`encode_group`): the
/// encoded shards of one group are held at a time, not all of them.
const GROUP: usize = 256;

/// The records of a rebuild in path order, which is about the order they
/// were built in memory, with the bucket of each.
struct Walk<'a> {
    records: Vec<(&'a String, &'a FileRecord)>,
    bucket: Vec<u32>,
}

/// Every bucket rebuilt from all the records, under `buckets` buckets, its
/// index copied while the records are visited (in path order).
fn rebuild(files: &Files, buckets: usize) -> (Vec<Option<Planned<'_>>>, Walk<'_>) {
    let mut out: Vec<Planned> = (0..buckets)
        .map(|_| Planned::new(Vec::new(), BTreeMap::new()))
        .collect();
    let records: Vec<(&String, &FileRecord)> = files.iter().collect();
    let mut bucket = Vec::with_capacity(records.len());
    for &(path, r) in &records {
        for d in &r.deps {
            // Copied, keys too: the index is written after every record,
            // and compared while it is built, when the records are cold.
            let index = &mut out[bucket_of(d, buckets)].importers;
            match index.get_mut(d.as_str()) {
                // In path order: a record naming a dependency twice is the last.
                Some(list) => {
                    if list.last().is_none_or(|l| l != path) {
                        list.push(Cow::Owned(path.clone()));
                    }
                }
                None => {
                    index.insert(Cow::Owned(d.clone()), vec![Cow::Owned(path.clone())]);
                }
            }
        }
        let b = bucket_of(path, buckets);
        out[b].files.push((path, r));
        bucket.push(b as u32);
    }
    (
        out.into_iter().map(Some).collect(),
        Walk { records, bucket },
    )
}

/// Encode and summarise the records of the buckets in `group` in one walk
/// in path order: bucket by bucket, in the order of the path hash, the
/// walk would visit the records in no order they have in memory, with a
/// cache miss at every field.
fn encode_group<'a>(
    files: &'a Files,
    walk: &Walk<'a>,
    group: std::ops::Range<usize>,
    planned: &mut [Option<Planned<'a>>],
) -> Result<()> {
    let of = planned.len();
    // Room for about 1 KiB a record: what is not written is never touched.
    let room = 64 + 1024 * files.len().div_ceil(of);
    for b in group.clone() {
        if let Some(p) = planned[b].as_mut() {
            let mut bytes = Vec::with_capacity(room);
            shard_start(b, of, &mut bytes);
            p.encoded = Some(bytes);
            p.tally = files.rules().map(|rules| Tally::new(&files.locks, rules));
        }
    }
    let mut started = vec![false; group.len()];
    for (&(path, r), &b) in walk.records.iter().zip(&walk.bucket) {
        let b = b as usize;
        if !group.contains(&b) {
            continue;
        }
        let Some(p) = planned[b].as_mut() else {
            continue;
        };
        let first = !std::mem::replace(&mut started[b - group.start], true);
        let bytes = p.encoded.as_mut().expect("made above");
        put_entry(bytes, first, path, r, false)?;
        if let Some(t) = &mut p.tally {
            t.add(path, r);
        }
    }
    Ok(())
}

/// Only the loaded buckets, and those whose part of the index changes with
/// the dependencies of the loaded records; `None` for a bucket kept as saved.
fn incremental(files: &Files) -> Vec<Option<Planned<'_>>> {
    let n = files.buckets();
    // (dependency, importer, added) for each change of a loaded record's deps.
    let mut changes: Vec<(&str, &str, bool)> = Vec::new();
    for i in (0..n).filter(|i| files.is_loaded(*i)) {
        let b = files.bucket(i);
        let paths: BTreeSet<&String> = b.files.keys().chain(b.deps_at_load.keys()).collect();
        for p in paths {
            let old: BTreeSet<&String> = b.deps_at_load.get(p).into_iter().flatten().collect();
            let new: BTreeSet<&String> = b.files.get(p).into_iter().flat_map(|r| &r.deps).collect();
            for d in old.difference(&new) {
                changes.push((d.as_str(), p.as_str(), false));
            }
            for d in new.difference(&old) {
                changes.push((d.as_str(), p.as_str(), true));
            }
        }
    }
    let mut touched: BTreeSet<usize> = (0..n).filter(|i| files.is_loaded(*i)).collect();
    touched.extend(changes.iter().map(|(d, _, _)| bucket_of(d, n)));
    let mut out: Vec<Option<Planned>> = (0..n).map(|_| None).collect();
    for i in touched {
        let b = files.bucket(i);
        out[i] = Some(Planned::new(
            b.files.iter().collect(),
            b.importers
                .iter()
                .map(|(d, list)| {
                    let list = list.iter().map(|p| Cow::Borrowed(p.as_str())).collect();
                    (Cow::Borrowed(d.as_str()), list)
                })
                .collect(),
        ));
    }
    for (d, p, added) in changes {
        let planned = out[bucket_of(d, n)].as_mut().expect("touched above");
        let list = planned.importers.entry(Cow::Borrowed(d)).or_default();
        match (added, list.binary_search_by(|x| x.as_ref().cmp(p))) {
            (true, Err(at)) => list.insert(at, Cow::Borrowed(p)),
            (false, Ok(at)) => {
                list.remove(at);
            }
            _ => {}
        }
        if list.is_empty() {
            planned.importers.remove(d);
        }
    }
    out
}

/// A shard's bytes, into `out`: one record, then one index entry, per
/// line. A record's words are redacted (reasons and error details come from
/// peers); paths, the keys and the index, are data and written as they are.
/// The shard is serialised whole first (or was, up to its index, by
/// `encode_group`); only one that holds something to redact is written again
/// record by record.
/// `prepared`: `out` holds the bytes `encode_group` encoded, up to the index.
fn encode_shard(
    bucket: usize,
    of: usize,
    p: &Planned,
    out: &mut Vec<u8>,
    prepared: bool,
) -> Result<()> {
    if prepared {
        shard_end(p, out)?;
    } else {
        shard_json(bucket, of, p, false, out)?;
    }
    if std::str::from_utf8(out).is_ok_and(sentinel_core::redact::nothing_to_redact) {
        return Ok(());
    }
    shard_json(bucket, of, p, true, out)
}

fn shard_start(bucket: usize, of: usize, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("{{\"bucket\":{bucket},\"of\":{of},\"files\":{{").as_bytes());
}

fn put_entry(
    out: &mut Vec<u8>,
    first: bool,
    path: &str,
    r: &FileRecord,
    redacted: bool,
) -> Result<()> {
    out.extend_from_slice(if first { b"\n" } else { b",\n" });
    serde_json::to_writer(&mut *out, path)?;
    out.push(b':');
    if redacted {
        sentinel_core::redact::to_writer(&mut *out, r)?;
    } else {
        serde_json::to_writer(&mut *out, r)?;
    }
    Ok(())
}

fn shard_end(p: &Planned, out: &mut Vec<u8>) -> serde_json::Result<()> {
    out.extend_from_slice(b"\n},\"importers\":{");
    for (i, (dep, list)) in p.importers.iter().enumerate() {
        out.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        serde_json::to_writer(&mut *out, dep)?;
        out.push(b':');
        serde_json::to_writer(&mut *out, list)?;
    }
    out.extend_from_slice(b"\n}}\n");
    Ok(())
}

fn shard_json(
    bucket: usize,
    of: usize,
    p: &Planned,
    redacted: bool,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    out.reserve(64 + p.files.len() * 512);
    shard_start(bucket, of, out);
    for (i, (path, r)) in p.files.iter().enumerate() {
        put_entry(out, i == 0, path, r, redacted)?;
    }
    shard_end(p, out)?;
    Ok(())
}

/// What a save wrote, for the report and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub shards: u64,
    pub shard_bytes: u64,
    pub manifest_bytes: u64,
}

/// Write the shards that changed, then the manifest; then remove what the
/// new manifest no longer names. Returns what was written.
///
/// The manifest's temp file is written before the shards are synced and
/// synced along with them, so the device is waited on once for both; it
/// is renamed into place only once the shards and their names are durable,
/// which keeps the order of `write_shards` then `commit`.
pub fn save(path: &Path, state: &State) -> Result<Written> {
    save_kept(path, state, None)
}

/// `save`, the manifest's unchanged parts copied from `kept`.
pub fn save_kept(path: &Path, state: &State, kept: Option<&super::store::Kept>) -> Result<Written> {
    let dir = dir_of(path);
    let mut batch = safe_fs::Batch::new(Some(path)).map_err(|e| save_error(path, &dir, e))?;
    let staged = encode_shards(path, state, &mut batch)?;
    let encoded = super::store::encode_manifest(state, &staged.layout, &staged.shards, kept)?;
    let bytes = encoded.bytes();
    let manifest = safe_fs::Replacement::stage(path, bytes).map_err(|e| manifest_error(path, e))?;
    flush(path, &dir, batch, Some(manifest.file()))?;
    manifest.commit(path).map_err(|e| manifest_error(path, e))?;
    let mut written = staged.written;
    written.manifest_bytes = bytes.len() as u64;
    clean_up(path, &staged.shards, &staged.garbage);
    Ok(written)
}

fn manifest_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    anyhow!(
        "cannot save state file `{}`: {e}; the previous state was kept, check that the directory is writable",
        path.display()
    )
}

/// The first half of a save: every shard the new manifest will name is on
/// disk and durable, and nothing else was touched. A crash after this
/// leaves the old manifest, which names only shards that are still there.
pub struct Staged {
    shards: Vec<Option<Saved>>,
    layout: Layout,
    written: Written,
    garbage: Garbage,
}

/// What a save removes once its manifest is durable.
#[derive(Debug, PartialEq, Eq)]
enum Garbage {
    /// Every file of the directory the new manifest does not name, and
    /// every temporary file there.
    Sweep,
    /// Only these shards, which the old manifest named and the new one
    /// replaced: the directory is not read.
    Replaced(Vec<String>),
}

/// Whether this save sweeps the directory, or removes only what it
/// replaced: reading 512 names and comparing each with the manifest costs a
/// one-file wake more than writing its shard. Garbage comes only from killed
/// saves (a removal that failed aside), so sweeping on a bounded schedule
/// keeps it bounded: within `SWEEP_EVERY` wakes. A reshard and a save that
/// rewrites an eighth of the shards or more read the directory anyway.
fn garbage(state: &State, reshard: bool, replaced: Vec<String>, buckets: usize) -> Garbage {
    let many = replaced.len().saturating_mul(8) >= buckets;
    if reshard || many || state.wake.wakes.is_multiple_of(SWEEP_EVERY) {
        Garbage::Sweep
    } else {
        Garbage::Replaced(replaced)
    }
}

pub fn write_shards(path: &Path, state: &State) -> Result<Staged> {
    let dir = dir_of(path);
    let mut batch = safe_fs::Batch::new(Some(path)).map_err(|e| save_error(path, &dir, e))?;
    let staged = encode_shards(path, state, &mut batch)?;
    flush(path, &dir, batch, None)?;
    Ok(staged)
}

/// Sync and rename the new shards the batch holds (and sync `also`, a
/// file whose fsync is wanted at the same time), then make their names
/// durable.
fn flush(path: &Path, dir: &Path, batch: safe_fs::Batch, also: Option<&fs::File>) -> Result<()> {
    batch.finish(also).map_err(|e| save_error(path, dir, e))?;
    safe_fs::sync_dir(dir).map_err(|e| save_error(path, dir, e))
}

/// Every bucket to save, encoded, with its summary; the shards not on disk
/// yet are added to `batch`, which writes them under temp names and syncs
/// and renames them a window at a time.
fn encode_shards(path: &Path, state: &State, batch: &mut safe_fs::Batch) -> Result<Staged> {
    let files = &state.files;
    if let Some(e) = files.error() {
        bail!("{e} (the state was not saved; the previous state was kept)");
    }
    let dir = dir_of(path);
    let created = prepare_dir(&dir)?;
    let reshard = files.loader.is_none()
        || files.index_stale
        || files.len() > 2 * TARGET_PER_SHARD * files.buckets();
    let buckets = if reshard {
        buckets_for(files.len())
    } else {
        files.buckets()
    };
    let (mut planned, walk) = if reshard {
        let (planned, walk) = rebuild(files, buckets);
        (planned, Some(walk))
    } else {
        (incremental(files), None)
    };
    if let Some(e) = files.error() {
        bail!("{e} (the state was not saved; the previous state was kept)");
    }
    let mut written = Written::default();
    let mut shards: Vec<Option<Saved>> = Vec::with_capacity(buckets);
    // One buffer for every shard: a fresh one each time would be mapped
    // and faulted in again at this size.
    let mut bytes: Vec<u8> = Vec::new();
    // The buffers `encode_group` filled are freed a group at a time:
    // freeing one of this size makes the allocator consolidate every small
    // block freed since the one before, the index's copies and the
    // summaries'.
    let mut spent: Vec<Vec<u8>> = Vec::new();
    for i in 0..planned.len() {
        if let Some(walk) = walk.as_ref().filter(|_| i % GROUP == 0) {
            spent.clear();
            encode_group(files, walk, i..(i + GROUP).min(buckets), &mut planned)?;
        }
        let Some(mut plan) = planned[i].take() else {
            shards.push(files.slots[i].saved.clone());
            continue;
        };
        if plan.files.is_empty() && plan.importers.is_empty() {
            shards.push(None);
            continue;
        }
        let prepared = match plan.encoded.take() {
            Some(records) => {
                spent.push(std::mem::replace(&mut bytes, records));
                true
            }
            None => false,
        };
        encode_shard(i, buckets, &plan, &mut bytes, prepared)?;
        let id = hex(&Sha256::digest(&bytes));
        let unchanged = !reshard && files.slots[i].saved.as_ref().map(|s| &s.id) == Some(&id);
        let summary = summarise(files, (i, buckets), plan, unchanged, path)?;
        // A directory this save created holds nothing to look up (a first
        // run's 512 stats); a link planted since is refused at the rename.
        let at = match (unchanged, created) {
            (true, _) => None,
            (false, true) => Some(dir.join(format!("{id}.json"))),
            (false, false) => to_write(&dir, &id, &bytes, path)?,
        };
        if let Some(at) = at {
            written.shards += 1;
            written.shard_bytes += bytes.len() as u64;
            batch
                .add(&at, &bytes)
                .map_err(|e| save_error(path, &dir, e))?;
        }
        shards.push(Some(Saved { id, summary }));
    }
    let replaced = if reshard {
        Vec::new()
    } else {
        replaced_ids(files, &shards)
    };
    let garbage = garbage(state, reshard, replaced, buckets);
    let layout = Layout {
        buckets,
        records: files.len(),
        locks: files.locks.clone(),
    };
    Ok(Staged {
        shards,
        layout,
        written,
        garbage,
    })
}

/// The summary bucket `i` is saved with: computed by the rules the tick
/// handed over, or kept as saved when its bytes did not change (the
/// commands that change no record know no rules).
fn summarise(
    files: &Files,
    (i, of): (usize, usize),
    plan: Planned,
    unchanged: bool,
    path: &Path,
) -> Result<Summary> {
    if let Some(t) = plan.tally {
        return Ok(t.finish());
    }
    if let Some(rules) = files.rules() {
        // A bucket saved under the count it is kept under holds the records
        // of its slot: its summary is the one the tick already asked for.
        if files.buckets() == of && files.is_loaded(i) {
            return Ok(files.summary(i).expect("a loaded bucket with rules"));
        }
        let records = plan.files.iter().map(|(p, r)| (*p, *r));
        return Ok(Summary::of(records, &files.locks, rules));
    }
    match &files.slots[i].saved {
        Some(saved) if unchanged => Ok(saved.summary.clone()),
        _ => bail!(
            "cannot save state file `{}`: a changed shard needs the rules of its summary, which this command did not give; the previous state was kept, report this as a bug",
            path.display()
        ),
    }
}

/// The second half: replace the manifest atomically (fsynced file and
/// directory), and only then remove the shards it no longer names.
pub fn commit(path: &Path, state: &State, staged: Staged) -> Result<Written> {
    let Staged {
        shards,
        layout,
        mut written,
        garbage,
    } = staged;
    let encoded = super::store::encode_manifest(state, &layout, &shards, None)?;
    let bytes = encoded.bytes();
    super::store::write_atomically(path, bytes)?;
    written.manifest_bytes = bytes.len() as u64;
    clean_up(path, &shards, &garbage);
    Ok(written)
}

/// The ids the old manifest named in a bucket whose shard this save
/// replaced (or emptied), under the same bucket count.
fn replaced_ids(files: &Files, shards: &[Option<Saved>]) -> Vec<String> {
    files
        .slots
        .iter()
        .zip(shards)
        .filter_map(|(slot, new)| {
            let old = slot.saved.as_ref()?;
            (new.as_ref().map(|s| &s.id) != Some(&old.id)).then(|| old.id.clone())
        })
        .collect()
}

/// The new manifest is durable: what it does not name is garbage now.
fn clean_up(path: &Path, shards: &[Option<Saved>], garbage: &Garbage) {
    let dir = dir_of(path);
    match garbage {
        Garbage::Sweep => {
            let keep: BTreeSet<String> = shards
                .iter()
                .flatten()
                .map(|s| format!("{}.json", s.id))
                .collect();
            sweep(&dir, &keep);
        }
        Garbage::Replaced(ids) => {
            for id in ids {
                // A shard's bytes name its bucket, so no other bucket has
                // its id; checked all the same, it costs nothing.
                if !shards.iter().flatten().any(|s| &s.id == id) {
                    let _ = fs::remove_file(dir.join(format!("{id}.json")));
                }
            }
        }
    }
}

fn save_error(path: &Path, dir: &Path, e: std::io::Error) -> anyhow::Error {
    anyhow!(
        "cannot save state file `{}`: writing its shards in `{}` failed: {e}; the previous state was kept, check that the directory is writable",
        path.display(),
        dir.display()
    )
}

/// The shard directory, created if missing; a link in its place is refused.
/// Whether it was created: a new directory holds no shard yet.
fn prepare_dir(dir: &Path) -> Result<bool> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => bail!(
            "`{}` is a symbolic link, and sentinel never writes through one; move it away (the previous state was kept)",
            dir.display()
        ),
        Ok(m) if m.is_dir() => Ok(false),
        Ok(_) => bail!(
            "`{}` is not a directory; move it away so sentinel can keep the state's shards there (the previous state was kept)",
            dir.display()
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => fs::create_dir(dir).map(|()| true).with_context(|| {
            format!(
                "cannot create the shard directory `{}`; check that the state directory is writable (the previous state was kept)",
                dir.display()
            )
        }),
        Err(e) => Err(anyhow!(e).context(format!("cannot read `{}`", dir.display()))),
    }
}

/// Where a shard must be written, unless a file of that name (the same
/// bytes: names are contents) is there already.
fn to_write(dir: &Path, id: &str, bytes: &[u8], state: &Path) -> Result<Option<PathBuf>> {
    let path = dir.join(format!("{id}.json"));
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => {
            Err(save_error(state, dir, safe_fs::link_error(&path)))
        }
        Ok(m) if m.is_file() && m.len() == bytes.len() as u64 => Ok(None),
        _ => Ok(Some(path)),
    }
}

/// Remove shards the manifest does not name and temp files of killed saves.
/// Only the lock holder saves, so none of them is in use.
fn sweep(dir: &Path, keep: &BTreeSet<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let shard = name.len() == 69 && name.ends_with(".json");
        if (shard && !keep.contains(&name)) || name.contains(".json.tmp-") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Every `<state>.d` shard file, for the tests and `jq` users.
pub fn shard_files(state: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir_of(state))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store;

    fn record(blob: &str, deps: &[&str]) -> FileRecord {
        FileRecord {
            blob: blob.into(),
            deps: deps.iter().map(|d| d.to_string()).collect(),
            last_ts: "2026-06-16T00:00:00Z".parse().unwrap(),
            ..FileRecord::default()
        }
    }

    /// Summary rules that know no locks and schedule no review.
    const NO_RULES: crate::files::Rules = crate::files::Rules {
        locked: |_, _| false,
        review_due: |_, _, _| None,
        import_dirs: |_, _| BTreeSet::new(),
    };

    /// A saved state of `n` files (`f0.js` imports nothing, every other
    /// imports `f0.js`), read back lazily.
    fn saved(dir: &Path, n: usize) -> (PathBuf, State) {
        let path = dir.join("state.json");
        let mut state = State::new();
        state.files.set_rules(NO_RULES);
        for i in 0..n {
            let deps: &[&str] = if i == 0 { &[] } else { &["f0.js"] };
            state
                .files
                .insert(format!("f{i}.js"), record(&format!("b{i}"), deps));
        }
        save(&path, &state).unwrap();
        let mut state = store::load_lazy(&path).unwrap().unwrap();
        state.files.set_rules(NO_RULES);
        (path.clone(), state)
    }

    fn on_disk(path: &Path) -> BTreeSet<PathBuf> {
        shard_files(path).into_iter().collect()
    }

    #[test]
    fn a_shard_encoded_in_the_walk_in_path_order_is_the_shard_encoded_bucket_by_bucket() {
        let mut files = Files::default();
        files.set_rules(NO_RULES);
        for i in 0..300 {
            // Duplicate and shared dependencies, and one into another bucket.
            let deps = [
                format!("f{}.js", i % 7),
                format!("f{}.js", i % 7),
                "f0.js".into(),
            ];
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            let mut r = record(&format!("b{i}"), &deps);
            r.fingerprint = (i % 3 == 0).then(|| format!("fp{i}|deps:unknown"));
            files.insert(format!("f{i}.js"), r);
        }
        let (mut planned, walk) = rebuild(&files, 4);
        encode_group(&files, &walk, 0..4, &mut planned).unwrap();
        for (i, plan) in planned.into_iter().enumerate() {
            let mut plan = plan.unwrap();
            let mut direct = Vec::new();
            shard_json(i, 4, &plan, false, &mut direct).unwrap();
            let mut walked = plan.encoded.take().unwrap();
            encode_shard(i, 4, &plan, &mut walked, true).unwrap();
            assert!(walked == direct, "bucket {i} differs");
            for list in plan.importers.values() {
                assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
            }
            let expected = Summary::of(plan.files.iter().copied(), &[], &NO_RULES);
            assert_eq!(plan.tally.take().unwrap().finish(), expected);
        }
    }

    #[test]
    fn a_crash_between_shard_writes_and_the_manifest_rename_leaves_the_old_state_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 2000);
        let before = store::load(&path).unwrap().unwrap();
        state.files.get_mut("f7.js").unwrap().blob = "changed".into();
        state.files.remove("f9.js");
        // The tick dies here: its shards are written, its manifest is not.
        let _staged = write_shards(&path, &state).unwrap();
        let after = store::load(&path).unwrap().unwrap();
        assert_eq!(after.files, before.files);
        assert_eq!(after.files.len(), 2000);
        assert_eq!(after.files["f7.js"].blob, "b7");
    }

    #[test]
    fn an_old_shard_is_never_deleted_before_the_new_manifest_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 2000);
        let old = on_disk(&path);
        state.files.get_mut("f7.js").unwrap().blob = "changed".into();
        let staged = write_shards(&path, &state).unwrap();
        let between = on_disk(&path);
        assert!(
            between.is_superset(&old),
            "an old shard went before the manifest"
        );
        assert_eq!(between.len(), old.len() + 1, "one new shard");
        commit(&path, &state, staged).unwrap();
        let now = on_disk(&path);
        assert_eq!(
            now.len(),
            old.len(),
            "the replaced shard is gone after the manifest"
        );
        assert_eq!(old.difference(&now).count(), 1);
    }

    /// What a killed save leaves in the shard directory survives the wakes
    /// between sweeps (they remove by name only the shards they replaced,
    /// without reading the directory) and is gone after at most
    /// `SWEEP_EVERY` of them.
    #[test]
    fn a_wake_removes_only_what_it_replaced_and_a_killed_saves_leftovers_go_within_sweep_every_wakes()
     {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 5000);
        assert!(state.files.buckets() >= 16, "one shard is under an eighth");
        let shard_dir = dir_of(&path);
        let orphan = shard_dir.join(format!("{}.json", "0".repeat(64)));
        let temp = shard_dir.join(format!("{}.json.tmp-Ab12Cd", "1".repeat(64)));
        fs::write(&orphan, b"{}\n").unwrap();
        fs::write(&temp, b"half a shard").unwrap();
        for wake in 1..=SWEEP_EVERY {
            state.wake.wakes = wake;
            state.files.get_mut("f7.js").unwrap().blob = format!("b7-{wake}");
            let w = save(&path, &state).unwrap();
            assert_eq!(w.shards, 1);
            state = store::load_lazy(&path).unwrap().unwrap();
            state.files.set_rules(NO_RULES);
            let named: BTreeSet<PathBuf> = state
                .files
                .slots
                .iter()
                .filter_map(|slot| slot.saved.as_ref())
                .map(|s| shard_dir.join(format!("{}.json", s.id)))
                .collect();
            let mut expected = named.clone();
            if wake < SWEEP_EVERY {
                expected.insert(orphan.clone());
                assert!(temp.exists(), "wake {wake} read the directory");
            } else {
                assert!(!temp.exists(), "the temp file outlived the sweep");
            }
            assert_eq!(on_disk(&path), expected, "wake {wake}");
        }
    }

    #[test]
    fn a_one_file_change_rewrites_one_shard() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 2000);
        let total: u64 = shard_files(&path)
            .iter()
            .map(|p| fs::metadata(p).unwrap().len())
            .sum();
        state.files.get_mut("f7.js").unwrap().blob = "changed".into();
        let w = save(&path, &state).unwrap();
        assert_eq!(w.shards, 1);
        assert!(w.shard_bytes * 4 < total, "{} of {total}", w.shard_bytes);
        // Nothing changed: nothing but the manifest is written.
        let again = store::load_lazy(&path).unwrap().unwrap();
        again.files.get("f7.js");
        assert_eq!(save(&path, &again).unwrap().shards, 0);
    }

    #[test]
    fn the_import_index_finds_dependents_without_reading_every_shard() {
        let dir = tempfile::tempdir().unwrap();
        let (path, state) = saved(dir.path(), 2000);
        let dependents = state.files.importers_of("f0.js");
        assert_eq!(dependents.len(), 1999);
        let loaded = (0..state.files.buckets())
            .filter(|i| state.files.is_loaded(*i))
            .count();
        assert_eq!(loaded, 1, "only the bucket of f0.js was read");
        // A dependency dropped on one wake is gone from the index on the next.
        let mut state = state;
        state.files.get_mut("f5.js").unwrap().deps.clear();
        save(&path, &state).unwrap();
        let state = store::load_lazy(&path).unwrap().unwrap();
        let dependents = state.files.importers_of("f0.js");
        assert_eq!(dependents.len(), 1998);
        assert!(!dependents.contains("f5.js"));
    }

    /// A dependency's candidate paths each land in another shard: looking
    /// one up reads its shard's checked bytes and decodes no bucket, and a
    /// later change of a record there loads the bucket from those bytes,
    /// without reading the file again.
    #[test]
    fn a_dependency_lookup_decodes_no_whole_shard_and_a_later_load_reuses_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 2000);
        assert!(state.files.contains_key("f7.js"));
        assert!(state.files.contains_key("f1999.js"));
        assert!(!state.files.contains_key("f2000.js"));
        assert!(!state.files.contains_key("src/f7.js"));
        let loaded = (0..state.files.buckets())
            .filter(|i| state.files.is_loaded(*i))
            .count();
        assert_eq!(loaded, 0, "a lookup decoded a whole shard");
        for shard in shard_files(&path) {
            fs::remove_file(shard).unwrap();
        }
        state.files.get_mut("f7.js").unwrap().blob = "changed".into();
        assert_eq!(state.files.error(), None);
        assert_eq!(state.files.get("f7.js").unwrap().deps, ["f0.js"]);
    }

    /// A shard not laid out as the writer lays it out, or damaged, is read
    /// by a lookup as a load reads it: the same answer, the same error.
    #[test]
    fn a_lookup_in_a_shard_laid_out_otherwise_or_damaged_means_what_a_load_means() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path(), 10);
        let shard = shard_files(&path).pop().unwrap();
        // Pretty-printed by serde: the same records, named by their hash.
        let value: serde_json::Value = serde_json::from_slice(&fs::read(&shard).unwrap()).unwrap();
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        let id = hex(&Sha256::digest(&pretty));
        fs::write(dir_of(&path).join(format!("{id}.json")), &pretty).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let old = shard.file_stem().unwrap().to_str().unwrap();
        fs::write(&path, with_body_bytes(&text.replace(old, &id))).unwrap();
        let state = store::load_lazy(&path).unwrap().unwrap();
        assert!(state.files.contains_key("f3.js"));
        assert!(!state.files.contains_key("f30.js"));
        let torn = String::from_utf8(pretty)
            .unwrap()
            .replace("\"b3\"", "\"b4\"");
        fs::write(dir_of(&path).join(format!("{id}.json")), torn).unwrap();
        let state = store::load_lazy(&path).unwrap().unwrap();
        assert!(!state.files.contains_key("f3.js"));
        let err = state.files.error().unwrap();
        assert!(err.contains("does not match its name"), "{err}");
    }

    #[test]
    fn a_damaged_shard_is_named_and_nothing_is_saved() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path(), 10);
        let shard = shard_files(&path).pop().unwrap();
        let text = fs::read_to_string(&shard)
            .unwrap()
            .replace("\"b1\"", "\"b2\"");
        fs::write(&shard, text).unwrap();
        let err = store::load(&path).unwrap_err().to_string();
        assert!(err.contains("does not match its name"), "{err}");
        let state = store::load_lazy(&path).unwrap().unwrap();
        state.files.get("f1.js");
        let before = fs::read(&path).unwrap();
        let err = save(&path, &state).unwrap_err().to_string();
        assert!(err.contains("the previous state was kept"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn a_shard_counting_more_records_than_its_bytes_hold_is_refused_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = saved(dir.path(), 10);
        // One shard's count and the layout's total raised together, so the
        // totals still agree: only the shard's own size gives the lie away.
        let text = fs::read_to_string(&path).unwrap();
        let text = text
            .replace("\"records\":10", "\"records\":1000000000")
            .replace("\"n\":10", "\"n\":1000000000");
        fs::write(&path, with_body_bytes(&text)).unwrap();
        let state = store::load_lazy(&path).unwrap().unwrap();
        assert!(state.files.get("f1.js").is_none());
        let err = state.files.error().unwrap().to_string();
        assert!(err.contains("counts 1000000000 records in shard"), "{err}");
        let err = store::load(&path).unwrap_err().to_string();
        assert!(err.contains("counts 1000000000 records in shard"), "{err}");
    }

    /// The manifest `text` with its header's `body_bytes` made true again.
    fn with_body_bytes(text: &str) -> String {
        let (head, body) = text.split_once('\n').unwrap();
        let at = head.find("\"body_bytes\":").unwrap() + "\"body_bytes\":".len();
        let end = at + head[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
        format!("{}{}{}\n{body}", &head[..at], body.len(), &head[end..])
    }

    #[test]
    fn a_link_planted_at_a_shard_path_is_refused_and_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut state) = saved(dir.path(), 10);
        state.files.get_mut("f3.js").unwrap().blob = "changed".into();
        // Learn the name the next save gives the changed shard, then put
        // it back as it was and plant a link at that name.
        let probe = tempfile::tempdir().unwrap();
        fs::copy(&path, probe.path().join("state.json")).unwrap();
        let mut copy = std::process::Command::new("cp");
        copy.arg("-r")
            .arg(dir_of(&path))
            .arg(probe.path().join("state.json.d"));
        assert!(copy.status().unwrap().success());
        let probe_state = probe.path().join("state.json");
        let staged = write_shards(&probe_state, &state).unwrap();
        let new: Vec<&Saved> = staged.shards.iter().flatten().collect();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"not sentinel's").unwrap();
        for s in new {
            let p = dir_of(&path).join(format!("{}.json", s.id));
            if !p.exists() {
                std::os::unix::fs::symlink(&target, &p).unwrap();
            }
        }
        let before = fs::read(&path).unwrap();
        let err = save(&path, &state).unwrap_err().to_string();
        assert!(err.contains("link"), "{err}");
        assert_eq!(fs::read(&target).unwrap(), b"not sentinel's");
        assert_eq!(fs::read(&path).unwrap(), before);
    }
}

/// The record for `path` (`Some(None)`: none) in the shard in `bytes`,
/// bucket `bucket` of `of` holding `n` records, read by serde without
/// building the others (each is skipped as `IgnoredAny`). `None` for a
/// shard that is not that bucket or count, or does not parse: the caller
/// then loads the whole shard, which alone decides what is accepted and
/// which error is reported.
fn peek(
    bytes: &[u8],
    bucket: usize,
    of: usize,
    n: usize,
    path: &str,
) -> Option<Option<FileRecord>> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let seen = Peek { path }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    (seen.bucket == Some(bucket) && seen.of == Some(of) && seen.count == n).then_some(seen.found)
}

/// What `peek` looks for.
struct Peek<'p> {
    path: &'p str,
}

/// What `peek` saw of a shard.
#[derive(Default)]
struct Peeked {
    bucket: Option<usize>,
    of: Option<usize>,
    count: usize,
    found: Option<FileRecord>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Peek<'_> {
    type Value = Peeked;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Peeked, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Peek<'_> {
    type Value = Peeked;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a shard")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Peeked, A::Error> {
        use serde::de::IgnoredAny;
        let mut seen = Peeked::default();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "bucket" => seen.bucket = Some(map.next_value()?),
                "of" => seen.of = Some(map.next_value()?),
                "files" => {
                    let (count, found) = map.next_value_seed(PeekFiles { path: self.path })?;
                    (seen.count, seen.found) = (count, found);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(seen)
    }
}

/// The `files` of a shard: how many, and the record of one path.
struct PeekFiles<'p> {
    path: &'p str,
}

impl<'de> serde::de::DeserializeSeed<'de> for PeekFiles<'_> {
    type Value = (usize, Option<FileRecord>);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for PeekFiles<'_> {
    type Value = (usize, Option<FileRecord>);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a shard's records by path")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut count, mut found) = (0, None);
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            count += 1;
            if key == self.path {
                found = Some(map.next_value::<FileRecord>()?);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok((count, found))
    }
}
