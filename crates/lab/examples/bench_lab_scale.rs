//! How one simulated run's time and memory grow with its size: lvs-cluster by hosts,
//! vm-delay by guests, np-dispatch by filter rules (issue #29, "one run at scale"). A benchmark,
//! not a test: `scripts/bench-lab-scale` builds and runs it; the figures go in
//! docs/benchmarks.md and docs/bench-lab-scale.md.
//!
//!   bench_lab_scale [--lab PATH] [--out DIR] [--quick]
//!
//! Each size is one `lab run` in its own process under `/usr/bin/time -v` (wall time, user +
//! system CPU time, peak RSS). Writes `DIR/scale.csv`, `DIR/scale.md` (the table, with the
//! cost per unit and the log-log slope between the two largest sizes: 1 = linear) and the
//! log-log plots `DIR/scale-cpu.svg` and `DIR/scale-rss.svg`. `--quick` runs the three smallest
//! sizes only (a smoke run of the script).

use anyhow::{anyhow, bail, Context};
use netsched_report::svg::{self, ChartOptions};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One experiment scaled along one parameter.
struct Target {
    experiment: &'static str,
    /// What grows (a table column and the plot's x axis).
    unit: &'static str,
    sizes: &'static [u64],
    /// The `--set` overrides for size `n`.
    sets: fn(u64) -> Vec<String>,
}

fn lvs_sets(n: u64) -> Vec<String> {
    // The default scenario at one cluster size; the client keeps 2 requests per host in
    // flight (the scenario's rule: 2 × the largest cluster); no sensitivity table.
    vec![
        format!("cluster.hosts=[{n}]"),
        format!("client.concurrency={}", 2 * n),
        "sensitivity.enabled=false".into(),
    ]
}

fn vm_sets(n: u64) -> Vec<String> {
    vec![
        format!("domains.counts=[{n}]"),
        "run.sensitivity=false".into(),
    ]
}

fn np_sets(n: u64) -> Vec<String> {
    vec![format!("cost.rules={n}"), "sensitivity=false".into()]
}

const TARGETS: [Target; 3] = [
    Target {
        experiment: "lvs-cluster",
        unit: "hosts",
        sizes: &[10, 30, 100, 300, 1000],
        sets: lvs_sets,
    },
    Target {
        experiment: "vm-delay",
        unit: "guests",
        // Multiples of the 3 tiers.
        sizes: &[12, 30, 99, 300, 999],
        sets: vm_sets,
    },
    Target {
        experiment: "np-dispatch",
        unit: "rules",
        sizes: &[100, 300, 1000, 3000, 10000],
        sets: np_sets,
    },
];

/// What `/usr/bin/time -v` measured of one run.
#[derive(Debug, Clone, Copy)]
struct Measured {
    wall_s: f64,
    cpu_s: f64,
    rss_kib: f64,
}

fn field<'a>(text: &'a str, name: &str) -> anyhow::Result<&'a str> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(name))
        .map(str::trim)
        .ok_or_else(|| anyhow!("/usr/bin/time -v printed no {name:?}"))
}

/// `h:mm:ss` or `m:ss.ss` → seconds.
fn clock(text: &str) -> anyhow::Result<f64> {
    text.split(':').try_fold(0.0, |acc, part| {
        let v: f64 = part
            .parse()
            .with_context(|| format!("wall clock {text:?}"))?;
        Ok(acc * 60.0 + v)
    })
}

fn parse_time_v(stderr: &str) -> anyhow::Result<Measured> {
    let num = |name: &str| -> anyhow::Result<f64> {
        let v = field(stderr, name)?;
        v.parse().with_context(|| format!("{name} {v:?}"))
    };
    Ok(Measured {
        wall_s: clock(field(
            stderr,
            "Elapsed (wall clock) time (h:mm:ss or m:ss):",
        )?)?,
        cpu_s: num("User time (seconds):")? + num("System time (seconds):")?,
        rss_kib: num("Maximum resident set size (kbytes):")?,
    })
}

fn measure(lab: &Path, t: &Target, n: u64, scratch: &Path) -> anyhow::Result<Measured> {
    let out = scratch.join(format!("{}-{n}", t.experiment));
    let _ = std::fs::remove_dir_all(&out);
    let mut cmd = Command::new("/usr/bin/time");
    cmd.arg("-v")
        .arg(lab)
        .args(["run", t.experiment, "--out"])
        .arg(&out);
    for s in (t.sets)(n) {
        cmd.args(["--set", &s]);
    }
    let o = cmd
        .output()
        .with_context(|| format!("cannot start /usr/bin/time -v {}", lab.display()))?;
    let stderr = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        bail!(
            "{} at {n} {}: {}",
            t.experiment,
            t.unit,
            stderr.lines().rev().take(5).collect::<Vec<_>>().join(" / ")
        );
    }
    let m = parse_time_v(&stderr)?;
    // The run must have produced its results, not only exited.
    if !out.join("results.json").exists() {
        bail!("{}: no results.json in {}", t.experiment, out.display());
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(m)
}

