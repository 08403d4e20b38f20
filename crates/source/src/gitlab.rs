//! The GitLab source: the watched tree through the REST API v4, no clone.
//!
//! One `ureq` agent, built here, with explicit timeouts and no automatic
//! redirects or status errors, so every answer is matched by hand. The token
//! travels only in the `PRIVATE-TOKEN` header, only to the configured host,
//! and appears in no message.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{Change, Entry, Listing, RequestCounts, Source, SourceError};

#[path = "gitlab_archive.rs"]
mod archive;
pub use archive::DEFAULT_MAX_ARCHIVE_BYTES;

/// The most a `Retry-After` is honoured; a longer wait ends the request.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);
/// Retries after a 429 on listing and content requests.
const MAX_RETRIES: usize = 2;
/// A wait used when a 429 names none.
const DEFAULT_RETRY_WAIT: Duration = Duration::from_secs(5);
/// GitLab cuts a compare's diff list at this many files.
const COMPARE_FILE_LIMIT: usize = 1000;
/// JSON answers larger than this are not a GitLab answer we asked for.
const MAX_JSON_BYTES: u64 = 32 << 20;
/// Redirects followed on the same host (a moved project answers 301).
const MAX_REDIRECTS: usize = 3;
/// Refused paths noted per tick: a hostile tree of a million names must
/// not become a million notes.
const MAX_PATH_NOTES: usize = 20;

/// A secret that never prints itself.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(value: String) -> Token {
        Token(value)
    }
}

impl Token {
    /// The secret itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// Validated settings of the GitLab source.
#[derive(Debug, Clone)]
pub struct GitLabConfig {
    /// The API base, e.g. `https://gitlab.example.com/api/v4`.
    pub base: String,
    /// Numeric id or `group/project`.
    pub project: String,
    pub branch: String,
    /// `None` watches the whole repository.
    pub path: Option<String>,
    pub token: Option<Token>,
    pub timeout: Duration,
    /// PEM bundle of the CA that signed a self-hosted instance's certificate.
    pub ca_file: Option<PathBuf>,
    /// Record `Retry-After` waits instead of sleeping (tests).
    pub fake_sleep: bool,
}

/// What a request is for, for the per-kind counters and the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Head,
    List,
    Read,
    Compare,
    History,
    /// A page of a group's projects (a fleet's discovery).
    Group,
}

impl Kind {
    fn retries_on_429(self) -> bool {
        // A head lookup that is throttled is simply unknown this tick.
        self != Kind::Head
    }
}

struct Reply {
    status: u16,
    link_next: Option<String>,
    blob_id: Option<String>,
    body: Vec<u8>,
    /// Why the body ended before the length the headers announced: only a
    /// blob read may still use it, when the bytes hash to the id asked for.
    cut: Option<SourceError>,
}

pub struct GitLabSource {
    agent: ureq::Agent,
    cfg: GitLabConfig,
    /// `scheme://host:port` of the base: the only place the token goes.
    origin: String,
    counts: RequestCounts,
    waits: Vec<u64>,
    /// Commits of the last compare, kept for the rollback lookup.
    last_compare: Option<(String, String, Vec<CompareCommit>)>,
    /// The repository archive: many files in one request.
    archive: archive::Archive,
    /// Refused paths, for the tick's notes (`Source::take_notes`).
    notes: Vec<String>,
}

#[derive(Deserialize)]
struct Commit {
    id: String,
}

#[derive(Deserialize)]
struct TreeItem {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    path: String,
    mode: String,
}

#[derive(Deserialize, Clone)]
struct CompareCommit {
    id: String,
    #[serde(default)]
    title: String,
}

#[derive(Deserialize)]
struct Diff {
    old_path: String,
    new_path: String,
    #[serde(default)]
    deleted_file: bool,
    #[serde(default)]
    renamed_file: bool,
    #[serde(default)]
    b_mode: Option<String>,
}

#[derive(Deserialize)]
struct Compare {
    #[serde(default)]
    commits: Vec<CompareCommit>,
    #[serde(default)]
    diffs: Vec<Diff>,
    #[serde(default)]
    compare_timeout: bool,
}

/// Percent-encode everything but the unreserved characters (RFC 3986).
pub use sentinel_core::address::encode;

/// `url` without the `user:password@` of its authority: what may be shown.
pub fn without_userinfo(url: &str) -> String {
    sentinel_core::address::without_credentials(url).into_owned()
}

