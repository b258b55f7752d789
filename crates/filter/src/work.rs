//! The work on one packet, block by block, and the hand-off between the threads that take
//! its blocks (P1 §II: SOP work is the header matched against the rules; every block's
//! payload bytes are scanned for signatures; the thread that finishes a block hands its
//! successor what it needs — here the automaton state and the verdict so far).
//!
//! A [`Packet`] holds a copy of the frame, its parsed header, the tables current when it was
//! received (an `Arc`: a rule swap never changes the set a packet is classified against) and
//! its [`Progress`] under a mutex. Block `k` waits until block `k - 1` has handed over
//! (`next == k`), works outside the lock, and hands over to `k + 1`. Blocks are dispatched in
//! stream order and each worker takes its queue in order, so a wait always points at an
//! earlier block: no cycle, no deadlock.
//!
//! A panic inside a block's work is caught (`catch_unwind`): the packet gets the configured
//! verdict ([`OnPanic`]), the hand-off still happens, the worker lives on, and it is counted.
//!
//! Cost: the rule scan at the SOP block, one automaton step per payload byte. Memory: the
//! frame copy (≤ one buffer slot) per packet in flight.

use crate::packet::Parsed;
use crate::rules::{Action, PacketClassifier};
use crate::signatures::{ScanState, Signatures};
use crate::verdict::{DropReason, Fragments, OnPanic, OnSignature, Verdict};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The rule set and signatures packets are checked against; swapped whole.
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

#[derive(Debug, Clone, Copy)]
struct Progress {
    next: u32,
    scan: ScanState,
    class: Option<u32>,
    marked: bool,
    decided: Option<Verdict>,
}

/// One packet in flight.
#[derive(Debug)]
pub struct Packet {
    pub slot: u32,
    pub frame: Box<[u8]>,
    pub parsed: Parsed,
    pub tables: Arc<Tables>,
    pub blocks: u32,
    pub block_size: u32,
    progress: Mutex<Progress>,
    turn: Condvar,
}

/// What running one block did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOutcome {
    /// The block had to wait for its predecessor's hand-off.
    pub waited: bool,
    /// How long it waited (ns; 0 when it did not).
    pub wait_ns: u64,
    pub panicked: bool,
    /// The packet's verdict, on its last block.
    pub verdict: Option<Verdict>,
}

