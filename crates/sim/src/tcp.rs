//! TCP, segment-granular: a bulk sender and its receiver.
//!
//! Sender: slow start and congestion avoidance (RFC 5681 §3.1, increase by the segments an
//! ACK covers, as Linux `tcp_slow_start` does), fast retransmit / fast recovery NewReno
//! (RFC 6582 §3.2: partial ACKs retransmit the next hole, full ACK deflates to ssthresh,
//! `recover` guards against a second reduction after a timeout, §4), optional SACK loss
//! recovery after RFC 6675 (pipe estimate, `IsLost` = at least DupThresh SACKed segments
//! above), retransmission timeout per RFC 6298 (SRTT/RTTVAR, RTO = SRTT + max(G, 4·RTTVAR),
//! clamped to a configurable minimum, doubled on each expiry, go-back-N after it), a maximum
//! window in segments. RTT is sampled on every ACK that advances `snd_una` from the echoed
//! timestamp (RFC 7323 §4.3), which makes Karn's rule unnecessary.
//!
//! Receiver: cumulative ACK, out-of-order map, delayed ACKs (RFC 5681 §4.2: every `ack_every`
//! full segments or after `delack_timeout`; immediately for out-of-order data and for data
//! that fills a hole), SACK as a bitmap (all holes, not 3 blocks).
//!
//! Simplifications (see `docs/simulator.md`): sequence numbers count segments; every data
//! segment is full sized; no handshake, no receive-window limit other than `max_window`, no
//! Nagle, no limited transmit, no F-RTO. Windows are limited to 128 segments (the scoreboards
//! are `u128` maps relative to `snd_una` / `rcv_nxt`).
//!
//! Cost: O(1) per segment and per ACK (bit operations on the maps); memory ~200 bytes per
//! connection.

use crate::error::TcpConfigError;
use crate::packet::{Kind, NodeId, SimPacket};
use netsched_core::{Nanos, MS, SEC};
use serde::{Deserialize, Serialize};

/// Largest `max_window_segments` the scoreboards can hold.
pub const MAX_WINDOW_LIMIT: u32 = 128;

/// TCP settings of one connection (both ends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// Bytes on the wire of a data segment (headers included).
    pub segment_bytes: u32,
    /// Bytes on the wire of a pure ACK (the paper's 66 B: Ethernet + IP + TCP with timestamps).
    pub ack_bytes: u32,
    /// Maximum window in segments (the paper's 88), at most 128.
    pub max_window_segments: u32,
    /// Initial congestion window (RFC 6928 allows 10; Linux 2.4 used 2).
    pub initial_cwnd: u32,
    pub sack: bool,
    /// Minimum retransmission timeout, ms (RFC 6298 says 1000; Linux uses 200).
    pub min_rto_ms: f64,
    /// Initial RTO before any RTT sample, ms (RFC 6298 §2.1: 1 s).
    pub initial_rto_ms: f64,
    pub delayed_ack: bool,
    /// ACK at least every this many full segments (RFC 5681: 2).
    pub ack_every: u32,
    /// Delayed-ACK timeout, ms (Linux: 40 ms minimum, RFC 1122: at most 500 ms).
    pub delack_timeout_ms: f64,
    /// Duplicate ACKs that trigger fast retransmit (RFC 5681: 3).
    pub dupthresh: u32,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1500,
            ack_bytes: 66,
            max_window_segments: 88,
            initial_cwnd: 2,
            sack: true,
            min_rto_ms: 200.0,
            initial_rto_ms: 1000.0,
            delayed_ack: true,
            ack_every: 2,
            delack_timeout_ms: 40.0,
            dupthresh: 3,
        }
    }
}

