//! The real run's report: paper | sim | real per cell (the paper's and the simulation's
//! figures are read from the simulated run's own output, so each number has one source),
//! the checks, the charts, and the CPU accounting that shows the emulated hosts, not this
//! machine, limit the rate.

use super::{Cell, Measured, RealParams};
use crate::experiments::lvs_cluster::{Case, Setup};
use netsched_report::{stats, svg, Check, Cmp, Comparison, ExperimentOutput, Figure, Results, Run};
use serde_json::{json, Value};
use std::path::Path;

/// "The cluster scales" (issue #12): RR at 5 hosts ≥ this × RR at one host (ideal: 5).
pub const SCALING_MIN: f64 = 4.0;
/// "Table 4 holds" (issue #12): LC ≥ this × RR when per-host costs differ (P4: 13× at 5 hosts).
pub const LC_OVER_RR_MIN: f64 = 2.0;
/// Failed requests allowed, as a fraction of those sent (a proxy at these rates fails none;
/// the bound leaves room for a lone connect timeout on a loaded machine).
pub const FAILED_MAX: f64 = 0.001;
/// Hosts' mean busy fraction in RR same-object cells above which the emulated capacity, not
/// this machine's CPU, sets the rate.
pub const HOST_BUSY_MIN: f64 = 0.8;
/// With N directors behind ECMP, each director's share of a cell's requests is at least this
/// fraction of an equal share (1/N): the router's L4 hash spreads the connections; a
/// director that the route or the hash left out gets none.
pub const DIRECTOR_SHARE_MIN: f64 = 0.4;

/// Each director's share of the requests of a cell (empty when not measured).
pub fn director_shares(c: &Cell) -> Vec<f64> {
    let total: u64 = c.director_requests.iter().sum();
    if total == 0 {
        return Vec::new();
    }
    c.director_requests
        .iter()
        .map(|n| *n as f64 / total as f64)
        .collect()
}

fn case_name(s: &Setup, case: Case) -> String {
    match case {
        Case::Same(i) => s.sizes[i].clone(),
        Case::PerHost => "per-host".into(),
    }
}

fn kind(case: Case) -> &'static str {
    match case {
        Case::Same(_) => "same",
        Case::PerHost => "per-host",
    }
}

/// The simulated rate of a cell, from the simulated run's `results.runs`.
fn sim_rate(sim: &ExperimentOutput, s: &Setup, case: Case, alg: &str, n: usize) -> f64 {
    sim.results
        .runs
        .iter()
        .find(|r| {
            r.config["case"] == kind(case)
                && r.config["size"] == case_name(s, case).as_str()
                && r.config["algorithm"] == alg
                && r.config["hosts"] == n
                && r.config.get("variant").is_none()
        })
        .and_then(|r| r.metrics["req_per_s"].as_f64())
        .unwrap_or(f64::NAN)
}

/// P4's figure for a cell as the simulated report prints it ("—" if P4 has none).
fn paper(sim: &ExperimentOutput, s: &Setup, case: Case, alg: &str, n: usize) -> String {
    let q = match case {
        Case::Same(i) => format!("same object {}, {alg}, {n} host(s) (req/s)", s.sizes[i]),
        Case::PerHost => format!("per-host sizes, {alg}, {n} host(s) (req/s)"),
    };
    sim.comparisons
        .iter()
        .find(|c| c.quantity == q)
        .map(|c| c.paper.clone())
        .unwrap_or_else(|| "—".into())
}

fn fmt_rate(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn find<'a>(m: &'a Measured, case: Case, alg: &str, n: usize) -> Option<&'a Cell> {
    m.cells
        .iter()
        .find(|c| c.case == case && c.alg == alg && c.hosts == n)
}

/// The mean of a sample (`netsched_report::stats`), NaN for none.
fn mean(v: &[f64]) -> f64 {
    stats::mean(v).unwrap_or(f64::NAN)
}