/// Slope of log(y) over log(x) between two points (1 = linear growth).
fn slope(a: (f64, f64), b: (f64, f64)) -> f64 {
    (b.1.ln() - a.1.ln()) / (b.0.ln() - a.0.ln())
}

struct Args {
    lab: PathBuf,
    out: PathBuf,
    quick: bool,
}

fn args() -> anyhow::Result<Args> {
    let exe = std::env::current_exe()?;
    let mut a = Args {
        lab: exe.with_file_name("lab"),
        out: PathBuf::from("target/bench-lab-scale"),
        quick: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--lab" => a.lab = it.next().context("--lab PATH")?.into(),
            "--out" => a.out = it.next().context("--out DIR")?.into(),
            "--quick" => a.quick = true,
            other => bail!("unknown argument {other:?}; usage: bench_lab_scale [--lab PATH] [--out DIR] [--quick]"),
        }
    }
    Ok(a)
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let scratch = a.out.join("runs");
    let mut csv = String::from("experiment,unit,size,wall_s,cpu_s,peak_rss_kib\n");
    let mut md = String::from(
        "| experiment | size | wall (s) | CPU (s) | peak RSS (MiB) | CPU per unit (ms) | log-log slope of CPU time |\n|---|---|---|---|---|---|---|\n",
    );
    let mut cpu_series = Vec::new();
    let mut rss_series = Vec::new();
    for t in &TARGETS {
        let sizes = if a.quick { &t.sizes[..3] } else { t.sizes };
        let mut points = Vec::new();
        for &n in sizes {
            let m = measure(&a.lab, t, n, &scratch)?;
            eprintln!(
                "{} {n} {}: wall {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB",
                t.experiment,
                t.unit,
                m.wall_s,
                m.cpu_s,
                m.rss_kib / 1024.0
            );
            let _ = writeln!(
                csv,
                "{},{},{n},{:.3},{:.3},{:.0}",
                t.experiment, t.unit, m.wall_s, m.cpu_s, m.rss_kib
            );
            let s = match points.last() {
                Some(&(pn, pm)) => {
                    let pm: Measured = pm;
                    format!("{:.2}", slope((pn as f64, pm.cpu_s), (n as f64, m.cpu_s)))
                }
                None => "—".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {n} {} | {:.2} | {:.2} | {:.1} | {:.3} | {s} |",
                t.experiment,
                t.unit,
                m.wall_s,
                m.cpu_s,
                m.rss_kib / 1024.0,
                1000.0 * m.cpu_s / n as f64
            );
            points.push((n, m));
        }
        let label = format!("{} (x: {})", t.experiment, t.unit);
        cpu_series.push((
            label.clone(),
            points
                .iter()
                .map(|(n, m)| (*n as f64, m.cpu_s))
                .collect::<Vec<_>>(),
        ));
        rss_series.push((
            label,
            points
                .iter()
                .map(|(n, m)| (*n as f64, m.rss_kib / 1024.0))
                .collect::<Vec<_>>(),
        ));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let loglog = ChartOptions {
        log_x: true,
        log_y: true,
        ..Default::default()
    };
    svg::line_chart_with(
        "One simulated run: CPU time by size (log-log; slope 1 = linear)",
        "size (hosts, guests or rules)",
        "CPU time, user + system (s)",
        &cpu_series,
        &loglog,
        &a.out.join("scale-cpu.svg"),
    )?;
    svg::line_chart_with(
        "One simulated run: peak memory by size (log-log)",
        "size (hosts, guests or rules)",
        "peak RSS (MiB)",
        &rss_series,
        &loglog,
        &a.out.join("scale-rss.svg"),
    )?;
    std::fs::write(a.out.join("scale.csv"), csv)?;
    std::fs::write(a.out.join("scale.md"), &md)?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_v_output_is_parsed() {
        let text = "\tUser time (seconds): 1.50\n\tSystem time (seconds): 0.25\n\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02.50\n\tMaximum resident set size (kbytes): 2048\n";
        let m = parse_time_v(text).unwrap();
        assert_eq!((m.wall_s, m.cpu_s, m.rss_kib), (62.5, 1.75, 2048.0));
        assert!(parse_time_v("nothing").is_err());
        assert!((slope((10.0, 1.0), (100.0, 10.0)) - 1.0).abs() < 1e-12);
    }
}
