//! Rules changed one at a time while packets flow: `rule insert`, `rule delete` and the paged
//! `show rules` of the control socket.
//!
//! Every rule held has a **handle** (as nftables' rule handles, nft(8) "RULES"): the rules of
//! the file get 1, 2, … in file order at each load; an inserted rule gets the next unused one.
//! A handle never changes while the rule is held, so `rule delete 17` and
//! `rule insert before 17 …` mean the same rule whatever was inserted since; positions do not.
//!
//! Order is kept by a **rank** per rule (lower first): the rules of a file get ranks spread
//! evenly over the middle half of 32 bits, a rule inserted between two the middle of their
//! gap, and a rule added after the last (or inserted before the first) a rank [`END_STEP`]
//! beyond it. So about log2(2³¹ / rules) inserts at one place between two rules (14 at
//! 100,000 rules, 21 at 1,000) and about 65,000 at either end use the room up; the next is
//! refused with [`EditError::NoRoom`], and a `reload` spreads the ranks again.
//!
//! An operator's [`RuleChange`] is resolved once, against the copy of the rules the dispatcher
//! holds, into a [`RuleEdit`] that names the slot, handle and rank; every worker applies that
//! same edit to its own copy, in order with the packets (the edit travels through the
//! workers' rings as a rule swap does), so a packet is classified against the rules in force
//! when it arrived, never against a change half applied. Applying one is
//! [`TupleMergeClassifier::insert`]/[`TupleMergeClassifier::remove`] on IPv4 rules
//! (O(tables × bucket)) plus O(log rules) bookkeeping; IPv6 packets scan the rules in order.

use netsched_core::classify::acl::{self, ClassifierBuildError, TupleMergeClassifier};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::rules::{AclRule, Action, RuleSet, RulesError, MAX_RULES};

/// The rank distance from the last rule to one added after it (and from the first to one
/// inserted before it).
pub const END_STEP: u32 = 1 << 14;
/// The first rank of a loaded rule set: a quarter of the rank space is kept free before it,
/// and as much after its last.
const FIRST_RANK: u32 = 1 << 30;

/// Rules one `show rules` answers at most.
pub const MAX_PAGE: usize = 1000;
/// Rules `show rules` answers when not told.
pub const DEFAULT_PAGE: usize = 100;

/// Where an inserted rule goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Before every rule (it matches first).
    Top,
    /// After every rule.
    Bottom,
    Before(u64),
    After(u64),
}

/// What an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleChange {
    Insert { at: Place, rule: AclRule },
    Delete { handle: u64 },
}

/// A change resolved against the rules held: applied the same way by every copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleEdit {
    Insert {
        slot: u32,
        handle: u64,
        rank: u32,
        rule: AclRule,
    },
    Delete {
        slot: u32,
    },
}

/// Why a change was refused; the rules are as they were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The structure in use is built once (`--classifier linear | tuple_space`).
    Fixed(acl::ClassifierKind),
    NoSuchHandle(u64),
    /// No rank is left between the two neighbours of the place.
    NoRoom {
        place: Place,
    },
    TooManyRules,
    /// The classifier's limits refuse the rule.
    Limits(ClassifierBuildError),
    /// A removal had to place again rules it shadowed, and the limits refused one: the copy
    /// must be rebuilt (`reload`).
    Broken(ClassifierBuildError),
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::Fixed(k) => write!(
                f,
                "rules cannot be changed one at a time with the {k} classifier (start with \
                 --classifier tuple_merge, or change the file and reload)"
            ),
            EditError::NoSuchHandle(h) => {
                write!(f, "no rule has handle {h} (show rules lists the handles)")
            }
            EditError::NoRoom { place } => write!(
                f,
                "no room left at {place:?}: too many rules inserted at one place since the last \
                 load; reload to spread the ranks again"
            ),
            EditError::TooManyRules => write!(f, "{MAX_RULES} rules held, the most allowed"),
            EditError::Limits(e) => write!(f, "refused by the classifier's limits: {e}"),
            EditError::Broken(e) => write!(
                f,
                "a rule the deleted one shadowed could not be placed again ({e}); reload"
            ),
        }
    }
}

impl std::error::Error for EditError {}

