//! Writing files the way git writes objects: never through a planted link.
//!
//! A replaced file is written whole under a new temporary name created with
//! `O_EXCL` (a random name: nothing can be planted at it in advance), given
//! the mode and (as root) the owner of the file it replaces, fsynced and
//! renamed into place. An appended or read file is opened with
//! `O_NOFOLLOW | O_NONBLOCK` and checked to be a regular file before a byte
//! moves: a symbolic link is refused, never followed, and a FIFO, a socket
//! or a device (which any user can plant in a shared directory) is an error
//! naming it, never an `open` or a `read` that waits forever. What is read
//! is bounded before anything is allocated from it.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rustix::fs::OFlags;
use rustix::io::Errno;

/// `custom_flags` for an open that follows no link and never waits (a FIFO
/// with no writer would block it).
pub const NO_LINK_NO_WAIT: i32 = OFlags::NOFOLLOW.union(OFlags::NONBLOCK).bits() as i32;

/// The system's error number behind `e`, if it came from one.
pub fn errno(e: &io::Error) -> Option<Errno> {
    Errno::from_io_error(e)
}

/// Why a write was refused: a link stands where sentinel writes.
pub fn link_error(path: &Path) -> io::Error {
    io::Error::other(format!(
        "`{}` is a symbolic link, and sentinel never writes through one: remove the link, \
         or point the option at the real file",
        path.display()
    ))
}

/// Why a file was refused: something else than a regular file stands there.
pub fn special_error(path: &Path, what: &str) -> io::Error {
    io::Error::other(format!(
        "`{}` is {what}, not a regular file, and sentinel never reads or writes one (it could \
         block a tick forever): remove it",
        path.display()
    ))
}

/// What a file type is, in the words of an error.
fn kind_of(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// `file` (opened from `path`) when it is a regular file; else the error
/// that names what it is.
pub fn regular(path: &Path, file: File) -> io::Result<File> {
    let ft = file.metadata()?.file_type();
    if ft.is_file() {
        Ok(file)
    } else {
        Err(special_error(path, kind_of(ft)))
    }
}

/// Why a file was not read: it is larger than sentinel ever writes it.
pub fn too_large_error(path: &Path, len: u64, limit: u64) -> io::Error {
    io::Error::other(format!(
        "`{}` is {len} bytes, over the {limit} bytes sentinel ever writes there, so it was not \
         read: it is damaged or not sentinel's; move it away",
        path.display()
    ))
}

/// The bytes of `path`, at most `limit` of them (checked on the open file
/// before reading, and again while reading, since a file may grow); `None`
/// when it is missing. A link, a FIFO, a socket or a device is an error.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_read(path)? else {
        return Ok(None);
    };
    let len = file.metadata()?.len();
    if len > limit {
        return Err(too_large_error(path, len, limit));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    io::Read::read_to_end(&mut io::Read::take(file, limit + 1), &mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large_error(path, bytes.len() as u64, limit));
    }
    Ok(Some(bytes))
}

/// Whether `path` itself (not what it points to) is a symbolic link.
pub fn is_link(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Give `file` the mode of `like` and, when running as root, its owner; a
/// missing `like` leaves the new file as created (0666 less the umask).
fn take_after(file: &File, like: Option<&fs::Metadata>) -> io::Result<()> {
    let Some(like) = like else {
        return Ok(());
    };
    file.set_permissions(Permissions::from_mode(like.mode() & 0o7777))?;
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::fchown(file, Some(like.uid()), Some(like.gid()))?;
    }
    Ok(())
}

