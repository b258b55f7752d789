//! Nodes of the simulation: a node routes, may have an input stage (per-ingress-link classes,
//! a discipline and a fixed processing time per packet) in front of forwarding — the gateway
//! CPU of P3 §3.3 — and delivers what is addressed to it to the endpoint it names (a TCP
//! connection, a UDP flow, a pinger, a server, a client).

use super::{Event, Sim};
use crate::error::SimConfigError;
use crate::packet::{Kind, LinkId, NodeId, SimPacket};
use netsched_core::qdisc::{AnyQdisc, ClassId, Qdisc, QdiscConfig, Verdict};
use netsched_core::Nanos;

/// A node's input stage: classes by ingress link, a discipline, one packet in processing.
pub(super) struct InputStage {
    pub(super) qdisc: AnyQdisc<SimPacket>,
    /// Class of a packet by the link it arrived on (indexed by link id; default 0).
    pub(super) class_of_link: Vec<ClassId>,
    pub(super) per_packet: Nanos,
    pub(super) current: Option<SimPacket>,
    pub(super) wake_at: Option<Nanos>,
    pub(super) drops: u64,
}

/// A node: its routes, its input stage, the server on it.
pub struct Node {
    pub name: String,
    /// First link towards each destination node (None: unreachable or self).
    pub(super) routes: Vec<Option<LinkId>>,
    pub(super) input: Option<InputStage>,
    pub(super) server: Option<usize>,
}

impl Sim {
    pub fn add_node(&mut self, name: &str) -> NodeId {
        self.nodes.push(Node {
            name: name.to_string(),
            routes: Vec::new(),
            input: None,
            server: None,
        });
        self.routes_dirty = true;
        (self.nodes.len() - 1) as NodeId
    }

    /// An input stage at `node`: arriving packets not addressed to it are classified by the
    /// link they came in on (`classes`: (link, class) pairs, others class 0), queued in
    /// `qdisc` and forwarded one at a time, each taking `per_packet` of processing.
    pub fn set_input_stage(
        &mut self,
        node: NodeId,
        qdisc: &QdiscConfig,
        classes: &[(LinkId, ClassId)],
        per_packet: Nanos,
    ) -> Result<(), SimConfigError> {
        let qdisc = qdisc.build().map_err(|source| SimConfigError::Qdisc {
            what: "input stage",
            source,
        })?;
        let mut class_of_link = vec![0; self.links.len()];
        for &(link, c) in classes {
            *class_of_link
                .get_mut(link as usize)
                .ok_or(SimConfigError::UnknownLink { node, link })? = c;
        }
        let n = self
            .nodes
            .get_mut(node as usize)
            .ok_or(SimConfigError::UnknownNode {
                what: "input stage",
                node,
            })?;
        n.input = Some(InputStage {
            qdisc,
            class_of_link,
            per_packet,
            current: None,
            wake_at: None,
            drops: 0,
        });
        Ok(())
    }

    /// Drops at a node's input stage.
    pub fn input_stage_stats(
        &self,
        node: NodeId,
    ) -> Option<(u64, &netsched_core::qdisc::QdiscStats)> {
        let s = self.nodes.get(node as usize)?.input.as_ref()?;
        Some((s.drops, s.qdisc.stats()))
    }

    pub(super) fn arrive(&mut self, node: NodeId, link: LinkId, pkt: SimPacket, now: Nanos) {
        if pkt.dst == node {
            self.deliver(node, pkt, now);
            return;
        }
        let n = &mut self.nodes[node as usize];
        if let Some(s) = &mut n.input {
            let class = s.class_of_link.get(link as usize).copied().unwrap_or(0);
            match s.qdisc.enqueue(class, pkt, now) {
                Verdict::Queued => {}
                Verdict::Dropped { .. } | Verdict::QueuedEvicting { .. } => s.drops += 1,
            }
            if s.current.is_none() {
                self.input_start(node, now);
            }
            return;
        }
        self.forward(node, pkt, now);
    }

    pub(super) fn input_start(&mut self, node: NodeId, now: Nanos) {
        let s = self.nodes[node as usize]
            .input
            .as_mut()
            .expect("input stage");
        debug_assert!(s.current.is_none());
        match s.qdisc.dequeue(now) {
            Some(pkt) => {
                s.current = Some(pkt);
                let done = now + s.per_packet;
                self.q.schedule(done, Event::InputDone { node });
            }
            None => {
                if let Some(at) = s.qdisc.next_timer(now) {
                    if !matches!(s.wake_at, Some(w) if w <= at) {
                        s.wake_at = Some(at);
                        self.q.schedule(at, Event::InputWake { node });
                    }
                }
            }
        }
    }

    pub(super) fn deliver(&mut self, node: NodeId, pkt: SimPacket, now: Nanos) {
        let f = pkt.flow as usize;
        let known = match pkt.kind {
            Kind::TcpData | Kind::TcpAck => f < self.conns.len(),
            Kind::Udp => f < self.udp.len(),
            Kind::EchoReply => f < self.pingers.len(),
            Kind::Response => f < self.threads.len(),
            Kind::EchoRequest | Kind::Request | Kind::Trace => true,
        };
        if !known {
            // Injected or replayed packets naming no endpoint: counted, not lost silently.
            self.undeliverable += 1;
            return;
        }
        match pkt.kind {
            Kind::TcpData => {
                let conn = pkt.flow;
                let mut out = std::mem::take(&mut self.tcp_out);
                let n = self.conns[conn as usize].on_data(&pkt, now, &mut out);
                if n > 0 {
                    let bin = self.bin_of(now);
                    let bins = &mut self.conn_bins[conn as usize];
                    if bins.len() <= bin {
                        bins.resize(bin + 1, 0);
                    }
                    bins[bin] += n;
                }
                self.apply_tcp(conn, &mut out, now);
                self.tcp_out = out;
            }
            Kind::TcpAck => {
                let conn = pkt.flow;
                let mut out = std::mem::take(&mut self.tcp_out);
                self.conns[conn as usize].on_ack(&pkt, now, &mut out);
                self.apply_tcp(conn, &mut out, now);
                self.tcp_out = out;
            }
            Kind::Udp => {
                let bin = self.bin_of(now);
                let f = pkt.flow as usize;
                self.udp[f].received += 1;
                let bins = &mut self.udp_bins[f];
                if bins.len() <= bin {
                    bins.resize(bin + 1, 0);
                }
                bins[bin] += 1;
            }
            Kind::EchoRequest => {
                let mut r = pkt;
                r.kind = Kind::EchoReply;
                r.src = pkt.dst;
                r.dst = pkt.src;
                self.send_from(node, r, now);
            }
            Kind::EchoReply => {
                let pg = &mut self.pingers[pkt.flow as usize];
                pg.rtts.push((pkt.sent_at, now - pkt.sent_at));
            }
            Kind::Request => {
                if let Some(s) = self.nodes[node as usize].server {
                    self.server_arrive(s, pkt, now);
                } else {
                    self.unroutable += 1;
                }
            }
            Kind::Response => self.client_response(pkt, now),
            Kind::Trace => {}
        }
    }
}
