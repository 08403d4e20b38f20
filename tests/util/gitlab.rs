//! A fake GitLab REST API v4 for the end-to-end tests, answered from a real
//! git repository on disk so that heads and blob ids are the ones the git
//! source sees, and the same scenario can run over both sources.
//!
//! The server is a small HTTP/1.1 server on `127.0.0.1:0` over `std::net`
//! rather than `tiny_http`: a truncated body must end with the socket closed
//! (otherwise the client waits for the missing bytes until its timeout and a
//! truncation looks like a timeout), and `tiny_http` 0.12 keeps every
//! connection open for the next request with no way to close it from a
//! handler. Every request is recorded (method, raw request target, decoded
//! path and query, headers). A queue of canned replies per endpoint is
//! consumed before the normal handling, to inject failures.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use super::http::{self, Request, Server, lock};
use super::{Run, Sandbox, WATCHED};

#[path = "gitlab_archive.rs"]
mod archive;
#[path = "gitlab_mr.rs"]
mod merge_requests;
pub use archive::{Tamper, rate_limited};

/// The project's path, as `--project` names it.
pub const PROJECT: &str = "group/project";
/// The project's numeric id (also accepted in URLs).
pub const PROJECT_ID: u64 = 42;
/// The token the server wants unless told otherwise.
pub const TOKEN: &str = "glpat-test-token-0001";
/// The branch the tests watch.
pub const BRANCH: &str = "main";

/// GitLab's largest page.
const MAX_PER_PAGE: usize = 100;
/// Compares with more changed files than this get no `diff` text, as
/// generating it costs one git process per file.
const MAX_DIFF_TEXTS: usize = 20;

// ---------------------------------------------------------------------------
// Fixtures: the documented bodies, used as templates
// ---------------------------------------------------------------------------

/// A fixture under `fixtures/gitlab/`, parsed once.
fn fixture(name: &'static str) -> &'static Value {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, &'static Value>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(name).or_insert_with(|| {
        let text = fixture_text(name);
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("fixtures/gitlab/{name} is not JSON: {e}"));
        Box::leak(Box::new(value))
    })
}

/// The bytes of a fixture under `fixtures/gitlab/`.
pub fn fixture_text(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gitlab")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The documented commit (`commits.json[0]`).
fn commit_template() -> &'static Value {
    &fixture("commits.json")[0]
}

/// A copy of `template` with `fields` set; a field the template lacks is a
/// bug in the fake, so it panics rather than serve an undocumented key.
fn fill(template: &Value, fields: Vec<(&str, Value)>) -> Value {
    let mut out = template.clone();
    let map = out.as_object_mut().expect("a template is an object");
    for (key, value) in fields {
        assert!(
            map.contains_key(key),
            "the fake GitLab would serve `{key}`, which its fixture lacks"
        );
        map.insert(key.to_string(), value);
    }
    out
}

// ---------------------------------------------------------------------------
// Endpoints, replies, recorded requests
// ---------------------------------------------------------------------------

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `GET /projects/:id`
    Project,
    /// `GET /projects/:id/repository/commits` (the head lookup).
    Commits,
    /// `GET /projects/:id/repository/commits/:sha`
    Commit,
    /// `GET /projects/:id/repository/commits/:sha/diff` (rollback lookup).
    CommitDiff,
    /// `GET /projects/:id/repository/tree` (the listing).
    Tree,
    /// `GET /projects/:id/repository/blobs/:sha/raw` (content).
    BlobRaw,
    /// `GET /projects/:id/repository/compare`
    Compare,
    /// `GET /projects/:id/repository/archive[.tar.gz]` (many files at once).
    Archive,
    /// `GET|HEAD /projects/:id/repository/files/:file_path`
    File,
    /// `GET /projects/:id/repository/files/:file_path/raw`
    FileRaw,
    /// `GET|POST /projects/:id/issues` (the dashboard).
    Issues,
    /// `PUT /projects/:id/issues/:iid` (the dashboard).
    Issue,
    /// `GET /projects/:id/repository/branches/:name` (patches).
    Branch,
    /// `POST /projects/:id/repository/commits` (patches): recorded as
    /// `Commits`, but a reply queued here answers the POST alone, not the
    /// head lookup's GET.
    CreateCommit,
    /// `GET|POST /projects/:id/merge_requests` (`--merge-request`).
    MergeRequests,
    /// `GET|PUT /projects/:id/merge_requests/:iid`.
    MergeRequest,
    /// `GET /groups/:id/projects` (a fleet's discovery).
    GroupProjects,
    /// Anything else (answered 404 like GitLab's router).
    Unknown,
}

/// A canned answer, consumed before the normal handling.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Exactly this status, headers and body.
    Fixed {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Announce `declared` bytes of body, send `body` (shorter), close.
    Truncated {
        status: u16,
        declared: usize,
        body: Vec<u8>,
    },
    /// Close the connection without answering.
    Hangup,
    /// Wait `delay` (the server's thread, not the test's), then answer with
    /// `then`, or normally when `None`.
    Slow {
        delay: Duration,
        then: Option<Box<Reply>>,
    },
    /// `status` with `Location: <origin><the same path and query>`.
    Redirect { status: u16, origin: String },
}

impl Reply {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::Fixed {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    /// `status` with a body from `fixtures/gitlab/errors/`, e.g.
    /// `Reply::error(404, "404-project.json")`.
    pub fn error(status: u16, file: &str) -> Reply {
        let content_type = if file.ends_with(".json") {
            "application/json"
        } else if file.ends_with(".html") {
            "text/html; charset=utf-8"
        } else {
            "text/plain"
        };
        Reply::Fixed {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: fixture_text(&format!("errors/{file}")).into_bytes(),
        }
    }

    /// GitLab's throttle: 429, `Retry later`, `Retry-After: secs`.
    pub fn too_many_requests(secs: u64) -> Reply {
        let reset = 1_781_568_000 + secs; // a fixed "now" keeps bodies stable
        Reply::Fixed {
            status: 429,
            headers: vec![
                ("Content-Type".into(), "text/plain".into()),
                ("Retry-After".into(), secs.to_string()),
                ("RateLimit-Name".into(), "throttle_authenticated_api".into()),
                ("RateLimit-Limit".into(), "60".into()),
                ("RateLimit-Observed".into(), "61".into()),
                ("RateLimit-Remaining".into(), "0".into()),
                ("RateLimit-Reset".into(), reset.to_string()),
                (
                    "RateLimit-ResetTime".into(),
                    "Tue, 16 Jun 2026 00:00:07 GMT".into(),
                ),
            ],
            body: fixture_text("errors/429.txt").into_bytes(),
        }
    }

    /// An HTML page with `status` (a proxy's error page, a sign-in page).
    pub fn html(status: u16, file: &str) -> Reply {
        Reply::error(status, file)
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request target exactly as on the request line (still encoded).
    pub target: String,
    pub endpoint: Endpoint,
    /// The path's segments, each percent-decoded.
    pub segments: Vec<String>,
    /// The query's pairs, percent-decoded (`+` is a space).
    pub query: Vec<(String, String)>,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The request body as sent (empty for a GET).
    pub body: Vec<u8>,
}

impl Recorded {
    /// The first value of query parameter `key`.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        http::header(&self.headers, name)
    }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// A running fake GitLab; stops (and frees its port) when dropped.
pub struct FakeGitLab {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Server,
}

struct Shared {
    shutdown: Arc<AtomicBool>,
    origin: String,
    git: Git,
    settings: Mutex<Settings>,
    queues: Mutex<HashMap<Endpoint, VecDeque<Reply>>>,
    log: Mutex<Vec<Recorded>>,
    trees: Mutex<HashMap<(String, String, bool), Arc<Tree>>>,
    request_ids: AtomicU64,
    /// Issues created through the API (the dashboard), in order.
    issues: Mutex<Vec<Value>>,
    /// The body of the request being answered (only issue writes have one).
    body: Mutex<Vec<u8>>,
    /// Merge requests created through the API, in order.
    merge_requests: Mutex<Vec<Value>>,
    /// How the archives served differ from the repository.
    archive_tampering: Mutex<Vec<Tamper>>,
}

struct Settings {
    token: Option<String>,
    cut_compare: bool,
    compare_max_files: usize,
    /// A group's projects (GitLab's listing objects), each served from the
    /// one backing repository under its id; `group_page` is the most a page
    /// holds, whatever `per_page` asks.
    group: Vec<Value>,
    group_page: usize,
    /// Project ids answered `403 Forbidden`.
    forbidden: Vec<u64>,
}

/// A recursive or flat listing of one tree at one commit.
struct Tree {
    entries: Vec<Value>,
    /// Path of an entry -> its index, to resume after a `page_token`.
    index: HashMap<String, usize>,
}

impl FakeGitLab {
    /// A server for project `group/project` (id 42) backed by the git
    /// repository at `repo`, wanting `PRIVATE-TOKEN: TOKEN`.
    pub fn start(repo: &Path) -> FakeGitLab {
        let (listener, addr) = http::listen("fake GitLab");
        let shutdown = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            shutdown: shutdown.clone(),
            origin: format!("http://{addr}"),
            git: Git::new(repo.to_path_buf()),
            settings: Mutex::new(Settings {
                token: Some(TOKEN.to_string()),
                cut_compare: false,
                compare_max_files: 1000,
                group: Vec::new(),
                group_page: MAX_PER_PAGE,
                forbidden: Vec::new(),
            }),
            queues: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            trees: Mutex::new(HashMap::new()),
            request_ids: AtomicU64::new(0),
            issues: Mutex::new(Vec::new()),
            body: Mutex::new(Vec::new()),
            merge_requests: Mutex::new(Vec::new()),
            archive_tampering: Mutex::new(Vec::new()),
        });
        let inner = shared.clone();
        let server = Server::start("fake GitLab", listener, shutdown, move |req, conn, out| {
            // Only the dashboard's issue writes carry a body worth reading.
            let Some(body) = conn.body(req) else {
                return false;
            };
            *lock(&inner.body) = body;
            inner.respond(req, out)
        });
        FakeGitLab {
            addr,
            shared,
            server,
        }
    }

