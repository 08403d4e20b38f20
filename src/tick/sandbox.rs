//! The sandbox follows the watched branch (invariant 23): after judging, a
//! wake with open proposals makes the sandbox the watched tip plus one
//! commit per open proposal, rebuilt only when the tip or that set changed.

use serde::Serialize;

use super::{Work, short_id};
use crate::patch::Carried;
use crate::publish::WriteLog;
use crate::state::{SandboxChain, State};

/// What the sandbox holds after this tick, for `--json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxReport {
    /// Where: the branch, and the clone or project.
    pub target: String,
    /// The watched commit it starts from.
    pub base: String,
    /// One commit per open proposal, oldest first.
    pub commits: Vec<SandboxCommit>,
    /// Whether this tick rebuilt it on a new tip or a changed set.
    pub rebuilt: bool,
    /// Commits this tick made for new proposals.
    pub added: usize,
    /// The command that takes the proposals, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<String>,
    /// What this tick did to the merge request (`--merge-request`), when
    /// it did anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge_request: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxCommit {
    pub path: String,
    pub commit: String,
}

/// The open proposals the sandbox should carry, as (path, commit): those it
/// carries already in their order, then the commits of this tick, then any
/// other (a state from before the sandbox followed the tip), oldest first.
fn wanted(state: &State, added: &[(String, String)]) -> Vec<(String, String)> {
    let open = |path: &str, commit: &str| {
        state.files.contains_key(path)
            && state
                .llm
                .proposals
                .get(path)
                .is_some_and(|p| !p.stale && p.patch_commit.as_deref() == Some(commit))
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let carried = state.llm.sandbox.iter().flat_map(|c| c.commits.iter());
    for (path, commit) in carried.chain(added) {
        if open(path, commit) && !out.iter().any(|(p, _)| p == path) {
            out.push((path.clone(), commit.clone()));
        }
    }
    let mut rest: Vec<_> = state
        .llm
        .proposals
        .iter()
        .filter_map(|(path, p)| Some((p.ts, path, p.patch_commit.as_ref()?)))
        .filter(|(_, path, commit)| open(path, commit) && !out.iter().any(|(p, _)| p == *path))
        .collect();
    rest.sort();
    out.extend(rest.into_iter().map(|(_, p, c)| (p.clone(), c.clone())));
    out
}

/// What `check_sandbox` found on the sandbox branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strangers {
    /// On a branch that is sentinel's own: rebuilt without them.
    RebuildWithout,
    /// On a shared branch: nothing built on it until a person resolves them.
    Stopped,
}

/// The sandbox commits sentinel knows are its own: the remembered chain's
/// and those it left on the branch, the open proposals', and those the
/// decision journal recorded.
fn own_commits(state: &State, journal: impl Iterator<Item = String>) -> Vec<String> {
    let chain = state.llm.sandbox.iter().flat_map(|c| c.commits.iter());
    let left = state.llm.sandbox.iter().flat_map(|c| c.left.iter());
    let proposed = state
        .llm
        .proposals
        .values()
        .filter_map(|p| p.patch_commit.as_ref());
    chain
        .map(|(_, id)| id.clone())
        .chain(left.cloned())
        .chain(proposed.cloned())
        .chain(journal)
        .collect()
}

/// The most commits remembered as left on the branch.
const MAX_LEFT: usize = 100;

/// Keep the chain as built on `base`. When the branch was not rewritten
/// (`rebuilt` false) and the chain dropped commits, the branch may still
/// hold them: they are remembered in `left` until a rewrite removes them.
fn remember_chain(state: &mut State, base: String, commits: Vec<(String, String)>, rebuilt: bool) {
    let kept = state.llm.sandbox.take().unwrap_or_default();
    let mut left = if rebuilt { Vec::new() } else { kept.left };
    if !rebuilt {
        for (_, id) in &kept.commits {
            if !commits.iter().any(|(_, c)| c == id) && !left.contains(id) {
                left.push(id.clone());
            }
        }
        let extra = left.len().saturating_sub(MAX_LEFT);
        left.drain(..extra);
    }
    state.llm.sandbox = Some(SandboxChain {
        base,
        commits,
        left,
        ..kept
    });
}

