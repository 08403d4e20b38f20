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

/// The most bytes of pack indexes held in memory for many reads (`bulk`):
/// about 2.4 million objects. A larger history streams from git instead.
const BULK_INDEX_MAX: u64 = 64 << 20;

/// The bytes of a pack read at once for many reads: objects written one
/// after the other (as git writes a tree's files) are read by one `pread`
/// per window, not two per object.
const WINDOW: usize = 64 << 10;

/// Objects kept to be the base of the next delta: git writes a file's
/// versions as chains of up to 50 deltas, and without these each read
/// would inflate its whole chain again.
const CACHE_SLOTS: usize = 256;
/// The most bytes those objects hold, and the largest one kept.
const CACHE_BYTES: usize = 32 << 20;
const CACHE_ONE_MAX: usize = 1 << 20;

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
    /// The whole index, once many reads are announced (`Odb::bulk`).
    index: Option<Vec<u8>>,
    /// Where the bytes of the pack last read start, and the bytes.
    window: (u64, Vec<u8>),
    /// Reads the window answered since it was filled: objects read in
    /// pack order share windows, objects scattered over a large pack (a
    /// real history's files) do not, and then each read fills a page, not
    /// 64 KiB.
    hits: u32,
}

/// An object kept: its pack and offset, its kind and bytes.
type Kept = (usize, u64, Kind, Vec<u8>);

/// Recently read objects by (pack, offset), one per slot.
struct Bases {
    slots: Vec<Option<Kept>>,
    bytes: usize,
}

impl Bases {
    fn new() -> Bases {
        Bases {
            slots: (0..CACHE_SLOTS).map(|_| None).collect(),
            bytes: 0,
        }
    }

    fn slot(pack: usize, offset: u64) -> usize {
        (offset as usize ^ pack.wrapping_mul(0x9e37)) % CACHE_SLOTS
    }

    fn get(&self, pack: usize, offset: u64) -> Option<(Kind, &[u8])> {
        match &self.slots[Bases::slot(pack, offset)] {
            Some((p, o, kind, bytes)) if *p == pack && *o == offset => Some((*kind, bytes)),
            _ => None,
        }
    }

    fn put(&mut self, pack: usize, offset: u64, kind: Kind, bytes: &[u8]) {
        if bytes.len() > CACHE_ONE_MAX {
            return;
        }
        let slot = &mut self.slots[Bases::slot(pack, offset)];
        let freed = slot.as_ref().map_or(0, |s| s.3.len());
        if self.bytes - freed + bytes.len() > CACHE_BYTES {
            return;
        }
        self.bytes = self.bytes - freed + bytes.len();
        *slot = Some((pack, offset, kind, bytes.to_vec()));
    }
}

