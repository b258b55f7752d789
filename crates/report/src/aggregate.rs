//! Several runs of one experiment (seeds, or repeats of a real run) combined into one result:
//! every metric as a mean with a 95% interval, the "paper | this run" table as mean ±
//! half-width, and every check decided across the runs. Works on [`ExperimentOutput`]s alone,
//! so no experiment needs to know it is being repeated.
//!
//! **The rule for checks.**
//! - A check with [`Evidence`] (`value op threshold`) is decided on its *margin* per run —
//!   `value − threshold` for ≥ and >, `threshold − value` for ≤ and < — so a threshold that is
//!   itself measured (e.g. "0.8 × the other rate") is compared pairwise within each run. It
//!   **passes** when the mean margin satisfies the comparison against 0 (≥ 0 for ≥ and ≤, > 0
//!   for > and <), i.e. when the mean value satisfies it against the mean threshold. It is
//!   **robust** when the whole 95% interval of the margin does (lower end ≥ 0, resp. > 0):
//!   the claim holds beyond seed-to-seed noise. With one run, robustness is unknown.
//! - A check without evidence (a yes/no verdict), or whose runs disagree on the comparison,
//!   passes only if it passed in **every** run.
//! - Either way the result says how many runs passed it on their own.
//!
//! Runs that did not complete are not counted; they are listed with their errors.
//!
//! Checks are matched across runs by their claim with the numbers in it masked, then by order
//! (the n-th check with that wording); comparisons by quantity, then by order; metrics by the
//! run's `config` and the metric's dotted path (arrays — series, samples — are not metrics).

use crate::stats::{self, Interval};
use crate::{Cmp, ExperimentOutput, Figure};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the runs differ in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Over {
    /// Simulated runs with different seeds.
    Seeds,
    /// Repeated runs of the same configuration (real runs: the machine is the noise).
    Repeats,
}

impl Over {
    /// "seed" or "repeat".
    pub fn noun(self) -> &'static str {
        match self {
            Over::Seeds => "seed",
            Over::Repeats => "repeat",
        }
    }
}

/// One completed run handed to [`aggregate`].
#[derive(Debug, Clone)]
pub struct Member {
    /// "seed 3", "repeat 2".
    pub label: String,
    /// Its folder relative to the aggregate's folder (`seed-3`).
    pub folder: String,
    pub output: ExperimentOutput,
}

/// A run that did not complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub label: String,
    pub folder: String,
    pub error: String,
}

/// A completed run as listed in the aggregate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSummary {
    pub label: String,
    pub folder: String,
    pub seed: u64,
    pub checks_passed: usize,
    pub checks: usize,
}

/// One run configuration's metrics across runs: dotted metric path → interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateRun {
    pub config: Value,
    pub metrics: BTreeMap<String, Interval>,
}

/// One "paper | this run" row across runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateComparison {
    pub quantity: String,
    pub paper: String,
    /// Each number of the runs' text as `mean ± half-width` (decimals of the first run), or
    /// the runs' texts joined with " / " when they do not share one wording.
    pub ours: String,
    /// Every run's own text, in run order.
    pub per_run: Vec<String>,
}

/// How an aggregate check was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// On the mean margin of `value op threshold` (see the module header).
    MeanMargin,
    /// Passed in every run.
    EveryRun,
}

/// A numeric check across runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateEvidence {
    pub op: Cmp,
    pub value: Interval,
    pub threshold: Interval,
    /// `value − threshold` (≥, >) or `threshold − value` (≤, <) per run: ≥ 0 (> 0) means it holds.
    pub margin: Interval,
}

/// One check across runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateCheck {
    pub claim: String,
    pub passed: bool,
    pub rule: Rule,
    /// The whole 95% interval of the margin satisfies the claim; `None` when not decidable
    /// (one run, or a yes/no check).
    pub robust: Option<bool>,
    /// Runs that passed it on their own, out of `runs`.
    pub runs_passed: usize,
    pub runs: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<AggregateEvidence>,
    /// Each run's detail text, in run order.
    pub details: Vec<String>,
}

