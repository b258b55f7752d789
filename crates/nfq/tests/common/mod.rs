//! Set-up shared by the daemon's UDP-probe root tests (control isolation, metrics): a
//! percentile daemon for a UDP service on [`PORT`] with two classes, an echo server at
//! `10.78.{net}.2`, and a probe from `10.78.{net}.1` that measures the longest gap between two
//! answers (traffic stopping is what a stalled packet path looks like).

use netsched_nfq::config::{parse_cidr, ClassSpec, Config, Deadline, DisciplineKind};
use netsched_testbed::enter_netns;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const PORT: u16 = 9000;

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
