//! `sentinel stats`: the counters of the state and its journal, as tables or JSON.

use std::collections::BTreeMap;

use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::Style;

use chrono::{DateTime, Utc};

use crate::gate::wake::Reason;
use crate::state::{Outcome, State};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WakeStats {
    pub ticks: u64,
    pub wakes: u64,
    pub noops: u64,
    /// `noops / ticks`; null when there were no ticks, never NaN.
    pub noop_rate: Option<f64>,
    pub by_reason: BTreeMap<String, u64>,
    /// No-op ticks counted in the journal but not yet folded into the state.
    pub unsaved_noops: u64,
    /// Lines of the no-op journal that are not no-op lines: skipped, never counted.
    pub malformed_noop_lines: u64,
    pub last_wake_reason: Option<String>,
    pub last_head: Option<String>,
    pub last_evidence: Option<String>,
    /// The reader of a git clone's objects on the last wake: `gix`, or `git`
    /// where gix declines the clone; null for other sources.
    pub reader: Option<String>,
}

/// The source's outages: ticks whose head lookup failed for a passing
/// reason (`sha_unavailable`), journal lines included.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutageStats {
    /// Outage ticks, lifetime.
    pub ticks: u64,
    /// Outage ticks in a row up to the last tick; 0 once a head lookup answered.
    pub consecutive: u64,
    /// The first tick of that run.
    #[serde(serialize_with = "secs_opt")]
    pub since: Option<DateTime<Utc>>,
    /// The last outage tick.
    #[serde(serialize_with = "secs_opt")]
    pub last: Option<DateTime<Utc>>,
    /// Outage ticks that learned nothing and wrote only a journal line, not
    /// yet folded into the state.
    pub unsaved: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoveltyStats {
    /// Files with a remembered decision.
    pub tracked_files: u64,
    pub fresh_evaluations: u64,
    pub reuses: u64,
    /// `reuses / (reuses + fresh_evaluations)`; null when both are 0, never NaN.
    pub reuse_rate: Option<f64>,
    /// `ceil(chars / 4) + 400` per reuse: the size of the avoided prompts, not a bill.
    pub estimated_tokens_saved: u64,
    pub file_reads: u64,
    /// Files waiting in the backlog for a later tick.
    pub pending: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CircuitStats {
    pub class: String,
    #[serde(serialize_with = "secs_one")]
    pub until: DateTime<Utc>,
    pub open: bool,
    pub reason: String,
    pub advice: String,
    /// Holds in a row before this one whose first call failed again: each
    /// doubled the hold.
    pub repeats: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlmStats {
    pub calls_today: u64,
    /// Cost settled from the responses' usage today (USD).
    pub cost_today_measured: f64,
    /// Cost of today's calls to models without a price: the per-call estimate (USD).
    pub cost_today_estimated: f64,
    /// Today's settled calls by where their cost came from: `reported` by
    /// the server or agent, `price_table`, `per_call`, `reservation`.
    pub cost_sources_today: BTreeMap<String, u64>,
    /// Today's attempts that timed out, counted as estimated calls at the
    /// reservation (the provider may have billed them), and what they count.
    pub timed_out_today: u64,
    pub timed_out_cost_today: f64,
    /// The proxy the answers came through (`LiteLLM`), when they said so:
    /// its calls are counted at the price table or the per-call estimate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    pub daily_budget: f64,
    pub budget_left: f64,
    pub circuit: Option<CircuitStats>,
    /// Today's answers a proxy gave from another model, as `asked -> answered`.
    pub fallbacks_today: BTreeMap<String, u64>,
    /// What the agent last ran inside: the kernel sandbox, its ABI, whether
    /// fully enforced, and the user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_sandbox: Option<crate::state::records::llm::AgentSandbox>,
    /// Failed calls by error class (lifetime).
    pub failures_by_class: BTreeMap<String, u64>,
    /// Calls refused by the budget (lifetime).
    pub budget_refusals: u64,
    pub lifetime_calls: u64,
    pub lifetime_cost_measured: f64,
    pub lifetime_cost_estimated: f64,
    /// HTTP attempts, retries included (lifetime).
    pub attempts: u64,
    /// Files with an open EVOLVE proposal.
    pub open_proposals: Vec<String>,
    /// Held, deferred or failed files waiting to be asked again.
    pub waiting: u64,
    /// The earliest time one of them is asked again.
    #[serde(serialize_with = "secs_opt")]
    pub next_retry: Option<DateTime<Utc>>,
    /// Files that gave up after 5 failures at one fingerprint (`sentinel reset`).
    pub given_up: Vec<String>,
    /// Files rewritten too often by an agent (`sentinel reset PATH`).
    pub stuck: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewStats {
    /// The next file due for review and when.
    pub next_path: Option<String>,
    #[serde(serialize_with = "secs_opt")]
    pub next_at: Option<DateTime<Utc>>,
    /// Files with a review schedule, by interval in days.
    pub by_interval_days: BTreeMap<u32, u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutonomyStats {
    pub used_today: u32,
    pub last_admission: Option<String>,
    /// Reconsiderations that happened (refunds excluded), lifetime.
    pub lifetime: u64,
    /// Triggers the state holds for the admission.
    pub triggers: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    pub wake: WakeStats,
    pub outage: OutageStats,
    pub novelty: NoveltyStats,
    pub llm: LlmStats,
    pub observations: crate::gate::observation::ObservationStats,
    /// Files by lifecycle status at the time of reading (locks not applied).
    pub lifecycle: BTreeMap<String, u64>,
    pub reviews: ReviewStats,
    pub autonomy: AutonomyStats,
    /// Lifetime count of each outcome (pending excluded).
    pub outcomes: BTreeMap<String, u64>,
    /// What `sentinel costs` found in the real bill.
    pub bill: BillStats,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BillStats {
    /// The advisories kept in the state (the last 50), oldest day first.
    pub advisories: Vec<crate::gate::costs::Advisory>,
    /// Measured real cost per call of models without a price (`costs --calibrate`).
    pub calibrated: BTreeMap<String, f64>,
}

/// A time as `stats` shows it, in tables and JSON alike: to the second,
/// UTC spelled `Z`.
pub fn secs(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn secs_one<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&secs(t))
}

fn secs_opt<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&secs(t)),
        None => s.serialize_none(),
    }
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0)
}

