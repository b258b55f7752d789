//! The frame pool: one allocation at start, frames addressed by slot index, and slots *lent*
//! to other threads to read in place.
//!
//! The pool's owner (a packet thread) receives into free slots, sends from any slot and gives
//! slots back. To let worker threads read a frame without a copy, the owner lends the slot:
//! [`FramePool::lend`] returns a [`Lent`] token (not `Clone`), a worker reads the bytes through
//! its [`PoolReader`] and the token, and the token comes back with [`FramePool::give_back`]. A
//! slot may be lent several times at once (one token per reader).
//!
//! **Why this is sound.** Bytes are written only into slots taken from the free list
//! ([`FramePool::alloc`] and the ports' receive paths, which allocate first), and a slot with
//! a token outstanding never reaches the free list: [`FramePool::release`] of a lent slot is
//! refused (counted, the slot kept out of use). So while a token exists nobody writes its
//! slot, and a `&[u8]` made from the token, which borrows it, cannot outlive it. Slices are
//! only ever made for one slot at a time from the base pointer, never for the whole buffer,
//! so a writer's `&mut [u8]` of one slot never overlaps a reader's `&[u8]` of another. The
//! memory itself lives as long as its last [`PoolReader`] or the pool (an `Arc`).
//!
//! Cost: `lend` and `give_back` are an index and a counter; reading is a bounds check. No
//! allocation and no atomic per frame (the `Arc` is cloned once per reader, not per frame).
//! Memory: `slots × SLOT` bytes plus 2 bytes of lend count per slot.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes per pool slot: an MTU-1500 frame (1514 B) plus room; larger frames are oversize.
pub const SLOT: usize = 2048;

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// The pool's bytes: written only by the pool's owner into slots it holds, read by lenders.
#[derive(Debug)]
struct Memory {
    base: NonNull<u8>,
    len: usize,
    id: u64,
}

// SAFETY: `Memory` is a plain byte buffer; which thread may touch which slot is decided by the
// lending protocol above (writes only to unlent slots by the owner, reads under a token).
unsafe impl Send for Memory {}
// SAFETY: as above: shared access never produces overlapping `&mut`/`&` slices.
unsafe impl Sync for Memory {}

