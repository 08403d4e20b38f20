//! `sentinel simulate`: the real tick, gates, admission and error protocol
//! over an in-memory repository, an in-memory state and a scripted model,
//! on a virtual clock. No network, no disk; a day runs in well under a second.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::gate::admission::Trigger;
use crate::gate::novelty::{self, Parts};
use crate::llm::client::{Action, AdviceRequest, Advisor, Answer, Attempt, Call, with_protocol};
use crate::llm::prices::Usage;
use crate::llm::protocol::Failure;
use crate::source::memory::MemorySource;
use crate::state::storage::MemoryStorage;
use crate::state::{Decision, FileRecord, Outcome};
use crate::tick::{self, AdvisorSettings, TickConfig};

/// The simulated day starts here (any UTC midnight would do).
pub fn t0() -> DateTime<Utc> {
    "2026-06-16T00:00:00Z".parse().expect("a valid instant")
}

/// What one simulation runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub files: usize,
    pub interval: Duration,
    pub duration: Duration,
    /// (offset from t0, file name) of each change.
    pub changes: Vec<(Duration, String)>,
    pub batch: usize,
}

impl Default for Plan {
    /// The seeds' ordinary day: 5 files, a tick every 2 minutes for 24 h,
    /// one commit at 12:00 changing c.js.
    fn default() -> Plan {
        Plan {
            files: 5,
            interval: Duration::minutes(2),
            duration: Duration::hours(24),
            changes: vec![(Duration::hours(12), "c.js".into())],
            batch: 5,
        }
    }
}

/// One column of the before/after table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Column {
    pub ticks: u64,
    pub wakes: u64,
    pub file_reads: u64,
    pub fresh_evaluations: u64,
    pub model_calls: u64,
    pub state_writes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Day {
    pub naive: Column,
    pub novelty_only: Column,
    pub sentinel: Column,
    pub by_reason: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Storm {
    pub requests: u64,
    pub naive_cycles: u64,
    pub cycles_started: u64,
    pub refusals: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quota {
    pub naive_calls: u64,
    pub calls_after_nine: u64,
    pub held_files: u64,
    pub circuit_class: Option<String>,
    pub circuit_until: Option<DateTime<Utc>>,
}

/// The file names of a plan: a.js … e.js, then f5.js, f6.js …
pub fn file_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| match i {
            0..=4 => format!("{}.js", (b'a' + i as u8) as char),
            _ => format!("f{i}.js"),
        })
        .collect()
}

fn content(name: &str, version: u32) -> String {
    let mut c = format!("// {name}\nmodule.exports = 1;");
    for v in 1..=version {
        c.push_str(&format!("\n// v{}", v + 1));
    }
    c
}

/// A model that answers every attempt the same way, behind the real protocol.
struct Scripted {
    respond: fn() -> Attempt,
    calls: u64,
    waits: Vec<u64>,
}

impl Advisor for Scripted {
    fn model(&self) -> &str {
        "simulated"
    }
    fn ask(&mut self, _req: &AdviceRequest, now: DateTime<Utc>) -> Call {
        let respond = self.respond;
        let calls = &mut self.calls;
        with_protocol(now, &mut self.waits, true, || {
            *calls += 1;
            respond()
        })
    }
    fn calls(&self) -> u64 {
        self.calls
    }
    fn waits_ms(&self) -> Vec<u64> {
        self.waits.clone()
    }
}

fn skip() -> Attempt {
    Ok((
        Answer {
            action: Action::Skip,
            reason: "stable".into(),
            findings: Vec::new(),
            content: None,
        },
        Some(Usage {
            prompt_tokens: 500,
            cached_tokens: 0,
            completion_tokens: 50,
        }),
    ))
}

fn quota() -> Attempt {
    Err((
        Failure::Http {
            status: 429,
            body: r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#.into(),
            headers: Vec::new(),
        },
        None,
    ))
}

