//! The commit a branch names, read through gix without starting git, so
//! that a no-op whose tip has not moved costs no process.
//!
//! The head a tick needs (the latest commit touching the watched path) is a
//! function of the tip: the same tip always gives the same head. A tick that
//! found the head remembers the pair; a later tick that reads the same tip
//! reuses the head without looking again. A clone gix declines (see
//! `git_store`) or git's environment overrides answer `None`, and the
//! caller asks git.

use std::path::Path;

use super::git_store::Store;

/// Variables that make git read another repository or other objects than
/// the clone's own files say.
const OVERRIDES: [&str; 4] = [
    "GIT_DIR",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
];

/// The commit id `rev` (`HEAD`, a branch, a full ref) names in the clone
/// at `repo`, when gix reads the clone as git would.
pub fn read(repo: &Path, rev: &str) -> Option<String> {
    if OVERRIDES.iter().any(|v| std::env::var_os(v).is_some()) {
        return None;
    }
    let store = Store::open(repo, rev)?;
    store.tip(rev).ok().map(|id| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn the_tip_is_what_git_rev_parse_gives_and_anything_else_is_left_to_git() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        assert_eq!(read(d, "HEAD"), None, "an unborn branch");
        std::fs::write(d.join("a"), "a").unwrap();
        git(d, &["add", "a"]);
        git(d, &["commit", "-q", "-m", "one"]);
        git(d, &["tag", "-a", "-m", "t", "v1"]);
        git(d, &["pack-refs", "--all"]);
        std::fs::write(d.join("a"), "b").unwrap();
        git(d, &["commit", "-q", "-am", "two"]);
        let head = git(d, &["rev-parse", "HEAD"]);
        for rev in ["HEAD", "main", "refs/heads/main", head.as_str()] {
            assert_eq!(read(d, rev).as_deref(), Some(head.as_str()), "{rev}");
        }
        let tagged = git(d, &["rev-parse", "v1^{commit}"]);
        assert_eq!(read(d, "v1").as_deref(), Some(tagged.as_str()));
        assert_eq!(read(d, "nope"), None);
        assert_eq!(read(d, "main~1"), None, "an expression is git's");
        git(d, &["replace", &tagged, &head]);
        assert_eq!(read(d, "main"), None, "replace refs are git's");
    }
}
