//! The work on one packet, block by block, and the hand-off between the threads that take
//! its blocks (P1 §II: SOP work is the header matched against the rules; every block's
//! payload bytes are scanned for signatures; the thread that finishes a block hands its
//! successor what it needs — here the automaton state and the verdict so far).
//!
//! The frame is read where the port put it (a slot of the `FramePool`, lent to the worker:
//! `netsched_sys::frame_pool`), classified against the [`Tables`] the worker holds (swapped
//! in order with the packets, so a rule swap never changes the set a packet is checked
//! against), and its [`Progress`] travels in one of two ways:
//! - **one worker takes every block** (the flow policies): the progress is a local value;
//! - **blocks on different workers** (P1's block policies): the progress sits in the slot's
//!   [`BlockState`], two atomic words, and the turn is an atomic counter. Block `k` waits until
//!   `next == k` (spinning briefly when it has a core of its own, then parking, woken by its
//!   predecessor), works, stores the
//!   progress and `next = k + 1` with release ordering. Blocks are dispatched in stream order
//!   and each worker takes its queue in order, so a wait always points at an earlier block:
//!   no cycle, no deadlock.
//!
//! A panic inside a block's work is caught (`catch_unwind`): the packet gets the configured
//! verdict ([`OnPanic`]), the hand-off still happens, the worker lives on, and it is counted.
//!
//! Cost: the rule scan at the SOP block, one automaton step per payload byte, and per block
//! hand-off two atomic loads and three stores (plus an unpark when the successor sleeps). No
//! lock, allocation or copy per packet. Memory: 32 bytes of [`BlockState`] per pool slot.

use crate::classifier::PacketClassifier;
use crate::packet::Parsed;
use crate::rules::Action;
use crate::signatures::{ScanState, Signatures};
use crate::verdict::{DropReason, Fragments, OnPanic, OnSignature, Verdict};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The rule set and signatures packets are checked against; swapped whole, or its rules
/// edited one at a time ([`crate::rule_edit`]), each thread editing its own copy.
#[derive(Debug)]
pub struct Tables {
    pub classifier: Box<dyn PacketClassifier>,
    pub signatures: Signatures,
    /// 1 for the tables at start, +1 per `reload` asked for (in arrival order).
    pub generation: u64,
}

/// What the work does with its findings.
#[derive(Debug, Clone)]
pub struct WorkPolicy {
    pub on_signature: OnSignature,
    pub on_panic: OnPanic,
    /// Forward frames that are not IP (`true`) or drop them.
    pub accept_non_ip: bool,
    /// IP fragments: dropped, or classified each on its own ([`Fragments`]).
    pub fragments: Fragments,
    /// Test hook: a block whose bytes contain this panics (to test containment).
    pub fault_panic_on: Option<Vec<u8>>,
}

/// What the blocks done so far found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub scan: ScanState,
    pub class: Option<u32>,
    pub marked: bool,
    pub decided: Option<Verdict>,
}

impl Clone for Tables {
    fn clone(&self) -> Self {
        Tables {
            classifier: self.classifier.clone_box(),
            signatures: self.signatures.clone(),
            generation: self.generation,
        }
    }
}

impl Progress {
    pub fn start(tables: &Tables) -> Self {
        Self {
            scan: tables.signatures.start(),
            class: None,
            marked: false,
            decided: None,
        }
    }

    /// The packet's verdict once its last block is done.
    pub fn verdict(&self) -> Verdict {
        self.decided.unwrap_or(Verdict::Forward {
            class: self.class,
            marked: self.marked,
        })
    }

