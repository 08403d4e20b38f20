//! The shape of the command line (clap), its environment bindings and help,
//! and its validation into settings. No effects beyond reading the flags.

use std::path::PathBuf;

use anyhow::{Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand, ValueEnum};

// An API base may carry credentials (https://user:secret@proxy/v1): the args
// bound to one set `hide_env_values`, so --help names the variable but never
// prints its value. No flag holds a key; keys come only from the environment.
//
// The help headings every flag is grouped under (clap's own Options keeps
// only -h and -V). A heading is listed where its first flag is defined, so
// the fields of the argument structs are ordered to keep this order.
const SOURCE: &str = "Source";
const STATE: &str = "State";
const WORK: &str = "Work";
const ADVISOR: &str = "Advisor";
const REPORTS: &str = "Reports";
const SCHEDULING: &str = "Scheduling";
const FLEET: &str = "Fleet";

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
          13 evidence_changed, 14 backlog, 15 observation_due,
          16 opportunity_due, 17 autonomy_due
  20      busy: another tick holds the lock; nothing started
  21      rate_limited: a triggered tick inside --min-interval; nothing started
  1       error (configuration, I/O, corrupt or newer state); state untouched
  2       usage error

Example crontab line (every two minutes; 0, 10..17, 20 and 21 are all fine):
  */2 * * * * cd /srv/clone && git pull -q && sentinel tick --path src";

// The help is laid out for 100 columns whatever the terminal, so that
// docs/usage.md (scripts/usage-doc) comes out the same on every machine.
// clap is built without `wrap_help`: it never asks the terminal and does not
// wrap help text at all; term_width pins the width should that feature ever
// be turned on.
#[derive(Debug, Parser)]
#[command(
    name = "sentinel",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line of this process, parsed. A `tick`, the command a
    /// scheduler runs every few minutes, is first parsed against the tick's
    /// own arguments alone: building every command's arguments, as the whole
    /// parser does, was a quarter of a no-op tick's instructions (504,563 of
    /// 2,107,004; scripts/bench_noop_ab.py has the no-op before and after).
    /// Whatever that does not accept (help, version, a mistake, another
    /// command) is parsed again by the whole parser, so what a person sees
    /// is what it always was.
    pub fn from_process() -> Cli {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        Cli::tick_only(&args).unwrap_or_else(|| Cli::parse_from(args))
    }

    /// `args` parsed as a tick by the tick's arguments alone; `None` for
    /// anything else, or anything it does not accept.
    pub fn tick_only(args: &[std::ffi::OsString]) -> Option<Cli> {
        use clap::FromArgMatches;
        if args.get(1).is_none_or(|a| a != "tick") {
            return None;
        }
        let tick = TickArgs::augment_args(clap::Command::new("tick"));
        let mut parser = clap::Command::new("sentinel").subcommand(tick);
        let mut matches = parser.try_get_matches_from_mut(args).ok()?;
        // Taken out rather than borrowed: the derive's `from_arg_matches`
        // clones the matches first.
        let (_, mut sub) = matches.remove_subcommand()?;
        let tick = TickArgs::from_arg_matches_mut(&mut sub).ok()?;
        // The process ends after its one tick: freeing the parser and its
        // matches is work nobody needs, as `tick::run` leaves its state
        // (with the clone above, 161,079 of a no-op's 1,850,929
        // instructions).
        std::mem::forget((parser, matches, sub));
        Some(Cli {
            command: Command::Tick(Box::new(tick)),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one tick: look, decide whether to wake, do only the needed work, exit.
    #[command(after_help = TICK_AFTER)]
    Tick(Box<TickArgs>),
    /// Print the wake gate's and the novelty gate's counters.
    Stats(StatsArgs),
    /// Say why a file did or did not miss the cache.
    ///
    /// Prints its fingerprint, part by part.
    Explain(Box<ExplainArgs>),
    /// Run the real gates over a simulated repository and clock.
    ///
    /// The repository lives in memory and the clock is virtual (no network, no
    /// disk); prints the before/after tables.
    Simulate(SimulateArgs),
    /// Set OpenAI's real bill beside what sentinel counted.
    ///
    /// Reads the bill from OpenAI's Admin API (key: OPENAI_ADMIN_KEY) and sets it
    /// beside sentinel's own count, day by day.
    #[command(after_help = COSTS_AFTER)]
    Costs(CostsArgs),
    /// Let a person end a wait: ask again about files, close the circuit.
    ///
    /// Forgets the failures, the not-before time and the given-up mark of
    /// the files named (or of every given-up file), or closes the provider's
    /// circuit, so that the next tick asks again. Under the state lock;
    /// prints what it reset.
    #[command(after_help = RESET_AFTER)]
    Reset(ResetArgs),
    /// Tell sentinel what an agent decided about a file it was handed.
    ///
    /// For agents that run sentinel (`sentinel tick --llm off --json`) and act
    /// on the needs_review files: `skip` is remembered and reused, `evolved`
    /// remembers the file's current content as the agent's own output,
    /// `failed` is retried later. Under the state lock.
    #[command(after_help = RECORD_AFTER)]
    Record(RecordArgs),
    /// Write the Code Quality report of the last known findings, without a tick.
    ///
    /// Reads the state as the last tick saved it (no lock, no request, no
    /// tick) and writes GitLab's Code Quality JSON of its open findings: of
    /// every file, or with --changed-since of the files a merge request
    /// changes. A missing state writes an empty report.
    #[command(after_help = REPORT_AFTER)]
    Report(ReportArgs),
}

const REPORT_AFTER: &str = "\
Examples:
  sentinel report --codequality gl-code-quality-report.json
  sentinel report --codequality gl-code-quality-report.json \\
      --changed-since \"$CI_MERGE_REQUEST_DIFF_BASE_SHA\"
  sentinel report --codequality gl-code-quality-report.json \\
      --changed-since \"$CI_MERGE_REQUEST_TARGET_BRANCH_SHA\" \\
      --changed-until \"$CI_MERGE_REQUEST_SOURCE_BRANCH_SHA\"

Exit codes: 0 written (an empty report when there is no state yet), 1 error
(a corrupt state, a --changed-since that is not a commit of --repo, a FILE
that cannot be written: nothing is written then).";

/// `sentinel report`: the findings of the state, outside a tick.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The clone whose changes --changed-since reads.
    ///
    /// Also where the default state lives.
    #[arg(
        long,
        env = "SENTINEL_REPO",
        help_heading = SOURCE,
        value_name = "DIR",
        default_value = "."
    )]
    pub repo: PathBuf,
    /// Only the files changed since REF: `git diff --name-only REF...HEAD`
    /// (or REF...UNTIL with --changed-until).
    ///
    /// In a merge request pipeline, the base of its diff:
    /// $CI_MERGE_REQUEST_DIFF_BASE_SHA. Without it, every file of the state.
    #[arg(long, env = "SENTINEL_CHANGED_SINCE", help_heading = SOURCE, value_name = "REF")]
    pub changed_since: Option<String>,
    /// The other end of --changed-since: `git diff REF...UNTIL`.
    ///
    /// In a merged results pipeline or a merge train HEAD is GitLab's merge
    /// commit, which also holds what the target branch gained since the
    /// merge request's base; pass $CI_MERGE_REQUEST_SOURCE_BRANCH_SHA (with
    /// --changed-since $CI_MERGE_REQUEST_TARGET_BRANCH_SHA) to report the
    /// merge request's own change. Without it, HEAD.
    #[arg(
        long,
        env = "SENTINEL_CHANGED_UNTIL",
        help_heading = SOURCE,
        value_name = "REV",
        requires = "changed_since"
    )]
    pub changed_until: Option<String>,
    #[command(flatten)]
    pub state: StateArg,
    /// Write the GitLab Code Quality report here.
    ///
    /// Replaced atomically, never written through a symbolic link.
    #[arg(long, env = "SENTINEL_CODEQUALITY", help_heading = REPORTS, value_name = "FILE")]
    pub codequality: PathBuf,
    /// Print what was written as one JSON object on stdout.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
}

