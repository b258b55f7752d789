//! Ready-made topologies shared by the lab experiments and the benches.
//!
//! [`adsl_gateway`]: P3's home network (P3 §2, Fig. 1): local host — 10 Mbit/s LAN —
//! gateway — asymmetric ADSL link (800 kbit/s up, 2.1 Mbit/s down) — remote host.

use crate::error::SimConfigError;
use crate::net::{LinkClassRule, Sim};
use crate::packet::{LinkId, NodeId};
use netsched_core::qdisc::{ClassId, QdiscConfig};
use netsched_core::{Nanos, MS};

/// Parameters of the ADSL gateway topology.
#[derive(Debug, Clone)]
pub struct AdslParams {
    pub lan_bps: u64,
    pub lan_delay: Nanos,
    pub up_bps: u64,
    pub down_bps: u64,
    /// One-way propagation delay of the ADSL link (plus the path behind it).
    pub wan_delay: Nanos,
    /// Egress discipline of the gateway's uplink (the paper's FIFO 100 or ACK separation).
    pub uplink_qdisc: QdiscConfig,
    pub uplink_classifier: LinkClassRule,
    /// Egress discipline of the other links ("large": a FIFO of 1000).
    pub other_qdisc: QdiscConfig,
    /// Gateway input processing: per-interface input queues (class 0 = from the LAN, class 1
    /// = from the ADSL side) under this discipline, `per_packet` of CPU each (P3 §3.3).
    pub gateway_input: Option<(QdiscConfig, Nanos)>,
}

impl Default for AdslParams {
    fn default() -> Self {
        Self {
            lan_bps: 10_000_000,
            lan_delay: 100_000, // 0.1 ms
            up_bps: 800_000,
            down_bps: 2_100_000,
            wan_delay: 10 * MS,
            uplink_qdisc: QdiscConfig::Fifo {
                queue_limit: 100,
                size_limit: u64::MAX,
            },
            uplink_classifier: LinkClassRule::Single(0),
            other_qdisc: QdiscConfig::Fifo {
                queue_limit: 1000,
                size_limit: u64::MAX,
            },
            gateway_input: None,
        }
    }
}

/// Node and link ids of the built topology.
#[derive(Debug, Clone, Copy)]
pub struct Adsl {
    pub local: NodeId,
    pub gateway: NodeId,
    pub remote: NodeId,
    pub lan_up: LinkId,
    pub lan_down: LinkId,
    pub uplink: LinkId,
    pub downlink: LinkId,
}

pub fn adsl_gateway(sim: &mut Sim, p: &AdslParams) -> Result<Adsl, SimConfigError> {
    let local = sim.add_node("local");
    let gateway = sim.add_node("gateway");
    let remote = sim.add_node("remote");
    let one = LinkClassRule::Single(0);
    let lan_up = sim.add_link(
        local,
        gateway,
        p.lan_bps,
        p.lan_delay,
        &p.other_qdisc,
        one.clone(),
    )?;
    let lan_down = sim.add_link(
        gateway,
        local,
        p.lan_bps,
        p.lan_delay,
        &p.other_qdisc,
        one.clone(),
    )?;
    let uplink = sim.add_link(
        gateway,
        remote,
        p.up_bps,
        p.wan_delay,
        &p.uplink_qdisc,
        p.uplink_classifier.clone(),
    )?;
    let downlink = sim.add_link(
        remote,
        gateway,
        p.down_bps,
        p.wan_delay,
        &p.other_qdisc,
        one,
    )?;
    if let Some((q, per_packet)) = &p.gateway_input {
        let classes: [(LinkId, ClassId); 2] = [(lan_up, 0), (downlink, 1)];
        sim.set_input_stage(gateway, q, &classes, *per_packet)?;
    }
    Ok(Adsl {
        local,
        gateway,
        remote,
        lan_up,
        lan_down,
        uplink,
        downlink,
    })
}
