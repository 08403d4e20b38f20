//! The watched branch's tip, read from the clone's ref files without
//! starting git, so that a no-op whose tip has not moved costs no process.
//!
//! The head a tick needs (the latest commit touching the watched path) is a
//! function of the tip: the same tip always gives the same head. A tick that
//! asked git remembers the pair; a later tick that reads the same tip here
//! reuses the head without asking. Anything this reader is not sure of (a
//! worktree's `.git` file, reftable, a symbolic ref, a shallow clone,
//! replace refs or grafts, git's environment overrides) answers `None`, and
//! the tick asks git as before.

use std::fs;
use std::path::{Path, PathBuf};

/// Variables that make git read another repository or other objects than
/// the clone's own files say.
const OVERRIDES: [&str; 6] = [
    "GIT_DIR",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_REPLACE_REF_BASE",
    "GIT_NO_REPLACE_OBJECTS",
];

/// The commit id `rev` names in the clone at `repo`, when it can be read
/// exactly from the ref files: `rev` is `HEAD` or a full ref (`refs/...`).
pub fn read(repo: &Path, rev: &str) -> Option<String> {
    if OVERRIDES.iter().any(|v| std::env::var_os(v).is_some()) {
        return None;
    }
    let git = git_dir(repo)?;
    // Reftable stores refs in another format; a shallow clone's history of
    // the same tip can deepen; replace refs and grafts rewrite history
    // without moving the tip.
    for other in ["reftable", "shallow", "info/grafts", "refs/replace"] {
        if git.join(other).exists() {
            return None;
        }
    }
    if !rev
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.'))
        || rev.split('/').any(|p| p.is_empty() || p.starts_with('.'))
    {
        // A revision expression (`main~1`, `@{u}`) or an odd name.
        return None;
    }
    let packed = Packed::read(&git)?;
    if rev == "HEAD" {
        let head = fs::read_to_string(git.join("HEAD")).ok()?;
        let head = head.trim_end_matches('\n');
        if is_id(head) {
            return Some(head.to_string());
        }
        return ref_id(&git, &packed, head.strip_prefix("ref: ")?);
    }
    if rev.starts_with("refs/") {
        return ref_id(&git, &packed, rev);
    }
    // A short name, as git spells it out; more than one match is git's to
    // settle (it warns and picks one), and a name of a file in `.git`
    // (`ORIG_HEAD`, `FETCH_HEAD`) is not a branch.
    if git.join(rev).exists() {
        return None;
    }
    let candidates = [
        format!("refs/{rev}"),
        format!("refs/tags/{rev}"),
        format!("refs/heads/{rev}"),
        format!("refs/remotes/{rev}"),
        format!("refs/remotes/{rev}/HEAD"),
    ];
    let mut found = candidates.iter().filter(|c| exists(&git, &packed, c));
    match (found.next(), found.next()) {
        (Some(only), None) => ref_id(&git, &packed, only),
        _ => None,
    }
}

/// The text of `packed-refs` (empty when there is no such file), searched
/// for the one ref a tick needs rather than parsed whole: a clone of a
/// project with ten thousand tags holds as many lines, read on every tick.
struct Packed(String);

impl Packed {
    /// `None` when the file cannot be read or holds replace refs.
    fn read(git: &Path) -> Option<Packed> {
        let text = match fs::read_to_string(git.join("packed-refs")) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Some(Packed(String::new()));
            }
            Err(_) => return None,
        };
        // Every ref line is `<id> <name>`: a name under refs/replace/ is
        // always preceded by the space.
        if text.contains(" refs/replace/") {
            return None;
        }
        Some(Packed(text))
    }

    /// The id on the line `<id> <name>`; comment (`#`) and peeled (`^`)
    /// lines hold no name after a space, so they never match.
    fn get(&self, name: &str) -> Option<&str> {
        let text = self.0.as_str();
        let mut from = 0;
        while let Some(at) = text[from..].find(name).map(|i| from + i) {
            let end = at + name.len();
            from = end;
            let whole_name = text[..at].ends_with(' ')
                && matches!(text.as_bytes().get(end), None | Some(b'\n') | Some(b'\r'));
            if !whole_name {
                continue;
            }
            let line = text[..at - 1].rfind('\n').map_or(0, |n| n + 1);
            let id = &text[line..at - 1];
            if !id.starts_with(['#', '^']) {
                return Some(id);
            }
        }
        None
    }
}

fn exists(git: &Path, packed: &Packed, name: &str) -> bool {
    git.join(name).is_file() || packed.get(name).is_some()
}

/// A loose ref wins over the packed one, as in git.
fn ref_id(git: &Path, packed: &Packed, name: &str) -> Option<String> {
    if !name.starts_with("refs/") || name.split('/').any(|p| p.is_empty() || p.starts_with('.')) {
        return None;
    }
    let loose: PathBuf = git.join(name);
    match fs::read_to_string(&loose) {
        Ok(text) => {
            let id = text.trim_end_matches('\n');
            // A symbolic ref (`ref: ...`) or anything odd: ask git.
            is_id(id).then(|| id.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            packed.get(name).filter(|id| is_id(id)).map(str::to_string)
        }
        Err(_) => None,
    }
}

/// What git itself takes for a git directory (`HEAD`, `objects/`, `refs/`),
/// and not a linked worktree's (which has a `commondir`).
/// The git directory of the clone at `repo`, when it is a plain one: its
/// `.git` directory, or the clone itself when bare.
pub(crate) fn git_dir(repo: &Path) -> Option<std::path::PathBuf> {
    match fs::symlink_metadata(repo.join(".git")) {
        Ok(m) if m.is_dir() => Some(repo.join(".git")),
        // A worktree or submodule has a `.git` file: its refs live elsewhere.
        Ok(_) => None,
        // A bare repository is its own git directory.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && is_bare(repo) => {
            Some(repo.to_path_buf())
        }
        Err(_) => None,
    }
}

