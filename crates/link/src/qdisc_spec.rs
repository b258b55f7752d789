//! The discipline spec of `netsched link --ab-qdisc/--ba-qdisc` and its glue to the core
//! library's ACK separation (P3): [`parse_qdisc`] (`fifo[:N]`, `ack_sep...`, or a
//! `QdiscConfig` as JSON), the `ack_sep` shorthand for a [`QdiscConfig::AckSeparation`], and
//! which classifier a discipline needs ([`ClassMode`]).
//!
//! The discipline (`AckSeparation` with its ACK filter and ACK-share cap, `qdisc/ack.rs`), the
//! classifier (`classify::PureAckClassifier`) and the pure-ACK test (`wire::ack_info`, RFC 3449
//! §5.2.1) live in `netsched-core`; nothing here re-implements them.

use crate::spec_error::{AckSepError, PacketCountError, QdiscSpecError};
use netsched_core::qdisc::prio::BandConfig;
use netsched_core::qdisc::{limits, ClassId, QdiscConfig};

/// How a frame's class is decided for a discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum ClassMode {
    /// Every frame is class 0; headers are not parsed (FIFO).
    Single,
    /// Pure TCP ACKs vs the rest, by the core's pure-ACK classifier; ACK facts are attached
    /// to the frame for the ACK filter.
    PureAck,
}

/// A discipline and the classifier it needs.
#[derive(Debug, Clone)]
pub struct QdiscSpec {
    pub config: QdiscConfig,
    pub classify: ClassMode,
}

/// Most packets one queue of a `fifo:N` / `ack_sep:N` shorthand may hold (frames are bounded
/// by the engine's pool anyway; this catches typos).
pub const MAX_QUEUE_PACKETS: usize = 1 << 20;

/// A packet count `1..=MAX_QUEUE_PACKETS`.
fn packet_count(n: &str) -> Result<usize, PacketCountError> {
    match n.parse::<usize>() {
        Ok(v) if (1..=MAX_QUEUE_PACKETS).contains(&v) => Ok(v),
        Ok(_) => Err(PacketCountError::OutOfRange {
            text: n.to_string(),
            max: MAX_QUEUE_PACKETS,
        }),
        Err(_) => Err(PacketCountError::NotANumber(n.to_string())),
    }
}

/// Most bytes of a discipline spec (a JSON `QdiscConfig` of a few dozen classes is ~2 KiB).
pub const MAX_SPEC: usize = 64 * 1024;

/// Parse a discipline spec: `fifo[:N]`, `ack_sep[:N][+filter][+cap=S]` or JSON `{"kind": ...}`,
/// and check it builds (so a bad config fails before any socket is opened).
pub fn parse_qdisc(text: &str) -> Result<QdiscSpec, QdiscSpecError> {
    let t = text.trim();
    if t.len() > MAX_SPEC {
        return Err(QdiscSpecError::TooLong {
            len: t.len(),
            max: MAX_SPEC,
        });
    }
    let spec = || t.to_string();
    let config: QdiscConfig = if t.starts_with('{') {
        let config = serde_json::from_str(t).map_err(|source| QdiscSpecError::Json {
            spec: spec(),
            source,
        })?;
        // Old key names, read for one release (docs/cli.md, "Renames").
        if let Ok(keys) = serde_json::from_str::<toml::Value>(t) {
            for w in netsched_core::qdisc::limits::old_keys(&keys) {
                tracing::warn!("qdisc spec: {w}");
            }
        }
        config
    } else if let Some(rest) = t.strip_prefix("ack_sep").or_else(|| {
        // The old spelling, read for one release (docs/cli.md, "Renames").
        let rest = t.strip_prefix("ack-sep")?;
        tracing::warn!("qdisc `ack-sep` is spelled `ack_sep`");
        Some(rest)
    }) {
        ack_separation(rest).map_err(|source| QdiscSpecError::AckSep {
            spec: spec(),
            source,
        })?
    } else {
        let (name, n) = match t.split_once(':') {
            Some((a, b)) => (
                a,
                Some(packet_count(b).map_err(|source| QdiscSpecError::Count {
                    spec: spec(),
                    source,
                })?),
            ),
            None => (t, None),
        };
        match name {
            "fifo" => QdiscConfig::Fifo {
                queue_limit: n.unwrap_or(limits::DEFAULT_QUEUE_LIMIT),
                size_limit: limits::NO_SIZE_LIMIT,
            },
            _ => {
                return Err(QdiscSpecError::Unknown {
                    spec: spec(),
                    name: name.to_string(),
                })
            }
        }
    };
    // Building does not depend on the item type: the core's plain sized item checks it.
    config
        .build::<netsched_core::qdisc::fifo::TestItem>()
        .map_err(|source| QdiscSpecError::Build {
            spec: spec(),
            source,
        })?;
    let classify = classifier_for(&config);
    Ok(QdiscSpec { config, classify })
}

