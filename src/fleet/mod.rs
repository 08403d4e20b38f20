//! A fleet tick: every project of a GitLab group, discovered in one
//! listing (or named in `--project-list`), filtered, sharded, and ticked
//! `--jobs` at a time (their calls to the model one after the other), each
//! with a state of its own under `--state-dir` and exactly the
//! single-project tick.
//!
//! What the projects share (one `--daily-budget`, the provider's circuit)
//! is the fleet's ledger (`ledger`).

mod ledger;
mod list;
mod overrides;
pub mod stats;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow, bail};
use chrono::Utc;
use sha2::{Digest, Sha256};

use crate::cli::{Environment, SourceKind, TickArgs};
use crate::exit;
use crate::source::gitlab::{GitLabSource, GroupProject};
use crate::tick::{FleetBook, FleetBudget, FleetShare};

/// A glob over a project's path with namespace: `*` within a segment.
pub fn path_glob(pattern: &str) -> Result<globset::Glob, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// Which projects this run ticks: the filters and the shard.
pub struct Selection {
    include: globset::GlobSet,
    exclude: globset::GlobSet,
    /// `(k, n)`, 1-based.
    shard: (u32, u32),
}

impl Selection {
    pub fn new(include: &[String], exclude: &[String], shard: (u32, u32)) -> Result<Selection> {
        let set = |patterns: &[String]| -> Result<globset::GlobSet> {
            let mut b = globset::GlobSetBuilder::new();
            for p in patterns {
                b.add(path_glob(p).map_err(|e| anyhow::anyhow!("`{p}` is not a glob ({e})"))?);
            }
            Ok(b.build()?)
        };
        Ok(Selection {
            include: set(include)?,
            exclude: set(exclude)?,
            shard,
        })
    }

    /// Whether this run ticks `p`.
    pub fn takes(&self, p: &GroupProject) -> bool {
        let path = p.path_with_namespace.as_str();
        (self.include.is_empty() || self.include.is_match(path))
            && !self.exclude.is_match(path)
            && shard_of(p.id, self.shard.1) == self.shard.0
    }
}

/// The shard (1-based, of `n`) a project belongs to: a hash of its numeric
/// id, which a rename or a move keeps, spread evenly.
pub fn shard_of(id: u64, n: u32) -> u32 {
    let digest = Sha256::digest(id.to_string().as_bytes());
    let word = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
    (word % u64::from(n.max(1))) as u32 + 1
}

