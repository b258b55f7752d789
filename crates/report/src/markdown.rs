//! Markdown reports: one `report.md` per experiment (rendered from an [`ExperimentOutput`]) and
//! a combined index linking several experiments.

use crate::aggregate::{fmt_interval, fmt_num, Aggregate, Rule};
use crate::{Check, ExperimentOutput};
use std::fmt::Write as _;

/// Escape a table cell: `|` would split the cell, a newline would end the row.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// "✓" or "✗".
pub fn mark(passed: bool) -> &'static str {
    if passed {
        "✓"
    } else {
        "✗"
    }
}

/// The checks as a Markdown table (claim, verdict, measured detail).
pub fn checks_table(checks: &[Check]) -> String {
    let mut s = String::new();
    s.push_str("| | claim | measured |\n|---|---|---|\n");
    for c in checks {
        let _ = writeln!(
            s,
            "| {} | {} | {} |",
            mark(c.passed),
            cell(&c.claim),
            cell(&c.detail)
        );
    }
    s
}

/// Render one experiment's `report.md`.
/// `title`: e.g. "np-dispatch — dispatch policies on a multi-threaded network processor";
/// `paper`: the paper reference line.
pub fn render(out: &ExperimentOutput, title: &str, paper: &str) -> String {
    let r = &out.results;
    let mut s = String::new();
    let _ = writeln!(s, "# {title}\n");
    let _ = writeln!(s, "**Paper:** {paper}  ");
    let _ = writeln!(
        s,
        "**Mode:** {} · **seed:** {} · **netsched** {} (commit `{}`)\n",
        r.mode, r.seed, r.netsched_version, r.git_commit
    );
    let passed = out.checks.iter().filter(|c| c.passed).count();
    let _ = writeln!(s, "## Checks ({passed}/{} passed)\n", out.checks.len());
    if out.checks.is_empty() {
        s.push_str("(none)\n");
    } else {
        s.push_str(&checks_table(&out.checks));
    }
    s.push('\n');
    if !out.comparisons.is_empty() {
        s.push_str("## Paper | this run\n\n| quantity | paper | this run |\n|---|---|---|\n");
        for c in &out.comparisons {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                cell(&c.quantity),
                cell(&c.paper),
                cell(&c.ours)
            );
        }
        s.push('\n');
    }
    if !out.figures.is_empty() {
        s.push_str("## Figures\n\n");
        for f in &out.figures {
            let _ = writeln!(s, "### {}\n\n![{}]({})\n", f.title, cell(&f.title), f.file);
        }
    }
    if !out.notes.is_empty() {
        s.push_str("## Notes\n\n");
        for n in &out.notes {
            let _ = writeln!(s, "{}\n", n.trim_end());
        }
    }
    let _ = writeln!(
        s,
        "## Parameters\n\n```json\n{}\n```\n\nRaw numbers: [`results.json`](results.json).",
        serde_json::to_string_pretty(&r.params).unwrap_or_default()
    );
    s
}

/// The rule by which an aggregate decides its checks, as a paragraph for reports (the same text
/// as the header of [`crate::aggregate`], stated once here for readers of `report.md`).
pub fn aggregate_rule(noun: &str) -> String {
    format!(
        "**How checks are decided over {noun}s.** A check stated as `value op threshold` is \
         decided on its margin in each {noun} (value − threshold for ≥ and >, threshold − value \
         for ≤ and <): it passes when the mean margin over the {noun}s satisfies the comparison \
         (≥ 0, or > 0 for the strict ones) — the mean value against the mean threshold — and it \
         is *robust* when the whole 95% Student-t interval of the margin does. A yes/no check \
         passes only if it passed in every {noun}. \"{noun}s passed\" counts the {noun}s that \
         passed it on their own. Figures are mean ± half-width of the 95% interval \
         (t(0.975, n−1)·s/√n)."
    )
}

/// Render the `report.md` of several runs of one experiment (see [`crate::aggregate`]).
pub fn render_aggregate(a: &Aggregate, title: &str, paper: &str) -> String {
    let mut s = String::new();
    aggregate_header(&mut s, a, title, paper);
    aggregate_checks(&mut s, a);
    aggregate_comparisons(&mut s, a);
    aggregate_members(&mut s, a);
    aggregate_metrics(&mut s, a);
    aggregate_figures_notes_parameters(&mut s, a);
    s
}