impl AggregateCheck {
    /// One line for tables: "mean 2.1 ± 0.3 ≥ 2 (robust) · 3/3 seeds".
    pub fn summary(&self, over: Over) -> String {
        let runs = format!("{}/{} {}s passed", self.runs_passed, self.runs, over.noun());
        match &self.evidence {
            Some(ev) => {
                let robust = match self.robust {
                    Some(true) => "robust",
                    Some(false) => "not robust",
                    None => "robustness unknown with one run",
                };
                format!(
                    "mean {} {} {} ({robust}) · {runs}",
                    fmt_interval(&ev.value),
                    ev.op.symbol(),
                    fmt_num(ev.threshold.mean)
                )
            }
            None => format!("{runs} (must pass in every {})", over.noun()),
        }
    }
}

/// Several runs of one experiment, combined: the aggregate `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    /// Always "aggregate" (tells this document from a single run's `results.json`).
    pub kind: String,
    pub over: Over,
    pub experiment: String,
    pub mode: String,
    pub params: Value,
    pub members: Vec<MemberSummary>,
    pub failed: Vec<Failure>,
    pub runs: Vec<AggregateRun>,
    pub comparisons: Vec<AggregateComparison>,
    pub checks: Vec<AggregateCheck>,
    /// The figures, with their paths relative to the aggregate's folder: each the mean over
    /// the runs with its 95% interval when drawn so ([`crate::chart_mean`]), else the first
    /// run's.
    pub figures: Vec<Figure>,
    /// The figures that are the first run's only (their file), and why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub first_run_figures: BTreeMap<String, String>,
    /// The first run's notes.
    pub notes: Vec<String>,
    pub netsched_version: String,
    pub git_commit: String,
    pub command_line: Vec<String>,
}

impl Aggregate {
    /// Write `results.json` into `dir` (created if missing), the metrics named and converted
    /// by the JSON unit rule ([`crate::lab_units`]).
    pub fn write(&self, dir: &std::path::Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("results.json");
        let mut doc = serde_json::to_value(self)?;
        if let Some(runs) = doc.get_mut("runs").and_then(Value::as_array_mut) {
            for run in runs {
                if let Some(m) = run.get_mut("metrics") {
                    *m = crate::lab_units::intervals_to_rule(m);
                }
            }
        }
        let text = serde_json::to_string_pretty(&doc)?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
    }

    /// The aggregate checks as plain [`crate::Check`]s (for an index of several experiments).
    pub fn as_checks(&self) -> Vec<crate::Check> {
        self.checks
            .iter()
            .map(|c| crate::Check::new(c.claim.clone(), c.passed, c.summary(self.over)))
            .collect()
    }
}

