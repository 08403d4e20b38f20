//! The LLM error protocol: classify a failed call, then retry only what retrying can fix.

use std::time::Duration as StdDuration;

pub use crate::state::records::llm::{Circuit, Class};
use chrono::{DateTime, Duration, NaiveTime, Utc};

impl Class {
    pub const ALL: [Class; 11] = [
        Class::Timeout,
        Class::Network,
        Class::Server,
        Class::RateLimit,
        Class::Quota,
        Class::Budget,
        Class::Auth,
        Class::Request,
        Class::FileRequest,
        Class::BadResponse,
        Class::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Timeout => "timeout",
            Class::Network => "network",
            Class::Server => "server",
            Class::RateLimit => "rate_limit",
            Class::Quota => "quota",
            Class::Budget => "budget",
            Class::Auth => "auth",
            Class::Request => "request",
            Class::FileRequest => "file_request",
            Class::BadResponse => "bad_response",
            Class::Unknown => "unknown",
        }
    }

    /// Whether asking again about the same, unchanged file can never help:
    /// such a file may be given up at once, without holding the provider.
    pub fn is_permanent_for_the_file(self) -> bool {
        self == Class::FileRequest
    }
}

/// How long the provider is left alone once a class's retries are spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    None,
    For(Duration),
    UntilNextUtcDay,
}

/// One row of the protocol table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub retries: u32,
    /// Milliseconds to wait before retry n (1-based) is `backoff[n - 1]`.
    pub backoff: &'static [u64],
    pub hold: Hold,
}

/// The first hold after timeouts.
pub const TIMEOUT_HOLD: Duration = Duration::minutes(5);

/// The longest any hold grows to by repeating.
pub const MAX_ESCALATED_HOLD: Duration = Duration::hours(24);

/// The hold of a failure that would hold the provider until `until`, after
/// the circuit `previous`. Its hold ended and this call, the first after
/// it, failed again with no success between (a success clears the
/// circuit): whatever the class, type, code or words, the hold is at least
/// twice the last one, up to 24 h. This, not any list of words, is what
/// stops a loop on an error sentinel has never seen. Returns the new end
/// and how many repeats in a row it is (0: the first failure).
pub fn escalated(
    previous: Option<&Circuit>,
    until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> (DateTime<Utc>, u32) {
    let Some(prev) = previous.filter(|p| !is_open(p, now)) else {
        return (until, 0);
    };
    // A circuit saved before `opened` was kept cannot say how long it held.
    let Some(opened) = prev.opened.filter(|o| *o <= prev.until) else {
        return (until, 0);
    };
    let last = prev.until - opened;
    let doubled = (last + last).min(MAX_ESCALATED_HOLD);
    (until.max(now + doubled), prev.streak.saturating_add(1))
}

/// The protocol table of docs/advisor.md, row for row; a timeout
/// retries once and holds the provider (see `docs/advisor.md`).
pub fn rule(class: Class) -> Rule {
    let (retries, backoff, hold): (u32, &'static [u64], Hold) = match class {
        // A timeout that goes on holds longer each time (see `escalated`).
        Class::Timeout => (1, &[1000], Hold::For(TIMEOUT_HOLD)),
        Class::Network => (2, &[2000, 4000], Hold::For(Duration::minutes(5))),
        Class::Server => (2, &[2000, 4000], Hold::For(Duration::minutes(10))),
        Class::RateLimit => (2, &[5000, 15000], Hold::For(Duration::minutes(2))),
        Class::Quota => (0, &[], Hold::UntilNextUtcDay),
        // Budget windows are the proxy's; the UTC day is the one sentinel counts in.
        Class::Budget => (0, &[], Hold::UntilNextUtcDay),
        Class::Auth => (0, &[], Hold::For(Duration::minutes(60))),
        Class::Request => (0, &[], Hold::For(Duration::minutes(60))),
        Class::FileRequest => (0, &[], Hold::None),
        Class::BadResponse => (1, &[1000], Hold::None),
        Class::Unknown => (0, &[], Hold::For(Duration::minutes(5))),
    };
    Rule {
        retries,
        backoff,
        hold,
    }
}

/// What a human should know (and do) about a class, for the report and the circuit.
pub fn advice(class: Class) -> &'static str {
    match class {
        Class::Timeout => {
            "the provider did not answer in time, twice in a row: held for a while that grows while it keeps timing out; raise `--llm-timeout` if answers are slow but come, or check the provider (and a proxy's own retries) if they never come"
        }
        Class::Network => {
            "could not reach the provider (connect, DNS, reset or truncated body): check OPENAI_BASE_URL and the network; calls resume when the circuit closes"
        }
        Class::Server => {
            "the provider failed on its side (5xx, overloaded included): nothing to fix here; calls resume when the circuit closes"
        }
        Class::RateLimit => {
            "rate limit reached (requests or tokens per minute): calls resume when the circuit closes; lower the call rate or raise the limit if it keeps happening"
        }
        Class::Quota => {
            "billing quota exhausted: no further calls today; top up or raise the limit, then wait for 00:00 UTC or clear the circuit with `sentinel reset --circuit`"
        }
        Class::Budget => {
            "a budget set in front of the provider (a proxy's key, team or provider budget) refused the call: no further calls today; raise that budget, or wait for 00:00 UTC"
        }
        Class::FileRequest => {
            "the provider can never accept this file as it is (too long for the model's context, filtered, or too large): only this file failed and the others are still asked; shrink it, lower `--max-file-bytes`, or use a model with a larger context"
        }
        Class::Auth => {
            "the API key was refused (401/403, or a proxy's key check): fix OPENAI_API_KEY or its permissions, then clear the circuit with `sentinel reset --circuit`"
        }
        Class::Request => {
            "the provider rejected the request itself (unknown model, prompt too long, malformed): retrying cannot help; fix the model or shrink the prompt, then clear the circuit with `sentinel reset --circuit`"
        }
        Class::BadResponse => {
            "the provider answered, but not with the expected JSON: retried once; check that the model follows the answer format"
        }
        Class::Unknown => {
            "unrecognised provider error: held for a few minutes; read the reason and report it if it keeps happening"
        }
    }
}

/// One failed attempt, as the HTTP client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Timeout,
    /// connect/DNS/reset/truncated body
    Network(String),
    Http {
        status: u16,
        body: String,
        /// The headers that can carry a wait (`waits::is_wait_header`), as sent.
        headers: Vec<(String, String)>,
    },
    /// 2xx whose body is not the expected JSON answer
    BadResponse(String),
    /// 2xx cut by `finish_reason: length` before its answer was complete:
    /// a `bad_response` that asking the same again would only repeat.
    Cut(String),
    /// An agent command that failed: its exit code (`None`: it could not
    /// be started), what it printed on stdout and the end of its stderr.
    Agent {
        exit: Option<i32>,
        body: String,
        stderr: String,
    },
}

/// Billing codes that mean "out of money", not "too fast": retrying them loops until midnight.
/// OpenAI's documented codes, Anthropic's `billing_error` type and its
/// spend cap's `details.error_code`, Groq's spend limit.
const QUOTA_CODES: [&str; 8] = [
    "insufficient_quota",
    "credit_balance_exhausted",
    "organization_usage_limit_exceeded",
    "organization_spend_limit_exceeded",
    "project_spend_limit_exceeded",
    "billing_error",
    "enforced_spend_limit_reached",
    "blocked_api_access",
];

