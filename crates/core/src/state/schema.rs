//! The versioned shape of the state document, and the outcomes it remembers.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The schema this build reads and writes. A newer one is refused, never
/// downgraded. 1: one document; 2: a manifest and its shards (`shards`),
/// which a build that knows only 1 refuses.
pub const SCHEMA: u32 = 2;

/// What a file's evaluation ended in. `reused` and `pending` describe a tick's
/// handling of a file; the others are decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A remembered decision was reused because nothing relevant changed.
    Reused,
    /// Left in the backlog by the batch limit; evaluated by a later tick.
    Pending,
    /// Local policy decided SKIP without a model.
    LocalSkip,
    /// Needs judgement and the advisor is off: handed over once per fingerprint.
    NeedsReview,
    /// The advisor answered SKIP.
    LlmSkip,
    /// The advisor proposed a change.
    Evolve,
    /// The daily budget refused the call.
    Deferred,
    /// The provider's circuit was open; no call was made.
    Held,
    /// The call failed after the retries its error class allows.
    Failed,
    /// The advisor answered with something that is not the expected JSON.
    BadResponse,
    /// The file is over the size limit for a model call.
    TooLarge,
    /// Failed 5 times at one fingerprint: not tried again until the file
    /// changes or a person runs `sentinel reset`.
    GivenUp,
    /// Rewritten by an agent more often than `--max-rewrites` allows in the
    /// rewrite window: not handed over until a person runs `sentinel reset`.
    Stuck,
}

impl Outcome {
    /// Only a SKIP (and, with the advisor off, the hand-over itself) is
    /// deterministic given identical inputs, so only those may be replayed.
    /// Everything else means "not decided" or "decided to act", and caching it
    /// would turn a temporary refusal into a permanent one.
    pub fn is_reusable(self) -> bool {
        matches!(
            self,
            Outcome::LocalSkip | Outcome::NeedsReview | Outcome::LlmSkip
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Reused => "reused",
            Outcome::Pending => "pending",
            Outcome::LocalSkip => "local_skip",
            Outcome::NeedsReview => "needs_review",
            Outcome::LlmSkip => "llm_skip",
            Outcome::Evolve => "evolve",
            Outcome::Deferred => "deferred",
            Outcome::Held => "held",
            Outcome::Failed => "failed",
            Outcome::BadResponse => "bad_response",
            Outcome::TooLarge => "too_large",
            Outcome::GivenUp => "given_up",
            Outcome::Stuck => "stuck",
        }
    }

    pub const ALL: [Outcome; 13] = [
        Outcome::Reused,
        Outcome::Pending,
        Outcome::LocalSkip,
        Outcome::NeedsReview,
        Outcome::LlmSkip,
        Outcome::Evolve,
        Outcome::Deferred,
        Outcome::Held,
        Outcome::Failed,
        Outcome::BadResponse,
        Outcome::TooLarge,
        Outcome::GivenUp,
        Outcome::Stuck,
    ];
}

/// The last decision taken for a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub outcome: Outcome,
    pub reason: String,
    #[serde(with = "super::ts")]
    pub ts: DateTime<Utc>,
    /// Who decided: `local` (local policy, a hand-over with the advisor off)
    /// or the advisor, e.g. `openai:gpt-4o-mini`. `None` in a state written
    /// before decisions named their maker; the first tick that reads it names
    /// it (`tick::upgrade`), and one it cannot name counts as made by the
    /// advisor of the tick that reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The model that really answered when a proxy fell back to another one
    /// (e.g. `openai:gpt-4o` for a decision asked of `openai:fb-mini`): the
    /// decision is that model's, and is reused as `by`'s only with a word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
}

/// `Decision::by` of local policy.
pub const BY_LOCAL: &str = "local";

/// Facts learned by reading the file's current bytes (`FileRecord::blob`),
/// kept so that an unchanged file is never read again to learn them. They are
/// dropped whenever the content id changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentFacts {
    /// First 16 hex digits of the sha256 of the bytes.
    pub hash: String,
    /// Size in bytes (used for the token estimate).
    pub chars: u64,
    /// Relative import specifiers found in the content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub imports: Vec<String>,
}

