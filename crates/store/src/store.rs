//! Loading, locking and atomically saving the state document.
//!
//! The document is ordinary JSON with a fixed layout: the first line holds the
//! header (the wake gate's memory and the counters) and its own length check,
//! the rest holds the backlog and one line per file. A no-op tick reads only
//! the first line; anything that does not match the layout exactly (an
//! edited, reformatted or truncated file) falls back to a full parse, which
//! either succeeds or names the position of the problem.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;

use super::files::{Files, Loader, Saved};
use super::limits;
use super::safe_fs;
use super::schema::{Header, SCHEMA, State};
use super::shards::{self, Layout};

/// A longer first line is not a header written by sentinel.
const MAX_HEADER_BYTES: u64 = 1 << 20;

/// `<state>` + `suffix`, next to the state file.
pub fn sidecar(state: &Path, suffix: &str) -> PathBuf {
    let mut name = state
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "state.json".into());
    name.push(suffix);
    state.with_file_name(name)
}

/// An exclusive lock on `<state>.lock`, held until dropped.
#[derive(Debug)]
pub struct StateLock {
    file: File,
}

impl Drop for StateLock {
    fn drop(&mut self) {
        // Unlock explicitly: a child process forked by another thread may
        // still share this file description for an instant, and closing our
        // descriptor alone would leave the lock held until it execs.
        let _ = self.file.unlock();
    }
}

/// Outcome of trying to take the lock.
#[derive(Debug)]
pub enum LockAttempt {
    Acquired(StateLock),
    /// Another process holds it.
    Busy(PathBuf),
}

/// Take the lock without waiting. Creates the state's directory if needed.
pub fn try_lock(state: &Path) -> Result<LockAttempt> {
    if let Some(dir) = state
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        fs::create_dir_all(dir).with_context(|| {
            format!(
                "cannot create the state directory `{}`; create it or choose another --state",
                dir.display()
            )
        })?;
        // The default state lives inside the clone; keep it out of `git status`.
        if dir.file_name().is_some_and(|n| n == ".sentinel") {
            let _ = super::safe_fs::replace(&dir.join(".gitignore"), b"*\n", None);
        }
    }
    let path = sidecar(state, ".lock");
    let file = open_lock(&path)?;
    match file.try_lock() {
        Ok(()) => Ok(LockAttempt::Acquired(StateLock { file })),
        Err(fs::TryLockError::WouldBlock) => Ok(LockAttempt::Busy(path)),
        Err(fs::TryLockError::Error(e)) => {
            Err(anyhow!(e).context(format!("cannot lock `{}`", path.display())))
        }
    }
}

