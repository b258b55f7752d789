//! What the switch counts: per guest port, for the uplink, and one snapshot of both (the
//! `--stats` line, `ctl show --json`, what `/metrics` publishes). Every frame read from a
//! guest port is accounted on it: `received = forwarded + dropped (per reason) + queued`.

use serde::Serialize;

/// Counters of one guest port. Identity: `received == forwarded + dropped() + queued`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PortStats {
    pub dev: String,
    pub tier: u32,
    /// DRR quantum multiplier, WF2Q+ weight.
    pub weight: u32,
    /// Frames read from the guest (valid or not).
    pub received: u64,
    /// Sent on the uplink.
    pub forwarded: u64,
    pub forwarded_bytes: u64,
    /// vif queue full on arrival.
    pub dropped_queue_full: u64,
    /// Shorter than an Ethernet header.
    pub dropped_malformed: u64,
    /// Longer than a pool slot (offloads on in the guest).
    pub dropped_oversize: u64,
    /// The uplink refused the frame (an error other than "busy").
    pub dropped_send_error: u64,
    /// Queued when the port's interface disappeared.
    pub dropped_removed: u64,
    /// Queued at shutdown.
    pub dropped_shutdown: u64,
    /// Dropped by the discipline itself (EDF late items; none with the defaults).
    pub dropped_discipline: u64,
    /// In the vif queue or the uplink's send batch.
    pub queued: u64,
    /// Frames the kernel dropped before we read them (socket buffer full): not in `received`.
    pub kernel_drops: u64,
    /// Frames delivered to this guest from the uplink.
    pub delivered: u64,
    /// Delivery to this guest failed (busy or gone).
    pub deliver_failed: u64,
    /// Longest run of round starts that passed over this backlogged port (delay_constrained).
    pub max_rounds_passed: u64,
    /// The proven bound on that run (`bitmap_len + n − 2`), 0 for other disciplines.
    pub bound_rounds: u64,
    /// The interface disappeared; the port is closed.
    pub removed: bool,
}

impl PortStats {
    pub fn dropped(&self) -> u64 {
        self.dropped_queue_full
            + self.dropped_malformed
            + self.dropped_oversize
            + self.dropped_send_error
            + self.dropped_removed
            + self.dropped_shutdown
            + self.dropped_discipline
    }
    /// `received == forwarded + dropped + queued`.
    pub fn identity_holds(&self) -> bool {
        self.received == self.forwarded + self.dropped() + self.queued
    }
}

/// Counters of the uplink (return path). Identity: `received == delivered_unicast + flooded
/// + dropped_malformed + dropped_oversize + dropped_no_port`.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct UplinkStats {
    pub dev: String,
    pub received: u64,
    /// To the one port that learned the destination MAC.
    pub delivered_unicast: u64,
    /// Broadcast, multicast or unknown unicast: sent to every guest port.
    pub flooded: u64,
    pub dropped_malformed: u64,
    pub dropped_oversize: u64,
    /// Learned port since removed, or no guest port left.
    pub dropped_no_port: u64,
    pub kernel_drops: u64,
    /// Uplink sends that failed with an error other than "busy".
    pub send_errors: u64,
}

/// One snapshot, a `--stats` JSON line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SwitchStats {
    /// Time since start, nanoseconds (was `t`, seconds as a float).
    pub elapsed_ns: u64,
    /// CPU time of the packet thread, nanoseconds (was `cpu_s`, seconds as a float).
    pub cpu_ns: u64,
    pub discipline: String,
    /// Round starts (delay_constrained); dequeues otherwise.
    pub rounds: u64,
    /// Times the discipline was rebuilt for a runtime tier or weight change.
    pub rebuilds: u64,
    /// Budget on-time lost while frames waited for it: the packet thread woke more than the
    /// budget's 1 ms of credit after the next frame was due (a busy host), seconds. The
    /// offered load the discipline saw rose by that share of the on-time. Nanoseconds (was
    /// `budget_lost_s`, seconds as a float).
    pub budget_lost_ns: u64,
    pub mac_learned: u64,
    /// New source addresses not learned because the table was full.
    pub mac_table_full: u64,
    pub stats_dropped: u64,
    /// The port backend in use (`xdp`, `tpacket`, `tpacket_v3` or `packet`).
    pub port_backend: netsched_sys::PortBackend,
    /// Bytes of ring memory all open ports mapped (0 for `packet`).
    pub ring_bytes: u64,
    /// The `xdp` backend's AF_XDP drop and error counters (`XDP_STATISTICS`), summed over the
    /// open ports (zeros on other backends). Receive losses are also in `kernel_drops`.
    pub xdp_drops: netsched_sys::XdpStats,
    /// Blocking waits for input or a timer that returned (sleeps, not polling-window looks).
    pub wakeups: u64,
    /// `wakeups` per frame received (guest ports and uplink); 0 before the first frame.
    pub wakeups_per_frame: f64,
    pub uplink: UplinkStats,
    pub ports: Vec<PortStats>,
    /// Where a frame's time goes, stage by stage (`--trace-latency`; absent when off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::latency::LatencyReport>,
}

impl SwitchStats {
    /// Every port's identity holds.
    pub fn identity_holds(&self) -> bool {
        self.ports.iter().all(PortStats::identity_holds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_line_names_every_number_with_its_unit() {
        let s = SwitchStats {
            elapsed_ns: 1_500_000_000,
            wakeups_per_frame: 0.25,
            ports: vec![PortStats::default()],
            ..SwitchStats::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}\n{v}");
    }

    #[test]
    fn identity_counts_every_drop_reason() {
        let mut s = PortStats {
            received: 10,
            forwarded: 3,
            dropped_queue_full: 2,
            dropped_malformed: 1,
            dropped_oversize: 1,
            dropped_removed: 1,
            dropped_shutdown: 1,
            queued: 1,
            ..PortStats::default()
        };
        assert!(s.identity_holds());
        s.forwarded += 1;
        assert!(!s.identity_holds());
    }
}
