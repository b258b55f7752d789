//! The traffic of `vm-delay --real`: real ICMP echoes (`ping` from iputils) from every guest to
//! the external host at its tier's period, and the simulator's own application data and
//! streams for the run's seed, sent as raw frames at their scheduled times from one thread
//! (`bulk_schedule`, `bulk_traffic`); and what ping printed, parsed (`parse_ping`).

use super::rig::{Bed, EXT_IP};
use crate::experiments::vm_delay::arrivals::SentBurst;
use crate::experiments::vm_delay::{generated_arrivals_with_kind, Kind, VmConfig};
use anyhow::{Context, Result};
use netsched_core::{Nanos, MS, SEC};
use std::path::PathBuf;
use std::process::Stdio;

/// Bytes of a data or stream frame.
pub(super) const BULK_FRAME: usize = 200;

/// Seconds a ping may run past the traffic (its `-w` deadline is the traffic time plus this):
/// long enough to send a probe schedule that slipped, and for the last replies.
pub(super) const PING_GRACE_S: u64 = 2;

/// The first start of an on period of `cycle` counted from `origin` at or after `earliest`
/// (`earliest` itself when the budget is always on): where the simulator's time 0 falls.
pub(super) fn traffic_start(
    origin: Nanos,
    cycle: Option<(Nanos, Nanos)>,
    earliest: Nanos,
) -> Nanos {
    match cycle {
        Some((on, off)) if on + off > 0 => {
            let period = on + off;
            let k = earliest.saturating_sub(origin).div_ceil(period);
            origin + k * period
        }
        _ => earliest,
    }
}

/// What the traffic generator did: frames sent per guest, and its application bursts
/// (bounded: past the capacity they are counted in `overflow`).
pub(super) struct Sent {
    pub frames: Vec<u64>,
    /// Times on `CLOCK_MONOTONIC` (ns).
    pub bursts: Vec<SentBurst>,
    pub overflow: u64,
}

/// The application data and streams of every guest, as the simulator generates them for
/// `cfg` and `seed`: `(time from the start, guest, frames)`, in time order, one entry per
/// burst or stream frame. The sim column simulates the same seed, so the real run and its sim
/// column offer the same application traffic; the probes come from `ping`.
pub(super) fn bulk_schedule(cfg: &VmConfig, seed: u64) -> Result<Vec<(Nanos, usize, u64, Kind)>> {
    let mut out: Vec<(Nanos, usize, u64, Kind)> = Vec::new();
    for (t, v, k) in generated_arrivals_with_kind(cfg, seed)? {
        if k == Kind::Probe {
            continue;
        }
        match out.last_mut() {
            // A burst's frames are offered one after another at one time.
            Some(last) if last.0 == t && last.1 == v && last.3 == k => last.2 += 1,
            _ => out.push((t, v, 1, k)),
        }
    }
    Ok(out)
}

