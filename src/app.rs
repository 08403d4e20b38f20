//! The subcommands: turn validated flags into effects and an exit code.

use anyhow::{Result, anyhow, bail};
use chrono::Utc;

use crate::cli::{
    AutonomyMode, Cli, Command, Environment, ExplainArgs, Scenario, SimulateArgs, SourceChoice,
    StatsArgs, StatsFormat, TickArgs, TriggerArg,
};
use crate::command::{build_source, emit, locked_state, make_source, write_stdout};
use crate::gate::autonomy;
use crate::llm::agent::{AgentAdvisor, AgentConfig};
use crate::llm::client::{Advisor, ApiKey, OpenAiAdvisor, OpenAiConfig};
use crate::llm::worktree::Worktree;
use crate::report::{self, explain, stats};
use crate::state::{journal, store};
use crate::tick::{self, AdvisorSettings, TickConfig};
use std::time::Duration;

use crate::branch;
use crate::cli::Propose;
use crate::patch::{GitBranch, GitLabBranch, Patcher};
use crate::publish::{FilePublisher, GitLabIssue, Publisher};
use crate::state::storage::FileStorage;

/// File reads per tick on the GitLab source unless `--max-reads` says
/// otherwise: each read is one API request, and the token's per-minute
/// allowance is usually shared with the project's other jobs.
const DEFAULT_GITLAB_MAX_READS: usize = 100;

/// Run the parsed command; the returned value is the process exit code.
pub fn run(mut cli: Cli) -> Result<u8> {
    crate::clone::resolve(&mut cli.command);
    // Before anything is read or printed: every output passes through it.
    let named = match &cli.command {
        Command::Tick(a) => a.llm.agent_env.clone(),
        _ => Vec::new(),
    };
    crate::redact::register(
        crate::redact::Secrets::from_env(|k| std::env::var(k).ok(), &peer_urls(&cli.command))
            .with_agent_keys(|k| std::env::var(k).ok(), &named),
    );
    match cli.command {
        // A fleet runs this very tick once per project of the group.
        Command::Tick(args) if args.fleet.is_fleet() => {
            refuse_nested_tick()?;
            crate::fleet::run(*args, &run_tick)
        }
        Command::Tick(args) => run_tick(*args),
        Command::Stats(args) => run_stats(args),
        Command::Explain(args) => run_explain(*args),
        Command::Simulate(args) => run_simulate(args),
        Command::Costs(args) => run_costs(args),
        Command::Reset(args) => run_reset(args),
        Command::Record(args) => crate::record::run(args),
        Command::Report(args) => crate::mr_report::run(args),
    }
}

/// The peer addresses given as flags: one may carry a proxy's password.
fn peer_urls(command: &Command) -> Vec<&str> {
    let (source, llm) = match command {
        Command::Tick(a) => (Some(&a.source), Some(&a.llm)),
        Command::Explain(a) => (Some(&a.source), Some(&a.llm)),
        Command::Record(a) => (Some(&a.source), None),
        Command::Costs(a) => return a.admin_url.as_deref().into_iter().collect(),
        _ => (None, None),
    };
    let gitlab = source.and_then(|s| s.gitlab_url.as_deref());
    gitlab
        .into_iter()
        .chain(llm.map(|l| l.llm_url.as_str()))
        .collect()
}