    /// Everything but the scan state in 64 bits: class (`u32::MAX` = none), marked, and the
    /// decision (0 none, 1 forward, 2 + drop reason).
    fn outcome_bits(&self) -> u64 {
        let class = self.class.map_or(u32::MAX as u64, u64::from);
        let decided: u64 = match self.decided {
            None => 0,
            Some(Verdict::Forward { class, marked }) => {
                // Only `OnPanic::Forward` decides "forward", with the progress's own fields.
                debug_assert_eq!((class, marked), (self.class, self.marked));
                1
            }
            Some(Verdict::Drop(r)) => {
                2 + DropReason::ALL.iter().position(|&x| x == r).unwrap_or(0) as u64
            }
        };
        class | (self.marked as u64) << 32 | decided << 40
    }

    fn from_bits(scan: u64, outcome: u64) -> Self {
        let class = outcome as u32;
        let class = (class != u32::MAX).then_some(class);
        let marked = outcome >> 32 & 1 == 1;
        let decided = match outcome >> 40 {
            0 => None,
            1 => Some(Verdict::Forward { class, marked }),
            n => Some(Verdict::Drop(
                DropReason::ALL
                    .get(n as usize - 2)
                    .copied()
                    .unwrap_or(DropReason::WorkerPanic),
            )),
        };
        Self {
            scan: ScanState::from_bits(scan),
            class,
            marked,
            decided,
        }
    }
}

/// What running one block did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOutcome {
    /// The block had to wait for its predecessor's hand-off.
    pub waited: bool,
    /// How long it waited (ns; 0 when it did not).
    pub wait_ns: u64,
    pub panicked: bool,
}

/// One packet's frame and what the dispatcher learnt of it.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub bytes: &'a [u8],
    pub parsed: Parsed,
    pub block_size: u32,
}

impl Frame<'_> {
    pub fn blocks(&self) -> u32 {
        blocks(self.bytes.len() as u32, self.block_size)
    }
}

/// Blocks of a `len`-byte frame.
pub fn blocks(len: u32, block_size: u32) -> u32 {
    len.div_ceil(block_size.max(1)).max(1)
}

/// Block `k` of `frame` from the progress `p` its predecessor left; a panic is caught and
/// turned into the policy's verdict.
pub fn run_block(
    frame: &Frame<'_>,
    tables: &Tables,
    k: u32,
    p: Progress,
    policy: &WorkPolicy,
) -> (Progress, bool) {
    match catch_unwind(AssertUnwindSafe(|| work(frame, tables, k, p, policy))) {
        Ok(after) => (after, false),
        Err(_) => {
            let decided = match policy.on_panic {
                OnPanic::Drop => Verdict::Drop(DropReason::WorkerPanic),
                OnPanic::Forward => Verdict::Forward {
                    class: p.class,
                    marked: p.marked,
                },
            };
            (
                Progress {
                    decided: Some(decided),
                    ..p
                },
                true,
            )
        }
    }
}

/// The work of block `k`.
fn work(
    frame: &Frame<'_>,
    tables: &Tables,
    k: u32,
    mut p: Progress,
    policy: &WorkPolicy,
) -> Progress {
    let size = frame.block_size.max(1) as usize;
    let start = k as usize * size;
    let end = (start + size).min(frame.bytes.len());
    let bytes = &frame.bytes[start.min(end)..end];
    if let Some(f) = &policy.fault_panic_on {
        if !f.is_empty() && bytes.windows(f.len()).any(|w| w == f.as_slice()) {
            panic!("fault injected: block {k} holds the fault pattern");
        }
    }
    if k == 0 {
        p.decided = decide(frame.parsed, tables, &mut p, policy);
    }
    if p.decided.is_some() || p.marked {
        return p;
    }
    if let Parsed::Ip { payload, .. } = frame.parsed {
        let (lo, hi) = (start.max(payload.0), end.min(payload.1));
        if lo < hi {
            p.scan = tables.signatures.scan(p.scan, &frame.bytes[lo..hi]);
            if p.scan.matched.is_some() {
                match policy.on_signature {
                    OnSignature::Drop => p.decided = Some(Verdict::Drop(DropReason::Signature)),
                    OnSignature::Mark => p.marked = true,
                }
            }
        }
    }
    p
}

