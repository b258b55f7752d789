//! A global allocator that counts the bytes live on each thread and their peak, for tests
//! that check a structure never holds more than it says (one test per file: a test binary
//! has one global allocator, and counting per thread keeps the harness's own allocations
//! out). A `realloc` counts its old and new blocks together, the worst case where the block
//! moves. Include with `#[path = "common/counting_alloc.rs"] mod counting_alloc;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed on this thread since the last `reset`.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn add(bytes: isize) {
    let _ = LIVE.try_with(|l| {
        l.set(l.get() + bytes);
        let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

// SAFETY: every call is passed on to `System` unchanged; the counting touches only
// const-initialised thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        add(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, size: usize) -> *mut u8 {
        let q = System.realloc(p, l, size);
        if !q.is_null() {
            add(size as isize);
            add(-(l.size() as isize));
        }
        q
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

pub fn reset() {
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
}

pub fn live() -> usize {
    LIVE.with(|l| l.get()).max(0) as usize
}

pub fn peak() -> usize {
    PEAK.with(|p| p.get()).max(0) as usize
}
