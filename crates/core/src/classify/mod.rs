//! Classifiers: decide an item's class, separately from the discipline that queues it.
//!
//! An engine asks a [`Classifier`] for the class of each item and passes it to
//! `Qdisc::enqueue`. Classes are plain indices ([`ClassId`]); each discipline documents what
//! its classes mean (for [`crate::qdisc::ack::AckSeparation`] 0 = pure ACK, 1 = the rest).
//!
//! - [`CidrTable`]: IPv4/IPv6 longest-prefix match to a class, with a default class (P0's IP
//!   table: `220.x → A`, `192.x → B`, `210.x → C`, anything else → the lowest class D);
//! - [`PureAckClassifier`]: TCP pure ACK → 0, anything else → 1 (P3);
//! - [`RuleClassifier`]: ordered header-field rules (protocol, src/dst CIDR, port ranges,
//!   pure ACK), first match wins, like a `tc filter` list or an iptables chain;
//! - [`acl`]: first-match ACLs on the IPv4 5-tuple at scale (ClassBench rule files, linear,
//!   tuple space search and TupleMerge structures, a ClassBench-like generator).

pub mod acl;
mod cidr;
mod error;
mod rules;

pub use cidr::{AddressField, Cidr, CidrEntryConfig, CidrTable, CidrTableConfig};
pub use error::{CidrError, ClassifierConfigError, PortRangeError};
pub use rules::{
    PortRange, PureAckClassifier, Rule, RuleClassifier, RuleClassifierConfig, RuleConfig,
};

pub use crate::qdisc::ClassId;

/// Decides the class of an item. `T` may be unsized (`[u8]` for raw IP packets).
pub trait Classifier<T: ?Sized> {
    fn classify(&self, item: &T) -> ClassId;
}

#[cfg(test)]
mod props;