fn run_tick(args: TickArgs) -> Result<u8> {
    refuse_nested_tick()?;
    let env = Environment::from_lookup(|k| std::env::var(k).ok());
    args.llm.validate()?;
    if args.llm.agent.is_some() {
        // A signal must end the agent's tree before sentinel goes.
        crate::llm::contain::catch_signals();
    }
    let advisor_on = args.llm.enabled(env.openai_api_key.is_some())?;
    let choice = args.source.choose(&env)?;
    let mut publisher = make_publisher(&choice, &args)?;
    // An agent's edits go to the sandbox branch as patches do.
    let patches = args.propose == Propose::Patches || args.llm.agent.is_some();
    let on_git = matches!(choice, SourceChoice::Git { .. });
    // Resolved only with patches on, but then on every tick, a dry run too:
    // a sandbox that would wake sentinel is refused before anything is read.
    if args.merge_request && !(patches && matches!(choice, SourceChoice::Gitlab(_))) {
        return Err(anyhow::Error::new(crate::exit::Usage(
            "`--merge-request` keeps a GitLab merge request of the sandbox branch: it needs the GitLab source and `--propose patches` (or `--agent`); with the git source the tick's line names the command that merges the sandbox".into(),
        )));
    }
    let mut patcher: Option<Box<dyn Patcher>> = if patches {
        Some(make_patcher(
            &choice,
            &args.sandbox_branch,
            args.merge_request,
        )?)
        .filter(|_| !args.dry_run)
    } else {
        None
    };
    // Reads are free on a local clone; on GitLab each is an API request.
    let max_reads = args.max_reads.unwrap_or(match choice {
        SourceChoice::Gitlab(_) => DEFAULT_GITLAB_MAX_READS,
        SourceChoice::Git { .. } => 0,
    });
    let (mut source, rev) = build_source(choice, args.max_archive_bytes)?;
    let mut cfg = tick_config(&args, &env, advisor_on, rev, max_reads)?;
    let scope = source.scope();
    let same_scope = |p: &std::path::Path| {
        store::load_header(p)
            .ok()
            .flatten()
            .is_some_and(|h| h.scope.as_ref().is_none_or(|s| *s == scope))
    };
    if let Some(w) =
        crate::clone::state_warning(args.state.state.as_deref(), &args.source.repo, same_scope)
    {
        eprintln!("{}", crate::report::escape::terminal(&w));
    }
    // A dry run calls no model and runs no agent.
    let (jail, sandbox) = agent_jail(&args, &mut cfg)?;
    let mut advisor = (advisor_on && !args.dry_run)
        .then(|| make_advisor(&args, &env, on_git, &cfg.rev, &cfg.state, jail))
        .flatten();
    // An agent known not to start is a configuration error on every tick,
    // a no-op's too: it would otherwise be found only at the next change.
    if let Some(e) = advisor.as_ref().and_then(|a| a.fatal()) {
        bail!("{e}");
    }
    let mut storage = FileStorage::new(&cfg.state);
    let mut report = tick::run(
        &cfg,
        &mut tick::Effects {
            source: source.as_mut(),
            advisor: advisor.as_mut().map(|a| a.as_mut() as &mut dyn Advisor),
            storage: &mut storage,
            publisher: publisher.as_mut().map(|p| p.as_mut() as &mut dyn Publisher),
            patcher: patcher.as_mut().map(|p| p.as_mut() as &mut dyn Patcher),
            last: true,
        },
    )?;
    // The user chose to hand files over: said, without advice to set a key.
    if args.llm.llm == Some(crate::cli::LlmKind::Off) {
        for note in report.notes.iter_mut().filter(|n| *n == tick::ADVISOR_HINT) {
            *note = "advisor off (`--llm off`): the needs_review files are handed over".into();
        }
    }
    report.agent_sandbox = sandbox;
    finish_tick(&args, report)
}

/// The tick's line (naming its project in a fleet), its JSON, and its exit code.
fn finish_tick(args: &TickArgs, mut report: tick::TickReport) -> Result<u8> {
    let line = report::tick_line(&report);
    let line = match &args.label {
        // A fleet's tick names its project on its own line: ticks overlap.
        Some(label) => line.replacen("sentinel: ", &format!("sentinel: {label}: "), 1),
        None => line,
    };
    // Over the fleet's progress line, when there is one.
    let clear = match args.label.is_some() && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        true => crate::fleet::CLEAR_LINE,
        false => "",
    };
    eprintln!("{clear}{}", crate::redact::text(&line));
    // A dry run says what it would have done, file by file.
    report.summarise_pending(args.all_pending || args.dry_run);
    if args.json {
        emit_json(&report)?;
    }
    // A signal after the last file: the tick saved all it did; say so.
    if let Some(signal) = crate::llm::contain::interrupted() {
        let stopped = crate::llm::contain::Interrupted {
            signal,
            during: "after the tick's last file, once its state was saved".into(),
        };
        eprintln!("{stopped}");
        return Ok(stopped.exit_code());
    }
    let code = report.exit_code;
    // The process ends with this tick: freeing a report of 100,000 files
    // line by line costs more CPU than the exit that reclaims it at once.
    // A fleet's process goes on to the next project.
    if args.label.is_none() {
        std::mem::forget(report);
    }
    Ok(code)
}

