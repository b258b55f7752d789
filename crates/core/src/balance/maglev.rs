//! Maglev hashing, mh (`net/netfilter/ipvs/ip_vs_mh.c`; Eisenbud et al., "Maglev: A Fast and
//! Reliable Software Network Load Balancer", NSDI 2016, §3.4 "Consistent Hashing").
//!
//! Design: a lookup table of prime size M. Each server i has a permutation of the slots,
//! `perm_i(j) = (offset_i + j·skip_i) mod M` with `offset_i = h1(server) mod M` and
//! `skip_i = h2(server) mod (M−1) + 1` (M prime ⇒ every skip generates all slots; paper §3.4,
//! Pseudocode 1). The table is filled in turns: each server in list order claims its next
//! preferred slot that is still empty, until all M slots are taken. So every server owns
//! ⌊M/N⌋ or ⌈M/N⌉ slots (equal weights), and removing a server mostly re-deals only its own
//! slots (minimal disruption, paper §3.4 and Fig. 14 of the paper).
//! Weights as in ip_vs_mh.c: a server takes `turns = (last_weight/gcd) >> rshift` slots per
//! turn (at least 1 if its weight is non-zero), with `rshift` chosen so the largest turns
//! count stays below 2^6 (`IP_VS_MH_TAB_BITS`). `last_weight` (the last non-zero weight) is
//! used, so a server drained to weight 0 keeps its slots and its keys do not move while it
//! drains; lookups that land on it return `None` (or fall back).
//! Lookup: slot = h(source address [+ source port]) mod M (ip_vs_mh.c hashes the source,
//! `IP_VS_SVC_F_SCHED_MH_PORT` adds the port). With the fallback option
//! (`IP_VS_SVC_F_SCHED_MH_FALLBACK`) an unavailable server sends the key through rehashes
//! with offsets 0, 1, ... as `ip_vs_mh_get_fallback` does.
//! Hashes: the kernel uses hsiphash with fixed keys; here a fixed 64-bit mix (SplitMix64's
//! finaliser) over the server's address and port — deterministic across runs and platforms.
//!
//! Cost: pick O(1) (one hash, one load); build O(M log M) expected (coupon-collector bound
//! of the paper, §3.4) — a few ms for M = 65521 and 1000 servers (see docs/bench-core.md).
//! Memory: 4·M bytes for the table, 16 bytes per server during the build.

use super::{
    fold_addr, mix64, Balancer, BalancerConfigError, FlowKey, Server, ServerId, ServerTable,
};
use crate::time::Instant;
use std::net::IpAddr;

/// Default table size: 65521, the largest prime below 2^16 in the kernel's list
/// (`primes[]` in ip_vs_mh.c: 251, 509, 1021, 2039, 4093, 8191, 16381, 32749, 65521, 131071).
/// The paper advises M ≫ N (M ≥ 100·N for ≤ 1% imbalance, §3.4).
pub const DEFAULT_TABLE_SIZE: u32 = 65521;
/// The largest table accepted: 2^20 entries, the bound of the dh/sh tables too (the kernel's
/// largest Maglev table is 131071, the last prime of `primes[]` in Linux `ip_vs_mh.c`).
pub const MAX_TABLE_SIZE: u32 = 1 << 20;
/// `IP_VS_MH_TAB_BITS` = 12 / 2 (ip_vs_mh.c): turns are shifted below 2^6.
const TAB_BITS: u32 = 6;
const EMPTY: u32 = u32::MAX;
const SEED_OFFSET: u64 = 2_654_435_761;
const SEED_SKIP: u64 = 2_654_446_892;
const SEED_LOOKUP: u64 = 0x5bd1_e995_27d4_eb2f;

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while (d as u64) * (d as u64) <= n as u64 {
        if n.checked_rem(d) == Some(0) {
            return false;
        }
        d += 1;
    }
    true
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Linux `fls`: 1-based index of the highest set bit, 0 for 0.
fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

fn server_hash(s: &Server, seed: u64) -> u64 {
    let a: u128 = match s.addr {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    };
    mix64(mix64((a as u64) ^ seed) ^ ((a >> 64) as u64) ^ ((s.port as u64) << 48))
}

/// mh: Maglev consistent hashing over the source address.
#[derive(Debug, Clone)]
pub struct Maglev {
    m: u32,
    /// slot → position in the server table (EMPTY when no server has weight).
    lookup: Vec<u32>,
    fallback: bool,
    use_port: bool,
    generation: u64,
}

impl Maglev {
    /// `table_size` must be a prime (any prime ≥ 2, not only the kernel's list).
    pub fn new(
        table_size: u32,
        fallback: bool,
        use_port: bool,
    ) -> Result<Self, BalancerConfigError> {
        if !(2..=MAX_TABLE_SIZE).contains(&table_size) {
            return Err(BalancerConfigError::OutOfRange {
                field: "table_size",
                value: table_size.into(),
                min: 2,
                max: MAX_TABLE_SIZE.into(),
            });
        }
        if !is_prime(table_size) {
            return Err(BalancerConfigError::NotPrime {
                field: "table_size",
                value: table_size.into(),
            });
        }
        Ok(Self {
            m: table_size,
            lookup: vec![EMPTY; table_size as usize],
            fallback,
            use_port,
            generation: u64::MAX,
        })
    }