/// Title, paper, mode, seeds, version, and the members that did not run.
fn aggregate_header(s: &mut String, a: &Aggregate, title: &str, paper: &str) {
    let noun = a.over.noun();
    let n = a.members.len();
    let _ = writeln!(s, "# {title}\n");
    let _ = writeln!(s, "**Paper:** {paper}  ");
    let mut seeds: Vec<String> = a.members.iter().map(|m| m.seed.to_string()).collect();
    seeds.dedup(); // repeats share one seed
    let _ = writeln!(
        s,
        "**Mode:** {} · **{n} {noun}(s)** (seed {}) · **netsched** {} (commit `{}`)\n",
        a.mode,
        if seeds.is_empty() {
            "—".to_string()
        } else {
            seeds.join(", ")
        },
        a.netsched_version,
        a.git_commit
    );
    if !a.failed.is_empty() {
        let _ = writeln!(s, "**{} {noun}(s) did not run:**\n", a.failed.len());
        for f in &a.failed {
            let _ = writeln!(s, "- {} (`{}/`): {}", f.label, f.folder, cell(&f.error));
        }
        s.push('\n');
    }
}

/// The checks decided over the members, with the rule that decides them.
fn aggregate_checks(s: &mut String, a: &Aggregate) {
    let noun = a.over.noun();
    let n = a.members.len();
    let passed = a.checks.iter().filter(|c| c.passed).count();
    let _ = writeln!(
        s,
        "## Checks ({passed}/{} passed over {n} {noun}s)\n",
        a.checks.len()
    );
    let _ = writeln!(s, "{}\n", aggregate_rule(noun));
    if a.checks.is_empty() {
        s.push_str("(none)\n");
    } else {
        let _ = writeln!(
            s,
            "| | claim | value (mean ± 95%) | op | threshold | robust | {noun}s passed |\n|---|---|---|---|---|---|---|"
        );
        for c in &a.checks {
            let (value, op, threshold) = match &c.evidence {
                Some(ev) => (
                    fmt_interval(&ev.value),
                    ev.op.symbol().to_string(),
                    fmt_interval(&ev.threshold),
                ),
                None => ("yes/no".into(), "—".into(), format!("every {noun}")),
            };
            let robust = robust_label(c);
            let _ = writeln!(
                s,
                "| {} | {} | {value} | {op} | {threshold} | {robust} | {}/{} |",
                mark(c.passed),
                cell(&c.claim),
                c.runs_passed,
                c.runs
            );
        }
    }
    s.push('\n');
}

/// Paper | this run: mean ± 95% half-width, and every member's own figure.
fn aggregate_comparisons(s: &mut String, a: &Aggregate) {
    let noun = a.over.noun();
    let n = a.members.len();
    if !a.comparisons.is_empty() {
        let _ = writeln!(
            s,
            "## Paper | this run\n\nThis run: mean ± 95% half-width over {n} {noun}(s); every {noun}'s own figure in the last column.\n\n| quantity | paper | this run | per {noun} |\n|---|---|---|---|"
        );
        for c in &a.comparisons {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                cell(&c.quantity),
                cell(&c.paper),
                cell(&c.ours),
                cell(&c.per_run.join(" · "))
            );
        }
        s.push('\n');
    }
}

/// The members, their checks and reports.
fn aggregate_members(s: &mut String, a: &Aggregate) {
    let noun = a.over.noun();
    let _ = writeln!(
        s,
        "## The {noun}s\n\n| {noun} | checks passed | report |\n|---|---|---|"
    );
    for m in &a.members {
        let _ = writeln!(
            s,
            "| {} | {} {}/{} | [{}/report.md]({}/report.md) |",
            m.label,
            mark(m.checks_passed == m.checks),
            m.checks_passed,
            m.checks,
            m.folder,
            m.folder
        );
    }
    s.push('\n');
}

/// Every run's metrics over the members: mean, interval, sd, range, spread.
fn aggregate_metrics(s: &mut String, a: &Aggregate) {
    let noun = a.over.noun();
    if !a.runs.is_empty() {
        let _ = writeln!(
            s,
            "## Metrics\n\nSpread: (max − min) / |mean| over the {noun}s.\n\n| run | metric | n | mean | ± 95% | sd | min | max | spread |\n|---|---|---|---|---|---|---|---|---|"
        );
        for r in &a.runs {
            let config = match &r.config {
                serde_json::Value::Object(m) => m
                    .iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => format!("{k}={s}"),
                        other => format!("{k}={other}"),
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            for (name, i) in &r.metrics {
                let spread = if i.mean != 0.0 {
                    format!("{:.1}%", 100.0 * (i.max - i.min) / i.mean.abs())
                } else {
                    "—".to_string()
                };
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {spread} |",
                    cell(&config),
                    cell(name),
                    i.n,
                    fmt_num(i.mean),
                    i.half_width.map(fmt_num).unwrap_or_else(|| "—".into()),
                    fmt_num(i.sd),
                    fmt_num(i.min),
                    fmt_num(i.max)
                );
            }
        }
        s.push('\n');
    }
}

