//! TupleMerge (Daly, Torng, "TupleMerge: Building Online Packet Classifiers by Omitting
//! Bits", ICCCN 2017, §III–§IV): tuple space search where a rule may live in a table whose
//! tuple is *less* specific than its own — the table hashes only the bits its tuple keeps,
//! and a bucket holds every rule whose kept bits agree, each checked in full on lookup. Fewer
//! tables than tuple space search, and no port-range expansion for most rules: a range is
//! hashed by the prefix its two ends share (`1000-1999` → the 5 leading bits they agree on),
//! and checked exactly in the bucket.
//!
//! Insertion is online (the paper's point: a rule is added without rebuilding), one rule at a
//! time at the lowest priority ([`TupleMergeClassifier::push`]); `build` pushes the rules in
//! order. The paper's collision limit `c` bounds a bucket: a rule goes to the most specific
//! table that covers its tuple *and* whose bucket for it holds fewer than the table's limit;
//! if none has room, a table is made for the rule's tuple relaxed ([`relax`]: address lengths
//! rounded down to a multiple of 8, the shorter address dropped when the other is much longer,
//! ports kept only when exact and the addresses short, the protocol dropped) — or, if that
//! table exists and its bucket is full, for the rule's own tuple. The paper splits a full
//! bucket's rules into a new table instead; placing the new rule elsewhere (never moving
//! rules) and the relaxation steps are our simplification, keeping each insert O(tables).
//! A table's limit is `c`, or 4`c` when it keys on at least 16 address bits
//! ([`WIDE_ADDRESS_BITS`]): only headers inside one prefix pair reach such a bucket, so its
//! length costs few lookups, while every table saved is a probe saved on every lookup.
//!
//! Split rules. When the rule's own tuple has a table whose bucket for it is full, every rule
//! there agrees with it on every bit of its tuple — no table of that tuple or a less specific
//! one can separate them (nested ranges sharing an end on one address pair: thousands of
//! rules, one bucket, every lookup on the pair scanning it). Splitting a bucket, as the paper
//! does, cannot help either; instead the rule's port ranges are expanded into aligned
//! prefixes, as tuple space search does for every rule (at most 2w − 2 = 30 per 16-bit field,
//! Srinivasan, Suri, Varghese, SIGCOMM 1999, §2), and each of the ≤ 900 pieces — a rule of
//! its own carrying the index of the whole — goes to the table of its own tuple, made if
//! absent (within `max_tuples` and `max_bytes`, refused with the usual errors, the classifier
//! unchanged). That table keys on every bit of the piece, the protocol under its mask
//! included, so the piece matches every header that reaches its bucket and the scan stops
//! there. A piece is left out when an entry of its bucket contains it (an earlier rule matches
//! every header it matches); a rule about to be split is left out when any entry held contains
//! it (found by one lookup of its low corner). So **a bucket holds at most its table's limit
//! of rules placed whole plus one piece: ≤ 4c + 1 entries (33 at the default c = 8), whatever
//! the rules**, and a lookup checks at most T × (4c + 1) entries. Rules placed whole are
//! stored even when an earlier rule contains them: a bucket they fill sends later rules to
//! new tables at the end of the list, behind the match, where skipping them would send those
//! rules into earlier, more shared buckets (measured on the generated ipc- and fw-like sets
//! of `docs/classify.md`, whose all-wildcard rule comes early: 8.7 and 7.1 entries checked per
//! lookup instead of 4.7 and 5.5).
//!
//! Entries: a rule may have no entry (left out), one, or up to 900 pieces;
//! [`TupleMergeClassifier::len`] counts rules held, [`TupleMergeClassifier::entries`] the
//! entries. Rules are ordered by a rank (lower first; the index when built in order) and a
//! lookup answers the rule's id. [`TupleMergeClassifier::insert`] places a rule at any rank and
//! [`TupleMergeClassifier::remove`] takes one out without a rebuild, placing again the rules it
//! had left out (`edit.rs`); a bucket stays in rank order, so the bound above holds for rules
//! added in rank order, and each rule inserted ahead of its bucket's pieces may add one more.
//!
//! Lookup (as in the paper: tables in the order of their best rule, stop at the first table
//! whose best cannot beat the match found): per table, mask the header's two words, one
//! multiply-xor-multiply hash, then linear probing over 8-byte slots (a 32-bit tag and the
//! bucket's first rule), so a table the header misses costs one slot read, usually from the
//! same cache line; only a tag that agrees leads to the bucket's rules (32 bytes each, in
//! rule order, checked in full until one matches or cannot beat the match already found).
//! The home slots of 8 tables are read before the first of them is examined, so their cache
//! misses overlap instead of following one another. No allocation, no pointer per bucket.
//! Pieces keep both early stops exact: a table's best is the lowest index it holds (tables
//! made for a rule's pieces have that rule's index, the highest so far, and go last), and a
//! bucket's entries stay in rule order (two pieces of one rule never share a bucket), so a
//! stop skips only entries whose index is at least the match's — several entries with one
//! index, in one table or many, change nothing.
//!
//! Cost: a lookup is at most T probes plus one bucket scan of ≤ 4c + 1 entries per table
//! whose tag agrees (T ≤ `max_tuples`). Insert O(T × (4c + 1)); a split rule O(T + 900 ×
//! (4c + 1)). Memory: 32 bytes per entry (rule or piece) plus 8 bytes × 4-8 slots per
//! distinct key (tables at most a quarter full), plus 4 bytes per rule split and 56 per rule
//! with a part left out (the lists a removal needs). Bytes are counted by capacity, and every
//! array grows by an explicit doubling whose size — and peak, old and new arrays held
//! together while the data moves — is checked against `max_bytes` before it happens, so a
//! push never holds more than `max_bytes`, and a refused push leaves the classifier as it
//! was.

use super::tuple_space::range_to_prefixes;
use super::{
    AclRule, ClassifierBuildError, ClassifierLimits, FiveTuple, PacketClassifier, RuleSet, Tuple,
};
use crate::classify::PortRange;

mod edit;

/// Address bits (source + destination) from which a table's keys are considered spread by
/// their addresses: its tuple keeps no port bits ([`relax`]) and its buckets may hold
/// [`WIDE_LIMIT_FACTOR`] × `c` rules. Such a bucket is reached only by headers inside one
/// prefix pair, so a longer bucket costs few lookups, while a table fewer keeps a probe off
/// every lookup; a table keyed on few bits (a bucket like "every source, port 80") is
/// reached by many headers and keeps `c`.
const WIDE_ADDRESS_BITS: u8 = 16;
/// See [`WIDE_ADDRESS_BITS`]; measured with 1 (the paper's single `c`), 2 and 4 on the sets of
/// `docs/classify.md`.
const WIDE_LIMIT_FACTOR: usize = 4;

/// The collision limit `c` when none is given. The paper studies several values; 8 keeps
/// bucket scans short on the ClassBench-like sets of `docs/classify.md` (our choice).
pub const DEFAULT_COLLISION_LIMIT: usize = 8;

/// One rule as a table holds it, 32 bytes (half a cache line, aligned so none straddles
/// two). A bucket's rules are chained through `next` in rule order.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Entry {
    /// The rule's rank: lower ranks match first (the index in the rule set when built in
    /// order).
    rule: u32,
    /// What a lookup answers for the rule (its rank, unless inserted by
    /// [`TupleMergeClassifier::insert`]).
    id: u32,
    src: u32,
    dst: u32,
    sp_lo: u16,
    sp_hi: u16,
    dp_lo: u16,
    dp_hi: u16,
    src_len: u8,
    dst_len: u8,
    proto: u8,
    proto_mask: u8,
    /// 1 + index in the table's `entries` of the bucket's next rule; 0 ends the chain.
    next: u32,
}

