//! Many files of the GitLab source in one request: the repository archive
//! (`archive.tar.gz?sha=<head>&path=<watched>`), streamed, unpacked and
//! matched to the content ids the tick asked for by git's blob hash.
//!
//! The archive is a shortcut, never a second truth: an entry is used only
//! when its bytes hash to an id the tree listing named, so a tampered,
//! truncated or foreign entry simply answers nothing, and the file is read
//! one by one like any other. Links, submodules and odd paths are never
//! used. Every byte is counted as it arrives (compressed and unpacked), so
//! no header can make the download larger than `--max-archive-bytes`.

use std::cell::Cell;
use std::collections::HashMap;
use std::io::{self, Read};
use std::rc::Rc;
use std::time::Duration;

use super::read_body;
use super::{GitLabSource, Kind, MAX_REDIRECTS, SourceError, encode, gitlab_message, origin_of};

/// The default of `--max-archive-bytes`: the most bytes one archive
/// download may bring, compressed and unpacked alike.
pub const DEFAULT_MAX_ARCHIVE_BYTES: u64 = 256 << 20;
/// Fewer reads than this are cheaper one by one than the whole tree.
const MIN_READS: usize = 20;
/// ... and so are reads of less than 1 file in this many of the tracked
/// files: the archive carries every file under the watched path.
const TRACKED_PER_READ: usize = 100;
/// A download of many files takes longer than one JSON answer: the
/// request timeout is stretched to at least this.
const MIN_TIMEOUT: Duration = Duration::from_secs(600);
/// Bytes of an error answer worth reading for its message.
const ERROR_BODY_BYTES: u64 = 4 << 10;
/// The most bytes of a GNU long name or a PAX record: a name is read
/// whole into memory before its entry, so one of 250 MB took twice that
/// (a growing buffer) whatever `--max-archive-bytes` said. Far above any
/// path a tree holds (4 KiB on Linux).
const MAX_NAME_BYTES: u64 = 64 << 10;

/// What the archive gave for one content id.
enum Held {
    /// The whole file, its hash checked.
    Bytes(Vec<u8>),
    /// The file is longer than the read limit: its bytes went through the
    /// hash but were not kept.
    Over,
}

/// The archive's state for one tick: tried at most once, and the bytes it
/// gave, each with the number of reads still expected of it.
#[derive(Default)]
pub(super) struct Archive {
    /// The largest download; 0 never downloads.
    pub(super) max_bytes: u64,
    tried: bool,
    held: HashMap<String, (Held, usize)>,
}

impl Archive {
    pub(super) fn new(max_bytes: u64) -> Archive {
        Archive {
            max_bytes,
            ..Archive::default()
        }
    }

    pub(super) fn holds(&self, blob: &str) -> bool {
        self.held.contains_key(&blob.to_ascii_lowercase())
    }

    /// The answer to a read of `blob` from the archive, if it gave one; the
    /// bytes are let go after the last read expected of them.
    pub(super) fn take(&mut self, blob: &str, limit: u64) -> Option<Result<Vec<u8>, SourceError>> {
        let key = blob.to_ascii_lowercase();
        let (held, left) = self.held.get_mut(&key)?;
        *left = left.saturating_sub(1);
        let answer = |held: &mut Held| match held {
            Held::Bytes(b) if b.len() as u64 <= limit => Ok(std::mem::take(b)),
            _ => Err(SourceError::ReadStopped { limit }),
        };
        if *left > 0 {
            let mut copy = match held {
                Held::Bytes(b) => Held::Bytes(b.clone()),
                Held::Over => Held::Over,
            };
            return Some(answer(&mut copy));
        }
        let (mut held, _) = self.held.remove(&key)?;
        Some(answer(&mut held))
    }
}

/// Whether `reads` files are worth one download of the whole watched tree.
fn worth_it(reads: usize, tracked: usize) -> bool {
    reads >= MIN_READS && reads.saturating_mul(TRACKED_PER_READ) >= tracked
}

