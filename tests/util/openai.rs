//! A fake OpenAI-compatible chat-completions server for the advisor's
//! end-to-end tests.
//!
//! Like the fake GitLab it is a small HTTP/1.1 server on `127.0.0.1:0` over
//! `std::net`: every request is recorded whole (method, target, headers and
//! body) so a test counts the attempts sentinel made, and a queue of canned
//! replies is consumed before a default reply, so a test scripts exactly
//! what the provider answers to the first, second, ... request. A slow reply
//! sleeps on the server's connection thread, never on the test's. The server
//! stops, and frees its port, when dropped.
//!
//! The bodies come from `fixtures/openai/`: the documented error bodies as
//! they are, and `completion.json` as the template of every success.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::http::{self, Conn, Request, Server, lock};
use super::{Run, Sandbox};

/// The key the advisor tests give sentinel in `OPENAI_API_KEY`.
pub const KEY: &str = "sk-test-0123456789abcdef";

/// The path sentinel posts to, under the `/v1` base.
pub const COMPLETIONS: &str = "/v1/chat/completions";

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// The bytes of `fixtures/openai/<name>`.
pub fn fixture_text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openai")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `fixtures/openai/<name>`, parsed.
pub fn fixture(name: &str) -> Value {
    serde_json::from_str(&fixture_text(name))
        .unwrap_or_else(|e| panic!("fixtures/openai/{name} is not JSON: {e}"))
}

/// Tokens of a success, as `usage` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// All prompt tokens, the cached ones included.
    pub prompt: u64,
    pub cached: u64,
    pub completion: u64,
}

/// The usage of `fixtures/openai/completion.json`.
pub const FIXTURE_USAGE: Usage = Usage {
    prompt: 10_000,
    cached: 8_000,
    completion: 500,
};

/// The usage of `fixtures/openai/completion-not-json.json`.
pub const NOT_JSON_USAGE: Usage = Usage {
    prompt: 1_200,
    cached: 0,
    completion: 20,
};

impl Usage {
    /// What these tokens cost at `input`, `cached_input` and `output` USD
    /// per million, priced by hand: (prompt - cached) * in + cached * cached
    /// + completion * out.
    pub fn cost(self, input: f64, cached_input: f64, output: f64) -> f64 {
        ((self.prompt - self.cached) as f64 * input
            + self.cached as f64 * cached_input
            + self.completion as f64 * output)
            / 1e6
    }
}

/// `completion.json` with its answer replaced by `content` (and its usage
/// by `usage`, when given). Keys the template lacks are never added.
pub fn completion(content: &str, usage: Option<Usage>) -> Value {
    let mut body = fixture("completion.json");
    let message = body
        .pointer_mut("/choices/0/message/content")
        .expect("completion.json has choices[0].message.content");
    *message = Value::String(content.to_string());
    if let Some(u) = usage {
        let usage = body.get_mut("usage").expect("completion.json has usage");
        usage["prompt_tokens"] = u.prompt.into();
        usage["completion_tokens"] = u.completion.into();
        usage["total_tokens"] = (u.prompt + u.completion).into();
        usage["prompt_tokens_details"]["cached_tokens"] = u.cached.into();
    }
    body
}

// ---------------------------------------------------------------------------
// Replies and recorded requests
// ---------------------------------------------------------------------------

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Exactly this status, headers and body.
    Fixed {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Wait `delay` on the connection's thread (never the test's), then
    /// answer with `then`.
    Slow { delay: Duration, then: Box<Reply> },
    /// Announce `declared` bytes of body, send `body` (shorter), close.
    Truncated {
        status: u16,
        declared: usize,
        body: Vec<u8>,
    },
}

