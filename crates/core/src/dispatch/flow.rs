//! Whole-packet dispatch by flow: hash buckets owned by workers, as receive-side scaling.
//!
//! **Flow hash** ([`FlowMode::Hash`]): a packet goes to the owner of bucket
//! `hash mod buckets`, and bucket `b` is owned by worker `b mod workers` for ever — the rule of
//! RSS and of `PACKET_FANOUT_HASH` (packet(7); kernel `Documentation/networking/scaling.rst`):
//! a flow never changes worker, so its packets finish in order, and a heavy flow makes its
//! worker the bottleneck.
//!
//! **Bucket stealing** ([`FlowMode::Steal`]): the same buckets, but a bucket with no packet in
//! flight whose owner is busy moves to an idle worker (the longest idle, lowest id first) —
//! stealing whole buckets rather than single packets, as RSS++ (Barbette et al., CoNEXT 2019)
//! migrates buckets, and as RFS moves a flow only after its old CPU drained it
//! (`scaling.rst`, "Accelerated RFS" and "RFS: flow migration"). Because only drained
//! buckets move, packets of one flow never run on two workers at once: order is kept.
//!
//! Cost: O(1) per packet for `Hash`, O(workers) for `Steal` (the scan for an idle worker).
//! Memory: one owner and one in-flight count per bucket.

use super::WorkerId;

/// How buckets are owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowMode {
    /// Fixed owners (RSS, `PACKET_FANOUT_HASH`).
    Hash,
    /// Drained buckets of busy owners move to idle workers.
    Steal,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    owner: WorkerId,
    in_flight: u32,
}

/// Bucket-to-worker dispatch of whole packets.
#[derive(Debug, Clone)]
pub struct FlowDispatch {
    mode: FlowMode,
    workers: usize,
    buckets: Vec<Bucket>,
    steals: u64,
}

impl FlowDispatch {
    /// `buckets` hash buckets (at least 1) over `workers` workers (at least 1).
    pub fn new(mode: FlowMode, workers: usize, buckets: usize) -> Self {
        let workers = workers.max(1);
        let buckets = (0..buckets.max(1))
            .map(|b| Bucket {
                owner: b % workers,
                in_flight: 0,
            })
            .collect();
        Self {
            mode,
            workers,
            buckets,
            steals: 0,
        }
    }

    pub fn mode(&self) -> FlowMode {
        self.mode
    }

    /// The bucket of a flow hash.
    pub fn bucket_of(&self, hash: u64) -> usize {
        (hash % self.buckets.len() as u64) as usize
    }

    /// The worker that takes the next packet of bucket `bucket`. `outstanding[w]` is the work
    /// worker `w` holds now (0: idle) and `idle_since[w]` when it last became idle. The packet
    /// is counted in flight until [`FlowDispatch::done`].
    pub fn assign(&mut self, bucket: usize, outstanding: &[usize], idle_since: &[u64]) -> WorkerId {
        let b = &mut self.buckets[bucket];
        if self.mode == FlowMode::Steal
            && b.in_flight == 0
            && outstanding.get(b.owner).copied().unwrap_or(0) > 0
        {
            let idle = (0..self.workers.min(outstanding.len()))
                .filter(|&w| outstanding[w] == 0)
                .min_by_key(|&w| (idle_since.get(w).copied().unwrap_or(0), w));
            if let Some(w) = idle {
                b.owner = w;
                self.steals += 1;
            }
        }
        b.in_flight += 1;
        b.owner
    }

    /// A packet of `bucket` left its worker.
    pub fn done(&mut self, bucket: usize) {
        if let Some(b) = self.buckets.get_mut(bucket) {
            b.in_flight = b.in_flight.saturating_sub(1);
        }
    }

    /// Buckets moved to an idle worker so far.
    pub fn steals(&self) -> u64 {
        self.steals
    }

    /// Packets in flight, summed over buckets.
    pub fn in_flight(&self) -> u64 {
        self.buckets.iter().map(|b| b.in_flight as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_mode_never_moves_a_bucket() {
        let mut d = FlowDispatch::new(FlowMode::Hash, 4, 16);
        let busy = [5, 0, 0, 0];
        for _ in 0..10 {
            assert_eq!(d.assign(4, &busy, &[0; 4]), 0);
        }
        assert_eq!(d.steals(), 0);
        assert_eq!(d.in_flight(), 10);
    }

    #[test]
    fn steal_moves_only_drained_buckets_of_busy_owners() {
        let mut d = FlowDispatch::new(FlowMode::Steal, 4, 16);
        // Bucket 4 is owned by worker 0; worker 0 is busy, 2 idle longest.
        let w = d.assign(4, &[3, 1, 0, 0], &[0, 0, 5, 9]);
        assert_eq!((w, d.steals()), (2, 1));
        // In flight now: it stays on 2 even though 2 is busy and 3 idle.
        assert_eq!(d.assign(4, &[3, 1, 1, 0], &[0, 0, 5, 9]), 2);
        assert_eq!(d.steals(), 1);
        d.done(4);
        d.done(4);
        // Drained, owner idle: no move.
        assert_eq!(d.assign(4, &[3, 1, 0, 0], &[0, 0, 5, 9]), 2);
        assert_eq!(d.steals(), 1);
        // Nobody idle: no move.
        d.done(4);
        assert_eq!(d.assign(4, &[1, 1, 1, 1], &[0; 4]), 2);
    }
}