/// Everything remembered about one file of the watched tree.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FileRecord {
    /// Content id of the file at the remembered head.
    pub blob: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<ContentFacts>,
    /// The fingerprint the decision was taken for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// When the file's bytes last changed (its lifecycle clock).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::ts::option"
    )]
    pub changed_ts: Option<DateTime<Utc>>,
    /// The review schedule of a mature file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<super::records::lifecycle::Review>,
    /// Revert commits that touched the file since its last ordinary change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rollback_streak: u32,
    /// Local dependencies (resolved paths) at the last evaluation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::ts::option"
    )]
    pub first_ts: Option<DateTime<Utc>>,
    /// Last time the file was listed, evaluated or reused; the oldest is evicted first.
    #[serde(with = "super::ts")]
    pub last_ts: DateTime<Utc>,
    #[serde(default)]
    pub evaluations: u64,
    /// Reuses since the current fingerprint was established.
    #[serde(default)]
    pub reuses: u64,
    /// Estimated tokens saved since the current fingerprint was established.
    #[serde(default)]
    pub tokens_saved: u64,
    /// A judgement that did not happen (held, deferred, failed,
    /// bad_response, given up): when it is tried again, and the failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<super::records::retry::Retry>,
    /// Content hashes of what an agent or a patch wrote for this file, the
    /// newest last: the watched branch holding one of them is own output,
    /// not new evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_output: Vec<String>,
    /// When an agent or a patch rewrote this file, within the rewrite window.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "super::ts::vec"
    )]
    pub rewrites: Vec<DateTime<Utc>>,
    /// Rewritten too often: not handed over again until `sentinel reset`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stuck: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The wake gate's memory and counters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WakeState {
    #[serde(default)]
    pub last_head: Option<String>,
    #[serde(default)]
    pub last_evidence: Option<String>,
    #[serde(default)]
    pub ticks: u64,
    #[serde(default)]
    pub wakes: u64,
    #[serde(default)]
    pub noops: u64,
    #[serde(default)]
    pub by_reason: BTreeMap<String, u64>,
    #[serde(default)]
    pub last_wake_reason: Option<String>,
    #[serde(default)]
    pub last_wake_ts: Option<DateTime<Utc>>,
    /// The branch tip and the head a tick found at it, when the source read
    /// the tip without a request: a no-op whose tip has not moved reuses
    /// the head instead of asking (see `source::tip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tip: Option<TipHead>,
    /// Which reader read a git clone's objects on the last wake: `gix`, or
    /// `git` where gix declines the clone (reftable, a partial clone...).
    /// Chosen once per clone; absent for other sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
}

/// A branch tip and the latest commit touching the watched path at it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TipHead {
    pub tip: String,
    pub head: String,
}

/// How much of the no-op journal has been folded into this state.
///
/// The journal carries an epoch in its first line. A waking tick saves
/// `(epoch, lines folded)` and only then starts a journal with the next epoch,
/// so a crash between the two steps can never count a no-op twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct JournalMark {
    pub epoch: u64,
    pub folded: u64,
}

/// What the ticks saw of the source's outages: head lookups that failed for
/// a passing reason (`sha_unavailable`). Folded from the no-op journal too,
/// where an outage tick that learned nothing leaves its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Outage {
    /// Outage ticks, lifetime.
    #[serde(default)]
    pub ticks: u64,
    /// Outage ticks in a row, up to the last tick folded; a tick whose head
    /// lookup answered ends the run.
    #[serde(default)]
    pub consecutive: u64,
    /// The first tick of that run; `None` when `consecutive` is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// The last outage tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<DateTime<Utc>>,
}

impl Outage {
    /// No outage was ever seen: not written, so older states stay as they were.
    pub fn is_none(&self) -> bool {
        *self == Outage::default()
    }
}

/// Lifetime totals of the novelty gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NoveltyTotals {
    pub fresh_evaluations: u64,
    pub reuses: u64,
    pub estimated_tokens_saved: u64,
    pub file_reads: u64,
}

/// An EVOLVE answer: a change the advisor proposes, open until the file changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub fingerprint: String,
    pub reason: String,
    #[serde(default)]
    pub findings: Vec<super::records::llm::Finding>,
    pub ts: DateTime<Utc>,
    /// The file changed on the watched branch since: the proposal is stale.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// The sandbox commit that carries the proposed content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_commit: Option<String>,
    /// Proposed content whose commit failed; tried again on a later wake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_pending: Option<String>,
}

/// The sandbox branch as last built (see `patch::sandbox`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SandboxChain {
    /// The watched tip the sandbox starts from.
    pub base: String,
    /// Its commits, oldest first: (path, commit), one per open proposal.
    pub commits: Vec<(String, String)>,
    /// The merge request kept for it (`--merge-request`), by iid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_request: Option<u64>,
    /// Hash of that merge request's description as last sent: it is
    /// edited only when the open proposals change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub described: Option<String>,
    /// sentinel's commits the branch may still hold though no proposal
    /// wants them (a GitLab branch emptied without a request): known as its
    /// own, and rewritten away by the next build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
}

/// The advisor's memory: its circuit, its budget, its open proposals.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LlmState {
    /// Open while the provider is held; kept across ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<super::records::llm::Circuit>,
    #[serde(default)]
    pub budget: super::records::budget::Budget,
    /// Failed calls by error class (lifetime).
    #[serde(default)]
    pub failures: BTreeMap<String, u64>,
    /// HTTP attempts (every retry counts), lifetime.
    #[serde(default)]
    pub attempts: u64,
    #[serde(default)]
    pub proposals: BTreeMap<String, Proposal>,
    /// What the advisor counted per UTC day, the last 60 days (`sentinel costs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub days: BTreeMap<chrono::NaiveDate, super::records::costs::DaySpend>,
    /// What `sentinel costs` found in the bill, the last 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub advisories: Vec<super::records::costs::Advisory>,
    /// Real cost per call of models without a price (`sentinel costs --calibrate`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub calibrated: BTreeMap<String, f64>,
    /// Hash of the dashboard as last published (without its health line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dashboard_hash: Option<String>,
    /// The sandbox branch as last built: the watched tip it starts from and
    /// one commit per open proposal, so a wake rebuilds it only when either
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxChain>,
    /// What the agent last ran inside (the kernel sandbox and its user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_sandbox: Option<super::records::llm::AgentSandbox>,
    /// How much of the decision journal this state holds (see `decisions`).
    #[serde(default, skip_serializing_if = "crate::state::schema::unmarked")]
    pub decisions: JournalMark,
    /// The proxy the advisor's answers came through (`LiteLLM`), once they
    /// said so: its calls are never counted as free, even on a loopback URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}

