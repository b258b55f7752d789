//! How long a real vm-delay run must be for P2's loss claims to hold with a margin
//! (docs/vm-delay-real.md, "Why 20 s and 0.1 point"): the simulated
//! scenario with the switch's budget shape (regular on/off periods), seeds 1..=10, per run
//! length:
//! (a) strict priority's Low-tier loss at 9 and at 18 domains, and its growth;
//! (b) at 18 domains, strict priority's Mid and Low loss against delay-constrained's, per
//! seed (same arrivals for both); and the tiers P2 measured together (Mid+Low, P2 Fig. 9):
//! their loss, and the Mid tier's share above 60 ms alone.
//! `cargo run --release -p netsched-lab --example vm_delay_loss_claims [seconds...]`

use netsched_core::SEC;
use netsched_lab::experiments::vm_delay::{
    simulate, summary, Setup, TierResult, VmConfig, MARGIN_SEEDS,
};

fn scenario() -> serde_json::Value {
    let text = include_str!("../../../scenarios/vm-delay.toml");
    let v: toml::Value = toml::from_str(text).expect("the embedded scenario parses");
    serde_json::to_value(v).expect("TOML maps to JSON")
}

fn range(v: &[f64]) -> String {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{mean:.2} ({lo:.2}..{hi:.2})")
}

fn main() -> anyhow::Result<()> {
    let secs: Vec<u64> = std::env::args()
        .skip(1)
        .map(|s| s.parse())
        .collect::<Result<_, _>>()?;
    let secs = if secs.is_empty() {
        vec![8, 15, 20, 30]
    } else {
        secs
    };
    let setup = Setup::from_params(&scenario())?;
    let run = |sch: &str, n: usize, s: u64, seed: u64| -> anyhow::Result<Vec<TierResult>> {
        simulate(
            &VmConfig {
                scheduler: sch.into(),
                domains: n,
                duration: s * SEC,
                slice_spread: 0.0,
                ..setup.base.clone()
            },
            seed,
        )
    };
    println!("regular on/off periods (the switch's budget), seeds 1..=10: mean (min..max), %");
    println!("| s | strict Low loss, 9 | strict Low loss, 18 | (a) growth, points | strict Mid loss, 18 | dc Mid loss, 18 | dc Low loss, 18 | (b) Low: strict − dc | (b) Mid: strict − dc |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let secs2 = secs.clone();
    let secs3 = secs.clone();
    for s in secs {
        let (mut l9, mut l18, mut grow, mut m18, mut dm, mut dl, mut bl, mut bm) = (
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
            vec![],
        );
        for seed in MARGIN_SEEDS {
            let a = run("strict_priority", 9, s, seed)?;
            let b = run("strict_priority", 18, s, seed)?;
            let d = run("delay_constrained", 18, s, seed)?;
            l9.push(a[2].loss_pct());
            l18.push(b[2].loss_pct());
            grow.push(b[2].loss_pct() - a[2].loss_pct());
            m18.push(b[1].loss_pct());
            dm.push(d[1].loss_pct());
            dl.push(d[2].loss_pct());
            bl.push(b[2].loss_pct() - d[2].loss_pct());
            bm.push(b[1].loss_pct() - d[1].loss_pct());
        }
        println!(
            "| {s} | {} | {} | {} | {} | {} | {} | {} | {} |",
            range(&l9),
            range(&l18),
            range(&grow),
            range(&m18),
            range(&dm),
            range(&dl),
            range(&bl),
            range(&bm)
        );
    }
    println!();
    println!("18 domains, strict − delay-constrained per seed (points): Mid+Low together (P2 Fig. 9's VMs 4-9), and the Mid tier alone");
    println!("| s | Mid+Low loss, strict | Mid+Low loss, dc | Mid+Low loss: strict − dc | Mid share > 60 ms: strict − dc | Mid+Low share > 60 ms: strict − dc |");
    println!("|---|---|---|---|---|---|");
    for s in secs2 {
        let (mut ls, mut ld, mut dl, mut dm, mut dml) = (vec![], vec![], vec![], vec![], vec![]);
        for seed in MARGIN_SEEDS {
            let b = run("strict_priority", 18, s, seed)?;
            let d = run("delay_constrained", 18, s, seed)?;
            let (sb, sd) = (summary(&b, 1..3, 60.0), summary(&d, 1..3, 60.0));
            ls.push(sb.loss_pct);
            ld.push(sd.loss_pct);
            dl.push(sb.loss_pct - sd.loss_pct);
            dm.push(b[1].share_above_pct(60.0) - d[1].share_above_pct(60.0));
            dml.push(sb.above_pct - sd.above_pct);
        }
        println!(
            "| {s} | {} | {} | {} | {} | {} |",
            range(&ls),
            range(&ld),
            range(&dl),
            range(&dm),
            range(&dml)
        );
    }
    println!();
    println!("18 domains: the offered load each seed realises (arrivals × per-packet time / on-time), the loads the margins above were checked at");
    println!("| s | mean | min..max | (max − mean) / max, % |");
    println!("|---|---|---|---|");
    for s in secs3 {
        let cfg = VmConfig {
            scheduler: "strict_priority".into(),
            domains: 18,
            duration: s * SEC,
            slice_spread: 0.0,
            ..setup.base.clone()
        };
        let loads: Vec<f64> = MARGIN_SEEDS
            .map(|seed| cfg.realized_load(seed))
            .collect::<Result<_, _>>()?;
        let mean = loads.iter().sum::<f64>() / loads.len() as f64;
        let (lo, hi) = loads
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
        println!(
            "| {s} | {mean:.4} | {lo:.4}..{hi:.4} | {:.2} |",
            100.0 * (hi - mean) / hi
        );
    }
    Ok(())
}