/// Assemble the output.
pub fn build(
    s: &Setup,
    p: &RealParams,
    m: &Measured,
    sim: &ExperimentOutput,
    seed: u64,
    params: &Value,
    out: &Path,
) -> anyhow::Result<ExperimentOutput> {
    let mut results = Results::new("lvs-cluster", "real", seed, params.clone());
    let mut comparisons = Vec::new();
    let mut rows = Vec::new();
    for c in &m.cells {
        let lat = stats::sorted(&c.client.latencies_s);
        let q = |q: f64| stats::percentile(&lat, q).unwrap_or(f64::NAN);
        let (p50, p99) = (q(0.5), q(0.99));
        let simr = sim_rate(sim, s, c.case, &c.alg, c.hosts);
        let pap = paper(sim, s, c.case, &c.alg, c.hosts);
        results.runs.push(Run {
            config: json!({
                "case": kind(c.case), "size": case_name(s, c.case), "algorithm": c.alg,
                "hosts": c.hosts, "director": m.director.name(),
                "mode": m.director.mode.name(), "directors": c.directors,
            }),
            metrics: json!({
                "req_per_s": c.client.rate(),
                "sim_req_per_s": simr,
                "paper_req_per_s": pap,
                "sent": c.client.sent, "ok": c.client.ok, "ok_in_window": c.client.ok_in_window,
                "window_s": c.client.window_s,
                "errors": c.client.errors, "cut_at_end": c.client.cut_at_end,
                "unaccounted": c.client.unaccounted(),
                "latency_p50_ms": p50 * 1e3, "latency_p99_ms": p99 * 1e3,
                "host_served": c.host_served, "host_busy": c.host_busy,
                "host_bad_requests": c.host_bad_requests,
                "director_requests": c.director_requests,
                "cpu_cores": {"client": c.cpu.client, "director": c.cpu.director,
                              "hosts": c.cpu.hosts, "machine_busy_fraction": c.cpu.machine_busy},
            }),
        });
        let q = match c.case {
            Case::Same(i) => format!(
                "same object {}, {}, {} host(s) (req/s)",
                s.sizes[i], c.alg, c.hosts
            ),
            Case::PerHost => format!("per-host sizes, {}, {} host(s) (req/s)", c.alg, c.hosts),
        };
        comparisons.push(Comparison {
            quantity: q,
            paper: pap.clone(),
            ours: {
                let mut ours = format!(
                    "real {} · sim {}",
                    fmt_rate(c.client.rate()),
                    fmt_rate(simr)
                );
                let shares = director_shares(c);
                if c.directors > 1 && !shares.is_empty() {
                    let shares: Vec<String> = shares
                        .iter()
                        .map(|x| format!("{:.0}%", 100.0 * x))
                        .collect();
                    ours.push_str(&format!(
                        " · {} directors {}",
                        c.directors,
                        shares.join("/")
                    ));
                }
                ours
            },
        });
        rows.push(vec![
            kind(c.case).to_string(),
            case_name(s, c.case),
            c.alg.clone(),
            c.hosts.to_string(),
            pap,
            format!("{simr}"),
            format!("{}", c.client.rate()),
            c.client.ok.to_string(),
            c.client.errors_total().to_string(),
            c.client.cut_at_end.to_string(),
            format!("{:.3}", p50 * 1e3),
            format!("{:.3}", p99 * 1e3),
            format!("{:.3}", mean(&c.host_busy)),
            format!("{:.3}", c.cpu.client),
            format!("{:.3}", c.cpu.director),
            format!("{:.3}", c.cpu.hosts),
            format!("{:.3}", c.cpu.machine_busy),
            c.directors.to_string(),
            c.director_requests
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join("/"),
        ]);
    }
    netsched_report::csv::write_table(
        &out.join("real-rates.csv"),
        &[
            "case",
            "size",
            "algorithm",
            "hosts",
            "paper",
            "sim",
            "real",
            "ok",
            "errors",
            "cut_at_end",
            "p50_ms",
            "p99_ms",
            "host_busy",
            "cpu_client",
            "cpu_director",
            "cpu_hosts",
            "machine_busy",
            "directors",
            "director_requests",
        ],
        &rows,
    )?;
    let checks = checks(s, m);
    let figures = figures(s, p, m, sim, out)?;
    let mut notes = notes(s, p, m);
    notes.extend(agreement(s, m, sim));
    Ok(ExperimentOutput {
        results,
        comparisons,
        checks,
        figures,
        notes,
    })
}