/// `sentinel tick` inside an agent's run would start a tick of its own
/// (with a state of its own in the worktree) that runs the agent again.
fn refuse_nested_tick() -> Result<()> {
    let marker = crate::llm::contain::MARKER;
    if std::env::var_os(marker).is_some_and(|v| !v.is_empty()) {
        return Err(anyhow::Error::new(crate::exit::Usage(format!(
            "`sentinel tick` runs inside an agent's run ({marker} is set): a tick started by the agent \
             would run the agent again; only `stats`, `explain` and `record` may be used from an agent"
        ))));
    }
    Ok(())
}

/// The kernel's walls and the environment of this tick's agent runs, and
/// what `--json` reports of them (and the state keeps, through `cfg`).
/// `require` on a kernel without Landlock is exit 1 before anything is
/// spent; `auto` there says so once.
fn agent_jail(
    args: &TickArgs,
    cfg: &mut TickConfig,
) -> Result<(
    crate::llm::kernel_sandbox::Jail,
    Option<crate::llm::kernel_sandbox::Status>,
)> {
    use crate::llm::agent_user;
    use crate::llm::kernel_sandbox::{self as ks, Jail, Mode};
    let env = args.llm.agent_env_inherit;
    // A dry run runs no agent.
    let Some(advisor) = cfg
        .advisor
        .as_mut()
        .filter(|_| !args.dry_run && args.llm.agent.is_some())
    else {
        let user = None;
        return Ok((
            Jail {
                walls: None,
                env,
                user,
            },
            None,
        ));
    };
    let (walls, status) =
        ks::decide(args.llm.agent_sandbox, &args.llm.agent_writable).map_err(|e| anyhow!(e))?;
    if walls.is_none() && args.llm.agent_sandbox == Mode::Auto {
        eprintln!("{}", ks::unsandboxed_line(&status));
    }
    let user = args.llm.agent_user.as_deref();
    let user = user
        .map(agent_user::resolve)
        .transpose()
        .map_err(|e| anyhow!(e))?;
    let mut remembered = status.remembered(cfg.now);
    remembered.user = user.as_ref().map(|u| u.name.clone());
    advisor.agent_sandbox = Some(remembered);
    Ok((Jail { walls, env, user }, Some(status)))
}

/// The advisor: the agent command when one is given, else the model.
fn make_advisor(
    args: &TickArgs,
    env: &Environment,
    on_git: bool,
    rev: &str,
    state: &std::path::Path,
    jail: crate::llm::kernel_sandbox::Jail,
) -> Option<Box<dyn Advisor>> {
    if let Some(command) = &args.llm.agent {
        // `./agent.sh` is where it was typed, not in the agent's worktree.
        let start = std::env::current_dir().unwrap_or_default();
        return Some(Box::new(AgentAdvisor::new(AgentConfig {
            command: crate::llm::contain::resolve(command, &start),
            timeout: Duration::from_secs_f64(args.llm.agent_timeout),
            cwd: args.source.repo.clone(),
            // On a local clone the agent gets a worktree of its own; over
            // the GitLab API it answers with content instead.
            worktree: on_git.then(|| {
                Worktree::of(
                    &args.source.repo,
                    rev,
                    args.max_file_bytes,
                    crate::source::tip::read,
                )
            }),
            pass_env: args.llm.agent_env.clone(),
            fake_sleep: args.source.fake_sleep,
            pidfile: Some(store::sidecar(state, ".agent")),
            failfile: Some(store::sidecar(state, ".agent-failed")),
            jail,
        })));
    }
    let key = env.openai_api_key.as_ref()?;
    Some(Box::new(OpenAiAdvisor::new(OpenAiConfig {
        base_url: args.llm.llm_url.clone(),
        key: ApiKey::new(key.clone()),
        model: args.llm.model.clone(),
        timeout: Duration::from_secs(args.llm.llm_timeout),
        max_tokens: args.llm.max_tokens,
        fake_sleep: args.source.fake_sleep,
        patches: args.propose == Propose::Patches,
        reasoning_models: args.llm.reasoning_models.clone(),
    })))
}

