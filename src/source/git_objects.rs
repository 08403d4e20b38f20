//! The walk of `git_walk` computed from the commit and tree objects
//! themselves, read through the `cat-file --batch` child that then reads
//! the wake's contents: a small wake starts one git process, not two.
//!
//! The answer must be exactly what `git_walk::read` makes of `git log
//! --raw` over the same range, so everything this reader is not sure of (a
//! merge, a root, a missing or oversized object, a mode or a tree git
//! itself would have to normalise, a message in another encoding, a range
//! longer than the walk takes) gives `None`, and the log walk answers.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::rc::Rc;

use super::Change;
use super::git_walk::{MAX_BYTES, MAX_COMMITS, Walk};

/// SHA-1 object ids: the only ones read here (a SHA-256 repository's ids
/// are longer, and give way to the log walk).
const ID_LEN: usize = 20;

/// An object's kind (`commit`, `tree`, ...) and bytes.
pub(crate) type Object = (String, Vec<u8>);

/// Objects by id, as `cat-file --batch` answers them.
pub(crate) trait Objects {
    /// Each of `ids`, in order, asked all at once so that a round trip
    /// costs one wait for git, not one per object; `None` for one that is
    /// missing, larger than `limit` bytes, or could not be read.
    fn objects(&mut self, ids: &[String], limit: u64) -> Vec<Option<Object>>;
}

/// The most ids asked at once: all of them (41 bytes each) fit in one page
/// of the pipe to git, its smallest size, so the writing never waits for
/// git to read while git waits for its answers to be read.
const MAX_BATCH: usize = 64;

/// A tree entry's kind, by its mode; only the modes git writes itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Tree,
    File,
    Exec,
    Link,
    Gitlink,
}

impl Kind {
    fn parse(mode: &[u8]) -> Option<Kind> {
        Some(match mode {
            b"40000" => Kind::Tree,
            b"100644" => Kind::File,
            b"100755" => Kind::Exec,
            b"120000" => Kind::Link,
            b"160000" => Kind::Gitlink,
            _ => return None,
        })
    }
}

/// What a path names at one commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Node {
    pub(super) kind: Kind,
    pub(super) id: [u8; ID_LEN],
}

/// A tree object parsed in place: its bytes, and where each entry's name
/// lies in them (no copy of a name: a wake parses directories of
/// thousands of entries to find the one that changed).
pub(super) struct Tree {
    bytes: Vec<u8>,
    entries: Vec<(u32, u32, Node)>,
}

impl Tree {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn name(&self, i: usize) -> &[u8] {
        let (start, end, _) = self.entries[i];
        &self.bytes[start as usize..end as usize]
    }

    pub(super) fn node(&self, i: usize) -> Node {
        self.entries[i].2
    }

    /// Each entry's name and what it names, in the tree's order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], Node)> {
        (0..self.len()).map(|i| (self.name(i), self.node(i)))
    }

    pub(super) fn find(&self, name: &[u8]) -> Option<Node> {
        self.iter().find(|(n, _)| *n == name).map(|(_, node)| node)
    }
}

/// Git's order of tree entries: a directory's name compares as if it ended
/// in `/`.
fn order(a: &[u8], a_kind: Kind, b: &[u8], b_kind: Kind) -> Ordering {
    let n = a.len().min(b.len());
    match a[..n].cmp(&b[..n]) {
        Ordering::Equal => {}
        unequal => return unequal,
    }
    let next = |name: &[u8], kind: Kind| {
        name.get(n)
            .copied()
            .or((kind == Kind::Tree).then_some(b'/'))
    };
    // `None` (the name ended) sorts first, as the shorter byte string does.
    next(a, a_kind).cmp(&next(b, b_kind))
}

pub(super) struct Commit {
    pub(super) tree: [u8; ID_LEN],
    parents: Vec<String>,
    /// Whether its subject (as `%s` prints it) starts with `Revert "`.
    revert: bool,
}

/// One path whose (kind, id) differs between two trees.
struct Differs {
    path: Vec<u8>,
    new: Option<Node>,
}

struct Reader<'a> {
    objects: &'a mut dyn Objects,
    /// Bytes that may still be read for this walk.
    budget: u64,
    /// Answers fetched ahead of their use, by id.
    fetched: HashMap<String, Option<Object>>,
    trees: HashMap<[u8; ID_LEN], Rc<Tree>>,
}

/// Why the objects did not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveWay {
    /// The commits are not one short line (a merge, a root, more than the
    /// walk takes): `git log` would see the same and give way too.
    NotOneLine,
    /// Anything else: `git log` may still answer.
    Unsure,
}

