//! `sentinel record`: an agent that runs sentinel tells it what it decided
//! about a file it was handed, under the state lock, so that a file judged
//! fine is not handed over again and one that failed is tried again later.

use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, Utc};

use crate::cli::{Environment, RecordArgs, RecordDecision};
use crate::gate::{budget, retry, rewrites};
use crate::llm::bounds;
use crate::state::{Decision, FileRecord, Outcome, State, safe_fs, store};
use crate::tick::{self, Current, Judging};

/// Who made a recorded decision.
const BY_AGENT: &str = "agent";

pub fn run(args: RecordArgs) -> Result<u8> {
    let path = args.state.resolve(&args.source.repo);
    let Some((_lock, mut state)) = crate::command::locked_state(&path, "recorded")? else {
        return Ok(crate::exit::BUSY);
    };
    let file = args.file.trim_start_matches("./").to_string();
    if !state.files.contains_key(&file) {
        bail!(
            "`{file}` is not in the state `{}`; give the path from the repository root, as `sentinel tick --json` prints it (nothing was recorded)",
            path.display()
        );
    }
    let now = args.now.unwrap_or_else(Utc::now);
    let current = current(&state, &args, &file, now)?;
    let line = apply(&mut state, &args, &file, &current, now)?;
    store::save(&path, &state)?;
    // The path and the reason are a person's or an agent's words: no
    // control character reaches the terminal raw.
    let line = crate::report::escape::terminal(&line);
    crate::command::emit(format!("{line}\n"))?;
    Ok(crate::exit::NONE)
}

/// The file's fingerprint at the head of the watched branch, as the next
/// tick will compute it.
fn current(state: &State, args: &RecordArgs, file: &str, now: DateTime<Utc>) -> Result<Current> {
    let env = Environment::from_lookup(|k| std::env::var(k).ok());
    let (mut source, rev) = crate::command::make_source(&args.source, &env)?;
    let judging = Judging {
        max_file_bytes: tick::DEFAULT_MAX_FILE_BYTES,
        evidence: tick::current_evidence(),
        locks: args.source.lock.clone(),
        now,
    };
    let current = tick::current_fingerprint(state, source.as_mut(), &rev, file, &judging);
    match (&current.error, &current.fingerprint) {
        (Some(e), _) => bail!("cannot record `{file}`: {e} (nothing was recorded)"),
        (None, None) => bail!("cannot record `{file}`: no fingerprint (nothing was recorded)"),
        _ => Ok(current),
    }
}

/// Record the decision in `state`; the line that says what was recorded.
fn apply(
    state: &mut State,
    args: &RecordArgs,
    file: &str,
    current: &Current,
    now: DateTime<Utc>,
) -> Result<String> {
    let fingerprint = current.fingerprint.clone().unwrap_or_default();
    let output = match args.decision {
        RecordDecision::Evolved => Some(own_output(args, file)?),
        _ => None,
    };
    let record = state.files.get_mut(file).expect("checked by `run`");
    if let Some(blob) = &current.blob
        && *blob != record.blob
    {
        record.blob = blob.clone();
        record.content = None;
    }
    // Capped as a model's reason is: the state keeps it on every save.
    let reason = args.reason.as_deref().map_or_else(
        || "no reason given".into(),
        |r| bounds::cap(r, bounds::MAX_REASON_CHARS),
    );
    let (outcome, reason) = match args.decision {
        RecordDecision::Skip => (
            Outcome::LlmSkip,
            format!("the agent found nothing to do: {reason}"),
        ),
        RecordDecision::Evolved => (Outcome::LlmSkip, format!("evolved by the agent: {reason}")),
        RecordDecision::Failed => (Outcome::Failed, format!("the agent failed: {reason}")),
    };
    if let Some(hash) = &output {
        rewrites::record(record, hash, now);
    }
    record.retry = retry::after(record.retry.as_ref(), &fingerprint, outcome, None, now);
    remember(record, &fingerprint, outcome, &reason, now);
    state.next_retry = retry::next_due(state.files.values().filter_map(|r| r.retry.as_ref()));
    // `--cost-usd` was checked when it was parsed (a usage error otherwise).
    if let Some(cost) = args.cost_usd {
        budget::settle(&mut state.llm.budget, cost, false, now);
        crate::gate::costs::record(&mut state.llm.days, &state.llm.budget, BY_AGENT, 1);
    }
    Ok(format!(
        "recorded `{file}`: {} ({reason})",
        args.decision_name()
    ))
}

/// The decision, at the fingerprint the next tick computes.
fn remember(record: &mut FileRecord, fp: &str, outcome: Outcome, reason: &str, now: DateTime<Utc>) {
    let decision = Decision {
        outcome,
        reason: reason.to_string(),
        ts: now,
        by: Some(BY_AGENT.to_string()),
        answered_by: None,
    };
    crate::gate::novelty::remember(record, fp, decision, now);
}

/// The content hash of what the agent left: the file in the clone's work
/// tree when there is one (committed or not), as the next tick will hash it.
/// The work tree is the agent's: the file is read as a hostile one (no link
/// followed, a FIFO refused rather than waited on, bounded), for a link to
/// `/dev/zero` or a FIFO there would flood or hang `record` under the lock.
fn own_output(args: &RecordArgs, file: &str) -> Result<String> {
    let root = &args.source.repo;
    let refused = |why: String| {
        anyhow!(
            "cannot read `{file}` in `{}` to remember the agent's output: {why}; record `evolved` once the agent left a regular file there, from the clone it worked in (--repo) (nothing was recorded)",
            root.display()
        )
    };
    match safe_fs::read_beneath(root, file, tick::DEFAULT_MAX_FILE_BYTES) {
        Ok(Some(bytes)) => Ok(tick::content_hash(&bytes)),
        Ok(None) => Err(refused("there is no such file".into())),
        Err(e) => Err(refused(e.to_string())),
    }
}

impl RecordArgs {
    fn decision_name(&self) -> &'static str {
        match self.decision {
            RecordDecision::Skip => "skip",
            RecordDecision::Evolved => "evolved",
            RecordDecision::Failed => "failed",
        }
    }
}
