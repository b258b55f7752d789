//! [`AnyQdisc`]: the enum engines dispatch through, and [`QdiscConfig`], its serde form
//! (TOML/JSON `kind = "..."`), so engines never know which discipline they run.

use super::ack::{default_separation_band, AckSeparation};
use super::delay::{DelayConstrained, DelayInterfaceConfig};
use super::drr::{Drr, DrrClassConfig};
use super::edf::{Edf, EdfClassConfig};
use super::fifo::Fifo;
use super::percentile::{MaxHold, PercentileDeadline, PercentileMemory, PercentileQueue};
use super::prio::{BandConfig, StrictPriority};
use super::wf2q::{Wf2qClassConfig, Wf2qPlus};
use super::{ClassId, Feedback, Packet, Qdisc, QdiscConfigError, QdiscStats, Verdict};
use crate::time::Instant;
use serde::{Deserialize, Serialize};

/// Configuration of a discipline, as written in scenario and replay files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum QdiscConfig {
    /// Tail-drop FIFO.
    Fifo {
        #[serde(
            default = "super::limits::default_queue_limit",
            alias = "limit_packets"
        )]
        queue_limit: usize,
        #[serde(
            default = "super::limits::no_size_limit",
            alias = "limit_bytes",
            deserialize_with = "crate::units::serde_size_or_bytes"
        )]
        size_limit: u64,
    },
    /// Strict priority over FIFO bands, band 0 first (`prio.rs`).
    StrictPriority { bands: Vec<BandConfig> },
    /// Deficit round robin, per-class quantum in bytes (`drr.rs`).
    Drr { classes: Vec<DrrClassConfig> },
    /// WF2Q+ fair queueing, per-class integer weight (`wf2q.rs`).
    Wf2qPlus { classes: Vec<Wf2qClassConfig> },
    /// Earliest deadline first, per-class relative deadline (`edf.rs`).
    Edf {
        classes: Vec<EdfClassConfig>,
        #[serde(default)]
        drop_expired: bool,
    },
    /// P3 ACK separation: class 0 = pure TCP ACKs (strictly first), class 1 = the rest
    /// (`ack.rs`), with optional ACK filter and ACK share cap.
    AckSeparation {
        #[serde(default = "default_separation_band")]
        ack: BandConfig,
        #[serde(default = "default_separation_band")]
        other: BandConfig,
        #[serde(default)]
        ack_filter: bool,
        #[serde(default)]
        ack_share_max: Option<f64>,
    },
    /// P0 Percentile: one FIFO per client class (class 0 highest), the class with the lowest
    /// attainment S/(N·P) first (`percentile/`).
    Percentile {
        /// Target percent per class, e.g. `[90, 80, 70, 60, 50]`.
        percentiles: Vec<u32>,
        /// Per-class queue limit.
        #[serde(
            default = "super::limits::default_queue_limit",
            alias = "limit_packets"
        )]
        queue_limit: usize,
        /// `"auto"` (running mean response time), `{ ms = 4.0 }` or `{ ns = 4000000 }`.
        #[serde(default)]
        deadline: PercentileDeadline,
        /// `"forever"`, `{ window = n }` or `{ half_life_ms = x }`.
        #[serde(default)]
        memory: PercentileMemory,
        /// Beyond the thesis: every class's bound on waiting, `"off"` (default),
        /// `"deadline"` or a duration (`percentile/max_hold.rs`).
        #[serde(default)]
        max_hold: MaxHold,
    },
    /// P2 delay-constrained priority over interfaces in batch rounds, with delay bitmaps
    /// (`delay.rs`); `wall_clock = true` promotes by the head packet's age instead.
    DelayConstrained {
        interfaces: Vec<DelayInterfaceConfig>,
        /// Packets per round (P2 §3.2.1: 238 in netback).
        #[serde(default = "default_batch")]
        batch: usize,
        #[serde(default)]
        wall_clock: bool,
        /// Preempt only the interface of the previous round, as Fig. 4 reads (comparison
        /// only: the wait bound does not hold).
        #[serde(default)]
        literal_fig4: bool,
    },
}

fn default_batch() -> usize {
    238
}

