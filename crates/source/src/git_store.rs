//! The clone's object store read in-process through gix: the branch tip,
//! the head (the latest commit touching the watched path), the listing at a
//! commit, the tree diff of a wake, the rollback lookup and blob reads, all
//! without starting git.
//!
//! `Store::open` declines a repository whose objects or refs gix would not
//! read as git does (reftable, a partial clone whose missing objects only
//! git can fetch, replace refs, git's environment overrides, a reduced
//! trust), and the source then asks git for everything: the reader is
//! chosen once per repository, never per object.
//!
//! Every object is checked before it is used: its size (from the header,
//! before anything is inflated) against a limit, its kind, and its bytes
//! hashed against its id, so a decoy pack or a forged loose object is
//! refused rather than judged. Tree walks keep their own stack and stop at
//! git's depth limit.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::bstr::{BStr, BString, ByteSlice, ByteVec};
use gix::diff::tree::{Visit, visit};
use gix::objs::tree::EntryKind;
use gix::objs::{CommitRefIter, Kind, TreeRefIter};

use super::{Change, Entry};

/// The deepest directory git 2.47 lists (`core.maxTreeDepth`, 2048 by
/// default there): `ls-tree` refuses a deeper tree, and so does this reader.
pub(crate) const MAX_TREE_DEPTH: usize = 2048;

/// The largest tree or commit read: a directory of about a million names.
const MAX_META_BYTES: u64 = 64 << 20;

/// The most annotated tags followed from a ref to its commit.
const MAX_PEEL: usize = 16;

/// The most commits the rollback lookup walks here; a longer range (or one
/// that is not a line) is left to `git log`.
const MAX_LINE: usize = 1000;

/// Delta bases kept in memory: git writes a file's versions as chains of up
/// to 50 deltas, and without a cache each read inflates its whole chain.
const PACK_CACHE_BYTES: usize = 64 << 20;

/// Environment that makes git read other objects than the clone's own
/// files say; gix, opened isolated, would not follow it.
const OVERRIDES: [&str; 2] = ["GIT_REPLACE_REF_BASE", "GIT_NO_REPLACE_OBJECTS"];

/// Why an answer could not be given.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The revision names no commit (unknown, unborn, or not a commit).
    NoRevision(String),
    /// The object is larger than the limit; nothing of it was inflated.
    TooLarge { size: u64, limit: u64 },
    /// Anything else: missing, corrupt, forged, too deep.
    Broken(String),
}

fn broken(what: impl std::fmt::Display) -> Failure {
    Failure::Broken(what.to_string())
}

/// A clone opened through gix.
pub(crate) struct Store {
    repo: gix::Repository,
    /// The clone's own object directory, where a loose object is looked
    /// for before gix opens it.
    objects: PathBuf,
    /// Per fan-out directory (`objects/ab`) read so far, the names in it
    /// that are not regular files: one directory read each, not one
    /// `lstat` per object (a first run reads 100,000).
    odd: RefCell<HashMap<String, Vec<String>>>,
    /// Commits whose parents a shallow clone does not hold: git takes them
    /// for roots.
    shallow: Vec<ObjectId>,
}

impl Store {
    /// The clone at `repo` (its work tree or, bare, its git directory),
    /// watched at `rev`; `None` when git must read it.
    pub(crate) fn open(repo: &Path, rev: &str) -> Option<Store> {
        if OVERRIDES.iter().any(|v| std::env::var_os(v).is_some()) || !plain_rev(rev) {
            return None;
        }
        let mut repo = gix::open_opts(repo, gix::open::Options::isolated()).ok()?;
        // git refuses a clone of another owner (`safe.directory`); the
        // source then says so through git's own message.
        if repo.git_dir_trust() != gix::sec::Trust::Full || declined(&repo) {
            return None;
        }
        let objects = repo.objects.store_ref().path().to_path_buf();
        if planted(&objects) {
            return None;
        }
        repo.objects.set_pack_cache(|| {
            Box::new(gix::odb::pack::cache::lru::StaticLinkedList::<64>::new(
                PACK_CACHE_BYTES,
            ))
        });
        let shallow = match repo.shallow_commits().ok()? {
            Some(commits) => commits.iter().copied().collect(),
            None => Vec::new(),
        };
        Some(Store {
            repo,
            objects,
            odd: RefCell::default(),
            shallow,
        })
    }

