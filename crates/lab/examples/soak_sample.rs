//! The sampler and judge of `scripts/soak` (docs/testing.md, "Soak"): every `--interval` it
//! reads a running daemon's resident memory (`VmRSS`) and threads from `/proc/PID/status`,
//! its open descriptors (entries of `/proc/PID/fd`) and, from its `/metrics` (scraped with
//! `curl` inside the daemon's namespace), every counter whose name says error, drop, failure,
//! panic, refusal, timeout or loss. It writes `NAME.csv` (one row per sample),
//! `NAME-counters.csv` (one row per sample and counter), `NAME.svg` (RSS, descriptors and
//! threads, each as a percentage of its median over the first window after warm-up) and
//! `NAME-verdict.txt`, prints a progress line a minute, and exits 1 when the daemon
//! failed the soak:
//! - growth: the median of the last `--window` against the median of the first `--window`
//!   after `--warmup`, above `--max-growth` % for RSS, descriptors or threads, and above the
//!   largest value of that first window (noise that stays in the first window's range is not
//!   growth);
//! - errors: any counter that rose after warm-up, unless named by `--expected NAME=REASON`
//!   (a counter the test itself moves, with the reason printed beside it), or a failed scrape;
//! - the daemon gone before the end.
//!
//! Exit status: 0 pass, 1 fail, 2 bad arguments or the sampler could not run.

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use netsched_report::svg::{self, ChartOptions};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Sample a daemon's RSS, fds, threads and error counters; judge its growth")]
struct Args {
    /// The daemon's name in file names and the summary (e.g. balance-l7).
    #[arg(long)]
    name: String,
    /// The daemon's process id.
    #[arg(long)]
    pid: u32,
    /// Seconds to sample for.
    #[arg(long)]
    duration: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    interval: u64,
    /// Seconds of warm-up, sampled but not judged.
    #[arg(long)]
    warmup: u64,
    /// Seconds of each window compared (default: 300, at most half of what follows warm-up).
    #[arg(long)]
    window: Option<u64>,
    /// Largest growth allowed, percent.
    #[arg(long, default_value_t = 5.0)]
    max_growth: f64,
    /// Folder of the CSV, SVG and verdict files.
    #[arg(long)]
    out: PathBuf,
    /// Network namespace of the /metrics address (`ip netns` name).
    #[arg(long)]
    metrics_ns: Option<String>,
    /// The daemon's /metrics URL.
    #[arg(long)]
    metrics_url: Option<String>,
    /// COUNTER=REASON: a counter (name, or name with labels as /metrics writes them) the test
    /// itself moves; its rise is reported, not failed.
    #[arg(long)]
    expected: Vec<String>,
}

/// The words that make a counter an error counter.
const ERROR_WORDS: &[&str] = &[
    "error", "drop", "fail", "panic", "refused", "timeout", "lost",
];

#[derive(Debug, Clone)]
struct Sample {
    t_s: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    counters: BTreeMap<String, f64>,
    scrape_ok: bool,
}

fn proc_sample(pid: u32) -> Result<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    let field = |key: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("/proc/{pid}/status has no {key}"))
    };
    let rss = field("VmRSS:")?;
    let threads = field("Threads:")?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("cannot list /proc/{pid}/fd"))?
        .count() as u64;
    Ok((rss, fds, threads))
}

/// The error counters of a Prometheus text page: `name{labels}` → value.
fn error_counters(page: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in page.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if name.ends_with("_created") || !ERROR_WORDS.iter().any(|w| name.contains(w)) {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            out.insert(series.to_string(), v);
        }
    }
    out
}

fn scrape(ns: Option<&str>, url: &str) -> Result<String> {
    let mut cmd = match ns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, "curl"]);
            c
        }
        None => std::process::Command::new("curl"),
    };
    let out = cmd
        .args(["-sS", "--fail", "--max-time", "5", url])
        .output()
        .context("cannot run curl")?;
    if !out.status.success() {
        bail!(
            "curl {url}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            std::process::exit(2);
        }
    };
    match run(&args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("soak_sample {}: {e:#}", args.name);
            std::process::exit(2);
        }
    }
}

