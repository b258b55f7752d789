//! HTTP/1.1 conformance of L7 mode, case by case (`tests/conformance/cases.rs`), against a
//! scripted raw backend that records every byte it receives; the same corpus through Debian's
//! HAProxy 2.6 when it is installed, and a case fails where netsched forwards a request to the
//! backend that HAProxy refuses (unless the case says why that is fine). docs/balance-conformance.md.
//!
//! Timeouts are short (1 s: connect, client, server, request head) so that a stall ends within
//! the client's [`DEADLINE`] of 5 s with a margin on a loaded machine; cases run [`PARALLEL`] at a
//! time, each with a backend of its own.

mod common;

#[path = "conformance/cases.rs"]
mod cases;

use cases::{Case, Reply, CASES, OK};
use common::haproxy::HAPROXY;
use netsched_testbed::TempDir;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long a client waits for its answer (and a check for closed backend connections).
const DEADLINE: Duration = Duration::from_secs(5);
/// A connection left open after a complete response: done after this long without a byte.
const QUIET: Duration = Duration::from_millis(400);
/// Between one client's end and the next client's connect.
const GAP: Duration = Duration::from_millis(40);
/// Most bytes kept per backend connection, and a request head's bound in the backend's parser.
const MAX_RECORD: usize = 1 << 20;
const MAX_HEAD: usize = 64 * 1024;
/// Most bytes an endless reply writes.
const ENDLESS_CAP: usize = 64 << 20;
/// Cases in flight at once (each side of a case counts once).
const PARALLEL: usize = 8;

// ---------------------------------------------------------------------------------------------
// The reference reading of a message (RFC 9112), strict: what a clean hop must look like.

fn find(b: &[u8], pat: &[u8]) -> Option<usize> {
    b.windows(pat.len()).position(|w| w == pat)
}

fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// A parsed head: start line, fields (lower-case names, trimmed values), hygiene issues.
struct Head {
    start: String,
    fields: Vec<(String, String)>,
    issues: BTreeSet<String>,
}

impl Head {
    fn all(&self, name: &str) -> Vec<&str> {
        self.fields
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// `head` ends with CRLF CRLF.
fn parse_head(head: &[u8]) -> Head {
    let mut issues = BTreeSet::new();
    for (i, &c) in head.iter().enumerate() {
        if c == b'\n' && (i == 0 || head[i - 1] != b'\r') {
            issues.insert("bare LF".to_string());
        }
        if c == b'\r' && head.get(i + 1) != Some(&b'\n') {
            issues.insert("bare CR".to_string());
        }
        if (c < 0x20 && c != b'\t' && c != b'\r' && c != b'\n') || c == 0x7f {
            issues.insert("control byte".to_string());
        }
    }
    let text = String::from_utf8_lossy(&head[..head.len() - 4]);
    let mut lines = text.split("\r\n");
    let start = lines.next().unwrap_or("").to_string();
    let mut fields = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            issues.insert("obs-fold".to_string());
            continue;
        }
        let Some((n, v)) = line.split_once(':') else {
            issues.insert("line without colon".to_string());
            continue;
        };
        if n.ends_with([' ', '\t']) {
            issues.insert("whitespace before colon".to_string());
        }
        if n.is_empty() || !n.bytes().all(tchar) {
            issues.insert("bad field name".to_string());
        }
        fields.push((
            n.trim().to_ascii_lowercase(),
            v.trim_matches([' ', '\t']).to_string(),
        ));
    }
    Head {
        start,
        fields,
        issues,
    }
}

enum Framing {
    Length(usize),
    Chunked,
    Close,
}

