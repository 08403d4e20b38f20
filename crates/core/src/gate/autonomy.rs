//! The autonomy allowance: may a remembered SKIP be reconsidered, and for which new fact?

use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use crate::state::records::autonomy::{AutonomyState, Trigger, TriggerKind};

/// Reconsiderations per UTC day when nothing is configured.
pub const DEFAULT_DAILY_TOKENS: u32 = 10;
/// No configuration may buy more than this many reconsiderations a day: a typo
/// in a setting must not become an unbounded bill.
pub const HARD_CAP: u32 = 100;
/// A file that was just reconsidered is left alone this long, whatever happens.
pub const FILE_COOLDOWN: Duration = Duration::hours(24);
/// An external signal older than this is history, not evidence.
pub const SIGNAL_MAX_AGE: Duration = Duration::hours(24);
/// Spacing between two reconsiderations when nothing is configured.
pub const DEFAULT_SPACING: Duration = Duration::minutes(30);
/// Answered trigger fingerprints kept per file (most recent first to survive).
pub const ANSWERED_PER_FILE: usize = 20;
/// Files whose answered markers are kept.
pub const ANSWERED_FILES: usize = 500;

/// `FILE_COOLDOWN`, for callers that prefer a function.
pub fn file_cooldown() -> Duration {
    FILE_COOLDOWN
}

/// `SIGNAL_MAX_AGE`, for callers that prefer a function.
pub fn signal_max_age() -> Duration {
    SIGNAL_MAX_AGE
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Reconsidering costs money, so it is opted into, never inherited by default.
    #[default]
    Off,
    Controlled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub mode: Mode,
    /// Clamped to `HARD_CAP` where it is used (see `daily_limit`).
    pub daily_tokens: u32,
    /// Minimum time between two reconsiderations; stored as whole seconds.
    #[serde(with = "seconds")]
    pub spacing: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Off,
            daily_tokens: DEFAULT_DAILY_TOKENS,
            spacing: DEFAULT_SPACING,
        }
    }
}

impl Settings {
    /// The tokens a day really allows.
    pub fn daily_limit(&self) -> u32 {
        self.daily_tokens.min(HARD_CAP)
    }
}

/// `chrono::Duration` has no serde form of its own; seconds read well in a state file.
mod seconds {
    use chrono::Duration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(d.num_seconds())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = i64::deserialize(d)?;
        // Out-of-range values are clamped rather than rejected so that one bad
        // number does not make the whole state unreadable.
        Ok(Duration::try_seconds(secs).unwrap_or(if secs < 0 {
            Duration::MIN
        } else {
            Duration::MAX
        }))
    }
}

/// Identity of a trigger: sha256 of (path, kind, detail), 16 hex. The time is NOT part
/// of it for state-derived triggers, so a persistent condition is the same trigger every
/// day; for external signals the caller puts the signal's own identity (kind + message)
/// in `detail`.
pub fn trigger_fingerprint(t: &Trigger) -> String {
    let mut h = Sha256::new();
    // Length prefixes keep ("a", "bc") and ("ab", "c") apart whatever the text holds.
    for part in [t.path.as_str(), t.kind.as_str(), t.detail.as_str()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// A file that might be reconsidered, with the fact that would justify it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub trigger: Trigger,
    pub locked: bool,
}

/// Why `admit` said no, in the order the refusals are walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    #[serde(rename = "autonomy_off")]
    Off,
    #[serde(rename = "llm_provider_held")]
    ProviderHeld,
    #[serde(rename = "autonomy_budget_exhausted")]
    Exhausted,
    #[serde(rename = "autonomy_window_closed")]
    WindowClosed,
    #[serde(rename = "no_eligible_target")]
    NoTarget,
    #[serde(rename = "no_trigger")]
    NoTrigger,
    #[serde(rename = "reason_already_answered")]
    Answered,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::Off,
        Refusal::ProviderHeld,
        Refusal::Exhausted,
        Refusal::WindowClosed,
        Refusal::NoTarget,
        Refusal::NoTrigger,
        Refusal::Answered,
    ];

    /// The seed's wording, so reports read the same as its production stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Off => "autonomy_off",
            Refusal::ProviderHeld => "llm_provider_held",
            Refusal::Exhausted => "autonomy_budget_exhausted",
            Refusal::WindowClosed => "autonomy_window_closed",
            Refusal::NoTarget => "no_eligible_target",
            Refusal::NoTrigger => "no_trigger",
            Refusal::Answered => "reason_already_answered",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Admission {
    Eligible { path: String, trigger: Trigger },
    Refused(Refusal),
}

impl Admission {
    /// "eligible" or the refusal's string.
    pub fn reason(&self) -> &'static str {
        match self {
            Admission::Eligible { .. } => "eligible",
            Admission::Refused(r) => r.as_str(),
        }
    }
}

/// Time since `then`, or `None` when `then` is in the future: a clock that went
/// backwards must read as "long ago", never as a negative wait that holds for as
/// long as the jump was.
fn elapsed(then: DateTime<Utc>, now: DateTime<Utc>) -> Option<Duration> {
    (then <= now).then(|| now - then)
}

fn cooling(state: &AutonomyState, path: &str, now: DateTime<Utc>) -> bool {
    state
        .cooldowns
        .get(path)
        .and_then(|&t| elapsed(t, now))
        .is_some_and(|e| e < FILE_COOLDOWN)
}

