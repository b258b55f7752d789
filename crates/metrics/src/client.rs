//! The scraping side, for tests and tools: fetch `/metrics` once and read the text exposition
//! into samples. Only what our own listener writes is understood (no escapes beyond `\"` and
//! `\\` in label values, no timestamps).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Largest answer [`scrape`] reads.
pub const MAX_SCRAPE_BYTES: u64 = 16 << 20;

/// One sample line: `name{k="v",...} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET /metrics` once: the status code and the body. `timeout` bounds connect, each read and
/// each write.
pub fn scrape(addr: SocketAddr, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: netsched\r\n\r\n")?;
    let mut out = String::new();
    s.take(MAX_SCRAPE_BYTES).read_to_string(&mut out)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .ok_or_else(bad)?;
    Ok((status, body))
}

/// One scrape that must be answered 200, read into samples: what the tests of every daemon
/// compare. The error names the address and what went wrong: the I/O error, another status
/// (with its body), or the line that does not parse.
pub fn scrape_samples(addr: SocketAddr, timeout: Duration) -> Result<Vec<Sample>, String> {
    let (status, body) = scrape(addr, timeout).map_err(|e| format!("scrape {addr}: {e}"))?;
    if status != 200 {
        return Err(format!("scrape {addr}: status {status}: {body}"));
    }
    parse_exposition(&body).map_err(|e| format!("scrape {addr}: {e}"))
}

/// The samples of a text exposition; comment lines (`# TYPE`, `# HELP`, `# EOF`) are skipped.
/// Errors name the line.
pub fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |what: &str| format!("line {}: {what}: {line:?}", i + 1);
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| bad("no value"))?;
        let value: f64 = value.parse().map_err(|_| bad("value is not a number"))?;
        let (name, labels) = match series.split_once('{') {
            None => (series.to_string(), Vec::new()),
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').ok_or_else(|| bad("unclosed {"))?;
                (
                    name.to_string(),
                    parse_labels(inner).ok_or_else(|| bad("labels"))?,
                )
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    Ok(out)
}

fn parse_labels(mut s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    while !s.is_empty() {
        let (key, rest) = s.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => value.push(chars.next()?.1),
                (j, '"') => break j,
                (_, c) => value.push(c),
            }
        };
        out.push((key.trim_start_matches(',').to_string(), value));
        s = &rest[end + 1..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that answers one connection with `answer` after reading its request head.
    fn answer_once(answer: &'static str) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            s.write_all(answer.as_bytes()).unwrap();
        });
        addr
    }

    #[test]
    fn scrape_samples_reads_a_200_and_names_another_status_or_a_bad_line() {
        let t = Duration::from_secs(10);
        let ok = answer_once("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\na 1\n");
        let s = scrape_samples(ok, t).unwrap();
        assert_eq!((s[0].name.as_str(), s[0].value), ("a", 1.0));
        let busy = answer_once("HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nfull");
        let e = scrape_samples(busy, t).unwrap_err();
        assert!(
            e.contains(&busy.to_string()) && e.contains("status 503: full"),
            "{e}"
        );
        let bad = answer_once("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nb x\n");
        let e = scrape_samples(bad, t).unwrap_err();
        assert!(e.contains("line 1: value is not a number"), "{e}");
    }

    #[test]
    fn reads_what_the_encoder_writes_and_names_a_bad_line() {
        let text = "# TYPE a counter\na_total{dir=\"ab\",reason=\"x \\\"y\\\"\"} 3\nb 2.5\n# EOF\n";
        let s = parse_exposition(text).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "a_total");
        assert_eq!(s[0].label("dir"), Some("ab"));
        assert_eq!(s[0].label("reason"), Some("x \"y\""));
        assert_eq!(s[0].value, 3.0);
        assert_eq!((s[1].name.as_str(), s[1].value), ("b", 2.5));
        let e = parse_exposition("ok 1\nbroken{x=\"1\" 2\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }
}

/// What [`hammer`] saw: scrapes answered with 200, scrapes refused (503, or a reset before it),
/// and the error of every answered scrape that failed `check`.
#[derive(Debug, Default)]
pub struct HammerOutcome {
    pub answered: usize,
    pub refused: usize,
    pub inconsistent: Vec<String>,
}

/// The load the daemons' metrics tests put on a listener: `half_open` connections that send
/// half a request line and stay open (until the listener's head deadline closes them), and `scrapers` threads scraping in a loop for
/// `duration`, each answered scrape parsed and passed to `check`. Every thread first runs
/// `enter` (e.g. entering the daemon's network namespace). A refused scraper waits 5 ms before
/// trying again, so the scrapers contend for the listener without becoming busy loops on a
/// small machine. The half-open connections are closed when this returns.
pub fn hammer(
    addr: SocketAddr,
    enter: std::sync::Arc<dyn Fn() + Send + Sync>,
    scrapers: usize,
    half_open: usize,
    duration: Duration,
    check: fn(&[Sample]) -> Result<(), String>,
) -> std::io::Result<HammerOutcome> {
    let held: Vec<TcpStream> = {
        let enter = std::sync::Arc::clone(&enter);
        std::thread::spawn(move || -> std::io::Result<Vec<TcpStream>> {
            enter();
            (0..half_open)
                .map(|_| {
                    let mut s = TcpStream::connect(addr)?;
                    s.write_all(b"GET /metr")?;
                    Ok(s)
                })
                .collect()
        })
        .join()
        .map_err(|_| std::io::Error::other("half-open thread panicked"))??
    };
    let threads: Vec<_> = (0..scrapers)
        .map(|_| {
            let enter = std::sync::Arc::clone(&enter);
            std::thread::spawn(move || {
                enter();
                let mut out = HammerOutcome::default();
                let t0 = std::time::Instant::now();
                while t0.elapsed() < duration {
                    match scrape(addr, Duration::from_secs(10)) {
                        Ok((200, body)) => {
                            out.answered += 1;
                            if let Err(e) = parse_exposition(&body).and_then(|s| check(&s)) {
                                out.inconsistent.push(e);
                            }
                        }
                        _ => {
                            out.refused += 1;
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
                out
            })
        })
        .collect();
    let mut total = HammerOutcome::default();
    for t in threads {
        let o = t
            .join()
            .map_err(|_| std::io::Error::other("scraper thread panicked"))?;
        total.answered += o.answered;
        total.refused += o.refused;
        total.inconsistent.extend(o.inconsistent);
    }
    drop(held);
    Ok(total)
}
