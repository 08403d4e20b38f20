//! How sentinel starts git, whichever layer starts it: no hook and no
//! fsmonitor (a hook or an fsmonitor command in a clone's config or hooks
//! directory, which an agent can plant, would otherwise run as sentinel,
//! outside the agent's run), and none of the job's variables that point git
//! at another repository.

use std::ffi::OsString;
use std::io;

/// Environment that would point git at another repository, work tree or
/// object store than the one we were given (set, for instance, when we run
/// from inside a git hook).
pub const REDIRECTING_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

/// An empty directory of sentinel's own, made for the commands that name
/// it and removed with this value.
pub struct HooksOff(tempfile::TempDir);

impl HooksOff {
    pub fn new() -> io::Result<HooksOff> {
        tempfile::Builder::new()
            .prefix("sentinel-no-hooks-")
            .tempdir()
            .map(HooksOff)
    }

    /// `-c core.hooksPath=<the empty directory> -c core.fsmonitor=false`,
    /// to go before git's subcommand.
    pub fn args(&self) -> [OsString; 4] {
        let mut hooks = OsString::from("core.hooksPath=");
        hooks.push(self.0.path());
        [
            "-c".into(),
            hooks,
            "-c".into(),
            "core.fsmonitor=false".into(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hooks_directory_is_empty_and_gone_with_its_value() {
        let off = HooksOff::new().unwrap();
        let args = off.args();
        let dir = std::path::PathBuf::from(
            args[1]
                .to_str()
                .unwrap()
                .strip_prefix("core.hooksPath=")
                .unwrap(),
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert_eq!(args[3], "core.fsmonitor=false");
        drop(off);
        assert!(!dir.exists());
    }
}
