//! Locality-based least-connection: lblc (`net/netfilter/ipvs/ip_vs_lblc.c`) and lblc with
//! replication, lblcr (`net/netfilter/ipvs/ip_vs_lblcr.c`). Built for cache clusters: the
//! same destination address (the object's origin server) keeps going to the same cache, so
//! the cache stays warm.
//!
//! **lblc** keeps a map destination address → server. A hit keeps its server unless that
//! server has weight 0, has left the table, or is overloaded in the lblc sense
//! (`is_overloaded` in ip_vs_lblc.c): it has more active connections than its weight *and*
//! some server has fewer than half its weight in active connections (`active·2 < weight`).
//! A miss, or an entry to replace, takes the weighted least-connection server (as wlc) and
//! records it. Its overhead is `active·256 + inactive` (`ip_vs_dest_conn_overhead`) by
//! default; [`LocalityLeastConn::with_active_weight`]`(50)` gives the older kernels' lblc
//! formula `activeconns*50 + inactconns` (ip_vs_lblc.c v1.10 2002/09/15, Linux 2.4/2.6 —
//! unified with lc/wlc's 256 later), under which a long TIME_WAIT history of inactive
//! connections outweighs the active ones. Note: as in the kernel, the cached server's `overloaded` flag is not looked at
//! on a hit; only the 2×weight rule, weight 0 and removal send the destination elsewhere.
//!
//! **lblcr** maps a destination to a *set* of servers. A hit picks the weighted
//! least-connection member of the set (skipping overloaded and weight-0 members); if that one
//! is lblc-overloaded (or none is usable), the weighted least-connection server of the whole
//! table is added to the set (newest first, as `list_add_rcu` does) and used. When the set has
//! more than one member and has not changed for `expiration`, its most loaded member is
//! removed (set shrink of `ip_vs_lblcr_schedule`). Deviation: servers that left the table are
//! dropped from sets at lookup (the kernel keeps trash references until expiry).
//!
//! Expiry of stale entries (the kernel's periodic timer `ip_vs_lblc_check_expire`), driven by
//! `now`: every `CHECK_EXPIRE_INTERVAL` = 60 s of `now`, entries unused for `expiration`
//! (default 24 h, `DEFAULT_EXPIRATION`) are removed; when the map holds more than
//! `max_entries` (kernel: 16 × 1024 table size) entries unused for `ENTRY_TIMEOUT` = 6 min go
//! too. Deviation: the kernel caps one collection at a goal and does the 24 h sweep only
//! every 30th timer tick; here each check sweeps fully (O(entries) once a minute).
//!
//! Cost per pick: a hash-map lookup, plus an O(n) scan when the cached server has more
//! active connections than its weight or a new server must be chosen. Memory: one entry per
//! destination address seen within the expiration (lblcr: plus its set).

use super::{
    lighter, weighted_least_conn, weighted_least_conn_by, Balancer, FastMap, FlowKey, Server,
    ServerId, ServerTable,
};
use crate::time::{Duration, Instant};
use crate::SEC;
use std::net::IpAddr;

/// `DEFAULT_EXPIRATION` = 24 h (ip_vs_lblc.c, ip_vs_lblcr.c).
pub const DEFAULT_EXPIRATION: Duration = 24 * 3600 * SEC;
/// `CHECK_EXPIRE_INTERVAL` = 60 s (ip_vs_lblc.c).
pub const CHECK_EXPIRE_INTERVAL: Duration = 60 * SEC;
/// `ENTRY_TIMEOUT` = 6 min (ip_vs_lblc.c).
pub const ENTRY_TIMEOUT: Duration = 6 * 60 * SEC;
/// `max_size = IP_VS_LBLC_TAB_SIZE * 16` with 2^10 buckets (ip_vs_lblc.c).
pub const DEFAULT_MAX_ENTRIES: usize = 16 * 1024;

type AddrMap<V> = FastMap<u128, V>;