/// The figures (the mean over the runs, or the first run's where they could not be
/// averaged), the notes, and the parameters.
fn aggregate_figures_notes_parameters(s: &mut String, a: &Aggregate) {
    let noun = a.over.noun();
    if !a.figures.is_empty() {
        let first = a.members.first().map(|m| m.label.as_str()).unwrap_or("");
        let n = a.members.len();
        let _ = writeln!(
            s,
            "## Figures\n\nEach chart shows the mean over the {n} {noun}(s), with error bars for the 95% interval of the mean where the {noun}s differ; a chart that could not be averaged shows {first} only, and says why.\n"
        );
        for f in &a.figures {
            let _ = writeln!(s, "### {}\n", f.title);
            if let Some(why) = a.first_run_figures.get(&f.file) {
                let _ = writeln!(s, "{first} only: {}\n", why.trim_end());
            }
            let _ = writeln!(s, "![{}]({})\n", cell(&f.title), f.file);
        }
    }
    if !a.notes.is_empty() {
        s.push_str("## Notes\n\n");
        for note in &a.notes {
            let _ = writeln!(s, "{}\n", note.trim_end());
        }
    }
    let _ = writeln!(
        s,
        "## Parameters\n\n```json\n{}\n```\n\nRaw numbers: [`results.json`](results.json) (this aggregate) and each {noun}'s folder.",
        serde_json::to_string_pretty(&a.params).unwrap_or_default()
    );
}

/// One experiment's line in the combined report.
#[derive(Debug, Clone)]
pub struct IndexEntry {
    pub name: String,
    pub paper: String,
    /// Folder relative to the combined report.
    pub folder: String,
    /// The experiment's checks, or the error that stopped it.
    pub outcome: Result<Vec<Check>, String>,
    pub seconds: f64,
}

/// The combined `report.md` linking every experiment's folder, with all checks.
pub fn render_index(title: &str, entries: &[IndexEntry]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {title}\n");
    s.push_str("| experiment | paper | checks | time (s) |\n|---|---|---|---|\n");
    for e in entries {
        let verdict = match &e.outcome {
            Ok(c) => {
                let p = c.iter().filter(|c| c.passed).count();
                format!("{} {p}/{}", mark(p == c.len()), c.len())
            }
            Err(_) => "✗ error".to_string(),
        };
        let _ = writeln!(
            s,
            "| [{}]({}/report.md) | {} | {} | {:.1} |",
            e.name,
            e.folder,
            cell(&e.paper),
            verdict,
            e.seconds
        );
    }
    s.push('\n');
    for e in entries {
        let _ = writeln!(s, "## [{}]({}/report.md)\n", e.name, e.folder);
        match &e.outcome {
            Ok(c) if c.is_empty() => s.push_str("(no checks)\n"),
            Ok(c) => s.push_str(&checks_table(c)),
            Err(msg) => {
                let _ = writeln!(s, "✗ **did not run:** {}", cell(msg));
            }
        }
        s.push('\n');
    }
    s
}

