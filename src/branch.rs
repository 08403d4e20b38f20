//! Branch names resolved to full refs before a patch is written, so that no
//! spelling of the watched or the checked-out branch can become the sandbox.

use std::path::Path;
use std::process::{Command, Stdio};

/// Where local branches live.
pub const HEADS: &str = "refs/heads/";

/// The full ref of a sandbox branch: `x`, `heads/x` and `refs/heads/x` are
/// all `refs/heads/x`. A sandbox is always a local branch, so anything git
/// would read back as another kind of ref is refused rather than nested.
pub fn sandbox_ref(name: &str) -> Result<String, String> {
    let short = name
        .strip_prefix(HEADS)
        .or_else(|| name.strip_prefix("heads/"))
        .unwrap_or(name);
    let refuse = |why: &str| {
        Err(format!(
            "`--sandbox-branch {name}` {why}; give a branch name such as `sentinel-sandbox`"
        ))
    };
    if short.is_empty() || short == "HEAD" || short == "@" || short.starts_with('-') {
        return refuse("is not a branch name");
    }
    // `refs/heads/refs/heads/x` would be a nested ref; `tags/x` or
    // `remotes/x` a branch that git resolves to another ref when read back.
    for other in ["refs/", "tags/", "remotes/"] {
        if short.starts_with(other) {
            return refuse("names a ref outside `refs/heads/`");
        }
    }
    Ok(format!("{HEADS}{short}"))
}

/// A GitLab branch name: the API speaks of branches by name, so a leading
/// `refs/heads/` is the same branch.
pub fn gitlab_name(name: &str) -> &str {
    name.strip_prefix(HEADS).unwrap_or(name)
}

/// Refuse a GitLab sandbox that is the watched branch in another spelling.
pub fn check_gitlab(sandbox: &str, watched: &str) -> Result<(), String> {
    if gitlab_name(sandbox) == gitlab_name(watched) {
        return Err(format!(
            "`--sandbox-branch {sandbox}` is the watched branch `{}`: sentinel's own commits would wake it; choose another `--sandbox-branch`",
            gitlab_name(watched)
        ));
    }
    Ok(())
}

/// What a clone says about its branches, as full refs. `None` is "not a
/// branch": a detached HEAD, a watched commit id, or a clone git could not
/// read (the head lookup then fails loudly on its own).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolved {
    pub watched: Option<String>,
    pub checked_out: Option<String>,
    /// The local branch the watched spelling names once it exists: git reads
    /// `origin/main` as `refs/heads/origin/main` before
    /// `refs/remotes/origin/main`, so a sandbox there would become the
    /// watched branch on the next tick.
    pub shadow: Option<String>,
}

/// Resolve the watched revision (`None` = the checked-out branch) and the
/// checked-out branch of the clone at `repo` with one `git rev-parse`; a
/// second process only when that fails (an unborn HEAD, an unknown name).
pub fn resolve_git(repo: &Path, watched: Option<&str>) -> Resolved {
    let given = watched.filter(|w| *w != "HEAD");
    // A name that starts with a dash would be read as an option; it is no
    // branch (git refuses such names), so it cannot be the sandbox either.
    let asked = given.filter(|w| !w.starts_with('-'));
    let shadow = asked.and_then(|w| sandbox_ref(w).ok());
    let mut args = vec!["rev-parse", "--symbolic-full-name", "HEAD"];
    args.extend(asked);
    if let Some((true, out)) = git(repo, &args)
        && let Some(resolved) = parse_rev_parse(&out, asked.is_some())
    {
        return Resolved { shadow, ..resolved };
    }
    let checked_out = match git(repo, &["symbolic-ref", "-q", "HEAD"]) {
        Some((true, out)) => Some(out.trim().to_string()).filter(|r| r.starts_with("refs/")),
        _ => None,
    };
    // A watched name git cannot resolve is compared by its spelling (the
    // shadow); the head lookup then fails loudly on its own.
    let watched = given.is_none().then(|| checked_out.clone()).flatten();
    Resolved {
        watched,
        checked_out,
        shadow,
    }
}

/// `git rev-parse --symbolic-full-name HEAD [W]` prints exactly one line for
/// HEAD (its branch, or `HEAD` when detached), then one line for W when W is
/// a ref and none when it is a commit. Anything else is not understood.
fn parse_rev_parse(out: &str, with_watched: bool) -> Option<Resolved> {
    let lines: Vec<&str> = out.lines().collect();
    let as_ref = |l: &str| Some(l.to_string()).filter(|r| r.starts_with("refs/"));
    let checked_out = as_ref(lines.first()?);
    let watched = match (with_watched, lines.len()) {
        (false, 1) => checked_out.clone(),
        (true, 1) => None,
        (true, 2) => Some(as_ref(lines[1])?),
        _ => return None,
    };
    Some(Resolved {
        watched,
        checked_out,
        shadow: None,
    })
}