/// A hash table slot, 8 bytes: a tag (the low bits of the key's hash, bit 0 set; 0 marks a
/// free slot) and where the bucket's first rule is. A probe reads a rule only when its tag
/// agrees, so a lookup that misses a table touches one slot line, 8 slots to a line.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    tag: u32,
    at: u32,
}

/// `a` and `b` agree on their first `len` bits (`len` 0-32; a `u64` shift, so 32 is defined).
#[inline]
fn same_prefix(a: u32, b: u32, len: u8) -> bool {
    (u64::from(a ^ b) >> (32 - u32::from(len))) == 0
}

impl Entry {
    fn of(rule: u32, r: &AclRule) -> Entry {
        Entry {
            rule,
            id: rule,
            src: r.src.addr(),
            dst: r.dst.addr(),
            sp_lo: r.src_port.low,
            sp_hi: r.src_port.high,
            dp_lo: r.dst_port.low,
            dp_hi: r.dst_port.high,
            src_len: r.src.prefix_len(),
            dst_len: r.dst.prefix_len(),
            proto: r.proto.value,
            proto_mask: r.proto.mask,
            next: 0,
        }
    }
    #[inline]
    fn matches(&self, k: &FiveTuple) -> bool {
        same_prefix(k.src, self.src, self.src_len)
            & same_prefix(k.dst, self.dst, self.dst_len)
            & (k.src_port >= self.sp_lo)
            & (k.src_port <= self.sp_hi)
            & (k.dst_port >= self.dp_lo)
            & (k.dst_port <= self.dp_hi)
            & (k.proto & self.proto_mask == self.proto)
    }
    /// Every header `p` matches, `self` matches too.
    fn contains(&self, p: &Entry) -> bool {
        self.src_len <= p.src_len
            && same_prefix(p.src, self.src, self.src_len)
            && self.dst_len <= p.dst_len
            && same_prefix(p.dst, self.dst, self.dst_len)
            && self.sp_lo <= p.sp_lo
            && p.sp_hi <= self.sp_hi
            && self.dp_lo <= p.dp_lo
            && p.dp_hi <= self.dp_hi
            && self.proto_mask & p.proto_mask == self.proto_mask
            && p.proto & self.proto_mask == self.proto
    }
}

/// A header as two words: addresses (`src << 32 | dst`), then ports and protocol
/// (`src_port << 24 | dst_port << 8 | proto`); a table's key is these words masked.
#[inline]
fn words(src: u32, dst: u32, sp: u16, dp: u16, proto: u8) -> (u64, u64) {
    (
        (u64::from(src) << 32) | u64::from(dst),
        (u64::from(sp) << 24) | (u64::from(dp) << 8) | u64::from(proto),
    )
}

/// The masks of a table's tuple over the two [`words`].
#[derive(Debug, Clone, Copy)]
struct Masks {
    hi: u64,
    lo: u64,
}

impl Masks {
    fn of(t: &Tuple) -> Masks {
        use super::prefix_mask;
        let (hi, lo) = words(
            prefix_mask(t.src, 32) as u32,
            prefix_mask(t.dst, 32) as u32,
            prefix_mask(t.sp, 16) as u16,
            prefix_mask(t.dp, 16) as u16,
            t.proto_mask,
        );
        Masks { hi, lo }
    }
    #[inline]
    fn key(&self, (hi, lo): (u64, u64)) -> (u64, u64) {
        (hi & self.hi, lo & self.lo)
    }
    /// The key of a rule (its low corner: every header the rule matches has this key).
    #[inline]
    fn key_of(&self, s: &Entry) -> (u64, u64) {
        self.key(words(s.src, s.dst, s.sp_lo, s.dp_lo, s.proto))
    }
}

/// Multiply-xor-multiply of the two key words; a table takes the top bits. The top bits of a
/// product depend on every bit of its operands (Knuth's multiplicative hashing, TAOCP vol. 3,
/// §6.4; constants from SplitMix64, Steele et al., OOPSLA 2014). Fixed, so builds are
/// deterministic; a rule author who makes keys collide slows lookups, never changes answers.
#[inline]
fn hash((hi, lo): (u64, u64)) -> u64 {
    (hi.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ lo).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

/// One table: a tuple and an open-addressing hash table (linear probing, power-of-two
/// capacity at most a quarter full, Knuth TAOCP vol. 3 §6.4 algorithm L) of bucket heads.
#[derive(Debug, Clone)]
struct TmTable {
    tuple: Tuple,
    masks: Masks,
    /// The lowest rule index in the table: lookups stop before a table that cannot win.
    best: u32,
    /// 64 − log2(slots).
    shift: u32,
    slots: Vec<Head>,
    entries: Vec<Entry>,
    /// Buckets (distinct keys).
    keys: usize,
    /// 1 + index in `entries` of the first slot a removal freed (chained through `next`);
    /// 0 when none is free. Inserts take freed slots first.
    free: u32,
    /// Slots on the free list.
    freed: usize,
}

const FIRST_SLOTS: usize = 8;
/// Tables whose home slots a lookup reads before it examines the first of them. Measured
/// against 4, 16 and one at a time on the sets of `docs/classify.md`: 8 was best or equal on
/// all three; 16 computes keys for tables the priority stop would have skipped.
const PROBE_GROUP: usize = 8;
/// Slots per key at most (a quarter full): an unsuccessful probe reads ≈ 1.4 slots (Knuth's
/// ½(1 + 1/(1−α)²) at α = ¼), and 8-byte slots keep the tables of 10k rules in L2.
const SLOTS_PER_KEY: usize = 4;

/// What an insert adds to the heap: `add` bytes held after it, and `transient` bytes held
/// only while it runs (an array being replaced, held with its successor).
#[derive(Debug, Clone, Copy, Default)]
struct Growth {
    add: usize,
    transient: usize,
}

impl Growth {
    fn and(self, other: Growth) -> Growth {
        Growth {
            add: self.add + other.add,
            transient: self.transient.max(other.transient),
        }
    }
}

/// The capacity of an array of capacity `cap` that must hold `need` items: doubled (at least
/// 4) when it is short, so pushes one at a time cost O(1) amortised. Arrays grow only through
/// this, by `reserve_exact`, so their capacity — what the byte limit counts — is known before
/// they grow.
fn capacity_for(cap: usize, need: usize) -> usize {
    if need <= cap {
        cap
    } else {
        need.max(2 * cap).max(4)
    }
}

/// The growth of an array of `size`-byte items from capacity `cap` to hold `need` items.
fn array_growth(cap: usize, need: usize, size: usize) -> Growth {
    let new = capacity_for(cap, need);
    if new == cap {
        return Growth::default();
    }
    Growth {
        add: (new - cap) * size,
        transient: cap * size,
    }
}

/// Where a rule (or a piece of one) goes in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// A bucket of its own: a new key.
    NewKey,
    /// After the rules of an existing bucket.
    Chain,
    /// Nowhere: an entry of its bucket (an earlier rule) contains it, so every header it
    /// matches matches that entry first.
    Shadowed,
}

