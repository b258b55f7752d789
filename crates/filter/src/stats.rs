//! What the filter counts, and the accounting identity every stats line is checked against:
//! `received = forwarded + dropped + queued`, where `queued` is every packet inside the filter
//! (with workers, held for order, or waiting to be sent).

use crate::pipeline::PipelineStats;
use crate::verdict::DropReason;
use netsched_sys::{PortBackend, XdpStats};
use serde::Serialize;
use std::collections::BTreeMap;

/// One stats line (JSON), also the final line.
#[derive(Debug, Clone, Serialize)]
pub struct FilterStats {
    /// Time since the engine started, nanoseconds (was `elapsed_ms`).
    pub elapsed_ns: u64,
    /// Frames taken from the input interface (oversize ones included).
    pub received: u64,
    /// Frames the output interface took (or accepted with `--output none`: see `no_output`).
    pub forwarded: u64,
    /// Frames not forwarded, all reasons.
    pub dropped: u64,
    /// Frames inside the filter now.
    pub queued: u64,
    /// `received == forwarded + dropped + queued`.
    pub identity_holds: bool,
    /// Stats lines on which the identity did not hold (0 unless there is a bug).
    pub identity_failures: u64,
    pub drops: BTreeMap<DropReason, u64>,
    /// Forwarded frames per rule class (`action = "class"`).
    pub forwarded_by_class: BTreeMap<u32, u64>,
    /// Forwarded frames in which a signature matched (`--on-signature mark`).
    pub signature_marked: u64,
    /// Frames the kernel dropped before the filter saw them (socket queue full; on `xdp` the
    /// input socket's `rx_dropped + rx_ring_full`).
    pub kernel_drops: u64,
    /// Send attempts the output refused for now (retried).
    pub tx_retries: u64,
    /// Swaps of the rule set done.
    pub rule_swaps: u64,
    /// Single-rule edits done (`rule add | insert | delete`).
    pub rule_edits: u64,
    /// The port backend of the input interface (`xdp`, `tpacket` or `packet`).
    pub port: PortBackend,
    /// Bytes of ring memory both ports mapped (0 for `packet`).
    pub ring_bytes: u64,
    /// The `xdp` backend's `XDP_STATISTICS` of the input and the output port since open
    /// (zeros on other backends or without an output). The input's receive losses are also
    /// in `kernel_drops`.
    pub xdp_drops: [XdpStats; 2],
    /// Times the watchdog found the packet thread without progress for
    /// `watchdog::STALL` (0 unless it hangs; `crate::watchdog`).
    pub packet_thread_stalls: u64,
    #[serde(flatten)]
    pub pipeline: PipelineStats,
}

/// The engine's running totals.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub received: u64,
    pub forwarded: u64,
    pub drops: BTreeMap<DropReason, u64>,
    pub forwarded_by_class: BTreeMap<u32, u64>,
    pub signature_marked: u64,
    pub kernel_drops: u64,
    pub tx_retries: u64,
    pub rule_swaps: u64,
    pub rule_edits: u64,
    pub identity_failures: u64,
    pub port: PortBackend,
    pub ring_bytes: u64,
    pub xdp_drops: [XdpStats; 2],
    pub packet_thread_stalls: u64,
}

impl Totals {
    pub fn drop(&mut self, reason: DropReason, n: u64) {
        if n > 0 {
            *self.drops.entry(reason).or_default() += n;
        }
    }

    pub fn dropped(&self) -> u64 {
        self.drops.values().sum()
    }

    /// A stats line with `queued` packets inside; checks (and counts a failure of) the identity.
    pub fn line(&mut self, elapsed_ns: u64, queued: u64, pipeline: PipelineStats) -> FilterStats {
        let dropped = self.dropped();
        let holds = self.received == self.forwarded + dropped + queued;
        if !holds {
            self.identity_failures += 1;
        }
        FilterStats {
            elapsed_ns,
            received: self.received,
            forwarded: self.forwarded,
            dropped,
            queued,
            identity_holds: holds,
            identity_failures: self.identity_failures,
            drops: self.drops.clone(),
            forwarded_by_class: self.forwarded_by_class.clone(),
            signature_marked: self.signature_marked,
            kernel_drops: self.kernel_drops,
            tx_retries: self.tx_retries,
            rule_swaps: self.rule_swaps,
            rule_edits: self.rule_edits,
            port: self.port,
            ring_bytes: self.ring_bytes,
            xdp_drops: self.xdp_drops,
            packet_thread_stalls: self.packet_thread_stalls,
            pipeline,
        }
    }
}