/// The counters of `state` plus the `unsaved` no-ops of its journal, read at `now`.
pub fn compute(state: &State, unsaved: u64, now: DateTime<Utc>, daily_budget: f64) -> Stats {
    let w = &state.wake;
    let ticks = w.ticks + unsaved;
    let noops = w.noops + unsaved;
    let mut by_reason = w.by_reason.clone();
    if unsaved > 0 {
        *by_reason.entry("none".into()).or_default() += unsaved;
    }
    let n = &state.novelty;
    Stats {
        wake: WakeStats {
            ticks,
            wakes: w.wakes,
            noops,
            noop_rate: ratio(noops, ticks),
            by_reason,
            unsaved_noops: unsaved,
            malformed_noop_lines: 0,
            last_wake_reason: w.last_wake_reason.clone(),
            last_head: w.last_head.clone(),
            last_evidence: w.last_evidence.clone(),
            reader: w.reader.clone(),
        },
        outage: OutageStats {
            ticks: state.outage.ticks,
            consecutive: state.outage.consecutive,
            since: state.outage.since,
            last: state.outage.last,
            unsaved: 0,
        },
        novelty: NoveltyStats {
            tracked_files: state.tracked_files() as u64,
            fresh_evaluations: n.fresh_evaluations,
            reuses: n.reuses,
            reuse_rate: ratio(n.reuses, n.reuses + n.fresh_evaluations),
            estimated_tokens_saved: n.estimated_tokens_saved,
            file_reads: n.file_reads,
            pending: state.backlog.len() as u64,
        },
        outcomes: state.outcomes.clone(),
        llm: llm_stats(state, now, daily_budget),
        observations: crate::gate::observation::stats(&state.observations, now),
        lifecycle: state
            .files
            .iter()
            .filter(|(_, r)| r.decision.is_some())
            .fold(BTreeMap::new(), |mut m, (p, r)| {
                let status = crate::tick::status_of(r, p, &[], now);
                *m.entry(status.as_str().to_string()).or_default() += 1;
                m
            }),
        reviews: review_stats(state),
        autonomy: AutonomyStats {
            used_today: crate::gate::autonomy::used_on(&state.autonomy, now),
            last_admission: state.autonomy.last_reason.clone(),
            lifetime: state.autonomy.lifetime,
            triggers: state.autonomy_triggers.len() as u64,
        },
        bill: BillStats {
            advisories: state.llm.advisories.clone(),
            calibrated: state.llm.calibrated.clone(),
        },
    }
}