const RECORD_AFTER: &str = "\
Examples:
  sentinel record src/auth.js --decision skip --reason 'nothing to change'
  sentinel record src/auth.js --decision evolved --cost-usd 0.12

Exit codes: 0 recorded, 20 busy (a tick holds the lock), 1 error (no state,
or a file the state does not know: nothing is recorded then).";

/// What an agent decided about one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordDecision {
    /// Nothing to change: remembered and reused while the file is unchanged.
    Skip,
    /// The agent changed the file: its current content is the agent's own
    /// output, so the watched branch holding it is no new evidence.
    Evolved,
    /// The agent could not decide: retried later, finitely.
    Failed,
}

/// `sentinel record`: an agent's decision about one file.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// The file, as a path from the repository root (as `tick --json` prints it).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// What the agent decided.
    #[arg(long, help_heading = WORK, value_enum)]
    pub decision: RecordDecision,
    /// Why, in words; kept with the decision.
    #[arg(long, help_heading = WORK, value_name = "TEXT")]
    pub reason: Option<String>,
    /// What the agent's work on this file cost; joins today's budget
    /// (a number of dollars from 0 to 1000).
    #[arg(long, help_heading = ADVISOR, value_name = "USD", value_parser = parse_cost)]
    pub cost_usd: Option<f64>,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub state: StateArg,
    /// The time of the decision, RFC 3339 [default: the clock].
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
}

const RESET_AFTER: &str = "\
Examples:
  sentinel reset --circuit          after fixing the key or topping up
  sentinel reset src/auth.js        ask again about a file that gave up
  sentinel reset --given-up         ask again about every file that gave up

Exit codes: 0 done (also when there was nothing to reset), 20 busy (a tick
holds the lock), 1 error (no state, or a path the state does not know:
nothing is reset then).";

/// `sentinel reset`: what a person resets.
#[derive(Debug, Clone, Args)]
#[command(group(
    clap::ArgGroup::new("what")
        .required(true)
        .multiple(true)
        .args(["paths", "circuit", "given_up"])
))]
pub struct ResetArgs {
    /// Files to ask about again, as paths from the repository root.
    ///
    /// As `tick --json` prints them.
    #[arg(value_name = "PATH")]
    pub paths: Vec<String>,
    /// The clone the default state path is relative to.
    ///
    /// `.` is the top level of the clone that holds the current directory.
    #[arg(
        long,
        env = "SENTINEL_REPO",
        help_heading = SOURCE,
        value_name = "DIR",
        default_value = "."
    )]
    pub repo: PathBuf,
    #[command(flatten)]
    pub state: StateArg,
    /// Close the provider's circuit.
    ///
    /// Every file it holds, or that waits for it after a failure, is asked
    /// about again by the next tick. Run it after fixing what the circuit is
    /// about: the key, the quota, the model.
    #[arg(long, help_heading = STATE)]
    pub circuit: bool,
    /// Ask again about every file that gave up.
    ///
    /// A file gives up after 5 failures at one fingerprint.
    #[arg(long, help_heading = STATE)]
    pub given_up: bool,
    /// The time of the reset, RFC 3339 [default: the clock].
    ///
    /// The files reset are due from then.
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
}

const COSTS_AFTER: &str = "\
The key comes only from the environment: OPENAI_ADMIN_KEY, an organization
admin key (an organization owner creates it under Settings > Organization >
Admin keys), not a project API key. It is never printed.

Advisories (kept in the state, shown by `sentinel stats`):
  over-daily-budget  real spend on a UTC day above --daily-budget
  estimate-too-low   real cost per call at least 2x what sentinel counted
  unexpected-model   a model billed that sentinel did not use that day
  foreign-calls      more requests billed than sentinel made that day

Exit codes: 0 the bill was read (advisories or not), 20 busy (a tick holds
the lock), 1 error (missing or refused key, Admin API down: try again later).";

/// `sentinel costs`: the bill beside sentinel's own count.
#[derive(Debug, Clone, Args)]
pub struct CostsArgs {
    /// The clone the default state path is relative to.
    ///
    /// `.` is the top level of the clone that holds the current directory.
    #[arg(
        long,
        env = "SENTINEL_REPO",
        help_heading = SOURCE,
        value_name = "DIR",
        default_value = "."
    )]
    pub repo: PathBuf,
    #[command(flatten)]
    pub state: StateArg,
    /// The advisor's daily limit in USD.
    ///
    /// Compared with the real spend of each day.
    #[arg(
        long,
        env = "SENTINEL_DAILY_BUDGET",
        help_heading = ADVISOR,
        value_name = "USD",
        default_value_t = 2.0
    )]
    pub daily_budget: f64,
    /// The Admin API base.
    ///
    /// [default: OPENAI_ADMIN_BASE_URL, else https://api.openai.com/v1]
    #[arg(
        long,
        env = "SENTINEL_ADMIN_URL",
        hide_env_values = true,
        help_heading = ADVISOR,
        value_name = "URL"
    )]
    pub admin_url: Option<String>,
    /// Only this OpenAI project's costs and usage.
    ///
    /// Sent as project_ids=; without it the whole organization's bill is read.
    #[arg(long, env = "OPENAI_PROJECT_ID", help_heading = ADVISOR, value_name = "ID")]
    pub project_id: Option<String>,
    /// Seconds one Admin API request may take.
    #[arg(
        long,
        env = "SENTINEL_ADMIN_TIMEOUT",
        help_heading = ADVISOR,
        value_name = "SECS",
        default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=600)
    )]
    pub admin_timeout: u64,
    /// Store the measured real cost per call.
    ///
    /// For models without a built-in price; the budget counts it instead of
    /// --cost-per-call from then on.
    #[arg(
        long,
        env = "SENTINEL_CALIBRATE",
        help_heading = ADVISOR,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub calibrate: bool,
    /// UTC days to read, today included.
    ///
    /// 1 to 60, the history sentinel keeps.
    #[arg(
        long,
        env = "SENTINEL_COST_DAYS",
        help_heading = REPORTS,
        value_name = "N",
        default_value_t = 7,
        value_parser = clap::value_parser!(u32).range(1..=60)
    )]
    pub days: u32,
    /// Print one JSON object on stdout.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
    /// The time of the run, RFC 3339 [default: the clock].
    ///
    /// Today is its UTC day.
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
}

