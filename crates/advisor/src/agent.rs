//! Any agent as the advisor: `sh -c CMD` once per file that needs judgement,
//! behind the same gates and the same error protocol as the model.
//!
//! The agent reads one JSON object on stdin and answers with one on stdout.
//! It runs contained (`contain`): bounded in time and output, everything it
//! started ended with its run, and without sentinel's own secrets in its
//! environment.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::client::{
    AdviceRequest, Advisor, Answer, Attempt, Call, Finding, Outcome, with_protocol,
};
use super::contain::{self, Ended, Finished, Limits};
use super::prices::Usage;
use super::protocol::Failure;
use super::repeat::{self, Repeats};
use super::worktree::Worktree;

/// Answers (and error bodies) longer than this are not an answer.
const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// The end of the agent's stderr that is kept for its failure's reason.
const MAX_STDERR_BYTES: usize = 4 << 10;

/// The shell's own codes for a command it could not find or run.
const NOT_FOUND: i32 = 127;
const NOT_EXECUTABLE: i32 = 126;

#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The command line, run with `sh -c`.
    pub command: String,
    pub timeout: Duration,
    /// The agent's working directory (`SENTINEL_WORKTREE`) when it has no
    /// worktree of its own.
    pub cwd: PathBuf,
    /// On the git source: the agent's worktree, detached at the head.
    pub worktree: Option<Worktree>,
    /// Secrets passed on by name.
    pub pass_env: Vec<String>,
    /// Record waits instead of sleeping (tests).
    pub fake_sleep: bool,
    /// Names the run while it lasts (beside the state), so the next tick
    /// ends what a killed sentinel left running.
    pub pidfile: Option<PathBuf>,
    /// Keeps the last setup failure (beside the state), so that the same
    /// failure on the next tick is a configuration error (`repeat`).
    pub failfile: Option<PathBuf>,
    /// The kernel's walls and the environment the agent is given.
    pub jail: super::kernel_sandbox::Jail,
}

/// The one JSON object on the agent's stdin.
#[derive(Debug, Serialize)]
struct Input<'a> {
    path: &'a str,
    /// Absent for a file that is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    fingerprint: &'a str,
    wake_reason: &'a str,
    head: Option<&'a str>,
    previous: Option<serde_json::Value>,
    trigger: Option<&'a str>,
    budget_left_usd: Option<f64>,
}

/// The agent's answer: the model's shape, plus what it cost.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    action: super::client::Action,
    reason: String,
    #[serde(default)]
    findings: Vec<Finding>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    usage: Option<ReplyUsage>,
    /// What the agent's tool refused or reported on the way (a permission
    /// denial, a rejected patch): a string or `{type, code, message}`.
    /// Read when an EVOLVE left no edit, to say why.
    #[serde(default)]
    error: Option<serde_json::Value>,
    /// The model requests the run made, as the agent's CLI counted them
    /// (the adapters send Claude Code's `num_turns`): counted in `stats`.
    #[serde(default)]
    requests: Option<u64>,
}

/// Token counts in the spellings agent CLIs print (OpenAI's or Codex's).
#[derive(Debug, Deserialize, Default)]
struct ReplyUsage {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: u64,
    #[serde(default, alias = "cached_input_tokens")]
    cached_tokens: u64,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: u64,
}

/// What an EVOLVE left in the agent's worktree.
enum Edit {
    /// The file's new text.
    Changed(String),
    /// The file as it was handed over: nothing happened.
    None,
    /// Removed, or no longer text: a change sentinel cannot commit, kept
    /// as a proposal without content.
    Other,
}

/// The most model requests one run is counted at, whatever it says.
const MAX_REQUESTS_PER_RUN: u64 = 1_000;

pub struct AgentAdvisor {
    cfg: AgentConfig,
    calls: u64,
    /// Model requests the runs made beyond one each, as their CLIs said.
    extra_requests: u64,
    waits: Vec<u64>,
    /// Measured cost of the attempts of the current call.
    cost: Option<f64>,
    /// A command that cannot run at all: the tick stops with this.
    fatal: Option<String>,
    /// The last setup failure, to tell a repeat.
    repeats: Option<Repeats>,
}

