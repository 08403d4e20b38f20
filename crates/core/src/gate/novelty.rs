//! The novelty gate: have I already answered exactly this question?

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::state::{Decision, FileRecord, Outcome};

/// Everything that would change the answer for one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts<'a> {
    /// First 16 hex digits of the sha256 of the file's bytes.
    pub content: &'a str,
    pub risk: &'a str,
    pub role: &'a str,
    pub confidence: f64,
    pub status: &'a str,
    pub rollback_streak: u32,
    pub penalty: u32,
    pub evidence: &'a str,
    /// The file's local dependencies with their content ids; `None` when they
    /// could not all be resolved.
    pub deps: Option<&'a [(&'a str, &'a str)]>,
}

/// The names of the fingerprint's parts, in order, for `explain`.
pub const PART_NAMES: [&str; 9] = [
    "content",
    "risk",
    "role",
    "confidence",
    "status",
    "rollback_streak",
    "penalty",
    "evidence",
    "dependencies",
];

/// A human-readable fingerprint:
/// `a1b2c3d4e5f60718|high|source|0.87|under_observation|0|0|ev:3f9a1c0d2b7e|deps:-`.
pub fn fingerprint(p: &Parts) -> String {
    // Built by pushes, not `format!` or `write!`: every file of a first run
    // gets one, and the formatting machinery cost more than the rest.
    let mut out = String::with_capacity(
        p.content.len() + p.risk.len() + p.role.len() + p.status.len() + p.evidence.len() + 48,
    );
    for part in [p.content, p.risk, p.role] {
        out.push_str(part);
        out.push('|');
    }
    push_confidence(&mut out, p.confidence);
    out.push('|');
    out.push_str(p.status);
    out.push('|');
    push_u64(&mut out, u64::from(p.rollback_streak));
    out.push('|');
    push_u64(&mut out, u64::from(p.penalty));
    out.push_str("|ev:");
    out.push_str(p.evidence);
    out.push_str("|deps:");
    push_deps(&mut out, p.deps);
    out
}

/// `n` in decimal, as `{}` writes it.
fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}

/// The confidence with two decimals, rounded so that float jitter
/// (0.8700001 against 0.87) is not novelty. A whole number of hundredths
/// is written as such: `{:.2}` of `n / 100.0` spells `n` exactly whenever
/// `n` is far below 2^53, and formatting a float costs more than the rest.
fn push_confidence(out: &mut String, confidence: f64) {
    use std::fmt::Write;
    let hundredths = (confidence * 100.0).round();
    if hundredths.is_sign_positive() && hundredths <= 1e12 {
        let n = hundredths as u64;
        push_u64(out, n / 100);
        out.push('.');
        let cents = (n % 100) as u8;
        out.push(char::from(b'0' + cents / 10));
        out.push(char::from(b'0' + cents % 10));
    } else {
        let _ = write!(out, "{:.2}", hundredths / 100.0);
    }
}

fn push_deps(out: &mut String, deps: Option<&[(&str, &str)]>) {
    match deps {
        None => out.push_str("unknown"),
        Some([]) => out.push('-'),
        Some(list) => {
            let mut h = Sha256::new();
            let mut add = |(path, blob): &(&str, &str)| {
                h.update(path.as_bytes());
                h.update([0u8]);
                h.update(blob.as_bytes());
                h.update([0u8]);
            };
            // Hashed in order: one dependency, the usual case, needs no sort.
            if let [one] = list {
                add(one);
            } else {
                let mut sorted: Vec<_> = list.iter().collect();
                sorted.sort();
                sorted.into_iter().for_each(add);
            }
            out.push_str(&hex::encode(&h.finalize()[..6]));
        }
    }
}

/// Split a fingerprint into its named parts.
pub fn split(fp: &str) -> Vec<(&'static str, String)> {
    let mut fields: Vec<&str> = fp.splitn(9, '|').collect();
    fields.resize(9, "");
    PART_NAMES
        .iter()
        .zip(fields)
        .map(|(name, value)| (*name, value.to_string()))
        .collect()
}

