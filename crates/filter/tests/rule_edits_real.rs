//! Rules changed one at a time under traffic, on real interfaces (root; skipped with a reason
//! otherwise): `netsched-filterd filter` as a process between two namespaces, a steady
//! background stream through it, and 30 rounds of one random `rule add | insert | delete` on
//! the control socket followed by 16 probe frames (UDP to ports 2100-2115) and a fence (port
//! 2099, which rule 1 drops and no edit touches). Every probe's fate is checked against the
//! rule list the test keeps (first match, default accept) as it stood when the probe was sent:
//! exactly the probes it forwards arrive, and the filter's count of rule drops reaches exactly
//! what the list predicts, round by round, before the next edit. The fence is read after the
//! round's probes, so once it is dropped no probe of the round is still unread when the rules
//! change. Run under `flow_hash` and a block
//! policy (`static_rr`, whose packets are cut over several workers, each with its own copy of
//! the rules).

mod common;

use common::{assert_gone, build, receiver, send, FilterProcess};
use netsched_filter::packet::udp4_frame;
use netsched_filter::rule_edit::parse_rule_words;
use netsched_filter::rules::{AclRule, Action};
use netsched_sys::port::Port;
use netsched_testbed::privileged_test_allowed;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: u32 = 30;
const PROBES: u16 = 16;
const FIRST_PORT: u16 = 2100;
/// The fence's port: rule 1 drops it; no edit's rule covers it.
const FENCE_PORT: u16 = 2099;
const START_RULES: &[u8] = b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = 2099\n";

/// A tagged frame: flow `flow`, sequence `seq`, to UDP port `dport`.
fn probe(flow: u8, seq: u32, dport: u16) -> Vec<u8> {
    let mut payload = vec![b'.'; 22];
    payload[..4].copy_from_slice(common::MAGIC);
    payload[4] = flow;
    payload[5..9].copy_from_slice(&seq.to_be_bytes());
    udp4_frame([10, 99, 0, 1], [10, 99, 0, 2], 5000, dport, &payload)
}

/// `show --json` of the running filter.
fn show(f: &FilterProcess) -> serde_json::Value {
    let text = netsched_filter::control::request(&f.sock, "show --json").unwrap();
    serde_json::from_str(text.trim()).unwrap()
}

fn rule_drops(f: &FilterProcess) -> u64 {
    show(f)["drops"]["rule"].as_u64().unwrap_or(0)
}

/// The test's own list of the rules held: (handle, rule) in order.
struct Model {
    rules: Vec<(u64, AclRule)>,
    rng: u64,
}

impl Model {
    fn next(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n.max(1)
    }

    /// One random edit as a control line, applied to the list once the filter answers.
    fn edit(&mut self, f: &FilterProcess) {
        let n = self.rules.len() as u64;
        let deletable: Vec<usize> = (0..self.rules.len())
            .filter(|&i| self.rules[i].0 != 1)
            .collect();
        if !deletable.is_empty() && self.next(3) == 0 {
            let i = deletable[self.next(deletable.len() as u64) as usize];
            let (h, _) = self.rules.remove(i);
            let answer = netsched_filter::control::request(&f.sock, &format!("rule delete {h}"));
            assert_eq!(answer.unwrap().trim(), "rule deleted");
            return;
        }
        let port = FIRST_PORT + self.next(u64::from(PROBES)) as u16;
        let dport = match self.next(3) {
            0 => format!("dport={port}-{}", port + self.next(6) as u16),
            _ => format!("dport={port}"),
        };
        let action = ["action=drop", "action=accept"][self.next(2) as usize];
        let words = [action, "proto=udp", &dport];
        let rule = parse_rule_words(&words).unwrap();
        let (verb, pos) = match (self.next(4), n) {
            (0, _) | (_, 0) => ("insert".to_string(), 0),
            (1, _) => ("add".to_string(), n as usize),
            (2, _) => {
                let i = self.next(n) as usize;
                (format!("insert before {}", self.rules[i].0), i)
            }
            _ => {
                let i = self.next(n) as usize;
                (format!("insert after {}", self.rules[i].0), i + 1)
            }
        };
        let line = format!("rule {verb} {}", words.join(" "));
        let answer = netsched_filter::control::request(&f.sock, &line).unwrap();
        let handle = answer
            .strip_prefix("handle ")
            .and_then(|a| a.split(':').next())
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("{line}: answered {answer:?}"));
        self.rules.insert(pos, (handle, rule));
    }

    /// A probe to `dport` is forwarded by the rules held.
    fn forwards(&self, dport: u16) -> bool {
        let t = netsched_filter::packet::FiveTuple {
            src: [10, 99, 0, 1].into(),
            dst: [10, 99, 0, 2].into(),
            proto: 17,
            sport: 5000,
            dport,
        };
        let first = self.rules.iter().find(|(_, r)| r.matches(&t));
        first.is_none_or(|(_, r)| r.action != Action::Drop)
    }
}

