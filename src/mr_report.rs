//! `sentinel report`: the Code Quality report of the last known findings,
//! outside a tick, for a merge request pipeline or a tick that did not wake.
//!
//! Read-only by design: a merge request job runs beside the scheduled ticks
//! and must never race them for the lock or change what they remember, so
//! it takes no lock, makes no request and writes nothing but its report.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};
use serde::Serialize;

use crate::cli::ReportArgs;
use crate::report::codequality;
use crate::source::git::GitSource;
use crate::state::{Proposal, State, store};

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Written {
    exit_code: u8,
    codequality: String,
    state: String,
    /// False when there was no state yet (the report is then `[]`).
    state_found: bool,
    /// `--changed-since` (and `--changed-until`) as given, and the files
    /// they name.
    changed_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changed_until: Option<String>,
    changed_files: Option<usize>,
    /// Files with at least one entry in the report, and the entries.
    files: usize,
    issues: usize,
}

pub fn run(args: ReportArgs) -> Result<u8> {
    let path = args.state.resolve(&args.repo);
    // The changed files first: a wrong REF is a configuration error, loud
    // even while there is no state to report on.
    let changed = match &args.changed_since {
        Some(base) => Some(changed_files(
            &args.repo,
            base,
            args.changed_until.as_deref().unwrap_or("HEAD"),
        )?),
        None => None,
    };
    let state = store::load(&path)?;
    if state.is_none() {
        eprintln!(
            "sentinel: no state at `{}` yet (no tick has saved one): the report is empty",
            path.display()
        );
    }
    let empty = State::new();
    let (proposals, stuck) = selected(state.as_ref().unwrap_or(&empty), changed.as_ref());
    let bytes = codequality::render_with(&proposals, &stuck)?;
    store::write_report(&args.codequality, &bytes)?;
    let issues = serde_json::from_slice::<Vec<serde_json::Value>>(&bytes)
        .map(|v| v.len())
        .unwrap_or(0);
    let files: BTreeSet<&String> = proposals.keys().chain(&stuck).collect();
    let of_changed = changed
        .as_ref()
        .map(|c| format!(" (of {})", count(c.len(), "changed file")))
        .unwrap_or_default();
    eprintln!(
        "sentinel: report: {} in {}{of_changed} written to `{}`",
        count(issues, "finding"),
        count(files.len(), "file"),
        args.codequality.display()
    );
    if args.json {
        let written = Written {
            exit_code: crate::exit::NONE,
            codequality: args.codequality.display().to_string(),
            state: path.display().to_string(),
            state_found: state.is_some(),
            changed_since: args.changed_since.clone(),
            changed_until: args.changed_until.clone(),
            changed_files: changed.as_ref().map(BTreeSet::len),
            files: files.len(),
            issues,
        };
        println!("{}", serde_json::to_string(&written)?);
    }
    Ok(crate::exit::NONE)
}

/// `1 file`, `2 files`.
fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The open proposals and stuck files of `state`, of the `changed` files
/// only when given. The state's paths and git's are both from the
/// repository root, whatever sub-path the state watches, so a changed file
/// outside that path simply has no finding.
fn selected(
    state: &State,
    changed: Option<&BTreeSet<String>>,
) -> (BTreeMap<String, Proposal>, Vec<String>) {
    let wanted = |p: &String| changed.is_none_or(|c| c.contains(p));
    let proposals = state
        .llm
        .proposals
        .iter()
        .filter(|(p, _)| wanted(p))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    let stuck = state
        .files
        .iter()
        .filter(|(p, r)| r.stuck && wanted(p))
        .map(|(p, _)| p.clone())
        .collect();
    (proposals, stuck)
}

/// The files changed on `until` since its merge base with `base`, or an
/// error that says what to pass instead.
fn changed_files(repo: &Path, base: &str, until: &str) -> Result<BTreeSet<String>> {
    let hint = "in a merge request pipeline pass --changed-since \"$CI_MERGE_REQUEST_DIFF_BASE_SHA\" \
                (a shallow clone may lack it: set GIT_DEPTH: 0, or fetch the target branch first); \
                leave --changed-since out to report every file (nothing was written)";
    let base = base.trim();
    if base.is_empty() {
        bail!("--changed-since is empty; {hint}");
    }
    if base.starts_with('-') {
        bail!("--changed-since `{base}` is not a revision; {hint}");
    }
    let until = until.trim();
    if until.is_empty() || until.starts_with('-') {
        bail!(
            "--changed-until `{until}` is not a revision; in a merged results pipeline pass \
             --changed-until \"$CI_MERGE_REQUEST_SOURCE_BRANCH_SHA\", or leave it out for HEAD (nothing was written)"
        );
    }
    if !repo.is_dir() {
        bail!(
            "--repo `{}` is not a directory; point --repo at the merge request's checkout (nothing was written)",
            repo.display()
        );
    }
    let git = GitSource::new(repo.to_path_buf(), None, None);
    match git.changed_since(base, until) {
        Ok(paths) => Ok(paths.into_iter().collect()),
        Err(e) => bail!(
            "cannot list the files changed between `{base}` and `{until}` in `{}`: {e}; {hint}",
            repo.display()
        ),
    }
}