impl TmTable {
    /// An empty table with room for `keys` buckets and `entries` rules.
    fn with_room(tuple: Tuple, best: u32, keys: usize, entries: usize) -> TmTable {
        let slots = Self::slots_for(FIRST_SLOTS, keys);
        TmTable {
            tuple,
            masks: Masks::of(&tuple),
            best,
            shift: 64 - slots.trailing_zeros(),
            slots: vec![Head::default(); slots],
            entries: Vec::with_capacity(capacity_for(0, entries)),
            keys: 0,
            free: 0,
            freed: 0,
        }
    }
    /// Heap bytes of `with_room(.., keys, entries)`.
    fn room_bytes(keys: usize, entries: usize) -> usize {
        Self::slots_for(FIRST_SLOTS, keys) * std::mem::size_of::<Head>()
            + capacity_for(0, entries) * std::mem::size_of::<Entry>()
    }
    /// Slots for `keys` keys at most a quarter full, from `slots` (doubled as needed).
    fn slots_for(slots: usize, keys: usize) -> usize {
        let mut n = slots;
        while keys * SLOTS_PER_KEY > n {
            n *= 2;
        }
        n
    }
    /// The slot holding the head of the bucket of `key`, or the free slot where it would go.
    fn find(&self, key: (u64, u64)) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = (hash(key) >> self.shift) as usize;
        loop {
            let h = self.slots[i];
            if h.tag == 0 || self.masks.key_of(&self.entries[h.at as usize]) == key {
                return i;
            }
            i = (i + 1) & mask;
        }
    }
    /// The bucket's rules from its first, `at`, in rule order.
    fn chain(&self, at: u32) -> impl Iterator<Item = &Entry> + '_ {
        let mut next = at + 1;
        std::iter::from_fn(move || {
            let e = self.entries.get(next.checked_sub(1)? as usize)?;
            next = e.next;
            Some(e)
        })
    }
    /// The first rule of the bucket of `key`, if the bucket exists.
    fn bucket(&self, key: (u64, u64)) -> Option<u32> {
        let h = self.slots[self.find(key)];
        (h.tag != 0).then_some(h.at)
    }
    fn bucket_len(&self, r: &AclRule) -> usize {
        self.bucket(self.masks.key_of(&Entry::of(0, r)))
            .map_or(0, |at| self.chain(at).count())
    }
    /// Where `e` would go (the table must cover its tuple).
    fn placement(&self, e: &Entry) -> Placement {
        match self.bucket(self.masks.key_of(e)) {
            None => Placement::NewKey,
            Some(at) if self.chain(at).any(|x| x.rule < e.rule && x.contains(e)) => {
                Placement::Shadowed
            }
            Some(_) => Placement::Chain,
        }
    }
    /// Bytes the table holds on the heap, by capacity.
    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Head>()
            + self.entries.capacity() * std::mem::size_of::<Entry>()
    }
    /// What [`Self::reserve`] of `keys` new keys and `entries` new rules adds.
    fn growth(&self, keys: usize, entries: usize) -> Growth {
        let slots = Self::slots_for(self.slots.len(), self.keys + keys);
        let head = std::mem::size_of::<Head>();
        let rehash = if slots > self.slots.len() {
            Growth {
                add: (slots - self.slots.len()) * head,
                transient: self.slots.len() * head,
            }
        } else {
            Growth::default()
        };
        rehash.and(array_growth(
            self.entries.capacity(),
            self.entries.len() + entries.saturating_sub(self.freed),
            std::mem::size_of::<Entry>(),
        ))
    }
    /// Room for `keys` new keys and `entries` new rules, so that many inserts allocate
    /// nothing: the slots rehashed once to their final size, the rules' array grown once.
    fn reserve(&mut self, keys: usize, entries: usize) {
        let slots = Self::slots_for(self.slots.len(), self.keys + keys);
        if slots > self.slots.len() {
            self.rehash(slots);
        }
        let need = self.entries.len() + entries.saturating_sub(self.freed);
        let cap = capacity_for(self.entries.capacity(), need);
        self.entries.reserve_exact(cap - self.entries.len());
    }
    /// Insert `e` into its bucket in rank order (after the rules of its rank or below); the
    /// room must be reserved.
    fn insert(&mut self, mut e: Entry) {
        let key = self.masks.key_of(&e);
        let i = self.find(key);
        let head = self.slots[i];
        self.best = self.best.min(e.rule);
        if head.tag == 0 {
            debug_assert!((self.keys + 1) * SLOTS_PER_KEY <= self.slots.len());
            let at = self.store(e);
            self.slots[i] = Head {
                tag: hash(key) as u32 | 1,
                at,
            };
            self.keys += 1;
            return;
        }
        if e.rule < self.entries[head.at as usize].rule {
            e.next = head.at + 1;
            self.slots[i].at = self.store(e);
            return;
        }
        let mut prev = head.at as usize;
        while let Some(n) = self.entries[prev].next.checked_sub(1) {
            if self.entries[n as usize].rule > e.rule {
                break;
            }
            prev = n as usize;
        }
        e.next = self.entries[prev].next;
        let at = self.store(e);
        self.entries[prev].next = at + 1;
    }
    /// Put `e` in a freed slot, or after the last; returns its index.
    fn store(&mut self, e: Entry) -> u32 {
        match self.free.checked_sub(1) {
            Some(at) => {
                self.free = self.entries[at as usize].next;
                self.freed -= 1;
                self.entries[at as usize] = e;
                at
            }
            None => {
                debug_assert!(self.entries.len() < self.entries.capacity());
                self.entries.push(e);
                self.entries.len() as u32 - 1
            }
        }
    }
    /// Take rank `rank`'s entry out of the bucket of `key`; `false` when it holds none.
    /// The entry's slot goes on the free list; a bucket left empty loses its key.
    fn unlink(&mut self, key: (u64, u64), rank: u32) -> bool {
        let i = self.find(key);
        let head = self.slots[i];
        if head.tag == 0 {
            return false;
        }
        let (mut prev, mut at) = (None, head.at as usize);
        while self.entries[at].rule != rank {
            match self.entries[at].next.checked_sub(1) {
                Some(n) => (prev, at) = (Some(at), n as usize),
                None => return false,
            }
        }
        let next = self.entries[at].next;
        match prev {
            Some(p) => self.entries[p].next = next,
            None if next != 0 => self.slots[i].at = next - 1,
            None => self.clear_slot(i),
        }
        self.entries[at].rule = u32::MAX;
        self.entries[at].next = self.free;
        self.free = at as u32 + 1;
        self.freed += 1;
        if rank == self.best {
            self.best = self
                .slots
                .iter()
                .filter(|h| h.tag != 0)
                .map(|h| self.entries[h.at as usize].rule)
                .min()
                .unwrap_or(u32::MAX);
        }
        true
    }
    /// Empty slot `i` and close the gap it leaves in its probe sequences (deletion from a
    /// linear-probing table without tombstones: Knuth TAOCP vol. 3, §6.4, algorithm R).
    fn clear_slot(&mut self, mut i: usize) {
        let mask = self.slots.len() - 1;
        self.keys -= 1;
        loop {
            self.slots[i] = Head::default();
            let mut j = i;
            loop {
                j = (j + 1) & mask;
                let h = self.slots[j];
                if h.tag == 0 {
                    return;
                }
                let home =
                    (hash(self.masks.key_of(&self.entries[h.at as usize])) >> self.shift) as usize;
                // `h` stays unless its home lies cyclically outside (i, j].
                let stays = if i <= j {
                    i < home && home <= j
                } else {
                    i < home || home <= j
                };
                if !stays {
                    self.slots[i] = h;
                    i = j;
                    break;
                }
            }
        }
    }
    fn rehash(&mut self, slots: usize) {
        let bigger = vec![Head::default(); slots];
        let old = std::mem::replace(&mut self.slots, bigger);
        self.shift = 64 - slots.trailing_zeros();
        for h in old.into_iter().filter(|h| h.tag != 0) {
            let i = self.find(self.masks.key_of(&self.entries[h.at as usize]));
            self.slots[i] = h;
        }
    }
    /// The hash of the header's key in this table (`w` as [`words`]) and the key's home slot.
    /// Reading it is the probe's likely cache miss; a lookup reads the home slots of several
    /// tables before it examines any, so their misses overlap.
    #[inline]
    fn home(&self, w: (u64, u64)) -> (u64, Head) {
        let h = hash(self.masks.key(w));
        (h, self.slots[(h >> self.shift) as usize])
    }
    /// The lowest-ranked rule of this table matching the header `k` (as [`words`] `w`) if it
    /// is below `best`, as (rank, id), probing from the home slot `s` of the key's hash `h`.
    #[inline]
    fn lookup(
        &self,
        k: &FiveTuple,
        w: (u64, u64),
        (h, mut s): (u64, Head),
        best: u32,
    ) -> Option<(u32, u32)> {
        let key = self.masks.key(w);
        let tag = h as u32 | 1;
        let mask = self.slots.len() - 1;
        let mut i = (h >> self.shift) as usize;
        loop {
            if s.tag == tag {
                let first = &self.entries[s.at as usize];
                if let Some(r) = self.scan(first, k, best) {
                    return Some(r);
                }
                if self.masks.key_of(first) == key {
                    return None;
                }
            } else if s.tag == 0 {
                return None;
            }
            i = (i + 1) & mask;
            s = self.slots[i];
        }
    }
    /// The bucket from its first rule, in rule order: the first rule that matches is its
    /// best.
    #[inline]
    fn scan<'a>(&'a self, mut e: &'a Entry, k: &FiveTuple, best: u32) -> Option<(u32, u32)> {
        loop {
            if e.rule >= best {
                return None;
            }
            if e.matches(k) {
                return Some((e.rule, e.id));
            }
            if e.next == 0 {
                return None;
            }
            e = &self.entries[e.next as usize - 1];
        }
    }
}

