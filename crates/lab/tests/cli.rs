//! The `netsched lab` command line: list, clear errors for bad input, determinism, sweeps.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;
use netsched_lab::cli;

#[test]
fn list_names_every_experiment_with_its_paper() {
    let text = cli::list_text();
    for (name, paper) in [
        ("percentile-web", "P0"),
        ("np-dispatch", "P1"),
        ("vm-delay", "P2"),
        ("adsl-ack", "P3"),
        ("lvs-cluster", "P4"),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        assert!(line.contains(paper), "{line}");
    }
    cli::main_with(&["list"]).unwrap();
}

#[test]
fn bad_set_key_is_a_clear_error_listing_valid_keys() {
    let out = temp_dir("badkey");
    let e = cli::main_with(&[
        "run",
        "np-dispatch",
        "--set",
        "cost.rulez=5",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"cost.rulez\""), "{e}");
    assert!(
        e.contains("cost.rules") && e.contains("traffic.packet_sizes"),
        "{e}"
    );
    // Nothing was run.
    assert!(!out.join("results.json").exists());
}

#[test]
fn bad_value_type_and_unknown_experiment_are_clear_errors() {
    let e = cli::main_with(&["run", "vm-delay", "--set", "backend.batch=lots"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("backend.batch") && e.contains("integer"), "{e}");
    let e = cli::main_with(&["run", "no-such"]).unwrap_err().to_string();
    assert!(e.contains("no-such") && e.contains("np-dispatch"), "{e}");
    let e = cli::main_with(&["run", "np-dispatch", "--scenario", "/nonexistent/x.toml"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/x.toml"), "{e}");
    let e = cli::main_with(&["run", "np-dispatch", "--set", "traffic.packets=0"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("traffic.packets"), "{e}");
}

#[test]
fn same_seed_gives_byte_identical_results_except_the_command_line() {
    for (name, sets) in [
        ("np-dispatch", vec!["traffic.packets=1500"]),
        ("vm-delay", vec!["run.duration=5s"]),
        (
            "lvs-cluster",
            vec!["client.requests=1500", "cluster.hosts=[1,5]"],
        ),
    ] {
        let a = temp_dir(&format!("det-a-{name}"));
        let b = temp_dir(&format!("det-b-{name}"));
        for dir in [&a, &b] {
            let mut args = vec!["run", name, "--seed", "7", "--out", dir.to_str().unwrap()];
            for s in &sets {
                args.push("--set");
                args.push(s);
            }
            cli::main_with(&args).unwrap();
        }
        assert_eq!(
            results_without_command_line(&a),
            results_without_command_line(&b),
            "{name}"
        );
        // Files byte-identical too (the command lines differ only in the --out folder).
        let ra = std::fs::read_to_string(a.join("results.json")).unwrap();
        let rb = std::fs::read_to_string(b.join("results.json")).unwrap();
        assert_eq!(
            ra.replace(a.to_str().unwrap(), "X"),
            rb.replace(b.to_str().unwrap(), "X"),
            "{name}"
        );
        let v: serde_json::Value = serde_json::from_str(&ra).unwrap();
        assert_eq!(v["mode"], "sim");
        assert_eq!(v["seed"], 7);
        assert!(a.join("report.md").exists());
        // A different seed changes the numbers.
        let c = temp_dir(&format!("det-c-{name}"));
        let mut args = vec!["run", name, "--seed", "8", "--out", c.to_str().unwrap()];
        for s in &sets {
            args.push("--set");
            args.push(s);
        }
        cli::main_with(&args).unwrap();
        assert_ne!(
            results_without_command_line(&a)["runs"],
            results_without_command_line(&c)["runs"],
            "{name}"
        );
    }
}

#[test]
fn report_embeds_figures_and_checks() {
    let dir = temp_dir("report");
    cli::main_with(&[
        "run",
        "np-dispatch",
        "--set",
        "traffic.packets=800",
        "--out",
        dir.to_str().unwrap(),
    ])
    .unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("![Engine idle time"), "{md}");
    assert!(md.contains("## Checks"));
    assert!(md.contains("P1"));
    for f in ["idle.svg", "rate.svg", "dispatch.csv", "results.json"] {
        assert!(dir.join(f).exists(), "{f}");
    }
}

#[test]
fn sweep_runs_the_grid_and_skips_what_exists() {
    let dir = temp_dir("sweep");
    let args = [
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5,40",
        "--seeds",
        "2",
        "--set",
        "traffic.packets=300",
        "--set",
        "traffic.packet_sizes=[64,256]",
        "--metric",
        "idle_pct",
        "--out",
        dir.to_str().unwrap(),
    ];
    cli::main_with(&args).unwrap();
    let runs = std::fs::read_dir(dir.join("runs")).unwrap().count();
    assert_eq!(runs, 4, "2 grid points × 2 seeds");
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    assert!(
        csv.starts_with("cost.rules,metric,n,mean,std,min,max\n"),
        "{csv}"
    );
    assert!(
        csv.contains("5,packet_bytes=64 policy=static_rr | idle_percent,2,"),
        "{csv}"
    );
    assert!(dir.join("sweep.svg").exists() && dir.join("sweep.md").exists());
    // One chart per metric: the y axis names the metric and its unit, the ticks carry
    // numbers, and the 2 seeds give a 95% interval per grid point as error bars.
    let svg = std::fs::read_to_string(dir.join("sweep.svg")).unwrap();
    assert!(svg.contains(">idle (%)</text>"), "{svg}");
    assert!(!svg.contains(">metric</text>"), "{svg}");
    let tick_labels = svg
        .lines()
        .filter(|l| l.contains(r#"text-anchor="end""#))
        .filter(|l| {
            let t = l.split('>').nth(1).unwrap_or("").trim_end_matches("</text");
            t.parse::<f64>().is_ok()
        })
        .count();
    assert!(tick_labels >= 3, "{svg}");
    assert!(svg.contains(">95% interval over 2 seeds</text>"), "{svg}");
    let md = std::fs::read_to_string(dir.join("sweep.md")).unwrap();
    assert!(md.contains("(sweep.svg)"), "{md}");
    // Progress lines go to stderr only, never into the results.
    for f in ["sweep.md", "sweep.csv", "runs.json"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.contains("progress") && !text.contains('\x1b'), "{f}");
    }
    // Second time: every run is found and skipped; the table is identical.
    let before = std::fs::metadata(dir.join("runs"))
        .unwrap()
        .modified()
        .unwrap();
    cli::main_with(&args).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("sweep.csv")).unwrap(), csv);
    assert_eq!(std::fs::read_dir(dir.join("runs")).unwrap().count(), 4);
    let _ = before;
    // A bad grid key is an error naming it.
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.nope=1,2",
        "--out",
        dir.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("cost.nope"), "{e}");
}

#[test]
fn strict_turns_a_failed_check_into_an_error() {
    // Without decision cost or late mail, modified FCFS is no longer the idlest policy, so
    // that check fails: reported (exit 0) normally, an error with --strict.
    let dir = temp_dir("strict");
    let base = [
        "run",
        "np-dispatch",
        "--set",
        "cost.late_signal=0ns",
        "--set",
        "cost.decision_scan_counters=0ns",
        "--set",
        "traffic.packets=800",
        "--out",
        dir.to_str().unwrap(),
    ];
    cli::main_with(&base).unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("| ✗ | Modified FCFS has the most idle time"),
        "{md}"
    );
    let mut strict = base.to_vec();
    strict.push("--strict");
    let e = cli::main_with(&strict).unwrap_err().to_string();
    assert!(e.contains("--strict") && e.contains("Modified FCFS"), "{e}");
}

