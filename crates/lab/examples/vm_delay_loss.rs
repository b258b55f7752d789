//! How the model's assumptions move strict priority's Low-tier loss (docs/vm-delay-real.md,
//! "The budget's shape" and "Run length"):
//! the simulated vm-delay scenario at 18
//! domains over seeds 1..=10, as configured and with one model assumption changed at a time.
//! `cargo run --release -p netsched-lab --example vm_delay_loss [seconds]`

use netsched_core::SEC;
use netsched_lab::experiments::vm_delay::{simulate, summary, Setup, TierResult, VmConfig};

fn scenario() -> serde_json::Value {
    let text = include_str!("../../../scenarios/vm-delay.toml");
    let v: toml::Value = toml::from_str(text).expect("the embedded scenario parses");
    serde_json::to_value(v).expect("TOML maps to JSON")
}

fn main() -> anyhow::Result<()> {
    let secs: u64 = std::env::args().nth(1).map_or(Ok(30), |s| s.parse())?;
    let setup = Setup::from_params(&scenario())?;
    let base = VmConfig {
        domains: 18,
        duration: secs * SEC,
        ..setup.base.clone()
    };
    let load = base.offered_load();
    // The per-packet cost scaled to offered load `l` (a host that loses budget to late
    // wake-ups has less capacity: a higher load), with on/off period spread `spread`.
    let at_load = |l: f64, spread: f64| VmConfig {
        per_packet_ms: base.per_packet_ms * l / load,
        slice_spread: spread,
        ..base.clone()
    };
    let variants: Vec<(String, VmConfig)> = vec![
        ("as configured".into(), base.clone()),
        (
            "regular on/off periods".into(),
            VmConfig {
                slice_spread: 0.0,
                ..base.clone()
            },
        ),
        (
            "no off periods, half the rate".into(),
            VmConfig {
                cpu_busy: 0.0,
                per_packet_ms: base.per_packet_ms * 2.0,
                ..base.clone()
            },
        ),
        ("regular, load 0.85".into(), at_load(0.85, 0.0)),
        ("regular, load 1.00".into(), at_load(1.0, 0.0)),
        ("regular, load 1.10".into(), at_load(1.1, 0.0)),
    ];
    println!(
        "18 domains, {secs} s, seeds 1..=10; mean over seeds (min..max); offered load {load:.3}"
    );
    println!("| variant | scheduler | Low loss % | Low probe loss % | Low p99 ms | Mid p99 ms | Mid > 60 ms % | Mid+Low > 60 ms % | all-tier loss % | High p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut out = String::new();
    for (label, cfg) in &variants {
        for sch in ["strict_priority", "delay_constrained"] {
            let c = VmConfig {
                scheduler: sch.into(),
                ..cfg.clone()
            };
            let runs: Vec<Vec<TierResult>> = (1..=10u64)
                .map(|seed| simulate(&c, seed))
                .collect::<anyhow::Result<_>>()?;
            let stat = |f: &dyn Fn(&[TierResult]) -> f64| {
                let v: Vec<f64> = runs.iter().map(|r| f(r)).collect();
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{mean:.2} ({lo:.2}..{hi:.2})")
            };
            out += &format!(
                "| {label} | {sch} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                stat(&|r| r[2].loss_pct()),
                stat(&|r| r[2].probe.loss_pct()),
                stat(&|r| r[2].quantile_ms(0.99)),
                stat(&|r| r[1].quantile_ms(0.99)),
                stat(&|r| r[1].share_above_pct(60.0)),
                stat(&|r| summary(r, 1..3, 60.0).above_pct),
                stat(&|r| summary(r, 0..3, 60.0).loss_pct),
                stat(&|r| r[0].quantile_ms(0.99)),
            );
        }
    }
    print!("{out}");
    Ok(())
}