fn is_bare(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        fs::symlink_metadata(dir.join(name))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { m.is_file() })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true) && !dir.join("commondir").exists()
}

/// A full SHA-1 or SHA-256 object id in lower-case hex.
fn is_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn clone_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(".git").join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn head_and_full_refs_are_read_loose_first_then_packed() {
        let dir = clone_with(&[
            ("HEAD", "ref: refs/heads/main\n"),
            ("refs/heads/main", &format!("{A}\n")),
            (
                "packed-refs",
                &format!(
                    "# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/main\n{B} refs/heads/old\n^{A}\n"
                ),
            ),
        ]);
        assert_eq!(read(dir.path(), "HEAD").as_deref(), Some(A));
        assert_eq!(read(dir.path(), "refs/heads/main").as_deref(), Some(A));
        assert_eq!(read(dir.path(), "refs/heads/old").as_deref(), Some(B));
        assert_eq!(read(dir.path(), "refs/heads/none"), None);
    }

    #[test]
    fn anything_unsure_is_left_to_git() {
        let short = clone_with(&[("refs/heads/main", &format!("{A}\n"))]);
        assert_eq!(
            read(short.path(), "main").as_deref(),
            Some(A),
            "a short name"
        );
        assert_eq!(read(short.path(), "main~1"), None, "an expression");
        assert_eq!(read(short.path(), "refs/heads/../main"), None);
        let both = clone_with(&[
            ("refs/heads/v1", &format!("{A}\n")),
            ("refs/tags/v1", &format!("{B}\n")),
        ]);
        assert_eq!(read(both.path(), "v1"), None, "a name git would warn about");
        let remote = clone_with(&[("packed-refs", &format!("{B} refs/remotes/origin/main\n"))]);
        assert_eq!(read(remote.path(), "origin/main").as_deref(), Some(B));
        let file = clone_with(&[("ORIG_HEAD", &format!("{A}\n"))]);
        assert_eq!(read(file.path(), "ORIG_HEAD"), None);
        let symbolic = clone_with(&[("refs/heads/main", "ref: refs/heads/other\n")]);
        assert_eq!(read(symbolic.path(), "refs/heads/main"), None);
        for marker in [
            "shallow",
            "info/grafts",
            "reftable/tables.list",
            "refs/replace/x",
        ] {
            let dir = clone_with(&[("refs/heads/main", &format!("{A}\n")), (marker, "")]);
            assert_eq!(read(dir.path(), "refs/heads/main"), None, "{marker}");
        }
        let replaced = clone_with(&[(
            "packed-refs",
            &format!("{A} refs/heads/main\n{B} refs/replace/{A}\n"),
        )]);
        assert_eq!(read(replaced.path(), "refs/heads/main"), None);
        let worktree = tempfile::tempdir().unwrap();
        fs::write(worktree.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(read(worktree.path(), "HEAD"), None);
    }

    #[test]
    fn a_packed_ref_is_found_by_its_whole_name_among_ten_thousand_tags() {
        let mut packed = String::from("# pack-refs with: peeled fully-peeled sorted \n");
        packed.push_str(&format!("{A} refs/heads/main2\n{A} refs/heads/xmain\n"));
        for i in 0..10_000 {
            packed.push_str(&format!("{A} refs/tags/v{i}\n^{A}\n"));
        }
        packed.push_str(&format!("{B} refs/heads/main"));
        let dir = clone_with(&[("packed-refs", &packed), ("HEAD", "ref: refs/heads/main\n")]);
        assert_eq!(
            read(dir.path(), "HEAD").as_deref(),
            Some(B),
            "the last line, no newline"
        );
        assert_eq!(
            read(dir.path(), "refs/heads/mai"),
            None,
            "a prefix is not a name"
        );
        assert_eq!(read(dir.path(), "v9999").as_deref(), Some(A));
        assert_eq!(read(dir.path(), "refs/heads/main2").as_deref(), Some(A));
    }

    #[test]
    fn a_bare_clone_is_its_own_git_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("objects")).unwrap();
        fs::create_dir_all(dir.path().join("refs/heads")).unwrap();
        fs::write(dir.path().join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(
            dir.path().join("packed-refs"),
            format!("{A} refs/heads/main\n"),
        )
        .unwrap();
        assert_eq!(read(dir.path(), "HEAD").as_deref(), Some(A));
        // A linked worktree's git directory is git's to read.
        fs::write(dir.path().join("commondir"), "../..\n").unwrap();
        assert_eq!(read(dir.path(), "HEAD"), None);
    }

    #[test]
    fn a_detached_head_is_its_own_tip() {
        let dir = clone_with(&[("HEAD", &format!("{A}\n"))]);
        assert_eq!(read(dir.path(), "HEAD").as_deref(), Some(A));
    }
}
