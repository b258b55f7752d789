//! Glue between the engines of this crate and the core library's ACK separation (P3):
//! which classifier a discipline needs, and the `ack-sep[:N]` shorthand.
//!
//! The discipline (`AckSeparation`, with its ACK filter and ACK-share cap) and the pure-ACK
//! test live in `netsched-core` (`qdisc/ack.rs`, `wire`, `classify`); nothing here re-implements
//! them.

use netsched_core::qdisc::{ClassId, QdiscConfig};

use crate::engine::ClassMode;

/// Class of pure TCP ACKs for ACK-separating disciplines; everything else is [`BULK_CLASS`].
pub const ACK_CLASS: ClassId = 0;
pub const BULK_CLASS: ClassId = 1;

/// `ack-sep:N`: ACK separation with N-packet queues (P3: two FIFOs of 100 packets).
pub fn ack_separation(_limit: usize) -> anyhow::Result<QdiscConfig> {
    anyhow::bail!("ack-sep: the core library has no ACK separation discipline yet")
}

/// Which classifier the discipline needs.
pub fn classifier_for(config: &QdiscConfig) -> ClassMode {
    match config {
        QdiscConfig::Fifo { .. } => ClassMode::Single,
    }
}

/// Class of an Ethernet frame for an ACK-separating discipline.
pub fn class_of(frame: &[u8]) -> ClassId {
    match netsched_core::wire::ethernet_payload(frame) {
        Ok(ip) if netsched_core::wire::is_tcp_pure_ack(ip) => ACK_CLASS,
        _ => BULK_CLASS,
    }
}
