//! # netsched-sim — the deterministic discrete-event simulator behind `netsched lab`
//!
//! Virtual time in nanoseconds; one seeded generator per run; events are plain data (no boxed
//! closure per event) so the per-packet work, not the event queue, sets the speed.
//!
//! ## Map of the code
//! | module | what lives there |
//! |---|---|
//! | [`event`] | [`event::EventQueue`]: a binary heap of `(time, seq, E)`; ties broken by insertion order |

pub mod event;
