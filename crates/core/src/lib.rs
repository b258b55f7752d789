//! # netsched-core — every scheduling algorithm, written once
//!
//! This crate knows no clock, socket or thread. Time is a parameter (`now`, a
//! [`time::Instant`] in nanoseconds) on every call; randomness is injected ([`rng::SplitMix64`]); iteration orders
//! are deterministic. The same code therefore runs inside the deterministic simulator
//! (`netsched-sim`) and inside the real data planes (`netsched-link`, `netsched-nfq`).
//!
//! ## Map of the code
//! | folder | what lives there |
//! |---|---|
//! | [`qdisc`] | queue disciplines behind the [`qdisc::Qdisc`] ops table (enqueue, dequeue, peek, reset, stats, next_timer): FIFO, strict priority, DRR, WF2Q+, EDF, **Percentile** (P0), **delay-constrained priority** (P2), **ACK separation** (P3); [`qdisc::AnyQdisc`] is the enum the engines dispatch through |
//! | [`classify`] | classifiers, separate from disciplines: CIDR longest-prefix table (P0), TCP pure-ACK test (P3), header-field rules |
//! | [`balance`] | load balancers with Linux IPVS semantics (P4) behind [`balance::Balancer`] |
//! | [`dispatch`] | block-to-worker dispatch policies for multi-core packet processing (P1) |
//! | [`wire`] | zero-copy views of IPv4/IPv6/TCP headers, enough for classification |
//! | [`rng`] | the seeded generator every randomised algorithm takes |
//!
//! An engine owns the clock and the I/O; it asks a classifier for a class, hands the item to a
//! discipline with `now`, and calls `dequeue` when its link, server or core is free (or when
//! `next_timer` says so). See `docs/architecture.md`.

#![forbid(unsafe_code)]

pub mod balance;
pub mod classify;
pub mod dispatch;
mod kinds;
pub mod qdisc;
pub mod rng;
pub mod time;
pub mod units;
pub mod wire;

/// A count of nanoseconds on the engine's clock, for callers that hold either role; the
/// core's own signatures say which ([`time::Instant`] or [`time::Duration`]).
pub type Nanos = u64;

pub use time::{MS, SEC};
