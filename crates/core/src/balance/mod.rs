//! Load balancers with Linux IPVS semantics (P4).
//!
//! Design (in the style of pingora-load-balancing and tower `balance`): the engine owns a
//! [`ServerTable`] — the real servers with their weight, active and inactive connection counts
//! and flags, like `struct ip_vs_dest` in `include/net/ip_vs.h` — and keeps the counts up to
//! date ([`ServerTable::on_open`], [`ServerTable::on_inactive`], [`ServerTable::on_close`]).
//! A selection algorithm is a [`Balancer`]: one method, `pick`, that reads the table and the
//! [`FlowKey`] of the new connection and returns the chosen [`ServerId`], or `None` when no
//! server is available (IPVS: "no destination available"). Engines dispatch through
//! [`AnyBalancer`], built from the serde [`BalancerConfig`] (`kind = "wlc"`).
//!
//! Rules every balancer keeps (tests in each file):
//! - weight 0 drains: a server of weight 0 is never picked for a new connection;
//! - a server flagged `overloaded` (IPVS `IP_VS_DEST_F_OVERLOAD`) is skipped, except where the
//!   kernel algorithm itself does not look at the flag (documented per algorithm);
//! - deterministic: hashes are fixed functions of the key; randomness comes only from the
//!   [`SplitMix64`](crate::rng::SplitMix64) passed at construction;
//! - table-based balancers (wrr, dh, sh, mh) rebuild lazily when [`ServerTable::layout_generation`]
//!   changes, as IPVS does in its `add_dest`/`del_dest`/`upd_dest` callbacks.
//!
//! | file | algorithms | kernel source |
//! |---|---|---|
//! | [`rr`] | rr, wrr | `ip_vs_rr.c`, `ip_vs_wrr.c` |
//! | [`leastconn`] | lc, wlc, sed, nq, fo, ovf | `ip_vs_lc.c`, `ip_vs_wlc.c`, `ip_vs_sed.c`, `ip_vs_nq.c`, `ip_vs_fo.c`, `ip_vs_ovf.c` |
//! | [`locality`] | lblc, lblcr | `ip_vs_lblc.c`, `ip_vs_lblcr.c` |
//! | [`hashing`] | dh, sh | `ip_vs_dh.c`, `ip_vs_sh.c` |
//! | [`maglev`] | mh | `ip_vs_mh.c`, Eisenbud et al. NSDI 2016 §3.4 |
//! | [`random`] | twos, least-request power of two choices | `ip_vs_twos.c`, Mitzenmacher |

use crate::time::Instant;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

mod any;
mod error;
pub mod hashing;
pub mod leastconn;
pub mod locality;
pub mod maglev;
pub mod random;
pub mod rr;

pub use any::{AnyBalancer, BalancerConfig, BalancerKind};
pub use error::{BalancerConfigError, TableError};

/// Identity of a real server, chosen by the engine (stable across table changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServerId(pub u32);

/// What the balancer sees of a new connection: client (source) and virtual service
/// (destination) address and port. dh, lblc and lblcr hash the destination; sh and mh the
/// source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: IpAddr,
    pub src_port: u16,
    pub dst: IpAddr,
    pub dst_port: u16,
}

impl FlowKey {
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr, dst_port: u16) -> Self {
        Self {
            src,
            src_port,
            dst,
            dst_port,
        }
    }
}

/// One real server (IPVS `struct ip_vs_dest`, `include/net/ip_vs.h`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: ServerId,
    pub addr: IpAddr,
    pub port: u16,
    /// Relative capacity. 0 = quiesced: keeps its connections, gets no new ones.
    pub weight: u32,
    /// The last non-zero weight (IPVS `last_weight`): Maglev keeps a draining server's
    /// slots so its keys do not move to others while it drains (`ip_vs_mh.c`).
    pub last_weight: u32,
    /// Established connections (IPVS `activeconns`).
    pub active: u32,
    /// Connections in a closing or non-established state (IPVS `inactconns`).
    pub inactive: u32,
    /// IPVS `IP_VS_DEST_F_OVERLOAD`: set by the engine, or by the thresholds below.
    pub overloaded: bool,
    /// IPVS `u_threshold`: when active+inactive reaches it the server is flagged overloaded
    /// (0 = no threshold).
    pub upper_threshold: u32,
    /// IPVS `l_threshold`: the flag clears when active+inactive falls below it (0 = clear at
    /// 3/4 of the upper threshold).
    pub lower_threshold: u32,
}

impl Server {
    /// A server with no connections and no thresholds.
    pub fn new(id: ServerId, addr: IpAddr, port: u16, weight: u32) -> Self {
        Self {
            id,
            addr,
            port,
            weight,
            last_weight: weight,
            active: 0,
            inactive: 0,
            overloaded: false,
            upper_threshold: 0,
            lower_threshold: 0,
        }
    }