impl Work<'_> {
    /// Before anything is built on the sandbox (invariant 23): it must be
    /// the base sentinel remembers (the watched tip when it remembers none)
    /// plus its own commits. A commit it did not make is named; then the
    /// sandbox is rebuilt without it, or, where people work on the branch
    /// too, nothing is built on it and the merge request is left as it is.
    /// Returns the watched tip, when it could be read.
    fn check_sandbox(&mut self, state: &State) -> Option<String> {
        let own = own_commits(state, self.ledger.sandbox_commits());
        let patcher = self.patcher.as_mut()?;
        // Unknown: said by `follow_sandbox`, which asks again.
        let tip = patcher.watched_tip().ok().flatten()?;
        let base = match state.llm.sandbox.as_ref().filter(|c| !c.base.is_empty()) {
            Some(c) => c.base.clone(),
            None => tip.clone(),
        };
        let target = patcher.target();
        let shared = patcher.shared();
        let found = match patcher.strangers(&base, &tip, &own) {
            Ok(found) if found.is_empty() => return Some(tip),
            Ok(found) => crate::patch::strangers::describe(&target, &found),
            Err(why) => format!("cannot tell what sandbox {target} holds: {why}"),
        };
        let (what, next) = if shared {
            (
                Strangers::Stopped,
                "nothing is committed or rebuilt on it, and its merge request is left as it is, until a person removes them from the branch or merges them; the proposals wait",
            )
        } else {
            (
                Strangers::RebuildWithout,
                "not built upon: rebuilt without them on the watched tip (`git branch <name> <commit>` keeps one)",
            )
        };
        let note = format!("{found}; {next}");
        if shared {
            patcher.stop(note.clone());
        }
        self.writes.push(WriteLog {
            kind: "sandbox",
            target,
            ok: false,
            detail: note.clone(),
        });
        self.notes.push(note);
        self.sandbox_strangers = Some(what);
        Some(tip)
    }

    /// Make the sandbox follow the watched tip; a failure is reported and
    /// the next wake tries again.
    pub(super) fn follow_sandbox(&mut self, state: &mut State) -> Option<SandboxReport> {
        let added = std::mem::take(&mut self.sandbox_added);
        if self.sandbox_strangers == Some(Strangers::Stopped) {
            // Said by `check_sandbox`; the state keeps what it remembers.
            return None;
        }
        let patcher = self.patcher.as_mut()?;
        let want = wanted(state, &added);
        // Carried before judging, or a merge request still to close.
        let had = self.sandbox_tip.is_some()
            || state
                .llm
                .sandbox
                .as_ref()
                .is_some_and(|c| !c.commits.is_empty() || c.merge_request.is_some());
        if want.is_empty() && !had {
            return None;
        }
        let target = patcher.target();
        // The tip the sandbox was carried to before judging, if it was.
        let tip = match self.sandbox_tip.take() {
            Some(tip) => Ok(Some(tip)),
            None => patcher.watched_tip(),
        };
        let built = match tip {
            Ok(Some(base)) => self
                .commits_on(state, &base, want, &added)
                .map(|c| (base, c)),
            Ok(None) => return None,
            Err(why) => Err(format!(
                "cannot find the watched tip to rebuild on: {why}; tried again on the next wake"
            )),
        };
        let (base, (commits, rebuilt)) = match built {
            Ok(built) => built,
            Err(detail) => {
                self.writes.push(WriteLog {
                    kind: "sandbox",
                    target,
                    ok: false,
                    detail,
                });
                return None;
            }
        };
        let mut report = SandboxReport {
            target: target.clone(),
            base: base.clone(),
            commits: commits
                .iter()
                .map(|(path, commit)| SandboxCommit {
                    path: path.clone(),
                    commit: commit.clone(),
                })
                .collect(),
            rebuilt: rebuilt || std::mem::take(&mut self.sandbox_rebuilt),
            added: added.len(),
            merge: self.patcher.as_ref().and_then(|p| p.merge_hint()),
            merge_request: None,
        };
        remember_chain(state, base, commits, rebuilt);
        report.merge_request = self.review(state);
        if report.rebuilt {
            self.writes.push(WriteLog {
                kind: "sandbox",
                target,
                ok: true,
                detail: describe(&report),
            });
        }
        if report.rebuilt || report.added > 0 {
            self.notes.push(note(&report));
        }
        Some(report)
    }

    /// Before judging: carry the open proposals to the watched tip, so that
    /// this tick's new commits land on it and are not made twice.
    pub(super) fn prepare_sandbox(&mut self, state: &mut State) {
        if self.patcher.is_none() {
            return;
        }
        let tip = self.check_sandbox(state);
        let rebuild_without = self.sandbox_strangers == Some(Strangers::RebuildWithout);
        let want = wanted(state, &[]);
        let had = rebuild_without
            || state
                .llm
                .sandbox
                .as_ref()
                .is_some_and(|c| !c.commits.is_empty());
        if want.is_empty() && !had {
            return;
        }
        let Some(base) = tip else {
            // Said by `follow_sandbox`, which asks again.
            return;
        };
        if let Ok((commits, rebuilt)) = self.commits_on(state, &base, want, &[]) {
            remember_chain(state, base.clone(), commits, rebuilt);
            self.sandbox_rebuilt = rebuilt;
            self.sandbox_tip = Some(base);
        }
    }

    /// The sandbox's commits on `base`, and whether they were rebuilt: the
    /// sandbox as built with this tick's commits on top when that is what
    /// is wanted, else a rebuild. `Err` says why it failed.
    fn commits_on(
        &mut self,
        state: &mut State,
        base: &str,
        want: Vec<(String, String)>,
        added: &[(String, String)],
    ) -> Result<(Vec<(String, String)>, bool), String> {
        let as_built = state.llm.sandbox.as_ref().filter(|c| c.base == base);
        let physical = as_built.map(|c| c.commits.iter().chain(added).cloned().collect::<Vec<_>>());
        // What the state says the branch holds is trusted only when the
        // branch was found holding exactly that.
        let strangers = self.sandbox_strangers == Some(Strangers::RebuildWithout);
        let left = state
            .llm
            .sandbox
            .as_ref()
            .is_some_and(|c| !c.left.is_empty());
        if physical.as_ref() == Some(&want) && !strangers && !left {
            return Ok((want, false));
        }
        let chain: Vec<Carried> = want
            .iter()
            .map(|(path, from)| Carried {
                path: path.clone(),
                from: from.clone(),
                message: message(state, path),
            })
            .collect();
        let Some(patcher) = self.patcher.as_mut() else {
            return Err("no sandbox".into());
        };
        if want.is_empty() && patcher.shared() {
            // GitLab cannot point a branch at the tip without a commit: the
            // branch is left as it is, no rebuild is claimed, and what it
            // still holds is remembered (`remember_chain`).
            return Ok((Vec::new(), false));
        }
        match patcher.rebuild(base, &chain) {
            Ok(made) => {
                self.sandbox_strangers = None;
                Ok((self.rebuilt(state, want, made), true))
            }
            Err(why) => Err(format!(
                "not rebuilt on {}: {why}; tried again on the next wake",
                short_id(base)
            )),
        }
    }

    /// Open, edit or close the merge request when the open proposals
    /// changed since its description was sent; what was done, if anything.
    fn review(&mut self, state: &mut State) -> Option<String> {
        use crate::patch::merge_request::{Listed, description, title};
        let chain = state.llm.sandbox.as_ref()?;
        let listed: Vec<Listed> = chain
            .commits
            .iter()
            .filter_map(|(path, _)| {
                let proposal = state.llm.proposals.get(path)?;
                Some(Listed { path, proposal })
            })
            .collect();
        let page = (!listed.is_empty()).then(|| description(&listed));
        let hash = page.as_deref().map(|p| super::content_hash(p.as_bytes()));
        let unchanged = match &page {
            Some(_) => chain.merge_request.is_some() && chain.described == hash,
            None => chain.merge_request.is_none(),
        };
        if unchanged {
            return None;
        }
        let known = chain.merge_request;
        let patcher = self.patcher.as_mut()?;
        let target = patcher.target();
        let result = patcher.review(known, &title(listed.len()), page.as_deref());
        let chain = state.llm.sandbox.as_mut()?;
        let done = match result {
            Ok(None) => return None,
            Ok(Some(review)) => review,
            Err(why) => {
                self.writes.push(WriteLog {
                    kind: "merge_request",
                    target,
                    ok: false,
                    detail: why,
                });
                return None;
            }
        };
        use crate::patch::Review;
        let detail = match &done {
            Review::Opened(iid, url) => format!("opened !{iid} {url}"),
            Review::Edited(iid, url) => format!("edited !{iid} {url}"),
            Review::Closed(iid) => format!("closed !{iid}: no proposal is open"),
            Review::Gone => "none open to close".to_string(),
        };
        (chain.merge_request, chain.described) = match done {
            Review::Opened(iid, _) | Review::Edited(iid, _) => (Some(iid), hash),
            Review::Closed(_) | Review::Gone => (None, None),
        };
        self.writes.push(WriteLog {
            kind: "merge_request",
            target,
            ok: true,
            detail: detail.clone(),
        });
        self.notes.push(format!("merge request {detail}"));
        Some(detail)
    }

    /// Take the rebuilt commits into the proposals; a proposal whose
    /// content the tip already holds has nothing left to propose.
    fn rebuilt(
        &mut self,
        state: &mut State,
        want: Vec<(String, String)>,
        made: Vec<Option<String>>,
    ) -> Vec<(String, String)> {
        let mut commits = Vec::new();
        for ((path, _), new) in want.into_iter().zip(made) {
            let Some(p) = state.llm.proposals.get_mut(&path) else {
                continue;
            };
            match new {
                Some(commit) => {
                    p.patch_commit = Some(commit.clone());
                    commits.push((path, commit));
                }
                None => {
                    p.stale = true;
                    self.notes.push(format!(
                        "`{}`: the watched branch already holds the proposed content; its proposal is closed",
                        crate::report::escape::terminal(&path)
                    ));
                }
            }
        }
        commits
    }
}