/// Why a file is, or is not, novel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Novelty {
    #[serde(rename = "first-seen")]
    FirstSeen,
    #[serde(rename = "dependencies-unknown")]
    DependenciesUnknown,
    #[serde(rename = "changed")]
    Changed,
    #[serde(rename = "prev-not-reusable")]
    PrevNotReusable,
    /// The remembered decision is another advisor's: a model's answer and
    /// this tick's model differ, or a hand-over made with the advisor off
    /// meets an advisor.
    #[serde(rename = "advisor-changed")]
    AdvisorChanged,
    #[serde(rename = "unchanged")]
    Unchanged,
}

impl Novelty {
    pub fn is_novel(self) -> bool {
        self != Novelty::Unchanged
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Novelty::FirstSeen => "first-seen",
            Novelty::DependenciesUnknown => "dependencies-unknown",
            Novelty::Changed => "changed",
            Novelty::PrevNotReusable => "prev-not-reusable",
            Novelty::AdvisorChanged => "advisor-changed",
            Novelty::Unchanged => "unchanged",
        }
    }
}

/// Compare the current fingerprint with what is remembered. `advisor` is the
/// identity of this tick's advisor (`None`: off). A decision stands for the
/// advisor that made it: a model's answer is judged again by another model,
/// and a hand-over made with the advisor off is offered to the advisor once
/// it is on. With the advisor off, what a model decided stands (an EVOLVE
/// too: it is asked again only when there is an advisor to ask).
pub fn evaluate(
    prev: Option<&FileRecord>,
    fp: &str,
    deps_known: bool,
    advisor: Option<&str>,
) -> Novelty {
    let Some(prev) = prev.filter(|p| p.fingerprint.is_some()) else {
        return Novelty::FirstSeen;
    };
    if !deps_known {
        return Novelty::DependenciesUnknown;
    }
    if prev.fingerprint.as_deref() != Some(fp) {
        return Novelty::Changed;
    }
    let Some(d) = &prev.decision else {
        return Novelty::PrevNotReusable;
    };
    // A proxy's fallback answered as another model: that model's decision,
    // reused when that model is asked, and (said) when the one asked for it is.
    let by_another =
        |a: &str| d.by.as_deref().is_some_and(|b| b != a) && d.answered_by.as_deref() != Some(a);
    match (advisor, d.outcome) {
        (Some(_), Outcome::NeedsReview) => Novelty::AdvisorChanged,
        (Some(a), Outcome::LlmSkip | Outcome::Evolve) if by_another(a) => Novelty::AdvisorChanged,
        (None, Outcome::Evolve) => Novelty::Unchanged,
        (_, o) if o.is_reusable() => Novelty::Unchanged,
        _ => Novelty::PrevNotReusable,
    }
}

/// Record a fresh evaluation. A decision that is not reusable is kept for
/// the record but `evaluate` never replays it. Reuse counters restart when the fingerprint changes; `evaluations` keeps counting.
pub fn remember(record: &mut FileRecord, fp: &str, decision: Decision, now: DateTime<Utc>) {
    let same = record.fingerprint.as_deref() == Some(fp);
    if !same {
        record.reuses = 0;
        record.tokens_saved = 0;
    }
    record.fingerprint = Some(fp.to_string());
    record.decision = Some(decision);
    record.first_ts.get_or_insert(now);
    record.last_ts = now;
    // Counters saturate: a hand-edited record must not wrap or abort a tick.
    record.evaluations = crate::state::bounds::add_count(record.evaluations, 1);
}

/// Count a reuse and the tokens it is estimated to have saved.
pub fn reuse(record: &mut FileRecord, tokens: u64, now: DateTime<Utc>) {
    use crate::state::bounds::add_count;
    record.reuses = add_count(record.reuses, 1);
    record.tokens_saved = add_count(record.tokens_saved, tokens);
    record.last_ts = now;
}