impl TcpConfig {
    /// `Err` names the field that is out of range.
    pub fn validate(&self) -> Result<(), TcpConfigError> {
        if self.max_window_segments == 0 || self.max_window_segments > MAX_WINDOW_LIMIT {
            return Err(TcpConfigError::Window {
                value: self.max_window_segments,
                max: MAX_WINDOW_LIMIT,
            });
        }
        if self.segment_bytes < 40 || self.ack_bytes < 40 {
            return Err(TcpConfigError::HeaderBytes {
                segment_bytes: self.segment_bytes,
                ack_bytes: self.ack_bytes,
            });
        }
        if self.initial_cwnd == 0 {
            return Err(TcpConfigError::Zero {
                field: "initial_cwnd",
            });
        }
        if self.ack_every == 0 {
            return Err(TcpConfigError::Zero { field: "ack_every" });
        }
        if self.dupthresh == 0 || self.dupthresh > 64 {
            return Err(TcpConfigError::Dupthresh {
                value: self.dupthresh,
            });
        }
        for (name, v) in [
            ("min_rto_ms", self.min_rto_ms),
            ("initial_rto_ms", self.initial_rto_ms),
            ("delack_timeout_ms", self.delack_timeout_ms),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(TcpConfigError::NotPositive {
                    field: name,
                    value: v,
                });
            }
        }
        Ok(())
    }
}

/// What a TCP end asks the engine to do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TcpOut {
    Send(SimPacket),
    /// (Re)arm the retransmission timer to fire at the given time; `None` stops it.
    Rto(Option<Nanos>),
    /// Arm the delayed-ACK timer; `None` stops it.
    DelAck(Option<Nanos>),
}

/// Counters of one connection.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TcpStats {
    pub segments_sent: u64,
    pub retransmits: u64,
    pub fast_recoveries: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    /// Segments delivered in order to the receiving application.
    pub delivered_segments: u64,
    pub max_cwnd: f64,
}

/// One bulk-transfer connection: the sender at `src`, the receiver at `dst`.
#[derive(Debug, Clone)]
pub struct TcpConn {
    pub id: u32,
    pub src: NodeId,
    pub dst: NodeId,
    pub cfg: TcpConfig,
    /// Segments the application has to send (`u64::MAX`: endless bulk source).
    pub to_send: u64,
    // --- sender
    snd_una: u32,
    snd_nxt: u32,
    snd_max: u32,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    in_recovery: bool,
    recover: u32,
    /// Bit i: segment `snd_una + i` was SACKed.
    sacked: u128,
    /// Bit i: segment `snd_una + i` was retransmitted in this recovery episode.
    rexmitted: u128,
    srtt: Option<f64>,
    rttvar: f64,
    rto: f64,
    rto_armed: bool,
    // --- receiver
    rcv_nxt: u32,
    /// Bit i: segment `rcv_nxt + i` received (bit 0 is always clear).
    ooo: u128,
    unacked_segments: u32,
    ts_recent: Nanos,
    delack_armed: bool,
    pub stats: TcpStats,
}

#[inline]
fn shr(map: u128, by: u32) -> u128 {
    if by >= 128 {
        0
    } else {
        map >> by
    }
}