/// What the no-op journal adds to the state's counters beyond its no-ops:
/// the outage ticks that learned nothing (wakes, in the outage run) and the
/// lines that are neither.
pub fn with_journal(s: &mut Stats, state: &State, journal: &crate::state::journal::Contents) {
    let unsaved = journal.unfolded_outages(state.journal).len() as u64;
    let w = &mut s.wake;
    w.malformed_noop_lines = journal.malformed;
    w.ticks += unsaved;
    w.wakes += unsaved;
    if unsaved > 0 {
        *w.by_reason
            .entry(Reason::ShaUnavailable.as_str().into())
            .or_default() += unsaved;
    }
    w.noop_rate = ratio(w.noops, w.ticks);
    let o = crate::gate::outage::so_far(journal, state.outage, state.journal);
    s.outage = OutageStats {
        ticks: o.ticks,
        consecutive: o.consecutive,
        since: o.since,
        last: o.last,
        unsaved,
    };
}

/// The next review due and the files with a review schedule, by interval.
fn review_stats(state: &State) -> ReviewStats {
    ReviewStats {
        next_path: state.next_review.as_ref().map(|r| r.path.clone()),
        next_at: state.next_review.as_ref().map(|r| r.at),
        by_interval_days: state.files.values().filter_map(|r| r.review.as_ref()).fold(
            BTreeMap::new(),
            |mut m, r| {
                *m.entry(r.interval_days).or_default() += 1;
                m
            },
        ),
    }
}

fn llm_stats(state: &State, now: DateTime<Utc>, daily_budget: f64) -> LlmStats {
    let mut b = state.llm.budget.clone();
    // Yesterday's figures are not today's: read them as of `now`.
    crate::gate::budget::roll(&mut b, now);
    let spent = crate::gate::budget::spent_today(&b);
    let retries = || {
        state
            .files
            .iter()
            .filter_map(|(p, r)| r.retry.as_ref().map(|w| (p, w)))
    };
    let today = b.day.and_then(|day| state.llm.days.get(&day));
    LlmStats {
        calls_today: b.calls_today,
        cost_today_measured: b.measured_today,
        cost_today_estimated: b.estimated_today,
        cost_sources_today: b
            .day
            .and_then(|day| state.llm.days.get(&day))
            .map(|d| d.sources.clone())
            .unwrap_or_default(),
        timed_out_today: today.map_or(0, |d| d.timed_out),
        timed_out_cost_today: today.map_or(0.0, |d| d.timed_out_usd),
        proxy: state.llm.proxy.clone(),
        daily_budget,
        budget_left: (daily_budget - spent).max(0.0),
        circuit: state.llm.circuit.as_ref().map(|c| CircuitStats {
            class: c.class.as_str().to_string(),
            until: c.until,
            open: crate::llm::protocol::is_open(c, now),
            reason: c.reason.clone(),
            advice: c.advice.clone(),
            repeats: c.streak,
        }),
        fallbacks_today: today.map(|d| d.fallbacks.clone()).unwrap_or_default(),
        agent_sandbox: state.llm.agent_sandbox.clone(),
        failures_by_class: state.llm.failures.clone(),
        budget_refusals: b.refusals,
        lifetime_calls: b.lifetime_calls,
        lifetime_cost_measured: b.lifetime_measured,
        lifetime_cost_estimated: b.lifetime_estimated,
        attempts: state.llm.attempts,
        open_proposals: state.llm.proposals.keys().cloned().collect(),
        waiting: retries().filter(|(_, w)| !w.given_up()).count() as u64,
        next_retry: state.next_retry,
        given_up: retries()
            .filter(|(_, w)| w.given_up())
            .map(|(p, _)| p.clone())
            .collect(),
        stuck: state
            .files
            .iter()
            .filter(|(_, r)| r.stuck)
            .map(|(p, _)| p.clone())
            .collect(),
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".to_string(), T::to_string)
}

/// The widest a `stats` table is: a 100-column terminal.
pub const TABLE_WIDTH: usize = 100;

/// A two-column table no wider than `TABLE_WIDTH`: a long value (a
/// circuit's advice, a list of files) wraps at word boundaries.
fn table(title: &str, rows: Vec<(String, String)>) -> String {
    let cell = |s: &str| super::escape::terminal(s).into_owned();
    let rows: Vec<(String, String)> = rows.iter().map(|(k, v)| (cell(k), cell(v))).collect();
    let keys = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .chain([title.chars().count()])
        .max()
        .unwrap_or(0);
    let mut b = Builder::default();
    b.push_record([title.to_string(), String::new()]);
    for (k, v) in rows {
        b.push_record([k, v]);
    }
    let mut t = b.build();
    t.with(Style::rounded().remove_horizontals());
    // Only the values wrap: the names stay whole. 7 columns are borders
    // and padding (`│ `, ` │ `, ` │`).
    let values = TABLE_WIDTH.saturating_sub(keys + 7).max(20);
    t.with(
        tabled::settings::Modify::new(tabled::settings::object::Columns::one(1))
            .with(tabled::settings::Width::wrap(values).keep_words(true)),
    );
    t.to_string()
}

/// The tables `sentinel stats` prints: one per gate, then the bill when
/// `sentinel costs` found anything.
pub fn render(s: &Stats) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n",
        table("wake gate", wake_rows(&s.wake)),
        table("outages", outage_rows(&s.outage)),
        table("novelty gate", novelty_rows(&s.novelty)),
        table("outcomes", outcome_rows(&s.outcomes)),
        table("advisor", advisor_rows(&s.llm)),
        table("observations", observation_rows(&s.observations)),
        table(
            "lifecycle and reviews",
            lifecycle_rows(&s.lifecycle, &s.reviews)
        ),
        table("autonomy", autonomy_rows(&s.autonomy))
    ) + &bill_table(&s.bill)
}