/// The walk from `from` to `tip` for the watched path (`None`: the whole
/// repository), or why the objects cannot answer it exactly.
pub(crate) fn walk(
    objects: &mut dyn Objects,
    from: &str,
    tip: &str,
    watched: Option<&str>,
) -> Result<Walk, GaveWay> {
    let parts = components(watched).ok_or(GaveWay::Unsure)?;
    let mut reader = Reader {
        objects,
        budget: MAX_BYTES,
        fetched: HashMap::new(),
        trees: HashMap::new(),
    };
    let line = reader.line(from, tip)?;
    along(&mut reader, line, from, (watched, &parts)).ok_or(GaveWay::Unsure)
}

/// The walk over `line`, the commits above `from`, newest first.
fn along(
    reader: &mut Reader,
    line: Vec<(String, Commit)>,
    from: &str,
    (watched, parts): (Option<&str>, &[&[u8]]),
) -> Option<Walk> {
    let prefix = watched.unwrap_or("").as_bytes();
    let base = reader.commit(from)?;
    let roots: Vec<[u8; ID_LEN]> = line
        .iter()
        .map(|(_, c)| c.tree)
        .chain([base.tree])
        .collect();
    let mut nodes = reader.at(&roots, parts)?;
    let base = nodes.pop()?;
    let mut head = None;
    let mut reverts = Vec::new();
    // One commit's own diff is the whole range's.
    let mut only = None;
    for (i, (id, commit)) in line.iter().enumerate() {
        let parent = nodes.get(i + 1).copied().unwrap_or(base);
        if parent == nodes[i] {
            continue;
        }
        let differs = reader.diff(prefix, parent, nodes[i])?;
        if differs.is_empty() {
            continue;
        }
        head.get_or_insert_with(|| id.clone());
        if commit.revert {
            reverts.push(touched(&differs));
        }
        if line.len() == 1 {
            only = Some(differs);
        }
    }
    let differs = match only {
        Some(differs) => differs,
        None => reader.diff(prefix, base, nodes[0])?,
    };
    let changes = differs
        .into_iter()
        .map(|d| {
            // Lossy, as the compare's own paths are.
            let path = String::from_utf8_lossy(&d.path).into_owned();
            match d.new {
                Some(Node {
                    kind: Kind::File | Kind::Exec,
                    id,
                }) => Change::Upsert {
                    path,
                    blob: hex(&id),
                },
                _ => Change::Delete { path },
            }
        })
        .collect();
    Some(Walk {
        from: from.to_string(),
        head: head.unwrap_or_else(|| from.to_string()),
        changes,
        reverts,
    })
}

/// The watched path's names, one per directory level; `None` for a name
/// git would not read as the same path.
pub(super) fn components(watched: Option<&str>) -> Option<Vec<&[u8]>> {
    let Some(w) = watched else {
        return Some(Vec::new());
    };
    let parts: Vec<&[u8]> = w.split('/').map(str::as_bytes).collect();
    parts
        .iter()
        .all(|p| !p.is_empty() && *p != b"." && *p != b"..")
        .then_some(parts)
}