impl CostsArgs {
    /// The Admin API base: the flag (or SENTINEL_ADMIN_URL), else
    /// OPENAI_ADMIN_BASE_URL, else OpenAI's.
    pub fn admin_base(&self, get: impl Fn(&str) -> Option<String>) -> String {
        self.admin_url
            .clone()
            .filter(|u| !u.trim().is_empty())
            .or_else(|| get("OPENAI_ADMIN_BASE_URL").filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.daily_budget.is_finite() && self.daily_budget >= 0.0) {
            bail!("--daily-budget must be a number of USD, 0 or more");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// An ordinary day: naive, novelty gate only, full sentinel.
    Day,
    /// 20 webhook pokes in 10 s while a cycle takes 3 s.
    Storm,
    /// The billing quota runs out at 09:00.
    Quota,
    /// The three, one after the other.
    All,
}

#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Files in the simulated repository (day).
    #[arg(
        long,
        env = "SENTINEL_SIM_FILES",
        help_heading = SOURCE,
        value_name = "N",
        default_value_t = 5
    )]
    pub files: usize,
    /// Commits, as TIME=FILE pairs: "12:00=c.js,18:30=a.js" (day).
    #[arg(
        long,
        env = "SENTINEL_SIM_CHANGES",
        help_heading = SOURCE,
        value_name = "LIST",
        default_value = "12:00=c.js",
        value_parser = crate::simulate::parse_changes_arg
    )]
    pub changes: crate::simulate::Changes,
    /// The scenario to run.
    #[arg(long, env = "SENTINEL_SCENARIO", help_heading = WORK, value_enum, default_value = "all")]
    pub scenario: Scenario,
    /// Paid consultations per tick (day).
    #[arg(long, env = "SENTINEL_BATCH", help_heading = WORK, value_name = "N", default_value_t = 5)]
    pub batch: usize,
    /// Print one JSON object on stdout.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
    /// Time between ticks (day): 30s, 2m, 1h …
    #[arg(
        long,
        env = "SENTINEL_SIM_INTERVAL",
        help_heading = SCHEDULING,
        value_name = "DURATION",
        default_value = "2m",
        value_parser = crate::simulate::parse_duration
    )]
    pub interval: chrono::Duration,
    /// Length of the simulated run (day).
    #[arg(
        long,
        env = "SENTINEL_SIM_DURATION",
        help_heading = SCHEDULING,
        value_name = "DURATION",
        default_value = "24h",
        value_parser = crate::simulate::parse_duration
    )]
    pub duration: chrono::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// A local git clone (no network, no token).
    Git,
    /// The GitLab REST API v4 (no clone; a token with the read_api scope).
    Gitlab,
}

/// Where the watched files come from.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// Where the watched files come from.
    ///
    /// [default: gitlab when a GitLab URL is configured, else git]
    #[arg(long, env = "SENTINEL_SOURCE", help_heading = SOURCE, value_enum)]
    pub source: Option<SourceKind>,
    /// The git clone to watch (git source).
    ///
    /// Also where the default state lives. `.` is the top level of the clone
    /// that holds the current directory, so a subdirectory uses the clone's
    /// state.
    #[arg(
        long,
        env = "SENTINEL_REPO",
        help_heading = SOURCE,
        value_name = "DIR",
        default_value = "."
    )]
    pub repo: PathBuf,
    /// The branch to watch.
    ///
    /// [default: the clone's current branch; for GitLab, CI_DEFAULT_BRANCH]
    #[arg(long, env = "SENTINEL_BRANCH", help_heading = SOURCE, value_name = "NAME")]
    pub branch: Option<String>,
    /// The watched directory, relative to the repository root.
    ///
    /// [default: the whole repository]
    #[arg(long, env = "SENTINEL_PATH", help_heading = SOURCE, value_name = "DIR")]
    pub path: Option<String>,
    /// The GitLab API base [default: CI_API_V4_URL].
    ///
    /// For example https://gitlab.example.com/api/v4. The token comes only from
    /// the environment: SENTINEL_GITLAB_TOKEN or GITLAB_TOKEN.
    #[arg(
        long,
        env = "SENTINEL_GITLAB_URL",
        hide_env_values = true,
        help_heading = SOURCE,
        value_name = "URL"
    )]
    pub gitlab_url: Option<String>,
    /// The GitLab project: numeric id or group/project.
    ///
    /// [default: CI_PROJECT_ID]
    #[arg(long, env = "SENTINEL_PROJECT", help_heading = SOURCE, value_name = "ID")]
    pub project: Option<String>,
    /// PEM bundle of the CA of a self-hosted GitLab.
    ///
    /// [default: SSL_CERT_FILE]
    #[arg(long, env = "SENTINEL_CA_FILE", help_heading = SOURCE, value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// Seconds a GitLab request may take, connection included.
    #[arg(
        long,
        env = "SENTINEL_HTTP_TIMEOUT",
        help_heading = SOURCE,
        value_name = "SECS",
        default_value_t = 30
    )]
    pub http_timeout: u64,
    /// Files never judged and never reconsidered (a glob).
    ///
    /// `*` and `?` match within a path segment, `**` across them; without a `/`
    /// the glob matches file names. Repeatable; in the environment, separate
    /// patterns with `,`.
    #[arg(
        long,
        env = "SENTINEL_LOCK",
        help_heading = SOURCE,
        value_name = "GLOB",
        value_delimiter = ',',
        value_parser = parse_lock
    )]
    pub lock: Vec<String>,
    /// Record Retry-After waits instead of sleeping (for tests).
    #[arg(
        long,
        env = "SENTINEL_FAKE_SLEEP",
        help_heading = SOURCE,
        hide = true,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub fake_sleep: bool,
}

/// Variables that GitLab CI (or the user) sets, read once by the shell.
/// Its `Debug` never shows the secrets (see below).
#[derive(Clone, Default)]
pub struct Environment {
    pub ci_api_v4_url: Option<String>,
    pub ci_project_id: Option<String>,
    pub ci_default_branch: Option<String>,
    pub ci_job_token_set: bool,
    pub ci_pipeline_source: Option<String>,
    pub ci_project_url: Option<String>,
    pub token: Option<String>,
    pub openai_api_key: Option<String>,
    pub ssl_cert_file: Option<PathBuf>,
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |v: &Option<String>| v.as_ref().map(|_| "***");
        f.debug_struct("Environment")
            .field("ci_api_v4_url", &self.ci_api_v4_url)
            .field("ci_project_id", &self.ci_project_id)
            .field("ci_default_branch", &self.ci_default_branch)
            .field("ci_job_token_set", &self.ci_job_token_set)
            .field("ci_pipeline_source", &self.ci_pipeline_source)
            .field("ci_project_url", &self.ci_project_url)
            .field("token", &secret(&self.token))
            .field("openai_api_key", &secret(&self.openai_api_key))
            .field("ssl_cert_file", &self.ssl_cert_file)
            .finish()
    }
}

impl Environment {
    /// Read from a lookup function (the process environment in `app`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Environment {
        let non_empty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        Environment {
            ci_api_v4_url: non_empty("CI_API_V4_URL"),
            ci_project_id: non_empty("CI_PROJECT_ID"),
            ci_default_branch: non_empty("CI_DEFAULT_BRANCH"),
            ci_job_token_set: non_empty("CI_JOB_TOKEN").is_some(),
            ci_pipeline_source: non_empty("CI_PIPELINE_SOURCE"),
            ci_project_url: non_empty("CI_PROJECT_URL"),
            token: non_empty("SENTINEL_GITLAB_TOKEN").or_else(|| non_empty("GITLAB_TOKEN")),
            openai_api_key: non_empty("OPENAI_API_KEY"),
            ssl_cert_file: non_empty("SSL_CERT_FILE").map(PathBuf::from),
        }
    }
}

/// The source to build, with every setting resolved.
#[derive(Debug, Clone)]
pub enum SourceChoice {
    Git {
        repo: PathBuf,
        branch: Option<String>,
        path: Option<String>,
    },
    Gitlab(crate::source::gitlab::GitLabConfig),
}