/// Out of money, said in words: any of these in a refusal's message makes
/// it `quota`, whatever its type, code or sentence, also inside a proxy's
/// wrapper. Each comes from a provider's own message (docs/advisor.md has
/// them): OpenAI "exceeded your current quota ... billing details",
/// Anthropic "credit balance is too low", OpenRouter "insufficient credits",
/// DeepSeek "Insufficient Balance", Gemini "check quota", spend and usage
/// limits of OpenAI's projects and organisations.
const QUOTA_WORDS: [&str; 12] = [
    "quota",
    "credit",
    "billing",
    "balance",
    "payment",
    "spend limit",
    "spending limit",
    "spend_limit",
    "usage limit",
    "usage_limit",
    "out of funds",
    "insufficient funds",
];

/// Whether a refusal's message speaks of money. Addresses are not words
/// (OpenAI's rate-limit messages link to `.../account/billing`), and a
/// message that says it is a rate limit is one, whatever advice it adds
/// about payment methods: its wait is what to honour.
fn speaks_of_money(message: &str) -> bool {
    let words: String = message
        .split_whitespace()
        .filter(|w| !w.contains("://") && !w.starts_with("www."))
        .collect::<Vec<_>>()
        .join(" ")
        // Words that hold a money word without speaking of money.
        .replace("credential", "")
        .replace("balancer", "");
    if words.contains("rate limit reached") || words.contains("rate limit exceeded") {
        return false;
    }
    // A quota that names when to come back is a window (Gemini's free tier
    // per minute or per day), not an empty purse: its wait is honoured.
    if super::waits::said_in_words(&words).is_some() {
        return false;
    }
    QUOTA_WORDS.iter().any(|w| words.contains(w))
}

/// A context-window or size refusal said in words: a proxy's class name
/// (LiteLLM's `ContextWindowExceededError`) or the provider's sentence.
const FILE_SIZE_PHRASES: [&str; 4] = [
    "contextwindowexceedederror",
    "request too large",
    "prompt is too long",
    "input is too long",
];

/// A proxy's own spending limits: LiteLLM's key/team `max_budget` ("Budget has
/// been exceeded!") and its `provider_budget_config` ("crossed budget").
const BUDGET_PHRASES: [&str; 4] = [
    "budget has been exceeded",
    "crossed budget",
    "exceeded budget",
    "exceededbudget",
];

/// Types and codes of a request that this file alone makes impossible:
/// OpenAI's and Azure's codes, llama.cpp's type.
const FILE_WORDS: [&str; 3] = [
    "context_length_exceeded",
    "content_filter",
    "exceed_context_size_error",
];

/// The same, said in words only (vLLM's `BadRequestError`, llama.cpp).
const FILE_PHRASES: [&str; 4] = [
    "maximum context length",
    "exceeds the available context size",
    "context length exceeded",
    "content management policy",
];

/// The `error` object's fields; all absent when the body is HTML, empty or not an error.
#[derive(Default)]
struct ErrorBody {
    kind: Option<String>,
    /// A string code as it is; an integer code (vLLM, llama.cpp) as its digits.
    code: Option<String>,
    message: Option<String>,
}

fn error_body(body: &str) -> ErrorBody {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(body) else {
        return ErrorBody::default();
    };
    // Gemini's OpenAI-compatible endpoint wraps its error in a list.
    if let serde_json::Value::Array(items) = &mut value {
        let first = items.drain(..).next().unwrap_or_default();
        value = first;
    }
    // Older vLLM puts the fields at the top level of an `"object": "error"`.
    let error = match value.get("error") {
        Some(e) => e,
        None if value.get("object").and_then(|o| o.as_str()) == Some("error") => &value,
        None => return ErrorBody::default(),
    };
    let field = |name: &str| match error.get(name) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) if n.is_u64() => Some(n.to_string()),
        _ => None,
    };
    // Anthropic names its spend cap only in `details.error_code`.
    let detail = error
        .get("details")
        .and_then(|d| d.get("error_code"))
        .and_then(|c| c.as_str())
        .map(str::to_string);
    ErrorBody {
        kind: field("type"),
        code: detail.or_else(|| field("code")),
        message: field("message").map(|m| with_retry_delay(m, error)),
    }
}

/// The limit a size refusal names: OpenAI's and vLLM's "maximum context
/// length is 16385 tokens", llama.cpp's "context size (8192 tokens)",
/// OpenAI's and Groq's "Limit 30000" of a request too large.
pub fn named_limit(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let after = ["maximum context length is ", "context size (", "limit "]
        .iter()
        .find_map(|p| lower.find(p).map(|i| &lower[i + p.len()..]))?;
    let digits: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .collect();
    if digits.is_empty() {
        return None;
    }
    Some(format!("{digits} tokens"))
}

/// `message` with Gemini's `RetryInfo.retryDelay` (in `details`, not in
/// the words) said in words, so that its wait is read where every other
/// one is, and a per-minute quota that names its wait is a window.
fn with_retry_delay(message: String, error: &serde_json::Value) -> String {
    let delay = error
        .get("details")
        .and_then(|d| d.as_array())
        .into_iter()
        .flatten()
        .find_map(|d| d.get("retryDelay").and_then(|r| r.as_str()));
    match delay {
        Some(delay) if !message.to_ascii_lowercase().contains("retry in") => {
            format!("{message} (retry in {delay})")
        }
        _ => message,
    }
}

/// The `message` of an error body, as the peer wrote it (not redacted).
pub fn error_message(body: &str) -> Option<String> {
    error_body(body).message.filter(|m| !m.trim().is_empty())
}

/// Class of a failed attempt. The body decides before the status does: both
/// "too many requests per minute" and "you are out of money" are 429.
pub fn classify(f: &Failure) -> Class {
    match f {
        Failure::Timeout => Class::Timeout,
        Failure::Network(_) => Class::Network,
        Failure::BadResponse(_) | Failure::Cut(_) => Class::BadResponse,
        Failure::Agent { exit, body, .. } => agent_class(*exit, body),
        Failure::Http { status, body, .. } => http_class(*status, &error_body(body)),
    }
}

