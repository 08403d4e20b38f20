//! Observation mode: label every SKIP, bet on the watched ones, grade the bets later.
//!
//! "Eyes open, hands in pockets": nothing here can change a decision, because no
//! function receives one. A SKIP is only labelled (`classify`), remembered as an
//! open watch with a falsifiable prediction (`observe`), and graded when its
//! window elapses or an incident contradicts it (`resolve_if_due`).
//!
//! A prediction graded correct means "nothing broke that this memory saw" (a
//! rollback or a lock of the file), not "nothing broke anywhere".

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

pub use crate::state::records::observation::{
    Category, ObservationLog, Prediction, Resolution, Totals, Watch,
};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

/// Default bound of open watches.
pub const OPEN_LIMIT: usize = 500;
/// Default bound of the resolved log.
pub const RESOLVED_LIMIT: usize = 200;
/// A known skip at or above this confidence is "confident".
pub const CONFIDENT: f64 = 0.8;

const BUDGET_WINDOW_HOURS: i64 = 6;
const YOUNG_WINDOW_HOURS: i64 = 24;
const TRUSTED_WINDOW_DAYS: i64 = 3;
const FROZEN_WINDOW_DAYS: i64 = 7;

const MIN_PROBABILITY: f64 = 0.01;
const MAX_PROBABILITY: f64 = 0.9;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    pub category: Category,
    /// How long the bet runs; only `Observe` has one.
    pub reevaluate_in: Option<Duration>,
    /// Only `Observe` carries a prediction.
    pub prediction: Option<Prediction>,
}

/// What is known about one SKIP when it is labelled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObserveInput<'a> {
    /// The decision's reason text; contains "budget" for a budget deferral.
    pub reason: &'a str,
    /// "under_observation" | "stable" | "certified" | "locked".
    pub status: &'a str,
    /// "source" | "test" | "doc" | "config" | "generated" | "unknown".
    pub role: &'a str,
    /// "low" | "medium" | "high" | "critical".
    pub risk: &'a str,
    pub confidence: f64,
    /// The SKIP comes from a known rule or a model answer, not from a default.
    pub known_skip: bool,
    /// The file's current rollback streak: the baseline of a new watch.
    pub rollback_streak: u32,
}

fn is_frozen(status: &str) -> bool {
    status == "certified" || status == "locked"
}

fn is_trusted(status: &str) -> bool {
    status == "stable"
}

/// How long a bet runs before it is graded: a proven module is re-interrogated
/// less often than a young one.
fn status_window(status: &str) -> Duration {
    match status {
        "stable" => Duration::days(TRUSTED_WINDOW_DAYS),
        "certified" | "locked" => Duration::days(FROZEN_WINDOW_DAYS),
        // An unrecognised status is no proof of trust: watch it like a young module.
        _ => Duration::hours(YOUNG_WINDOW_HOURS),
    }
}

fn observe_with(input: &ObserveInput, window: Duration) -> Classification {
    Classification {
        category: Category::Observe,
        reevaluate_in: Some(window),
        prediction: Some(Prediction {
            stable: true,
            risk: input.risk.to_string(),
            problem_probability: problem_probability(input.confidence, input.risk),
        }),
    }
}

fn unwatched(category: Category) -> Classification {
    Classification {
        category,
        reevaluate_in: None,
        prediction: None,
    }
}

/// The taxonomy, first match wins:
///
/// 1. reason contains "budget" → `Observe`, 6 h window;
/// 2. certified/locked (frozen) → `NoValue`;
/// 3. confident known skip → `Observe` (24 h) unless the module is trusted
///    (stable), then `NoValue`;
/// 4. role "unknown" or not a known skip → `InsufficientData`;
/// 5. anything else → `Observe` with the status window.
pub fn classify(input: &ObserveInput) -> Classification {
    // First, so that a retry-later is never misread as a confident "nothing needed".
    if mentions_budget(input.reason) {
        return observe_with(input, Duration::hours(BUDGET_WINDOW_HOURS));
    }
    if is_frozen(input.status) {
        return unwatched(Category::NoValue);
    }
    // NaN compares false, so an unreadable confidence is never "confident".
    if input.known_skip && input.confidence >= CONFIDENT {
        if is_trusted(input.status) {
            return unwatched(Category::NoValue);
        }
        return observe_with(input, Duration::hours(YOUNG_WINDOW_HOURS));
    }
    let unknown_role = input.role.is_empty() || input.role == "unknown";
    if unknown_role || !input.known_skip {
        return unwatched(Category::InsufficientData);
    }
    observe_with(input, status_window(input.status))
}

/// Whether `reason` holds `budget`: a scan of the bytes, where
/// `str::contains` sets up a searcher that costs more than the short
/// reasons it looks through, once per SKIP.
fn mentions_budget(reason: &str) -> bool {
    reason
        .as_bytes()
        .windows(6)
        .any(|w| w[0] == b'b' && w == b"budget")
}

fn risk_factor(risk: &str) -> f64 {
    // Compared without a lowered copy: every SKIP of a first run comes here.
    let risk = risk.trim();
    let is = |name: &str| risk.eq_ignore_ascii_case(name);
    if is("low") {
        0.5
    } else if is("high") {
        1.5
    } else if is("critical") {
        2.0
    } else {
        // "medium", and what is not a risk.
        1.0
    }
}

