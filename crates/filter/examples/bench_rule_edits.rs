//! Rules changed one at a time while packets flow through the filter's pipeline (no ports):
//! how many edits per second the pipeline takes, and what they cost the packets.
//!
//! The rule set is a ClassBench-like acl set from core's generator (seed 1) of RULES rules in
//! TupleMerge; packets are 64 B UDP frames of a trace drawn from the rules (core's trace
//! generator, seed 2); 2 workers, `flow_hash`. Each edit is a pair: delete a random rule,
//! then insert the same rule back before the rule that followed it (so the set keeps its size
//! and its ranks, and the run can go on for as long as asked). Both halves count as an edit.
//! Every edit is applied by the dispatcher's copy and by every worker's copy, in order with
//! the packets (`rule_edit.rs`).
//!
//! Four runs in the same process, each SECONDS long: packets alone (the baseline), then 1, 4
//! and 16 edit pairs before each round of at most 64 packets (fewer when the pipeline holds
//! 256 tasks). Printed: packets per second, edits per second, and the workers' refused edits
//! (must be 0). Before them: the time to build the classifier (a reload's work, off the
//! packet path) and to copy it (each thread's on its first edit after a swap).
//!
//! `cargo run --release -p netsched-filter --example bench_rule_edits [-- RULES [SECONDS]]`
//! (default 100000 rules, 3 s; at most 100000 rules and 30 s).

use netsched_core::classify::acl::generate::{generate_rules, generate_trace, Profile};
use netsched_core::classify::acl::ClassifierKind;
use netsched_core::rng::SplitMix64;
use netsched_filter::classifier::build_classifier;
use netsched_filter::packet::udp4_frame;
use netsched_filter::pipeline::{DispatchMode, Pipeline, PipelineConfig};
use netsched_filter::rule_edit::{Place, RuleChange, RuleEdit};
use netsched_filter::rules::{RuleSet, RulesFormat, RulesOptions};
use netsched_filter::signatures::Signatures;
use netsched_filter::verdict::{Fragments, OnPanic, OnSignature};
use netsched_filter::work::{Tables, WorkPolicy};
use netsched_sys::FramePool;
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Setup {
    set: RuleSet,
    frames: Vec<Vec<u8>>,
}

fn setup(rules: usize) -> Setup {
    let core = generate_rules(Profile::Acl, rules, 1);
    let trace = generate_trace(&core, 8192, 90, 2);
    let options = RulesOptions {
        format: Some(RulesFormat::ClassBench),
        classbench_action: None,
    };
    let set = RuleSet::parse(&core.to_classbench(), "acl", &options).expect("generated rules");
    let frames = trace
        .iter()
        .map(|k| {
            udp4_frame(
                k.src.to_be_bytes(),
                k.dst.to_be_bytes(),
                k.src_port,
                k.dst_port,
                &[b'x'; 22],
            )
        })
        .collect();
    Setup { set, frames }
}

fn config() -> PipelineConfig {
    PipelineConfig {
        workers: 2,
        block_size: 64,
        worker_queue: 64,
        reorder_window: 4096,
        reorder_timeout_ns: 1_000_000_000,
        max_flows: 65536,
        mode: DispatchMode::parse("flow_hash").expect("a policy"),
        work: WorkPolicy {
            on_signature: OnSignature::Drop,
            on_panic: OnPanic::Drop,
            accept_non_ip: true,
            fragments: Fragments::Drop,
            fault_panic_on: None,
        },
        pin: false,
    }
}

/// Handles in rule order (the bench's own list), and the generator of the next edit pair.
struct Churn {
    order: Vec<u64>,
    rng: SplitMix64,
}

impl Churn {
    /// Delete a random rule and insert it back before its successor: two edits.
    fn pair(&mut self, p: &mut Pipeline, set: &RuleSet) {
        let i = (self.rng.next_u64() % self.order.len() as u64) as usize;
        let rule = set.rules[i].clone();
        p.edit_rules(&RuleChange::Delete {
            handle: self.order[i],
        })
        .expect("delete");
        let at = match self.order.get(i + 1) {
            Some(&next) => Place::Before(next),
            None => Place::Bottom,
        };
        if let RuleEdit::Insert { handle, .. } = p
            .edit_rules(&RuleChange::Insert { at, rule })
            .expect("insert")
        {
            self.order[i] = handle;
        }
    }
}

/// Run for `secs`; `edits_per_round` edit pairs before each round of packets (0: none), and
/// at most `packets_per_round` packets per round. Returns (packets/s, edits/s, refused).
fn run(s: &Setup, secs: f64, edits_per_round: usize, packets_per_round: usize) -> (f64, f64, u64) {
    let tables = Arc::new(Tables {
        classifier: build_classifier(
            s.set.clone(),
            ClassifierKind::TupleMerge,
            &Default::default(),
        )
        .expect("built"),
        signatures: Signatures::empty(),
        generation: 1,
    });
    let mut pool = FramePool::new(1024);
    let mut free = Vec::new();
    while let Some(slot) = pool.alloc() {
        free.push((
            slot,
            pool.fill(slot, &s.frames[slot as usize % s.frames.len()]),
        ));
    }
    let mut p = Pipeline::start(config(), tables, &pool).expect("started");
    let mut churn = Churn {
        order: (1..=s.set.rules.len() as u64).collect(),
        rng: SplitMix64::new(3),
    };
    let (mut done, mut edits, mut out) = (0u64, 0u64, Vec::new());
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..edits_per_round {
            churn.pair(&mut p, &s.set);
            edits += 2;
        }
        for _ in 0..packets_per_round {
            if p.waiting_tasks() >= 256 {
                break;
            }
            let Some((slot, len)) = free.pop() else { break };
            p.submit(&mut pool, slot, len);
        }
        p.wait(Duration::from_micros(50), &mut pool, &mut out);
        for r in out.drain(..) {
            free.push((r.slot, r.len));
            done += 1;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let refused = p.stats().workers.iter().map(|w| w.edit_failures).sum();
    p.stop(&mut pool);
    (done as f64 / elapsed, edits as f64 / elapsed, refused)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rules: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3.0);
    let (rules, secs) = (rules.clamp(10, 100_000), secs.clamp(0.5, 30.0));
    let s = setup(rules);
    println!(
        "{} rules (acl, seed 1), 64 B UDP, 2 workers, flow_hash, {secs} s per run",
        s.set.rules.len()
    );
    let t = Instant::now();
    let c = build_classifier(
        s.set.clone(),
        ClassifierKind::TupleMerge,
        &Default::default(),
    )
    .expect("built");
    let built = t.elapsed();
    let t = Instant::now();
    let copy = c.clone_box();
    let copied = t.elapsed();
    println!(
        "build (what a reload does off the packet path) {:.0} ms; one copy (each thread's on \
         its first edit after a swap) {:.1} ms",
        built.as_secs_f64() * 1e3,
        copied.as_secs_f64() * 1e3
    );
    drop((c, copy));
    println!(
        "{:<34}{:>12}{:>12}{:>9}",
        "run", "kpps", "edits/s", "refused"
    );
    for (name, edits, packets) in [
        ("packets alone", 0, 64),
        ("1 edit pair per 64 packets", 1, 64),
        ("4 edit pairs per 64 packets", 4, 64),
        ("16 edit pairs per 64 packets", 16, 64),
    ] {
        let (pps, eps, refused) = run(&s, secs, edits, packets);
        println!("{name:<34}{:>12.1}{:>12.0}{refused:>9}", pps / 1e3, eps);
    }
}
