//! Objects read straight from a clone's object directory (loose objects and
//! packs, with their deltas), so that a small wake needs no git process at
//! all: starting one costs about what a whole no-op does.
//!
//! Only what this reader is sure of is answered: a SHA-1 repository, version
//! 2 pack indexes, the object kinds and delta encodings git writes. Anything
//! else, or an object it cannot find, is `None`, and git itself is asked.
//! Objects are named by their content, so an object found is the object git
//! would give; what the reader cannot see (a replace ref, a graft, a shallow
//! or partial clone's boundary, an override in the environment) makes it
//! decline the whole repository instead (`Odb::open`).

use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use flate2::{Decompress, FlushDecompress, Status};

use crate::state::safe_fs;

/// Environment variables that point git at other objects or rewrite them.
const OVERRIDES: [&str; 5] = [
    "GIT_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_REPLACE_REF_BASE",
    "GIT_NO_REPLACE_OBJECTS",
];

/// The most delta links followed for one object (git writes at most 50 by
/// default, 250 with `--aggressive`).
const MAX_CHAIN: usize = 1000;

/// The most alternates followed, nested ones included.
const MAX_ALTERNATES: usize = 16;

/// An object's kind, as git names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Commit,
    Tree,
    Blob,
    Tag,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
            Kind::Tag => "tag",
        }
    }

    fn of_pack(code: u8) -> Option<Kind> {
        Some(match code {
            1 => Kind::Commit,
            2 => Kind::Tree,
            3 => Kind::Blob,
            4 => Kind::Tag,
            _ => return None,
        })
    }

    fn of_name(name: &[u8]) -> Option<Kind> {
        Some(match name {
            b"commit" => Kind::Commit,
            b"tree" => Kind::Tree,
            b"blob" => Kind::Blob,
            b"tag" => Kind::Tag,
            _ => return None,
        })
    }
}

/// One pack and its version 2 index, read in place: an index of a large
/// history is megabytes, of which a lookup reads a few dozen bytes.
struct Pack {
    idx: File,
    pack: File,
    count: u32,
    fanout: Vec<u32>,
}

/// The object directories of one clone.
pub(crate) struct Odb {
    dirs: Vec<PathBuf>,
    packs: Option<Vec<Pack>>,
}