#[derive(Debug, Clone)]
struct Held {
    handle: u64,
    rank: u32,
    rule: AclRule,
}

/// The IPv4 structure.
#[derive(Clone)]
enum V4 {
    /// Built once (linear scan, tuple space search), shared by every copy; core's answer is
    /// an index into `slot_of`.
    Fixed {
        kind: acl::ClassifierKind,
        c: Arc<dyn acl::PacketClassifier>,
        slot_of: Arc<[u32]>,
    },
    /// TupleMerge, edited in place; answers slots.
    Live(TupleMergeClassifier),
}

/// The rules in force, in order, with their handles: what [`crate::classifier::AclClassifier`]
/// classifies against. Memory: core's structure plus about 100 bytes per rule.
#[derive(Clone)]
pub struct HeldRules {
    /// By slot (what the IPv4 structure answers); `None` for a free slot.
    slots: Vec<Option<Held>>,
    /// Free slots, the next taken last.
    free: Vec<u32>,
    /// Rank → slot: the order.
    order: BTreeMap<u32, u32>,
    handles: HashMap<u64, u32>,
    v4: V4,
    next_handle: u64,
}

impl fmt::Debug for HeldRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldRules")
            .field("rules", &self.order.len())
            .finish()
    }
}

/// `Some(prefix)` for an IPv4 or absent prefix, `None` for an IPv6 one.
fn v4_prefix(c: &Option<netsched_core::classify::Cidr>) -> Option<acl::Ipv4Prefix> {
    match c {
        None => Some(acl::Ipv4Prefix::ANY),
        Some(c) => match c.network() {
            IpAddr::V4(a) => acl::Ipv4Prefix::new(u32::from(a), c.prefix_len()),
            IpAddr::V6(_) => None,
        },
    }
}

/// The rule in core's IPv4 form, or `None` when it has an IPv6 prefix (it never matches an
/// IPv4 packet).
fn v4_rule(r: &AclRule) -> Option<acl::AclRule> {
    Some(acl::AclRule {
        src: v4_prefix(&r.src)?,
        dst: v4_prefix(&r.dst)?,
        src_port: r.sport.unwrap_or(acl::ANY_PORT),
        dst_port: r.dport.unwrap_or(acl::ANY_PORT),
        proto: r.proto,
        action: acl::Action::Accept,
    })
}

/// Ranks for `n` rules spread evenly over the middle half of the rank space.
fn spread(n: usize) -> impl Iterator<Item = u32> {
    let first = u64::from(FIRST_RANK);
    let gap = ((2 * first) / (n as u64 + 1)).max(1);
    (0..n as u64).map(move |i| (first + i * gap) as u32)
}

impl HeldRules {
    /// The rules of `set`, handles 1.. in order, in the structure `kind`.
    pub fn build(
        set: &RuleSet,
        kind: acl::ClassifierKind,
        limits: &acl::ClassifierLimits,
    ) -> Result<HeldRules, ClassifierBuildError> {
        let n = set.rules.len();
        let mut held = HeldRules {
            slots: Vec::with_capacity(n),
            free: Vec::new(),
            order: BTreeMap::new(),
            handles: HashMap::with_capacity(n),
            v4: V4::Live(TupleMergeClassifier::new(
                acl::DEFAULT_COLLISION_LIMIT,
                limits,
            )),
            next_handle: n as u64 + 1,
        };
        for ((i, r), rank) in set.rules.iter().enumerate().zip(spread(n)) {
            held.slots.push(Some(Held {
                handle: i as u64 + 1,
                rank,
                rule: r.clone(),
            }));
            held.order.insert(rank, i as u32);
            held.handles.insert(i as u64 + 1, i as u32);
        }
        held.v4 = held.build_v4(kind, limits)?;
        Ok(held)
    }

