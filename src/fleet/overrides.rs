//! `--fleet-config FILE`: per-project overrides of the fleet's `--branch`
//! and `--path`, kept in the fleet's own repository beside its CI file.
//!
//! One project a line, its numeric id or its path with namespace, then
//! `key=value` words (`branch=`, `path=`); `#` starts a comment. A line
//! format, not JSON, so each error names its line and a reviewer reads a
//! change as one line of diff.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};

use crate::source::gitlab::GroupProject;

/// The most bytes of the file, and the most projects it may name.
const MAX_CONFIG_BYTES: u64 = 1 << 20;
const MAX_PROJECTS: usize = 10_000;

/// What the file changes for one project.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Override {
    pub branch: Option<String>,
    pub path: Option<String>,
}

/// The file's overrides, by the project's id or path as written.
#[derive(Debug, Default)]
pub struct Overrides {
    by_name: BTreeMap<String, Override>,
}

impl Overrides {
    /// What the file says of `p`: by its id first, else by its path.
    pub fn of(&self, p: &GroupProject) -> Option<&Override> {
        (self.by_name.get(&p.id.to_string())).or_else(|| self.by_name.get(&p.path_with_namespace))
    }
}

pub fn parse(file: &Path, text: &str) -> Result<Overrides> {
    let mut out = Overrides::default();
    for (i, raw) in text.lines().enumerate() {
        let at = || format!("`{}` line {}", file.display(), i + 1);
        let mut words = raw.split('#').next().unwrap_or("").split_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        let mut o = Override::default();
        for word in words {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            let slot = match key {
                "branch" => &mut o.branch,
                "path" => &mut o.path,
                _ => bail!(
                    "{}: `{}` is not an override: write `branch=NAME` or `path=DIR`",
                    at(),
                    crate::report::escape::terminal(word)
                ),
            };
            if value.is_empty() || slot.is_some() {
                bail!("{}: `{key}=` needs one value, given once", at());
            }
            *slot = Some(value.to_string());
        }
        if o == Override::default() {
            bail!(
                "{}: `{}` overrides nothing: add `branch=NAME` or `path=DIR`",
                at(),
                crate::report::escape::terminal(name)
            );
        }
        if out.by_name.len() == MAX_PROJECTS {
            bail!("{}: more than {MAX_PROJECTS} projects", at());
        }
        if out.by_name.insert(name.to_string(), o).is_some() {
            bail!(
                "{}: `{}` is named twice; keep one line a project",
                at(),
                crate::report::escape::terminal(name)
            );
        }
    }
    Ok(out)
}

/// The overrides at `file`; no file given, none.
pub fn read(file: Option<&Path>) -> Result<Overrides> {
    let Some(file) = file else {
        return Ok(Overrides::default());
    };
    let what = "the fleet config";
    let fix = "give --fleet-config the file of per-project overrides, or leave it out";
    let text = super::read_text(file, MAX_CONFIG_BYTES, what, fix)?;
    parse(file, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(id: u64, path: &str) -> GroupProject {
        GroupProject {
            id,
            path_with_namespace: path.into(),
            default_branch: Some("main".into()),
            archived: false,
        }
    }

    #[test]
    fn an_override_names_a_project_by_id_or_path_and_an_error_its_line() {
        let f = Path::new("fleet.conf");
        let text = "# overrides\nacme/libs/w branch=develop path=src  # w\n7 path=lib\n";
        let o = parse(f, text).unwrap();
        let w = o.of(&project(1, "acme/libs/w")).unwrap();
        assert_eq!(w.branch.as_deref(), Some("develop"));
        assert_eq!(w.path.as_deref(), Some("src"));
        assert_eq!(
            o.of(&project(7, "x/y")).unwrap().path.as_deref(),
            Some("lib")
        );
        assert!(o.of(&project(8, "x/z")).is_none());
        for (bad, line, says) in [
            ("a/b\n", 1, "overrides nothing"),
            ("a/b path=x\na/b branch=y\n", 2, "named twice"),
            ("\na/b colour=red\n", 2, "not an override"),
            ("a/b path=\n", 1, "one value"),
            ("a/b path=x path=y\n", 1, "one value"),
        ] {
            let e = parse(f, bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("line {line}")) && e.contains(says),
                "{bad:?}: {e}"
            );
        }
    }
}