/// A rule with a part left out, kept to be placed again when a rule that may contain it goes.
#[derive(Debug, Clone, Copy)]
struct LeftOut {
    rank: u32,
    id: u32,
    rule: AclRule,
}

// What the module's header states.
const _: () = assert!(std::mem::size_of::<LeftOut>() == 56);
const _: () = assert!(std::mem::size_of::<Entry>() == 32);

#[derive(Debug, Clone)]
pub struct TupleMergeClassifier {
    /// In the order of `best`: a pushed rule has the highest index so far, so a new table
    /// goes last and the order holds without sorting.
    tables: Vec<TmTable>,
    rules: usize,
    /// Entries over all tables: rules placed whole and pieces.
    entries: usize,
    /// Ranks of the rules placed as pieces, in order.
    pieced: Vec<u32>,
    /// Rules with a part left out (contained by an entry of lower rank), in rank order: a
    /// removal places again those it may have contained ([`Self::remove`]).
    left_out: Vec<LeftOut>,
    /// The rank [`Self::push`] gives: one above the highest held.
    next_rank: u32,
    collision_limit: usize,
    limits: ClassifierLimits,
    /// Heap bytes held, by capacity: [`PacketClassifier::memory_bytes`].
    bytes: usize,
}

/// The port range of the prefix `(value, length)` of a 16-bit field.
fn block((value, len): (u16, u8)) -> PortRange {
    PortRange {
        low: value,
        high: (u32::from(value) + (1u32 << (16 - len)) - 1) as u16,
    }
}

/// The length of the prefix that `r.low` and `r.high` share: every port of the range has
/// these bits.
fn shared_prefix(r: PortRange) -> u8 {
    ((r.low ^ r.high).leading_zeros() as u8).min(16)
}

/// The rule's own tuple: the most specific one whose table can hold it.
fn natural(r: &AclRule) -> Tuple {
    Tuple {
        src: r.src.prefix_len(),
        dst: r.dst.prefix_len(),
        sp: shared_prefix(r.src_port),
        dp: shared_prefix(r.dst_port),
        proto_mask: r.proto.mask,
    }
}

/// The tuple of a new table for a rule of tuple `t`: address lengths rounded down to a
/// multiple of 8; of the two, the shorter dropped when the other exceeds it by more than 4
/// bits (the threshold of Daly and Torng's published implementation: such a table keys on the
/// longer address alone, so rules of many address-length pairs share it); port lengths 0
/// unless the port is exact and the addresses keep fewer than [`WIDE_ADDRESS_BITS`] bits (a
/// table keyed on a /24 gains little from the port and would split rules that differ only in
/// it over two tables); the protocol dropped (rules differing only in it share a bucket, and
/// the collision limit bounds how many).
fn relax(t: Tuple) -> Tuple {
    let port = |l: u8| if l == 16 { 16 } else { 0 };
    let (mut src, mut dst) = (t.src / 8 * 8, t.dst / 8 * 8);
    if src > dst + 4 {
        dst = 0;
    } else if dst > src + 4 {
        src = 0;
    }
    let ported = src + dst < WIDE_ADDRESS_BITS;
    Tuple {
        src,
        dst,
        sp: if ported { port(t.sp) } else { 0 },
        dp: if ported { port(t.dp) } else { 0 },
        proto_mask: 0,
    }
}

impl TupleMergeClassifier {
    /// An empty classifier with collision limit `c` (at least 1).
    pub fn new(collision_limit: usize, limits: &ClassifierLimits) -> TupleMergeClassifier {
        TupleMergeClassifier {
            tables: Vec::new(),
            rules: 0,
            entries: 0,
            pieced: Vec::new(),
            left_out: Vec::new(),
            next_rank: 0,
            collision_limit: collision_limit.max(1),
            limits: *limits,
            bytes: 0,
        }
    }

    /// All rules of `rules`, pushed in order, with [`DEFAULT_COLLISION_LIMIT`].
    pub fn build(
        rules: &RuleSet,
        limits: &ClassifierLimits,
    ) -> Result<TupleMergeClassifier, ClassifierBuildError> {
        Self::build_with_limit(rules, limits, DEFAULT_COLLISION_LIMIT)
    }

    pub fn build_with_limit(
        rules: &RuleSet,
        limits: &ClassifierLimits,
        collision_limit: usize,
    ) -> Result<TupleMergeClassifier, ClassifierBuildError> {
        limits.check_rules(rules.len())?;
        let mut c = Self::new(collision_limit, limits);
        for r in &rules.rules {
            c.push(r)?;
        }
        Ok(c)
    }

    /// Add `rule` after every rule already held (lowest priority); returns its rank, which
    /// lookups answer. On an error the classifier is unchanged.
    pub fn push(&mut self, rule: &AclRule) -> Result<u32, ClassifierBuildError> {
        let rank = self.next_rank;
        self.place(rank, rank, rule)?;
        Ok(rank)
    }