    fn build_v4(
        &self,
        kind: acl::ClassifierKind,
        limits: &acl::ClassifierLimits,
    ) -> Result<V4, ClassifierBuildError> {
        let v4: Vec<(u32, u32, acl::AclRule)> = self
            .order
            .iter()
            .filter_map(|(&rank, &slot)| Some((rank, slot, v4_rule(&self.held(slot)?.rule)?)))
            .collect();
        if kind == acl::ClassifierKind::TupleMerge {
            let mut tm = TupleMergeClassifier::new(acl::DEFAULT_COLLISION_LIMIT, limits);
            for (rank, slot, r) in &v4 {
                tm.insert(*rank, *slot, r)?;
            }
            return Ok(V4::Live(tm));
        }
        let rules = acl::RuleSet::new(v4.iter().map(|x| x.2).collect());
        Ok(V4::Fixed {
            kind,
            c: Arc::from(acl::build_classifier(kind, &rules, limits)?),
            slot_of: v4.iter().map(|x| x.1).collect(),
        })
    }

    fn held(&self, slot: u32) -> Option<&Held> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The action of the first rule matching an IPv4 packet's `key`, if any.
    #[inline]
    pub fn first_v4(&self, key: &acl::FiveTuple) -> Option<Action> {
        let slot = match &self.v4 {
            V4::Fixed { c, slot_of, .. } => *slot_of.get(c.first_match(key)? as usize)?,
            V4::Live(tm) => acl::PacketClassifier::first_match(tm, key)?,
        };
        Some(self.held(slot)?.rule.action)
    }

    /// The action of the first rule matching a packet that is not IPv4 (a linear scan).
    pub fn first_v6(&self, t: &crate::packet::FiveTuple) -> Option<Action> {
        self.order
            .values()
            .filter_map(|&s| self.held(s))
            .find(|h| h.rule.matches(t))
            .map(|h| h.rule.action)
    }

    /// Resolve `change` into the edit every copy applies; the rules are not changed.
    pub fn resolve(&self, change: &RuleChange) -> Result<RuleEdit, EditError> {
        if let V4::Fixed { kind, .. } = &self.v4 {
            return Err(EditError::Fixed(*kind));
        }
        match change {
            RuleChange::Delete { handle } => Ok(RuleEdit::Delete {
                slot: self.slot_of(*handle)?,
            }),
            RuleChange::Insert { at, rule } => {
                if self.len() >= MAX_RULES {
                    return Err(EditError::TooManyRules);
                }
                let (low, high) = self.gap(*at)?;
                if high <= low {
                    return Err(EditError::NoRoom { place: *at });
                }
                Ok(RuleEdit::Insert {
                    slot: self.free.last().copied().unwrap_or(self.slots.len() as u32),
                    handle: self.next_handle,
                    rank: low + (high - low) / 2,
                    rule: rule.clone(),
                })
            }
        }
    }

    fn slot_of(&self, handle: u64) -> Result<u32, EditError> {
        self.handles
            .get(&handle)
            .copied()
            .ok_or(EditError::NoSuchHandle(handle))
    }

    /// The ranks free at `at`: from `low` to `high`, `high` excluded.
    fn gap(&self, at: Place) -> Result<(u32, u32), EditError> {
        let rank_of = |h: u64| -> Result<u32, EditError> {
            Ok(self.held(self.slot_of(h)?).map_or(0, |x| x.rank))
        };
        let after = |r: u32| self.order.range(r.saturating_add(1)..).next().map(|x| *x.0);
        let before = |r: u32| self.order.range(..r).next_back().map(|x| *x.0);
        let beyond = |r: u32| r.saturating_add(2 * END_STEP).min(u32::MAX - 1);
        Ok(match at {
            Place::Top => match self.order.keys().next() {
                Some(&first) => (first.saturating_sub(2 * END_STEP).max(1), first),
                None => (FIRST_RANK, FIRST_RANK + 1),
            },
            Place::Bottom => match self.order.keys().next_back() {
                Some(&last) => (last + 1, beyond(last)),
                None => (FIRST_RANK, FIRST_RANK + 1),
            },
            Place::Before(h) => {
                let r = rank_of(h)?;
                let low = before(r).map_or(r.saturating_sub(2 * END_STEP), |b| b + 1);
                (low.max(1), r)
            }
            Place::After(h) => {
                let r = rank_of(h)?;
                (r + 1, after(r).unwrap_or(beyond(r)))
            }
        })
    }