/// The paths a revert touched: sorted, once each (as the rollback lookup
/// answers).
fn touched(differs: &[Differs]) -> Vec<String> {
    let mut paths: Vec<String> = differs
        .iter()
        .map(|d| {
            String::from_utf8_lossy(&d.path)
                .trim_matches('\n')
                .to_string()
        })
        .filter(|p| !p.is_empty())
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

impl Reader<'_> {
    /// The commits from `tip` down to `from` (excluded), newest first, when
    /// each has one parent and `from` is reached within the bound.
    fn line(&mut self, from: &str, tip: &str) -> Result<Vec<(String, Commit)>, GaveWay> {
        if from.len() != 2 * ID_LEN || tip.len() != 2 * ID_LEN || from == tip {
            return Err(GaveWay::Unsure);
        }
        let mut line = Vec::new();
        let mut id = tip.to_string();
        // Most wakes are one commit on the remembered head: both at once.
        self.fetch(&[tip.to_string(), from.to_string()]);
        while id != from {
            if line.len() == MAX_COMMITS {
                return Err(GaveWay::NotOneLine);
            }
            let commit = self.commit(&id).ok_or(GaveWay::Unsure)?;
            let [parent] = &commit.parents[..] else {
                return Err(GaveWay::NotOneLine);
            };
            let parent = parent.clone();
            line.push((std::mem::replace(&mut id, parent), commit));
        }
        Ok(line)
    }

    /// Asks for the `ids` not fetched yet, all at once, within the budget.
    fn fetch(&mut self, ids: &[String]) {
        let mut wanted: Vec<String> = Vec::new();
        for id in ids {
            if !self.fetched.contains_key(id) && !wanted.contains(id) {
                wanted.push(id.clone());
            }
        }
        for batch in wanted.chunks(MAX_BATCH) {
            let answers = self.objects.objects(batch, self.budget);
            for (id, answer) in batch.iter().zip(answers) {
                let answer =
                    answer.filter(
                        |(_, bytes)| match self.budget.checked_sub(bytes.len() as u64) {
                            Some(left) => {
                                self.budget = left;
                                true
                            }
                            None => false,
                        },
                    );
                self.fetched.insert(id.clone(), answer);
            }
        }
    }

    /// Asks for the trees among `ids` not read yet, all at once.
    fn fetch_trees(&mut self, ids: impl IntoIterator<Item = [u8; ID_LEN]>) {
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|id| !self.trees.contains_key(id))
            .map(|id| hex(&id))
            .collect();
        self.fetch(&ids);
    }

    fn read(&mut self, id: &str, kind: &str) -> Option<Vec<u8>> {
        if !self.fetched.contains_key(id) {
            self.fetch(&[id.to_string()]);
        }
        let (got, bytes) = self.fetched.remove(id)??;
        (got == kind).then_some(bytes)
    }

    fn commit(&mut self, id: &str) -> Option<Commit> {
        parse_commit(&self.read(id, "commit")?)
    }

    fn tree(&mut self, id: [u8; ID_LEN]) -> Option<Rc<Tree>> {
        if let Some(entries) = self.trees.get(&id) {
            return Some(entries.clone());
        }
        let entries = Rc::new(parse_tree(self.read(&hex(&id), "tree")?)?);
        self.trees.insert(id, entries.clone());
        Some(entries)
    }

    /// What `parts` names below each of the root trees `roots` (`None`
    /// where nothing), one level of all of them at a time.
    fn at(&mut self, roots: &[[u8; ID_LEN]], parts: &[&[u8]]) -> Option<Vec<Option<Node>>> {
        let mut nodes: Vec<Option<Node>> = roots
            .iter()
            .map(|&id| {
                Some(Node {
                    kind: Kind::Tree,
                    id,
                })
            })
            .collect();
        for part in parts {
            let trees = nodes.iter().flatten().filter(|n| n.kind == Kind::Tree);
            self.fetch_trees(trees.map(|n| n.id).collect::<Vec<_>>());
            for node in &mut nodes {
                *node = match *node {
                    Some(n) if n.kind == Kind::Tree => self.tree(n.id)?.find(part),
                    _ => None,
                };
            }
        }
        Some(nodes)
    }

    /// Every path at or under `path` whose leaf (kind, id) differs between
    /// `old` and `new`, sorted by path bytes, as `diff-tree -r` lists them.
    fn diff(&mut self, path: &[u8], old: Option<Node>, new: Option<Node>) -> Option<Vec<Differs>> {
        let mut out = Vec::new();
        self.diff_into(path, old, new, &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Some(out)
    }

    fn diff_into(
        &mut self,
        path: &[u8],
        old: Option<Node>,
        new: Option<Node>,
        out: &mut Vec<Differs>,
    ) -> Option<()> {
        if old == new {
            return Some(());
        }
        // A tree and a leaf at the same path are two unrelated entries to
        // git (`a` and `a/` are told apart), as they are here.
        let split = |n: Option<Node>| match n {
            Some(n) if n.kind == Kind::Tree => (Some(n.id), None),
            leaf => (None, leaf),
        };
        let ((old_tree, old_leaf), (new_tree, new_leaf)) = (split(old), split(new));
        if old_leaf != new_leaf {
            out.push(Differs {
                path: path.to_vec(),
                new: new_leaf,
            });
        }
        if old_tree == new_tree {
            return Some(());
        }
        self.fetch_trees(old_tree.into_iter().chain(new_tree));
        let empty = Rc::new(Tree {
            bytes: Vec::new(),
            entries: Vec::new(),
        });
        let olds = match old_tree {
            Some(id) => self.tree(id)?,
            None => empty.clone(),
        };
        let news = match new_tree {
            Some(id) => self.tree(id)?,
            None => empty,
        };
        let mut pairs = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < olds.len() || j < news.len() {
            let order = match (i < olds.len(), j < news.len()) {
                (true, true) => {
                    let (a, b) = (olds.node(i), news.node(j));
                    // Most entries of a changed directory did not change.
                    if a == b && olds.name(i) == news.name(j) {
                        i += 1;
                        j += 1;
                        continue;
                    }
                    order(olds.name(i), a.kind, news.name(j), b.kind)
                }
                (true, false) => Ordering::Less,
                _ => Ordering::Greater,
            };
            let pair = match order {
                Ordering::Less => (olds.name(i), Some(olds.node(i)), None),
                Ordering::Greater => (news.name(j), None, Some(news.node(j))),
                Ordering::Equal => (olds.name(i), Some(olds.node(i)), Some(news.node(j))),
            };
            if pair.1 != pair.2 {
                pairs.push(pair);
            }
            i += usize::from(order != Ordering::Greater);
            j += usize::from(order != Ordering::Less);
        }
        // The subtrees the pairs need, asked in one round trip.
        let subtrees = pairs.iter().flat_map(|(_, a, b)| [*a, *b]).flatten();
        self.fetch_trees(subtrees.filter(|n| n.kind == Kind::Tree).map(|n| n.id));
        for (name, a, b) in pairs {
            let mut child = path.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(name);
            self.diff_into(&child, a, b, out)?;
        }
        Some(())
    }
}