fn run(a: &Args) -> Result<bool> {
    if a.interval == 0 {
        bail!("--interval must be at least 1 s");
    }
    if a.warmup >= a.duration {
        bail!(
            "--warmup ({} s) must be shorter than --duration ({} s)",
            a.warmup,
            a.duration
        );
    }
    let judged = a.duration - a.warmup;
    let window = a.window.unwrap_or(300).min(judged / 2).max(a.interval);
    let mut expected = BTreeMap::new();
    for e in &a.expected {
        let (k, why) = e
            .split_once('=')
            .ok_or_else(|| anyhow!("--expected takes COUNTER=REASON, not {e:?}"))?;
        expected.insert(k.to_string(), why.to_string());
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    let csv_path = a.out.join(format!("{}.csv", a.name));
    let cnt_path = a.out.join(format!("{}-counters.csv", a.name));
    let mut csv = std::fs::File::create(&csv_path)
        .with_context(|| format!("cannot create {}", csv_path.display()))?;
    let mut cnt = std::fs::File::create(&cnt_path)
        .with_context(|| format!("cannot create {}", cnt_path.display()))?;
    writeln!(
        csv,
        "t_s,rss_kib,fds,threads,error_counters_sum,scrape_ok,phase"
    )?;
    writeln!(cnt, "t_s,counter,value")?;

    let start = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut gone: Option<String> = None;
    let mut next_progress = 60.0;
    let mut k = 0u64;
    loop {
        let due = Duration::from_secs(k * a.interval);
        if due > Duration::from_secs(a.duration) {
            break;
        }
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        k += 1;
        let t_s = start.elapsed().as_secs_f64();
        let (rss_kib, fds, threads) = match proc_sample(a.pid) {
            Ok(v) => v,
            Err(e) => {
                gone = Some(format!("{e:#} at {t_s:.0} s"));
                break;
            }
        };
        let (counters, scrape_ok) = match &a.metrics_url {
            Some(url) => match scrape(a.metrics_ns.as_deref(), url) {
                Ok(page) => (error_counters(&page), true),
                Err(e) => {
                    eprintln!("soak {}: scrape failed at {t_s:.0} s: {e:#}", a.name);
                    (BTreeMap::new(), false)
                }
            },
            None => (BTreeMap::new(), true),
        };
        let phase = if t_s < a.warmup as f64 {
            "warmup"
        } else {
            "judged"
        };
        let sum: f64 = counters.values().sum();
        writeln!(
            csv,
            "{t_s:.1},{rss_kib},{fds},{threads},{sum},{},{phase}",
            u8::from(scrape_ok)
        )?;
        for (name, v) in &counters {
            writeln!(cnt, "{t_s:.1},\"{}\",{v}", name.replace('"', "\"\""))?;
        }
        csv.flush()?;
        cnt.flush()?;
        if t_s >= next_progress {
            next_progress += 60.0;
            println!(
                "soak {}: {:>4.0} s of {} s  rss {:.1} MiB  fds {fds}  threads {threads}  error counters {sum}",
                a.name,
                t_s,
                a.duration,
                rss_kib as f64 / 1024.0
            );
        }
        samples.push(Sample {
            t_s,
            rss_kib,
            fds,
            threads,
            counters,
            scrape_ok,
        });
    }
    judge(a, &samples, window, &expected, gone)
}

fn judge(
    a: &Args,
    samples: &[Sample],
    window: u64,
    expected: &BTreeMap<String, String>,
    gone: Option<String>,
) -> Result<bool> {
    let w0 = a.warmup as f64;
    let w1 = w0 + window as f64;
    let end = samples.last().map_or(0.0, |s| s.t_s);
    let first: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= w0 && s.t_s < w1)
        .collect();
    let last: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s > end - window as f64 && s.t_s >= w1)
        .collect();
    let mut report = String::new();
    let mut pass = true;
    let _ = writeln!(
        report,
        "daemon {}: {} samples over {end:.0} s, warm-up {} s, windows of {window} s",
        a.name,
        samples.len(),
        a.warmup
    );
    if let Some(why) = &gone {
        pass = false;
        let _ = writeln!(report, "FAIL {} exited before the end: {why}", a.name);
    }
    let _ = writeln!(
        report,
        "{:<12} {:<8} {:>12} {:>12} {:>8}  verdict",
        "daemon", "metric", "first", "last", "growth"
    );
    type Pick = fn(&Sample) -> f64;
    let metrics: [(&str, Pick); 3] = [
        ("rss_kib", |s| s.rss_kib as f64),
        ("fds", |s| s.fds as f64),
        ("threads", |s| s.threads as f64),
    ];
    let mut baselines = [f64::NAN; 3];
    for (i, (name, pick)) in metrics.iter().enumerate() {
        let f = median(first.iter().map(|s| pick(s)).collect());
        let l = median(last.iter().map(|s| pick(s)).collect());
        baselines[i] = f;
        // Noise is not growth: a count that moves with the load (a balancer's pooled backend
        // connections) may end a few percent above its first median while staying inside
        // the range the first window already saw; a leak leaves that range.
        let first_max = first.iter().map(|s| pick(s)).fold(f64::NAN, f64::max);
        let growth = (l - f) / f * 100.0;
        let ok = first.len() >= 2
            && last.len() >= 2
            && growth.is_finite()
            && (growth <= a.max_growth || l <= first_max);
        pass &= ok;
        let _ = writeln!(
            report,
            "{:<12} {:<8} {:>12.0} {:>12.0} {:>7.2}%  {}",
            a.name,
            name,
            f,
            l,
            growth,
            if ok && growth > a.max_growth {
                format!("ok (within the first window's range, up to {first_max:.0})")
            } else if ok {
                "ok".to_string()
            } else if first.len() < 2 || last.len() < 2 {
                "FAIL (fewer than 2 samples in a window)".to_string()
            } else {
                format!("FAIL (> {} %)", a.max_growth)
            }
        );
    }
    // Error counters: the value at the first sample after warm-up against the last one.
    let at_warmup = samples.iter().find(|s| s.t_s >= w0 && s.scrape_ok);
    let at_end = samples.iter().rev().find(|s| s.scrape_ok);
    if let (Some(b), Some(e)) = (at_warmup, at_end) {
        let mut rose = 0;
        for (name, &v) in &e.counters {
            let before = b.counters.get(name).copied().unwrap_or(0.0);
            if v <= before {
                continue;
            }
            rose += 1;
            let bare = name.split('{').next().unwrap_or(name);
            let why = expected.get(name).or_else(|| expected.get(bare));
            match why {
                Some(why) => {
                    let _ = writeln!(
                        report,
                        "{:<12} counter  {name} rose {before} -> {v}: expected ({why})",
                        a.name
                    );
                }
                None => {
                    pass = false;
                    let _ = writeln!(
                        report,
                        "{:<12} counter  {name} rose {before} -> {v}: FAIL",
                        a.name
                    );
                }
            }
        }
        let _ = writeln!(
            report,
            "{:<12} counters {} error counters read, {rose} rose after warm-up",
            a.name,
            e.counters.len()
        );
    } else if a.metrics_url.is_some() {
        pass = false;
        let _ = writeln!(report, "{:<12} counters FAIL: no scrape succeeded", a.name);
    }
    let failed_scrapes = samples.iter().filter(|s| !s.scrape_ok).count();
    if failed_scrapes > 0 {
        pass = false;
    }
    let _ = writeln!(
        report,
        "{:<12} scrapes  {failed_scrapes} of {} failed{}",
        a.name,
        samples.len(),
        if failed_scrapes > 0 { ": FAIL" } else { "" }
    );
    let _ = writeln!(
        report,
        "{:<12} verdict  {}",
        a.name,
        if pass { "PASS" } else { "FAIL" }
    );
    print!("{report}");
    let verdict = a.out.join(format!("{}-verdict.txt", a.name));
    std::fs::write(&verdict, &report)
        .with_context(|| format!("cannot write {}", verdict.display()))?;

    // The chart: each quantity as a percentage of its median over the first window after
    // warm-up, so that one axis shows all three and the 5 % line.
    let series: Vec<(String, Vec<(f64, f64)>)> = metrics
        .iter()
        .zip(baselines)
        .map(|((name, pick), base)| {
            let label = match *name {
                "rss_kib" => format!("RSS (100 % = {:.1} MiB)", base / 1024.0),
                "fds" => format!("open fds (100 % = {base:.0})"),
                _ => format!("threads (100 % = {base:.0})"),
            };
            let pts = samples
                .iter()
                .map(|s| (s.t_s / 60.0, pick(s) / base * 100.0))
                .collect();
            (label, pts)
        })
        .collect();
    let opts = ChartOptions {
        marks: vec![netsched_report::mark::Mark::line(
            format!("+{} % (the limit)", a.max_growth),
            100.0 + a.max_growth,
        )],
        marks_legend: Some(format!("+{} % limit", a.max_growth)),
        ..ChartOptions::default()
    };
    let chart = a.out.join(format!("{}.svg", a.name));
    svg::line_chart_with(
        &format!(
            "soak of {}: growth against the first {} s after a {} s warm-up",
            a.name, window, a.warmup
        ),
        "time (min)",
        "% of the median after warm-up",
        &series,
        &opts,
        &chart,
    )?;
    Ok(pass)
}
