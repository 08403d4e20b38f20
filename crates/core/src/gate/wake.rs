//! The wake gate: has anything happened that needs work? One pure function.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::state::{Header, WakeState};

/// Why a tick woke, in order of precedence (first wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    FirstRun,
    ShaUnavailable,
    RepoChanged,
    EvidenceChanged,
    Backlog,
    /// A watched bet of observation mode reached its checkpoint.
    ObservationDue,
    /// A mature file's scheduled review is due.
    OpportunityDue,
    /// The autonomy allowance admits a reconsideration.
    AutonomyDue,
    None,
}

impl Reason {
    pub const ALL: [Reason; 9] = [
        Reason::FirstRun,
        Reason::ShaUnavailable,
        Reason::RepoChanged,
        Reason::EvidenceChanged,
        Reason::Backlog,
        Reason::ObservationDue,
        Reason::OpportunityDue,
        Reason::AutonomyDue,
        Reason::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FirstRun => "first_run",
            Reason::ShaUnavailable => "sha_unavailable",
            Reason::RepoChanged => "repo_changed",
            Reason::EvidenceChanged => "evidence_changed",
            Reason::Backlog => "backlog",
            Reason::ObservationDue => "observation_due",
            Reason::OpportunityDue => "opportunity_due",
            Reason::AutonomyDue => "autonomy_due",
            Reason::None => "none",
        }
    }
}

/// What the verdict is about, for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Detail {
    Change {
        from: String,
        to: String,
    },
    Unavailable {
        error: String,
    },
    Evidence {
        from: String,
        to: String,
    },
    Backlog {
        pending: u64,
        /// Files handed over while the advisor was off, now offered to it.
        #[serde(skip_serializing_if = "is_zero")]
        awaiting_advisor: u64,
        /// Held, deferred or failed files may be tried again since then.
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_due: Option<DateTime<Utc>>,
    },
    /// A watch passed its checkpoint.
    ObservationDue {
        due: DateTime<Utc>,
    },
    /// A scheduled review (opportunity) or a reconsideration (autonomy) of one file.
    File {
        path: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        trigger: Option<String>,
    },
    Unchanged {
        head: String,
        /// Why the autonomy admission said no, when it was asked.
        #[serde(skip_serializing_if = "Option::is_none")]
        autonomy: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub wake: bool,
    pub reason: Reason,
    pub detail: Option<Detail>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the tick observed before deciding.
#[derive(Debug, Clone, Copy)]
pub struct WakeInput<'a> {
    /// The head commit id, or the error that made it unknown.
    pub head: Result<&'a str, &'a str>,
    pub evidence: &'a str,
    pub now: DateTime<Utc>,
    /// The autonomy admission: `Ok((path, trigger))` when a file may be
    /// reconsidered, `Err(reason)` when it refused, `None` when not asked.
    pub autonomy: Option<Result<(&'a str, &'a str), &'a str>>,
    /// Who judges in this tick, e.g. `openai:gpt-4o-mini`; `None`: the
    /// advisor is off.
    pub advisor: Option<&'a str>,
}

