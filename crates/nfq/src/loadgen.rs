//! The thesis's load generator (P0 §4: per client machine, n threads, each a persistent
//! HTTP/1.1 connection sending m requests back to back and timing each from send to full
//! response), as Rust threads that enter a client's network namespace with `setns`.
//!
//! Every request counted as sent is either answered (counted as received, with its response
//! time) or recorded as an error with its reason — nothing disappears from the counts. A
//! thread sends no new request after the end time but waits (up to the read timeout) for the
//! one in flight. An interrupted run (SIGINT/SIGTERM) stops the same way.

use anyhow::{anyhow, bail, Context, Result};
use netsched_testbed::{enter_netns, interrupted, pin_to_cpu};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One client machine: its namespace, the server address it talks to, its class.
#[derive(Debug, Clone)]
pub struct Client {
    pub netns: String,
    pub server: Ipv4Addr,
    pub class: usize,
}

#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub clients: Vec<Client>,
    pub port: u16,
    pub path: String,
    pub threads_per_client: usize,
    pub duration: Duration,
    /// Upper bound on requests per thread (the thesis's m).
    pub max_requests_per_thread: u64,
    /// Pin the client threads to this CPU.
    pub cpu: Option<usize>,
    pub read_timeout: Duration,
    /// End the whole load when every thread of one class has sent its
    /// `max_requests_per_thread` (P0 Table 14 is the status "after 60000 packets of one class",
    /// = 4 threads × 15000: the first class to finish ends the run). Without it the other
    /// classes run on alone and the end of the run measures a different system.
    pub stop_when_a_class_finishes: bool,
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub class: usize,
    /// When the response was complete, ns since the load started.
    pub done_ns: u64,
    pub latency_ns: u64,
}

#[derive(Debug, Clone, Default)]
pub struct LoadResult {
    pub samples: Vec<Sample>,
    pub sent: Vec<u64>,
    pub received: Vec<u64>,
    pub errors: Vec<String>,
    pub elapsed: Duration,
}

/// Run the load; returns when every thread is done. `stop` ends it early, and so does SIGINT
/// or SIGTERM while a [`netsched_testbed::SignalGuard`] is installed (each thread finishes the
/// request in flight, then stops).
pub fn run_load(spec: &LoadSpec, stop: &AtomicBool) -> Result<LoadResult> {
    let classes = spec.clients.iter().map(|c| c.class).max().unwrap_or(0) + 1;
    let out = Arc::new(Mutex::new(LoadResult {
        sent: vec![0; classes],
        received: vec![0; classes],
        ..Default::default()
    }));
    let start = Instant::now();
    let end = start + spec.duration;
    // Threads of each class that sent all their requests; set once a class is complete.
    let finished: Vec<AtomicUsize> = (0..classes).map(|_| AtomicUsize::new(0)).collect();
    let per_class = spec.clients.iter().fold(vec![0usize; classes], |mut v, c| {
        v[c.class] += spec.threads_per_client;
        v
    });
    let class_done = AtomicBool::new(false);
    let (finished, per_class, class_done) = (&finished, &per_class, &class_done);
    std::thread::scope(|s| {
        for c in &spec.clients {
            for _ in 0..spec.threads_per_client {
                let out = Arc::clone(&out);
                s.spawn(move || {
                    let mut local = LoadResult {
                        sent: vec![0; classes],
                        received: vec![0; classes],
                        ..Default::default()
                    };
                    let stops = [stop, class_done];
                    match client_thread(spec, c, start, end, &stops, &mut local) {
                        Err(e) => local
                            .errors
                            .push(format!("client {} ({}): {e:#}", c.class, c.netns)),
                        Ok(true) if spec.stop_when_a_class_finishes => {
                            let k = finished[c.class].fetch_add(1, Ordering::Relaxed) + 1;
                            if k == per_class[c.class] {
                                class_done.store(true, Ordering::Relaxed);
                            }
                        }
                        Ok(_) => {}
                    }
                    let mut o = out.lock().unwrap();
                    o.samples.extend(local.samples);
                    for i in 0..classes {
                        o.sent[i] += local.sent[i];
                        o.received[i] += local.received[i];
                    }
                    o.errors.extend(local.errors);
                });
            }
        }
    });
    let mut r = Arc::try_unwrap(out)
        .map_err(|_| anyhow!("load threads still hold results"))?
        .into_inner()
        .unwrap();
    r.elapsed = start.elapsed();
    r.samples.sort_by_key(|s| s.done_ns);
    Ok(r)
}