    /// Place `rule` at rank `rank` (below `u32::MAX`, held by no other rule), answering `id`
    /// when it is the first match. Tables keep the order of their best rule; no rule moves.
    fn place(&mut self, rank: u32, id: u32, rule: &AclRule) -> Result<(), ClassifierBuildError> {
        let index = rank as usize;
        if self.rules >= self.limits.max_rules || rank == u32::MAX {
            return Err(ClassifierBuildError::TooManyRules {
                rules: self.rules + 1,
                max: self.limits.max_rules,
            });
        }
        let nat = natural(rule);
        let entry = Entry {
            id,
            ..Entry::of(rank, rule)
        };
        if let Some(t) = self.roomy_table(rule, &nat) {
            let table = &self.tables[t];
            let keys = usize::from(table.bucket(table.masks.key_of(&entry)).is_none());
            self.admit(index, table.growth(keys, 1))?;
            self.tables[t].reserve(keys, 1);
            self.tables[t].insert(entry);
        } else {
            let relaxed = relax(nat);
            let want = if self.find(&relaxed).is_some() {
                nat
            } else {
                relaxed
            };
            if self.find(&want).is_some() {
                // The rule's own tuple has a table and its bucket is full: every rule there
                // agrees with this one on every bit of its tuple. Split it instead — unless an
                // earlier entry contains it, when it can never match first.
                if self.contains(&entry) {
                    self.admit(index, self.note_growth(false, true))?;
                    self.note(rank, false, Some((id, rule)));
                    self.counted(rank);
                    return Ok(());
                }
                return self.push_pieces(rule, rank, id);
            }
            self.check_tuples(index, 1)?;
            self.admit(
                index,
                self.list_growth(1).and(Growth {
                    add: TmTable::room_bytes(1, 1),
                    transient: 0,
                }),
            )?;
            self.reserve_list(1);
            let mut table = TmTable::with_room(want, rank, 1, 1);
            table.insert(entry);
            self.tables.push(table);
        }
        self.entries += 1;
        self.counted(rank);
        Ok(())
    }

    /// Count rule `rank` as held.
    fn counted(&mut self, rank: u32) {
        self.rules += 1;
        self.next_rank = self.next_rank.max(rank + 1);
    }

    /// Place rule `index` as pieces: its port ranges split into prefixes (at most 30 × 30
    /// pieces, tuple space search's expansion, Srinivasan et al. §2), each a rule of its own
    /// with the index of the whole, in the table of its own tuple (made if absent). Such a
    /// table keys on every bit of the piece, so the piece matches every header that reaches
    /// its bucket; a piece is left out when an entry of its bucket contains it (an earlier
    /// rule matches all its headers first), so a bucket holds at most one piece.
    fn push_pieces(
        &mut self,
        rule: &AclRule,
        rank: u32,
        id: u32,
    ) -> Result<(), ClassifierBuildError> {
        const NONE: u32 = u32::MAX;
        let index = rank as usize;
        let sps = range_to_prefixes(rule.src_port);
        let dps = range_to_prefixes(rule.dst_port);
        let piece = |sp, dp| Entry {
            id,
            ..Entry::of(
                rank,
                &AclRule {
                    src_port: block(sp),
                    dst_port: block(dp),
                    ..*rule
                },
            )
        };
        // The tables of the pieces' tuples, by port prefix lengths (the rest is the rule's).
        let mut table = [[NONE; 17]; 17];
        for (i, t) in self.tables.iter().enumerate() {
            let u = &t.tuple;
            if (u.src, u.dst, u.proto_mask)
                == (
                    rule.src.prefix_len(),
                    rule.dst.prefix_len(),
                    rule.proto.mask,
                )
            {
                table[usize::from(u.sp)][usize::from(u.dp)] = i as u32;
            }
        }
        // New keys and new entries per tuple, then what they cost; nothing changes until the
        // limits are known to hold.
        let mut count = [[(0usize, 0usize); 17]; 17];
        let mut any_shadowed = false;
        for &sp in sps.iter() {
            for &dp in dps.iter() {
                let (s, d) = (usize::from(sp.1), usize::from(dp.1));
                let place = match table[s][d] {
                    NONE => Placement::NewKey,
                    t => self.tables[t as usize].placement(&piece(sp, dp)),
                };
                let c = &mut count[s][d];
                c.0 += usize::from(place == Placement::NewKey);
                c.1 += usize::from(place != Placement::Shadowed);
                any_shadowed |= place == Placement::Shadowed;
            }
        }
        let mut growth = self.note_growth(true, any_shadowed);
        let mut new_tables = 0;
        for s in 0..17 {
            for d in 0..17 {
                let (keys, entries) = count[s][d];
                if entries == 0 {
                    continue;
                }
                growth = growth.and(match table[s][d] {
                    NONE => {
                        new_tables += 1;
                        Growth {
                            add: TmTable::room_bytes(keys, entries),
                            transient: 0,
                        }
                    }
                    t => self.tables[t as usize].growth(keys, entries),
                });
            }
        }
        if new_tables > 0 {
            self.check_tuples(index, new_tables)?;
            growth = growth.and(self.list_growth(new_tables));
        }
        self.admit(index, growth)?;
        self.reserve_list(new_tables);
        for s in 0..17 {
            for d in 0..17 {
                let (keys, entries) = count[s][d];
                if entries == 0 {
                    continue;
                }
                match table[s][d] {
                    NONE => {
                        let tuple = Tuple {
                            src: rule.src.prefix_len(),
                            dst: rule.dst.prefix_len(),
                            sp: s as u8,
                            dp: d as u8,
                            proto_mask: rule.proto.mask,
                        };
                        table[s][d] = self.tables.len() as u32;
                        let t = TmTable::with_room(tuple, rank, keys, entries);
                        self.tables.push(t);
                    }
                    t => self.tables[t as usize].reserve(keys, entries),
                }
            }
        }
        let mut shadowed = false;
        for &sp in sps.iter() {
            for &dp in dps.iter() {
                let t = table[usize::from(sp.1)][usize::from(dp.1)];
                if t == NONE {
                    continue; // every piece of this tuple shadowed
                }
                let p = piece(sp, dp);
                let t = &mut self.tables[t as usize];
                if t.placement(&p) != Placement::Shadowed {
                    t.insert(p);
                    self.entries += 1;
                } else {
                    shadowed = true;
                }
            }
        }
        self.note(rank, true, shadowed.then_some((id, rule)));
        self.counted(rank);
        Ok(())
    }

    /// An entry held contains `e`. Such an entry matches `e`'s low corner, so it is in the
    /// bucket of that header's key in its table: one lookup's buckets, scanned in full.
    fn contains(&self, e: &Entry) -> bool {
        self.tables.iter().any(|t| {
            t.bucket(t.masks.key_of(e))
                .is_some_and(|at| t.chain(at).any(|x| x.rule < e.rule && x.contains(e)))
        })
    }

    /// Refuse rule `index` if `n` more tables would pass `max_tuples`.
    fn check_tuples(&self, index: usize, n: usize) -> Result<(), ClassifierBuildError> {
        if self.tables.len() + n > self.limits.max_tuples {
            return Err(ClassifierBuildError::TooManyTuples {
                rule: index,
                max: self.limits.max_tuples,
            });
        }
        Ok(())
    }

    /// Refuse rule `index` if `g` would take the heap past `max_bytes` at its peak (what is
    /// held after, plus the largest array held with its successor on the way), else count it.
    fn admit(&mut self, index: usize, g: Growth) -> Result<(), ClassifierBuildError> {
        let peak = self.bytes + g.add + g.transient;
        if peak > self.limits.max_bytes {
            return Err(ClassifierBuildError::TooManyBytes {
                rule: index,
                bytes: peak,
                max: self.limits.max_bytes,
            });
        }
        self.bytes += g.add;
        Ok(())
    }