    /// The commit `rev` names: a full id, `HEAD`, or a ref as git spells
    /// it out (`main` is `refs/heads/main` unless a tag of that name
    /// comes first, as in git); annotated tags are followed to it.
    pub(crate) fn tip(&self, rev: &str) -> Result<ObjectId, Failure> {
        let unknown = || Failure::NoRevision(format!("unknown revision `{rev}`"));
        let mut id = if is_hex_id(rev) {
            ObjectId::from_hex(rev.as_bytes()).map_err(broken)?
        } else {
            let mut reference = self
                .repo
                .try_find_reference(rev)
                .map_err(|_| unknown())?
                .ok_or_else(unknown)?;
            reference.peel_to_id().map_err(|_| unknown())?.detach()
        };
        for _ in 0..MAX_PEEL {
            let header = self.repo.try_find_header(id).map_err(broken)?;
            match header.map(|h| h.kind()) {
                Some(Kind::Commit) => return Ok(id),
                Some(Kind::Tag) => {
                    let bytes = self.object(&id, Kind::Tag, MAX_META_BYTES)?;
                    id = gix::objs::TagRefIter::from_bytes(&bytes, self.hash())
                        .target_id()
                        .map_err(broken)?;
                }
                _ => return Err(unknown()),
            }
        }
        Err(unknown())
    }

    /// Whether `rev` names the object `id` itself: symbolic refs are
    /// followed, nothing is peeled and no object is looked up. A no-op
    /// asks only this of a remembered tip, so it loads no pack index:
    /// gix checks an index's whole offset table as it loads it, a cost
    /// that grows with the clone.
    pub(crate) fn names(&self, rev: &str, id: &str) -> bool {
        let Ok(want) = parse_id(id) else {
            return false;
        };
        let named = if is_hex_id(rev) {
            ObjectId::from_hex(rev.as_bytes()).ok()
        } else {
            self.repo
                .try_find_reference(rev)
                .ok()
                .flatten()
                .and_then(|mut reference| reference.follow_to_object().ok())
                .map(|id| id.detach())
        };
        named == Some(want)
    }

    /// The latest commit from `tip` that touches `watched` (`None`: the
    /// whole repository), as `git log -1 <tip> -- <watched>` finds it: a
    /// merge the path is the same in as in one of its parents is passed
    /// over along that parent. `None` when no commit touches it.
    pub(crate) fn head(
        &self,
        tip: ObjectId,
        watched: &[&[u8]],
    ) -> Result<Option<ObjectId>, Failure> {
        if watched.is_empty() {
            return Ok(Some(tip));
        }
        let mut at = tip;
        loop {
            let (tree, parents) = self.commit(&at)?;
            let mine = self.at_path(tree, watched)?;
            if parents.is_empty() {
                return Ok(mine.is_some().then_some(at));
            }
            let mut same = None;
            for parent in parents {
                let (tree, _) = self.commit(&parent)?;
                if self.at_path(tree, watched)? == mine {
                    same = Some(parent);
                    break;
                }
            }
            match same {
                Some(parent) => at = parent,
                None => return Ok(Some(at)),
            }
        }
    }