#[test]
fn combined_report_links_every_experiment_and_its_checks() {
    let dir = temp_dir("all");
    let exps: Vec<_> = ["np-dispatch", "vm-delay"]
        .iter()
        .map(|n| netsched_lab::experiments::find(n).unwrap())
        .collect();
    let entries = netsched_lab::runner::run_all(&exps, 3, &dir).unwrap();
    assert_eq!(entries.len(), 2);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("[np-dispatch](np-dispatch/report.md)"), "{md}");
    assert!(md.contains("[vm-delay](vm-delay/report.md)"), "{md}");
    assert!(
        md.contains("Static RR puts SOPs on exactly N/gcd(N, b) threads"),
        "{md}"
    );
    for n in ["np-dispatch", "vm-delay"] {
        assert!(dir.join(n).join("results.json").exists(), "{n}");
        assert!(dir.join(n).join("report.md").exists(), "{n}");
    }
}

// ---- several seeds / repeats (#11) ----

fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn seeds_run_in_subfolders_with_an_aggregate_at_the_top() {
    let out = temp_dir("seeds").join("np3"); // not there yet: the run creates it
    cli::main_with(&[
        "run",
        "np-dispatch",
        "--seeds",
        "3",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap();
    // Each seed's full output in its own folder.
    let per_seed: Vec<serde_json::Value> = (1..=3)
        .map(|s| {
            let d = out.join(format!("seed-{s}"));
            for f in ["results.json", "report.md", "idle.svg", "dispatch.csv"] {
                assert!(d.join(f).exists(), "seed {s}: {f}");
            }
            let r = read_json(&d.join("results.json"));
            assert_eq!(r["seed"], s);
            r
        })
        .collect();
    // The aggregate: every numeric metric as a mean with a Student-t interval over the seeds.
    let agg: netsched_report::aggregate::Aggregate =
        serde_json::from_value(read_json(&out.join("results.json"))).unwrap();
    assert_eq!(agg.kind, "aggregate");
    assert_eq!(agg.over, netsched_report::aggregate::Over::Seeds);
    assert_eq!(
        agg.members.iter().map(|m| m.seed).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert!(agg.failed.is_empty());
    let runs = per_seed[0]["runs"].as_array().unwrap();
    assert_eq!(agg.runs.len(), runs.len());
    let mut checked = 0;
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(agg.runs[i].config, run["config"]);
        for (name, v) in run["metrics"].as_object().unwrap() {
            let Some(_) = v.as_f64() else { continue };
            let xs: Vec<f64> = per_seed
                .iter()
                .map(|r| r["runs"][i]["metrics"][name].as_f64().unwrap())
                .collect();
            let m = agg.runs[i].metrics[name.as_str()];
            let mean = xs.iter().sum::<f64>() / 3.0;
            let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
            // A whole-unit metric (`_ns`) is rounded in each seed's file and in the
            // aggregate's: half a unit each.
            let whole = matches!(netsched_util::json_units::unit_of(name), Some((_, true)));
            let rounding = if whole { 1.0 } else { 0.0 };
            assert_eq!(m.n, 3, "{name}");
            assert!(
                (m.mean - mean).abs() <= 1e-9 * mean.abs().max(1.0) + rounding,
                "{name}"
            );
            // t(0.975, 2) = 4.3027; the seeds' rounding moves the sd by up to half a unit.
            let hw = m.half_width.unwrap();
            assert!(
                (hw - 4.302_653 * sd / 3f64.sqrt()).abs()
                    <= 1e-5 * hw.max(1.0) + rounding * 4.302_653,
                "{name}"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} metrics compared");
    // Every check counted over the three seeds.
    assert!(!agg.checks.is_empty());
    for c in &agg.checks {
        assert_eq!(c.runs, 3, "{}", c.claim);
        assert!(c.runs_passed <= 3);
        if c.evidence.is_none() {
            assert_eq!(c.passed, c.runs_passed == 3, "{}", c.claim);
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("**3 seed(s)** (seed 1, 2, 3)"), "{md}");
    assert!(md.contains("How checks are decided over seeds"), "{md}");
    assert!(
        md.contains(" ± "),
        "intervals in the paper | this run table:\n{md}"
    );
    assert!(md.contains("[seed-3/report.md](seed-3/report.md)"), "{md}");
    assert!(
        md.contains("![Engine idle time"),
        "figures of the first seed:\n{md}"
    );
}

#[test]
fn seeds_start_at_seed() {
    let out = temp_dir("seeds-from");
    cli::main_with(&[
        "run",
        "np-dispatch",
        "--seed",
        "5",
        "--seeds",
        "2",
        "--set",
        "traffic.packets=300",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap();
    assert!(out.join("seed-5/results.json").exists() && out.join("seed-6/results.json").exists());
    assert!(!out.join("seed-1").exists() && !out.join("seed-7").exists());
}

#[test]
fn repeats_aggregate_identical_runs_with_zero_spread() {
    // The repeat path (used with --real) on the simulator: the same seed gives the same
    // numbers, so every interval has zero width and every repeat is listed.
    let out = temp_dir("repeat").join("r");
    let exp = netsched_lab::experiments::find("np-dispatch").unwrap();
    let params = netsched_lab::runner::scenario_params(
        "np-dispatch",
        None,
        &["traffic.packets=300".to_string()],
    )
    .unwrap();
    let agg = netsched_lab::repeat::run(&netsched_lab::repeat::Plan {
        exp,
        params,
        over: netsched_report::aggregate::Over::Repeats,
        seeds: vec![4, 4],
        out: out.clone(),
        real: false,
        quick: false,
    })
    .unwrap();
    assert_eq!(agg.members.len(), 2);
    assert!(out.join("repeat-1/results.json").exists() && out.join("repeat-2/report.md").exists());
    for r in &agg.runs {
        for (name, i) in &r.metrics {
            assert_eq!(i.half_width, Some(0.0), "{name}");
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**2 repeat(s)**") && md.contains("repeats passed"),
        "{md}"
    );
    // A CLI repeat of a simulated run is refused (it would only copy the same numbers).
    let e = cli::main_with(&["run", "np-dispatch", "--repeat", "2"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--repeat 2") && e.contains("--seeds"), "{e}");
    let e = cli::main_with(&["run", "adsl-ack", "--real", "--repeat", "101"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--repeat 101") && e.contains("100"), "{e}");
}

#[test]
fn a_series_that_cannot_run_leaves_no_folder() {
    let out = temp_dir("series-fail").join("new");
    let e = cli::main_with(&[
        "run",
        "np-dispatch",
        "--seeds",
        "2",
        "--set",
        "traffic.packets=0",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("traffic.packets") && e.contains("no seed completed"),
        "{e}"
    );
    assert!(!out.exists(), "{} left behind", out.display());
}

#[test]
fn all_experiments_over_seeds_write_an_index_of_aggregates() {
    let dir = temp_dir("all-seeds");
    let exps: Vec<_> = ["np-dispatch", "vm-delay"]
        .iter()
        .map(|n| netsched_lab::experiments::find(n).unwrap())
        .collect();
    let entries = netsched_lab::repeat::run_all(&exps, &[1, 2], &dir).unwrap();
    assert_eq!(entries.len(), 2);
    for (e, n) in entries.iter().zip(["np-dispatch", "vm-delay"]) {
        let checks = e.outcome.as_ref().unwrap();
        assert!(!checks.is_empty(), "{n}");
        assert!(
            checks[0].detail.contains("/2 seeds passed"),
            "{}",
            checks[0].detail
        );
        assert!(dir.join(n).join("seed-1/results.json").exists(), "{n}");
        assert!(dir.join(n).join("seed-2/results.json").exists(), "{n}");
        assert_eq!(
            read_json(&dir.join(n).join("results.json"))["kind"],
            "aggregate"
        );
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("2 seeds (1..2)") && md.contains("[vm-delay](vm-delay/report.md)"),
        "{md}"
    );
    let e = cli::main_with(&["--seeds", "0"]).unwrap_err().to_string();
    assert!(e.contains("--seeds 0"), "{e}");
}

// ---- bounded inputs (#10) ----

#[test]
fn sweep_and_run_counts_are_bounded_before_anything_runs() {
    let dir = temp_dir("bounds");
    let out = dir.join("sweep");
    let t = std::time::Instant::now();
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5,40",
        "--seeds",
        "100000000",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("--seeds 100000000") && e.contains("1000"), "{e}");
    let many: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    let grid = format!("cost.rules={}", many.join(","));
    let e = cli::main_with(&["sweep", "np-dispatch", "--grid", &grid])
        .unwrap_err()
        .to_string();
    assert!(e.contains("1001 values") && e.contains("1000"), "{e}");
    let big: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let grid = format!("cost.rules={}", big.join(","));
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        &grid,
        "--grid",
        &grid.replace("cost.rules", "cost.eop"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("= 120000 runs") && e.contains("10000"), "{e}");
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5",
        "--jobs",
        "0",
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("--jobs 0"), "{e}");
    let e = cli::main_with(&["run", "np-dispatch", "--seeds", "100000000"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--seeds 100000000"), "{e}");
    // A grid value out of the experiment's bounds: refused with its grid point, before the
    // other points run or a folder is made.
    let e = cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5,-1",
        "--out",
        out.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("grid point cost.rules=-1") && e.contains("0..=1e9"),
        "{e}"
    );
    assert!(!out.exists());
    assert!(
        t.elapsed().as_secs() < 60,
        "refusals must not build the runs first"
    );
}

#[test]
fn scenario_files_are_bounded_regular_and_not_empty() {
    let dir = temp_dir("scenario-files");
    // A device: refused at once, not read (it never ends).
    let e = cli::main_with(&["run", "adsl-ack", "--scenario", "/dev/zero"])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/dev/zero") && e.contains("not a regular file"),
        "{e}"
    );
    // A folder.
    let e = cli::main_with(&["run", "adsl-ack", "--scenario", dir.to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("a folder"), "{e}");
    // Over the size bound.
    let big = dir.join("big.toml");
    std::fs::write(&big, "# x\n".repeat(300_000)).unwrap();
    let e = cli::main_with(&["run", "np-dispatch", "--scenario", big.to_str().unwrap()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("1200000 bytes") && e.contains("1048576"), "{e}");
    // Empty (or comments only): refused by all five alike, naming the file.
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "# nothing here\n").unwrap();
    for name in [
        "percentile-web",
        "np-dispatch",
        "vm-delay",
        "adsl-ack",
        "lvs-cluster",
    ] {
        let out = dir.join(format!("out-{name}"));
        let e = cli::main_with(&[
            "run",
            name,
            "--scenario",
            empty.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("empty.toml") && e.contains("no keys"),
            "{name}: {e}"
        );
        assert!(!out.exists(), "{name}");
    }
    // Another experiment's scenario (no top-level key in common).
    let other = dir.join("lvs.toml");
    std::fs::write(
        &other,
        netsched_lab::scenario::embedded("lvs-cluster").unwrap(),
    )
    .unwrap();
    let e = cli::main_with(&["run", "np-dispatch", "--scenario", other.to_str().unwrap()])
        .unwrap_err()
        .to_string();
    // Refused either by the loader (no top-level key in common) or, when the two share a
    // generic table such as `sensitivity`, by the typed scenario (`deny_unknown_fields`); either
    // way the message names the experiment and a key of the foreign file.
    assert!(
        e.contains("np-dispatch") && (e.contains("cluster") || e.contains("client")),
        "{e}"
    );
}

#[test]
fn a_run_that_fails_validation_leaves_no_new_folder_and_keeps_an_old_one() {
    let dir = temp_dir("fail-folder");
    let new = dir.join("a/b");
    let e = cli::main_with(&[
        "run",
        "np-dispatch",
        "--set",
        "traffic.packets=0",
        "--out",
        new.to_str().unwrap(),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("traffic.packets"), "{e}");
    assert!(
        !dir.join("a").exists(),
        "created folders are removed on failure"
    );
    let old = dir.join("old");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("keep.txt"), "mine").unwrap();
    cli::main_with(&[
        "run",
        "np-dispatch",
        "--set",
        "traffic.packets=0",
        "--out",
        old.to_str().unwrap(),
    ])
    .unwrap_err();
    assert_eq!(
        std::fs::read_to_string(old.join("keep.txt")).unwrap(),
        "mine"
    );
}