/// The wake gate's rows: a `by_reason` row only for the reasons seen, in
/// `Reason::ALL` order.
fn wake_rows(w: &WakeStats) -> Vec<(String, String)> {
    let mut rows = vec![
        ("ticks".to_string(), w.ticks.to_string()),
        ("wakes".into(), w.wakes.to_string()),
        ("noops".into(), w.noops.to_string()),
        ("noop_rate".into(), opt(&w.noop_rate)),
    ];
    for r in Reason::ALL {
        if let Some(n) = w.by_reason.get(r.as_str()) {
            rows.push((format!("by_reason.{}", r.as_str()), n.to_string()));
        }
    }
    rows.extend([
        ("unsaved_noops".into(), w.unsaved_noops.to_string()),
        (
            "malformed_noop_lines".into(),
            w.malformed_noop_lines.to_string(),
        ),
        ("last_wake_reason".into(), opt(&w.last_wake_reason)),
        ("last_head".into(), opt(&w.last_head)),
    ]);
    rows.extend(w.reader.as_deref().map(reader_row));
    rows
}

/// Which reader read the clone's objects, said with why when it is git.
fn reader_row(reader: &str) -> (String, String) {
    let said = match reader {
        "git" => {
            "git (gix declines this clone: reftable, a partial clone, replace refs or grafts...)"
        }
        other => other,
    };
    ("reader".into(), said.into())
}

/// The outages' rows: the source's, as the head lookups saw them.
fn outage_rows(o: &OutageStats) -> Vec<(String, String)> {
    let time = |t: &Option<DateTime<Utc>>| t.as_ref().map_or_else(|| "-".to_string(), secs);
    vec![
        ("outage_ticks".to_string(), o.ticks.to_string()),
        ("consecutive".into(), o.consecutive.to_string()),
        ("since".into(), time(&o.since)),
        ("last_outage".into(), time(&o.last)),
        ("unsaved_outages".into(), o.unsaved.to_string()),
    ]
}

/// The novelty gate's rows.
fn novelty_rows(n: &NoveltyStats) -> Vec<(String, String)> {
    vec![
        ("tracked_files".to_string(), n.tracked_files.to_string()),
        ("fresh_evaluations".into(), n.fresh_evaluations.to_string()),
        ("reuses".into(), n.reuses.to_string()),
        ("reuse_rate".into(), opt(&n.reuse_rate)),
        (
            "estimated_tokens_saved (estimate)".into(),
            n.estimated_tokens_saved.to_string(),
        ),
        ("file_reads".into(), n.file_reads.to_string()),
        ("pending".into(), n.pending.to_string()),
    ]
}

