//! The subcommands: turn validated flags into effects and an exit code.

use std::io::Write;

use anyhow::{Result, anyhow, bail};
use chrono::Utc;

use crate::cli::{
    AutonomyMode, Cli, Command, Environment, ExplainArgs, Scenario, SimulateArgs, SourceArgs,
    SourceChoice, StatsArgs, StatsFormat, TickArgs, TriggerArg,
};
use crate::gate::autonomy;
use crate::llm::client::{Advisor, ApiKey, OpenAiAdvisor, OpenAiConfig};
use crate::report::{self, explain, stats};
use crate::source::Source;
use crate::source::git::GitSource;
use crate::source::gitlab::GitLabSource;
use crate::state::{journal, store};
use crate::tick::{self, AdvisorSettings, TickConfig};
use std::time::Duration;

use crate::publish::{FilePublisher, GitLabIssue, Publisher};
use crate::state::storage::FileStorage;

/// Run the parsed command; the returned value is the process exit code.
pub fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Tick(args) => run_tick(args),
        Command::Stats(args) => run_stats(args),
        Command::Explain(args) => run_explain(args),
        Command::Simulate(args) => run_simulate(args),
    }
}

fn make_source(args: &SourceArgs, env: &Environment) -> Result<(Box<dyn Source>, String)> {
    build_source(args.choose(env)?)
}

fn build_source(choice: SourceChoice) -> Result<(Box<dyn Source>, String)> {
    let rev = choice.rev();
    let source: Box<dyn Source> = match choice {
        SourceChoice::Git { repo, branch, path } => Box::new(GitSource::new(repo, branch, path)),
        SourceChoice::Gitlab(cfg) => Box::new(GitLabSource::new(cfg).map_err(|e| anyhow!("{e}"))?),
    };
    Ok((source, rev))
}

fn run_tick(args: TickArgs) -> Result<u8> {
    let env = Environment::from_lookup(|k| std::env::var(k).ok());
    args.llm.validate()?;
    let advisor_on = args.llm.enabled(env.openai_api_key.is_some())?;
    let choice = args.source.choose(&env)?;
    // The dashboard: one GitLab issue, or a file for the git source.
    let mut publisher: Option<Box<dyn Publisher>> = match (
        &choice,
        args.dashboard,
        &args.dashboard_file,
    ) {
        (_, _, Some(path)) => Some(Box::new(FilePublisher { path: path.clone() })),
        (SourceChoice::Gitlab(cfg), true, None) => Some(Box::new(
            GitLabIssue::new(cfg.clone()).map_err(|e| anyhow!("{e}"))?,
        )),
        (SourceChoice::Git { .. }, true, None) => bail!(
            "--dashboard keeps a GitLab issue and needs the GitLab source; with the git source use --dashboard-file PATH"
        ),
        _ => None,
    };
    let (mut source, rev) = build_source(choice)?;
    let model = advisor_on.then_some(args.llm.model.as_str());
    let now = args.now.unwrap_or_else(Utc::now);
    let cfg = TickConfig {
        state: args.state.resolve(&args.source.repo),
        rev,
        batch: args.batch,
        dry_run: args.dry_run,
        max_files: args.max_files,
        max_file_bytes: args.max_file_bytes,
        evidence: tick::current_evidence(model),
        now,
        advisor: advisor_on.then(|| AdvisorSettings {
            daily_budget: args.llm.daily_budget,
            price: args.llm.price(),
            per_call: args.llm.cost_per_call,
            max_tokens: args.llm.max_tokens,
        }),
        locks: args.source.lock.clone(),
        autonomy: autonomy::Settings {
            mode: match args.autonomy.autonomy {
                AutonomyMode::Off => autonomy::Mode::Off,
                AutonomyMode::Controlled => autonomy::Mode::Controlled,
            },
            daily_tokens: args.autonomy.autonomy_tokens.min(autonomy::HARD_CAP),
            spacing: chrono::Duration::minutes(i64::from(args.autonomy.autonomy_spacing)),
        },
        signals: read_signals(args.autonomy.signals.as_deref(), now)?,
        watch_limit: args.autonomy.watch_limit,
        resolved_limit: args.autonomy.resolved_limit,
        trigger: TriggerArg::resolve(args.trigger, &env),
        min_interval: chrono::Duration::seconds(args.min_interval.min(86_400 * 365) as i64),
        codequality: args.codequality.clone(),
        web_url: args
            .project_url
            .clone()
            .or_else(|| env.ci_project_url.clone()),
    };
    // A dry run calls no model.
    let mut advisor = match (&env.openai_api_key, advisor_on && !args.dry_run) {
        (Some(key), true) => Some(OpenAiAdvisor::new(OpenAiConfig {
            base_url: args.llm.llm_url.clone(),
            key: ApiKey::new(key.clone()),
            model: args.llm.model.clone(),
            timeout: Duration::from_secs(args.llm.llm_timeout),
            max_tokens: args.llm.max_tokens,
            fake_sleep: args.source.fake_sleep,
        })),
        _ => None,
    };
    let report = tick::run_full(
        &cfg,
        source.as_mut(),
        advisor.as_mut().map(|a| a as &mut dyn Advisor),
        &mut FileStorage::new(&cfg.state),
        publisher.as_mut().map(|p| p.as_mut() as &mut dyn Publisher),
    )?;
    eprintln!("{}", report::tick_line(&report));
    if args.json {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    }
    Ok(report.exit_code)
}