/// Where a request to `url` goes (`scheme://host[:port]`), as ureq reads it:
/// the token is only sent there.
fn origin_of(url: &str) -> Option<String> {
    sentinel_core::address::origin(url)
}

mod group;
pub use group::{Discovered, GroupProject, MAX_GROUP_PAGES};

impl GitLabSource {
    pub fn new(mut cfg: GitLabConfig) -> Result<GitLabSource, SourceError> {
        cfg.base = cfg.base.trim_end_matches('/').to_string();
        let origin = origin_of(&cfg.base).ok_or_else(|| {
            SourceError::Config(format!(
                "the GitLab URL `{}` is not an http(s) URL; set SENTINEL_GITLAB_URL to the API base, e.g. https://gitlab.example.com/api/v4",
                without_userinfo(&cfg.base)
            ))
        })?;
        let agent = sentinel_io::http::agent(cfg.timeout, cfg.ca_file.as_deref())
            .map_err(SourceError::Config)?;
        Ok(GitLabSource {
            agent,
            cfg,
            origin,
            counts: RequestCounts::default(),
            waits: Vec::new(),
            last_compare: None,
            archive: archive::Archive::new(DEFAULT_MAX_ARCHIVE_BYTES),
            notes: Vec::new(),
        })
    }

    /// The most bytes one archive download may bring (`--max-archive-bytes`;
    /// 0 never downloads it).
    pub fn with_max_archive_bytes(mut self, max: u64) -> GitLabSource {
        self.archive.max_bytes = max;
        self
    }

    fn project_url(&self, rest: &str) -> String {
        format!(
            "{}/projects/{}/repository/{rest}",
            self.cfg.base,
            encode(&self.cfg.project)
        )
    }

    fn count(&mut self, kind: Kind) {
        match kind {
            Kind::Head => self.counts.head += 1,
            Kind::List => self.counts.list += 1,
            Kind::Read => self.counts.read += 1,
            Kind::Compare => self.counts.compare += 1,
            Kind::History => self.counts.history += 1,
            Kind::Group => self.counts.list += 1,
        }
    }

    fn wait(&mut self, d: Duration) {
        self.waits.push(d.as_millis() as u64);
        if !self.cfg.fake_sleep {
            std::thread::sleep(d);
        }
    }

    /// One logical GET: same-host redirects, 429 retries, status mapping.
    fn get(
        &mut self,
        kind: Kind,
        url: &str,
        limit: u64,
        head_only: bool,
    ) -> Result<Reply, SourceError> {
        let mut url = url.to_string();
        let mut redirects = 0;
        let mut retries = 0;
        loop {
            self.count(kind);
            let mut reply = self.send(&url, limit, head_only, kind)?;
            if let Some(cut) = reply
                .cut
                .take_if(|_| kind != Kind::Read || reply.status >= 300)
            {
                return Err(cut);
            }
            match reply.status {
                200..=299 => return Ok(reply),
                301 | 302 | 303 | 307 | 308 => {
                    let location = reply.link_next.clone().unwrap_or_default();
                    let target = if location.starts_with('/') {
                        format!("{}{location}", self.origin)
                    } else {
                        location
                    };
                    if origin_of(&target).as_deref() != Some(self.origin.as_str()) {
                        return Err(SourceError::Config(format!(
                            "GitLab redirected to another host ({}); the token is not sent there: set SENTINEL_GITLAB_URL to the new address",
                            origin_of(&target).unwrap_or_else(|| "an unreadable address".into())
                        )));
                    }
                    redirects += 1;
                    if redirects > MAX_REDIRECTS {
                        return Err(SourceError::Unavailable(format!(
                            "too many redirects from {}",
                            self.describe(kind)
                        )));
                    }
                    url = target;
                }
                429 if kind.retries_on_429() && retries < MAX_RETRIES => {
                    let wait = reply_wait(&reply).unwrap_or(DEFAULT_RETRY_WAIT);
                    if wait > MAX_RETRY_WAIT {
                        return Err(SourceError::Unavailable(format!(
                            "GitLab is throttling {} and asks to wait {} s; left for a later tick",
                            self.describe(kind),
                            wait.as_secs()
                        )));
                    }
                    retries += 1;
                    self.wait(wait);
                }
                _ => return Err(self.status_error(kind, &reply)),
            }
        }
    }