impl GitLabSource {
    /// Download the archive once and keep the bytes of the ids wanted; the
    /// notes say why it was not used, or not for every file.
    pub(super) fn gather_archive(
        &mut self,
        at: &str,
        blobs: &[String],
        limit: u64,
        tracked: usize,
    ) -> Vec<String> {
        if self.archive.tried || self.archive.max_bytes == 0 || !worth_it(blobs.len(), tracked) {
            return Vec::new();
        }
        self.archive.tried = true;
        let mut wanted: HashMap<String, usize> = HashMap::new();
        for b in blobs.iter().filter(|b| super::is_object_id(b)) {
            *wanted.entry(b.to_ascii_lowercase()).or_default() += 1;
        }
        let mut url = self.project_url(&format!("archive.tar.gz?sha={}", encode(at)));
        if let Some(path) = &self.cfg.path {
            url.push_str(&format!("&path={}", encode(path)));
        }
        let fallback = "the files not found in it are read one by one, --max-reads a tick";
        let response = match self.open_archive(&url) {
            Ok(r) => r,
            Err(why) => {
                return vec![format!(
                    "the repository archive was not used: {why}; {fallback}"
                )];
            }
        };
        let max = self.archive.max_bytes;
        let (found, stopped) = unpack(response.into_body().into_reader(), &wanted, limit, max);
        let mut notes = Vec::new();
        if let Some(why) = stopped {
            notes.push(format!(
                "the repository archive stopped after {} of {} files: {why}; {fallback}",
                found.len(),
                wanted.len()
            ));
        } else if found.len() < wanted.len() {
            notes.push(format!(
                "the repository archive held {} of {} files (the others were missing, links, odd paths or other bytes); {fallback}",
                found.len(),
                wanted.len()
            ));
        }
        for (blob, held) in found {
            let reads = wanted.get(&blob).copied().unwrap_or(1);
            self.archive.held.insert(blob, (held, reads));
        }
        notes
    }

    /// The archive's answer, its body not read yet: same-origin redirects
    /// are followed, and anything but a success is a refusal, answered by
    /// falling back rather than by waiting (GitLab.com allows a user 5
    /// archive downloads a minute).
    fn open_archive(&mut self, url: &str) -> Result<ureq::http::Response<ureq::Body>, String> {
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            self.count(Kind::Read);
            let timeout = self.cfg.timeout.max(MIN_TIMEOUT);
            let mut request = self
                .agent
                .get(&url)
                .config()
                .timeout_global(Some(timeout))
                .build();
            if let Some(token) = &self.cfg.token {
                request = request.header("PRIVATE-TOKEN", token.expose());
            }
            let mut response = request.call().map_err(|e| {
                format!(
                    "the download failed ({})",
                    sentinel_io::http::transport_message(&e)
                )
            })?;
            let status = response.status().as_u16();
            match status {
                200..=299 => return Ok(response),
                301 | 302 | 303 | 307 | 308 => {
                    let location = super::header_value(&response, "location").unwrap_or_default();
                    let target = if location.starts_with('/') {
                        format!("{}{location}", self.origin)
                    } else {
                        location
                    };
                    if origin_of(&target).as_deref() != Some(self.origin.as_str()) {
                        return Err(
                            "GitLab redirected the download to another host, where the token is not sent".into(),
                        );
                    }
                    url = target;
                }
                _ => {
                    let body = read_body(&mut response, &url, status, ERROR_BODY_BYTES)
                        .map(|(b, _)| b)
                        .unwrap_or_default();
                    let message = sentinel_core::redact::text(&gitlab_message(&body));
                    return Err(match (status, message.is_empty()) {
                        (429, _) => "GitLab refused it with 429 (GitLab.com allows 5 archive downloads a minute per user)".into(),
                        (_, true) => format!("GitLab refused it with {status}"),
                        (_, false) => format!("GitLab refused it with {status} ({message})"),
                    });
                }
            }
        }
        Err("too many redirects".into())
    }
}

/// A reader that fails once more than `max` bytes went through it, and
/// says so in `over`: the bound holds whatever the headers announced.
struct Counted<R> {
    inner: R,
    left: u64,
    over: Rc<Cell<bool>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte past the bound tells "exactly at it" from "over it".
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.over.set(true);
            return Err(io::Error::other("over the archive limit"));
        }
        let want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// The entries of a tar.gz stream whose bytes hash to a wanted id, each