/// Open `<state>.lock` read-write, created 0600, never through a link and
/// never waiting (a FIFO there would block `open` forever), and only when it
/// is the owner's own regular file: a lock another user owns, or one others
/// may open to write, would let them hold it and make every tick busy.
fn open_lock(path: &Path) -> Result<File> {
    if safe_fs::is_link(path) {
        return Err(anyhow!(safe_fs::link_error(path)));
    }
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(safe_fs::NO_LINK_NO_WAIT)
        .open(path)
        .map_err(|e| match safe_fs::errno(&e) {
            Some(rustix::io::Errno::NXIO) => anyhow!(safe_fs::special_error(path, "a FIFO")),
            _ => anyhow!(
                "cannot open the lock file `{}`: {e}; check the permissions of its directory, and that the lock is the file of the user running sentinel",
                path.display()
            ),
        })?;
    let file = safe_fs::regular(path, file).map_err(|e| anyhow!(e))?;
    let meta = file.metadata()?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        bail!(
            "the lock file `{}` belongs to user {}, not to user {me} running sentinel: another user could hold it and make every tick busy; remove it (sentinel creates its own) or run sentinel as its owner",
            path.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o022 != 0 {
        bail!(
            "the lock file `{}` is writable by its group or others (mode {:o}): another user could hold it and make every tick busy; `chmod 600` it",
            path.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(file)
}

/// What the first line of a document written by sentinel carries.
#[derive(Deserialize)]
struct HeaderLine {
    #[serde(flatten)]
    header: Header,
    body_bytes: u64,
}

/// The header only, read from the first line; `None` when the file is missing.
/// Falls back to a full load when the fast layout does not match.
pub fn load_header(path: &Path) -> Result<Option<Header>> {
    Ok(load_header_opened(path)?.0)
}

/// The state file as `load_header_opened` left it: open, its first line
/// read (and what came with it), for a load later in the tick to read on
/// from there rather than open and read the file again.
#[derive(Debug)]
pub struct Opened {
    file: File,
    bytes: Vec<u8>,
    /// The file's length when it was opened.
    len: u64,
}

impl Opened {
    /// The whole file, bounded as `safe_fs::read_bounded` bounds it.
    fn read_rest(self, path: &Path) -> std::io::Result<Vec<u8>> {
        let Opened {
            file,
            mut bytes,
            len,
        } = self;
        let limit = limits::MAX_STATE_BYTES;
        if len > limit {
            return Err(safe_fs::too_large_error(path, len, limit));
        }
        bytes.reserve_exact((len as usize).saturating_sub(bytes.len()));
        let left = (limit + 1).saturating_sub(bytes.len() as u64);
        (&file).take(left).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > limit {
            return Err(safe_fs::too_large_error(path, bytes.len() as u64, limit));
        }
        Ok(bytes)
    }
}

/// `load_header`, and the file left open with what was read of it when the
/// header line was read as written.
pub fn load_header_opened(path: &Path) -> Result<(Option<Header>, Option<Opened>)> {
    refuse_link(path)?;
    let file = match safe_fs::open_read(path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok((None, None)),
        Err(e) => return Err(open_error(path, e)),
    };
    let total = file.metadata().map_err(|e| open_error(path, e))?.len();
    // Up to the first line break, at most `MAX_HEADER_BYTES`, 8 KiB a read.
    let mut bytes = Vec::with_capacity(8192);
    let line_end = loop {
        let from = bytes.len();
        let room = (MAX_HEADER_BYTES - from as u64).min(8192);
        let got = (&file)
            .take(room)
            .read_to_end(&mut bytes)
            .map_err(|e| open_error(path, e))?;
        if let Some(i) = bytes[from..].iter().position(|&b| b == b'\n') {
            break from + i + 1;
        }
        if got == 0 || bytes.len() as u64 >= MAX_HEADER_BYTES {
            break bytes.len();
        }
    };
    if let Some(header) = parse_header_line(&bytes[..line_end], total) {
        check_schema(path, header.schema)?;
        let opened = Opened {
            file,
            bytes,
            len: total,
        };
        return Ok((Some(header), Some(opened)));
    }
    Ok((load_lazy(path)?.map(|s| s.header()), None))
}

fn parse_header_line(line: &[u8], total: u64) -> Option<Header> {
    let body = line.strip_suffix(b",\n")?;
    let mut object = Vec::with_capacity(body.len() + 1);
    object.extend_from_slice(body);
    object.push(b'}');
    let parsed: HeaderLine = serde_json::from_slice(&object).ok()?;
    (line.len() as u64 + parsed.body_bytes == total).then_some(parsed.header)
}

/// The whole state with every shard read and checked; `None` when the file
/// is missing (first run). For the commands that look at every record.
pub fn load(path: &Path) -> Result<Option<State>> {
    // A reader without the lock (`stats` while a tick saves) may read a
    // manifest whose shards the save then removes: the second read finds
    // the new manifest, whole. A damaged state fails both times alike.
    load_whole(path).or_else(|_| load_whole(path))
}

fn load_whole(path: &Path) -> Result<Option<State>> {
    let Some(state) = load_lazy(path)? else {
        return Ok(None);
    };
    state.files.load_all();
    if let Some(e) = state.files.error() {
        bail!("{e}");
    }
    Ok(Some(state))
}

/// The state with no shard read yet: each is read when a record in it is
/// first looked at (`files::Files`). `None` when the file is missing.
pub fn load_lazy(path: &Path) -> Result<Option<State>> {
    Ok(load_kept(path)?.map(|(state, _)| state))
}

/// What a save may copy from the manifest a load read rather than write it
/// again: the line of each shard whose summary is still the one read. A
/// wake changes two or three of 512, and writing the others again was a
/// third of the manifest's encoding.
pub struct Kept {
    bytes: Vec<u8>,
    /// Each bucket's line.
    lines: Vec<std::ops::Range<usize>>,
    /// The loader the records were attached with: while the state's records
    /// are those (`Rc::ptr_eq`), each bucket's `saved` is what its line was
    /// read as, for no record changes it (a copy of 512 summaries to compare
    /// with was 90 KB and a tenth of the manifest's reading).
    loader: Loader,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("bytes", &self.bytes.len())
            .field("lines", &self.lines.len())
            .finish()
    }
}

impl Kept {
    /// Bucket `i`'s line as read, when `saved` is what it was read as.
    fn line(&self, files: &Files, (i, of): (usize, usize), saved: Option<&Saved>) -> Option<&[u8]> {
        let attached = files
            .loader
            .as_ref()
            .is_some_and(|l| Rc::ptr_eq(l, &self.loader));
        let counts = self.lines.len() == of && files.slots.len() == of;
        let read = files.slots.get(i)?.saved.as_ref();
        let same = attached && counts && read == saved;
        same.then(|| &self.bytes[self.lines[i].clone()])
    }
}

/// `load_lazy`, and what a save of the state may copy from the manifest.
pub fn load_kept(path: &Path) -> Result<Option<(State, Option<Kept>)>> {
    load_kept_from(path, None)
}

/// `load_kept`, reading on from where `opened` stopped when given.
pub fn load_kept_from(
    path: &Path,
    opened: Option<Opened>,
) -> Result<Option<(State, Option<Kept>)>> {
    refuse_link(path)?;
    let read = match opened {
        Some(opened) => opened.read_rest(path).map(Some),
        None => safe_fs::read_bounded(path, limits::MAX_STATE_BYTES),
    };
    let bytes = match read {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(open_error(path, e)),
    };
    if let Some(parts) = super::manifest::read(&bytes) {
        let mut state = parts.state;
        check_schema(path, state.schema)?;
        check_bounds(path, &state)?;
        shards::attach(&mut state, path, parts.layout, parts.shards)?;
        let kept = parts.lines.zip(state.files.loader.clone());
        let kept = kept.map(|(lines, loader)| Kept {
            bytes,
            lines,
            loader,
        });
        return Ok(Some((state, kept)));
    }
    match serde_json::from_slice::<State>(&bytes) {
        Ok(mut state) => {
            check_schema(path, state.schema)?;
            check_bounds(path, &state)?;
            // A manifest names its shards; a document of schema 1 holds its
            // records itself and is migrated by its next save.
            let tail: shards::Tail = serde_json::from_slice(&bytes).map_err(|e| {
                anyhow!(
                    "state file `{}` is not a valid manifest: {e}; the file was left untouched: restore it from a backup, or move it away to start over",
                    path.display()
                )
            })?;
            if let Some(layout) = tail.layout {
                shards::attach(&mut state, path, layout, tail.shards)?;
            }
            Ok(Some((state, None)))
        }
        Err(err) => {
            // A newer schema may well not parse as this one: say so rather
            // than report a type error in a field this build never knew.
            #[derive(Deserialize)]
            struct SchemaOnly {
                schema: u32,
            }
            if let Ok(s) = serde_json::from_slice::<SchemaOnly>(&bytes) {
                check_schema(path, s.schema)?;
            }
            let what = if bytes.iter().all(u8::is_ascii_whitespace) {
                "is empty".to_string()
            } else if err.is_eof() {
                format!(
                    "is truncated (line {}, column {})",
                    err.line(),
                    err.column()
                )
            } else {
                format!("is not a valid state document: {err}")
            };
            bail!(
                "state file `{}` {what}; the file was left untouched: restore it from a backup, or move it away to start over with a first run",
                path.display()
            )
        }
    }
}

/// A state path that is a symbolic link is refused on every tick, no-op or
/// save alike: what it points to is not sentinel's to read or replace.
fn refuse_link(path: &Path) -> Result<()> {
    if safe_fs::is_link(path) {
        bail!(
            "state file `{}` is a symbolic link, and sentinel never writes through one; point --state at the real file",
            path.display()
        );
    }
    Ok(())
}

fn check_schema(path: &Path, schema: u32) -> Result<()> {
    if schema > SCHEMA {
        bail!(
            "state file `{}` has schema {schema}, newer than the {SCHEMA} this sentinel understands; upgrade sentinel (the file was left untouched)",
            path.display()
        );
    }
    if schema == 0 {
        bail!(
            "state file `{}` has no valid `schema` field; the file was left untouched: restore it from a backup, or move it away to start over",
            path.display()
        );
    }
    Ok(())
}

/// A number outside its bounds is damage: the state is not worked on as if
/// it held zero there, and the message names the field and what it may hold.
fn check_bounds(path: &Path, state: &State) -> Result<()> {
    if let Err(d) = super::bounds::check(state) {
        bail!(
            "state file `{}` is damaged: {d}; the file was left untouched: set the field to a value within that bound (0 resets it), restore the file from a backup, or move it away to start over with a first run",
            path.display()
        );
    }
    Ok(())
}

/// The save's half of `check_bounds`: a state its own loader would refuse
/// is never written, the previous one is kept.
fn check_before_save(path: &Path, state: &State) -> Result<()> {
    if let Err(d) = super::bounds::check(state) {
        bail!(
            "refusing to save state file `{}`: {d}; the previous state was kept: this is a bug of sentinel, report it with the command that led to it",
            path.display()
        );
    }
    Ok(())
}

fn open_error(path: &Path, e: std::io::Error) -> anyhow::Error {
    let hint = if path.is_dir() {
        "it is a directory; point --state at a file path".to_string()
    } else {
        format!("{e}; check that the file is readable")
    };
    anyhow!("cannot read state file `{}`: {hint}", path.display())
}

/// The last admitted triggered start, from `<state>.start`; a missing file
/// or one that does not hold a time counts as none (an admission must never
/// wedge a scheduler). A FIFO, a device or an oversized file there is an
/// error: reading it could block or flood the tick.
pub fn read_start(state: &Path) -> Result<Option<chrono::DateTime<chrono::Utc>>> {
    let path = sidecar(state, ".start");
    let bytes = match safe_fs::read_bounded(&path, limits::MAX_START_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => return Ok(None),
        Err(e) => bail!("cannot read `{}`: {e}", path.display()),
    };
    let text = String::from_utf8_lossy(&bytes);
    Ok(chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc)))
}