/// The size of the prompt that a reuse avoided: `ceil(chars / 4) + 400`.
/// An estimate of avoided work, not a bill.
pub fn estimate_tokens(chars: u64) -> u64 {
    chars.div_ceil(4) + 400
}

/// Paths to evict so that at most `limit` files stay, oldest `last_ts` first.
/// An evicted file is simply first-seen again.
pub fn evict<'a>(
    files: impl Iterator<Item = (&'a String, &'a FileRecord)>,
    len: usize,
    limit: usize,
) -> Vec<String> {
    if limit == 0 || len <= limit {
        return Vec::new();
    }
    let mut by_age: Vec<(DateTime<Utc>, &String)> = files.map(|(p, r)| (r.last_ts, p)).collect();
    by_age.sort();
    by_age
        .into_iter()
        .take(len - limit)
        .map(|(_, p)| p.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_counters_at_u64_max_saturate_instead_of_wrapping() {
        let now: DateTime<Utc> = "2026-06-16T00:00:00Z".parse().unwrap();
        let mut r = FileRecord {
            reuses: u64::MAX,
            tokens_saved: u64::MAX,
            ..FileRecord::default()
        };
        reuse(&mut r, 500, now);
        let max = crate::state::bounds::MAX_COUNT;
        assert_eq!((r.reuses, r.tokens_saved), (max, max));
    }

    fn parts() -> Parts<'static> {
        Parts {
            content: "a1b2c3d4e5f60718",
            risk: "high",
            role: "source",
            confidence: 0.87,
            status: "under_observation",
            rollback_streak: 0,
            penalty: 0,
            evidence: "3f9a1c0d2b7e",
            deps: Some(&[]),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-06-16T00:00:00Z".parse().unwrap()
    }

    fn decided(outcome: Outcome) -> (FileRecord, String) {
        let fp = fingerprint(&parts());
        let mut r = FileRecord::default();
        remember(
            &mut r,
            &fp,
            Decision {
                answered_by: None,
                outcome,
                reason: "r".into(),
                ts: now(),
                by: Some(match outcome {
                    Outcome::LocalSkip | Outcome::NeedsReview => "local".into(),
                    _ => "openai:gpt-4o-mini".into(),
                }),
            },
            now(),
        );
        (r, fp)
    }

    #[test]
    fn fingerprint_is_human_readable() {
        assert_eq!(
            fingerprint(&parts()),
            "a1b2c3d4e5f60718|high|source|0.87|under_observation|0|0|ev:3f9a1c0d2b7e|deps:-"
        );
    }

    #[test]
    fn fingerprint_tiny_confidence_jitter_within_rounding_does_not_flip_it() {
        let a = fingerprint(&Parts {
            confidence: 0.701,
            ..parts()
        });
        let b = fingerprint(&Parts {
            confidence: 0.704,
            ..parts()
        });
        let c = fingerprint(&Parts {
            confidence: 0.71,
            ..parts()
        });
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn fingerprint_covers_everything_that_would_change_the_answer() {
        let base = fingerprint(&parts());
        let deps = [("lib/b.js", "1111")];
        let deps2 = [("lib/b.js", "2222")];
        let variants = [
            Parts {
                content: "ffffffffffffffff",
                ..parts()
            },
            Parts {
                risk: "critical",
                ..parts()
            },
            Parts {
                role: "config",
                ..parts()
            },
            Parts {
                confidence: 0.5,
                ..parts()
            },
            Parts {
                status: "stable",
                ..parts()
            },
            Parts {
                rollback_streak: 1,
                ..parts()
            },
            Parts {
                penalty: 1,
                ..parts()
            },
            Parts {
                evidence: "000000000000",
                ..parts()
            },
            Parts {
                deps: Some(&deps),
                ..parts()
            },
            Parts {
                deps: None,
                ..parts()
            },
        ];
        for v in &variants {
            assert_ne!(fingerprint(v), base, "{v:?}");
        }
        assert_ne!(
            fingerprint(&Parts {
                deps: Some(&deps),
                ..parts()
            }),
            fingerprint(&Parts {
                deps: Some(&deps2),
                ..parts()
            }),
            "a dependency's content id is part of the fingerprint"
        );
    }

    #[test]
    fn split_names_every_part() {
        let parts = split(&fingerprint(&parts()));
        assert_eq!(parts[0], ("content", "a1b2c3d4e5f60718".to_string()));
        assert_eq!(parts[8], ("dependencies", "deps:-".to_string()));
    }

    #[test]
    fn evaluate_first_seen_changed_unchanged() {
        let fp = fingerprint(&parts());
        assert_eq!(evaluate(None, &fp, true, None), Novelty::FirstSeen);
        let (r, fp) = decided(Outcome::LocalSkip);
        assert_eq!(evaluate(Some(&r), &fp, true, None), Novelty::Unchanged);
        assert_eq!(evaluate(Some(&r), "other", true, None), Novelty::Changed);
    }

    #[test]
    fn unknown_dependencies_are_never_unchanged() {
        let (r, fp) = decided(Outcome::LocalSkip);
        assert_eq!(
            evaluate(Some(&r), &fp, false, None),
            Novelty::DependenciesUnknown
        );
    }

    const MINI: Option<&str> = Some("openai:gpt-4o-mini");

    #[test]
    fn only_a_skip_is_reused() {
        for outcome in Outcome::ALL {
            let (r, fp) = decided(outcome);
            let expected = match outcome {
                Outcome::LocalSkip | Outcome::LlmSkip => Novelty::Unchanged,
                Outcome::NeedsReview => Novelty::AdvisorChanged,
                _ => Novelty::PrevNotReusable,
            };
            assert_eq!(evaluate(Some(&r), &fp, true, MINI), expected, "{outcome:?}");
        }
    }

    #[test]
    fn with_the_advisor_off_what_was_decided_stands() {
        for outcome in Outcome::ALL {
            let (r, fp) = decided(outcome);
            let expected = match outcome {
                Outcome::LocalSkip | Outcome::LlmSkip | Outcome::NeedsReview | Outcome::Evolve => {
                    Novelty::Unchanged
                }
                _ => Novelty::PrevNotReusable,
            };
            assert_eq!(evaluate(Some(&r), &fp, true, None), expected, "{outcome:?}");
        }
    }

    #[test]
    fn another_model_judges_again_only_what_a_model_judged() {
        let gpt4o = Some("openai:gpt-4o");
        for outcome in [Outcome::LlmSkip, Outcome::Evolve] {
            let (r, fp) = decided(outcome);
            assert_eq!(
                evaluate(Some(&r), &fp, true, gpt4o),
                Novelty::AdvisorChanged
            );
        }
        let (r, fp) = decided(Outcome::LocalSkip);
        assert_eq!(evaluate(Some(&r), &fp, true, gpt4o), Novelty::Unchanged);
        // Written before decisions named their maker: it stands.
        let (mut r, fp) = decided(Outcome::LlmSkip);
        r.decision.as_mut().unwrap().by = None;
        assert_eq!(evaluate(Some(&r), &fp, true, gpt4o), Novelty::Unchanged);
    }

    #[test]
    fn reuse_counters_reset_when_the_fingerprint_changes_evaluations_keep_counting() {
        let (mut r, fp) = decided(Outcome::LocalSkip);
        reuse(&mut r, 500, now());
        reuse(&mut r, 500, now());
        assert_eq!((r.reuses, r.tokens_saved, r.evaluations), (2, 1000, 1));
        let d = r.decision.clone().unwrap();
        remember(&mut r, &fp, d.clone(), now());
        assert_eq!((r.reuses, r.evaluations), (2, 2));
        remember(&mut r, "new-fp", d, now());
        assert_eq!((r.reuses, r.tokens_saved, r.evaluations), (0, 0, 3));
    }

    #[test]
    fn token_estimate_is_ceil_chars_over_four_plus_400() {
        assert_eq!(estimate_tokens(0), 400);
        assert_eq!(estimate_tokens(1), 401);
        assert_eq!(estimate_tokens(18_743), 5_086);
    }

    #[test]
    fn eviction_takes_the_oldest_last_ts_first() {
        let mut files = std::collections::BTreeMap::new();
        for (i, p) in ["c", "a", "b"].iter().enumerate() {
            let r = FileRecord {
                last_ts: now() + chrono::Duration::seconds(i as i64),
                ..FileRecord::default()
            };
            files.insert(p.to_string(), r);
        }
        assert_eq!(evict(files.iter(), 3, 2), vec!["c".to_string()]);
        assert!(evict(files.iter(), 3, 3).is_empty());
    }

    #[test]
    fn the_fingerprint_built_by_pushes_is_the_formatted_one() {
        let pairs = [(0, 0), (1, 9), (10, 99), (100, 1000), (123_456, 7)];
        for (streak, penalty) in pairs.into_iter().chain([(u32::MAX, u32::MAX)]) {
            for confidence in [0.0, 0.05, 0.5, 0.87, 1.0, 12.345] {
                let p = Parts {
                    rollback_streak: streak,
                    penalty,
                    confidence,
                    ..parts()
                };
                let expected = format!(
                    "{}|{}|{}|{:.2}|{}|{streak}|{penalty}|ev:{}|deps:-",
                    p.content,
                    p.risk,
                    p.role,
                    (confidence * 100.0).round() / 100.0,
                    p.status,
                    p.evidence
                );
                assert_eq!(fingerprint(&p), expected);
            }
        }
    }

    #[test]
    fn confidence_is_spelled_as_the_float_formatter_spells_it() {
        let mut values: Vec<f64> = (-300..=300).map(|i| f64::from(i) * 0.005).collect();
        values.extend((0..=2000).map(|i| f64::from(i) / 1000.0));
        values.extend([
            0.0,
            -0.0,
            -0.001,
            0.004999,
            0.005,
            0.015,
            0.125,
            0.7,
            0.87,
            0.95,
            0.99,
            1.0,
            1e9,
            1e10 + 0.5,
            1.5e12,
            1e13,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ]);
        for c in values {
            let mut fast = String::new();
            push_confidence(&mut fast, c);
            assert_eq!(fast, format!("{:.2}", (c * 100.0).round() / 100.0), "{c:?}");
        }
    }

    #[test]
    fn dependencies_are_hashed_sorted_whatever_order_they_come_in() {
        let deps_of = |list: &[(&str, &str)]| {
            let fp = fingerprint(&Parts {
                deps: Some(list),
                ..parts()
            });
            fp.rsplit_once("deps:").unwrap().1.to_string()
        };
        let sorted = [("a.js", "1111"), ("b/c.js", "2222"), ("b/d.js", "0000")];
        let mut h = Sha256::new();
        for (path, blob) in sorted {
            h.update(format!("{path}\0{blob}\0").as_bytes());
        }
        let expected = hex::encode(&h.finalize()[..6]);
        assert_eq!(deps_of(&sorted), expected);
        assert_eq!(deps_of(&[sorted[2], sorted[0], sorted[1]]), expected);
        assert_eq!(deps_of(&[sorted[1], sorted[2], sorted[0]]), expected);
        let mut one = Sha256::new();
        one.update(b"a.js\x001111\x00");
        assert_eq!(deps_of(&sorted[..1]), hex::encode(&one.finalize()[..6]));
    }
}
