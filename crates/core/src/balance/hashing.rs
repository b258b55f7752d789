//! Static hashing over a bucket table: destination hashing, dh (`net/netfilter/ipvs/ip_vs_dh.c`)
//! and source hashing, sh (`net/netfilter/ipvs/ip_vs_sh.c`).
//!
//! Design: a table of 2^bits buckets (IPVS default 2^8 = 256, `CONFIG_IP_VS_SH_TAB_BITS`),
//! filled by walking the server list in order and giving each server `weight` consecutive
//! buckets per turn, round and round until the table is full (`ip_vs_sh_reassign`: "don't
//! move to next dest until filling weight"; a weight-0 server still gets one bucket per turn
//! and is refused at lookup). Lookup: sh takes bucket = `hash_32(key, bits)` (Linux
//! `include/linux/hash.h`) of the folded source address plus, optionally, the source port
//! (`IP_VS_SVC_F_SCHED_SH_PORT`); dh takes bucket = `(addr · 2654435761) & mask` of the folded
//! destination address (`ip_vs_dh_hashkey`, ip_vs_dh.c since v1.5 2002/09/15 to today) —
//! the *low* bits of the product, so consecutive addresses land in distinct buckets that
//! follow each other by 2654435761 mod 256 = 177. If the
//! bucket's server is unavailable (weight 0 or overloaded) the answer is `None`, or with the
//! sh fallback option (`IP_VS_SVC_F_SCHED_SH_FALLBACK`, `ip_vs_sh_get_fallback`) the buckets
//! are walked in order from `(2·bucket) mod size` — the kernel adds its offset to the
//! already-hashed value — and the first available server is taken.
//!
//! Deviation: kernel dh gives every server one bucket per turn regardless of weight
//! (`ip_vs_dh_assign`); here dh uses the weighted fill of sh (identical when all weights are
//! equal), so weights mean the same in both.
//!
//! This is not consistent hashing: adding or removing a server re-deals the whole table, so
//! most keys move (`dh_adding_a_server_moves_keys_by_bucket_index`); use mh (Maglev) when
//! that matters. If the weights sum to more than the table size, servers late in the list get
//! no bucket (as in the kernel) — raise `table_bits`.
//!
//! Cost: O(1) per pick (one multiply, one load); O(2^bits + n) rebuild when the table
//! layout changes. Memory: 2^bits × 4 bytes.

use super::{fold_addr, hash_32, Balancer, BalancerConfigError, FlowKey, ServerId, ServerTable};
use crate::time::Instant;

/// Allowed table sizes (`CONFIG_IP_VS_SH_TAB_BITS` range in `net/netfilter/ipvs/Kconfig`).
pub const MIN_TABLE_BITS: u32 = 4;
pub const MAX_TABLE_BITS: u32 = 20;
pub const DEFAULT_TABLE_BITS: u32 = 8;

const EMPTY: u32 = u32::MAX;

/// The bucket table shared by dh and sh: bucket → position in the server table.
#[derive(Debug, Clone)]
struct BucketTable {
    bits: u32,
    buckets: Vec<u32>,
    generation: u64,
}

impl BucketTable {
    fn new(bits: u32) -> Self {
        Self {
            bits,
            buckets: vec![EMPTY; 1 << bits],
            generation: u64::MAX,
        }
    }

    /// Weighted sequential fill, as `ip_vs_sh_reassign`.
    fn refill(&mut self, servers: &ServerTable) {
        let list = servers.servers();
        self.generation = servers.layout_generation();
        if list.is_empty() {
            self.buckets.fill(EMPTY);
            return;
        }
        let mut pos = 0usize;
        let mut count = 0u32;
        for b in self.buckets.iter_mut() {
            *b = pos as u32;
            count += 1;
            if count >= list[pos].weight {
                count = 0;
                pos = (pos + 1) % list.len();
            }
        }
    }

    /// The server of `bucket` (already hashed, `< 2^bits`), with the sh fallback walk.
    #[inline]
    fn lookup(&mut self, servers: &ServerTable, bucket: usize, fallback: bool) -> Option<ServerId> {
        if self.generation != servers.layout_generation() {
            self.refill(servers);
        }
        let list = servers.servers();
        let first = self.buckets[bucket];
        if first == EMPTY {
            return None;
        }
        let s = &list[first as usize];
        if s.is_available() {
            return Some(s.id);
        }
        if !fallback {
            return None;
        }
        let mask = self.buckets.len() - 1;
        for offset in 0..self.buckets.len() {
            let b = (bucket + bucket + offset) & mask;
            let s = &list[self.buckets[b] as usize];
            if s.is_available() {
                return Some(s.id);
            }
        }
        None
    }
}

fn check_bits(bits: u32) -> Result<(), BalancerConfigError> {
    if !(MIN_TABLE_BITS..=MAX_TABLE_BITS).contains(&bits) {
        return Err(BalancerConfigError::OutOfRange {
            field: "table_bits",
            value: bits.into(),
            min: MIN_TABLE_BITS.into(),
            max: MAX_TABLE_BITS.into(),
        });
    }
    Ok(())
}

