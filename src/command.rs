//! What the commands share below `app` and `record`: the source a command
//! reads, an existing state under its lock, and the redacted stdout.

use std::io::Write;

use anyhow::{Result, anyhow, bail};

use crate::cli::{Environment, SourceArgs, SourceChoice};
use crate::source::Source;
use crate::source::git::GitSource;
use crate::source::gitlab::{DEFAULT_MAX_ARCHIVE_BYTES, GitLabSource};
use crate::state::store;

/// The source the flags choose, and the revision it reads.
pub fn make_source(args: &SourceArgs, env: &Environment) -> Result<(Box<dyn Source>, String)> {
    build_source(args.choose(env)?, DEFAULT_MAX_ARCHIVE_BYTES)
}

pub fn build_source(choice: SourceChoice, max_archive: u64) -> Result<(Box<dyn Source>, String)> {
    let rev = choice.rev();
    let source: Box<dyn Source> = match choice {
        SourceChoice::Git { repo, branch, path } => Box::new(GitSource::new(repo, branch, path)),
        SourceChoice::Gitlab(cfg) => Box::new(
            GitLabSource::new(cfg)
                .map_err(|e| anyhow!("{e}"))?
                .with_max_archive_bytes(max_archive),
        ),
    };
    Ok((source, rev))
}

/// An existing state under its lock, for a command that changes it outside
/// a tick; `None` (after saying so on stderr) while a tick holds the lock.
pub fn locked_state(
    path: &std::path::Path,
    what: &str,
) -> Result<Option<(store::StateLock, crate::state::State)>> {
    if !path.exists() {
        bail!(
            "no state file at `{}`; run `sentinel tick` first, or point --state at an existing one",
            path.display()
        );
    }
    let lock = match store::try_lock(path)? {
        store::LockAttempt::Acquired(lock) => lock,
        store::LockAttempt::Busy(lock) => {
            eprintln!(
                "sentinel: busy (lock {} held by a running tick); nothing was {what}, try again",
                lock.display()
            );
            return Ok(None);
        }
    };
    let mut state = store::load(path)?.ok_or_else(|| {
        anyhow!(
            "no state file at `{}`; run `sentinel tick` first",
            path.display()
        )
    })?;
    // The command may change records: their shards' summaries are computed
    // by the tick's rules, as a tick would.
    state.files.set_rules(crate::tick::SUMMARY_RULES);
    Ok(Some((lock, state)))
}

/// Write to stdout, redacted. A reader that went away (`sentinel stats |
/// head`) is not an error: the output was wanted no further.
pub fn emit(text: impl std::fmt::Display) -> Result<()> {
    write_stdout(&crate::redact::text(&text.to_string()))
}

/// Write to stdout as it is (the caller redacted it).
pub fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match write!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}