/// `clamp((1 - confidence) * risk factor, 0.01, 0.9)`: higher when unsure,
/// higher when the file is dangerous.
pub fn problem_probability(confidence: f64, risk: &str) -> f64 {
    // An unreadable confidence is treated as no confidence, never as NaN in the state.
    let confidence = if confidence.is_finite() {
        confidence.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ((1.0 - confidence) * risk_factor(risk)).clamp(MIN_PROBABILITY, MAX_PROBABILITY)
}

// Saturating, so that an absurd window on an absurd clock cannot panic.
fn after(now: DateTime<Utc>, window: Duration) -> DateTime<Utc> {
    now.checked_add_signed(window)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Label one SKIP and remember it. `Observe` opens a watch or updates the open
/// one; any other label closes a prior watch of the file without grading it.
/// Beyond `open_limit` open watches, the oldest `last_ts` is evicted.
pub fn observe(
    log: &mut ObservationLog,
    path: &str,
    input: &ObserveInput,
    now: DateTime<Utc>,
    open_limit: usize,
) -> Classification {
    let classification = classify(input);
    remember(log, path, input, classification.clone(), now, open_limit);
    classification
}

/// `observe` for a caller that does not look at the label (the tick): the
/// label's prediction moves into the watch instead of being copied.
pub fn label(
    log: &mut ObservationLog,
    path: &str,
    input: &ObserveInput,
    now: DateTime<Utc>,
    open_limit: usize,
) {
    remember(log, path, input, classify(input), now, open_limit);
}

/// What `observe` does with the label `classification` of `input`.
fn remember(
    log: &mut ObservationLog,
    path: &str,
    input: &ObserveInput,
    classification: Classification,
    now: DateTime<Utc>,
    open_limit: usize,
) {
    let name = classification.category.as_str();
    // A name is allocated once per category, not once per file.
    match log.totals.by_category.get_mut(name) {
        Some(tally) => *tally = tally.saturating_add(1),
        None => {
            log.totals.by_category.insert(name.to_string(), 1);
        }
    }

    if classification.category != Category::Observe {
        // The file left the watched state; there is no bet left to grade.
        log.open.remove(path);
        return;
    }

    // One search of the map, not a lookup and then an insert: a first run
    // opens a watch for most of its files. The path is copied for it even
    // when the watch is open already, which a wake sees for a few files.
    match log.open.entry(path.to_string()) {
        Entry::Occupied(mut open) => {
            let watch = open.get_mut();
            // The checkpoint, the start and the baseline stay put: a busy scanner
            // re-observing the file must not push the grading forever into the future.
            watch.observations = watch.observations.saturating_add(1);
            watch.last_ts = now;
            // The bet graded is the one placed when the watch opened.
            if watch.prediction.is_none() {
                watch.prediction = classification.prediction;
            }
        }
        Entry::Vacant(slot) => {
            let window = classification
                .reevaluate_in
                .unwrap_or_else(|| Duration::hours(YOUNG_WINDOW_HOURS));
            slot.insert(Watch {
                category: classification.category,
                prediction: classification.prediction,
                first_ts: now,
                last_ts: now,
                reevaluate_at: after(now, window),
                rollback_baseline: input.rollback_streak,
                observations: 1,
            });
        }
    }
    log.age.touched(now, path);
    evict(log, path, open_limit);
}

/// Keep at most `limit` watches, oldest `last_ts` first (ties by path, so the
/// outcome is deterministic). The file just observed goes last: with a clock that
/// went backwards it could look oldest, yet it is the one in hand.
fn evict(log: &mut ObservationLog, keep: &str, limit: usize) {
    let open = &mut log.open;
    let excess = open.len().saturating_sub(limit);
    if excess == 0 {
        return;
    }
    if excess == 1 {
        // Every open watch of one age (a first run's): the oldest other is
        // the smallest path but `keep`, taken off the front of the map
        // without a copy of its path and a second search for it.
        let uniform = matches!(
            log.age,
            crate::state::records::observation::AgeIndex::Uniform(_)
        );
        if uniform && open.first_key_value().is_some_and(|(p, _)| p != keep) {
            open.pop_first();
            return;
        }
        // The usual case, once per file observed past the limit (every file
        // of a large first run): the age index gives the oldest other watch
        // (ties to the smallest path, as with the sort below) without a pass.
        match log.age.oldest(open, keep) {
            Some(p) => open.remove(&p),
            None => open.remove(keep),
        };
        return;
    }
    let mut by_age: Vec<(DateTime<Utc>, String)> = open
        .iter()
        .filter(|(p, _)| p.as_str() != keep)
        .map(|(p, w)| (w.last_ts, p.clone()))
        .collect();
    by_age.sort();
    for (_, p) in by_age.into_iter().take(excess) {
        open.remove(&p);
    }
    if open.len() > limit {
        open.remove(keep);
    }
}

/// Grade the open watch of `path` when its window elapsed (`now >= reevaluate_at`)
/// or on an incident (`current_streak > rollback_baseline`, or `locked`). The
/// watch is closed, the resolution appended (the log bounded to `resolved_limit`,
/// oldest dropped) and counted. `None` when there is nothing to grade.
pub fn resolve_if_due(
    log: &mut ObservationLog,
    path: &str,
    current_streak: u32,
    locked: bool,
    now: DateTime<Utc>,
    resolved_limit: usize,
) -> Option<Resolution> {
    // Outside the range of the open watches' paths there is none, which two
    // comparisons tell: a first run grades each file before it opens its
    // watch, in path order, so each is past the last one opened.
    let (first, _) = log.open.first_key_value()?;
    let (last, _) = log.open.last_key_value()?;
    if path < first.as_str() || path > last.as_str() {
        return None;
    }
    let watch = log.open.get(path)?;
    // An incident needs no clock: that is what makes this an early warning
    // rather than a post-mortem.
    let incident = locked || current_streak > watch.rollback_baseline;
    let elapsed = now >= watch.reevaluate_at;
    if !incident && !elapsed {
        return None;
    }
    let watch = log.open.remove(path)?;
    let predicted_stable = watch.prediction.as_ref().is_none_or(|p| p.stable);
    let observed_stable = !incident;
    let correct = predicted_stable == observed_stable;
    let resolution = Resolution {
        path: path.to_string(),
        correct,
        reason: if incident {
            "incident-detected"
        } else {
            "window-elapsed"
        }
        .to_string(),
        predicted_stable,
        observed_stable,
        opened: watch.first_ts,
        resolved: now,
        observations: watch.observations,
    };
    let totals = &mut log.totals;
    if correct {
        totals.resolved_correct = totals.resolved_correct.saturating_add(1);
    } else {
        totals.resolved_wrong = totals.resolved_wrong.saturating_add(1);
    }
    log.resolved.push_back(resolution.clone());
    while log.resolved.len() > resolved_limit {
        log.resolved.pop_front();
    }
    Some(resolution)
}

/// Paths whose watch window has elapsed at `now`, sorted.
pub fn due(log: &ObservationLog, now: DateTime<Utc>) -> Vec<String> {
    // A BTreeMap iterates in key order, so the list comes out sorted.
    log.open
        .iter()
        .filter(|(_, w)| now >= w.reevaluate_at)
        .map(|(p, _)| p.clone())
        .collect()
}

/// The earliest checkpoint of any open watch, for the wake gate's cheap check.
pub fn next_due(log: &ObservationLog) -> Option<DateTime<Utc>> {
    log.open.values().map(|w| w.reevaluate_at).min()
}

/// The most recent resolution of `path` when it was wrong: a concrete trigger
/// for reconsidering the file. A later correct grading supersedes it.
pub fn last_wrong<'a>(log: &'a ObservationLog, path: &str) -> Option<&'a Resolution> {
    log.resolved
        .iter()
        .rev()
        .find(|r| r.path == path)
        .filter(|r| !r.correct)
}

