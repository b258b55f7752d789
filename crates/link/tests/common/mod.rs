//! Set-up shared by the link engine's root tests: a line of three namespaces,
//! `a` (10.N.0.1) — `m` (the engine, two bare ports) — `b` (10.N.0.2, reached through `m`),
//! and the engine with its `/metrics` listener on a thread inside `m`. Each test file uses a
//! subset.

#![allow(dead_code)]

use netsched_link::engine::{parse_qdisc, DirConfig, Engine, EngineConfig, EngineStats};
use netsched_testbed::{enter_netns, Testbed};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The three namespaces and the engine's two ports, on a fresh [`Testbed`] tagged `prefix`.
pub struct Line {
    pub tb: Testbed,
    pub a: String,
    pub m: String,
    #[allow(dead_code)] // Not every test binary reads it.
    pub b: String,
    /// The engine's port toward `a`, and toward `b` (both in `m`).
    pub ma: String,
    pub mb: String,
}

/// Build `a — m — b` with `a` = `10.{net}.0.1/24` and `b` = `10.{net}.0.2/24`.
pub fn line(prefix: &str, net: u8) -> Line {
    let mut tb = Testbed::new(prefix).unwrap();
    let a = tb.add_ns("a").unwrap();
    let m = tb.add_ns("m").unwrap();
    let b = tb.add_ns("b").unwrap();
    let (ia, ma, mb, ib) = (
        tb.ifname("a"),
        tb.ifname("ma"),
        tb.ifname("mb"),
        tb.ifname("b"),
    );
    tb.veth((&a, &ia, &format!("10.{net}.0.1/24")), (&m, &ma, ""))
        .unwrap();
    tb.veth((&m, &mb, ""), (&b, &ib, &format!("10.{net}.0.2/24")))
        .unwrap();
    Line {
        tb,
        a,
        m,
        b,
        ma,
        mb,
    }
}

/// [`line`] with veths of `queues` receive and transmit queues each (`numrxqueues`).
#[allow(dead_code)] // Only the port backend tests use several queues.
pub fn line_with_queues(prefix: &str, net: u8, queues: u32) -> Line {
    let mut tb = Testbed::new(prefix).unwrap();
    let a = tb.add_ns("a").unwrap();
    let m = tb.add_ns("m").unwrap();
    let b = tb.add_ns("b").unwrap();
    let (ia, ma, mb, ib) = (
        tb.ifname("a"),
        tb.ifname("ma"),
        tb.ifname("mb"),
        tb.ifname("b"),
    );
    let q = queues.to_string();
    for ((ns_x, x, addr_x), (ns_y, y, addr_y)) in [
        (
            (&a, &ia, format!("10.{net}.0.1/24")),
            (&m, &ma, String::new()),
        ),
        (
            (&m, &mb, String::new()),
            (&b, &ib, format!("10.{net}.0.2/24")),
        ),
    ] {
        let out = std::process::Command::new("ip")
            .args([
                "link",
                "add",
                x,
                "netns",
                ns_x,
                "numrxqueues",
                &q,
                "numtxqueues",
                &q,
            ])
            .args(["type", "veth", "peer", "name", y, "netns", ns_y])
            .args(["numrxqueues", &q, "numtxqueues", &q])
            .output()
            .unwrap();
        assert!(out.status.success(), "ip link add {x}: {out:?}");
        for (ns, dev, addr) in [(ns_x, x, &addr_x), (ns_y, y, &addr_y)] {
            if !addr.is_empty() {
                tb.exec(ns, "ip", &["addr", "add", addr, "dev", dev])
                    .unwrap();
            }
            tb.exec(ns, "ip", &["link", "set", dev, "up"]).unwrap();
            let _ = tb.exec(
                ns,
                "ethtool",
                &[
                    "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
                ],
            );
        }
    }
    Line {
        tb,
        a,
        m,
        b,
        ma,
        mb,
    }
}

/// One direction: rate (bits/s, `None` = unshaped), one-way delay (ms), qdisc spec.
#[allow(dead_code)] // Not every test binary uses it.
pub fn dir(rate_bps: Option<u64>, delay_ms: u64, qdisc: &str) -> DirConfig {
    DirConfig {
        rate_bps,
        delay: delay_ms * netsched_core::MS,
        qdisc: parse_qdisc(qdisc).unwrap(),
    }
}

/// The engine between `line`'s two ports, small pools, no stats, no busy poll.
#[allow(dead_code)] // Not every test binary uses it.
pub fn engine_config(line: &Line, ab: DirConfig, ba: DirConfig) -> EngineConfig {
    EngineConfig {
        dev_a: line.ma.clone(),
        dev_b: line.mb.clone(),
        ab,
        ba,
        pool: 1024,
        delay_line: 1024,
        stats_interval: None,
        busy_poll: false,
        spin: 0,
        port: netsched_sys::PortOptions::default(),
    }
}

/// The engine of `cfg` and its `/metrics` listener (127.0.0.1, a free port) on a thread of
/// their own inside namespace `ns`, as `netsched link --metrics` runs them. Returns the thread
/// (it ends with the final counters once `stop` is set) and the listener's address; panics
/// with the reason when the engine has not started within 20 s.
#[allow(dead_code)] // Not every test that shares this module serves metrics.
pub fn engine_with_metrics(
    ns: &str,
    cfg: EngineConfig,
    stop: Arc<AtomicBool>,
) -> (JoinHandle<anyhow::Result<EngineStats>>, SocketAddr) {
    let (tx, rx) = mpsc::channel();
    let engine = {
        let (stop, ns) = (Arc::clone(&stop), ns.to_string());
        std::thread::spawn(move || -> anyhow::Result<_> {
            let opened = (|| {
                enter_netns(&ns)?;
                let mut e = Engine::open(&cfg)?;
                let srv =
                    netsched_link::metrics::serve("127.0.0.1:0".parse().unwrap(), &cfg, &mut e)?;
                anyhow::Ok((e, srv))
            })();
            let (mut e, srv) = match opened {
                Ok(x) => x,
                Err(err) => {
                    let _ = tx.send(Err(format!("{err:#}")));
                    return Err(err);
                }
            };
            let _ = tx.send(Ok(srv.addr()));
            let r = e.run(&|| stop.load(Ordering::Relaxed), None, None);
            drop(srv);
            Ok(r?)
        })
    };
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(addr)) => (engine, addr),
        other => {
            stop.store(true, Ordering::Relaxed);
            panic!("engine did not start: {other:?} {:?}", engine.join());
        }
    }
}
