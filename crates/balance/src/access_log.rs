//! The L7 access log: one line per request, modelled on HAProxy's `option httplog`
//! (HAProxy Configuration Manual, §8.2.3 "HTTP log format", §8.4 "Timing events" and §8.5
//! "Session state at disconnection"; haproxy.org/download/<version>/doc/configuration.txt).
//!
//! ```text
//! 127.0.0.1:40074 [2026-11-27T02:51:07.548Z] 127.0.0.1:8080 s1 0/0/1/283/290 200 107 -- "GET /a HTTP/1.1"
//! client          date of Tq's start          frontend       server Tq/Tw/Tc/Tr/Tt status bytes state request
//! ```
//!
//! Timers in milliseconds, `-1` for a step never reached (HAProxy's convention):
//! - `Tq`: from the connection's accept (or the end of the previous response on a kept-alive
//!   connection) to the request head received — HAProxy's Tq, idle time included;
//! - `Tw`: waiting in the balancer's queue for a server slot;
//! - `Tc`: connecting to the server (0 on a reused pooled connection);
//! - `Tr`: from the request sent to the response head received;
//! - `Tt`: from Tq's start to the response's last byte handed to the client (or its end).
//!
//! `bytes` counts every byte of the response the client connection's socket accepted, head
//! and body (chunk framing included), as HAProxy's `bytes_read` does (§8.2.3:
//! headers included); see [`crate::sent_bytes`]. `server` is `<NOSRV>` when no server was chosen. The two-letter termination state
//! (first: who ended it, second: in which phase) is listed in docs/balance.md.
//!
//! On a connection whose TLS handshake asked for a client certificate (`[tls]`
//! `client_certificate = "optional"` or `"required"`, tls.rs), a `{subject}` field comes before
//! the request, as HAProxy places its captured fields (§8.2.3 `{captured_request_headers}`):
//! the verified certificate's subject ([`crate::tls::client_subject`]), `{}` for a client that
//! sent none. Its bytes outside printable ASCII, and `{`, `}`, `"` and `\`, are written as
//! `\xNN`. Without client certificates the line has no such field.
//!
//! On a TLS connection the line ends with two more fields after the request,
//! `TLSv1.3/h2 TLS_AES_128_GCM_SHA256`: the TLS version and the protocol ALPN chose (RFC 7301;
//! `-` when the client offered none), then the cipher suite negotiated, by its IANA name
//! ([`cipher_name`]), in the place HAProxy's HTTPS log format puts its `%sslv/%sslc` (§8.2.4
//! "HTTPS log format": the TLS fields follow the quoted request). Lines of plain connections
//! have neither field, so their layout is `option httplog`'s; the request's own version
//! (`HTTP/2.0`, `HTTP/1.1`) is in the request field either way.
//!
//! In mode `l4` the log has one line per connection instead, modelled on HAProxy's `option
//! tcplog` (§8.2.2 "TCP log format"), see [`TcpEntry`]:
//!
//! ```text
//! 127.0.0.1:40080 [2026-12-07T21:10:02.114Z] 127.0.0.1:8080 s1 0/1/52 1834 -- 211
//! client          date of the accept          frontend       server Tw/Tc/Tt bytes state bytes_up
//! ```
//!
//! Never on the data path's clock: a request builds an [`Entry`] (a few fields, the request line
//! cut to [`MAX_REQUEST_LINE`] bytes) and hands it to a bounded queue of [`QUEUE`] entries with
//! `try_send`; one writer thread formats and writes. When the queue is full (a slow disk, a
//! stderr nobody reads) the entry is dropped and counted in
//! `netsched_balance_access_log_dropped_total`; nothing waits. The writer sends what the
//! queue holds in one write of at most 64 KiB; a line is counted in `lines_total` once all
//! its bytes have been written, and a line the file refused (the disk full) in
//! `write_errors_total`, then let go (memory stays bounded; [`Batch`]).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Entries waiting for the writer thread at most; more are dropped and counted.
pub const QUEUE: usize = 4096;
/// Longest request line logged (method, target, version); longer ones are cut and end in `...`.
pub const MAX_REQUEST_LINE: usize = 1024;

