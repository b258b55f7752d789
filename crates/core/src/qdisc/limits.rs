//! The queue limits every discipline's configuration defaults to, in one place: a class (band,
//! interface) queue holds at most [`DEFAULT_LIMIT_PACKETS`] packets and has no byte limit
//! unless its configuration says otherwise. The functions are serde's `default = "..."`.
//!
//! Source: 1000 packets is Linux's default device `txqueuelen` (`DEFAULT_TX_QUEUE_LEN`,
//! `include/linux/netdevice.h`), which `pfifo` takes as its limit when given none.
//! Cost: none (constants).

/// Packets a class queue holds by default.
pub const DEFAULT_LIMIT_PACKETS: usize = 1000;

/// Bytes a class queue holds by default: no limit.
pub const NO_BYTE_LIMIT: u64 = u64::MAX;

/// [`DEFAULT_LIMIT_PACKETS`], for `#[serde(default = "...")]`.
pub(crate) fn default_limit_packets() -> usize {
    DEFAULT_LIMIT_PACKETS
}

/// [`NO_BYTE_LIMIT`], for `#[serde(default = "...")]`.
pub(crate) fn no_byte_limit() -> u64 {
    NO_BYTE_LIMIT
}