#[derive(Debug, Clone, Args)]
pub struct StateArg {
    /// The state file [default: <repo>/.sentinel/state.json].
    ///
    /// Its lock is `<state>.lock` and its no-op journal `<state>.noops`.
    #[arg(long, env = "SENTINEL_STATE", help_heading = STATE, value_name = "PATH")]
    pub state: Option<PathBuf>,
}

/// A fleet: every project of a GitLab group, each with a state of its own.
#[derive(Debug, Clone, Default, Args)]
pub struct FleetArgs {
    /// Tick every project of this GitLab group (its id or full path).
    ///
    /// Subgroups are included and archived projects left out. Each project
    /// keeps its own state under --state-dir, in a directory named by its
    /// numeric id; its branch is --branch, else its default branch.
    #[arg(
        long,
        env = "SENTINEL_GROUP",
        help_heading = FLEET,
        value_name = "GROUP",
        requires = "state_dir"
    )]
    pub group: Option<String>,
    /// Tick the projects this file lists, in place of a group's.
    ///
    /// One project a line: its numeric id or its path with namespace; `#`
    /// starts a comment. Each is looked up once (`GET /projects/:id`).
    #[arg(
        long,
        env = "SENTINEL_PROJECT_LIST",
        help_heading = FLEET,
        value_name = "FILE",
        requires = "state_dir",
        conflicts_with = "group"
    )]
    pub project_list: Option<PathBuf>,
    /// Where a fleet keeps one state per project (`DIR/<id>/state.json`).
    #[arg(long, env = "SENTINEL_STATE_DIR", help_heading = FLEET, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Only the group's projects with this topic.
    #[arg(long, env = "SENTINEL_TOPIC", help_heading = FLEET, value_name = "TOPIC")]
    pub topic: Option<String>,
    /// Only the projects whose path with namespace matches (a glob).
    ///
    /// `*` stays within a path segment, `**` crosses them. Repeatable; in the
    /// environment, separate patterns with `,`.
    #[arg(
        long,
        env = "SENTINEL_INCLUDE",
        help_heading = FLEET,
        value_name = "GLOB",
        value_delimiter = ',',
        value_parser = parse_project_glob
    )]
    pub include: Vec<String>,
    /// Leave out the projects whose path with namespace matches (a glob).
    #[arg(
        long,
        env = "SENTINEL_EXCLUDE",
        help_heading = FLEET,
        value_name = "GLOB",
        value_delimiter = ',',
        value_parser = parse_project_glob
    )]
    pub exclude: Vec<String>,
    /// This runner's share of the group, `K/N` (1-based).
    ///
    /// A project belongs to one shard by a stable hash of its id, so N jobs
    /// of `parallel: N` cover the group once. Default: CI_NODE_INDEX and
    /// CI_NODE_TOTAL when GitLab sets them, else the whole group.
    #[arg(long, env = "SENTINEL_SHARD", help_heading = FLEET, value_name = "K/N", value_parser = parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// Projects ticked at once.
    ///
    /// Their head lookups overlap, so a quiet group costs its slowest requests,
    /// not their sum. An agent (`--agent`) ticks one project at a time.
    #[arg(long, env = "SENTINEL_JOBS", help_heading = FLEET, value_name = "N", default_value_t = 8)]
    pub jobs: usize,
    /// Exit 1 when any project's tick fails, not only when the fleet cannot run.
    #[arg(
        long,
        env = "SENTINEL_STRICT",
        help_heading = FLEET,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub strict: bool,
    /// The most one project of the fleet may spend a day, in USD.
    ///
    /// Within the fleet's --daily-budget (each shard's share of it), so one
    /// busy project cannot spend the whole fleet's day.
    #[arg(long, env = "SENTINEL_PROJECT_BUDGET", help_heading = FLEET, value_name = "USD", value_parser = parse_usd)]
    pub project_budget: Option<f64>,
    /// Per-project overrides of --branch and --path, one project a line.
    ///
    /// `acme/libs/w branch=develop path=src` (a numeric id or a path with
    /// namespace, then `branch=` and `path=`); `#` starts a comment.
    #[arg(long, env = "SENTINEL_FLEET_CONFIG", help_heading = FLEET, value_name = "FILE")]
    pub fleet_config: Option<PathBuf>,
}

impl FleetArgs {
    /// Whether this tick is a fleet's (`--group` or `--project-list`).
    pub fn is_fleet(&self) -> bool {
        self.group.is_some() || self.project_list.is_some()
    }
}

/// A sum of USD: finite, 0 or more.
fn parse_usd(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a sum of USD: write a number, 0 or more"
        )),
    }
}