/// IPv4 as its IPv4-mapped IPv6 form, so one integer key covers both families.
#[inline]
fn addr_key(a: &IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

/// The 2×weight rule (`is_overloaded` in ip_vs_lblc.c / ip_vs_lblcr.c): `s` is overloaded if
/// it has more active connections than its weight and some server is below half its weight.
fn lblc_overloaded(s: &Server, servers: &ServerTable) -> bool {
    s.active > s.weight
        && servers
            .servers()
            .iter()
            .any(|d| (d.active as u64) * 2 < d.weight as u64)
}

/// Expiry book-keeping shared by lblc and lblcr.
#[derive(Debug, Clone)]
struct Expiry {
    expiration: Duration,
    max_entries: usize,
    next_check: Instant,
}

impl Expiry {
    fn new(expiration: Duration, max_entries: usize) -> Self {
        Self {
            expiration,
            max_entries,
            next_check: CHECK_EXPIRE_INTERVAL,
        }
    }

    /// Remove stale entries if a check is due at `now`; `last_use` reads an entry's time.
    fn maybe_collect<V>(
        &mut self,
        map: &mut AddrMap<V>,
        now: Instant,
        last_use: fn(&V) -> Instant,
    ) {
        if now < self.next_check {
            return;
        }
        self.next_check = now.saturating_add(CHECK_EXPIRE_INTERVAL);
        let expiration = self.expiration;
        map.retain(|_, v| now.saturating_sub(last_use(v)) < expiration);
        if map.len() > self.max_entries {
            map.retain(|_, v| now.saturating_sub(last_use(v)) < ENTRY_TIMEOUT);
        }
    }
}

#[derive(Debug, Clone)]
struct LblcEntry {
    server: ServerId,
    last_use: Instant,
}

/// lblc: destination address → one server.
#[derive(Debug, Clone)]
pub struct LocalityLeastConn {
    map: AddrMap<LblcEntry>,
    expiry: Expiry,
    /// Cost of an active connection in units of an inactive one (256, or 50 in old kernels).
    active_weight: u64,
}

impl Default for LocalityLeastConn {
    fn default() -> Self {
        Self::new(DEFAULT_EXPIRATION, DEFAULT_MAX_ENTRIES)
    }
}

impl LocalityLeastConn {
    /// `expiration`: an entry unused this long is forgotten. `max_entries`: above this many
    /// entries, those unused for 6 min are forgotten too.
    pub fn new(expiration: Duration, max_entries: usize) -> Self {
        Self {
            map: AddrMap::default(),
            expiry: Expiry::new(expiration, max_entries),
            active_weight: 256,
        }
    }

    /// Weigh an active connection as `w` inactive ones when choosing a new server (default
    /// 256; 50 = the lblc of Linux 2.4/2.6, see the module notes).
    pub fn with_active_weight(mut self, w: u32) -> Self {
        self.active_weight = w as u64;
        self
    }

    /// Destinations currently remembered.
    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// The server remembered for destination `dst`.
    pub fn lblc_cached(&self, dst: &IpAddr) -> Option<ServerId> {
        self.map.get(&addr_key(dst)).map(|e| e.server)
    }
}

impl Balancer for LocalityLeastConn {
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, now: Instant) -> Option<ServerId> {
        self.expiry
            .maybe_collect(&mut self.map, now, |e| e.last_use);
        let k = addr_key(&key.dst);
        if let Some(e) = self.map.get_mut(&k) {
            e.last_use = now;
            if let Some(s) = servers.get(e.server) {
                if s.weight > 0 && !lblc_overloaded(s, servers) {
                    return Some(s.id);
                }
            }
        }
        let id = weighted_least_conn_by(servers, self.active_weight)?;
        self.map.insert(
            k,
            LblcEntry {
                server: id,
                last_use: now,
            },
        );
        Some(id)
    }
}

#[derive(Debug, Clone)]
struct LblcrEntry {
    /// Newest member first.
    set: Vec<ServerId>,
    last_mod: Instant,
    last_use: Instant,
}

/// lblcr: destination address → a set of servers that grows under load and shrinks after
/// `expiration` without change.
#[derive(Debug, Clone)]
pub struct LocalityLeastConnReplicated {
    map: AddrMap<LblcrEntry>,
    expiry: Expiry,
}

impl Default for LocalityLeastConnReplicated {
    fn default() -> Self {
        Self::new(DEFAULT_EXPIRATION, DEFAULT_MAX_ENTRIES)
    }
}

