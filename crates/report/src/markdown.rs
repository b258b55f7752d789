//! Markdown reports: one `report.md` per experiment (rendered from an [`ExperimentOutput`]) and
//! a combined index linking several experiments.

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