    /// Apply a resolved edit. On an error the rules are as they were, except
    /// [`EditError::Broken`].
    pub fn apply(&mut self, edit: &RuleEdit) -> Result<(), EditError> {
        match edit {
            RuleEdit::Insert {
                slot,
                handle,
                rank,
                rule,
            } => self.insert(*slot, *handle, *rank, rule),
            RuleEdit::Delete { slot } => self.delete(*slot),
        }
    }

    fn insert(
        &mut self,
        slot: u32,
        handle: u64,
        rank: u32,
        rule: &AclRule,
    ) -> Result<(), EditError> {
        if let (V4::Live(tm), Some(r)) = (&mut self.v4, v4_rule(rule)) {
            tm.insert(rank, slot, &r).map_err(EditError::Limits)?;
        }
        if slot as usize == self.slots.len() {
            self.slots.push(None);
        } else if self.free.last() == Some(&slot) {
            // The slot every copy takes (`resolve` names the last free one): O(1).
            self.free.pop();
        } else {
            self.free.retain(|&s| s != slot);
        }
        self.slots[slot as usize] = Some(Held {
            handle,
            rank,
            rule: rule.clone(),
        });
        self.order.insert(rank, slot);
        self.handles.insert(handle, slot);
        self.next_handle = self.next_handle.max(handle + 1);
        Ok(())
    }

    fn delete(&mut self, slot: u32) -> Result<(), EditError> {
        let Some(h) = self.slots.get_mut(slot as usize).and_then(Option::take) else {
            return Ok(());
        };
        self.order.remove(&h.rank);
        self.handles.remove(&h.handle);
        self.free.push(slot);
        if let (V4::Live(tm), Some(r)) = (&mut self.v4, v4_rule(&h.rule)) {
            tm.remove(h.rank, &r).map_err(EditError::Broken)?;
        }
        Ok(())
    }

    /// Up to `count` rules (at most [`MAX_PAGE`]) from position `from` (0 = first), one per
    /// line: `position handle rule`; O(from + count).
    pub fn page(&self, from: usize, count: usize) -> String {
        let mut out = format!(
            "{} rules; positions {}-{}\n",
            self.len(),
            from,
            (from + count.min(MAX_PAGE))
                .min(self.len())
                .saturating_sub(1)
        );
        for (i, &slot) in self
            .order
            .values()
            .enumerate()
            .skip(from)
            .take(count.min(MAX_PAGE))
        {
            if let Some(h) = self.held(slot) {
                out += &format!("{i} handle {} {}\n", h.handle, h.rule);
            }
        }
        out
    }
}

/// The answer to an edit done: `handle 12 inserted` / `rule deleted`.
pub fn describe(e: &RuleEdit) -> String {
    match e {
        RuleEdit::Insert { handle, rule, .. } => format!("handle {handle}: {rule}"),
        RuleEdit::Delete { .. } => "rule deleted".into(),
    }
}

