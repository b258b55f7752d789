//! The port layer's metric families, written alike by every data plane that reports its ports
//! one by one (link, filter): the backend in use, the ring memory, and each port's AF_XDP
//! counters (`XDP_STATISTICS`: losses by reason, empty-ring events by ring).

use crate::Writer;
use std::fmt;

/// One port's AF_XDP counters, as `netsched_sys::XdpStats::drops()` / `empty()` give them.
pub struct PortCounters<'a> {
    /// The interface, the `dev` label.
    pub dev: &'a str,
    /// Losses by reason (`reason` label).
    pub drops: [(&'static str, u64); 4],
    /// Empty-ring events by ring (`ring` label).
    pub empty: [(&'static str, u64); 2],
}

impl Writer<'_> {
    /// `port_backend{backend}` (1 for the one running; `backend_help` says of which port),
    /// `ring_bytes`, `xdp_drops_total{dev,reason}` and `xdp_ring_empty_total{dev,ring}`.
    pub fn port_families(
        &mut self,
        backend_help: &str,
        backend: &str,
        ring_bytes: u64,
        ports: &[PortCounters<'_>],
    ) -> fmt::Result {
        self.gauges(
            "port_backend",
            backend_help,
            [([("backend", backend)], 1.0)],
        )?;
        self.gauge(
            "ring_bytes",
            "Bytes of ring memory both ports mapped (0 for the packet backend)",
            ring_bytes as f64,
        )?;
        self.counters(
            "xdp_drops",
            "Frames and descriptors each port's AF_XDP socket lost, by reason (XDP_STATISTICS; 0 unless the xdp backend runs)",
            ports.iter().flat_map(|p| {
                p.drops
                    .iter()
                    .map(|&(reason, v)| ([("dev", p.dev), ("reason", reason)], v))
            }),
        )?;
        self.counters(
            "xdp_ring_empty",
            "Times the kernel found a port's AF_XDP fill or TX ring empty (XDP_STATISTICS; events, not losses: an idle socket's every poll counts one on tx)",
            ports.iter().flat_map(|p| {
                p.empty
                    .iter()
                    .map(|&(ring, v)| ([("dev", p.dev), ("ring", ring)], v))
            }),
        )
    }
}