/// Framing by RFC 9112 §6.3, with the issues a clean hop must not show (both headers, a list).
/// `Err`: no length can be determined (§6.3 items 4–5).
fn framing(h: &mut Head, request: bool) -> Result<Framing, String> {
    let te: Vec<String> = h
        .all("transfer-encoding")
        .iter()
        .map(|s| s.to_string())
        .collect();
    let cl: Vec<String> = h
        .all("content-length")
        .iter()
        .map(|s| s.to_string())
        .collect();
    if !te.is_empty() {
        if !cl.is_empty() {
            h.issues
                .insert("both Content-Length and Transfer-Encoding".into());
        }
        let codings: Vec<String> = te
            .join(",")
            .split(',')
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        if codings.iter().filter(|c| *c == "chunked").count() > 1 {
            h.issues.insert("chunked twice".into());
        }
        return match codings.last().map(String::as_str) {
            Some("chunked") => Ok(Framing::Chunked),
            _ if request => Err(format!("Transfer-Encoding {te:?} without chunked last")),
            _ => Ok(Framing::Close),
        };
    }
    if cl.is_empty() {
        return Ok(if request {
            Framing::Length(0)
        } else {
            Framing::Close
        });
    }
    if cl.len() > 1 || cl[0].contains(',') {
        h.issues.insert("several Content-Length values".into());
    }
    let mut len = None;
    for v in cl.iter().flat_map(|v| v.split(',')) {
        let v = v.trim();
        let n: usize = match v.parse() {
            Ok(n) if v.bytes().all(|c| c.is_ascii_digit()) => n,
            _ => return Err(format!("Content-Length {v:?}")),
        };
        if len.is_some_and(|l| l != n) {
            return Err(format!("Content-Length {cl:?}"));
        }
        len = Some(n);
    }
    Ok(Framing::Length(len.unwrap_or(0)))
}

enum Chunks {
    Partial,
    Done(usize, Vec<u8>),
    Bad(String),
}

/// A chunked body at the start of `b` (RFC 9112 §7.1, strict: CRLF, 1*HEXDIG sizes).
fn dechunk(b: &[u8]) -> Chunks {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let Some(eol) = find(&b[pos..], b"\r\n") else {
            return if b.len() - pos > 4096 {
                Chunks::Bad("chunk-size line too long".into())
            } else {
                Chunks::Partial
            };
        };
        let line = &b[pos..pos + eol];
        let size_text = line.split(|&c| c == b';').next().unwrap_or(b"");
        if size_text.is_empty()
            || size_text.len() > 15
            || !size_text.iter().all(u8::is_ascii_hexdigit)
        {
            return Chunks::Bad(format!(
                "chunk-size {:?}",
                String::from_utf8_lossy(&line[..line.len().min(40)])
            ));
        }
        let size = usize::from_str_radix(std::str::from_utf8(size_text).unwrap(), 16).unwrap();
        pos += eol + 2;
        if size == 0 {
            // Trailer fields up to an empty line.
            loop {
                let Some(eol) = find(&b[pos..], b"\r\n") else {
                    return Chunks::Partial;
                };
                pos += eol + 2;
                if eol == 0 {
                    return Chunks::Done(pos, out);
                }
            }
        }
        if b.len() < pos + size + 2 {
            return Chunks::Partial;
        }
        out.extend_from_slice(&b[pos..pos + size]);
        if &b[pos + size..pos + size + 2] != b"\r\n" {
            return Chunks::Bad("no CRLF after chunk data".into());
        }
        pos += size + 2;
    }
}

// ---------------------------------------------------------------------------------------------
// The scripted backend.

#[derive(Debug, Clone)]
struct SeenReq {
    conn: usize,
    method: String,
    target: String,
    fields: Vec<(String, String)>,
    body: Vec<u8>,
    complete: bool,
    issues: BTreeSet<String>,
}

impl SeenReq {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn short(&self) -> String {
        let framing = if self.field("transfer-encoding").is_some() {
            " te"
        } else if let Some(l) = self.field("content-length") {
            return format!("{} {} cl={l}{}", self.method, self.target, self.mark());
        } else {
            ""
        };
        format!("{} {}{framing}{}", self.method, self.target, self.mark())
    }
    fn mark(&self) -> &str {
        if self.complete {
            ""
        } else {
            " (partial)"
        }
    }
}