    fn send(
        &self,
        url: &str,
        limit: u64,
        head_only: bool,
        kind: Kind,
    ) -> Result<Reply, SourceError> {
        let mut request = if head_only {
            self.agent.head(url)
        } else {
            self.agent.get(url)
        };
        if let Some(token) = &self.cfg.token {
            request = request.header("PRIVATE-TOKEN", token.0.as_str());
        }
        let mut response = request
            .call()
            .map_err(|e| transport_error(&url_path(url), e))?;
        let status = response.status().as_u16();
        let link_next = where_next(&response, status);
        let blob_id = header_value(&response, "x-gitlab-blob-id");
        let retry_after = header_value(&response, "retry-after");
        if head_only {
            return Ok(Reply {
                status,
                link_next,
                blob_id,
                body: retry_after.map(String::into_bytes).unwrap_or_default(),
                cut: None,
            });
        }
        // A JSON answer announced over its limit is refused unread (it would
        // fail either way: too long, or shorter than announced). A file's
        // announced length is never used: its bytes are counted.
        let announced: Option<u64> =
            header_value(&response, "content-length").and_then(|v| v.parse().ok());
        if kind != Kind::Read
            && (200..300).contains(&status)
            && let Some(n) = announced.filter(|n| *n > limit)
        {
            return Err(SourceError::Unavailable(format!(
                "GitLab announced {n} bytes for {}, over the limit of {limit} bytes; not read",
                self.describe(kind)
            )));
        }
        let (body, cut) = read_body(&mut response, url, status, limit)?;
        let mut reply = Reply {
            status,
            link_next,
            blob_id,
            body,
            cut,
        };
        if status == 429 {
            // Keep the header's value where `reply_wait` finds it.
            reply.body = retry_after.map(String::into_bytes).unwrap_or_default();
        }
        Ok(reply)
    }

    fn describe(&self, kind: Kind) -> &'static str {
        match kind {
            Kind::Head => "the head lookup",
            Kind::List => "the tree listing",
            Kind::Read => "a file read",
            Kind::Compare => "the compare",
            Kind::History => "the rollback lookup",
            Kind::Group => "the group's project listing",
        }
    }

    fn status_error(&self, kind: Kind, reply: &Reply) -> SourceError {
        let message = sentinel_core::redact::text(&gitlab_message(&reply.body));
        let what = self.describe(kind);
        match reply.status {
            401 => SourceError::Config(format!(
                "GitLab refused {what} (401 Unauthorized): set SENTINEL_GITLAB_TOKEN (or GITLAB_TOKEN) to a project access token with the read_api scope"
            )),
            403 => SourceError::Config(format!(
                "GitLab refused {what} (403 {message}): the token in SENTINEL_GITLAB_TOKEN (or GITLAB_TOKEN) needs the read_api scope and access to project `{}`",
                self.cfg.project
            )),
            404 if message.contains("Project") => SourceError::Config(format!(
                "GitLab has no project `{}` visible to this token (404): set `--project` / `SENTINEL_PROJECT` (or `CI_PROJECT_ID`) to its numeric id or `group/project`",
                self.cfg.project
            )),
            // The head lookup names only the project and the branch: any
            // other 404 there is the branch (`404 Ref Not Found`).
            404 if kind == Kind::Head => SourceError::Config(format!(
                "GitLab cannot find branch `{}` of project `{}` (404 {message}): check `--branch` / `SENTINEL_BRANCH` (or `CI_DEFAULT_BRANCH`)",
                self.cfg.branch, self.cfg.project
            )),
            status => SourceError::Unavailable(format!(
                "GitLab answered {what} with {status}{}",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            )),
        }
    }

    fn get_json<T: for<'de> Deserialize<'de>>(
        &mut self,
        kind: Kind,
        url: &str,
    ) -> Result<(T, Option<String>), SourceError> {
        let reply = self.get(kind, url, MAX_JSON_BYTES, false)?;
        let parsed = serde_json::from_slice(&reply.body).map_err(|e| {
            SourceError::Unavailable(format!(
                "GitLab's answer to {} is not the expected JSON ({e}; it starts with `{}`)",
                self.describe(kind),
                preview(
                    sentinel_core::redact::text(&String::from_utf8_lossy(&reply.body)).as_bytes()
                )
            ))
        })?;
        Ok((parsed, reply.link_next))
    }

    /// The next page GitLab names, when it is on the configured origin. A
    /// link to another origin (scheme, host or port) is not followed, so the
    /// token never travels there; `Err` says why the pages stop here.
    fn next_page(&self, link: Option<String>) -> Result<Option<String>, String> {
        match link {
            Some(l) if origin_of(&l).as_deref() != Some(self.origin.as_str()) => Err(format!(
                "a next link to another origin (`{}`) was not followed, as the token is only sent to `{}`; if the link names GitLab's own address, set `SENTINEL_GITLAB_URL` to it",
                sentinel_core::redact::text(&without_userinfo(&l)),
                self.origin
            )),
            // A link on the configured origin gets the configured
            // credentials back, as the first page had them.
            next => {
                Ok(next.map(|l| sentinel_core::address::with_credentials_of(&l, &self.cfg.base)))
            }
        }
    }

    /// Whether `path` may be a file of the tree; a refused one is noted.
    fn valid_path(&mut self, path: &str) -> bool {
        match super::peer_path::refusal(path) {
            None => true,
            Some(why) => {
                if self.notes.len() < MAX_PATH_NOTES {
                    self.notes.push(super::peer_path::note("GitLab", path, why));
                }
                false
            }
        }
    }

    /// The watched regular files of one tree page.
    fn tree_entries(&mut self, items: Vec<TreeItem>) -> Vec<Entry> {
        let watched: Vec<TreeItem> = items
            .into_iter()
            .filter(|i| i.kind == "blob" && is_regular_file(&i.mode) && is_object_id(&i.id))
            .filter(|i| self.under_path(&i.path))
            .collect();
        watched
            .into_iter()
            .filter(|i| self.valid_path(&i.path))
            .map(|i| Entry {
                path: i.path,
                blob: i.id,
            })
            .collect()
    }

    fn under_path(&self, path: &str) -> bool {
        match &self.cfg.path {
            None => true,
            Some(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.starts_with('/')),
        }
    }

    /// The content id of `path` at commit `at`, from the file's headers.
    fn blob_of(&mut self, path: &str, at: &str) -> Result<String, SourceError> {
        let url = self.project_url(&format!("files/{}?ref={}", encode(path), encode(at)));
        let reply = self.get(Kind::Compare, &url, 0, true)?;
        reply
            .blob_id
            .filter(|b| is_object_id(b))
            .ok_or_else(|| SourceError::Unavailable(format!("GitLab sent no blob id for `{path}`")))
    }
}