/// Combine the completed runs `members` (in run order) and the `failed` ones. `members` may be
/// empty (every run failed): the result then has no runs, comparisons or checks.
pub fn aggregate(over: Over, members: &[Member], failed: Vec<Failure>) -> Aggregate {
    let first = members.first().map(|m| &m.output.results);
    Aggregate {
        kind: "aggregate".to_string(),
        over,
        experiment: first.map(|r| r.experiment.clone()).unwrap_or_default(),
        mode: first.map(|r| r.mode.clone()).unwrap_or_default(),
        params: first.map(|r| r.params.clone()).unwrap_or(Value::Null),
        members: members
            .iter()
            .map(|m| MemberSummary {
                label: m.label.clone(),
                folder: m.folder.clone(),
                seed: m.output.results.seed,
                checks_passed: m.output.checks.iter().filter(|c| c.passed).count(),
                checks: m.output.checks.len(),
            })
            .collect(),
        failed,
        runs: aggregate_runs(members),
        comparisons: aggregate_comparisons(members),
        checks: aggregate_checks(members),
        figures: members
            .first()
            .map(|m| {
                m.output
                    .figures
                    .iter()
                    .map(|f| Figure {
                        title: f.title.clone(),
                        file: format!("{}/{}", m.folder, f.file),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        first_run_figures: members
            .first()
            .map(|m| {
                m.output
                    .figures
                    .iter()
                    .map(|f| {
                        let file = format!("{}/{}", m.folder, f.file);
                        (file, "not drawn as a mean".to_string())
                    })
                    .collect()
            })
            .unwrap_or_default(),
        notes: members
            .first()
            .map(|m| m.output.notes.clone())
            .unwrap_or_default(),
        netsched_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: first
            .map(|r| r.git_commit.clone())
            .unwrap_or_else(crate::git_commit),
        command_line: std::env::args().collect(),
    }
}

/// Numeric leaves of a metrics object as (dotted path, value); arrays and strings are skipped.
pub fn metric_leaves(metrics: &Value) -> Vec<(String, f64)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
        match v {
            Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    out.push((prefix.to_string(), x));
                }
            }
            Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&p, v, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", metrics, &mut out);
    out
}

fn aggregate_runs(members: &[Member]) -> Vec<AggregateRun> {
    // Runs matched by config (its JSON text), in order of first appearance.
    let mut order: Vec<(String, Value)> = Vec::new();
    let mut values: BTreeMap<String, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    for m in members {
        for run in &m.output.results.runs {
            let key = run.config.to_string();
            if !values.contains_key(&key) {
                order.push((key.clone(), run.config.clone()));
            }
            let slot = values.entry(key).or_default();
            for (path, x) in metric_leaves(&run.metrics) {
                slot.entry(path).or_default().push(x);
            }
        }
    }
    order
        .into_iter()
        .map(|(key, config)| AggregateRun {
            config,
            metrics: values
                .remove(&key)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(path, xs)| stats::mean_ci95(&xs).map(|i| (path, i)))
                .collect(),
        })
        .collect()
}

/// A number inside a text: where it is, its value and how many decimals it was printed with.
#[derive(Debug, Clone, PartialEq)]
struct NumToken {
    start: usize,
    end: usize,
    value: f64,
    decimals: usize,
}

/// The numbers in `text`: digits with an optional fraction and exponent and a leading minus
/// sign, not glued to a preceding letter, digit, `_` or `.` (so "C0", "P99" and "x2.5" keep
/// their numbers as part of the wording).
fn numbers(text: &str) -> Vec<NumToken> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let glued = |j: usize| {
            j > 0 && (b[j - 1].is_ascii_alphanumeric() || b[j - 1] == b'_' || b[j - 1] == b'.')
        };
        let neg = b[i] == b'-' && i + 1 < b.len() && b[i + 1].is_ascii_digit() && !glued(i);
        if !(neg || (b[i].is_ascii_digit() && !glued(i))) {
            i += 1;
            continue;
        }
        let start = i;
        if neg {
            i += 1;
        }
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let mut decimals = 0;
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
                decimals += 1;
            }
        }
        if i + 1 < b.len() && (b[i] == b'e' || b[i] == b'E') {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            if j < b.len() && b[j].is_ascii_digit() {
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                i = j;
            }
        }
        if let Ok(value) = text[start..i].parse::<f64>() {
            out.push(NumToken {
                start,
                end: i,
                value,
                decimals,
            });
        }
    }
    out
}

/// `text` with every number replaced by `#` (the wording, for matching across runs).
fn wording(text: &str) -> String {
    let mut s = String::new();
    let mut at = 0;
    for t in numbers(text) {
        s.push_str(&text[at..t.start]);
        s.push('#');
        at = t.end;
    }
    s.push_str(&text[at..]);
    s
}