#[derive(Debug, Default, Clone)]
struct ConnRec {
    raw: Vec<u8>,
    /// The connection ended (the proxy closed it, or the script did).
    ended: bool,
}

#[derive(Debug, Default, Clone)]
struct Record {
    reqs: Vec<SeenReq>,
    conns: Vec<ConnRec>,
    /// Bytes on a connection that are not a request (a desynchronised stream).
    junk: Vec<String>,
    /// Replies whose later bytes are not written yet.
    pending: usize,
}

enum ReqParse {
    Partial(Option<SeenReq>),
    Done(usize, SeenReq),
    Bad(String),
}

fn parse_request(buf: &[u8]) -> ReqParse {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            ReqParse::Bad("request head past 64 KiB".into())
        } else {
            ReqParse::Partial(None)
        };
    };
    let mut h = parse_head(&buf[..end + 4]);
    let words: Vec<&str> = h.start.split(' ').collect();
    if words.len() != 3
        || words[0].is_empty()
        || !words[0].bytes().all(tchar)
        || !matches!(words[2], "HTTP/1.1" | "HTTP/1.0")
    {
        let s = &buf[..buf.len().min(60)];
        return ReqParse::Bad(format!("not a request: {}", esc(s)));
    }
    if h.all("host").len() > 1 {
        h.issues.insert("several Host fields".into());
    }
    let mut req = SeenReq {
        conn: 0,
        method: words[0].to_string(),
        target: words[1].to_string(),
        fields: Vec::new(),
        body: Vec::new(),
        complete: false,
        issues: BTreeSet::new(),
    };
    let f = framing(&mut h, true);
    req.fields = std::mem::take(&mut h.fields);
    req.issues = h.issues;
    let rest = &buf[end + 4..];
    match f {
        Err(e) => ReqParse::Bad(format!("{} {}: {e}", req.method, req.target)),
        Ok(Framing::Length(n)) if rest.len() >= n => {
            req.body = rest[..n].to_vec();
            req.complete = true;
            ReqParse::Done(end + 4 + n, req)
        }
        Ok(Framing::Chunked) => match dechunk(rest) {
            Chunks::Done(used, body) => {
                req.body = body;
                req.complete = true;
                ReqParse::Done(end + 4 + used, req)
            }
            Chunks::Bad(e) => ReqParse::Bad(format!("{} {}: {e}", req.method, req.target)),
            Chunks::Partial => ReqParse::Partial(Some(req)),
        },
        Ok(_) => ReqParse::Partial(Some(req)),
    }
}

struct Backend {
    addr: SocketAddr,
    rec: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    fn snapshot(&self) -> Record {
        self.rec.lock().unwrap().clone()
    }
    /// Whether every reply has been written whole.
    fn written(&self) -> bool {
        self.rec.lock().unwrap().pending == 0
    }
    fn all_ended(&self) -> bool {
        let r = self.rec.lock().unwrap();
        r.conns.iter().all(|c| c.ended)
    }
}

async fn backend(replies: &'static [Reply]) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let rec = Arc::new(Mutex::new(Record::default()));
    let count = Arc::new(AtomicUsize::new(0));
    let r2 = rec.clone();
    let task = tokio::spawn(async move {
        // Dropped with the task: every connection's task is aborted with it.
        let mut set = tokio::task::JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else {
                continue;
            };
            let ci = {
                let mut r = r2.lock().unwrap();
                r.conns.push(ConnRec::default());
                r.conns.len() - 1
            };
            set.spawn(serve_conn(s, ci, r2.clone(), replies, count.clone()));
            while set.try_join_next().is_some() {}
        }
    });
    Backend { addr, rec, task }
}

/// Read on: bytes into the record; false at EOF or an error (then the connection has ended).
async fn fill(s: &mut TcpStream, ci: usize, rec: &Mutex<Record>, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16384];
    match s.read(&mut chunk).await {
        Ok(n) if n > 0 => {
            let mut r = rec.lock().unwrap();
            let raw = &mut r.conns[ci].raw;
            let keep = n.min(MAX_RECORD.saturating_sub(raw.len()));
            raw.extend_from_slice(&chunk[..keep]);
            if buf.len() < MAX_RECORD {
                buf.extend_from_slice(&chunk[..n]);
            }
            true
        }
        _ => {
            rec.lock().unwrap().conns[ci].ended = true;
            false
        }
    }
}

