//! Links of the simulation: a unidirectional link is an egress discipline fed by a
//! [`LinkClassRule`], a serialiser at `rate_bps`, then `delay` of propagation. When the
//! serialiser is idle it asks the discipline for the next packet; a non-work-conserving
//! discipline that returns nothing is asked again at its `next_timer`. Each hop costs two
//! events (end of transmission, arrival) and one `enqueue` + one `dequeue`.

use super::{Event, Sim};
use crate::error::SimConfigError;
use crate::packet::{Kind, LinkId, NodeId, SimPacket};
use netsched_core::qdisc::{AnyQdisc, ClassId, DropReason, Qdisc, QdiscConfig, Verdict};
use netsched_core::{Nanos, SEC};

/// The rule that picks the class of a packet offered to a link's (or input stage's)
/// discipline: a closed set of simulator rules, not core's [`netsched_core::classify::Classifier`]
/// trait (which reads packet bytes).
#[derive(Debug, Clone, PartialEq)]
pub enum LinkClassRule {
    /// Everything in one class.
    Single(ClassId),
    /// TCP pure ACKs to `ack`, everything else to `other` (P3's tc filter).
    TcpAck { ack: ClassId, other: ClassId },
    /// The class carried by the packet (client class of a request, trace class).
    PacketClass,
}

impl LinkClassRule {
    #[inline]
    pub fn classify(&self, p: &SimPacket) -> ClassId {
        match *self {
            LinkClassRule::Single(c) => c,
            LinkClassRule::TcpAck { ack, other } => {
                if p.is_pure_ack() {
                    ack
                } else {
                    other
                }
            }
            LinkClassRule::PacketClass => p.class as ClassId,
        }
    }
}

/// What happened to a packet at a link, for logs (parity test, replays).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLogEvent {
    TxStart,
    Dropped(DropReason),
}

/// Counters of one link.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub tx_acks: u64,
    pub drops_data: u64,
    pub drops_ack: u64,
    pub drops_other: u64,
    pub busy_ns: Nanos,
    pub max_queue: u64,
}

/// A unidirectional link: its discipline, serialiser and propagation delay, and counters.
pub struct Link {
    pub from: NodeId,
    pub to: NodeId,
    pub rate_bps: u64,
    pub delay: Nanos,
    pub qdisc: AnyQdisc<SimPacket>,
    pub classifier: LinkClassRule,
    pub(super) busy: bool,
    pub(super) wake_at: Option<Nanos>,
    pub stats: LinkStats,
    /// Optional log of (time, packet seq, what) for tests.
    pub log: Option<Vec<(Nanos, u32, LinkLogEvent)>>,
}

impl Link {
    #[inline]
    pub fn tx_time(&self, len: u32) -> Nanos {
        (len as u64 * 8 * SEC).div_ceil(self.rate_bps)
    }
}

impl Sim {
    /// A unidirectional link with its egress discipline. `Err` names what is wrong.
    pub fn add_link(
        &mut self,
        from: NodeId,
        to: NodeId,
        rate_bps: u64,
        delay: Nanos,
        qdisc: &QdiscConfig,
        classifier: LinkClassRule,
    ) -> Result<LinkId, SimConfigError> {
        if from as usize >= self.nodes.len() || to as usize >= self.nodes.len() {
            return Err(SimConfigError::LinkNodes { from, to });
        }
        if rate_bps == 0 {
            return Err(SimConfigError::LinkRate { from, to });
        }
        let qdisc =
            qdisc
                .build()
                .map_err(|source| SimConfigError::LinkQdisc { from, to, source })?;
        self.links.push(Link {
            from,
            to,
            rate_bps,
            delay,
            qdisc,
            classifier,
            busy: false,
            wake_at: None,
            stats: LinkStats::default(),
            log: None,
        });
        self.routes_dirty = true;
        Ok((self.links.len() - 1) as LinkId)
    }
    /// Log every transmission start and drop of `link`.
    pub fn enable_link_log(&mut self, link: LinkId) {
        self.links[link as usize].log = Some(Vec::new());
    }

    /// Offer `pkt` to `link`'s discipline at time `at` (tests, replays).
    pub fn inject(&mut self, at: Nanos, link: LinkId, pkt: SimPacket) {
        self.q.schedule(at, Event::Inject { link, pkt });
    }

    /// Offer a packet to a link's discipline; start the serialiser if idle.
    pub(super) fn link_send(&mut self, link: LinkId, pkt: SimPacket, now: Nanos) {
        let l = &mut self.links[link as usize];
        let class = l.classifier.classify(&pkt);
        let seq = pkt.seq;
        match l.qdisc.enqueue(class, pkt, now) {
            Verdict::Queued => {}
            Verdict::Dropped { item, reason } => {
                count_drop(&mut l.stats, &item);
                if let Some(log) = &mut l.log {
                    log.push((now, seq, LinkLogEvent::Dropped(reason)));
                }
            }
            Verdict::QueuedEvicting { evicted, reason } => {
                count_drop(&mut l.stats, &evicted);
                if let Some(log) = &mut l.log {
                    log.push((now, evicted.seq, LinkLogEvent::Dropped(reason)));
                }
            }
        }
        let l = &mut self.links[link as usize];
        let qlen = l.qdisc.len() as u64;
        if qlen > l.stats.max_queue {
            l.stats.max_queue = qlen;
        }
        if !l.busy {
            self.link_start(link, now);
        }
    }

    pub(super) fn link_start(&mut self, link: LinkId, now: Nanos) {
        let l = &mut self.links[link as usize];
        match l.qdisc.dequeue(now) {
            Some(pkt) => {
                l.busy = true;
                let tx = l.tx_time(pkt.len);
                l.stats.tx_packets += 1;
                l.stats.tx_bytes += pkt.len as u64;
                l.stats.busy_ns += tx;
                if pkt.kind == Kind::TcpAck {
                    l.stats.tx_acks += 1;
                }
                if let Some(log) = &mut l.log {
                    log.push((now, pkt.seq, LinkLogEvent::TxStart));
                }
                let arrive = now + tx + l.delay;
                self.q.schedule(now + tx, Event::TxDone { link });
                self.q.schedule(arrive, Event::Arrive { link, pkt });
            }
            None => {
                if let Some(at) = l.qdisc.next_timer(now) {
                    if !matches!(l.wake_at, Some(w) if w <= at) {
                        l.wake_at = Some(at);
                        self.q.schedule(at, Event::LinkWake { link });
                    }
                }
            }
        }
    }
}

fn count_drop(stats: &mut LinkStats, p: &SimPacket) {
    match p.kind {
        Kind::TcpData => stats.drops_data += 1,
        Kind::TcpAck => stats.drops_ack += 1,
        _ => stats.drops_other += 1,
    }
}