/// The dashboard: one GitLab issue, or a file for the git source.
fn make_publisher(choice: &SourceChoice, args: &TickArgs) -> Result<Option<Box<dyn Publisher>>> {
    Ok(match (choice, args.dashboard, &args.dashboard_file) {
        (_, _, Some(path)) => Some(Box::new(FilePublisher { path: path.clone() })),
        (SourceChoice::Gitlab(cfg), true, None) => Some(Box::new(
            GitLabIssue::new(cfg.clone()).map_err(|e| anyhow!("{e}"))?,
        )),
        (SourceChoice::Git { .. }, true, None) => bail!(
            "--dashboard keeps a GitLab issue and needs the GitLab source; with the git source use --dashboard-file PATH"
        ),
        _ => None,
    })
}

/// Who decides, remembered with each decision: the agent, or the model.
/// `explain` names the same one, so it says the agent is asked again.
fn advisor_id(llm: &crate::cli::LlmArgs) -> String {
    match &llm.agent {
        Some(_) => "agent".to_string(),
        None => format!("openai:{}", llm.model),
    }
}

/// The validated settings of this tick, from its flags and environment.
fn tick_config(
    args: &TickArgs,
    env: &Environment,
    advisor_on: bool,
    rev: String,
    max_reads: usize,
) -> Result<TickConfig> {
    let now = args.now.unwrap_or_else(Utc::now);
    Ok(TickConfig {
        state: args.state.resolve(&args.source.repo),
        rev,
        batch: args.batch,
        max_reads,
        dry_run: args.dry_run,
        max_files: args.max_files,
        max_file_bytes: args.max_file_bytes,
        evidence: tick::current_evidence(),
        legacy_evidence: tick::legacy_evidence(&args.llm.model),
        now,
        advisor: advisor_on.then(|| AdvisorSettings {
            // Who decided, remembered with each decision: the agent, or the model.
            id: advisor_id(&args.llm),
            daily_budget: args.llm.daily_budget,
            // An agent's cost is what it reports, else the per-call estimate.
            price: args.llm.agent.is_none().then(|| args.llm.price()).flatten(),
            per_call: args.llm.per_call(),
            proxied_per_call: args.llm.proxied_per_call(),
            // What a call may answer with: a reasoning model's larger limit
            // and its one larger retry are reserved, an agent's is its own.
            max_tokens: match &args.llm.agent {
                Some(_) => args.llm.max_tokens,
                None => crate::llm::peers::reserved_completion_tokens(
                    &args.llm.model,
                    &args.llm.reasoning_models,
                    args.llm.max_tokens,
                ),
            },
            fleet: args.share.clone(),
            agent_sandbox: None,
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
        trigger: TriggerArg::resolve(args.trigger, env),
        min_interval: chrono::Duration::seconds(args.min_interval.min(86_400 * 365) as i64),
        codequality: args.codequality.clone(),
        web_url: args
            .project_url
            .clone()
            .or_else(|| env.ci_project_url.clone()),
        patches: args.propose == Propose::Patches || args.llm.agent.is_some(),
        rescope: args.rescope,
        max_rewrites: args.max_rewrites,
    })
}

/// Where patches go: the sandbox branch as a full ref, refused (exit 2) when
/// it is the watched branch, whose commits would wake sentinel, or the
/// clone's checked-out branch, which a commit would move under the work tree.
fn make_patcher(
    choice: &SourceChoice,
    sandbox: &str,
    merge_request: bool,
) -> Result<Box<dyn Patcher>> {
    let usage = |msg: String| anyhow::Error::new(crate::exit::Usage(msg));
    match choice {
        SourceChoice::Gitlab(cfg) => {
            branch::check_gitlab(sandbox, &cfg.branch).map_err(usage)?;
            let name = branch::gitlab_name(sandbox).to_string();
            let mut b = GitLabBranch::new(cfg.clone(), name).map_err(|e| anyhow!("{e}"))?;
            b.merge_request = merge_request;
            Ok(Box::new(b))
        }
        SourceChoice::Git {
            repo,
            branch: watched,
            ..
        } => {
            let reference = branch::sandbox_ref(sandbox).map_err(usage)?;
            // Git itself names the watched and the checked-out branch, so
            // every spelling resolves as git reads it, a linked worktree too.
            let resolved = branch::resolve_git(repo, watched.as_deref());
            branch::check_git(sandbox, &reference, &resolved, repo).map_err(usage)?;
            Ok(Box::new(GitBranch {
                repo: repo.clone(),
                base: watched.clone().unwrap_or_else(|| "HEAD".into()),
                branch: reference,
            }))
        }
    }
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
    if let Some(dir) = &args.state_dir {
        return crate::fleet::stats::run(&args, dir);
    }
    let path = args.state.resolve(&args.repo);
    let Some(state) = store::load(&path)? else {
        bail!(
            "no state file at `{}` yet; run `sentinel tick` first, or point --state at an existing one",
            path.display()
        );
    };
    let contents = journal::read(&path)?;
    let mut s = stats::compute(
        &state,
        contents.unfolded(state.journal),
        args.now.unwrap_or_else(Utc::now),
        args.daily_budget,
    );
    stats::with_journal(&mut s, &state, &contents);
    match (args.json, args.format) {
        (true, _) | (_, StatsFormat::Json) => emit_json(&s)?,
        (_, StatsFormat::Prometheus) => emit(stats::prometheus(&s))?,
        (_, StatsFormat::Table) => emit(stats::render(&s))?,
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
        evidence: tick::current_evidence(),
        locks: args.source.lock.clone(),
        now: args.now.unwrap_or_else(Utc::now),
    };
    let current = tick::current_fingerprint(&state, source.as_mut(), &rev, &file, &judging);
    explainable(&file, state.files.contains_key(&file), &current)?;
    let advisor = args
        .llm
        .enabled(env.openai_api_key.is_some())?
        .then(|| advisor_id(&args.llm));
    let limits = explain::Limits {
        max_rewrites: args.max_rewrites,
        now: args.now.unwrap_or_else(Utc::now),
    };
    let mut e = explain::explain(
        &file,
        state.files.get(&file),
        &current,
        advisor.as_deref(),
        limits,
    );
    e.provider = (state.llm.circuit.as_ref())
        .and_then(|c| crate::llm::protocol::describe_hold(c, limits.now));
    if args.json {
        emit_json(&e)?;
    } else {
        emit(explain::render(&e))?;
    }
    Ok(0)
}

/// `explain` speaks of a file that is both in the watched tree and in the
/// state; anything else is an error that says which half is missing.
fn explainable(file: &str, in_state: bool, current: &tick::Current) -> Result<()> {
    let in_tree = current.blob.is_some();
    match (in_tree, in_state, &current.error) {
        (true, true, _) => Ok(()),
        (false, _, Some(e)) if e.starts_with("listing failed") => {
            bail!("cannot explain `{file}`: {e}")
        }
        (false, false, _) => bail!(
            "`{file}` is neither in the watched tree at the head nor in the state; give the path from the repository root, as `--json` and the dashboard print it"
        ),
        (true, false, _) => bail!(
            "`{file}` is in the watched tree but not in the state yet; the next waking tick judges it"
        ),
        (false, true, _) => bail!(
            "`{file}` is in the state but no longer in the watched tree at the head; the next waking tick forgets it"
        ),
    }
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
        emit(format!(
            "{}\n",
            serde_json::json!({ "day": day, "storm": storm, "quota": quota })
        ))?;
    } else {
        emit(report::simulation(
            day.as_ref(),
            storm.as_ref(),
            quota.as_ref(),
        ))?;
    }
    Ok(0)
}

/// `sentinel costs`: read the bill from the Admin API, set it beside the
/// advisor's own history, keep what differs as advisories (and, with
/// `--calibrate`, the measured cost per call of models without a price).
fn run_costs(args: crate::cli::CostsArgs) -> Result<u8> {
    use crate::llm::admin::{AdminClient, AdminConfig, AdminKey};
    use crate::report::costs::render;

    args.validate()?;
    let get = |k: &str| std::env::var(k).ok();
    let key = admin_key(get)?;
    let path = args.state.resolve(&args.repo);
    let missing = || {
        anyhow!(
            "no state file at `{}` yet; run `sentinel tick` first, or point --state at an existing one",
            path.display()
        )
    };
    if !path.exists() {
        return Err(missing());
    }
    let _lock = match store::try_lock(&path)? {
        store::LockAttempt::Acquired(lock) => lock,
        store::LockAttempt::Busy(lock) => {
            eprintln!(
                "sentinel: busy (lock {} held by a running tick); nothing started",
                lock.display()
            );
            if args.json {
                emit(format!(
                    "{}\n",
                    serde_json::json!({"exit_code": crate::exit::BUSY, "busy": true, "lock": lock})
                ))?;
            }
            return Ok(crate::exit::BUSY);
        }
    };
    let mut state = store::load(&path)?.ok_or_else(missing)?;
    state.files.set_rules(tick::SUMMARY_RULES);
    let now = args.now.unwrap_or_else(Utc::now);
    let to = now.date_naive();
    let from = to - chrono::Days::new(u64::from(args.days.max(1) - 1));
    let client = AdminClient::new(AdminConfig {
        base_url: args.admin_base(get),
        key: AdminKey::new(key),
        timeout: Duration::from_secs(args.admin_timeout),
        project: args.project_id.clone().filter(|p| !p.trim().is_empty()),
    });
    let bill = client.bill(from.and_time(chrono::NaiveTime::MIN).and_utc(), args.days)?;
    let report = costs_report(&args, &bill, &mut state.llm, from, to, now);
    if report.state_written {
        store::save(&path, &state)?;
    }
    if args.json {
        emit_json(&report)?;
    } else {
        emit(render(&report))?;
    }
    Ok(crate::exit::NONE)
}

/// The trimmed admin key from the environment, refused when it is missing
/// or a project key: only an organization admin key may read the bill.
fn admin_key(get: impl Fn(&str) -> Option<String>) -> Result<String> {
    use crate::llm::admin;
    let Some(key) = get(admin::KEY_VAR).filter(|k| !k.trim().is_empty()) else {
        bail!(
            "{} is not set: `sentinel costs` reads the bill through OpenAI's Admin API, which needs an organization admin key \
             (an organization owner creates one under Settings > Organization > Admin keys), not a project API key such as OPENAI_API_KEY",
            admin::KEY_VAR
        );
    };
    if key.trim().starts_with("sk-proj-") {
        bail!(
            "{} holds a project API key (sk-proj-...), which cannot read the bill; set it to an organization admin key \
             (Settings > Organization > Admin keys)",
            admin::KEY_VAR
        );
    }
    Ok(key.trim().to_string())
}

/// Set the bill of `from ..= to` beside the advisor's history in `llm`,
/// keep in `llm` what the comparison found (and the calibrations), and say
/// so in the report's `state_written`; the caller saves the state.
fn costs_report(
    args: &crate::cli::CostsArgs,
    bill: &crate::llm::admin::Bill,
    llm: &mut crate::state::LlmState,
    from: chrono::NaiveDate,
    to: chrono::NaiveDate,
    now: chrono::DateTime<Utc>,
) -> crate::report::costs::CostsReport {
    use crate::gate::costs;
    use crate::report::costs::{CostsReport, Pages, rows};

    let ours = &llm.days;
    let history_since = ours.keys().next().copied();
    let mut notes = bill.notes.clone();
    if history_since.is_none_or(|first| first > from) {
        notes.push(match history_since {
            Some(first) => format!(
                "sentinel's own history begins {first}; earlier days are compared with the budget only"
            ),
            None => "sentinel has no record of its own calls yet; the days are compared with the budget only".to_string(),
        });
    }
    let found = costs::compare(&bill.days, ours, from, to, args.daily_budget, now);
    let calibrated = if args.calibrate {
        calibrations(bill, ours, from, to, &mut notes)
    } else {
        Vec::new()
    };
    let by_day = rows(&bill.days, ours, from, to);
    let mut changed = costs::remember(&mut llm.advisories, &found);
    for c in &calibrated {
        if llm.calibrated.get(&c.model) != Some(&c.per_call) {
            llm.calibrated.insert(c.model.clone(), c.per_call);
            changed = true;
        }
    }
    let (billed_usd, billed_requests) = billed_in_window(bill, from, to);
    CostsReport {
        from,
        to,
        days: args.days,
        project: args.project_id.clone(),
        daily_budget: args.daily_budget,
        complete: bill.complete,
        pages: Pages {
            costs: bill.costs_pages,
            usage: bill.usage_pages,
        },
        history_since,
        billed_usd,
        billed_requests,
        by_day,
        advisories: found,
        calibrated,
        state_written: changed,
        notes,
    }
}

/// `--calibrate`: the measured cost per call of the models without a
/// built-in price, or a note in `notes` saying why there is none. A bill cut
/// after its page limit would skew the cost per call: it calibrates nothing.
fn calibrations(
    bill: &crate::llm::admin::Bill,
    ours: &std::collections::BTreeMap<chrono::NaiveDate, crate::gate::costs::DaySpend>,
    from: chrono::NaiveDate,
    to: chrono::NaiveDate,
    notes: &mut Vec<String>,
) -> Vec<crate::gate::costs::Calibration> {
    if !bill.complete {
        notes.push("not calibrated: the bill is incomplete".to_string());
        return Vec::new();
    }
    let calibrated = crate::gate::costs::calibrate(&bill.days, ours, from, to, |m| {
        crate::llm::prices::builtin(m).is_some()
    });
    if calibrated.is_empty() {
        notes.push(
            "nothing calibrated: no day in the window whose bill holds only sentinel's calls to one model without a built-in price"
                .to_string(),
        );
    }
    calibrated
}

/// The billed amount and requests of the days of `from ..= to`. The query
/// names only a start time, so buckets past `to` may come back.
fn billed_in_window(
    bill: &crate::llm::admin::Bill,
    from: chrono::NaiveDate,
    to: chrono::NaiveDate,
) -> (f64, u64) {
    let window =
        crate::gate::costs::days_between(from, to).collect::<std::collections::BTreeSet<_>>();
    bill.days
        .iter()
        .filter(|(d, _)| window.contains(d))
        .fold((0.0, 0), |(usd, n), (_, b)| (usd + b.usd, n + b.requests))
}

/// `sentinel reset`: under the state lock, load, reset, save atomically
/// (only when something changed), and say what was reset.
fn run_reset(args: crate::cli::ResetArgs) -> Result<u8> {
    let path = args.state.resolve(&args.repo);
    let Some((_lock, mut state)) = locked_state(&path, "reset")? else {
        return Ok(crate::exit::BUSY);
    };
    let request = crate::reset::Request {
        paths: args.paths.clone(),
        circuit: args.circuit,
        given_up: args.given_up,
    };
    let mut done = crate::reset::apply(&mut state, &request, args.now.unwrap_or_else(Utc::now))?;
    if done.changed {
        store::save(&path, &state)?;
    }
    // An agent's failure that stands (the same twice in a row) is a hold too.
    if args.circuit {
        let standing = store::sidecar(&path, ".agent-failed");
        match std::fs::remove_file(&standing) {
            Ok(()) => done.lines.push(format!(
                "cleared the agent's standing failure (`{}`): the next tick runs it again",
                standing.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("cannot remove `{}`: {e}", standing.display()),
        }
    }
    // Paths and a peer's reason for the circuit: escaped, line by line.
    let lines: Vec<_> = done
        .lines
        .iter()
        .map(|l| crate::report::escape::terminal(l))
        .collect();
    emit(format!("{}\n", lines.join("\n")))?;
    Ok(crate::exit::NONE)
}

/// One JSON document on stdout, its words redacted value by value so it
/// stays valid and its paths and ids stay what they are, its invisible
/// characters written as `\u` escapes.
fn emit_json<T: serde::Serialize>(value: &T) -> Result<()> {
    let text = crate::redact::to_string(value)?;
    write_stdout(&format!("{}\n", crate::report::escape::json(&text)))
}
