//! Servers and clients of the simulation: a server is a scheduler (any core discipline) in
//! front of a listen queue and a pool of workers with a service-time distribution; a client
//! group is closed-loop threads with a think time, or an open-loop Poisson source.

use super::{Event, Sim};
use crate::app::{
    ClassStats, ClientConfig, ClientGroup, ClientMode, ClientThread, Server, ServerConfig,
};
use crate::error::SimConfigError;
use crate::packet::{Kind, NodeId, SimPacket};
use netsched_core::qdisc::{AnyQdisc, ClassId, Feedback, Qdisc, Verdict};
use netsched_core::{Nanos, SEC};
use std::collections::VecDeque;

impl Sim {
    /// A server at `node`. Returns its index.
    pub fn add_server(&mut self, node: NodeId, cfg: ServerConfig) -> Result<usize, SimConfigError> {
        if cfg.workers == 0 {
            return Err(SimConfigError::NoWorkers);
        }
        cfg.service.validate("server service time")?;
        let sched = cfg.sched.build().map_err(|source| SimConfigError::Qdisc {
            what: "server sched",
            source,
        })?;
        let n = self
            .nodes
            .get_mut(node as usize)
            .ok_or(SimConfigError::UnknownNode {
                what: "server",
                node,
            })?;
        let id = self.servers.len();
        n.server = Some(id);
        self.servers.push(Server {
            node,
            slots: vec![None; cfg.workers],
            cfg,
            sched,
            listen: VecDeque::new(),
            busy: 0,
            stats: Vec::new(),
            refused: Vec::new(),
            busy_ns: 0,
        });
        Ok(id)
    }

    /// The server's discipline (for status: Percentile's per-class figures).
    pub fn server_sched(&self, server: usize) -> &AnyQdisc<SimPacket> {
        &self.servers[server].sched
    }
    /// Per class: time from arrival at the server to the response leaving it.
    pub fn server_stats(&self, server: usize) -> &[ClassStats] {
        &self.servers[server].stats
    }
    pub fn server_busy_ns(&self, server: usize) -> Nanos {
        self.servers[server].busy_ns
    }

    /// A group of client threads. Returns the group index.
    pub fn add_clients(&mut self, cfg: ClientConfig) -> Result<usize, SimConfigError> {
        if cfg.node as usize >= self.nodes.len() || cfg.server as usize >= self.nodes.len() {
            return Err(SimConfigError::ClientNodes {
                node: cfg.node,
                server: cfg.server,
            });
        }
        match &cfg.mode {
            ClientMode::Closed { think } => think.validate("clients think time")?,
            ClientMode::Open { rate_per_s } => {
                if !(rate_per_s.is_finite() && *rate_per_s > 0.0) {
                    return Err(SimConfigError::ClientRate {
                        rate_per_s: *rate_per_s,
                    });
                }
            }
        }
        let group = self.groups.len();
        let first_thread = self.threads.len() as u32;
        let threads = match cfg.mode {
            ClientMode::Closed { .. } => cfg.threads,
            ClientMode::Open { .. } => 1,
        };
        for t in 0..threads {
            self.threads.push(ClientThread {
                group,
                sent: 0,
                done: 0,
            });
            self.q.schedule(
                cfg.start,
                Event::ClientSend {
                    thread: first_thread + t,
                },
            );
        }
        if self.client_stats.len() <= cfg.class as usize {
            self.client_stats
                .resize_with(cfg.class as usize + 1, ClassStats::default);
        }
        self.groups.push(ClientGroup { cfg, first_thread });
        Ok(group)
    }

    /// Requests completed by each thread of a group.
    pub fn client_done(&self, group: usize) -> Vec<u64> {
        self.threads
            .iter()
            .filter(|t| t.group == group)
            .map(|t| t.done)
            .collect()
    }

    pub(super) fn server_arrive(&mut self, server: usize, mut pkt: SimPacket, now: Nanos) {
        pkt.echo = now; // arrival at the server
        let s = &mut self.servers[server];
        let class = pkt.class as ClassId;
        match s.sched.enqueue(class, pkt, now) {
            Verdict::Queued => {}
            Verdict::Dropped { item, .. } => self.server_refuse(server, item, now),
            Verdict::QueuedEvicting { evicted, .. } => self.server_refuse(server, evicted, now),
        }
        self.server_pump(server, now);
    }