fn checks(s: &Setup, m: &Measured) -> Vec<Check> {
    let mut out = Vec::new();
    for (i, size) in s.sizes.iter().enumerate() {
        if let (Some(one), Some(five)) = (
            find(m, Case::Same(i), "rr", 1),
            find(m, Case::Same(i), "rr", 5),
        ) {
            let (a, b) = (one.client.rate(), five.client.rate());
            out.push(Check::measured(
                format!(
                    "the cluster scales: RR at 5 hosts ≥ {SCALING_MIN}× its 1-host rate ({size})"
                ),
                b / a,
                Cmp::Ge,
                SCALING_MIN,
                format!("{} vs {} req/s", fmt_rate(b), fmt_rate(a)),
            ));
        }
    }
    let mut ns: Vec<usize> = m.cells.iter().map(|c| c.hosts).filter(|n| *n > 1).collect();
    ns.sort_unstable();
    ns.dedup();
    for n in ns {
        if let (Some(rr), Some(lc)) = (
            find(m, Case::PerHost, "rr", n),
            find(m, Case::PerHost, "lc", n),
        ) {
            let (a, b) = (rr.client.rate(), lc.client.rate());
            out.push(Check::measured(
                format!(
                    "Table 4: LC ≥ {LC_OVER_RR_MIN}× RR when per-host costs differ ({n} hosts)"
                ),
                b / a,
                Cmp::Ge,
                LC_OVER_RR_MIN,
                format!("lc {} vs rr {} req/s", fmt_rate(b), fmt_rate(a)),
            ));
        }
    }
    let unaccounted: i64 = m.cells.iter().map(|c| c.client.unaccounted().abs()).sum();
    let sent: u64 = m.cells.iter().map(|c| c.client.sent).sum();
    let cut: u64 = m.cells.iter().map(|c| c.client.cut_at_end).sum();
    let mut reasons = std::collections::BTreeMap::new();
    for c in &m.cells {
        for (k, v) in &c.client.errors {
            *reasons.entry(*k).or_insert(0u64) += v;
        }
    }
    let failed: u64 = reasons.values().sum();
    out.push(Check::measured(
        "nothing lost: every request answered, failed with a reason, or cut at the end of its cell",
        unaccounted as f64,
        Cmp::Le,
        0.0,
        format!("{sent} sent, {failed} failed {reasons:?}, {cut} cut at the end"),
    ));
    out.push(Check::measured(
        format!("failed requests ≤ {}% of those sent", FAILED_MAX * 100.0),
        if sent > 0 {
            failed as f64 / sent as f64
        } else {
            0.0
        },
        Cmp::Le,
        FAILED_MAX,
        format!("{failed} of {sent}: {reasons:?}"),
    ));
    let multi: Vec<&Cell> = m
        .cells
        .iter()
        .filter(|c| c.directors > 1 && !c.director_requests.is_empty())
        .collect();
    if let Some(first) = multi.first() {
        let n = first.directors;
        let (lo, at) = multi
            .iter()
            .flat_map(|c| director_shares(c).into_iter().map(move |x| (x, *c)))
            .fold(
                (f64::INFINITY, *first),
                |a, b| if b.0 < a.0 { b } else { a },
            );
        let min = DIRECTOR_SHARE_MIN / n as f64;
        out.push(Check::measured(
            format!(
                "ECMP spreads the requests: every one of the {n} directors gets ≥ {:.0}% of each cell's requests ({DIRECTOR_SHARE_MIN} of an equal share)",
                100.0 * min
            ),
            lo,
            Cmp::Ge,
            min,
            format!(
                "lowest {:.1}% ({} hosts, {}, {}: {:?} requests per director)",
                100.0 * lo,
                at.hosts,
                case_name(s, at.case),
                at.alg,
                at.director_requests
            ),
        ));
    }
    let busy: Vec<f64> = m
        .cells
        .iter()
        .filter(|c| c.alg == "rr" && matches!(c.case, Case::Same(_)))
        .map(|c| mean(&c.host_busy))
        .collect();
    if !busy.is_empty() {
        let lo = busy.iter().copied().fold(f64::INFINITY, f64::min);
        out.push(Check::measured(
            format!("the emulated hosts limit the rate, not this machine: hosts' mean busy fraction ≥ {HOST_BUSY_MIN} in every RR same-object cell"),
            lo,
            Cmp::Ge,
            HOST_BUSY_MIN,
            format!("lowest {lo:.3} over {} cells", busy.len()),
        ));
    }
    out
}