/// Hold a connection open reading nothing into requests, until the proxy closes it.
async fn hold(s: &mut TcpStream, ci: usize, rec: &Mutex<Record>) {
    let mut sink = Vec::new();
    while fill(s, ci, rec, &mut sink).await {
        sink.clear();
    }
}

async fn serve_conn(
    mut s: TcpStream,
    ci: usize,
    rec: Arc<Mutex<Record>>,
    replies: &'static [Reply],
    count: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    let ended = |rec: &Mutex<Record>| rec.lock().unwrap().conns[ci].ended = true;
    loop {
        match parse_request(&buf) {
            ReqParse::Done(used, mut req) => {
                buf.drain(..used);
                req.conn = ci;
                rec.lock().unwrap().reqs.push(req);
                let k = count.fetch_add(1, Ordering::SeqCst);
                let reply = replies.get(k).copied().unwrap_or(Reply::Send(OK));
                let wrote = match reply {
                    Reply::Send(b) | Reply::SendClose(b) | Reply::SendStall(b) => {
                        s.write_all(b.as_bytes()).await.is_ok()
                    }
                    Reply::SendLater(a, ms, b) => {
                        rec.lock().unwrap().pending += 1;
                        let ok = s.write_all(a.as_bytes()).await.is_ok();
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        let ok = ok && s.write_all(b.as_bytes()).await.is_ok();
                        rec.lock().unwrap().pending -= 1;
                        ok
                    }
                    Reply::Endless(head, fill) => {
                        let mut ok = s.write_all(head.as_bytes()).await.is_ok();
                        let mut sent = 0;
                        while ok && sent < ENDLESS_CAP {
                            ok = s.write_all(fill.as_bytes()).await.is_ok();
                            sent += fill.len();
                        }
                        ok
                    }
                    Reply::Close => false,
                };
                if !wrote {
                    return ended(&rec);
                }
                match reply {
                    Reply::SendClose(_) => return ended(&rec),
                    Reply::SendStall(_) | Reply::Endless(..) => {
                        return hold(&mut s, ci, &rec).await;
                    }
                    _ => continue,
                }
            }
            ReqParse::Bad(why) => {
                rec.lock().unwrap().junk.push(why);
                return ended(&rec);
            }
            ReqParse::Partial(head) => {
                if !fill(&mut s, ci, &rec, &mut buf).await {
                    if let Some(mut req) = head {
                        req.conn = ci;
                        rec.lock().unwrap().reqs.push(req);
                    } else if !buf.is_empty() {
                        let why = format!("an unfinished head: {}", esc(&buf[..buf.len().min(60)]));
                        rec.lock().unwrap().junk.push(why);
                    }
                    return;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The client.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// EOF or a reset.
    Closed,
    /// Still open, quiet after a complete response.
    Open,
    /// Still open with no complete response at the deadline.
    Stuck,
    /// The client never read.
    Unread,
}

#[derive(Debug, Clone)]
struct Got {
    finals: Vec<(u16, Vec<u8>)>,
    /// A response head whose body did not complete (its status; 0: an unfinished head).
    partial: Option<u16>,
    end: End,
    issues: BTreeSet<String>,
    raw: Vec<u8>,
}

impl Got {
    fn show(&self) -> String {
        let mut s: Vec<String> = self.finals.iter().map(|(c, _)| c.to_string()).collect();
        if let Some(p) = self.partial {
            s.push(format!("{p}-cut"));
        }
        let end = match self.end {
            End::Closed => "closed",
            End::Open => "open",
            End::Stuck => "STUCK",
            End::Unread => "unread",
        };
        if s.is_empty() {
            end.to_string()
        } else {
            format!("{} {end}", s.join(","))
        }
    }
}

struct Responses {
    finals: Vec<(u16, Vec<u8>)>,
    partial: Option<u16>,
    issues: BTreeSet<String>,
}

/// The responses in `b` for requests of `method`; `eof`: the connection has ended.
fn parse_responses(b: &[u8], method: &str, eof: bool) -> Responses {
    let mut out = Responses {
        finals: Vec::new(),
        partial: None,
        issues: BTreeSet::new(),
    };
    let mut pos = 0;
    while pos < b.len() {
        let Some(end) = find(&b[pos..], b"\r\n\r\n") else {
            out.partial = Some(0);
            break;
        };
        let mut h = parse_head(&b[pos..pos + end + 4]);
        let code: u16 = match h.start.split(' ').collect::<Vec<_>>()[..] {
            [v, c, ..] if v.starts_with("HTTP/1.") => c.parse().unwrap_or(0),
            _ => 0,
        };
        if code == 0 {
            out.issues.insert(format!(
                "not a response: {}",
                esc(&b[pos..(pos + 40).min(b.len())])
            ));
            break;
        }
        let f = framing(&mut h, false);
        out.issues.extend(h.issues);
        pos += end + 4;
        if (100..200).contains(&code) && code != 101 {
            continue;
        }
        let no_body = method == "HEAD"
            || code == 204
            || code == 304
            || (method == "CONNECT" && (200..300).contains(&code));
        let rest = &b[pos..];
        match f {
            _ if no_body => out.finals.push((code, Vec::new())),
            Ok(Framing::Length(n)) if rest.len() >= n => {
                out.finals.push((code, rest[..n].to_vec()));
                pos += n;
            }
            Ok(Framing::Chunked) => match dechunk(rest) {
                Chunks::Done(used, body) => {
                    out.finals.push((code, body));
                    pos += used;
                }
                _ => {
                    out.partial = Some(code);
                    break;
                }
            },
            Ok(Framing::Close) if eof => {
                out.finals.push((code, rest.to_vec()));
                break;
            }
            Err(e) => {
                out.issues.insert(format!("response framing: {e}"));
                out.partial = Some(code);
                break;
            }
            _ => {
                out.partial = Some(code);
                break;
            }
        }
    }
    out
}

fn expand(text: &str) -> Vec<u8> {
    text.replace("{pad20k}", &"a".repeat(20 * 1024))
        .into_bytes()
}

/// One client connection: send `bytes`, read the answer. The stream is handed back (when still
/// open) so that the backend can be checked before the client lets go.
async fn client(
    addr: SocketAddr,
    bytes: &[u8],
    unread: bool,
    backend: &Backend,
) -> (Got, Option<TcpStream>) {
    let method = String::from_utf8_lossy(bytes)
        .split(' ')
        .next()
        .unwrap_or("")
        .to_string();
    let mut got = Got {
        finals: Vec::new(),
        partial: None,
        end: End::Closed,
        issues: BTreeSet::new(),
        raw: Vec::new(),
    };
    let Ok(Ok(mut s)) = tokio::time::timeout(DEADLINE, TcpStream::connect(addr)).await else {
        return (got, None);
    };
    // The proxy may refuse and close before all is written: not an error here.
    let _ = s.write_all(bytes).await;
    let until = Instant::now() + DEADLINE;
    if unread {
        while Instant::now() < until && !backend.all_ended() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        got.end = End::Unread;
        return (got, Some(s));
    }
    let mut chunk = vec![0u8; 65536];
    let mut done_once = false;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let wait = if done_once { left.min(QUIET) } else { left };
        match tokio::time::timeout(wait, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => {
                if got.raw.len() < MAX_RECORD {
                    got.raw.extend_from_slice(&chunk[..n]);
                }
                let r = parse_responses(&got.raw, &method, false);
                done_once = !r.finals.is_empty() && r.partial.is_none();
            }
            Ok(_) => {
                got.end = End::Closed;
                break;
            }
            Err(_) => {
                got.end = if done_once { End::Open } else { End::Stuck };
                break;
            }
        }
    }
    let r = parse_responses(&got.raw, &method, got.end == End::Closed);
    got.finals = r.finals;
    got.partial = r.partial;
    got.issues = r.issues;
    let keep = (got.end != End::Closed).then_some(s);
    (got, keep)
}

/// Whether one `|`-alternative of an expectation holds.
fn holds(token: &str, g: &Got) -> bool {
    let status_ok = |pat: &str, code: u16| match pat.as_bytes() {
        [d, b'x', b'x'] => code / 100 == (d - b'0') as u16,
        _ => pat.parse() == Ok(code),
    };
    match token {
        "closed" => g.finals.is_empty() && g.partial.is_none() && g.end == End::Closed,
        "cut" => g.finals.is_empty() && g.partial.is_some_and(|c| c > 0) && g.end == End::Closed,
        "unread" => g.end == End::Unread,
        t if t.contains(',') => {
            let want: Vec<&str> = t.split(',').collect();
            want.len() == g.finals.len()
                && want
                    .iter()
                    .zip(&g.finals)
                    .all(|(w, (c, _))| status_ok(w, *c))
        }
        t => {
            let (pat, body) = match t.split_once(':') {
                Some((p, b)) => (p, Some(b)),
                None => (t, None),
            };
            g.finals.first().is_some_and(|(c, b)| {
                status_ok(pat, *c) && body.is_none_or(|want| b.as_slice() == want.as_bytes())
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a case.

struct Run {
    got: Vec<Got>,
    rec: Record,
    all_ended: bool,
}

impl Run {
    fn complete(&self) -> Vec<&SeenReq> {
        self.rec.reqs.iter().filter(|r| r.complete).collect()
    }
    fn backend_show(&self) -> String {
        let reqs: Vec<String> = self.rec.reqs.iter().map(SeenReq::short).collect();
        let mut s = format!("{}: {}", self.complete().len(), reqs.join("; "));
        if !self.rec.junk.is_empty() {
            s += " +junk";
        }
        s
    }
    /// The targets of the complete requests, in origin form.
    fn targets(&self) -> BTreeSet<String> {
        self.complete()
            .iter()
            .map(|r| origin_form(&r.target))
            .collect()
    }
}

fn origin_form(t: &str) -> String {
    match t.split_once("://") {
        Some((_, rest)) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".into(),
        },
        None => t.to_string(),
    }
}

async fn run_case(case: &Case, proxy: SocketAddr, b: &Backend) -> Run {
    let mut got = Vec::new();
    let mut last = None;
    for (i, text) in case.clients.iter().enumerate() {
        if i > 0 {
            // The bytes a reply sends late are in the proxy's socket before the next client
            // comes (loopback: a write that returned has been delivered), however loaded the
            // machine.
            let until = Instant::now() + DEADLINE;
            while !b.written() && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(GAP).await;
        }
        let unread = case.expect.get(i).is_some_and(|e| *e == "unread");
        let (g, s) = client(proxy, &expand(text), unread, b).await;
        got.push(g);
        last = s;
    }
    // Let the backend finish reading; wait for closed connections where the case asks.
    tokio::time::sleep(Duration::from_millis(150)).await;
    if case.backend_closed {
        let until = Instant::now() + DEADLINE;
        while Instant::now() < until && !b.all_ended() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let all_ended = b.all_ended();
    drop(last);
    Run {
        got,
        rec: b.snapshot(),
        all_ended,
    }
}

/// What does not hold for a run (the case's own expectations and the checks of every case).
fn violations(case: &Case, run: &Run) -> Vec<String> {
    let mut v = Vec::new();
    for (i, want) in case.expect.iter().enumerate() {
        let Some(g) = run.got.get(i) else { continue };
        if !want.split('|').any(|t| holds(t, g)) {
            let body = g
                .finals
                .first()
                .map(|(_, b)| format!(" body {}", esc(&b[..b.len().min(40)])))
                .unwrap_or_default();
            v.push(format!(
                "client {}: want {want}, got {}{body}",
                i + 1,
                g.show()
            ));
        }
        if !g.issues.is_empty() {
            v.push(format!("client {}: response {:?}", i + 1, g.issues));
        }
    }
    let complete = run.complete();
    let n = complete.len();
    if n < case.seen.0 || n > case.seen.1 {
        v.push(format!(
            "backend: {n} complete requests, want {}..={}",
            case.seen.0, case.seen.1
        ));
    }
    for r in &run.rec.reqs {
        if r.target.contains("/smuggled") {
            v.push(format!("backend: smuggled request {}", r.short()));
        }
        if !r.issues.is_empty() {
            v.push(format!(
                "backend: {} forwarded with {:?}",
                r.short(),
                r.issues
            ));
        }
    }
    for j in &run.rec.junk {
        v.push(format!("backend: junk on a connection: {j}"));
    }
    if let Some(first) = complete.first() {
        for (name, want) in case.hdr {
            let got = first.field(name);
            if got != *want {
                v.push(format!("backend: field {name} = {got:?}, want {want:?}"));
            }
        }
        if let Some(t) = case.target {
            if first.target != t {
                v.push(format!("backend: target {}, want {t}", first.target));
            }
        }
        if let Some(b) = case.body {
            if first.body != b.as_bytes() {
                v.push(format!("backend: body {}, want {b:?}", esc(&first.body)));
            }
        }
    }
    if case.backend_closed && !run.all_ended {
        v.push(format!(
            "backend: a connection still open {} s after the client's end",
            DEADLINE.as_secs()
        ));
    }
    v
}

fn esc(b: &[u8]) -> String {
    b.escape_ascii().to_string()
}

fn balancer_config(dir: &Path, backend: SocketAddr) -> String {
    format!(
        "mode = \"l7\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n\
         [timeouts]\nconnect = \"1s\"\nclient = \"1s\"\nserver = \"1s\"\nheader = \"1s\"\n\
         [[server]]\nname = \"s\"\naddr = \"{backend}\"\n",
        dir.join("ctl.sock").display()
    )
}

async fn run_netsched(case: &'static Case) -> Run {
    let b = backend(case.replies).await;
    let dir = TempDir::new("bal-conf").unwrap();
    let r = common::start(&balancer_config(dir.path(), b.addr), &dir).await;
    let run = run_case(case, r.listen[0], &b).await;
    drop(r);
    run
}

// ---------------------------------------------------------------------------------------------
// HAProxy: one process, a frontend and a backend per case.

struct Haproxy {
    run: common::haproxy::Haproxy,
    backends: Vec<Backend>,
}

fn haproxy_config(frontends: &[SocketAddr], backends: &[Backend]) -> String {
    let mut t = String::from(
        "global\n    maxconn 2000\n\ndefaults\n    mode http\n    timeout connect 1s\n    \
         timeout client 1s\n    timeout server 1s\n    timeout http-request 1s\n    \
         timeout http-keep-alive 1s\n\n",
    );
    for (i, (f, b)) in frontends.iter().zip(backends).enumerate() {
        let _ = writeln!(
            t,
            "frontend f{i}\n    bind {f}\n    default_backend b{i}\nbackend b{i}\n    server s {}\n",
            b.addr
        );
    }
    t
}

/// HAProxy in front of a backend per case, or why not.
async fn start_haproxy() -> Result<Haproxy, String> {
    if !Path::new(HAPROXY).exists() {
        return Err(format!("{HAPROXY} is not installed"));
    }
    let mut backends = Vec::new();
    for c in CASES {
        backends.push(backend(c.replies).await);
    }
    let run = common::haproxy::start(CASES.len(), |f| haproxy_config(f, &backends)).await?;
    Ok(Haproxy { run, backends })
}

// ---------------------------------------------------------------------------------------------

/// Padded to `w`, never cut.
fn cell(s: &str, w: usize) -> String {
    format!("{s:<w$}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_conformance_corpus() {
    let started = Instant::now();
    let names: BTreeSet<&str> = CASES.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), CASES.len(), "case names are unique");
    for c in CASES {
        assert_eq!(
            c.clients.len(),
            c.expect.len(),
            "{}: an expectation per client",
            c.name
        );
    }
    let haproxy = start_haproxy().await.map(Arc::new);
    let gate = Arc::new(Semaphore::new(PARALLEL));
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let g = gate.clone();
        ours.push(tokio::spawn(async move {
            let _p = g.acquire_owned().await.unwrap();
            run_netsched(case).await
        }));
        if let Ok(h) = &haproxy {
            let (g, h) = (gate.clone(), h.clone());
            theirs.push(Some(tokio::spawn(async move {
                let _p = g.acquire_owned().await.unwrap();
                run_case(case, h.run.frontends[i], &h.backends[i]).await
            })));
        } else {
            theirs.push(None);
        }
    }
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{} | {} | {} | {} | {} | haproxy holds | verdict",
        cell("case", 36),
        cell("netsched client", 18),
        cell("netsched backend", 34),
        cell("haproxy client", 18),
        cell("haproxy backend", 34)
    );
    let mut failures = Vec::new();
    for ((case, o), t) in CASES.iter().zip(ours).zip(theirs) {
        let run = o.await.expect("case task");
        let hp = match t {
            Some(t) => Some(t.await.expect("haproxy case task")),
            None => None,
        };
        let mut v = violations(case, &run);
        if let Some(h) = &hp {
            let extra: Vec<String> = run.targets().difference(&h.targets()).cloned().collect();
            if !extra.is_empty() && case.reason.is_none() {
                v.push(format!(
                    "differential: netsched forwarded {extra:?}, which HAProxy did not"
                ));
            }
        }
        let show = |g: &[Got]| g.iter().map(Got::show).collect::<Vec<_>>().join(" / ");
        let _ = writeln!(
            table,
            "{} | {} | {} | {} | {} | {} | {}",
            cell(case.name, 36),
            cell(&show(&run.got), 18),
            cell(&run.backend_show(), 34),
            cell(&hp.as_ref().map(|h| show(&h.got)).unwrap_or("-".into()), 18),
            cell(
                &hp.as_ref().map(|h| h.backend_show()).unwrap_or("-".into()),
                34
            ),
            // The case's expectations and the checks of every case, for HAProxy (not asserted).
            cell(
                match &hp {
                    Some(h) if violations(case, h).is_empty() => "yes",
                    Some(_) => "no",
                    None => "-",
                },
                13
            ),
            if v.is_empty() { "ok" } else { "FAIL" }
        );
        if !v.is_empty() {
            let mut f = format!("{} ({}):\n", case.name, case.about);
            for line in &v {
                let _ = writeln!(f, "    {line}");
            }
            for (i, text) in case.clients.iter().enumerate() {
                let bytes = expand(text);
                let _ = writeln!(
                    f,
                    "    client {} sent {}",
                    i + 1,
                    esc(&bytes[..bytes.len().min(200)])
                );
                if let Some(g) = run.got.get(i) {
                    let _ = writeln!(
                        f,
                        "    client {} got  {}",
                        i + 1,
                        esc(&g.raw[..g.raw.len().min(300)])
                    );
                }
            }
            for (i, c) in run.rec.conns.iter().enumerate() {
                let _ = writeln!(
                    f,
                    "    backend conn {} read {}",
                    i + 1,
                    esc(&c.raw[..c.raw.len().min(300)])
                );
            }
            failures.push(f);
        }
    }
    println!("{table}");
    match &haproxy {
        Ok(_) => println!("differential: against {HAPROXY} (HAProxy 2.6 on Debian)"),
        Err(e) => println!("differential part skipped: {e}"),
    }
    println!(
        "{} cases, {} failing, {:.1} s",
        CASES.len(),
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    drop(haproxy);
    assert!(
        failures.is_empty(),
        "{} of {} cases do not hold:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}