    /// The growth of the list of tables for `n` more.
    fn list_growth(&self, n: usize) -> Growth {
        array_growth(
            self.tables.capacity(),
            self.tables.len() + n,
            std::mem::size_of::<TmTable>(),
        )
    }

    fn reserve_list(&mut self, n: usize) {
        let cap = capacity_for(self.tables.capacity(), self.tables.len() + n);
        self.tables.reserve_exact(cap - self.tables.len());
    }

    /// The most specific table covering `nat` whose bucket for `rule` has room.
    fn roomy_table(&self, rule: &AclRule, nat: &Tuple) -> Option<usize> {
        let mut choice: Option<(usize, u32)> = None;
        for (i, t) in self.tables.iter().enumerate() {
            let spec = t.tuple.specificity();
            if !t.tuple.covers(nat) || choice.is_some_and(|(_, s)| s >= spec) {
                continue;
            }
            if t.bucket_len(rule) < self.limit_of(&t.tuple) {
                choice = Some((i, spec));
            }
        }
        choice.map(|(i, _)| i)
    }

    /// The collision limit of a table of tuple `t`: `c`, or [`WIDE_LIMIT_FACTOR`] × `c` when
    /// the table keys on at least [`WIDE_ADDRESS_BITS`] address bits.
    fn limit_of(&self, t: &Tuple) -> usize {
        if t.src + t.dst >= WIDE_ADDRESS_BITS {
            self.collision_limit * WIDE_LIMIT_FACTOR
        } else {
            self.collision_limit
        }
    }

    fn find(&self, tuple: &Tuple) -> Option<usize> {
        self.tables.iter().position(|t| t.tuple == *tuple)
    }

    /// Rules held (pushed), whether placed whole, as pieces, or not at all (every header
    /// they match matches an earlier rule first).
    pub fn len(&self) -> usize {
        self.rules
    }
    /// Entries over all tables: one per rule placed whole, one per piece placed.
    pub fn entries(&self) -> usize {
        self.entries
    }
    /// Rules split into port-prefix pieces (their own tuple's bucket was full).
    pub fn split_rules(&self) -> usize {
        self.pieced.len()
    }

    /// What noting a rule as pieced and as having a part left out adds to the heap.
    fn note_growth(&self, pieced: bool, left_out: bool) -> Growth {
        let mut g = Growth::default();
        if pieced {
            g = g.and(array_growth(
                self.pieced.capacity(),
                self.pieced.len() + 1,
                std::mem::size_of::<u32>(),
            ));
        }
        if left_out {
            g = g.and(array_growth(
                self.left_out.capacity(),
                self.left_out.len() + 1,
                std::mem::size_of::<LeftOut>(),
            ));
        }
        g
    }

    /// Note rule `rank` as pieced, and as having a part left out (its id and rule); the
    /// room was admitted ([`Self::note_growth`]).
    fn note(&mut self, rank: u32, pieced: bool, left_out: Option<(u32, &AclRule)>) {
        if pieced {
            let cap = capacity_for(self.pieced.capacity(), self.pieced.len() + 1);
            self.pieced.reserve_exact(cap - self.pieced.len());
            let at = self.pieced.partition_point(|&r| r < rank);
            self.pieced.insert(at, rank);
        }
        if let Some((id, rule)) = left_out {
            let cap = capacity_for(self.left_out.capacity(), self.left_out.len() + 1);
            self.left_out.reserve_exact(cap - self.left_out.len());
            let at = self.left_out.partition_point(|x| x.rank < rank);
            let rule = *rule;
            self.left_out.insert(at, LeftOut { rank, id, rule });
        }
    }
    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }
    /// The longest bucket (rules checked in full by one table probe in the worst case).
    pub fn longest_bucket(&self) -> usize {
        self.tables
            .iter()
            .flat_map(|t| {
                t.slots
                    .iter()
                    .filter(|h| h.tag != 0)
                    .map(|h| t.chain(h.at).count())
            })
            .max()
            .unwrap_or(0)
    }
}

impl PacketClassifier for TupleMergeClassifier {
    /// Tables in the order of their best rule, [`PROBE_GROUP`] at a time: the home slots of
    /// a group are read first (independent loads, whose cache misses overlap), then its
    /// tables are examined in order until one's best rule cannot beat the match found.
    fn first_match(&self, key: &FiveTuple) -> Option<u32> {
        let w = words(key.src, key.dst, key.src_port, key.dst_port, key.proto);
        let (mut best, mut id) = (u32::MAX, u32::MAX);
        for group in self.tables.chunks(PROBE_GROUP) {
            if group[0].best >= best {
                break;
            }
            let mut homes = [(0u64, Head::default()); PROBE_GROUP];
            for (t, home) in group.iter().zip(homes.iter_mut()) {
                *home = t.home(w);
            }
            for (t, &home) in group.iter().zip(&homes) {
                if t.best >= best {
                    break;
                }
                if let Some((r, i)) = t.lookup(key, w, home, best) {
                    (best, id) = (r, i);
                }
            }
        }
        (best != u32::MAX).then_some(id)
    }
    fn memory_bytes(&self) -> usize {
        self.tables.capacity() * std::mem::size_of::<TmTable>()
            + self.tables.iter().map(TmTable::heap_bytes).sum::<usize>()
            + self.pieced.capacity() * std::mem::size_of::<u32>()
            + self.left_out.capacity() * std::mem::size_of::<LeftOut>()
    }
    fn tuples(&self) -> usize {
        self.tables.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Action, Ipv4Prefix, LinearClassifier, ProtoMatch, ANY_PORT};
    use super::*;

    #[test]
    fn shared_prefix_of_ranges() {
        let r = |low, high| PortRange { low, high };
        assert_eq!(shared_prefix(r(80, 80)), 16);
        assert_eq!(shared_prefix(ANY_PORT), 0);
        assert_eq!(shared_prefix(r(1024, 65535)), 0);
        assert_eq!(shared_prefix(r(0, 1023)), 6);
        // 1000 = 0b0000_0011_1110_1000, 1999 = 0b0000_0111_1100_1111: 5 bits shared.
        assert_eq!(shared_prefix(r(1000, 1999)), 5);
    }

    /// Rules equal on their whole tuple fill their bucket to the limit, then are split into
    /// port-prefix pieces; a piece whose bucket already holds one like it is left out. The
    /// answers stay those of the linear scan.
    #[test]
    fn collision_limit_spreads_rules_and_equal_tuples_are_split() {
        let net = Ipv4Prefix::new(0x0A00_0000, 8).unwrap();
        let mut rules = Vec::new();
        // 20 rules on distinct /32s inside 10/8, after a TCP rule on 10/8 (which does not
        // contain them): the first table (10/8's relaxed tuple) takes 4; the rest go to a
        // more specific table.
        rules.push(AclRule {
            src: net,
            proto: ProtoMatch::exact(6),
            ..AclRule::any(Action::Drop)
        });
        for i in 0..20u32 {
            rules.push(AclRule {
                src: Ipv4Prefix::new(0x0A00_0000 + i, 32).unwrap(),
                ..AclRule::any(Action::Accept)
            });
        }
        // 10 rules equal but for their destination port ranges 0-260, 0-280, ..., 0-440,
        // whose ends all share the same 7 leading bits: one key in every table that can hold
        // them. The relaxed all-wildcard table takes 4, the exact-tuple table 4; the last two
        // are split: 0-420 into 5 pieces (0-255, 256-383, 384-415, 416-419, 420), 0-440 into
        // 6 (0-255, 256-383, 384-415, 416-431, 432-439, 440), of which the first 3 are 0-420's
        // and left out.
        for i in 0..10u16 {
            rules.push(AclRule {
                dst_port: PortRange {
                    low: 0,
                    high: 260 + i * 20,
                },
                ..AclRule::any(Action::Accept)
            });
        }
        let set = RuleSet::new(rules);
        let c =
            TupleMergeClassifier::build_with_limit(&set, &ClassifierLimits::default(), 4).unwrap();
        assert!(c.tuples() >= 2, "{}", c.tuples());
        assert_eq!(c.longest_bucket(), 4);
        assert_eq!((c.len(), c.entries()), (31, 1 + 20 + 4 + 4 + 5 + 3));
        assert_eq!(c.bytes, c.memory_bytes());
        let lin = LinearClassifier::build(&set, &ClassifierLimits::default()).unwrap();
        for src in [0x0A00_0000u32, 0x0A00_0005, 0x0A00_0013, 0x0B00_0000] {
            for dp in [
                0u16, 256, 261, 280, 281, 400, 416, 420, 421, 432, 440, 441, 1000,
            ] {
                let k = FiveTuple {
                    src,
                    dst: 1,
                    src_port: 1,
                    dst_port: dp,
                    proto: if dp % 2 == 0 { 17 } else { 6 },
                };
                assert_eq!(c.first_match(&k), lin.first_match(&k), "{k:?}");
            }
        }
    }