    /// Every regular or executable file under `watched` at commit `at`,
    /// sorted by path: what `git ls-tree -r --full-tree` lists.
    pub(crate) fn list(&self, at: &str, watched: &[&[u8]]) -> Result<Vec<Entry>, Failure> {
        let (root, _) = self.commit(&parse_id(at)?)?;
        let mut entries = Vec::new();
        match self.at_path(root, watched)? {
            None => {}
            Some((EntryKind::Tree, id)) => {
                self.walk(watched.join(&b'/'), id, watched.len(), &mut entries)?
            }
            Some((kind, id)) => {
                if matches!(kind, EntryKind::Blob | EntryKind::BlobExecutable) {
                    entries.push(entry(&watched.join(&b'/'), &id));
                }
            }
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }

    /// The files below the tree `root` (at `dir`, `depth` levels down),
    /// walked with a stack of its own: a tree thousands of levels deep
    /// costs memory, never the call stack, and stops at git's limit.
    fn walk(
        &self,
        dir: Vec<u8>,
        root: ObjectId,
        depth: usize,
        out: &mut Vec<Entry>,
    ) -> Result<(), Failure> {
        let mut stack = vec![(dir, root, depth)];
        while let Some((dir, id, depth)) = stack.pop() {
            if depth > MAX_TREE_DEPTH {
                return Err(too_deep());
            }
            let bytes = self.object(&id, Kind::Tree, MAX_META_BYTES)?;
            for e in TreeRefIter::from_bytes(&bytes, self.hash()) {
                let e = e.map_err(broken)?;
                let mut path = dir.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(e.filename);
                match e.mode.kind() {
                    EntryKind::Tree => stack.push((path, e.oid.to_owned(), depth + 1)),
                    EntryKind::Blob | EntryKind::BlobExecutable => out.push(entry(&path, e.oid)),
                    EntryKind::Link | EntryKind::Commit => {}
                }
            }
        }
        Ok(())
    }

    /// What `git diff-tree -r <from> <to> -- <watched>` reports: a path
    /// added or modified as a regular file is an upsert, anything else that
    /// changed (deleted, now a link or a submodule) a delete. In path order.
    pub(crate) fn changes(
        &self,
        from: &str,
        to: &str,
        watched: &[&[u8]],
    ) -> Result<Vec<Change>, Failure> {
        let (old, _) = self.commit(&parse_id(from)?)?;
        let (new, _) = self.commit(&parse_id(to)?)?;
        let mut collect = Collect::new(watched);
        self.diff(old, new, &mut collect)?;
        let mut changes: Vec<(Vec<u8>, Change)> = collect
            .found
            .into_iter()
            .map(|(path, blob)| {
                let name = String::from_utf8_lossy(&path).into_owned();
                let change = match blob {
                    Some(blob) => Change::Upsert { path: name, blob },
                    None => Change::Delete { path: name },
                };
                (path, change)
            })
            .collect();
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(changes.into_iter().map(|(_, c)| c).collect())
    }

    /// gix's tree diff of two root trees, over objects checked as every
    /// other read here; a tree deeper than git's limit ends it.
    fn diff(&self, old: ObjectId, new: ObjectId, collect: &mut Collect) -> Result<(), Failure> {
        let lhs = self.object(&old, Kind::Tree, MAX_META_BYTES)?;
        let rhs = self.object(&new, Kind::Tree, MAX_META_BYTES)?;
        let result = gix::diff::tree(
            TreeRefIter::from_bytes(&lhs, self.hash()),
            TreeRefIter::from_bytes(&rhs, self.hash()),
            gix::diff::tree::State::default(),
            Checked(self),
            collect,
        );
        match result {
            Ok(()) => Ok(()),
            Err(_) if collect.too_deep => Err(too_deep()),
            Err(e) => Err(broken(format!("tree diff failed: {e}"))),
        }
    }

    /// For each revert commit (subject `Revert "...`) in `from..to` that
    /// touches `watched`, the watched paths it changed, newest first, as
    /// `git log --name-only from..to -- <watched>` lists them. `None` when
    /// the range is not one line of at most `MAX_LINE` commits down to
    /// `from`: git answers that.
    pub(crate) fn reverts(
        &self,
        from: &str,
        to: &str,
        watched: &[&[u8]],
    ) -> Result<Option<Vec<Vec<String>>>, Failure> {
        let from = parse_id(from)?;
        let mut at = parse_id(to)?;
        let mut reverts = Vec::new();
        for _ in 0..MAX_LINE {
            if at == from {
                return Ok(Some(reverts));
            }
            let (tree, parents) = self.commit(&at)?;
            let [parent] = parents[..] else {
                return Ok(None);
            };
            if self.is_revert(&at)? {
                let (old, _) = self.commit(&parent)?;
                let mut collect = Collect::new(watched);
                self.diff(old, tree, &mut collect)?;
                let mut paths: Vec<String> = collect
                    .found
                    .into_iter()
                    .map(|(p, _)| String::from_utf8_lossy(&p).into_owned())
                    .collect();
                paths.sort();
                paths.dedup();
                // A commit that leaves the watched path alone is not
                // listed when a path is given.
                if !paths.is_empty() || watched.is_empty() {
                    reverts.push(paths);
                }
            }
            at = parent;
        }
        Ok(None)
    }

    /// Whether the commit's subject starts with `Revert "`.
    fn is_revert(&self, id: &ObjectId) -> Result<bool, Failure> {
        let bytes = self.object(id, Kind::Commit, MAX_META_BYTES)?;
        let commit = gix::objs::CommitRef::from_bytes(&bytes, self.hash()).map_err(broken)?;
        let message = commit.message.trim_start_with(|c| c == '\n');
        Ok(message.starts_with(b"Revert \""))
    }

    /// The bytes of the blob `id`, refused when over `limit` bytes.
    pub(crate) fn read(&self, id: &str, limit: u64) -> Result<Vec<u8>, Failure> {
        self.object(&parse_id(id)?, Kind::Blob, limit)
    }

    /// The object `id`, of kind `want`: its size is checked from its header
    /// before anything is inflated, and its bytes are hashed against its
    /// id, so what comes back is the object the id names or nothing.
    fn object(&self, id: &gix::oid, want: Kind, limit: u64) -> Result<Vec<u8>, Failure> {
        // gix opens a loose object as it finds it: a FIFO planted there
        // (the agent's worktree shares the clone's git directory) would
        // hold the tick forever, a link would lead elsewhere.
        if self.planted_at(id) {
            return Err(broken(format!("object {id} is not a regular file")));
        }
        let header = self
            .repo
            .try_find_header(id)
            .map_err(|e| broken(format!("object {id} cannot be read: {e}")))?
            .ok_or_else(|| broken(format!("object {id} is missing")))?;
        if header.kind() != want {
            return Err(broken(format!(
                "object {id} is a {}, not a {want}",
                header.kind()
            )));
        }
        if header.size() > limit {
            return Err(Failure::TooLarge {
                size: header.size(),
                limit,
            });
        }
        let object = self
            .repo
            .try_find_object(id)
            .map_err(|e| broken(format!("object {id} cannot be read: {e}")))?
            .ok_or_else(|| broken(format!("object {id} is missing")))?;
        let actual =
            gix::objs::compute_hash(self.hash(), object.kind, &object.data).map_err(broken)?;
        if object.kind != want || actual != id || object.data.len() as u64 > limit {
            return Err(broken(format!(
                "object {id} does not hold what its id names"
            )));
        }
        Ok(object.detach().data)
    }

    /// Whether the loose object file of `id` is there as anything but a
    /// regular file (a link, a FIFO, a directory).
    fn planted_at(&self, id: &gix::oid) -> bool {
        let hex = id.to_hex().to_string();
        let (dir, name) = hex.split_at(2);
        let mut odd = self.odd.borrow_mut();
        let names = odd.entry(dir.to_string()).or_insert_with(|| {
            std::fs::read_dir(self.objects.join(dir))
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().map_or(true, |t| !t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        });
        names.iter().any(|n| n == name)
    }

    /// A commit's root tree and its parents (none past a shallow boundary).
    fn commit(&self, id: &ObjectId) -> Result<(ObjectId, Vec<ObjectId>), Failure> {
        let bytes = self.object(id, Kind::Commit, MAX_META_BYTES)?;
        let mut iter = CommitRefIter::from_bytes(&bytes, self.hash());
        let tree = iter.tree_id().map_err(broken)?;
        let parents = if self.shallow.contains(id) {
            Vec::new()
        } else {
            iter.parent_ids().collect()
        };
        Ok((tree, parents))
    }

    /// What `path` names below the tree `root`: its kind and id.
    fn at_path(
        &self,
        root: ObjectId,
        path: &[&[u8]],
    ) -> Result<Option<(EntryKind, ObjectId)>, Failure> {
        let mut node = (EntryKind::Tree, root);
        for part in path {
            if node.0 != EntryKind::Tree {
                return Ok(None);
            }
            let bytes = self.object(&node.1, Kind::Tree, MAX_META_BYTES)?;
            let mut found = None;
            for e in TreeRefIter::from_bytes(&bytes, self.hash()) {
                let e = e.map_err(broken)?;
                if e.filename.as_bytes() == *part {
                    found = Some((e.mode.kind(), e.oid.to_owned()));
                    break;
                }
            }
            match found {
                Some(next) => node = next,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    fn hash(&self) -> gix::hash::Kind {
        self.repo.object_hash()
    }
}

/// Whether the clone holds what gix does not read as git does.
fn declined(repo: &gix::Repository) -> bool {
    let common = repo.common_dir();
    let config = repo.config_snapshot();
    let partial = config.string("extensions.partialClone").is_some()
        || config
            .plumbing()
            .sections_by_name("remote")
            .into_iter()
            .flatten()
            .any(|s| {
                s.value("promisor")
                    .is_some_and(|v| v.as_bytes() != b"false")
            });
    let reftable = common.join("reftable").exists()
        || config
            .string("extensions.refStorage")
            .is_some_and(|v| v.as_bytes() != b"files");
    // gix would hand back a replacement's bytes under the original id,
    // which the hash check refuses: git reads those repositories.
    let replaced = repo
        .references()
        .and_then(|refs| {
            refs.prefixed("refs/replace/")
                .map(|mut i| i.next().is_some())
        })
        .unwrap_or(true);
    let grafts = common.join("info/grafts").exists();
    partial || reftable || replaced || grafts
}

/// Whether the object directory holds, where gix opens files without
/// looking (the packs, the alternates list), anything but regular files: a
/// FIFO would hold the tick forever. git reads such a clone.
fn planted(objects: &Path) -> bool {
    let odd = |path: &Path| std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file());
    if odd(&objects.join("info/alternates")) {
        return true;
    }
    match std::fs::read_dir(objects.join("pack")) {
        Ok(entries) => entries
            .flatten()
            .any(|e| e.file_type().map_or(true, |t| !t.is_file())),
        Err(_) => false,
    }
}

/// `HEAD`, a full id, or a ref name (no revision expression such as
/// `main~1` or `@{u}`, which git evaluates).
fn plain_rev(rev: &str) -> bool {
    !rev.is_empty()
        && rev
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
        && !rev.split('/').any(|p| p.is_empty() || p.starts_with('.'))
        && !rev.contains("..")
        && !rev.ends_with(".lock")
}

fn is_hex_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn parse_id(id: &str) -> Result<ObjectId, Failure> {
    if !is_hex_id(id) {
        return Err(broken(format!("`{id}` is not an object id")));
    }
    ObjectId::from_hex(id.as_bytes()).map_err(broken)
}

fn too_deep() -> Failure {
    broken(format!(
        "a tree is deeper than git's limit of {MAX_TREE_DEPTH} levels"
    ))
}

fn entry(path: &[u8], id: &gix::oid) -> Entry {
    Entry {
        // Lossy, as the listing through git is.
        path: String::from_utf8_lossy(path).into_owned(),
        blob: id.to_hex().to_string(),
    }
}

/// The object store as gix's tree diff reads it, through `Store::object`.
struct Checked<'a>(&'a Store);

impl gix::objs::Find for Checked<'_> {
    fn try_find<'a>(
        &self,
        id: &gix::oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix::Result<Option<gix::objs::Data<'a>>> {
        match self.0.object(id, Kind::Tree, MAX_META_BYTES) {
            Ok(bytes) => {
                *buffer = bytes;
                Ok(Some(gix::objs::Data::new(
                    buffer,
                    Kind::Tree,
                    self.0.hash(),
                )))
            }
            Err(failure) => Err(gix::Error::from_error(std::io::Error::other(format!(
                "{failure:?}"
            )))),
        }
    }
}

/// The changed paths under the watched path, from gix's tree diff: each
/// with the blob it now holds when it is a regular file (`None`: deleted,
/// or no longer a regular file). Tracks the path as gix's `Recorder` does.
struct Collect {
    watched: Vec<u8>,
    path: BString,
    queue: VecDeque<BString>,
    found: Vec<(Vec<u8>, Option<String>)>,
    too_deep: bool,
}

impl Collect {
    fn new(watched: &[&[u8]]) -> Collect {
        Collect {
            watched: watched.join(&b'/'),
            path: BString::default(),
            queue: VecDeque::new(),
            found: Vec::new(),
            too_deep: false,
        }
    }