/// The SOP's decision: fragments, the rules, non-IP and malformed frames.
fn decide(
    parsed: Parsed,
    tables: &Tables,
    p: &mut Progress,
    policy: &WorkPolicy,
) -> Option<Verdict> {
    match parsed {
        Parsed::Ip { fragment: true, .. } if policy.fragments == Fragments::Drop => {
            Some(Verdict::Drop(DropReason::Fragment))
        }
        Parsed::Ip { tuple, .. } => match tables.classifier.classify(&tuple) {
            Action::Accept => None,
            Action::Drop => Some(Verdict::Drop(DropReason::Rule)),
            Action::Class(c) => {
                p.class = Some(c);
                None
            }
        },
        Parsed::NotIp { .. } if policy.accept_non_ip => None,
        Parsed::NotIp { .. } => Some(Verdict::Drop(DropReason::NonIp)),
        Parsed::Malformed {
            field: crate::packet::TOO_DEEP,
        } => Some(Verdict::Drop(DropReason::HeaderTooDeep)),
        Parsed::Malformed { .. } => Some(Verdict::Drop(DropReason::Malformed)),
    }
}

/// Every block of a packet on one thread (the flow policies): its verdict.
pub fn run_packet(frame: &Frame<'_>, tables: &Tables, policy: &WorkPolicy) -> (Verdict, bool) {
    let mut p = Progress::start(tables);
    let mut panicked = false;
    for k in 0..frame.blocks() {
        let (after, panic) = run_block(frame, tables, k, p, policy);
        p = after;
        panicked |= panic;
    }
    (p.verdict(), panicked)
}

/// Polls before a pipeline thread parks, when every pipeline thread has a core of its own.
pub const SPINS: u32 = 64;
/// Yields a worker waiting for a predecessor's hand-off makes before it parks.
const HANDOFF_YIELDS: u32 = 16;
/// Longest single park (a lost wake-up would cost at most this; none is expected).
pub const PARK: Duration = Duration::from_millis(2);

/// The threads that may wait on a hand-off, to wake them (set once they are spawned), and how
/// long a waiting thread polls before it parks: [`SPINS`] when the dispatcher and every worker
/// have a core each and one is left for the rest (the port's softirqs, a sender on the same
/// host), else 0 — a thread spinning on a shared core only delays the one it waits for.
#[derive(Debug, Default)]
pub struct Wakers {
    threads: OnceLock<Box<[Thread]>>,
    pub spins: u32,
    /// The pipeline is stopping: what is still queued is reported unworked (its packets are
    /// counted as dropped at shutdown), and nobody waits for a hand-off.
    pub stopping: AtomicBool,
}

impl Wakers {
    /// For a pipeline of `threads` threads (dispatcher included) on `cpus` CPUs.
    pub fn new(threads: usize, cpus: usize) -> Self {
        Self {
            threads: OnceLock::new(),
            spins: if threads < cpus { SPINS } else { 0 },
            stopping: AtomicBool::new(false),
        }
    }
    pub fn set(&self, threads: Vec<Thread>) {
        let _ = self.threads.set(threads.into_boxed_slice());
    }
    pub fn wake_all(&self) {
        for t in self.threads.get().into_iter().flatten() {
            t.unpark();
        }
    }
    #[inline]
    pub fn wake(&self, worker: usize) {
        if let Some(t) = self.threads.get().and_then(|t| t.get(worker)) {
            t.unpark();
        }
    }
}

/// A pool slot's hand-off state under the block policies.
#[derive(Debug, Default)]
pub struct BlockState {
    /// The block whose turn it is.
    next: AtomicU32,
    /// The workers parked waiting for their turn, one bit each.
    waiters: AtomicU64,
    scan: AtomicU64,
    outcome: AtomicU64,
}