/// The small part of the state that a no-op tick needs. It is written as the
/// first line of the document so that a no-op reads one line, not the file.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Header {
    pub schema: u32,
    /// What this state is about; `None` in a state written before scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<super::records::scope::Scope>,
    #[serde(default)]
    pub wake: WakeState,
    #[serde(default)]
    pub journal: JournalMark,
    /// The source's outages as the ticks saw them.
    #[serde(default, skip_serializing_if = "Outage::is_none")]
    pub outage: Outage,
    #[serde(default)]
    pub novelty: NoveltyTotals,
    #[serde(default)]
    pub outcomes: BTreeMap<String, u64>,
    #[serde(default)]
    pub backlog_len: u64,
    /// The earliest checkpoint of an open watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_observation_due: Option<DateTime<Utc>>,
    /// The earliest scheduled review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_review: Option<NextReview>,
    /// The autonomy allowance's memory, read by the admission on every tick.
    #[serde(default)]
    pub autonomy: super::records::autonomy::AutonomyState,
    /// Triggers derived from the state (rollbacks, wrong predictions, open
    /// proposals), bounded, so a no-op can run the admission from this line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub autonomy_triggers: Vec<super::records::autonomy::Trigger>,
    /// Until when the model provider's circuit is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_held_until: Option<DateTime<Utc>>,
    /// The model's remembered decisions (llm_skip, evolve) per advisor: one
    /// made by another advisor than the tick's is judged again, once.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided_by: BTreeMap<String, u64>,
    /// Files handed over as needs_review while the advisor was off: offered
    /// to the advisor once it is on.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub awaiting_advisor: u64,
    /// The earliest time a held, deferred or failed file may be tried again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry: Option<DateTime<Utc>>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// The next file due for review, kept in the header for the wake gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextReview {
    pub at: DateTime<Utc>,
    pub path: String,
}

/// The whole state document.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct State {
    pub schema: u32,
    /// What this state is about: a tick of another scope refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<super::records::scope::Scope>,
    #[serde(default)]
    pub wake: WakeState,
    #[serde(default)]
    pub journal: JournalMark,
    #[serde(default, skip_serializing_if = "Outage::is_none")]
    pub outage: Outage,
    #[serde(default)]
    pub novelty: NoveltyTotals,
    #[serde(default)]
    pub outcomes: BTreeMap<String, u64>,
    /// Paths whose evaluation the batch limit put off, in the order they will be taken.
    #[serde(default)]
    pub backlog: Vec<String>,
    #[serde(default)]
    pub llm: LlmState,
    /// Kept in the header for the wake gate; recomputed before every save.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_observation_due: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_review: Option<NextReview>,
    #[serde(default)]
    pub autonomy: super::records::autonomy::AutonomyState,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub autonomy_triggers: Vec<super::records::autonomy::Trigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_held_until: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub decided_by: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub awaiting_advisor: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry: Option<DateTime<Utc>>,
    /// Observation mode: open watches and graded predictions.
    #[serde(default)]
    pub observations: super::records::observation::ObservationLog,
    /// The watched tree as of `wake.last_head`, with what is remembered per file.
    #[serde(default)]
    pub files: super::files::Files,
}

impl State {
    pub fn new() -> State {
        State {
            schema: SCHEMA,
            ..State::default()
        }
    }

    pub fn header(&self) -> Header {
        Header {
            schema: self.schema,
            scope: self.scope.clone(),
            wake: self.wake.clone(),
            journal: self.journal,
            outage: self.outage,
            novelty: self.novelty,
            outcomes: self.outcomes.clone(),
            backlog_len: self.backlog.len() as u64,
            next_observation_due: self.next_observation_due,
            next_review: self.next_review.clone(),
            autonomy: self.autonomy.clone(),
            autonomy_triggers: self.autonomy_triggers.clone(),
            provider_held_until: self.provider_held_until,
            decided_by: self.decided_by.clone(),
            awaiting_advisor: self.awaiting_advisor,
            next_retry: self.next_retry,
        }
    }

    /// Files with a remembered decision.
    pub fn tracked_files(&self) -> usize {
        self.files.values().filter(|r| r.decision.is_some()).count()
    }
}

/// The state has never folded a decision journal: nothing to write down.
pub fn unmarked(mark: &JournalMark) -> bool {
    *mark == JournalMark::default()
}
