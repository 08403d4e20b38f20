//! Exit codes: each names what a tick did, so a scheduler can tell them apart.

use crate::gate::wake::Reason;

pub const NONE: u8 = 0;
pub const ERROR: u8 = 1;
pub const USAGE: u8 = 2;
pub const BUSY: u8 = 20;
pub const RATE_LIMITED: u8 = 21;

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
}