/// Refuse a sandbox (a full ref) that is the watched or the checked-out
/// branch of the clone at `repo`: a commit on the first would wake
/// sentinel, a commit on the second would move the work tree's branch.
pub fn check_git(given: &str, sandbox: &str, r: &Resolved, repo: &Path) -> Result<(), String> {
    if r.watched.as_deref() == Some(sandbox) {
        return Err(format!(
            "`--sandbox-branch {given}` is the watched branch `{sandbox}`: sentinel's own commits would wake it; choose another `--sandbox-branch`"
        ));
    }
    if r.shadow.as_deref() == Some(sandbox) {
        return Err(format!(
            "`--sandbox-branch {given}` is `{sandbox}`, a branch that `--branch` names too once it exists: sentinel would then watch its own commits; choose another `--sandbox-branch`, or give `--branch` as a full ref"
        ));
    }
    if r.checked_out.as_deref() == Some(sandbox) {
        return Err(format!(
            "`--sandbox-branch {given}` is `{sandbox}`, the branch checked out in `{}`: a commit there would move it under the work tree; choose another `--sandbox-branch`, or check out another branch",
            repo.display()
        ));
    }
    Ok(())
}

/// One git command in `repo`: whether it succeeded, and its stdout.
fn git(repo: &Path, args: &[&str]) -> Option<(bool, String)> {
    let mut cmd = Command::new("git");
    cmd.arg("-C").arg(repo).args(args);
    // The clone we were given, not one a hook's environment points at.
    for var in ["GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR"] {
        cmd.env_remove(var);
    }
    crate::redact::scrub_env(&mut cmd);
    let out = cmd
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    Some((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_sandbox_is_one_full_ref() {
        for name in ["main", "heads/main", "refs/heads/main"] {
            assert_eq!(sandbox_ref(name).unwrap(), "refs/heads/main", "{name}");
        }
        assert_eq!(
            sandbox_ref("heads/heads/x").unwrap(),
            "refs/heads/heads/x",
            "one prefix is stripped, as git reads `heads/...`"
        );
        assert_eq!(
            sandbox_ref("team/sandbox").unwrap(),
            "refs/heads/team/sandbox"
        );
    }

    #[test]
    fn a_sandbox_that_is_no_branch_or_a_nested_ref_is_refused() {
        for name in [
            "",
            "HEAD",
            "@",
            "-x",
            "refs/heads/",
            "refs/heads/refs/heads/main",
            "refs/tags/v1",
            "refs/remotes/origin/main",
            "tags/v1",
            "remotes/origin/main",
        ] {
            let e = sandbox_ref(name).unwrap_err();
            assert!(e.contains("`--sandbox-branch"), "{name}: {e}");
        }
    }

    #[test]
    fn a_gitlab_sandbox_is_compared_by_branch_name() {
        assert!(check_gitlab("refs/heads/main", "main").is_err());
        assert!(check_gitlab("main", "refs/heads/main").is_err());
        assert!(check_gitlab("main", "main").is_err());
        assert!(check_gitlab("sentinel-sandbox", "main").is_ok());
        assert_eq!(gitlab_name("refs/heads/main"), "main");
    }

    #[test]
    fn a_git_sandbox_is_refused_as_the_watched_its_shadow_or_the_checked_out_branch() {
        let on = |h: &str| Some(h.to_string());
        let r = Resolved {
            watched: on("refs/remotes/origin/main"),
            checked_out: on("refs/heads/feature"),
            shadow: on("refs/heads/origin/main"),
        };
        let repo = Path::new("clone");
        let check = |s: &str| check_git(s, &sandbox_ref(s).unwrap(), &r, repo);
        assert!(check("origin/main").unwrap_err().contains("names too"));
        assert!(check("heads/feature").unwrap_err().contains("checked out"));
        assert!(check("main").is_ok());
        let own = Resolved {
            watched: on("refs/heads/main"),
            ..Resolved::default()
        };
        let e = check_git("heads/main", "refs/heads/main", &own, repo).unwrap_err();
        assert!(e.contains("is the watched branch `refs/heads/main`"), "{e}");
    }

    #[test]
    fn rev_parse_output_is_read_line_by_line() {
        let on = |h: &str| Some(h.to_string());
        assert_eq!(
            parse_rev_parse("refs/heads/main\n", false),
            Some(Resolved {
                watched: on("refs/heads/main"),
                checked_out: on("refs/heads/main"),
                shadow: None
            })
        );
        assert_eq!(
            parse_rev_parse("refs/heads/other\nrefs/remotes/origin/main\n", true),
            Some(Resolved {
                watched: on("refs/remotes/origin/main"),
                checked_out: on("refs/heads/other"),
                shadow: None
            })
        );
        // Detached, watching a commit id.
        assert_eq!(parse_rev_parse("HEAD\n", true), Some(Resolved::default()));
        assert_eq!(parse_rev_parse("", true), None);
        assert_eq!(parse_rev_parse("HEAD\n^refs/heads/x\n", true), None);
        assert_eq!(parse_rev_parse("a\nb\nc\n", true), None);
    }
}