impl Odb {
    /// The objects of the git directory `git` (the `.git` of a clone, or a
    /// bare clone), or `None` when git would see other objects than its
    /// files show.
    pub(crate) fn open(git: &Path) -> Option<Odb> {
        if OVERRIDES.iter().any(|v| std::env::var_os(v).is_some()) {
            return None;
        }
        for other in ["shallow", "info/grafts", "refs/replace", "commondir"] {
            if git.join(other).exists() {
                return None;
            }
        }
        let config = text(&git.join("config"))?;
        if config.to_ascii_lowercase().contains("objectformat")
            || config.contains("promisor")
            || config.contains("partialclone")
        {
            return None;
        }
        let packed = text(&git.join("packed-refs"))?;
        if packed.contains(" refs/replace/") {
            return None;
        }
        let mut dirs = vec![git.join("objects")];
        let mut at = 0;
        while at < dirs.len() && dirs.len() <= MAX_ALTERNATES {
            let list = text(&dirs[at].join("info/alternates"))?;
            for line in list
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
            {
                if line.starts_with('"') {
                    // A quoted path: git's own unquoting is not repeated here.
                    return None;
                }
                let p = Path::new(line);
                dirs.push(if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    dirs[at].join(p)
                });
            }
            at += 1;
        }
        (dirs.len() <= MAX_ALTERNATES).then_some(Odb { dirs, packs: None })
    }

    /// The object `id` (40 hex digits), at most `limit` bytes long.
    pub(crate) fn read(&mut self, id: &str, limit: u64) -> Option<(Kind, Vec<u8>)> {
        let raw = unhex(id)?;
        if let Some(found) = self.packed(&raw, limit) {
            return Some(found);
        }
        self.dirs
            .iter()
            .find_map(|d| loose(&d.join(&id[..2]).join(&id[2..]), limit))
    }

    fn packs(&mut self) -> &[Pack] {
        let dirs = &self.dirs;
        self.packs.get_or_insert_with(|| {
            let mut packs = Vec::new();
            for dir in dirs {
                let Ok(entries) = fs::read_dir(dir.join("pack")) else {
                    continue;
                };
                let mut names: Vec<PathBuf> = entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "idx"))
                    .collect();
                names.sort();
                packs.extend(names.iter().filter_map(|p| Pack::open(p)));
            }
            packs
        })
    }

    fn packed(&mut self, id: &[u8; 20], limit: u64) -> Option<(Kind, Vec<u8>)> {
        let at = self
            .packs()
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.offset(id).map(|o| (i, o)))?;
        self.unpack(at.0, at.1, limit)
    }

    /// The object at `offset` of pack `p`, its delta chain applied.
    fn unpack(&mut self, p: usize, offset: u64, limit: u64) -> Option<(Kind, Vec<u8>)> {
        let mut deltas: Vec<Vec<u8>> = Vec::new();
        let (mut pack, mut offset) = (p, offset);
        let (kind, mut data) = loop {
            if deltas.len() > MAX_CHAIN {
                return None;
            }
            let packs = self.packs();
            let entry = packs[pack].entry(offset, limit)?;
            match entry.base {
                Base::None(kind) => break (kind, entry.data),
                Base::Offset(base) => {
                    deltas.push(entry.data);
                    offset = base;
                }
                Base::Id(id) => {
                    deltas.push(entry.data);
                    let found = packs
                        .iter()
                        .enumerate()
                        .find_map(|(i, p)| p.offset(&id).map(|o| (i, o)));
                    match found {
                        Some((i, o)) => (pack, offset) = (i, o),
                        // A thin base kept loose: rare; git reads it.
                        None => return None,
                    }
                }
            }
        };
        while let Some(delta) = deltas.pop() {
            data = apply(&data, &delta, limit)?;
        }
        Some((kind, data))
    }
}

/// The commit walk's view of the object files.
impl super::git_objects::Objects for Odb {
    fn objects(&mut self, ids: &[String], limit: u64) -> Vec<Option<super::git_objects::Object>> {
        ids.iter()
            .map(|id| self.read(id, limit).map(|(k, b)| (k.name().to_string(), b)))
            .collect()
    }
}

/// The most bytes of a text file of the git directory read.
const MAX_TEXT: u64 = 64 << 20;

