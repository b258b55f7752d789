//! # netsched-link — P3 on real Linux
//!
//! - [`shape`]: `netsched shape`, the gateway configuration (HTB + u32 ACK class via `tc -batch`)
//! - [`engine`]: `netsched link`, a userspace link engine (AF_PACKET) running core disciplines
//! - [`experiment`]: `netsched lab run adsl-ack --real`

pub mod ackcfg;
pub mod bench;
pub mod engine;
pub mod experiment;
pub mod shape;