    /// The issues created through the API (the dashboard), as stored.
    pub fn issues(&self) -> Vec<Value> {
        lock(&self.shared.issues).clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        self.shared.origin.clone()
    }

    /// The same server under another host name, `http://localhost:PORT`:
    /// for a client that compares hosts, a different host.
    pub fn other_host_origin(&self) -> String {
        format!("http://localhost:{}", self.addr.port())
    }

    /// The API base, `http://127.0.0.1:PORT/api/v4`.
    pub fn url(&self) -> String {
        format!("{}/api/v4", self.shared.origin)
    }

    /// Want this token (`None`: answer without one).
    pub fn require_token(&self, token: Option<&str>) {
        lock(&self.shared.settings).token = token.map(str::to_string);
    }

    /// Serve every compare cut: no diffs and `compare_timeout: true`.
    /// Serve `projects` (GitLab's listing objects: `id`,
    /// `path_with_namespace`, `default_branch`, `archived`) as the projects
    /// of every group, `page` at most a page, each one the backing
    /// repository under its id; the ids in `forbidden` answer 403.
    pub fn serve_group(&self, projects: Vec<Value>, page: usize, forbidden: &[u64]) {
        let mut settings = lock(&self.shared.settings);
        settings.group = projects;
        settings.group_page = page.max(1);
        settings.forbidden = forbidden.to_vec();
    }

    pub fn cut_compare(&self, cut: bool) {
        lock(&self.shared.settings).cut_compare = cut;
    }

    /// Queue `reply` for the next request to `endpoint`.
    pub fn push(&self, endpoint: Endpoint, reply: Reply) {
        lock(&self.shared.queues)
            .entry(endpoint)
            .or_default()
            .push_back(reply);
    }

    /// Queue `reply` for the next `n` requests to `endpoint`.
    pub fn push_n(&self, endpoint: Endpoint, n: usize, reply: Reply) {
        for _ in 0..n {
            self.push(endpoint, reply.clone());
        }
    }

    /// Canned replies not consumed yet, for every endpoint.
    pub fn queued(&self) -> usize {
        lock(&self.shared.queues).values().map(VecDeque::len).sum()
    }

    /// Every request so far, in order of arrival.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.log).clone()
    }

    /// The requests so far to `endpoint`.
    pub fn requests_to(&self, endpoint: Endpoint) -> Vec<Recorded> {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.endpoint == endpoint)
            .cloned()
            .collect()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }
}

impl Drop for FakeGitLab {
    fn drop(&mut self) {
        self.server.stop();
        lock(&self.shared.git.batch).take();
    }
}

/// A port on 127.0.0.1 where nothing listens (bound, then released).
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

// ---------------------------------------------------------------------------
// Answering
// ---------------------------------------------------------------------------

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn json(status: u16, body: &Value) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    fn error(status: u16, file: &str) -> Response {
        match Reply::error(status, file) {
            Reply::Fixed {
                status,
                headers,
                body,
            } => Response {
                status,
                headers,
                body,
            },
            _ => unreachable!(),
        }
    }

    fn header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

impl Shared {
    /// Answers one request; false when the connection must close.
    fn respond(&self, req: &Request, out: &mut TcpStream) -> bool {
        let (raw_path, raw_query) = req
            .target
            .split_once('?')
            .unwrap_or((req.target.as_str(), ""));
        let segments: Vec<String> = raw_path
            .split('/')
            .skip(1)
            .map(|s| percent_decode(s, false))
            .collect();
        let query = parse_query(raw_query);
        let endpoint = route(&segments);
        lock(&self.log).push(Recorded {
            method: req.method.clone(),
            target: req.target.clone(),
            endpoint,
            segments: segments.clone(),
            query: query.clone(),
            headers: req.headers.clone(),
            body: lock(&self.body).clone(),
        });
        let queue = match (endpoint, req.method.as_str()) {
            (Endpoint::Commits, "POST") => Endpoint::CreateCommit,
            _ => endpoint,
        };
        let canned = lock(&self.queues)
            .get_mut(&queue)
            .and_then(VecDeque::pop_front);
        let call = Call {
            req,
            segments: &segments,
            query: &query,
            endpoint,
        };
        match canned {
            Some(reply) => self.send_reply(&call, reply, out),
            None => {
                let response = self.handle(&call);
                self.send(req, response, out)
            }
        }
    }

    fn send(&self, req: &Request, mut response: Response, out: &mut TcpStream) -> bool {
        let id = self.request_ids.fetch_add(1, Ordering::SeqCst);
        response
            .headers
            .push(("X-Request-Id".into(), format!("01FAKE{id:020}")));
        response.headers.push((
            "Cache-Control".into(),
            "max-age=0, private, must-revalidate".into(),
        ));
        http::write_response(
            out,
            response.status,
            &response.headers,
            &response.body,
            req.method == "HEAD",
        )
    }

    fn send_reply(&self, call: &Call<'_>, reply: Reply, out: &mut TcpStream) -> bool {
        match reply {
            Reply::Fixed {
                status,
                headers,
                body,
            } => self.send(
                call.req,
                Response {
                    status,
                    headers,
                    body,
                },
                out,
            ),
            Reply::Truncated {
                status,
                declared,
                body,
            } => http::write_truncated(out, status, declared, &body),
            Reply::Hangup => false,
            Reply::Slow { delay, then } => {
                if !http::delay(delay, &self.shutdown) {
                    return false;
                }
                match then {
                    Some(reply) => self.send_reply(call, *reply, out),
                    None => {
                        let response = self.handle(call);
                        self.send(call.req, response, out)
                    }
                }
            }
            Reply::Redirect { status, origin } => {
                let response = Response::json(status, &json!({"message": "moved"}))
                    .header("Location", format!("{origin}{}", call.req.target));
                self.send(call.req, response, out)
            }
        }
    }
}

/// The decoded parts of one request.
struct Call<'a> {
    req: &'a Request,
    segments: &'a [String],
    query: &'a [(String, String)],
    endpoint: Endpoint,
}