/// One closed-loop connection. `Ok(true)`: it sent all its `max_requests_per_thread`.
fn client_thread(
    spec: &LoadSpec,
    c: &Client,
    start: Instant,
    end: Instant,
    stops: &[&AtomicBool],
    out: &mut LoadResult,
) -> Result<bool> {
    enter_netns(&c.netns)?;
    if let Some(cpu) = spec.cpu {
        // Best effort: a machine with fewer CPUs just runs unpinned.
        let _ = pin_to_cpu(cpu);
    }
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: server\r\nAccept-Encoding: gzip\r\nUser-Agent: netsched-loadgen\r\n\r\n",
        spec.path
    );
    let addr = SocketAddr::from((c.server, spec.port));
    let mut conn: Option<TcpStream> = None;
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    while Instant::now() < end
        && !stops.iter().any(|s| s.load(Ordering::Relaxed))
        && !interrupted()
        && n < spec.max_requests_per_thread
    {
        if conn.is_none() {
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .with_context(|| format!("connect {addr}"))?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(spec.read_timeout))?;
            conn = Some(s);
        }
        let s = conn.as_mut().unwrap();
        let t0 = Instant::now();
        if let Err(e) = s.write_all(req.as_bytes()) {
            // Not sent: not counted; reconnect and go on.
            out.errors.push(format!("send: {e}"));
            conn = None;
            continue;
        }
        out.sent[c.class] += 1;
        n += 1;
        match read_response(s, &mut buf) {
            Ok(keep_alive) => {
                let t1 = Instant::now();
                out.received[c.class] += 1;
                out.samples.push(Sample {
                    class: c.class,
                    done_ns: (t1 - start).as_nanos() as u64,
                    latency_ns: (t1 - t0).as_nanos() as u64,
                });
                if !keep_alive {
                    conn = None;
                }
            }
            Err(e) => {
                out.errors.push(format!("response: {e:#}"));
                conn = None;
            }
        }
    }
    Ok(n >= spec.max_requests_per_thread)
}

fn find(h: &[u8], needle: &[u8]) -> Option<usize> {
    h.windows(needle.len()).position(|w| w == needle)
}

/// Read one HTTP/1.1 response (Content-Length or chunked). Returns whether the connection
/// stays open. Errors name what was wrong.
pub fn read_response(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool> {
    let mut have = 0usize;
    let header_end = loop {
        if let Some(p) = find(&buf[..have], b"\r\n\r\n") {
            break p + 4;
        }
        if have == buf.len() {
            bail!("response headers larger than {} bytes", buf.len());
        }
        let n = s.read(&mut buf[have..])?;
        if n == 0 {
            bail!("connection closed before the response headers");
        }
        have += n;
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!(
            "unexpected status line {:?}",
            head.lines().next().unwrap_or("")
        );
    }
    let keep_alive = !head.contains("connection: close");
    if let Some(cl) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        let mut got = have - header_end;
        while got < cl {
            let n = s.read(&mut buf[..])?;
            if n == 0 {
                bail!("connection closed after {got} of {cl} body bytes");
            }
            got += n;
        }
        return Ok(keep_alive);
    }
    if head.contains("transfer-encoding: chunked") {
        // Chunked body (RFC 9112 §7.1): size line, data, CRLF, ..., "0\r\n\r\n".
        let mut data: Vec<u8> = buf[header_end..have].to_vec();
        let mut pos = 0usize;
        loop {
            // need a full size line
            let line_end = loop {
                if let Some(p) = find(&data[pos..], b"\r\n") {
                    break pos + p;
                }
                read_more(s, &mut data)?;
            };
            let size_txt = String::from_utf8_lossy(&data[pos..line_end]);
            let size = usize::from_str_radix(size_txt.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| anyhow!("bad chunk size {size_txt:?}"))?;
            pos = line_end + 2;
            let need = pos + size + 2;
            while data.len() < need {
                read_more(s, &mut data)?;
            }
            pos = need;
            if size == 0 {
                return Ok(keep_alive);
            }
            if pos > 1 << 20 {
                data.drain(..pos);
                pos = 0;
            }
        }
    }
    bail!("response has neither Content-Length nor chunked encoding")
}

fn read_more(s: &mut TcpStream, data: &mut Vec<u8>) -> Result<()> {
    let mut tmp = [0u8; 16384];
    let n = s.read(&mut tmp)?;
    if n == 0 {
        bail!("connection closed inside a chunked body");
    }
    data.extend_from_slice(&tmp[..n]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn loadgen_reads_content_length_and_chunked_responses() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // Closed loop as in the load generator: one response per request byte.
        let server = std::thread::spawn(move || {
            let (mut c, _) = l.accept().unwrap();
            let mut one = [0u8; 1];
            c.read_exact(&mut one).unwrap();
            c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel")
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
            c.write_all(b"lo").unwrap();
            c.read_exact(&mut one).unwrap();
            c.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
            c.write_all(b"2;x=y\r\nde\r\n0\r\n\r\n").unwrap();
            c.read_exact(&mut one).unwrap();
            c.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
        });
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0u8; 4096];
        s.write_all(b"1").unwrap();
        assert!(read_response(&mut s, &mut buf).unwrap());
        s.write_all(b"2").unwrap();
        assert!(read_response(&mut s, &mut buf).unwrap());
        s.write_all(b"3").unwrap();
        let e = read_response(&mut s, &mut buf).unwrap_err().to_string();
        assert!(e.contains("404"), "{e}");
        server.join().unwrap();
    }
}