/// A log line describes the recent past; state-derived triggers hold for as long
/// as the state does, so only signals age out. A signal dated in the future is
/// kept: its identity is answered once like any other.
fn live(t: &Trigger, now: DateTime<Utc>) -> bool {
    t.kind != TriggerKind::RuntimeError || elapsed(t.ts, now).is_none_or(|e| e <= SIGNAL_MAX_AGE)
}

fn answered(state: &AutonomyState, t: &Trigger) -> bool {
    let fp = trigger_fingerprint(t);
    state
        .answered
        .get(&t.path)
        .is_some_and(|list| list.contains(&fp))
}

/// Tokens already spent on `now`'s UTC day. A day earlier than the stored one (the
/// clock went backwards) still counts the stored tokens: going back in time must
/// not buy new ones.
pub fn used_on(state: &AutonomyState, now: DateTime<Utc>) -> u32 {
    match state.day {
        Some(day) if now.date_naive() <= day => state.used_today,
        _ => 0,
    }
}

/// Tokens left on `now`'s UTC day.
pub fn remaining(state: &AutonomyState, settings: &Settings, now: DateTime<Utc>) -> u32 {
    settings.daily_limit().saturating_sub(used_on(state, now))
}

/// Walk the refusals in the seed's order before ever saying yes: mode off; provider
/// circuit open; today's tokens (UTC day of `now`) used up; last reconsideration less
/// than `spacing` ago; no candidate that is unlocked and outside its file's 24 h cooldown
/// (`NoTarget`); none of those with a live trigger (`NoTrigger`: a runtime error older
/// than `SIGNAL_MAX_AGE` is history); none of those with a trigger not yet answered for
/// that file (`Answered`). Otherwise the first survivor, in the order given.
///
/// An empty candidate list is `NoTrigger`, not `NoTarget`: candidates are files that
/// have a trigger, so none means nothing happened, not that every file is cooling.
/// Read-only.
pub fn admit(
    state: &AutonomyState,
    settings: &Settings,
    candidates: &[Candidate],
    provider_held: bool,
    now: DateTime<Utc>,
) -> Admission {
    let refuse = Admission::Refused;
    if settings.mode == Mode::Off {
        return refuse(Refusal::Off);
    }
    if provider_held {
        return refuse(Refusal::ProviderHeld);
    }
    if used_on(state, now) >= settings.daily_limit() {
        return refuse(Refusal::Exhausted);
    }
    let too_soon = state
        .last_ts
        .and_then(|t| elapsed(t, now))
        .is_some_and(|e| e < settings.spacing);
    if too_soon {
        return refuse(Refusal::WindowClosed);
    }
    if candidates.is_empty() {
        return refuse(Refusal::NoTrigger);
    }
    let targets: Vec<&Trigger> = candidates
        .iter()
        .filter(|c| !c.locked && !cooling(state, &c.trigger.path, now))
        .map(|c| &c.trigger)
        .collect();
    if targets.is_empty() {
        return refuse(Refusal::NoTarget);
    }
    let triggered: Vec<&Trigger> = targets.into_iter().filter(|t| live(t, now)).collect();
    if triggered.is_empty() {
        return refuse(Refusal::NoTrigger);
    }
    match triggered.into_iter().find(|t| !answered(state, t)) {
        Some(t) => Admission::Eligible {
            path: t.path.clone(),
            trigger: t.clone(),
        },
        None => refuse(Refusal::Answered),
    }
}

/// The receipt of a spend: everything `refund` needs to put things back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    pub path: String,
    pub fingerprint: String,
    pub previous_cooldown: Option<DateTime<Utc>>,
    pub previous_last_ts: Option<DateTime<Utc>>,
    /// The UTC day the token was counted on.
    pub day: NaiveDate,
    /// False when the trigger was already answered before this spend: a refund must
    /// then leave it answered, or it would reopen a question that had an answer.
    #[serde(default = "yes")]
    pub newly_answered: bool,
}

fn yes() -> bool {
    true
}

/// A reconsideration was started for `trigger`: one token, the file's cooldown, the
/// answered marker, `last_ts`. Returns the receipt needed to refund it.
pub fn spend(state: &mut AutonomyState, trigger: &Trigger, now: DateTime<Utc>) -> Spent {
    let today = now.date_naive();
    match state.day {
        Some(day) if today <= day => {}
        _ => {
            state.day = Some(today);
            state.used_today = 0;
        }
    }
    state.used_today = state.used_today.saturating_add(1);
    state.lifetime = state.lifetime.saturating_add(1);

    let path = trigger.path.clone();
    let previous_cooldown = state.cooldowns.get(&path).copied();
    state.cooldowns.retain(|_, t| cooling_at(*t, now));
    state.cooldowns.insert(path.clone(), now);

    let fingerprint = trigger_fingerprint(trigger);
    let list = state.answered.entry(path.clone()).or_default();
    let newly_answered = !list.contains(&fingerprint);
    // Re-answering moves the marker to the recent end so the bound drops older facts first.
    list.retain(|f| f != &fingerprint);
    list.push(fingerprint.clone());
    if list.len() > ANSWERED_PER_FILE {
        let excess = list.len() - ANSWERED_PER_FILE;
        list.drain(..excess);
    }
    evict_answered(state, &path);

    let previous_last_ts = state.last_ts.replace(now);
    Spent {
        path,
        fingerprint,
        previous_cooldown,
        previous_last_ts,
        day: state.day.unwrap_or(today),
        newly_answered,
    }
}

fn cooling_at(t: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    elapsed(t, now).is_some_and(|e| e < FILE_COOLDOWN)
}