/// The discipline enums and their dispatch, from the one list in `kinds.rs`.
macro_rules! qdisc_family {
    ($($variant:ident => $text:literal => $ty:ident,)+) => {
        crate::kinds::kinds! {
            /// Every discipline kind, named as `kind = "..."` reads it. Adding a
            /// [`QdiscConfig`] variant fails to compile until it has a kind in `kinds.rs`
            /// ([`QdiscConfig::kind`]), and a kind fails to compile until the property tests
            /// (`tests/qdisc_props.rs`) and the benches (`benches/core.rs`) map it to a
            /// configuration by exhaustive `match`.
            pub enum QdiscKind {
                $($variant => $text,)+
            }
        }

        impl QdiscConfig {
            /// Which kind this is.
            pub fn kind(&self) -> QdiscKind {
                match self {
                    $(QdiscConfig::$variant { .. } => QdiscKind::$variant,)+
                }
            }
        }

        /// Every discipline, statically dispatched.
        #[derive(Debug)]
        pub enum AnyQdisc<T> {
            $($variant($ty<T>),)+
        }

        impl<T: Packet> Qdisc<T> for AnyQdisc<T> {
            #[inline]
            fn enqueue(&mut self, class: ClassId, item: T, now: Instant) -> Verdict<T> {
                match self {
                    $(AnyQdisc::$variant(q) => q.enqueue(class, item, now),)+
                }
            }
            #[inline]
            fn dequeue(&mut self, now: Instant) -> Option<T> {
                match self {
                    $(AnyQdisc::$variant(q) => q.dequeue(now),)+
                }
            }
            fn peek(&mut self, now: Instant) -> Option<&T> {
                match self {
                    $(AnyQdisc::$variant(q) => q.peek(now),)+
                }
            }
            fn reset(&mut self) -> Vec<T> {
                match self {
                    $(AnyQdisc::$variant(q) => q.reset(),)+
                }
            }
            fn stats(&self) -> &QdiscStats {
                match self {
                    $(AnyQdisc::$variant(q) => q.stats(),)+
                }
            }
            fn next_timer(&self, now: Instant) -> Option<Instant> {
                match self {
                    $(AnyQdisc::$variant(q) => q.next_timer(now),)+
                }
            }
            fn feedback(&mut self, fb: Feedback, now: Instant) {
                match self {
                    $(AnyQdisc::$variant(q) => q.feedback(fb, now),)+
                }
            }
        }
    };
}

crate::kinds::qdisc_list!(qdisc_family);

impl QdiscConfig {
    /// Build the discipline. `Err` names the field that is wrong.
    pub fn build<T: Packet>(&self) -> Result<AnyQdisc<T>, QdiscConfigError> {
        Ok(match self {
            QdiscConfig::Fifo {
                queue_limit,
                size_limit,
            } => {
                if *queue_limit == 0 {
                    return Err(QdiscConfigError::too_small("queue_limit", 1));
                }
                AnyQdisc::Fifo(Fifo::new(*queue_limit, *size_limit))
            }
            QdiscConfig::StrictPriority { bands } => {
                AnyQdisc::StrictPriority(StrictPriority::new(bands)?)
            }
            QdiscConfig::Drr { classes } => AnyQdisc::Drr(Drr::new(classes)?),
            QdiscConfig::Wf2qPlus { classes } => AnyQdisc::Wf2qPlus(Wf2qPlus::new(classes)?),
            QdiscConfig::Edf {
                classes,
                drop_expired,
            } => AnyQdisc::Edf(Edf::new(classes, *drop_expired)?),
            QdiscConfig::AckSeparation {
                ack,
                other,
                ack_filter,
                ack_share_max,
            } => AnyQdisc::AckSeparation(AckSeparation::new(
                ack,
                other,
                *ack_filter,
                *ack_share_max,
            )?),
            QdiscConfig::Percentile {
                percentiles,
                queue_limit,
                deadline,
                memory,
                max_hold,
            } => {
                let mut q = PercentileQueue::new(percentiles, *queue_limit, *deadline, *memory)
                    .map_err(QdiscConfigError::Percentile)?;
                for class in 0..percentiles.len() {
                    q.set_max_hold(class, *max_hold)
                        .map_err(QdiscConfigError::Percentile)?;
                }
                AnyQdisc::Percentile(q)
            }
            QdiscConfig::DelayConstrained {
                interfaces,
                batch,
                wall_clock,
                literal_fig4,
            } => AnyQdisc::DelayConstrained(
                DelayConstrained::new(interfaces, *batch, *wall_clock)?
                    .with_literal_fig4(*literal_fig4),
            ),
        })
    }
}

impl<T: Packet> AnyQdisc<T> {
    /// Per-class status for status tables. Single-queue disciplines report one entry built
    /// from their aggregate counters.
    pub fn class_status(&self) -> Vec<super::ClassStatus> {
        #[allow(unreachable_patterns)]
        match self {
            AnyQdisc::StrictPriority(q) => q.class_status(),
            AnyQdisc::Drr(q) => q.class_status(),
            AnyQdisc::Wf2qPlus(q) => q.class_status(),
            AnyQdisc::Edf(q) => q.class_status(),
            AnyQdisc::AckSeparation(q) => q.class_status(),
            AnyQdisc::Percentile(q) => q.class_status(),
            AnyQdisc::DelayConstrained(q) => q.class_status(),
            other => {
                let s = other.stats();
                vec![super::ClassStatus {
                    class: 0,
                    queued_packets: s.queued_packets,
                    queued_bytes: s.queued_bytes,
                    dequeued: s.dequeued,
                    dropped: s.dropped(),
                    extra: Vec::new(),
                }]
            }
        }
    }

    /// Items evicted outside `enqueue` (EDF's late items at `dequeue`/`peek`), which the
    /// engine must collect after each dequeue so none is lost. Empty for the others.
    pub fn take_evicted(&mut self) -> Vec<(T, super::DropReason)> {
        #[allow(clippy::match_single_binding, unreachable_patterns)]
        match self {
            AnyQdisc::Edf(q) => q
                .take_expired()
                .into_iter()
                .map(|item| (item, super::DropReason::DeadlineExpired))
                .collect(),
            _ => Vec::new(),
        }
    }
}