/// External signals for the autonomy allowance. A missing file is no
/// signal; malformed lines are skipped.
fn read_signals(
    path: Option<&std::path::Path>,
    now: chrono::DateTime<Utc>,
) -> Result<Vec<autonomy::Trigger>> {
    let Some(path) = path else {
        return Ok(Vec::new());
    };
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(autonomy::signals(&text, now).0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => bail!(
            "cannot read the signals file `{}`: {e}; check --signals",
            path.display()
        ),
    }
}

fn run_stats(args: StatsArgs) -> Result<u8> {
    let path = args.state.resolve(&args.repo);
    let Some(state) = store::load(&path)? else {
        bail!(
            "no state file at `{}` yet; run `sentinel tick` first, or point --state at an existing one",
            path.display()
        );
    };
    let unsaved = journal::read(&path)?.unfolded(state.journal);
    let s = stats::compute(
        &state,
        unsaved,
        args.now.unwrap_or_else(Utc::now),
        args.daily_budget,
    );
    match (args.json, args.format) {
        (true, _) | (_, StatsFormat::Json) => println!("{}", serde_json::to_string(&s)?),
        (_, StatsFormat::Prometheus) => print!("{}", stats::prometheus(&s)),
        (_, StatsFormat::Table) => print!("{}", stats::render(&s)),
    }
    Ok(0)
}

fn run_explain(args: ExplainArgs) -> Result<u8> {
    let path = args.state.resolve(&args.source.repo);
    let Some(state) = store::load(&path)? else {
        bail!(
            "no state file at `{}` yet; run `sentinel tick` first, or point --state at an existing one",
            path.display()
        );
    };
    let file = args.file.trim_start_matches("./").to_string();
    let env = Environment::from_lookup(|k| std::env::var(k).ok());
    let (mut source, rev) = make_source(&args.source, &env)?;
    let judging = tick::Judging {
        max_file_bytes: tick::DEFAULT_MAX_FILE_BYTES,
        evidence: tick::current_evidence(
            args.llm
                .enabled(env.openai_api_key.is_some())?
                .then_some(args.llm.model.as_str()),
        ),
        locks: args.source.lock.clone(),
        now: Utc::now(),
    };
    let current = tick::current_fingerprint(&state, source.as_mut(), &rev, &file, &judging);
    let e = explain::explain(&file, state.files.get(&file), &current);
    if args.json {
        println!("{}", serde_json::to_string(&e)?);
    } else {
        print!("{}", explain::render(&e));
    }
    Ok(0)
}

fn run_simulate(args: SimulateArgs) -> Result<u8> {
    use crate::simulate::{self, Plan};
    let plan = Plan {
        files: args.files,
        interval: args.interval,
        duration: args.duration,
        changes: args.changes.0.clone(),
        batch: args.batch,
    };
    let want = |s: Scenario| args.scenario == Scenario::All || args.scenario == s;
    let day = want(Scenario::Day)
        .then(|| simulate::day(&plan))
        .transpose()?;
    let storm = want(Scenario::Storm).then(simulate::storm).transpose()?;
    let quota = want(Scenario::Quota)
        .then(simulate::quota_wall)
        .transpose()?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "day": day, "storm": storm, "quota": quota })
        );
    } else {
        print!(
            "{}",
            report::simulation(day.as_ref(), storm.as_ref(), quota.as_ref())
        );
    }
    Ok(0)
}