impl AgentAdvisor {
    /// An agent whose command cannot start, when that can be told before
    /// it runs, is fatal from the start: the first file that needs it
    /// stops the tick before anything is reserved.
    pub fn new(cfg: AgentConfig) -> AgentAdvisor {
        let path = std::env::var_os("PATH");
        let fatal = contain::cannot_start(&cfg.command, path.as_deref())
            .map(|why| cannot_run(&cfg.command, &why));
        let repeats = cfg.failfile.clone().map(|f| {
            let digest = repeat::config_digest(&cfg.command, &cfg.pass_env, std::env::vars());
            Repeats::new(f, digest)
        });
        // The same failure twice in a row: loud on every tick, a no-op's too.
        let fatal = fatal.or_else(|| repeats.as_ref().and_then(Repeats::standing));
        AgentAdvisor {
            cfg,
            calls: 0,
            extra_requests: 0,
            waits: Vec::new(),
            cost: None,
            fatal,
            repeats,
        }
    }

    /// One run of the command.
    fn attempt(&mut self, req: &AdviceRequest, input: &[u8]) -> Attempt {
        self.calls += 1;
        let done = match run(&self.cfg, req, input) {
            Ok(done) => done,
            Err(e) => {
                self.fatal = Some(e.clone());
                let failure = Failure::Agent {
                    exit: None,
                    body: e,
                    stderr: String::new(),
                };
                return Err((failure, None));
            }
        };
        let status = match done.ended {
            Ended::Exited(status) => status,
            Ended::TimedOut => return Err((Failure::Timeout, None)),
            Ended::Interrupted => {
                // No retry: the tick stops on the signal.
                self.fatal = Some("interrupted by a signal".into());
                return Err((Failure::Timeout, None));
            }
        };
        let (stdout, stderr) = (done.stdout, done.stderr);
        let code = status.code();
        if matches!(code, Some(NOT_FOUND | NOT_EXECUTABLE)) {
            let why = format!(
                "it exited with {}: {}",
                code.unwrap_or(0),
                first_line(&stderr)
            );
            self.fatal = Some(cannot_run(&self.cfg.command, &why));
        }
        if code != Some(0) {
            let body = String::from_utf8_lossy(&stdout).into_owned();
            let stderr = String::from_utf8_lossy(&stderr).into_owned();
            return Err((
                Failure::Agent {
                    exit: code,
                    body,
                    stderr,
                },
                None,
            ));
        }
        let reply: Reply = match serde_json::from_slice(&stdout) {
            Ok(r) => r,
            Err(e) => {
                let why = format!("the agent's answer is not the expected JSON object ({e})");
                return Err((Failure::BadResponse(why), None));
            }
        };
        if reply.reason.trim().is_empty() {
            let why = "the agent's answer has an empty reason".to_string();
            return Err((Failure::BadResponse(why), None));
        }
        if let Some(c) = reply.cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            *self.cost.get_or_insert(0.0) += c;
        }
        // A run is one request of sentinel's, and as many of the model's as
        // its CLI made: those are what the provider counts and bills.
        if let Some(n) = reply.requests {
            let extra = n.clamp(1, MAX_REQUESTS_PER_RUN) - 1;
            self.extra_requests = self.extra_requests.saturating_add(extra);
        }
        let usage = reply.usage.as_ref().map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            cached_tokens: u.cached_tokens.min(u.prompt_tokens),
            completion_tokens: u.completion_tokens,
        });
        let content = match self.content(req, &reply, &stderr) {
            Ok(c) => c,
            Err(failure) => return Err((failure, usage)),
        };
        let answer = Answer {
            action: reply.action,
            reason: reply.reason,
            findings: reply.findings,
            content,
        };
        Ok((answer, usage))
    }

    /// The file's new text: the answer's `content`, else what an EVOLVE
    /// left in the worktree. An EVOLVE is an edit that happened: one that
    /// did not is a failure, retried later, never an open proposal.
    fn content(
        &self,
        req: &AdviceRequest,
        reply: &Reply,
        stderr: &[u8],
    ) -> Result<Option<String>, Failure> {
        if reply.content.is_some() || matches!(reply.action, super::client::Action::Skip) {
            return Ok(reply.content.clone());
        }
        // What the agent left is hostile input: refused, it is no answer.
        match self.edited(req).map_err(Failure::BadResponse)? {
            Edit::Changed(c) => Ok(Some(c)),
            Edit::Other => Ok(None),
            Edit::None => Err(Failure::Agent {
                exit: None,
                body: no_edit(req.path, reply.error.as_ref(), stderr),
                stderr: String::new(),
            }),
        }
    }

    /// What the agent wrote to the file in its worktree and left there,
    /// committed or not, compared with what it was handed.
    fn edited(&self, req: &AdviceRequest) -> Result<Edit, String> {
        let Some(wt) = self.cfg.worktree.as_ref() else {
            // Over the GitLab API only `content` carries an edit.
            return Ok(Edit::None);
        };
        let Some(after) = wt.read(req.path)? else {
            return Ok(Edit::Other);
        };
        let Ok(after) = String::from_utf8(after) else {
            return Ok(Edit::Other);
        };
        Ok(if Some(after.as_str()) == req.text {
            Edit::None
        } else {
            Edit::Changed(after)
        })
    }
}