/// Sends `schedule` ([`bulk_schedule`]) from one thread that holds a raw socket in each
/// guest's namespace: each entry at its time (an absolute deadline from `start`, on
/// `CLOCK_MONOTONIC`,
/// slept for with 1 µs of timer slack); an entry found overdue (the thread woke late) goes out
/// at once, with its own frames, and the next entries keep their times.
pub(super) fn bulk_traffic(
    bed: &Bed,
    schedule: Vec<(Nanos, usize, u64, Kind)>,
    dur: Nanos,
    start: Nanos,
) -> Result<Sent> {
    let devs: Vec<(String, String)> = bed
        .guests
        .iter()
        .map(|(ns, _, e)| (ns.clone(), e.clone()))
        .collect();
    let bursts_cap = schedule.iter().filter(|e| e.3 == Kind::Data).count();
    let th = std::thread::Builder::new()
        .name("vm-delay-bulk".into())
        .spawn(move || -> Result<Sent> {
            let mut ports = Vec::new();
            for (ns, dev) in &devs {
                netsched_testbed::enter_netns(ns)?;
                ports.push(netsched_sys::port::Port::open(dev)?);
            }
            let _ = netsched_sys::set_timer_slack(1000);
            let now = netsched_sys::now_ns;
            let mut sent = vec![0u64; devs.len()];
            // Bounded: one entry per scheduled burst, allocated now.
            let mut bursts: Vec<SentBurst> = Vec::with_capacity(bursts_cap);
            let mut frame = [0u8; BULK_FRAME];
            frame[..6].copy_from_slice(&[2, 0, 0, 0, 1, 0]); // nobody's: dropped by ext
            frame[12..14].copy_from_slice(&[0x88, 0xb5]);
            let t = now();
            if t < start {
                std::thread::sleep(std::time::Duration::from_nanos(start - t));
            }
            let t0 = start;
            for &(at, i, n, kind) in &schedule {
                if at >= dur || netsched_testbed::interrupted() {
                    break;
                }
                let due = t0 + at;
                let t = now();
                if t < due {
                    std::thread::sleep(std::time::Duration::from_nanos(due - t));
                }
                if kind == Kind::Data && bursts.len() < bursts_cap {
                    bursts.push(SentBurst {
                        port: i,
                        scheduled: due,
                        sent: now(),
                        frames: n,
                    });
                }
                frame[6..12].copy_from_slice(&[2, 0, 0, 0, 2, i as u8]);
                for _ in 0..n {
                    if matches!(ports[i].send_frame(&frame), Ok(n) if n == frame.len()) {
                        sent[i] += 1;
                    }
                }
            }
            // The traffic time ends at `dur` whatever the schedule's last entry.
            let end = t0 + dur;
            let t = now();
            if t < end && !netsched_testbed::interrupted() {
                std::thread::sleep(std::time::Duration::from_nanos(end - t));
            }
            Ok(Sent {
                frames: sent,
                bursts,
                overflow: 0,
            })
        })
        .context("starting the traffic thread")?;
    th.join()
        .map_err(|_| anyhow::anyhow!("the traffic thread panicked"))?
}

/// The `ping`s of every guest, started: the folder of their outputs, per guest its process
/// and output file, and the probes it was asked to send.
pub(super) struct Pings {
    /// Holds the output files until the pings are read.
    _dir: netsched_testbed::TempDir,
    pub procs: Vec<(u32, PathBuf)>,
    pub counts: Vec<u64>,
}

/// Starts one `ping` per guest of `bed` to the external host, every period of its tier for
/// `dur`, preloading `preload` probes.
pub(super) fn start_pings(
    bed: &mut Bed,
    cfg: &VmConfig,
    dur: Nanos,
    preload: &str,
) -> Result<Pings> {
    let per_tier = cfg.domains / cfg.tiers.len();
    let tmp = netsched_testbed::TempDir::new("vmdly")?;
    let mut pings = Vec::new();
    let mut counts = Vec::new();
    for (i, (ns, _, _)) in bed.guests.iter().enumerate() {
        let period = cfg.tiers[i / per_tier].period_ms;
        let count = ((dur as f64 / MS as f64) / period).floor().max(1.0) as u64;
        let path = tmp.path().join(format!("ping{i}.txt"));
        let file = std::fs::File::create(&path)?;
        let interval = format!("{:.3}", period / 1000.0);
        // `-w`: ping ends by itself and prints its summary (transmitted, received); killed, it
        // prints none and its lost probes could not be told from lost bulk frames.
        let deadline = (dur / SEC + PING_GRACE_S).to_string();
        let pid = bed.tb.spawn_with(
            ns,
            "ping",
            &[
                "-n",
                // Preload 3: ping may catch up up to 3 periods it woke late for. Without it,
                // iputils' ping drops the time it was late, and with a probe in flight and a
                // period of 10 ms it waits up to 10 ms for the reply before sending the next,
                // so its probe rate followed the discipline's delays (High pings sent 461/s
                // under strict priority, 580/s under delay-constrained, of 600/s).
                "-l",
                preload,
                "-c",
                &count.to_string(),
                "-i",
                &interval,
                "-W",
                "1",
                "-w",
                &deadline,
                EXT_IP,
            ],
            "ping",
            Stdio::from(file),
            Stdio::null(),
        )?;
        pings.push((pid, path));
        counts.push(count);
    }
    Ok(Pings {
        _dir: tmp,
        procs: pings,
        counts,
    })
}