impl Reply {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::Fixed {
            status,
            headers: openai_headers(),
            body: body.to_string().into_bytes(),
        }
    }

    /// `status` with `fixtures/openai/<file>` as its body, byte for byte.
    pub fn fixture(status: u16, file: &str) -> Reply {
        Reply::Fixed {
            status,
            headers: openai_headers(),
            body: fixture_text(file).into_bytes(),
        }
    }

    /// `status` with `fixtures/peers/<file>` as its body, byte for byte: what
    /// a proxy or a local server sends instead of OpenAI.
    pub fn peer(status: u16, file: &str) -> Reply {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/peers")
            .join(file);
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Reply::Fixed {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body,
        }
    }

    /// What a real LiteLLM 1.108.7 proxy answered, as recorded by
    /// `scripts/litellm-record` in `fixtures/peers/litellm-1.108.7/<name>.json`:
    /// its status, every header it sent and its body, byte for byte.
    pub fn recorded(name: &str) -> Reply {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/peers/litellm-1.108.7")
            .join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let rec: Value = serde_json::from_str(&text).expect("a recording is JSON");
        let headers = rec["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().to_string(),
                    h[1].as_str().unwrap().to_string(),
                )
            })
            .collect();
        Reply::Fixed {
            status: rec["status"].as_u64().expect("status") as u16,
            headers,
            body: rec["body"].as_str().expect("body").as_bytes().to_vec(),
        }
    }

    /// The same reply with the value of header `name` replaced.
    pub fn with_header_value(self, name: &str, value: &str) -> Reply {
        match self {
            Reply::Fixed {
                status,
                headers,
                body,
            } => Reply::Fixed {
                status,
                headers: headers
                    .into_iter()
                    .map(|(n, v)| match n.eq_ignore_ascii_case(name) {
                        true => (n, value.to_string()),
                        false => (n, v),
                    })
                    .collect(),
                body,
            },
            other => other,
        }
    }

    /// The fixture's answer: SKIP, usage `FIXTURE_USAGE`.
    pub fn completion() -> Reply {
        Reply::fixture(200, "completion.json")
    }

    /// A SKIP answer with the fixture's usage.
    pub fn skip(reason: &str) -> Reply {
        let answer = json!({"action": "SKIP", "reason": reason, "findings": []});
        Reply::json(200, &completion(&answer.to_string(), None))
    }

    /// An EVOLVE answer with `findings`, and the fixture's usage.
    pub fn evolve(reason: &str, findings: Value) -> Reply {
        let answer = json!({"action": "EVOLVE", "reason": reason, "findings": findings});
        Reply::json(200, &completion(&answer.to_string(), None))
    }

    /// A 200 whose message is prose instead of the answer object.
    pub fn not_json() -> Reply {
        Reply::fixture(200, "completion-not-json.json")
    }

    /// 429 out of credit (`insufficient_quota`).
    pub fn quota() -> Reply {
        Reply::fixture(429, "quota.json")
    }

    /// 429 tokens-per-minute with OpenAI's rate-limit headers (which are
    /// window resets, not waits) and no `retry-after`.
    pub fn rate_limit() -> Reply {
        Reply::fixture(429, "rate-limit.json")
            .header("x-ratelimit-limit-requests", "500")
            .header("x-ratelimit-limit-tokens", "200000")
            .header("x-ratelimit-remaining-requests", "499")
            .header("x-ratelimit-remaining-tokens", "0")
            .header("x-ratelimit-reset-requests", "120ms")
            .header("x-ratelimit-reset-tokens", "6m0s")
    }

    /// The same reply with one more header.
    pub fn header(self, name: &str, value: &str) -> Reply {
        match self {
            Reply::Fixed {
                status,
                mut headers,
                body,
            } => {
                headers.push((name.to_string(), value.to_string()));
                Reply::Fixed {
                    status,
                    headers,
                    body,
                }
            }
            Reply::Slow { delay, then } => Reply::Slow {
                delay,
                then: Box::new(then.header(name, value)),
            },
            truncated @ Reply::Truncated { .. } => truncated,
        }
    }

    /// This reply cut after half its body, the connection closed.
    pub fn truncated(self) -> Reply {
        match self {
            Reply::Fixed { status, body, .. } => Reply::Truncated {
                status,
                declared: body.len(),
                body: body[..body.len() / 2].to_vec(),
            },
            other => other,
        }
    }

    /// This reply, `delay` late.
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Slow {
            delay,
            then: Box::new(self),
        }
    }
}

/// The headers every OpenAI answer carries that matter to nobody here.
fn openai_headers() -> Vec<(String, String)> {
    vec![
        ("Content-Type".into(), "application/json".into()),
        ("openai-processing-ms".into(), "412".into()),
        ("openai-version".into(), "2020-10-01".into()),
    ]
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request target exactly as on the request line.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        http::header(&self.headers, name)
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "the request body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Whether this is a chat-completions call.
    pub fn is_completion(&self) -> bool {
        self.method == "POST" && self.target == COMPLETIONS
    }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake provider; stops (and frees its port) when dropped.
pub struct FakeOpenAi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: Server,
}

struct Shared {
    shutdown: Arc<AtomicBool>,
    queue: Mutex<VecDeque<Reply>>,
    default: Mutex<Reply>,
    log: Mutex<Vec<Recorded>>,
    /// While true, completions are recorded but not answered (`hold`).
    held: Mutex<bool>,
    /// Completions still answered before the server holds (`hold_after`).
    hold_after: Mutex<Option<usize>>,
    released: Condvar,
}