fn lock(m: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Packet {
    pub fn new(
        slot: u32,
        frame: &[u8],
        parsed: Parsed,
        tables: Arc<Tables>,
        block_size: u32,
    ) -> Self {
        let block_size = block_size.max(1);
        let blocks = (frame.len() as u32).div_ceil(block_size).max(1);
        let scan = tables.signatures.start();
        Self {
            slot,
            frame: frame.into(),
            parsed,
            tables,
            blocks,
            block_size,
            progress: Mutex::new(Progress {
                next: 0,
                scan,
                class: None,
                marked: false,
                decided: None,
            }),
            turn: Condvar::new(),
        }
    }

    /// Do block `k`: wait for the hand-off, work, hand over.
    pub fn run_block(&self, k: u32, policy: &WorkPolicy) -> BlockOutcome {
        let mut g = lock(&self.progress);
        let waited = g.next != k;
        let wait_from = waited.then(std::time::Instant::now);
        while g.next != k {
            g = self.turn.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        let wait_ns = wait_from.map_or(0, |t| t.elapsed().as_nanos() as u64);
        let before = *g;
        drop(g);
        let result = catch_unwind(AssertUnwindSafe(|| self.work(k, before, policy)));
        let mut g = lock(&self.progress);
        let panicked = result.is_err();
        match result {
            Ok(after) => *g = after,
            Err(_) => {
                g.decided = Some(match policy.on_panic {
                    OnPanic::Drop => Verdict::Drop(DropReason::WorkerPanic),
                    OnPanic::Forward => Verdict::Forward {
                        class: before.class,
                        marked: before.marked,
                    },
                });
            }
        }
        g.next = k + 1;
        let verdict = (k + 1 == self.blocks).then(|| {
            g.decided.unwrap_or(Verdict::Forward {
                class: g.class,
                marked: g.marked,
            })
        });
        drop(g);
        self.turn.notify_all();
        BlockOutcome {
            waited,
            wait_ns,
            panicked,
            verdict,
        }
    }

    /// The work of block `k` from the state `p` its predecessor left.
    fn work(&self, k: u32, mut p: Progress, policy: &WorkPolicy) -> Progress {
        let start = (k * self.block_size) as usize;
        let end = (start + self.block_size as usize).min(self.frame.len());
        let bytes = &self.frame[start.min(end)..end];
        if let Some(f) = &policy.fault_panic_on {
            if !f.is_empty() && bytes.windows(f.len()).any(|w| w == f.as_slice()) {
                panic!(
                    "fault injected: block {k} of slot {} holds the fault pattern",
                    self.slot
                );
            }
        }
        if k == 0 {
            p.decided = match self.parsed {
                Parsed::Ip { fragment: true, .. } if policy.fragments == Fragments::Drop => {
                    Some(Verdict::Drop(DropReason::Fragment))
                }
                Parsed::Ip { tuple, .. } => match self.tables.classifier.classify(&tuple) {
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
            };
        }
        if p.decided.is_some() || p.marked {
            return p;
        }
        if let Parsed::Ip { payload, .. } = self.parsed {
            let (lo, hi) = (start.max(payload.0), end.min(payload.1));
            if lo < hi {
                p.scan = self.tables.signatures.scan(p.scan, &self.frame[lo..hi]);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{
        ipv4_later_fragment, ipv6_fragment_frame, parse, udp4_frame, with_ipv4_fragment,
    };
    use crate::rules::{build_classifier, RuleSet};

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

    fn run_all(p: &Packet, pol: &WorkPolicy) -> Verdict {
        (0..p.blocks)
            .fold(None, |_, k| p.run_block(k, pol).verdict)
            .unwrap()
    }

    #[test]
    fn blocks_hand_over_the_scan_state_across_threads() {
        let t = tables("", "NEEDLE\n");
        let mut payload = vec![b'.'; 300];
        payload[60..66].copy_from_slice(b"NEEDLE"); // frame bytes 102..108: across 64-B blocks
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 2, &payload);
        let p = Arc::new(Packet::new(0, &f, parse(&f), t, 64));
        assert_eq!(p.blocks, 6);
        // Run the blocks on different threads, started in reverse order: each waits its turn.
        let handles: Vec<_> = (0..p.blocks)
            .rev()
            .map(|k| {
                let p = p.clone();
                std::thread::spawn(move || p.run_block(k, &policy()))
            })
            .collect();
        let outs: Vec<BlockOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let last = outs.iter().find_map(|o| o.verdict).unwrap();
        assert_eq!(last, Verdict::Drop(DropReason::Signature));
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
        let verdict = |frame: &[u8]| {
            run_all(
                &Packet::new(0, frame, parse(frame), t.clone(), 64),
                &policy(),
            )
        };
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
            run_all(&Packet::new(0, &f, parse(&f), t.clone(), 64), &policy()),
            Verdict::Drop(DropReason::Rule)
        );
        let f = udp4_frame([10, 0, 0, 1], [10, 0, 0, 2], 1, 8, b"so bad");
        let mut mark = policy();
        mark.on_signature = OnSignature::Mark;
        assert_eq!(
            run_all(&Packet::new(0, &f, parse(&f), t, 64), &mark),
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
        let p = Packet::new(0, &f, parse(&f), t.clone(), 64);
        let outs: Vec<BlockOutcome> = (0..p.blocks).map(|k| p.run_block(k, &pol)).collect();
        assert!(outs.iter().any(|o| o.panicked));
        assert_eq!(
            outs.last().unwrap().verdict,
            Some(Verdict::Drop(DropReason::WorkerPanic))
        );
        pol.on_panic = OnPanic::Forward;
        let p = Packet::new(0, &f, parse(&f), t, 64);
        assert!(matches!(run_all(&p, &pol), Verdict::Forward { .. }));
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
            run_all(&Packet::new(0, frame, parse(frame), t.clone(), 64), &pol)
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
