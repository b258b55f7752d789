//! Statistics of an arrival process at the guests' vif queues, as a 32-packet vif queue sees
//! it: how the frames of one port come in clumps (frames of one port at one instant), the
//! gaps between a port's clumps, the most frames of one port inside a window of 10 ms to
//! 200 ms, and where in the budget's on/off cycle the frames arrive. Used to compare, for one
//! tier, what the simulator generates, what the real run's traffic generator sent and what
//! the host switch read (docs/vm-delay-real.md, "The simulator's traffic").
//!
//! Pure functions over `(time, port)` lists; cost O(frames · log frames).

use netsched_core::{Nanos, MS};
use serde::Serialize;
use std::ops::Range;

/// Frames of one port at one instant (one generated burst, one `send` loop of the traffic
/// generator, or the frames the switch read from one port in one loop turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clump {
    pub t: Nanos,
    pub port: usize,
    pub frames: u64,
}

/// Windows (ms) for [`ArrivalStats::window_max`].
pub const WINDOWS_MS: [u64; 4] = [10, 50, 100, 200];

/// The most frames of one port inside any window of `ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WindowMax {
    pub ms: u64,
    /// Largest over the ports.
    pub max: u64,
    /// Mean over the ports of each port's largest.
    pub mean: f64,
}

/// One tier's arrival process (see the module header).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ArrivalStats {
    pub frames: u64,
    pub clumps: u64,
    pub clump_mean: f64,
    pub clump_p99: f64,
    pub clump_max: u64,
    /// Frames in clumps larger than the largest application burst (bursts that merged).
    pub merged_frames: u64,
    /// Gaps between consecutive clumps of one port: 5th percentile and median, ms, and the
    /// share (%) shorter than 1 ms and than 10 ms.
    pub gap_p5_ms: f64,
    pub gap_p50_ms: f64,
    pub gaps_under_1ms_pct: f64,
    pub gaps_under_10ms_pct: f64,
    /// Per window of [`WINDOWS_MS`].
    pub window_max: Vec<WindowMax>,
    /// Per window of [`WINDOWS_MS`], the most frames of all the ports together (bursts of
    /// different ports that coincide, as after a stall of a sender that serves them all).
    pub all_ports_window_max: Vec<u64>,
    /// Share (%) of the frames that arrive in the off part of the budget's on/off cycle
    /// (counted from time 0, on first); NaN without a cycle. Independent arrivals: the off
    /// part's share of the cycle.
    pub off_phase_pct: f64,
}

/// Clumps of the arrivals (`(time, port)`, in time order) of the ports in `ports`: frames of
/// one port at the same time form one clump.
pub fn clumps(arrivals: &[(Nanos, usize)], ports: Range<usize>) -> Vec<Clump> {
    let mut out: Vec<Clump> = Vec::new();
    // Index in `out` of each port's latest clump.
    let mut last: Vec<Option<usize>> = vec![None; ports.len()];
    for &(t, port) in arrivals.iter().filter(|a| ports.contains(&a.1)) {
        let slot = &mut last[port - ports.start];
        match *slot {
            Some(i) if out[i].t == t => out[i].frames += 1,
            _ => {
                *slot = Some(out.len());
                out.push(Clump { t, port, frames: 1 });
            }
        }
    }
    out
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    netsched_report::stats::percentile(sorted, q).unwrap_or(f64::NAN)
}