/// Match items across members: by `key` (wording), then by occurrence of that key within each
/// member. Returns, in order of first appearance, the key's per-member items (member index, item).
fn match_up<'a, T>(
    members: &'a [Member],
    items: impl Fn(&'a Member) -> &'a [T],
    key: impl Fn(&T) -> String,
) -> Vec<Vec<(usize, &'a T)>> {
    let mut order: Vec<(String, usize)> = Vec::new();
    let mut groups: BTreeMap<(String, usize), Vec<(usize, &'a T)>> = BTreeMap::new();
    for (mi, m) in members.iter().enumerate() {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for it in items(m) {
            let k = key(it);
            let occ = seen.entry(k.clone()).or_insert(0);
            let id = (k, *occ);
            *occ += 1;
            if !groups.contains_key(&id) {
                order.push(id.clone());
            }
            groups.entry(id).or_default().push((mi, it));
        }
    }
    order
        .into_iter()
        .filter_map(|id| groups.remove(&id))
        .collect()
}

fn aggregate_comparisons(members: &[Member]) -> Vec<AggregateComparison> {
    match_up(members, |m| &m.output.comparisons, |c| c.quantity.clone())
        .into_iter()
        .map(|group| {
            let first = group[0].1;
            let texts: Vec<String> = group.iter().map(|(_, c)| c.ours.clone()).collect();
            AggregateComparison {
                quantity: first.quantity.clone(),
                paper: first.paper.clone(),
                ours: combine_texts(&texts),
                per_run: texts,
            }
        })
        .collect()
}

/// The runs' texts as one: every number as `mean ± half-width` when all texts share a wording.
pub fn combine_texts(texts: &[String]) -> String {
    let Some(first) = texts.first() else {
        return String::new();
    };
    let w = wording(first);
    if texts.len() == 1 || texts.iter().any(|t| wording(t) != w) {
        return texts.join(" / ");
    }
    let toks: Vec<Vec<NumToken>> = texts.iter().map(|t| numbers(t)).collect();
    let mut s = String::new();
    let mut at = 0;
    for (k, t) in toks[0].iter().enumerate() {
        s.push_str(&first[at..t.start]);
        let xs: Vec<f64> = toks.iter().map(|ts| ts[k].value).collect();
        match stats::mean_ci95(&xs) {
            Some(i) => {
                let d = t.decimals;
                s.push_str(&format!("{:.d$}", i.mean));
                if let Some(hw) = i.half_width {
                    s.push_str(&format!(" ± {hw:.d$}"));
                }
            }
            None => s.push_str(&first[t.start..t.end]),
        }
        at = t.end;
    }
    s.push_str(&first[at..]);
    s
}

fn margin(op: Cmp, value: f64, threshold: f64) -> f64 {
    match op {
        Cmp::Ge | Cmp::Gt => value - threshold,
        Cmp::Le | Cmp::Lt => threshold - value,
    }
}

/// Does a margin satisfy `op` against 0? (≥ 0 for the inclusive comparisons, > 0 otherwise.)
pub(crate) fn margin_holds(op: Cmp, m: f64) -> bool {
    match op {
        Cmp::Ge | Cmp::Le => m >= 0.0,
        Cmp::Gt | Cmp::Lt => m > 0.0,
    }
}

fn aggregate_checks(members: &[Member]) -> Vec<AggregateCheck> {
    match_up(members, |m| &m.output.checks, |c| wording(&c.claim))
        .into_iter()
        .map(|group| {
            let runs = group.len();
            let runs_passed = group.iter().filter(|(_, c)| c.passed).count();
            let evidence: Option<Vec<_>> = group.iter().map(|(_, c)| c.evidence).collect();
            let same_op = evidence
                .as_ref()
                .filter(|ev| ev.iter().all(|e| e.op == ev[0].op))
                .filter(|ev| {
                    ev.iter()
                        .all(|e| e.value.is_finite() && e.threshold.is_finite())
                });
            let decided = same_op.and_then(|ev| {
                let op = ev[0].op;
                let col = |f: &dyn Fn(&crate::Evidence) -> f64| -> Vec<f64> {
                    ev.iter().map(f).collect()
                };
                Some(AggregateEvidence {
                    op,
                    value: stats::mean_ci95(&col(&|e| e.value))?,
                    threshold: stats::mean_ci95(&col(&|e| e.threshold))?,
                    margin: stats::mean_ci95(&col(&|e| margin(op, e.value, e.threshold)))?,
                })
            });
            let (passed, rule, robust) = match &decided {
                Some(ev) => (
                    margin_holds(ev.op, ev.margin.mean),
                    Rule::MeanMargin,
                    ev.margin
                        .half_width
                        .map(|_| margin_holds(ev.op, ev.margin.lo())),
                ),
                None => (runs_passed == runs && runs > 0, Rule::EveryRun, None),
            };
            AggregateCheck {
                claim: group[0].1.claim.clone(),
                passed,
                rule,
                robust,
                runs_passed,
                runs,
                evidence: decided,
                details: group.iter().map(|(_, c)| c.detail.clone()).collect(),
            }
        })
        .collect()
}

/// A number for reports: integers as such, else 4 significant digits without trailing zeros
/// (scientific notation below 1e-4).
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    if x == x.trunc() && x.abs() < 1e15 {
        return format!("{x:.0}");
    }
    if x.abs() < 1e-4 {
        return format!("{x:.3e}");
    }
    let mag = x.abs().log10().floor() as i32;
    let d = (3 - mag).clamp(1, 8) as usize;
    let s = format!("{x:.d$}");
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_string()
}

