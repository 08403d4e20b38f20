//! The HTTP/1.1 that the fake GitLab and the fake OpenAI both speak: a
//! listener on `127.0.0.1:0` over `std::net`, one thread a connection, and
//! as little of the protocol as sentinel's clients need.
//!
//! It is written by hand rather than taken from a crate so that a fake can
//! misbehave on purpose: cut a body short and close the socket, hang up
//! without answering, or answer late. Every wait polls the server's shutdown
//! flag, so dropping a fake stops even a connection that is sleeping on a
//! slow reply, and frees the port.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long a connection thread waits for a read before it looks at the
/// shutdown flag again.
const POLL: Duration = Duration::from_millis(50);
/// The largest request head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// The largest request body accepted (a prompt is one file of at most 64 KiB).
const MAX_BODY: usize = 4 << 20;

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking connection thread must not take every later test down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A listener on a free port of 127.0.0.1, and its address.
pub fn listen(what: &str) -> (TcpListener, SocketAddr) {
    let listener =
        TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind the {what}: {e:?}"));
    let addr = listener.local_addr().expect("local address");
    (listener, addr)
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/// An accept loop on a thread of its own; stops when dropped.
pub struct Server {
    addr: SocketAddr,
    shutdown: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Serve every connection to `listener` on a thread of its own, handing
    /// each request to `respond` (see `serve`). `shutdown` is the flag the
    /// connections watch; the server sets it when it stops.
    pub fn start<F>(
        what: &str,
        listener: TcpListener,
        shutdown: Arc<AtomicBool>,
        respond: F,
    ) -> Server
    where
        F: Fn(&Request, &mut Conn<'_>, &mut TcpStream) -> bool + Send + Sync + 'static,
    {
        let addr = listener.local_addr().expect("local address");
        // Thread names as a panic shows them: `fake-gitlab-conn`.
        let threads = what.to_ascii_lowercase().replace(' ', "-");
        let conn_threads = format!("{threads}-conn");
        let flag = shutdown.clone();
        let respond = Arc::new(respond);
        let accept = thread::Builder::new()
            .name(format!("{threads}-accept"))
            .spawn(move || {
                for stream in listener.incoming() {
                    if flag.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let flag = flag.clone();
                    let respond = respond.clone();
                    let _ = thread::Builder::new()
                        .name(conn_threads.clone())
                        .spawn(move || serve(stream, &flag, &*respond));
                }
            })
            .unwrap_or_else(|e| panic!("start the {what}: {e:?}"));
        Server {
            addr,
            shutdown,
            accept: Some(accept),
        }
    }

    /// Stop accepting and tell the connections to stop; returns once the
    /// accept loop has ended. Connection threads (a slow reply's included)
    /// see the flag within `POLL`.
    pub fn stop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(handle) = self.accept.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One connection: each request head is parsed and given to `respond`, which
/// reads the body from the `Conn` and writes the answer; the connection
/// closes when `respond` returns false, the client asks for it, a head does
/// not parse (after a 400), the input ends or the server stops.
fn serve(
    stream: TcpStream,
    shutdown: &AtomicBool,
    respond: &dyn Fn(&Request, &mut Conn<'_>, &mut TcpStream) -> bool,
) {
    let _ = stream.set_read_timeout(Some(POLL));
    let _ = stream.set_nodelay(true);
    let Ok(reader) = stream.try_clone() else {
        return;
    };
    let mut conn = Conn {
        stream: reader,
        buf: Vec::new(),
        shutdown,
    };
    let mut out = stream;
    while let Some(head) = conn.until(b"\r\n\r\n", MAX_HEAD) {
        let Some(req) = parse_head(&head) else {
            let _ = write_head(&mut out, 400, &[], 0, true);
            break;
        };
        if !respond(&req, &mut conn, &mut out) || req.close {
            break;
        }
    }
    let _ = out.flush();
    let _ = out.shutdown(Shutdown::Both);
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// A request head.
pub struct Request {
    pub method: String,
    /// The request target exactly as on the request line.
    pub target: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// Whether the connection closes after the answer.
    pub close: bool,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

/// The first value of header `name` (any case) among `headers`, whose names
/// are in lower case.
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    headers
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

/// A connection's reader: bytes read past a request stay for the next.
pub struct Conn<'a> {
    stream: TcpStream,
    buf: Vec<u8>,
    shutdown: &'a AtomicBool,
}

impl Conn<'_> {
    /// Read more bytes into the buffer; false on end of input, a broken
    /// connection or shutdown.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 8192];
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                return false;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return true;
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    /// Bytes up to (without) `delimiter`, which is consumed.
    fn until(&mut self, delimiter: &[u8], max: usize) -> Option<Vec<u8>> {
        loop {
            if let Some(end) = find(&self.buf, delimiter) {
                let out = self.buf[..end].to_vec();
                self.buf.drain(..end + delimiter.len());
                return Some(out);
            }
            if self.buf.len() > max || !self.fill() {
                return None;
            }
        }
    }

    /// Exactly `len` bytes.
    fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        while self.buf.len() < len {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..len).collect())
    }

    /// Pass over `len` bytes without keeping them; false when they do not
    /// all arrive.
    pub fn skip(&mut self, mut len: usize) -> bool {
        loop {
            let n = len.min(self.buf.len());
            self.buf.drain(..n);
            len -= n;
            if len == 0 {
                return true;
            }
            if !self.fill() {
                return false;
            }
        }
    }

    /// The body of `req`: `Content-Length` bytes, or a chunked body.
    pub fn body(&mut self, req: &Request) -> Option<Vec<u8>> {
        let chunked = req
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        if !chunked {
            let len = match req.header("content-length") {
                Some(v) => v.parse::<usize>().ok()?,
                None => 0,
            };
            if len > MAX_BODY {
                return None;
            }
            return self.take(len);
        }
        let mut body = Vec::new();
        loop {
            let line = self.until(b"\r\n", 1024)?;
            let line = String::from_utf8(line).ok()?;
            let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
            if size == 0 {
                // Trailers, if any, end with an empty line.
                while !self.until(b"\r\n", MAX_HEAD)?.is_empty() {}
                return Some(body);
            }
            if body.len() + size > MAX_BODY {
                return None;
            }
            body.extend(self.take(size)?);
            self.take(2)?;
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?.to_string();
    let version = first.next()?;
    if !version.starts_with("HTTP/1.") || first.next().is_some() {
        return None;
    }
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let connection = headers
        .iter()
        .find(|(k, _)| k == "connection")
        .map(|(_, v)| v.to_ascii_lowercase());
    let close = match connection {
        Some(v) if v.contains("close") => true,
        Some(v) if v.contains("keep-alive") => false,
        _ => version == "HTTP/1.0",
    };
    Some(Request {
        method,
        target,
        headers,
        close,
    })
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes the status line and headers (with `Content-Length: length`).
fn write_head(
    w: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    length: usize,
    close: bool,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {length}\r\n"));
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())
}

/// Writes a whole answer, without its body when `head_only` (the answer to
/// a HEAD); false when the connection is broken.
pub fn write_response(
    out: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
    head_only: bool,
) -> bool {
    write_head(out, status, headers, body.len(), false)
        .and_then(|()| {
            if head_only {
                Ok(())
            } else {
                out.write_all(body)
            }
        })
        .and_then(|()| out.flush())
        .is_ok()
}

/// Announces `declared` bytes of JSON and sends `body`, shorter; always
/// false, as the connection must then close: the client sees the cut at once
/// rather than wait for the missing bytes until its timeout.
pub fn write_truncated(out: &mut TcpStream, status: u16, declared: usize, body: &[u8]) -> bool {
    let headers = [("Content-Type".to_string(), "application/json".to_string())];
    let _ = write_head(out, status, &headers, declared, false)
        .and_then(|()| out.write_all(body))
        .and_then(|()| out.flush());
    false
}

/// Sleeps `delay` on the connection's thread; false, early, when the server
/// stops meanwhile.
pub fn delay(delay: Duration, shutdown: &AtomicBool) -> bool {
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if shutdown.load(Ordering::SeqCst) {
            return false;
        }
        thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
    true
}
