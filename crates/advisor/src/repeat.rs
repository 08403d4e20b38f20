//! An agent failure that repeats the same way is a configuration error.
//!
//! A run refused as root, a variable the agent's CLI needs and was not
//! given, a CLI that is not logged in, an edit it may not make: each fails
//! identically on every tick, and a circuit or a backoff would only retry it
//! for days behind a green job. So the last such failure is kept beside the
//! state (its class, its words, and a digest of the agent's configuration),
//! and the same failure on the next tick with the same configuration stops
//! the tick with exit 1, and every tick after it, until the configuration
//! changes (or the file is removed). Any answer, or another kind of failure,
//! clears it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::protocol::Class;
use sentinel_io::safe_fs;

/// Failures that say something about the set-up, not about the provider's
/// weather: only these are remembered.
const SETUP_CLASSES: [Class; 3] = [Class::Auth, Class::Request, Class::Unknown];

/// Ticks in a row with the same failure that make it a configuration error.
const TICKS: u32 = 2;

/// The remembered file is a few hundred bytes; more is not ours.
const MAX_BYTES: u64 = 64 << 10;

/// Variables that change on every run or job without changing what the
/// agent can do: left out of the configuration's digest.
const VOLATILE: [&str; 5] = ["_", "PWD", "OLDPWD", "SHLVL", "SENTINEL_NOW"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Last {
    /// Digest of the agent's configuration when it failed.
    config: String,
    class: String,
    /// The failure's words with numbers and the file's path taken out, so
    /// that a request id or another file does not make it another failure.
    words: String,
    /// The failure's reason as it was reported (already redacted).
    reason: String,
    /// Ticks in a row it failed this way.
    ticks: u32,
}

/// The memory of the last setup failure, beside the state.
#[derive(Debug)]
pub struct Repeats {
    path: PathBuf,
    config: String,
    /// Updated once per tick: the second file of one tick is not a second tick.
    seen_this_tick: bool,
}

impl Repeats {
    /// The memory at `path` for an agent whose configuration digests to `config`.
    pub fn new(path: PathBuf, config: String) -> Repeats {
        Repeats {
            path,
            config,
            seen_this_tick: false,
        }
    }

    /// The configuration error a tick must stop with before it runs the
    /// agent: the same failure twice in a row with this configuration.
    pub fn standing(&self) -> Option<String> {
        let last = self.load()?;
        (last.config == self.config && last.ticks >= TICKS).then(|| self.error(&last))
    }

    /// An answer: whatever failed before is over.
    pub fn answered(&mut self) {
        if self.path.exists() {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// A run that failed with `class` and `reason` about `file`: the
    /// configuration error it makes, when it is the same failure as the
    /// last tick's.
    pub fn failed(&mut self, class: Class, reason: &str, file: &str) -> Option<String> {
        if !SETUP_CLASSES.contains(&class) {
            self.answered();
            return None;
        }
        if std::mem::replace(&mut self.seen_this_tick, true) {
            return None;
        }
        let words = words(&reason.replace(file, "<file>"));
        let ticks = match self.load() {
            Some(l) if l.config == self.config && l.class == class.as_str() && l.words == words => {
                l.ticks.saturating_add(1)
            }
            _ => 1,
        };
        let last = Last {
            config: self.config.clone(),
            class: class.as_str().to_string(),
            words,
            reason: reason.chars().take(300).collect(),
            ticks,
        };
        if let Ok(bytes) = serde_json::to_vec(&last) {
            let _ = safe_fs::replace(&self.path, &bytes, None);
        }
        (ticks >= TICKS).then(|| self.error(&last))
    }

    fn load(&self) -> Option<Last> {
        let bytes = safe_fs::read_bounded(&self.path, MAX_BYTES).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    fn error(&self, last: &Last) -> String {
        format!(
            "the agent failed the same way on {} ticks in a row with the same configuration \
             ({}: {}); that is a configuration error: {}; nothing more is run or spent until \
             the agent's command, `--agent-env`, its environment or its script changes, or \
             `sentinel reset --circuit` clears `{}`",
            last.ticks,
            last.class,
            last.reason,
            fix(&last.reason),
            self.path.display()
        )
    }
}

/// The next step for a failure, from its words.
fn fix(reason: &str) -> &'static str {
    let r = reason.to_ascii_lowercase();
    let has = |w: &str| r.contains(w);
    if has("root") && (has("dangerously") || has("bypass")) {
        "as root, Claude Code refuses `--dangerously-skip-permissions` and `bypassPermissions`: \
         use `--permission-mode acceptEdits` (the adapter's default)"
    } else if has("environment variable") {
        "the agent's CLI needs a variable sentinel does not pass on: name it with \
         `--agent-env NAME` (a Codex provider's `env_key`, `ANTHROPIC_API_KEY`)"
    } else if has("evolve without an edit") {
        "let the agent write its working copy (Claude Code `--permission-mode acceptEdits`, \
         Codex `--sandbox workspace-write`, a user that owns the worktree; docs/agents.md)"
    } else if has("not logged in") || has("login") || has("api key") || has("auth") {
        "log the agent's CLI in as the user sentinel runs as, or pass its key with \
         `--agent-env` (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`)"
    } else {
        "check the agent's command, flags and environment (docs/agents.md)"
    }
}

/// A failure's words without what changes from one run to the next (ids,
/// counts, times): a word holding a digit becomes `#`.
fn words(reason: &str) -> String {
    reason
        .split_whitespace()
        .map(|w| {
            if w.chars().any(|c| c.is_ascii_digit()) {
                "#"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Digest of what decides how an agent run goes: the command, the script
/// its first word names (its content), the secrets passed on (their names
/// and values), and the environment it inherits, less what changes on
/// every run (`VOLATILE`, the CI job's `CI_*`).
pub fn config_digest(
    command: &str,
    pass_env: &[String],
    env: impl Iterator<Item = (String, String)>,
) -> String {
    let mut h = Sha256::new();
    h.update(command.as_bytes());
    h.update([0]);
    let script = command.split_whitespace().next().map(Path::new);
    if let Some(bytes) = script.and_then(|p| safe_fs::read_bounded(p, 1 << 20).ok().flatten()) {
        h.update(&bytes);
    }
    h.update([0]);
    let mut vars: Vec<(String, String)> = env
        .filter(|(k, _)| !VOLATILE.contains(&k.as_str()) && !k.starts_with("CI_"))
        .collect();
    vars.sort();
    for name in pass_env {
        h.update(format!("pass:{name}\0").as_bytes());
    }
    for (k, v) in vars {
        h.update(format!("{k}={v}\0").as_bytes());
    }
    let digest = h.finalize();
    hex::encode(&digest[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeats(dir: &Path, config: &str) -> Repeats {
        Repeats::new(dir.join("state.json.agent-failed"), config.into())
    }

    #[test]
    fn the_same_setup_failure_on_two_ticks_is_a_configuration_error_until_the_configuration_changes()
     {
        let dir = tempfile::tempdir().unwrap();
        let why = "the agent exited with 1: \"Missing environment variable: OPENAI_API_KEY\" (request req_8f3a)";
        assert_eq!(
            repeats(dir.path(), "c1").failed(Class::Unknown, why, "a.js"),
            None
        );
        let again = why.replace("req_8f3a", "req_91bc");
        let e = repeats(dir.path(), "c1").failed(Class::Unknown, &again, "b.js");
        assert!(
            e.as_deref().is_some_and(|e| e.contains("--agent-env NAME")),
            "{e:?}"
        );
        assert!(repeats(dir.path(), "c1").standing().is_some());
        // Another configuration runs the agent again.
        assert_eq!(repeats(dir.path(), "c2").standing(), None);
        // An answer clears it.
        repeats(dir.path(), "c1").answered();
        assert_eq!(repeats(dir.path(), "c1").standing(), None);
    }

    #[test]
    fn a_transient_failure_in_between_is_not_a_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let why = "the agent exited with 1: not logged in";
        repeats(dir.path(), "c").failed(Class::Auth, why, "a.js");
        repeats(dir.path(), "c").failed(Class::Server, "overloaded", "a.js");
        assert_eq!(
            repeats(dir.path(), "c").failed(Class::Auth, why, "a.js"),
            None
        );
        // Twice in one tick is one tick.
        let mut one = repeats(dir.path(), "c");
        assert!(one.failed(Class::Auth, why, "a.js").is_some());
        let dir = tempfile::tempdir().unwrap();
        let mut one = repeats(dir.path(), "c");
        one.failed(Class::Auth, why, "a.js");
        assert_eq!(one.failed(Class::Auth, why, "b.js"), None);
    }

    #[test]
    fn the_digest_ignores_what_changes_every_job_and_sees_a_named_secret() {
        let env = |job: &str| {
            vec![
                ("CI_JOB_ID".to_string(), job.to_string()),
                ("HOME".to_string(), "/h".to_string()),
            ]
            .into_iter()
        };
        let none: Vec<String> = Vec::new();
        let a = config_digest("agent.sh", &none, env("1"));
        assert_eq!(a, config_digest("agent.sh", &none, env("2")));
        assert_ne!(
            a,
            config_digest("agent.sh", &["OPENAI_API_KEY".into()], env("1"))
        );
        assert_ne!(a, config_digest("agent.sh --flag", &none, env("1")));
    }
}
