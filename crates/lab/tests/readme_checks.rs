//! README.md's table of the papers' claims says, per paper, how many of the lab's checks pass
//! in simulation ("5/5 at every seed"). This test runs each experiment's embedded scenario at
//! two seeds and holds the README to what the runs print (`checks N/M`), so the README cannot
//! again say 4/4 where a run says 5/5.

#[path = "common_lab.rs"]
mod common_lab;
use common_lab::*;
use netsched_lab::experiments;

/// The README's rows: (paper tag such as "P3", checks passed, checks in all).
fn readme_counts() -> Vec<(String, usize, usize)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut rows = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| P") else {
            continue;
        };
        let Some(at) = rest.find(" at every seed") else {
            continue;
        };
        let tag = format!("P{}", &rest[..1]);
        let count = rest[..at].rsplit(['|', ' ']).next().unwrap().trim();
        let (a, b) = count
            .split_once('/')
            .unwrap_or_else(|| panic!("README row {line:?}: no N/M before \"at every seed\""));
        rows.push((tag, a.parse().unwrap(), b.parse().unwrap()));
    }
    rows
}

#[test]
fn the_readme_s_check_counts_are_the_runs() {
    let rows = readme_counts();
    assert_eq!(rows.len(), experiments::ALL.len(), "{rows:?}");
    let mut wrong = Vec::new();
    for (tag, passed, all) in &rows {
        let exp = experiments::ALL
            .iter()
            .find(|e| e.paper.starts_with(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("README names {tag}, no experiment has it"));
        for seed in [1, 2] {
            let o = run(exp.name, &[], seed, &format!("readme-{}-{seed}", exp.name));
            let got = (o.checks.iter().filter(|c| c.passed).count(), o.checks.len());
            if got != (*passed, *all) {
                wrong.push(format!(
                    "{tag} {} seed {seed}: README {passed}/{all}, run {}/{}",
                    exp.name, got.0, got.1
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
