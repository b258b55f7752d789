//! What the filter decides about a packet, and why a packet was dropped.

use serde::Serialize;

/// Every reason a received packet is not forwarded, each counted separately.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// A rule (or the default) said drop.
    Rule,
    /// A payload signature matched and signatures drop.
    Signature,
    /// Truncated or inconsistent headers.
    Malformed,
    /// Not IPv4/IPv6 and `--non-ip drop`.
    NonIp,
    /// More VLAN tags than the parser reads ([`crate::packet::MAX_VLAN_TAGS`]): what the tags
    /// carry is unknown, so it is neither matched nor called non-IP.
    HeaderTooDeep,
    /// An IP fragment (IPv4 MF or offset ≠ 0, IPv6 Fragment header) under `--fragments drop`:
    /// a signature split across fragments and a later fragment's ports are unseen.
    Fragment,
    /// The worker's code panicked on this packet and the filter fails closed.
    WorkerPanic,
    /// Longer than a buffer slot (offloads on).
    Oversize,
    /// The output interface refused the frame.
    TxError,
    /// Still inside the filter when it stopped and could not drain in time.
    Shutdown,
    /// No output interface (`--output none`): accepted, then consumed.
    NoOutput,
}

impl DropReason {
    pub const ALL: &'static [DropReason] = &[
        DropReason::Rule,
        DropReason::Signature,
        DropReason::Malformed,
        DropReason::NonIp,
        DropReason::HeaderTooDeep,
        DropReason::Fragment,
        DropReason::WorkerPanic,
        DropReason::Oversize,
        DropReason::TxError,
        DropReason::Shutdown,
        DropReason::NoOutput,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Rule => "rule",
            DropReason::Signature => "signature",
            DropReason::Malformed => "malformed",
            DropReason::NonIp => "non_ip",
            DropReason::HeaderTooDeep => "header_too_deep",
            DropReason::Fragment => "fragment",
            DropReason::WorkerPanic => "worker_panic",
            DropReason::Oversize => "oversize",
            DropReason::TxError => "tx_error",
            DropReason::Shutdown => "shutdown",
            DropReason::NoOutput => "no_output",
        }
    }
}

/// The decision about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it; `class` from a `class` rule, `marked` if a signature matched and
    /// signatures mark.
    Forward {
        class: Option<u32>,
        marked: bool,
    },
    Drop(DropReason),
}

/// What a signature match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnSignature {
    Drop,
    Mark,
}

/// What a worker panic does to its packet: fail closed (drop) or open (forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPanic {
    Drop,
    Forward,
}

/// What happens to IP fragments. The filter does not reassemble: each fragment is checked on
/// its own, so `Pass` lets a signature split across fragments through and matches a later
/// fragment's rules without ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fragments {
    /// Drop every fragment, counted as [`DropReason::Fragment`].
    Drop,
    /// Classify each fragment as it is: the first by its headers, a later one by addresses
    /// and protocol with ports 0; signatures scan each fragment's own payload.
    Pass,
}