/// Class of pure TCP ACKs for ACK-separating disciplines (the core's convention).
pub const ACK_CLASS: ClassId = netsched_core::qdisc::ack::ACK_CLASS;
/// Class of everything else.
pub const BULK_CLASS: ClassId = netsched_core::qdisc::ack::OTHER_CLASS;

/// Parse `ack_sep[:N][+filter][+cap=S]` (the part after `ack_sep`): N-packet queues for both
/// classes (P3: 100), the RFC 3449 ACK filter, and an ACK-share cap S in (0, 1].
/// Plain `ack_sep:100` is the paper's discipline: strict priority, no filter, no cap.
pub fn ack_separation(spec: &str) -> Result<QdiscConfig, AckSepError> {
    let mut parts = spec.split('+');
    let head = parts.next().unwrap_or("");
    let limit = match head.strip_prefix(':') {
        None if head.is_empty() => 100,
        Some(n) => packet_count(n).map_err(AckSepError::Count)?,
        None => return Err(AckSepError::Syntax(spec.to_string())),
    };
    let mut ack_filter = false;
    let mut ack_share_max = None;
    for p in parts {
        if p == "filter" {
            ack_filter = true;
        } else if let Some(s) = p.strip_prefix("cap=") {
            ack_share_max = Some(
                s.parse::<f64>()
                    .map_err(|_| AckSepError::Cap(s.to_string()))?,
            );
        } else {
            return Err(AckSepError::UnknownOption(p.to_string()));
        }
    }
    let band = BandConfig {
        queue_limit: limit,
        size_limit: u64::MAX,
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
                assert_eq!(ack.queue_limit, 50);
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

    /// A pure ACK inside an 802.1ad S-TAG and an 802.1Q C-TAG (QinQ) is in the ACK class and
    /// carries its ACK facts (the emulation's `ethernet_payload` + `ack_info`), as an untagged
    /// one does; the same frame with data is bulk; a stack deeper than the core reads is bulk.
    #[test]
    fn a_pure_ack_inside_qinq_is_in_the_ack_class() {
        use netsched_core::wire::frames::{tcp4_frame, vlan_tagged};
        use netsched_core::wire::{self, TCP_ACK, TCP_PSH, TPID_8021AD, TPID_8021Q};
        let qinq = [TPID_8021AD, TPID_8021Q];
        let ack = tcp4_frame([10, 0, 0, 2], [10, 0, 0, 1], 80, 40000, TCP_ACK, 5000, b"");
        for frame in [ack.clone(), vlan_tagged(&ack, &qinq)] {
            assert_eq!(class_of(&frame), ACK_CLASS);
            let facts = wire::ethernet_payload(&frame).ok().and_then(wire::ack_info);
            assert_eq!(facts.map(|a| (a.ack, a.pure)), Some((5000, true)));
        }
        let data = tcp4_frame(
            [10, 0, 0, 2],
            [10, 0, 0, 1],
            80,
            40000,
            TCP_ACK | TCP_PSH,
            5000,
            b"data",
        );
        assert_eq!(class_of(&vlan_tagged(&data, &qinq)), BULK_CLASS);
        let deep = [TPID_8021AD, TPID_8021Q, TPID_8021Q, TPID_8021Q];
        assert_eq!(class_of(&vlan_tagged(&ack, &deep)), BULK_CLASS);
    }

    #[test]
    fn qdisc_specs_parse() {
        let q = parse_qdisc("fifo:100").unwrap();
        assert_eq!(
            q.config,
            QdiscConfig::Fifo {
                queue_limit: 100,
                size_limit: u64::MAX
            }
        );
        assert_eq!(q.classify, ClassMode::Single);
        let q = parse_qdisc(r#"{"kind":"fifo","queue_limit":7}"#).unwrap();
        assert!(matches!(q.config, QdiscConfig::Fifo { queue_limit: 7, .. }));
        assert_eq!(
            parse_qdisc("ack_sep:10").unwrap().classify,
            ClassMode::PureAck
        );
        // The old spelling, for one release.
        assert_eq!(
            parse_qdisc("ack-sep:10+filter").unwrap().classify,
            parse_qdisc("ack_sep:10+filter").unwrap().classify
        );
        assert!(parse_qdisc("fifo:0")
            .unwrap_err()
            .to_string()
            .contains("between 1 and"));
        assert!(parse_qdisc("ack_sep:99999999")
            .unwrap_err()
            .to_string()
            .contains("between 1 and"));
        assert!(parse_qdisc("fifo:x")
            .unwrap_err()
            .to_string()
            .contains("`x`"));
        assert!(parse_qdisc("red")
            .unwrap_err()
            .to_string()
            .contains("unknown discipline"));
        assert!(parse_qdisc("{bad")
            .unwrap_err()
            .to_string()
            .contains("QdiscConfig"));
        assert!(parse_qdisc(&"x".repeat(MAX_SPEC + 1))
            .unwrap_err()
            .to_string()
            .contains("at most"));
    }
}
