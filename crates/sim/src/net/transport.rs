//! Transport endpoints of the simulation: bulk TCP connections (and the timers their
//! retransmission and delayed-ACK deadlines arm), constant-bit-rate UDP flows, and ICMP-echo
//! pingers.

use super::{Event, Sim};
use crate::app::{Pinger, UdpFlow};
use crate::error::SimConfigError;
use crate::packet::NodeId;
use crate::tcp::{TcpConfig, TcpConn, TcpOut};
use netsched_core::{Nanos, SEC};

/// A connection's armed deadlines (`*_at`) and the events scheduled for them (`*_event`): an
/// event that finds its deadline moved reschedules or does nothing.
#[derive(Default, Clone, Copy)]
pub(super) struct ConnTimers {
    pub(super) rto_at: Option<Nanos>,
    pub(super) rto_event: Option<Nanos>,
    pub(super) delack_at: Option<Nanos>,
    pub(super) delack_event: Option<Nanos>,
}

impl Sim {
    /// A bulk TCP transfer from `src` to `dst` starting at `start`; `segments` = None for an
    /// endless source. Returns the connection index.
    pub fn add_tcp(
        &mut self,
        src: NodeId,
        dst: NodeId,
        cfg: TcpConfig,
        start: Nanos,
        segments: Option<u64>,
    ) -> Result<u32, SimConfigError> {
        cfg.validate()
            .map_err(|source| SimConfigError::Tcp { src, dst, source })?;
        let id = self.conns.len() as u32;
        self.conns.push(TcpConn::new(
            id,
            src,
            dst,
            cfg,
            segments.unwrap_or(u64::MAX),
        ));
        self.timers.push(ConnTimers::default());
        self.conn_bins.push(Vec::new());
        self.q.schedule(start, Event::TcpStart { conn: id });
        Ok(id)
    }

    /// A constant-bit-rate UDP flow of `len`-byte datagrams at `rate_bps` from `start` to `stop`.
    pub fn add_udp_cbr(
        &mut self,
        src: NodeId,
        dst: NodeId,
        rate_bps: u64,
        len: u32,
        start: Nanos,
        stop: Nanos,
    ) -> u32 {
        let interval = (len as u64 * 8 * SEC / rate_bps.max(1)).max(1);
        let id = self.udp.len() as u32;
        self.udp.push(UdpFlow {
            src,
            dst,
            len,
            interval,
            stop,
            ..Default::default()
        });
        self.udp_bins.push(Vec::new());
        self.q.schedule(start, Event::UdpSend { flow: id });
        id
    }

    /// An ICMP-echo pinger: `count` probes of `len` bytes every `interval` from `start`.
    pub fn add_pinger(
        &mut self,
        src: NodeId,
        dst: NodeId,
        len: u32,
        interval: Nanos,
        count: u64,
        start: Nanos,
    ) -> u32 {
        let id = self.pingers.len() as u32;
        self.pingers.push(Pinger {
            src,
            dst,
            len,
            interval,
            count,
            ..Default::default()
        });
        self.q.schedule(start, Event::PingSend { pinger: id });
        id
    }

    pub(super) fn apply_tcp(&mut self, conn: u32, out: &mut Vec<TcpOut>, now: Nanos) {
        for o in out.drain(..) {
            match o {
                TcpOut::Send(p) => self.send_from(p.src, p, now),
                TcpOut::Rto(at) => {
                    let t = &mut self.timers[conn as usize];
                    t.rto_at = at;
                    if let Some(at) = at {
                        if !matches!(t.rto_event, Some(e) if e <= at) {
                            t.rto_event = Some(at);
                            self.q.schedule(at, Event::TcpRto { conn });
                        }
                    }
                }
                TcpOut::DelAck(at) => {
                    let t = &mut self.timers[conn as usize];
                    t.delack_at = at;
                    if let Some(at) = at {
                        if !matches!(t.delack_event, Some(e) if e <= at) {
                            t.delack_event = Some(at);
                            self.q.schedule(at, Event::TcpDelAck { conn });
                        }
                    }
                }
            }
        }
    }
}