    pub fn table_size(&self) -> u32 {
        self.m
    }

    /// The lookup table: slot → position in the server table, `u32::MAX` if empty. Valid
    /// after the first `pick` or `maglev_build` with the current table layout.
    pub fn slots(&self) -> &[u32] {
        &self.lookup
    }

    /// Build the lookup table for `servers` (ip_vs_mh_permutate + ip_vs_mh_populate).
    pub fn maglev_build(&mut self, servers: &ServerTable) {
        self.generation = servers.layout_generation();
        let list = servers.servers();
        let m = self.m;
        let g = list.iter().filter(|s| s.last_weight > 0).fold(0, |g, s| {
            if g == 0 {
                s.last_weight
            } else {
                gcd(g, s.last_weight)
            }
        });
        self.lookup.fill(EMPTY);
        if g == 0 {
            return; // no server has ever had a weight: nothing to place
        }
        let max_turns = list.iter().map(|s| s.last_weight / g).max().unwrap_or(0);
        let rshift = fls(max_turns).saturating_sub(TAB_BITS);
        // (next slot to try, skip, turns) per server
        let mut setup: Vec<(u32, u32, u32)> = list
            .iter()
            .map(|s| {
                let offset = (server_hash(s, SEED_OFFSET) % m as u64) as u32;
                let skip = if m > 1 {
                    (server_hash(s, SEED_SKIP) % (m as u64 - 1)) as u32 + 1
                } else {
                    1
                };
                let lw = s.last_weight;
                let turns = match (lw / g) >> rshift {
                    0 => (lw != 0) as u32,
                    t => t,
                };
                (offset, skip, turns)
            })
            .collect();
        if setup.iter().all(|&(_, _, t)| t == 0) {
            return;
        }
        let mut filled = 0u32;
        'fill: loop {
            for (pos, (next, skip, turns)) in setup.iter_mut().enumerate() {
                for _ in 0..*turns {
                    // walk this server's permutation to its next free slot
                    let mut c = *next;
                    while self.lookup[c as usize] != EMPTY {
                        c += *skip;
                        if c >= m {
                            c -= m;
                        }
                    }
                    self.lookup[c as usize] = pos as u32;
                    *next = c;
                    filled += 1;
                    if filled == m {
                        break 'fill;
                    }
                }
            }
        }
    }

    #[inline]
    fn slot_of(&self, addr: u32, port: u16, offset: u32) -> usize {
        // ip_vs_mh_hashkey: hash(offset + port + addr_fold) mod M
        let v = (offset as u64)
            .wrapping_add(port as u64)
            .wrapping_add(addr as u64);
        (mix64(v ^ SEED_LOOKUP) % self.m as u64) as usize
    }
}

impl Default for Maglev {
    fn default() -> Self {
        Self::new(DEFAULT_TABLE_SIZE, false, false).expect("65521 is prime")
    }
}

