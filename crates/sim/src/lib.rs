//! # netsched-sim — the deterministic discrete-event simulator behind `netsched lab`
//!
//! Virtual time in nanoseconds; one seeded generator per run; events are plain data (no boxed
//! closure per event) so the per-packet work, not the event queue, sets the speed.
//!
//! ## Map of the code
//! | module | what lives there |
//! |---|---|
//! | [`event`] | [`event::EventQueue`]: a binary heap of `(time, seq, E)`; ties broken by insertion order |
//! | [`packet`] | [`packet::SimPacket`]: the 64-byte `Copy` packet (implements `netsched_core::qdisc::Packet`) |
//! | [`net`] | [`net::Sim`]: nodes, links with `AnyQdisc` egress, input stages, routing, the event loop |
//! | [`tcp`] | [`tcp::TcpConn`]: NewReno / SACK / RFC 6298 RTO / delayed ACK, segment-granular |
//! | [`app`] | servers (scheduler → listen queue → workers), clients (closed / open loop), UDP and ping probes |
//! | [`error`] | typed errors of the builders ([`error::SimConfigError`], [`error::TcpConfigError`]) |
//! | [`topo`] | ready-made topologies (the P3 ADSL gateway) shared by the lab and the benches |
//!
//! See `docs/simulator.md` for the model and its simplifications.

#![forbid(unsafe_code)]

pub mod app;
pub mod error;
pub mod event;
pub mod net;
pub mod packet;
pub mod tcp;
pub mod topo;