/// The statistics of `clumps` (any order) of the ports in `ports`; `largest_burst`: the largest
/// application burst the traffic sends; `cycle`: the budget's (on, off) periods.
pub fn arrival_stats(
    clumps: &[Clump],
    ports: Range<usize>,
    largest_burst: u64,
    cycle: Option<(Nanos, Nanos)>,
) -> ArrivalStats {
    let mut per_port: Vec<Vec<Clump>> = vec![Vec::new(); ports.len()];
    for c in clumps.iter().filter(|c| ports.contains(&c.port)) {
        per_port[c.port - ports.start].push(*c);
    }
    let mut s = ArrivalStats {
        off_phase_pct: f64::NAN,
        ..ArrivalStats::default()
    };
    let mut sizes = Vec::new();
    let mut gaps = Vec::new();
    let mut off_frames = 0u64;
    for p in per_port.iter_mut() {
        p.sort_by_key(|c| c.t);
        for (i, c) in p.iter().enumerate() {
            s.frames += c.frames;
            s.clump_max = s.clump_max.max(c.frames);
            if c.frames > largest_burst {
                s.merged_frames += c.frames;
            }
            sizes.push(c.frames as f64);
            if i > 0 {
                gaps.push((c.t - p[i - 1].t) as f64 / MS as f64);
            }
            if let Some((on, off)) = cycle {
                if on + off > 0 && c.t % (on + off) >= on {
                    off_frames += c.frames;
                }
            }
        }
    }
    s.clumps = sizes.len() as u64;
    netsched_report::stats::sort(&mut sizes);
    netsched_report::stats::sort(&mut gaps);
    s.clump_mean = netsched_report::stats::mean(&sizes).unwrap_or(f64::NAN);
    s.clump_p99 = quantile(&sizes, 0.99);
    s.gap_p5_ms = quantile(&gaps, 0.05);
    s.gap_p50_ms = quantile(&gaps, 0.5);
    let share = |limit: f64| {
        if gaps.is_empty() {
            f64::NAN
        } else {
            100.0 * gaps.iter().filter(|&&g| g < limit).count() as f64 / gaps.len() as f64
        }
    };
    s.gaps_under_1ms_pct = share(1.0);
    s.gaps_under_10ms_pct = share(10.0);
    for ms in WINDOWS_MS {
        let w = ms * MS;
        let maxes: Vec<u64> = per_port.iter().map(|p| window_max(p, w)).collect();
        s.window_max.push(WindowMax {
            ms,
            max: maxes.iter().copied().max().unwrap_or(0),
            mean: if maxes.is_empty() {
                f64::NAN
            } else {
                maxes.iter().sum::<u64>() as f64 / maxes.len() as f64
            },
        });
    }
    let mut all: Vec<Clump> = per_port.concat();
    all.sort_by_key(|c| c.t);
    s.all_ports_window_max = WINDOWS_MS
        .iter()
        .map(|ms| window_max(&all, ms * MS))
        .collect();
    if cycle.is_some() && s.frames > 0 {
        s.off_phase_pct = 100.0 * off_frames as f64 / s.frames as f64;
    }
    s
}

/// The most frames of one port's clumps (in time order) inside a window `[t, t + w)`.
fn window_max(p: &[Clump], w: Nanos) -> u64 {
    let (mut best, mut sum, mut j) = (0, 0, 0);
    for i in 0..p.len() {
        while j < p.len() && p[j].t < p[i].t + w {
            sum += p[j].frames;
            j += 1;
        }
        best = best.max(sum);
        sum -= p[i].frames;
    }
    best
}

/// One burst of the real run's traffic generator: when it was due, when it was sent (both
/// on the switch's clock: ns since the switch started), how many frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentBurst {
    pub port: usize,
    pub scheduled: Nanos,
    pub sent: Nanos,
    pub frames: u64,
}

/// How late the generator's bursts of the ports in `ports` left against their schedule, and
/// how many went out bunched behind the previous burst of their port.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Lateness {
    pub bursts: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Share (%) of bursts sent more than 1 ms after their schedule.
    pub late_1ms_pct: f64,
    /// Bursts already due when the previous burst of their port was sent: the generator's
    /// catch-up sends them in a later turn, bunched behind it.
    pub caught_up: u64,
}