/// "mean ± half-width" (just the number when there is one run or every run gave the same).
pub fn fmt_interval(i: &Interval) -> String {
    match i.half_width {
        Some(hw) if i.min != i.max => format!("{} ± {}", fmt_num(i.mean), fmt_num(hw)),
        _ => fmt_num(i.mean),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Check, Comparison, Results, Run};
    use serde_json::json;

    fn output(seed: u64, idle: f64, rate_text: &str, checks: Vec<Check>) -> ExperimentOutput {
        let mut results = Results::new("x", "sim", seed, json!({"a": 1}));
        results.runs.push(Run {
            config: json!({"policy": "rr"}),
            metrics: json!({"idle_pct": idle, "lat": {"p99": idle * 2.0}, "series": [1, 2]}),
        });
        results.runs.push(Run {
            config: json!({"policy": "fcfs"}),
            metrics: json!({"idle_pct": 10.0}),
        });
        ExperimentOutput {
            results,
            comparisons: vec![Comparison {
                quantity: "rate".into(),
                paper: "750".into(),
                ours: rate_text.into(),
            }],
            checks,
            figures: vec![Figure {
                title: "Idle".into(),
                file: "idle.svg".into(),
            }],
            notes: vec!["note".into()],
        }
    }

    fn member(seed: u64, o: ExperimentOutput) -> Member {
        Member {
            label: format!("seed {seed}"),
            folder: format!("seed-{seed}"),
            output: o,
        }
    }

    #[test]
    fn metrics_become_intervals_matched_by_config() {
        let ms: Vec<Member> = [1.0, 2.0, 3.0]
            .iter()
            .enumerate()
            .map(|(i, idle)| member(i as u64 + 1, output(i as u64 + 1, *idle, "1", vec![])))
            .collect();
        let a = aggregate(Over::Seeds, &ms, vec![]);
        assert_eq!(a.kind, "aggregate");
        assert_eq!(a.runs.len(), 2);
        assert_eq!(a.runs[0].config, json!({"policy": "rr"}));
        let idle = a.runs[0].metrics["idle_pct"];
        assert_eq!((idle.n, idle.mean, idle.sd), (3, 2.0, 1.0));
        // t(0.975, 2) = 4.3027: half-width 4.3027·1/√3.
        assert!((idle.half_width.unwrap() - 2.484_138).abs() < 1e-5);
        assert_eq!(a.runs[0].metrics["lat.p99"].mean, 4.0);
        assert!(
            !a.runs[0].metrics.contains_key("series"),
            "arrays are not metrics"
        );
        assert_eq!(a.runs[1].metrics["idle_pct"].half_width, Some(0.0));
        assert_eq!(a.figures[0].file, "seed-1/idle.svg");
        assert_eq!(a.members.len(), 3);
    }

    #[test]
    fn comparison_numbers_become_mean_plus_minus_half_width() {
        let texts: Vec<String> = [
            "10.0 % / 740 Mbit/s",
            "12.0 % / 760 Mbit/s",
            "14.0 % / 750 Mbit/s",
        ]
        .map(String::from)
        .to_vec();
        // idle mean 12, sd 2, hw = 4.3027·2/√3 = 4.968; rate mean 750, sd 10, hw 24.84.
        assert_eq!(combine_texts(&texts), "12.0 ± 5.0 % / 750 ± 25 Mbit/s");
        // Numbers glued to words are wording, not figures.
        assert_eq!(wording("C0 mean 0.5 at P99, -2"), "C0 mean # at P99, #");
        // Different wordings: the texts side by side.
        let mixed = ["1 ms".to_string(), "n/a".to_string()];
        assert_eq!(combine_texts(&mixed), "1 ms / n/a");
        assert_eq!(combine_texts(&["3.25".to_string()]), "3.25");
        assert_eq!(
            combine_texts(&["2.5e3 x".into(), "3.5e3 x".into()]),
            "3000.0 ± 6353.1 x"
        );
    }

    #[test]
    fn evidence_checks_are_decided_on_the_mean_margin() {
        let ge = |v: f64| Check::measured("share ≥ 0.8", v, Cmp::Ge, 0.8, format!("{v}"));
        // Mean 0.82 passes although one seed failed; its interval reaches below 0.8.
        let ms: Vec<Member> = [0.78, 0.83, 0.85]
            .iter()
            .enumerate()
            .map(|(i, v)| member(i as u64, output(i as u64, 1.0, "1", vec![ge(*v)])))
            .collect();
        let c = &aggregate(Over::Seeds, &ms, vec![]).checks[0];
        assert!(c.passed && c.rule == Rule::MeanMargin);
        assert_eq!(c.robust, Some(false));
        assert_eq!((c.runs_passed, c.runs), (2, 3));
        let ev = c.evidence.as_ref().unwrap();
        assert!((ev.value.mean - 0.82).abs() < 1e-12 && ev.threshold.mean == 0.8);
        assert_eq!(c.details, vec!["0.78", "0.83", "0.85"]);
        // Tight and well above: robust.
        let ms: Vec<Member> = [0.90, 0.91, 0.92]
            .iter()
            .enumerate()
            .map(|(i, v)| member(i as u64, output(i as u64, 1.0, "1", vec![ge(*v)])))
            .collect();
        let c = &aggregate(Over::Seeds, &ms, vec![]).checks[0];
        assert!(c.passed && c.robust == Some(true));
        // Mean below: fails even though one seed passed.
        let ms: Vec<Member> = [0.70, 0.75, 0.81]
            .iter()
            .enumerate()
            .map(|(i, v)| member(i as u64, output(i as u64, 1.0, "1", vec![ge(*v)])))
            .collect();
        let c = &aggregate(Over::Seeds, &ms, vec![]).checks[0];
        assert!(!c.passed && c.robust == Some(false) && c.runs_passed == 1);
        // One run: decided on its value, robustness unknown.
        let one = [member(1, output(1, 1.0, "1", vec![ge(0.9)]))];
        let c = &aggregate(Over::Seeds, &one, vec![]).checks[0];
        assert!(c.passed && c.robust.is_none());
    }

    #[test]
    fn strict_and_measured_thresholds_and_upper_bounds() {
        // ≤ with a measured threshold: the margin is paired within each run.
        let le = |v: f64, t: f64| Check::measured("p99 ≤ fifo p99", v, Cmp::Le, t, "");
        let ms: Vec<Member> = [(5.0, 6.0), (9.0, 10.0), (1.0, 2.0)]
            .iter()
            .enumerate()
            .map(|(i, (v, t))| member(i as u64, output(i as u64, 1.0, "1", vec![le(*v, *t)])))
            .collect();
        let c = &aggregate(Over::Seeds, &ms, vec![]).checks[0];
        // Values and thresholds overlap widely, but every margin is exactly 1: robust.
        let ev = c.evidence.as_ref().unwrap();
        assert_eq!((ev.margin.mean, ev.margin.half_width), (1.0, Some(0.0)));
        assert!(c.passed && c.robust == Some(true));
        // > with mean margin 0 fails (strict), ≥ would pass.
        let gt = |v: f64| Check::measured("a > 1", v, Cmp::Gt, 1.0, "");
        let ms: Vec<Member> = [0.5, 1.5]
            .iter()
            .enumerate()
            .map(|(i, v)| member(i as u64, output(i as u64, 1.0, "1", vec![gt(*v)])))
            .collect();
        let c = &aggregate(Over::Seeds, &ms, vec![]).checks[0];
        assert!(!c.passed && c.runs_passed == 1);
    }

    #[test]
    fn yes_no_checks_must_pass_in_every_run_and_are_matched_by_wording() {
        let yes = |p: bool, n: usize| Check::new(format!("{n} threads used"), p, "");
        let ms = vec![
            member(1, output(1, 1.0, "1", vec![yes(true, 4), yes(true, 4)])),
            member(2, output(2, 1.0, "1", vec![yes(true, 5), yes(false, 5)])),
        ];
        let a = aggregate(Over::Seeds, &ms, vec![]);
        // Two checks with the same wording are matched by order, not merged.
        assert_eq!(a.checks.len(), 2);
        assert!(a.checks[0].passed && a.checks[0].rule == Rule::EveryRun);
        assert!(!a.checks[1].passed);
        assert_eq!((a.checks[1].runs_passed, a.checks[1].runs), (1, 2));
        assert_eq!(a.checks[0].claim, "4 threads used");
        // A check with evidence in one run only falls back to every-run.
        let mixed = vec![
            member(
                1,
                output(
                    1,
                    1.0,
                    "1",
                    vec![Check::measured("q", 1.0, Cmp::Ge, 0.0, "")],
                ),
            ),
            member(2, output(2, 1.0, "1", vec![Check::new("q", false, "")])),
        ];
        let c = &aggregate(Over::Seeds, &mixed, vec![]).checks[0];
        assert!(!c.passed && c.rule == Rule::EveryRun && c.evidence.is_none());
        let s = c.summary(Over::Seeds);
        assert!(
            s.contains("1/2 seeds passed") && s.contains("every seed"),
            "{s}"
        );
    }

    #[test]
    fn no_members_gives_an_empty_aggregate_with_the_failures() {
        let a = aggregate(
            Over::Repeats,
            &[],
            vec![Failure {
                label: "repeat 1".into(),
                folder: "repeat-1".into(),
                error: "boom".into(),
            }],
        );
        assert!(a.checks.is_empty() && a.runs.is_empty() && a.failed.len() == 1);
    }

    #[test]
    fn number_formatting() {
        assert_eq!(fmt_num(3.0), "3");
        assert_eq!(fmt_num(2.48413), "2.484");
        assert_eq!(fmt_num(0.8), "0.8");
        assert_eq!(fmt_num(1.5e-7), "1.500e-7");
        assert_eq!(fmt_num(0.012346), "0.01235");
        assert_eq!(fmt_num(1234.567), "1234.6");
    }
}