/// kept when it fits `limit`; and why the stream stopped early, if it did.
/// What was found before a stop is kept: each entry was checked by itself.
fn unpack<R: Read>(
    body: R,
    wanted: &HashMap<String, usize>,
    limit: u64,
    max: u64,
) -> (HashMap<String, Held>, Option<String>) {
    let over = Rc::new(Cell::new(false));
    let compressed = Counted {
        inner: body,
        left: max,
        over: over.clone(),
    };
    let unpacked = Counted {
        inner: flate2::read::GzDecoder::new(compressed),
        left: max,
        over: over.clone(),
    };
    let mut archive = tar::Archive::new(unpacked);
    let mut found = HashMap::new();
    let hex_len = wanted.keys().next().map_or(40, String::len);
    let mut top: Option<Vec<u8>> = None;
    // Raw entries: long names and PAX records are read here, bounded,
    // rather than by the tar reader, which reads them whole.
    let mut name: Option<Vec<u8>> = None;
    let result = (|| -> io::Result<()> {
        for entry in archive.entries()?.raw(true) {
            let mut entry = entry?;
            let kind = entry.header().entry_type();
            if let Some(named) = extension(&mut entry, kind)? {
                name = named.or(name.take());
                continue;
            }
            let path = name
                .take()
                .unwrap_or_else(|| entry.path_bytes().into_owned());
            if !kind.is_file() {
                continue;
            }
            if !plain_path(&path, &mut top) {
                continue;
            }
            let size = entry.size();
            if let Some((blob, held)) = hash_entry(&mut entry, size, limit, hex_len)?
                && wanted.contains_key(&blob)
            {
                found.insert(blob, held);
                if found.len() == wanted.len() {
                    // The rest of the tree is not needed: stop downloading.
                    break;
                }
            }
        }
        Ok(())
    })();
    let stopped = match result {
        Ok(()) => None,
        Err(_) if over.get() => Some(format!("it went past {max} bytes (--max-archive-bytes)")),
        Err(e) if e.kind() == io::ErrorKind::FileTooLarge => Some(e.to_string()),
        Err(e) => Some(format!("the download failed or was cut ({e})")),
    };
    (found, stopped)
}

/// For an entry that describes the next one (a GNU long name or link, a
/// PAX record): `Some` with the name it gives the next entry, if any. Its
/// bytes are read only up to `MAX_NAME_BYTES`; a longer one stops the
/// archive (`FileTooLarge`). `None` for any other entry.
fn extension(entry: &mut impl Read, kind: tar::EntryType) -> io::Result<Option<Option<Vec<u8>>>> {
    let (long_name, pax) = (kind.is_gnu_longname(), kind.is_pax_local_extensions());
    let describes = long_name || pax || kind.is_gnu_longlink() || kind.is_pax_global_extensions();
    if !describes {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    entry.take(MAX_NAME_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_NAME_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "an entry's long name or PAX record is over {MAX_NAME_BYTES} bytes, more than any path takes"
            ),
        ));
    }
    if long_name {
        // GNU writes the name with its terminating NUL.
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        bytes.truncate(end);
        return Ok(Some(Some(bytes)));
    }
    if pax {
        let path = tar::PaxExtensions::new(&bytes)
            .filter_map(Result::ok)
            .filter(|e| e.key_bytes() == b"path")
            .last()
            .map(|e| e.value_bytes().to_vec());
        return Ok(Some(path));
    }
    Ok(Some(None))
}

/// The content id of one entry and what to keep of it. Bytes are counted:
/// an entry that ends before its announced size is no entry.
fn hash_entry(
    entry: &mut impl Read,
    size: u64,
    limit: u64,
    hex_len: usize,
) -> io::Result<Option<(String, Held)>> {
    let mut hasher = Hasher::new(hex_len);
    hasher.update(format!("blob {size}\0").as_bytes());
    let mut kept = Vec::new();
    let mut seen = 0u64;
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = entry.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if seen + n as u64 <= limit {
            kept.extend_from_slice(&buf[..n]);
        }
        seen += n as u64;
    }
    if seen != size {
        return Ok(None);
    }
    let held = if seen <= limit {
        Held::Bytes(kept)
    } else {
        Held::Over
    };
    Ok(Some((hasher.hex(), held)))
}

/// `<top>/<path>` with one top directory shared by every entry and a path
/// the tree would accept: relative, no `.`, `..` or empty segment, no
/// control character, UTF-8.
fn plain_path(raw: &[u8], top: &mut Option<Vec<u8>>) -> bool {
    let Ok(text) = std::str::from_utf8(raw) else {
        return false;
    };
    let Some((first, rest)) = text.split_once('/') else {
        return false;
    };
    if first.is_empty() || first == "." || first == ".." {
        return false;
    }
    match top {
        Some(t) if t.as_slice() != first.as_bytes() => return false,
        Some(_) => {}
        None => *top = Some(first.as_bytes().to_vec()),
    }
    rest.split('/')
        .all(|s| !s.is_empty() && s != "." && s != ".." && !s.chars().any(char::is_control))
        && !first.chars().any(char::is_control)
}

