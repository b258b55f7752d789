//! The percentile queue's bound on waiting (`MaxHold`, `percentile/max_hold.rs`) against a
//! plain oracle: a list of waiting requests and float attainments, recomputed from scratch at
//! every step. Once a class's oldest request has waited its bound, the overdue head that came
//! first leaves; otherwise P0's rule (lowest S/(N·P), ties to the lower class) decides.

use netsched_core::qdisc::fifo::TestItem;
use netsched_core::qdisc::percentile::{
    MaxHold, PercentileDeadline, PercentileMemory, PercentileQueue,
};
use netsched_core::qdisc::{Feedback, Qdisc};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, MS};

/// The oracle: every waiting request, the counters, the bounds.
struct Oracle {
    waiting: Vec<(usize, Nanos, u64)>,
    n: Vec<u64>,
    s: Vec<u64>,
    p: Vec<u32>,
    bound: Vec<Option<Nanos>>,
}

impl Oracle {
    /// (class, id, by the bound) of the request that leaves next at `now`.
    fn next(&self, now: Nanos) -> Option<(usize, u64, bool)> {
        let head = |c: usize| self.waiting.iter().find(|w| w.0 == c).copied();
        let classes = 0..self.p.len();
        let overdue = classes
            .clone()
            .filter_map(head)
            .filter(|&(c, since, _)| self.bound[c].is_some_and(|b| now - since >= b))
            .min_by_key(|&(c, since, _)| (since, c));
        if let Some((c, _, id)) = overdue {
            return Some((c, id, true));
        }
        let mut best: Option<(usize, u64)> = None;
        for c in classes {
            if let Some((_, _, id)) = head(c) {
                // Exact comparison as the rule: S_c·N_bP_b < S_b·N_cP_c (strict: ties stay).
                let better = best.is_none_or(|(b, _)| {
                    let key = |k: usize| {
                        if self.n[k] == 0 {
                            (0u128, 1u128)
                        } else {
                            (self.s[k] as u128, (self.n[k] * self.p[k] as u64) as u128)
                        }
                    };
                    let (sc, npc) = key(c);
                    let (sb, npb) = key(b);
                    sc * npb < sb * npc
                });
                if better {
                    best = Some((c, id));
                }
            }
        }
        best.map(|(c, id)| (c, id, false))
    }
}

/// Random arrivals, services and completions over three classes with different bounds (a
/// fixed one, the deadline, none): the queue serves exactly what the oracle says, at every
/// step, and counts the bound's releases per class.
#[test]
fn the_bound_and_the_rule_decide_as_the_oracle() {
    let deadline = 20 * MS;
    let bounds = [MaxHold::Fixed(35 * MS), MaxHold::Deadline, MaxHold::Off];
    for seed in 1..=20u64 {
        let mut rng = SplitMix64::new(seed);
        let p = vec![90, 70, 50];
        let mut q = PercentileQueue::<TestItem>::new(
            &p,
            10_000,
            PercentileDeadline::Ns(deadline),
            PercentileMemory::Forever,
        )
        .unwrap();
        for (c, b) in bounds.iter().enumerate() {
            q.set_max_hold(c, *b).unwrap();
        }
        let mut o = Oracle {
            waiting: Vec::new(),
            n: vec![0; 3],
            s: vec![0; 3],
            p: p.clone(),
            bound: vec![Some(35 * MS), Some(deadline), None],
        };
        let mut now: Nanos = 0;
        let mut released = [0u64; 3];
        for id in 0..3000u64 {
            now += rng.below(4 * MS);
            if rng.below(100) < 55 {
                let c = rng.below(3) as usize;
                assert!(q.enqueue(c, TestItem { id, len: 1 }, now).is_queued());
                o.waiting.push((c, now, id));
                o.n[c] += 1;
            } else {
                let want = o.next(now);
                let peeked = q.peek(now).map(|t| t.id);
                let got = q.dequeue(now);
                assert_eq!(
                    peeked,
                    got.as_ref().map(|t| t.id),
                    "seed {seed}: peek = dequeue"
                );
                assert_eq!(got.map(|t| t.id), want.map(|w| w.1), "seed {seed} at {now}");
                if let Some((c, wid, by_bound)) = want {
                    let since = o.waiting.iter().find(|w| w.2 == wid).unwrap().1;
                    o.waiting.retain(|w| w.2 != wid);
                    released[c] += by_bound as u64;
                    // The request's response time: its wait plus a service of 0..10 ms.
                    let latency = now - since + rng.below(10 * MS);
                    q.feedback(Feedback::Completed { class: c, latency }, now);
                    o.s[c] += (latency <= deadline) as u64;
                }
            }
        }
        for (c, &r) in released.iter().enumerate() {
            assert_eq!(q.max_hold_releases(c), r, "seed {seed} class {c}");
        }
        assert_eq!(
            released[2], 0,
            "a class without a bound leaves only by the rule"
        );
        assert!(
            released[0] + released[1] > 0,
            "seed {seed}: the bound never acted"
        );
    }
}