/// The object directories of one clone.
pub(crate) struct Odb {
    dirs: Vec<PathBuf>,
    packs: Option<Vec<Pack>>,
    /// One inflater for every object: each new one costs tens of
    /// kilobytes zeroed.
    z: Decompress,
    bases: Bases,
    /// Pack entries inflated so far (the tests' view of the base cache).
    inflated: u64,
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
        (dirs.len() <= MAX_ALTERNATES).then_some(Odb {
            dirs,
            packs: None,
            z: Decompress::new(true),
            bases: Bases::new(),
            inflated: 0,
        })
    }

    /// Readies the reader for many reads (a first run, a large wake): the
    /// pack indexes are read whole into memory, so a lookup costs no
    /// system call. `false` when they are larger than that is worth.
    pub(crate) fn bulk(&mut self) -> bool {
        let packs = self.packs_mut();
        let total: u64 = packs
            .iter()
            .map(|p| p.idx.metadata().map_or(u64::MAX, |m| m.len()))
            .fold(0, u64::saturating_add);
        if total > BULK_INDEX_MAX {
            return false;
        }
        for p in packs.iter_mut().filter(|p| p.index.is_none()) {
            let mut index = Vec::new();
            let read = (&p.idx).take(BULK_INDEX_MAX).read_to_end(&mut index);
            // Names, checksums and offsets of every object, and the two
            // checksums at the end: an index shorter than that (cut short
            // since it was opened) stays read in place.
            let least = 8 + 256 * 4 + u64::from(p.count) * 28 + 40;
            if read.is_ok() && index.len() as u64 >= least {
                p.index = Some(index);
            }
        }
        true
    }

    /// The object `id` (40 hex digits), at most `limit` bytes long.
    pub(crate) fn read(&mut self, id: &str, limit: u64) -> Option<(Kind, Vec<u8>)> {
        let raw = unhex(id)?;
        if let Some(found) = self.packed(&raw, limit) {
            return Some(found);
        }
        let z = &mut self.z;
        self.dirs
            .iter()
            .find_map(|d| loose(&d.join(&id[..2]).join(&id[2..]), limit, z))
    }

    fn packs_mut(&mut self) -> &mut Vec<Pack> {
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
            .packs_mut()
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.offset(id).map(|o| (i, o)))?;
        self.unpack(at.0, at.1, limit)
    }

    /// The object at `offset` of pack `p`, its delta chain applied.
    fn unpack(&mut self, p: usize, offset: u64, limit: u64) -> Option<(Kind, Vec<u8>)> {
        // Each link: where its delta is, and the delta.
        let mut deltas: Vec<(usize, u64, Vec<u8>)> = Vec::new();
        let (mut pack, mut offset) = (p, offset);
        let (kind, mut data) = loop {
            if deltas.len() > MAX_CHAIN {
                return None;
            }
            if let Some((kind, bytes)) = self.bases.get(pack, offset) {
                break (kind, bytes.to_vec());
            }
            let packs = self.packs.as_mut()?;
            self.inflated += 1;
            let entry = packs[pack].entry(offset, limit, &mut self.z)?;
            match entry.base {
                Base::None(kind) => {
                    if !deltas.is_empty() {
                        self.bases.put(pack, offset, kind, &entry.data);
                    }
                    break (kind, entry.data);
                }
                Base::Offset(base) => {
                    deltas.push((pack, offset, entry.data));
                    offset = base;
                }
                Base::Id(id) => {
                    deltas.push((pack, offset, entry.data));
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
        while let Some((at_pack, at, delta)) = deltas.pop() {
            data = apply(&data, &delta, limit)?;
            // The next version of a file is most often a delta on this one.
            self.bases.put(at_pack, at, kind, &data);
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
fn loose(path: &Path, limit: u64, z: &mut Decompress) -> Option<(Kind, Vec<u8>)> {
    let mut file = open(path)?;
    let mut packed = Vec::new();
    // A loose object compresses; more than twice the limit is not one
    // this reader needs.
    file.by_ref()
        .take(limit.saturating_mul(2).saturating_add(1024))
        .read_to_end(&mut packed)
        .ok()?;
    let header_cap = 64;
    z.reset(true);
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
    inflate_rest(z, &packed[consumed..], &mut out, nul as u64 + 1 + size)?;
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
            index: None,
            window: (0, Vec::new()),
            hits: 0,
        })
    }

    /// `buf.len()` bytes of the index at `at`, from memory once it is
    /// held there.
    fn idx_at(&self, buf: &mut [u8], at: u64) -> Option<()> {
        match &self.index {
            Some(index) => {
                let at = usize::try_from(at).ok()?;
                buf.copy_from_slice(index.get(at..at.checked_add(buf.len())?)?);
                Some(())
            }
            None => self.idx.read_exact_at(buf, at).ok(),
        }
    }

    /// The bytes of the pack from `at` on: at least `need` of them unless
    /// the pack ends first, none when it ends at `at`. A read that must
    /// fill the window reads `hint` bytes if that is more.
    fn bytes_at(&mut self, at: u64, need: usize, hint: usize) -> Option<&[u8]> {
        let (start, bytes) = &self.window;
        let have = at
            .checked_sub(*start)
            .and_then(|skip| usize::try_from(skip).ok())
            .filter(|&skip| skip < bytes.len() && bytes.len() - skip >= need);
        if let Some(skip) = have {
            self.hits += 1;
            return Some(&self.window.1[skip..]);
        }
        // A wake's few objects, or objects that did not share the last
        // window, are read a page at a time.
        let window = if self.index.is_some() && self.hits >= 2 {
            WINDOW
        } else {
            4096
        };
        self.hits = 0;
        let (start, bytes) = &mut self.window;
        bytes.resize(need.max(hint).max(window), 0);
        let mut got = 0;
        // A short read is the end of the pack, or a signal: read on.
        while got < bytes.len() {
            match self.pack.read_at(&mut bytes[got..], at + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        bytes.truncate(got);
        *start = at;
        Some(&self.window.1[..])
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
        let names: u64 = 8 + 256 * 4;
        if let Some(index) = &self.index {
            // In memory: the names compared in place, no copy per probe.
            let table = index.get(names as usize..names as usize + self.count as usize * 20)?;
            let (mut lo, mut hi) = (lo as usize, (hi as usize).min(self.count as usize));
            // Compared as three big-endian words: a first run makes about
            // seventeen probes for each of its files.
            let key = words(id);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                let name: &[u8; 20] = table[mid * 20..mid * 20 + 20].try_into().ok()?;
                match words(name).cmp(&key) {
                    std::cmp::Ordering::Equal => return self.offset_of(mid as u32),
                    std::cmp::Ordering::Less => lo = mid + 1,
                    std::cmp::Ordering::Greater => hi = mid,
                }
            }
            return None;
        }
        let mut probe = [0u8; 20];
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            self.idx_at(&mut probe, names + u64::from(mid) * 20)?;
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
        self.idx_at(&mut word, small)?;
        let word = u32::from_be_bytes(word);
        if word & 0x8000_0000 == 0 {
            return Some(u64::from(word));
        }
        let large = 8 + 256 * 4 + n * 28 + u64::from(word & 0x7fff_ffff) * 8;
        let mut long = [0u8; 8];
        self.idx_at(&mut long, large)?;
        Some(u64::from_be_bytes(long))
    }

    /// The entry at `offset`: its kind or base, and its inflated bytes.
    fn entry(&mut self, offset: u64, limit: u64, z: &mut Decompress) -> Option<Entry> {
        let window = self.bytes_at(offset, 32, 0)?;
        let mut head = [0u8; 32];
        let got = window.len().min(32);
        head[..got].copy_from_slice(&window[..got]);
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
        let data = self.inflate(offset + i as u64, size, z)?;
        Some(Entry { base, data })
    }

    /// `size` bytes inflated from the stream at `at`, read by windows.
    fn inflate(&mut self, mut at: u64, size: u64, z: &mut Decompress) -> Option<Vec<u8>> {
        z.reset(true);
        let mut out = Vec::with_capacity(size as usize);
        loop {
            // A stream rarely compresses to more than its size.
            let hint = usize::try_from(size).unwrap_or(usize::MAX).min(1 << 20);
            let chunk = self.bytes_at(at, 1, hint)?;
            if chunk.is_empty() {
                return None;
            }
            let (before, made) = (z.total_in(), out.len());
            out.reserve((size as usize + 1).saturating_sub(out.len()).max(1));
            let status = z
                .decompress_vec(chunk, &mut out, FlushDecompress::None)
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

/// An object id as words that order as its bytes do.
fn words(id: &[u8; 20]) -> (u64, u64, u32) {
    let word = |at: usize| u64::from_be_bytes(id[at..at + 8].try_into().expect("8 bytes"));
    let last = u32::from_be_bytes(id[16..20].try_into().expect("4 bytes"));
    (word(0), word(8), last)
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
pub(super) mod tests {
    use super::*;
    use std::process::Command;

    pub(in crate::source) fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
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
    /// Every object, read one by one, then (with the indexes in memory and
    /// the delta bases kept) forwards and backwards, as `git cat-file`
    /// gives it.
    fn every_object_reads_as_git_reads_it(repo: &Path, git_dir: &Path) -> usize {
        let list = git(repo, &["cat-file", "--batch-all-objects", "--batch-check"]);
        let list = String::from_utf8(list).unwrap();
        let objects: Vec<(&str, &str)> = list
            .lines()
            .map(|line| {
                let mut parts = line.split(' ');
                (parts.next().unwrap(), parts.next().unwrap())
            })
            .collect();
        let expected: Vec<Vec<u8>> = objects
            .iter()
            .map(|(id, kind)| git(repo, &["cat-file", kind, id]))
            .collect();
        let mut bulk = Odb::open(git_dir).expect("a plain clone is read");
        assert!(bulk.bulk(), "a small history's indexes are held in memory");
        let order: Vec<usize> = (0..objects.len()).chain((0..objects.len()).rev()).collect();
        for (odb, order) in [
            (&mut Odb::open(git_dir).unwrap(), &order[..objects.len()]),
            (&mut bulk, &order[..]),
        ] {
            for &i in order {
                let (id, kind) = objects[i];
                let (k, bytes) = odb
                    .read(id, u64::MAX / 4)
                    .unwrap_or_else(|| panic!("{id} {kind}"));
                assert_eq!(k.name(), kind, "{id}");
                assert!(bytes == expected[i], "{id} {kind} differs");
            }
        }
        objects.len()
    }

    #[test]
    fn a_files_versions_read_in_a_row_inflate_each_delta_once_not_its_whole_chain() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q"]);
        // fast-import writes each blob as a delta on the one before, in
        // chains of up to 50, as a generated or imported history has them.
        let mut stream = Vec::new();
        let mut bodies = Vec::new();
        let mut body = String::new();
        for v in 0..40 {
            body.push_str(&format!(
                "line {v} of a file that grows one line a version\n"
            ));
            stream.extend_from_slice(format!("blob\ndata {}\n{body}\n", body.len()).as_bytes());
            bodies.push(body.clone());
        }
        let mut child = Command::new("git")
            .arg("-C")
            .arg(dir.path())
            // Kept as a pack, however few the objects.
            .args(["-c", "fastimport.unpackLimit=0", "fast-import", "--quiet"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&stream).unwrap();
        assert!(child.wait().unwrap().success());
        let stats = pack_stats(dir.path());
        assert!(
            stats.contains("chain length = 30"),
            "a long chain was made: {stats}"
        );
        let mut odb = Odb::open(&dir.path().join(".git")).unwrap();
        assert!(odb.bulk());
        for body in &bodies {
            let id = hash_blob(body.as_bytes());
            let (kind, bytes) = odb.read(&id, 1 << 20).expect("packed blob");
            assert_eq!(kind, Kind::Blob);
            assert_eq!(bytes, body.as_bytes());
        }
        assert!(
            odb.inflated <= 2 * bodies.len() as u64,
            "{} entries inflated for {} versions",
            odb.inflated,
            bodies.len()
        );
    }

    fn hash_blob(bytes: &[u8]) -> String {
        use sha1::{Digest, Sha1};
        let mut h = Sha1::new();
        h.update(format!("blob {}\0", bytes.len()).as_bytes());
        h.update(bytes);
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
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
            let stats = pack_stats(dir.path());
            assert!(
                stats.contains("chain length = 3"),
                "deltas were made: {stats}"
            );
            assert!(every_object_reads_as_git_reads_it(dir.path(), &dir.path().join(".git")) > 40);
        }
    }

    /// What `git verify-pack -v` says of the clone's one pack.
    fn pack_stats(repo: &Path) -> String {
        let idx = glob_idx(&repo.join(".git/objects/pack"));
        String::from_utf8(git(repo, &["verify-pack", "-v", &idx])).unwrap()
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