#[derive(Debug, Clone, Args)]
pub struct TickArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub state: StateArg,
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Set by a fleet for each project's tick, never on the command line.
    #[arg(skip)]
    pub share: Option<crate::tick::FleetShare>,
    /// The project a fleet's tick is about, named in its line.
    #[arg(skip)]
    pub label: Option<String>,
    /// Move a state of another scope to this tick's on purpose.
    ///
    /// A state belongs to one source, project, branch and path; a tick of
    /// another scope exits 1 and writes nothing. With --rescope it lists the
    /// tree whole and keeps the decisions of the files that still exist.
    #[arg(
        long,
        env = "SENTINEL_RESCOPE",
        help_heading = STATE,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub rescope: bool,
    /// Most files remembered.
    ///
    /// The least recently seen are forgotten past it. Keep it above the number of
    /// files in the watched path.
    #[arg(
        long,
        env = "SENTINEL_MAX_FILES",
        help_heading = STATE,
        value_name = "N",
        default_value_t = 200_000
    )]
    pub max_files: usize,
    /// Paid consultations (model or agent calls) per tick (0 = unlimited).
    ///
    /// Files that need one past it wait in a backlog for the next ticks. Local
    /// decisions are free and never counted, so a clone with no model is judged
    /// whole by its first tick.
    #[arg(long, env = "SENTINEL_BATCH", help_heading = WORK, value_name = "N", default_value_t = 5)]
    pub batch: usize,
    /// Rewrites of one file an agent may make in 7 days (0 = unlimited).
    ///
    /// Counted from sandbox commits, answers with content and `sentinel record
    /// --decision evolved`; past it the file is `stuck` and not handed over
    /// until `sentinel reset PATH`.
    #[arg(
        long,
        env = "SENTINEL_MAX_REWRITES",
        help_heading = WORK,
        value_name = "N",
        default_value_t = 3
    )]
    pub max_rewrites: u32,
    /// File reads per tick (0 = unlimited).
    ///
    /// Files not read wait in a backlog. Default: 0 on the git source, where
    /// reads are free; 100 on GitLab, where each read is an API request.
    #[arg(long, env = "SENTINEL_MAX_READS", help_heading = WORK, value_name = "N")]
    pub max_reads: Option<usize>,
    /// Most bytes of one GitLab archive download (0 = never download it).
    ///
    /// When a tick has many files to read, the GitLab source fetches them all
    /// in one request (the repository archive); past this many bytes, counted
    /// compressed and unpacked, it stops and reads the rest one by one.
    #[arg(
        long,
        env = "SENTINEL_MAX_ARCHIVE_BYTES",
        help_heading = WORK,
        value_name = "BYTES",
        default_value_t = crate::source::gitlab::DEFAULT_MAX_ARCHIVE_BYTES
    )]
    pub max_archive_bytes: u64,
    /// Files larger than this are not read.
    ///
    /// They are fingerprinted by their content id instead.
    #[arg(
        long,
        env = "SENTINEL_MAX_FILE_BYTES",
        help_heading = WORK,
        value_name = "BYTES",
        default_value_t = crate::tick::DEFAULT_MAX_FILE_BYTES
    )]
    pub max_file_bytes: u64,
    /// Write nothing at all and say what would happen.
    ///
    /// Runs the same tick, but writes no state and no journal.
    #[arg(
        long,
        env = "SENTINEL_DRY_RUN",
        help_heading = WORK,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub dry_run: bool,
    /// What to do with an EVOLVE.
    #[arg(long, env = "SENTINEL_PROPOSE", help_heading = WORK, value_enum, default_value = "off")]
    pub propose: Propose,
    /// The branch patches go to.
    ///
    /// Never the watched branch, so sentinel's own commits cannot wake it.
    #[arg(
        long,
        env = "SENTINEL_SANDBOX_BRANCH",
        help_heading = WORK,
        value_name = "NAME",
        default_value = "sentinel-sandbox"
    )]
    pub sandbox_branch: String,
    /// Keep one GitLab merge request of the sandbox branch.
    ///
    /// Opened into the watched branch when the first proposal lands, its
    /// description edited only when the open proposals change, closed when
    /// none is open. GitLab source, with patches on; needs a token with the
    /// api scope.
    #[arg(
        long,
        env = "SENTINEL_MERGE_REQUEST",
        help_heading = WORK,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub merge_request: bool,
    #[command(flatten)]
    pub llm: LlmArgs,
    #[command(flatten)]
    pub autonomy: AutonomyArgs,
    /// Print the result as one JSON object on stdout.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
    /// List every pending file in --json.
    ///
    /// Without it, files left pending are their count and the first 20 paths
    /// (`pending_paths`); a dry run always lists them all.
    #[arg(
        long,
        env = "SENTINEL_ALL_PENDING",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub all_pending: bool,
    /// Write a GitLab Code Quality report here.
    ///
    /// Of the open EVOLVE findings, on a waking tick; an empty array when there
    /// are none.
    #[arg(long, env = "SENTINEL_CODEQUALITY", help_heading = REPORTS, value_name = "PATH")]
    pub codequality: Option<PathBuf>,
    /// Keep one GitLab issue listing the open proposals.
    ///
    /// The issue has the label sentinel-dashboard and is edited on a waking tick
    /// only when the proposals change. Needs a token with the api scope.
    #[arg(
        long,
        env = "SENTINEL_DASHBOARD",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub dashboard: bool,
    /// Write the same dashboard as Markdown to this file.
    ///
    /// Works with any source.
    #[arg(long, env = "SENTINEL_DASHBOARD_FILE", help_heading = REPORTS, value_name = "PATH")]
    pub dashboard_file: Option<PathBuf>,
    /// The project's web address [default: CI_PROJECT_URL].
    ///
    /// For line links on the dashboard.
    #[arg(long, env = "SENTINEL_PROJECT_URL", help_heading = REPORTS, value_name = "URL")]
    pub project_url: Option<String>,
    /// The time of this tick, RFC 3339 [default: the clock].
    ///
    /// For tests and replays.
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
    /// What started this tick.
    ///
    /// [default: from CI_PIPELINE_SOURCE; outside CI, manual]. push, webhook and
    /// api ticks are admitted at most once per --min-interval; schedule and manual
    /// ticks are never limited.
    #[arg(long, env = "SENTINEL_TRIGGER", help_heading = SCHEDULING, value_enum)]
    pub trigger: Option<TriggerArg>,
    /// Least seconds between two admitted triggered ticks.
    ///
    /// Inside it, further triggered ticks exit 21 without a request.
    #[arg(
        long,
        env = "SENTINEL_MIN_INTERVAL",
        help_heading = SCHEDULING,
        value_name = "SECS",
        default_value_t = 30
    )]
    pub min_interval: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Propose {
    /// Only report it.
    Off,
    /// Also commit the model's proposed content to --sandbox-branch.
    Patches,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TriggerArg {
    Schedule,
    Push,
    Webhook,
    Api,
    Manual,
}

impl TriggerArg {
    pub fn resolve(arg: Option<TriggerArg>, env: &Environment) -> crate::gate::admission::Trigger {
        use crate::gate::admission::Trigger;
        match arg {
            Some(TriggerArg::Schedule) => Trigger::Schedule,
            Some(TriggerArg::Push) => Trigger::Push,
            Some(TriggerArg::Webhook) => Trigger::Webhook,
            Some(TriggerArg::Api) => Trigger::Api,
            Some(TriggerArg::Manual) => Trigger::Manual,
            None => Trigger::from_pipeline_source(env.ci_pipeline_source.as_deref()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AutonomyMode {
    /// Never reconsider a remembered SKIP.
    Off,
    /// Reconsider with a daily token, a concrete new trigger and a cooldown.
    Controlled,
}

/// Observation mode's bounds and the autonomy allowance.
#[derive(Debug, Clone, Args)]
pub struct AutonomyArgs {
    /// Let the advisor reconsider a remembered SKIP.
    ///
    /// When a new trigger appears; needs the advisor.
    #[arg(
        long,
        env = "SENTINEL_AUTONOMY",
        help_heading = ADVISOR,
        value_enum,
        default_value = "off"
    )]
    pub autonomy: AutonomyMode,
    /// Reconsiderations per UTC day (hard cap 100).
    #[arg(
        long,
        env = "SENTINEL_AUTONOMY_TOKENS",
        help_heading = ADVISOR,
        value_name = "N",
        default_value_t = 10
    )]
    pub autonomy_tokens: u32,
    /// Minutes between two reconsiderations.
    #[arg(
        long,
        env = "SENTINEL_AUTONOMY_SPACING",
        help_heading = ADVISOR,
        value_name = "MINUTES",
        default_value_t = 30
    )]
    pub autonomy_spacing: u32,
    /// External signals, a file of JSON lines.
    ///
    /// One {"path":..,"kind":"runtime_error","message":..,"ts":RFC3339} per line; a
    /// signal older than 24 h is not a trigger.
    #[arg(long, env = "SENTINEL_SIGNALS", help_heading = ADVISOR, value_name = "FILE")]
    pub signals: Option<PathBuf>,
    /// Most open observation watches (oldest evicted first).
    #[arg(
        long,
        env = "SENTINEL_WATCH_LIMIT",
        help_heading = STATE,
        value_name = "N",
        default_value_t = 500
    )]
    pub watch_limit: usize,
    /// Most graded predictions kept.
    #[arg(
        long,
        env = "SENTINEL_RESOLVED_LIMIT",
        help_heading = STATE,
        value_name = "N",
        default_value_t = 200
    )]
    pub resolved_limit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LlmKind {
    /// An OpenAI-compatible chat-completions endpoint.
    Openai,
    /// No model: files that need judgement are reported as needs_review.
    Off,
}

