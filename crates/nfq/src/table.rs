//! The daemon's address table (CIDR → class), bounded, with the operations the control API
//! needs (add, delete, list, clear) — a thin wrapper so the engine does not depend on the
//! classifier's exact API.
//!
//! STOPGAP: the core's `CidrTable` (crates/core/src/classify/) did not exist yet when this
//! was written; until it lands this wrapper does a linear longest-prefix match over at most
//! `max_entries` prefixes (O(entries) per lookup, fine for the few dozen prefixes of the
//! thesis's table). Replace the body with the core table when it appears.

use crate::config::Cidr;
use anyhow::{bail, Result};
use std::net::IpAddr;

#[derive(Debug, Clone)]
pub struct AddressTable {
    entries: Vec<(Cidr, usize)>,
    max_entries: usize,
}

fn masked(addr: IpAddr, len: u8) -> u128 {
    let (v, bits) = match addr {
        IpAddr::V4(a) => (u32::from(a) as u128, 32u32),
        IpAddr::V6(a) => (u128::from(a), 128),
    };
    let len = len as u32;
    if len == 0 {
        0
    } else {
        let shift = bits - len;
        (v >> shift) << shift
    }
}

impl AddressTable {
    pub fn new(max_entries: usize) -> Self {
        AddressTable {
            entries: Vec::new(),
            max_entries,
        }
    }

    /// Insert or replace a prefix (host bits are ignored: 10.1.2.3/16 is 10.1.0.0/16).
    pub fn insert(&mut self, cidr: Cidr, class: usize) -> Result<()> {
        let norm = Cidr {
            addr: normalize(cidr),
            len: cidr.len,
        };
        if let Some(e) = self.entries.iter_mut().find(|(c, _)| *c == norm) {
            e.1 = class;
            return Ok(());
        }
        if self.entries.len() >= self.max_entries {
            bail!(
                "address table full ({} entries, max_table_entries); delete one first",
                self.max_entries
            );
        }
        self.entries.push((norm, class));
        Ok(())
    }

    pub fn remove(&mut self, cidr: Cidr) -> bool {
        let norm = Cidr {
            addr: normalize(cidr),
            len: cidr.len,
        };
        let before = self.entries.len();
        self.entries.retain(|(c, _)| *c != norm);
        before != self.entries.len()
    }

    /// Longest matching prefix's class.
    pub fn lookup(&self, addr: IpAddr) -> Option<usize> {
        self.entries
            .iter()
            .filter(|(c, _)| c.addr.is_ipv4() == addr.is_ipv4())
            .filter(|(c, _)| masked(addr, c.len) == masked(c.addr, c.len))
            .max_by_key(|(c, _)| c.len)
            .map(|(_, k)| *k)
    }

    pub fn entries(&self) -> Vec<(Cidr, usize)> {
        let mut v = self.entries.clone();
        v.sort_by_key(|(c, _)| (c.addr, c.len));
        v
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn normalize(c: Cidr) -> IpAddr {
    let m = masked(c.addr, c.len);
    match c.addr {
        IpAddr::V4(_) => IpAddr::V4((m as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(m.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_longest_prefix_wins_and_bounds_hold() {
        let mut t = AddressTable::new(3);
        t.insert(Cidr::parse("10.0.0.0/8").unwrap(), 3).unwrap();
        t.insert(Cidr::parse("10.1.2.3/16").unwrap(), 1).unwrap();
        t.insert(Cidr::parse("::1").unwrap(), 2).unwrap();
        assert!(t.insert(Cidr::parse("192.168.0.0/16").unwrap(), 0).is_err());
        assert_eq!(t.lookup("10.1.9.9".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("10.2.0.1".parse().unwrap()), Some(3));
        assert_eq!(t.lookup("11.0.0.1".parse().unwrap()), None);
        assert_eq!(t.lookup("::1".parse().unwrap()), Some(2));
        assert!(t.remove(Cidr::parse("10.1.0.0/16").unwrap()));
        assert_eq!(t.lookup("10.1.9.9".parse().unwrap()), Some(3));
    }
}