/// The most pages one listing follows: 5,000 × 100 entries is far beyond
/// any repository sentinel can remember (`--max-files`).
const MAX_PAGES: usize = 5_000;

/// Pagination that cannot loop: a page seen before, an empty page that still
/// names a next one, or too many pages stop it (`Err` says why).
#[derive(Default)]
struct Pages {
    seen: std::collections::HashSet<String>,
}

impl Pages {
    fn visit(&mut self, url: &str) -> Result<(), String> {
        if self.seen.len() >= MAX_PAGES {
            return Err(format!(
                "GitLab's pagination went past {MAX_PAGES} pages; stopped"
            ));
        }
        if !self.seen.insert(url.to_string()) {
            return Err("GitLab's next page links back to a page already read; stopped".into());
        }
        Ok(())
    }

    fn check(&self, empty: bool, has_next: bool) -> Result<(), String> {
        if empty && has_next {
            return Err("GitLab sent an empty page that still names a next one; stopped".into());
        }
        Ok(())
    }

    /// Pages visited so far.
    fn count(&self) -> usize {
        self.seen.len()
    }
}

/// The git object id of `bytes` as a blob: SHA-1 (40 hex) or SHA-256 (64 hex).
fn git_blob_id(bytes: &[u8], hex_len: usize) -> String {
    use sha2::Digest as _;
    let header = format!("blob {}\0", bytes.len());
    let digest: Vec<u8> = if hex_len == 64 {
        let mut h = sha2::Sha256::new();
        h.update(header.as_bytes());
        h.update(bytes);
        h.finalize().to_vec()
    } else {
        let mut h = sha1::Sha1::new();
        h.update(header.as_bytes());
        h.update(bytes);
        h.finalize().to_vec()
    };
    hex::encode(digest)
}

fn is_object_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_regular_file(mode: &str) -> bool {
    matches!(mode, "100644" | "100755")
}