    /// A table keyed on 16 or more address bits holds up to 4c rules per bucket, one keyed on
    /// fewer holds c; ports are part of a new table's tuple only with short addresses.
    #[test]
    fn wide_tables_hold_longer_buckets_and_drop_ports() {
        let net = Ipv4Prefix::new(0xC0A8_0100, 24).unwrap();
        let rule = |dst, port: u16| AclRule {
            dst,
            dst_port: PortRange {
                low: port,
                high: port,
            },
            proto: ProtoMatch::exact(6),
            ..AclRule::any(Action::Accept)
        };
        // 20 rules on one /24, exact ports 1000..1020: the /24 table (no port in its tuple)
        // takes 16 in one bucket, the rest go to the rules' exact tuple.
        let mut rules: Vec<AclRule> = (0..20).map(|i| rule(net, 1000 + i)).collect();
        // 6 rules on 0/0 with exact ports: a table keyed on the destination port alone.
        rules.extend((0..6).map(|i| rule(Ipv4Prefix::ANY, 2000 + i)));
        let set = RuleSet::new(rules);
        let lim = ClassifierLimits::default();
        let c = TupleMergeClassifier::build_with_limit(&set, &lim, 4).unwrap();
        let tuples: Vec<Tuple> = c.tables.iter().map(|t| t.tuple).collect();
        assert_eq!(tuples[0].dst, 24);
        assert_eq!(tuples[0].dp, 0, "{tuples:?}");
        assert_eq!(c.tables[0].entries.len(), 16);
        assert!(
            tuples.iter().any(|t| (t.dst, t.dp) == (0, 16)),
            "{tuples:?}"
        );
        assert_eq!(c.longest_bucket(), 16);
        let lin = LinearClassifier::build(&set, &lim).unwrap();
        for dst in [0xC0A8_0101u32, 0xC0A8_0201] {
            for dp in [999u16, 1000, 1015, 1016, 1019, 1020, 2000, 2005, 2006] {
                let k = FiveTuple {
                    src: 1,
                    dst,
                    src_port: 1,
                    dst_port: dp,
                    proto: 6,
                };
                assert_eq!(c.first_match(&k), lin.first_match(&k), "{k:?}");
            }
        }
    }

    #[test]
    fn push_past_limits_is_refused_and_leaves_the_classifier_unchanged() {
        let lim = ClassifierLimits {
            max_rules: 2,
            max_tuples: 1,
            ..ClassifierLimits::default()
        };
        let mut c = TupleMergeClassifier::new(4, &lim);
        assert_eq!(c.push(&AclRule::any(Action::Accept)), Ok(0));
        let specific = AclRule {
            src: Ipv4Prefix::new(0x0A00_0000, 8).unwrap(),
            ..AclRule::any(Action::Drop)
        };
        // The /0 table covers it and has room: no new tuple.
        assert_eq!(c.push(&specific), Ok(1));
        assert_eq!(
            c.push(&specific),
            Err(ClassifierBuildError::TooManyRules { rules: 3, max: 2 })
        );
        let lim = ClassifierLimits {
            max_tuples: 1,
            ..ClassifierLimits::default()
        };
        let mut c = TupleMergeClassifier::new(1, &lim);
        c.push(&AclRule::any(Action::Accept)).unwrap();
        // The bucket is full (c = 1): a second table would be needed.
        assert_eq!(
            c.push(&specific),
            Err(ClassifierBuildError::TooManyTuples { rule: 1, max: 1 })
        );
        assert_eq!(c.len(), 1);
        let k = FiveTuple {
            src: 0x0A00_0001,
            ..FiveTuple::default()
        };
        assert_eq!(c.first_match(&k), Some(0));
    }

    /// Two keys whose hashes agree on the tag and on the home slot of an 8-slot table: a probe
    /// for the second passes the first's slot, whose tag agrees but whose rules do not match,
    /// and must go on to the second's slot rather than stop.
    #[test]
    fn a_tag_that_agrees_for_another_key_does_not_end_the_probe() {
        let home = |h: u64| (h >> 61, h as u32 | 1);
        let mut seen = std::collections::HashMap::new();
        let (a, b) = (0u32..1 << 20)
            .find_map(|src| {
                let h = hash((u64::from(src) << 32, 0));
                seen.insert(home(h), src).map(|other| (other, src))
            })
            .expect("a pair in 2^20 keys (about 16 are expected)");
        let rule = |src| AclRule {
            src: Ipv4Prefix::new(src, 32).unwrap(),
            ..AclRule::any(Action::Accept)
        };
        let set = RuleSet::new(vec![rule(a), rule(b)]);
        let c = TupleMergeClassifier::build(&set, &ClassifierLimits::default()).unwrap();
        assert_eq!(c.tuples(), 1);
        assert_eq!(c.tables[0].slots.len(), FIRST_SLOTS);
        for (src, want) in [(a, Some(0)), (b, Some(1)), (a ^ 1, None)] {
            let k = FiveTuple {
                src,
                ..FiveTuple::default()
            };
            assert_eq!(c.first_match(&k), want, "{src:#x}");
        }
    }