/// Where the log goes (`access_log` in the configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stderr,
    File(PathBuf),
}

impl Target {
    /// `"stderr"` or an absolute path.
    pub fn parse(v: &str) -> Result<Target, String> {
        if v == "stderr" {
            Ok(Target::Stderr)
        } else if v.starts_with('/') {
            Ok(Target::File(PathBuf::from(v)))
        } else {
            Err(format!(
                "access_log = {v:?}: expected \"stderr\" or an absolute path"
            ))
        }
    }
}

/// One request as logged.
#[derive(Debug, Clone)]
pub struct Entry {
    pub client: SocketAddr,
    /// When Tq started (wall clock).
    pub date: SystemTime,
    pub frontend: SocketAddr,
    pub server: Option<String>,
    pub tq: i64,
    pub tw: i64,
    pub tc: i64,
    pub tr: i64,
    pub tt: i64,
    pub status: u16,
    pub bytes: u64,
    pub state: [u8; 2],
    pub request: String,
    pub cert: ClientCert,
    /// The TLS connection's version, ALPN protocol and cipher suite; `None` on a plain
    /// connection.
    pub tls: Option<TlsSession>,
}

/// One L4 connection as logged, HAProxy's `option tcplog` with the bytes the client sent
/// after its fields: `client [date] frontend server Tw/Tc/Tt bytes state bytes_up`.
/// - `Tw`: from the accept to a server chosen (the queue); `Tc`: connecting to it (and
///   sending the PROXY header and the bytes of a ClientHello read for `route = "sni"`);
///   `Tt`: from the accept to the end; milliseconds, `-1` for a step never reached;
/// - `bytes`: bytes relayed to the client (HAProxy's `bytes_read`), `bytes_up`: from it;
/// - `state`: two letters, who ended it and in which phase (docs/balance.md, "Access log").
#[derive(Debug, Clone)]
pub struct TcpEntry {
    pub client: SocketAddr,
    /// The accept (wall clock).
    pub date: SystemTime,
    pub frontend: SocketAddr,
    pub server: Option<String>,
    pub tw: i64,
    pub tc: i64,
    pub tt: i64,
    pub bytes: u64,
    pub bytes_up: u64,
    pub state: [u8; 2],
}

impl TcpEntry {
    /// The line, without its newline.
    pub fn line(&self) -> String {
        format!(
            "{} [{}] {} {} {}/{}/{} {} {} {}",
            self.client,
            rfc3339_millis(self.date),
            self.frontend,
            self.server.as_deref().unwrap_or("<NOSRV>"),
            self.tw,
            self.tc,
            self.tt,
            self.bytes,
            String::from_utf8_lossy(&self.state),
            self.bytes_up
        )
    }
}

/// What the writer thread gets: a request's line (L7) or a connection's (L4).
#[derive(Debug, Clone)]
pub enum Record {
    Http(Entry),
    Tcp(TcpEntry),
}

impl Record {
    fn line(&self) -> String {
        match self {
            Record::Http(e) => e.line(),
            Record::Tcp(e) => e.line(),
        }
    }
}

/// What the log shows of a request's TLS connection: `TLSv1.3/h2 TLS_AES_128_GCM_SHA256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsSession {
    /// `TLSv1.2`, `TLSv1.3` (the names OpenSSL, and so HAProxy's `%sslv`, gives them).
    pub version: &'static str,
    /// The protocol ALPN chose (`h2`, `http/1.1`); `None` when the client offered none.
    pub alpn: Option<&'static str>,
    /// The cipher suite negotiated; `None` only before a handshake has chosen one.
    pub cipher: Option<rustls::CipherSuite>,
}

impl TlsSession {
    /// The session of a finished handshake: its version, the ALPN protocol (if any) and the
    /// cipher suite.
    pub fn of(
        version: Option<rustls::ProtocolVersion>,
        alpn: Option<&[u8]>,
        cipher: Option<rustls::CipherSuite>,
    ) -> Self {
        TlsSession {
            version: match version {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                // rustls is configured for TLS 1.2 and 1.3 only (tls.rs).
                _ => "TLS?",
            },
            alpn: match alpn {
                Some(b"h2") => Some("h2"),
                Some(b"http/1.1") => Some("http/1.1"),
                // Only these two are offered (tls.rs), so anything else is not chosen.
                _ => None,
            },
            cipher,
        }
    }
}

