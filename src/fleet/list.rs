//! `--project-list FILE`: an explicit fleet, one project a line, in place of
//! a group's discovery. Each line is resolved with `GET /projects/:id`,
//! which gives what a tick needs (id, path, default branch, archived).

use std::path::Path;

use anyhow::{Result, bail};

use crate::source::gitlab::{GitLabSource, GroupProject};

/// The most bytes of a list: ten thousand long paths.
const MAX_LIST_BYTES: u64 = 1 << 20;
/// The most projects of a list, as many as a group's discovery reads.
pub const MAX_LISTED: usize = 10_000;

/// A project as the list names it: its numeric id, or its path with
/// namespace (`acme/libs/widgets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub line: usize,
    pub name: String,
}

/// The list's projects, in its order, each once. The format: one project
/// a line, its numeric id or its path with namespace; blank lines and
/// everything after `#` are ignored. An error names the line.
pub fn parse(file: &Path, text: &str) -> Result<Vec<Listed>> {
    let mut out: Vec<Listed> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let name = raw.split('#').next().unwrap_or("").trim();
        if name.is_empty() {
            continue;
        }
        // GitLab's path segments: letters, digits, `-`, `_` and `.`.
        let path_like = name
            .split('/')
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c)));
        if !path_like {
            bail!(
                "`{}` line {line}: `{}` is not a project: write its numeric id or its path with namespace (`group/project`), one a line",
                file.display(),
                crate::report::escape::terminal(name)
            );
        }
        if !name.contains('/') && name.parse::<u64>().is_err() {
            bail!(
                "`{}` line {line}: `{}` is neither a numeric id nor a path with namespace (`group/project`)",
                file.display(),
                crate::report::escape::terminal(name)
            );
        }
        if out.iter().any(|l| l.name == name) {
            continue;
        }
        if out.len() == MAX_LISTED {
            bail!(
                "`{}` lists more than {MAX_LISTED} projects; split it across shards' lists or use --group",
                file.display()
            );
        }
        out.push(Listed {
            line,
            name: name.to_string(),
        });
    }
    Ok(out)
}

/// Read and parse the list at `file`.
pub fn read(file: &Path) -> Result<Vec<Listed>> {
    let what = "the project list";
    let fix = "give --project-list the file that names the fleet's projects";
    let text = super::read_text(file, MAX_LIST_BYTES, what, fix)?;
    parse(file, &text)
}

/// What resolving a list gave: the projects GitLab showed, and the lines
/// it refused (each that project's failure, not the fleet's).
#[derive(Debug, Default)]
pub struct Resolved {
    pub projects: Vec<GroupProject>,
    /// `(name, why)` of each project GitLab refused or that is archived.
    pub refused: Vec<(String, String)>,
}

/// Each listed project as GitLab shows it, once per id.
pub fn resolve(gitlab: &mut GitLabSource, listed: &[Listed]) -> Resolved {
    let mut out = Resolved::default();
    for l in listed {
        match gitlab.project_entry(&l.name) {
            Ok(p) if p.archived => out
                .refused
                .push((l.name.clone(), "archived: remove it from the list".into())),
            Ok(p) if out.projects.iter().any(|q| q.id == p.id) => {}
            Ok(p) => out.projects.push(p),
            Err(e) => out.refused.push((l.name.clone(), e.to_string())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_names_ids_and_paths_skips_comments_and_says_the_bad_line() {
        let f = Path::new("fleet.txt");
        let listed = parse(f, "# the fleet\n1234\n\nacme/libs/w  # a library\n1234\n").unwrap();
        let names: Vec<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["1234", "acme/libs/w"]);
        assert_eq!(listed[1].line, 4);
        let e = parse(f, "1\nacme libs\n").unwrap_err().to_string();
        assert!(
            e.contains("fleet.txt` line 2") && e.contains("acme libs"),
            "{e}"
        );
        let e = parse(f, "widgets\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("neither"), "{e}");
        assert!(parse(f, "acme//w\n").is_err());
    }
}
