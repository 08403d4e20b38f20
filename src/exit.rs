//! Exit codes: each names what a tick did, so a scheduler can tell them apart.

use crate::gate::wake::Reason;

pub const NONE: u8 = 0;
pub const ERROR: u8 = 1;
pub const USAGE: u8 = 2;
pub const BUSY: u8 = 20;
pub const RATE_LIMITED: u8 = 21;

/// A usage error found after the flags parsed (flags that contradict each
/// other or the repository): the binary exits 2 with its message, like a
/// flag clap refused, so a scheduler tells it from a failing tick (1).
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// The exit code of a command that failed with `err`.
pub fn for_error(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<Usage>().is_some() {
        USAGE
    } else {
        ERROR
    }
}

/// The exit code of a tick that ended with this verdict.
pub fn for_reason(reason: Reason) -> u8 {
    match reason {
        Reason::None => NONE,
        Reason::FirstRun => 10,
        Reason::ShaUnavailable => 11,
        Reason::RepoChanged => 12,
        Reason::EvidenceChanged => 13,
        Reason::Backlog => 14,
        Reason::ObservationDue => 15,
        Reason::OpportunityDue => 16,
        Reason::AutonomyDue => 17,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_match_the_documented_table() {
        let codes: Vec<(&str, u8)> = Reason::ALL
            .iter()
            .map(|r| (r.as_str(), for_reason(*r)))
            .collect();
        assert_eq!(
            codes,
            [
                ("first_run", 10),
                ("sha_unavailable", 11),
                ("repo_changed", 12),
                ("evidence_changed", 13),
                ("backlog", 14),
                ("observation_due", 15),
                ("opportunity_due", 16),
                ("autonomy_due", 17),
                ("none", 0),
            ]
        );
        assert_eq!((ERROR, USAGE, BUSY, RATE_LIMITED), (1, 2, 20, 21));
    }

    #[test]
    fn a_usage_error_exits_2_and_any_other_error_1() {
        let usage = anyhow::Error::new(Usage("`--x` is wrong".into()));
        assert_eq!(for_error(&usage), USAGE);
        assert_eq!(usage.to_string(), "`--x` is wrong");
        assert_eq!(for_error(&anyhow::anyhow!("disk full")), ERROR);
    }
}
