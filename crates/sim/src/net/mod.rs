//! The engine: nodes, links, routing and the event loop that drives TCP connections, probes,
//! servers and clients.
//!
//! A link is unidirectional: an egress discipline (`AnyQdisc`, fed by a [`LinkClassRule`]), a
//! serialiser at `rate_bps`, then `delay` of propagation. When the serialiser is idle it asks
//! the discipline for the next packet (`dequeue(now)`); a non-work-conserving discipline that
//! returns nothing is asked again at its `next_timer`. Each hop costs two events (end of
//! transmission, arrival). A node forwards what is not addressed to it along a shortest-hop
//! route; a node may have an input stage (per-ingress-link classes, a discipline and a fixed
//! processing time per packet) in front of forwarding — the gateway CPU of P3 §3.3.
//!
//! Determinism: one `SplitMix64` per run (split per use in creation order), ties in time broken
//! by insertion order (`EventQueue`), no hash-map iteration anywhere.
//!
//! Cost per packet per hop: one `enqueue` + one `dequeue` of the discipline, two heap
//! operations; no allocation (packets are `Copy` and travel inside events).
//!
//! - `link.rs`: links (class rule, discipline, serialiser, propagation) and their counters;
//! - `routing.rs`: shortest-hop routes and forwarding;
//! - `node.rs`: nodes, their input stage, and delivery to the endpoints on a node;
//! - `transport.rs`: TCP connections (and their timers), UDP flows, pingers;
//! - `server.rs`: servers (a scheduler in front of workers) and client groups;
//! - this file: the simulation, its events and the event loop.

mod link;
mod node;
mod routing;
mod server;
mod transport;

pub use link::{Link, LinkClassRule, LinkLogEvent, LinkStats};
pub use node::Node;

use crate::app::{ClassStats, ClientGroup, ClientThread, Pinger, Server, UdpFlow};
use crate::event::EventQueue;
use crate::packet::{Kind, LinkId, NodeId, SimPacket};
use crate::tcp::{TcpConn, TcpOut};
use netsched_core::rng::SplitMix64;
use netsched_core::Nanos;
use transport::ConnTimers;

/// What the event loop handles.
#[derive(Debug, Clone, Copy)]
enum Event {
    TxDone { link: LinkId },
    Arrive { link: LinkId, pkt: SimPacket },
    LinkWake { link: LinkId },
    Inject { link: LinkId, pkt: SimPacket },
    InputDone { node: NodeId },
    InputWake { node: NodeId },
    TcpStart { conn: u32 },
    TcpRto { conn: u32 },
    TcpDelAck { conn: u32 },
    UdpSend { flow: u32 },
    PingSend { pinger: u32 },
    ServerDone { server: u32, slot: u32 },
    ClientSend { thread: u32 },
}

/// A simulation: build a topology, add traffic, `run_until`, read the statistics.
pub struct Sim {
    q: EventQueue<Event>,
    rng: SplitMix64,
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    pub conns: Vec<TcpConn>,
    timers: Vec<ConnTimers>,
    /// Per connection: delivered segments per time bin.
    pub conn_bins: Vec<Vec<u32>>,
    pub udp: Vec<UdpFlow>,
    pub udp_bins: Vec<Vec<u32>>,
    pub pingers: Vec<Pinger>,
    servers: Vec<Server>,
    groups: Vec<ClientGroup>,
    threads: Vec<ClientThread>,
    /// Per client class: response time seen by the clients (send → response received).
    pub client_stats: Vec<ClassStats>,
    bin: Nanos,
    routes_dirty: bool,
    tcp_out: Vec<TcpOut>,
    /// Packets addressed to a node without a route to the destination.
    pub unroutable: u64,
    /// Packets that reached their destination but name no connection, flow or client there.
    pub undeliverable: u64,
}

impl Sim {
    /// A new simulation; `bin` is the width of the time bins of every series (e.g. 1 s).
    pub fn new(seed: u64, bin: Nanos) -> Self {
        Self {
            q: EventQueue::new(),
            rng: SplitMix64::new(seed),
            nodes: Vec::new(),
            links: Vec::new(),
            conns: Vec::new(),
            timers: Vec::new(),
            conn_bins: Vec::new(),
            udp: Vec::new(),
            udp_bins: Vec::new(),
            pingers: Vec::new(),
            servers: Vec::new(),
            groups: Vec::new(),
            threads: Vec::new(),
            client_stats: Vec::new(),
            bin: bin.max(1),
            routes_dirty: true,
            tcp_out: Vec::with_capacity(64),
            unroutable: 0,
            undeliverable: 0,
        }
    }

