//! A frame held by the switch: what the disciplines queue (a pool slot, not the bytes).

use netsched_core::qdisc::Packet;
use netsched_core::Nanos;

/// A frame held by the switch: its pool slot, length, guest port and arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub slot: u32,
    pub len: u32,
    pub port: u32,
    pub arrived: Nanos,
}

impl Packet for Frame {
    fn len(&self) -> u32 {
        self.len
    }
}