/// The status of `path` when it is a regular file; a link is refused.
fn existing(path: &Path) -> io::Result<Option<fs::Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(link_error(path)),
        Ok(m) if m.is_file() => Ok(Some(m)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replace `path` with `bytes`: a new `<name>.tmp-<random>` file beside it,
/// fsync, rename, fsync the directory. The new file keeps the mode and owner
/// of the file it replaces, or, for a new file, those of `like` (the state
/// file, for its sidecars) when it exists.
pub fn replace(path: &Path, bytes: &[u8], like: Option<&Path>) -> io::Result<()> {
    let template = match existing(path)? {
        Some(m) => Some(m),
        None => match like {
            Some(l) => existing(l)?,
            None => None,
        },
    };
    persist_synced(path, bytes, template.as_ref())?;
    sync_dir(dir_of(path))
}

/// Files written by one `Batch`: this many are open and being synced at
/// once, by at most `SYNC_THREADS` threads.
const SYNC_WINDOW: usize = 64;
const SYNC_THREADS: usize = 8;

/// New files written the way `replace` does (temp name, mode and owner of
/// `like`, fsync, rename), many at a time: each file is written under its
/// temp name when added (so the caller may reuse its buffer), and each
/// window of them is fsynced by a few threads at once (a wake's two
/// shards, a first run's 512: the device is waited on once per window
/// rather than once per file) and only then renamed into place. The fsync
/// of the directory is left to the caller, who syncs it once for all of
/// them. A file is never renamed before its own bytes are durable, so a
/// crash leaves each name either absent or whole.
pub struct Batch {
    template: Option<fs::Metadata>,
    staged: Vec<(std::path::PathBuf, tempfile::NamedTempFile)>,
}

impl Batch {
    pub fn new(like: Option<&Path>) -> io::Result<Batch> {
        let template = match like {
            Some(l) => existing(l)?,
            None => None,
        };
        Ok(Batch {
            template,
            staged: Vec::new(),
        })
    }

    pub fn add(&mut self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let tmp = write_temp(path, bytes, self.template.as_ref())?;
        self.staged.push((path.to_path_buf(), tmp));
        if self.staged.len() == SYNC_WINDOW {
            self.flush(None)?;
        }
        Ok(())
    }

    /// Sync and rename what is left; `also` (another file whose fsync is
    /// wanted now, renamed by its owner) is synced with them.
    pub fn finish(mut self, also: Option<&File>) -> io::Result<()> {
        self.flush(also)
    }

    fn flush(&mut self, also: Option<&File>) -> io::Result<()> {
        let staged = std::mem::take(&mut self.staged);
        sync_all_of(staged.iter().map(|(_, tmp)| tmp.as_file()).chain(also))?;
        for (path, tmp) in staged {
            rename_synced(&path, tmp)?;
        }
        Ok(())
    }
}

/// A replacement of a file, written beside it under a temp name the way
/// `replace` does but not yet synced: its fsync can be had together with
/// other files' (`Batch::finish`'s `also`), before `commit` renames it.
pub struct Replacement(tempfile::NamedTempFile);

impl Replacement {
    /// `bytes` beside `path`, with the mode and owner of the file it replaces.
    pub fn stage(path: &Path, bytes: &[u8]) -> io::Result<Replacement> {
        let template = existing(path)?;
        write_temp(path, bytes, template.as_ref()).map(Replacement)
    }

    pub fn file(&self) -> &File {
        self.0.as_file()
    }

    /// Rename it over `path` and sync the directory; its own fsync must
    /// have been had already (`Batch::finish`'s `also`).
    pub fn commit(self, path: &Path) -> io::Result<()> {
        rename_synced(path, self.0)?;
        sync_dir(dir_of(path))
    }
}

/// fsync every file, on up to `SYNC_THREADS` threads, the calling one
/// among them; the first error wins. A wake syncs two files, one shard and
/// the manifest: a thread spawned for each cost more than its wait saved.
fn sync_all_of<'a>(files: impl Iterator<Item = &'a File>) -> io::Result<()> {
    let files: Vec<&File> = files.collect();
    if files.len() < 2 {
        return files.iter().try_for_each(|f| f.sync_all());
    }
    let per = files.len().div_ceil(SYNC_THREADS);
    let mut groups = files.chunks(per);
    let own = groups.next().unwrap_or_default();
    std::thread::scope(|s| {
        let handles: Vec<_> = groups
            .map(|group| s.spawn(move || group.iter().try_for_each(|f| f.sync_all())))
            .collect();
        let mine = own.iter().try_for_each(|f| f.sync_all());
        let theirs = handles.into_iter().map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("an fsync thread panicked")))
        });
        std::iter::once(mine)
            .chain(theirs)
            .collect::<io::Result<Vec<()>>>()
            .map(|_| ())
    })
}

/// `bytes` in a new random `O_EXCL` temp file beside `path`, with the mode
/// and owner of `template`; not yet synced.
fn write_temp(
    path: &Path,
    bytes: &[u8],
    template: Option<&fs::Metadata>,
) -> io::Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!("{name}.tmp-"))
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(dir_of(path))?;
    take_after(tmp.as_file(), template)?;
    tmp.write_all(bytes)?;
    Ok(tmp)
}