impl Balancer for Maglev {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, _now: Instant) -> Option<ServerId> {
        if self.generation != servers.layout_generation() {
            self.maglev_build(servers);
        }
        let list = servers.servers();
        let addr = fold_addr(&key.src);
        let port = if self.use_port { key.src_port } else { 0 };
        let first = self.slot_of(addr, port, 0);
        let owner = self.lookup[first];
        if owner == EMPTY {
            return None;
        }
        let s = &list[owner as usize];
        if s.is_available() {
            return Some(s.id);
        }
        if !self.fallback {
            return None;
        }
        for offset in 0..self.m {
            let roffset = (offset + first as u32) % self.m;
            let owner = self.lookup[self.slot_of(addr, port, roffset)];
            if owner == EMPTY {
                break;
            }
            let s = &list[owner as usize];
            if s.is_available() {
                return Some(s.id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn counts(mh: &Maglev, n: usize) -> Vec<usize> {
        let mut c = vec![0; n];
        for &p in mh.slots() {
            c[p as usize] += 1;
        }
        c
    }

    #[test]
    fn primes_only() {
        assert!(Maglev::new(65521, false, false).is_ok());
        assert!(Maglev::new(4093, false, false).is_ok());
        let e = Maglev::new(65536, false, false).unwrap_err();
        assert_eq!(
            e,
            BalancerConfigError::NotPrime {
                field: "table_size",
                value: 65536
            }
        );
        assert!(matches!(
            Maglev::new(1, false, false),
            Err(BalancerConfigError::OutOfRange { value: 1, .. })
        ));
        // A prime above the bound is refused before any table is allocated.
        assert!(matches!(
            Maglev::new(4_294_967_291, false, false),
            Err(BalancerConfigError::OutOfRange {
                field: "table_size",
                ..
            })
        ));
    }

    /// Equal weights: slots are dealt in turns, so each server owns ⌊M/N⌋ or ⌈M/N⌉ slots.
    #[test]
    fn maglev_balance_each_server_gets_m_over_n_slots() {
        let t = table(&[1; 10]);
        let mut mh = Maglev::default();
        mh.maglev_build(&t);
        let c = counts(&mh, 10);
        assert_eq!(c.iter().sum::<usize>(), 65521);
        for &k in &c {
            assert!(k == 6552 || k == 6553, "{c:?}");
        }
        // and 1000 servers in a 65521 table: 65 or 66 each
        let t = table(&[1; 1000]);
        mh.maglev_build(&t);
        assert!(counts(&mh, 1000).iter().all(|&k| k == 65 || k == 66));
    }

    /// Weights 1, 2, 3 → turns 1, 2, 3 per round: shares 1/6, 2/6, 3/6 of the slots
    /// (within one round of slots).
    #[test]
    fn maglev_weights_scale_slots() {
        let t = table(&[1, 2, 3]);
        let mut mh = Maglev::new(4093, false, false).unwrap();
        mh.maglev_build(&t);
        let c = counts(&mh, 3);
        for (i, &w) in [1usize, 2, 3].iter().enumerate() {
            let ideal = 4093 * w / 6;
            assert!(c[i].abs_diff(ideal) <= 3, "{c:?}");
        }
    }

    /// Removing one of 10 servers: its slots are re-dealt; slots of the other servers
    /// mostly keep their owner (paper §3.4: minimal disruption). Measured here: the share
    /// of surviving servers' slots that change owner stays below 2 %.
    #[test]
    fn maglev_minimal_disruption_on_removal() {
        let mut t = table(&[1; 10]);
        let mut mh = Maglev::default();
        mh.maglev_build(&t);
        let id_before: Vec<u32> = mh.slots().to_vec();
        t.remove(ServerId(3)).unwrap();
        mh.maglev_build(&t);
        // positions after removal: ids 0..=2 keep positions, 4..=9 shift down by one
        let id_after: Vec<u32> = mh
            .slots()
            .iter()
            .map(|&p| if p >= 3 { p + 1 } else { p })
            .collect();
        let mut kept_server_slots = 0;
        let mut changed = 0;
        for (b, a) in id_before.iter().zip(&id_after) {
            if *b == 3 {
                assert_ne!(*a, 3);
                continue;
            }
            kept_server_slots += 1;
            changed += (b != a) as usize;
        }
        let share = changed as f64 / kept_server_slots as f64;
        assert!(share < 0.02, "changed share {share}");
        // compare dh, which would move ~3/4 of keys when going from 10 to 9 servers
    }

    /// Drain: weight 0 keeps the slots (last_weight), lookups on them give None, the table
    /// does not change, and with fallback they go elsewhere.
    #[test]
    fn maglev_drain_keeps_table_and_refuses_new_connections() {
        let mut t = table(&[1, 1, 1]);
        let mut mh = Maglev::new(251, false, false).unwrap();
        let mut fb = Maglev::new(251, true, false).unwrap();
        mh.maglev_build(&t);
        let before = mh.slots().to_vec();
        let keys: Vec<FlowKey> = (0..300u32).map(|s| key_from(0x0C00_0000 + s, 1)).collect();
        let picks: Vec<_> = keys.iter().map(|k| mh.pick(&t, k, 0)).collect();
        assert!(picks.iter().all(|p| p.is_some()));
        t.set_weight(ServerId(1), 0).unwrap();
        for (k, p) in keys.iter().zip(&picks) {
            let now = mh.pick(&t, k, 0);
            let alt = fb.pick(&t, k, 0);
            if *p == sid(1) {
                assert_eq!(now, None);
                assert!(alt == sid(0) || alt == sid(2));
            } else {
                assert_eq!(now, *p);
                assert_eq!(alt, *p);
            }
        }
        assert_eq!(mh.slots(), &before[..]);
        // all drained: None even with fallback
        t.set_weight(ServerId(0), 0).unwrap();
        t.set_weight(ServerId(2), 0).unwrap();
        assert!(keys.iter().all(|k| fb.pick(&t, k, 0).is_none()));
    }

    #[test]
    fn maglev_is_deterministic_and_hashes_the_source() {
        let t = table(&[1, 1, 1, 1]);
        let mut a = Maglev::default();
        let mut b = Maglev::default();
        for s in 0..100u32 {
            let k = key_from(0x0D00_0000 + s * 13, 5);
            let got = a.pick(&t, &k, 0);
            assert_eq!(got, b.pick(&t, &k, 0));
            assert_eq!(got, a.pick(&t, &key_from(0x0D00_0000 + s * 13, 99), 0));
        }
        assert_eq!(
            Maglev::default().pick(&ServerTable::new(), &any_key(), 0),
            None
        );
    }
}