/// A commit's `tree` and `parent` headers (before the first blank line;
/// lines starting with a space continue a `gpgsig` or `mergetag`), and
/// whether its subject marks a revert.
pub(super) fn parse_commit(bytes: &[u8]) -> Option<Commit> {
    let (headers, message) = match find(bytes, b"\n\n") {
        Some(at) => (&bytes[..at], &bytes[at + 2..]),
        None => (bytes.strip_suffix(b"\n").unwrap_or(bytes), &b""[..]),
    };
    let mut lines = headers.split(|b| *b == b'\n').peekable();
    let tree = unhex(lines.next()?.strip_prefix(b"tree ")?)?;
    let mut parents = Vec::new();
    // Git reads the parents from the lines right after the tree only.
    while let Some(parent) = lines.peek().and_then(|l| l.strip_prefix(b"parent ")) {
        unhex(parent)?;
        parents.push(String::from_utf8(parent.to_vec()).ok()?);
        lines.next();
    }
    for line in lines {
        if line.starts_with(b" ") {
            continue;
        }
        let (key, value) = match line.iter().position(|b| *b == b' ') {
            Some(at) => (&line[..at], &line[at + 1..]),
            None => (line, &b""[..]),
        };
        match key {
            // `git log` would print a subject in another encoding converted.
            b"encoding" if !value.eq_ignore_ascii_case(b"utf-8") => return None,
            b"tree" | b"parent" => return None,
            _ => {}
        }
    }
    Some(Commit {
        tree,
        parents,
        revert: subject(message).starts_with(b"Revert \""),
    })
}

/// The subject as `%s` prints it: after the blank lines that open the
/// message, the first paragraph's lines, each without its trailing
/// whitespace, joined by spaces.
fn subject(message: &[u8]) -> Vec<u8> {
    let trimmed = |line: &[u8]| -> usize {
        line.iter()
            .rposition(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .map_or(0, |at| at + 1)
    };
    let mut subject = Vec::new();
    let mut started = false;
    for line in message.split(|b| *b == b'\n') {
        let len = trimmed(line);
        if len == 0 {
            if started {
                break;
            }
            continue;
        }
        if started {
            subject.push(b' ');
        }
        subject.extend_from_slice(&line[..len]);
        started = true;
    }
    subject
}

/// Entries `<mode> SP <name> NUL <20-byte id>`, strictly in git's order
/// (a tree out of order or with a name twice is one git would not write).
pub(super) fn parse_tree(bytes: Vec<u8>) -> Option<Tree> {
    let mut entries: Vec<(u32, u32, Node)> = Vec::new();
    let mut at = 0usize;
    // Names are found by offset, and an offset past u32 is not a tree.
    u32::try_from(bytes.len()).ok()?;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let space = rest.iter().take(7).position(|b| *b == b' ')?;
        let kind = Kind::parse(&rest[..space])?;
        let name_at = at + space + 1;
        let nul = bytes[name_at..].iter().position(|b| *b == 0)?;
        let name = &bytes[name_at..name_at + nul];
        let id: [u8; ID_LEN] = bytes
            .get(name_at + nul + 1..name_at + nul + 1 + ID_LEN)?
            .try_into()
            .ok()?;
        if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
            return None;
        }
        if let Some(&(start, end, last)) = entries.last() {
            let last_name = &bytes[start as usize..end as usize];
            if order(last_name, last.kind, name, kind) != Ordering::Less || last_name == name {
                return None;
            }
        }
        entries.push((name_at as u32, (name_at + nul) as u32, Node { kind, id }));
        at = name_at + nul + 1 + ID_LEN;
    }
    Some(Tree { bytes, entries })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(super) fn hex(id: &[u8; ID_LEN]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * ID_LEN);
    for b in id {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// A full lowercase SHA-1 id, as git writes it in a commit.
fn unhex(text: &[u8]) -> Option<[u8; ID_LEN]> {
    if text.len() != 2 * ID_LEN {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let mut id = [0; ID_LEN];
    for (i, pair) in text.chunks(2).enumerate() {
        id[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(id)
}
