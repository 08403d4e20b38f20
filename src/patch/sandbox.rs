//! The sandbox follows the watched branch: rebuilt as the watched tip plus
//! one commit per open proposal, so merging it never conflicts and every
//! commit holds only the proposed change.

use super::GitBranch;

/// One commit of a rebuilt sandbox: the proposal's file, the commit that
/// carries its proposed content now, and the message of its new commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    pub path: String,
    pub from: String,
    pub message: String,
}

impl GitBranch {
    /// The commit the watched revision names now.
    pub(super) fn tip(&self) -> Result<String, String> {
        self.git(
            &[
                "rev-parse",
                "--verify",
                &format!("{}^{{commit}}", self.base),
            ],
            None,
            None,
        )
    }

    /// Whether the sandbox's first-parent history is exactly `base`, then
    /// the `chain`'s commits: one `rev-list`.
    fn already(&self, reference: &str, base: &str, chain: &[Carried]) -> bool {
        let n = (chain.len() + 1).to_string();
        let Ok(out) = self.git(
            &["rev-list", "--first-parent", "-n", &n, reference],
            None,
            None,
        ) else {
            return false;
        };
        let mut expected: Vec<&str> = chain.iter().rev().map(|c| c.from.as_str()).collect();
        expected.push(base);
        out.lines().collect::<Vec<_>>() == expected
    }

    /// Rebuild the sandbox on `base` with plumbing and a private index, then
    /// move it with one `update-ref` that checks it did not move meanwhile.
    pub(super) fn rebuild_on(
        &self,
        base: &str,
        chain: &[Carried],
    ) -> Result<Vec<Option<String>>, String> {
        let reference = crate::branch::sandbox_ref(&self.branch)?;
        if self.already(&reference, base, chain) {
            return Ok(chain.iter().map(|c| Some(c.from.clone())).collect());
        }
        let current = self
            .git(&["symbolic-ref", "-q", "HEAD"], None, None)
            .unwrap_or_default();
        if current == reference {
            return Err(format!(
                "the clone's checked-out branch is the sandbox branch `{reference}`; a rebuild would move it under the work tree: choose another `--sandbox-branch`"
            ));
        }
        let previous = self
            .git(&["rev-parse", "--verify", "-q", &reference], None, None)
            .ok();
        // Under the repository's git directory, removed when dropped.
        let git_dir = self.git(&["rev-parse", "--absolute-git-dir"], None, None)?;
        let dir = tempfile::Builder::new()
            .prefix("sentinel-index-")
            .tempdir_in(&git_dir)
            .map_err(|e| format!("cannot create a private index under `{git_dir}`: {e}"))?;
        let index = dir.path().join("index");
        let index = Some(index.as_path());
        self.git(&["read-tree", base], index, None)?;
        let mut tree = self.git(&["rev-parse", &format!("{base}^{{tree}}")], None, None)?;
        let mut parent = base.to_string();
        let mut made = Vec::with_capacity(chain.len());
        for c in chain {
            let entry = self.git(
                &["--literal-pathspecs", "ls-tree", &c.from, "--", &c.path],
                None,
                None,
            )?;
            let Some((mode, blob)) = regular_entry(&entry) else {
                return Err(format!(
                    "commit {} holds no regular file `{}`",
                    crate::tick::short_id(&c.from),
                    crate::report::escape::terminal(&c.path)
                ));
            };
            let info = format!("{mode},{blob},{}", c.path);
            self.git(
                &["update-index", "--add", "--cacheinfo", &info],
                index,
                None,
            )?;
            let written = self.git(&["write-tree"], index, None)?;
            if written == tree {
                made.push(None);
                continue;
            }
            let commit = self.git(
                &["commit-tree", &written, "-p", &parent],
                None,
                Some(c.message.as_bytes()),
            )?;
            (tree, parent) = (written, commit.clone());
            made.push(Some(commit));
        }
        let old = previous.unwrap_or_else(|| "0".repeat(40));
        self.git(&["update-ref", &reference, &parent, &old], None, None)?;
        Ok(made)
    }
}

/// `100644 blob <id>\t<path>`: the mode and the blob of a regular file.
fn regular_entry(line: &str) -> Option<(&str, &str)> {
    let mut words = line.split('\t').next()?.split(' ');
    let (mode, kind, blob) = (words.next()?, words.next()?, words.next()?);
    (kind == "blob" && matches!(mode, "100644" | "100755")).then_some((mode, blob))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_carried_to_a_rebuilt_sandbox() {
        let id = "a".repeat(40);
        let line = format!("100755 blob {id}\tsrc/x.sh");
        assert_eq!(regular_entry(&line), Some(("100755", id.as_str())));
        assert_eq!(regular_entry(&format!("120000 blob {id}\tl")), None);
        assert_eq!(regular_entry(&format!("160000 commit {id}\tsub")), None);
        assert_eq!(regular_entry(""), None);
    }
}