/// Weighted least-connection member of a set (`ip_vs_dest_set_min`): skip overloaded and
/// weight-0 members; first in set order on ties.
fn set_min<'a>(set: &[ServerId], servers: &'a ServerTable) -> Option<&'a Server> {
    let mut best: Option<&Server> = None;
    for s in set.iter().filter_map(|id| servers.get(*id)) {
        if !s.is_available() {
            continue;
        }
        match best {
            Some(b) if !lighter(s.overhead(), s.weight, b.overhead(), b.weight) => {}
            _ => best = Some(s),
        }
    }
    best
}

/// Weighted most-connection member of a set with weight > 0 (`ip_vs_dest_set_max`).
fn set_max(set: &[ServerId], servers: &ServerTable) -> Option<ServerId> {
    let mut most: Option<&Server> = None;
    for s in set.iter().filter_map(|id| servers.get(*id)) {
        if s.weight == 0 {
            continue;
        }
        match most {
            // replace when most/mw < s/sw, i.e. most*sw < s*mw
            Some(m) if !lighter(m.overhead(), m.weight, s.overhead(), s.weight) => {}
            _ => most = Some(s),
        }
    }
    most.map(|s| s.id)
}

impl LocalityLeastConnReplicated {
    pub fn new(expiration: Duration, max_entries: usize) -> Self {
        Self {
            map: AddrMap::default(),
            expiry: Expiry::new(expiration, max_entries),
        }
    }

    pub fn entries(&self) -> usize {
        self.map.len()
    }

    /// The server set remembered for `dst`, newest member first.
    pub fn lblcr_set(&self, dst: &IpAddr) -> Option<&[ServerId]> {
        self.map.get(&addr_key(dst)).map(|e| &e.set[..])
    }
}