/// The shard from `--shard`, else from GitLab's `parallel:` variables.
fn shard(args: &TickArgs, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(u32, u32)> {
    if let Some(shard) = args.fleet.shard {
        return Ok(shard);
    }
    match (lookup("CI_NODE_INDEX"), lookup("CI_NODE_TOTAL")) {
        (Some(k), Some(n)) => crate::cli::parse_shard(&format!("{k}/{n}")).map_err(|e| {
            anyhow::anyhow!("CI_NODE_INDEX and CI_NODE_TOTAL do not name a shard: {e}")
        }),
        _ => Ok((1, 1)),
    }
}

/// How the projects' ticks ended.
#[derive(Debug, Default)]
struct Tally {
    noop: u64,
    woke: u64,
    busy: u64,
    skipped: u64,
    failed: Vec<String>,
    /// The exit code of the highest-precedence wake (the lowest of 10..17).
    wake: Option<u8>,
}

/// The tick a fleet runs once per project: `app`'s, shared by its workers.
pub type Tick = dyn Fn(TickArgs) -> Result<u8> + Sync;

/// Discover, select and tick; the exit code is the fleet's.
pub fn run(mut args: TickArgs, tick: &Tick) -> Result<u8> {
    let lookup = |k: &str| std::env::var(k).ok();
    let Some(dir) = args.fleet.state_dir.clone() else {
        bail!("--group needs --state-dir, where each project keeps its state");
    };
    // The fleet's name: its group, else its list's file.
    let group = match (&args.fleet.group, &args.fleet.project_list) {
        (Some(g), _) => g.clone(),
        (None, Some(file)) => file.display().to_string(),
        (None, None) => String::new(),
    };
    let selection = Selection::new(
        &args.fleet.include,
        &args.fleet.exclude,
        shard(&args, &lookup)?,
    )?;
    let (found, refused) = discover(&args, &group)?;
    let now = args.now.unwrap_or_else(Utc::now);
    let loaded = ledger::load(&dir, now)?;
    let budget = split_budget(&mut args, selection.shard);
    let overrides = overrides::read(args.fleet.fleet_config.as_deref())?;
    let book = Arc::new(Mutex::new(FleetBook {
        budget: Some(budget),
        ..loaded.clone()
    }));
    let mine: Vec<&GroupProject> = found
        .projects
        .iter()
        .filter(|p| selection.takes(p))
        .collect();
    let mut tally = tick_all(&args, (&mine, &overrides), &dir, &book, tick);
    for (name, why) in refused {
        let name = crate::report::escape::terminal(&name).into_owned();
        let why = crate::redact::text(&why);
        eprintln!(
            "sentinel: {name}: error: {}",
            crate::report::escape::terminal(&why)
        );
        tally.add(Ended::Failed(name));
    }
    // A quiet fleet writes nothing but its projects' no-op journals.
    let book = book.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let learned = book.spent != loaded.spent || book.circuit != loaded.circuit;
    // A ledger once written says the budget it counted against.
    let learned = learned || (loaded.budget.is_some() && loaded.budget != book.budget);
    if learned && !args.dry_run {
        ledger::save(&dir, &book)?;
    }
    summary(&group, &found, mine.len(), &budget, &tally);
    Ok(match (&tally.failed[..], tally.wake) {
        ([_, ..], _) if args.fleet.strict => 1,
        (_, Some(code)) => code,
        _ => exit::for_reason(crate::gate::wake::Reason::None),
    })
}

/// Tick `projects` with `--jobs` workers, each taking the next project not
/// yet taken. An agent runs one project at a time: its containment reaps
/// the orphans of the whole process.
fn tick_all(
    args: &TickArgs,
    (projects, overrides): (&[&GroupProject], &overrides::Overrides),
    dir: &Path,
    book: &Arc<Mutex<FleetBook>>,
    tick: &Tick,
) -> Tally {
    let jobs = match args.llm.agent {
        Some(_) => 1,
        None => args.fleet.jobs.max(1),
    };
    let calls = Arc::new(Mutex::new(()));
    let next = AtomicUsize::new(0);
    let tally = Mutex::new(Tally::default());
    // Only a person watching a terminal needs it; a CI log keeps the lines.
    let progress = std::io::IsTerminal::is_terminal(&std::io::stderr());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(projects.len()) {
            scope.spawn(|| {
                while let Some(p) = projects.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let share = FleetShare {
                        id: p.id,
                        book: book.clone(),
                        calls: calls.clone(),
                        project_budget: args.fleet.project_budget,
                    };
                    let ended = tick_one(args, (p, overrides.of(p)), dir, share, tick);
                    let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
                    t.add(ended);
                    if progress {
                        // Held under the tally's lock: one writer at a time.
                        eprint!("{}", progress_line(&t, projects.len()));
                    }
                }
            });
        }
    });
    if progress {
        eprint!("{CLEAR_LINE}");
    }
    tally.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Back to the start of the terminal's line, and the line cleared: the
/// progress line is written over, and a project's line starts clean.
pub const CLEAR_LINE: &str = "\r\x1b[K";

/// The progress line on a terminal, with no line break: how many of
/// `total` projects are ticked, and how they ended so far.
fn progress_line(t: &Tally, total: usize) -> String {
    let done = t.noop + t.woke + t.busy + t.skipped + t.failed.len() as u64;
    format!(
        "{CLEAR_LINE}sentinel: fleet: {done}/{total} project(s) ticked: {} no-op, {} woke, {} failed",
        t.noop,
        t.woke,
        t.failed.len()
    )
}

/// The fleet's projects: the group's, in one bounded listing, or the
/// list's, each looked up; with the list's lines GitLab refused.
type Found = (crate::source::gitlab::Discovered, Vec<(String, String)>);