/// A text file of the git directory: empty when missing, `None` (decline
/// the repository) when it is a link, a FIFO, a device or too large, so
/// that nothing planted there can hang or flood the tick (git itself
/// would be asked, as before).
fn text(path: &Path) -> Option<String> {
    match safe_fs::read_bounded(path, MAX_TEXT) {
        Ok(Some(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(None) => Some(String::new()),
        Err(_) => None,
    }
}

/// An object file opened to read: a regular file only, never through a
/// link, never waiting on a FIFO.
fn open(path: &Path) -> Option<File> {
    safe_fs::open_read(path).ok().flatten()
}

/// A loose object: `<kind> <size>\0<bytes>`, compressed.
fn loose(path: &Path, limit: u64) -> Option<(Kind, Vec<u8>)> {
    let mut file = open(path)?;
    let mut packed = Vec::new();
    // A loose object compresses; more than twice the limit is not one
    // this reader needs.
    file.by_ref()
        .take(limit.saturating_mul(2).saturating_add(1024))
        .read_to_end(&mut packed)
        .ok()?;
    let header_cap = 64;
    let mut z = Decompress::new(true);
    let mut head = Vec::with_capacity(header_cap);
    z.decompress_vec(&packed, &mut head, FlushDecompress::None)
        .ok()?;
    let nul = head.iter().position(|&b| b == 0)?;
    let (name, size) = head[..nul].split_at(head[..nul].iter().position(|&b| b == b' ')?);
    let kind = Kind::of_name(name)?;
    let size: u64 = std::str::from_utf8(&size[1..]).ok()?.parse().ok()?;
    if size > limit {
        return None;
    }
    let mut out = Vec::with_capacity(nul + 1 + size as usize);
    out.extend_from_slice(&head);
    let consumed = z.total_in() as usize;
    inflate_rest(&mut z, &packed[consumed..], &mut out, nul as u64 + 1 + size)?;
    let data = out.split_off(nul + 1);
    (data.len() as u64 == size).then_some((kind, data))
}

/// Inflates `input` into `out` until the stream ends with `out` at `total`
/// bytes; a stream longer or shorter than that is `None`.
fn inflate_rest(z: &mut Decompress, mut input: &[u8], out: &mut Vec<u8>, total: u64) -> Option<()> {
    loop {
        if out.len() as u64 > total {
            return None;
        }
        let room = (total as usize + 1).saturating_sub(out.len()).max(1);
        out.reserve(room);
        let (before, made) = (z.total_in(), out.len());
        let status = z.decompress_vec(input, out, FlushDecompress::None).ok()?;
        input = &input[(z.total_in() - before) as usize..];
        if status == Status::StreamEnd {
            return (out.len() as u64 == total).then_some(());
        }
        if z.total_in() == before && out.len() == made {
            // The input ended before the stream did, or is damaged.
            return None;
        }
    }
}

enum Base {
    None(Kind),
    Offset(u64),
    Id([u8; 20]),
}

struct Entry {
    base: Base,
    /// The object's bytes, or the delta's.
    data: Vec<u8>,
}

impl Pack {
    fn open(idx_path: &Path) -> Option<Pack> {
        let idx = open(idx_path)?;
        let pack = open(&idx_path.with_extension("pack"))?;
        let mut head = vec![0u8; 8 + 256 * 4];
        idx.read_exact_at(&mut head, 0).ok()?;
        if head[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
            return None;
        }
        let fanout: Vec<u32> = head[8..]
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let count = *fanout.last()?;
        let mut magic = [0u8; 12];
        pack.read_exact_at(&mut magic, 0).ok()?;
        if &magic[..4] != b"PACK" || !matches!(magic[4..8], [0, 0, 0, 2] | [0, 0, 0, 3]) {
            return None;
        }
        Some(Pack {
            idx,
            pack,
            count,
            fanout,
        })
    }

    /// Where `id` starts in the pack, by binary search of the index.
    fn offset(&self, id: &[u8; 20]) -> Option<u64> {
        let first = id[0] as usize;
        let mut lo = if first == 0 {
            0
        } else {
            self.fanout[first - 1]
        };
        let mut hi = self.fanout[first];
        let names = 8 + 256 * 4;
        let mut probe = [0u8; 20];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.idx
                .read_exact_at(&mut probe, names + u64::from(mid) * 20)
                .ok()?;
            match probe.cmp(id) {
                std::cmp::Ordering::Equal => return self.offset_of(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    fn offset_of(&self, at: u32) -> Option<u64> {
        let n = u64::from(self.count);
        let small = 8 + 256 * 4 + n * 24 + u64::from(at) * 4;
        let mut word = [0u8; 4];
        self.idx.read_exact_at(&mut word, small).ok()?;
        let word = u32::from_be_bytes(word);
        if word & 0x8000_0000 == 0 {
            return Some(u64::from(word));
        }
        let large = 8 + 256 * 4 + n * 28 + u64::from(word & 0x7fff_ffff) * 8;
        let mut long = [0u8; 8];
        self.idx.read_exact_at(&mut long, large).ok()?;
        Some(u64::from_be_bytes(long))
    }

    /// The entry at `offset`: its kind or base, and its inflated bytes.
    fn entry(&self, offset: u64, limit: u64) -> Option<Entry> {
        let mut head = [0u8; 32];
        let got = self.pack.read_at(&mut head, offset).ok()?;
        let head = &head[..got];
        let mut i = 0;
        let mut byte = *head.get(i)?;
        let code = (byte >> 4) & 7;
        let mut size = u64::from(byte & 15);
        let mut shift = 4;
        while byte & 0x80 != 0 {
            i += 1;
            byte = *head.get(i)?;
            size |= u64::from(byte & 0x7f).checked_shl(shift)?;
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        i += 1;
        let base = match code {
            6 => {
                let mut byte = *head.get(i)?;
                let mut back = u64::from(byte & 0x7f);
                while byte & 0x80 != 0 {
                    i += 1;
                    byte = *head.get(i)?;
                    back = back.checked_add(1)?.checked_shl(7)? | u64::from(byte & 0x7f);
                }
                i += 1;
                Base::Offset(offset.checked_sub(back)?)
            }
            7 => {
                let id: [u8; 20] = head.get(i..i + 20)?.try_into().ok()?;
                i += 20;
                Base::Id(id)
            }
            _ => Base::None(Kind::of_pack(code)?),
        };
        // A delta can be larger than the object it builds (rarely by much).
        let most = match base {
            Base::None(_) => limit,
            _ => limit.saturating_mul(2).saturating_add(1024),
        };
        if size > most {
            return None;
        }
        let data = self.inflate(offset + i as u64, size)?;
        Some(Entry { base, data })
    }

    /// `size` bytes inflated from the stream at `at`, read in chunks.
    fn inflate(&self, mut at: u64, size: u64) -> Option<Vec<u8>> {
        let mut z = Decompress::new(true);
        let mut out = Vec::with_capacity(size as usize);
        let mut chunk = vec![0u8; (size as usize / 2).clamp(4096, 1 << 20)];
        loop {
            let got = self.pack.read_at(&mut chunk, at).ok()?;
            if got == 0 {
                return None;
            }
            let (before, made) = (z.total_in(), out.len());
            out.reserve((size as usize + 1).saturating_sub(out.len()).max(1));
            let status = z
                .decompress_vec(&chunk[..got], &mut out, FlushDecompress::None)
                .ok()?;
            at += z.total_in() - before;
            if out.len() as u64 > size {
                return None;
            }
            if status == Status::StreamEnd {
                return (out.len() as u64 == size).then_some(out);
            }
            if z.total_in() == before && out.len() == made {
                // Neither input taken nor output made: a damaged stream.
                return None;
            }
        }
    }
}

/// `base` with the delta `delta` applied (git's copy and insert codes).
fn apply(base: &[u8], delta: &[u8], limit: u64) -> Option<Vec<u8>> {
    let mut d = delta;
    let src = varint(&mut d)?;
    let dst = varint(&mut d)?;
    if src != base.len() as u64 || dst > limit {
        return None;
    }
    let mut out = Vec::with_capacity(dst as usize);
    while let Some((&op, rest)) = d.split_first() {
        d = rest;
        if op & 0x80 != 0 {
            let mut field = |bits: u8, shift: u32| -> Option<u64> {
                let mut v = 0u64;
                for b in 0..bits {
                    if op & (1 << (shift as u8 + b)) != 0 {
                        let (&x, rest) = d.split_first()?;
                        d = rest;
                        v |= u64::from(x) << (8 * u32::from(b));
                    }
                }
                Some(v)
            };
            let off = field(4, 0)?;
            let mut len = field(3, 4)?;
            if len == 0 {
                len = 0x10000;
            }
            let end = off.checked_add(len)?;
            out.extend_from_slice(base.get(off as usize..end as usize)?);
        } else if op != 0 {
            let (lit, rest) = d.split_at_checked(op as usize)?;
            out.extend_from_slice(lit);
            d = rest;
        } else {
            return None;
        }
        if out.len() as u64 > dst {
            return None;
        }
    }
    (out.len() as u64 == dst).then_some(out)
}

fn varint(d: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let (&b, rest) = d.split_first()?;
        *d = rest;
        v |= u64::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

fn unhex(id: &str) -> Option<[u8; 20]> {
    let b = id.as_bytes();
    if b.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(["-c", "commit.gpgsign=false", "-c", "core.autocrlf=false"])
            .args(args)
            .env_remove("GIT_DIR")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A history whose files resemble each other from commit to commit, so
    /// that a repack stores most of them as deltas.
    fn history(dir: &Path, commits: usize) {
        git(dir, &["init", "-q", "-b", "main"]);
        let mut text = String::new();
        for c in 0..commits {
            for line in 0..40 {
                text.push_str(&format!(
                    "line {line} of commit {c}: {}\n",
                    "x".repeat(line)
                ));
            }
            fs::create_dir_all(dir.join("src/deep")).unwrap();
            fs::write(dir.join("src/a.txt"), &text).unwrap();
            fs::write(dir.join("src/deep/b.txt"), text.replace("line", "row")).unwrap();
            fs::write(
                dir.join(format!("src/f{}.bin", c % 3)),
                vec![c as u8; 70_000 + c],
            )
            .unwrap();
            git(dir, &["add", "-A"]);
            git(dir, &["commit", "-q", "-m", &format!("commit {c}")]);
        }
    }

    /// Every object git holds, each read here as `git cat-file` reads it.
    fn every_object_reads_as_git_reads_it(repo: &Path, git_dir: &Path) -> usize {
        let list = git(repo, &["cat-file", "--batch-all-objects", "--batch-check"]);
        let mut odb = Odb::open(git_dir).expect("a plain clone is read");
        let mut n = 0;
        for line in String::from_utf8(list).unwrap().lines() {
            let mut parts = line.split(' ');
            let (id, kind) = (parts.next().unwrap(), parts.next().unwrap());
            let (k, bytes) = odb
                .read(id, u64::MAX / 4)
                .unwrap_or_else(|| panic!("{id} {kind}"));
            assert_eq!(k.name(), kind, "{id}");
            assert!(
                bytes == git(repo, &["cat-file", kind, id]),
                "{id} {kind} differs"
            );
            n += 1;
        }
        n
    }

    #[test]
    fn loose_objects_read_as_git_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        history(dir.path(), 3);
        assert!(every_object_reads_as_git_reads_it(dir.path(), &dir.path().join(".git")) > 10);
    }

    #[test]
    fn packed_objects_and_their_delta_chains_read_as_git_reads_them() {
        for offsets in ["true", "false"] {
            let dir = tempfile::tempdir().unwrap();
            history(dir.path(), 12);
            // Offset deltas, then deltas naming their base by id.
            git(
                dir.path(),
                &[
                    "-c",
                    &format!("repack.useDeltaBaseOffset={offsets}"),
                    "repack",
                    "-adfq",
                    "--depth=50",
                    "--window=50",
                ],
            );
            let stats = String::from_utf8(git(
                dir.path(),
                &[
                    "verify-pack",
                    "-v",
                    &glob_idx(&dir.path().join(".git/objects/pack")),
                ],
            ))
            .unwrap();
            assert!(
                stats.contains("chain length = 3"),
                "deltas were made: {stats}"
            );
            assert!(every_object_reads_as_git_reads_it(dir.path(), &dir.path().join(".git")) > 40);
        }
    }

    fn glob_idx(dir: &Path) -> String {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .unwrap()
            .display()
            .to_string()
    }

    #[test]
    fn a_clone_sharing_its_objects_reads_them_through_its_alternates() {
        let dir = tempfile::tempdir().unwrap();
        let origin = dir.path().join("origin");
        fs::create_dir(&origin).unwrap();
        history(&origin, 4);
        git(&origin, &["repack", "-adq"]);
        let bare = dir.path().join("bare");
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--bare",
                "--shared",
                origin.to_str().unwrap(),
                bare.to_str().unwrap(),
            ],
        );
        assert!(bare.join("objects/info/alternates").exists());
        assert!(every_object_reads_as_git_reads_it(&bare, &bare) > 10);
    }

    #[test]
    fn what_git_would_see_differently_declines_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        history(dir.path(), 2);
        let git_dir = dir.path().join(".git");
        assert!(Odb::open(&git_dir).is_some());
        for (what, file) in [("a shallow clone", "shallow"), ("grafts", "info/grafts")] {
            fs::write(git_dir.join(file), "").unwrap();
            assert!(Odb::open(&git_dir).is_none(), "{what}");
            fs::remove_file(git_dir.join(file)).unwrap();
        }
        let head = String::from_utf8(git(dir.path(), &["rev-parse", "HEAD"])).unwrap();
        let parent = String::from_utf8(git(dir.path(), &["rev-parse", "HEAD~1"])).unwrap();
        git(dir.path(), &["replace", head.trim(), parent.trim()]);
        assert!(Odb::open(&git_dir).is_none(), "a replace ref");
        let sha256 = tempfile::tempdir().unwrap();
        git(sha256.path(), &["init", "-q", "--object-format=sha256"]);
        assert!(
            Odb::open(&sha256.path().join(".git")).is_none(),
            "SHA-256 ids"
        );
    }

    #[test]
    fn a_fifo_or_a_link_planted_in_the_object_files_is_left_to_git_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        history(dir.path(), 2);
        let git_dir = dir.path().join(".git");
        let blob = String::from_utf8(git(dir.path(), &["rev-parse", "HEAD:src/a.txt"])).unwrap();
        let blob = blob.trim();
        let object = git_dir.join("objects").join(&blob[..2]).join(&blob[2..]);
        fs::remove_file(&object).unwrap();
        let fifo = std::ffi::CString::new(object.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        // Opening a FIFO with no writer would wait forever.
        assert!(Odb::open(&git_dir).unwrap().read(blob, u64::MAX).is_none());
        fs::remove_file(&object).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &object).unwrap();
        assert!(Odb::open(&git_dir).unwrap().read(blob, u64::MAX).is_none());
        let alternates = git_dir.join("objects/info/alternates");
        fs::create_dir_all(alternates.parent().unwrap()).unwrap();
        let fifo = std::ffi::CString::new(alternates.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        assert!(
            Odb::open(&git_dir).is_none(),
            "a FIFO for alternates declines"
        );
    }

    #[test]
    fn a_missing_or_oversized_object_is_left_to_git() {
        let dir = tempfile::tempdir().unwrap();
        history(dir.path(), 2);
        let mut odb = Odb::open(&dir.path().join(".git")).unwrap();
        assert!(odb.read(&"0".repeat(40), u64::MAX).is_none());
        assert!(odb.read("not an id", u64::MAX).is_none());
        let blob = String::from_utf8(git(dir.path(), &["rev-parse", "HEAD:src/f1.bin"])).unwrap();
        assert!(
            odb.read(blob.trim(), 70_000).is_none(),
            "larger than the limit"
        );
        assert_eq!(odb.read(blob.trim(), 70_001).unwrap().1.len(), 70_001);
        git(dir.path(), &["repack", "-adq"]);
        let mut odb = Odb::open(&dir.path().join(".git")).unwrap();
        assert!(
            odb.read(blob.trim(), 70_000).is_none(),
            "packed, larger than the limit"
        );
        assert_eq!(odb.read(blob.trim(), 70_001).unwrap().1.len(), 70_001);
    }
}