/// Frames of flows 0-6 (never a probe's port), one every millisecond, until stopped.
fn background(ns: &str, dev: &str) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ns, dev, flag) = (ns.to_string(), dev.to_string(), stop.clone());
    let h = std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).unwrap();
        let port = Port::open(&dev).unwrap();
        let mut seq = 0u32;
        while !flag.load(Ordering::Relaxed) {
            let flow = (seq % 7) as u8;
            let _ = port.send_frame(&probe(flow, seq, 2000 + u16::from(flow)));
            seq += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    (stop, h)
}

fn rounds_under_traffic(dispatch: &str) {
    let net = build("fledit").unwrap();
    let tag = net.tb.tag().to_string();
    let args = ["--dispatch", dispatch];
    let f = FilterProcess::start(&net, "filter-edit", START_RULES, &args).unwrap();
    let rx = receiver(&net.rcv, &net.r0).unwrap();
    let (stop, bg) = background(&net.snd, &net.s0);
    let fence = parse_rule_words(&["action=drop", "proto=udp", "dport=2099"]).unwrap();
    let mut model = Model {
        rules: vec![(1, fence)],
        rng: 0x2545_F491_4F6C_DD1D,
    };
    let (mut want_drops, mut want) = (0u64, HashSet::new());
    for round in 0..ROUNDS {
        model.edit(&f);
        let mut frames: Vec<Vec<u8>> = (0..PROBES)
            .map(|k| probe(100 + k as u8, round, FIRST_PORT + k))
            .collect();
        frames.push(probe(99, round, FENCE_PORT));
        for k in 0..PROBES {
            if model.forwards(FIRST_PORT + k) {
                want.insert((100 + k as u8, round));
            } else {
                want_drops += 1;
            }
        }
        want_drops += 1; // the fence
        send(
            &net.snd,
            &net.s0,
            frames,
            PROBES as usize + 1,
            Duration::ZERO,
        )
        .unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        while rule_drops(&f) < want_drops && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (drops, k) = (rule_drops(&f), show(&f)["kernel_drops"].clone());
        assert_eq!(
            drops, want_drops,
            "{dispatch}, round {round}: rule drops (kernel drops {k})"
        );
    }
    stop.store(true, Ordering::Relaxed);
    bg.join().unwrap();
    rx.wait_for(u64::MAX, Duration::from_millis(500));
    let (got, _) = rx.stop().unwrap();
    // Exactly the probes the rules of their round forward arrived, each once.
    let probes: Vec<(u8, u32)> = got.into_iter().filter(|t| t.0 >= 99).collect();
    let arrived: HashSet<(u8, u32)> = probes.iter().copied().collect();
    assert_eq!(
        arrived.len(),
        probes.len(),
        "{dispatch}: a probe arrived twice"
    );
    let wrong: Vec<_> = arrived.symmetric_difference(&want).collect();
    assert!(
        wrong.is_empty(),
        "{dispatch}: probes forwarded wrongly or lost: {wrong:?}"
    );
    drop(f);
    drop(net);
    assert_gone(&tag);
}

#[test]
fn rule_edits_under_traffic_apply_from_the_next_packet_on() {
    if !privileged_test_allowed("rule_edits_under_traffic_apply_from_the_next_packet_on") {
        return;
    }
    for dispatch in ["flow_hash", "static_rr"] {
        rounds_under_traffic(dispatch);
    }
}