/// Keep at most `ANSWERED_FILES` files. There is no per-file time for answered
/// markers, so files still cooling (reconsidered in the last 24 h) are kept over the
/// rest, older cooldowns go first, and path order breaks ties so eviction is
/// deterministic. The file just answered is never the one evicted. Eviction is safe:
/// an evicted file can be asked each of its questions once more, nothing worse.
fn evict_answered(state: &mut AutonomyState, keep: &str) {
    while state.answered.len() > ANSWERED_FILES {
        let victim = state
            .answered
            .keys()
            .filter(|p| p.as_str() != keep)
            .min_by_key(|p| (state.cooldowns.get(p.as_str()).copied(), p.as_str()))
            .cloned();
        match victim {
            Some(p) => {
                state.answered.remove(&p);
            }
            None => break,
        }
    }
}

/// The call was deferred, held or failed: nothing was answered, so give back the
/// token (same UTC day only: yesterday's token is no use today and must not become
/// an extra one), the cooldown (its previous value), the answered marker and `last_ts`.
pub fn refund(state: &mut AutonomyState, spent: &Spent) {
    if state.day == Some(spent.day) {
        state.used_today = state.used_today.saturating_sub(1);
    }
    state.lifetime = state.lifetime.saturating_sub(1);
    match spent.previous_cooldown {
        Some(t) => {
            state.cooldowns.insert(spent.path.clone(), t);
        }
        None => {
            state.cooldowns.remove(&spent.path);
        }
    }
    if spent.newly_answered
        && let Some(list) = state.answered.get_mut(&spent.path)
    {
        list.retain(|f| f != &spent.fingerprint);
        if list.is_empty() {
            state.answered.remove(&spent.path);
        }
    }
    state.last_ts = spent.previous_last_ts;
}

/// Record the last admission reason for stats ("eligible" or the refusal string).
pub fn note(state: &mut AutonomyState, admission: &Admission) {
    state.last_reason = Some(admission.reason().to_string());
}

#[derive(Deserialize)]
struct RawSignal {
    path: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    ts: String,
}

/// External signals, JSON lines
/// `{"path":"src/a.js","kind":"runtime_error","message":"...","ts":"RFC3339"}`:
/// the live triggers (kind `RuntimeError`, detail `kind:message`, the signal's ts) and
/// the number of lines that could not be parsed. A bad line is skipped, never fatal:
/// one garbled log line must not blind the allowance to the others. Signals older
/// than `SIGNAL_MAX_AGE` at `now` are dropped (not counted as malformed); blank lines
/// are ignored.
pub fn signals(text: &str, now: DateTime<Utc>) -> (Vec<Trigger>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match parse_signal(line) {
            Some(t) if live(&t, now) => out.push(t),
            Some(_) => {}
            None => bad += 1,
        }
    }
    (out, bad)
}