impl BlockState {
    /// Start a new packet in this slot (the dispatcher, before handing out its blocks; the
    /// hand-off of the task publishes it).
    pub fn reset(&self, start: Progress) {
        self.scan.store(start.scan.to_bits(), Ordering::Relaxed);
        self.outcome.store(start.outcome_bits(), Ordering::Relaxed);
        self.waiters.store(0, Ordering::Relaxed);
        self.next.store(0, Ordering::Relaxed);
    }

    /// Wait for block `k`'s turn (worker `me`), run it, hand over to `k + 1`. Returns the
    /// outcome and, on the last block, the packet's verdict.
    pub fn run(
        &self,
        me: usize,
        wakers: &Wakers,
        frame: &Frame<'_>,
        tables: &Tables,
        k: u32,
        policy: &WorkPolicy,
    ) -> (BlockOutcome, Option<Verdict>) {
        let (waited, wait_ns) = self.wait_turn(me, k, wakers);
        let before = Progress::from_bits(
            self.scan.load(Ordering::Relaxed),
            self.outcome.load(Ordering::Relaxed),
        );
        let (after, panicked) = run_block(frame, tables, k, before, policy);
        let last = k + 1 == frame.blocks();
        if !last {
            self.scan.store(after.scan.to_bits(), Ordering::Relaxed);
            self.outcome.store(after.outcome_bits(), Ordering::Relaxed);
            // SeqCst pairs with a waiter's SeqCst registration then load of `next`: either
            // it sees the new turn, or this swap sees it registered and wakes it.
            self.next.store(k + 1, Ordering::SeqCst);
            let mut w = self.waiters.swap(0, Ordering::SeqCst);
            while w != 0 {
                wakers.wake(w.trailing_zeros() as usize);
                w &= w - 1;
            }
        }
        let outcome = BlockOutcome {
            waited,
            wait_ns,
            panicked,
        };
        (outcome, last.then(|| after.verdict()))
    }

