//! The numbers behind a chart, written next to it (`rate.svg` → `rate.svg.json`) by every
//! chart-writing function of [`crate::svg`], so that a series of runs (`lab run --seeds K`,
//! `--real --repeat N`) can draw each chart again as the mean over its runs with a 95%
//! interval ([`crate::chart_mean`]) instead of showing one run's.
//!
//! What is kept is what was drawn: a line chart's points, a CDF's points (already thinned by
//! [`crate::svg::cdf_points`] to at most ~2000 per series, so the file stays small whatever
//! the sample), a bar chart's values, and the options (log axes, reference marks). Values
//! that are not finite are kept as `null` (JSON has no NaN).
//!
//! Cost: one JSON file per chart, about the size of the SVG.

use crate::mark::Mark;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Chart data files larger than this are not read (a chart with 2000 points per series and a
/// dozen series is well under 1 MiB).
pub const MAX_BYTES: u64 = 16 << 20;

/// A series of (x, y) points; `None` for a value that was not finite.
pub type Points = Vec<(f64, Option<f64>)>;

/// One chart's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChartData {
    /// [`crate::svg::line_chart`] / [`crate::svg::line_chart_with`].
    Line {
        title: String,
        x_label: String,
        y_label: String,
        series: Vec<(String, Points)>,
        #[serde(default)]
        log_x: bool,
        #[serde(default)]
        log_y: bool,
        #[serde(default)]
        marks: Vec<Mark>,
        #[serde(default)]
        marks_legend: Option<String>,
    },
    /// [`crate::svg::cdf_chart`]: each series' empirical CDF points (y = fraction ≤ x).
    Cdf {
        title: String,
        x_label: String,
        series: Vec<(String, Points)>,
    },
    /// [`crate::svg::bar_chart`] / [`crate::svg::bar_chart_with`]: `series[i].1[k]` is series
    /// i's value in category k.
    Bar {
        title: String,
        y_label: String,
        categories: Vec<String>,
        series: Vec<(String, Vec<Option<f64>>)>,
        #[serde(default)]
        log_y: bool,
        #[serde(default)]
        marks: Vec<Mark>,
        #[serde(default)]
        marks_legend: Option<String>,
    },
}

/// A value as kept: `None` when not finite.
pub fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// Points as kept.
pub fn points(pts: &[(f64, f64)]) -> Points {
    pts.iter().map(|&(x, y)| (x, finite(y))).collect()
}

/// Where the data of the chart at `svg` is kept: `<svg>.json`.
pub fn path_for(svg: &Path) -> PathBuf {
    let mut p = svg.as_os_str().to_owned();
    p.push(".json");
    PathBuf::from(p)
}

/// Write `data` next to the chart at `svg`.
pub fn save(svg: &Path, data: &ChartData) -> anyhow::Result<()> {
    let path = path_for(svg);
    let text = serde_json::to_string(data)?;
    std::fs::write(&path, text + "\n")
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// The data of the chart at `svg`, if it was kept (an error names the file and what is wrong).
pub fn load(svg: &Path) -> anyhow::Result<ChartData> {
    let path = path_for(svg);
    let text = crate::read::read_text(&path, MAX_BYTES, "chart data")?;
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
