//! The scope of a state: which source, project, branch and path it is about,
//! and how a local clone is told apart from another one without a process.

use std::path::{Path, PathBuf};

pub use sentinel_core::state::records::scope::Scope;

/// The most of a `.git` file, `commondir` or git config read to tell the
/// clone apart: a real one is a few hundred bytes.
const MAX_GIT_FILE: u64 = 1 << 20;

/// The identity of the clone at `repo` that survives a re-clone: the URL of
/// its `origin` remote (or its first remote), without credentials. A clone
/// without a remote is known by its directory. Read from the git config file
/// itself, so a no-op tick still starts only one git process.
pub fn clone_identity(repo: &Path) -> String {
    let url = git_dir(repo)
        .and_then(|dir| read(&common_dir(&dir).join("config")))
        .and_then(|config| remote_url(&config));
    match url {
        Some(url) => without_credentials(&url),
        None => {
            let dir = repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf());
            format!("local:{}", dir.display())
        }
    }
}

/// The git directory of the clone that contains `repo`: `.git` as a
/// directory, or the directory a `.git` file points to (a worktree).
fn git_dir(repo: &Path) -> Option<PathBuf> {
    let start = repo.canonicalize().ok()?;
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        if dot_git.is_dir() {
            return Some(dot_git);
        }
        if dot_git.is_file() {
            let text = read(&dot_git)?;
            let target = text.trim().strip_prefix("gitdir:")?.trim();
            return Some(dir.join(target));
        }
    }
    None
}

/// The first file a head lookup of `rev` opens in the clone (`HEAD`, the
/// config, the refs of `rev`, `packed-refs`, `shallow`, grafts and
/// alternates) that is a FIFO, a socket or a device once links are
/// followed: git and gix open them without `O_NONBLOCK`, so a FIFO planted
/// there would hold the tick forever. A `stat` tells without opening.
pub fn special_git_file(repo: &Path, rev: &str) -> Option<PathBuf> {
    let git = git_dir(repo)?;
    let common = common_dir(&git);
    let files = [
        git.join("HEAD"),
        common.join("config"),
        common.join("packed-refs"),
        common.join("shallow"),
        common.join("info/grafts"),
        common.join("objects/info/alternates"),
    ];
    if let Some(odd) = files.iter().find(|p| special(p)) {
        return Some(odd.clone());
    }
    // `HEAD` names the branch whose loose ref is read.
    let head = read(&git.join("HEAD"));
    let rev = match head.as_deref().and_then(|h| h.trim().strip_prefix("ref:")) {
        Some(target) if rev == "HEAD" => target.trim(),
        _ => rev,
    };
    // The loose ref a plain branch or ref name reads (never outside the
    // git directory: no `..`).
    if rev.is_empty() || rev.split('/').any(|c| c.is_empty() || c == "..") {
        return None;
    }
    let loose = if rev.starts_with("refs/") {
        vec![common.join(rev)]
    } else {
        vec![
            common.join("refs/heads").join(rev),
            common.join("refs/tags").join(rev),
        ]
    };
    loose.into_iter().find(|p| special(p))
}

/// Whether `path` is, once links are followed, a FIFO, a socket or a
/// device: a file whose open can wait forever. (A directory is not: a ref
/// name may share its name with one, `logs` or `refs/heads/release`.)
fn special(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        t.is_fifo() || t.is_socket() || t.is_char_device() || t.is_block_device()
    })
}

/// A worktree's shared git directory holds the config.
fn common_dir(git_dir: &Path) -> PathBuf {
    match read(&git_dir.join("commondir")) {
        Some(rel) => git_dir.join(rel.trim()),
        None => git_dir.to_path_buf(),
    }
}

/// A file of the clone's git directory, read as a hostile one (an agent
/// can write there): a FIFO, a device, a link or a file over
/// `MAX_GIT_FILE` reads as missing rather than holding or flooding the tick.
fn read(path: &Path) -> Option<String> {
    let bytes = sentinel_io::safe_fs::read_bounded(path, MAX_GIT_FILE).ok()??;
    String::from_utf8(bytes).ok()
}

/// `remote.origin.url`, else the first remote's URL, from a git config file.
fn remote_url(config: &str) -> Option<String> {
    let mut section: Option<String> = None;
    let mut first: Option<String> = None;
    for line in config.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line
                .strip_prefix("[remote \"")
                .and_then(|rest| rest.strip_suffix("\"]"))
                .map(str::to_string);
            continue;
        }
        let (Some(name), Some((key, value))) = (&section, line.split_once('=')) else {
            continue;
        };
        if !key.trim().eq_ignore_ascii_case("url") {
            continue;
        }
        let value = value.trim().trim_matches('"').to_string();
        if name == "origin" {
            return Some(value);
        }
        first.get_or_insert(value);
    }
    first
}

/// A URL with its `user:password@` part removed: a token in a remote URL
/// must never reach the state or a message.
/// Without one the address is kept byte for byte: it names the scope.
pub fn without_credentials(url: &str) -> String {
    sentinel_core::address::without_credentials(url).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_wins_over_other_remotes() {
        let config = "[core]\n\tbare = false\n[remote \"upstream\"]\n\turl = https://a.example/up.git\n[remote \"origin\"]\n\turl = https://a.example/me.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
        assert_eq!(
            remote_url(config).as_deref(),
            Some("https://a.example/me.git")
        );
        let only = "[remote \"fork\"]\n\turl = git@a.example:me/x.git\n";
        assert_eq!(remote_url(only).as_deref(), Some("git@a.example:me/x.git"));
        assert_eq!(remote_url("[core]\n\tbare = false\n"), None);
    }

    #[test]
    fn credentials_never_stay_in_an_identity() {
        assert_eq!(
            without_credentials("https://oauth2:glpat-SECRET@gitlab.example.com/g/p.git"),
            "https://gitlab.example.com/g/p.git"
        );
        assert_eq!(
            without_credentials("https://gitlab.example.com/g/p.git"),
            "https://gitlab.example.com/g/p.git"
        );
        assert_eq!(
            without_credentials("git@gitlab.example.com:g/p.git"),
            "git@gitlab.example.com:g/p.git"
        );
    }

    #[test]
    fn an_at_sign_past_the_host_is_not_a_credential() {
        // The scope is stored in every state: anything but the address as
        // given would make the next tick see another one.
        for url in [
            "https://host?q=a@b/",
            "https://host#a@b/",
            "https://gitlab.example.com:443/g/p.git",
            "https://[2001:db8::1]:8443/g/p.git",
            "https://[2001:db8::1]?x=a@b/",
        ] {
            assert_eq!(without_credentials(url), url);
        }
        assert_eq!(
            without_credentials("https://me:p%40ss@[2001:db8::1]/g/p.git?x=a@b"),
            "https://[2001:db8::1]/g/p.git?x=a@b"
        );
    }

    #[test]
    fn a_scope_names_all_four_parts() {
        let s = Scope {
            source: "git".into(),
            project: "https://a.example/me.git".into(),
            branch: "main".into(),
            path: String::new(),
        };
        assert_eq!(
            s.to_string(),
            "git `https://a.example/me.git`, branch `main`, path `(the whole repository)`"
        );
    }
}
