//! Refs an agent moved: an agent that commits on the watched branch (or
//! moves the clone's `HEAD`) instead of leaving its work in its worktree is
//! noticed, and what it committed is remembered as its own output, so the
//! next tick does not pay to judge the agent's own commit.

use super::Work;
use crate::llm::worktree::Moved;
use crate::source::Change;
use crate::state::State;

impl Work<'_> {
    /// Note each ref the agent moved while judging `path`, and remember the
    /// content of every watched file its commits changed as its own output.
    pub(super) fn agent_moved(&mut self, state: &mut State, path: &str, moved: &[Moved]) {
        // `HEAD` and the watched branch often move together: one range is
        // remembered once, so a rewrite is not counted twice.
        let mut ranges: Vec<(&str, &str)> = Vec::new();
        for m in moved {
            let short = |id: &Option<String>| {
                id.as_deref()
                    .map_or("nothing".to_string(), |i| i.chars().take(12).collect())
            };
            self.notes.push(format!(
                "the agent moved `{}` of the clone from {} to {} while judging `{path}`; \
                 sentinel moves no ref back: check the clone's branches, and what it \
                 committed there is taken as the agent's own output",
                m.name,
                short(&m.from),
                short(&m.to)
            ));
            if let (Some(from), Some(to), false) = (&m.from, &m.to, m.switched)
                && from != to
                && !ranges.contains(&(from.as_str(), to.as_str()))
            {
                ranges.push((from, to));
                self.remember_commits(state, from, to);
            }
        }
    }

    /// The content of each watched file that differs between `from` and `to`
    /// is what the agent wrote.
    fn remember_commits(&mut self, state: &mut State, from: &str, to: &str) {
        let changes = match self.source.changes(from, to) {
            Ok(c) => c,
            Err(e) => {
                self.notes.push(format!(
                    "cannot tell what the agent committed ({e}); its commit may wake the next tick"
                ));
                return;
            }
        };
        let limit = self.cfg.max_file_bytes;
        for change in changes {
            let Change::Upsert { path, blob } = change else {
                continue;
            };
            if !state.files.contains_key(&path) {
                continue;
            }
            let Ok(bytes) = self.source.read(&blob, limit) else {
                continue;
            };
            let hash = super::content_hash(&bytes);
            if let Some(record) = state.files.get_mut(&path) {
                crate::gate::rewrites::record(record, &hash, self.cfg.now);
            }
        }
    }
}