    /// Connection overhead: `(activeconns << 8) + inactconns` — an active connection costs
    /// 256 times an inactive one (`ip_vs_dest_conn_overhead`, `include/net/ip_vs.h`).
    #[inline]
    pub fn overhead(&self) -> u64 {
        ((self.active as u64) << 8) + self.inactive as u64
    }

    /// Shortest expected delay overhead: `activeconns + 1` (`ip_vs_sed.c`, `ip_vs_nq.c`).
    #[inline]
    pub fn sed_overhead(&self) -> u64 {
        self.active as u64 + 1
    }

    /// May receive new connections: weight > 0 and not flagged overloaded.
    #[inline]
    pub fn is_available(&self) -> bool {
        self.weight > 0 && !self.overloaded
    }

    pub fn total_conns(&self) -> u32 {
        self.active + self.inactive
    }
}

/// Hasher for small integer and address keys (server ids, destination addresses): FNV-style
/// absorption finished by a 64-bit mix. Much cheaper per lookup than SipHash; HashDoS is not
/// a concern for server ids, and destination addresses only reach lblc/lblcr maps whose size
/// is bounded by expiry.
#[derive(Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x100_0000_01B3);
    }
    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The servers of one virtual service, owned by the engine. Order is insertion order (IPVS
/// keeps `svc->destinations` as a list; order matters for ties and for table building).
#[derive(Debug, Clone, Default)]
pub struct ServerTable {
    servers: Vec<Server>,
    index: FastMap<ServerId, usize>,
    layout_generation: u64,
    availability_generation: u64,
}

impl ServerTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a server. `Err` if the id is already present.
    pub fn add(&mut self, server: Server) -> Result<(), TableError> {
        if self.index.contains_key(&server.id) {
            return Err(TableError::DuplicateServer(server.id));
        }
        self.index.insert(server.id, self.servers.len());
        self.servers.push(server);
        self.bump_layout();
        Ok(())
    }

    /// Convenience: add `Server::new(id, addr, port, weight)`.
    pub fn add_server(
        &mut self,
        id: u32,
        addr: IpAddr,
        port: u16,
        weight: u32,
    ) -> Result<(), TableError> {
        self.add(Server::new(ServerId(id), addr, port, weight))
    }

    /// Remove a server; its connection counts go with it. `Err` if unknown.
    pub fn remove(&mut self, id: ServerId) -> Result<Server, TableError> {
        let pos = self.position(id)?;
        let server = self.servers.remove(pos);
        self.index.clear();
        for (i, s) in self.servers.iter().enumerate() {
            self.index.insert(s.id, i);
        }
        self.bump_layout();
        Ok(server)
    }

    /// Change a weight (0 drains). Remembers the last non-zero weight.
    pub fn set_weight(&mut self, id: ServerId, weight: u32) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        s.weight = weight;
        if weight > 0 {
            s.last_weight = weight;
        }
        self.bump_layout();
        Ok(())
    }

    /// Set or clear the overloaded flag by hand (health checks, operator).
    pub fn set_overloaded(&mut self, id: ServerId, overloaded: bool) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        if s.overloaded != overloaded {
            s.overloaded = overloaded;
            self.availability_generation += 1;
        }
        Ok(())
    }

    /// Set the IPVS connection thresholds (0 = none). `Err` if lower > upper.
    pub fn set_thresholds(
        &mut self,
        id: ServerId,
        lower: u32,
        upper: u32,
    ) -> Result<(), TableError> {
        if upper != 0 && lower > upper {
            return Err(TableError::ThresholdsInverted {
                server: id,
                lower,
                upper,
            });
        }
        let s = self.get_mut(id)?;
        s.lower_threshold = lower;
        s.upper_threshold = upper;
        self.update_overload(id);
        Ok(())
    }

    /// A new connection was bound to `id` (IPVS `ip_vs_bind_dest`): active += 1, and the
    /// server is flagged overloaded when its total reaches `upper_threshold`.
    pub fn on_open(&mut self, id: ServerId) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        s.active += 1;
        self.update_overload(id);
        Ok(())
    }

    /// An active connection of `id` left the established state (FIN, or a non-TCP flow went
    /// idle): active -= 1, inactive += 1 (IPVS state transition accounting).
    pub fn on_inactive(&mut self, id: ServerId) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        if s.active == 0 {
            return Err(TableError::NoConnection {
                server: id,
                event: "on_inactive",
                state: "active",
            });
        }
        s.active -= 1;
        s.inactive += 1;
        Ok(())
    }

    /// An active connection of `id` ended (IPVS `ip_vs_unbind_dest`).
    pub fn on_close(&mut self, id: ServerId) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        if s.active == 0 {
            return Err(TableError::NoConnection {
                server: id,
                event: "on_close",
                state: "active",
            });
        }
        s.active -= 1;
        self.update_overload(id);
        Ok(())
    }

    /// An inactive connection of `id` ended.
    pub fn on_inactive_close(&mut self, id: ServerId) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        if s.inactive == 0 {
            return Err(TableError::NoConnection {
                server: id,
                event: "on_inactive_close",
                state: "inactive",
            });
        }
        s.inactive -= 1;
        self.update_overload(id);
        Ok(())
    }

    /// Set the counts directly (tests, or an engine that reads them from the kernel).
    pub fn set_conns(
        &mut self,
        id: ServerId,
        active: u32,
        inactive: u32,
    ) -> Result<(), TableError> {
        let s = self.get_mut(id)?;
        s.active = active;
        s.inactive = inactive;
        self.update_overload(id);
        Ok(())
    }

    /// Threshold rule of `ip_vs_bind_dest` / `ip_vs_unbind_dest` (`net/netfilter/ipvs/ip_vs_conn.c`):
    /// set when total >= u_threshold; clear when total < l_threshold, or, with no l_threshold,
    /// when total * 4 < u_threshold * 3.
    fn update_overload(&mut self, id: ServerId) {
        let Ok(pos) = self.position(id) else { return };
        let s = &mut self.servers[pos];
        if s.upper_threshold == 0 {
            return;
        }
        let total = s.total_conns() as u64;
        let was = s.overloaded;
        if total >= s.upper_threshold as u64 {
            s.overloaded = true;
        } else if s.lower_threshold > 0 {
            if total < s.lower_threshold as u64 {
                s.overloaded = false;
            }
        } else if total * 4 < s.upper_threshold as u64 * 3 {
            s.overloaded = false;
        }
        if was != s.overloaded {
            self.availability_generation += 1;
        }
    }

    fn bump_layout(&mut self) {
        self.layout_generation += 1;
        self.availability_generation += 1;
    }

    fn position(&self, id: ServerId) -> Result<usize, TableError> {
        self.index
            .get(&id)
            .copied()
            .ok_or(TableError::UnknownServer(id))
    }

    fn get_mut(&mut self, id: ServerId) -> Result<&mut Server, TableError> {
        let pos = self.position(id)?;
        Ok(&mut self.servers[pos])
    }

    pub fn get(&self, id: ServerId) -> Option<&Server> {
        self.index.get(&id).map(|&i| &self.servers[i])
    }

    /// Position of `id` in table order.
    pub fn index_of(&self, id: ServerId) -> Option<usize> {
        self.index.get(&id).copied()
    }

    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Changes when membership or a weight changes (tables must be rebuilt).
    pub fn layout_generation(&self) -> u64 {
        self.layout_generation
    }

    /// Changes when membership, a weight or an overloaded flag changes.
    pub fn availability_generation(&self) -> u64 {
        self.availability_generation
    }
}