    fn push(&mut self, name: &BStr) {
        if name.is_empty() {
            return;
        }
        if !self.path.is_empty() {
            self.path.push(b'/');
        }
        self.path.push_str(name);
    }

    fn watched(&self) -> bool {
        let path: &[u8] = self.path.as_ref();
        self.watched.is_empty()
            || path == self.watched.as_slice()
            || (path.starts_with(&self.watched) && path.get(self.watched.len()) == Some(&b'/'))
    }
}

impl Visit for Collect {
    fn pop_front_tracked_path_and_set_current(&mut self) {
        self.path = self.queue.pop_front().unwrap_or_default();
    }

    fn push_back_tracked_path_component(&mut self, component: &BStr) {
        self.push(component);
        self.queue.push_back(self.path.clone());
    }

    fn push_path_component(&mut self, component: &BStr) {
        self.push(component);
    }

    fn pop_path_component(&mut self) {
        match self.path.rfind_byte(b'/') {
            Some(at) => self.path.truncate(at),
            None => self.path.clear(),
        }
    }

    fn visit(&mut self, change: visit::Change) -> visit::Action {
        let mode = change.entry_mode();
        let depth = self.path.iter().filter(|b| **b == b'/').count() + 1;
        if mode.is_tree() && depth >= MAX_TREE_DEPTH {
            self.too_deep = true;
            return std::ops::ControlFlow::Break(());
        }
        let was_tree = match &change {
            visit::Change::Modification {
                previous_entry_mode,
                ..
            } => previous_entry_mode.is_tree(),
            _ => mode.is_tree(),
        };
        // A directory's own entry: its files come as changes of their own.
        if (mode.is_tree() && was_tree) || !self.watched() {
            return std::ops::ControlFlow::Continue(());
        }
        let regular = matches!(mode.kind(), EntryKind::Blob | EntryKind::BlobExecutable);
        let blob = match change {
            visit::Change::Deletion { .. } => None,
            _ if regular => Some(change.oid().to_hex().to_string()),
            _ => None,
        };
        self.found.push((self.path.to_vec(), blob));
        std::ops::ControlFlow::Continue(())
    }
}
