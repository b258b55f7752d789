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
    let e = cli::main_with(&["run", "lvs-cluster", "--real"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no real mode for lvs-cluster"), "{e}");
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
        csv.contains("5,packet_bytes=64 policy=static_rr | idle_pct,2,"),
        "{csv}"
    );
    assert!(dir.join("sweep.svg").exists() && dir.join("sweep.md").exists());
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
        "cost.late_signal_ns=0",
        "--set",
        "cost.decision_scan_counters_ns=0",
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