/// The rule a `rule insert` line describes: `key=value` words with the rule file's keys and
/// values (docs/rules.md), read by the rule file's one parser, so errors name the key and the
/// value as they do for a file.
pub fn parse_rule_words(words: &[&str]) -> Result<AclRule, RulesError> {
    let mut text = String::from("[[rule]]\n");
    for w in words {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        let v = v.trim_matches('"');
        if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
            text += &format!("{k} = {v}\n");
        } else {
            text += &format!("{k} = \"{}\"\n", v.escape_default());
        }
    }
    let set = RuleSet::from_toml_str(&text, "the request")?;
    Ok(set.rules.into_iter().next().unwrap_or(AclRule {
        proto: acl::ProtoMatch::ANY,
        src: None,
        dst: None,
        sport: None,
        dport: None,
        action: Action::Accept,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::FiveTuple;

    fn held(text: &str, kind: acl::ClassifierKind) -> HeldRules {
        let set = RuleSet::from_toml_str(text, "t").unwrap();
        HeldRules::build(&set, kind, &Default::default()).unwrap()
    }

    fn rule(words: &str) -> AclRule {
        parse_rule_words(&words.split(' ').collect::<Vec<_>>()).unwrap()
    }

    fn udp(dport: u16) -> acl::FiveTuple {
        acl::FiveTuple {
            src: 0x0A00_0001,
            dst: 0x0A00_0002,
            src_port: 7,
            dst_port: dport,
            proto: 17,
        }
    }

    fn change(h: &mut HeldRules, c: RuleChange) -> Result<RuleEdit, EditError> {
        let e = h.resolve(&c)?;
        h.apply(&e)?;
        Ok(e)
    }

    const TWO: &str = "[[rule]]\naction = \"drop\"\ndport = 53\n\
                       [[rule]]\naction = \"class\"\nclass = 1\ndport = \"1-100\"\n";

    /// Handles follow the file, an insert takes the next, and places and deletes change the
    /// first match as a list would.
    #[test]
    fn inserts_and_deletes_change_the_first_match_by_handle() {
        let mut h = held(TWO, acl::ClassifierKind::TupleMerge);
        assert_eq!(h.first_v4(&udp(53)), Some(Action::Drop));
        let top = RuleChange::Insert {
            at: Place::Top,
            rule: rule("action=accept dport=53"),
        };
        let RuleEdit::Insert { handle, .. } = change(&mut h, top).unwrap() else {
            panic!("not an insert");
        };
        assert_eq!(handle, 3);
        assert_eq!(h.first_v4(&udp(53)), Some(Action::Accept));
        change(&mut h, RuleChange::Delete { handle: 3 }).unwrap();
        assert_eq!(h.first_v4(&udp(53)), Some(Action::Drop));
        change(&mut h, RuleChange::Delete { handle: 1 }).unwrap();
        assert_eq!(h.first_v4(&udp(53)), Some(Action::Class(1)));
        let after = RuleChange::Insert {
            at: Place::After(2),
            rule: rule("action=drop"),
        };
        change(&mut h, after).unwrap();
        assert_eq!(h.first_v4(&udp(200)), Some(Action::Drop));
        assert_eq!(h.first_v4(&udp(50)), Some(Action::Class(1)));
        assert_eq!(h.len(), 2);
        assert_eq!(
            h.page(0, 10),
            "2 rules; positions 0-1\n0 handle 2 action=class class=1 dport=1-100\n\
             1 handle 4 action=drop\n"
        );
        assert_eq!(
            change(&mut h, RuleChange::Delete { handle: 1 }),
            Err(EditError::NoSuchHandle(1))
        );
    }

    /// Inserts at one place use the gap up, and are then refused without a change; the ends
    /// take many more.
    #[test]
    fn a_used_up_gap_is_refused_and_the_ends_keep_room() {
        let mut h = held(TWO, acl::ClassifierKind::TupleMerge);
        let mut n = 0;
        let err = loop {
            let c = RuleChange::Insert {
                at: Place::Before(2),
                rule: rule("action=accept dport=9"),
            };
            match change(&mut h, c) {
                Ok(_) => n += 1,
                Err(e) => break e,
            }
        };
        assert!(
            (25..=31).contains(&n),
            "{n} inserts between two of two rules"
        );
        assert_eq!(
            err,
            EditError::NoRoom {
                place: Place::Before(2)
            }
        );
        assert_eq!(h.len(), 2 + n);
        for _ in 0..5000 {
            let c = RuleChange::Insert {
                at: Place::Bottom,
                rule: rule("action=accept dport=9"),
            };
            change(&mut h, c).unwrap();
        }
    }

    /// A structure built once refuses edits and says which flag allows them.
    #[test]
    fn fixed_structures_refuse_edits() {
        let h = held(TWO, acl::ClassifierKind::Linear);
        let e = h.resolve(&RuleChange::Delete { handle: 1 }).unwrap_err();
        assert!(e.to_string().contains("--classifier tuple_merge"), "{e}");
    }

    /// A packet of another family scans every rule in order.
    #[test]
    fn ipv6_packets_see_edits_too() {
        let mut h = held(TWO, acl::ClassifierKind::TupleMerge);
        let t = FiveTuple {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            proto: 17,
            sport: 7,
            dport: 53,
        };
        assert_eq!(h.first_v6(&t), Some(Action::Drop));
        let top = RuleChange::Insert {
            at: Place::Top,
            rule: rule("action=accept src=2001:db8::/32"),
        };
        change(&mut h, top).unwrap();
        assert_eq!(h.first_v6(&t), Some(Action::Accept));
        assert_eq!(h.first_v4(&udp(53)), Some(Action::Drop));
    }
}
