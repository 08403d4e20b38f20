//! The shape of the command line (clap), its environment bindings and help,
//! and its validation into settings. No effects beyond reading the flags.

use std::path::PathBuf;

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand, ValueEnum};

const ABOUT: &str = "Keep a scheduled code-maintenance agent from going in circles.";

const LONG_ABOUT: &str = "\
Keep a scheduled code-maintenance agent from going in circles.

Each `sentinel tick` performs exactly one tick and exits: it makes one cheap
lookup of the latest commit under the watched path, and when nothing happened
it exits 0 having written nothing. When something did happen it does only the
work that reason needs, remembers its answers so an unchanged file is never
judged twice, saves the state atomically and exits with a code that names the
reason. Let cron, a scheduled CI pipeline or a systemd timer be the clock.";

const TICK_AFTER: &str = "\
Exit codes:
  0       none: nothing happened, nothing written
  10..17  woke: 10 first_run, 11 sha_unavailable, 12 repo_changed,
          13 evidence_changed, 14 backlog (15..17 are reserved for
          observation_due, opportunity_due, autonomy_due)
  20      busy: another tick holds the lock; nothing started
  1       error (configuration, I/O, corrupt or newer state); state untouched
  2       usage error

Example crontab line (every two minutes; 0, 10..17 and 20 are all fine):
  */2 * * * * cd /srv/clone && git pull -q && sentinel tick --path src";

#[derive(Debug, Parser)]
#[command(name = "sentinel", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one tick: look, decide whether to wake, do only the needed work, exit.
    #[command(after_help = TICK_AFTER)]
    Tick(TickArgs),
    /// Print the wake gate's and the novelty gate's counters.
    Stats(StatsArgs),
    /// Say why a file did or did not miss the cache: its fingerprint, part by part.
    Explain(ExplainArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// A local git clone (no network, no token).
    Git,
}

/// Where the watched files come from.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Where the watched files come from.
    #[arg(long, env = "SENTINEL_SOURCE", value_enum, default_value = "git")]
    pub source: SourceKind,
    /// The git clone to watch.
    #[arg(long, env = "SENTINEL_REPO", value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// The branch to watch [default: the clone's current branch].
    #[arg(long, env = "SENTINEL_BRANCH", value_name = "NAME")]
    pub branch: Option<String>,
    /// The watched directory, relative to the repository root [default: the whole repository].
    #[arg(long, env = "SENTINEL_PATH", value_name = "DIR")]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StateArg {
    /// The state file [default: <repo>/.sentinel/state.json]. Its lock is
    /// `<state>.lock` and its no-op journal `<state>.noops`.
    #[arg(long, env = "SENTINEL_STATE", value_name = "PATH")]
    pub state: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct TickArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub state: StateArg,
    /// Fresh evaluations per tick; the rest wait in a backlog for the next
    /// ticks. 0 = unlimited.
    #[arg(long, env = "SENTINEL_BATCH", value_name = "N", default_value_t = 5)]
    pub batch: usize,
    /// Most files remembered; the least recently seen are forgotten past it.
    /// Keep it above the number of files in the watched path.
    #[arg(
        long,
        env = "SENTINEL_MAX_FILES",
        value_name = "N",
        default_value_t = 200_000
    )]
    pub max_files: usize,
    /// Files larger than this are fingerprinted by their content id instead
    /// of being read.
    #[arg(
        long,
        env = "SENTINEL_MAX_FILE_BYTES",
        value_name = "BYTES",
        default_value_t = crate::tick::DEFAULT_MAX_FILE_BYTES
    )]
    pub max_file_bytes: u64,
    /// The time of this tick, RFC 3339 (for tests and replays) [default: the clock].
    #[arg(long, env = "SENTINEL_NOW", value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
    /// Run the same tick but write nothing at all (no state, no journal) and say what would happen.
    #[arg(long, env = "SENTINEL_DRY_RUN", value_parser = clap::builder::BoolishValueParser::new())]
    pub dry_run: bool,
    /// Print the result as one JSON object on stdout.
    #[arg(long, env = "SENTINEL_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub state: StateArg,
    /// The clone the default state path is relative to.
    #[arg(long, env = "SENTINEL_REPO", value_name = "DIR", default_value = ".")]
    pub repo: PathBuf,
    /// Print the counters as one JSON object on stdout.
    #[arg(long, env = "SENTINEL_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The file, as a path from the repository root (as `tick --json` prints it).
    pub file: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub state: StateArg,
    /// Print the explanation as one JSON object on stdout.
    #[arg(long, env = "SENTINEL_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    pub json: bool,
}

fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{s}` is not an RFC 3339 time like 2026-06-16T12:00:00Z ({e})"))
}

impl StateArg {
    pub fn resolve(&self, repo: &std::path::Path) -> PathBuf {
        self.state
            .clone()
            .unwrap_or_else(|| repo.join(".sentinel").join("state.json"))
    }
}

impl SourceArgs {
    /// The watched path normalised to `a/b`, or `None` for the whole repository.
    pub fn watched_path(&self) -> Result<Option<String>> {
        let Some(raw) = &self.path else {
            return Ok(None);
        };
        let trimmed = raw.trim_start_matches("./").trim_matches('/');
        if trimmed.split('/').any(|c| c == "..") {
            bail!(
                "--path `{raw}` leaves the repository; give a directory inside it, relative to its root"
            );
        }
        Ok(match trimmed {
            "" | "." => None,
            p => Some(p.to_string()),
        })
    }

    /// The revision to watch: the branch, or the clone's current branch.
    pub fn rev(&self) -> String {
        self.branch.clone().unwrap_or_else(|| "HEAD".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_tick_flag_has_an_env_binding() {
        let cmd = Cli::command();
        let tick = cmd.find_subcommand("tick").unwrap();
        for arg in tick.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            assert!(arg.get_env().is_some(), "--{id} has no env binding");
        }
    }

    #[test]
    fn watched_path_is_normalised_and_kept_inside_the_repo() {
        let args = |p: &str| SourceArgs {
            source: SourceKind::Git,
            repo: ".".into(),
            branch: None,
            path: Some(p.into()),
        };
        assert_eq!(
            args("./libs/shared/").watched_path().unwrap(),
            Some("libs/shared".into())
        );
        assert_eq!(args(".").watched_path().unwrap(), None);
        assert!(args("../etc").watched_path().is_err());
    }
}