/// A cipher suite by its IANA name (the TLS Cipher Suites registry, as RFC 8446 §B.4 and
/// RFC 8422 §6 spell them): `TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384`.
/// rustls's names are IANA's but for the TLS 1.3 suites, which it spells `TLS13_…`; a suite
/// rustls has no name for is its code point (`0x1301`); `-` for none.
pub fn cipher_name(suite: Option<rustls::CipherSuite>) -> String {
    let Some(suite) = suite else {
        return "-".into();
    };
    match suite.as_str() {
        Some(name) => match name.strip_prefix("TLS13_") {
            Some(rest) => format!("TLS_{rest}"),
            None => name.to_string(),
        },
        None => format!("0x{:04x}", u16::from(suite)),
    }
}

/// The client certificate of a request's connection, as the log shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClientCert {
    /// None was asked for (no TLS, or `client_certificate = "off"`): no field.
    #[default]
    NotAsked,
    /// Asked for: the verified certificate's subject; `None` when the client sent none (or
    /// its subject has no readable name).
    Asked(Option<Arc<str>>),
}

impl ClientCert {
    /// The subject, for the class rules.
    pub fn subject(&self) -> Option<&str> {
        match self {
            ClientCert::Asked(Some(s)) => Some(s),
            _ => None,
        }
    }
}

