//! Where a patch commit keeps its private index: inside the repository's
//! git directory, never the system's temporary directory, and swept there.
//!
//! A tick killed between `read-tree` and the end of the commit (SIGKILL, a
//! CI job cancelled) leaves its index behind. In the git directory the next
//! commit finds and removes it; in `/tmp` it would stay forever.

use std::path::{Path, PathBuf};

const PREFIX: &str = "sentinel-index-";

/// The index of this process for `blob`, in `git_dir`.
pub fn path(git_dir: &Path, blob: &str) -> PathBuf {
    git_dir.join(format!("{PREFIX}{}-{blob}", std::process::id()))
}

/// Remove the indexes of processes that no longer run: only a live tick
/// (this one, or one on another state of the same clone) may still use one.
pub fn sweep(git_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(git_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if pid > 0 && !alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn alive(pid: i32) -> bool {
    // Signal 0 only checks that the process exists; one of another user
    // (EPERM) is alive all the same.
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|pid| rustix::process::test_kill_process(pid) != Err(rustix::io::Errno::SRCH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_of_a_dead_process_is_swept_and_a_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = dir.path().join(format!("{PREFIX}{dead}-abc"));
        let mine = path(dir.path(), "abc");
        let other = dir.path().join("index");
        for f in [&stale, &mine, &other] {
            std::fs::write(f, b"x").unwrap();
        }
        sweep(dir.path());
        assert!(!stale.exists());
        assert!(mine.exists());
        assert!(other.exists());
    }
}
