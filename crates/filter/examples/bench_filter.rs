//! The filter's pipeline without ports: packets per second through the dispatcher and N
//! workers under every dispatch policy, at P1's packet sizes (64, 256, 512, 1500 B), with a
//! 100-rule linear rule set and a 100-pattern signature set. Same-run ratios between policies
//! are the result; absolute rates depend on the machine and its load.
//!
//! `cargo run --release -p netsched-filter --example bench_filter [-- WORKERS PACKETS [MODES
//! [SIZES]]]` (MODES: a comma-separated subset of `--dispatch`'s names, or `all`; SIZES: frame
//! sizes in bytes, comma-separated, 64..=1500; defaults: every mode, 64,256,512,1500)

use netsched_filter::classifier::build_classifier;
use netsched_filter::packet::udp4_frame;
use netsched_filter::pipeline::{DispatchMode, Pipeline, PipelineConfig};
use netsched_filter::rules::RuleSet;
use netsched_filter::signatures::Signatures;
use netsched_filter::verdict::{Fragments, OnPanic, OnSignature};
use netsched_filter::work::{Tables, WorkPolicy};
use netsched_sys::FramePool;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tables() -> Arc<Tables> {
    // 100 rules no test packet matches, so every SOP scans them all (the linear worst case).
    let mut rules = String::new();
    for i in 0..100 {
        rules += &format!(
            "[[rule]]\naction = \"drop\"\nproto = \"tcp\"\nsrc = \"172.{}.0.0/16\"\ndport = \"{}\"\n",
            i % 250,
            1000 + i
        );
    }
    let sigs: String = (0..100)
        .map(|i| format!("attack-signature-{i:03}\n"))
        .collect();
    Arc::new(Tables {
        classifier: build_classifier(
            RuleSet::from_toml_str(&rules, "bench").unwrap(),
            netsched_core::classify::acl::ClassifierKind::TupleMerge,
            &Default::default(),
        )
        .unwrap(),
        signatures: Signatures::parse(&sigs, "bench").unwrap(),
        generation: 1,
    })
}

fn run(mode: DispatchMode, workers: usize, size: usize, packets: u32) -> f64 {
    let cfg = PipelineConfig {
        workers,
        block_size: 64,
        worker_queue: 64,
        reorder_window: 4096,
        reorder_timeout_ns: 1_000_000_000,
        max_flows: 65536,
        mode,
        work: WorkPolicy {
            on_signature: OnSignature::Drop,
            on_panic: OnPanic::Drop,
            accept_non_ip: true,
            fragments: Fragments::Drop,
            fault_panic_on: None,
        },
        pin: false,
    };
    let frames: Vec<Vec<u8>> = (0..64u16)
        .map(|f| {
            udp4_frame(
                [10, 0, 0, 1],
                [10, 0, 0, 2],
                1000 + f,
                80,
                &vec![b'x'; size - 42],
            )
        })
        .collect();
    // Every slot holds a frame from the start (as a port's ring would): the pipeline reads
    // them in place, so the run measures dispatch, hand-off, work and order, not copies.
    let mut pool = FramePool::new(1024);
    let mut lens = Vec::new();
    while let Some(s) = pool.alloc() {
        lens.push((s, pool.fill(s, &frames[s as usize % frames.len()])));
    }
    let mut free = lens.clone();
    let mut p = Pipeline::start(cfg, tables(), &pool).unwrap();
    let mut out = Vec::new();
    let start = Instant::now();
    let mut sent = 0;
    let mut done = 0u32;
    while done < packets {
        while sent < packets && p.waiting_tasks() < 256 {
            let Some((s, len)) = free.pop() else { break };
            p.submit(&mut pool, s, len);
            sent += 1;
        }
        p.wait(Duration::from_micros(100), &mut pool, &mut out);
        for r in out.drain(..) {
            free.push((r.slot, r.len));
            done += 1;
        }
    }
    let rate = packets as f64 / start.elapsed().as_secs_f64();
    p.stop(&mut pool);
    rate
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workers = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let packets = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    // Optional: the modes to run, comma-separated (default: every one).
    let only: Option<Vec<String>> = args
        .get(3)
        .filter(|a| *a != "all")
        .map(|a| a.split(',').map(str::to_string).collect());
    let sizes: Vec<usize> = match args.get(4) {
        Some(a) => a
            .split(',')
            .map(|s| match s.parse() {
                Ok(n) if (64..=1500).contains(&n) => n,
                _ => {
                    eprintln!("bench_filter: size {s:?}: a frame size in bytes, 64 to 1500");
                    std::process::exit(2)
                }
            })
            .collect(),
        None => vec![64, 256, 512, 1500],
    };
    println!("workers {workers}, {packets} packets per cell, kpps (thousand packets/s)");
    print!("{:<14}", "dispatch");
    for &size in &sizes {
        print!("{:>9}", format!("{size} B"));
    }
    println!();
    for name in DispatchMode::NAMES {
        if only.as_ref().is_some_and(|o| !o.iter().any(|m| m == name)) {
            continue;
        }
        let mode = DispatchMode::parse(name).unwrap();
        print!("{name:<14}");
        for &size in &sizes {
            print!("{:>9.1}", run(mode, workers, size, packets) / 1e3);
        }
        println!();
    }
}