impl Memory {
    fn new(len: usize) -> Self {
        let boxed: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let base = NonNull::new(Box::into_raw(boxed) as *mut u8).unwrap_or(NonNull::dangling());
        Self {
            base,
            len,
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// `len` bytes of `slot` (clamped to the slot), shared.
    ///
    /// # Safety
    /// Nobody may write `slot` while the returned slice lives.
    unsafe fn slot(&self, slot: u32, len: usize) -> &[u8] {
        let at = slot as usize * SLOT;
        if at + SLOT > self.len {
            return &[];
        }
        // SAFETY: `at..at + len.min(SLOT)` lies inside the allocation (checked above); the
        // caller guarantees no concurrent write.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(at), len.min(SLOT)) }
    }

    /// All of `slot`, to fill.
    ///
    /// # Safety
    /// Nobody else may read or write `slot` while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot_mut(&self, slot: u32) -> &mut [u8] {
        let at = slot as usize * SLOT;
        if at + SLOT > self.len {
            return &mut [];
        }
        // SAFETY: inside the allocation (checked above); the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(at), SLOT) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let raw = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.len);
        // SAFETY: `base`/`len` came from `Box::into_raw` of a `Box<[u8]>` of `len` bytes, and
        // this is the last owner (the `Arc` is gone).
        drop(unsafe { Box::from_raw(raw) });
    }
}

/// Fixed buffer pool: one allocation at start, slots handed out by index.
#[derive(Debug)]
pub struct FramePool {
    mem: Arc<Memory>,
    free: Vec<u32>,
    lent: Vec<u16>,
    slots: usize,
    refused_releases: u64,
}

/// A slot lent to a reader: proof that nobody writes it until the token is given back.
#[derive(Debug)]
pub struct Lent {
    slot: u32,
    len: u32,
    pool: u64,
}

impl Lent {
    pub fn slot(&self) -> u32 {
        self.slot
    }
    pub fn len(&self) -> u32 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A reader of a pool's lent slots (one per thread; cloned once, not per frame).
#[derive(Debug, Clone)]
pub struct PoolReader {
    mem: Arc<Memory>,
}

impl PoolReader {
    /// The lent frame's bytes (empty if the token is another pool's).
    #[inline]
    pub fn read<'a>(&'a self, lent: &'a Lent) -> &'a [u8] {
        if lent.pool != self.mem.id {
            return &[];
        }
        // SAFETY: `lent` is outstanding for as long as the slice borrows it, and a lent slot
        // is never written (module header).
        unsafe { self.mem.slot(lent.slot, lent.len as usize) }
    }
}

impl FramePool {
    pub fn new(slots: usize) -> Self {
        Self {
            mem: Arc::new(Memory::new(slots * SLOT)),
            free: (0..slots as u32).rev().collect(),
            lent: vec![0; slots],
            slots,
            refused_releases: 0,
        }
    }
    /// Take a free slot.
    #[inline]
    pub fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }
    /// Give a slot back. A slot still lent (or out of range) is refused and counted: it stays
    /// out of use, since a reader may still hold it.
    #[inline]
    pub fn release(&mut self, slot: u32) {
        match self.lent.get(slot as usize) {
            Some(0) if self.free.len() < self.slots => self.free.push(slot),
            _ => {
                debug_assert!(false, "release of slot {slot}: lent or out of range");
                self.refused_releases += 1;
            }
        }
    }
    #[inline]
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }
    pub fn capacity(&self) -> usize {
        self.slots
    }
    /// Releases refused because the slot was still lent (a caller's bug; 0 when all is well).
    pub fn refused_releases(&self) -> u64 {
        self.refused_releases
    }
    /// Lend the first `len` bytes of held slot `slot` to a reader.
    #[inline]
    pub fn lend(&mut self, slot: u32, len: u32) -> Lent {
        if let Some(n) = self.lent.get_mut(slot as usize) {
            *n = n.saturating_add(1);
        }
        Lent {
            slot,
            len: len.min(SLOT as u32),
            pool: self.mem.id,
        }
    }
    /// Take a token back (a token of another pool is ignored).
    #[inline]
    pub fn give_back(&mut self, lent: Lent) {
        if lent.pool == self.mem.id {
            if let Some(n) = self.lent.get_mut(lent.slot as usize) {
                *n = n.saturating_sub(1);
            }
        }
    }
    /// A reader for lent slots.
    pub fn reader(&self) -> PoolReader {
        PoolReader {
            mem: self.mem.clone(),
        }
    }
    /// Copy `frame` into held slot `slot` (truncated to [`SLOT`]); returns the length kept.
    /// For frames made in memory (tests, benchmarks); ports receive in place.
    pub fn fill(&mut self, slot: u32, frame: &[u8]) -> u32 {
        let dst = self.slot_mut(slot);
        let n = frame.len().min(dst.len());
        dst[..n].copy_from_slice(&frame[..n]);
        n as u32
    }
    /// All of held slot `slot`, to fill (empty if it is lent or out of range).
    #[inline]
    pub(crate) fn slot_mut(&mut self, slot: u32) -> &mut [u8] {
        if self.lent.get(slot as usize) != Some(&0) {
            return &mut [];
        }
        // SAFETY: `&mut self` excludes the owner's other borrows, and the slot is not lent, so
        // no reader holds it.
        unsafe { self.mem.slot_mut(slot) }
    }
    /// The base of the buffer and its length, for slot-addressed batches. The caller writes
    /// only slots it allocated (never a lent one) and reads any.
    #[inline]
    pub(crate) fn raw(&mut self) -> (*mut u8, usize) {
        (self.mem.base.as_ptr(), self.mem.len)
    }
    /// The base of the buffer and its length, read-only (sends).
    #[inline]
    pub(crate) fn raw_const(&self) -> (*const u8, usize) {
        (self.mem.base.as_ptr(), self.mem.len)
    }
    /// The first `len` bytes of `slot`.
    #[inline]
    pub fn data(&self, slot: u32, len: u32) -> &[u8] {
        // SAFETY: the owner writes only through `&mut self`, which this `&self` excludes;
        // readers only read.
        unsafe { self.mem.slot(slot, len as usize) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hands_out_every_slot_once() {
        let mut p = FramePool::new(4);
        let got: Vec<u32> = std::iter::from_fn(|| p.alloc()).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(p.free_slots(), 0);
        p.release(got[2]);
        assert_eq!(p.alloc(), Some(got[2]));
        assert_eq!(p.data(1, 100).len(), 100);
        assert_eq!(p.data(1, 9999).len(), SLOT);
    }

    #[test]
    fn a_lent_slot_is_read_in_place_on_another_thread_and_never_freed() {
        let mut p = FramePool::new(2);
        let s = p.alloc().unwrap();
        let n = p.fill(s, b"hello frame");
        let (a, b) = (p.lend(s, n), p.lend(s, 5));
        let r = p.reader();
        let (a, b) = std::thread::spawn(move || {
            assert_eq!(r.read(&a), b"hello frame");
            assert_eq!(r.read(&b), b"hello");
            (a, b)
        })
        .join()
        .unwrap();
        p.give_back(a);
        assert!(p.slot_mut(s).is_empty(), "still lent once: not writable");
        p.give_back(b);
        assert_eq!(p.slot_mut(s).len(), SLOT);
        p.release(s);
        assert_eq!(p.free_slots(), 2);
    }

    #[test]
    fn a_token_of_another_pool_reads_nothing() {
        let mut p = FramePool::new(1);
        let mut q = FramePool::new(1);
        let s = q.alloc().unwrap();
        q.fill(s, b"q's");
        let t = q.lend(s, 3);
        assert!(p.reader().read(&t).is_empty());
        p.give_back(t); // ignored by p
        let _ = p.alloc();
    }
}