/// An HTTP error's class: its `error.type` and `error.code` first, then the
/// words of its message (what a proxy keeps when it reshapes an error), then
/// the status.
fn http_class(status: u16, err: &ErrorBody) -> Class {
    let (kind, code) = (err.kind.as_deref(), err.code.as_deref());
    let said = |words: &[&str]| {
        kind.is_some_and(|k| words.contains(&k)) || code.is_some_and(|c| words.contains(&c))
    };
    let message = err.message.as_deref().unwrap_or("").to_ascii_lowercase();
    // Words count only on a refusal (4xx): a 5xx may quote anything.
    let mentions = |phrases: &[&str]| {
        (400..500).contains(&status) && phrases.iter().any(|p| message.contains(p))
    };
    if said(&["budget_exceeded"]) || mentions(&BUDGET_PHRASES) {
        return Class::Budget;
    }
    // LiteLLM's own timeout: 408, type `invalid_request_error`, code "408",
    // `litellm.Timeout: APITimeoutError` in the message. Not a bad request:
    // the provider behind the proxy did not answer in time.
    if status == 408 || (status >= 400 && message.starts_with("litellm.timeout")) {
        return Class::Timeout;
    }
    if is_proxy_key_refusal(status, err) {
        return Class::Auth;
    }
    // A 429 "Request too large" carries code rate_limit_exceeded, yet this
    // request can never fit the per-minute limit; a proxy may put its own
    // words before OpenAI's sentence.
    let too_large = status == 413 || mentions(&FILE_SIZE_PHRASES);
    if said(&FILE_WORDS) || too_large || mentions(&FILE_PHRASES) {
        return Class::FileRequest;
    }
    // 402 is "payment required" by its name (DeepSeek, OpenRouter); a 429
    // or a refusal of the request that speaks of money is out of money,
    // whichever words the provider or a proxy chose this month.
    let refusal = matches!(status, 400 | 403 | 429);
    if status == 402
        || (refusal && (kind == Some("insufficient_quota") || said(&QUOTA_CODES)))
        || (refusal && speaks_of_money(&message))
    {
        return Class::Quota;
    }
    // llama.cpp: the server lacks a feature; asking again cannot add it.
    if said(&["not_supported_error"]) {
        return Class::Request;
    }
    // llama.cpp while it loads the model, whatever status a proxy gives it.
    if said(&["unavailable_error"]) || mentions(&["loading model"]) {
        return Class::Server;
    }
    match status {
        429 => Class::RateLimit,
        401 | 403 => Class::Auth,
        400 | 404 | 422 => Class::Request,
        500..=599 => Class::Server,
        _ => Class::Unknown,
    }
}

/// LiteLLM's words for a key it refused itself: `no_db_connection` (a key
/// that is not the master key, on a proxy without a database) and its
/// `auth_error` ("Authentication Error, Invalid proxy server token passed").
const PROXY_KEY_WORDS: [&str; 2] = ["no_db_connection", "auth_error"];

/// The same, said in words only.
const PROXY_KEY_PHRASES: [&str; 3] = [
    "invalid proxy server token",
    "no connected db",
    "authentication error, ",
];

/// Whether a proxy refused the key sentinel sent it (not the upstream's key):
/// fixing the model or the prompt cannot help, only the key can.
fn is_proxy_key_refusal(status: u16, err: &ErrorBody) -> bool {
    let said = |w: &Option<String>| w.as_deref().is_some_and(|w| PROXY_KEY_WORDS.contains(&w));
    let message = err.message.as_deref().unwrap_or("").to_ascii_lowercase();
    (400..500).contains(&status)
        && (said(&err.kind)
            || said(&err.code)
            || PROXY_KEY_PHRASES.iter().any(|p| message.starts_with(p)))
}

/// Whether this refusal is a proxy's own refusal of the key (see
/// `is_proxy_key_refusal`), for the reason a person reads.
pub fn refused_by_proxy_key_check(status: u16, body: &str) -> bool {
    is_proxy_key_refusal(status, &error_body(body))
}

/// Exit codes of `sysexits.h` that say how to retry an agent.
const EX_TEMPFAIL: i32 = 75;
const EX_NOPERM: i32 = 77;

/// Class of a failed agent run. An error body is read like a provider's,
/// by its type and code; without one, EX_TEMPFAIL (75) is a server that may
/// recover and EX_NOPERM (77) a credential problem; anything else is unknown.
fn agent_class(exit: Option<i32>, body: &str) -> Class {
    let err = error_body(body);
    let (kind, code) = (err.kind.as_deref(), err.code.as_deref());
    let any = |words: &[&str]| {
        kind.is_some_and(|k| words.contains(&k)) || code.is_some_and(|c| words.contains(&c))
    };
    if kind == Some("insufficient_quota") || code.is_some_and(|c| QUOTA_CODES.contains(&c)) {
        return Class::Quota;
    }
    if code == Some("context_length_exceeded") || any(&["invalid_request_error", "request"]) {
        return Class::Request;
    }
    if any(&[
        "rate_limit_error",
        "rate_limit_exceeded",
        "rate_limit",
        "tokens",
        "requests",
    ]) {
        return Class::RateLimit;
    }
    if any(&[
        "authentication_error",
        "permission_error",
        "invalid_api_key",
        "auth",
    ]) {
        return Class::Auth;
    }
    if any(&["server_error", "api_error", "overloaded_error", "server"]) {
        return Class::Server;
    }
    if any(&["timeout"]) {
        return Class::Timeout;
    }
    match exit {
        Some(EX_TEMPFAIL) => Class::Server,
        Some(EX_NOPERM) => Class::Auth,
        _ => Class::Unknown,
    }
}

/// Longest wait that is slept; anything longer opens the circuit instead.
const MAX_SLEEP: StdDuration = StdDuration::from_secs(60);

/// Beyond this distance a circuit cannot be legitimate (24 h quota hold, plus slack).
const MAX_HOLD: Duration = Duration::hours(25);