/// Milliseconds of `d`, for a timer.
pub fn ms(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// The civil date (year, month, day) of a count of days since 1970-01-01: Howard Hinnant's
/// `civil_from_days` (chrono-compatible low-level date algorithms).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `2026-11-27T02:51:07.548Z` (UTC).
pub fn rfc3339_millis(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

impl Entry {
    /// The line, without its newline.
    pub fn line(&self) -> String {
        let cert = match &self.cert {
            ClientCert::NotAsked => String::new(),
            ClientCert::Asked(s) => format!("{{{}}} ", escape_subject(s.as_deref().unwrap_or(""))),
        };
        let tls = match &self.tls {
            None => String::new(),
            Some(t) => format!(
                " {}/{} {}",
                t.version,
                t.alpn.unwrap_or("-"),
                cipher_name(t.cipher)
            ),
        };
        format!(
            "{} [{}] {} {} {}/{}/{}/{}/{} {} {} {} {cert}\"{}\"{tls}",
            self.client,
            rfc3339_millis(self.date),
            self.frontend,
            self.server.as_deref().unwrap_or("<NOSRV>"),
            self.tq,
            self.tw,
            self.tc,
            self.tr,
            self.tt,
            self.status,
            self.bytes,
            String::from_utf8_lossy(&self.state),
            self.request
        )
    }
}

/// A client certificate's subject inside `{...}`: printable ASCII but `{`, `}`, `"` and `\`;
/// any other byte as `\xNN`.
fn escape_subject(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.bytes() {
        match c {
            b'{' | b'}' | b'"' | b'\\' => out.push_str(&format!("\\x{c:02x}")),
            0x20..=0x7e => out.push(c as char),
            _ => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out
}

/// The request line as logged: printable ASCII only (anything else as `\xNN`, `"` as `\"`),
/// at most [`MAX_REQUEST_LINE`] bytes.
pub fn request_line(method: &str, target: &str, version: &str) -> String {
    let mut out = String::with_capacity(method.len() + target.len() + version.len() + 2);
    for c in format!("{method} {target} {version}").bytes() {
        if out.len() >= MAX_REQUEST_LINE {
            out.push_str("...");
            break;
        }
        match c {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(c as char);
            }
            0x20..=0x7e => out.push(c as char),
            _ => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out
}

/// The running log: a bounded queue and its writer thread.
pub struct AccessLog {
    tx: Option<SyncSender<Record>>,
    dropped: Counter,
    /// Closed by the writer thread when it has written and flushed everything.
    /// (In a mutex only so the log can be shared between threads; used once, at the end.)
    done: std::sync::Mutex<Option<Receiver<()>>>,
}

/// How long a stop waits for the queued lines to be written; a writer stuck on a full pipe
/// or a hung disk is left behind (the process is ending) rather than holding the stop.
pub const FLUSH_AT_STOP: Duration = Duration::from_secs(2);

/// The counters every balancer exports (0 while the log is off).
#[derive(Clone, Default)]
pub struct LogCounters {
    pub written: Counter,
    pub dropped: Counter,
    pub write_errors: Counter,
}

impl LogCounters {
    pub fn register(registry: &mut Registry) -> Self {
        let c = LogCounters::default();
        let r = registry.sub_registry_with_prefix("netsched_balance_access_log");
        r.register("lines", "Access log lines written", c.written.clone());
        r.register(
            "dropped",
            "Access log lines dropped because the writer's bounded queue was full",
            c.dropped.clone(),
        );
        r.register(
            "write_errors",
            "Access log lines the writer failed to write (disk full, closed stderr)",
            c.write_errors.clone(),
        );
        c
    }
}

impl AccessLog {
    /// Open the target (a file is created if missing, appended to, mode 0640) and start the
    /// writer thread.
    pub fn start(target: &Target, counters: LogCounters) -> Result<Self, String> {
        let out: Box<dyn Write + Send> = match target {
            Target::Stderr => Box::new(std::io::stderr()),
            Target::File(p) => {
                use std::os::unix::fs::OpenOptionsExt;
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o640)
                    .open(p)
                    .map_err(|e| format!("access_log {}: {e}", p.display()))?;
                Box::new(f)
            }
        };
        Self::with_writer(out, counters)
            .map_err(|e| format!("access_log: starting its writer thread: {e}"))
    }

    fn with_writer(out: Box<dyn Write + Send>, counters: LogCounters) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let (done_tx, done) = mpsc::channel::<()>();
        let dropped = counters.dropped.clone();
        std::thread::Builder::new()
            .name("balance-access-log".into())
            .spawn(move || {
                write_loop(rx, out, counters);
                drop(done_tx);
            })?;
        Ok(AccessLog {
            tx: Some(tx),
            dropped,
            done: std::sync::Mutex::new(Some(done)),
        })
    }

    /// Hand `e` to the writer without waiting; counted as dropped when the queue is full.
    pub fn send(&self, e: Entry) {
        self.queue(Record::Http(e));
    }

    /// [`AccessLog::send`] for an L4 connection's line.
    pub fn send_tcp(&self, e: TcpEntry) {
        self.queue(Record::Tcp(e));
    }

    fn queue(&self, r: Record) {
        if let Some(tx) = &self.tx {
            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(r) {
                self.dropped.inc();
            }
        }
    }
}

impl Drop for AccessLog {
    /// The queued lines are written and flushed before the thread ends, waiting at most
    /// [`FLUSH_AT_STOP`].
    fn drop(&mut self) {
        self.tx.take();
        let done = self
            .done
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(done) = done {
            let _ = done.recv_timeout(FLUSH_AT_STOP);
        }
    }
}

/// Bytes gathered before one write: the lines that came together, at most about this many.
const BATCH_BYTES: usize = 64 * 1024;

/// Write entries as they come, in batches: whatever the queue holds at the moment, up to
/// [`BATCH_BYTES`], goes out in one `write(2)` (a few when the kernel takes part of it).
fn write_loop(rx: Receiver<Record>, mut out: Box<dyn Write + Send>, c: LogCounters) {
    let mut batch = Batch::default();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(e) = next {
            batch.push(&e.line());
            if batch.bytes.len() >= BATCH_BYTES {
                batch.write(&mut *out, &c);
            }
            next = rx.try_recv().ok();
        }
        batch.write(&mut *out, &c);
    }
}

/// Lines waiting for one write. A line counts as written only once all its bytes have
/// reached the file (`written`); the rest of a batch a write refused (the disk full, stderr
/// closed) counts in `write_errors` and is let go, never kept to grow. A line cut short by a
/// refused write is ended by a newline before the next batch, so later lines stay whole.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes`.
    ends: Vec<usize>,
    /// The last write stopped inside a line.
    torn: bool,
}

impl Batch {
    fn push(&mut self, line: &str) {
        if self.bytes.is_empty() && self.torn {
            self.bytes.push(b'\n');
        }
        self.bytes.extend_from_slice(line.as_bytes());
        self.bytes.push(b'\n');
        self.ends.push(self.bytes.len());
    }

    fn write(&mut self, out: &mut dyn Write, c: &LogCounters) {
        if self.ends.is_empty() {
            return;
        }
        let mut done = 0;
        while done < self.bytes.len() {
            match out.write(&self.bytes[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = out.flush();
        let whole = self.ends.iter().filter(|&&end| end <= done).count();
        c.written.inc_by(whole as u64);
        c.write_errors.inc_by((self.ends.len() - whole) as u64);
        // Torn: some bytes of a line went out, not all of them.
        let cut = done > 0 && done < self.bytes.len() && !self.ends.contains(&done);
        self.torn = cut || (self.torn && done == 0);
        self.bytes.clear();
        self.ends.clear();
    }
}

/// A request being served: what [`AccessLog`] gets when its response ends.
pub struct Pending {
    pub log: Arc<AccessLog>,
    /// Tq's start (the accept, or the previous response's end on this connection).
    pub start: Instant,
    pub entry: Entry,
}

impl Pending {
    /// The response has ended (`state` as it ended): Tt is taken now and the entry sent.
    pub fn finish(mut self, bytes: u64, state: [u8; 2]) {
        self.entry.tt = ms(self.start.elapsed());
        self.entry.bytes = bytes;
        self.entry.state = state;
        self.log.send(self.entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            client: "127.0.0.1:40074".parse().unwrap(),
            date: UNIX_EPOCH + Duration::from_millis(1_795_747_867_548),
            frontend: "127.0.0.1:8080".parse().unwrap(),
            server: Some("s1".into()),
            tq: 0,
            tw: 0,
            tc: 1,
            tr: 283,
            tt: 290,
            status: 200,
            bytes: 107,
            state: *b"--",
            request: request_line("GET", "/a", "HTTP/1.1"),
            cert: ClientCert::NotAsked,
            tls: None,
        }
    }

    #[test]
    fn a_tls_connection_s_version_alpn_and_cipher_suite_follow_the_request() {
        use rustls::{CipherSuite, ProtocolVersion};
        let mut e = entry();
        e.request = request_line("GET", "/a", "HTTP/2.0");
        e.tls = Some(TlsSession::of(
            Some(ProtocolVersion::TLSv1_3),
            Some(b"h2"),
            Some(CipherSuite::TLS13_AES_128_GCM_SHA256),
        ));
        assert!(
            e.line()
                .ends_with(" -- \"GET /a HTTP/2.0\" TLSv1.3/h2 TLS_AES_128_GCM_SHA256"),
            "{}",
            e.line()
        );
        e.cert = ClientCert::Asked(Some("client-a".into()));
        let suite = CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256;
        e.tls = Some(TlsSession::of(
            Some(ProtocolVersion::TLSv1_2),
            None,
            Some(suite),
        ));
        assert!(
            e.line().ends_with(
                " -- {client-a} \"GET /a HTTP/2.0\" TLSv1.2/- \
                 TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
            ),
            "{}",
            e.line()
        );
        let alpn = TlsSession::of(Some(ProtocolVersion::TLSv1_3), Some(b"http/1.1"), None);
        assert_eq!(alpn.alpn, Some("http/1.1"));
        assert_eq!(cipher_name(None), "-");
        assert_eq!(cipher_name(Some(CipherSuite::Unknown(0x1399))), "0x1399");
    }

    #[test]
    fn a_client_certificate_subject_comes_before_the_request_escaped() {
        let mut e = entry();
        e.cert = ClientCert::Asked(Some("client \"a\" {x} \u{e9}\\".into()));
        assert!(
            e.line().ends_with(
                " -- {client \\x22a\\x22 \\x7bx\\x7d \\xc3\\xa9\\x5c} \"GET /a HTTP/1.1\""
            ),
            "{}",
            e.line()
        );
        e.cert = ClientCert::Asked(None);
        assert!(
            e.line().ends_with(" -- {} \"GET /a HTTP/1.1\""),
            "{}",
            e.line()
        );
    }

    #[test]
    fn a_line_has_every_field_in_order() {
        assert_eq!(
            entry().line(),
            "127.0.0.1:40074 [2026-11-27T02:51:07.548Z] 127.0.0.1:8080 s1 0/0/1/283/290 200 107 \
             -- \"GET /a HTTP/1.1\""
        );
        let mut e = entry();
        e.server = None;
        e.tc = -1;
        assert!(
            e.line().contains(" <NOSRV> 0/0/-1/283/290 "),
            "{}",
            e.line()
        );
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(rfc3339_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a year divisible by 400) and 2100-03-01 (2100 is not leap).
        assert_eq!(
            rfc3339_millis(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_millis(UNIX_EPOCH + Duration::from_secs(4_107_542_400)),
            "2100-03-01T00:00:00.000Z"
        );
    }

    #[test]
    fn request_lines_are_escaped_and_bounded() {
        assert_eq!(
            request_line("GET", "/a\"b\x01", "HTTP/1.1"),
            "GET /a\\\"b\\x01 HTTP/1.1"
        );
        let long = "/".repeat(5000);
        let l = request_line("GET", &long, "HTTP/1.1");
        assert!(
            l.len() <= MAX_REQUEST_LINE + 4 && l.ends_with("..."),
            "{}",
            l.len()
        );
    }

    #[test]
    fn parse_targets() {
        assert_eq!(Target::parse("stderr"), Ok(Target::Stderr));
        assert_eq!(
            Target::parse("/var/log/a.log"),
            Ok(Target::File("/var/log/a.log".into()))
        );
        assert!(Target::parse("rel.log").unwrap_err().contains("rel.log"));
    }

    /// A file that takes `room` bytes, then refuses every write as a full disk does.
    struct Full {
        room: usize,
        got: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    }

    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
            }
            let n = b.len().min(self.room);
            self.room -= n;
            self.got.lock().unwrap().extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_a_full_disk_refuses_are_counted_and_a_torn_line_is_ended() {
        let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let c = LogCounters::default();
        let mut out = Full {
            room: 25,
            got: got.clone(),
        };
        let mut b = Batch::default();
        for l in ["first line", "second line", "third line"] {
            b.push(l);
        }
        b.write(&mut out, &c);
        // 25 bytes: "first line\n" (11), "second line\n" (12) and 2 of "third line\n".
        assert_eq!((c.written.get(), c.write_errors.get()), (2, 1));
        assert!(b.torn);
        // Room again: the next batch starts on a line of its own.
        out.room = 100;
        b.push("fourth line");
        b.write(&mut out, &c);
        assert_eq!((c.written.get(), c.write_errors.get()), (3, 1));
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "first line\nsecond line\nth\nfourth line\n");
        assert!(!b.torn && b.bytes.is_empty());
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        // A writer that never returns: the queue fills, then every further send is a drop.
        struct Stuck(std::sync::mpsc::Receiver<()>);
        impl Write for Stuck {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                let _ = self.0.recv();
                Err(std::io::Error::other("released"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (release, stuck) = std::sync::mpsc::channel();
        let counters = LogCounters::default();
        let log = AccessLog::with_writer(Box::new(Stuck(stuck)), counters.clone()).unwrap();
        // The writer blocks in its first `write`, and the queue then fills.
        let sends = QUEUE * 3 + BATCH_BYTES / 80;
        let t = Instant::now();
        for _ in 0..sends {
            log.send(entry());
        }
        let took = t.elapsed();
        let dropped = counters.dropped.get() as usize;
        assert!(dropped >= QUEUE, "dropped {dropped} of {sends}");
        assert!(took < Duration::from_secs(5), "sends took {took:?}");
        drop(release);
        drop(log);
    }
}
