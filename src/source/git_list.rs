//! The listing of `git ls-tree -r` read from the object files themselves, so
//! that a first run starts no git process to learn what it will judge.
//!
//! The answer must be what `git::parse_ls_tree` makes of `ls-tree -r -z
//! --full-tree <commit> [<path>]`: every regular or executable file under
//! the watched path, in git's order, links and submodules left out. Anything
//! this reader is not sure of (not a commit, a mode or a tree git would not
//! write, an object it cannot read, a path git would read otherwise) is
//! `None`, and `git ls-tree` answers.

use super::Entry;
use super::git_objects::{Kind, Node, Tree, components, hex, parse_commit, parse_tree};
use super::git_odb::{self, Odb};

/// The largest tree object read here: a directory of about a million
/// names. A larger one is left to git.
const MAX_TREE: u64 = 64 << 20;

/// The deepest directory followed: deeper than any checkout can hold
/// (`PATH_MAX`), so only a made-up tree reaches it.
const MAX_DEPTH: usize = 2048;

/// The files under `watched` (`None`: the whole repository) at `commit`.
pub(super) fn list(odb: &mut Odb, commit: &str, watched: Option<&str>) -> Option<Vec<Entry>> {
    let (git_odb::Kind::Commit, bytes) = odb.read(commit, MAX_TREE)? else {
        return None;
    };
    let root = parse_commit(&bytes)?.tree;
    let parts = components(watched)?;
    let mut node = Node {
        kind: Kind::Tree,
        id: root,
    };
    for part in &parts {
        if node.kind != Kind::Tree {
            return Some(Vec::new());
        }
        match tree(odb, &node.id)?.find(part) {
            Some(found) => node = found,
            None => return Some(Vec::new()),
        }
    }
    let mut path = parts.join(&b'/');
    let mut out = Vec::new();
    match node.kind {
        Kind::Tree => below(odb, &node.id, &mut path, 0, &mut out)?,
        // `ls-tree` given a file's own path lists that file.
        Kind::File | Kind::Exec => out.push(file(&path, &node.id)),
        Kind::Link | Kind::Gitlink => {}
    }
    Some(out)
}

fn tree(odb: &mut Odb, id: &[u8; 20]) -> Option<Tree> {
    match odb.read(&hex(id), MAX_TREE)? {
        (git_odb::Kind::Tree, bytes) => parse_tree(bytes),
        _ => None,
    }
}

/// Every file below the tree `id`, whose path is `path`, depth first in
/// the tree's own order (as `ls-tree -r` prints them).
fn below(
    odb: &mut Odb,
    id: &[u8; 20],
    path: &mut Vec<u8>,
    depth: usize,
    out: &mut Vec<Entry>,
) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let at = path.len();
    let tree = tree(odb, id)?;
    for (name, node) in tree.iter() {
        path.truncate(at);
        if at > 0 {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        match node.kind {
            Kind::Tree => below(odb, &node.id, path, depth + 1, out)?,
            Kind::File | Kind::Exec => out.push(file(path, &node.id)),
            Kind::Link | Kind::Gitlink => {}
        }
    }
    path.truncate(at);
    Some(())
}

fn file(path: &[u8], id: &[u8; 20]) -> Entry {
    Entry {
        // Lossy, as the names `ls-tree` prints are read.
        path: String::from_utf8_lossy(path).into_owned(),
        blob: hex(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::git_odb::tests::git;
    use std::path::Path;

    /// What `git ls-tree` lists, parsed as the source parses it.
    fn ls_tree(dir: &Path, commit: &str, watched: Option<&str>) -> Vec<Entry> {
        let mut args = vec![
            "ls-tree",
            "-r",
            "-z",
            "--full-tree",
            "--end-of-options",
            commit,
        ];
        args.extend(watched);
        super::super::git::parse_ls_tree(&git(dir, &args)).expect("ls-tree parses")
    }

    /// A tree with what git sorts oddly (`a` as a directory against `a.b`
    /// and `a-b`), executables, a link, a submodule, names with spaces, a
    /// newline and bytes that are not UTF-8, nested directories.
    fn odd_repo(dir: &Path) -> String {
        git(dir, &["init", "-q", "--initial-branch=main"]);
        let files: &[&[u8]] = &[
            b"a/x.txt",
            b"a.b",
            b"a-b/y.txt",
            b"a0",
            b"src/deep/er/still/z.js",
            b"src/one two.js",
            b"src/new\nline.js",
            b"src/\xff\xfe.js",
            b"src/run.sh",
            b"top.md",
        ];
        for f in files {
            use std::os::unix::ffi::OsStrExt;
            let p = dir.join(std::ffi::OsStr::from_bytes(f));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, f).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        let run = dir.join("src/run.sh");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("top.md", dir.join("src/link.md")).unwrap();
        git(dir, &["add", "-A"]);
        // A submodule entry, as `git submodule add` leaves in the index.
        let sub = "1111111111111111111111111111111111111111";
        git(
            dir,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{sub},src/sub"),
            ],
        );
        git(dir, &["commit", "-q", "-m", "odd"]);
        String::from_utf8(git(dir, &["rev-parse", "HEAD"]))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn the_listing_read_from_the_objects_is_the_listing_git_gives() {
        let dir = tempfile::tempdir().unwrap();
        let head = odd_repo(dir.path());
        for packed in [false, true] {
            if packed {
                git(dir.path(), &["gc", "-q", "--aggressive"]);
            }
            let mut odb = Odb::open(&dir.path().join(".git")).expect("a plain clone opens");
            for watched in [
                None,
                Some("src"),
                Some("a"),
                Some("src/deep/er"),
                Some("top.md"),
                Some("src/run.sh"),
                Some("src/link.md"),
                Some("src/sub"),
                Some("missing"),
                Some("top.md/below"),
                Some("sr"),
            ] {
                let native = list(&mut odb, &head, watched)
                    .unwrap_or_else(|| panic!("{watched:?} is listed from the objects"));
                assert_eq!(native, ls_tree(dir.path(), &head, watched), "{watched:?}");
            }
        }
        let all = ls_tree(dir.path(), &head, None);
        assert_eq!(all.len(), 10, "the odd names are all there: {all:?}");
    }

    #[test]
    fn what_the_objects_cannot_list_exactly_is_left_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let head = odd_repo(dir.path());
        let mut odb = Odb::open(&dir.path().join(".git")).unwrap();
        let tree = String::from_utf8(git(dir.path(), &["rev-parse", "HEAD^{tree}"])).unwrap();
        // A tree is not a commit, a name git would read as another path is
        // not read here, and an object the files do not hold is git's.
        assert!(list(&mut odb, tree.trim(), None).is_none());
        assert!(list(&mut odb, &head, Some("src//deep")).is_none());
        assert!(list(&mut odb, &head, Some("./src")).is_none());
        assert!(list(&mut odb, &"2".repeat(40), None).is_none());
    }
}