fn config(now: DateTime<Utc>, batch: usize, trigger: Trigger) -> TickConfig {
    TickConfig {
        state: "simulated/state.json".into(),
        rev: "HEAD".into(),
        batch,
        max_reads: 0,
        rescope: false,
        max_rewrites: 3,
        dry_run: false,
        max_files: 200_000,
        max_file_bytes: tick::DEFAULT_MAX_FILE_BYTES,
        evidence: tick::current_evidence(),
        legacy_evidence: Vec::new(),
        now,
        advisor: Some(AdvisorSettings {
            id: "openai:simulated".into(),
            daily_budget: 1_000.0,
            price: crate::llm::prices::builtin("gpt-4o-mini"),
            per_call: 0.05,
            proxied_per_call: 0.05,
            max_tokens: 1024,
            fleet: None,
            agent_sandbox: None,
        }),
        locks: Vec::new(),
        autonomy: Default::default(),
        signals: Vec::new(),
        watch_limit: 500,
        resolved_limit: 200,
        trigger,
        min_interval: Duration::seconds(30),
        codequality: None,
        web_url: None,
        patches: false,
    }
}

/// The ordinary day, three ways: naive, novelty gate only, full sentinel.
pub fn day(plan: &Plan) -> Result<Day> {
    let names = file_names(plan.files);
    check(plan, &names)?;
    let mut naive = Column::default();
    let mut only = Column::default();
    let mut memory: BTreeMap<String, FileRecord> = BTreeMap::new();
    let mut source = MemorySource::new();
    let mut storage = MemoryStorage::new();
    let mut model = Scripted {
        respond: skip,
        calls: 0,
        waits: Vec::new(),
    };
    let mut sentinel = Column::default();
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    let mut versions: BTreeMap<&str, u32> = BTreeMap::new();
    let mut committed: Option<Vec<(String, String)>> = None;

    let mut t = t0();
    while t < t0() + plan.duration {
        land_changes(plan, t - t0(), &mut versions);
        let tree = tree_of(&names, &versions);
        if committed.as_ref() != Some(&tree) {
            commit_tree(&mut source, &tree);
            committed = Some(tree.clone());
        }
        naive_tick(&mut naive, tree.len() as u64);
        novelty_only_tick(&mut only, &mut memory, &tree, t);

        // Today: the real tick.
        let cfg = config(t, plan.batch, Trigger::Schedule);
        let r = run(&cfg, &mut source, &mut model, &mut storage)?;
        sentinel.ticks += 1;
        sentinel.wakes += u64::from(r.verdict.wake);
        sentinel.file_reads += r.file_reads;
        sentinel.fresh_evaluations += r.fresh_evaluations;
        *by_reason.entry(r.verdict.reason.clone()).or_default() += 1;
        t += plan.interval;
    }
    sentinel.model_calls = model.calls;
    sentinel.state_writes = storage.saves;
    Ok(Day {
        naive,
        novelty_only: only,
        sentinel,
        by_reason,
    })
}

/// Bump the version of each file changed in the interval that ends at
/// `offset`: a change lands on the first tick at or after its time.
fn land_changes<'p>(plan: &'p Plan, offset: Duration, versions: &mut BTreeMap<&'p str, u32>) {
    for (at, name) in &plan.changes {
        if *at <= offset && *at > offset - plan.interval {
            *versions.entry(name.as_str()).or_default() += 1;
        }
    }
}