fn parse_signal(line: &str) -> Option<Trigger> {
    let raw: RawSignal = serde_json::from_str(line).ok()?;
    let path = raw.path.trim();
    if path.is_empty() {
        return None;
    }
    let ts = DateTime::parse_from_rfc3339(raw.ts.trim()).ok()?.to_utc();
    let kind = raw
        .kind
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| TriggerKind::RuntimeError.as_str().to_string());
    Some(Trigger {
        path: path.to_string(),
        kind: TriggerKind::RuntimeError,
        detail: format!("{kind}:{}", raw.message.unwrap_or_default()),
        ts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-06-16T12:00:00Z".parse().unwrap()
    }

    fn hours(h: i64) -> Duration {
        Duration::hours(h)
    }

    fn on() -> Settings {
        Settings {
            mode: Mode::Controlled,
            daily_tokens: DEFAULT_DAILY_TOKENS,
            spacing: DEFAULT_SPACING,
        }
    }

    fn unspaced() -> Settings {
        Settings {
            spacing: Duration::zero(),
            ..on()
        }
    }

    fn trig(path: &str, kind: TriggerKind, detail: &str, ts: DateTime<Utc>) -> Trigger {
        Trigger {
            path: path.into(),
            kind,
            detail: detail.into(),
            ts,
        }
    }

    fn rollback(path: &str) -> Trigger {
        trig(path, TriggerKind::UnresolvedRollback, "streak=2", now())
    }

    fn cand(t: Trigger) -> Candidate {
        Candidate {
            trigger: t,
            locked: false,
        }
    }

    fn locked(t: Trigger) -> Candidate {
        Candidate {
            trigger: t,
            locked: true,
        }
    }

    fn refused(r: Refusal) -> Admission {
        Admission::Refused(r)
    }

    fn eligible(t: &Trigger) -> Admission {
        Admission::Eligible {
            path: t.path.clone(),
            trigger: t.clone(),
        }
    }

    #[test]
    fn a_cooled_down_unlocked_file_with_no_signal_is_not_a_target_no_trigger() {
        let mut state = AutonomyState::default();
        // The file was reconsidered long ago: its cooldown is over.
        state.cooldowns.insert("src/a.js".into(), now() - hours(48));
        let before = state.clone();

        assert_eq!(
            admit(&state, &on(), &[], false, now()),
            refused(Refusal::NoTrigger)
        );
        // Its only signal is two days old: history, not a trigger.
        let stale = trig(
            "src/a.js",
            TriggerKind::RuntimeError,
            "runtime_error:boom",
            now() - hours(48),
        );
        assert_eq!(
            admit(&state, &on(), &[cand(stale)], false, now()),
            refused(Refusal::NoTrigger)
        );
        assert_eq!(state, before, "nothing is spent by a refusal");
    }

    #[test]
    fn locked_module_with_a_strong_trigger_is_still_never_a_target() {
        let state = AutonomyState::default();
        let strong = rollback("src/core.js");
        assert_eq!(
            admit(&state, &on(), &[locked(strong.clone())], false, now()),
            refused(Refusal::NoTarget)
        );
        let other = rollback("src/b.js");
        assert_eq!(
            admit(
                &state,
                &on(),
                &[locked(strong), cand(other.clone())],
                false,
                now()
            ),
            eligible(&other),
            "the locked one is passed over, not the whole list"
        );
    }

    #[test]
    fn reason_already_answered_the_same_trigger_cannot_reopen_the_same_file_twice() {
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        assert_eq!(
            admit(&state, &on(), &[cand(t.clone())], false, now()),
            eligible(&t)
        );
        spend(&mut state, &t, now());

        // A day later the condition persists: the state-derived trigger is re-derived
        // with a new time but is the same question.
        let later = now() + hours(25);
        let same = Trigger { ts: later, ..t };
        assert_eq!(
            admit(&state, &on(), &[cand(same)], false, later),
            refused(Refusal::Answered)
        );
    }

    #[test]
    fn a_new_trigger_on_an_answered_file_is_eligible_once_its_cooldown_is_over() {
        let mut state = AutonomyState::default();
        spend(&mut state, &rollback("src/a.js"), now());
        let new = trig(
            "src/a.js",
            TriggerKind::UnresolvedRollback,
            "streak=3",
            now() + hours(1),
        );
        assert_eq!(
            admit(&state, &on(), &[cand(new.clone())], false, now() + hours(1)),
            refused(Refusal::NoTarget),
            "still cooling"
        );
        let later = now() + hours(25);
        assert_eq!(
            admit(&state, &on(), &[cand(new.clone())], false, later),
            eligible(&new)
        );
    }

    #[test]
    fn an_answered_trigger_is_passed_over_for_a_fresh_one_later_in_the_list() {
        let mut state = AutonomyState::default();
        let old = rollback("src/a.js");
        spend(&mut state, &old, now() - hours(30));
        let fresh = rollback("src/b.js");
        assert_eq!(
            admit(
                &state,
                &on(),
                &[cand(old), cand(fresh.clone())],
                false,
                now()
            ),
            eligible(&fresh)
        );
    }

    #[test]
    fn a_stale_runtime_error_is_not_a_trigger() {
        let state = AutonomyState::default();
        let signal = |age: Duration| {
            trig(
                "src/a.js",
                TriggerKind::RuntimeError,
                "runtime_error:TypeError",
                now() - age,
            )
        };
        assert_eq!(
            admit(&state, &on(), &[cand(signal(hours(25)))], false, now()),
            refused(Refusal::NoTrigger)
        );
        let fresh = signal(hours(23));
        assert_eq!(
            admit(&state, &on(), &[cand(fresh.clone())], false, now()),
            eligible(&fresh)
        );
        let edge = signal(SIGNAL_MAX_AGE);
        assert_eq!(
            admit(&state, &on(), &[cand(edge.clone())], false, now()),
            eligible(&edge),
            "exactly 24 h old is still within the last 24 hours"
        );
    }

    #[test]
    fn state_derived_triggers_do_not_age_out() {
        let state = AutonomyState::default();
        let old = trig(
            "src/a.js",
            TriggerKind::DependencyDrift,
            "dep=src/b.js",
            now() - hours(24 * 30),
        );
        assert_eq!(
            admit(&state, &on(), &[cand(old.clone())], false, now()),
            eligible(&old)
        );
    }

    #[test]
    fn tokens_exhausted_refuses_with_autonomy_budget_exhausted_and_a_new_utc_day_restores_them() {
        let settings = Settings {
            daily_tokens: 2,
            ..unspaced()
        };
        let mut state = AutonomyState::default();
        let morning: DateTime<Utc> = "2026-06-16T01:00:00Z".parse().unwrap();
        spend(&mut state, &rollback("src/a.js"), morning);
        spend(&mut state, &rollback("src/b.js"), morning + hours(1));
        let late: DateTime<Utc> = "2026-06-16T23:59:59Z".parse().unwrap();
        let c = rollback("src/c.js");
        assert_eq!(
            admit(&state, &settings, &[cand(c.clone())], false, late),
            refused(Refusal::Exhausted)
        );
        assert_eq!(remaining(&state, &settings, late), 0);

        let midnight: DateTime<Utc> = "2026-06-17T00:00:00Z".parse().unwrap();
        assert_eq!(
            admit(&state, &settings, &[cand(c.clone())], false, midnight),
            eligible(&c)
        );
        assert_eq!(remaining(&state, &settings, midnight), 2);
        spend(&mut state, &c, midnight);
        assert_eq!(state.used_today, 1, "the new day started from zero");
        assert_eq!(state.day, Some(midnight.date_naive()));
        assert_eq!(state.lifetime, 3, "lifetime is kept across days");
    }

    #[test]
    fn zero_daily_tokens_never_admits() {
        let settings = Settings {
            daily_tokens: 0,
            ..on()
        };
        assert_eq!(
            admit(
                &AutonomyState::default(),
                &settings,
                &[cand(rollback("src/a.js"))],
                false,
                now()
            ),
            refused(Refusal::Exhausted)
        );
    }

    #[test]
    fn the_spacing_window_refuses() {
        let mut state = AutonomyState::default();
        spend(&mut state, &rollback("src/a.js"), now());
        let b = rollback("src/b.js");
        let soon = now() + Duration::minutes(29);
        assert_eq!(
            admit(&state, &on(), &[cand(b.clone())], false, soon),
            refused(Refusal::WindowClosed)
        );
        let open = now() + DEFAULT_SPACING;
        assert_eq!(
            admit(&state, &on(), &[cand(b.clone())], false, open),
            eligible(&b),
            "the window opens exactly `spacing` after the last reconsideration"
        );
    }

    #[test]
    fn the_24h_per_file_cooldown_makes_no_eligible_target() {
        let mut state = AutonomyState::default();
        spend(&mut state, &rollback("src/a.js"), now());
        let again = trig(
            "src/a.js",
            TriggerKind::OpenProposal,
            "proposal=abc",
            now() + hours(2),
        );
        let at = now() + hours(23) + Duration::minutes(59);
        assert_eq!(
            admit(&state, &on(), &[cand(again.clone())], false, at),
            refused(Refusal::NoTarget)
        );
        let other = rollback("src/b.js");
        assert_eq!(
            admit(
                &state,
                &on(),
                &[cand(again.clone()), cand(other.clone())],
                false,
                at
            ),
            eligible(&other),
            "another file outside its cooldown is still a target"
        );
        let over = now() + FILE_COOLDOWN;
        assert_eq!(
            admit(&state, &on(), &[cand(again.clone())], false, over),
            eligible(&again)
        );
    }

    #[test]
    fn an_open_circuit_refuses_with_llm_provider_held_before_anything_else_but_mode() {
        // A state that would fail every later check as well.
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        spend(&mut state, &t, now());
        let settings = Settings {
            daily_tokens: 1,
            ..on()
        };
        assert_eq!(
            admit(&state, &settings, &[locked(t.clone())], true, now()),
            refused(Refusal::ProviderHeld)
        );
        assert_eq!(
            admit(&AutonomyState::default(), &on(), &[], true, now()),
            refused(Refusal::ProviderHeld)
        );
        let off = Settings {
            mode: Mode::Off,
            ..settings
        };
        assert_eq!(
            admit(&state, &off, &[locked(t)], true, now()),
            refused(Refusal::Off)
        );
    }

    #[test]
    fn mode_off_refuses_first() {
        let off = Settings {
            mode: Mode::Off,
            ..on()
        };
        let t = rollback("src/a.js");
        assert_eq!(
            admit(
                &AutonomyState::default(),
                &off,
                &[cand(t.clone())],
                false,
                now()
            ),
            refused(Refusal::Off)
        );
        let mut state = AutonomyState::default();
        spend(&mut state, &t, now());
        assert_eq!(
            admit(&state, &off, &[cand(t)], true, now()),
            refused(Refusal::Off)
        );
        assert_eq!(Settings::default().mode, Mode::Off, "autonomy is opt-in");
    }

    #[test]
    fn refusals_are_walked_in_the_seeds_order() {
        // Start from a situation that fails every check, then lift them one by one.
        let answered_t = rollback("src/done.js");
        let mut state = AutonomyState::default();
        spend(&mut state, &answered_t, now() - hours(30));
        spend(
            &mut state,
            &rollback("src/hot.js"),
            now() - Duration::minutes(10),
        );
        let stale = trig(
            "src/old.js",
            TriggerKind::RuntimeError,
            "runtime_error:x",
            now() - hours(30),
        );
        let all = vec![
            locked(rollback("src/locked.js")),
            cand(rollback("src/hot.js")),
            cand(stale.clone()),
            cand(answered_t.clone()),
        ];
        let mut settings = Settings {
            mode: Mode::Off,
            // One token already went today (the earlier spend was yesterday).
            daily_tokens: 1,
            ..on()
        };
        let check = |s: &Settings, c: &[Candidate], held: bool| admit(&state, s, c, held, now());

        assert_eq!(check(&settings, &all, true), refused(Refusal::Off));
        settings.mode = Mode::Controlled;
        assert_eq!(check(&settings, &all, true), refused(Refusal::ProviderHeld));
        assert_eq!(check(&settings, &all, false), refused(Refusal::Exhausted));
        settings.daily_tokens = 2;
        assert_eq!(
            check(&settings, &all, false),
            refused(Refusal::WindowClosed)
        );
        settings.spacing = Duration::minutes(5);
        assert_eq!(
            check(&settings, &all[..2], false),
            refused(Refusal::NoTarget)
        );
        assert_eq!(
            check(&settings, &all[..3], false),
            refused(Refusal::NoTrigger)
        );
        assert_eq!(check(&settings, &all, false), refused(Refusal::Answered));
        let fresh = rollback("src/new.js");
        let mut more = all.clone();
        more.push(cand(fresh.clone()));
        assert_eq!(check(&settings, &more, false), eligible(&fresh));
    }

    #[test]
    fn candidates_are_taken_in_the_order_given() {
        let state = AutonomyState::default();
        let z = rollback("src/z.js");
        let a = rollback("src/a.js");
        assert_eq!(
            admit(
                &state,
                &on(),
                &[cand(z.clone()), cand(a.clone())],
                false,
                now()
            ),
            eligible(&z)
        );
        assert_eq!(
            admit(&state, &on(), &[cand(a.clone()), cand(z)], false, now()),
            eligible(&a)
        );
    }

    #[test]
    fn the_hard_cap_is_100_even_when_500_tokens_are_configured() {
        let settings = Settings {
            daily_tokens: 500,
            ..unspaced()
        };
        assert_eq!(settings.daily_limit(), HARD_CAP);
        let mut state = AutonomyState::default();
        for i in 0..HARD_CAP {
            let t = rollback(&format!("src/f{i}.js"));
            assert_eq!(
                admit(&state, &settings, &[cand(t.clone())], false, now()),
                eligible(&t),
                "token {i}"
            );
            spend(&mut state, &t, now());
        }
        assert_eq!(state.used_today, 100);
        assert_eq!(
            admit(
                &state,
                &settings,
                &[cand(rollback("src/x.js"))],
                false,
                now()
            ),
            refused(Refusal::Exhausted)
        );
    }

    #[test]
    fn spend_takes_a_token_the_cooldown_the_answered_marker_and_the_window() {
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        let spent = spend(&mut state, &t, now());
        assert_eq!(state.day, Some(now().date_naive()));
        assert_eq!(state.used_today, 1);
        assert_eq!(state.lifetime, 1);
        assert_eq!(state.last_ts, Some(now()));
        assert_eq!(state.cooldowns.get("src/a.js"), Some(&now()));
        assert_eq!(
            state.answered.get("src/a.js"),
            Some(&vec![trigger_fingerprint(&t)])
        );
        assert_eq!(
            spent,
            Spent {
                path: "src/a.js".into(),
                fingerprint: trigger_fingerprint(&t),
                previous_cooldown: None,
                previous_last_ts: None,
                day: now().date_naive(),
                newly_answered: true,
            }
        );
    }

    #[test]
    fn a_refund_gives_back_the_token_the_cooldown_and_the_answered_marker() {
        let settings = unspaced();
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        let before = state.clone();
        let spent = spend(&mut state, &t, now());
        refund(&mut state, &spent);
        let today = Some(now().date_naive());
        assert_eq!(
            state,
            AutonomyState {
                day: today,
                ..before
            },
            "a refund leaves no trace but the day it looked at"
        );
        assert_eq!(
            admit(&state, &settings, &[cand(t.clone())], false, now()),
            eligible(&t),
            "the same trigger is eligible again at once"
        );
        assert_eq!(
            admit(&state, &on(), &[cand(t)], false, now()),
            eligible(&rollback("src/a.js")),
            "the spacing window was given back too"
        );
    }

    #[test]
    fn a_refund_restores_the_previous_cooldown_and_window() {
        let mut state = AutonomyState::default();
        spend(&mut state, &rollback("src/b.js"), now() - hours(2));
        let before = state.clone();
        // Forced past `admit` (b is still cooling) so there is a previous cooldown to restore.
        let t = trig(
            "src/b.js",
            TriggerKind::WrongPrediction,
            "pred=stable",
            now(),
        );
        let spent = spend(&mut state, &t, now());
        assert_eq!(spent.previous_cooldown, Some(now() - hours(2)));
        assert_eq!(spent.previous_last_ts, Some(now() - hours(2)));
        refund(&mut state, &spent);
        assert_eq!(state, before);
    }

    #[test]
    fn a_refund_of_an_already_answered_trigger_keeps_it_answered() {
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        spend(&mut state, &t, now() - hours(30));
        let spent = spend(&mut state, &t, now());
        assert!(!spent.newly_answered);
        assert_eq!(state.answered["src/a.js"].len(), 1, "no duplicate marker");
        refund(&mut state, &spent);
        assert_eq!(
            admit(&state, &unspaced(), &[cand(t)], false, now() + hours(25)),
            refused(Refusal::Answered)
        );
    }

    #[test]
    fn a_refund_on_a_later_day_does_not_create_a_token() {
        let settings = Settings {
            daily_tokens: 1,
            ..unspaced()
        };
        let mut state = AutonomyState::default();
        let late: DateTime<Utc> = "2026-06-16T23:59:00Z".parse().unwrap();
        let spent = spend(&mut state, &rollback("src/a.js"), late);
        let next: DateTime<Utc> = "2026-06-17T00:01:00Z".parse().unwrap();
        spend(&mut state, &rollback("src/b.js"), next);
        assert_eq!(state.used_today, 1);
        refund(&mut state, &spent);
        assert_eq!(state.used_today, 1, "today's token is still spent");
        assert_eq!(
            admit(
                &state,
                &settings,
                &[cand(rollback("src/c.js"))],
                false,
                next
            ),
            refused(Refusal::Exhausted)
        );
        // On a fresh day with no spend yet, the late refund cannot go negative either.
        let mut idle = AutonomyState::default();
        let spent = spend(&mut idle, &rollback("src/a.js"), late);
        idle.day = Some(next.date_naive());
        idle.used_today = 0;
        refund(&mut idle, &spent);
        assert_eq!(idle.used_today, 0);
        assert_eq!(remaining(&idle, &settings, next), 1);
    }

    #[test]
    fn trigger_fingerprints_ignore_the_time_of_state_derived_triggers() {
        let a = rollback("src/a.js");
        let later = Trigger {
            ts: now() + hours(24 * 7),
            ..a.clone()
        };
        assert_eq!(trigger_fingerprint(&a), trigger_fingerprint(&later));
        let fp = trigger_fingerprint(&a);
        assert_eq!(fp.len(), 16);
        assert!(fp.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn trigger_fingerprints_tell_path_kind_and_detail_apart() {
        let a = rollback("src/a.js");
        let fp = trigger_fingerprint(&a);
        let other_path = rollback("src/b.js");
        let other_kind = Trigger {
            kind: TriggerKind::DependencyDrift,
            ..a.clone()
        };
        let other_detail = Trigger {
            detail: "streak=3".into(),
            ..a.clone()
        };
        for t in [other_path, other_kind, other_detail] {
            assert_ne!(trigger_fingerprint(&t), fp, "{t:?}");
        }
        let x = trig("ab", TriggerKind::OpenProposal, "c", now());
        let y = trig("a", TriggerKind::OpenProposal, "bc", now());
        assert_ne!(trigger_fingerprint(&x), trigger_fingerprint(&y));
    }

    #[test]
    fn signals_parse_skip_malformed_lines_and_drop_old_ones() {
        let text = [
            r#"{"path":"src/a.js","kind":"runtime_error","message":"TypeError: x is undefined","ts":"2026-06-16T11:00:00Z"}"#,
            "",
            "   ",
            "not json at all",
            r#"{"path":"src/b.js","kind":"runtime_error","message":"old","ts":"2026-06-14T11:00:00Z"}"#,
            r#"{"path":"src/c.js","kind":"runtime_error","message":"no time"}"#,
            r#"{"path":"src/c.js","kind":"runtime_error","message":"bad time","ts":"yesterday"}"#,
            r#"{"path":"","kind":"runtime_error","message":"no path","ts":"2026-06-16T11:00:00Z"}"#,
            r#"{"kind":"runtime_error","message":"no path","ts":"2026-06-16T11:00:00Z"}"#,
            r#"{"path":"src/d.js","kind":"deploy_failed","message":"exit 1","ts":"2026-06-16T13:30:00+02:00"}"#,
            "{\"path\":\"src/e.js\",\"message\":\"kindless\",\"ts\":\"2026-06-16T10:00:00Z\"}\r",
        ]
        .join("\n");
        let (triggers, bad) = signals(&text, now());
        assert_eq!(bad, 5);
        assert_eq!(
            triggers,
            vec![
                trig(
                    "src/a.js",
                    TriggerKind::RuntimeError,
                    "runtime_error:TypeError: x is undefined",
                    "2026-06-16T11:00:00Z".parse().unwrap()
                ),
                trig(
                    "src/d.js",
                    TriggerKind::RuntimeError,
                    "deploy_failed:exit 1",
                    "2026-06-16T11:30:00Z".parse().unwrap()
                ),
                trig(
                    "src/e.js",
                    TriggerKind::RuntimeError,
                    "runtime_error:kindless",
                    "2026-06-16T10:00:00Z".parse().unwrap()
                ),
            ]
        );
        assert_eq!(signals("", now()), (vec![], 0));
    }

    #[test]
    fn the_same_signal_logged_again_later_is_the_same_trigger() {
        let line = |ts: &str| {
            format!(r#"{{"path":"src/a.js","kind":"runtime_error","message":"boom","ts":"{ts}"}}"#)
        };
        let (first, _) = signals(&line("2026-06-15T13:00:00Z"), now());
        let (again, _) = signals(&line("2026-06-16T11:59:00Z"), now());
        assert_eq!(
            trigger_fingerprint(&first[0]),
            trigger_fingerprint(&again[0])
        );

        let mut state = AutonomyState::default();
        spend(&mut state, &first[0], now() - hours(23));
        let later = now() + hours(2);
        let (repeat, _) = signals(&line("2026-06-17T13:00:00Z"), later);
        assert_eq!(
            admit(&state, &on(), &[cand(repeat[0].clone())], false, later),
            refused(Refusal::Answered)
        );
    }

    #[test]
    fn a_clock_that_went_backwards_neither_panics_nor_locks_the_window() {
        let mut state = AutonomyState::default();
        let future = now() + hours(24 * 365);
        spend(&mut state, &rollback("src/a.js"), future);
        assert_eq!(state.used_today, 1);

        // Back to the present: the window and the cooldown read as long ago...
        let t = trig("src/a.js", TriggerKind::OpenProposal, "p=1", now());
        assert_eq!(
            admit(&state, &on(), &[cand(t.clone())], false, now()),
            eligible(&t)
        );
        // ...but going back a day does not buy new tokens.
        assert_eq!(used_on(&state, now()), 1);
        let one = Settings {
            daily_tokens: 1,
            ..on()
        };
        assert_eq!(
            admit(&state, &one, &[cand(t.clone())], false, now()),
            refused(Refusal::Exhausted)
        );
        let spent = spend(&mut state, &t, now());
        assert_eq!(state.used_today, 2);
        assert_eq!(state.day, Some(future.date_naive()));
        assert_eq!(spent.day, future.date_naive());
        refund(&mut state, &spent);
        assert_eq!(state.used_today, 1);
        assert_eq!(state.last_ts, Some(future));

        // Extreme values do not overflow.
        let far_past = DateTime::<Utc>::MIN_UTC;
        let far_future = DateTime::<Utc>::MAX_UTC;
        let mut s = AutonomyState::default();
        spend(&mut s, &rollback("src/a.js"), far_future);
        let x = rollback("src/x.js");
        assert_eq!(
            admit(&s, &on(), &[cand(x.clone())], false, far_past),
            eligible(&x)
        );
        let old = trig("src/y.js", TriggerKind::RuntimeError, "e", far_past);
        assert_eq!(
            admit(
                &AutonomyState::default(),
                &on(),
                &[cand(old)],
                false,
                far_future
            ),
            refused(Refusal::NoTrigger)
        );
    }

    #[test]
    fn answered_markers_are_bounded_to_the_20_most_recent_per_file() {
        let mut state = AutonomyState::default();
        let ts = |i: i64| now() + hours(25 * i);
        let t = |i: i64| {
            trig(
                "src/a.js",
                TriggerKind::OpenProposal,
                &format!("p={i}"),
                ts(i),
            )
        };
        for i in 0..25 {
            spend(&mut state, &t(i), ts(i));
        }
        let list = &state.answered["src/a.js"];
        assert_eq!(list.len(), ANSWERED_PER_FILE);
        assert_eq!(list.first(), Some(&trigger_fingerprint(&t(5))));
        assert_eq!(list.last(), Some(&trigger_fingerprint(&t(24))));
        assert!(!list.contains(&trigger_fingerprint(&t(4))));
    }

    #[test]
    fn answered_files_are_bounded_to_500_and_the_file_just_answered_survives() {
        let mut state = AutonomyState::default();
        // Old answers, long out of cooldown.
        for i in 0..ANSWERED_FILES {
            spend(
                &mut state,
                &rollback(&format!("src/old{i:03}.js")),
                now() - hours(48),
            );
        }
        // A recent one that is still cooling, with a path that sorts first.
        spend(&mut state, &rollback("src/a_recent.js"), now() - hours(1));
        assert_eq!(state.answered.len(), ANSWERED_FILES);
        assert!(state.answered.contains_key("src/a_recent.js"));
        assert!(
            !state.answered.contains_key("src/old000.js"),
            "oldest in path order goes"
        );

        spend(&mut state, &rollback("src/zzz.js"), now());
        assert_eq!(state.answered.len(), ANSWERED_FILES);
        assert!(state.answered.contains_key("src/zzz.js"));
        assert!(state.answered.contains_key("src/a_recent.js"));
        assert!(!state.answered.contains_key("src/old001.js"));
    }

    #[test]
    fn cooldowns_older_than_24h_are_dropped_on_spend() {
        let mut state = AutonomyState::default();
        for i in 0..50 {
            spend(
                &mut state,
                &rollback(&format!("src/f{i}.js")),
                now() - hours(48),
            );
        }
        state
            .cooldowns
            .insert("src/ahead.js".into(), now() + hours(5));
        spend(&mut state, &rollback("src/warm.js"), now() - hours(3));
        spend(&mut state, &rollback("src/b.js"), now());
        let kept: Vec<&str> = state.cooldowns.keys().map(String::as_str).collect();
        assert_eq!(kept, vec!["src/b.js", "src/warm.js"]);
    }

    #[test]
    fn note_records_eligible_or_the_refusal_string() {
        let mut state = AutonomyState::default();
        let t = rollback("src/a.js");
        note(&mut state, &eligible(&t));
        assert_eq!(state.last_reason.as_deref(), Some("eligible"));
        note(&mut state, &refused(Refusal::Answered));
        assert_eq!(
            state.last_reason.as_deref(),
            Some("reason_already_answered")
        );
    }

    #[test]
    fn refusals_serialize_as_the_seeds_strings() {
        let expected = [
            "autonomy_off",
            "llm_provider_held",
            "autonomy_budget_exhausted",
            "autonomy_window_closed",
            "no_eligible_target",
            "no_trigger",
            "reason_already_answered",
        ];
        for (r, s) in Refusal::ALL.into_iter().zip(expected) {
            assert_eq!(r.as_str(), s);
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{s}\""));
            assert_eq!(
                serde_json::from_str::<Refusal>(&format!("\"{s}\"")).unwrap(),
                r
            );
        }
    }

    #[test]
    fn trigger_kinds_serialize_as_their_names() {
        for k in [
            TriggerKind::UnresolvedRollback,
            TriggerKind::WrongPrediction,
            TriggerKind::DependencyDrift,
            TriggerKind::OpenProposal,
            TriggerKind::RuntimeError,
        ] {
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
    }

    #[test]
    fn old_states_and_settings_load_with_defaults() {
        let s: AutonomyState = serde_json::from_str("{}").unwrap();
        assert_eq!(s, AutonomyState::default());
        let s: AutonomyState = serde_json::from_str(r#"{"used_today":3,"lifetime":7}"#).unwrap();
        assert_eq!((s.used_today, s.lifetime), (3, 7));

        let settings: Settings = serde_json::from_str("{}").unwrap();
        assert_eq!(settings, Settings::default());
        assert_eq!(settings.daily_tokens, DEFAULT_DAILY_TOKENS);
        assert_eq!(settings.spacing, Duration::minutes(30));
        let settings: Settings =
            serde_json::from_str(r#"{"mode":"controlled","spacing":60}"#).unwrap();
        assert_eq!(settings.mode, Mode::Controlled);
        assert_eq!(settings.spacing, Duration::minutes(1));
    }

    #[test]
    fn state_and_settings_round_trip_through_json() {
        let mut state = AutonomyState::default();
        let spent = spend(&mut state, &rollback("src/a.js"), now());
        note(&mut state, &refused(Refusal::WindowClosed));
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(serde_json::from_str::<AutonomyState>(&json).unwrap(), state);
        let json = serde_json::to_string(&spent).unwrap();
        assert_eq!(serde_json::from_str::<Spent>(&json).unwrap(), spent);
        let json = serde_json::to_string(&on()).unwrap();
        assert_eq!(serde_json::from_str::<Settings>(&json).unwrap(), on());
    }
}