/// Per-reply RTTs (ms) and (transmitted, received) of the first `count` probes of one `ping`
/// output. With a deadline (`-w`) a ping that lost probes keeps sending until `count` replies
/// came back or the deadline passed; those extra probes fall after the traffic, so only
/// sequence numbers 1..=`count` are counted. Without the summary line (a ping that was
/// killed) nothing is known to be transmitted: (rtts, 0, 0).
pub(super) fn parse_ping(text: &str, count: u64) -> (Vec<f64>, u64, u64) {
    let mut rtts = Vec::new();
    for l in text.lines() {
        let seq: Option<u64> = l
            .split("icmp_seq=")
            .nth(1)
            .and_then(|t| t.split_whitespace().next()?.parse().ok());
        let rtt: Option<f64> = l
            .split("time=")
            .nth(1)
            .and_then(|t| t.split_whitespace().next()?.parse().ok());
        if let (Some(seq), Some(rtt)) = (seq, rtt) {
            if seq <= count {
                rtts.push(rtt);
            }
        }
    }
    let mut tx = 0;
    if let Some(l) = text.lines().find(|l| l.contains("packets transmitted")) {
        tx = l
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
            .min(count);
    }
    let rx = if tx == 0 { 0 } else { rtts.len() as u64 };
    (rtts, tx, rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn traffic_starts_at_an_on_period_start_counted_from_the_origin() {
        let cycle = Some((14 * MS, 6 * MS));
        // Not before `earliest`, on a whole number of 20 ms cycles from the origin.
        assert_eq!(traffic_start(1_000, cycle, 1_000), 1_000);
        assert_eq!(traffic_start(1_000, cycle, 1_001), 1_000 + 20 * MS);
        assert_eq!(
            traffic_start(1_000, cycle, 1_000 + 45 * MS),
            1_000 + 60 * MS
        );
        assert_eq!(traffic_start(1_000, None, 77 * MS), 77 * MS);
        // A budget off 30 % of the time in slices of 10 ms: on 14 ms, off 6 ms.
        let text = include_str!("../../../../../scenarios/vm-delay.toml");
        let p: Value = serde_json::to_value(toml::from_str::<toml::Value>(text).unwrap()).unwrap();
        let mut cfg = crate::experiments::vm_delay::Setup::from_params(&p)
            .unwrap()
            .base;
        (cfg.cpu_busy, cfg.slice_ms) = (0.3, 10.0);
        assert_eq!(cfg.budget_cycle(), Some((14 * MS, 6 * MS)));
        cfg.cpu_busy = 0.0;
        assert_eq!(cfg.budget_cycle(), None);
    }

    #[test]
    fn ping_output_gives_rtts_and_the_summary_counts() {
        let text = "PING 10.78.0.254 (10.78.0.254) 56(84) bytes of data.\n\
            64 bytes from 10.78.0.254: icmp_seq=1 ttl=64 time=0.081 ms\n\
            64 bytes from 10.78.0.254: icmp_seq=3 ttl=64 time=12.5 ms\n\
            64 bytes from 10.78.0.254: icmp_seq=4 ttl=64 time=0.07 ms\n\n\
            --- 10.78.0.254 ping statistics ---\n\
            4 packets transmitted, 3 received, 25% packet loss, time 3003ms\n";
        // Asked for 3 probes: the 4th, sent after a loss until the deadline, is not counted.
        let (rtts, tx, rx) = parse_ping(text, 3);
        assert_eq!(rtts, vec![0.081, 12.5]);
        assert_eq!((tx, rx), (3, 2));
        let (rtts, tx, rx) = parse_ping(text, 10);
        assert_eq!((rtts.len(), tx, rx), (3, 4, 3));
        // A ping killed before its summary: nothing known to be transmitted.
        let (rtts, tx, rx) = parse_ping(text.split("\n\n").next().unwrap(), 3);
        assert_eq!((rtts.len(), tx, rx), (2, 0, 0));
    }
}