fn figures(
    s: &Setup,
    p: &RealParams,
    m: &Measured,
    sim: &ExperimentOutput,
    out: &Path,
) -> anyhow::Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let mut cases: Vec<Case> = m.cells.iter().map(|c| c.case).collect();
    cases.sort();
    cases.dedup();
    for case in cases {
        let hosts: Vec<usize> = match case {
            Case::Same(_) => p.hosts.clone(),
            Case::PerHost => p.per_host_hosts.clone(),
        };
        let cats: Vec<String> = hosts.iter().map(|n| format!("{n} host(s)")).collect();
        let mut algs: Vec<&str> = m
            .cells
            .iter()
            .filter(|c| c.case == case)
            .map(|c| c.alg.as_str())
            .collect();
        algs.dedup();
        let mut series: Vec<(String, Vec<f64>)> = Vec::new();
        for a in algs {
            let real: Vec<f64> = hosts
                .iter()
                .map(|&n| {
                    find(m, case, a, n)
                        .map(|c| c.client.rate())
                        .unwrap_or(f64::NAN)
                })
                .collect();
            let simv: Vec<f64> = hosts
                .iter()
                .map(|&n| sim_rate(sim, s, case, a, n))
                .collect();
            let pap: Vec<f64> = hosts
                .iter()
                .map(|&n| paper(sim, s, case, a, n).parse().unwrap_or(f64::NAN))
                .collect();
            series.push((format!("{a} real"), real));
            series.push((format!("{a} sim"), simv));
            if pap.iter().any(|x| x.is_finite()) {
                series.push((format!("{a} P4"), pap));
            }
        }
        let name = case_name(s, case);
        let file = format!("real-rate-{name}.svg");
        let title = match case {
            Case::Same(_) => {
                format!("Same object ({name}), real cluster vs simulation vs P4 Table 3")
            }
            Case::PerHost => {
                "Different object size per host, real cluster vs simulation vs P4 Table 4"
                    .to_string()
            }
        };
        svg::bar_chart(&title, "requests/s", &cats, &series, &out.join(&file))?;
        figures.push(Figure { title, file });
    }
    Ok(figures)
}

fn notes(s: &Setup, p: &RealParams, m: &Measured) -> Vec<String> {
    let mut notes = vec![format!(
        "Real cluster: one client namespace (ab-like closed loop, {} concurrent HTTP/1.0 requests, \
         one connection each), {} running **{}** in mode {} (l7 schedules \
         each request; l4 each TCP connection, as IPVS-NAT), and 1–{} host namespaces. \
         Each host emulates one of P4's machines: a FIFO single server whose mean service time \
         is 1 / P4 Table 3's one-host RR rate for the size ({}), jitter cv {}; the URI names one \
         of {} origins per host (what dh/lblc hash). Cells run {:.0} s; the rate counts answers \
         after a {:.0} s warm-up. Paper and sim columns are read from the simulated run of the \
         same scenario (folder `sim/`).",
        p.concurrency,
        if p.directors == 1 {
            "a director namespace".to_string()
        } else {
            format!("{} director namespaces behind a router (below)", p.directors)
        },
        m.director.name(),
        m.director.mode.name(),
        p.hosts.iter().chain(&p.per_host_hosts).max().unwrap_or(&0),
        s.sizes
            .iter()
            .zip(&s.rates)
            .map(|(z, r)| format!("{z}: {:.2} ms", 1e3 / r))
            .collect::<Vec<_>>()
            .join(", "),
        s.base.jitter_cv,
        s.origins_per_host,
        p.duration.as_secs_f64(),
        p.warmup.as_secs_f64(),
    )];
    for (alg, why) in &m.not_run {
        notes.push(format!("Not run with {}: {alg}: {why}.", m.director.name()));
    }
    let max = |f: &dyn Fn(&Cell) -> f64| m.cells.iter().map(f).fold(0.0f64, f64::max);
    notes.push(format!(
        "CPU (cores, highest over the cells): client {:.2}, director {:.2}, the hosts together \
         {:.2}; the whole machine was up to {:.0}% busy (it is shared with other work). The \
         hosts' busy fractions are emulated service time per second of the window, so a rate \
         with hosts near 100% busy is set by the emulated capacity, not by this machine.",
        max(&|c| c.cpu.client),
        max(&|c| c.cpu.director),
        max(&|c| c.cpu.hosts),
        100.0 * max(&|c| c.cpu.machine_busy),
    ));
    notes.push(directors_note(p, m));
    notes
}