impl AgentAdvisor {
    /// Keep the call's failure, or forget the last one after an answer; the
    /// same setup failure as the last tick's stops this tick.
    fn remember(&mut self, call: &Call, file: &str) {
        let Some(r) = self.repeats.as_mut() else {
            return;
        };
        match &call.outcome {
            Outcome::Answered(_) => r.answered(),
            Outcome::Failed { class, reason, .. } if self.fatal.is_none() => {
                self.fatal = r.failed(*class, reason, file);
            }
            Outcome::Failed { .. } => {}
        }
    }
}

impl Advisor for AgentAdvisor {
    fn model(&self) -> &str {
        "agent"
    }

    fn ask(&mut self, req: &AdviceRequest, now: DateTime<Utc>) -> Call {
        let input = serde_json::to_vec(&Input {
            path: req.path,
            content: req.text,
            fingerprint: req.fingerprint,
            wake_reason: req.wake_reason,
            head: req.head,
            previous: req.previous.clone(),
            trigger: req.trigger,
            budget_left_usd: req.budget_left_usd,
        })
        .unwrap_or_default();
        self.cost = None;
        if let Some(wt) = &self.cfg.worktree
            && let Err(e) = wt.prepare(req.head.unwrap_or("HEAD"))
        {
            self.fatal = Some(e);
        }
        let mut waits = std::mem::take(&mut self.waits);
        let fake_sleep = self.cfg.fake_sleep;
        let mut call = with_protocol(now, &mut waits, fake_sleep, || {
            if self.fatal.is_some() {
                // Retrying a command that cannot start helps nobody.
                let body = self.fatal.clone().unwrap_or_default();
                let stderr = String::new();
                return Err((
                    Failure::Agent {
                        exit: None,
                        body,
                        stderr,
                    },
                    None,
                ));
            }
            self.attempt(req, &input)
        });
        self.waits = waits;
        call.cost_usd = self.cost;
        self.remember(&call, req.path);
        call
    }

    /// Runs, and the model requests they made beyond one each.
    fn calls(&self) -> u64 {
        self.calls.saturating_add(self.extra_requests)
    }

    fn waits_ms(&self) -> Vec<u64> {
        self.waits.clone()
    }

    fn fatal(&self) -> Option<String> {
        self.fatal.clone()
    }

    fn moved_refs(&mut self) -> Vec<super::worktree::Moved> {
        self.cfg
            .worktree
            .as_ref()
            .map(Worktree::moved)
            .unwrap_or_default()
    }

    fn locked(&mut self) {
        if let Some(p) = &self.cfg.pidfile {
            contain::end_leftover(p);
        }
    }
}

/// Run the command once, contained: `Err` when it could not be started.
fn run(cfg: &AgentConfig, req: &AdviceRequest, input: &[u8]) -> Result<Finished, String> {
    let cwd = cfg
        .worktree
        .as_ref()
        .and_then(Worktree::path)
        .unwrap_or(&cfg.cwd);
    let mut cmd = Command::new("sh");
    // Given, not inherited: named secrets only (`--agent-env`).
    super::given_env::give(&mut cmd, cfg.jail.env, &cfg.pass_env);
    // Its git works in its own copy, not where the job's variables point.
    for var in sentinel_io::git_env::REDIRECTING_ENV {
        cmd.env_remove(var);
    }
    cmd.arg("-c")
        .arg(&cfg.command)
        .current_dir(cwd)
        .env("SENTINEL_FILE", req.path)
        .env("SENTINEL_HEAD", req.head.unwrap_or_default())
        .env("SENTINEL_WAKE_REASON", req.wake_reason)
        .env("SENTINEL_WORKTREE", cwd);
    // Removed (with everything it holds) when the run is over.
    let tmp = walled(cfg, &mut cmd, cwd).map_err(|e| cannot_run(&cfg.command, &e))?;
    if let Some(user) = &cfg.jail.user {
        as_user(cfg, user, &mut cmd, tmp.as_ref()).map_err(|e| cannot_run(&cfg.command, &e))?;
    }
    let limits = Limits {
        timeout: cfg.timeout,
        max_stdout: MAX_OUTPUT_BYTES,
        max_stderr: MAX_STDERR_BYTES,
    };
    contain::run(cmd, input, &limits, cfg.pidfile.as_deref()).map_err(|e| {
        cannot_run(
            &cfg.command,
            &format!("`sh` could not be started in `{}`: {e}", cwd.display()),
        )
    })
}

