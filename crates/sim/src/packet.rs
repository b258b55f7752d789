//! The simulator's packet: a small `Copy` struct (64 bytes) that names what it carries instead
//! of materialising a payload. TCP sequence numbers count whole segments, not bytes (every
//! data segment of a connection has the same size), which keeps the sender's and receiver's
//! scoreboards to one 128-bit map each (see `tcp.rs`).

use netsched_core::qdisc::Packet;
use netsched_core::wire::AckInfo;
use netsched_core::Nanos;

/// Index of a node (host, router, gateway) in a [`crate::net::Sim`].
pub type NodeId = u32;
/// Index of a unidirectional link in a [`crate::net::Sim`].
pub type LinkId = u32;

/// What a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A TCP data segment; `seq` is the segment number.
    TcpData,
    /// A TCP pure ACK; `ack` is the next expected segment, `sack` the receiver's out-of-order map.
    TcpAck,
    /// A UDP datagram of a constant-bit-rate probe; `seq` counts datagrams.
    Udp,
    /// ICMP echo request / reply; `seq` counts probes, `sent_at` is the request's send time.
    EchoRequest,
    EchoReply,
    /// A message-level request of a client thread to a server (`flow` = client thread).
    Request,
    /// The server's response to a [`Kind::Request`].
    Response,
    /// A packet injected by a test or replay (`seq` names it).
    Trace,
}

/// A packet in flight or queued. `Copy`, 64 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimPacket {
    pub kind: Kind,
    /// Class hint carried by the packet (client class of a request, trace class); classifiers
    /// may use it.
    pub class: u8,
    pub src: NodeId,
    pub dst: NodeId,
    /// Bytes on the wire (headers included).
    pub len: u32,
    /// TCP connection, UDP flow, pinger or client thread index, depending on `kind`.
    pub flow: u32,
    pub seq: u32,
    pub ack: u32,
    /// When the packet (or the request it answers) was first sent.
    pub sent_at: Nanos,
    /// TCP: the timestamp echoed by an ACK (RFC 7323 TSecr). Requests: arrival at the server.
    pub echo: Nanos,
    /// TCP SACK information as a bitmap: bit `i` set = segment `ack + i` is held by the
    /// receiver. Equivalent to SACK blocks without the 3–4 block limit (documented
    /// simplification, `docs/simulator.md`).
    pub sack: u128,
}

impl SimPacket {
    pub fn new(kind: Kind, src: NodeId, dst: NodeId, len: u32) -> Self {
        Self {
            kind,
            class: 0,
            src,
            dst,
            len,
            flow: 0,
            seq: 0,
            ack: 0,
            sent_at: 0,
            echo: 0,
            sack: 0,
        }
    }

    pub fn is_pure_ack(&self) -> bool {
        self.kind == Kind::TcpAck
    }
}

impl Packet for SimPacket {
    fn len(&self) -> u32 {
        self.len
    }

    fn ack_info(&self) -> Option<AckInfo> {
        if self.kind != Kind::TcpAck {
            return None;
        }
        // The ACK direction of connection `flow`: one flow key per connection.
        let flow = (self.flow as u64) << 32 | (self.src as u64) << 16 | self.dst as u64;
        Some(AckInfo {
            flow,
            ack: self.ack,
            pure: true,
            has_sack_or_other_options: self.sack != 0,
            window: 0xffff,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_is_small_and_acks_describe_themselves() {
        assert!(std::mem::size_of::<SimPacket>() <= 80);
        let mut p = SimPacket::new(Kind::TcpAck, 1, 2, 66);
        p.ack = 7;
        let info = p.ack_info().unwrap();
        assert!(info.pure && !info.has_sack_or_other_options);
        assert_eq!(info.ack, 7);
        assert!(SimPacket::new(Kind::TcpData, 1, 2, 1500)
            .ack_info()
            .is_none());
    }
}