/// The starvation the bound exists for: class 0 always below its target (every answer late)
/// keeps P0's rule on it, and class 1 waits without end — until it has a bound, and then no
/// request of class 1 waits longer than the bound plus one service.
#[test]
fn a_class_the_rule_would_freeze_waits_at_most_its_bound() {
    for (bound, want_served) in [(MaxHold::Off, false), (MaxHold::Fixed(50 * MS), true)] {
        let mut q = PercentileQueue::<TestItem>::new(
            &[90, 50],
            1000,
            PercentileDeadline::Ns(MS),
            PercentileMemory::Forever,
        )
        .unwrap();
        q.set_max_hold(1, bound).unwrap();
        let mut now = 0;
        let mut id = 0;
        let mut longest_wait_1 = 0;
        let mut served_1 = 0;
        let mut since_1 = Vec::new();
        for _ in 0..400 {
            // Both classes keep one request waiting (closed loop, one connection each).
            while q.class_status()[0].queued_packets < 1 {
                assert!(q.enqueue(0, TestItem { id, len: 1 }, now).is_queued());
                id += 1;
            }
            if q.class_status()[1].queued_packets < 1 {
                let item = TestItem {
                    id: 1 << 40 | id,
                    len: 1,
                };
                assert!(q.enqueue(1, item, now).is_queued());
                since_1.push(now);
                id += 1;
            }
            let t = q.dequeue(now).unwrap();
            now += 5 * MS;
            let class = (t.id >> 40) as usize;
            if class == 1 {
                served_1 += 1;
                longest_wait_1 = longest_wait_1.max(now - 5 * MS - since_1.remove(0));
            }
            // Every answer is late: class 0 never reaches its target.
            q.feedback(
                Feedback::Completed {
                    class,
                    latency: 10 * MS,
                },
                now,
            );
        }
        if want_served {
            // One in 11 slots: 10 services of 5 ms reach the bound, then class 1 leaves.
            assert!(served_1 >= 30, "class 1 served {served_1} times");
            assert!(
                longest_wait_1 <= 55 * MS,
                "class 1 waited {longest_wait_1} ns"
            );
            assert_eq!(q.max_hold_releases(1), served_1 as u64);
        } else {
            assert!(
                served_1 <= 1,
                "without a bound class 1 is frozen: served {served_1}"
            );
        }
    }
}

#[test]
fn a_zero_bound_and_an_unknown_class_are_refused() {
    let mut q = PercentileQueue::<TestItem>::new(
        &[90, 50],
        10,
        PercentileDeadline::Auto,
        PercentileMemory::Forever,
    )
    .unwrap();
    let e = q.set_max_hold(0, MaxHold::Fixed(0)).unwrap_err();
    assert_eq!(e.field(), "max_hold");
    assert!(q.set_max_hold(5, MaxHold::Deadline).is_err());
    // "deadline" with an automatic deadline and no sample yet: no bound, the rule decides.
    q.set_max_hold(1, MaxHold::Deadline).unwrap();
    assert!(q.enqueue(1, TestItem { id: 1, len: 1 }, 0).is_queued());
    assert!(q.enqueue(0, TestItem { id: 0, len: 1 }, 0).is_queued());
    assert_eq!(q.dequeue(1_000 * MS).unwrap().id, 0);
    assert_eq!(q.max_hold_releases(1), 0);
}
