//! The daemon's address table (CIDR → class): the core's longest-prefix-match
//! [`netsched_core::classify::CidrTable`] (P0's IP table), bounded to `max_entries`, with the
//! operations the control API needs (add, delete, list, clear). The default class for
//! unmatched addresses is kept by the engine, so `lookup` says whether an entry matched.
//!
//! Cost: O(distinct prefix lengths) hash probes per lookup (see the core table's header).

use crate::config::Cidr;
use crate::engine_error::EngineError;
use netsched_core::classify::CidrTable;
use std::net::IpAddr;

#[derive(Debug, Clone)]
pub struct AddressTable {
    table: CidrTable,
    max_entries: usize,
}

impl AddressTable {
    pub fn new(max_entries: usize) -> Self {
        AddressTable {
            table: CidrTable::new(usize::MAX),
            max_entries,
        }
    }

    /// Insert or replace a prefix; refused (clear error) when the table is full.
    /// O(1): add, and undo when that made the table exceed its bound.
    pub fn insert(&mut self, cidr: Cidr, class: usize) -> Result<(), EngineError> {
        let replaced = self.table.add(cidr, class).is_some();
        if !replaced && self.table.len() > self.max_entries {
            self.table.remove(&cidr);
            return Err(EngineError::TableFull {
                max_entries: self.max_entries,
            });
        }
        Ok(())
    }

    /// Remove exactly `cidr`; false if it was not there.
    pub fn remove(&mut self, cidr: Cidr) -> bool {
        self.table.remove(&cidr).is_some()
    }

    /// Longest matching prefix's class, `None` if no entry matches.
    pub fn lookup(&self, addr: IpAddr) -> Option<usize> {
        self.table.lookup_match(addr).map(|(_, c)| c)
    }

    pub fn entries(&self) -> Vec<(Cidr, usize)> {
        self.table.entries()
    }

    pub fn clear(&mut self) {
        self.table.clear();
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_cidr;

    #[test]
    fn table_longest_prefix_wins_and_bounds_hold() {
        let mut t = AddressTable::new(3);
        t.insert(parse_cidr("10.0.0.0/8").unwrap(), 3).unwrap();
        t.insert(parse_cidr("10.1.0.0/16").unwrap(), 1).unwrap();
        t.insert(parse_cidr("::1").unwrap(), 2).unwrap();
        // Replacing an entry is fine when full; a new one is refused.
        t.insert(parse_cidr("10.0.0.0/8").unwrap(), 4).unwrap();
        assert!(t.insert(parse_cidr("192.168.0.0/16").unwrap(), 0).is_err());
        assert_eq!(t.lookup("10.1.9.9".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("10.2.0.1".parse().unwrap()), Some(4));
        assert_eq!(t.lookup("11.0.0.1".parse().unwrap()), None);
        assert_eq!(t.lookup("::1".parse().unwrap()), Some(2));
        assert!(t.remove(parse_cidr("10.1.0.0/16").unwrap()));
        assert!(!t.remove(parse_cidr("10.1.0.0/16").unwrap()));
        assert_eq!(t.lookup("10.1.9.9".parse().unwrap()), Some(4));
        assert_eq!(t.len(), 2);
        // Host bits set: refused by the core's parser, naming the network meant.
        let e = parse_cidr("10.1.2.3/16").unwrap_err().to_string();
        assert!(e.contains("10.1.0.0/16"), "{e}");
    }
}
