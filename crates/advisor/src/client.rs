//! The advisor: one OpenAI-compatible chat-completions call per file, with
//! the error protocol as the only retry loop.
//!
//! One `ureq` agent with explicit timeouts and no status errors or
//! redirects; every failure is classified before anything is retried. A
//! wait is slept for real, or only recorded under `--fake-sleep` (what the
//! tests use, so none of them waits out a backoff).

use std::fmt;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::peers;
use super::prices::{self, Usage};
use super::protocol::{self, Class, Failure, Step};
pub use sentinel_core::state::records::llm::{Finding, Severity};

/// The most of a tick's wall time the advisor spends, from its start: no
/// file is asked, no request outlasts it and no retry waits past it, so a
/// tick fits a 2-minute schedule whatever the provider does (see
/// `docs/advisor.md`).
pub const TICK_BUDGET: Duration = Duration::from_secs(90);

/// The least time a request is given, even at the end of `TICK_BUDGET`.
const MIN_REQUEST: Duration = Duration::from_secs(1);

/// Answers larger than this are not a chat completion we asked for.
const MAX_ANSWER_BYTES: u64 = 4 << 20;

pub const SYSTEM_PROMPT: &str = "\
You review one source file of a repository for a code-maintenance agent. \
Decide whether the file needs a change now (EVOLVE) or should be left alone (SKIP). \
Prefer SKIP unless there is a concrete defect or risk worth a change. \
Answer with one JSON object and nothing else, exactly of this shape: \
{\"action\":\"SKIP\"|\"EVOLVE\",\"reason\":string,\"findings\":[{\"line\":integer,\
\"severity\":\"info\"|\"minor\"|\"major\"|\"critical\"|\"blocker\",\"message\":string}]}. \
Use an empty findings array when there is nothing to report.";

/// Added to the system prompt with `--propose patches`.
pub const PATCH_PROMPT: &str = "\
With EVOLVE, also give the file's complete new content as a string in \"content\"; \
change only this file.";