    fn wait_turn(&self, me: usize, k: u32, wakers: &Wakers) -> (bool, u64) {
        let spins = wakers.spins;
        if self.next.load(Ordering::Acquire) == k {
            return (false, 0);
        }
        let from = Instant::now();
        let mut round = 0u32;
        while self.next.load(Ordering::Acquire) != k {
            if wakers.stopping.load(Ordering::Relaxed) {
                break; // the packet is dropped at shutdown whatever this block finds
            }
            round += 1;
            if round <= spins {
                std::hint::spin_loop();
            } else if round <= spins + HANDOFF_YIELDS {
                // The predecessor is usually a block's work away: give it the core, if it
                // shares this one, before paying for a park and a wake-up.
                std::thread::yield_now();
            } else {
                self.waiters.fetch_or(1 << (me % 64), Ordering::SeqCst);
                if self.next.load(Ordering::SeqCst) != k {
                    std::thread::park_timeout(PARK);
                }
            }
        }
        (true, from.elapsed().as_nanos() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classifier::build_classifier;
    use crate::packet::{
        ipv4_later_fragment, ipv6_fragment_frame, parse, udp4_frame, with_ipv4_fragment,
    };
    use crate::rules::RuleSet;
    use std::sync::Arc;

    pub(crate) fn tables(rules: &str, sigs: &str) -> Arc<Tables> {
        Arc::new(Tables {
            classifier: build_classifier(
                RuleSet::from_toml_str(rules, "t").unwrap(),
                netsched_core::classify::acl::ClassifierKind::TupleMerge,
                &Default::default(),
            )
            .unwrap(),
            signatures: Signatures::parse(sigs, "s").unwrap(),
            generation: 1,
        })
    }

    fn policy() -> WorkPolicy {
        WorkPolicy {
            on_signature: OnSignature::Drop,
            on_panic: OnPanic::Drop,
            accept_non_ip: true,
            fragments: Fragments::Pass,
            fault_panic_on: None,
        }
    }

    fn frame(bytes: &[u8]) -> Frame<'_> {
        Frame {
            bytes,
            parsed: parse(bytes),
            block_size: 64,
        }
    }

    fn verdict_of(bytes: &[u8], t: &Tables, pol: &WorkPolicy) -> Verdict {
        run_packet(&frame(bytes), t, pol).0
    }

    #[test]
    fn blocks_hand_over_the_scan_state_across_threads() {
        let t = tables("", "NEEDLE\n");
        let mut payload = vec![b'.'; 300];
        payload[60..66].copy_from_slice(b"NEEDLE"); // frame bytes 102..108: across 64-B blocks
        let f = Arc::new(udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &payload));
        assert_eq!(frame(&f).blocks(), 6);
        let state = Arc::new(BlockState::default());
        state.reset(Progress::start(&t));
        let wakers = Arc::new(Wakers::default());
        // Run the blocks on different threads, started in reverse order: each waits its turn
        // (the early ones park, and are woken by their predecessors).
        let handles: Vec<_> = (0..6u32)
            .rev()
            .map(|k| {
                let (f, t, state, wakers) = (f.clone(), t.clone(), state.clone(), wakers.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5 * (5 - k) as u64));
                    state.run(k as usize, &wakers, &frame(&f), &t, k, &policy())
                })
            })
            .collect();
        wakers.set(handles.iter().rev().map(|h| h.thread().clone()).collect());
        let outs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let last = outs.iter().find_map(|o| o.1).unwrap();
        assert_eq!(last, Verdict::Drop(DropReason::Signature));
        assert!(outs.iter().filter(|o| o.0.waited).count() >= 1);
    }

    #[test]
    fn progress_survives_its_two_word_form() {
        let t = tables("", "x\n");
        let mut p = Progress::start(&t);
        for (class, marked, decided) in [
            (None, false, None),
            (Some(7), true, None),
            (Some(0), false, Some(Verdict::Drop(DropReason::Signature))),
            (None, false, Some(Verdict::Drop(DropReason::NoOutput))),
            (
                Some(3),
                true,
                Some(Verdict::Forward {
                    class: Some(3),
                    marked: true,
                }),
            ),
        ] {
            p.class = class;
            p.marked = marked;
            p.decided = decided;
            p.scan = t.signatures.scan(p.scan, b"ax");
            assert_eq!(Progress::from_bits(p.scan.to_bits(), p.outcome_bits()), p);
        }
    }

    #[test]
    fn a_vlan_stack_deeper_than_read_is_dropped_as_too_deep_and_arp_passes() {
        let t = tables(
            "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"5000\"\n",
            "",
        );
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 5000, b"x");
        let tagged = |tags: usize| {
            let mut out = f[..12].to_vec();
            for _ in 0..tags {
                out.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
            }
            out.extend_from_slice(&f[12..]);
            out
        };
        let verdict = |frame: &[u8]| verdict_of(frame, &t, &policy());
        assert_eq!(
            verdict(&tagged(4)),
            Verdict::Drop(DropReason::HeaderTooDeep)
        );
        assert_eq!(verdict(&tagged(3)), Verdict::Drop(DropReason::Rule));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(
            verdict(&arp),
            Verdict::Forward {
                class: None,
                marked: false
            }
        );
    }

    #[test]
    fn rules_decide_at_the_sop_and_marks_forward() {
        let drop_udp = "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n";
        let t = tables(drop_udp, "bad\n");
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 9, b"fine");
        assert_eq!(
            verdict_of(&f, &t, &policy()),
            Verdict::Drop(DropReason::Rule)
        );
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 8, b"so bad");
        let mut mark = policy();
        mark.on_signature = OnSignature::Mark;
        assert_eq!(
            verdict_of(&f, &t, &mark),
            Verdict::Forward {
                class: None,
                marked: true
            }
        );
    }

    #[test]
    fn a_panicking_block_fails_closed_or_open_and_still_hands_over() {
        let t = tables("", "");
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 8, &[b'Z'; 200]);
        let mut pol = policy();
        pol.fault_panic_on = Some(b"ZZZZ".to_vec());
        let state = BlockState::default();
        state.reset(Progress::start(&t));
        let fr = frame(&f);
        let outs: Vec<_> = (0..fr.blocks())
            .map(|k| state.run(0, &Wakers::default(), &fr, &t, k, &pol))
            .collect();
        assert!(outs.iter().any(|o| o.0.panicked));
        assert_eq!(
            outs.last().unwrap().1,
            Some(Verdict::Drop(DropReason::WorkerPanic))
        );
        pol.on_panic = OnPanic::Forward;
        let (v, panicked) = run_packet(&fr, &t, &pol);
        assert!(panicked);
        assert!(matches!(v, Verdict::Forward { .. }));
    }

    #[test]
    fn fragments_drop_under_drop_and_are_each_classified_on_their_own_under_pass() {
        let t = tables(
            "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"5000\"\n\
             [[rule]]\naction = \"drop\"\nproto = \"udp\"\nsrc = \"10.9.9.9/32\"\n",
            "EVILSIG\n",
        );
        let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        // EVIL|SIG over two fragments: 8 bytes of UDP header + 8 of data, then offset 2.
        let first = with_ipv4_fragment(&udp4_frame(a, b, 1, 6000, b"xxxxEVIL"), 0x2000);
        let later = ipv4_later_fragment(a, b, 2, false, b"SIGxxxxx");
        let first_5000 = with_ipv4_fragment(&udp4_frame(a, b, 1, 5000, b"xxxxxxxx"), 0x2000);
        let later_5000 = ipv4_later_fragment(a, b, 2, false, b"xxxxxxxx");
        let later_from_bad = ipv4_later_fragment([10, 9, 9, 9], b, 2, false, b"xxxxxxxx");
        let whole_in_one = with_ipv4_fragment(&udp4_frame(a, b, 1, 6000, b"EVILSIG."), 0x2000);
        let v6_first = ipv6_fragment_frame(17, 0, true, &[0, 1, 0x13, 0x88, 0, 16, 0, 0]);
        let v6_later = ipv6_fragment_frame(17, 1, false, b"xxxxxxxx");
        let df = |dport, data: &[u8]| with_ipv4_fragment(&udp4_frame(a, b, 1, dport, data), 0x4000);
        let verdict = |frame: &[u8], fragments| {
            let pol = WorkPolicy {
                fragments,
                ..policy()
            };
            verdict_of(frame, &t, &pol)
        };
        let fwd = Verdict::Forward {
            class: None,
            marked: false,
        };
        let frag = Verdict::Drop(DropReason::Fragment);
        let rule = Verdict::Drop(DropReason::Rule);
        let sig = Verdict::Drop(DropReason::Signature);
        for (name, f, under_drop, under_pass) in [
            ("EVIL first", &first, frag, fwd),
            ("SIG later", &later, frag, fwd),
            ("first to 5000", &first_5000, frag, rule),
            ("later to 5000: ports unknown", &later_5000, frag, fwd),
            ("later from 10.9.9.9", &later_from_bad, frag, rule),
            ("EVILSIG in one fragment", &whole_in_one, frag, sig),
            ("v6 first to 5000", &v6_first, frag, rule),
            ("v6 later", &v6_later, frag, fwd),
            ("DF to 5000", &df(5000, b"x"), rule, rule),
            ("DF clean", &df(6000, b"x"), fwd, fwd),
            ("DF with EVILSIG", &df(6000, b"EVILSIG"), sig, sig),
        ] {
            assert_eq!(verdict(f, Fragments::Drop), under_drop, "{name}: drop");
            assert_eq!(verdict(f, Fragments::Pass), under_pass, "{name}: pass");
        }
    }
}