/// The advisor: which model, where, and how much it may spend.
#[derive(Debug, Clone, Args)]
pub struct LlmArgs {
    /// Ask a model about files local policy cannot decide.
    ///
    /// [default: openai when OPENAI_API_KEY is set, else off]. The key comes only
    /// from the environment (OPENAI_API_KEY).
    #[arg(long, env = "SENTINEL_LLM", help_heading = ADVISOR, value_enum)]
    pub llm: Option<LlmKind>,
    /// The model to ask.
    #[arg(long, env = "SENTINEL_MODEL", help_heading = ADVISOR, default_value = "gpt-4o-mini")]
    pub model: String,
    /// The OpenAI-compatible API base.
    ///
    /// Local servers and proxies work.
    #[arg(
        long,
        env = "OPENAI_BASE_URL",
        hide_env_values = true,
        help_heading = ADVISOR,
        value_name = "URL",
        default_value = "https://api.openai.com/v1"
    )]
    pub llm_url: String,
    /// Most USD the advisor may spend per UTC day.
    ///
    /// Counted from real usage.
    #[arg(
        long,
        env = "SENTINEL_DAILY_BUDGET",
        help_heading = ADVISOR,
        value_name = "USD",
        default_value_t = 2.0
    )]
    pub daily_budget: f64,
    /// Seconds one model call may take.
    #[arg(
        long,
        env = "SENTINEL_LLM_TIMEOUT",
        help_heading = ADVISOR,
        value_name = "SECS",
        default_value_t = 60
    )]
    pub llm_timeout: u64,
    /// Most tokens the model may answer with.
    ///
    /// Also reserved in the budget before a call.
    #[arg(
        long,
        env = "SENTINEL_MAX_TOKENS",
        help_heading = ADVISOR,
        value_name = "N",
        default_value_t = 1024
    )]
    pub max_tokens: u64,
    /// A model's price, USD per million tokens.
    ///
    /// MODEL=INPUT,CACHED_INPUT,OUTPUT. Repeatable; in the environment, separate
    /// prices with `;`. Overrides the built-in table.
    #[arg(
        long = "price",
        env = "SENTINEL_PRICES",
        help_heading = ADVISOR,
        value_name = "MODEL=IN,CACHED,OUT",
        value_delimiter = ';',
        value_parser = parse_price
    )]
    pub prices: Vec<(String, crate::llm::prices::Price)>,
    /// USD counted per call for a model without a price.
    ///
    /// [default: 0.05; 0 for an --llm-url on this machine (loopback or a Unix
    /// socket)]. Flagged as estimated in stats.
    #[arg(
        long,
        env = "SENTINEL_COST_PER_CALL",
        help_heading = ADVISOR,
        value_name = "USD"
    )]
    pub cost_per_call: Option<f64>,
    /// Models that reason, besides the o-series and the gpt-5 family.
    ///
    /// They get max_completion_tokens (at least 4096, with room for one larger
    /// retry of a cut answer in the budget) and no temperature. Separate names
    /// with `,`.
    #[arg(
        long,
        env = "SENTINEL_REASONING_MODELS",
        help_heading = ADVISOR,
        value_name = "MODEL,...",
        value_delimiter = ','
    )]
    pub reasoning_models: Vec<String>,
    /// Ask this agent command instead of a model.
    ///
    /// Run with `sh -c` once per file that needs judgement, behind the same
    /// gates as the model: one JSON object on stdin, one on stdout (see
    /// docs/agents.md). Its cost is its answer's `cost_usd`, else
    /// --cost-per-call (estimated).
    #[arg(long, env = "SENTINEL_AGENT", help_heading = ADVISOR, value_name = "CMD")]
    pub agent: Option<String>,
    /// Seconds one agent run may take; then its process group is killed.
    #[arg(
        long,
        env = "SENTINEL_AGENT_TIMEOUT",
        help_heading = ADVISOR,
        value_name = "SECS",
        default_value_t = 600.0,
        value_parser = parse_seconds
    )]
    pub agent_timeout: f64,
    /// Pass a variable on to the agent by name (`ANTHROPIC_API_KEY`).
    ///
    /// The agent is given the plain variables only: no variable whose name says
    /// it is a secret (*KEY*, *SECRET*, *TOKEN*, *PASSWORD*, *PASSWD*,
    /// *CREDENTIAL*, *AUTH*, *_PAT) reaches it unless named here. Repeatable;
    /// in the environment, separate names with `,`.
    #[arg(
        long,
        env = "SENTINEL_AGENT_ENV",
        help_heading = ADVISOR,
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub agent_env: Vec<String>,
    /// Which of sentinel's variables the agent gets.
    ///
    /// `given`: the plain ones and those named with --agent-env; `all`: every
    /// one but sentinel's own secrets, as before.
    #[arg(
        long,
        env = "SENTINEL_AGENT_ENV_INHERIT",
        help_heading = ADVISOR,
        value_name = "WHICH",
        value_enum,
        default_value_t = crate::llm::given_env::Inherit::Given
    )]
    pub agent_env_inherit: crate::llm::given_env::Inherit,
    /// The kernel sandbox (Landlock) around every agent run.
    ///
    /// The agent writes only its working copy, a private temporary directory
    /// and --agent-writable paths; it cannot ptrace, read the environ or memory
    /// of, or (ABI 6+) signal any process outside its run. `auto` runs it
    /// without where the kernel has no Landlock and says so; `require` refuses
    /// to (exit 1).
    #[arg(
        long,
        env = "SENTINEL_AGENT_SANDBOX",
        help_heading = ADVISOR,
        value_name = "MODE",
        value_enum,
        default_value_t = crate::llm::kernel_sandbox::Mode::Auto
    )]
    pub agent_sandbox: crate::llm::kernel_sandbox::Mode,
    /// A file or directory the sandboxed agent may write (`~/.claude`).
    ///
    /// Repeatable; in the environment, separate paths with `:`.
    #[arg(
        long,
        env = "SENTINEL_AGENT_WRITABLE",
        help_heading = ADVISOR,
        value_name = "PATH",
        value_delimiter = ':'
    )]
    pub agent_writable: Vec<PathBuf>,
    /// Run the agent as this user (a name or a uid); sentinel must be root.
    ///
    /// Its uid and gid, no supplementary group, `no_new_privs` and its own
    /// HOME; its working copy and temporary directory are made its own.
    #[arg(
        long,
        env = "SENTINEL_AGENT_USER",
        help_heading = ADVISOR,
        value_name = "USER"
    )]
    pub agent_user: Option<String>,
}

/// USD counted per call for a paid model without a price (`--cost-per-call`).
pub const DEFAULT_COST_PER_CALL: f64 = 0.05;

/// Seconds, fractions allowed, from a millisecond to a day.
fn parse_seconds(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.001..=86_400.0).contains(&secs) {
        return Err(format!("`{s}` is not between 0.001 and 86400 seconds"));
    }
    Ok(secs)
}

fn parse_price(s: &str) -> Result<(String, crate::llm::prices::Price), String> {
    crate::llm::prices::parse_override(s)
}

impl LlmArgs {
    /// Whether the advisor is on, given the key (or its absence).
    pub fn enabled(&self, key_present: bool) -> Result<bool> {
        match self.llm {
            Some(LlmKind::Off) => Ok(false),
            // An agent needs no key of sentinel's.
            _ if self.agent.is_some() => Ok(true),
            Some(LlmKind::Openai) if !key_present => bail!(
                "--llm openai needs a key: set OPENAI_API_KEY (or use --llm off to hand files over as needs_review)"
            ),
            Some(LlmKind::Openai) => Ok(true),
            None => Ok(key_present),
        }
    }

    /// The price of the configured model: an override, else the built-in table.
    pub fn price(&self) -> Option<crate::llm::prices::Price> {
        self.prices
            .iter()
            .rev()
            .find(|(m, _)| *m == self.model)
            .map(|(_, p)| *p)
            .or_else(|| crate::llm::prices::builtin(&self.model))
    }

    /// USD counted per call for a model without a price behind a proxy:
    /// `--cost-per-call`, else `DEFAULT_COST_PER_CALL`, wherever it runs.
    pub fn proxied_per_call(&self) -> f64 {
        self.cost_per_call.unwrap_or(DEFAULT_COST_PER_CALL)
    }

