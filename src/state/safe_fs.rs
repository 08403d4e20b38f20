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
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

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
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
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

/// Write a new file at `path` the way `replace` does (temp name, mode and
/// owner of `like`, fsync, rename), but leave the fsync of the directory to
/// the caller: a save writing many shards syncs their directory once.
pub fn create_synced(path: &Path, bytes: &[u8], like: Option<&Path>) -> io::Result<()> {
    let template = match like {
        Some(l) => existing(l)?,
        None => None,
    };
    persist_synced(path, bytes, template.as_ref())
}

/// `bytes` in a random `O_EXCL` temp file beside `path`, with the mode and
/// owner of `template`, fsynced, then renamed over `path`.
fn persist_synced(path: &Path, bytes: &[u8], template: Option<&fs::Metadata>) -> io::Result<()> {
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
    tmp.as_file().sync_all()?;
    // The name may have become a link since it was checked: never replace one.
    if is_link(path) {
        return Err(link_error(path));
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    match opened {
        Ok(f) => return Ok((regular(path, f)?, false)),
        // A FIFO nobody reads: opening it to write without blocking says so.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(special_error(path, "a FIFO"));
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(link_error(path)),
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
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
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
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => Ok(Some(regular(path, f)?)),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(link_error(path)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking_to_read_or_to_append() {
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