/// The verdict. Unknown is never unchanged: a failed lookup wakes with its own
/// reason instead of comparing equal (or unequal) to the remembered head.
pub fn evaluate(state: &Header, input: &WakeInput) -> Verdict {
    let s = &state.wake;
    let wake = |reason, detail| Verdict {
        wake: true,
        reason,
        detail,
    };
    if s.last_head.is_none() && s.last_evidence.is_none() {
        return wake(Reason::FirstRun, None);
    }
    let head = match input.head {
        Ok(h) => h,
        Err(error) => {
            return wake(
                Reason::ShaUnavailable,
                Some(Detail::Unavailable {
                    error: error.to_string(),
                }),
            );
        }
    };
    if s.last_head.as_deref() != Some(head) {
        return wake(
            Reason::RepoChanged,
            Some(Detail::Change {
                from: s.last_head.clone().unwrap_or_default(),
                to: head.to_string(),
            }),
        );
    }
    if s.last_evidence.as_deref() != Some(input.evidence) {
        return wake(
            Reason::EvidenceChanged,
            Some(Detail::Evidence {
                from: s.last_evidence.clone().unwrap_or_default(),
                to: input.evidence.to_string(),
            }),
        );
    }
    if let Some(detail) = advisor_changed(state, input).or_else(|| waiting(state, input)) {
        let reason = match detail {
            Detail::Backlog { .. } => Reason::Backlog,
            _ => Reason::EvidenceChanged,
        };
        return wake(reason, Some(detail));
    }
    if let Some(due) = state.next_observation_due.filter(|d| *d <= input.now) {
        return wake(Reason::ObservationDue, Some(Detail::ObservationDue { due }));
    }
    if let Some(review) = state.next_review.as_ref().filter(|r| r.at <= input.now) {
        return wake(
            Reason::OpportunityDue,
            Some(Detail::File {
                path: review.path.clone(),
                trigger: None,
            }),
        );
    }
    if let Some(Ok((path, trigger))) = input.autonomy {
        return wake(
            Reason::AutonomyDue,
            Some(Detail::File {
                path: path.to_string(),
                trigger: Some(trigger.to_string()),
            }),
        );
    }
    Verdict {
        wake: false,
        reason: Reason::None,
        detail: Some(Detail::Unchanged {
            head: head.to_string(),
            autonomy: input.autonomy.and_then(|a| a.err()).map(str::to_string),
        }),
    }
}

/// A model's decisions are its own: another model than the one that made
/// them judges them again (an evidence change from one advisor to the other).
fn advisor_changed(state: &Header, input: &WakeInput) -> Option<Detail> {
    let a = input.advisor?;
    let from = state.decided_by.keys().find(|by| by.as_str() != a)?;
    Some(Detail::Evidence {
        from: from.clone(),
        to: a.to_string(),
    })
}

/// The backlog: files the batch left over, and what waits for the advisor
/// (due retries, hand-overs made while it was off), which wakes only when
/// the advisor could be asked.
fn waiting(state: &Header, input: &WakeInput) -> Option<Detail> {
    let askable = input.advisor.is_some()
        && crate::gate::retry::provider_free(state.provider_held_until, input.now);
    let awaiting_advisor = if askable { state.awaiting_advisor } else { 0 };
    let retry_due = state.next_retry.filter(|t| askable && *t <= input.now);
    (state.backlog_len > 0 || awaiting_advisor > 0 || retry_due.is_some()).then_some(
        Detail::Backlog {
            pending: state.backlog_len,
            awaiting_advisor,
            retry_due,
        },
    )
}