    /// USD counted per call for a model without a price: `--cost-per-call`,
    /// else nothing for an endpoint on this machine (a model there costs no
    /// money per call) and `DEFAULT_COST_PER_CALL` for any other.
    pub fn per_call(&self) -> f64 {
        self.cost_per_call.unwrap_or(
            if self.agent.is_none() && crate::llm::peers::is_local_endpoint(&self.llm_url) {
                0.0
            } else {
                DEFAULT_COST_PER_CALL
            },
        )
    }

    pub fn validate(&self) -> Result<()> {
        if !(self.daily_budget.is_finite() && self.daily_budget >= 0.0) {
            bail!("--daily-budget must be a number of USD, 0 or more");
        }
        if self
            .cost_per_call
            .is_some_and(|c| !(c.is_finite() && c >= 0.0))
        {
            bail!("--cost-per-call must be a number of USD, 0 or more");
        }
        if self.llm_timeout == 0 {
            bail!("--llm-timeout must be at least 1 second");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    /// The clone the default state path is relative to.
    ///
    /// `.` is the top level of the clone that holds the current directory.
    #[arg(
        long,
        env = "SENTINEL_REPO",
        help_heading = SOURCE,
        value_name = "DIR",
        default_value = "."
    )]
    pub repo: PathBuf,
    #[command(flatten)]
    pub state: StateArg,
    /// A fleet's state directory (`sentinel tick --state-dir`): its projects
    /// by last outcome, the day's spend by project, the held ones.
    #[arg(long, env = "SENTINEL_STATE_DIR", help_heading = STATE, value_name = "DIR", conflicts_with = "state")]
    pub state_dir: Option<PathBuf>,
    /// The advisor's daily limit in USD.
    ///
    /// To show what is left of it.
    #[arg(
        long,
        env = "SENTINEL_DAILY_BUDGET",
        help_heading = ADVISOR,
        value_name = "USD",
        default_value_t = 2.0
    )]
    pub daily_budget: f64,
    /// Print the counters as one JSON object on stdout.
    ///
    /// Same as --format json.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
    /// How to print the counters.
    ///
    /// Tables, one JSON object, or the Prometheus text format (for the
    /// node-exporter textfile collector).
    #[arg(
        long,
        env = "SENTINEL_STATS_FORMAT",
        help_heading = REPORTS,
        value_enum,
        default_value = "table"
    )]
    pub format: StatsFormat,
    /// The time of the reading, RFC 3339 [default: the clock].
    ///
    /// The daily figures and the circuit are read at it.
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    Table,
    Json,
    Prometheus,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The file, as a path from the repository root.
    ///
    /// As `tick --json` prints it.
    pub file: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub state: StateArg,
    /// The advisor settings of the ticks (a decision stands for the advisor that made it).
    #[command(flatten)]
    pub llm: LlmArgs,
    /// Print the explanation as one JSON object on stdout.
    #[arg(
        long,
        env = "SENTINEL_JSON",
        help_heading = REPORTS,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub json: bool,
    /// The rewrite limit of the ticks, to say when a stuck file is handed over again.
    #[arg(
        long,
        env = "SENTINEL_MAX_REWRITES",
        help_heading = WORK,
        value_name = "N",
        default_value_t = 3
    )]
    pub max_rewrites: u32,
    /// The time of the look, RFC 3339 [default: the clock].
    #[arg(
        long,
        env = "SENTINEL_NOW",
        help_heading = SCHEDULING,
        value_name = "RFC3339",
        value_parser = parse_now
    )]
    pub now: Option<DateTime<Utc>>,
}
/// `K/N` with 1 <= K <= N.
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let parsed = s
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)));
    match parsed {
        Some((k, n)) if (1..=n).contains(&k) => Ok((k, n)),
        _ => Err(format!(
            "`{s}` is not a shard: write K/N with 1 <= K <= N, such as 2/4"
        )),
    }
}

/// A project path glob: refused here when it is none.
fn parse_project_glob(s: &str) -> Result<String, String> {
    crate::fleet::path_glob(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("`{s}` is not a glob ({e})"))
}

/// A `--lock` pattern that is a glob: refused here, not dropped later.
fn parse_lock(s: &str) -> Result<String, String> {
    crate::gate::lifecycle::lock_glob(s)
        .map(|_| s.to_string())
        .map_err(|e| {
            format!("`{s}` is not a glob ({e}); escape `[`, `{{` and `\\` with a backslash")
        })
}