/// A read-only summary for reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ObservationStats {
    pub watching: u64,
    pub due: u64,
    pub by_category: BTreeMap<String, u64>,
    /// Lifetime count, not the length of the bounded log.
    pub resolved: u64,
    pub correct: u64,
    pub wrong: u64,
    /// `None` (null) when nothing was resolved: never NaN. Four decimals.
    pub accuracy: Option<f64>,
}

pub fn stats(log: &ObservationLog, now: DateTime<Utc>) -> ObservationStats {
    let correct = log.totals.resolved_correct;
    let wrong = log.totals.resolved_wrong;
    let resolved = correct.saturating_add(wrong);
    let accuracy =
        (resolved > 0).then(|| ((correct as f64 / resolved as f64) * 10_000.0).round() / 10_000.0);
    ObservationStats {
        watching: log.open.len() as u64,
        due: log.open.values().filter(|w| now >= w.reevaluate_at).count() as u64,
        by_category: log.totals.by_category.clone(),
        resolved,
        correct,
        wrong,
        accuracy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
    }

    fn hours(h: i64) -> Duration {
        Duration::hours(h)
    }

    /// A confident, known skip of a young source file.
    fn skip() -> ObserveInput<'static> {
        ObserveInput {
            reason: "llm-skip: nothing to improve",
            status: "under_observation",
            role: "source",
            risk: "medium",
            confidence: 0.9,
            known_skip: true,
            rollback_streak: 0,
        }
    }

    #[test]
    fn eviction_keeps_the_newest_watches_whether_they_share_an_instant_or_not() {
        // A model of the rule: past the limit, the oldest (last_ts, path)
        // other than the file just observed goes. First every file at one
        // instant (a first run, in and out of path order), then a mix.
        let mut steps: Vec<(String, i64)> = (0..60)
            .map(|i| (format!("f{:02}", (i * 37) % 60), 0))
            .collect();
        steps.extend((0..80).map(|i| (format!("f{:02}", (i * 13) % 70), (i % 5) as i64)));
        steps.extend((0..40).map(|i| (format!("g{i}"), 9)));
        let mut log = ObservationLog::default();
        let mut model: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        for (path, h) in steps {
            let now = t0() + hours(h);
            observe(&mut log, &path, &hesitant(), now, 10);
            model.insert(path.clone(), now);
            if model.len() > 10 {
                let oldest = model
                    .iter()
                    .filter(|(p, _)| **p != path)
                    .min_by(|a, b| (a.1, a.0).cmp(&(b.1, b.0)))
                    .map(|(p, _)| p.clone())
                    .unwrap();
                model.remove(&oldest);
            }
            let open: Vec<&String> = log.open.keys().collect();
            assert_eq!(
                open,
                model.keys().collect::<Vec<_>>(),
                "after {path} at +{h}h"
            );
        }
    }

    /// A known skip below the confidence bar: the default OBSERVE path.
    fn hesitant() -> ObserveInput<'static> {
        ObserveInput {
            confidence: 0.6,
            ..skip()
        }
    }

    fn watched(path: &str, at: DateTime<Utc>) -> ObservationLog {
        let mut log = ObservationLog::default();
        observe(&mut log, path, &skip(), at, OPEN_LIMIT);
        log
    }

    /// The loop of a first run: every file a SKIP past the last open watch,
    /// the log at its bound, each new watch evicting the oldest. Labelling
    /// one copies its path and its bet's risk, and nothing else (the B-tree
    /// adds a node now and then); the label was copied whole, and the risk
    /// lowered into a copy to be weighed, four allocations a file.
    #[test]
    fn a_first_runs_skip_allocates_its_watchs_path_and_risk_only() {
        let mut log = ObservationLog::default();
        let path = |i: usize| format!("src/d{}/f{i:06}.js", i / 100);
        for i in 0..OPEN_LIMIT {
            label(&mut log, &path(i), &skip(), t0(), OPEN_LIMIT);
        }
        let paths: Vec<String> = (OPEN_LIMIT..OPEN_LIMIT + 100).map(path).collect();
        let (n, ()) = crate::alloc_count::allocations(|| {
            for p in &paths {
                label(&mut log, p, &skip(), t0(), OPEN_LIMIT);
            }
        });
        assert!(n <= 100 * 2 + 40, "{n} allocations for 100 files");
        assert_eq!(log.open.len(), OPEN_LIMIT);
        assert_eq!(log.open.keys().next(), Some(&path(100)));
        let mut same = ObservationLog::default();
        for i in 0..OPEN_LIMIT + 100 {
            observe(&mut same, &path(i), &skip(), t0(), OPEN_LIMIT);
        }
        assert_eq!(same, log);
        assert_eq!(same.open, log.open);
    }

    // ---- classify: the taxonomy ----

    #[test]
    fn frozen_modules_are_no_value_without_prediction() {
        for status in ["certified", "locked"] {
            for input in [
                skip(),
                hesitant(),
                ObserveInput {
                    known_skip: false,
                    ..skip()
                },
            ] {
                let c = classify(&ObserveInput { status, ..input });
                assert_eq!(c.category, Category::NoValue, "{status}");
                assert_eq!(c.prediction, None);
                assert_eq!(c.reevaluate_in, None);
            }
        }
    }

    #[test]
    fn a_confident_skip_is_no_value_on_a_trusted_module_but_observed_on_a_young_one() {
        let trusted = classify(&ObserveInput {
            status: "stable",
            ..skip()
        });
        assert_eq!(trusted.category, Category::NoValue);
        assert_eq!(trusted.prediction, None);

        let young = classify(&skip());
        assert_eq!(young.category, Category::Observe);
        assert_eq!(young.reevaluate_in, Some(hours(24)));
        assert!(young.prediction.is_some());
    }

    #[test]
    fn confidence_exactly_at_the_bar_is_confident_and_just_below_is_not() {
        let at = classify(&ObserveInput {
            status: "stable",
            confidence: CONFIDENT,
            ..skip()
        });
        assert_eq!(at.category, Category::NoValue);
        let below = classify(&ObserveInput {
            status: "stable",
            confidence: CONFIDENT - 1e-9,
            ..skip()
        });
        assert_eq!(below.category, Category::Observe);
        assert_eq!(below.reevaluate_in, Some(Duration::days(3)));
    }

    #[test]
    fn a_budget_deferral_is_observed_with_a_window_of_at_most_six_hours() {
        let c = classify(&ObserveInput {
            reason: "budget-deferred: daily budget exhausted",
            ..skip()
        });
        assert_eq!(c.category, Category::Observe);
        let window = c.reevaluate_in.unwrap();
        assert!(window <= hours(6) && window > Duration::zero());
        assert!(c.prediction.is_some());
    }

    #[test]
    fn budget_wins_even_over_a_frozen_module_and_over_a_blind_spot() {
        for input in [
            ObserveInput {
                status: "locked",
                ..skip()
            },
            ObserveInput {
                status: "certified",
                ..skip()
            },
            ObserveInput {
                status: "stable",
                ..skip()
            },
            ObserveInput {
                role: "unknown",
                known_skip: false,
                ..skip()
            },
        ] {
            let c = classify(&ObserveInput {
                reason: "over budget",
                ..input
            });
            assert_eq!(c.category, Category::Observe, "{input:?}");
            assert_eq!(c.reevaluate_in, Some(hours(6)));
        }
    }

    #[test]
    fn an_unknown_role_or_an_unmatched_skip_is_insufficient_data() {
        let unknown_role = classify(&ObserveInput {
            role: "unknown",
            ..hesitant()
        });
        assert_eq!(unknown_role.category, Category::InsufficientData);
        assert_eq!(unknown_role.prediction, None);

        let default_skip = classify(&ObserveInput {
            known_skip: false,
            ..skip()
        });
        assert_eq!(default_skip.category, Category::InsufficientData);
        assert_eq!(default_skip.reevaluate_in, None);

        let no_role = classify(&ObserveInput {
            role: "",
            ..hesitant()
        });
        assert_eq!(no_role.category, Category::InsufficientData);
    }

    #[test]
    fn a_high_confidence_default_is_still_a_blind_spot() {
        let c = classify(&ObserveInput {
            known_skip: false,
            confidence: 0.99,
            ..skip()
        });
        assert_eq!(c.category, Category::InsufficientData);
    }

    #[test]
    fn a_default_known_skip_is_observed_with_a_bounded_probability() {
        let c = classify(&hesitant());
        assert_eq!(c.category, Category::Observe);
        let p = c.prediction.unwrap();
        assert!(p.stable);
        assert_eq!(p.risk, "medium");
        assert!((0.01..=0.9).contains(&p.problem_probability));
        assert!((p.problem_probability - 0.4).abs() < 1e-9);
    }

    #[test]
    fn the_window_scales_with_how_proven_the_module_is() {
        let window = |status| {
            classify(&ObserveInput {
                status,
                ..hesitant()
            })
            .reevaluate_in
        };
        assert_eq!(window("under_observation"), Some(hours(24)));
        assert_eq!(window("stable"), Some(Duration::days(3)));
        assert_eq!(status_window("certified"), Duration::days(7));
        assert_eq!(status_window("locked"), Duration::days(7));
    }

    #[test]
    fn an_unrecognised_status_is_watched_like_a_young_module() {
        for input in [skip(), hesitant()] {
            let c = classify(&ObserveInput {
                status: "mystery",
                ..input
            });
            assert_eq!(c.category, Category::Observe);
            assert_eq!(c.reevaluate_in, Some(hours(24)));
        }
    }

    #[test]
    fn only_observe_carries_a_prediction_and_a_window() {
        for reason in ["skip", "budget"] {
            for status in ["under_observation", "stable", "certified", "locked", "x"] {
                for role in ["source", "unknown"] {
                    for known_skip in [true, false] {
                        for confidence in [0.0, 0.5, 0.8, 1.0, f64::NAN] {
                            let c = classify(&ObserveInput {
                                reason,
                                status,
                                role,
                                known_skip,
                                confidence,
                                ..skip()
                            });
                            let observed = c.category == Category::Observe;
                            assert_eq!(c.prediction.is_some(), observed);
                            assert_eq!(c.reevaluate_in.is_some(), observed);
                            if let Some(p) = c.prediction {
                                assert!(p.stable);
                                assert!((0.01..=0.9).contains(&p.problem_probability));
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn problem_probability_rises_with_risk_at_equal_confidence() {
        let at = |risk| problem_probability(0.7, risk);
        assert!(at("low") < at("medium"));
        assert!(at("medium") < at("high"));
        assert!(at("high") < at("critical"));
        assert_eq!(at("unheard-of"), at("medium"));
        assert_eq!(at("HIGH"), at("high"));
    }

    #[test]
    fn problem_probability_falls_as_confidence_rises() {
        assert!(problem_probability(0.9, "high") < problem_probability(0.6, "high"));
    }

    #[test]
    fn problem_probability_is_clamped_between_one_and_ninety_percent() {
        assert_eq!(problem_probability(1.0, "low"), 0.01);
        assert_eq!(problem_probability(0.0, "critical"), 0.9);
        assert_eq!(problem_probability(2.0, "high"), 0.01);
        assert_eq!(problem_probability(-5.0, "high"), 0.9);
        for c in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let p = problem_probability(c, "medium");
            assert!((0.01..=0.9).contains(&p), "{c} gave {p}");
        }
    }

    #[test]
    fn category_names_are_screaming_snake_case_in_text_and_json() {
        for (c, name) in [
            (Category::NoValue, "NO_VALUE"),
            (Category::InsufficientData, "INSUFFICIENT_DATA"),
            (Category::Observe, "OBSERVE"),
        ] {
            assert_eq!(c.as_str(), name);
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(name));
        }
    }

    // ---- observe: the watch lifecycle ----

    #[test]
    fn opening_a_watch_sets_the_prediction_a_24h_window_and_one_observation() {
        let mut log = ObservationLog::default();
        let c = observe(
            &mut log,
            "a.rs",
            &ObserveInput {
                rollback_streak: 2,
                ..skip()
            },
            t0(),
            OPEN_LIMIT,
        );
        assert_eq!(c.category, Category::Observe);
        let w = &log.open["a.rs"];
        assert_eq!(w.category, Category::Observe);
        assert_eq!(w.prediction, c.prediction);
        assert!(w.prediction.as_ref().unwrap().stable);
        assert_eq!(w.first_ts, t0());
        assert_eq!(w.last_ts, t0());
        assert_eq!(w.reevaluate_at, t0() + hours(24));
        assert_eq!(w.rollback_baseline, 2);
        assert_eq!(w.observations, 1);
        assert_eq!(log.totals.by_category["OBSERVE"], 1);
    }

    #[test]
    fn observe_returns_exactly_what_classify_says() {
        let mut log = ObservationLog::default();
        for input in [
            skip(),
            hesitant(),
            ObserveInput {
                status: "locked",
                ..skip()
            },
            ObserveInput {
                known_skip: false,
                ..skip()
            },
            ObserveInput {
                reason: "budget",
                ..skip()
            },
        ] {
            assert_eq!(
                observe(&mut log, "a.rs", &input, t0(), OPEN_LIMIT),
                classify(&input)
            );
        }
    }

    #[test]
    fn a_budget_deferral_opens_a_six_hour_watch() {
        let mut log = ObservationLog::default();
        let input = ObserveInput {
            reason: "budget-deferred",
            ..skip()
        };
        observe(&mut log, "a.rs", &input, t0(), OPEN_LIMIT);
        assert_eq!(log.open["a.rs"].reevaluate_at, t0() + hours(6));
    }

    #[test]
    fn no_value_and_insufficient_data_are_tallied_but_open_no_watch() {
        let mut log = ObservationLog::default();
        observe(
            &mut log,
            "frozen.rs",
            &ObserveInput {
                status: "certified",
                ..skip()
            },
            t0(),
            OPEN_LIMIT,
        );
        observe(
            &mut log,
            "blind.rs",
            &ObserveInput {
                role: "unknown",
                ..hesitant()
            },
            t0(),
            OPEN_LIMIT,
        );
        observe(
            &mut log,
            "blind2.rs",
            &ObserveInput {
                known_skip: false,
                ..skip()
            },
            t0(),
            OPEN_LIMIT,
        );
        assert!(log.open.is_empty());
        assert_eq!(log.totals.by_category["NO_VALUE"], 1);
        assert_eq!(log.totals.by_category["INSUFFICIENT_DATA"], 2);
        assert!(!log.totals.by_category.contains_key("OBSERVE"));
        assert!(log.resolved.is_empty());
    }

    #[test]
    fn switching_an_observed_file_to_no_value_closes_the_prior_watch_without_grading() {
        let mut log = watched("a.rs", t0());
        observe(
            &mut log,
            "a.rs",
            &ObserveInput {
                status: "stable",
                ..skip()
            },
            t0() + hours(1),
            OPEN_LIMIT,
        );
        assert!(!log.open.contains_key("a.rs"));
        assert!(log.resolved.is_empty());
        assert_eq!(log.totals.resolved_correct + log.totals.resolved_wrong, 0);
        assert_eq!(log.totals.by_category["OBSERVE"], 1);
        assert_eq!(log.totals.by_category["NO_VALUE"], 1);
    }

    #[test]
    fn switching_an_observed_file_to_insufficient_data_also_closes_the_watch() {
        let mut log = watched("a.rs", t0());
        let blind = ObserveInput {
            known_skip: false,
            ..skip()
        };
        observe(&mut log, "a.rs", &blind, t0() + hours(1), OPEN_LIMIT);
        assert!(log.open.is_empty());
    }

    #[test]
    fn invariant_9_the_checkpoint_is_set_once_and_never_slides() {
        let mut log = ObservationLog::default();
        observe(&mut log, "a.rs", &skip(), t0(), OPEN_LIMIT);
        let later = ObserveInput {
            rollback_streak: 3,
            ..skip()
        };
        observe(&mut log, "a.rs", &later, t0() + hours(5), OPEN_LIMIT);
        observe(&mut log, "a.rs", &later, t0() + hours(20), OPEN_LIMIT);
        let w = &log.open["a.rs"];
        assert_eq!(w.first_ts, t0());
        assert_eq!(
            w.reevaluate_at,
            t0() + hours(24),
            "did not slide to the latest look"
        );
        assert_eq!(w.rollback_baseline, 0);
        assert_eq!(w.last_ts, t0() + hours(20));
        assert_eq!(w.observations, 3);
        assert_eq!(log.totals.by_category["OBSERVE"], 3);
    }

    #[test]
    fn a_longer_window_on_a_later_look_does_not_move_a_budget_checkpoint() {
        let mut log = ObservationLog::default();
        let budget = ObserveInput {
            reason: "budget-deferred",
            ..skip()
        };
        observe(&mut log, "a.rs", &budget, t0(), OPEN_LIMIT);
        let trusted = ObserveInput {
            status: "stable",
            ..hesitant()
        };
        observe(&mut log, "a.rs", &trusted, t0() + hours(1), OPEN_LIMIT);
        assert_eq!(log.open["a.rs"].reevaluate_at, t0() + hours(6));
    }

    #[test]
    fn the_bet_placed_at_opening_is_the_one_graded() {
        let mut log = ObservationLog::default();
        observe(&mut log, "a.rs", &hesitant(), t0(), OPEN_LIMIT);
        let placed = log.open["a.rs"].prediction.clone();
        let riskier = ObserveInput {
            risk: "critical",
            ..hesitant()
        };
        observe(&mut log, "a.rs", &riskier, t0() + hours(1), OPEN_LIMIT);
        assert_eq!(log.open["a.rs"].prediction, placed);
    }

    #[test]
    fn eviction_beyond_the_open_limit_takes_the_oldest_last_ts() {
        let mut log = ObservationLog::default();
        for (i, path) in ["a.rs", "b.rs", "c.rs"].iter().enumerate() {
            observe(&mut log, path, &skip(), t0() + hours(i as i64), 3);
        }
        // a.rs was opened first but looked at last: b.rs is now the oldest.
        observe(&mut log, "a.rs", &skip(), t0() + hours(3), 3);
        observe(&mut log, "d.rs", &skip(), t0() + hours(4), 3);
        let open: Vec<&str> = log.open.keys().map(String::as_str).collect();
        assert_eq!(open, ["a.rs", "c.rs", "d.rs"]);
    }

    #[test]
    fn watches_as_old_as_each_other_are_evicted_by_path_one_per_file() {
        // A first run opens every watch at the same instant: past the limit
        // each new file evicts the smallest path, never itself.
        let mut log = ObservationLog::default();
        for path in ["e.rs", "a.rs", "d.rs", "b.rs", "c.rs"] {
            observe(&mut log, path, &skip(), t0(), 3);
        }
        let open: Vec<&str> = log.open.keys().map(String::as_str).collect();
        assert_eq!(open, ["c.rs", "d.rs", "e.rs"]);
        let mut log = ObservationLog::default();
        observe(&mut log, "a.rs", &skip(), t0(), 0);
        assert!(log.open.is_empty());
    }

    #[test]
    fn a_lowered_limit_evicts_down_to_the_bound_in_one_go() {
        let mut log = ObservationLog::default();
        for i in 0..10 {
            observe(
                &mut log,
                &format!("f{i}.rs"),
                &skip(),
                t0() + hours(i),
                OPEN_LIMIT,
            );
        }
        observe(&mut log, "new.rs", &skip(), t0() + hours(20), 4);
        let open: Vec<&str> = log.open.keys().map(String::as_str).collect();
        assert_eq!(open, ["f7.rs", "f8.rs", "f9.rs", "new.rs"]);
    }

    #[test]
    fn the_file_just_observed_survives_eviction_even_if_the_clock_went_backwards() {
        let mut log = ObservationLog::default();
        observe(&mut log, "a.rs", &skip(), t0(), 2);
        observe(&mut log, "b.rs", &skip(), t0() + hours(1), 2);
        observe(&mut log, "c.rs", &skip(), t0() - hours(10), 2);
        assert!(log.open.contains_key("c.rs"));
        assert!(!log.open.contains_key("a.rs"));
        assert_eq!(log.open.len(), 2);
    }

    #[test]
    fn a_zero_open_limit_keeps_no_watch_but_still_tallies() {
        let mut log = ObservationLog::default();
        let c = observe(&mut log, "a.rs", &skip(), t0(), 0);
        assert_eq!(c.category, Category::Observe);
        assert!(log.open.is_empty());
        assert_eq!(log.totals.by_category["OBSERVE"], 1);
    }

    #[test]
    fn the_open_watches_never_exceed_the_default_limit() {
        let mut log = ObservationLog::default();
        for i in 0..(OPEN_LIMIT as i64 + 50) {
            observe(
                &mut log,
                &format!("f{i}.rs"),
                &skip(),
                t0() + Duration::seconds(i),
                OPEN_LIMIT,
            );
        }
        assert_eq!(log.open.len(), OPEN_LIMIT);
        assert!(!log.open.contains_key("f49.rs"));
        assert!(log.open.contains_key("f50.rs"));
    }

    // ---- resolve_if_due: grading ----

    #[test]
    fn a_watch_not_yet_due_without_incident_is_not_graded_and_keeps_watching() {
        let mut log = watched("a.rs", t0());
        let r = resolve_if_due(&mut log, "a.rs", 0, false, t0() + hours(23), RESOLVED_LIMIT);
        assert_eq!(r, None);
        assert!(log.open.contains_key("a.rs"));
        assert!(log.resolved.is_empty());
        assert_eq!(log.totals.resolved_correct + log.totals.resolved_wrong, 0);
    }

    #[test]
    fn an_elapsed_window_grades_the_bet_correct_and_closes_the_watch() {
        let mut log = watched("a.rs", t0());
        observe(&mut log, "a.rs", &skip(), t0() + hours(2), OPEN_LIMIT);
        let now = t0() + hours(24);
        let r = resolve_if_due(&mut log, "a.rs", 0, false, now, RESOLVED_LIMIT).unwrap();
        assert!(r.correct);
        assert_eq!(r.reason, "window-elapsed");
        assert!(r.predicted_stable && r.observed_stable);
        assert_eq!(r.path, "a.rs");
        assert_eq!(r.opened, t0());
        assert_eq!(r.resolved, now);
        assert_eq!(r.observations, 2);
        assert!(!log.open.contains_key("a.rs"));
        assert_eq!(log.totals.resolved_correct, 1);
        assert_eq!(log.totals.resolved_wrong, 0);
        assert_eq!(log.resolved.back(), Some(&r));
    }

    #[test]
    fn a_graded_watch_is_not_graded_twice() {
        let mut log = watched("a.rs", t0());
        let now = t0() + hours(25);
        assert!(resolve_if_due(&mut log, "a.rs", 0, false, now, RESOLVED_LIMIT).is_some());
        assert_eq!(
            resolve_if_due(&mut log, "a.rs", 5, true, now, RESOLVED_LIMIT),
            None
        );
        assert_eq!(log.resolved.len(), 1);
    }

    #[test]
    fn a_rollback_mid_window_grades_the_bet_wrong_before_the_window() {
        let mut log = watched("a.rs", t0());
        let now = t0() + Duration::seconds(1);
        let r = resolve_if_due(&mut log, "a.rs", 1, false, now, RESOLVED_LIMIT).unwrap();
        assert!(!r.correct);
        assert_eq!(r.reason, "incident-detected");
        assert!(r.predicted_stable);
        assert!(!r.observed_stable);
        assert!(log.open.is_empty());
        assert_eq!(log.totals.resolved_wrong, 1);
        assert_eq!(log.totals.resolved_correct, 0);
    }

    #[test]
    fn a_file_locked_mid_window_grades_the_bet_wrong() {
        let mut log = watched("a.rs", t0());
        let r = resolve_if_due(&mut log, "a.rs", 0, true, t0() + hours(1), RESOLVED_LIMIT).unwrap();
        assert!(!r.correct);
        assert_eq!(r.reason, "incident-detected");
        assert!(log.open.is_empty());
    }

    #[test]
    fn a_streak_at_the_baseline_is_not_an_incident() {
        let mut log = ObservationLog::default();
        let input = ObserveInput {
            rollback_streak: 2,
            ..skip()
        };
        observe(&mut log, "a.rs", &input, t0(), OPEN_LIMIT);
        let mid = t0() + hours(1);
        assert_eq!(
            resolve_if_due(&mut log, "a.rs", 2, false, mid, RESOLVED_LIMIT),
            None
        );
        assert_eq!(
            resolve_if_due(&mut log, "a.rs", 1, false, mid, RESOLVED_LIMIT),
            None
        );
        let r = resolve_if_due(&mut log, "a.rs", 3, false, mid, RESOLVED_LIMIT).unwrap();
        assert!(!r.correct);
    }

    #[test]
    fn an_incident_seen_after_the_window_is_still_graded_wrong() {
        let mut log = watched("a.rs", t0());
        let r =
            resolve_if_due(&mut log, "a.rs", 1, false, t0() + hours(48), RESOLVED_LIMIT).unwrap();
        assert!(!r.correct);
        assert_eq!(r.reason, "incident-detected");
    }

    #[test]
    fn without_an_open_watch_there_is_nothing_to_grade() {
        let mut log = ObservationLog::default();
        assert_eq!(
            resolve_if_due(&mut log, "a.rs", 9, true, t0(), RESOLVED_LIMIT),
            None
        );
        assert_eq!(log, ObservationLog::default());
    }

    #[test]
    fn the_resolved_log_stays_bounded_dropping_the_oldest() {
        let mut log = ObservationLog::default();
        for i in 0..5 {
            let path = format!("f{i}.rs");
            observe(&mut log, &path, &skip(), t0(), OPEN_LIMIT);
            resolve_if_due(&mut log, &path, 0, false, t0() + hours(24), 3).unwrap();
        }
        let kept: Vec<&str> = log.resolved.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(kept, ["f2.rs", "f3.rs", "f4.rs"]);
        assert_eq!(
            log.totals.resolved_correct, 5,
            "lifetime totals outlive the log"
        );
    }

    #[test]
    fn a_clock_that_went_backwards_neither_panics_nor_resolves() {
        let mut log = watched("a.rs", t0());
        let past = t0() - hours(1000);
        assert_eq!(
            resolve_if_due(&mut log, "a.rs", 0, false, past, RESOLVED_LIMIT),
            None
        );
        assert!(log.open.contains_key("a.rs"));
        assert!(due(&log, past).is_empty());
        assert_eq!(stats(&log, past).due, 0);
        observe(&mut log, "a.rs", &skip(), past, OPEN_LIMIT);
        assert_eq!(log.open["a.rs"].reevaluate_at, t0() + hours(24));
    }

    #[test]
    fn a_far_future_clock_does_not_overflow_the_checkpoint() {
        let mut log = ObservationLog::default();
        let end = DateTime::<Utc>::MAX_UTC - hours(1);
        observe(&mut log, "a.rs", &skip(), end, OPEN_LIMIT);
        assert_eq!(log.open["a.rs"].reevaluate_at, DateTime::<Utc>::MAX_UTC);
        assert!(resolve_if_due(&mut log, "a.rs", 0, false, DateTime::<Utc>::MAX_UTC, 1).is_some());
    }

    // ---- reads: due, next_due, last_wrong, stats ----

    #[test]
    fn stats_on_an_empty_log_report_null_accuracy_never_nan() {
        let s = stats(&ObservationLog::default(), t0());
        assert_eq!(s.accuracy, None);
        assert_eq!(
            (s.watching, s.due, s.resolved, s.correct, s.wrong),
            (0, 0, 0, 0, 0)
        );
        assert!(s.by_category.is_empty());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["accuracy"], serde_json::Value::Null);
        assert!(!serde_json::to_string(&s).unwrap().contains("NaN"));
    }

    #[test]
    fn stats_after_one_correct_resolution_report_full_accuracy_and_category_counts() {
        let mut log = watched("a.rs", t0());
        observe(&mut log, "b.rs", &skip(), t0(), OPEN_LIMIT);
        observe(
            &mut log,
            "c.rs",
            &ObserveInput {
                status: "locked",
                ..skip()
            },
            t0(),
            OPEN_LIMIT,
        );
        resolve_if_due(&mut log, "a.rs", 0, false, t0() + hours(24), RESOLVED_LIMIT).unwrap();
        let s = stats(&log, t0() + hours(24));
        assert_eq!(s.accuracy, Some(1.0));
        assert_eq!((s.resolved, s.correct, s.wrong), (1, 1, 0));
        assert_eq!(s.watching, 1);
        assert_eq!(s.due, 1);
        assert_eq!(s.by_category["OBSERVE"], 2);
        assert_eq!(s.by_category["NO_VALUE"], 1);
    }

    #[test]
    fn accuracy_is_rounded_to_four_decimals() {
        let mut log = ObservationLog::default();
        log.totals.resolved_correct = 1;
        log.totals.resolved_wrong = 2;
        assert_eq!(stats(&log, t0()).accuracy, Some(0.3333));
        log.totals.resolved_correct = 2;
        log.totals.resolved_wrong = 1;
        assert_eq!(stats(&log, t0()).accuracy, Some(0.6667));
    }

    #[test]
    fn next_due_is_the_earliest_checkpoint() {
        assert_eq!(next_due(&ObservationLog::default()), None);
        let mut log = ObservationLog::default();
        observe(&mut log, "a.rs", &skip(), t0() + hours(5), OPEN_LIMIT);
        observe(
            &mut log,
            "b.rs",
            &ObserveInput {
                status: "stable",
                ..hesitant()
            },
            t0(),
            OPEN_LIMIT,
        );
        observe(
            &mut log,
            "c.rs",
            &ObserveInput {
                reason: "budget",
                ..skip()
            },
            t0() + hours(1),
            OPEN_LIMIT,
        );
        assert_eq!(next_due(&log), Some(t0() + hours(7)));
    }

    #[test]
    fn due_lists_exactly_the_elapsed_watches_sorted() {
        let mut log = ObservationLog::default();
        observe(&mut log, "z.rs", &skip(), t0(), OPEN_LIMIT);
        observe(&mut log, "a.rs", &skip(), t0() + hours(1), OPEN_LIMIT);
        observe(&mut log, "m.rs", &skip(), t0() + hours(3), OPEN_LIMIT);
        assert!(due(&log, t0() + hours(23)).is_empty());
        assert_eq!(due(&log, t0() + hours(24)), ["z.rs"]);
        assert_eq!(due(&log, t0() + hours(25)), ["a.rs", "z.rs"]);
        assert_eq!(due(&log, t0() + hours(30)), ["a.rs", "m.rs", "z.rs"]);
    }

    #[test]
    fn last_wrong_reports_only_when_the_most_recent_resolution_was_wrong() {
        let mut log = ObservationLog::default();
        assert_eq!(last_wrong(&log, "a.rs"), None);

        observe(&mut log, "a.rs", &skip(), t0(), OPEN_LIMIT);
        resolve_if_due(&mut log, "a.rs", 1, false, t0() + hours(2), RESOLVED_LIMIT);
        let wrong = last_wrong(&log, "a.rs").unwrap();
        assert_eq!(wrong.resolved, t0() + hours(2));
        assert_eq!(last_wrong(&log, "b.rs"), None);

        observe(
            &mut log,
            "a.rs",
            &ObserveInput {
                rollback_streak: 1,
                ..skip()
            },
            t0() + hours(3),
            OPEN_LIMIT,
        );
        resolve_if_due(&mut log, "a.rs", 1, false, t0() + hours(27), RESOLVED_LIMIT).unwrap();
        assert_eq!(
            last_wrong(&log, "a.rs"),
            None,
            "a later correct grading supersedes it"
        );
    }

    #[test]
    fn reads_never_change_the_log() {
        let log = watched("a.rs", t0());
        let before = log.clone();
        let later = t0() + hours(48);
        let _ = (
            due(&log, later),
            next_due(&log),
            last_wrong(&log, "a.rs"),
            stats(&log, later),
        );
        assert_eq!(log, before);
    }

    // ---- persistence ----

    #[test]
    fn the_log_round_trips_through_json() {
        let mut log = watched("a.rs", t0());
        observe(&mut log, "b.rs", &skip(), t0(), OPEN_LIMIT);
        resolve_if_due(&mut log, "b.rs", 1, false, t0() + hours(1), RESOLVED_LIMIT);
        let text = serde_json::to_string(&log).unwrap();
        let back: ObservationLog = serde_json::from_str(&text).unwrap();
        assert_eq!(back, log);
    }

    #[test]
    fn an_old_state_with_missing_fields_still_loads() {
        let empty: ObservationLog = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, ObservationLog::default());

        let old = serde_json::json!({
            "open": { "a.rs": {
                "first_ts": "2025-01-01T00:00:00Z",
                "last_ts": "2025-01-01T00:00:00Z",
                "reevaluate_at": "2025-01-02T00:00:00Z"
            }},
            "resolved": [ { "path": "b.rs", "correct": false } ]
        });
        let mut log: ObservationLog = serde_json::from_value(old).unwrap();
        let w = &log.open["a.rs"];
        assert_eq!(w.category, Category::Observe);
        assert_eq!(
            (w.observations, w.rollback_baseline, w.prediction.is_none()),
            (0, 0, true)
        );
        assert_eq!(
            last_wrong(&log, "b.rs").map(|r| r.path.as_str()),
            Some("b.rs")
        );

        // A watch without a recorded bet is graded as the only bet there is.
        let r =
            resolve_if_due(&mut log, "a.rs", 0, false, t0() + hours(24), RESOLVED_LIMIT).unwrap();
        assert!(r.predicted_stable && r.correct);
    }

    #[test]
    fn a_prediction_missing_its_fields_reads_as_a_stable_bet() {
        let p: Prediction = serde_json::from_str("{}").unwrap();
        assert!(p.stable);
    }

    /// The age index must evict exactly what a pass over every open watch
    /// would: the oldest `last_ts` other than the file in hand, ties to the
    /// smallest path, with watches looked at again, removed by grading or a
    /// verdict, and a clock that goes backwards.
    #[test]
    fn the_age_index_evicts_what_a_full_pass_would() {
        fn reference(open: &mut BTreeMap<String, Watch>, keep: &str, limit: usize) {
            if open.len() <= limit {
                return;
            }
            let oldest = open
                .iter()
                .filter(|(p, _)| p.as_str() != keep)
                .min_by_key(|(_, w)| w.last_ts)
                .map(|(p, _)| p.clone());
            open.remove(oldest.as_deref().unwrap_or(keep));
        }
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let limit = 7;
        let mut log = ObservationLog::default();
        let mut plain: BTreeMap<String, Watch> = BTreeMap::new();
        for step in 0..5_000 {
            let path = format!("f{}.rs", next(40));
            if next(10) == 0 {
                // Graded or given a verdict elsewhere: gone from the map only.
                log.open.remove(&path);
                plain.remove(&path);
                continue;
            }
            // Mostly forward, sometimes the same instant, sometimes back.
            let at = t0() + hours(step / 3 - next(4) as i64);
            observe(&mut log, &path, &skip(), at, limit);
            let mut previous = plain.remove(&path);
            if let Some(w) = &mut previous {
                w.last_ts = at;
            }
            let watch = previous.unwrap_or_else(|| log.open[&path].clone());
            plain.insert(path.clone(), watch);
            reference(&mut plain, &path, limit);
            let got: Vec<&String> = log.open.keys().collect();
            let want: Vec<&String> = plain.keys().collect();
            assert_eq!(got, want, "step {step}, {path} at {at}");
        }
    }
}
