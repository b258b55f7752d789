//! Routing of the simulation: a node forwards what is not addressed to it along a
//! shortest-hop route (breadth-first over the links in creation order, so ties are broken
//! deterministically), computed once before the run and again after the topology changes.

use super::Sim;
use crate::packet::{LinkId, NodeId, SimPacket};
use netsched_core::Nanos;
use std::collections::VecDeque;

impl Sim {
    pub(super) fn compute_routes(&mut self) {
        let n = self.nodes.len();
        // Outgoing links per node, in creation order (deterministic).
        let mut out: Vec<Vec<LinkId>> = vec![Vec::new(); n];
        for (i, l) in self.links.iter().enumerate() {
            out[l.from as usize].push(i as LinkId);
        }
        for src in 0..n {
            let mut first: Vec<Option<LinkId>> = vec![None; n];
            let mut seen = vec![false; n];
            seen[src] = true;
            let mut queue = VecDeque::new();
            for &l in &out[src] {
                let to = self.links[l as usize].to as usize;
                if !seen[to] {
                    seen[to] = true;
                    first[to] = Some(l);
                    queue.push_back(to);
                }
            }
            while let Some(u) = queue.pop_front() {
                for &l in &out[u] {
                    let to = self.links[l as usize].to as usize;
                    if !seen[to] {
                        seen[to] = true;
                        first[to] = first[u];
                        queue.push_back(to);
                    }
                }
            }
            self.nodes[src].routes = first;
        }
        for node in &mut self.nodes {
            if let Some(s) = &mut node.input {
                s.class_of_link.resize(self.links.len(), 0);
            }
        }
        self.routes_dirty = false;
    }

    /// A host sends `pkt` (routed from `node`).
    pub(super) fn send_from(&mut self, node: NodeId, pkt: SimPacket, now: Nanos) {
        if pkt.dst == node {
            self.deliver(node, pkt, now);
            return;
        }
        self.forward(node, pkt, now);
    }

    pub(super) fn forward(&mut self, node: NodeId, pkt: SimPacket, now: Nanos) {
        match self.nodes[node as usize]
            .routes
            .get(pkt.dst as usize)
            .copied()
            .flatten()
        {
            Some(link) => self.link_send(link, pkt, now),
            None => self.unroutable += 1,
        }
    }
}