pub fn lateness(bursts: &[SentBurst], ports: Range<usize>) -> Lateness {
    let mut late = Vec::new();
    let mut prev_sent: Vec<Option<Nanos>> = vec![None; ports.len()];
    let mut caught_up = 0;
    for b in bursts.iter().filter(|b| ports.contains(&b.port)) {
        late.push(b.sent.saturating_sub(b.scheduled) as f64 / MS as f64);
        let prev = &mut prev_sent[b.port - ports.start];
        if prev.is_some_and(|p| b.scheduled <= p) {
            caught_up += 1;
        }
        *prev = Some(b.sent);
    }
    netsched_report::stats::sort(&mut late);
    Lateness {
        bursts: late.len() as u64,
        p50_ms: quantile(&late, 0.5),
        p99_ms: quantile(&late, 0.99),
        max_ms: late.last().copied().unwrap_or(f64::NAN),
        late_1ms_pct: if late.is_empty() {
            f64::NAN
        } else {
            100.0 * late.iter().filter(|&&l| l > 1.0).count() as f64 / late.len() as f64
        },
        caught_up,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clumps_group_one_ports_frames_at_one_time() {
        let a = [(5, 0), (5, 1), (5, 0), (7, 0), (7, 2), (9, 1)];
        let c = clumps(&a, 0..2);
        assert_eq!(
            c,
            vec![
                Clump {
                    t: 5,
                    port: 0,
                    frames: 2
                },
                Clump {
                    t: 5,
                    port: 1,
                    frames: 1
                },
                Clump {
                    t: 7,
                    port: 0,
                    frames: 1
                },
                Clump {
                    t: 9,
                    port: 1,
                    frames: 1
                },
            ]
        );
    }

    #[test]
    fn statistics_of_a_known_sequence() {
        // Port 0: 3 frames at 0, 4 at 5 ms, 20 at 60 ms; port 1: 1 at 12 ms.
        let c = [
            Clump {
                t: 0,
                port: 0,
                frames: 3,
            },
            Clump {
                t: 5 * MS,
                port: 0,
                frames: 4,
            },
            Clump {
                t: 60 * MS,
                port: 0,
                frames: 20,
            },
            Clump {
                t: 12 * MS,
                port: 1,
                frames: 1,
            },
        ];
        let s = arrival_stats(&c, 0..2, 15, Some((10 * MS, 10 * MS)));
        assert_eq!(
            (s.frames, s.clumps, s.clump_max, s.merged_frames),
            (28, 4, 20, 20)
        );
        assert_eq!(s.gap_p50_ms, 5.0); // gaps 5 and 55 ms (nearest rank)
        assert_eq!(s.gaps_under_10ms_pct, 50.0);
        assert_eq!(
            s.window_max[0],
            WindowMax {
                ms: 10,
                max: 20,
                mean: 10.5
            }
        );
        assert_eq!(s.window_max[1].max, 20); // 0..50 ms holds 7, 60 ms alone 20
        assert_eq!(s.window_max[2].max, 27); // 0..100 ms holds all
                                             // Both ports: 0..10 ms holds 7, 60 ms alone 20; 12..62 ms holds 1 + 20.
        assert_eq!(s.all_ports_window_max, vec![20, 21, 28, 28]);
        // Off part (10..20 ms of each 20 ms): only port 1's frame at 12 ms.
        assert!((s.off_phase_pct - 100.0 / 28.0).abs() < 1e-9);
    }

    #[test]
    fn lateness_counts_bursts_bunched_behind_their_predecessor() {
        let b = |port, scheduled, sent| SentBurst {
            port,
            scheduled,
            sent,
            frames: 1,
        };
        // Port 0: on time, then a stall: the second and third were due before the second
        // left, so the third goes out behind it.
        let l = lateness(
            &[
                b(0, 0, 0),
                b(0, MS, 20 * MS),
                b(0, 2 * MS, 20 * MS + 500_000),
                b(1, 0, 0),
            ],
            0..1,
        );
        assert_eq!((l.bursts, l.caught_up), (3, 1));
        assert_eq!(l.max_ms, 19.0);
        assert!((l.late_1ms_pct - 200.0 / 3.0).abs() < 1e-9);
    }
}