    fn server_refuse(&mut self, server: usize, req: SimPacket, now: Nanos) {
        let s = &mut self.servers[server];
        let c = req.class as usize;
        if s.refused.len() <= c {
            s.refused.resize(c + 1, 0);
        }
        s.refused[c] += 1;
        let mut r = SimPacket::new(Kind::Response, s.node, req.src, 64);
        r.flow = req.flow;
        r.seq = req.seq;
        r.class = req.class;
        r.sent_at = req.sent_at;
        r.ack = 1; // refused
        let node = s.node;
        self.send_from(node, r, now);
    }

    /// Release requests from the scheduler while a worker or the listen queue has room,
    /// and start service on free workers.
    fn server_pump(&mut self, server: usize, now: Nanos) {
        loop {
            let s = &mut self.servers[server];
            if s.busy < s.cfg.workers && !s.listen.is_empty() {
                let req = s.listen.pop_front().expect("non-empty");
                let slot = s.slots.iter().position(|x| x.is_none()).expect("free slot");
                s.slots[slot] = Some(req);
                s.busy += 1;
                let service = s.cfg.service.sample(&mut self.rng);
                s.busy_ns += service;
                self.q.schedule(
                    now + service,
                    Event::ServerDone {
                        server: server as u32,
                        slot: slot as u32,
                    },
                );
                continue;
            }
            let room = s.listen.len() < s.cfg.listen_limit || s.busy < s.cfg.workers;
            if !room {
                break;
            }
            match s.sched.dequeue(now) {
                Some(req) => s.listen.push_back(req),
                None => break,
            }
        }
    }

    pub(super) fn server_done(&mut self, server: usize, slot: u32, now: Nanos) {
        let bin = self.bin_of(now);
        let s = &mut self.servers[server];
        let req = s.slots[slot as usize].take().expect("slot in service");
        s.busy -= 1;
        let latency = now - req.echo;
        let class = req.class as usize;
        if s.stats.len() <= class {
            s.stats.resize_with(class + 1, ClassStats::default);
        }
        s.stats[class].record(latency, bin);
        // The thesis counts success at output (`per_fail_check` in ip_finish_output, P0 ch. 4).
        s.sched.feedback(
            Feedback::Completed {
                class: req.class as ClassId,
                latency,
            },
            now,
        );
        let mut r = SimPacket::new(Kind::Response, s.node, req.src, s.cfg.response_bytes);
        r.flow = req.flow;
        r.seq = req.seq;
        r.class = req.class;
        r.sent_at = req.sent_at;
        let node = s.node;
        self.send_from(node, r, now);
        self.server_pump(server, now);
    }

    pub(super) fn client_send(&mut self, thread: u32, now: Nanos) {
        let t = &mut self.threads[thread as usize];
        let g = &self.groups[t.group];
        if t.sent >= g.cfg.requests {
            return;
        }
        let mut p = SimPacket::new(Kind::Request, g.cfg.node, g.cfg.server, g.cfg.request_bytes);
        p.flow = thread;
        p.seq = t.sent as u32;
        p.class = g.cfg.class;
        p.sent_at = now;
        t.sent += 1;
        if let ClientMode::Open { rate_per_s } = g.cfg.mode {
            let gap = self.rng.exp(SEC as f64 / rate_per_s) as Nanos;
            self.q.schedule(now + gap, Event::ClientSend { thread });
        }
        let node = g.cfg.node;
        self.send_from(node, p, now);
    }

    pub(super) fn client_response(&mut self, pkt: SimPacket, now: Nanos) {
        let bin = self.bin_of(now);
        let thread = pkt.flow;
        let t = &mut self.threads[thread as usize];
        t.done += 1;
        let g = &self.groups[t.group];
        let cs = &mut self.client_stats[g.cfg.class as usize];
        if pkt.ack == 1 {
            cs.refused += 1;
        } else {
            cs.record(now - pkt.sent_at, bin);
        }
        if let ClientMode::Closed { think } = &g.cfg.mode {
            let gap = think.sample(&mut self.rng);
            self.q.schedule(now + gap, Event::ClientSend { thread });
        }
        let _ = g.first_thread;
    }
}
