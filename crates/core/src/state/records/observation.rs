//! Observation mode's open watches, graded bets and totals, as the state
//! keeps them; `gate::observation` labels, opens and grades them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The four kinds of "did nothing", folded into three labels (a budget deferral
/// is an `Observe` with a short window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Category {
    /// Nothing needed and nothing to learn: a frozen or trusted module.
    NoValue,
    /// Skipped by default, not by judgement: a blind spot, not confidence.
    InsufficientData,
    /// Nothing needed now, but the bet that it stays stable is worth grading.
    Observe,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::NoValue => "NO_VALUE",
            Category::InsufficientData => "INSUFFICIENT_DATA",
            Category::Observe => "OBSERVE",
        }
    }
}

/// A falsifiable bet: "this file stays stable until the checkpoint".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    // A missing field is read as the only bet ever placed.
    #[serde(default = "yes")]
    pub stable: bool,
    #[serde(default)]
    pub risk: String,
    #[serde(default)]
    pub problem_probability: f64,
}

fn yes() -> bool {
    true
}

/// One open bet on one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Watch {
    // Only OBSERVE opens a watch, so that is what a missing label means.
    #[serde(default = "observe_category")]
    pub category: Category,
    #[serde(default)]
    pub prediction: Option<Prediction>,
    pub first_ts: DateTime<Utc>,
    pub last_ts: DateTime<Utc>,
    pub reevaluate_at: DateTime<Utc>,
    #[serde(default)]
    pub rollback_baseline: u32,
    #[serde(default)]
    pub observations: u64,
}

fn observe_category() -> Category {
    Category::Observe
}

/// A graded bet.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Resolution {
    pub path: String,
    pub correct: bool,
    /// "window-elapsed" | "incident-detected".
    pub reason: String,
    pub predicted_stable: bool,
    pub observed_stable: bool,
    pub opened: DateTime<Utc>,
    pub resolved: DateTime<Utc>,
    pub observations: u64,
}

/// Lifetime counters: they outlive the bounded logs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub by_category: BTreeMap<String, u64>,
    pub resolved_correct: u64,
    pub resolved_wrong: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ObservationLog {
    pub open: BTreeMap<String, Watch>,
    pub resolved: VecDeque<Resolution>,
    pub totals: Totals,
    /// The open watches by age, built at the first eviction of a tick and
    /// never saved: a first run evicts once per file past the limit, and a
    /// pass over every open watch each time was a sixth of its CPU.
    #[serde(skip)]
    pub(crate) age: AgeIndex,
}

/// The open watches by age: `(last_ts, path)`, oldest (then smallest path)
/// first. While every open watch was last looked at the same instant (a
/// first run opens each at the tick's time) the oldest is the smallest
/// path, which `open`'s own order gives: no heap, no copy of a path per
/// file. Otherwise a heap whose entries go stale when a watch is removed
/// or looked at again; they are checked against `open` when they come to
/// the top, so only `observe`, which sets `last_ts`, has to push.
#[derive(Debug, Clone, Default)]
pub(crate) enum AgeIndex {
    /// Not built this tick: the next eviction looks.
    #[default]
    Unknown,
    /// Every open watch has this `last_ts`.
    Uniform(DateTime<Utc>),
    Heap(BinaryHeap<Reverse<Aged>>),
}

/// When a watch was last looked at, and its path.
type Aged = (DateTime<Utc>, String);

impl PartialEq for AgeIndex {
    // A cache: two logs with the same watches are equal whatever it holds.
    fn eq(&self, _: &AgeIndex) -> bool {
        true
    }
}

impl AgeIndex {
    pub(crate) fn touched(&mut self, at: DateTime<Utc>, path: &str) {
        match self {
            AgeIndex::Unknown => {}
            AgeIndex::Uniform(t) if *t == at => {}
            AgeIndex::Uniform(_) => *self = AgeIndex::Unknown,
            AgeIndex::Heap(heap) => heap.push(Reverse((at, path.to_string()))),
        }
    }

    /// The oldest open watch other than `keep`, by `last_ts` then path.
    pub(crate) fn oldest(&mut self, open: &BTreeMap<String, Watch>, keep: &str) -> Option<String> {
        if matches!(self, AgeIndex::Unknown) {
            let mut times = open.values().map(|w| w.last_ts);
            *self = match times.next() {
                Some(t) if times.all(|u| u == t) => AgeIndex::Uniform(t),
                _ => AgeIndex::Heap(
                    open.iter()
                        .map(|(p, w)| Reverse((w.last_ts, p.clone())))
                        .collect(),
                ),
            };
        }
        let heap = match self {
            AgeIndex::Uniform(_) => return open.keys().find(|p| *p != keep).cloned(),
            AgeIndex::Heap(heap) => heap,
            AgeIndex::Unknown => unreachable!("set just above"),
        };
        let mut kept = None;
        let found = loop {
            let Some(Reverse((at, path))) = heap.pop() else {
                break None;
            };
            if open.get(&path).is_none_or(|w| w.last_ts != at) {
                continue;
            }
            if path == keep {
                kept = Some(Reverse((at, path)));
                continue;
            }
            break Some(path);
        };
        heap.extend(kept);
        found
    }
}