/// The repository's files at their current versions, `(path, content)`.
fn tree_of(names: &[String], versions: &BTreeMap<&str, u32>) -> Vec<(String, String)> {
    names
        .iter()
        .map(|n| {
            (
                n.clone(),
                content(n, versions.get(n.as_str()).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// Refuse a plan whose clock would not advance, or whose changes name a
/// file the simulated repository does not have.
fn check(plan: &Plan, names: &[String]) -> Result<()> {
    if plan.interval <= Duration::zero() || plan.duration <= Duration::zero() {
        bail!("--interval and --duration must be longer than zero");
    }
    for (_, name) in &plan.changes {
        if !names.contains(name) {
            bail!(
                "--changes names `{name}`, which is not one of the {} simulated files ({} …)",
                names.len(),
                names.first().map(String::as_str).unwrap_or("")
            );
        }
    }
    Ok(())
}

/// Commit `tree`, `(path, content)` pairs, as the next commit of `source`.
fn commit_tree(source: &mut MemorySource, tree: &[(String, String)]) {
    let refs: Vec<(&str, &str)> = tree.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    source.commit(&refs);
}

/// One tick before sentinel: every tick, every file, one call each, memory saved.
fn naive_tick(naive: &mut Column, files: u64) {
    naive.ticks += 1;
    naive.wakes += 1;
    naive.file_reads += files;
    naive.fresh_evaluations += files;
    naive.model_calls += files;
    naive.state_writes += 1;
}

/// One tick of the novelty gate alone: still every file read every tick,
/// but only a file whose fingerprint is new costs a call.
fn novelty_only_tick(
    only: &mut Column,
    memory: &mut BTreeMap<String, FileRecord>,
    tree: &[(String, String)],
    t: DateTime<Utc>,
) {
    only.ticks += 1;
    only.wakes += 1;
    only.state_writes += 1;
    for (path, bytes) in tree {
        only.file_reads += 1;
        let fp = novelty::fingerprint(&Parts {
            content: &tick::content_hash(bytes.as_bytes()),
            risk: "medium",
            role: "source",
            confidence: 0.7,
            status: "under_observation",
            rollback_streak: 0,
            penalty: 0,
            evidence: "ev",
            deps: Some(&[]),
        });
        let record = memory.entry(path.clone()).or_default();
        if novelty::evaluate(Some(record), &fp, true, Some("openai:simulated")).is_novel() {
            only.fresh_evaluations += 1;
            only.model_calls += 1;
            let decision = Decision {
                outcome: Outcome::LlmSkip,
                reason: "stable".into(),
                ts: t,
                by: Some("openai:simulated".into()),
                answered_by: None,
            };
            novelty::remember(record, &fp, decision, t);
        } else {
            novelty::reuse(record, 0, t);
        }
    }
}

/// The webhook storm: 20 pokes in 10 s while a cycle takes 3 s.
pub fn storm() -> Result<Storm> {
    const POKES: i64 = 20;
    let mut source = MemorySource::new();
    source.commit(&[("a.js", "// a\n")]);
    let mut storage = MemoryStorage::new();
    let mut model = Scripted {
        respond: skip,
        calls: 0,
        waits: Vec::new(),
    };
    // The state exists: the timer ran before the storm.
    run(
        &config(t0(), 5, Trigger::Schedule),
        &mut source,
        &mut model,
        &mut storage,
    )?;
    let start = t0() + Duration::hours(1);
    let mut busy_until = start;
    let mut started = 0;
    let mut refusals: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..POKES {
        let now = start + Duration::milliseconds(500 * i);
        // A cycle in progress holds the lock.
        storage.busy = now < busy_until;
        let r = run(
            &config(now, 5, Trigger::Webhook),
            &mut source,
            &mut model,
            &mut storage,
        )?;
        match r.exit_code {
            crate::exit::BUSY => *refusals.entry("busy".into()).or_default() += 1,
            crate::exit::RATE_LIMITED => *refusals.entry("rate_limited".into()).or_default() += 1,
            _ => {
                started += 1;
                busy_until = now + Duration::seconds(3);
            }
        }
    }
    Ok(Storm {
        requests: POKES as u64,
        naive_cycles: POKES as u64,
        cycles_started: started,
        refusals,
    })
}

/// The quota wall: the quota runs out at 09:00 and every call after that is
/// refused with `insufficient_quota`; all five files change on every tick.
pub fn quota_wall() -> Result<Quota> {
    let names = file_names(5);
    let mut source = MemorySource::new();
    let mut storage = MemoryStorage::new();
    let mut ok = Scripted {
        respond: skip,
        calls: 0,
        waits: Vec::new(),
    };
    let tree = |v: u32| -> Vec<(String, String)> {
        names.iter().map(|n| (n.clone(), content(n, v))).collect()
    };
    let commit = |source: &mut MemorySource, v: u32| commit_tree(source, &tree(v));
    commit(&mut source, 0);
    run(
        &config(t0(), 0, Trigger::Schedule),
        &mut source,
        &mut ok,
        &mut storage,
    )?;
    let nine = t0() + Duration::hours(9);
    let mut broke = Scripted {
        respond: quota,
        calls: 0,
        waits: Vec::new(),
    };
    let (mut naive, mut held) = (0, 0);
    let mut t = nine;
    let mut v = 0;
    while t < t0() + Duration::hours(24) {
        v += 1;
        commit(&mut source, v);
        // Before: a generic retry, three attempts per file per tick.
        naive += 3 * names.len() as u64;
        let r = run(
            &config(t, 0, Trigger::Schedule),
            &mut source,
            &mut broke,
            &mut storage,
        )?;
        held += r.counts.get("held").copied().unwrap_or(0);
        t += Duration::minutes(2);
    }
    let state = crate::state::storage::Storage::load(&mut storage)?.unwrap_or_default();
    Ok(Quota {
        naive_calls: naive,
        calls_after_nine: broke.calls,
        held_files: held,
        circuit_class: state
            .llm
            .circuit
            .as_ref()
            .map(|c| c.class.as_str().to_string()),
        circuit_until: state.llm.circuit.as_ref().map(|c| c.until),
    })
}

/// One tick of the real pipeline over memory, with the scripted model.
fn run(
    cfg: &TickConfig,
    source: &mut MemorySource,
    model: &mut Scripted,
    storage: &mut MemoryStorage,
) -> Result<tick::TickReport> {
    tick::run(
        cfg,
        &mut tick::Effects::new(source, storage).with_advisor(Some(model)),
    )
}

/// Parse `90s`, `2m`, `24h`, `7d`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 30s, 2m, 24h or 7d"))?;
    match unit {
        "s" => Ok(Duration::seconds(n)),
        "m" => Ok(Duration::minutes(n)),
        "h" => Ok(Duration::hours(n)),
        "d" => Ok(Duration::days(n)),
        _ => Err(format!("`{s}` is not a duration like 30s, 2m, 24h or 7d")),
    }
}

/// The commits of a simulated day, as one command-line value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes(pub Vec<(Duration, String)>);

/// `parse_changes` for clap: one value holding the whole list.
pub fn parse_changes_arg(s: &str) -> Result<Changes, String> {
    parse_changes(s).map(Changes)
}

/// Parse `12:00=c.js,18:30=a.js` into offsets from midnight.
pub fn parse_changes(s: &str) -> Result<Vec<(Duration, String)>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|part| {
            let (time, file) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not TIME=FILE like 12:00=c.js"))?;
            let (h, m) = time
                .trim()
                .split_once(':')
                .ok_or_else(|| format!("`{time}` is not a time like 12:00"))?;
            let (h, m): (i64, i64) = (
                h.parse()
                    .map_err(|_| format!("`{time}` is not a time like 12:00"))?,
                m.parse()
                    .map_err(|_| format!("`{time}` is not a time like 12:00"))?,
            );
            Ok((
                Duration::hours(h) + Duration::minutes(m),
                file.trim().to_string(),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordinary_day_reproduces_the_seed_and_reads_less() {
        let d = day(&Plan::default()).unwrap();
        assert_eq!(
            d.naive,
            Column {
                ticks: 720,
                wakes: 720,
                file_reads: 3600,
                fresh_evaluations: 3600,
                model_calls: 3600,
                state_writes: 720
            }
        );
        assert_eq!(
            (d.novelty_only.file_reads, d.novelty_only.model_calls),
            (3600, 6)
        );
        assert_eq!(
            d.sentinel,
            Column {
                ticks: 720,
                wakes: 2,
                file_reads: 6,
                fresh_evaluations: 6,
                model_calls: 6,
                state_writes: 2
            }
        );
        assert_eq!(d.by_reason.get("none"), Some(&718));
    }

    #[test]
    fn the_webhook_storm_starts_one_cycle() {
        let s = storm().unwrap();
        assert_eq!((s.naive_cycles, s.cycles_started), (20, 1));
        assert_eq!(s.refusals.get("busy"), Some(&5));
        assert_eq!(s.refusals.get("rate_limited"), Some(&14));
    }

    #[test]
    fn the_quota_wall_costs_one_call_until_midnight() {
        let q = quota_wall().unwrap();
        assert_eq!(q.naive_calls, 6750);
        assert_eq!(q.calls_after_nine, 1);
        assert_eq!(q.held_files, 2249);
        assert_eq!(q.circuit_class.as_deref(), Some("quota"));
        assert_eq!(q.circuit_until, Some(t0() + Duration::hours(24)));
    }

    #[test]
    fn durations_and_changes_parse_and_say_what_they_expect() {
        assert_eq!(parse_duration("2m"), Ok(Duration::minutes(2)));
        assert_eq!(parse_duration("7d"), Ok(Duration::days(7)));
        assert!(parse_duration("2 weeks").unwrap_err().contains("30s, 2m"));
        assert_eq!(
            parse_changes("12:00=c.js, 18:30=a.js"),
            Ok(vec![
                (Duration::hours(12), "c.js".to_string()),
                (
                    Duration::hours(18) + Duration::minutes(30),
                    "a.js".to_string()
                )
            ])
        );
        assert!(parse_changes("noon=c.js").is_err());
    }
}