/// A selection algorithm. `pick` chooses the server for a new connection with key `key` at
/// time `now`, or `None` when no server is available. It does not update connection counts:
/// the engine calls [`ServerTable::on_open`] when the connection is actually bound.
pub trait Balancer {
    fn pick(&mut self, servers: &ServerTable, key: &FlowKey, now: Instant) -> Option<ServerId>;
}

/// Fold an address to 32 bits as IPVS does: IPv4 as is, IPv6 as the XOR of its four 32-bit
/// words (`ip_vs_sh_hashkey`, `ip_vs_lblc_hashkey`).
#[inline]
pub fn fold_addr(addr: &IpAddr) -> u32 {
    match addr {
        IpAddr::V4(a) => u32::from(*a),
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            w(0) ^ w(4) ^ w(8) ^ w(12)
        }
    }
}

/// Linux `hash_32(val, bits)`: multiply by the 32-bit golden ratio and keep the top `bits`
/// bits (`include/linux/hash.h`, `GOLDEN_RATIO_32 = 0x61C88647`). `bits` in 1..=32.
#[inline]
pub fn hash_32(val: u32, bits: u32) -> u32 {
    val.wrapping_mul(0x61C8_8647) >> (32 - bits)
}

/// A 64-bit finaliser (the SplitMix64 output function, Steele et al. OOPSLA 2014), used where
/// a well-mixed deterministic hash is needed (Maglev permutations).
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `a` is less loaded than `b` by overhead/weight, compared without division:
/// `oa/wa < ob/wb  <=>  oa*wb < ob*wa` for positive weights (`ip_vs_wlc.c`).
#[inline]
pub(crate) fn lighter(oa: u64, wa: u32, ob: u64, wb: u32) -> bool {
    (oa as u128) * (wb as u128) < (ob as u128) * (wa as u128)
}

