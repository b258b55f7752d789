//! The classifier seam: what the filter's work asks of a rule set ([`PacketClassifier`]) and
//! the one place a structure is chosen ([`build_classifier`]). [`AclClassifier`] holds the
//! rules of a [`RuleSet`] as [`HeldRules`] (IPv4 through core's ACL structures, IPv6 through
//! a scan in order), changed one at a time through [`crate::rule_edit`].

use netsched_core::classify::acl::{self, ClassifierBuildError, ClassifierKind, ClassifierLimits};
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::packet::FiveTuple;
use crate::rule_edit::{EditError, HeldRules, RuleChange, RuleEdit};
use crate::rules::{Action, RuleSet, RulesFormat};

/// First-match classification of a 5-tuple: what the filter's SOP work calls.
pub trait PacketClassifier: Send + Sync + fmt::Debug {
    /// The action for `t` (a rule's, or the default).
    fn classify(&self, t: &FiveTuple) -> Action;
    /// Rules held.
    fn rules(&self) -> usize;
    /// What was loaded, for the log and the `reload` answer:
    /// `rules: 10000 loaded from acl1.rules (classbench), default accept, tuple_merge, 0.21 s`.
    fn summary(&self) -> String;
    /// A copy (each worker edits its own: [`crate::rule_edit`]).
    fn clone_box(&self) -> Box<dyn PacketClassifier>;
    /// Resolve an operator's change against the rules held (nothing changes).
    fn resolve(&self, change: &RuleChange) -> Result<RuleEdit, EditError>;
    /// Apply a resolved change.
    fn apply(&mut self, edit: &RuleEdit) -> Result<(), EditError>;
    /// Up to `count` rules from position `from`, one per line (`show rules`).
    fn page(&self, from: usize, count: usize) -> String;
}

/// IPv4 packets through one of core's ACL structures (`netsched_core::classify::acl`: a
/// linear scan, tuple space search or TupleMerge, all with the same first-match answers),
/// IPv6 packets through a linear scan of the rules that may match them.
///
/// Core's structures hold IPv4 5-tuples only (as ClassBench's filters do), so the rules whose
/// prefixes are IPv4 or absent are copied into them; a rule with an IPv6 prefix never matches
/// an IPv4 packet and is left out. With TupleMerge the rules can be changed one at a time
/// ([`crate::rule_edit`]). Memory: core's structure (bounded by [`ClassifierLimits`]) plus
/// about 100 bytes per rule.
#[derive(Debug, Clone)]
pub struct AclClassifier {
    held: HeldRules,
    default: Action,
    source: String,
    format: RulesFormat,
    kind: ClassifierKind,
    /// Reading, parsing and building, together.
    load_time: Duration,
}

impl AclClassifier {
    /// The structure the IPv4 rules were built into.
    pub fn kind(&self) -> ClassifierKind {
        self.kind
    }
}

impl PacketClassifier for AclClassifier {
    fn classify(&self, t: &FiveTuple) -> Action {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            return self.held.first_v6(t).unwrap_or(self.default);
        };
        let key = acl::FiveTuple {
            src: u32::from(src),
            dst: u32::from(dst),
            src_port: t.sport,
            dst_port: t.dport,
            proto: t.proto,
        };
        self.held.first_v4(&key).unwrap_or(self.default)
    }
    fn rules(&self) -> usize {
        self.held.len()
    }
    fn summary(&self) -> String {
        format!(
            "rules: {} loaded from {} ({}), default {}, {}, {:.2} s",
            self.held.len(),
            self.source,
            self.format,
            self.default,
            self.kind,
            self.load_time.as_secs_f64()
        )
    }
    fn clone_box(&self) -> Box<dyn PacketClassifier> {
        Box::new(self.clone())
    }
    fn resolve(&self, change: &RuleChange) -> Result<RuleEdit, EditError> {
        self.held.resolve(change)
    }
    fn apply(&mut self, edit: &RuleEdit) -> Result<(), EditError> {
        self.held.apply(edit)
    }
    fn page(&self, from: usize, count: usize) -> String {
        self.held.page(from, count)
    }
}

/// The classifier the filter uses for `set` (`--classifier`) — the one place a structure is
/// chosen. Refused when the structure would exceed `limits` (tuple space explosion).
pub fn build_classifier(
    set: RuleSet,
    kind: ClassifierKind,
    limits: &ClassifierLimits,
) -> Result<Box<dyn PacketClassifier>, ClassifierBuildError> {
    let start = Instant::now();
    let held = HeldRules::build(&set, kind, limits)?;
    let load_time = set.read_time + start.elapsed();
    Ok(Box::new(AclClassifier {
        held,
        default: set.default,
        source: set.source,
        format: set.format,
        kind,
        load_time,
    }))
}