/// The commit message of a proposal carried to a rebuilt sandbox.
fn message(state: &State, path: &str) -> String {
    let p = &state.llm.proposals[path];
    crate::patch::commit_message(path, &crate::redact::text(&p.reason), &p.fingerprint)
}

fn describe(r: &SandboxReport) -> String {
    let paths: Vec<&str> = r.commits.iter().map(|c| c.path.as_str()).collect();
    let tip = r
        .commits
        .last()
        .map_or(r.base.as_str(), |c| c.commit.as_str());
    format!(
        "rebuilt on {}: {} proposal commit(s){}{}, tip {}",
        short_id(&r.base),
        paths.len(),
        if paths.is_empty() { "" } else { ": " },
        paths.join(", "),
        short_id(tip)
    )
}

/// The tick line's part: what the sandbox holds now and how to take it.
fn note(r: &SandboxReport) -> String {
    let n = r.commits.len();
    let mut line = format!(
        "sandbox {} = {} + {n} proposal{}",
        r.target,
        short_id(&r.base),
        if n == 1 { "" } else { "s" }
    );
    if r.added > 0 {
        line.push_str(&format!(" ({} committed now)", r.added));
    }
    if r.rebuilt {
        line.push_str(", rebuilt on the watched tip");
    }
    if let (Some(merge), true) = (&r.merge, n > 0) {
        line.push_str(&format!(": `{merge}` takes them"));
    }
    line
}
