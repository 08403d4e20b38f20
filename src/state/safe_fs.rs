//! Writing files the way git writes objects: never through a planted link.
//!
//! A replaced file is written whole under a new temporary name created with
//! `O_EXCL` (a random name: nothing can be planted at it in advance), given
//! the mode and (as root) the owner of the file it replaces, fsynced and
//! renamed into place. An appended file is opened with `O_NOFOLLOW`. A
//! symbolic link where sentinel writes is refused, never followed.

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
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match opened {
        Ok(f) => return Ok((f, false)),
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
        .custom_flags(libc::O_NOFOLLOW)
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

/// Open `path` to read, never through a link; `None` when it is missing.
pub fn open_read(path: &Path) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(link_error(path)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
