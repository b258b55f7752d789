//! Set-up shared by the daemon's root tests (control isolation, metrics, status page, kernel
//! counters, idle CPU): two namespaces joined by a veth ([`Pair`]), the daemon started on its
//! own thread inside a namespace and stopped ([`Daemon`]), a percentile daemon for a UDP service on [`PORT`] with two classes, an echo
//! server at `10.78.{net}.2`, and a probe from `10.78.{net}.1` that measures the longest gap
//! between two answers (traffic stopping is what a stalled packet path looks like).
//! Not every test uses every part.

#![allow(dead_code)]

use netsched_nfq::config::{parse_cidr, ClassSpec, Config, Deadline, DisciplineKind};
use netsched_nfq::daemon::{run_daemon, Summary};
use netsched_testbed::{enter_netns, Testbed};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PORT: u16 = 9000;

/// Namespaces `ns[0]` = a (10.78.{net}.1/24 on `dev[0]`) and `ns[1]` = b (10.78.{net}.2/24 on
/// `dev[1]`) joined by a veth, on their own testbed (dropping it removes them).
pub struct Pair {
    pub tb: Testbed,
    pub ns: [String; 2],
    pub dev: [String; 2],
}

/// The [`Pair`] of a test, its names tagged `tag`.
pub fn pair(tag: &str, net: u8) -> Pair {
    let mut tb = Testbed::new(tag).unwrap();
    let a = tb.add_ns("a").unwrap();
    let b = tb.add_ns("b").unwrap();
    let (ia, ib) = (tb.ifname("a"), tb.ifname("b"));
    let (addr_a, addr_b) = (format!("10.78.{net}.1/24"), format!("10.78.{net}.2/24"));
    tb.veth((&a, &ia, &addr_a), (&b, &ib, &addr_b)).unwrap();
    Pair {
        tb,
        ns: [a, b],
        dev: [ia, ib],
    }
}

/// How long the daemon may take to be ready.
pub const READY_WITHIN: Duration = Duration::from_secs(20);

/// The daemon (`run_daemon`) on its own thread inside a namespace, ready.
pub struct Daemon {
    /// Set to stop it (what [`Daemon::stop`] does).
    pub stop_flag: Arc<AtomicBool>,
    /// The packet loop's thread id.
    pub tid: i32,
    thread: std::thread::JoinHandle<anyhow::Result<Summary>>,
}

impl Daemon {
    /// Start `cfg` inside namespace `ns` and wait until it is ready (at most
    /// [`READY_WITHIN`]); the error says why it did not start, the daemon stopped.
    pub fn start(ns: &str, cfg: Config) -> Result<Daemon, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (ns, stop) = (ns.to_string(), Arc::clone(&stop));
            std::thread::spawn(move || -> anyhow::Result<_> {
                enter_netns(&ns)?;
                let tid = netsched_sys::thread::gettid();
                Ok(run_daemon(cfg, &stop, |_| {
                    let _ = ready_tx.send(tid);
                })?)
            })
        };
        match ready_rx.recv_timeout(READY_WITHIN) {
            Ok(tid) => Ok(Daemon {
                stop_flag: stop,
                tid,
                thread,
            }),
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                Err(format!("daemon did not start: {:?}", thread.join()))
            }
        }
    }

    /// Stop it and wait for its summary (panics if its thread panicked).
    pub fn stop(self) -> anyhow::Result<Summary> {
        self.stop_flag.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The daemon: percentile discipline, `budget`, classes gold (90th, `10.78.{net}.0/24`) and rest
/// (50th, the default), control socket `socket`.
pub fn daemon_config(socket: PathBuf, net: u8, budget: usize) -> Config {
    let mut c = Config {
        discipline: DisciplineKind::Percentile,
        budget: Some(budget),
        deadline: Deadline::Auto {
            initial: netsched_nfq::MS,
        },
        control_socket: socket,
        ..Config::default()
    };
    c.service.protocol = netsched_nfq::packet::PROTO_UDP;
    c.service.ports = vec![PORT];
    for (name, p) in [("gold", 90), ("rest", 50)] {
        c.classes.push(ClassSpec {
            name: name.into(),
            percentile: p,
        });
    }
    c.table
        .push((parse_cidr(&format!("10.78.{net}.0/24")).unwrap(), 0));
    c.default_class = 1;
    c
}

/// Echo every datagram on `10.78.{net}.2:PORT` inside `ns` until `stop`.
pub fn echo_server(ns: String, net: u8, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    enter_netns(&ns)?;
    let s = UdpSocket::bind((format!("10.78.{net}.2").as_str(), PORT))?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    }
    Ok(())
}

/// Round trips every 2 ms from `ns` until `stop`; returns (answers, largest gap between two
/// answers).
pub fn probe(ns: String, net: u8, stop: Arc<AtomicBool>) -> anyhow::Result<(u64, Duration)> {
    enter_netns(&ns)?;
    let s = UdpSocket::bind(format!("10.78.{net}.1:0"))?;
    s.connect((format!("10.78.{net}.2").as_str(), PORT))?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = [0u8; 64];
    let mut last = Instant::now();
    let mut gap = Duration::ZERO;
    let mut answers = 0u64;
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        n = n.wrapping_add(1);
        s.send(&n.to_be_bytes())?;
        // Answers to earlier (late) probes count as traffic flowing too.
        while let Ok(len) = s.recv(&mut buf) {
            let now = Instant::now();
            gap = gap.max(now - last);
            last = now;
            answers += 1;
            if len == 4 && buf[..4] == n.to_be_bytes() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    gap = gap.max(last.elapsed());
    Ok((answers, gap))
}