/// Rename a synced temp file over `path`.
fn rename_synced(path: &Path, tmp: tempfile::NamedTempFile) -> io::Result<()> {
    // The name may have become a link since it was checked: never replace one.
    if is_link(path) {
        return Err(link_error(path));
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// `bytes` in a random `O_EXCL` temp file beside `path`, with the mode and
/// owner of `template`, fsynced, then renamed over `path`.
fn persist_synced(path: &Path, bytes: &[u8], template: Option<&fs::Metadata>) -> io::Result<()> {
    let tmp = write_temp(path, bytes, template)?;
    tmp.as_file().sync_all()?;
    rename_synced(path, tmp)
}

/// Make the entries of `dir` (new names, renames, removals) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Open `path` to append, never through a link; a missing file is created
/// with the mode and owner of `like` when it exists. Returns the file and
/// whether it was created.
pub fn open_append(path: &Path, like: Option<&Path>) -> io::Result<(File, bool)> {
    let opened = OpenOptions::new()
        .append(true)
        .read(true)
        .custom_flags(NO_LINK_NO_WAIT)
        .open(path);
    match opened {
        Ok(f) => return Ok((regular(path, f)?, false)),
        // A FIFO nobody reads: opening it to write without blocking says so.
        Err(e) if errno(&e) == Some(Errno::NXIO) => {
            return Err(special_error(path, "a FIFO"));
        }
        Err(e) if errno(&e) == Some(Errno::LOOP) => return Err(link_error(path)),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let template = match like {
        Some(l) => existing(l)?,
        None => None,
    };
    let created = OpenOptions::new()
        .append(true)
        .read(true)
        .create_new(true)
        .custom_flags(NO_LINK_NO_WAIT)
        .open(path);
    let file = match created {
        Ok(f) => f,
        // Created by someone else in between: open what is there, still no link.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => return open_append(path, None),
        Err(e) => return Err(e),
    };
    take_after(&file, template.as_ref())?;
    Ok((file, true))
}

/// Open `path` to read, never through a link and never waiting (a FIFO
/// with no writer would block `open`), and only when it is a regular file;
/// `None` when it is missing.
pub fn open_read(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(NO_LINK_NO_WAIT)
        .open(path)
    {
        Ok(f) => Ok(Some(regular(path, f)?)),
        Err(e) if errno(&e) == Some(Errno::LOOP) => Err(link_error(path)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Why a file another program left was not read.
#[derive(Debug)]
pub enum Refusal {
    /// The named component is a symbolic link.
    Link(String),
    /// The named component on the way is not a directory.
    NotADirectory(String),
    /// `.`, `..` or an empty component: the name would leave the root.
    OutsideTheRoot,
    Fifo,
    Device,
    Socket,
    Directory,
    /// The file's size (or at least this much) is over the limit.
    TooLarge(u64),
    Io(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Link(at) => write!(f, "`{at}` is a symbolic link"),
            Refusal::NotADirectory(at) => write!(f, "`{at}` is not a directory"),
            Refusal::OutsideTheRoot => write!(f, "the name leaves its directory"),
            Refusal::Fifo => write!(f, "it is a FIFO"),
            Refusal::Device => write!(f, "it is a device"),
            Refusal::Socket => write!(f, "it is a socket"),
            Refusal::Directory => write!(f, "it is a directory"),
            Refusal::TooLarge(n) => write!(f, "it holds more than {n} bytes"),
            Refusal::Io(e) => write!(f, "it cannot be read: {e}"),
        }
    }
}

/// `openat` with `flags` plus no link followed and no descriptor leaked.
fn open_at(dir: BorrowedFd<'_>, name: &str, flags: OFlags) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    Ok(rustix::fs::openat(
        dir,
        name,
        flags,
        rustix::fs::Mode::empty(),
    )?)
}

/// Read `rel` beneath the directory `root` as hostile input: no component
/// (`root` included) is followed if it is a link, the open never blocks (a
/// FIFO is refused, not waited on), only a regular file is read, and at most
/// `limit` bytes (one more is read to know). `Ok(None)`: there is no such file.
pub fn read_beneath(root: &Path, rel: &str, limit: u64) -> Result<Option<Vec<u8>>, Refusal> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(Refusal::OutsideTheRoot);
    }
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY;
    let root_name = root.to_string_lossy();
    let cwd = rustix::fs::CWD;
    let mut dir = open_at(cwd, &root_name, dir_flags)
        .map_err(|e| classify(e, cwd, &root_name, &root_name))?;
    let (name, dirs) = parts.split_last().ok_or(Refusal::OutsideTheRoot)?;
    for (i, part) in dirs.iter().enumerate() {
        dir = match open_at(dir.as_fd(), part, dir_flags) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(classify(e, dir.as_fd(), part, &parts[..=i].join("/"))),
        };
    }
    let fd = match open_at(dir.as_fd(), name, OFlags::RDONLY | OFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        // Opening a socket fails with ENXIO.
        Err(e) if errno(&e) == Some(Errno::NXIO) => return Err(Refusal::Socket),
        Err(e) => return Err(classify(e, dir.as_fd(), name, rel)),
    };
    let file = File::from(fd);
    let meta = file.metadata().map_err(Refusal::Io)?;
    let kind = meta.file_type();
    use std::os::unix::fs::FileTypeExt;
    if !kind.is_file() {
        return Err(if kind.is_fifo() {
            Refusal::Fifo
        } else if kind.is_dir() {
            Refusal::Directory
        } else if kind.is_socket() {
            Refusal::Socket
        } else {
            Refusal::Device
        });
    }
    if meta.len() > limit {
        return Err(Refusal::TooLarge(limit));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    io::Read::read_to_end(&mut io::Read::take(&file, limit + 1), &mut bytes)
        .map_err(Refusal::Io)?;
    if bytes.len() as u64 > limit {
        // It grew after it was measured.
        return Err(Refusal::TooLarge(limit));
    }
    Ok(Some(bytes))
}

/// Why `name` in `dir` (spelled `at` for the message) could not be opened:
/// a link opened as a directory fails with ENOTDIR, so it is looked at.
fn classify(e: io::Error, dir: BorrowedFd<'_>, name: &str, at: &str) -> Refusal {
    match errno(&e) {
        Some(Errno::LOOP) => Refusal::Link(at.to_string()),
        Some(Errno::NOTDIR) if is_link_at(dir, name) => Refusal::Link(at.to_string()),
        Some(Errno::NOTDIR) => Refusal::NotADirectory(at.to_string()),
        _ => Refusal::Io(e),
    }
}

fn is_link_at(dir: BorrowedFd<'_>, name: &str) -> bool {
    use rustix::fs::{AtFlags, FileType, statat};
    statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(root: &Path, rel: &str, limit: u64) -> String {
        match read_beneath(root, rel, limit) {
            Err(r) => r.to_string(),
            Ok(b) => panic!("read {b:?}"),
        }
    }

    #[test]
    fn read_beneath_reads_a_regular_file_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("a/b")).unwrap();
        fs::write(root.join("a/b/f.js"), "x").unwrap();
        assert_eq!(
            read_beneath(root, "a/b/f.js", 1).unwrap(),
            Some(b"x".to_vec())
        );
        assert_eq!(read_beneath(root, "a/b/gone.js", 1).unwrap(), None);
        assert_eq!(refusal(root, "a/b/f.js", 0), "it holds more than 0 bytes");
        assert_eq!(refusal(root, "a/b", 9), "it is a directory");
        assert_eq!(
            refusal(root, "a/../a/b/f.js", 9),
            "the name leaves its directory"
        );
        assert_eq!(
            refusal(root, "a/b/f.js/x", 9),
            "`a/b/f.js` is not a directory"
        );
    }

    #[test]
    fn read_beneath_follows_no_link_anywhere_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("a")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.join("secret"), root.join("a/f")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("d")).unwrap();
        assert_eq!(refusal(&root, "a/f", 9), "`a/f` is a symbolic link");
        assert_eq!(refusal(&root, "d/secret", 9), "`d` is a symbolic link");
        let linked_root = dir.path().join("linked");
        std::os::unix::fs::symlink(&root, &linked_root).unwrap();
        assert!(refusal(&linked_root, "a/f", 9).contains("is a symbolic link"));
    }

    #[test]
    fn read_beneath_refuses_a_fifo_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        self::fifo(&fifo);
        assert_eq!(refusal(dir.path(), "p", 9), "it is a FIFO");
    }

    fn fifo(path: &Path) {
        use rustix::fs::{CWD, FileType, Mode, mknodat};
        mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    }

    #[test]
    fn invariant_21_a_fifo_is_refused_without_blocking_to_read_or_to_append() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        fifo(&path);
        let err = open_read(&path).unwrap_err().to_string();
        assert!(err.contains("is a FIFO, not a regular file"), "{err}");
        assert!(err.contains(&format!("`{}`", path.display())), "{err}");
        let err = open_append(&path, None).unwrap_err().to_string();
        assert!(err.contains("FIFO"), "{err}");
        let err = read_bounded(&path, 10).unwrap_err().to_string();
        assert!(err.contains("FIFO"), "{err}");
    }

    #[test]
    fn a_read_is_bounded_before_it_allocates() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        File::create(&path).unwrap().set_len(1 << 40).unwrap();
        let err = read_bounded(&path, 1 << 20).unwrap_err().to_string();
        assert!(
            err.contains("is 1099511627776 bytes, over the 1048576"),
            "{err}"
        );
        fs::write(&path, b"abc").unwrap();
        assert_eq!(read_bounded(&path, 3).unwrap().unwrap(), b"abc");
        assert!(read_bounded(&dir.path().join("none"), 3).unwrap().is_none());
    }
}
