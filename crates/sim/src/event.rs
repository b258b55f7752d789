//! The event queue: a binary min-heap keyed by `(time, seq)`. `seq` is the insertion counter,
//! so events at the same instant fire in the order they were scheduled — the property that
//! makes a seed reproduce a run exactly. Events are plain data of the caller's type `E`.
//!
//! Cost: O(log n) push and pop; no allocation per event once the heap has grown.

use netsched_core::Nanos;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<E> {
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Pending events in time order.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Nanos,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::with_capacity(1024),
            seq: 0,
            now: 0,
            popped: 0,
        }
    }

    /// Schedule `event` at absolute time `at` (clamped to now: the past cannot be scheduled).
    pub fn schedule(&mut self, at: Nanos, event: E) {
        let at = at.max(self.now);
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
        self.seq += 1;
    }

    /// Schedule `event` `delay` nanoseconds from now.
    pub fn schedule_in(&mut self, delay: Nanos, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// The next event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.popped += 1;
        Some((e.at, e.event))
    }

    /// Time of the next event without taking it.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|e| e.at)
    }

    /// The current virtual time (the time of the last popped event).
    pub fn now(&self) -> Nanos {
        self.now
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
    /// Events processed so far (for events-per-second figures).
    pub fn processed(&self) -> u64 {
        self.popped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.schedule(20, "c");
        q.schedule(10, "a");
        q.schedule(10, "b");
        assert_eq!(q.pop(), Some((10, "a")));
        assert_eq!(q.pop(), Some((10, "b")));
        assert_eq!(q.now(), 10);
        q.schedule_in(5, "d");
        assert_eq!(q.pop(), Some((15, "d")));
        assert_eq!(q.pop(), Some((20, "c")));
        assert_eq!(q.pop(), None);
        assert_eq!(q.processed(), 4);
    }
}