/// `ip_vs_dh_hashkey`: `(ntohl(addr) * 2654435761UL) & IP_VS_DH_TAB_MASK` (ip_vs_dh.c).
#[inline]
pub fn dh_hashkey(addr: u32, bits: u32) -> u32 {
    addr.wrapping_mul(2_654_435_761) & ((1u32 << bits) - 1)
}

/// dh: destination hashing.
#[derive(Debug, Clone)]
pub struct DestinationHash {
    table: BucketTable,
}

impl DestinationHash {
    /// A table of 2^`table_bits` buckets; `Err` outside 4..=20.
    pub fn new(table_bits: u32) -> Result<Self, BalancerConfigError> {
        check_bits(table_bits)?;
        Ok(Self {
            table: BucketTable::new(table_bits),
        })
    }
}

impl Default for DestinationHash {
    fn default() -> Self {
        Self {
            table: BucketTable::new(DEFAULT_TABLE_BITS),
        }
    }
}

impl Balancer for DestinationHash {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, _now: Instant) -> Option<ServerId> {
        let bucket = dh_hashkey(fold_addr(&key.dst), self.table.bits);
        self.table.lookup(servers, bucket as usize, false)
    }
}

/// sh: source hashing, with the kernel's `sh-fallback` and `sh-port` options.
#[derive(Debug, Clone)]
pub struct SourceHash {
    table: BucketTable,
    fallback: bool,
    use_port: bool,
}

impl SourceHash {
    /// `fallback`: when the hashed server is unavailable, take the next available bucket.
    /// `use_port`: hash the source port too.
    pub fn new(
        table_bits: u32,
        fallback: bool,
        use_port: bool,
    ) -> Result<Self, BalancerConfigError> {
        check_bits(table_bits)?;
        Ok(Self {
            table: BucketTable::new(table_bits),
            fallback,
            use_port,
        })
    }
}

impl Default for SourceHash {
    fn default() -> Self {
        Self {
            table: BucketTable::new(DEFAULT_TABLE_BITS),
            fallback: false,
            use_port: false,
        }
    }
}

