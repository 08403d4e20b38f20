//! One state per clone: the default `--repo` is the top level of the clone
//! that holds the current directory, so a command run from a subdirectory
//! finds the clone's state instead of starting a second one beside it; and
//! the mistakes that would silently start a new state are said out loud.

use std::path::{Path, PathBuf};

use crate::cli::Command;

/// The top level of the clone holding `start`: the nearest directory,
/// `start` included, that has a `.git` (a directory, or the file of a
/// linked worktree or a submodule). Found on the file system alone, so a
/// no-op tick starts no git process for it.
pub fn top_level(start: &Path) -> Option<PathBuf> {
    let start = std::fs::canonicalize(start).ok()?;
    start
        .ancestors()
        .find(|dir| std::fs::symlink_metadata(dir.join(".git")).is_ok())
        .map(Path::to_path_buf)
}

/// `--repo .` (the default) as the clone's top level; `.` itself when it is
/// the top level (so messages keep the short spelling) or no clone holds it
/// (the GitLab source needs none).
pub fn default_repo(repo: &Path) -> PathBuf {
    if repo != Path::new(".") {
        return repo.to_path_buf();
    }
    match (top_level(repo), std::fs::canonicalize(repo)) {
        (Some(top), Ok(here)) if top != here => top,
        _ => repo.to_path_buf(),
    }
}

/// Apply `default_repo` to every command's `--repo`.
pub fn resolve(command: &mut Command) {
    let repo = match command {
        Command::Tick(a) => &mut a.source.repo,
        Command::Explain(a) => &mut a.source.repo,
        Command::Record(a) => &mut a.source.repo,
        Command::Stats(a) => &mut a.repo,
        Command::Reset(a) => &mut a.repo,
        Command::Costs(a) => &mut a.repo,
        Command::Report(a) => &mut a.repo,
        Command::Simulate(_) => return,
    };
    *repo = default_repo(repo);
}

/// An absolute `--path` is refused with the relative spelling: the watched
/// path is always relative to the repository root.
pub fn check_path(raw: &str, repo: &Path) -> Result<(), String> {
    if !raw.starts_with('/') {
        return Ok(());
    }
    // The clone's own directory spelled out: suggest the part below it.
    let below = std::fs::canonicalize(repo)
        .ok()
        .and_then(|root| {
            Path::new(raw)
                .strip_prefix(root)
                .ok()
                .map(Path::to_path_buf)
        })
        .map(|p| p.display().to_string());
    let relative = below.unwrap_or_else(|| raw.trim_start_matches('/').to_string());
    let suggestion = if relative.is_empty() {
        "leave `--path` out to watch the whole repository".to_string()
    } else {
        format!("give `--path {relative}`")
    };
    Err(format!(
        "`--path {raw}` is absolute; the watched path is relative to the repository root: {suggestion}"
    ))
}

/// A `--state` that does not exist while the default place holds a state
/// of the same scope (`same_scope` reads its header): most likely a
/// mistyped path that would start a second first run.
pub fn state_warning(
    given: Option<&Path>,
    repo: &Path,
    same_scope: impl Fn(&Path) -> bool,
) -> Option<String> {
    let given = given?;
    let default = repo.join(".sentinel").join("state.json");
    if given.exists() || given == default || !default.is_file() || !same_scope(&default) {
        return None;
    }
    Some(format!(
        "sentinel: warning: `--state {}` does not exist, but `{}` holds a state of this scope; this tick starts a new state (a full first run): check `--state`",
        given.display(),
        default.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subdirectory_of_a_clone_resolves_to_its_top_level() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("lib/deep")).unwrap();
        assert_eq!(top_level(&root.join("lib/deep")), Some(root.clone()));
        assert_eq!(top_level(&root), Some(root.clone()));
        // A linked worktree's `.git` is a file.
        std::fs::create_dir_all(root.join("wt/src")).unwrap();
        std::fs::write(root.join("wt/.git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(top_level(&root.join("wt/src")), Some(root.join("wt")));
    }

    #[test]
    fn an_absolute_path_is_refused_with_its_relative_spelling() {
        let repo = Path::new("/nonexistent-clone");
        let e = check_path("/lib", repo).unwrap_err();
        assert!(e.contains("`--path lib`"), "{e}");
        assert!(check_path("lib", repo).is_ok());
        assert!(
            check_path("/", repo)
                .unwrap_err()
                .contains("leave `--path` out")
        );
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let e = check_path(&format!("{}/src/app", root.display()), &root).unwrap_err();
        assert!(e.contains("`--path src/app`"), "{e}");
    }
}