/// A cost a person gives: finite, not negative, at most the per-call
/// ceiling; anything else is a mistake to fix, not a number to drop.
fn parse_cost(s: &str) -> Result<f64, String> {
    let max = crate::state::bounds::MAX_CALL_USD;
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=max).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{}` is not a cost: give a number of dollars from 0 to {max}, like 0.12",
            crate::report::escape::terminal(s)
        )),
    }
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
        crate::clone::check_path(raw, &self.repo)
            .map_err(|e| anyhow::Error::new(crate::exit::Usage(e)))?;
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

    /// Resolve flags and environment into one source, or say what is missing.
    pub fn choose(&self, env: &Environment) -> Result<SourceChoice> {
        let path = self.watched_path()?;
        let url = self
            .gitlab_url
            .clone()
            .or_else(|| env.ci_api_v4_url.clone());
        let kind = self.source.unwrap_or(if url.is_some() {
            SourceKind::Gitlab
        } else {
            SourceKind::Git
        });
        if kind == SourceKind::Git {
            if !self.repo.is_dir() {
                bail!(
                    "--repo `{}` is not a directory; run sentinel inside a git clone or point --repo at one",
                    self.repo.display()
                );
            }
            return Ok(SourceChoice::Git {
                repo: self.repo.clone(),
                branch: self.branch.clone(),
                path,
            });
        }
        let Some(base) = url else {
            bail!(
                "the GitLab source needs the API base: set --gitlab-url or SENTINEL_GITLAB_URL (CI_API_V4_URL inside GitLab CI)"
            );
        };
        let Some(project) = self.project.clone().or_else(|| env.ci_project_id.clone()) else {
            bail!(
                "the GitLab source needs a project: set --project or SENTINEL_PROJECT to its numeric id or group/project (CI_PROJECT_ID inside GitLab CI)"
            );
        };
        let Some(branch) = self
            .branch
            .clone()
            .or_else(|| env.ci_default_branch.clone())
        else {
            bail!(
                "the GitLab source needs a branch: set --branch or SENTINEL_BRANCH (CI_DEFAULT_BRANCH inside GitLab CI)"
            );
        };
        if env.token.is_none() && env.ci_job_token_set {
            bail!(
                "CI_JOB_TOKEN cannot read the commit list, tree or compare endpoints; set SENTINEL_GITLAB_TOKEN to a project access token with the read_api scope (as a masked CI/CD variable)"
            );
        }
        if self.http_timeout == 0 {
            bail!("--http-timeout must be at least 1 second");
        }
        Ok(SourceChoice::Gitlab(crate::source::gitlab::GitLabConfig {
            base,
            project,
            branch,
            path,
            token: env.token.clone().map(crate::source::gitlab::Token::new),
            timeout: std::time::Duration::from_secs(self.http_timeout),
            ca_file: self.ca_file.clone().or_else(|| env.ssl_cert_file.clone()),
            fake_sleep: self.fake_sleep,
        }))
    }
}

impl SourceChoice {
    /// The revision listed when the head is unknown.
    pub fn rev(&self) -> String {
        match self {
            SourceChoice::Git { branch, .. } => branch.clone().unwrap_or_else(|| "HEAD".into()),
            SourceChoice::Gitlab(cfg) => cfg.branch.clone(),
        }
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
    fn every_costs_flag_has_an_env_binding() {
        let cmd = Cli::command();
        let costs = cmd.find_subcommand("costs").unwrap();
        for arg in costs.get_arguments() {
            let id = arg.get_id().as_str();
            if ["help", "version"].contains(&id) {
                continue;
            }
            assert!(arg.get_env().is_some(), "--{id} has no env binding");
        }
    }

    #[test]
    fn every_flag_is_under_one_of_the_seven_headings() {
        let headings = [SOURCE, STATE, FLEET, WORK, ADVISOR, REPORTS, SCHEDULING];
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_positional() || ["help", "version"].contains(&id) {
                    continue;
                }
                let heading = arg.get_help_heading();
                assert!(
                    heading.is_some_and(|h| headings.contains(&h)),
                    "--{} of `sentinel {}` is under {heading:?}; give it a help_heading, one of {headings:?}",
                    arg.get_long().unwrap_or(id),
                    sub.get_name()
                );
            }
        }
    }

    /// The tick's own parser, the no-op's fast path, reads every command
    /// line it accepts exactly as the whole parser does, and hands help,
    /// version, mistakes and other commands to it.
    #[test]
    fn the_ticks_own_parser_reads_a_tick_as_the_whole_parser_does() {
        let accepted: &[&[&str]] = &[
            &[],
            &[
                "--path",
                "src",
                "--state",
                "s.json",
                "--now",
                "2026-07-01T00:00:00Z",
            ],
            &["--repo", "r", "--branch", "main", "--batch", "0", "--json"],
            &[
                "--source",
                "gitlab",
                "--project",
                "g/p",
                "--gitlab-url",
                "https://h",
            ],
            &["--trigger", "push", "--min-interval", "1800", "--dry-run"],
            &[
                "--agent",
                "sh x",
                "--agent-env",
                "K",
                "--agent-sandbox",
                "off",
            ],
            &["--daily-budget", "2.5", "--model", "m", "--lock", "*.lock"],
            &[
                "--group",
                "g",
                "--state-dir",
                "d",
                "--shard",
                "2/4",
                "--jobs",
                "3",
            ],
        ];
        for extra in accepted {
            let args: Vec<std::ffi::OsString> = ["sentinel", "tick"]
                .iter()
                .chain(extra.iter())
                .map(Into::into)
                .collect();
            let whole = Cli::try_parse_from(&args).unwrap();
            let own = Cli::tick_only(&args).unwrap_or_else(|| panic!("refused {extra:?}"));
            assert_eq!(format!("{own:?}"), format!("{whole:?}"), "{extra:?}");
        }
        let handed_on: &[&[&str]] = &[
            &["sentinel", "tick", "--help"],
            &["sentinel", "tick", "-h"],
            &["sentinel", "--version"],
            &["sentinel", "tick", "--no-such-flag"],
            &["sentinel", "tick", "--batch", "many"],
            &["sentinel", "stats", "--json"],
            &["sentinel"],
        ];
        for args in handed_on {
            let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
            assert!(Cli::tick_only(&args).is_none(), "{args:?}");
        }
    }

    /// `sentinel tick ARGS...`'s advisor flags.
    fn llm_args(args: &[&str]) -> LlmArgs {
        let cli = Cli::try_parse_from(["sentinel", "tick"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Tick(t) => t.llm,
            _ => unreachable!("a tick was parsed"),
        }
    }

    #[test]
    fn a_model_on_this_machine_costs_nothing_per_call_unless_told_otherwise() {
        let local = ["--llm-url", "http://127.0.0.1:11434/v1"];
        assert_eq!(llm_args(&local).per_call(), 0.0);
        let paid = ["--llm-url", "https://api.openai.com/v1"];
        assert_eq!(llm_args(&paid).per_call(), DEFAULT_COST_PER_CALL);
        let told = [
            "--llm-url",
            "http://localhost:8080/v1",
            "--cost-per-call",
            "0.01",
        ];
        assert_eq!(llm_args(&told).per_call(), 0.01);
        // An agent is no endpoint: its calls are paid wherever the URL points.
        let agent = ["--llm-url", "http://[::1]:4000", "--agent", "codex"];
        assert_eq!(llm_args(&agent).per_call(), DEFAULT_COST_PER_CALL);
    }

    fn base_args() -> SourceArgs {
        SourceArgs {
            source: None,
            repo: ".".into(),
            branch: None,
            path: None,
            gitlab_url: None,
            project: None,
            ca_file: None,
            http_timeout: 30,
            lock: Vec::new(),
            fake_sleep: false,
        }
    }

    fn ci_env() -> Environment {
        Environment {
            ci_api_v4_url: Some("https://gitlab.example.com/api/v4".into()),
            ci_project_id: Some("42".into()),
            ci_default_branch: Some("main".into()),
            ..Environment::default()
        }
    }

    #[test]
    fn inside_gitlab_ci_the_source_configures_itself() {
        let SourceChoice::Gitlab(cfg) = base_args().choose(&ci_env()).unwrap() else {
            panic!("a GitLab URL selects the GitLab source");
        };
        assert_eq!(
            (cfg.base.as_str(), cfg.project.as_str(), cfg.branch.as_str()),
            ("https://gitlab.example.com/api/v4", "42", "main")
        );
    }

    #[test]
    fn flags_win_over_ci_variables_and_git_stays_the_default_outside_ci() {
        let args = SourceArgs {
            project: Some("group/project".into()),
            branch: Some("develop".into()),
            ..base_args()
        };
        let SourceChoice::Gitlab(cfg) = args.choose(&ci_env()).unwrap() else {
            panic!("gitlab expected");
        };
        assert_eq!(
            (cfg.project.as_str(), cfg.branch.as_str()),
            ("group/project", "develop")
        );
        assert!(matches!(
            base_args().choose(&Environment::default()).unwrap(),
            SourceChoice::Git { .. }
        ));
    }

    #[test]
    fn a_job_token_alone_names_the_variable_to_set() {
        let env = Environment {
            ci_job_token_set: true,
            ..ci_env()
        };
        let err = base_args().choose(&env).unwrap_err().to_string();
        assert!(err.contains("SENTINEL_GITLAB_TOKEN"), "{err}");
        assert!(err.contains("CI_JOB_TOKEN"), "{err}");
    }

    #[test]
    fn a_missing_gitlab_setting_names_its_variable() {
        let args = SourceArgs {
            source: Some(SourceKind::Gitlab),
            ..base_args()
        };
        let err = args
            .choose(&Environment::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("SENTINEL_GITLAB_URL"), "{err}");
        let env = Environment {
            ci_project_id: None,
            ..ci_env()
        };
        let err = base_args().choose(&env).unwrap_err().to_string();
        assert!(err.contains("SENTINEL_PROJECT"), "{err}");
    }

    #[test]
    fn watched_path_is_normalised_and_kept_inside_the_repo() {
        let args = |p: &str| SourceArgs {
            path: Some(p.into()),
            ..base_args()
        };
        assert_eq!(
            args("./libs/shared/").watched_path().unwrap(),
            Some("libs/shared".into())
        );
        assert_eq!(args(".").watched_path().unwrap(), None);
        assert!(args("../etc").watched_path().is_err());
    }
}