/// The first value of header `name`, when it is text.
fn header_value(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Where next: the `Location` of a redirect, else the `next` page of the
/// `Link` headers. `Reply::link_next` doubles as the redirect target.
fn where_next(response: &ureq::http::Response<ureq::Body>, status: u16) -> Option<String> {
    if (300..400).contains(&status) {
        return header_value(response, "location");
    }
    // Several `Link` headers are one comma-separated list.
    let links: Vec<&str> = response
        .headers()
        .get_all("link")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    next_link(&links.join(","))
}

/// The body as counted, never read past `limit` + 1 bytes: a successful
/// answer longer than `limit` is `ReadStopped`, whatever its headers said.
/// A body that ends before its announced length comes back with the error
/// that cut it (`Some`), for the caller to judge.
fn read_body(
    response: &mut ureq::http::Response<ureq::Body>,
    url: &str,
    status: u16,
    limit: u64,
) -> Result<(Vec<u8>, Option<SourceError>), SourceError> {
    use std::io::Read as _;
    let mut body = Vec::new();
    let read = response
        .body_mut()
        .with_config()
        .limit(limit.saturating_add(1))
        .reader()
        .read_to_end(&mut body);
    let cut = match read.map_err(ureq::Error::from) {
        Ok(_) => None,
        Err(ureq::Error::BodyExceedsLimit(_)) => {
            return Err(SourceError::ReadStopped { limit });
        }
        Err(other) => Some(transport_error(&url_path(url), other)),
    };
    if (200..300).contains(&status) && body.len() as u64 > limit {
        return Err(SourceError::ReadStopped { limit });
    }
    Ok((body, cut))
}

fn url_path(url: &str) -> String {
    // Query strings carry paths and refs, never the token; the host is
    // enough to say where a transport error happened, and credentials in
    // the address are never shown.
    sentinel_core::address::location(url)
}

fn transport_error(url: &str, e: ureq::Error) -> SourceError {
    if let Some(why) = tls_failure(url, &e) {
        return SourceError::Config(why);
    }
    SourceError::Unavailable(format!(
        "GET {url}: {}",
        sentinel_io::http::transport_message(&e)
    ))
}

/// A TLS handshake that failed (an unknown issuer, a name mismatch, a peer
/// that does not speak TLS): a configuration error that waiting cannot fix,
/// said with the host, the reason and the flag that fixes the usual case.
fn tls_failure(url: &str, e: &ureq::Error) -> Option<String> {
    let reason = match e {
        ureq::Error::Tls(m) => m.to_string(),
        ureq::Error::Rustls(r) => r.to_string(),
        // rustls reports a failed handshake through the stream it wraps.
        ureq::Error::Io(io)
            if url.starts_with("https://") && io.kind() == std::io::ErrorKind::InvalidData =>
        {
            io.to_string()
        }
        _ => return None,
    };
    let host = sentinel_core::address::host(url).unwrap_or_default();
    Some(format!(
        "TLS verification of `{host}` failed: {reason}; if GitLab's certificate is issued by a private CA, pass that CA's certificate with `--ca-file`"
    ))
}

fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim().replace(' ', "") == "rel=\"next\"")
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

fn reply_wait(reply: &Reply) -> Option<Duration> {
    let value = std::str::from_utf8(&reply.body).ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return (secs > 0).then(|| Duration::from_secs(secs));
    }
    let when = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let secs = (when.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_seconds();
    (secs > 0).then(|| Duration::from_secs(secs as u64))
}

fn gitlab_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Message {
        message: Option<serde_json::Value>,
        error: Option<String>,
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(Message {
            message: Some(serde_json::Value::String(m)),
            ..
        }) => m
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ')
            .to_string(),
        Ok(Message { error: Some(e), .. }) => e,
        _ => String::new(),
    }
}

fn preview(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(40)]);
    text.chars().filter(|c| !c.is_control()).collect()
}

impl Source for GitLabSource {
    fn scope(&self) -> super::Scope {
        // The project, not the API address: the same instance is often
        // reached by more than one address (inside and outside CI).
        super::Scope {
            source: "gitlab".into(),
            project: self.cfg.project.clone(),
            branch: self.cfg.branch.clone(),
            path: self.cfg.path.clone().unwrap_or_default(),
        }
    }

