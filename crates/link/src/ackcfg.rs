//! Glue between the engines of this crate and the core library's ACK separation (P3):
//! the `ack-sep` shorthand for a [`QdiscConfig::AckSeparation`], and which classifier a
//! discipline needs.
//!
//! The discipline (`AckSeparation` with its ACK filter and ACK-share cap, `qdisc/ack.rs`), the
//! classifier (`classify::PureAckClassifier`) and the pure-ACK test (`wire::ack_info`, RFC 3449
//! §5.2.1) live in `netsched-core`; nothing here re-implements them.

use anyhow::{anyhow, bail, Result};
use netsched_core::qdisc::prio::BandConfig;
use netsched_core::qdisc::{ClassId, QdiscConfig};

use crate::engine::ClassMode;

/// Class of pure TCP ACKs for ACK-separating disciplines (the core's convention).
pub const ACK_CLASS: ClassId = netsched_core::qdisc::ack::ACK_CLASS;
/// Class of everything else.
pub const BULK_CLASS: ClassId = netsched_core::qdisc::ack::OTHER_CLASS;

/// Parse `ack-sep[:N][+filter][+cap=S]` (the part after `ack-sep`): N-packet queues for both
/// classes (P3: 100), the RFC 3449 ACK filter, and an ACK-share cap S in (0, 1].
/// Plain `ack-sep:100` is the paper's discipline: strict priority, no filter, no cap.
pub fn ack_separation(spec: &str) -> Result<QdiscConfig> {
    let mut parts = spec.split('+');
    let head = parts.next().unwrap_or("");
    let limit = match head.strip_prefix(':') {
        None if head.is_empty() => 100,
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| anyhow!("ack-sep: `{n}` is not a packet count"))?,
        None => bail!("ack-sep{spec}: expected ack-sep[:N][+filter][+cap=S]"),
    };
    let mut ack_filter = false;
    let mut ack_share_max = None;
    for p in parts {
        if p == "filter" {
            ack_filter = true;
        } else if let Some(s) = p.strip_prefix("cap=") {
            ack_share_max = Some(
                s.parse::<f64>()
                    .map_err(|_| anyhow!("ack-sep: cap `{s}` is not a number"))?,
            );
        } else {
            bail!("ack-sep: unknown option `{p}` (filter, cap=S)");
        }
    }
    let band = BandConfig {
        limit_packets: limit,
        limit_bytes: u64::MAX,
    };
    Ok(QdiscConfig::AckSeparation {
        ack: band.clone(),
        other: band,
        ack_filter,
        ack_share_max,
    })
}

/// Which classifier the discipline needs.
pub fn classifier_for(config: &QdiscConfig) -> ClassMode {
    match config {
        QdiscConfig::AckSeparation { .. } => ClassMode::PureAck,
        _ => ClassMode::Single,
    }
}

/// Class of an Ethernet frame for an ACK-separating discipline: the core's
/// `PureAckClassifier` on the frame's IP packet; non-IP frames (ARP...) are bulk.
pub fn class_of(frame: &[u8]) -> ClassId {
    use netsched_core::classify::{Classifier, PureAckClassifier};
    match netsched_core::wire::ethernet_payload(frame) {
        Ok(ip) => PureAckClassifier.classify(ip),
        Err(_) => BULK_CLASS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_sep_shorthand() {
        let c = ack_separation(":100").unwrap();
        assert!(matches!(
            c,
            QdiscConfig::AckSeparation {
                ack_filter: false,
                ack_share_max: None,
                ..
            }
        ));
        let c = ack_separation(":50+filter+cap=0.5").unwrap();
        match c {
            QdiscConfig::AckSeparation {
                ack,
                ack_filter,
                ack_share_max,
                ..
            } => {
                assert_eq!(ack.limit_packets, 50);
                assert!(ack_filter);
                assert_eq!(ack_share_max, Some(0.5));
            }
            _ => panic!(),
        }
        assert!(ack_separation("+bogus").is_err());
        // Non-IP frames (ARP) are bulk.
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(class_of(&arp), BULK_CLASS);
        assert!(ack_separation(":x").is_err());
    }
}
