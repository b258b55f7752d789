//! The simulator's side of the arrival statistics (docs/vm-delay-real.md, "The simulator's
//! traffic"): for
//! delay-constrained at 18 domains with the switch's budget shape (regular on/off periods),
//! per seed, the arrival statistics of one tier
//! (`netsched_lab::experiments::vm_delay::arrivals`) next to the tier's loss, so that the real
//! run's figures (printed by `vm_delay_real_arrivals_diagnosis`) can be set against the
//! model's spread.
//! `cargo run --release -p netsched-lab --example vm_delay_arrivals [seconds] [tier] [seeds]`
//! (defaults 20, 2 = Low, 10).

use netsched_core::SEC;
use netsched_lab::experiments::vm_delay::arrivals::{arrival_stats, clumps};
use netsched_lab::experiments::vm_delay::{generated_arrivals, simulate, Setup, VmConfig};

fn scenario() -> serde_json::Value {
    let text = include_str!("../../../scenarios/vm-delay.toml");
    let v: toml::Value = toml::from_str(text).expect("the embedded scenario parses");
    serde_json::to_value(v).expect("TOML maps to JSON")
}

fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let secs = args.first().copied().unwrap_or(20);
    let tier = args.get(1).copied().unwrap_or(2) as usize;
    let seeds = args.get(2).copied().unwrap_or(10);
    let setup = Setup::from_params(&scenario())?;
    if tier >= setup.base.tiers.len() || !(1..=3600).contains(&secs) || !(1..=1000).contains(&seeds)
    {
        anyhow::bail!(
            "seconds 1..=3600, tier 0..{}, seeds 1..=1000",
            setup.base.tiers.len()
        );
    }
    let cfg = VmConfig {
        scheduler: "delay_constrained".into(),
        domains: 18,
        duration: secs * SEC,
        slice_spread: 0.0,
        ..setup.base.clone()
    };
    let per_tier = cfg.domains / cfg.tiers.len();
    let ports = tier * per_tier..(tier + 1) * per_tier;
    let largest = (2.0 * cfg.data_burst - 1.0).round().max(1.0) as u64;
    let cycle = cfg.budget_cycle();
    println!(
        "delay-constrained, 18 domains, {secs} s, tier {}: every packet (probes, data, streams)",
        cfg.tiers[tier].name
    );
    println!("| seed | loss % | frames | clump mean / p99 / max | gap p5 ms | gaps < 10 ms % | window max 10/50/100/200 ms | tier window max | off-phase % |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for seed in 1..=seeds {
        let a = generated_arrivals(&cfg, seed)?;
        let s = arrival_stats(&clumps(&a, ports.clone()), ports.clone(), largest, cycle);
        let r = simulate(&cfg, seed)?;
        let w: Vec<String> = s.window_max.iter().map(|w| w.max.to_string()).collect();
        let aw: Vec<String> = s
            .all_ports_window_max
            .iter()
            .map(|w| w.to_string())
            .collect();
        println!(
            "| {seed} | {:.2} | {} | {:.1} / {:.0} / {} | {:.1} | {:.1} | {} | {} | {:.1} |",
            r[tier].loss_pct(),
            s.frames,
            s.clump_mean,
            s.clump_p99,
            s.clump_max,
            s.gap_p5_ms,
            s.gaps_under_10ms_pct,
            w.join(" / "),
            aw.join(" / "),
            s.off_phase_pct
        );
    }
    Ok(())
}
