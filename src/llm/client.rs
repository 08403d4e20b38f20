//! The advisor: one OpenAI-compatible chat-completions call per file, with
//! the error protocol as the only retry loop.
//!
//! One `ureq` agent with explicit timeouts and no status errors or
//! redirects; every failure is classified before anything is retried, and
//! sleeps go through a sleeper that tests replace.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::prices::{self, Usage};
use super::protocol::{self, Class, Failure, Step};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Minor,
    Major,
    Critical,
    Blocker,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub line: u64,
    pub severity: Severity,
    pub message: String,
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

/// Parse the model's answer strictly: anything else is `bad_response`.
pub fn parse_answer(content: &str) -> Result<Answer, String> {
    let answer: Answer = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not the expected JSON object ({e})"))?;
    if answer.reason.trim().is_empty() {
        return Err("the answer has an empty reason".into());
    }
    Ok(answer)
}

/// The message content and usage of a chat-completions body.
fn parse_completion(body: &[u8]) -> Result<(String, Option<Usage>), String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the response is not JSON ({e})"))?;
    let usage = prices::usage_from_response(&value);
    let content = value
        .pointer("/choices/0/message/content")
        .and_then(|c| c.as_str())
        .ok_or("the response has no choices[0].message.content")?;
    Ok((content.to_string(), usage))
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
}

/// Asks the model about files; one instance per tick.
pub struct OpenAiAdvisor {
    agent: ureq::Agent,
    cfg: OpenAiConfig,
    waits: Vec<u64>,
    calls: u64,
}

impl OpenAiAdvisor {
    pub fn new(cfg: OpenAiConfig) -> OpenAiAdvisor {
        // Without a CA file the agent cannot fail to build.
        let agent = crate::http::agent(cfg.timeout, None).expect("no CA file to read");
        OpenAiAdvisor {
            agent,
            cfg,
            waits: Vec::new(),
            calls: 0,
        }
    }

    fn body(&self, req: &AdviceRequest) -> serde_json::Value {
        let user = format!(
            "path: {}\nrole: {}\nrisk: {}\n\ncontent:\n{}",
            req.path, req.role, req.risk, req.content
        );
        // Reasoning models take `max_completion_tokens` and no temperature.
        let reasoning = self.cfg.model.starts_with('o')
            && self.cfg.model[1..].starts_with(|c: char| c.is_ascii_digit());
        let system = if self.cfg.patches {
            format!("{SYSTEM_PROMPT} {PATCH_PROMPT}")
        } else {
            SYSTEM_PROMPT.to_string()
        };
        let mut body = serde_json::json!({
            "model": self.cfg.model,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        if reasoning {
            body["max_completion_tokens"] = self.cfg.max_tokens.into();
        } else {
            body["temperature"] = 0.into();
            body["max_tokens"] = self.cfg.max_tokens.into();
        }
        body
    }

    /// One HTTP attempt.
    fn attempt(
        &mut self,
        body: &serde_json::Value,
    ) -> Result<(Answer, Option<Usage>), (Failure, Option<Usage>)> {
        self.calls += 1;
        let url = format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        );
        let sent = self
            .agent
            .post(&url)
            .header("Authorization", format!("Bearer {}", self.cfg.key.0))
            .header("Content-Type", "application/json")
            .send(body.to_string());
        let mut response = match sent {
            Ok(r) => r,
            Err(ureq::Error::Timeout(_)) => return Err((Failure::Timeout, None)),
            Err(e) => return Err((Failure::Network(crate::http::transport_message(&e)), None)),
        };
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let retry_after_ms = header("retry-after-ms");
        let retry_after = header("retry-after");
        let bytes = read_answer(&mut response).map_err(|f| (f, None))?;
        if !(200..300).contains(&status) {
            return Err((
                Failure::Http {
                    status,
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                    retry_after_ms,
                    retry_after,
                },
                None,
            ));
        }
        let (content, usage) =
            parse_completion(&bytes).map_err(|e| (Failure::BadResponse(e), None))?;
        match parse_answer(&content) {
            Ok(answer) => Ok((answer, usage)),
            // The call was billed even though its answer is useless.
            Err(e) => Err((Failure::BadResponse(e), usage)),
        }
    }

    /// Ask about one file, retrying only what the error protocol allows.
    pub fn ask(&mut self, req: &AdviceRequest, now: DateTime<Utc>) -> Call {
        let body = self.body(req);
        let mut waits = std::mem::take(&mut self.waits);
        let fake_sleep = self.cfg.fake_sleep;
        let call = with_protocol(now, &mut waits, fake_sleep, || self.attempt(&body));
        self.waits = waits;
        call
    }
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
        Err(e) => Err(Failure::Network(crate::http::transport_message(&e))),
    }
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
    mut attempt: impl FnMut() -> Attempt,
) -> Call {
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
                let wait = match &failure {
                    Failure::Http {
                        retry_after_ms,
                        retry_after,
                        ..
                    } => protocol::server_wait(
                        retry_after_ms.as_deref(),
                        retry_after.as_deref(),
                        now,
                    ),
                    _ => None,
                };
                match protocol::next_step(class, failures, wait, now) {
                    Step::Retry(d) => {
                        waits.push(d.as_millis() as u64);
                        if !fake_sleep {
                            std::thread::sleep(d);
                        }
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
        Failure::Network(m) | Failure::BadResponse(m) => m.clone(),
        Failure::Agent { exit, body } => agent_reason(*exit, body),
        Failure::Http { status, body, .. } => {
            #[derive(Deserialize)]
            struct Envelope {
                error: Inner,
            }
            #[derive(Deserialize)]
            struct Inner {
                #[serde(default)]
                code: Option<String>,
                #[serde(default, rename = "type")]
                kind: Option<String>,
            }
            // Only something shaped like an error code is quoted: a provider
            // or a proxy may put anything there, the key included.
            let code_like = |c: &String| {
                !c.is_empty()
                    && c.len() <= 64
                    && c.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            };
            match serde_json::from_str::<Envelope>(body) {
                Ok(e) => format!(
                    "HTTP {status} {}",
                    e.error
                        .code
                        .filter(code_like)
                        .or(e.error.kind.filter(code_like))
                        .unwrap_or_default()
                )
                .trim_end()
                .to_string(),
                Err(_) => format!("HTTP {status}"),
            }
        }
    }
}

/// An agent's failure in words: its exit code and the error body's code
/// or type, never its whole output (which may echo anything).
fn agent_reason(exit: Option<i32>, body: &str) -> String {
    let Some(code) = exit else {
        return body.chars().take(300).collect();
    };
    let quoted = failure_reason(&Failure::Http {
        status: 0,
        body: body.to_string(),
        retry_after_ms: None,
        retry_after: None,
    });
    let detail = quoted.trim_start_matches("HTTP 0").trim();
    if detail.is_empty() {
        format!("the agent exited with {code}")
    } else {
        format!("the agent exited with {code}: {detail}")
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
    fn failure_reasons_name_the_code_not_the_message() {
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-VKMI***wjh3.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        let r = failure_reason(&Failure::Http {
            status: 401,
            body: body.into(),
            retry_after_ms: None,
            retry_after: None,
        });
        assert_eq!(r, "HTTP 401 invalid_api_key");
    }

    #[test]
    fn the_key_never_prints_itself() {
        let k = ApiKey::new("sk-secret".into());
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
    }
}