/// The robustness column: a claim whose whole 95% interval of the margin holds is robust;
/// a failed claim whose whole interval fails fails robustly; otherwise the verdict is within
/// the noise of the runs.
fn robust_label(c: &crate::aggregate::AggregateCheck) -> &'static str {
    match (c.rule, c.robust, &c.evidence) {
        (Rule::MeanMargin, Some(true), _) => "✓ robust",
        (Rule::MeanMargin, Some(false), Some(ev))
            if !c.passed && !crate::aggregate::margin_holds(ev.op, ev.margin.hi()) =>
        {
            "✗ fails throughout"
        }
        (Rule::MeanMargin, Some(false), _) => "✗ within noise",
        _ => "—",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Comparison, Figure, Results};

    fn output() -> ExperimentOutput {
        ExperimentOutput {
            results: Results::new("x", "sim", 7, serde_json::json!({"a": 1})),
            comparisons: vec![Comparison {
                quantity: "rate | up".into(),
                paper: "750".into(),
                ours: "741".into(),
            }],
            checks: vec![
                Check {
                    claim: "up ≥ 80%".into(),
                    passed: true,
                    detail: "741/750".into(),
                    evidence: None,
                },
                Check {
                    claim: "down ok".into(),
                    passed: false,
                    detail: "10".into(),
                    evidence: None,
                },
            ],
            figures: vec![Figure {
                title: "Rates".into(),
                file: "rates.svg".into(),
            }],
            notes: vec!["A note.".into()],
        }
    }

    #[test]
    fn report_has_every_section() {
        let md = render(&output(), "X", "P9");
        assert!(md.starts_with("# X\n"));
        assert!(md.contains("## Checks (1/2 passed)"));
        assert!(md.contains("| ✓ | up ≥ 80% | 741/750 |"));
        assert!(md.contains("| ✗ | down ok | 10 |"));
        assert!(md.contains("| rate \\| up | 750 | 741 |"));
        assert!(md.contains("![Rates](rates.svg)"));
        assert!(md.contains("A note."));
        assert!(md.contains("\"a\": 1"));
    }

    #[test]
    fn aggregate_report_shows_intervals_rule_and_counts() {
        use crate::aggregate::{aggregate, Member, Over};
        use crate::{Cmp, Run};
        let members: Vec<Member> = [0.78, 0.83, 0.85]
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut o = output();
                o.results.seed = i as u64 + 1;
                o.results.runs.push(Run {
                    config: serde_json::json!({"policy": "rr"}),
                    metrics: serde_json::json!({"share": v}),
                });
                o.comparisons[0].ours = format!("{:.2} kbit/s", v);
                o.checks
                    .push(Check::measured("share ≥ 0.8", *v, Cmp::Ge, 0.8, "x"));
                Member {
                    label: format!("seed {}", i + 1),
                    folder: format!("seed-{}", i + 1),
                    output: o,
                }
            })
            .collect();
        let a = aggregate(Over::Seeds, &members, vec![]);
        let md = render_aggregate(&a, "X", "P9");
        assert!(md.contains("**3 seed(s)** (seed 1, 2, 3)"), "{md}");
        assert!(md.contains("## Checks (2/3 passed over 3 seeds)"), "{md}");
        assert!(md.contains("How checks are decided over seeds"), "{md}");
        // mean 0.82, sd 0.0361, hw 4.3027·0.0361/√3 = 0.0896
        assert!(
            md.contains("| ✓ | share ≥ 0.8 | 0.82 ± 0.08957 | ≥ | 0.8 | ✗ within noise | 2/3 |"),
            "{md}"
        );
        assert!(
            md.contains("| ✓ | up ≥ 80% | yes/no | — | every seed | — | 3/3 |"),
            "{md}"
        );
        assert!(
            md.contains("| ✗ | down ok | yes/no | — | every seed | — | 0/3 |"),
            "{md}"
        );
        assert!(md.contains("| rate \\| up | 750 | 0.82 ± 0.09 kbit/s | 0.78 kbit/s · 0.83 kbit/s · 0.85 kbit/s |"), "{md}");
        assert!(md.contains("[seed-2/report.md](seed-2/report.md)"), "{md}");
        // spread (0.85 − 0.78) / 0.82 = 8.5%
        assert!(
            md.contains(
                "| policy=rr | share | 3 | 0.82 | 0.08957 | 0.03606 | 0.78 | 0.85 | 8.5% |"
            ),
            "{md}"
        );
        assert!(md.contains("![Rates](seed-1/rates.svg)"), "{md}");
    }

    #[test]
    fn a_claim_failing_over_its_whole_interval_is_not_called_noise() {
        use crate::aggregate::{aggregate, Member, Over};
        use crate::Cmp;
        let members: Vec<Member> = [0.50, 0.52, 0.51]
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut o = output();
                o.checks
                    .push(Check::measured("share ≥ 0.8", *v, Cmp::Ge, 0.8, "x"));
                Member {
                    label: format!("seed {}", i + 1),
                    folder: format!("seed-{}", i + 1),
                    output: o,
                }
            })
            .collect();
        let md = render_aggregate(&aggregate(Over::Seeds, &members, vec![]), "X", "P9");
        let row = md.lines().find(|l| l.contains("share ≥ 0.8")).unwrap();
        assert!(row.contains("✗ fails throughout"), "{row}");
        assert!(!row.contains("within noise"), "{row}");
    }

    #[test]
    fn index_links_folders_and_shows_errors() {
        let e = vec![
            IndexEntry {
                name: "x".into(),
                paper: "P9".into(),
                folder: "x".into(),
                outcome: Ok(output().checks),
                seconds: 1.25,
            },
            IndexEntry {
                name: "y".into(),
                paper: "P8".into(),
                folder: "y".into(),
                outcome: Err("boom".into()),
                seconds: 0.0,
            },
        ];
        let md = render_index("All", &e);
        assert!(md.contains("| [x](x/report.md) | P9 | ✗ 1/2 | 1.2 |") || md.contains("| 1.3 |"));
        assert!(md.contains("did not run:** boom"));
    }
}