/// Git's object hash: SHA-1, or SHA-256 for a repository of 64-hex ids.
enum Hasher {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl Hasher {
    fn new(hex_len: usize) -> Hasher {
        use sha2::Digest as _;
        if hex_len == 64 {
            Hasher::Sha256(sha2::Sha256::new())
        } else {
            Hasher::Sha1(sha1::Sha1::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        use sha2::Digest as _;
        match self {
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    fn hex(self) -> String {
        use sha2::Digest as _;
        let digest = match self {
            Hasher::Sha1(h) => h.finalize().to_vec(),
            Hasher::Sha256(h) => h.finalize().to_vec(),
        };
        hex::encode(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar.gz of `(path, bytes)` regular files, paths written raw.
    fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, bytes) in files {
            let mut h = tar::Header::new_ustar();
            h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            h.set_cksum();
            tar.append(&h, *bytes).unwrap();
        }
        let raw = tar.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &raw).unwrap();
        gz.finish().unwrap()
    }

    fn id(bytes: &[u8]) -> String {
        super::super::git_blob_id(bytes, 40)
    }

    /// A tar.gz of `(kind, header name, bytes)` entries, as given.
    fn raw_tar_gz(entries: &[(tar::EntryType, &str, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (kind, name, bytes) in entries {
            let mut h = tar::Header::new_gnu();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(*kind);
            h.set_cksum();
            tar.append(&h, *bytes).unwrap();
        }
        let raw = tar.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut gz, &raw).unwrap();
        gz.finish().unwrap()
    }

    /// A PAX record `path=<path>`, its length prefix included.
    fn pax_path(path: &str) -> Vec<u8> {
        let body = format!(" path={path}\n");
        let mut n = body.len() + 1;
        while format!("{n}{body}").len() != n {
            n += 1;
        }
        format!("{n}{body}").into_bytes()
    }

    #[test]
    fn a_long_name_or_pax_record_of_250_mb_stops_the_archive_before_it_is_read() {
        use tar::EntryType::{GNULongName, Regular, XHeader};
        let a = b"a\n".as_slice();
        // 1 MB stands for 250: anything over the bound is refused unread.
        let huge = vec![b'n'; 1 << 20];
        for kind in [GNULongName, XHeader] {
            let gz = raw_tar_gz(&[(kind, "././@LongLink", &huge), (Regular, "t/a.js", a)]);
            let (found, stopped) = unpack(gz.as_slice(), &want(&[id(a)]), 100, 64 << 20);
            let why = stopped.expect("stopped");
            assert!(why.contains("long name or PAX record"), "{why}");
            assert!(found.is_empty());
        }
        // Read here rather than by the tar reader, a name under the bound
        // still names its entry, and is checked like any path.
        let (b, c) = (b"b\n".as_slice(), b"c\n".as_slice());
        let long = format!("t/{}/a.js\0", "d".repeat(200));
        let gz = raw_tar_gz(&[
            (GNULongName, "././@LongLink", long.as_bytes()),
            (Regular, "cut-short", a),
            (XHeader, "pax", &pax_path("t/b.js")),
            (Regular, "t/../evil", b),
            (XHeader, "pax", &pax_path("t/../c.js")),
            (Regular, "t/c.js", c),
        ]);
        let (found, stopped) = unpack(gz.as_slice(), &want(&[id(a), id(b), id(c)]), 100, 1 << 20);
        assert_eq!(stopped, None);
        assert!(found.contains_key(&id(a)), "the long name is the path");
        assert!(found.contains_key(&id(b)), "the PAX path is the path");
        assert!(!found.contains_key(&id(c)), "a PAX path with `..` is odd");
    }

    fn want(ids: &[String]) -> HashMap<String, usize> {
        ids.iter().map(|i| (i.clone(), 1)).collect()
    }

    #[test]
    fn entries_are_matched_by_their_blob_hash_not_their_name() {
        let (a, b) = (b"a\n".as_slice(), b"b\n".as_slice());
        let gz = tar_gz(&[("p-x-y/libs/a.js", a), ("p-x-y/libs/b.js", b"other\n")]);
        let (found, stopped) = unpack(gz.as_slice(), &want(&[id(a), id(b)]), 100, 1 << 20);
        assert_eq!(stopped, None);
        assert!(matches!(found.get(&id(a)), Some(Held::Bytes(x)) if x == a));
        assert!(!found.contains_key(&id(b)), "b.js carries other bytes");
    }

    #[test]
    fn odd_paths_and_a_second_top_directory_are_never_used() {
        let bytes: Vec<Vec<u8>> = (0..7).map(|i| format!("f{i}\n").into_bytes()).collect();
        let names = [
            "top/../a.js",
            "/abs/a.js",
            "top/./a.js",
            "top//a.js",
            "top/a\u{1}.js",
            "other/a.js",
            "top/fine.js",
        ];
        let files: Vec<(&str, &[u8])> = names
            .iter()
            .zip(&bytes)
            .map(|(n, b)| (*n, b.as_slice()))
            .collect();
        let mut files = files;
        // The first entry fixes the top directory.
        files.insert(0, ("top/first.js", b"first\n"));
        let ids: Vec<String> = bytes.iter().map(|b| id(b)).collect();
        let (found, _) = unpack(tar_gz(&files).as_slice(), &want(&ids), 100, 1 << 20);
        assert_eq!(found.keys().collect::<Vec<_>>(), vec![&id(b"f6\n")]);
    }

    #[test]
    fn the_whole_is_bounded_as_it_streams_and_what_was_checked_is_kept() {
        let big = vec![b'x'; 10_000];
        let small = b"small\n".as_slice();
        let gz = tar_gz(&[("t/s.js", small), ("t/big.js", &big)]);
        let (found, stopped) = unpack(gz.as_slice(), &want(&[id(small), id(&big)]), 1 << 20, 4_000);
        assert!(stopped.unwrap().contains("--max-archive-bytes"));
        assert!(found.contains_key(&id(small)));
        assert!(!found.contains_key(&id(&big)));
    }

    #[test]
    fn an_entry_over_the_read_limit_is_hashed_but_not_kept() {
        let big = vec![b'y'; 5_000];
        let gz = tar_gz(&[("t/big.js", &big)]);
        let (found, _) = unpack(gz.as_slice(), &want(&[id(&big)]), 1_000, 1 << 20);
        assert!(matches!(found.get(&id(&big)), Some(Held::Over)));
    }

    #[test]
    fn a_cut_download_keeps_the_entries_read_before_the_cut() {
        let first = b"first\n".as_slice();
        // Bytes that do not compress, so that half the stream ends inside them.
        let mut x = 1u32;
        let rest: Vec<u8> = (0..50_000)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                (x >> 16) as u8
            })
            .collect();
        let gz = tar_gz(&[("t/a.js", first), ("t/b.js", &rest)]);
        let cut = &gz[..gz.len() / 2];
        let (found, stopped) = unpack(cut, &want(&[id(first), id(&rest)]), 1 << 20, 1 << 20);
        assert!(stopped.unwrap().contains("cut"));
        assert!(found.contains_key(&id(first)));
        assert!(!found.contains_key(&id(&rest)));
    }

    #[test]
    fn held_bytes_answer_each_expected_read_and_are_then_let_go() {
        let a = b"same bytes at two paths\n".to_vec();
        let mut archive = Archive::new(1 << 20);
        archive.held.insert(id(&a), (Held::Bytes(a.clone()), 2));
        archive.held.insert(id(b"big"), (Held::Over, 1));
        assert!(archive.holds(&id(&a).to_ascii_uppercase()));
        assert_eq!(archive.take(&id(&a), 100).unwrap().unwrap(), a);
        assert_eq!(archive.take(&id(&a), 100).unwrap().unwrap(), a);
        assert!(!archive.holds(&id(&a)) && archive.take(&id(&a), 100).is_none());
        assert_eq!(
            archive.take(&id(b"big"), 100).unwrap().unwrap_err(),
            SourceError::ReadStopped { limit: 100 }
        );
    }

    #[test]
    fn the_archive_is_worth_it_for_many_reads_of_a_large_share() {
        assert!(!worth_it(1, 2_000));
        assert!(!worth_it(19, 19));
        assert!(worth_it(2_000, 2_000));
        assert!(worth_it(20, 2_000));
        assert!(!worth_it(20, 100_000));
    }
}
