//! Adaptive polling must not burn a core when idle: after a burst of traffic (which opens the
//! `busy_poll` window) the daemon's packet thread must go back to sleeping in `poll`. Root;
//! one scratch namespace; ~5 s.
//!
//! Bound: the thread's CPU time over 3 idle seconds below 10% of them. Sleeping, it wakes
//! every 10 ms for housekeeping (measured ≈ 0.5% of a core, docs/bench-nfq.md); a loop that
//! kept spinning would use its whole share of a core — even on this 2-core machine at load 10
//! that is ≈ 2/11 ≈ 18%, and close to 100% when less loaded.

mod common;

use netsched_nfq::config::{ClassSpec, Config, DisciplineKind};
use netsched_testbed::{enter_netns, privileged_test_allowed, Testbed};
use std::net::UdpSocket;
use std::time::{Duration, Instant};

const PORT: u16 = 9200;

/// utime + stime of thread `tid` of this process, seconds.
fn thread_cpu_s(tid: i32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let rest = text.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / netsched_sys::clock::clock_ticks_per_second() as f64
}

#[test]
fn idle_daemon_sleeps_after_traffic() {
    if !privileged_test_allowed("idle_daemon_sleeps_after_traffic") {
        return;
    }
    let mut tb = Testbed::new("nfqidl").unwrap();
    let ns = tb.add_ns("a").unwrap();
    let dir = netsched_testbed::TempDir::new("nfqidl").unwrap();
    let mut cfg = Config {
        discipline: DisciplineKind::Percentile,
        control_socket: dir.path().join("ctl.sock"),
        ..Config::default()
    };
    cfg.service.protocol = netsched_nfq::packet::PROTO_UDP;
    cfg.service.ports = vec![PORT];
    cfg.classes.push(ClassSpec {
        name: "all".into(),
        percentile: 90,
    });
    assert!(cfg.busy_poll > 0, "the default polls adaptively");
    let daemon = common::Daemon::start(&ns, cfg).unwrap_or_else(|e| panic!("{e}"));
    let tid = daemon.tid;
    // A burst of datagrams through the daemon (loopback of the namespace), then silence.
    let sent = {
        let ns = ns.clone();
        std::thread::spawn(move || -> anyhow::Result<u64> {
            enter_netns(&ns)?;
            let sink = UdpSocket::bind(("127.0.0.1", PORT))?;
            sink.set_read_timeout(Some(Duration::from_secs(2)))?;
            let s = UdpSocket::bind("127.0.0.1:0")?;
            let mut got = 0;
            let mut buf = [0u8; 64];
            for _ in 0..200 {
                s.send_to(b"ping", ("127.0.0.1", PORT))?;
                if sink.recv(&mut buf).is_ok() {
                    got += 1;
                }
            }
            Ok(got)
        })
        .join()
        .unwrap()
        .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let (c0, t0) = (thread_cpu_s(tid), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let (c1, wall) = (thread_cpu_s(tid), t0.elapsed().as_secs_f64());
    let summary = daemon.stop().expect("daemon");
    let share = (c1 - c0) / wall;
    eprintln!(
        "{sent} of 200 datagrams through the daemon ({} packets seen); idle CPU {:.1}% of a core",
        summary.counters.packets,
        share * 100.0
    );
    assert_eq!(sent, 200);
    assert!(
        summary.counters.packets >= 200,
        "the burst crossed the daemon"
    );
    assert!(
        share < 0.10,
        "idle daemon used {:.1}% of a core",
        share * 100.0
    );
}
