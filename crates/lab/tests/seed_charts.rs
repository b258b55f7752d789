//! `netsched lab run NAME --seeds K`: the report's charts are the mean over the K seeds with
//! the 95% interval of the mean as error bars (netsched_report::chart_mean), its tables mean
//! ± interval; with one seed the run's own charts, without error bars.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;
use netsched_lab::cli;

fn error_bars(svg: &str) -> usize {
    svg.matches("class=\"error-bar\"").count()
}

#[test]
fn three_seeds_draw_the_mean_with_error_bars_and_one_seed_draws_none() {
    let dir = temp_dir("seed-charts");
    let out3 = dir.join("three");
    let small = ["--set", "traffic.packets=300"];
    let mut args = vec![
        "run",
        "np-dispatch",
        "--seeds",
        "3",
        "--out",
        out3.to_str().unwrap(),
    ];
    args.extend(small);
    cli::main_with(&args).unwrap();
    let agg: netsched_report::aggregate::Aggregate =
        serde_json::from_str(&std::fs::read_to_string(out3.join("results.json")).unwrap()).unwrap();
    assert!(!agg.figures.is_empty());
    assert!(
        agg.first_run_figures.is_empty(),
        "charts not averaged: {:?}",
        agg.first_run_figures
    );
    let md = std::fs::read_to_string(out3.join("report.md")).unwrap();
    for f in &agg.figures {
        // Drawn at the top from the three seeds' chart data, each seed's own chart kept.
        assert!(!f.file.contains('/'), "{}", f.file);
        assert!(md.contains(&format!("]({})", f.file)), "{md}");
        let svg = std::fs::read_to_string(out3.join(&f.file)).unwrap();
        assert!(svg.contains("mean of 3 seeds"), "{svg}");
        for s in 1..=3 {
            let own = out3.join(format!("seed-{s}")).join(&f.file);
            assert!(own.exists() && netsched_report::chart_data::load(&own).is_ok());
        }
    }
    // The engine idle time differs between seeds: its bars carry error bars, and the legend
    // says what they are.
    let idle = std::fs::read_to_string(out3.join("idle.svg")).unwrap();
    assert!(error_bars(&idle) >= 2, "{idle}");
    assert!(idle.contains(">95% interval over 3 seeds</text>"), "{idle}");
    assert!(md.contains(" ± "), "{md}");
    assert!(md.contains("mean over the 3 seed(s)"), "{md}");

    let out1 = dir.join("one");
    let mut args = vec![
        "run",
        "np-dispatch",
        "--seeds",
        "1",
        "--out",
        out1.to_str().unwrap(),
    ];
    args.extend(small);
    cli::main_with(&args).unwrap();
    let idle = std::fs::read_to_string(out1.join("idle.svg")).unwrap();
    assert_eq!(error_bars(&idle), 0, "{idle}");
    assert!(!idle.contains("95% interval"), "{idle}");
    let md = std::fs::read_to_string(out1.join("report.md")).unwrap();
    assert!(
        !md.contains("95% interval") && !md.contains("mean over the"),
        "{md}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