/// The wait a failed attempt asked for: its wait headers and the words of
/// its message (see `waits`); `None` for a failure that is not an answer.
pub fn server_wait(f: &Failure, now: DateTime<Utc>) -> Option<super::waits::Wait> {
    match f {
        Failure::Http { body, headers, .. } => {
            super::waits::server_wait(headers, error_message(body).as_deref(), now)
        }
        _ => None,
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Sleep this long, then try again.
    Retry(StdDuration),
    /// Give up on this file; open the circuit until this instant (None = no circuit).
    Stop { hold_until: Option<DateTime<Utc>> },
}

fn hold_until(hold: Hold, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match hold {
        Hold::None => None,
        Hold::For(d) => Some(now + d),
        Hold::UntilNextUtcDay => Some(next_utc_midnight(now)),
    }
}

/// What to do after the `failures`-th failed attempt (1-based) of class `class`.
/// The server's wait wins over the table's backoff when sane; a wait over 60 s is
/// never slept: it stops and opens the circuit for that long (max(hold, wait)).
/// When retries are spent: Stop with the class's hold (None / now+d / next 00:00 UTC).
pub fn next_step(
    class: Class,
    failures: u32,
    server_wait: Option<StdDuration>,
    now: DateTime<Utc>,
) -> Step {
    let rule = rule(class);
    let hold = hold_until(rule.hold, now);
    // A long server wait holds the provider even when this class would not, and even
    // when the retries are spent anyway: calling before it ends is known to fail.
    if let Some(wait) = server_wait.filter(|w| *w > MAX_SLEEP) {
        let wait = Duration::from_std(wait).unwrap_or(MAX_HOLD).min(MAX_HOLD);
        let by_server = now + wait;
        return Step::Stop {
            hold_until: Some(hold.map_or(by_server, |h| h.max(by_server))),
        };
    }
    let failures = failures.max(1);
    if failures > rule.retries {
        return Step::Stop { hold_until: hold };
    }
    let table = rule
        .backoff
        .get(failures as usize - 1)
        .or(rule.backoff.last())
        .copied()
        .unwrap_or(0);
    Step::Retry(server_wait.unwrap_or(StdDuration::from_millis(table)))
}

impl Circuit {
    /// A circuit for `class`, carrying that class's advice.
    pub fn new(class: Class, reason: impl Into<String>, until: DateTime<Utc>) -> Circuit {
        Circuit {
            class,
            reason: reason.into(),
            until,
            advice: advice(class).to_owned(),
            opened: None,
            streak: 0,
        }
    }
}

/// Open at `now`? A circuit whose `until` is further away than any class could hold
/// (the clock went backwards, or the state was edited) counts as closed, so a bad
/// clock can never hold the provider forever.
pub fn is_open(c: &Circuit, now: DateTime<Utc>) -> bool {
    if now >= c.until {
        return false;
    }
    match c.opened {
        // Never longer than the hold it was opened with, counted from now.
        Some(opened) if opened <= c.until => c.until - now <= c.until - opened,
        _ => c.until - now <= MAX_HOLD,
    }
}

/// How an open circuit holds the provider, for `stats` and `explain`: until
/// when, why, and how it grew. `None` when it is closed.
pub fn describe_hold(c: &Circuit, now: DateTime<Utc>) -> Option<String> {
    if !is_open(c, now) {
        return None;
    }
    let length = c.opened.map(|o| c.until - o);
    let grown = match (c.streak, length) {
        (0, _) => String::new(),
        (n, Some(l)) => format!(
            "; it failed again on the first call after {n} hold(s) in a row, each twice the last (24 h at most): this one is {} min",
            l.num_minutes()
        ),
        (n, None) => format!("; it failed again after {n} hold(s) in a row"),
    };
    Some(format!(
        "held until {} ({}): {}{grown}",
        c.until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        c.class.as_str(),
        c.reason
    ))
}

/// The first 00:00 UTC strictly after `now` (exactly midnight holds a full day).
pub fn next_utc_midnight(now: DateTime<Utc>) -> DateTime<Utc> {
    let day = now.date_naive().succ_opt().unwrap_or(now.date_naive());
    day.and_time(NaiveTime::MIN).and_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(exit: Option<i32>, body: &str) -> Class {
        classify(&Failure::Agent {
            exit,
            body: body.to_string(),
            stderr: String::new(),
        })
    }

    #[test]
    fn an_agents_error_body_is_read_like_a_providers() {
        assert_eq!(agent(Some(1), QUOTA), Class::Quota);
        assert_eq!(agent(Some(1), RATE_LIMIT_TOKENS), Class::RateLimit);
        let auth = r#"{"error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert_eq!(agent(Some(1), auth), Class::Auth);
        let overloaded = r#"{"error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(agent(Some(2), overloaded), Class::Server);
    }

    #[test]
    fn an_agents_exit_code_decides_without_a_body() {
        assert_eq!(agent(Some(75), ""), Class::Server);
        assert_eq!(agent(Some(77), "not json"), Class::Auth);
        assert_eq!(agent(Some(1), ""), Class::Unknown);
        assert_eq!(agent(None, "cannot start"), Class::Unknown);
    }

    // Exact copies of the bodies documented in reference/api-shapes.md.
    const RATE_LIMIT_TOKENS: &str = r#"{"error":{"message":"Rate limit reached for o4-mini in organization org-**** on tokens per min (TPM): Limit 200000, Used 162960, Requested 42288. Please try again in 1.574s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;
    const QUOTA: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
    const SPEND_LIMIT: &str = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"project_spend_limit_exceeded"}}"#;
    const BAD_KEY: &str = r#"{"error":{"message":"Incorrect API key provided: sk-VKMI***wjh3. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    const NO_MODEL: &str = r#"{"error":{"message":"The model `gpt-4o` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#;
    const TOO_LONG: &str = r#"{"error":{"message":"This model's maximum context length is 16385 tokens. However, your messages resulted in 16468 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    const SERVER: &str = r#"{"error":{"message":"The server had an error processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if you keep seeing this error.","type":"server_error","param":null,"code":null}}"#;
    const OVERLOADED: &str = r#"{"error":{"message":"That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists.","type":"server_error","param":null,"code":null}}"#;
    // Documented in prose only ("starts with Request too large", code rate_limit_exceeded).
    const REQUEST_TOO_LARGE: &str = r#"{"error":{"message":"Request too large for gpt-4o in organization org-**** on tokens per min (TPM): Limit 30000, Requested 41234. The input or output tokens must be reduced in order to run successfully.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn now() -> DateTime<Utc> {
        at("2026-06-16T12:00:00Z")
    }

    fn http(status: u16, body: &str) -> Failure {
        Failure::Http {
            status,
            body: body.to_owned(),
            headers: Vec::new(),
        }
    }

    /// The wait of a 429 with these `retry-after-ms` and `Retry-After` headers.
    fn sw(ms: Option<&str>, s: Option<&str>, now: DateTime<Utc>) -> Option<StdDuration> {
        let mut headers = Vec::new();
        if let Some(ms) = ms {
            headers.push(("retry-after-ms".to_string(), ms.to_string()));
        }
        if let Some(s) = s {
            headers.push(("retry-after".to_string(), s.to_string()));
        }
        let failure = Failure::Http {
            status: 429,
            body: String::new(),
            headers,
        };
        server_wait(&failure, now).map(|w| w.wait)
    }

    fn ms(n: u64) -> StdDuration {
        StdDuration::from_millis(n)
    }

    fn secs(n: u64) -> StdDuration {
        StdDuration::from_secs(n)
    }

    /// Drives `next_step` the way the client does; returns (attempts, waits, hold).
    fn run(
        class: Class,
        server: Option<StdDuration>,
    ) -> (u32, Vec<StdDuration>, Option<DateTime<Utc>>) {
        let mut waits = Vec::new();
        let mut failures = 0;
        loop {
            failures += 1;
            match next_step(class, failures, server, now()) {
                Step::Retry(d) => waits.push(d),
                Step::Stop { hold_until } => return (failures, waits, hold_until),
            }
            assert!(failures < 100, "{class:?} never stops");
        }
    }

    #[test]
    fn the_table_matches_the_design_row_for_row() {
        let m = Duration::minutes;
        let expected = [
            (Class::Timeout, 1, &[1000][..], Hold::For(m(5))),
            (Class::Network, 2, &[2000, 4000][..], Hold::For(m(5))),
            (Class::Server, 2, &[2000, 4000][..], Hold::For(m(10))),
            (Class::RateLimit, 2, &[5000, 15000][..], Hold::For(m(2))),
            (Class::Quota, 0, &[][..], Hold::UntilNextUtcDay),
            (Class::Budget, 0, &[][..], Hold::UntilNextUtcDay),
            (Class::Auth, 0, &[][..], Hold::For(m(60))),
            (Class::Request, 0, &[][..], Hold::For(m(60))),
            (Class::FileRequest, 0, &[][..], Hold::None),
            (Class::BadResponse, 1, &[1000][..], Hold::None),
            (Class::Unknown, 0, &[][..], Hold::For(m(5))),
        ];
        for (class, retries, backoff, hold) in expected {
            assert_eq!(
                rule(class),
                Rule {
                    retries,
                    backoff,
                    hold
                },
                "{class:?}"
            );
        }
        assert_eq!(expected.len(), Class::ALL.len());
    }

    #[test]
    fn every_class_has_one_backoff_per_retry() {
        for class in Class::ALL {
            let r = rule(class);
            assert_eq!(r.backoff.len(), r.retries as usize, "{class:?}");
        }
    }

    #[test]
    fn class_names_are_snake_case_and_match_serde() {
        for class in Class::ALL {
            let json = serde_json::to_string(&class).unwrap();
            assert_eq!(json, format!("\"{}\"", class.as_str()));
            assert_eq!(serde_json::from_str::<Class>(&json).unwrap(), class);
        }
        assert_eq!(Class::RateLimit.as_str(), "rate_limit");
        assert_eq!(Class::BadResponse.as_str(), "bad_response");
    }

    #[test]
    fn every_class_has_its_own_one_sentence_advice() {
        let mut seen = std::collections::HashSet::new();
        for class in Class::ALL {
            let a = advice(class);
            assert!(!a.is_empty() && !a.contains('\n'), "{class:?}");
            assert!(seen.insert(a), "{class:?} shares its advice");
        }
        assert_eq!(
            advice(Class::Quota),
            "billing quota exhausted: no further calls today; top up or raise the limit, then wait for 00:00 UTC or clear the circuit with `sentinel reset --circuit`"
        );
    }

    #[test]
    fn every_advice_to_clear_the_circuit_names_the_command() {
        for class in Class::ALL {
            let a = advice(class);
            if a.contains("clear the circuit") {
                assert!(a.contains("`sentinel reset --circuit`"), "{class:?}: {a}");
            }
        }
        assert!(advice(Class::Auth).contains("`sentinel reset --circuit`"));
    }

    #[test]
    fn documented_rate_limit_on_tokens_is_rate_limit() {
        assert_eq!(classify(&http(429, RATE_LIMIT_TOKENS)), Class::RateLimit);
    }

    #[test]
    fn invariant_7_documented_insufficient_quota_is_quota_not_rate_limit() {
        assert_eq!(classify(&http(429, QUOTA)), Class::Quota);
    }

    #[test]
    fn documented_project_spend_limit_is_quota() {
        assert_eq!(classify(&http(429, SPEND_LIMIT)), Class::Quota);
    }

    #[test]
    fn documented_bad_key_is_auth() {
        assert_eq!(classify(&http(401, BAD_KEY)), Class::Auth);
    }

    #[test]
    fn documented_model_not_found_is_request() {
        assert_eq!(classify(&http(404, NO_MODEL)), Class::Request);
    }

    #[test]
    fn documented_context_length_exceeded_is_a_request_only_this_file_makes() {
        assert_eq!(classify(&http(400, TOO_LONG)), Class::FileRequest);
    }

    #[test]
    fn documented_500_server_error_is_server() {
        assert_eq!(classify(&http(500, SERVER)), Class::Server);
    }

    #[test]
    fn documented_503_overloaded_is_server() {
        assert_eq!(classify(&http(503, OVERLOADED)), Class::Server);
    }

    #[test]
    fn a_429_request_too_large_is_a_file_request_because_retrying_cannot_help() {
        assert_eq!(classify(&http(429, REQUEST_TOO_LARGE)), Class::FileRequest);
    }

    #[test]
    fn every_billing_code_is_quota_whatever_the_type() {
        for code in QUOTA_CODES {
            let body = format!(
                r#"{{"error":{{"message":"billing","type":"billing_error","param":null,"code":"{code}"}}}}"#
            );
            assert_eq!(classify(&http(429, &body)), Class::Quota, "{code}");
        }
    }

    #[test]
    fn insufficient_quota_type_is_quota_even_with_a_null_code() {
        let body =
            r#"{"error":{"message":"x","type":"insufficient_quota","param":null,"code":null}}"#;
        assert_eq!(classify(&http(429, body)), Class::Quota);
    }

    #[test]
    fn context_length_exceeded_is_a_file_request_whatever_the_status() {
        for status in [400, 429, 500] {
            assert_eq!(
                classify(&http(status, TOO_LONG)),
                Class::FileRequest,
                "{status}"
            );
        }
    }

    /// The bodies of `fixtures/peers/`, as the peers of reference/peer-shapes.md send them.
    fn peer(name: &str) -> String {
        let path = format!("{}/../../fixtures/peers/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn a_quota_error_through_litellm_is_quota_not_a_rate_limit() {
        // LiteLLM keeps the quota only in the message: type throttling_error, code "429".
        assert_eq!(
            classify(&http(429, &peer("litellm-quota.json"))),
            Class::Quota
        );
        assert_eq!(
            classify(&http(429, &peer("litellm-rate-limit.json"))),
            Class::RateLimit
        );
        assert_eq!(
            classify(&http(429, &peer("litellm-cooldown.json"))),
            Class::RateLimit
        );
    }

    #[test]
    fn a_proxy_budget_is_budget_held_until_midnight_not_a_rate_limit() {
        for (status, body) in [
            (422, "litellm-key-budget.json"),
            (429, "litellm-key-budget-429.json"),
            (429, "litellm-provider-budget.json"),
        ] {
            assert_eq!(
                classify(&http(status, &peer(body))),
                Class::Budget,
                "{body}"
            );
        }
        assert_eq!(
            next_step(Class::Budget, 1, None, now()),
            Step::Stop {
                hold_until: Some(at("2026-06-17T00:00:00Z"))
            }
        );
    }

    #[test]
    fn litellm_reshaped_auth_and_server_errors_keep_their_class() {
        assert_eq!(
            classify(&http(401, &peer("litellm-auth.json"))),
            Class::Auth
        );
        assert_eq!(
            classify(&http(500, &peer("litellm-server.json"))),
            Class::Server
        );
        // A parameter the model refuses is the configuration's fault: the provider is held.
        assert_eq!(
            classify(&http(400, &peer("litellm-unsupported-params.json"))),
            Class::Request
        );
        assert_eq!(
            classify(&http(400, &peer("litellm-unsupported-temperature.json"))),
            Class::Request
        );
        assert_eq!(
            classify(&http(400, &peer("openai-unsupported-max-tokens.json"))),
            Class::Request
        );
    }

    #[test]
    fn llama_cpp_not_supported_is_permanent() {
        let body = peer("llamacpp-not-supported.json");
        assert_eq!(classify(&http(501, &body)), Class::Request);
        assert_eq!(run(Class::Request, None).0, 1, "no retry");
        assert_eq!(
            classify(&http(503, &peer("llamacpp-loading.json"))),
            Class::Server
        );
        // Loading, whatever status a proxy in between gives it.
        assert_eq!(
            classify(&http(400, &peer("llamacpp-loading.json"))),
            Class::Server
        );
    }

    #[test]
    fn a_context_too_long_for_a_local_model_is_a_file_request() {
        for (status, body) in [
            (400, "llamacpp-context-size.json"),
            (400, "vllm-context-length.json"),
            (400, "vllm-context-length-old.json"),
            (400, "azure-content-filter.json"),
        ] {
            let class = classify(&http(status, &peer(body)));
            assert_eq!(class, Class::FileRequest, "{body}");
            assert!(class.is_permanent_for_the_file());
        }
        assert_eq!(classify(&http(413, "")), Class::FileRequest);
        assert!(!Class::Request.is_permanent_for_the_file());
    }

    #[test]
    fn an_unknown_model_on_ollama_holds_the_provider() {
        assert_eq!(
            classify(&http(404, &peer("ollama-not-found.json"))),
            Class::Request
        );
    }

    #[test]
    fn quota_and_budget_words_in_a_5xx_message_change_nothing() {
        let quoted = r#"{"error":{"message":"upstream said: You exceeded your current quota; Budget has been exceeded","type":"server_error","code":null}}"#;
        assert_eq!(classify(&http(500, quoted)), Class::Server);
    }

    #[test]
    fn a_429_with_an_html_or_empty_body_is_rate_limit() {
        let html =
            "<html><head><title>429 Too Many Requests</title></head><body>nginx</body></html>";
        assert_eq!(classify(&http(429, html)), Class::RateLimit);
        assert_eq!(classify(&http(429, "")), Class::RateLimit);
        assert_eq!(
            classify(&http(429, r#"{"detail":"slow down"}"#)),
            Class::RateLimit
        );
    }

    #[test]
    fn statuses_without_a_telling_body_fall_back_to_the_table() {
        let cases = [
            (401, Class::Auth),
            (403, Class::Auth),
            (400, Class::Request),
            (404, Class::Request),
            (413, Class::FileRequest),
            (422, Class::Request),
            (500, Class::Server),
            (502, Class::Server),
            (503, Class::Server),
            (599, Class::Server),
            (418, Class::Unknown),
            (302, Class::Unknown),
            (200, Class::Unknown),
            (600, Class::Unknown),
        ];
        for (status, class) in cases {
            assert_eq!(
                classify(&http(status, "<html>oops</html>")),
                class,
                "{status}"
            );
        }
    }

    /// One test per provider message: the class it must get, whatever the
    /// provider called its type and code. Bodies as the providers publish
    /// them (docs/advisor.md names each source); `...` where they elide.
    macro_rules! provider_says {
        ($($name:ident: $status:expr, $body:expr => $class:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(classify(&http($status, $body)), $class);
            }
        )*};
    }

    provider_says! {
        openai_no_credits_remaining_is_quota: 429,
            r#"{"error": {"message": "You have no credits remaining. Add credits to continue using the API at https://platform.openai.com/settings/organization/billing/.", "type": "insufficient_quota", "param": null, "code": "credit_balance_exhausted"}}"#
            => Class::Quota;
        openai_exceeded_quota_without_a_code_is_quota: 429,
            r#"{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "requests", "param": null, "code": null}}"#
            => Class::Quota;
        anthropic_credit_balance_too_low_is_quota_though_a_400: 400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#
            => Class::Quota;
        anthropic_monthly_spend_cap_is_quota_though_a_rate_limit_error: 429,
            r#"{"type": "error", "error": {"type": "rate_limit_error", "message": "You have reached your API usage limits: your organization has crossed its monthly API usage threshold, set based on your organization's API tier. You will regain access on 2026-09-01 at 00:00 UTC.", "details": { "error_code": "enforced_spend_limit_reached" }}}"#
            => Class::Quota;
        anthropic_workspace_spend_limit_is_quota: 400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified workspace API usage limits. You will regain access on 2026-09-01 at 00:00 UTC."}}"#
            => Class::Quota;
        openrouter_insufficient_credits_is_quota: 402,
            r#"{"error":{"message":"Insufficient credits. Add more using https://openrouter.ai/settings/credits","code":402,"metadata":{"limit_source":"openrouter_credits"}}}"#
            => Class::Quota;
        gemini_prepayment_credits_depleted_is_quota: 402,
            r#"{"error": {"code": 402, "message": "Your prepayment credits are depleted. Please go to AI Studio at    https://ai.studio/projects to manage your project and billing. Learn more at https://ai.google.dev/gemini-api/docs/billing#prepay.", "status": "RESOURCE_EXHAUSTED"}}"#
            => Class::Quota;
        gemini_prepayment_credits_depleted_as_a_429_is_quota: 429,
            r#"{"error": {"code": 429, "message": "Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing.", "status": "RESOURCE_EXHAUSTED"}}"#
            => Class::Quota;
        gemini_resource_exhausted_in_a_list_is_quota: 429,
            r#"[{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}]"#
            => Class::Quota;
        deepseek_insufficient_balance_is_quota: 402,
            r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#
            => Class::Quota;
        mistral_payment_required_is_quota_by_its_status: 402,
            r#"{"object":"error","message":"...","type":"...","param":null,"code":null}"#
            => Class::Quota;
        groq_blocked_api_access_is_quota: 400,
            r#"{"error":{"message":"...","type":"invalid_request_error","code":"blocked_api_access"}}"#
            => Class::Quota;
        xai_used_all_available_credits_is_quota: 429,
            r#"{"error":{"message":"Your team 0f3c... has either used all available credits or reached its monthly spending limit. To continue making API requests, please purchase more credits or raise your spending limit."}}"#
            => Class::Quota;
        openai_per_day_limit_with_a_payment_hint_is_a_rate_limit: 429,
            r#"{"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-**** on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in 7m12s. Visit https://platform.openai.com/account/rate-limits to learn more. You can increase your rate limit by adding a payment method to your account at https://platform.openai.com/account/billing.", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}"#
            => Class::RateLimit;
        gemini_free_tier_per_minute_quota_with_its_retry_delay_is_a_rate_limit: 429,
            r#"{"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "26s"}]}}"#
            => Class::RateLimit;
        groq_tokens_per_minute_with_a_billing_address_is_a_rate_limit: 429,
            r#"{"error": {"message": "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_...` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 2542, Requested 9855. Please try again in 1.984999999s. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing", "type": "tokens", "code": "rate_limit_exceeded"}}"#
            => Class::RateLimit;
        openrouter_free_models_per_day_is_a_rate_limit: 429,
            r#"{"error":{"message":"Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day","code":429}}"#
            => Class::RateLimit;
        azure_pricing_tier_limit_is_a_rate_limit: 429,
            r#"{"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2023-05-15 have exceeded token rate limit of your current AIServices S0 pricing tier. Please retry after 86400 seconds. Please contact Azure support service if you would like to further increase the default rate limit."}}"#
            => Class::RateLimit;
        groq_request_too_large_is_that_files_failure: 413,
            r#"{"error":{"message":"Request too large for model llama-3.1-8b-instant in organization org_xxxxxxx service tier on_demand on tokens per minute (TPM): Limit 6000, Requested 12328, please reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today at https://console.groq.com/settings/billing","type":"tokens","code":"rate_limit_exceeded"}}"#
            => Class::FileRequest;
        an_invalid_credential_is_not_a_credit: 403,
            r#"{"error":{"message":"Invalid credentials for this project.","type":"permission_error"}}"#
            => Class::Auth;
    }

    /// The answers a real LiteLLM 1.108.7 sent (fixtures/peers/litellm-1.108.7/).
    fn recorded(name: &str) -> Failure {
        let path = format!(
            "{}/../../fixtures/peers/litellm-1.108.7/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let rec: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let headers = rec["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().to_string(),
                    h[1].as_str().unwrap().to_string(),
                )
            })
            .filter(|(n, _)| crate::llm::waits::is_wait_header(n))
            .collect();
        Failure::Http {
            status: rec["status"].as_u64().unwrap() as u16,
            body: rec["body"].as_str().unwrap().to_string(),
            headers,
        }
    }

    #[test]
    fn behind_litellm_each_recorded_answer_gets_its_class_and_its_wait() {
        let h = Duration::hours;
        let cases = [
            ("credits-429", Class::Quota, None),
            (
                "requests-per-day-429",
                Class::RateLimit,
                Some(h(8) + Duration::seconds(38 * 60 + 24)),
            ),
            ("retry-after-two-days-429", Class::RateLimit, Some(h(24))),
            ("unknown-429", Class::RateLimit, None),
            ("context-window-400", Class::FileRequest, None),
        ];
        for (name, class, wait) in cases {
            let failure = recorded(name);
            assert_eq!(classify(&failure), class, "{name}");
            let got = server_wait(&failure, now()).map(|w| Duration::from_std(w.wait).unwrap());
            assert_eq!(got, wait, "{name}");
        }
    }

    #[test]
    fn quota_words_in_a_5xx_change_nothing_and_in_a_403_mean_quota() {
        // A 403 that speaks of quota is out of money by its words.
        assert_eq!(classify(&http(403, QUOTA)), Class::Quota);
        assert_eq!(classify(&http(500, SPEND_LIMIT)), Class::Server);
    }

    #[test]
    fn transport_failures_keep_their_own_class() {
        assert_eq!(classify(&Failure::Timeout), Class::Timeout);
        assert_eq!(
            classify(&Failure::Network("connection reset".into())),
            Class::Network
        );
        assert_eq!(
            classify(&Failure::BadResponse("not json".into())),
            Class::BadResponse
        );
    }

    #[test]
    fn classes_without_retries_make_exactly_one_attempt() {
        for class in [
            Class::Quota,
            Class::Budget,
            Class::Auth,
            Class::Request,
            Class::FileRequest,
            Class::Unknown,
        ] {
            let (attempts, waits, _) = run(class, None);
            assert_eq!(attempts, 1, "{class:?}");
            assert!(waits.is_empty(), "{class:?}");
        }
    }

    #[test]
    fn retried_classes_make_exactly_the_table_attempts_with_the_table_waits() {
        let cases = [
            (Class::Server, 3, vec![ms(2000), ms(4000)]),
            (Class::Network, 3, vec![ms(2000), ms(4000)]),
            (Class::Timeout, 2, vec![ms(1000)]),
            (Class::RateLimit, 3, vec![ms(5000), ms(15000)]),
            (Class::BadResponse, 2, vec![ms(1000)]),
        ];
        for (class, attempts, waits) in cases {
            let (made, slept, _) = run(class, None);
            assert_eq!((made, slept), (attempts, waits), "{class:?}");
        }
    }

    #[test]
    fn spent_retries_open_the_circuit_for_the_class_hold() {
        let n = now();
        let cases = [
            (Class::Timeout, Some(n + Duration::minutes(5))),
            (Class::Network, Some(n + Duration::minutes(5))),
            (Class::Server, Some(n + Duration::minutes(10))),
            (Class::RateLimit, Some(n + Duration::minutes(2))),
            (Class::Quota, Some(at("2026-06-17T00:00:00Z"))),
            (Class::Budget, Some(at("2026-06-17T00:00:00Z"))),
            (Class::Auth, Some(n + Duration::minutes(60))),
            (Class::Request, Some(n + Duration::minutes(60))),
            (Class::FileRequest, None),
            (Class::BadResponse, None),
            (Class::Unknown, Some(n + Duration::minutes(5))),
        ];
        for (class, hold) in cases {
            assert_eq!(run(class, None).2, hold, "{class:?}");
        }
    }

    #[test]
    fn a_sane_server_wait_replaces_the_table_backoff() {
        assert_eq!(
            next_step(Class::RateLimit, 1, Some(secs(3)), now()),
            Step::Retry(secs(3))
        );
        assert_eq!(
            next_step(Class::RateLimit, 2, Some(ms(1574)), now()),
            Step::Retry(ms(1574))
        );
    }

    #[test]
    fn a_server_wait_does_not_buy_retries_the_class_does_not_have() {
        assert_eq!(
            next_step(Class::Quota, 1, Some(secs(2)), now()),
            Step::Stop {
                hold_until: Some(at("2026-06-17T00:00:00Z"))
            }
        );
        assert_eq!(run(Class::RateLimit, Some(secs(1))).0, 3);
    }

    #[test]
    fn a_wait_of_exactly_60_s_is_still_slept() {
        assert_eq!(
            next_step(Class::RateLimit, 1, Some(secs(60)), now()),
            Step::Retry(secs(60))
        );
    }

    #[test]
    fn a_120_s_server_wait_opens_the_circuit_for_120_s_instead_of_sleeping() {
        assert_eq!(
            next_step(Class::RateLimit, 1, Some(secs(120)), now()),
            Step::Stop {
                hold_until: Some(now() + Duration::seconds(120))
            }
        );
        // A class with no hold of its own is held for the server's wait too.
        assert_eq!(
            next_step(Class::BadResponse, 1, Some(secs(120)), now()),
            Step::Stop {
                hold_until: Some(now() + Duration::seconds(120))
            }
        );
    }

    #[test]
    fn a_long_server_wait_and_the_class_hold_take_the_longer() {
        assert_eq!(
            next_step(Class::RateLimit, 1, Some(secs(300)), now()),
            Step::Stop {
                hold_until: Some(now() + Duration::seconds(300))
            }
        );
        assert_eq!(
            next_step(Class::Server, 1, Some(secs(120)), now()),
            Step::Stop {
                hold_until: Some(now() + Duration::minutes(10))
            }
        );
        // Retries already spent: the server's longer wait still wins over the class hold.
        assert_eq!(
            next_step(Class::RateLimit, 3, Some(secs(300)), now()),
            Step::Stop {
                hold_until: Some(now() + Duration::seconds(300))
            }
        );
    }

    #[test]
    fn a_zero_failure_count_is_read_as_the_first_failure() {
        assert_eq!(
            next_step(Class::Server, 0, None, now()),
            Step::Retry(ms(2000))
        );
    }

    #[test]
    fn the_longer_of_retry_after_ms_and_retry_after_wins() {
        assert_eq!(sw(Some("1500.5"), Some("7"), now()), Some(secs(7)));
        assert_eq!(
            sw(Some("9000.5"), Some("7"), now()),
            Some(StdDuration::from_micros(9_000_500))
        );
    }

    #[test]
    fn the_wait_a_proxy_passes_on_is_read_and_the_longest_wins() {
        // LiteLLM sends an upstream `retry-after: 3600` as `llm_provider-retry-after`.
        let failure = Failure::Http {
            status: 429,
            body: peer("litellm-rate-limit.json"),
            headers: vec![
                ("retry-after".into(), "7".into()),
                ("llm_provider-retry-after".into(), "3600".into()),
            ],
        };
        let wait = server_wait(&failure, now()).map(|w| w.wait);
        assert_eq!(wait, Some(secs(3600)));
        assert_eq!(
            next_step(Class::RateLimit, 1, wait, now()),
            Step::Stop {
                hold_until: Some(now() + Duration::hours(1))
            }
        );
    }

    #[test]
    fn litellms_own_timeout_is_a_timeout_not_an_unknown_error() {
        assert_eq!(
            classify(&http(408, &peer("litellm-timeout.json"))),
            Class::Timeout
        );
    }

    #[test]
    fn a_key_the_proxy_refused_is_auth_not_a_request_problem() {
        for (status, body) in [
            (400, "litellm-no-db.json"),
            (401, "litellm-invalid-key.json"),
        ] {
            assert_eq!(classify(&http(status, &peer(body))), Class::Auth, "{body}");
            assert!(refused_by_proxy_key_check(status, &peer(body)), "{body}");
        }
        // The upstream's refusal of the proxy's key is auth too, but not the proxy's check.
        assert!(!refused_by_proxy_key_check(401, &peer("litellm-auth.json")));
    }

    #[test]
    fn a_failure_that_repeats_holds_twice_as_long_whatever_its_class_up_to_a_day() {
        let m = Duration::minutes;
        let mut circuit: Option<Circuit> = None;
        let mut t = now();
        let mut holds = Vec::new();
        for class in [
            Class::RateLimit,
            Class::Unknown,
            Class::Server,
            Class::Network,
            Class::Timeout,
            Class::RateLimit,
            Class::RateLimit,
            Class::RateLimit,
            Class::RateLimit,
            Class::RateLimit,
            Class::RateLimit,
            Class::RateLimit,
        ] {
            let Step::Stop {
                hold_until: Some(until),
            } = next_step(class, u32::MAX, None, t)
            else {
                panic!("{class:?} holds");
            };
            let (until, streak) = escalated(circuit.as_ref(), until, t);
            holds.push(until - t);
            let mut c = Circuit::new(class, "again", until);
            c.opened = Some(t);
            c.streak = streak;
            circuit = Some(c);
            // The first call after the hold ended.
            t = until;
        }
        assert_eq!(
            holds,
            [
                m(2),
                m(5),
                m(10),
                m(20),
                m(40),
                m(80),
                m(160),
                m(320),
                m(640),
                m(1280),
                m(1440),
                m(1440)
            ]
        );
        assert_eq!(circuit.unwrap().streak, 11);
    }

    #[test]
    fn a_failure_while_the_circuit_is_still_open_or_after_a_success_does_not_grow() {
        let until = now() + Duration::minutes(2);
        assert_eq!(escalated(None, until, now()), (until, 0));
        let mut open = Circuit::new(Class::RateLimit, "x", now() + Duration::minutes(30));
        open.opened = Some(now() - Duration::minutes(30));
        assert_eq!(escalated(Some(&open), until, now()), (until, 0));
        let mut unknown_length = Circuit::new(Class::RateLimit, "x", now());
        unknown_length.opened = None;
        assert_eq!(escalated(Some(&unknown_length), until, now()), (until, 0));
    }

    #[test]
    fn retry_after_seconds_is_used_without_retry_after_ms() {
        assert_eq!(sw(None, Some("7"), now()), Some(secs(7)));
        assert_eq!(sw(None, Some(" 7 "), now()), Some(secs(7)));
    }

    #[test]
    fn retry_after_as_an_http_date_is_relative_to_now() {
        assert_eq!(
            sw(None, Some("Tue, 16 Jun 2026 12:00:30 GMT"), now()),
            Some(secs(30))
        );
        assert_eq!(
            sw(None, Some("Tue, 16 Jun 2026 11:59:00 GMT"), now()),
            None,
            "a date in the past asks for no wait"
        );
        assert_eq!(sw(None, Some("Tue, 16 Jun 2026 12:00:00 GMT"), now()), None);
    }

    #[test]
    fn zero_negative_and_garbage_waits_are_ignored() {
        for bad in ["0", "-1", "0.0", "-1.5", "soon", "", "NaN", "inf", "1e400"] {
            assert_eq!(sw(Some(bad), None, now()), None, "ms {bad:?}");
            assert_eq!(sw(None, Some(bad), now()), None, "s {bad:?}");
        }
        assert_eq!(sw(None, None, now()), None);
    }

    #[test]
    fn a_bad_retry_after_ms_falls_back_to_retry_after() {
        assert_eq!(sw(Some("-1"), Some("7"), now()), Some(secs(7)));
        assert_eq!(sw(Some("garbage"), Some("7"), now()), Some(secs(7)));
    }

    #[test]
    fn a_wait_longer_than_a_day_is_held_for_a_day() {
        assert_eq!(sw(None, Some("86400"), now()), Some(secs(86_400)));
        assert_eq!(sw(None, Some("86401"), now()), Some(secs(86_400)));
        assert_eq!(sw(Some("1e12"), None, now()), Some(secs(86_400)));
        assert_eq!(
            sw(None, Some("Fri, 01 Jan 2100 00:00:00 GMT"), now()),
            Some(secs(86_400))
        );
    }

    #[test]
    fn the_next_utc_midnight_is_strictly_after_now() {
        assert_eq!(
            next_utc_midnight(at("2026-06-16T12:00:00Z")),
            at("2026-06-17T00:00:00Z")
        );
        assert_eq!(
            next_utc_midnight(at("2026-06-16T23:59:59Z")),
            at("2026-06-17T00:00:00Z")
        );
        assert_eq!(
            next_utc_midnight(at("2026-06-16T00:00:00Z")),
            at("2026-06-17T00:00:00Z")
        );
        assert_eq!(
            next_utc_midnight(at("2026-12-31T23:00:00Z")),
            at("2027-01-01T00:00:00Z")
        );
    }

    #[test]
    fn a_quota_hold_ends_at_the_next_utc_midnight() {
        for (now, until) in [
            ("2026-06-16T23:59:59Z", "2026-06-17T00:00:00Z"),
            ("2026-06-16T00:00:00Z", "2026-06-17T00:00:00Z"),
            ("2026-06-16T09:00:00Z", "2026-06-17T00:00:00Z"),
        ] {
            assert_eq!(
                next_step(Class::Quota, 1, None, at(now)),
                Step::Stop {
                    hold_until: Some(at(until))
                },
                "{now}"
            );
        }
    }

    #[test]
    fn a_quota_hold_is_utc_whatever_offset_the_clock_was_read_in() {
        let local: DateTime<chrono::FixedOffset> = "2026-06-17T01:30:00+02:00".parse().unwrap();
        assert_eq!(
            next_utc_midnight(local.with_timezone(&Utc)),
            at("2026-06-17T00:00:00Z")
        );
    }

    #[test]
    fn a_circuit_is_open_before_until_and_closed_from_until_on() {
        let c = Circuit::new(
            Class::Server,
            "503 overloaded",
            now() + Duration::minutes(10),
        );
        assert!(is_open(&c, now()));
        assert!(is_open(&c, now() + Duration::minutes(9)));
        assert!(!is_open(&c, now() + Duration::minutes(10)));
        assert!(!is_open(&c, now() + Duration::hours(1)));
    }

    #[test]
    fn a_full_day_quota_circuit_is_open() {
        let midnight = at("2026-06-16T00:00:00Z");
        let c = Circuit::new(
            Class::Quota,
            "insufficient_quota",
            next_utc_midnight(midnight),
        );
        assert!(is_open(&c, midnight));
    }

    #[test]
    fn a_circuit_absurdly_far_ahead_is_treated_as_closed() {
        let c = Circuit::new(Class::RateLimit, "429", now() + Duration::days(30));
        assert!(!is_open(&c, now()));
        let edge = Circuit::new(Class::Quota, "x", now() + Duration::hours(25));
        assert!(is_open(&edge, now()));
        let past = Circuit::new(
            Class::Quota,
            "x",
            now() + Duration::hours(25) + Duration::seconds(1),
        );
        assert!(!is_open(&past, now()));
    }

    #[test]
    fn a_circuit_carries_its_class_advice_and_round_trips_through_json() {
        let c = Circuit::new(
            Class::Auth,
            "401 invalid_api_key",
            now() + Duration::hours(1),
        );
        assert_eq!(c.advice, advice(Class::Auth));
        let json = serde_json::to_string(&c).unwrap();
        assert!(json.contains("\"class\":\"auth\""), "{json}");
        assert_eq!(serde_json::from_str::<Circuit>(&json).unwrap(), c);
    }
}
