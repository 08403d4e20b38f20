//! A fake OpenAI Admin API for `sentinel costs`: `GET
//! /v1/organization/costs` and `GET /v1/organization/usage/completions` on
//! `127.0.0.1:0`, over the same HTTP/1.1 plumbing as the other fakes
//! (`util::http`).
//!
//! Each endpoint answers from its own queue of canned replies (one per
//! page), then with its default reply (an empty page unless told otherwise).
//! Every request is recorded (method, target, headers), so a test counts the
//! pages sentinel read and checks the query and the key it sent. A slow
//! reply sleeps on the server's connection thread, never the test's.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::http::{self, Conn, Request, Server, lock};
use super::{Run, Sandbox};

/// The admin key the tests give sentinel in `OPENAI_ADMIN_KEY`.
pub const ADMIN_KEY: &str = "sk-admin-test-0123456789abcdef";

pub const COSTS: &str = "/v1/organization/costs";
pub const USAGE: &str = "/v1/organization/usage/completions";

/// The bytes of `fixtures/openai-admin/<name>`.
pub fn fixture_text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openai-admin")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// What the server answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Fixed {
        status: u16,
        body: Vec<u8>,
    },
    /// Wait `delay` on the connection's thread, then answer with `then`.
    Slow {
        delay: Duration,
        then: Box<Reply>,
    },
}

impl Reply {
    /// `status` with `fixtures/openai-admin/<file>` as its body.
    pub fn fixture(status: u16, file: &str) -> Reply {
        Reply::Fixed {
            status,
            body: fixture_text(file).into_bytes(),
        }
    }

    /// A 200 page from `fixtures/openai-admin/<file>`.
    pub fn page(file: &str) -> Reply {
        Reply::fixture(200, file)
    }

    pub fn after(self, delay: Duration) -> Reply {
        Reply::Slow {
            delay,
            then: Box::new(self),
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request target exactly as on the request line.
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        http::header(&self.headers, name)
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// The query's `name=value` pairs, as sent (not decoded).
    pub fn query(&self) -> Vec<(String, String)> {
        self.target
            .split_once('?')
            .map(|(_, q)| q)
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (p.to_string(), String::new()),
            })
            .collect()
    }

    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

struct Endpoint {
    queue: VecDeque<Reply>,
    default: Reply,
}

struct Shared {
    shutdown: Arc<AtomicBool>,
    costs: Mutex<Endpoint>,
    usage: Mutex<Endpoint>,
    log: Mutex<Vec<Recorded>>,
}

/// A running fake Admin API; stops (and frees its port) when dropped.
pub struct FakeAdmin {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _server: Server,
}

impl FakeAdmin {
    /// An Admin API whose bill is empty until told otherwise.
    pub fn start() -> FakeAdmin {
        let (listener, addr) = http::listen("fake Admin API");
        let shutdown = Arc::new(AtomicBool::new(false));
        let endpoint = |file: &str| {
            Mutex::new(Endpoint {
                queue: VecDeque::new(),
                default: Reply::page(file),
            })
        };
        let shared = Arc::new(Shared {
            shutdown: shutdown.clone(),
            costs: endpoint("costs-empty.json"),
            usage: endpoint("usage-empty.json"),
            log: Mutex::new(Vec::new()),
        });
        let inner = shared.clone();
        let server = Server::start(
            "fake Admin API",
            listener,
            shutdown,
            move |req, conn, out| respond(&inner, req, conn, out),
        );
        FakeAdmin {
            addr,
            shared,
            _server: server,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, what `--admin-url` takes.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bill: `costs` and `usage` pages as every later answer.
    pub fn bill(&self, costs: &str, usage: &str) {
        lock(&self.shared.costs).default = Reply::page(costs);
        lock(&self.shared.usage).default = Reply::page(usage);
    }

    /// Answer every request to both endpoints with `reply`.
    pub fn answer_always(&self, reply: Reply) {
        lock(&self.shared.costs).default = reply.clone();
        lock(&self.shared.usage).default = reply;
    }

    /// Queue `reply` for the next request to the costs endpoint.
    pub fn push_costs(&self, reply: Reply) {
        lock(&self.shared.costs).queue.push_back(reply);
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// The requests to `path` (`COSTS` or `USAGE`).
    pub fn requests_to(&self, path: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path() == path)
            .collect()
    }
}

/// Records one request and answers it; false when the connection must close.
fn respond(shared: &Shared, req: &Request, conn: &mut Conn<'_>, out: &mut TcpStream) -> bool {
    if conn.body(req).is_none() {
        return false;
    }
    let recorded = Recorded {
        method: req.method.clone(),
        target: req.target.clone(),
        headers: req.headers.clone(),
    };
    let endpoint = match (req.method.as_str(), recorded.path()) {
        ("GET", COSTS) => Some(&shared.costs),
        ("GET", USAGE) => Some(&shared.usage),
        _ => None,
    };
    let reply = match endpoint {
        Some(e) => {
            let mut e = lock(e);
            e.queue.pop_front().unwrap_or_else(|| e.default.clone())
        }
        None => Reply::Fixed {
            status: 404,
            body: br#"{"error":{"message":"Invalid URL","type":"invalid_request_error","param":null,"code":null}}"#.to_vec(),
        },
    };
    lock(&shared.log).push(recorded);
    send(shared, reply, out)
}

fn send(shared: &Shared, reply: Reply, out: &mut TcpStream) -> bool {
    match reply {
        Reply::Fixed { status, body } => {
            let headers = [("Content-Type".to_string(), "application/json".to_string())];
            http::write_response(out, status, &headers, &body, false)
        }
        Reply::Slow { delay, then } => {
            http::delay(delay, &shared.shutdown) && send(shared, *then, out)
        }
    }
}

impl Sandbox {
    /// `sentinel costs --json --now T --admin-url <fake>/v1 --state S`,
    /// with `OPENAI_ADMIN_KEY=ADMIN_KEY`.
    pub fn costs_cmd(&self, admin: &FakeAdmin, now: &str) -> Run {
        self.sentinel(["costs", "--json", "--now", now])
            .args(["--admin-url", &admin.base_url()])
            .arg("--state")
            .arg(&self.state)
            .env("OPENAI_ADMIN_KEY", ADMIN_KEY)
    }
}