impl Balancer for LocalityLeastConnReplicated {
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, now: Instant) -> Option<ServerId> {
        self.expiry
            .maybe_collect(&mut self.map, now, |e| e.last_use);
        let k = addr_key(&key.dst);
        let expiration = self.expiry.expiration;
        if let Some(e) = self.map.get_mut(&k) {
            e.last_use = now;
            e.set.retain(|id| servers.get(*id).is_some());
            let dest = set_min(&e.set, servers).map(|s| s.id);
            // more than one member and unchanged for `expiration`: drop the most loaded
            if e.set.len() > 1 && now > e.last_mod.saturating_add(expiration) {
                if let Some(m) = set_max(&e.set, servers) {
                    e.set.retain(|id| *id != m);
                    e.last_mod = now;
                }
            }
            if let Some(d) = dest.and_then(|id| servers.get(id)) {
                if !lblc_overloaded(d, servers) {
                    return Some(d.id);
                }
            }
            let id = weighted_least_conn(servers)?;
            if !e.set.contains(&id) {
                e.set.insert(0, id);
                e.last_mod = now;
            }
            return Some(id);
        }
        let id = weighted_least_conn(servers)?;
        self.map.insert(
            k,
            LblcrEntry {
                set: vec![id],
                last_mod: now,
                last_use: now,
            },
        );
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    const DST_A: u32 = 0xC633_6401; // 198.51.100.1
    const DST_B: u32 = 0xC633_6402;

    fn key(dst: u32) -> FlowKey {
        key_from(0x0A01_0101, dst)
    }

    #[test]
    fn lblc_sticks_to_the_cached_server() {
        let mut t = table(&[4, 4, 4]);
        let mut b = LocalityLeastConn::default();
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        t.on_open(ServerId(0)).unwrap();
        // wlc would now pick server 1, but the destination stays on its cache
        assert_eq!(b.pick(&t, &key(DST_A), 1), sid(0));
        assert_eq!(b.pick(&t, &key(DST_B), 2), sid(1));
        assert_eq!(b.entries(), 2);
    }

    /// ip_vs_lblc.c: reassign only when cached.active > cached.weight AND some server has
    /// active*2 < weight.
    #[test]
    fn lblc_overload_reassignment_follows_the_2x_weight_rule() {
        let mut t = table(&[2, 4]);
        let mut b = LocalityLeastConn::default();
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        // server 0: 3 active > weight 2; server 1: 2 active, 2*2 = 4 not < 4 → stay
        t.set_conns(ServerId(0), 3, 0).unwrap();
        t.set_conns(ServerId(1), 2, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 1), sid(0));
        // server 1 drops to 1 active: 1*2 < 4 → server 0 is overloaded, reassign to wlc
        t.set_conns(ServerId(1), 1, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 2), sid(1));
        assert_eq!(b.lblc_cached(&key(DST_A).dst), sid(1));
        // at exactly active == weight the cached server is kept
        t.set_conns(ServerId(1), 4, 0).unwrap();
        t.set_conns(ServerId(0), 0, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 3), sid(1));
    }

    /// Old-kernel lblc (activeconns*50 + inactconns): 2 active + 0 inactive (100) loses to
    /// 0 active + 120 inactive (120) — with 256 per active connection it would win.
    #[test]
    fn lblc_active_weight_50_lets_inactive_history_decide() {
        let mut t = table(&[1, 1]);
        t.set_conns(ServerId(0), 0, 120).unwrap();
        t.set_conns(ServerId(1), 2, 0).unwrap();
        let mut old = LocalityLeastConn::default().with_active_weight(50);
        let mut new = LocalityLeastConn::default();
        assert_eq!(old.pick(&t, &key(DST_A), 0), sid(1));
        assert_eq!(new.pick(&t, &key(DST_A), 0), sid(0));
    }

    #[test]
    fn lblc_reassigns_on_weight_zero_and_removal() {
        let mut t = table(&[1, 1, 1]);
        let mut b = LocalityLeastConn::default();
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        t.set_weight(ServerId(0), 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 1), sid(1));
        t.remove(ServerId(1)).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 2), sid(2));
        t.set_weight(ServerId(2), 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 3), None);
    }

    #[test]
    fn lblc_forgets_entries_after_expiration() {
        let mut t = table(&[1, 1]);
        let exp = 10 * SEC;
        let mut b = LocalityLeastConn::new(exp, DEFAULT_MAX_ENTRIES);
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        t.on_open(ServerId(0)).unwrap();
        // used at 5 s: still remembered at 61 s? no — idle 56 s > 10 s, collected at the
        // 60 s check, so wlc chooses again (server 1, which is idle)
        assert_eq!(b.pick(&t, &key(DST_A), 5 * SEC), sid(0));
        assert_eq!(b.pick(&t, &key(DST_B), 61 * SEC), sid(1));
        assert_eq!(b.entries(), 1);
        assert_eq!(b.lblc_cached(&key(DST_A).dst), None);
        assert_eq!(b.pick(&t, &key(DST_A), 62 * SEC), sid(1));
    }

    #[test]
    fn lblcr_grows_the_set_under_overload_and_shrinks_after_expiration() {
        let mut t = table(&[2, 2, 2]);
        let exp = 100 * SEC;
        let mut b = LocalityLeastConnReplicated::new(exp, DEFAULT_MAX_ENTRIES);
        let dst = key(DST_A).dst;
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        // server 0 overloaded (3 > 2) while server 2 is idle (0 < 2/2) → add wlc choice
        t.set_conns(ServerId(0), 3, 0).unwrap();
        t.set_conns(ServerId(1), 1, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), SEC), sid(2));
        assert_eq!(b.lblcr_set(&dst).unwrap(), &[ServerId(2), ServerId(0)]);
        // the set's least loaded member is used while not overloaded
        t.set_conns(ServerId(2), 2, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 2 * SEC), sid(2));
        // used again at 60 s (the entry stays fresh; the set does not change)
        assert_eq!(b.pick(&t, &key(DST_A), 60 * SEC), sid(2));
        // set unchanged for > 100 s: the most loaded member (server 0: 3/2) is dropped
        t.set_conns(ServerId(1), 2, 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 102 * SEC), sid(2));
        assert_eq!(b.lblcr_set(&dst).unwrap(), &[ServerId(2)]);
    }

    #[test]
    fn lblcr_weight_zero_member_is_not_used() {
        let mut t = table(&[1, 1]);
        let mut b = LocalityLeastConnReplicated::default();
        assert_eq!(b.pick(&t, &key(DST_A), 0), sid(0));
        t.set_weight(ServerId(0), 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 1), sid(1));
        assert_eq!(
            b.lblcr_set(&key(DST_A).dst).unwrap(),
            &[ServerId(1), ServerId(0)]
        );
        t.set_weight(ServerId(1), 0).unwrap();
        assert_eq!(b.pick(&t, &key(DST_A), 2), None);
    }
}