impl Balancer for SourceHash {
    #[inline]
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, _now: Instant) -> Option<ServerId> {
        // ip_vs_sh_hashkey: hash_32(ntohs(port) + ntohl(addr_fold), bits)
        let port = if self.use_port {
            key.src_port as u32
        } else {
            0
        };
        let k = fold_addr(&key.src).wrapping_add(port);
        let bucket = hash_32(k, self.table.bits) as usize;
        self.table.lookup(servers, bucket, self.fallback)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;

    fn dst_key(dst: u32) -> FlowKey {
        key_from(0x0A09_0909, dst)
    }
    fn src_key(src: u32) -> FlowKey {
        key_from(src, 0x0A00_00FE)
    }

    #[test]
    fn weighted_fill_follows_the_sh_reassign_rule() {
        // weights 2, 1 over 16 buckets: a a b a a b ...
        let t = table(&[2, 1]);
        let mut bt = BucketTable::new(4);
        bt.refill(&t);
        let expect: Vec<u32> = (0..16).map(|i| if i % 3 == 2 { 1 } else { 0 }).collect();
        assert_eq!(bt.buckets, expect);
    }

    /// The kernel's multiplier is odd, so its low 8 bits (177) permute the buckets: 256
    /// consecutive addresses fill all 256 buckets, and a.b.c.1 lands in bucket 177.
    #[test]
    fn dh_hashkey_is_the_kernels_low_bits_product() {
        assert_eq!(dh_hashkey(0x0A01_0001, 8), 177);
        assert_eq!(dh_hashkey(0x0A01_0002, 8), (2 * 177) % 256);
        let buckets: std::collections::BTreeSet<u32> = (0..256u32)
            .map(|i| dh_hashkey(0xC0A8_0100 + i, 8))
            .collect();
        assert_eq!(buckets.len(), 256);
    }

    #[test]
    fn dh_is_deterministic_and_uses_the_destination() {
        let t = table(&[1, 1, 1, 1]);
        let mut a = DestinationHash::default();
        let mut b = DestinationHash::default();
        for d in 0..200u32 {
            let k = dst_key(0xC000_0200 + d);
            let got = a.pick(&t, &k, 0);
            assert_eq!(got, b.pick(&t, &k, 0));
            // bucket i holds server i % 4 with equal weights
            let bucket = dh_hashkey(0xC000_0200 + d, 8);
            assert_eq!(got, sid(bucket % 4));
            // the source does not matter
            let mut k2 = k;
            k2.src = v4(172, 16, 0, 1);
            assert_eq!(a.pick(&t, &k2, 0), got);
        }
    }

    /// Adding a 4th server to 3 equal-weight ones re-deals the table: bucket i goes from
    /// server i%3 to i%4, so a key stays put exactly when its bucket has i%3 == i%4, i.e.
    /// i mod 12 ∈ {0,1,2}: 3 buckets in 12 plus the first 4 of the last partial group.
    #[test]
    fn dh_adding_a_server_moves_keys_by_bucket_index() {
        let mut t = table(&[1, 1, 1]);
        let mut dh = DestinationHash::default();
        let keys: Vec<u32> = (0..2000u32).map(|d| 0x0A80_0000 + d * 7919).collect();
        let before: Vec<_> = keys.iter().map(|&d| dh.pick(&t, &dst_key(d), 0)).collect();
        t.add_server(3, v4(10, 0, 0, 4), 80, 1).unwrap();
        let mut moved = 0;
        for (i, &d) in keys.iter().enumerate() {
            let after = dh.pick(&t, &dst_key(d), 0);
            let bucket = dh_hashkey(d, 8);
            let stays = bucket % 3 == bucket % 4;
            assert_eq!(after == before[i], stays, "key {d:#x} bucket {bucket}");
            moved += (!stays) as usize;
        }
        // 256 buckets: 64 groups of 4... stays when i%12 < 3: 21*3 + 3 = 66 buckets of 256
        let staying_buckets = (0..256u32).filter(|i| i % 3 == i % 4).count();
        assert_eq!(staying_buckets, 66);
        assert!(moved > keys.len() / 2, "moved {moved}");
    }

    /// sh from 2 to 3 equal servers: bucket i goes from i%2 to i%3; a source keeps its
    /// server exactly when i mod 6 ∈ {0, 1}; the destination plays no part.
    #[test]
    fn sh_adding_a_server_moves_sources_by_bucket_index() {
        let mut t = table(&[1, 1]);
        let mut sh = SourceHash::default();
        let srcs: Vec<u32> = (0..1000u32).map(|s| 0x6440_0000 + s * 104_729).collect();
        let before: Vec<_> = srcs.iter().map(|&s| sh.pick(&t, &src_key(s), 0)).collect();
        t.add_server(2, v4(10, 0, 0, 3), 80, 1).unwrap();
        for (i, &s) in srcs.iter().enumerate() {
            let bucket = hash_32(s, 8) as usize;
            let after = sh.pick(&t, &key_from(s, 0x0102_0304), 0);
            assert_eq!(after, sid((bucket % 3) as u32));
            assert_eq!(after == before[i], bucket % 6 < 2, "source {s:#x}");
        }
    }

    #[test]
    fn sh_hashes_the_source_and_drains_weight_zero() {
        let mut t = table(&[1, 1]);
        let mut sh = SourceHash::default();
        let mut fb = SourceHash::new(8, true, false).unwrap();
        let k0 = (0..1000u32)
            .map(|s| 0x0B00_0000 + s)
            .find(|&s| hash_32(s, 8) & 1 == 0)
            .unwrap();
        assert_eq!(sh.pick(&t, &src_key(k0), 0), sid(0));
        // the destination does not matter
        assert_eq!(sh.pick(&t, &key_from(k0, 0x0102_0304), 0), sid(0));
        t.set_weight(ServerId(0), 0).unwrap();
        // weight 0 keeps one bucket per turn (bucket i → i % 2 still), refused at lookup
        assert_eq!(sh.pick(&t, &src_key(k0), 0), None);
        // fallback walks the buckets to the next available server
        assert_eq!(fb.pick(&t, &src_key(k0), 0), sid(1));
        t.set_overloaded(ServerId(1), true).unwrap();
        assert_eq!(fb.pick(&t, &src_key(k0), 0), None);
    }

    #[test]
    fn sh_port_option_spreads_one_client() {
        let t = table(&[1, 1, 1, 1]);
        let mut no_port = SourceHash::default();
        let mut port = SourceHash::new(8, false, true).unwrap();
        let mut seen_a = std::collections::BTreeSet::new();
        let mut seen_b = std::collections::BTreeSet::new();
        for p in 0..64u16 {
            let mut k = src_key(0x0B00_0001);
            k.src_port = 1024 + p;
            seen_a.insert(no_port.pick(&t, &k, 0));
            seen_b.insert(port.pick(&t, &k, 0));
        }
        assert_eq!(seen_a.len(), 1);
        assert_eq!(seen_b.len(), 4);
    }

    #[test]
    fn bad_table_bits_is_an_error() {
        assert_eq!(
            DestinationHash::new(3).unwrap_err(),
            BalancerConfigError::OutOfRange {
                field: "table_bits",
                value: 3,
                min: MIN_TABLE_BITS.into(),
                max: MAX_TABLE_BITS.into(),
            }
        );
        assert!(SourceHash::new(21, false, false).is_err());
    }

    #[test]
    fn empty_table_gives_none() {
        let t = ServerTable::new();
        assert_eq!(DestinationHash::default().pick(&t, &any_key(), 0), None);
    }
}