impl Call<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.req.header(name)
    }

    /// `per_page`, clamped like GitLab's (1..=100), with its default.
    fn per_page(&self, default: usize) -> usize {
        self.param("per_page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(default)
            .clamp(1, MAX_PER_PAGE)
    }

    fn page(&self) -> usize {
        self.param("page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
    }

    /// The project id segment exactly as the client sent it (encoded).
    fn raw_project(&self) -> &str {
        self.req
            .target
            .split('?')
            .next()
            .unwrap_or("")
            .split('/')
            .nth(4)
            .unwrap_or("")
    }

    /// The path part of the target, for building pagination links.
    fn raw_path(&self) -> &str {
        self.req.target.split('?').next().unwrap_or("")
    }
}

/// `/api/v4/projects/:id/...` -> the endpoint; segments are decoded.
fn route(segments: &[String]) -> Endpoint {
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s[..] {
        ["api", "v4", "projects", _] => Endpoint::Project,
        ["api", "v4", "projects", _, "issues"] => Endpoint::Issues,
        ["api", "v4", "projects", _, "issues", _] => Endpoint::Issue,
        ["api", "v4", "projects", _, "merge_requests"] => Endpoint::MergeRequests,
        ["api", "v4", "projects", _, "merge_requests", _] => Endpoint::MergeRequest,
        ["api", "v4", "groups", _, "projects"] => Endpoint::GroupProjects,
        ["api", "v4", "projects", _, "repository", ref rest @ ..] => match rest {
            ["commits"] => Endpoint::Commits,
            ["branches", _] => Endpoint::Branch,
            ["commits", _] => Endpoint::Commit,
            ["commits", _, "diff"] => Endpoint::CommitDiff,
            ["tree"] => Endpoint::Tree,
            ["blobs", _, "raw"] => Endpoint::BlobRaw,
            ["compare"] => Endpoint::Compare,
            ["archive"] | ["archive.tar.gz"] => Endpoint::Archive,
            ["files", _] => Endpoint::File,
            ["files", _, "raw"] => Endpoint::FileRaw,
            _ => Endpoint::Unknown,
        },
        _ => Endpoint::Unknown,
    }
}

// ---------------------------------------------------------------------------
// GitLab, from git
// ---------------------------------------------------------------------------

impl Shared {
    fn handle(&self, call: &Call<'_>) -> Response {
        if call.endpoint == Endpoint::Unknown {
            return Response::error(404, "404-route.json");
        }
        let issue_write = (matches!(
            call.endpoint,
            Endpoint::Issues | Endpoint::Issue | Endpoint::MergeRequests | Endpoint::MergeRequest
        ) && matches!(call.req.method.as_str(), "POST" | "PUT"))
            || (call.endpoint == Endpoint::Commits && call.req.method == "POST");
        if !matches!(call.req.method.as_str(), "GET" | "HEAD") && !issue_write {
            return Response::error(404, "404-route.json");
        }
        let wanted = lock(&self.settings).token.clone();
        if let Some(wanted) = wanted {
            let bearer = call
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "));
            let given = call.header("private-token").or(bearer);
            if given != Some(wanted.as_str()) {
                return Response::error(401, "401.json");
            }
        }
        if call.endpoint == Endpoint::GroupProjects {
            return self.group_projects(call);
        }
        let project = &call.segments[3];
        // A group's project, by its id or its path with namespace.
        let (entry, forbidden) = {
            let settings = lock(&self.settings);
            let entry = settings
                .group
                .iter()
                .find(|p| {
                    p["id"]
                        .as_u64()
                        .is_some_and(|id| id.to_string() == *project)
                        || p["path_with_namespace"] == project.as_str()
                })
                .cloned();
            let id = entry.as_ref().and_then(|p| p["id"].as_u64());
            (entry, id.is_some_and(|id| settings.forbidden.contains(&id)))
        };
        let in_group = entry.is_some();
        if forbidden {
            return Response::json(403, &json!({"message": "403 Forbidden"}));
        }
        if project != PROJECT && *project != PROJECT_ID.to_string() && !in_group {
            return Response::error(404, "404-project.json");
        }
        match call.endpoint {
            // As GitLab shows a project: the group's listing object.
            Endpoint::Project if in_group => Response::json(200, &entry.unwrap_or_default()),
            Endpoint::Project => Response::json(
                200,
                &fill(
                    fixture("project.json"),
                    vec![("web_url", json!(format!("{}/{PROJECT}", self.origin)))],
                ),
            ),
            Endpoint::Commits if call.req.method == "POST" => self.create_commit(call),
            Endpoint::Commits => self.commits(call),
            Endpoint::Branch => self.branch(call),
            Endpoint::CreateCommit => unreachable!("routed as Commits"),
            Endpoint::Commit => self.commit(call),
            Endpoint::CommitDiff => self.commit_diff(call),
            Endpoint::Tree => self.tree(call),
            Endpoint::BlobRaw => self.blob_raw(call),
            Endpoint::Compare => self.compare(call),
            Endpoint::Archive => self.archive(call),
            Endpoint::File | Endpoint::FileRaw => self.file(call),
            Endpoint::Issues | Endpoint::Issue => self.issues(call),
            Endpoint::MergeRequests | Endpoint::MergeRequest => self.merge_requests(call),
            Endpoint::Unknown | Endpoint::GroupProjects => unreachable!(),
        }
    }

    /// One page of the group's projects, archived ones left out when asked
    /// (`archived=false`), with GitLab's offset pagination headers.
    fn group_projects(&self, call: &Call<'_>) -> Response {
        let settings = lock(&self.settings);
        let projects: Vec<&Value> = settings
            .group
            .iter()
            .filter(|p| call.param("archived") != Some("false") || p["archived"] != true)
            .collect();
        let per_page = call.per_page(20).min(settings.group_page);
        let start = (call.page() - 1) * per_page;
        let page: Vec<&Value> = projects
            .iter()
            .skip(start)
            .take(per_page)
            .copied()
            .collect();
        let response = Response::json(200, &json!(page));
        offset_pages(call, &self.origin, response, projects.len(), per_page)
    }

    /// A branch exists or not (the sandbox branch of patches).
    fn branch(&self, call: &Call<'_>) -> Response {
        let name = &call.segments[6];
        let found = self
            .git
            .cmd()
            .args(["rev-parse", "--verify", "-q", &format!("refs/heads/{name}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if found {
            let tip = self.git_out(&["rev-parse", &format!("refs/heads/{name}")], None, None);
            Response::json(200, &json!({ "name": name, "commit": { "id": tip } }))
        } else {
            Response::error(404, "404-route.json")
        }
    }

    /// One commit with `update` actions on `branch`, created from
    /// `start_branch` when missing. Done with plain git plumbing on the
    /// backing repository (a private index, `commit-tree`, `update-ref`),
    /// never with sentinel's own patch code, so the watched branch never
    /// moves and the code under test is not what checks itself.
    fn create_commit(&self, call: &Call<'_>) -> Response {
        let _ = call;
        let body: Value = serde_json::from_slice(&lock(&self.body)).unwrap_or(Value::Null);
        let branch = format!("refs/heads/{}", body["branch"].as_str().unwrap_or(""));
        let previous = self.git_out(&["rev-parse", "--verify", "-q", &branch], None, None);
        // `force` replaces the branch with a commit on `start_sha` or
        // `start_branch`, as GitLab's commits API documents.
        let forced = body["force"] == true;
        let start = body["start_sha"].as_str().map(str::to_string).or_else(|| {
            body["start_branch"]
                .as_str()
                .map(|b| format!("refs/heads/{b}"))
        });
        let parent = match (&previous, body["start_branch"].as_str()) {
            _ if forced && start.is_some() => {
                let at = format!("{}^{{commit}}", start.clone().unwrap_or_default());
                match self.git_out(&["rev-parse", "--verify", "-q", &at], None, None) {
                    Some(p) => p,
                    None => {
                        return Response::json(400, &json!({"message": "start does not exist"}));
                    }
                }
            }
            (Some(p), _) => p.clone(),
            (None, Some(start)) => {
                match self.git_out(
                    &[
                        "rev-parse",
                        "--verify",
                        "-q",
                        &format!("refs/heads/{start}"),
                    ],
                    None,
                    None,
                ) {
                    Some(p) => p,
                    None => {
                        return Response::json(
                            400,
                            &json!({"message": "start_branch does not exist"}),
                        );
                    }
                }
            }
            (None, None) => {
                return Response::json(400, &json!({"message": "branch does not exist"}));
            }
        };
        let actions = body["actions"].as_array().cloned().unwrap_or_default();
        if actions.is_empty() {
            return Response::json(400, &json!({"message": "no actions"}));
        }
        let index = std::env::temp_dir().join(format!(
            "fake-gitlab-index-{}-{}",
            std::process::id(),
            NEXT_INDEX.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let index = index.as_path();
        if self
            .git_out(&["read-tree", &parent], Some(index), None)
            .is_none()
        {
            return Response::json(400, &json!({"message": "cannot read the parent tree"}));
        }
        for action in actions {
            let path = action["file_path"].as_str().unwrap_or("");
            let content = action["content"].as_str().unwrap_or("");
            let Some(blob) = self.git_out(&["hash-object", "-w", "--stdin"], None, Some(content))
            else {
                return Response::json(400, &json!({"message": "cannot store the content"}));
            };
            let info = format!("100644,{blob},{path}");
            self.git_out(
                &["update-index", "--add", "--cacheinfo", &info],
                Some(index),
                None,
            );
        }
        let tree = self
            .git_out(&["write-tree"], Some(index), None)
            .unwrap_or_default();
        let _ = std::fs::remove_file(index);
        let message = body["commit_message"].as_str().unwrap_or("");
        let commit = self
            .git_out(
                &["commit-tree", &tree, "-p", &parent, "-m", message],
                None,
                None,
            )
            .unwrap_or_default();
        let old = previous.unwrap_or_else(|| "0".repeat(40));
        match self.git_out(&["update-ref", &branch, &commit, &old], None, None) {
            Some(_) => Response::json(201, &json!({ "id": commit })),
            None => Response::json(400, &json!({"message": "the branch moved"})),
        }
    }

    /// Run git on the backing repository; its trimmed stdout on success.
    fn git_out(
        &self,
        args: &[&str],
        index: Option<&std::path::Path>,
        stdin: Option<&str>,
    ) -> Option<String> {
        use std::io::Write;
        let mut cmd = self.git.cmd();
        cmd.args(args)
            .env("GIT_AUTHOR_NAME", "fake gitlab")
            .env("GIT_AUTHOR_EMAIL", "fake@gitlab.invalid")
            .env("GIT_COMMITTER_NAME", "fake gitlab")
            .env("GIT_COMMITTER_EMAIL", "fake@gitlab.invalid")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        if let Some(index) = index {
            cmd.env("GIT_INDEX_FILE", index);
        }
        let mut child = cmd.spawn().ok()?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let _ = pipe.write_all(text.as_bytes());
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Issues, just enough for the dashboard: list by label, create, edit.
    fn issues(&self, call: &Call<'_>) -> Response {
        let body: Value = serde_json::from_slice(&lock(&self.body)).unwrap_or(Value::Null);
        let mut issues = lock(&self.issues);
        match (call.req.method.as_str(), call.endpoint) {
            ("GET", Endpoint::Issues) => {
                let label = call.param("labels").unwrap_or("");
                let found: Vec<Value> = issues
                    .iter()
                    .filter(|i| {
                        i["labels"]
                            .as_array()
                            .is_some_and(|l| l.iter().any(|x| x == label))
                    })
                    .cloned()
                    .collect();
                Response::json(200, &Value::Array(found))
            }
            ("POST", Endpoint::Issues) => {
                let iid = issues.len() as u64 + 1;
                let labels: Vec<Value> = body["labels"]
                    .as_str()
                    .unwrap_or("")
                    .split(',')
                    .filter(|l| !l.is_empty())
                    .map(|l| json!(l))
                    .collect();
                let issue = json!({
                    "iid": iid,
                    "title": body["title"],
                    "description": body["description"],
                    "labels": labels,
                    "state": "opened",
                    "edits": 0,
                });
                issues.push(issue.clone());
                Response::json(201, &issue)
            }
            ("PUT", Endpoint::Issue) => {
                let iid: u64 = call.segments[5].parse().unwrap_or(0);
                match issues.iter_mut().find(|i| i["iid"] == iid) {
                    Some(issue) => {
                        issue["description"] = body["description"].clone();
                        issue["edits"] = json!(issue["edits"].as_u64().unwrap_or(0) + 1);
                        Response::json(200, issue)
                    }
                    None => Response::error(404, "404-route.json"),
                }
            }
            _ => Response::error(404, "404-route.json"),
        }
    }

    fn commit_json(&self, c: &GitCommit) -> Value {
        let title = c.message.lines().next().unwrap_or("").to_string();
        fill(
            commit_template(),
            vec![
                ("id", json!(c.id)),
                ("short_id", json!(c.id[..11])),
                ("title", json!(title)),
                ("author_name", json!(c.author_name)),
                ("author_email", json!(c.author_email)),
                ("authored_date", json!(c.authored_date)),
                ("committer_name", json!(c.committer_name)),
                ("committer_email", json!(c.committer_email)),
                ("committed_date", json!(c.committed_date)),
                ("created_at", json!(c.committed_date)),
                ("message", json!(c.message)),
                ("parent_ids", json!(c.parents)),
                (
                    "web_url",
                    json!(format!("{}/{PROJECT}/-/commit/{}", self.origin, c.id)),
                ),
            ],
        )
    }

    /// The short commit shape that compare uses.
    fn compare_commit_json(&self, c: &GitCommit) -> Value {
        let template = &fixture("compare.json")["commits"][0];
        fill(
            template,
            vec![
                ("id", json!(c.id)),
                ("short_id", json!(c.id[..11])),
                ("title", json!(c.message.lines().next().unwrap_or(""))),
                ("author_name", json!(c.author_name)),
                ("author_email", json!(c.author_email)),
                ("created_at", json!(c.committed_date)),
            ],
        )
    }

    fn commits(&self, call: &Call<'_>) -> Response {
        let rev = call.param("ref_name").unwrap_or(BRANCH);
        let path = call
            .param("path")
            .map(trim_slashes)
            .filter(|p| !p.is_empty());
        let per_page = call.per_page(20);
        let skip = (call.page() - 1) * per_page;
        match self.git.log(rev, path, per_page, skip) {
            None => Response::error(404, "404-ref.json"),
            Some(commits) => {
                let body: Vec<Value> = commits.iter().map(|c| self.commit_json(c)).collect();
                Response::json(200, &Value::Array(body))
                    .header("X-Page", call.page().to_string())
                    .header("X-Per-Page", per_page.to_string())
            }
        }
    }

    fn commit(&self, call: &Call<'_>) -> Response {
        let rev = &call.segments[6];
        match self.git.log(rev, None, 1, 0) {
            Some(commits) if !commits.is_empty() => {
                Response::json(200, &self.commit_json(&commits[0]))
            }
            _ => Response::error(404, "404-commit.json"),
        }
    }

    fn diff_json(&self, d: &GitDiff, text: String) -> Value {
        let template = &fixture("compare.json")["diffs"][0];
        let new_file = d.status == 'A';
        let deleted = d.status == 'D';
        fill(
            template,
            vec![
                ("old_path", json!(d.old_path)),
                ("new_path", json!(d.new_path)),
                ("a_mode", json!(d.old_mode)),
                ("b_mode", json!(d.new_mode)),
                ("diff", json!(text)),
                ("collapsed", json!(false)),
                ("too_large", json!(false)),
                ("new_file", json!(new_file)),
                ("renamed_file", json!(d.status == 'R')),
                ("deleted_file", json!(deleted)),
            ],
        )
    }

    fn diffs_json(&self, from: &str, to: &str, diffs: &[GitDiff]) -> Vec<Value> {
        let with_text = diffs.len() <= MAX_DIFF_TEXTS;
        diffs
            .iter()
            .map(|d| {
                let text = if with_text {
                    self.git.patch(from, to, &d.old_path, &d.new_path)
                } else {
                    String::new()
                };
                self.diff_json(d, text)
            })
            .collect()
    }

    fn commit_diff(&self, call: &Call<'_>) -> Response {
        let rev = &call.segments[6];
        let Some(commit) = self
            .git
            .log(rev, None, 1, 0)
            .and_then(|c| c.into_iter().next())
        else {
            return Response::error(404, "404-commit.json");
        };
        let from = commit
            .parents
            .first()
            .cloned()
            .unwrap_or_else(|| EMPTY_TREE.to_string());
        let diffs = self.git.diff_tree(&from, &commit.id);
        let per_page = call.per_page(20);
        let page = call.page();
        let total = diffs.len();
        let start = ((page - 1) * per_page).min(total);
        let end = (start + per_page).min(total);
        let body = self.diffs_json(&from, &commit.id, &diffs[start..end]);
        offset_pages(
            call,
            &self.origin,
            Response::json(200, &json!(body)),
            total,
            per_page,
        )
    }

    fn listing(&self, sha: &str, path: &str, recursive: bool) -> Option<Arc<Tree>> {
        let key = (sha.to_string(), path.to_string(), recursive);
        if let Some(tree) = lock(&self.trees).get(&key) {
            return Some(tree.clone());
        }
        let entries = self.git.ls_tree(sha, path, recursive)?;
        let values: Vec<Value> = entries
            .iter()
            .map(|e| {
                fill(
                    &fixture("tree-page.json")[0],
                    vec![
                        ("id", json!(e.id)),
                        ("name", json!(e.path.rsplit('/').next().unwrap_or(""))),
                        ("type", json!(e.kind)),
                        ("path", json!(e.path)),
                        ("mode", json!(e.mode)),
                    ],
                )
            })
            .collect();
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.path.clone(), i))
            .collect();
        let tree = Arc::new(Tree {
            entries: values,
            index,
        });
        lock(&self.trees).insert(key, tree.clone());
        Some(tree)
    }

    fn tree(&self, call: &Call<'_>) -> Response {
        let rev = call.param("ref").unwrap_or(BRANCH);
        let path = trim_slashes(call.param("path").unwrap_or(""));
        let recursive = call.param("recursive") == Some("true");
        let Some(sha) = self.git.resolve(rev) else {
            return Response::error(404, "404-tree.json");
        };
        let Some(tree) = self.listing(&sha, path, recursive) else {
            return Response::error(404, "404-tree.json");
        };
        let per_page = call.per_page(20);
        if call.param("pagination") != Some("keyset") {
            let total = tree.entries.len();
            let start = ((call.page() - 1) * per_page).min(total);
            let end = (start + per_page).min(total);
            let body = Value::Array(tree.entries[start..end].to_vec());
            return offset_pages(
                call,
                &self.origin,
                Response::json(200, &body),
                total,
                per_page,
            );
        }
        let start = match call.param("page_token") {
            None => 0,
            Some(token) => match tree.index.get(token) {
                Some(i) => i + 1,
                None => {
                    return Response::json(
                        400,
                        &json!({"error": "page_token does not match any entry"}),
                    );
                }
            },
        };
        let end = (start + per_page).min(tree.entries.len());
        let page = &tree.entries[start..end];
        let mut response = Response::json(200, &Value::Array(page.to_vec()));
        if end < tree.entries.len() {
            let last = page.last().and_then(|e| e["path"].as_str()).unwrap_or("");
            // Like Rails' `to_query`: sorted keys, `+` for a space.
            let mut pairs: Vec<(&str, String)> = vec![
                ("id", call.segments[3].clone()),
                ("page_token", last.to_string()),
                ("pagination", "keyset".into()),
                ("per_page", per_page.to_string()),
                ("recursive", recursive.to_string()),
                ("ref", rev.to_string()),
            ];
            if !path.is_empty() {
                pairs.push(("path", path.to_string()));
            }
            pairs.sort();
            let query: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", form_encode(v)))
                .collect();
            let link = format!(
                "<{}{}?{}>; rel=\"next\"",
                self.origin,
                call.raw_path(),
                query.join("&")
            );
            response = response.header("Link", link);
        }
        response.header("X-Per-Page", per_page.to_string())
    }

    fn blob_raw(&self, call: &Call<'_>) -> Response {
        let sha = &call.segments[6];
        match self.git.object(sha) {
            Some((kind, bytes)) if kind == "blob" => Response {
                status: 200,
                headers: vec![
                    ("Content-Type".into(), "text/plain; charset=utf-8".into()),
                    ("Content-Disposition".into(), "inline".into()),
                ],
                body: bytes,
            },
            _ => Response::error(404, "404-blob.json"),
        }
    }

    fn compare(&self, call: &Call<'_>) -> Response {
        let (Some(from), Some(to)) = (call.param("from"), call.param("to")) else {
            return Response::json(400, &json!({"error": "from is missing, to is missing"}));
        };
        let (Some(from), Some(to)) = (self.git.resolve(from), self.git.resolve(to)) else {
            return Response::error(404, "404-ref.json");
        };
        let straight = call.param("straight") == Some("true");
        let base = if straight {
            from.clone()
        } else {
            self.git
                .merge_base(&from, &to)
                .unwrap_or_else(|| from.clone())
        };
        let commits = self.git.range(&base, &to);
        let mut diffs = self.git.diff_tree(&base, &to);
        let (cut, max) = {
            let s = lock(&self.settings);
            (s.cut_compare, s.compare_max_files)
        };
        let mut timeout = false;
        if cut {
            diffs.clear();
            timeout = true;
        } else if diffs.len() > max {
            diffs.truncate(max);
            timeout = true;
        }
        let commit = commits.last().map(|c| self.compare_commit_json(c));
        let body = fill(
            fixture("compare.json"),
            vec![
                ("commit", commit.unwrap_or(Value::Null)),
                (
                    "commits",
                    json!(
                        commits
                            .iter()
                            .map(|c| self.compare_commit_json(c))
                            .collect::<Vec<_>>()
                    ),
                ),
                ("diffs", json!(self.diffs_json(&base, &to, &diffs))),
                ("compare_timeout", json!(timeout)),
                ("compare_same_ref", json!(from == to)),
                (
                    "web_url",
                    json!(format!(
                        "{}/{PROJECT}/-/compare/{}...{}",
                        self.origin,
                        &from[..8],
                        &to[..8]
                    )),
                ),
            ],
        );
        Response::json(200, &body)
    }

    fn file(&self, call: &Call<'_>) -> Response {
        let path = call.segments[6].clone();
        let Some(rev) = call.param("ref") else {
            return Response::json(400, &json!({"error": "ref is missing"}));
        };
        let Some(sha) = self.git.resolve(rev) else {
            return Response::error(404, "404-commit.json");
        };
        let entry = self
            .git
            .ls_tree(&sha, &path, false)
            .and_then(|entries| entries.into_iter().find(|e| e.path == path))
            .filter(|e| e.kind == "blob");
        let Some(entry) = entry else {
            return Response::error(404, "404-file.json");
        };
        let Some((_, bytes)) = self.git.object(&entry.id) else {
            return Response::error(404, "404-file.json");
        };
        let last = self
            .git
            .log(&sha, Some(&path), 1, 0)
            .and_then(|c| c.into_iter().next())
            .map(|c| c.id)
            .unwrap_or_default();
        let sha256 = sha256_hex(&bytes);
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        let executable = entry.mode == "100755";
        let headers = vec![
            ("X-Gitlab-Blob-Id".to_string(), entry.id.clone()),
            ("X-Gitlab-Commit-Id".to_string(), sha.clone()),
            ("X-Gitlab-Content-Sha256".to_string(), sha256.clone()),
            ("X-Gitlab-Encoding".to_string(), "base64".to_string()),
            (
                "X-Gitlab-Execute-Filemode".to_string(),
                executable.to_string(),
            ),
            ("X-Gitlab-File-Name".to_string(), form_encode(&name)),
            ("X-Gitlab-File-Path".to_string(), form_encode(&path)),
            ("X-Gitlab-Last-Commit-Id".to_string(), last.clone()),
            ("X-Gitlab-Ref".to_string(), form_encode(rev)),
            ("X-Gitlab-Size".to_string(), bytes.len().to_string()),
        ];
        let mut response = if call.endpoint == Endpoint::FileRaw {
            Response {
                status: 200,
                headers: vec![("Content-Type".into(), "text/plain; charset=utf-8".into())],
                body: bytes,
            }
        } else {
            let body = fill(
                fixture("file.json"),
                vec![
                    ("file_name", json!(name)),
                    ("file_path", json!(path)),
                    ("size", json!(bytes.len())),
                    ("encoding", json!("base64")),
                    ("content", json!(base64(&bytes))),
                    ("content_sha256", json!(sha256)),
                    ("ref", json!(rev)),
                    ("blob_id", json!(entry.id)),
                    ("commit_id", json!(sha)),
                    ("last_commit_id", json!(last)),
                    ("execute_filemode", json!(executable)),
                ],
            );
            Response::json(200, &body)
        };
        response.headers.extend(headers);
        response
    }
}

/// Offset pagination headers (`X-Page`, `X-Total`, `Link`), as GitLab sends.
fn offset_pages(
    call: &Call<'_>,
    origin: &str,
    mut response: Response,
    total: usize,
    per_page: usize,
) -> Response {
    let page = call.page();
    let pages = total.div_ceil(per_page).max(1);
    let link = |p: usize| {
        let mut pairs: Vec<(String, String)> = call
            .query
            .iter()
            .filter(|(k, _)| k != "page")
            .cloned()
            .collect();
        pairs.push(("page".into(), p.to_string()));
        pairs.sort();
        let q: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect();
        format!("<{origin}{}?{}>", call.raw_path(), q.join("&"))
    };
    let mut links = Vec::new();
    if page > 1 {
        links.push(format!("{}; rel=\"prev\"", link(page - 1)));
    }
    if page < pages {
        links.push(format!("{}; rel=\"next\"", link(page + 1)));
    }
    links.push(format!("{}; rel=\"first\"", link(1)));
    links.push(format!("{}; rel=\"last\"", link(pages)));
    let next = if page < pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let prev = if page > 1 {
        (page - 1).to_string()
    } else {
        String::new()
    };
    response.headers.extend([
        ("Link".to_string(), links.join(", ")),
        ("X-Page".to_string(), page.to_string()),
        ("X-Per-Page".to_string(), per_page.to_string()),
        ("X-Next-Page".to_string(), next),
        ("X-Prev-Page".to_string(), prev),
        ("X-Total".to_string(), total.to_string()),
        ("X-Total-Pages".to_string(), pages.to_string()),
    ]);
    response
}

// ---------------------------------------------------------------------------
// git
// ---------------------------------------------------------------------------

/// Distinct private index files for concurrent commits.
static NEXT_INDEX: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// git's empty tree, the "parent" of a root commit.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

struct Git {
    root: PathBuf,
    /// A `git cat-file --batch` kept running, so 100,000 reads stay cheap.
    batch: Mutex<Option<CatFile>>,
}

struct GitCommit {
    id: String,
    parents: Vec<String>,
    author_name: String,
    author_email: String,
    authored_date: String,
    committer_name: String,
    committer_email: String,
    committed_date: String,
    message: String,
}

struct GitEntry {
    mode: String,
    kind: String,
    id: String,
    path: String,
}

struct GitDiff {
    old_mode: String,
    new_mode: String,
    /// `A`, `M`, `D`, `T` or `R` (renamed, as GitLab detects renames).
    status: char,
    old_path: String,
    new_path: String,
}

fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Git {
    fn new(root: PathBuf) -> Git {
        Git {
            root,
            batch: Mutex::new(None),
        }
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("HOME", &self.root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .arg("-C")
            .arg(&self.root)
            .arg("--literal-pathspecs")
            .stdin(Stdio::null());
        cmd
    }

    /// stdout of a git command that succeeded, `None` otherwise.
    fn run(&self, args: &[&str]) -> Option<Vec<u8>> {
        let out = self.cmd().args(args).output().ok()?;
        out.status.success().then_some(out.stdout)
    }

    /// The commit id `rev` names.
    fn resolve(&self, rev: &str) -> Option<String> {
        if rev.starts_with('-') || rev.is_empty() {
            return None;
        }
        let spec = format!("{rev}^{{commit}}");
        let out = self.run(&[
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &spec,
        ])?;
        let id = String::from_utf8(out).ok()?.trim().to_string();
        is_object_id(&id).then_some(id)
    }

    /// Commits reachable from `rev` touching `path`, newest first; `None`
    /// when `rev` names no commit.
    fn log(&self, rev: &str, path: Option<&str>, n: usize, skip: usize) -> Option<Vec<GitCommit>> {
        if rev.starts_with('-') || rev.is_empty() {
            return None;
        }
        let n = n.to_string();
        let skip = format!("--skip={skip}");
        let mut args = vec![
            "log",
            "-z",
            "--no-show-signature",
            "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%B",
            "-n",
            &n,
            &skip,
            "--end-of-options",
            rev,
            "--",
        ];
        if let Some(path) = path {
            args.push(path);
        }
        let out = self.run(&args)?;
        Some(parse_log(&out))
    }

    /// Commits in `from..to`, oldest first.
    fn range(&self, from: &str, to: &str) -> Vec<GitCommit> {
        let range = format!("{from}..{to}");
        let out = self
            .run(&[
                "log",
                "-z",
                "--reverse",
                "--no-show-signature",
                "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%B",
                &range,
                "--",
            ])
            .unwrap_or_default();
        parse_log(&out)
    }

    fn merge_base(&self, a: &str, b: &str) -> Option<String> {
        let out = self.run(&["merge-base", a, b])?;
        let id = String::from_utf8(out).ok()?.trim().to_string();
        is_object_id(&id).then_some(id)
    }

    /// The entries under `path` (the whole tree when empty) at commit `sha`,
    /// trees included when recursive, as GitLab lists them; `None` when
    /// `path` is not a directory there.
    fn ls_tree(&self, sha: &str, path: &str, recursive: bool) -> Option<Vec<GitEntry>> {
        let mut args = vec!["ls-tree", "-z", "--full-tree"];
        if recursive {
            args.extend(["-r", "-t"]);
        }
        args.extend(["--end-of-options", sha]);
        let spec = format!("{path}/");
        let mut file = false;
        if !path.is_empty() {
            let kind = self.run(&["cat-file", "-t", &format!("{sha}:{path}")])?;
            match String::from_utf8_lossy(&kind).trim() {
                // A directory: its children.
                "tree" => args.push(&spec),
                // The listing asks about a directory only.
                _ if recursive => return None,
                // `files/:path` asks about a file: its own entry.
                _ => {
                    file = true;
                    args.push(path);
                }
            }
        }
        let out = self.run(&args)?;
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut entries = Vec::new();
        for record in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let record = String::from_utf8_lossy(record);
            let Some((meta, name)) = record.split_once('\t') else {
                continue;
            };
            let mut meta = meta.split(' ');
            let (Some(mode), Some(kind), Some(id)) = (meta.next(), meta.next(), meta.next()) else {
                continue;
            };
            // `-t` also shows the trees on the way down to `path`.
            if !(if file {
                name == path
            } else {
                name.starts_with(&prefix)
            }) {
                continue;
            }
            entries.push(GitEntry {
                mode: mode.to_string(),
                kind: kind.to_string(),
                id: id.to_string(),
                path: name.to_string(),
            });
        }
        Some(entries)
    }

    /// `git diff-tree -r -M from to`, every path of the repository, with
    /// renames detected as GitLab's diffs detect them.
    fn diff_tree(&self, from: &str, to: &str) -> Vec<GitDiff> {
        let out = self
            .run(&["diff-tree", "-r", "-z", "-M", from, to])
            .unwrap_or_default();
        let mut diffs = Vec::new();
        let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
        while let Some(meta) = fields.next() {
            let meta = String::from_utf8_lossy(meta);
            let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
            if parts.len() < 5 {
                continue;
            }
            let status = parts[4].chars().next().unwrap_or('M');
            let Some(name) = fields.next() else { break };
            let old_path = String::from_utf8_lossy(name).into_owned();
            let new_path = if matches!(status, 'R' | 'C') {
                let Some(name) = fields.next() else { break };
                String::from_utf8_lossy(name).into_owned()
            } else {
                old_path.clone()
            };
            diffs.push(GitDiff {
                old_mode: parts[0].trim_start_matches('0').to_string().or_zero(),
                new_mode: parts[1].trim_start_matches('0').to_string().or_zero(),
                status,
                old_path,
                new_path,
            });
        }
        diffs
    }

    /// The unified diff of one path, from its first hunk on (GitLab's `diff`).
    fn patch(&self, from: &str, to: &str, old_path: &str, new_path: &str) -> String {
        let out = self
            .run(&[
                "diff",
                "--no-color",
                "--no-ext-diff",
                "-M",
                from,
                to,
                "--",
                old_path,
                new_path,
            ])
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&out);
        match text.find("\n@@") {
            Some(i) => text[i + 1..].to_string(),
            None => String::new(),
        }
    }

    /// `(type, bytes)` of an object, through the long-running `cat-file`.
    fn object(&self, sha: &str) -> Option<Object> {
        if !is_object_id(sha) {
            return None;
        }
        let mut batch = lock(&self.batch);
        if batch.is_none() {
            *batch = CatFile::spawn(self.cmd());
        }
        let answer = batch.as_mut()?.read(sha);
        match answer {
            Ok(found) => found,
            Err(()) => {
                // Out of step or gone: the next read starts a fresh one.
                batch.take();
                None
            }
        }
    }
}

trait OrZero {
    fn or_zero(self) -> String;
}

impl OrZero for String {
    /// GitLab's `"0"` for the missing side of an added or deleted file.
    fn or_zero(self) -> String {
        if self.is_empty() {
            "0".to_string()
        } else {
            format!("{self:0>6}")
        }
    }
}

fn parse_log(out: &[u8]) -> Vec<GitCommit> {
    out.split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let record = String::from_utf8_lossy(record);
            let f: Vec<&str> = record.splitn(9, '\u{1f}').collect();
            if f.len() < 9 || !is_object_id(f[0].trim()) {
                return None;
            }
            Some(GitCommit {
                id: f[0].trim().to_string(),
                parents: f[1].split_whitespace().map(str::to_string).collect(),
                author_name: f[2].to_string(),
                author_email: f[3].to_string(),
                authored_date: f[4].to_string(),
                committer_name: f[5].to_string(),
                committer_email: f[6].to_string(),
                committed_date: f[7].to_string(),
                message: f[8].to_string(),
            })
        })
        .collect()
}

/// An object's type and bytes.
type Object = (String, Vec<u8>);

struct CatFile {
    child: Child,
    stdin: ChildStdin,
    stdout: std::io::BufReader<ChildStdout>,
}

impl CatFile {
    fn spawn(mut cmd: Command) -> Option<CatFile> {
        let mut child = cmd
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = std::io::BufReader::new(child.stdout.take()?);
        Some(CatFile {
            child,
            stdin,
            stdout,
        })
    }

    /// `Ok(None)` for a missing object, `Err` when the pipe broke.
    fn read(&mut self, sha: &str) -> Result<Option<Object>, ()> {
        use std::io::BufRead;
        self.stdin
            .write_all(format!("{sha}\n").as_bytes())
            .map_err(|_| ())?;
        self.stdin.flush().map_err(|_| ())?;
        let mut header = String::new();
        self.stdout.read_line(&mut header).map_err(|_| ())?;
        let parts: Vec<&str> = header.trim_end().split(' ').collect();
        match parts[..] {
            [_, "missing"] => Ok(None),
            [_, kind, size] => {
                let size: usize = size.parse().map_err(|_| ())?;
                let mut bytes = vec![0u8; size + 1];
                self.stdout.read_exact(&mut bytes).map_err(|_| ())?;
                bytes.pop();
                Ok(Some((kind.to_string(), bytes)))
            }
            _ => Err(()),
        }
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

fn trim_slashes(s: &str) -> &str {
    s.trim_matches('/')
}

/// Percent-decoding; `plus` also turns `+` into a space (query strings).
pub fn percent_decode(s: &str, plus: bool) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

/// Like Rails' `CGI.escape`: unreserved bytes as they are, a space as `+`,
/// everything else `%XX`.
pub fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

// ---------------------------------------------------------------------------
// Running sentinel against it
// ---------------------------------------------------------------------------

/// How a tick reaches the fake server.
#[derive(Debug, Clone)]
pub struct Api {
    pub url: String,
    pub project: String,
    pub branch: String,
    pub path: Option<String>,
    /// Put in `SENTINEL_GITLAB_TOKEN` when set.
    pub token: Option<String>,
}

impl Api {
    /// `server`'s URL, project `group/project`, branch `main`, path
    /// `libs/shared`, the token the server wants.
    pub fn new(server: &FakeGitLab) -> Api {
        Api {
            url: server.url(),
            project: PROJECT.into(),
            branch: BRANCH.into(),
            path: Some(WATCHED.into()),
            token: Some(TOKEN.into()),
        }
    }
}

impl Sandbox {
    /// A fake GitLab serving this sandbox's repository.
    pub fn gitlab(&self) -> FakeGitLab {
        FakeGitLab::start(&self.repo.root)
    }

    /// `sentinel tick --json --now T --source gitlab --gitlab-url U
    /// --project P --branch B [--path D] --state S`, with the token in
    /// `SENTINEL_GITLAB_TOKEN`.
    pub fn api_tick_cmd(&self, api: &Api, now: &str) -> Run {
        let mut run = self
            .sentinel(["tick", "--json", "--now", now, "--source", "gitlab"])
            .args(["--gitlab-url", &api.url, "--project", &api.project])
            .args(["--branch", &api.branch])
            .arg("--state")
            .arg(&self.state);
        if let Some(path) = &api.path {
            run = run.args(["--path", path]);
        }
        if let Some(token) = &api.token {
            run = run.env("SENTINEL_GITLAB_TOKEN", token);
        }
        run
    }
}

// ---------------------------------------------------------------------------
// The fake, tested on its own
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::Instant;

    use super::*;
    use crate::util::plain_js;

    /// A plain ureq agent that treats no status as an error and follows no
    /// redirect, so the tests see exactly what the server sent.
    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into()
    }

    struct Got {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Got {
        fn json(&self) -> Value {
            serde_json::from_slice(&self.body).unwrap_or_else(|e| {
                panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body))
            })
        }

        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    fn get(url: &str, token: Option<&str>) -> Result<Got, ureq::Error> {
        let mut req = agent().get(url);
        if let Some(token) = token {
            req = req.header("PRIVATE-TOKEN", token);
        }
        let mut resp = req.call()?;
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let status = resp.status().as_u16();
        let body = resp.body_mut().read_to_vec()?;
        Ok(Got {
            status,
            headers,
            body,
        })
    }

    fn ok(url: &str) -> Got {
        get(url, Some(TOKEN)).unwrap_or_else(|e| panic!("GET {url}: {e}"))
    }

    /// The keys of an object, or of the first element of an array.
    fn keys(v: &Value) -> Vec<String> {
        let object = match v {
            Value::Array(items) => items.first().expect("a non-empty array"),
            other => other,
        };
        let mut keys: Vec<String> = object
            .as_object()
            .expect("an object")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    fn sandbox() -> (Sandbox, String, String) {
        let sb = Sandbox::with_files(&["a.js", "b.js"]);
        let first = sb.repo.head();
        sb.repo
            .write("libs/shared/b.js", "// b.js\nmodule.exports = 2;\n");
        sb.repo.write("README.md", "outside the watched path\n");
        let second = sb.repo.commit("change b.js");
        (sb, first, second)
    }

    #[test]
    fn fake_gitlab_answers_every_endpoint_from_git_with_the_documented_keys() {
        let (sb, first, second) = sandbox();
        let gl = sb.gitlab();
        let base = format!("{}/projects/group%2Fproject/repository", gl.url());

        let got = ok(&format!(
            "{base}/commits?ref_name=main&path=libs%2Fshared&per_page=1"
        ));
        assert_eq!(got.status, 200);
        let commits = got.json();
        assert_eq!(keys(&commits), keys(fixture("commits.json")));
        assert_eq!(commits.as_array().unwrap().len(), 1);
        assert_eq!(commits[0]["id"], second.as_str());
        assert_eq!(commits[0]["title"], "change b.js");
        assert_eq!(commits[0]["parent_ids"], json!([first]));

        // Nothing touches a path with no commit: an empty array.
        let got = ok(&format!(
            "{base}/commits?ref_name=main&path=nothing&per_page=1"
        ));
        assert_eq!(got.json(), json!([]));

        // The numeric id is the same project.
        let got = ok(&format!(
            "{}/projects/42/repository/commits?ref_name={first}&per_page=5",
            gl.url()
        ));
        assert_eq!(got.json()[0]["id"], first.as_str());

        let got = ok(&format!(
            "{base}/tree?path=libs%2Fshared&ref={second}&recursive=true&per_page=100&pagination=keyset"
        ));
        let tree = got.json();
        assert_eq!(keys(&tree), keys(fixture("tree-page.json")));
        assert_eq!(got.header("link"), None, "one page only");
        let blob_b = sb.repo.blob("libs/shared/b.js");
        assert_eq!(
            tree,
            json!([
                {"id": sb.repo.blob("libs/shared/a.js"), "name": "a.js", "type": "blob",
                 "path": "libs/shared/a.js", "mode": "100644"},
                {"id": blob_b, "name": "b.js", "type": "blob",
                 "path": "libs/shared/b.js", "mode": "100644"},
            ])
        );

        let got = ok(&format!("{base}/blobs/{blob_b}/raw"));
        assert_eq!(got.body, b"// b.js\nmodule.exports = 2;\n");

        let got = ok(&format!("{base}/compare?from={first}&to={second}"));
        let compare = got.json();
        assert_eq!(keys(&compare), keys(fixture("compare.json")));
        assert_eq!(
            keys(&compare["diffs"]),
            keys(&fixture("compare.json")["diffs"])
        );
        assert_eq!(
            keys(&compare["commits"]),
            keys(&fixture("compare.json")["commits"])
        );
        assert_eq!(compare["compare_timeout"], false);
        assert_eq!(compare["commits"][0]["id"], second.as_str());
        // Like GitLab's, the compare is not limited to the watched path.
        let paths: Vec<&str> = compare["diffs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["new_path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["README.md", "libs/shared/b.js"]);
        assert_eq!(compare["diffs"][0]["new_file"], true);
        assert_eq!(compare["diffs"][0]["a_mode"], "0");
        assert_eq!(compare["diffs"][1]["b_mode"], "100644");
        assert!(
            compare["diffs"][1]["diff"]
                .as_str()
                .unwrap()
                .starts_with("@@ -1,2 +1,2 @@"),
            "{}",
            compare["diffs"][1]["diff"]
        );

        let got = ok(&format!("{base}/commits/{second}/diff"));
        assert_eq!(keys(&got.json()), keys(fixture("commit-diff.json")));
        assert_eq!(got.json().as_array().unwrap().len(), 2);
        let got = ok(&format!("{base}/commits/{first}"));
        assert_eq!(got.json()["id"], first.as_str());

        let got = ok(&format!("{base}/files/libs%2Fshared%2Fb.js?ref={second}"));
        assert_eq!(keys(&got.json()), keys(fixture("file.json")));
        assert_eq!(got.json()["blob_id"], blob_b.as_str());
        assert_eq!(got.header("x-gitlab-blob-id"), Some(blob_b.as_str()));
        let got = ok(&format!("{base}/files/libs%2Fshared%2Fb.js/raw?ref=main"));
        assert_eq!(got.body, b"// b.js\nmodule.exports = 2;\n");
        assert_eq!(got.header("x-gitlab-blob-id"), Some(blob_b.as_str()));

        let got = ok(&format!("{}/projects/group%2Fproject", gl.url()));
        assert_eq!(keys(&got.json()), keys(fixture("project.json")));

        let kinds: Vec<Endpoint> = gl.requests().iter().map(|r| r.endpoint).collect();
        assert_eq!(
            kinds,
            [
                Endpoint::Commits,
                Endpoint::Commits,
                Endpoint::Commits,
                Endpoint::Tree,
                Endpoint::BlobRaw,
                Endpoint::Compare,
                Endpoint::CommitDiff,
                Endpoint::Commit,
                Endpoint::File,
                Endpoint::FileRaw,
                Endpoint::Project,
            ]
        );
    }

    #[test]
    fn fake_gitlab_answers_errors_like_gitlab() {
        let (sb, first, _) = sandbox();
        let gl = sb.gitlab();
        let base = format!("{}/projects/group%2Fproject/repository", gl.url());
        let commits = format!("{base}/commits?ref_name=main&per_page=1");

        let got = get(&commits, None).unwrap();
        assert_eq!(
            (got.status, got.json()),
            (401, json!({"message": "401 Unauthorized"}))
        );
        let got = get(&commits, Some("glpat-wrong")).unwrap();
        assert_eq!(got.status, 401);

        let got = ok(&format!(
            "{}/projects/other%2Fproject/repository/commits?ref_name=main",
            gl.url()
        ));
        assert_eq!(
            (got.status, got.json()),
            (404, json!({"message": "404 Project Not Found"}))
        );
        // Unencoded, `group/project` is two segments and nothing matches.
        let got = ok(&format!(
            "{}/projects/group/project/repository/commits?ref_name=main",
            gl.url()
        ));
        assert_eq!(got.status, 404);
        assert_eq!(gl.requests().last().unwrap().endpoint, Endpoint::Unknown);

        let got = ok(&format!("{base}/commits?ref_name=nope&per_page=1"));
        assert_eq!(
            (got.status, got.json()),
            (404, json!({"message": "404 Ref Not Found"}))
        );
        let got = ok(&format!(
            "{base}/tree?path=missing&ref={first}&recursive=true&pagination=keyset"
        ));
        assert_eq!(
            (got.status, got.json()),
            (404, json!({"message": "404 Tree Not Found"}))
        );
        let got = ok(&format!("{base}/blobs/{}/raw", "0".repeat(40)));
        assert_eq!(got.status, 404);

        gl.require_token(None);
        let got = get(&commits, None).unwrap();
        assert_eq!(got.status, 200);
    }

    #[test]
    fn fake_gitlab_pages_a_listing_with_link_rel_next() {
        let sb = Sandbox::new();
        for i in 0..250 {
            let name = format!("f{i:03}.js");
            sb.repo.write(&format!("{WATCHED}/{name}"), plain_js(&name));
        }
        sb.repo.write(&format!("{WATCHED}/sub dir/x #1.js"), "x\n");
        let head = sb.repo.commit("many files");
        let gl = sb.gitlab();
        let mut url = Some(format!(
            "{}/projects/group%2Fproject/repository/tree?path=libs%2Fshared&ref={head}&recursive=true&per_page=100&pagination=keyset",
            gl.url()
        ));
        let mut pages = Vec::new();
        while let Some(u) = url.take() {
            let got = ok(&u);
            assert_eq!(got.status, 200, "{u}");
            let items = got.json().as_array().unwrap().clone();
            pages.push(items.len());
            url = got.header("link").map(|l| {
                let (target, rel) = l.split_once(';').unwrap();
                assert_eq!(rel.trim(), "rel=\"next\"");
                target.trim_matches(['<', '>', ' ']).to_string()
            });
            if let Some(next) = &url {
                assert!(next.starts_with(&gl.origin()), "absolute: {next}");
                assert!(next.contains("page_token="), "{next}");
            }
        }
        // 250 files, a directory and the file inside it.
        assert_eq!(pages, [100, 100, 52]);
        let tokens: Vec<Option<String>> = gl
            .requests_to(Endpoint::Tree)
            .iter()
            .map(|r| r.param("page_token").map(str::to_string))
            .collect();
        assert_eq!(tokens[0], None);
        assert!(tokens[1].is_some() && tokens[2].is_some());
    }

    #[test]
    fn fake_gitlab_decodes_paths_and_queries() {
        let sb = Sandbox::new();
        let dir = "libs/spaß #1";
        let name = "100% ok?.js";
        sb.repo.write(&format!("{dir}/{name}"), "x\n");
        let head = sb.repo.commit("odd names");
        let gl = sb.gitlab();
        let got = ok(&format!(
            "{}/projects/group%2Fproject/repository/commits?ref_name=main&path={}&per_page=1",
            gl.url(),
            form_encode(dir)
        ));
        assert_eq!(got.json()[0]["id"], head.as_str());
        let r = gl.requests().pop().unwrap();
        assert_eq!(r.param("path"), Some(dir));
        assert!(
            r.target.contains("/projects/group%2Fproject/"),
            "{}",
            r.target
        );

        let file = format!("{dir}/{name}");
        let got = ok(&format!(
            "{}/projects/42/repository/files/{}/raw?ref=main",
            gl.url(),
            form_encode(&file).replace('+', "%20")
        ));
        assert_eq!(got.status, 200);
        assert_eq!(got.body, b"x\n");
        assert_eq!(
            gl.requests().pop().unwrap().segments[6],
            file,
            "the file path is one decoded segment"
        );
    }

    #[test]
    fn fake_gitlab_serves_canned_failures_in_order_then_the_real_answer() {
        let (sb, _, second) = sandbox();
        let gl = sb.gitlab();
        let commits = format!(
            "{}/projects/group%2Fproject/repository/commits?ref_name=main&per_page=1",
            gl.url()
        );
        gl.push(Endpoint::Commits, Reply::error(500, "500.json"));
        gl.push(Endpoint::Commits, Reply::too_many_requests(7));
        gl.push(Endpoint::Commits, Reply::html(200, "sign-in.html"));
        assert_eq!(gl.queued(), 3);

        let got = ok(&commits);
        assert_eq!(got.status, 500);
        let got = ok(&commits);
        assert_eq!(got.status, 429);
        assert_eq!(got.header("retry-after"), Some("7"));
        assert_eq!(got.body, b"Retry later\n");
        let got = ok(&commits);
        assert_eq!(got.status, 200);
        assert!(got.body.starts_with(b"<!DOCTYPE html>"));
        let got = ok(&commits);
        assert_eq!(got.json()[0]["id"], second.as_str());
        assert_eq!(gl.queued(), 0);
        // Other endpoints have their own queues.
        gl.push(Endpoint::Tree, Reply::error(503, "503.html"));
        assert_eq!(ok(&commits).status, 200);
        assert_eq!(gl.queued(), 1);
    }

    #[test]
    fn a_truncated_body_fails_at_once_rather_than_at_the_timeout() {
        let (sb, _, _) = sandbox();
        let gl = sb.gitlab();
        let body = br#"[{"id":"ed899a2f4b50b4370feeea9467"#.to_vec();
        gl.push(
            Endpoint::Commits,
            Reply::Truncated {
                status: 200,
                declared: 800,
                body,
            },
        );
        gl.push(Endpoint::Commits, Reply::Hangup);
        let url = format!(
            "{}/projects/group%2Fproject/repository/commits?ref_name=main",
            gl.url()
        );
        let started = Instant::now();
        assert!(get(&url, Some(TOKEN)).is_err(), "a short body is an error");
        assert!(get(&url, Some(TOKEN)).is_err(), "no answer is an error");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(ok(&url).status, 200);
    }

    #[test]
    fn a_redirect_points_at_the_other_origin_with_the_same_target() {
        let (sb, _, _) = sandbox();
        let gl = sb.gitlab();
        let other = sb.gitlab();
        gl.push(
            Endpoint::Commits,
            Reply::Redirect {
                status: 301,
                origin: other.other_host_origin(),
            },
        );
        let target = "/api/v4/projects/group%2Fproject/repository/commits?ref_name=main";
        let got = ok(&format!("{}{target}", gl.origin()));
        assert_eq!(got.status, 301);
        let location = got.header("location").unwrap().to_string();
        assert_eq!(
            location,
            format!("http://localhost:{}{target}", other.addr.port())
        );
        // `localhost` reaches the second server.
        let got = ok(&location);
        assert_eq!(got.status, 200);
        assert_eq!(other.requests().len(), 1);
        assert_eq!(other.requests()[0].header("private-token"), Some(TOKEN));
    }

    #[test]
    fn a_dropped_server_frees_its_port_and_stops_a_slow_answer() {
        let (sb, _, _) = sandbox();
        let gl = sb.gitlab();
        let url = gl.url();
        gl.push(
            Endpoint::Commits,
            Reply::Slow {
                delay: Duration::from_secs(30),
                then: None,
            },
        );
        let commits = format!("{url}/projects/42/repository/commits?ref_name=main");
        let client = thread::spawn(move || get(&commits, Some(TOKEN)).map(|g| g.status));
        // Wait (bounded) until the slow request has arrived.
        let until = Instant::now() + Duration::from_secs(5);
        while gl.requests().is_empty() && Instant::now() < until {
            thread::yield_now();
        }
        assert_eq!(gl.requests().len(), 1);
        let started = Instant::now();
        drop(gl);
        let answer = client.join().unwrap();
        assert!(answer.is_err(), "the slow request was cut: {answer:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(get(&format!("{url}/projects/42"), Some(TOKEN)).is_err());
    }

    #[test]
    fn the_compare_can_be_cut() {
        let (sb, first, second) = sandbox();
        let gl = sb.gitlab();
        gl.cut_compare(true);
        let got = ok(&format!(
            "{}/projects/42/repository/compare?from={first}&to={second}",
            gl.url()
        ));
        let body = got.json();
        assert_eq!(keys(&body), keys(fixture("compare-timeout.json")));
        assert_eq!(body["compare_timeout"], true);
        assert_eq!(body["diffs"], json!([]));
        assert_eq!(body["commits"][0]["id"], second.as_str());
    }

    #[test]
    fn the_commit_diff_is_paged_with_offsets() {
        let sb = Sandbox::new();
        for i in 0..5 {
            sb.repo.write(&format!("{WATCHED}/f{i}.js"), plain_js("f"));
        }
        let head = sb.repo.commit("five files");
        let gl = sb.gitlab();
        let got = ok(&format!(
            "{}/projects/42/repository/commits/{head}/diff?per_page=2",
            gl.url()
        ));
        assert_eq!(got.json().as_array().unwrap().len(), 2);
        assert_eq!(got.header("x-total"), Some("5"));
        assert_eq!(got.header("x-next-page"), Some("2"));
        let link = got.header("link").unwrap();
        assert!(link.contains("page=2>; rel=\"next\""), "{link}");
        assert_eq!(got.json()[0]["new_file"], true);
    }

    #[test]
    fn served_helpers_encode_like_gitlab() {
        assert_eq!(form_encode("libs/spaß #1"), "libs%2Fspa%C3%9F+%231");
        assert_eq!(
            percent_decode("libs%2Fspa%C3%9F+%231", true),
            "libs/spaß #1"
        );
        assert_eq!(percent_decode("a+b%2", false), "a+b%2");
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        for name in [
            "commits.json",
            "tree-page.json",
            "compare.json",
            "compare-timeout.json",
            "commit-diff.json",
            "file.json",
            "project.json",
        ] {
            assert!(
                fixture(name).is_object() || fixture(name).is_array(),
                "{name}"
            );
        }
        assert_eq!(
            keys(fixture("compare.json")),
            keys(fixture("compare-timeout.json"))
        );
        assert_eq!(
            keys(fixture("commit-diff.json")),
            keys(&fixture("compare.json")["diffs"])
        );
    }
}