/// One row per outcome that happened at least once, in `Outcome::ALL`
/// order; a placeholder row keeps the table from being empty.
fn outcome_rows(outcomes: &BTreeMap<String, u64>) -> Vec<(String, String)> {
    let rows = Outcome::ALL
        .iter()
        .filter(|o| **o != Outcome::Pending)
        .map(|o| {
            let count = outcomes.get(o.as_str()).copied().unwrap_or(0);
            (o.as_str().to_string(), count.to_string())
        })
        .filter(|(_, c)| c != "0")
        .collect::<Vec<_>>();
    if rows.is_empty() {
        vec![("(none yet)".to_string(), String::new())]
    } else {
        rows
    }
}

/// `price_table 2, reported 1`: where today's figures came from; `-` before any call.
fn sources(by: &BTreeMap<String, u64>) -> String {
    if by.is_empty() {
        return "-".into();
    }
    by.iter()
        .map(|(s, n)| format!("{s} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An open circuit's row: its class, end, advice, reason and how it grew.
fn open_circuit(c: &CircuitStats) -> String {
    let grown = match c.repeats {
        0 => String::new(),
        n => format!(
            "; failed again on the first call after {n} hold(s) in a row: each hold twice the last, 24 h at most"
        ),
    };
    format!(
        "open: {} until {} ({}): {}{grown}",
        c.class,
        secs(&c.until),
        c.advice,
        c.reason
    )
}

/// Today's answers from another model than the one asked, if any.
fn fallbacks_row(l: &LlmStats) -> Option<(String, String)> {
    if l.fallbacks_today.is_empty() {
        return None;
    }
    let said: Vec<String> = l
        .fallbacks_today
        .iter()
        .map(|(pair, n)| format!("{pair}: {n}"))
        .collect();
    Some((
        "fallbacks_today".into(),
        format!(
            "{} (answered by another model than the one asked; remembered as that model's)",
            said.join(", ")
        ),
    ))
}

/// What the agent last ran inside: `landlock ABI 7, fully enforced`, or
/// `off (why)`, with the user and when.
fn sandbox_row(s: &crate::state::records::llm::AgentSandbox) -> (String, String) {
    let walls = match (s.sandbox.as_str(), s.abi) {
        ("landlock", Some(abi)) => format!("landlock ABI {abi}, {} enforced", s.enforced),
        _ => format!(
            "off ({}): the agent ran with every right of its user",
            s.why.as_deref().unwrap_or("no Landlock")
        ),
    };
    let user = s
        .user
        .as_deref()
        .map_or(String::new(), |u| format!(", as `{u}`"));
    (
        "agent sandbox".into(),
        format!("{walls}{user} (last run {})", secs(&s.at)),
    )
}

/// The advisor's rows: today's spend against the budget, the circuit, the
/// failures by class and the lifetime figures.
fn advisor_rows(l: &LlmStats) -> Vec<(String, String)> {
    let usd = |v: f64| format!("${v:.4}");
    let mut rows = vec![
        ("calls_today".to_string(), l.calls_today.to_string()),
        ("cost_today (measured)".into(), usd(l.cost_today_measured)),
        ("cost_today (estimated)".into(), usd(l.cost_today_estimated)),
        (
            "cost_today (sources)".into(),
            sources(&l.cost_sources_today),
        ),
        (
            "cost_today (timed out)".into(),
            match l.timed_out_today {
                0 => "-".into(),
                n => format!(
                    "{n} attempt(s), counted at the reservation: {}",
                    usd(l.timed_out_cost_today)
                ),
            },
        ),
        (
            "budget_left".into(),
            format!("{} of {}", usd(l.budget_left), usd(l.daily_budget)),
        ),
    ];
    rows.extend(fallbacks_row(l));
    rows.extend(l.agent_sandbox.as_ref().map(sandbox_row));
    if let Some(proxy) = &l.proxy {
        rows.push((
            "proxy".into(),
            format!(
                "{proxy} (seen in its answers): a call it sends no cost for counts at the price table or the per-call estimate, never as free"
            ),
        ));
    }
    match &l.circuit {
        Some(c) if c.open => rows.push(("circuit".into(), open_circuit(c))),
        _ => rows.push(("circuit".into(), "closed".into())),
    }
    for (class, n) in &l.failures_by_class {
        rows.push((format!("failures.{class}"), n.to_string()));
    }
    rows.extend([
        ("budget_refusals".into(), l.budget_refusals.to_string()),
        ("lifetime_calls".into(), l.lifetime_calls.to_string()),
        (
            "lifetime_cost (measured)".into(),
            usd(l.lifetime_cost_measured),
        ),
        (
            "lifetime_cost (estimated)".into(),
            usd(l.lifetime_cost_estimated),
        ),
        ("attempts (retries included)".into(), l.attempts.to_string()),
        ("open_proposals".into(), l.open_proposals.len().to_string()),
        (
            "waiting".into(),
            match &l.next_retry {
                Some(t) if l.waiting > 0 => {
                    format!("{} (next asked at {})", l.waiting, secs(t))
                }
                _ => l.waiting.to_string(),
            },
        ),
        (
            "given_up".into(),
            match l.given_up.len() {
                0 => "0".to_string(),
                n => format!("{n}: {} (sentinel reset --given-up)", l.given_up.join(", ")),
            },
        ),
        (
            "stuck".into(),
            match l.stuck.len() {
                0 => "0".to_string(),
                n => format!("{n}: {} (sentinel reset PATH)", l.stuck.join(", ")),
            },
        ),
    ]);
    rows
}

/// The observations' rows: what is watched, its labels, and how the graded
/// predictions fared.
fn observation_rows(o: &crate::gate::observation::ObservationStats) -> Vec<(String, String)> {
    let mut rows = vec![
        ("watching".to_string(), o.watching.to_string()),
        ("due".into(), o.due.to_string()),
    ];
    for (category, n) in &o.by_category {
        rows.push((format!("labelled {category}"), n.to_string()));
    }
    rows.extend([
        ("predictions resolved".into(), o.resolved.to_string()),
        ("correct".into(), o.correct.to_string()),
        ("wrong".into(), o.wrong.to_string()),
        ("accuracy".into(), opt(&o.accuracy)),
    ]);
    rows
}

/// Files by lifecycle status, then the next review and the review intervals.
fn lifecycle_rows(lifecycle: &BTreeMap<String, u64>, r: &ReviewStats) -> Vec<(String, String)> {
    let mut rows: Vec<(String, String)> = lifecycle
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    rows.push((
        "next review".into(),
        match (&r.next_path, &r.next_at) {
            (Some(p), Some(at)) => format!("{p} at {}", secs(at)),
            _ => "-".into(),
        },
    ));
    for (days, n) in &r.by_interval_days {
        rows.push((format!("reviewed every {days} d"), n.to_string()));
    }
    rows
}

/// The autonomy's rows.
fn autonomy_rows(a: &AutonomyStats) -> Vec<(String, String)> {
    vec![
        ("used today".to_string(), a.used_today.to_string()),
        ("last admission".into(), opt(&a.last_admission)),
        ("reconsiderations (lifetime)".into(), a.lifetime.to_string()),
        ("pending triggers".into(), a.triggers.to_string()),
    ]
}

/// The advisories of `sentinel costs` and the calibrated costs, when there are any.
fn bill_table(b: &BillStats) -> String {
    let mut rows: Vec<(String, String)> = b
        .advisories
        .iter()
        .map(|a| (a.kind.clone(), a.message.clone()))
        .collect();
    for (model, per_call) in &b.calibrated {
        rows.push((
            format!("calibrated {model}"),
            format!("{} per call", crate::gate::costs::usd(*per_call)),
        ));
    }
    if rows.is_empty() {
        return String::new();
    }
    format!("{}\n", table("the bill (sentinel costs)", rows))
}

/// The counters in the Prometheus text format, for the node-exporter
/// textfile collector: HELP and TYPE before every metric, `sentinel_` names.
pub fn prometheus(s: &Stats) -> String {
    let mut out = Exposition::default();
    wake_metrics(&mut out, &s.wake);
    outage_metrics(&mut out, &s.outage);
    novelty_metrics(&mut out, &s.novelty);
    advisor_metrics(&mut out, &s.llm);
    let o = &s.observations;
    out.metric(
        "predictions_total",
        "counter",
        "Graded stability predictions, by result.",
        &[
            ("{result=\"correct\"}".into(), o.correct as f64),
            ("{result=\"wrong\"}".into(), o.wrong as f64),
        ],
    );
    out.text
}

/// A Prometheus text exposition being written, metric by metric.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric: its HELP and TYPE lines, then a line per `(labels, value)`
    /// sample; `labels` is empty or a whole `{...}` set.
    fn metric(&mut self, name: &str, kind: &str, help: &str, samples: &[(String, f64)]) {
        use std::fmt::Write;
        let _ = writeln!(self.text, "# HELP sentinel_{name} {help}");
        let _ = writeln!(self.text, "# TYPE sentinel_{name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(self.text, "sentinel_{name}{labels} {value}");
        }
    }
}

/// The single sample of a metric without labels.
fn one(v: f64) -> Vec<(String, f64)> {
    vec![(String::new(), v)]
}

/// The wake gate's metrics. Every reason but `none` (the no-ops have their
/// own counter) gets a sample, 0 included, so its series exists before its
/// first wake.
fn wake_metrics(out: &mut Exposition, w: &WakeStats) {
    out.metric(
        "ticks_total",
        "counter",
        "Ticks run, no-ops included.",
        &one(w.ticks as f64),
    );
    let mut wakes: Vec<(String, f64)> = Reason::ALL
        .iter()
        .filter(|r| **r != Reason::None)
        .map(|r| {
            let n = w.by_reason.get(r.as_str()).copied().unwrap_or(0);
            (format!("{{reason=\"{}\"}}", r.as_str()), n as f64)
        })
        .collect();
    wakes.sort_by(|a, b| a.0.cmp(&b.0));
    out.metric(
        "wakes_total",
        "counter",
        "Ticks that woke, by wake reason.",
        &wakes,
    );
    out.metric(
        "noops_total",
        "counter",
        "Ticks that found nothing to do.",
        &one(w.noops as f64),
    );
    if let Some(reader) = &w.reader {
        out.metric(
            "object_reader",
            "gauge",
            "The reader of the clone's objects on the last wake (1): gix, or git where gix declines the clone.",
            &[(format!("{{reader=\"{reader}\"}}"), 1.0)],
        );
    }
    out.metric(
        "unsaved_noops",
        "gauge",
        "No-op ticks counted in the journal, not yet folded into the state.",
        &one(w.unsaved_noops as f64),
    );
    out.metric(
        "malformed_noop_lines",
        "gauge",
        "Lines of the no-op journal that are not no-op lines, skipped.",
        &one(w.malformed_noop_lines as f64),
    );
}

/// The outages' metrics; the last outage time is 0 before the first one.
fn outage_metrics(out: &mut Exposition, o: &OutageStats) {
    out.metric(
        "outage_ticks_total",
        "counter",
        "Ticks whose head lookup failed for a passing reason (sha_unavailable).",
        &one(o.ticks as f64),
    );
    out.metric(
        "outage_consecutive_ticks",
        "gauge",
        "Outage ticks in a row up to the last tick; 0 once a head lookup answered.",
        &one(o.consecutive as f64),
    );
    out.metric(
        "last_outage_timestamp_seconds",
        "gauge",
        "Unix time of the last outage tick; 0 when there was none.",
        &one(o.last.map_or(0, |t| t.timestamp()) as f64),
    );
}

/// The novelty gate's metrics.
fn novelty_metrics(out: &mut Exposition, n: &NoveltyStats) {
    out.metric(
        "reuses_total",
        "counter",
        "Remembered decisions reused without a read.",
        &one(n.reuses as f64),
    );
    out.metric(
        "fresh_evaluations_total",
        "counter",
        "Files evaluated afresh.",
        &one(n.fresh_evaluations as f64),
    );
    out.metric(
        "tracked_files",
        "gauge",
        "Files with a remembered decision.",
        &one(n.tracked_files as f64),
    );
    out.metric(
        "pending_files",
        "gauge",
        "Files waiting in the backlog.",
        &one(n.pending as f64),
    );
}

/// The advisor's metrics: calls, attempts, today's cost and budget, the circuit.
fn advisor_metrics(out: &mut Exposition, l: &LlmStats) {
    out.metric(
        "model_calls_total",
        "counter",
        "Model calls settled in the budget.",
        &one(l.lifetime_calls as f64),
    );
    out.metric(
        "model_attempts_total",
        "counter",
        "HTTP attempts to the model provider, retries included.",
        &one(l.attempts as f64),
    );
    if let Some(s) = &l.agent_sandbox {
        out.metric(
            "agent_sandbox_abi",
            "gauge",
            "The Landlock ABI the agent last ran inside; 0: no kernel sandbox.",
            &one(f64::from(s.abi.unwrap_or(0))),
        );
    }
    out.metric(
        "cost_today_usd",
        "gauge",
        "Model cost today (UTC); measured from usage, or estimated for models without a price.",
        &[
            ("{kind=\"measured\"}".into(), l.cost_today_measured),
            ("{kind=\"estimated\"}".into(), l.cost_today_estimated),
        ],
    );
    out.metric(
        "budget_left_usd",
        "gauge",
        "What is left of today's budget.",
        &one(l.budget_left),
    );
    out.metric(
        "circuit_open",
        "gauge",
        "1 while the model provider is held by an open circuit.",
        &one(f64::from(u8::from(
            l.circuit.as_ref().is_some_and(|c| c.open),
        ))),
    );
    out.metric(
        "waiting_files",
        "gauge",
        "Held, deferred or failed files waiting to be asked again.",
        &one(l.waiting as f64),
    );
    out.metric(
        "given_up_files",
        "gauge",
        "Files that gave up after 5 failures at one fingerprint.",
        &one(l.given_up.len() as f64),
    );
    out.metric(
        "stuck_files",
        "gauge",
        "Files an agent rewrote more often than --max-rewrites allows.",
        &one(l.stuck.len() as f64),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-06-16T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn rates_are_null_when_there_is_nothing_never_nan() {
        let s = compute(&State::new(), 0, now(), 2.0);
        assert_eq!(s.wake.noop_rate, None);
        assert_eq!(s.novelty.reuse_rate, None);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["wake"]["noop_rate"], serde_json::Value::Null);
        assert_eq!(json["novelty"]["reuse_rate"], serde_json::Value::Null);
    }

    #[test]
    fn unsaved_noops_count_as_ticks_and_noops() {
        let mut state = State::new();
        state.wake.ticks = 2;
        state.wake.wakes = 2;
        let s = compute(&state, 718, now(), 2.0);
        assert_eq!(
            (s.wake.ticks, s.wake.noops, s.wake.unsaved_noops),
            (720, 718, 718)
        );
        assert_eq!(s.wake.noop_rate, Some(0.9972));
        assert_eq!(s.wake.by_reason.get("none"), Some(&718));
    }

    #[test]
    fn the_prometheus_text_parses_with_help_and_type_before_every_sample() {
        let mut state = State::new();
        state.wake.ticks = 720;
        state.wake.noops = 718;
        state.wake.by_reason.insert("first_run".into(), 1);
        let text = prometheus(&compute(&state, 3, now(), 2.0));
        let mut declared: Vec<String> = Vec::new();
        let mut samples = 0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                declared.push(rest.split(' ').next().unwrap().to_string());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split(' ');
                assert_eq!(parts.next(), declared.last().map(String::as_str));
                assert!(matches!(parts.next(), Some("counter" | "gauge")));
            } else {
                let (name, value) = line.rsplit_once(' ').unwrap();
                let bare = name.split('{').next().unwrap();
                assert_eq!(Some(bare), declared.last().map(String::as_str), "{line}");
                assert!(bare.starts_with("sentinel_"));
                assert!(value.parse::<f64>().unwrap().is_finite(), "{line}");
                if let Some(labels) = name.strip_prefix(bare) {
                    assert!(
                        labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}'))
                    );
                }
                samples += 1;
            }
        }
        assert!(text.contains("sentinel_ticks_total 723\n"), "{text}");
        assert!(text.contains("sentinel_wakes_total{reason=\"first_run\"} 1\n"));
        assert!(text.contains("sentinel_circuit_open 0\n"));
        assert!(samples >= 20);
    }

    #[test]
    fn the_token_figure_is_labelled_an_estimate() {
        let out = render(&compute(&State::new(), 0, now(), 2.0));
        assert!(out.contains("estimated_tokens_saved (estimate)"));
    }
}
