//! Zero-copy views of the headers classifiers need (IPv4, IPv6, TCP).

/// TCP acknowledgement facts of a segment, as the ACK filter needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AckInfo {
    /// Hash of (src addr, dst addr, src port, dst port) in this direction.
    pub flow: u64,
    /// Cumulative acknowledgement number.
    pub ack: u32,
    /// ACK flag set, no payload, no SYN/FIN/RST.
    pub pure: bool,
    /// Carries SACK blocks or any TCP option other than timestamps/NOP (never filtered).
    pub has_sack_or_other_options: bool,
    /// Advertised window (a window update must not be filtered as redundant).
    pub window: u32,
}