/// Weighted least-connection over the whole table: the server minimising overhead/weight,
/// first in table order on ties, skipping weight 0 and overloaded servers. This is the
/// selection of `ip_vs_wlc.c` and of `__ip_vs_lblc_schedule` / `__ip_vs_lblcr_schedule`.
pub(crate) fn weighted_least_conn(servers: &ServerTable) -> Option<ServerId> {
    weighted_least_conn_by(servers, 256)
}

/// [`weighted_least_conn`] with overhead `active·active_weight + inactive`: 256 is
/// `ip_vs_dest_conn_overhead`; 50 is the formula lblc/lblcr used before it (their own
/// `__ip_vs_wlc_schedule`, "activeconns*50 + inactconns", ip_vs_lblc.c v1.10 2002/09/15).
#[inline]
pub(crate) fn weighted_least_conn_by(
    servers: &ServerTable,
    active_weight: u64,
) -> Option<ServerId> {
    // the best so far as (overhead, weight, id) in locals: no re-reads per comparison
    let mut best: Option<(u64, u32, ServerId)> = None;
    for s in servers.servers() {
        if !s.is_available() {
            continue;
        }
        let o = s.active as u64 * active_weight + s.inactive as u64;
        match best {
            // keep the earlier one unless strictly lighter (kernel: loh*dw > doh*lw)
            Some((bo, bw, _)) if !lighter(o, s.weight, bo, bw) => {}
            _ => best = Some((o, s.weight, s.id)),
        }
    }
    best.map(|(_, _, id)| id)
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;
    use std::net::Ipv4Addr;

    pub fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    /// Servers 0..n with addresses 10.0.0.(i+1), port 80 and the given weights.
    pub fn table(weights: &[u32]) -> ServerTable {
        let mut t = ServerTable::new();
        for (i, &w) in weights.iter().enumerate() {
            let addr = IpAddr::V4(Ipv4Addr::from(0x0A00_0001 + i as u32));
            t.add_server(i as u32, addr, 80, w).unwrap();
        }
        t
    }

    pub fn key_from(src: u32, dst: u32) -> FlowKey {
        FlowKey::new(
            IpAddr::V4(Ipv4Addr::from(src)),
            40000,
            IpAddr::V4(Ipv4Addr::from(dst)),
            80,
        )
    }

    pub fn any_key() -> FlowKey {
        key_from(0xC0A8_0001, 0x0A00_00FE)
    }

    pub fn sid(i: u32) -> Option<ServerId> {
        Some(ServerId(i))
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::*;
    use super::*;

    #[test]
    fn table_counts_and_errors() {
        let mut t = table(&[1, 2]);
        assert_eq!(
            t.add_server(0, v4(1, 1, 1, 1), 80, 1),
            Err(TableError::DuplicateServer(ServerId(0)))
        );
        t.on_open(ServerId(1)).unwrap();
        t.on_open(ServerId(1)).unwrap();
        t.on_inactive(ServerId(1)).unwrap();
        let s = t.get(ServerId(1)).unwrap();
        assert_eq!((s.active, s.inactive, s.overhead()), (1, 1, 257));
        assert_eq!(
            t.on_close(ServerId(0)),
            Err(TableError::NoConnection {
                server: ServerId(0),
                event: "on_close",
                state: "active"
            })
        );
        assert_eq!(
            t.on_open(ServerId(9)),
            Err(TableError::UnknownServer(ServerId(9)))
        );
        let g = t.layout_generation();
        t.remove(ServerId(0)).unwrap();
        assert!(t.layout_generation() > g);
        assert_eq!(t.index_of(ServerId(1)), Some(0));
    }

    /// ip_vs_conn.c thresholds: flag at total >= upper, clear below 3/4 of upper.
    #[test]
    fn thresholds_set_and_clear_overload() {
        let mut t = table(&[1]);
        let id = ServerId(0);
        t.set_thresholds(id, 0, 4).unwrap();
        for _ in 0..4 {
            t.on_open(id).unwrap();
        }
        assert!(t.get(id).unwrap().overloaded);
        t.on_close(id).unwrap(); // 3 * 4 = 12 not < 12
        assert!(t.get(id).unwrap().overloaded);
        t.on_close(id).unwrap(); // 2 * 4 = 8 < 12
        assert!(!t.get(id).unwrap().overloaded);
        assert!(t.set_thresholds(id, 5, 4).is_err());
    }

    #[test]
    fn ipv6_fold_is_xor_of_words() {
        let a: IpAddr = "::1:0:0:2".parse().unwrap();
        assert_eq!(fold_addr(&a), 1 << 16 ^ 2);
        assert_eq!(fold_addr(&v4(10, 0, 0, 1)), 0x0A00_0001);
    }
}

#[cfg(test)]
mod across_instances;
#[cfg(test)]
mod props;