/// How many directors, how they were reached, and each one's share of every cell.
fn directors_note(p: &RealParams, m: &Measured) -> String {
    if p.directors == 1 {
        return format!(
            "Directors: 1 (P4's cluster): the client reaches the one {} directly.",
            m.director.name()
        );
    }
    let cells: Vec<String> = m
        .cells
        .iter()
        .map(|c| {
            let shares = director_shares(c);
            if shares.is_empty() {
                format!("{} hosts {} {}: not measured", c.hosts, kind(c.case), c.alg)
            } else {
                format!(
                    "{} hosts {} {}: {} ({})",
                    c.hosts,
                    kind(c.case),
                    c.alg,
                    c.director_requests
                        .iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join(" / "),
                    shares
                        .iter()
                        .map(|x| format!("{:.1}%", 100.0 * x))
                        .collect::<Vec<_>>()
                        .join(" / ")
                )
            }
        })
        .collect();
    format!(
        "Directors: {}, each a {} with the same configuration in its own namespace, behind a \
         router namespace whose route to the virtual IP has one next hop per director \
         (kernel ECMP, `fib_multipath_hash_policy = 1`: the client's connections, each from its \
         own source port, spread by an L4 hash); a hub namespace forwards between the directors \
         and the hosts, and each director's connections to the hosts come from its own address, \
         so answers return through the director that owns the flow. Requests each director sent \
         to the hosts over the whole cell (its `/metrics` `netsched_balance_requests_total`), \
         and the shares: {}. The sim column is the simulation with the same number of \
         directors (`cluster.directors`); the directors' CPU is summed in the CPU note.",
        p.directors,
        m.director.name(),
        cells.join("; ")
    )
}

/// The ratios behind P4's findings (RR vs LC and DH on identical hosts; LC vs RR with per-host
/// sizes) at the largest cluster run, paper | sim | real, so the report says where they agree.
fn agreement(s: &Setup, m: &Measured, sim: &ExperimentOutput) -> Option<String> {
    let n = m.cells.iter().map(|c| c.hosts).max()?;
    let real = |case: Case, a: &str| {
        find(m, case, a, n)
            .map(|c| c.client.rate())
            .unwrap_or(f64::NAN)
    };
    let pap = |case: Case, a: &str| paper(sim, s, case, a, n).parse::<f64>().unwrap_or(f64::NAN);
    let simr = |case: Case, a: &str| sim_rate(sim, s, case, a, n);
    let f = |x: f64| {
        if x.is_finite() {
            format!("{x:.2}")
        } else {
            "—".into()
        }
    };
    let mut rows = Vec::new();
    let mut cases: Vec<Case> = (0..s.sizes.len()).map(Case::Same).collect();
    cases.push(Case::PerHost);
    for case in cases {
        for (num, den) in [("rr", "lc"), ("dh", "rr"), ("lc", "rr")] {
            let r = real(case, num) / real(case, den);
            if !r.is_finite() {
                continue;
            }
            rows.push(format!(
                "| {} | {num}/{den} | {} | {} | {} |",
                case_name(s, case),
                f(pap(case, num) / pap(case, den)),
                f(simr(case, num) / simr(case, den)),
                f(r)
            ));
        }
    }
    if rows.is_empty() {
        return None;
    }
    Some(format!(
        "Where paper, simulation and real cluster agree, at {n} hosts (ratios of requests/s):\n\n\
         | objects | ratio | P4 | sim | real |\n|---|---|---|---|---|\n{}",
        rows.join("\n")
    ))
}