impl TcpConn {
    pub fn new(id: u32, src: NodeId, dst: NodeId, cfg: TcpConfig, to_send: u64) -> Self {
        let initial_rto = cfg.initial_rto_ms * MS as f64;
        Self {
            id,
            src,
            dst,
            cwnd: cfg.initial_cwnd as f64,
            ssthresh: f64::INFINITY,
            rto: initial_rto,
            cfg,
            to_send,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            sacked: 0,
            rexmitted: 0,
            srtt: None,
            rttvar: 0.0,
            rto_armed: false,
            rcv_nxt: 0,
            ooo: 0,
            unacked_segments: 0,
            ts_recent: 0,
            delack_armed: false,
            stats: TcpStats::default(),
        }
    }

    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }
    pub fn srtt(&self) -> Option<f64> {
        self.srtt
    }
    pub fn snd_una(&self) -> u32 {
        self.snd_una
    }

    fn window(&self) -> u32 {
        (self.cwnd.floor() as u32).clamp(1, self.cfg.max_window_segments)
    }

    fn data_left(&self, seg: u32) -> bool {
        (seg as u64) < self.to_send
    }

    fn is_sacked(&self, seg: u32) -> bool {
        let i = seg.wrapping_sub(self.snd_una);
        i < 128 && (self.sacked >> i) & 1 == 1
    }

    /// RFC 6675 `IsLost`: at least DupThresh SACKed segments above `seg`.
    fn is_lost(&self, seg: u32) -> bool {
        let i = seg.wrapping_sub(self.snd_una);
        i < 127 && (shr(self.sacked, i + 1)).count_ones() >= self.cfg.dupthresh
    }

    /// RFC 6675 `SetPipe`: segments believed in the network.
    fn pipe(&self) -> u32 {
        let mut pipe = 0;
        for seg in self.snd_una..self.snd_max {
            if self.is_sacked(seg) {
                continue;
            }
            let i = seg - self.snd_una;
            let rexmitted = (self.rexmitted >> i) & 1 == 1;
            // A lost original is not in the pipe; its retransmission is (RFC 6675 SetPipe).
            if !self.is_lost(seg) || rexmitted {
                pipe += 1;
            }
        }
        pipe
    }

    fn make_data(&mut self, seg: u32, now: Nanos) -> SimPacket {
        let mut p = SimPacket::new(Kind::TcpData, self.src, self.dst, self.cfg.segment_bytes);
        p.flow = self.id;
        p.seq = seg;
        p.sent_at = now;
        self.stats.segments_sent += 1;
        p
    }

    fn send_segment(&mut self, seg: u32, now: Nanos, out: &mut Vec<TcpOut>) {
        let p = self.make_data(seg, now);
        if seg < self.snd_max {
            self.stats.retransmits += 1;
            let i = seg - self.snd_una;
            if i < 128 {
                self.rexmitted |= 1u128 << i;
            }
        }
        out.push(TcpOut::Send(p));
        if !self.rto_armed {
            self.arm_rto(now, out);
        }
    }

    fn arm_rto(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        self.rto_armed = true;
        out.push(TcpOut::Rto(Some(now + self.rto as Nanos)));
    }

    /// Start (or continue) sending: the application has data, the window allows.
    pub fn start(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        self.send_allowed(now, out);
    }

    fn send_allowed(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        let win_end = self.snd_una + self.cfg.max_window_segments;
        if self.in_recovery && self.cfg.sack {
            // RFC 6675 §5 (NextSeg rules 1 and 2, simplified): lost holes first, then new data.
            let cwnd = self.cwnd.floor().max(1.0) as u32;
            let mut pipe = self.pipe();
            while pipe < cwnd {
                let hole = (self.snd_una..self.snd_max).find(|&s| {
                    !self.is_sacked(s)
                        && self.is_lost(s)
                        && (self.rexmitted >> (s - self.snd_una)) & 1 == 0
                });
                if let Some(seg) = hole {
                    self.send_segment(seg, now, out);
                } else if self.snd_max < win_end && self.data_left(self.snd_max) {
                    let seg = self.snd_max;
                    self.send_segment(seg, now, out);
                    self.snd_max += 1;
                    self.snd_nxt = self.snd_max;
                } else {
                    break;
                }
                pipe += 1;
            }
            return;
        }
        let win = self.window();
        let limit = (self.snd_una + win).min(win_end);
        // NewReno during recovery: cwnd inflation by dupacks lets new data out (RFC 6582 §3.2).
        let flight_limit = if self.in_recovery {
            self.snd_una + (self.cwnd.floor() as u32).min(self.cfg.max_window_segments)
        } else {
            limit
        };
        while self.snd_nxt < flight_limit && self.data_left(self.snd_nxt) {
            let seg = self.snd_nxt;
            self.snd_nxt += 1;
            if seg < self.snd_max && self.is_sacked(seg) {
                continue; // after a timeout, do not resend what the receiver holds
            }
            self.send_segment(seg, now, out);
            if self.snd_nxt > self.snd_max {
                self.snd_max = self.snd_nxt;
            }
        }
    }

    fn sample_rtt(&mut self, rtt: f64) {
        // RFC 6298 §2.2–2.3, alpha = 1/8, beta = 1/4, G = 1 ms.
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2.0;
            }
            Some(srtt) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (srtt - rtt).abs();
                self.srtt = Some(0.875 * srtt + 0.125 * rtt);
            }
        }
        let g = MS as f64;
        let rto = self.srtt.unwrap_or(rtt) + (4.0 * self.rttvar).max(g);
        // RFC 6298 §2.4–2.5: lower bound (configurable), upper bound 60 s.
        self.rto = rto.clamp(self.cfg.min_rto_ms * MS as f64, 60.0 * SEC as f64);
    }

    /// The sender receives an ACK.
    pub fn on_ack(&mut self, pkt: &SimPacket, now: Nanos, out: &mut Vec<TcpOut>) {
        self.stats.acks_received += 1;
        let ack = pkt.ack;
        if ack > self.snd_max || ack < self.snd_una {
            return; // stale or impossible
        }
        if ack > self.snd_una {
            let acked = ack - self.snd_una;
            self.sacked = shr(self.sacked, acked);
            self.rexmitted = shr(self.rexmitted, acked);
            self.snd_una = ack;
            if self.snd_nxt < ack {
                self.snd_nxt = ack;
            }
            if self.cfg.sack {
                self.sacked |= pkt.sack;
            }
            self.sample_rtt(now.saturating_sub(pkt.echo) as f64);
            self.dupacks = 0;
            if self.in_recovery {
                if ack >= self.recover {
                    // Full ACK: deflate (RFC 6582 §3.2 step 3, option 1).
                    self.in_recovery = false;
                    self.cwnd = self.ssthresh;
                    self.rexmitted = 0;
                } else if !self.cfg.sack {
                    // Partial ACK: retransmit the next hole, deflate by the amount acked,
                    // add back one segment (RFC 6582 §3.2 step 3).
                    let seg = self.snd_una;
                    self.send_segment(seg, now, out);
                    self.cwnd = (self.cwnd - acked as f64 + 1.0).max(1.0);
                }
            } else {
                if self.cwnd < self.ssthresh {
                    self.cwnd += acked as f64; // slow start
                } else {
                    self.cwnd += acked as f64 / self.cwnd; // congestion avoidance
                }
                // No growth beyond what the window lets out (Linux `snd_cwnd_clamp`).
                self.cwnd = self.cwnd.min(self.cfg.max_window_segments as f64);
            }
            self.stats.max_cwnd = self.stats.max_cwnd.max(self.cwnd);
            // RFC 6298 §5.2–5.3: stop when all is acked, else restart.
            if self.snd_una == self.snd_max {
                self.rto_armed = false;
                out.push(TcpOut::Rto(None));
            } else {
                self.arm_rto(now, out);
            }
        } else {
            // ack == snd_una
            if self.cfg.sack {
                self.sacked |= pkt.sack;
            }
            if self.snd_max == self.snd_una {
                return;
            }
            self.dupacks += 1;
            if self.in_recovery {
                if !self.cfg.sack {
                    self.cwnd += 1.0; // inflation (RFC 6582 §3.2 step 4)
                }
            } else if self.snd_una >= self.recover {
                let trigger = self.dupacks >= self.cfg.dupthresh
                    || (self.cfg.sack && self.is_lost(self.snd_una));
                if trigger {
                    self.enter_recovery(now, out);
                    return;
                }
            }
        }
        self.send_allowed(now, out);
    }

    fn enter_recovery(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        self.stats.fast_recoveries += 1;
        let flight = (self.snd_max - self.snd_una) as f64;
        self.ssthresh = (flight / 2.0).max(2.0); // RFC 5681 eq. (4)
        self.in_recovery = true;
        self.recover = self.snd_max;
        self.rexmitted = 0;
        let seg = self.snd_una;
        self.send_segment(seg, now, out);
        if self.cfg.sack {
            self.cwnd = self.ssthresh;
            self.send_allowed(now, out);
        } else {
            self.cwnd = self.ssthresh + self.cfg.dupthresh as f64;
            self.send_allowed(now, out);
        }
    }

    /// The retransmission timer fired.
    pub fn on_rto(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        self.rto_armed = false;
        if self.snd_una == self.snd_max {
            return;
        }
        self.stats.timeouts += 1;
        let flight = (self.snd_max - self.snd_una) as f64;
        self.ssthresh = (flight / 2.0).max(2.0); // RFC 5681 eq. (4)
        self.cwnd = 1.0;
        self.in_recovery = false;
        self.dupacks = 0;
        self.recover = self.snd_max; // RFC 6582 §4
        self.rexmitted = 0;
        self.snd_nxt = self.snd_una;
        self.rto = (self.rto * 2.0).min(60.0 * SEC as f64); // RFC 6298 §5.5
        self.send_allowed(now, out);
        if !self.rto_armed {
            self.arm_rto(now, out);
        }
    }

    fn make_ack(&mut self, now: Nanos) -> SimPacket {
        let _ = now;
        let mut p = SimPacket::new(Kind::TcpAck, self.dst, self.src, self.cfg.ack_bytes);
        p.flow = self.id;
        p.ack = self.rcv_nxt;
        p.echo = self.ts_recent;
        p.sent_at = now;
        if self.cfg.sack {
            p.sack = self.ooo;
        }
        self.stats.acks_sent += 1;
        self.unacked_segments = 0;
        p
    }

    fn ack_now(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        let p = self.make_ack(now);
        out.push(TcpOut::Send(p));
        if self.delack_armed {
            self.delack_armed = false;
            out.push(TcpOut::DelAck(None));
        }
    }

    /// The receiver gets a data segment. Returns the segments newly delivered in order.
    pub fn on_data(&mut self, pkt: &SimPacket, now: Nanos, out: &mut Vec<TcpOut>) -> u32 {
        let seg = pkt.seq;
        if seg < self.rcv_nxt {
            self.ts_recent = pkt.sent_at;
            self.ack_now(now, out); // duplicate: ACK at once (RFC 5681 §4.2)
            return 0;
        }
        let off = seg - self.rcv_nxt;
        if off >= 128 {
            return 0; // beyond any window we allow; cannot happen with max_window ≤ 128
        }
        if off > 0 {
            self.ooo |= 1u128 << off;
            self.ack_now(now, out); // out of order: immediate duplicate ACK
            return 0;
        }
        let had_hole = self.ooo != 0;
        if self.unacked_segments == 0 || had_hole {
            // TSecr: the earliest unacknowledged in-order segment (RFC 7323 §4.3).
            self.ts_recent = pkt.sent_at;
        }
        self.ooo |= 1;
        let advanced = (!self.ooo).trailing_zeros();
        self.ooo = shr(self.ooo, advanced);
        self.rcv_nxt += advanced;
        self.stats.delivered_segments += advanced as u64;
        self.unacked_segments += 1;
        if had_hole || !self.cfg.delayed_ack || self.unacked_segments >= self.cfg.ack_every {
            self.ack_now(now, out);
        } else if !self.delack_armed {
            self.delack_armed = true;
            let at = now + (self.cfg.delack_timeout_ms * MS as f64) as Nanos;
            out.push(TcpOut::DelAck(Some(at)));
        }
        advanced
    }

    /// The delayed-ACK timer fired.
    pub fn on_delack(&mut self, now: Nanos, out: &mut Vec<TcpOut>) {
        self.delack_armed = false;
        if self.unacked_segments > 0 {
            let p = self.make_ack(now);
            out.push(TcpOut::Send(p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(sack: bool) -> TcpConn {
        let cfg = TcpConfig {
            sack,
            delayed_ack: false,
            initial_cwnd: 4,
            ..TcpConfig::default()
        };
        TcpConn::new(0, 1, 2, cfg, u64::MAX)
    }

    fn sent(out: &[TcpOut]) -> Vec<u32> {
        out.iter()
            .filter_map(|o| match o {
                TcpOut::Send(p) if p.kind == Kind::TcpData => Some(p.seq),
                _ => None,
            })
            .collect()
    }

    fn ack(a: u32, sack: u128, echo: Nanos) -> SimPacket {
        let mut p = SimPacket::new(Kind::TcpAck, 2, 1, 66);
        p.ack = a;
        p.sack = sack;
        p.echo = echo;
        p
    }

    #[test]
    fn slow_start_doubles_per_round_trip() {
        let mut c = conn(false);
        let mut out = Vec::new();
        c.start(0, &mut out);
        assert_eq!(sent(&out), vec![0, 1, 2, 3]);
        out.clear();
        for a in 1..=4 {
            c.on_ack(&ack(a, 0, 0), 10 * MS, &mut out);
        }
        assert_eq!(c.cwnd(), 8.0);
        assert_eq!(sent(&out), (4..12).collect::<Vec<_>>());
    }

    /// RFC 6582: three dupacks → retransmit snd_una, cwnd = ssthresh + 3; partial ACK →
    /// retransmit the next hole; full ACK → cwnd = ssthresh.
    #[test]
    fn newreno_fast_retransmit_and_partial_ack() {
        let mut c = conn(false);
        let mut out = Vec::new();
        c.cwnd = 10.0;
        c.start(0, &mut out); // 0..10 in flight
        out.clear();
        // segments 0 and 2 lost; 1,3,4 arrive → dupacks for 0
        for _ in 0..3 {
            c.on_ack(&ack(0, 0, 0), MS, &mut out);
        }
        assert_eq!(sent(&out)[0], 0, "fast retransmit of segment 0");
        assert_eq!(c.stats.fast_recoveries, 1);
        assert_eq!(c.ssthresh, 5.0);
        assert_eq!(c.cwnd, 8.0);
        out.clear();
        c.on_ack(&ack(2, 0, MS), 2 * MS, &mut out); // partial ACK
        assert_eq!(sent(&out)[0], 2, "partial ACK retransmits the next hole");
        assert!(c.in_recovery);
        out.clear();
        c.on_ack(&ack(10, 0, MS), 3 * MS, &mut out); // full ACK
        assert!(!c.in_recovery);
        assert_eq!(c.cwnd, 5.0);
    }

    /// RFC 6675: with SACK, holes below at least 3 SACKed segments are lost and are
    /// retransmitted in one round, not one per RTT.
    #[test]
    fn sack_retransmits_all_lost_holes() {
        let mut c = conn(true);
        let mut out = Vec::new();
        c.cwnd = 10.0;
        c.start(0, &mut out);
        out.clear();
        // Receiver holds 1, 3..10 (0 and 2 lost): sack bit i = segment ack+i.
        let map: u128 = (0b1111_1111 << 3) | 0b10;
        c.on_ack(&ack(0, map, 0), MS, &mut out);
        let s = sent(&out);
        assert!(s.contains(&0) && s.contains(&2), "both holes resent: {s:?}");
        assert_eq!(c.stats.retransmits, 2);
    }

    #[test]
    fn rto_follows_rfc6298_and_backs_off() {
        let mut c = conn(false);
        let mut out = Vec::new();
        c.start(0, &mut out);
        c.on_ack(&ack(1, 0, 0), 100 * MS, &mut out);
        // first sample 100 ms: srtt 100, rttvar 50, rto = 100 + 200 = 300 ms
        assert!((c.rto - 300.0 * MS as f64).abs() < 1.0);
        c.on_rto(500 * MS, &mut out);
        assert!((c.rto - 600.0 * MS as f64).abs() < 1.0);
        assert_eq!(c.cwnd, 1.0);
        assert_eq!(c.stats.timeouts, 1);
    }

    #[test]
    fn receiver_delays_acks_and_acks_holes_at_once() {
        let cfg = TcpConfig::default();
        let mut c = TcpConn::new(0, 1, 2, cfg, u64::MAX);
        let mut out = Vec::new();
        let mut d = SimPacket::new(Kind::TcpData, 1, 2, 1500);
        d.seq = 0;
        c.on_data(&d, 0, &mut out);
        assert!(matches!(out[..], [TcpOut::DelAck(Some(_))]));
        d.seq = 1;
        c.on_data(&d, 1, &mut out);
        assert!(matches!(out[1], TcpOut::Send(p) if p.ack == 2));
        out.clear();
        d.seq = 3; // hole at 2
        c.on_data(&d, 2, &mut out);
        assert!(matches!(out[0], TcpOut::Send(p) if p.ack == 2 && p.sack == 0b10));
        out.clear();
        d.seq = 2; // fills the hole: immediate ACK of 4
        assert_eq!(c.on_data(&d, 3, &mut out), 2);
        assert!(matches!(out[0], TcpOut::Send(p) if p.ack == 4 && p.sack == 0));
    }

    #[test]
    fn config_errors_name_the_field() {
        let cfg = TcpConfig {
            max_window_segments: 500,
            ..TcpConfig::default()
        };
        let e = cfg.validate().unwrap_err();
        assert!(matches!(e, TcpConfigError::Window { .. }), "{e:?}");
        assert!(e.to_string().starts_with("max_window_segments"), "{e}");
    }
}
