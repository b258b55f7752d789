//! The return path's MAC learning table: source address of a frame from a guest → that
//! guest's port, as a bridge learns (IEEE 802.1D "learning process"). Bounded: when full, new
//! addresses are not learned (counted) and their frames are flooded, so a guest that forges
//! source addresses cannot grow memory; an address that moves to another port follows it.

use std::collections::HashMap;

#[derive(Debug)]
pub struct MacTable {
    map: HashMap<[u8; 6], u32>,
    capacity: usize,
    refused: u64,
}

impl MacTable {
    pub fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::with_capacity(capacity.min(4096)),
            capacity,
            refused: 0,
        }
    }

    /// Learn that `mac` lives behind `port`. Group (multicast/broadcast) sources are ignored.
    pub fn learn(&mut self, mac: [u8; 6], port: u32) {
        if mac[0] & 1 == 1 {
            return;
        }
        if let Some(p) = self.map.get_mut(&mac) {
            *p = port;
        } else if self.map.len() < self.capacity {
            self.map.insert(mac, port);
        } else {
            self.refused += 1;
        }
    }

    pub fn lookup(&self, mac: &[u8; 6]) -> Option<u32> {
        self.map.get(mac).copied()
    }

    /// Forget every address whose port matches.
    pub fn forget_if(&mut self, gone: impl Fn(u32) -> bool) {
        self.map.retain(|_, p| !gone(*p));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Addresses not learned because the table was full.
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_bounded_and_follows_moves() {
        let mut t = MacTable::new(2);
        t.learn([2, 0, 0, 0, 0, 1], 0);
        t.learn([2, 0, 0, 0, 0, 2], 1);
        t.learn([2, 0, 0, 0, 0, 3], 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.refused(), 1);
        assert_eq!(t.lookup(&[2, 0, 0, 0, 0, 3]), None);
        t.learn([2, 0, 0, 0, 0, 1], 5);
        assert_eq!(t.lookup(&[2, 0, 0, 0, 0, 1]), Some(5));
        t.learn([0xff; 6], 0);
        assert_eq!(t.len(), 2);
        t.forget_if(|p| p == 5);
        assert_eq!(t.lookup(&[2, 0, 0, 0, 0, 1]), None);
    }
}
