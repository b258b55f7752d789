//! The load of `scripts/bench-filter-vs-nftables`: UDP datagrams from one network namespace to
//! another through whatever sits between them, at a paced rate (or as fast as the sender can),
//! each carrying its send time; the receiver (same process, so the same monotonic clock)
//! counts them and takes each one's one-way latency. Prints one JSON line:
//! `{"sent", "refused", "received", "rx_pps", "p50_us", "p99_us", "samples"}`.
//!
//! Usage: `filter_bench_load --tx-netns NS --rx-netns NS --dst IP [--port 9000] [--size 64]
//!         [--rate PPS|0] [--seconds 3] [--flows 16] [--sport 40000]`
//! `--size` is the Ethernet frame length (UDP payload = size − 42, at least 16). Flow i sends
//! from UDP port `sport + i`. Bounded: at most 600 s, 64 flows, 2 000 000 latency samples
//! (every k-th datagram beyond that).

use netsched_sys::clock::now_ns;
use netsched_sys::mmsg::{recv_datagrams, send_repeated, MAX_BATCH};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MAGIC: &[u8; 4] = b"NFBL";
const MAX_SAMPLES: usize = 2_000_000;

struct Args {
    tx_netns: String,
    rx_netns: String,
    dst: Ipv4Addr,
    port: u16,
    size: usize,
    rate: f64,
    seconds: f64,
    flows: u16,
    sport: u16,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        tx_netns: String::new(),
        rx_netns: String::new(),
        dst: Ipv4Addr::UNSPECIFIED,
        port: 9000,
        size: 64,
        rate: 0.0,
        seconds: 3.0,
        flows: 16,
        sport: 40000,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut it = argv.chunks(2);
    for pair in &mut it {
        let [k, v] = pair else {
            return Err(format!("{}: needs a value", pair[0]));
        };
        let bad = |what: &str| format!("{k} {v:?}: {what}");
        match k.as_str() {
            "--tx-netns" => a.tx_netns = v.clone(),
            "--rx-netns" => a.rx_netns = v.clone(),
            "--dst" => a.dst = v.parse().map_err(|_| bad("not an IPv4 address"))?,
            "--port" => a.port = v.parse().map_err(|_| bad("not a port"))?,
            "--size" => a.size = v.parse().map_err(|_| bad("not a size"))?,
            "--rate" => a.rate = v.parse().map_err(|_| bad("not a rate"))?,
            "--seconds" => a.seconds = v.parse().map_err(|_| bad("not a number"))?,
            "--flows" => a.flows = v.parse().map_err(|_| bad("not a count"))?,
            "--sport" => a.sport = v.parse().map_err(|_| bad("not a port"))?,
            _ => return Err(format!("unknown argument {k}")),
        }
    }
    if a.tx_netns.is_empty() || a.rx_netns.is_empty() || a.dst.is_unspecified() {
        return Err("--tx-netns, --rx-netns and --dst are needed".into());
    }
    if !(64..=1514).contains(&a.size) {
        return Err(format!("--size {}: 64..=1514", a.size));
    }
    if !(0.1..=600.0).contains(&a.seconds) || !(0.0..=1e9).contains(&a.rate) {
        return Err("--seconds 0.1..=600, --rate 0..=1e9".into());
    }
    if !(1..=64).contains(&a.flows) || a.sport.checked_add(a.flows).is_none() {
        return Err(format!("--flows {}: 1..=64 above --sport", a.flows));
    }
    Ok(a)
}