/// Remember an admitted triggered start (a sidecar: the state file is not
/// touched, so a triggered no-op still leaves it byte-identical).
pub fn write_start(state: &Path, now: chrono::DateTime<chrono::Utc>) -> Result<()> {
    let path = sidecar(state, ".start");
    let text = format!(
        "{}\n",
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    safe_fs::replace(&path, text.as_bytes(), Some(state)).map_err(|e| {
        anyhow!(
            "cannot write `{}`: {e}; check that the state directory is writable",
            path.display()
        )
    })
}

/// The state-wide parts after the header: backlog, advisor, observations,
/// their words redacted (reasons and error details come from peers); the
/// backlog is paths, data, written as it is.
fn encode_common(state: &State, body: &mut Vec<u8>) -> Result<()> {
    body.extend_from_slice(b"\"backlog\":");
    serde_json::to_writer(&mut *body, &state.backlog)?;
    body.extend_from_slice(b",\n\"llm\":");
    sentinel_core::redact::to_writer(&mut *body, &state.llm)?;
    body.extend_from_slice(b",\n\"observations\":");
    // Written by serde, then checked whole: only a log holding something
    // to redact goes through the redaction's own serialisation.
    let at = body.len();
    serde_json::to_writer(&mut *body, &state.observations)?;
    if !std::str::from_utf8(&body[at..]).is_ok_and(sentinel_core::redact::nothing_to_redact) {
        body.truncate(at);
        sentinel_core::redact::to_writer(&mut *body, &state.observations)?;
    }
    Ok(())
}

/// The header line (with the body's length, so a no-op notices a truncated
/// file without reading it), then the body.
fn with_header(header: &Header, body: &[u8]) -> Result<Vec<u8>> {
    let header = sentinel_core::redact::to_string(header)?.into_bytes();
    let mut out = Vec::with_capacity(header.len() + body.len() + 32);
    out.extend_from_slice(&header[..header.len() - 1]);
    writeln!(out, ",\"body_bytes\":{},", body.len())?;
    out.extend_from_slice(body);
    Ok(out)
}

/// Serialise as one document (schema 1's layout, kept by `MemoryStorage`):
/// header line, then backlog, then one line per file.
pub fn encode(state: &State) -> Result<Vec<u8>> {
    check_before_save(Path::new("memory"), state)?;
    let mut body = Vec::with_capacity(64 + state.files.len() * 256);
    encode_common(state, &mut body)?;
    body.extend_from_slice(b",\n\"files\":{");
    for (i, (path, record)) in state.files.iter().enumerate() {
        body.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        serde_json::to_writer(&mut body, path)?;
        body.push(b':');
        sentinel_core::redact::to_writer(&mut body, record)?;
    }
    body.extend_from_slice(b"\n}}\n");
    with_header(&state.header(), &body)
}

/// An encoded manifest: its bytes are `buf[start..]`.
pub struct Manifest {
    buf: Vec<u8>,
    start: usize,
}

impl Manifest {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

/// The most bytes the header line's `,"body_bytes":N,` and line break take.
const BODY_BYTES_ROOM: usize = ",\"body_bytes\":".len() + 20 + 2;

/// Serialise the manifest of the sharded layout: header line, the
/// state-wide parts, the layout, then one line per shard. It is encoded in
/// one buffer, sized up front, the body after room left for the header
/// line, which is put in front of it once the body's length is known: the
/// growth and the copy of a 200 KB body were a hundred page faults a wake.
pub fn encode_manifest(
    state: &State,
    layout: &Layout,
    shards: &[Option<Saved>],
    kept: Option<&Kept>,
) -> Result<Manifest> {
    let mut header = state.header();
    // Whatever schema it was read at, it is written at this one.
    header.schema = SCHEMA;
    let header = sentinel_core::redact::to_string(&header)?.into_bytes();
    let room = header.len() + BODY_BYTES_ROOM;
    let mut buf = Vec::with_capacity(room + manifest_size_hint(state, shards, kept));
    buf.resize(room, 0);
    encode_common(state, &mut buf)?;
    buf.extend_from_slice(b",\n\"layout\":");
    serde_json::to_writer(&mut buf, layout)?;
    buf.extend_from_slice(b",\n\"shards\":[");
    for (i, s) in shards.iter().enumerate() {
        buf.extend_from_slice(if i == 0 { b"\n" } else { b",\n" });
        match kept.and_then(|k| k.line(&state.files, (i, shards.len()), s.as_ref())) {
            Some(line) => buf.extend_from_slice(line),
            None => serde_json::to_writer(&mut buf, s)?,
        }
    }
    buf.extend_from_slice(b"\n]}\n");
    let mut line = Vec::with_capacity(room);
    line.extend_from_slice(&header[..header.len() - 1]);
    writeln!(line, ",\"body_bytes\":{},", buf.len() - room)?;
    let start = room - line.len();
    buf[start..room].copy_from_slice(&line);
    Ok(Manifest { buf, start })
}

/// About the size of the manifest's body, rather more than less: what is
/// reserved and never written is never touched.
fn manifest_size_hint(state: &State, shards: &[Option<Saved>], kept: Option<&Kept>) -> usize {
    let log = &state.observations;
    let estimate = 4096
        + shards.len() * 256
        + (log.open.len() + log.resolved.len()) * 512
        + state.backlog.iter().map(|p| p.len() + 8).sum::<usize>();
    estimate.max(kept.map_or(0, |k| k.bytes.len() + 4096))
}

/// Save in the sharded layout (see `shards`): the changed shards, then the
/// manifest, atomically; a crash at any instant leaves either the old or the
/// new state whole. Returns the bytes written.
pub fn save(path: &Path, state: &State) -> Result<u64> {
    save_kept(path, state, None)
}

/// `save`, copying from `kept` (what a load read of the manifest) what is
/// still as it was read.
pub fn save_kept(path: &Path, state: &State, kept: Option<&Kept>) -> Result<u64> {
    refuse_link(path)?;
    check_before_save(path, state)?;
    let w = shards::save_kept(path, state, kept)?;
    remove_stale_temps(path);
    Ok(w.shard_bytes + w.manifest_bytes)
}

/// Temp files of ticks killed mid-save. Only the lock holder saves, so once
/// a save succeeded every other temp file of the state or its sidecars is
/// an orphan.
fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    // `<state>.tmp-*`, and the temps of its sidecars (`<state>.decisions.tmp-*`, ...).
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let entry_name = entry.file_name().to_string_lossy().into_owned();
        if entry_name.starts_with(&prefix) && entry_name.contains(".tmp-") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    safe_fs::replace(path, bytes, None).map_err(|e| {
        anyhow!(
            "cannot save state file `{}`: {e}; the previous state was kept, check that the directory is writable",
            path.display()
        )
    })
}

/// Replace a report file (the Code Quality report, the dashboard file) the
/// same way; it is not the state, so its error says nothing of the state.
pub fn write_report(path: &Path, bytes: &[u8]) -> Result<()> {
    safe_fs::replace(path, bytes, None).map_err(|e| {
        anyhow!(
            "cannot write `{}`: {e}; check that its directory is writable",
            path.display()
        )
    })
}
