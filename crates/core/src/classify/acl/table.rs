//! The hash table of the tuple structures: masked 5-tuple keys (`u128`) to `u32` values, open
//! addressing with linear probing (Knuth, TAOCP vol. 3, §6.4, algorithm L), power-of-two
//! capacity kept at most half full, so an unsuccessful probe reads 2.5 slots on average
//! (Knuth's formula ½(1 + 1/(1−α)²) at α = ½). No deletion.
//!
//! Keys are masked rule fields written by an operator (lookups never insert), hashed by a
//! fixed multiply-xorshift mix (the SplitMix64 finaliser constants, Steele et al., OOPSLA
//! 2014): fast and deterministic.
//!
//! Memory: 24 bytes per slot, 2-4 slots per entry; a new table holds no slots until its
//! first insert. [`KeyTable::insert_bytes`] says what an insert will hold, and at most while
//! it runs, before it allocates, so a caller can keep a byte limit.

const EMPTY: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    lo: u64,
    hi: u64,
    val: u32,
}

const EMPTY_SLOT: Slot = Slot {
    lo: 0,
    hi: 0,
    val: EMPTY,
};

#[derive(Debug, Clone)]
pub(crate) struct KeyTable {
    slots: Vec<Slot>,
    len: usize,
}

#[inline]
fn hash(lo: u64, hi: u64) -> u64 {
    let mut z = lo.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ hi;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Slots of the first allocation.
const FIRST_SLOTS: usize = 4;

impl KeyTable {
    /// An empty table; it allocates nothing until its first insert.
    pub(crate) fn new() -> KeyTable {
        KeyTable {
            slots: Vec::new(),
            len: 0,
        }
    }
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }
    /// The slot count after a grow.
    fn grown(&self) -> usize {
        (self.slots.len() * 2).max(FIRST_SLOTS)
    }
    /// `(after, peak)`: the bytes the table holds after `get_or_insert(key, ..)`, and the most
    /// it holds while that runs — both [`Self::memory_bytes`] when `key` is present or the
    /// table has room; when it grows, the new slot array (twice the old) after, and old and
    /// new arrays together at the peak, while the entries move over.
    pub(crate) fn insert_bytes(&self, key: u128) -> (usize, usize) {
        let now = self.memory_bytes();
        if (self.len + 1) * 2 <= self.slots.len() || self.get(key).is_some() {
            return (now, now);
        }
        let after = self.grown() * std::mem::size_of::<Slot>();
        (after, now + after)
    }

    #[inline]
    pub(crate) fn get(&self, key: u128) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        let mask = self.slots.len() - 1;
        let mut i = hash(lo, hi) as usize & mask;
        loop {
            let s = &self.slots[i];
            if s.val == EMPTY {
                return None;
            }
            if s.lo == lo && s.hi == hi {
                return Some(s.val);
            }
            i = (i + 1) & mask;
        }
    }

    /// The value of `key`, inserting `make()` if it is absent. `val` must not be `u32::MAX`.
    pub(crate) fn get_or_insert(&mut self, key: u128, make: impl FnOnce() -> u32) -> u32 {
        if let Some(v) = self.get(key) {
            return v;
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let v = make();
        debug_assert_ne!(v, EMPTY);
        self.place(key, v);
        self.len += 1;
        v
    }

    fn place(&mut self, key: u128, val: u32) {
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        let mask = self.slots.len() - 1;
        let mut i = hash(lo, hi) as usize & mask;
        while self.slots[i].val != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = Slot { lo, hi, val };
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY_SLOT; self.grown()];
        let old = std::mem::replace(&mut self.slots, bigger);
        for s in old.into_iter().filter(|s| s.val != EMPTY) {
            self.place(((s.hi as u128) << 64) | s.lo as u128, s.val);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against std's HashMap as the oracle, with keys that differ only in high or low bits.
    #[test]
    fn agrees_with_hashmap() {
        let mut t = KeyTable::new();
        let mut oracle = HashMap::new();
        let mut rng = crate::rng::SplitMix64::new(3);
        for i in 0..5000u32 {
            let key = match i % 3 {
                0 => (rng.below(1000) as u128) << 96,
                1 => rng.below(1000) as u128,
                _ => ((rng.next_u64() as u128) << 64) | rng.next_u64() as u128,
            };
            let v = t.get_or_insert(key, || i);
            assert_eq!(v, *oracle.entry(key).or_insert(i));
        }
        assert_eq!(t.len(), oracle.len());
        for (k, v) in &oracle {
            assert_eq!(t.get(*k), Some(*v));
        }
        assert_eq!(t.get(12345u128 << 40), None);
        assert!(t.memory_bytes() >= t.len() * 2 * 24);
    }

    /// `insert_bytes` foretells what each insert holds after it, and the peak of a grow
    /// (old and new slot arrays), from an empty table that holds nothing.
    #[test]
    fn insert_bytes_foretells_growth() {
        let mut t = KeyTable::new();
        assert_eq!((t.memory_bytes(), t.get(7)), (0, None));
        for i in 0..100u32 {
            let key = (i as u128) << 70 | 5;
            let before = t.memory_bytes();
            let (after, peak) = t.insert_bytes(key);
            t.get_or_insert(key, || i);
            assert_eq!(t.memory_bytes(), after, "{i}");
            let grew = after != before;
            assert_eq!(peak, if grew { before + after } else { before }, "{i}");
            // Present: nothing more.
            assert_eq!(t.insert_bytes(key), (after, after));
        }
    }
}
