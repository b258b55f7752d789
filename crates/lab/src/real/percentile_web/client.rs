//! The percentile-web experiment's load generator, the thesis's (P0 §4: per client machine,
//! n threads, each a persistent HTTP/1.1 connection sending m requests back to back and
//! timing each from send to full response), as Rust threads that enter a client's network
//! namespace with `setns`. Responses are read by the workspace's one HTTP/1 reader
//! (`netsched_util::http1`), whose 256 KiB buffer per thread the bodies stream through.
//!
//! Every request counted as sent is either answered (counted as received, with its response
//! time) or recorded as an error with its reason — nothing disappears from the counts. A
//! thread sends no new request after the end time but waits (up to the read timeout) for the
//! one in flight. An interrupted run (SIGINT/SIGTERM) stops the same way.

use anyhow::{anyhow, bail, Context, Result};
use netsched_testbed::{enter_netns, interrupted, pin_to_cpu};
use netsched_util::http1::{Event, Framing, ResponseReader};
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
    let mut reader = ResponseReader::new(256 * 1024);
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
            reader.reset();
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
        match read_response(s, &mut reader) {
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

/// Read one response with the workspace's HTTP/1 reader (`netsched_util::http1`, cheap mode):
/// a 200 on HTTP/1.1 with a Content-Length or chunked body. Returns whether the connection
/// stays open. Errors name what was wrong.
pub fn read_response(s: &mut TcpStream, reader: &mut ResponseReader) -> Result<bool> {
    loop {
        match reader.advance()? {
            Event::Done(h) => return Ok(h.keep_alive),
            Event::Head(h) if h.status != 200 || !h.http11 => {
                bail!(
                    "unexpected status {} (HTTP/1.{})",
                    h.status,
                    u8::from(h.http11)
                )
            }
            Event::Head(h) if h.framing == Framing::Close => {
                bail!("response has neither Content-Length nor chunked encoding")
            }
            Event::Head(_) | Event::Interim(_) => continue,
            Event::NeedMore => {}
        }
        let n = s.read(reader.space()?)?;
        if n == 0 {
            bail!(
                "connection closed after {} body bytes, before the response's end",
                reader.body_bytes()
            );
        }
        reader.filled(n);
    }
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
        let mut reader = ResponseReader::new(4096);
        s.write_all(b"1").unwrap();
        assert!(read_response(&mut s, &mut reader).unwrap());
        s.write_all(b"2").unwrap();
        assert!(read_response(&mut s, &mut reader).unwrap());
        s.write_all(b"3").unwrap();
        let e = read_response(&mut s, &mut reader).unwrap_err().to_string();
        assert!(e.contains("404"), "{e}");
        server.join().unwrap();
    }
}