/// Send for `a.seconds`; returns (sent, refused).
fn sender(a: &Args, stop: &AtomicBool) -> std::io::Result<(u64, u64)> {
    netsched_testbed::enter_netns(&a.tx_netns).map_err(std::io::Error::other)?;
    let socks: Vec<UdpSocket> = (0..a.flows)
        .map(|i| {
            let s = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a.sport + i))?;
            s.connect(SocketAddrV4::new(a.dst, a.port))?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()?;
    let mut payload = vec![0u8; (a.size - 42).max(16)];
    payload[..4].copy_from_slice(MAGIC);
    // Paced: small batches, so a batch is no burst; unpaced: full batches.
    let batch = if a.rate > 0.0 { 4 } else { MAX_BATCH };
    let (t0, end) = (now_ns(), now_ns() + (a.seconds * 1e9) as u64);
    let (mut sent, mut refused, mut k) = (0u64, 0u64, 0usize);
    while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        if now >= end {
            break;
        }
        if a.rate > 0.0 {
            let due = t0 + (sent as f64 / a.rate * 1e9) as u64;
            if due > now {
                if due - now > 50_000 {
                    std::thread::sleep(Duration::from_nanos(due - now - 20_000));
                }
                continue;
            }
        }
        payload[4..12].copy_from_slice(&now_ns().to_be_bytes());
        match send_repeated(&socks[k % socks.len()], &payload, batch) {
            Ok(n) => {
                sent += n as u64;
                refused += (batch - n) as u64;
            }
            Err(_) => {
                refused += batch as u64;
                std::thread::yield_now();
            }
        }
        k += 1;
    }
    Ok((sent, refused))
}

/// Receive until `stop`; returns (received, latencies in ns of a sample).
fn receiver(a: &Args, sock: UdpSocket, stop: &AtomicBool) -> (u64, Vec<u64>) {
    let slot = 2048;
    let mut buf = vec![0u8; slot * MAX_BATCH];
    let mut lens = [0usize; MAX_BATCH];
    let (mut received, mut lat) = (0u64, Vec::with_capacity(1 << 16));
    let every = ((a.rate.max(1e6) * a.seconds) as u64 / MAX_SAMPLES as u64).max(1);
    while !stop.load(Ordering::Relaxed) {
        match recv_datagrams(&sock, &mut buf, slot, &mut lens) {
            Ok(n) if n > 0 => {
                let now = now_ns();
                for (i, &len) in lens[..n].iter().enumerate() {
                    let d = &buf[i * slot..i * slot + len.min(slot)];
                    if d.len() < 12 || &d[..4] != MAGIC {
                        continue;
                    }
                    received += 1;
                    if received % every == 0 && lat.len() < MAX_SAMPLES {
                        let ts = u64::from_be_bytes(d[4..12].try_into().unwrap_or([0; 8]));
                        lat.push(now.saturating_sub(ts));
                    }
                }
            }
            _ => {
                let _ = netsched_sys::epoll::poll_in(&[(sock.as_raw_fd(), true)], 2_000_000);
            }
        }
    }
    (received, lat)
}

fn pct(v: &[u64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1e3
}

fn main() {
    let a = match parse() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("filter_bench_load: {e}");
            std::process::exit(2);
        }
    };
    let stop_rx = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (a2, s2) = (a.clone(), stop_rx.clone());
    let rx = std::thread::spawn(move || {
        let sock = netsched_testbed::enter_netns(&a2.rx_netns)
            .map_err(std::io::Error::other)
            .and_then(|()| UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a2.port)))
            .and_then(|s| s.set_nonblocking(true).map(|()| s));
        match sock {
            Ok(s) => {
                let _ = ready_tx.send(Ok(()));
                Ok(receiver(&a2, s, &s2))
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e.to_string()));
                Err(())
            }
        }
    });
    if let Ok(Err(e)) | Err(e) = ready_rx.recv().map_err(|e| e.to_string()) {
        eprintln!("filter_bench_load: receiver: {e}");
        std::process::exit(1);
    }
    let never = AtomicBool::new(false);
    let tx = std::thread::scope(|s| s.spawn(|| sender(&a, &never)).join());
    std::thread::sleep(Duration::from_millis(300));
    stop_rx.store(true, Ordering::Relaxed);
    let Ok(Ok((received, mut lat))) = rx.join() else {
        eprintln!("filter_bench_load: the receiver failed");
        std::process::exit(1);
    };
    let (sent, refused) = match tx {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            eprintln!("filter_bench_load: sender: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("filter_bench_load: the sender panicked");
            std::process::exit(1);
        }
    };
    lat.sort_unstable();
    println!(
        "{{\"sent\": {sent}, \"refused\": {refused}, \"received\": {received}, \"rx_pps\": {:.0}, \"p50_us\": {:.1}, \"p99_us\": {:.1}, \"samples\": {}}}",
        received as f64 / a.seconds,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.len()
    );
}
