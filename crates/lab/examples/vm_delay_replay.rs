//! Which part of the real traffic makes the switch lose frames the model does not
//! (docs/vm-delay-real.md, "The host takes budget" and "The simulator's traffic"):
//! replays a real run's recorded arrivals (a trace written by the real run with
//! `NETSCHED_VM_DELAY_TRACE_DIR`, `trace-SCHEDULER-GUESTS.csv`) through the model, whole
//! and with one tier's arrivals swapped for the simulator's own (seeds 1..=10), and prints the
//! Low tier's vif-queue drops in each case.
//! `cargo run --release -p netsched-lab --example vm_delay_replay TRACE.csv [seconds]`

use netsched_core::{Nanos, SEC};
use netsched_lab::experiments::vm_delay::{generated_arrivals, replay, Setup, VmConfig};

fn scenario() -> serde_json::Value {
    let text = include_str!("../../../scenarios/vm-delay.toml");
    let v: toml::Value = toml::from_str(text).expect("the embedded scenario parses");
    serde_json::to_value(v).expect("TOML maps to JSON")
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: vm_delay_replay TRACE.csv [seconds]"))?;
    let secs: u64 = std::env::args().nth(2).map_or(Ok(20), |s| s.parse())?;
    let text = std::fs::read_to_string(&path)?;
    let mut real: Vec<(Nanos, usize)> = Vec::new();
    for (i, l) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        if f.len() != 3 {
            anyhow::bail!("{path}:{}: expected t_ns,port,kind", i + 1);
        }
        if f[2] != "s" {
            real.push((f[0].parse()?, f[1].parse()?));
        }
    }
    let setup = Setup::from_params(&scenario())?;
    // The run's scheduler and guest count are in the file name the real run gives it.
    let scheduler = if path.contains("strict_priority") {
        "strict_priority"
    } else {
        "delay_constrained"
    };
    let domains = if path.ends_with("-9.csv") { 9 } else { 18 };
    let cfg = VmConfig {
        scheduler: scheduler.into(),
        domains,
        duration: (secs + 5) * SEC,
        slice_spread: 0.0,
        ..setup.base.clone()
    };
    let per_tier = cfg.domains / cfg.tiers.len();
    let tier = |v: usize| v / per_tier;
    // The real traffic starts after the ARP warm-up: align the simulated traffic with the
    // first bulk burst of the trace (the first clump of more than one frame).
    let start = real.windows(2).find(|w| w[0] == w[1]).map_or(0, |w| w[0].0);
    let low_drops = |arr: &[(Nanos, usize)]| -> anyhow::Result<u64> {
        Ok(replay(&cfg, arr)?
            .iter()
            .enumerate()
            .filter(|(v, _)| tier(*v) == 2)
            .map(|(_, r)| r.dropped)
            .sum())
    };
    let low_arrivals = real.iter().filter(|a| tier(a.1) == 2).count();
    println!(
        "{path}: {scheduler}, {domains} guests, {} arrivals ({low_arrivals} Low); Low \
         vif-queue drops when replayed:",
        real.len()
    );
    println!("| arrivals | Low drops (seeds 1..=10: mean, min..max) |\n|---|---|");
    println!("| all real | {} |", low_drops(&real)?);
    let sim_cfg = VmConfig {
        duration: secs * SEC,
        ..cfg.clone()
    };
    for (label, real_tiers) in [
        ("all simulated", vec![]),
        ("real High, simulated Mid and Low", vec![0]),
        ("real Mid, simulated High and Low", vec![1]),
        ("real Low, simulated High and Mid", vec![2]),
        ("simulated High, real Mid and Low", vec![1, 2]),
    ] {
        let mut v = Vec::new();
        for seed in 1..=10u64 {
            let sim = generated_arrivals(&sim_cfg, seed)?;
            let mut mix: Vec<(Nanos, usize)> = real
                .iter()
                .copied()
                .filter(|a| real_tiers.contains(&tier(a.1)))
                .chain(
                    sim.into_iter()
                        .filter(|a| !real_tiers.contains(&tier(a.1)))
                        .map(|(t, p)| (t + start, p)),
                )
                .collect();
            mix.sort_by_key(|a| a.0);
            v.push(low_drops(&mix)? as f64);
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        println!("| {label} | {mean:.1} ({lo}..{hi}) |");
    }
    Ok(())
}