    fn head(&mut self) -> Result<String, SourceError> {
        let mut url = self.project_url(&format!(
            "commits?ref_name={}&per_page=1",
            encode(&self.cfg.branch)
        ));
        if let Some(path) = &self.cfg.path {
            url.push_str(&format!("&path={}", encode(path)));
        }
        let (commits, _): (Vec<Commit>, _) = self.get_json(Kind::Head, &url)?;
        // An empty list is GitLab's answer for a path that no commit of the
        // branch ever touched (a deleted path still names the commit that
        // deleted it): it will not pass by itself.
        let first = commits.into_iter().next().ok_or_else(|| {
            SourceError::Config(format!(
                "no commit on branch `{}` of project `{}` touches `{}`: the path never existed on this branch; check `--path` / `SENTINEL_PATH` (and `--branch` / `SENTINEL_BRANCH`)",
                self.cfg.branch,
                self.cfg.project,
                self.cfg.path.as_deref().unwrap_or(".")
            ))
        })?;
        if !is_object_id(&first.id) {
            return Err(SourceError::Unavailable(format!(
                "GitLab sent `{}` as a commit id",
                preview(first.id.as_bytes())
            )));
        }
        Ok(first.id)
    }

    fn list(&mut self, at: &str) -> Result<Vec<Entry>, SourceError> {
        let listing = self.listing(at)?;
        match listing.incomplete {
            None => Ok(listing.entries),
            Some(why) => Err(SourceError::Unavailable(format!(
                "the listing is incomplete: {why}"
            ))),
        }
    }