/// A secret that never prints itself.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(value: String) -> ApiKey {
        ApiKey(value)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1`; local compatible servers work too.
    pub base_url: String,
    pub key: ApiKey,
    pub model: String,
    pub timeout: Duration,
    pub max_tokens: u64,
    /// Record waits instead of sleeping (tests).
    pub fake_sleep: bool,
    /// Ask for the full new content with an EVOLVE (`--propose patches`).
    pub patches: bool,
    /// Models to treat as reasoning models besides the known ones
    /// (`--reasoning-models`).
    pub reasoning_models: Vec<String>,
}

/// What the advisor is asked about one file.
#[derive(Debug, Clone)]
pub struct AdviceRequest<'a> {
    pub path: &'a str,
    pub role: &'a str,
    pub risk: &'a str,
    /// The bytes as text (lossy for a file that is not UTF-8).
    pub content: &'a str,
    /// The bytes as text only when they are UTF-8 (an agent gets no lossy copy).
    pub text: Option<&'a str>,
    pub fingerprint: &'a str,
    pub wake_reason: &'a str,
    pub head: Option<&'a str>,
    /// The last decision about this file and its findings, as JSON.
    pub previous: Option<serde_json::Value>,
    /// The autonomy trigger of a reconsideration.
    pub trigger: Option<&'a str>,
    /// What today's budget has left, when there is one.
    pub budget_left_usd: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "SKIP")]
    Skip,
    #[serde(rename = "EVOLVE")]
    Evolve,
}

/// The only answer that is a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub action: Action,
    pub reason: String,
    pub findings: Vec<Finding>,
    /// With `--propose patches`: the file's full new content for an EVOLVE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// How one `ask` ended, after the retries its error class allows.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Answered(Answer),
    Failed {
        class: Class,
        reason: String,
        /// Open the circuit until then (`None`: no circuit for this class).
        hold_until: Option<DateTime<Utc>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub outcome: Outcome,
    pub attempts: u32,
    /// Usage of the answered (or unparsable but billed) attempts.
    pub usage: Option<Usage>,
    /// What the call cost as measured by whoever answered (an agent's
    /// `cost_usd`); `None` when only the price table can tell.
    pub cost_usd: Option<f64>,
}

/// Parse the model's answer strictly: anything else is `bad_response`. A
/// reasoning block a local model writes before it (`<think>...</think>`)
/// is not part of the answer.
pub fn parse_answer(content: &str) -> Result<Answer, String> {
    let answer: Answer = serde_json::from_str(without_think_block(content))
        .map_err(|e| format!("the answer is not the expected JSON object ({e})"))?;
    if answer.reason.trim().is_empty() {
        return Err("the answer has an empty reason".into());
    }
    Ok(answer)
}

/// The content after a leading `<think>...</think>` block (llama.cpp and
/// Ollama with some reasoning formats), trimmed; the content itself when
/// there is no complete block.
fn without_think_block(content: &str) -> &str {
    let content = content.trim();
    content
        .strip_prefix("<think>")
        .and_then(|rest| rest.split_once("</think>"))
        .map_or(content, |(_, after)| after.trim())
}

/// What a chat-completions body says: the message, why it ended, its usage
/// and, when the server reports it (`usage.cost`), its cost in USD.
struct Completion {
    content: String,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    cost: Option<f64>,
}

fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the response is not JSON ({e})"))?;
    let finish_reason = value
        .pointer("/choices/0/finish_reason")
        .and_then(|f| f.as_str())
        .map(str::to_string);
    // A reasoning model that spent its limit thinking may send no content at all.
    let content = match value.pointer("/choices/0/message/content") {
        Some(serde_json::Value::String(c)) => c.clone(),
        Some(serde_json::Value::Null) | None if finish_reason.as_deref() == Some("length") => {
            String::new()
        }
        _ => return Err("the response has no choices[0].message.content".into()),
    };
    Ok(Completion {
        content,
        finish_reason,
        usage: prices::usage_from_response(&value),
        cost: value
            .pointer("/usage/cost")
            .and_then(|c| c.as_f64())
            .and_then(usd),
    })
}

/// A cost a server reported, when it can be one.
fn usd(value: f64) -> Option<f64> {
    (value.is_finite() && value >= 0.0).then_some(value)
}

/// What the last `ask` showed beside its outcome: who answered, and what
/// the attempts may have cost that no usage says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Signs {
    /// The proxy the answers came through, when their headers said so.
    pub proxy: Option<&'static str>,
    /// Attempts that timed out, sentinel's or the proxy's: the provider may
    /// have answered, and billed, each of them.
    pub timed_out: u32,
    /// Upstream calls the proxy made beyond sentinel's attempts (its own
    /// retries, from its retries header).
    pub proxy_retries: u64,
    /// The proxy answered from its cache (LiteLLM: `x-litellm-cache-key`
    /// and no cost header): no upstream call was made, nothing was billed.
    pub cache_hit: bool,
    /// Another model than the one asked for answered: the proxy's fallback.
    pub fallback: Option<Fallback>,
}

/// A proxy's fallback: the model group that answered in place of the one
/// asked for, and the provider's model behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    /// As sentinel would name it with `--model` (LiteLLM's model group).
    pub group: String,
    /// The provider's model that answered (`x-litellm-model-name`).
    pub model: Option<String>,
}

/// Something that can judge a file: the OpenAI-compatible client, or a fake.
pub trait Advisor {
    /// The model (or `agent`) that answers, for costs and the decision's record.
    fn model(&self) -> &str;
    /// Ask about one file; the error protocol's retries happen inside.
    fn ask(&mut self, req: &AdviceRequest, now: DateTime<Utc>) -> Call;
    /// HTTP attempts made so far.
    fn calls(&self) -> u64;
    /// Waits slept (or recorded) between attempts, in milliseconds.
    fn waits_ms(&self) -> Vec<u64>;
    /// Why this advisor cannot work at all (an agent command that does not
    /// exist): the tick stops with it instead of holding every file.
    fn fatal(&self) -> Option<String> {
        None
    }
    /// Refs of the watched clone that moved during the last `ask` (an agent
    /// that committed or checked out in the clone itself).
    fn moved_refs(&mut self) -> Vec<super::worktree::Moved> {
        Vec::new()
    }
    /// Called once the tick holds the state's lock: an agent ends what the
    /// run of a killed tick left behind before anything else touches it.
    fn locked(&mut self) {}
    /// What the last `ask` showed (see `Signs`); nothing by default.
    fn signs(&self) -> Signs {
        Signs::default()
    }
    /// A proxy an earlier tick saw answer: asked as that proxy from the first call.
    fn assume_proxy(&mut self, _name: &str) {}
    /// Why no further file may be asked in this tick (its time is spent).
    fn out_of_time(&self) -> Option<String> {
        None
    }
}

impl Advisor for OpenAiAdvisor {
    fn model(&self) -> &str {
        &self.cfg.model
    }
    fn ask(&mut self, req: &AdviceRequest, now: DateTime<Utc>) -> Call {
        OpenAiAdvisor::ask(self, req, now)
    }
    fn calls(&self) -> u64 {
        self.calls
    }
    fn waits_ms(&self) -> Vec<u64> {
        self.waits.clone()
    }
    fn signs(&self) -> Signs {
        Signs {
            proxy: self.proxy.map(|p| p.name),
            ..self.signs.clone()
        }
    }
    fn assume_proxy(&mut self, name: &str) {
        self.proxy = self.proxy.or(peers::proxy_named(name));
    }
    fn out_of_time(&self) -> Option<String> {
        (self.time_left() < MIN_REQUEST).then(|| {
            format!(
                "the tick's {} s for the model are spent; asked on the next tick",
                TICK_BUDGET.as_secs()
            )
        })
    }
}

/// How the answer's JSON is asked for. A server that refuses one format
/// (a 400 naming `response_format`) is asked in the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `json_schema`, strict: the answer's shape is enforced by the server.
    Schema,
    /// `json_object`: any JSON object; the prompt states the shape.
    Object,
    /// No `response_format` at all: the prompt alone.
    Prompt,
}

impl Format {
    fn fallback(self) -> Option<Format> {
        match self {
            Format::Schema => Some(Format::Object),
            Format::Object => Some(Format::Prompt),
            Format::Prompt => None,
        }
    }
}

/// The answer's JSON schema, strict: every property required, no others
/// (`content`, asked for with patches, may be null).
fn answer_schema(patches: bool) -> serde_json::Value {
    let finding = serde_json::json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["line", "severity", "message"],
        "properties": {
            "line": {"type": "integer"},
            "severity": {"type": "string", "enum": ["info", "minor", "major", "critical", "blocker"]},
            "message": {"type": "string"},
        },
    });
    let mut properties = serde_json::json!({
        "action": {"type": "string", "enum": ["SKIP", "EVOLVE"]},
        "reason": {"type": "string"},
        "findings": {"type": "array", "items": finding},
    });
    let mut required = vec!["action", "reason", "findings"];
    if patches {
        properties["content"] = serde_json::json!({"type": ["string", "null"]});
        required.push("content");
    }
    serde_json::json!({
        "type": "json_schema",
        "json_schema": {
            "name": "sentinel_answer",
            "strict": true,
            "schema": {
                "type": "object",
                "additionalProperties": false,
                "required": required,
                "properties": properties,
            },
        },
    })
}

/// Whether a refusal names the response format: the server does not take
/// the one asked for, and another may do.
fn refuses_response_format(body: &str) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return false;
    };
    let Some(error) = value.get("error") else {
        return false;
    };
    let param = error.get("param").and_then(|p| p.as_str()).unwrap_or("");
    let message = error
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    param.starts_with("response_format")
        || message.contains("response_format")
        || message.contains("json_schema")
}

/// One ask's state between its attempts: the completion limit (grown once
/// for a reasoning model's cut answer), the requests made beside the
/// protocol's attempts, what the server reported they cost, and the usage
/// of billed attempts that were asked again.
struct Turn {
    limit: u64,
    reasoning: bool,
    grown: bool,
    reshaped: bool,
    extra: u32,
    cost: Option<f64>,
    carried: Option<Usage>,
}

impl Turn {
    /// The attempt's result, with the usage of the requests it replaced.
    fn settle(&mut self, result: Attempt) -> Attempt {
        let carried = self.carried.take();
        match result {
            Ok((answer, u)) => Ok((answer, add_usage(carried, u))),
            Err((failure, u)) => Err((failure, add_usage(carried, u))),
        }
    }
}

/// Asks the model about files; one instance per tick.
pub struct OpenAiAdvisor {
    agent: ureq::Agent,
    cfg: OpenAiConfig,
    waits: Vec<u64>,
    calls: u64,
    /// The response format the server takes; a fallback holds for the tick.
    format: Format,
    /// The proxy the answers come through, once one said so.
    proxy: Option<peers::Proxy>,
    /// What the current (or last) `ask` showed.
    signs: Signs,
    /// The current `ask`'s time, which HTTP-date waits are relative to.
    now: DateTime<Utc>,
    /// When the tick's advisor started: `TICK_BUDGET` is counted from here.
    started: Instant,
}

/// One HTTP attempt: its result, and the cost the server reported for it.
struct Sent {
    result: Attempt,
    cost: Option<f64>,
}

impl Sent {
    fn failed(failure: Failure) -> Sent {
        Sent {
            result: Err((failure, None)),
            cost: None,
        }
    }
}

impl OpenAiAdvisor {
    pub fn new(cfg: OpenAiConfig) -> OpenAiAdvisor {
        // Without a CA file the agent cannot fail to build.
        let agent = sentinel_io::http::agent(cfg.timeout, None).expect("no CA file to read");
        let format = if peers::takes_json_schema(&cfg.model) {
            Format::Schema
        } else {
            Format::Object
        };
        OpenAiAdvisor {
            agent,
            cfg,
            waits: Vec::new(),
            calls: 0,
            format,
            proxy: None,
            signs: Signs::default(),
            now: DateTime::<Utc>::MIN_UTC,
            started: Instant::now(),
        }
    }

    fn body(&self, req: &AdviceRequest, turn: &Turn) -> serde_json::Value {
        let user = format!(
            "path: {}\nrole: {}\nrisk: {}\n\ncontent:\n{}",
            req.path, req.role, req.risk, req.content
        );
        let system = if self.cfg.patches {
            format!("{SYSTEM_PROMPT} {PATCH_PROMPT}")
        } else {
            SYSTEM_PROMPT.to_string()
        };
        let mut body = serde_json::json!({
            "model": self.cfg.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        match self.format {
            Format::Schema => body["response_format"] = answer_schema(self.cfg.patches),
            Format::Object => body["response_format"] = serde_json::json!({"type": "json_object"}),
            Format::Prompt => {}
        }
        // Reasoning models reject `max_tokens` and a temperature other than
        // their default; their reasoning counts inside `max_completion_tokens`.
        if turn.reasoning {
            body["max_completion_tokens"] = turn.limit.into();
        } else {
            body["temperature"] = 0.into();
            body["max_tokens"] = turn.limit.into();
        }
        // sentinel is the only retry loop: LiteLLM takes a per-request
        // `num_retries` (its docs' "set dynamically"), which overrides its
        // default of 2 retries per call.
        if self.proxy.is_some_and(|p| p.name == "LiteLLM") {
            body["num_retries"] = 0.into();
        }
        body
    }

    /// What is left of `TICK_BUDGET`; recorded waits count as slept.
    fn time_left(&self) -> Duration {
        let slept = match self.cfg.fake_sleep {
            true => Duration::from_millis(self.waits.iter().sum()),
            false => Duration::ZERO,
        };
        TICK_BUDGET.saturating_sub(self.started.elapsed() + slept)
    }

    /// Send one request; the response, or the transport's failure.
    fn post(
        &mut self,
        body: &serde_json::Value,
    ) -> Result<ureq::http::Response<ureq::Body>, Failure> {
        self.calls += 1;
        let url = format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        );
        let timeout = self.cfg.timeout.min(self.time_left()).max(MIN_REQUEST);
        self.agent
            .post(&url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Authorization", format!("Bearer {}", self.cfg.key.0))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| match e {
                ureq::Error::Timeout(_) => Failure::Timeout,
                e => Failure::Network(sentinel_io::http::transport_message(&e)),
            })
    }

    /// One HTTP attempt, its answer judged with the completion limit it was sent with.
    fn attempt(&mut self, body: &serde_json::Value, limit: u64) -> Sent {
        let sent = self.attempt_once(body, limit);
        if let Err((f, _)) = &sent.result
            && protocol::classify(f) == Class::Timeout
        {
            self.signs.timed_out += 1;
        }
        sent
    }

    fn attempt_once(&mut self, body: &serde_json::Value, limit: u64) -> Sent {
        let mut response = match self.post(body) {
            Ok(r) => r,
            Err(f) => return Sent::failed(f),
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        // Every header that can say how long to wait, a proxy's prefixed
        // ones too: `waits` reads them with the message and the longest wins.
        let wait_headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .filter(|(name, _)| super::waits::is_wait_header(name.as_str()))
            .filter_map(|(name, v)| Some((name.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect();
        if let Some(proxy) = peers::proxy_in(response.headers().keys().map(|k| k.as_str())) {
            self.proxy = Some(proxy);
            let retried = header(proxy.retries_header).and_then(|r| r.trim().parse::<u64>().ok());
            self.signs.proxy_retries += retried.unwrap_or(0);
        }
        // LiteLLM's own figure for this call, in USD; a cache hit carries
        // its cache key and no figure, and cost nothing upstream.
        let mut cost = header("x-litellm-response-cost").and_then(|c| c.trim().parse().ok());
        if (200..300).contains(&status) {
            if cost.is_none() && header("x-litellm-cache-key").is_some() {
                self.signs.cache_hit = true;
                cost = Some(0.0);
            }
            self.signs.fallback = fallback(
                header("x-litellm-attempted-fallbacks").as_deref(),
                header("x-litellm-model-group"),
                header("x-litellm-model-name"),
                &self.cfg.model,
            );
        }
        let bytes = match read_answer(&mut response) {
            Ok(b) => b,
            Err(f) => return Sent::failed(f),
        };
        if !(200..300).contains(&status) {
            // An error is not billed, whatever figure a proxy puts on it.
            return Sent::failed(Failure::Http {
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
                headers: wait_headers,
            });
        }
        judge(&bytes, limit, cost.and_then(usd))
    }

    /// One attempt of the protocol, and at most one reshaped request in it:
    /// the next response format after a refusal of this one, or a larger
    /// limit for a reasoning model whose answer was cut. Each changes what
    /// is asked, once, so neither is a retry of the same request.
    fn reshaping_attempt(&mut self, req: &AdviceRequest, turn: &mut Turn) -> Attempt {
        loop {
            let body = self.body(req, turn);
            let sent = self.attempt(&body, turn.limit);
            if let Some(c) = sent.cost {
                turn.cost = Some(turn.cost.unwrap_or(0.0) + c);
            }
            let again = match &sent.result {
                Err((
                    Failure::Http {
                        status: 400, body, ..
                    },
                    _,
                )) if !turn.reshaped && refuses_response_format(body) => {
                    let next = self.format.fallback();
                    if let Some(next) = next {
                        self.format = next;
                        turn.reshaped = true;
                    }
                    next.is_some()
                }
                Err((Failure::Cut(_), _)) if turn.reasoning && !turn.grown => {
                    turn.limit = peers::grown_limit(turn.limit);
                    turn.grown = true;
                    true
                }
                // After the larger limit, the reservation is spent: no retry.
                Err((Failure::BadResponse(why), u)) if turn.grown => {
                    return turn.settle(Err((Failure::Cut(why.clone()), *u)));
                }
                _ => false,
            };
            if !again {
                return turn.settle(sent.result);
            }
            turn.extra += 1;
            if let Err((_, u)) = sent.result {
                turn.carried = add_usage(turn.carried, u);
            }
        }
    }

    /// Ask about one file, retrying only what the error protocol allows.
    pub fn ask(&mut self, req: &AdviceRequest, now: DateTime<Utc>) -> Call {
        self.signs = Signs::default();
        self.now = now;
        let marked = &self.cfg.reasoning_models;
        let mut turn = Turn {
            limit: peers::completion_limit(&self.cfg.model, marked, self.cfg.max_tokens),
            reasoning: peers::is_reasoning(&self.cfg.model, marked),
            grown: false,
            reshaped: false,
            extra: 0,
            cost: None,
            carried: None,
        };
        let left = self.time_left();
        let mut waits = std::mem::take(&mut self.waits);
        let fake_sleep = self.cfg.fake_sleep;
        let mut call = with_protocol_within(now, &mut waits, fake_sleep, Some(left), || {
            self.reshaping_attempt(req, &mut turn)
        });
        self.waits = waits;
        call.attempts += turn.extra;
        call.cost_usd = turn.cost;
        call
    }
}

/// The fallback an answer's headers tell of: LiteLLM counts the fallbacks
/// it tried and names the model group that answered. A group equal to the
/// one asked for is no fallback, whatever the count says.
fn fallback(
    attempted: Option<&str>,
    group: Option<String>,
    model: Option<String>,
    asked: &str,
) -> Option<Fallback> {
    let tried = attempted.and_then(|n| n.trim().parse::<u64>().ok())?;
    let group = group
        .map(|g| g.trim().to_string())
        .filter(|g| !g.is_empty())?;
    (tried > 0 && group != asked).then(|| Fallback {
        group: crate::bounds::short(&group),
        model: model.map(|m| crate::bounds::short(m.trim())),
    })
}

/// The response's body, at most `MAX_ANSWER_BYTES` of it: a longer one is a
/// bad response, not something to hold in memory.
fn read_answer(response: &mut ureq::http::Response<ureq::Body>) -> Result<Vec<u8>, Failure> {
    match response
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_to_vec()
    {
        Ok(b) => Ok(b),
        Err(ureq::Error::Timeout(_)) => Err(Failure::Timeout),
        Err(ureq::Error::BodyExceedsLimit(_)) => Err(Failure::BadResponse(format!(
            "the response is over {MAX_ANSWER_BYTES} bytes"
        ))),
        Err(e) => Err(Failure::Network(sentinel_io::http::transport_message(&e))),
    }
}

/// A 2xx body judged: the answer, or why it is none (with the usage it was
/// billed). An answer cut by the completion limit is `Cut`: the same
/// request would be cut again.
fn judge(bytes: &[u8], limit: u64, header_cost: Option<f64>) -> Sent {
    let completion = match parse_completion(bytes) {
        Ok(c) => c,
        Err(e) => {
            return Sent {
                result: Err((Failure::BadResponse(e), None)),
                cost: header_cost,
            };
        }
    };
    let cost = header_cost.or(completion.cost);
    let usage = completion.usage;
    let result = match parse_answer(&completion.content) {
        Ok(answer) => Ok((answer, usage)),
        Err(_) if completion.finish_reason.as_deref() == Some("length") => Err((
            Failure::Cut(format!(
                "the answer was cut at {limit} completion tokens (finish_reason length) before its JSON was complete"
            )),
            usage,
        )),
        // The call was billed even though its answer is useless.
        Err(e) => Err((Failure::BadResponse(e), usage)),
    };
    Sent { result, cost }
}

/// What one attempt gave: an answer, or the failure to classify (with the
/// usage of a billed but useless answer).
pub type Attempt = Result<(Answer, Option<Usage>), (Failure, Option<Usage>)>;

/// The only retry loop: classify each failure, then retry, sleep or stop as
/// the protocol says. Waits are recorded in `waits` (and slept unless
/// `fake_sleep`).
pub fn with_protocol(
    now: DateTime<Utc>,
    waits: &mut Vec<u64>,
    fake_sleep: bool,
    attempt: impl FnMut() -> Attempt,
) -> Call {
    with_protocol_within(now, waits, fake_sleep, None, attempt)
}

/// `with_protocol` with `time_left` of the tick's time (`None`: no limit):
/// a retry whose wait would end too late is not made, the failure stands
/// as if the retries were spent.
pub fn with_protocol_within(
    now: DateTime<Utc>,
    waits: &mut Vec<u64>,
    fake_sleep: bool,
    time_left: Option<Duration>,
    mut attempt: impl FnMut() -> Attempt,
) -> Call {
    let started = Instant::now();
    let mut slept = Duration::ZERO;
    let mut usage: Option<Usage> = None;
    let mut failures = 0;
    loop {
        match attempt() {
            Ok((answer, u)) => {
                return Call {
                    outcome: Outcome::Answered(answer),
                    attempts: failures + 1,
                    usage: add_usage(usage, u),
                    cost_usd: None,
                };
            }
            Err((failure, u)) => {
                usage = add_usage(usage, u);
                failures += 1;
                let class = protocol::classify(&failure);
                let used = started.elapsed() + if fake_sleep { slept } else { Duration::ZERO };
                let step = match step_after(&failure, class, failures, now) {
                    Step::Retry(d) if time_left.is_some_and(|l| used + d + MIN_REQUEST > l) => {
                        return Call {
                            outcome: Outcome::Failed {
                                class,
                                reason: format!(
                                    "{}; not retried: the tick's {} s for the model are spent",
                                    failure_reason(&failure),
                                    TICK_BUDGET.as_secs()
                                ),
                                hold_until: spent_hold(class, now),
                            },
                            attempts: failures,
                            usage,
                            cost_usd: None,
                        };
                    }
                    step => step,
                };
                match step {
                    Step::Retry(d) if crate::contain::interrupted().is_none() => {
                        slept += d;
                        waits.push(d.as_millis() as u64);
                        if !fake_sleep {
                            // Cut short by a signal: the tick stops on it.
                            crate::contain::sleep(d);
                        }
                    }
                    Step::Retry(_) => {
                        return Call {
                            outcome: Outcome::Failed {
                                class,
                                reason: failure_reason(&failure),
                                hold_until: None,
                            },
                            attempts: failures,
                            usage,
                            cost_usd: None,
                        };
                    }
                    Step::Stop { hold_until } => {
                        return Call {
                            outcome: Outcome::Failed {
                                class,
                                reason: failure_reason(&failure),
                                hold_until,
                            },
                            attempts: failures,
                            usage,
                            cost_usd: None,
                        };
                    }
                }
            }
        }
    }
}

/// The class's hold once its retries are spent.
fn spent_hold(class: Class, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match protocol::next_step(class, u32::MAX, None, now) {
        Step::Stop { hold_until } => hold_until,
        Step::Retry(_) => None,
    }
}

/// The protocol's step after the `failures`-th failure, with the wait the
/// server asked for. A cut answer is never asked again unchanged: it would
/// only be cut again.
fn step_after(failure: &Failure, class: Class, failures: u32, now: DateTime<Utc>) -> Step {
    if let Failure::Cut(_) = failure {
        return Step::Stop { hold_until: None };
    }
    let wait = protocol::server_wait(failure, now).map(|w| w.wait);
    protocol::next_step(class, failures, wait, now)
}

fn add_usage(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Usage {
            prompt_tokens: a.prompt_tokens + b.prompt_tokens,
            cached_tokens: a.cached_tokens + b.cached_tokens,
            completion_tokens: a.completion_tokens + b.completion_tokens,
        }),
        (a, b) => a.or(b),
    }
}

/// A short reason for the report: the provider's own message, without the
/// key it may echo back (OpenAI prints a masked key on 401).
fn failure_reason(f: &Failure) -> String {
    match f {
        Failure::Timeout => "the request timed out".into(),
        Failure::Network(m) | Failure::BadResponse(m) | Failure::Cut(m) => m.clone(),
        Failure::Agent { exit, body, stderr } => agent_reason(*exit, body, stderr),
        Failure::Http { status, body, .. } => http_reason(*status, body),
    }
}

/// The error's code, then what the provider or the proxy said: the first
/// sentence of its message, bounded and scrubbed, so that a quota, a budget
/// or a refused parameter can be told from the line alone. A key the proxy
/// refused and a parameter the model refuses say what to do.
fn http_reason(status: u16, body: &str) -> String {
    let mut reason = http_head(status, body);
    let error = error_object(body);
    let message = error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(|m| m.as_str());
    if let Some(words) = message.and_then(first_sentence) {
        reason.push_str(": ");
        reason.push_str(&words);
    }
    if protocol::refused_by_proxy_key_check(status, body) {
        reason.push_str(
            " (the proxy rejected the key: give OPENAI_API_KEY a key the proxy knows, its master key or a virtual key)",
        );
    }
    if let Some(param) = error.as_ref().and_then(refused_param) {
        reason.push_str(&format!(
            "; the model refuses `{param}`: a reasoning model behind an alias needs `--reasoning-models ALIAS` (or the proxy's `drop_params: true`)"
        ));
    }
    reason
}

/// The `error` object of an error body (older vLLM: the body itself).
fn error_object(body: &str) -> Option<serde_json::Value> {
    let mut value = serde_json::from_str::<serde_json::Value>(body).ok()?;
    if value.get("error").is_some_and(|e| e.is_object()) {
        return Some(value["error"].take());
    }
    let old_vllm = value.get("error").is_none()
        && value.get("object").and_then(|o| o.as_str()) == Some("error");
    old_vllm.then_some(value)
}

/// Longest quote of a peer's message kept in a reason, in characters.
const MAX_QUOTE_CHARS: usize = 200;

/// The first sentence of a peer's message, without LiteLLM's
/// `litellm.RateLimitError: RateLimitError: OpenAIException - ` prefix,
/// on one line, at most `MAX_QUOTE_CHARS`, with key-like words masked and
/// registered secrets redacted. `None` when nothing is left.
fn first_sentence(message: &str) -> Option<String> {
    let mut text = message.trim();
    if let Some(rest) = text.strip_prefix("litellm.") {
        text = rest.split_once(": ").map_or(rest, |(_, r)| r);
        // `RateLimitError: ` and `OpenAIException - `, each when present.
        for sep in [": ", " - "] {
            if let Some((word, r)) = text.split_once(sep)
                && !word.is_empty()
                && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && (word.ends_with("Error") || word.ends_with("Exception"))
            {
                text = r;
            }
        }
    }
    let end = [". ", ".\n", "! ", "? "]
        .iter()
        .filter_map(|p| text.find(p).map(|i| i + 1))
        .min()
        .unwrap_or(text.len());
    let sentence: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let masked: Vec<String> = sentence.split(' ').map(mask_key).collect();
    let clean = sentinel_core::redact::text(masked.join(" ").trim());
    if clean.is_empty() {
        return None;
    }
    let mut quoted: String = clean.chars().take(MAX_QUOTE_CHARS).collect();
    if quoted.len() < clean.len() {
        quoted.push('…');
    }
    Some(quoted)
}

/// A word that looks like an API key (`sk-...`, even a masked one a
/// provider echoes back) as `sk-***`, its trailing punctuation kept.
fn mask_key(word: &str) -> String {
    let core = word.trim_end_matches(|c: char| c.is_ascii_punctuation());
    if core.len() > 3 && core.starts_with("sk-") {
        format!("sk-***{}", &word[core.len()..])
    } else {
        word.to_string()
    }
}

/// The parameter a refusal names as unsupported: OpenAI's `param` of an
/// `unsupported_parameter` ("Unsupported parameter: 'max_tokens'"), or the
/// name LiteLLM's `UnsupportedParamsError` gives ("does not support
/// parameters: ['temperature']", "gpt-5-mini doesn't support
/// temperature=0").
fn refused_param(error: &serde_json::Value) -> Option<String> {
    let field = |n: &str| error.get(n).and_then(|v| v.as_str()).unwrap_or("");
    let message = field("message");
    let lower = message.to_ascii_lowercase();
    let refused = field("code") == "unsupported_parameter"
        || lower.contains("unsupportedparamserror")
        || lower.contains("does not support parameters")
        || lower.starts_with("unsupported parameter");
    if !refused {
        return None;
    }
    let after = |marker: &str| {
        let at = message.find(marker)? + marker.len();
        let name: String = message[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect();
        (!name.is_empty() && name.len() <= 64).then_some(name)
    };
    let param = field("param");
    (!param.is_empty() && param != "None")
        .then(|| param.to_string())
        .filter(|p| p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .or_else(|| after("parameters: ['"))
        .or_else(|| after("parameter: '"))
        .or_else(|| after("doesn't support "))
        .or_else(|| after("does not support "))
}

/// `HTTP <status> <code or type>`, and an integer code (vLLM, llama.cpp,
/// LiteLLM's `"429"`) as `(code N)`: the error's words, never its message.
fn http_head(status: u16, body: &str) -> String {
    let head = format!("HTTP {status}");
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return head;
    };
    // Older vLLM puts the error at the top level of an `"object": "error"`.
    let error = match value.get("error") {
        Some(e) if e.is_object() => e,
        None if value.get("object").and_then(|o| o.as_str()) == Some("error") => &value,
        _ => return head,
    };
    // Only something shaped like an error code is quoted: a provider or a
    // proxy may put anything there, the key included. LiteLLM's "None" says nothing.
    let code_like = |c: &&str| {
        !c.is_empty()
            && c.len() <= 64
            && *c != "None"
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let text = |name: &str| error.get(name).and_then(|v| v.as_str()).filter(code_like);
    let number = match error.get("code") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(c)) => c.parse::<u64>().ok(),
        _ => None,
    };
    let name = text("code")
        .filter(|_| number.is_none())
        .or_else(|| text("type"));
    let mut reason = head;
    if let Some(name) = name {
        reason.push_str(&format!(" {name}"));
    }
    if let Some(n) = number {
        reason.push_str(&format!(" (code {n})"));
    }
    reason
}

/// An agent's failure in words: its exit code, the error body's code or
/// type and its message, and the last lines of its stderr, each redacted
/// and bounded: the agent's own words say what to fix.
fn agent_reason(exit: Option<i32>, body: &str, stderr: &str) -> String {
    let Some(code) = exit else {
        // Redacted before it is cut, so no piece of a secret survives the cut.
        return sentinel_core::redact::text(body)
            .chars()
            .take(300)
            .collect();
    };
    let quoted = http_head(0, body);
    let detail = quoted.trim_start_matches("HTTP 0").trim();
    let mut reason = if detail.is_empty() {
        format!("the agent exited with {code}")
    } else {
        format!("the agent exited with {code}: {detail}")
    };
    if let Some(message) = protocol::error_message(body) {
        reason.push_str(&format!(": \"{}\"", words(&message, 300, false)));
    }
    let tail = last_lines(stderr, 3);
    if !tail.is_empty() {
        reason.push_str(&format!(
            "; its stderr ended: \"{}\"",
            words(&tail, 300, true)
        ));
    }
    reason
}

/// The last `n` non-empty lines of `text`, joined with ` / `.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// Redacted, then cut to `max` characters, without control characters;
/// `tail` keeps the end (the last words of a log say most).
fn words(text: &str, max: usize, tail: bool) -> String {
    let clean: Vec<char> = sentinel_core::redact::text(text)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() <= max {
        return clean.into_iter().collect();
    }
    let kept: String = if tail {
        clean[clean.len() - max..].iter().collect()
    } else {
        clean[..max].iter().collect()
    };
    if tail {
        format!("...{kept}")
    } else {
        format!("{kept}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_answer_is_a_decision() {
        let a = parse_answer(
            r#"{"action":"EVOLVE","reason":"unchecked input","findings":[{"line":3,"severity":"major","message":"validate x"}]}"#,
        )
        .unwrap();
        assert_eq!(a.action, Action::Evolve);
        assert_eq!(a.findings[0].severity, Severity::Major);
    }

    #[test]
    fn anything_else_is_not_a_decision() {
        for bad in [
            "",
            "SKIP",
            r#"{"action":"skip","reason":"x","findings":[]}"#,
            r#"{"action":"SKIP","findings":[]}"#,
            r#"{"action":"SKIP","reason":"x"}"#,
            r#"{"action":"SKIP","reason":"","findings":[]}"#,
            r#"{"action":"SKIP","reason":"x","findings":[{"line":"3","severity":"major","message":"m"}]}"#,
            r#"{"action":"SKIP","reason":"x","findings":[{"line":3,"severity":"huge","message":"m"}]}"#,
            "```json\n{\"action\":\"SKIP\"}\n```",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn failure_reasons_name_the_code_and_the_first_sentence_with_the_key_masked() {
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-VKMI***wjh3.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        let r = failure_reason(&Failure::Http {
            status: 401,
            body: body.into(),
            headers: Vec::new(),
        });
        assert_eq!(
            r,
            "HTTP 401 invalid_api_key: Incorrect API key provided: sk-***."
        );
    }

    /// The bodies of `fixtures/peers/`.
    fn peer(name: &str) -> String {
        let path = format!("{}/../../fixtures/peers/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn http(status: u16, body: &str) -> String {
        failure_reason(&Failure::Http {
            status,
            body: body.into(),
            headers: Vec::new(),
        })
    }

    #[test]
    fn a_think_block_before_the_json_is_not_a_bad_response() {
        let completion =
            parse_completion(peer("llamacpp-think-completion.json").as_bytes()).unwrap();
        assert!(completion.content.starts_with("<think>"));
        let answer = parse_answer(&completion.content).unwrap();
        assert_eq!(answer.action, Action::Skip);
        // Only a leading, complete block is not the answer.
        assert!(parse_answer("<think>unfinished {\"action\":\"SKIP\"}").is_err());
        assert!(
            parse_answer(r#"{"action":"SKIP","reason":"x","findings":[]} <think>x</think>"#)
                .is_err()
        );
    }

    #[test]
    fn integer_codes_and_peer_types_are_kept_in_the_reason() {
        assert_eq!(
            http(400, &peer("vllm-context-length.json")),
            "HTTP 400 BadRequestError (code 400): This model's maximum context length is 4096 tokens."
        );
        assert!(
            http(400, &peer("vllm-context-length-old.json"))
                .starts_with("HTTP 400 BadRequestError (code 400): ")
        );
        assert_eq!(
            http(501, &peer("llamacpp-not-supported.json")),
            "HTTP 501 not_supported_error (code 501): This server does not support tools/response_format"
        );
        assert_eq!(
            http(429, &peer("litellm-cooldown.json")),
            "HTTP 429 (code 429): No deployments available for selected model."
        );
        assert!(
            http(400, &peer("azure-content-filter.json"))
                .starts_with("HTTP 400 content_filter: The response was filtered")
        );
    }

    #[test]
    fn the_proxys_words_are_kept_without_its_prefix() {
        assert_eq!(
            http(429, &peer("litellm-quota.json")),
            "HTTP 429 throttling_error (code 429): You exceeded your current quota, please check your plan and billing details."
        );
        assert_eq!(
            http(408, &peer("litellm-timeout.json")),
            "HTTP 408 invalid_request_error (code 408): Request timed out."
        );
        assert_eq!(
            http(429, &peer("litellm-provider-budget.json")),
            "HTTP 429 internal_server_error (code 429): No deployments available - crossed budget: Exceeded budget for provider openai: 0.00023 >= 0.0001"
        );
        assert_eq!(
            http(500, &peer("litellm-server.json")),
            "HTTP 500 internal_server_error (code 500): The server had an error processing your request."
        );
    }

    #[test]
    fn a_key_the_proxy_refused_says_so_and_never_echoes_the_key() {
        let no_db = http(400, &peer("litellm-no-db.json"));
        assert!(
            no_db.starts_with(
                "HTTP 400 no_db_connection (code 400): No connected db. (the proxy rejected the key"
            ),
            "{no_db}"
        );
        let bad = http(401, &peer("litellm-invalid-key.json"));
        assert!(bad.contains("Invalid proxy server token passed."), "{bad}");
        assert!(bad.contains("the proxy rejected the key"), "{bad}");
        assert!(!bad.contains("Received API Key"), "{bad}");
    }

    #[test]
    fn an_unsupported_parameter_names_it_and_the_flag() {
        let litellm = http(400, &peer("litellm-unsupported-params.json"));
        assert!(
            litellm.contains(
                "openai does not support parameters: ['temperature'], for model=gpt-5-mini."
            ),
            "{litellm}"
        );
        assert!(
            litellm.contains("the model refuses `temperature`")
                && litellm.contains("--reasoning-models"),
            "{litellm}"
        );
        // As LiteLLM 1.108.7 answered an alias of gpt-5-mini sent `temperature: 0`.
        let observed = http(400, &peer("litellm-unsupported-temperature.json"));
        assert!(
            observed
                .contains(": gpt-5-mini doesn't support temperature=0 while reasoning is active.")
                && observed.contains("the model refuses `temperature`"),
            "{observed}"
        );
        let openai = http(400, &peer("openai-unsupported-max-tokens.json"));
        assert!(
            openai.contains("the model refuses `max_tokens`"),
            "{openai}"
        );
        // Only a refused parameter gets the hint.
        assert!(!http(400, &peer("vllm-context-length.json")).contains("--reasoning-models"));
    }

    #[test]
    fn a_long_or_multi_line_message_is_bounded_to_one_line() {
        let long = format!(
            r#"{{"error":{{"message":"{}\nsecond line","type":"server_error","code":null}}}}"#,
            "x".repeat(500)
        );
        let r = http(500, &long);
        assert!(!r.contains('\n') && r.ends_with('…'), "{r}");
        assert!(r.chars().count() < 260, "{r}");
        let empty = r#"{"error":{"message":"   ","type":"server_error","code":null}}"#;
        assert_eq!(http(500, empty), "HTTP 500 server_error");
    }

    #[test]
    fn a_refusal_naming_the_response_format_is_told_from_other_400s() {
        let schema = r#"{"error":{"message":"Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.","type":"invalid_request_error","param":"response_format","code":null}}"#;
        assert!(refuses_response_format(schema));
        let words = r#"{"error":{"message":"json_schema is not supported","type":"BadRequestError","param":null,"code":400}}"#;
        assert!(refuses_response_format(words));
        assert!(!refuses_response_format(&peer(
            "openai-unsupported-max-tokens.json"
        )));
        assert!(!refuses_response_format(&peer("vllm-context-length.json")));
        assert!(!refuses_response_format("<html>"));
    }

    #[test]
    fn an_answer_cut_by_the_limit_is_cut_and_any_other_unparsable_one_is_bad() {
        let cut = judge(peer("openai-reasoning-cut.json").as_bytes(), 4096, None);
        match cut.result {
            Err((Failure::Cut(why), Some(usage))) => {
                assert!(why.contains("4096 completion tokens"), "{why}");
                assert_eq!(usage.completion_tokens, 4096);
            }
            other => panic!("{other:?}"),
        }
        let prose =
            r#"{"choices":[{"message":{"content":"I think SKIP."},"finish_reason":"stop"}]}"#;
        assert!(matches!(
            judge(prose.as_bytes(), 1024, None).result,
            Err((Failure::BadResponse(_), None))
        ));
    }

    #[test]
    fn the_servers_figure_is_the_calls_cost_header_first() {
        let body = r#"{"choices":[{"message":{"content":"{\"action\":\"SKIP\",\"reason\":\"r\",\"findings\":[]}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"cost":0.0007}}"#;
        assert_eq!(judge(body.as_bytes(), 1024, None).cost, Some(0.0007));
        assert_eq!(
            judge(body.as_bytes(), 1024, Some(0.0009)).cost,
            Some(0.0009)
        );
        let negative = body.replace("0.0007", "-1");
        assert_eq!(judge(negative.as_bytes(), 1024, None).cost, None);
    }

    #[test]
    fn the_strict_schema_requires_every_property_it_has() {
        for patches in [false, true] {
            let f = answer_schema(patches);
            let schema = &f["json_schema"]["schema"];
            assert_eq!(f["json_schema"]["strict"], true);
            let required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            let properties: Vec<&String> =
                schema["properties"].as_object().unwrap().keys().collect();
            assert_eq!(required.len(), properties.len(), "{patches}");
            assert_eq!(required.contains(&"content"), patches);
        }
    }

    #[test]
    fn no_retry_waits_past_the_ticks_time() {
        let limited = |secs| {
            let mut waits = Vec::new();
            let call = with_protocol_within(
                Utc::now(),
                &mut waits,
                true,
                Some(Duration::from_secs(secs)),
                || {
                    Err((
                        Failure::Http {
                            status: 429,
                            body: peer("litellm-rate-limit.json"),
                            headers: vec![("retry-after".into(), "8".into())],
                        },
                        None,
                    ))
                },
            );
            (call, waits)
        };
        let (call, waits) = limited(10);
        assert_eq!((call.attempts, waits), (2, vec![8000]));
        match call.outcome {
            Outcome::Failed {
                class,
                reason,
                hold_until,
            } => {
                assert_eq!(class, Class::RateLimit);
                assert!(reason.ends_with("not retried: the tick's 90 s for the model are spent"));
                assert!(hold_until.is_some(), "the class's hold still applies");
            }
            other => panic!("{other:?}"),
        }
        // With time enough, the protocol's three attempts.
        assert_eq!(limited(60).0.attempts, 3);
    }

    #[test]
    fn the_key_never_prints_itself() {
        let k = ApiKey::new("sk-secret".into());
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
    }
}