fn discover(args: &TickArgs, group: &str) -> Result<Found> {
    let env = Environment::from_lookup(|k| std::env::var(k).ok());
    let mut source_args = args.source.clone();
    source_args.source = Some(SourceKind::Gitlab);
    // The listing needs no project or branch; any stands in for the check.
    source_args.project = Some(group.to_string());
    source_args.branch = Some("-".into());
    let crate::cli::SourceChoice::Gitlab(cfg) = source_args.choose(&env)? else {
        bail!("--group needs the GitLab source: set --gitlab-url or SENTINEL_GITLAB_URL");
    };
    let mut gitlab = GitLabSource::new(cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(file) = &args.fleet.project_list {
        let resolved = list::resolve(&mut gitlab, &list::read(file)?);
        let found = crate::source::gitlab::Discovered {
            projects: resolved.projects,
            ..Default::default()
        };
        return Ok((found, resolved.refused));
    }
    let found = gitlab
        .group_projects(group, args.fleet.topic.as_deref())
        .map_err(|e| anyhow::anyhow!("the fleet could not list group `{group}`: {e}"))?;
    Ok((found, Vec::new()))
}

/// How one project's tick ended.
enum Ended {
    NoOp,
    Woke(u8),
    Busy,
    Skipped,
    Failed(String),
}

impl Tally {
    fn add(&mut self, ended: Ended) {
        match ended {
            Ended::NoOp => self.noop += 1,
            Ended::Woke(code) => {
                self.woke += 1;
                self.wake = Some(self.wake.map_or(code, |w| w.min(code)));
            }
            Ended::Busy => self.busy += 1,
            Ended::Skipped => self.skipped += 1,
            Ended::Failed(name) => self.failed.push(name),
        }
    }
}

/// One project's tick, exactly as a single-project tick of it would run,
/// with its place in the fleet; its line names the project.
fn tick_one(
    args: &TickArgs,
    (p, over): (&GroupProject, Option<&overrides::Override>),
    dir: &Path,
    share: FleetShare,
    tick: &Tick,
) -> Ended {
    let name = crate::report::escape::terminal(&p.path_with_namespace).into_owned();
    let label = format!("{name} (#{})", p.id);
    // The fleet config's line for the project beats the fleet's flags.
    let branch = (over.and_then(|o| o.branch.clone()))
        .or_else(|| args.source.branch.clone())
        .or_else(|| p.default_branch.clone());
    let Some(branch) = branch else {
        eprintln!("sentinel: {label}: no repository yet, skipped");
        return Ended::Skipped;
    };
    let mut one = args.clone();
    one.fleet = crate::cli::FleetArgs::default();
    one.share = Some(share);
    one.label = Some(label.clone());
    one.source.source = Some(SourceKind::Gitlab);
    one.source.project = Some(p.id.to_string());
    one.source.branch = Some(branch);
    if let Some(path) = over.and_then(|o| o.path.clone()) {
        one.source.path = Some(path);
    }
    one.state.state = Some(state_path(dir, p.id));
    match tick(one) {
        Ok(0) => Ended::NoOp,
        Ok(code @ 10..=17) => Ended::Woke(code),
        Ok(_) => Ended::Busy,
        Err(e) => {
            let why = crate::redact::text(&format!("{e:#}"));
            eprintln!(
                "sentinel: {label}: error: {}",
                crate::report::escape::terminal(&why)
            );
            Ended::Failed(label)
        }
    }
}

/// Where a project's state lives: by its numeric id, which a rename or a
/// move keeps.
pub fn state_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(id.to_string()).join("state.json")
}

/// Each shard's budget is its even share of the fleet's `--daily-budget`:
/// N shards each spending the whole of it would spend N times the budget.
/// The projects' ticks count against the share.
fn split_budget(args: &mut TickArgs, shard: (u32, u32)) -> FleetBudget {
    let daily_budget = args.llm.daily_budget;
    let share = daily_budget / f64::from(shard.1.max(1));
    args.llm.daily_budget = share;
    FleetBudget {
        daily_budget,
        shard,
        share,
        project_budget: args.fleet.project_budget,
    }
}