/// Put the kernel's walls around `cmd`, when there are any: it writes its
/// working copy (its own git directory included) and a private temporary
/// directory, returned to be removed.
fn walled(
    cfg: &AgentConfig,
    cmd: &mut Command,
    cwd: &std::path::Path,
) -> Result<Option<tempfile::TempDir>, String> {
    // Said to the agent, so an adapter can turn a sandbox of its own off
    // where it cannot start under the kernel's (Codex's bubblewrap).
    let Some(walls) = &cfg.jail.walls else {
        cmd.env("SENTINEL_KERNEL_SANDBOX", "off");
        return Ok(None);
    };
    cmd.env("SENTINEL_KERNEL_SANDBOX", "landlock");
    let tmp = tempfile::Builder::new()
        .prefix("sentinel-agent-")
        .tempdir()
        .map_err(|e| format!("cannot create the agent's temporary directory: {e}"))?;
    cmd.env("TMPDIR", tmp.path());
    // Its working copy holds its own git directory: its commits stay there.
    let own = [tmp.path(), cwd];
    walls.apply(cmd, &own)?;
    Ok(Some(tmp))
}

/// Run `cmd` as `user`, its working copy and temporary directory made its own.
fn as_user(
    cfg: &AgentConfig,
    user: &super::agent_user::AgentUser,
    cmd: &mut Command,
    tmp: Option<&tempfile::TempDir>,
) -> Result<(), String> {
    if let Some(wt) = &cfg.worktree {
        wt.share_with(user)?;
    }
    if let Some(tmp) = tmp {
        user.give(tmp.path())?;
    }
    user.apply(cmd);
    Ok(())
}

/// A command that cannot run: a setup error that names what to check.
fn cannot_run(command: &str, why: &str) -> String {
    format!(
        "the agent command `{command}` could not be run ({why}); check --agent / SENTINEL_AGENT \
         and, under cron or CI, the PATH it runs with (give the agent's full path); \
         nothing was reserved, spent or counted"
    )
}

fn first_line(bytes: &[u8]) -> String {
    // Redacted before it is cut, so no piece of a secret survives the cut.
    let text = sentinel_core::redact::text(&String::from_utf8_lossy(bytes));
    let line = text.lines().next().unwrap_or("no message").trim();
    line.chars().filter(|c| !c.is_control()).take(200).collect()
}

/// Longest quote of what the agent reported, in characters: the whole
/// note must fit the 300 characters a failure's reason keeps.
const MAX_REPORTED_CHARS: usize = 120;

/// The note of an EVOLVE that changed nothing: what the agent's tool
/// reported (the answer's `error`, else the end of its stderr), what kind
/// of refusal that is when it can be told, and the next step.
fn no_edit(path: &str, error: Option<&serde_json::Value>, stderr: &[u8]) -> String {
    let reported = match error {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(e @ serde_json::Value::Object(_)) => e
            .get("message")
            .and_then(|m| m.as_str())
            .map_or_else(|| e.to_string(), str::to_string),
        Some(other) => other.to_string(),
        None => {
            let text = String::from_utf8_lossy(stderr);
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            lines[lines.len().saturating_sub(2)..].join(" / ")
        }
    };
    let kind = refusal_kind(&reported).map_or(String::new(), |k| format!(" ({k})"));
    let said = if reported.trim().is_empty() {
        "it reported nothing about why".to_string()
    } else {
        // Redacted before it is cut, so no piece of a secret survives the cut.
        let clean: String = sentinel_core::redact::text(&reported)
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(MAX_REPORTED_CHARS)
            .collect();
        format!("it reported \"{clean}\"")
    };
    format!(
        "EVOLVE without an edit{kind}: `{path}` is unchanged and the answer has no `content`; \
         {said}; let the agent write its working copy (docs/agents.md)"
    )
}

/// The refusals agent CLIs report when they may not write, named.
fn refusal_kind(reported: &str) -> Option<&'static str> {
    let text = reported.to_ascii_lowercase();
    let kinds = [
        ("read-only", "a read-only sandbox"),
        ("eacces", "EACCES"),
        ("permission_denials", "a permission denial"),
        ("permission denied", "a permission denial"),
        ("requested permissions", "a permission denial"),
        ("not permitted", "a permission denial"),
        ("patch rejected", "a rejected patch"),
    ];
    kinds
        .iter()
        .find(|(w, _)| text.contains(w))
        .map(|(_, k)| *k)
}