    pub fn now(&self) -> Nanos {
        self.q.now()
    }
    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.q.processed()
    }
    pub fn bin_width(&self) -> Nanos {
        self.bin
    }

    /// Process every event up to and including time `end`.
    pub fn run_until(&mut self, end: Nanos) {
        if self.routes_dirty {
            self.compute_routes();
        }
        while let Some(t) = self.q.peek_time() {
            if t > end {
                break;
            }
            let (now, ev) = self.q.pop().expect("peeked");
            self.handle(now, ev);
        }
    }

    #[inline]
    fn bin_of(&self, now: Nanos) -> usize {
        (now / self.bin) as usize
    }

    fn handle(&mut self, now: Nanos, ev: Event) {
        match ev {
            Event::TxDone { link } => {
                let l = &mut self.links[link as usize];
                l.busy = false;
                self.link_start(link, now);
            }
            Event::Arrive { link, pkt } => {
                let node = self.links[link as usize].to;
                self.arrive(node, link, pkt, now);
            }
            Event::LinkWake { link } => {
                let l = &mut self.links[link as usize];
                if l.wake_at == Some(now) {
                    l.wake_at = None;
                    if !l.busy {
                        self.link_start(link, now);
                    }
                }
            }
            Event::Inject { link, pkt } => self.link_send(link, pkt, now),
            Event::InputDone { node } => {
                let s = self.nodes[node as usize]
                    .input
                    .as_mut()
                    .expect("input stage");
                if let Some(pkt) = s.current.take() {
                    self.forward(node, pkt, now);
                }
                self.input_start(node, now);
            }
            Event::InputWake { node } => {
                let s = self.nodes[node as usize]
                    .input
                    .as_mut()
                    .expect("input stage");
                if s.wake_at == Some(now) {
                    s.wake_at = None;
                    if s.current.is_none() {
                        self.input_start(node, now);
                    }
                }
            }
            Event::TcpStart { conn } => {
                let mut out = std::mem::take(&mut self.tcp_out);
                self.conns[conn as usize].start(now, &mut out);
                self.apply_tcp(conn, &mut out, now);
                self.tcp_out = out;
            }
            Event::TcpRto { conn } => {
                let t = &mut self.timers[conn as usize];
                if t.rto_event != Some(now) {
                    return; // superseded
                }
                t.rto_event = None;
                match t.rto_at {
                    None => {}
                    Some(at) if at > now => {
                        t.rto_event = Some(at);
                        self.q.schedule(at, Event::TcpRto { conn });
                    }
                    Some(_) => {
                        t.rto_at = None;
                        let mut out = std::mem::take(&mut self.tcp_out);
                        self.conns[conn as usize].on_rto(now, &mut out);
                        self.apply_tcp(conn, &mut out, now);
                        self.tcp_out = out;
                    }
                }
            }
            Event::TcpDelAck { conn } => {
                let t = &mut self.timers[conn as usize];
                if t.delack_event != Some(now) {
                    return;
                }
                t.delack_event = None;
                match t.delack_at {
                    None => {}
                    Some(at) if at > now => {
                        t.delack_event = Some(at);
                        self.q.schedule(at, Event::TcpDelAck { conn });
                    }
                    Some(_) => {
                        t.delack_at = None;
                        let mut out = std::mem::take(&mut self.tcp_out);
                        self.conns[conn as usize].on_delack(now, &mut out);
                        self.apply_tcp(conn, &mut out, now);
                        self.tcp_out = out;
                    }
                }
            }
            Event::UdpSend { flow } => {
                let f = &mut self.udp[flow as usize];
                if now >= f.stop {
                    return;
                }
                let mut p = SimPacket::new(Kind::Udp, f.src, f.dst, f.len);
                p.flow = flow;
                p.seq = f.sent as u32;
                p.sent_at = now;
                f.sent += 1;
                let next = now + f.interval;
                self.q.schedule(next, Event::UdpSend { flow });
                self.send_from(p.src, p, now);
            }
            Event::PingSend { pinger } => {
                let pg = &mut self.pingers[pinger as usize];
                if pg.sent >= pg.count {
                    return;
                }
                let mut p = SimPacket::new(Kind::EchoRequest, pg.src, pg.dst, pg.len);
                p.flow = pinger;
                p.seq = pg.sent as u32;
                p.sent_at = now;
                pg.sent += 1;
                let next = now + pg.interval;
                self.q.schedule(next, Event::PingSend { pinger });
                self.send_from(p.src, p, now);
            }
            Event::ServerDone { server, slot } => self.server_done(server as usize, slot, now),
            Event::ClientSend { thread } => self.client_send(thread, now),
        }
    }
}