/// The fleet's line: what was found, what this shard took, how it ended.
fn summary(
    group: &str,
    found: &crate::source::gitlab::Discovered,
    mine: usize,
    budget: &FleetBudget,
    t: &Tally,
) {
    let (k, n) = budget.shard;
    let shard = if n > 1 {
        format!(
            ", shard {k}/{n} with ${:.2} of the ${:.2} --daily-budget",
            budget.share, budget.daily_budget
        )
    } else {
        String::new()
    };
    let failed = match t.failed.len() {
        0 => String::new(),
        _ => format!(" ({})", t.failed.join(", ")),
    };
    eprintln!(
        "sentinel: fleet `{}`: {} project(s) listed{}, {mine} ticked{shard}: {} no-op, {} woke, {} busy, {} skipped, {} failed{failed}",
        crate::report::escape::terminal(group),
        found.projects.len(),
        match found.pages {
            0 => String::new(),
            pages => format!(" in {pages} page(s)"),
        },
        t.noop,
        t.woke,
        t.busy,
        t.skipped,
        t.failed.len()
    );
    if let Some(why) = &found.incomplete {
        eprintln!(
            "sentinel: fleet: the listing is incomplete ({}): the projects not listed were not ticked, and nothing of theirs is forgotten",
            crate::redact::text(why)
        );
    }
}

/// The text of `what` at `file` (a list or a config the fleet was given),
/// read as a hostile file, at most `limit` bytes; errors name the file and
/// `fix`.
fn read_text(file: &Path, limit: u64, what: &str, fix: &str) -> Result<String> {
    let bytes = crate::state::safe_fs::read_bounded(file, limit)
        .map_err(|e| anyhow!("cannot read {what} `{}`: {e}", file.display()))?
        .ok_or_else(|| anyhow!("{what} `{}` does not exist; {fix}", file.display()))?;
    String::from_utf8(bytes).map_err(|_| anyhow!("{what} `{}` is not UTF-8", file.display()))
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
    fn the_progress_line_counts_what_ended_and_starts_on_a_cleared_line() {
        let t = Tally {
            noop: 5,
            woke: 2,
            busy: 1,
            skipped: 0,
            failed: vec!["acme/x (#3)".into()],
            wake: Some(12),
        };
        let line = progress_line(&t, 25);
        assert_eq!(
            line,
            "\r\x1b[Ksentinel: fleet: 9/25 project(s) ticked: 5 no-op, 2 woke, 1 failed"
        );
        assert!(!line.contains('\n'), "a progress line is written over");
    }

    #[test]
    fn the_shards_of_a_group_cover_every_project_exactly_once() {
        let projects: Vec<GroupProject> = (1..=1000).map(|i| project(i, "g/p")).collect();
        let mut seen = vec![0u32; 1001];
        for k in 1..=4 {
            let s = Selection::new(&[], &[], (k, 4)).unwrap();
            let mine: Vec<&GroupProject> = projects.iter().filter(|p| s.takes(p)).collect();
            // Spread evenly: each shard holds about a quarter.
            assert!(
                (200..=300).contains(&mine.len()),
                "shard {k}: {}",
                mine.len()
            );
            for p in mine {
                seen[p.id as usize] += 1;
            }
        }
        assert!(seen[1..].iter().all(|n| *n == 1));
    }

    #[test]
    fn include_and_exclude_match_the_path_with_namespace() {
        let s = Selection::new(&["g/libs/*".into()], &["g/libs/old-*".into()], (1, 1)).unwrap();
        assert!(s.takes(&project(1, "g/libs/a")));
        assert!(!s.takes(&project(2, "g/libs/old-a")));
        assert!(!s.takes(&project(3, "g/apps/a")));
        assert!(
            !s.takes(&project(4, "g/libs/deep/a")),
            "* stays in one segment"
        );
    }

    #[test]
    fn a_shard_is_k_of_n() {
        assert_eq!(crate::cli::parse_shard("2/4"), Ok((2, 4)));
        for bad in ["0/4", "5/4", "x/4", "4", "1/0"] {
            assert!(crate::cli::parse_shard(bad).is_err(), "{bad}");
        }
    }
}