impl FakeOpenAi {
    /// A provider that answers every call with the fixture's SKIP until told
    /// otherwise.
    pub fn start() -> FakeOpenAi {
        let (listener, addr) = http::listen("fake OpenAI");
        let shutdown = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            shutdown: shutdown.clone(),
            queue: Mutex::new(VecDeque::new()),
            default: Mutex::new(Reply::completion()),
            log: Mutex::new(Vec::new()),
            held: Mutex::new(false),
            hold_after: Mutex::new(None),
            released: Condvar::new(),
        });
        let inner = shared.clone();
        let server = Server::start("fake OpenAI", listener, shutdown, move |req, conn, out| {
            respond(&inner, req, conn, out)
        });
        FakeOpenAi {
            addr,
            shared,
            _server: server,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, what `--llm-url` / `OPENAI_BASE_URL` take.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answer every request the queue does not cover with `reply`.
    pub fn answer_always(&self, reply: Reply) {
        *lock(&self.shared.default) = reply;
    }

    /// Queue `reply` for the next request.
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.queue).push_back(reply);
    }

    /// Queue `reply` for the next `n` requests.
    pub fn push_n(&self, n: usize, reply: Reply) {
        for _ in 0..n {
            self.push(reply.clone());
        }
    }

    /// Record completions from now on but answer none until `release`: a
    /// test can then prepare what sentinel meets after the answer.
    pub fn hold(&self) {
        *lock(&self.shared.held) = true;
    }

    /// Answer the next `n` completions, then hold every later one as `hold`
    /// does: a test can stop a tick between two calls.
    pub fn hold_after(&self, n: usize) {
        *lock(&self.shared.hold_after) = Some(n);
    }

    /// Answer the held completions, and every later one.
    pub fn release(&self) {
        *lock(&self.shared.hold_after) = None;
        *lock(&self.shared.held) = false;
        self.shared.released.notify_all();
    }

    /// Canned replies not consumed yet.
    pub fn queued(&self) -> usize {
        lock(&self.shared.queue).len()
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// How many requests arrived so far (any method, any path).
    pub fn count(&self) -> usize {
        lock(&self.shared.log).len()
    }

    /// How many `POST /v1/chat/completions` arrived so far.
    pub fn posts(&self) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.is_completion())
            .count()
    }
}

// ---------------------------------------------------------------------------
// Answering
// ---------------------------------------------------------------------------

/// Records one request and answers it; false when the connection must close.
fn respond(shared: &Shared, req: &Request, conn: &mut Conn<'_>, out: &mut TcpStream) -> bool {
    let Some(body) = conn.body(req) else {
        return false;
    };
    let recorded = Recorded {
        method: req.method.clone(),
        target: req.target.clone(),
        headers: req.headers.clone(),
        body,
    };
    let reply = if recorded.is_completion() {
        lock(&shared.queue)
            .pop_front()
            .unwrap_or_else(|| lock(&shared.default).clone())
    } else {
        let message = format!("Invalid URL ({} {})", req.method, req.target);
        Reply::json(
            404,
            &json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        )
    };
    let completion = recorded.is_completion();
    lock(&shared.log).push(recorded);
    if completion {
        let mut left = lock(&shared.hold_after);
        match *left {
            Some(0) => {
                *left = None;
                *lock(&shared.held) = true;
            }
            Some(n) => *left = Some(n - 1),
            None => {}
        }
        drop(left);
        wait_while_held(shared);
    }
    send(shared, reply, out)
}

/// Block this connection's thread while the server is held (or until it stops).
fn wait_while_held(shared: &Shared) {
    let mut held = lock(&shared.held);
    while *held && !shared.shutdown.load(Ordering::SeqCst) {
        held = shared
            .released
            .wait_timeout(held, Duration::from_millis(50))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Write `reply`; false when the connection must close.
fn send(shared: &Shared, reply: Reply, out: &mut TcpStream) -> bool {
    match reply {
        Reply::Fixed {
            status,
            headers,
            body,
        } => http::write_response(out, status, &headers, &body, false),
        Reply::Slow { delay, then } => {
            http::delay(delay, &shared.shutdown) && send(shared, *then, out)
        }
        Reply::Truncated {
            status,
            declared,
            body,
        } => http::write_truncated(out, status, declared, &body),
    }
}

// ---------------------------------------------------------------------------
// Running sentinel against it
// ---------------------------------------------------------------------------

impl Sandbox {
    /// `sentinel tick --json --fake-sleep --now T --llm-url <fake>/v1
    /// --repo R --state S`, watching the whole repository, with
    /// `OPENAI_API_KEY=KEY` (so the advisor is on by default).
    pub fn advisor_tick_cmd(&self, ai: &FakeOpenAi, now: &str) -> Run {
        self.sentinel(["tick", "--json", "--fake-sleep", "--now", now])
            .args(["--llm-url", &ai.base_url()])
            .arg("--repo")
            .arg(&self.repo.root)
            .arg("--state")
            .arg(&self.state)
            .env("OPENAI_API_KEY", KEY)
    }

    /// `sentinel stats --json --state S --now T --daily-budget USD`.
    pub fn stats_at(&self, now: &str, daily_budget: f64) -> Value {
        let out = self
            .sentinel(["stats", "--json", "--now", now])
            .args(["--daily-budget", &daily_budget.to_string()])
            .arg("--state")
            .arg(&self.state)
            .output();
        assert_eq!(out.code, 0, "stats failed: {}", out.stderr);
        out.json()
    }
}