    /// Every page GitLab links to on the configured origin. A page after the
    /// first that fails, a link to another origin, a loop or the page cap end
    /// the listing there, incomplete; a configuration error, or a failure
    /// before anything was seen, fails it.
    fn listing(&mut self, at: &str) -> Result<Listing, SourceError> {
        let mut url = self.project_url(&format!(
            "tree?ref={}&recursive=true&per_page=100&pagination=keyset",
            encode(at)
        ));
        if let Some(path) = &self.cfg.path {
            url.push_str(&format!("&path={}", encode(path)));
        }
        let mut entries = Vec::new();
        let mut next = Some(url);
        let mut pages = Pages::default();
        let mut incomplete = None;
        while let Some(page) = next.take() {
            if let Err(why) = pages.visit(&page) {
                incomplete = Some(why);
                break;
            }
            let (items, link): (Vec<TreeItem>, _) = match self.get_json(Kind::List, &page) {
                Ok(answer) => answer,
                Err(e @ SourceError::Config(_)) => return Err(e),
                Err(e) if pages.count() == 1 => return Err(e),
                Err(e) => {
                    incomplete = Some(format!("page {} failed: {e}", pages.count()));
                    break;
                }
            };
            if let Err(why) = pages.check(items.is_empty(), link.is_some()) {
                incomplete = Some(why);
                break;
            }
            entries.extend(self.tree_entries(items));
            next = self.next_page(link).unwrap_or_else(|why| {
                incomplete = Some(why);
                None
            });
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        entries.dedup_by(|a, b| a.path == b.path);
        match incomplete {
            // Nothing seen is nothing learned: the listing failed.
            Some(why) if entries.is_empty() => Err(SourceError::Unavailable(why)),
            incomplete => Ok(Listing {
                entries,
                incomplete,
            }),
        }
    }

    fn changes(&mut self, from: &str, to: &str) -> Result<Vec<Change>, SourceError> {
        let url = self.project_url(&format!(
            "compare?from={}&to={}&straight=true",
            encode(from),
            encode(to)
        ));
        let (compare, _): (Compare, _) = self.get_json(Kind::Compare, &url)?;
        // A cut compare still names its commits: keep them for the rollback
        // lookup even though the listing will have to find the changes.
        self.last_compare = Some((from.to_string(), to.to_string(), compare.commits));
        if compare.compare_timeout || compare.diffs.len() >= COMPARE_FILE_LIMIT {
            return Err(SourceError::Unavailable(
                "GitLab cut the compare (too many changes)".into(),
            ));
        }
        let mut out = Vec::new();
        for d in compare.diffs {
            let renamed = d.old_path != d.new_path;
            if !self.valid_path(&d.new_path) || (renamed && !self.valid_path(&d.old_path)) {
                continue;
            }
            if (d.deleted_file || d.renamed_file) && self.under_path(&d.old_path) {
                out.push(Change::Delete {
                    path: d.old_path.clone(),
                });
            }
            if d.deleted_file || !self.under_path(&d.new_path) {
                continue;
            }
            if !d.b_mode.as_deref().is_none_or(is_regular_file) {
                out.push(Change::Delete { path: d.new_path });
                continue;
            }
            // The compare names paths, not content ids: ask the file's headers.
            let blob = self.blob_of(&d.new_path, to)?;
            out.push(Change::Upsert {
                path: d.new_path,
                blob,
            });
        }
        Ok(out)
    }

    fn read(&mut self, blob: &str, limit: u64) -> Result<Vec<u8>, SourceError> {
        if let Some(answer) = self.archive.take(blob, limit) {
            return answer;
        }
        if !is_object_id(blob) {
            return Err(SourceError::Unavailable(format!(
                "`{blob}` is not an object id"
            )));
        }
        let url = self.project_url(&format!("blobs/{blob}/raw"));
        let reply = self.get(Kind::Read, &url, limit, false)?;
        let body = reply.body;
        // A proxy's sign-in page answered with 200 is not the file: bytes
        // that do not hash to the content id asked for are no read at all.
        // Bytes that do are the whole file, whatever length was announced.
        if git_blob_id(&body, blob.len()) != blob.to_ascii_lowercase() {
            if let Some(cut) = reply.cut {
                return Err(cut);
            }
            return Err(SourceError::Unavailable(format!(
                "GitLab answered blob {} with bytes of another content (a proxy page?)",
                &blob[..blob.len().min(12)]
            )));
        }
        Ok(body)
    }

    fn reverts(&mut self, from: &str, to: &str) -> Result<Vec<Vec<String>>, SourceError> {
        let commits = match &self.last_compare {
            Some((f, t, commits)) if f == from && t == to => commits.clone(),
            _ => return Ok(Vec::new()),
        };
        let mut out = Vec::new();
        for c in commits.iter().filter(|c| c.title.starts_with("Revert \"")) {
            if !is_object_id(&c.id) {
                continue;
            }
            let mut next = Some(self.project_url(&format!("commits/{}/diff?per_page=100", c.id)));
            let mut paths = Vec::new();
            let mut pages = Pages::default();
            while let Some(page) = next.take() {
                pages.visit(&page).map_err(SourceError::Unavailable)?;
                let (diffs, link): (Vec<Diff>, _) = self.get_json(Kind::History, &page)?;
                pages
                    .check(diffs.is_empty(), link.is_some())
                    .map_err(SourceError::Unavailable)?;
                paths.extend(
                    diffs
                        .into_iter()
                        .flat_map(|d| [d.old_path, d.new_path])
                        .filter(|p| self.under_path(p)),
                );
                next = self.next_page(link).map_err(SourceError::Unavailable)?;
            }
            paths.sort();
            paths.dedup();
            out.push(paths);
        }
        Ok(out)
    }

    fn gather(&mut self, at: &str, blobs: &[String], limit: u64, tracked: usize) -> Vec<String> {
        self.gather_archive(at, blobs, limit, tracked)
    }

    fn holds(&self, blob: &str) -> bool {
        self.archive.holds(blob)
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn request_counts(&self) -> RequestCounts {
        self.counts
    }

    fn waits_ms(&self) -> Vec<u64> {
        self.waits.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blob_ids_are_git_object_ids() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            git_blob_id(b"hello\n", 40),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn pagination_never_loops() {
        let mut p = Pages::default();
        assert!(p.visit("a").is_ok());
        assert!(p.visit("a").is_err());
        assert!(p.check(true, true).is_err());
        assert!(p.check(true, false).is_ok());
    }

    #[test]
    fn paths_and_projects_are_encoded_as_one_segment() {
        assert_eq!(encode("group/project"), "group%2Fproject");
        assert_eq!(
            encode("libs/spaß #1/100% ok?.js"),
            "libs%2Fspa%C3%9F%20%231%2F100%25%20ok%3F.js"
        );
        assert_eq!(encode("a-b_c.d~e"), "a-b_c.d~e");
    }

    #[test]
    fn next_link_is_found_among_several() {
        let h = r#"<https://g.example/api/v4/x?page_token=a>; rel="first", <https://g.example/api/v4/x?page_token=b>; rel="next""#;
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://g.example/api/v4/x?page_token=b")
        );
        assert_eq!(next_link(r#"<https://g/x>; rel="last""#), None);
    }

    #[test]
    fn origin_compares_scheme_host_and_port() {
        assert_eq!(
            origin_of("https://GitLab.example.com:8443/api/v4").as_deref(),
            Some("https://gitlab.example.com:8443")
        );
        assert_ne!(
            origin_of("http://127.0.0.1:1/a"),
            origin_of("http://127.0.0.2:1/a")
        );
        assert_ne!(
            origin_of("http://g.example:8080/a"),
            origin_of("https://g.example:8080/a")
        );
        assert_eq!(
            origin_of("https://g.example:443/a"),
            origin_of("https://G.example/b")
        );
        assert_eq!(
            origin_of("http://g.example:80/a").as_deref(),
            Some("http://g.example")
        );
        assert_ne!(
            origin_of("https://g.example:8443/a"),
            origin_of("https://g.example/a")
        );
    }

    fn source(base: &str) -> GitLabSource {
        GitLabSource::new(GitLabConfig {
            base: base.into(),
            project: "1".into(),
            branch: "main".into(),
            path: None,
            token: None,
            timeout: Duration::from_secs(1),
            ca_file: None,
            fake_sleep: true,
        })
        .unwrap()
    }

    #[test]
    fn a_next_link_on_another_origin_never_gets_the_token() {
        let s = source("https://me:glpat-x@g.example/api/v4");
        for foreign in [
            "https://g.example.evil/api/v4/x?page=2",
            "https://g.example:8443/api/v4/x",
            "http://g.example/api/v4/x",
            "https://me:glpat-x@evil.example/x",
            "https://g.example@evil.example/x",
            "https://g.example%40x@evil.example/x",
            "https://[::1]/x",
            "/api/v4/x?page=2",
            "https://g.example\\@evil.example/x",
        ] {
            let e = s.next_page(Some(foreign.into())).unwrap_err();
            assert!(!e.contains("glpat-x"), "{e}");
        }
        // GitLab's own link, its default port written out or its query
        // holding an `@`, gets the configured credentials back.
        for own in [
            "https://g.example:443/api/v4/x?page=2",
            "https://G.EXAMPLE/api/v4/x?after=a@evil.example/",
            "https://g.example#@evil.example/",
        ] {
            let next = s.next_page(Some(own.into())).unwrap().unwrap();
            assert_eq!(
                sentinel_core::address::host(&next).as_deref(),
                Some("g.example")
            );
            assert!(next.starts_with("https://me:glpat-x@"), "{next}");
        }
    }

    #[test]
    fn an_ipv6_origin_keeps_its_brackets_and_drops_a_default_port() {
        let s = source("http://[::1]:80/api/v4");
        assert_eq!(s.origin, "http://[::1]");
        assert!(s.next_page(Some("http://[::1]/api/v4/x".into())).is_ok());
        assert!(s.next_page(Some("http://[::2]/api/v4/x".into())).is_err());
        assert_eq!(
            tls_failure("https://[::1]:8443/a", &ureq::Error::Tls("x")).unwrap(),
            "TLS verification of `[::1]:8443` failed: x; if GitLab's certificate is issued by a private CA, pass that CA's certificate with `--ca-file`"
        );
    }

    #[test]
    fn the_token_never_prints_itself() {
        let t = Token::new("glpat-secret".into());
        assert_eq!(format!("{t:?}"), "Token(***)");
        let cfg = GitLabConfig {
            base: "http://127.0.0.1:1/api/v4".into(),
            project: "1".into(),
            branch: "main".into(),
            path: None,
            token: Some(t),
            timeout: Duration::from_secs(1),
            ca_file: None,
            fake_sleep: true,
        };
        assert!(!format!("{cfg:?}").contains("glpat-secret"));
    }

    #[test]
    fn gitlab_messages_lose_their_status_prefix() {
        assert_eq!(
            gitlab_message(br#"{"message":"404 Project Not Found"}"#),
            "Project Not Found"
        );
        assert_eq!(
            gitlab_message(br#"{"error":"insufficient_scope","scope":"api"}"#),
            "insufficient_scope"
        );
        assert_eq!(gitlab_message(b"Retry later\n"), "");
    }

    #[test]
    fn retry_after_in_seconds_must_be_positive() {
        let reply = |v: &str| Reply {
            status: 429,
            link_next: None,
            blob_id: None,
            body: v.as_bytes().to_vec(),
            cut: None,
        };
        assert_eq!(reply_wait(&reply("7")), Some(Duration::from_secs(7)));
        assert_eq!(reply_wait(&reply("0")), None);
        assert_eq!(reply_wait(&reply("soon")), None);
    }
}