/// Fold a waking tick (and the no-ops counted since the last one) into the
/// counters. `settled` is false when the work could not learn the tree, so
/// the remembered head and evidence stay as they were and the next tick
/// tries again.
pub fn remember(
    s: &mut WakeState,
    verdict: &Verdict,
    unsaved_noops: u64,
    head: Option<&str>,
    evidence: &str,
    settled: bool,
    now: DateTime<Utc>,
) {
    // Counters saturate: the state must load whatever they reach.
    use crate::state::bounds::{add_count, bump};
    s.ticks = add_count(s.ticks, add_count(unsaved_noops, 1));
    s.noops = add_count(s.noops, unsaved_noops);
    if unsaved_noops > 0 {
        bump(&mut s.by_reason, "none", unsaved_noops);
    }
    s.wakes = add_count(s.wakes, 1);
    bump(&mut s.by_reason, verdict.reason.as_str(), 1);
    s.last_wake_reason = Some(verdict.reason.as_str().into());
    s.last_wake_ts = Some(now);
    if settled {
        if let Some(h) = head {
            s.last_head = Some(h.to_string());
        }
        s.last_evidence = Some(evidence.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const SHA_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn settled() -> Header {
        Header {
            schema: 1,
            wake: WakeState {
                last_head: Some(SHA_A.into()),
                last_evidence: Some("ev1".into()),
                ..WakeState::default()
            },
            ..Header::default()
        }
    }

    fn input<'a>(head: Result<&'a str, &'a str>, evidence: &'a str) -> WakeInput<'a> {
        WakeInput {
            head,
            evidence,
            now: "2026-06-16T12:00:00Z".parse().unwrap(),
            autonomy: None,
            advisor: None,
        }
    }

    #[test]
    fn first_run_when_nothing_is_remembered() {
        let v = evaluate(&Header::default(), &input(Ok(SHA_A), "ev1"));
        assert_eq!((v.wake, v.reason), (true, Reason::FirstRun));
    }

    #[test]
    fn first_run_outranks_an_unavailable_head() {
        let v = evaluate(&Header::default(), &input(Err("down"), "ev1"));
        assert_eq!(v.reason, Reason::FirstRun);
    }

    #[test]
    fn sha_unavailable_never_masquerades_as_unchanged() {
        let v = evaluate(&settled(), &input(Err("git log failed"), "ev1"));
        assert_eq!(
            v,
            Verdict {
                wake: true,
                reason: Reason::ShaUnavailable,
                detail: Some(Detail::Unavailable {
                    error: "git log failed".into()
                }),
            }
        );
    }

    #[test]
    fn sha_unavailable_never_overwrites_the_remembered_head() {
        let mut s = settled().wake;
        let v = evaluate(&settled(), &input(Err("down"), "ev1"));
        remember(&mut s, &v, 0, None, "ev1", true, Utc::now());
        assert_eq!(s.last_head.as_deref(), Some(SHA_A));
    }

    #[test]
    fn none_identical_head_and_evidence_nothing_due_means_no_wake() {
        let v = evaluate(&settled(), &input(Ok(SHA_A), "ev1"));
        assert_eq!(
            v,
            Verdict {
                wake: false,
                reason: Reason::None,
                detail: Some(Detail::Unchanged {
                    head: SHA_A.into(),
                    autonomy: None
                }),
            }
        );
    }

    #[test]
    fn precedence_repo_change_outranks_evidence_and_backlog() {
        let mut h = settled();
        h.backlog_len = 3;
        let v = evaluate(&h, &input(Ok(SHA_B), "ev2"));
        assert_eq!(v.reason, Reason::RepoChanged);
        let v = evaluate(&h, &input(Ok(SHA_A), "ev2"));
        assert_eq!(v.reason, Reason::EvidenceChanged);
        let v = evaluate(&h, &input(Ok(SHA_A), "ev1"));
        assert_eq!(v.reason, Reason::Backlog);
    }

    #[test]
    fn invariant_6_precedence_order_is_fixed() {
        let names: Vec<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            names,
            [
                "first_run",
                "sha_unavailable",
                "repo_changed",
                "evidence_changed",
                "backlog",
                "observation_due",
                "opportunity_due",
                "autonomy_due",
                "none"
            ]
        );
        assert!(Reason::ALL.windows(2).all(|w| w[0] < w[1]));
    }

    use crate::state::NextReview;

    #[test]
    fn precedence_covers_all_nine_reasons() {
        // Start with every reason present, then take them away one by one:
        // each time the next one in the fixed order must win.
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        let mut h = settled();
        h.backlog_len = 1;
        h.next_observation_due = Some(now);
        h.next_review = Some(NextReview {
            at: now,
            path: "a.js".into(),
        });
        let mut head: Result<&str, &str> = Err("down");
        let mut evidence = "ev2";
        let mut autonomy = Some(Ok(("b.js", "runtime_error")));
        let mut seen = Vec::new();
        let first = evaluate(
            &Header::default(),
            &WakeInput {
                head: Err("down"),
                evidence,
                now,
                autonomy,
                advisor: None,
            },
        );
        seen.push(first.reason);
        for step in 0..8 {
            let v = evaluate(
                &h,
                &WakeInput {
                    head,
                    evidence,
                    now,
                    autonomy,
                    advisor: None,
                },
            );
            seen.push(v.reason);
            match step {
                0 => head = Ok(SHA_B),
                1 => head = Ok(SHA_A),
                2 => evidence = "ev1",
                3 => h.backlog_len = 0,
                4 => h.next_observation_due = Some(now + chrono::Duration::seconds(1)),
                5 => h.next_review = None,
                6 => autonomy = Some(Err("no_trigger")),
                _ => {}
            }
        }
        assert_eq!(seen, Reason::ALL);
    }

    #[test]
    fn a_due_retry_wakes_with_backlog_only_when_the_advisor_could_be_asked() {
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        let mut h = settled();
        h.next_retry = Some(now);
        let on = WakeInput {
            advisor: Some("openai:gpt-4o-mini"),
            ..input(Ok(SHA_A), "ev1")
        };
        let v = evaluate(&h, &on);
        assert_eq!(v.reason, Reason::Backlog);
        assert_eq!(
            v.detail,
            Some(Detail::Backlog {
                pending: 0,
                awaiting_advisor: 0,
                retry_due: Some(now)
            })
        );
        // Not yet due, no advisor, or the provider still held: no wake.
        h.next_retry = Some(now + chrono::Duration::seconds(1));
        assert_eq!(evaluate(&h, &on).reason, Reason::None);
        h.next_retry = Some(now);
        assert_eq!(evaluate(&h, &input(Ok(SHA_A), "ev1")).reason, Reason::None);
        h.provider_held_until = Some(now + chrono::Duration::minutes(5));
        assert_eq!(evaluate(&h, &on).reason, Reason::None);
    }

    #[test]
    fn a_model_change_is_an_evidence_change_an_advisor_switched_off_is_not() {
        let mut h = settled();
        h.decided_by.insert("openai:gpt-4o-mini".into(), 3);
        let v = evaluate(
            &h,
            &WakeInput {
                advisor: Some("openai:gpt-4o"),
                ..input(Ok(SHA_A), "ev1")
            },
        );
        assert_eq!(v.reason, Reason::EvidenceChanged);
        let same = WakeInput {
            advisor: Some("openai:gpt-4o-mini"),
            ..input(Ok(SHA_A), "ev1")
        };
        assert_eq!(evaluate(&h, &same).reason, Reason::None);
        assert_eq!(evaluate(&h, &input(Ok(SHA_A), "ev1")).reason, Reason::None);
    }

    #[test]
    fn existing_non_autonomy_wake_still_wins_over_a_triggered_autonomy_due() {
        let mut h = settled();
        h.backlog_len = 2;
        let v = evaluate(
            &h,
            &WakeInput {
                autonomy: Some(Ok(("a.js", "rollback"))),
                ..input(Ok(SHA_A), "ev1")
            },
        );
        assert_eq!(v.reason, Reason::Backlog);
    }

    #[test]
    fn a_refused_autonomy_admission_is_named_on_a_noop() {
        let v = evaluate(
            &settled(),
            &WakeInput {
                autonomy: Some(Err("reason_already_answered")),
                ..input(Ok(SHA_A), "ev1")
            },
        );
        assert_eq!(
            v.detail,
            Some(Detail::Unchanged {
                head: SHA_A.into(),
                autonomy: Some("reason_already_answered".into())
            })
        );
    }

    #[test]
    fn remember_folds_unsaved_noops_into_the_counters() {
        let mut s = settled().wake;
        let v = evaluate(&settled(), &input(Ok(SHA_B), "ev1"));
        let now: DateTime<Utc> = "2026-06-16T12:00:00Z".parse().unwrap();
        remember(&mut s, &v, 359, Some(SHA_B), "ev1", true, now);
        assert_eq!((s.ticks, s.wakes, s.noops), (360, 1, 359));
        assert_eq!(s.by_reason.get("none"), Some(&359));
        assert_eq!(s.by_reason.get("repo_changed"), Some(&1));
        assert_eq!(s.last_head.as_deref(), Some(SHA_B));
        assert_eq!(s.last_wake_reason.as_deref(), Some("repo_changed"));
    }

    #[test]
    fn an_unsettled_wake_keeps_head_and_evidence_for_the_next_try() {
        let mut s = settled().wake;
        let v = evaluate(&settled(), &input(Ok(SHA_B), "ev2"));
        remember(&mut s, &v, 0, Some(SHA_B), "ev2", false, Utc::now());
        assert_eq!(s.last_head.as_deref(), Some(SHA_A));
        assert_eq!(s.last_evidence.as_deref(), Some("ev1"));
        assert_eq!(s.wakes, 1);
    }
}