    /// Thousands of keys over several tables (slots grow and rehash many times, buckets chain
    /// past their head): the answers are the linear scan's, for headers inside every rule and
    /// beside it.
    #[test]
    fn tables_that_grow_keep_the_linear_answers() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut rules = Vec::new();
        for i in 0..6000u32 {
            let len = [32u8, 24, 16, 8][(i % 4) as usize];
            let port = (rng.below(4) * 1000) as u16;
            rules.push(AclRule {
                src: Ipv4Prefix::truncating(0x0A00_0000 | (rng.below(1 << 16) as u32) << 4, len),
                dst: Ipv4Prefix::truncating(0xC0A8_0000 | rng.below(256) as u32, 32 - len / 2),
                dst_port: PortRange {
                    low: port,
                    high: port + (i % 3) as u16 * 7,
                },
                proto: if i % 5 == 0 {
                    ProtoMatch::ANY
                } else {
                    ProtoMatch::exact(6)
                },
                ..AclRule::any(Action::Accept)
            });
        }
        let set = RuleSet::new(rules);
        let lim = ClassifierLimits::default();
        let lin = LinearClassifier::build(&set, &lim).unwrap();
        for limit in [1, 2, DEFAULT_COLLISION_LIMIT] {
            let c = TupleMergeClassifier::build_with_limit(&set, &lim, limit).unwrap();
            assert!(
                c.tables.iter().any(|t| t.slots.len() >= 1024),
                "limit {limit}"
            );
            for (i, r) in set.rules.iter().enumerate() {
                let k = FiveTuple {
                    src: r.src.addr() | (i as u32 & !r.src.mask()),
                    dst: r.dst.addr(),
                    src_port: 1,
                    dst_port: r.dst_port.high,
                    proto: 6,
                };
                let beside = FiveTuple {
                    dst_port: r.dst_port.high.wrapping_add(1),
                    ..k
                };
                assert_eq!(
                    c.first_match(&k),
                    lin.first_match(&k),
                    "limit {limit} {k:?}"
                );
                assert_eq!(c.first_match(&beside), lin.first_match(&beside));
            }
        }
    }

    /// `n` rules on one address pair (src /32, dst /32, UDP), rule i with port ranges
    /// `sport(i)` and `dport(i)`, all dropping: the set when the ranges nest.
    fn one_pair(
        n: u32,
        sport: impl Fn(u32) -> PortRange,
        dport: impl Fn(u32) -> PortRange,
    ) -> RuleSet {
        RuleSet::new(
            (1..=n)
                .map(|i| AclRule {
                    src: Ipv4Prefix::new(0x0A00_0001, 32).unwrap(),
                    dst: Ipv4Prefix::new(0xC0A8_0001, 32).unwrap(),
                    src_port: sport(i),
                    dst_port: dport(i),
                    proto: ProtoMatch::exact(17),
                    action: Action::Drop,
                })
                .collect(),
        )
    }

    /// `low`-(`low` + i), cut at 65535.
    fn from(low: u32, i: u32) -> PortRange {
        PortRange {
            low: low as u16,
            high: (low + i).min(65535) as u16,
        }
    }

    /// Thousands of nested port ranges on one address pair (issue #37): no bucket holds more
    /// than the largest limit, 4c, plus one piece — whatever the number of rules — and the
    /// answers are the linear scan's, at the ranges' edges and beside them. Before rules
    /// equal on their tuple were split, one bucket held 8617 of the 20,000 (c = 8).
    #[test]
    fn nested_ranges_on_one_pair_keep_every_bucket_bounded() {
        let lim = ClassifierLimits::default();
        let any = |_| ANY_PORT;
        let sets = [
            ("dport", one_pair(20_000, any, |i| from(5000, i))),
            ("sport", one_pair(20_000, |i| from(1000, i), any)),
            ("both", one_pair(1500, |i| from(1000, i), |i| from(5000, i))),
            // Ranges that grow to both sides, and every rule twice.
            (
                "two-sided",
                one_pair(6000, any, |i| {
                    let i = i / 2;
                    PortRange {
                        low: 30000 - i as u16,
                        high: 30000 + i as u16,
                    }
                }),
            ),
        ];
        for (name, set) in &sets {
            let lin = LinearClassifier::build(set, &lim).unwrap();
            for limit in [1, 4, DEFAULT_COLLISION_LIMIT] {
                let c = TupleMergeClassifier::build_with_limit(set, &lim, limit).unwrap();
                assert!(
                    c.longest_bucket() <= WIDE_LIMIT_FACTOR * limit + 1,
                    "{name} c={limit}: longest bucket {}",
                    c.longest_bucket()
                );
                assert_eq!(c.len(), set.len());
                assert_eq!(c.bytes, c.memory_bytes(), "{name}");
                // Ports at and beside the ranges' ends (every 211th rule), each paired with a
                // few others.
                let mut edges = vec![0u16, 1, 999, 4999, 29999, 30000, 30001, 65535];
                for r in set.rules.iter().step_by(211) {
                    for p in [r.src_port, r.dst_port] {
                        edges.extend([
                            p.low.wrapping_sub(1),
                            p.low,
                            p.high,
                            p.high.wrapping_add(1),
                        ]);
                    }
                }
                for (j, &sp) in edges.iter().enumerate() {
                    for &dp in edges.iter().skip(j % 29).step_by(29) {
                        for proto in [17, 6] {
                            let k = FiveTuple {
                                src: 0x0A00_0001,
                                dst: 0xC0A8_0001,
                                src_port: sp,
                                dst_port: dp,
                                proto,
                            };
                            assert_eq!(
                                c.first_match(&k),
                                lin.first_match(&k),
                                "{name} c={limit} {k:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A rule that would be split and that an earlier entry contains is left out whole; a
    /// piece that an entry of its bucket contains is left out; pieces of the same ports for
    /// another protocol, or for any protocol, are kept (another bucket, another table).
    #[test]
    fn contained_rules_and_pieces_are_left_out() {
        let lim = ClassifierLimits::default();
        let rule = |low, high, proto| AclRule {
            src: Ipv4Prefix::new(0x0A00_0000, 8).unwrap(),
            dst_port: PortRange { low, high },
            proto,
            ..AclRule::any(Action::Drop)
        };
        let (udp, tcp, any) = (ProtoMatch::exact(17), ProtoMatch::exact(6), ProtoMatch::ANY);
        // c = 1 (8 address bits: the narrow limit). Ranges 100-104 ... 100-107 all have the
        // 12-bit tuple; their relaxed table (10/8, no port, no protocol) holds rule 0.
        let set = RuleSet::new(vec![
            rule(100, 105, udp), // 0: the relaxed table
            rule(100, 104, udp), // 1: its own tuple's table, which it fills
            rule(100, 107, udp), // 2: split: 100-103, 104-107 (14-bit tuple)
            rule(100, 106, udp), // 3: split: 100-103 (rule 2's: left out), 104-105, 106
            rule(100, 104, tcp), // 4: the TCP bucket of rule 1's table
            rule(100, 107, tcp), // 5: split like rule 2, kept (TCP buckets)
            rule(100, 104, any), // 6: its own tuple's table (no protocol)
            rule(100, 107, any), // 7: split like rule 2, kept (a table without protocol)
            rule(100, 107, any), // 8: rule 7 again: both pieces left out
            rule(100, 105, udp), // 9: rule 0 again: left out whole
            // 10: rule 0's ports for TCP, which rule 0 (in a table without protocol) does
            // not contain: split, 100-103 left out (rule 5's), 104-105 kept.
            rule(100, 105, tcp),
        ]);
        let c = TupleMergeClassifier::build_with_limit(&set, &lim, 1).unwrap();
        assert_eq!(c.len(), 11);
        let of = |i: u32| {
            c.tables
                .iter()
                .flat_map(|t| &t.entries)
                .filter(|e| e.rule == i)
                .count()
        };
        let held: Vec<usize> = (0..11).map(of).collect();
        assert_eq!(held, [1, 1, 2, 2, 1, 2, 1, 2, 0, 0, 1]);
        assert_eq!((c.entries(), c.split_rules()), (13, 6));
        assert!(c.longest_bucket() <= 2, "{}", c.longest_bucket());
        let lin = LinearClassifier::build(&set, &lim).unwrap();
        for proto in [17u8, 6, 1] {
            for dp in 98..110 {
                let k = FiveTuple {
                    src: 0x0A01_0203,
                    dst: 9,
                    src_port: 7,
                    dst_port: dp,
                    proto,
                };
                assert_eq!(c.first_match(&k), lin.first_match(&k), "{k:?}");
            }
        }
    }
}
