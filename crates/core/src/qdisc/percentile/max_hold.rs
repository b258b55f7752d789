//! The percentile discipline's bound on waiting (beyond the thesis): how long a queued
//! request of a class may wait before it leaves whatever P0's rule would choose.
//!
//! Why: P0's rule (§2.3.1) serves the class furthest below its target and nothing else, so a
//! class whose attainment sits at or above what the others reach is not served while they
//! have requests queued. In a closed loop (P0 §4: every client thread waits for its answer
//! before it sends again) a class that waits sends less, and its share of the answers shrinks
//! without limit although its ratio `S / (N·P)` stays at its target (measured on the balancer:
//! docs/balance-classes.md). `netsched nfq` bounds the hold of a request outside the
//! discipline (`[limits] max_hold`, docs/nfq.md); this is the same bound inside the
//! discipline, so every engine of the core's `PercentileQueue` (the balancer's queue, the
//! simulator) has it.
//!
//! The rule with the bound: when a class's oldest request has waited at least its bound, the
//! overdue head that arrived first leaves next (ties to the lower class index); otherwise P0's
//! rule decides. Among overdue requests this is arrival order, so no request waits more than
//! its bound plus the time to serve the overdue requests older than it. A closed-loop class of
//! `c` connections whose requests take `t` once they leave the queue is then answered at
//! least `c / (bound + t)` times per second, whatever the other classes do.
//!
//! Values (serde and the configuration files: a string): `"off"` (P0's rule alone),
//! `"deadline"` (the class's deadline in force: fixed, or the running automatic one; no bound
//! while an automatic deadline has no sample), or a duration in the units grammar above zero.

use crate::time::Duration;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A class's bound on waiting. See the module header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxHold {
    /// P0's rule alone.
    #[default]
    Off,
    /// The deadline the class's completions are judged against now: the moment a waiting
    /// request has become a miss whatever happens next.
    Deadline,
    /// A fixed bound, ns (above zero).
    Fixed(Duration),
}

impl MaxHold {
    /// `"off"`, `"deadline"` or a duration above zero; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "off" => Ok(MaxHold::Off),
            "deadline" => Ok(MaxHold::Deadline),
            t => match crate::units::parse_duration(t) {
                Ok(0) => Err("\"off\", \"deadline\" or a duration above zero: got zero".into()),
                Ok(ns) => Ok(MaxHold::Fixed(ns)),
                Err(e) => Err(format!(
                    "\"off\", \"deadline\" or a duration above zero: {e}"
                )),
            },
        }
    }

    /// The bound in force, given the class's deadline now (`None`: no bound now).
    #[inline]
    pub fn bound(self, class_deadline: Option<Duration>) -> Option<Duration> {
        match self {
            MaxHold::Off => None,
            MaxHold::Deadline => class_deadline,
            MaxHold::Fixed(ns) => Some(ns),
        }
    }
}

impl fmt::Display for MaxHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MaxHold::Off => f.write_str("off"),
            MaxHold::Deadline => f.write_str("deadline"),
            MaxHold::Fixed(ns) => f.write_str(&crate::units::format_duration(*ns)),
        }
    }
}

impl Serialize for MaxHold {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for MaxHold {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        MaxHold::parse(&text)
            .map_err(|why| serde::de::Error::custom(format!("max_hold {text:?}: {why}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MS;

    #[test]
    fn parse_accepts_the_three_forms_and_refuses_zero_and_junk() {
        assert_eq!(MaxHold::parse("off"), Ok(MaxHold::Off));
        assert_eq!(MaxHold::parse("deadline"), Ok(MaxHold::Deadline));
        assert_eq!(MaxHold::parse("500ms"), Ok(MaxHold::Fixed(500 * MS)));
        assert!(MaxHold::parse("0ms").unwrap_err().contains("zero"));
        assert!(MaxHold::parse("soon").unwrap_err().contains("\"deadline\""));
        assert_eq!(MaxHold::Fixed(500 * MS).to_string(), "500ms");
        assert_eq!(MaxHold::Deadline.bound(Some(7)), Some(7));
        assert_eq!(MaxHold::Deadline.bound(None), None);
        assert_eq!(MaxHold::Off.bound(Some(7)), None);
    }
}
