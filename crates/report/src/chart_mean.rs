//! A series of runs' charts (`lab run NAME --seeds K`, `--real --repeat N`): each chart of the
//! first run drawn again from every run's data ([`crate::chart_data`]) as the mean over the
//! runs, with the 95% Student t interval of the mean as error bars — the statistics of the
//! aggregate's tables ([`crate::stats::mean_ci95`]) and the error bars of the lab's sweeps
//! ([`svg::interval_ends`]).
//!
//! How runs are lined up:
//! - **bar charts**: the same categories and series (by name, in order) in every run; each
//!   bar is the mean of its runs' values;
//! - **line charts**: series by name; a point is the mean of the runs' values at the first
//!   run's x (another run's series is interpolated linearly between its neighbouring points;
//!   outside its x range it has no value there and the point is not drawn);
//! - **CDFs**: each run's empirical CDF evaluated on a common grid of [`CDF_GRID`] x values
//!   across all runs' range; the mean CDF is drawn as a line (the pointwise mean of the runs'
//!   distribution functions).
//!
//! Error bars are drawn on at most [`MAX_BARS_PER_SERIES`] evenly spaced points of a line (a
//! bar chart has one per bar), where the runs differ. A chart whose runs cannot be lined up (a
//! run without its data, other categories or series) keeps the first run's chart, and the
//! report says so.
//!
//! Cost: O(runs × points) per chart.

use crate::aggregate::{Aggregate, Member, Over};
use crate::chart_data::{self, ChartData, Points};
use crate::stats::{self, Interval};
use crate::svg::{self, ChartOptions};
use crate::Figure;
use std::path::Path;

/// x values on which a series of runs' CDFs are averaged.
pub const CDF_GRID: usize = 101;
/// Error bars drawn on one line at most.
pub const MAX_BARS_PER_SERIES: usize = 25;

/// One figure of a series of runs, as listed in its report.
#[derive(Debug, Clone, PartialEq)]
pub struct MeanFigure {
    pub figure: Figure,
    /// `None`: the mean over the runs, drawn at the top; `Some(why)`: the first run's chart,
    /// and why the runs' charts could not be averaged.
    pub first_run_only: Option<String>,
}

/// Draw every figure of `members[0]` again in `dir` (the series' folder, holding each member's
/// folder) as the mean over `members`. Returns the figures for the aggregate, in order.
pub fn draw(dir: &Path, over: Over, members: &[Member]) -> anyhow::Result<Vec<MeanFigure>> {
    let Some(first) = members.first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for f in &first.output.figures {
        let fallback = |why: String| MeanFigure {
            figure: Figure {
                title: f.title.clone(),
                file: format!("{}/{}", first.folder, f.file),
            },
            first_run_only: Some(why),
        };
        let plain = !f.file.contains(['/', '\\']) && f.file.ends_with(".svg");
        if !plain {
            out.push(fallback(format!("{}: not a plain .svg file name", f.file)));
            continue;
        }
        let data: Result<Vec<ChartData>, String> = members
            .iter()
            .map(|m| {
                chart_data::load(&dir.join(&m.folder).join(&f.file))
                    .map_err(|e| format!("{}: {e:#}", m.label))
            })
            .collect();
        match data.and_then(|d| mean_svg(&d, members.len(), over.noun())) {
            Ok(text) => {
                svg::write(&dir.join(&f.file), &text)?;
                out.push(MeanFigure {
                    figure: Figure {
                        title: f.title.clone(),
                        file: f.file.clone(),
                    },
                    first_run_only: None,
                });
            }
            Err(why) => out.push(fallback(why)),
        }
    }
    Ok(out)
}

/// [`draw`] into `agg` (drawn from the same `members`): its figures become the means, and
/// those that could not be averaged are listed with why.
pub fn draw_into(agg: &mut Aggregate, dir: &Path, members: &[Member]) -> anyhow::Result<()> {
    let figures = draw(dir, agg.over, members)?;
    agg.first_run_figures = figures
        .iter()
        .filter_map(|f| Some((f.figure.file.clone(), f.first_run_only.clone()?)))
        .collect();
    agg.figures = figures.into_iter().map(|f| f.figure).collect();
    Ok(())
}

/// The options of a mean chart: the first run's marks and log axes, the runs' intervals.
fn opts(
    marks: &[svg::Mark],
    marks_legend: &Option<String>,
    log: (bool, bool),
    intervals: Vec<Vec<(f64, f64)>>,
    intervals_legend: Option<String>,
) -> ChartOptions {
    ChartOptions {
        log_x: log.0,
        log_y: log.1,
        marks: marks.to_vec(),
        marks_legend: marks_legend.clone(),
        intervals,
        intervals_legend,
    }
}

/// Every run's series of a line chart or a CDF, when every run drew the first run's kind.
fn runs_series(charts: &[ChartData]) -> Result<Vec<&Vec<(String, Points)>>, String> {
    let kind = std::mem::discriminant(&charts[0]);
    charts
        .iter()
        .map(|c| match c {
            ChartData::Line { series, .. } | ChartData::Cdf { series, .. }
                if std::mem::discriminant(c) == kind =>
            {
                Ok(series)
            }
            _ => Err("the runs drew different kinds of chart".to_string()),
        })
        .collect()
}

/// The SVG of the mean of `charts` (one per run), or why they cannot be averaged.
pub fn mean_svg(charts: &[ChartData], runs: usize, noun: &str) -> Result<String, String> {
    let legend = Some(svg::interval_legend_text(runs, noun));
    let title = |t: &str| format!("{t} — mean of {runs} {noun}s");
    match &charts[0] {
        ChartData::Bar {
            title: t,
            y_label,
            categories,
            series,
            log_y,
            marks,
            marks_legend,
        } => {
            let (means, ends) = bar_means(charts, categories, series)?;
            let o = opts(marks, marks_legend, (false, *log_y), ends, legend);
            Ok(svg::bar_chart_svg_with(
                &title(t),
                y_label,
                categories,
                &means,
                &o,
            ))
        }
        ChartData::Line {
            title: t,
            x_label,
            y_label,
            series,
            log_x,
            log_y,
            marks,
            marks_legend,
        } => {
            let (means, ends) = line_means(&runs_series(charts)?, series)?;
            let o = opts(marks, marks_legend, (*log_x, *log_y), ends, legend);
            Ok(svg::line_chart_svg_with(
                &title(t),
                x_label,
                y_label,
                &means,
                &o,
            ))
        }
        ChartData::Cdf {
            title: t,
            x_label,
            series,
        } => {
            let (means, ends) = cdf_means(&runs_series(charts)?, series)?;
            let o = opts(&[], &None, (false, false), ends, legend);
            let y = "fraction ≤ x (CDF, mean)";
            Ok(svg::line_chart_svg_with(&title(t), x_label, y, &means, &o))
        }
    }
}

type Means<T> = (Vec<(String, Vec<T>)>, Vec<Vec<(f64, f64)>>);

/// A point's y at x: a run's value there (linear between points, or an empirical CDF's step).
type ValueAt = fn(&[(f64, Option<f64>)], f64) -> Option<f64>;

/// One line's (x, mean) points and its interval ends.
type MeanLine = (Vec<(f64, f64)>, Vec<(f64, f64)>);

/// Mean and interval of one value across runs (`None` in any run: no value).
fn across(values: &[Option<f64>]) -> Option<Interval> {
    let xs: Option<Vec<f64>> = values.iter().copied().collect();
    stats::mean_ci95(&xs?)
}

fn bar_means(
    charts: &[ChartData],
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> Result<Means<f64>, String> {
    let mut runs = Vec::new();
    for c in charts {
        match c {
            ChartData::Bar {
                categories: cats,
                series: s,
                ..
            } if cats == categories
                && s.len() == series.len()
                && s.iter()
                    .zip(series)
                    .all(|(a, b)| a.0 == b.0 && a.1.len() == b.1.len()) =>
            {
                runs.push(s)
            }
            _ => return Err("the runs' bar charts have other categories or series".into()),
        }
    }
    let mut means = Vec::new();
    let mut ends = Vec::new();
    for (i, (name, vals)) in series.iter().enumerate() {
        let ivs: Vec<Option<Interval>> = (0..vals.len())
            .map(|k| across(&runs.iter().map(|r| r[i].1[k]).collect::<Vec<_>>()))
            .collect();
        means.push((
            name.clone(),
            ivs.iter().map(|i| i.map_or(f64::NAN, |i| i.mean)).collect(),
        ));
        ends.push(ivs.iter().map(|i| svg::interval_ends(i.as_ref())).collect());
    }
    Ok((means, ends))
}

/// `pts`' y at `x`, linear between its neighbouring points; `None` outside its x range or at a
/// gap. Exact x matches (the usual case: the same sampling in every run) take the point itself.
fn value_at(pts: &[(f64, Option<f64>)], x: f64) -> Option<f64> {
    let i = pts.partition_point(|p| p.0 < x);
    let (x1, y1) = *pts.get(i)?;
    if x1 == x {
        return y1;
    }
    let (x0, y0) = *pts.get(i.checked_sub(1)?)?;
    let (y0, y1) = (y0?, y1?);
    Some(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
}

/// Only every n-th interval of a line is kept (and its last), so at most
/// [`MAX_BARS_PER_SERIES`] bars are drawn.
fn thin(ends: &mut [(f64, f64)]) {
    let stride = ends.len().div_ceil(MAX_BARS_PER_SERIES).max(1);
    let last = ends.len().saturating_sub(1);
    for (k, e) in ends.iter_mut().enumerate() {
        if k % stride != 0 && k != last {
            *e = (f64::NAN, f64::NAN);
        }
    }
}

fn series_of<'a>(run: &'a [(String, Points)], name: &str) -> Result<&'a Points, String> {
    run.iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p)
        .ok_or_else(|| format!("series {name:?} is missing from a run"))
}

fn sorted(p: &Points) -> Points {
    let mut v: Points = p.iter().copied().filter(|(x, _)| x.is_finite()).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Series `name` of every run, its points sorted by x.
fn sorted_series(runs: &[&Vec<(String, Points)>], name: &str) -> Result<Vec<Points>, String> {
    runs.iter()
        .map(|r| series_of(r, name).map(sorted))
        .collect()
}

/// One series' mean over the runs' points `per_run` at each of `xs` (a run's value at x is
/// `at(points, x)`), and its interval ends, thinned.
fn mean_line(per_run: &[Points], xs: impl Iterator<Item = f64>, at: ValueAt) -> MeanLine {
    let mut pts = Vec::new();
    let mut e = Vec::new();
    for x in xs {
        let iv = across(&per_run.iter().map(|p| at(p, x)).collect::<Vec<_>>());
        pts.push((x, iv.map_or(f64::NAN, |i| i.mean)));
        e.push(svg::interval_ends(iv.as_ref()));
    }
    thin(&mut e);
    (pts, e)
}

fn line_means(
    runs: &[&Vec<(String, Points)>],
    series: &[(String, Points)],
) -> Result<Means<(f64, f64)>, String> {
    let mut means = Vec::new();
    let mut ends = Vec::new();
    for (name, first) in series {
        let others = sorted_series(runs, name)?;
        let (pts, e) = mean_line(&others, first.iter().map(|p| p.0), value_at);
        means.push((name.clone(), pts));
        ends.push(e);
    }
    Ok((means, ends))
}

/// An empirical CDF's value at `x`: the y of its last point at or left of `x` (0 before its
/// first point).
fn cdf_at(pts: &[(f64, Option<f64>)], x: f64) -> Option<f64> {
    let i = pts.partition_point(|p| p.0 <= x);
    if i == 0 {
        Some(0.0)
    } else {
        pts[i - 1].1
    }
}

fn cdf_means(
    runs: &[&Vec<(String, Points)>],
    series: &[(String, Points)],
) -> Result<Means<(f64, f64)>, String> {
    let mut means = Vec::new();
    let mut ends = Vec::new();
    for (name, _) in series {
        let per_run = sorted_series(runs, name)?;
        let lo = per_run
            .iter()
            .filter_map(|p| p.first())
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min);
        let hi = per_run
            .iter()
            .filter_map(|p| p.last())
            .map(|p| p.0)
            .fold(f64::NEG_INFINITY, f64::max);
        if !(lo.is_finite() && hi.is_finite()) {
            return Err(format!("series {name:?} has no points"));
        }
        let grid = (0..CDF_GRID).map(|k| lo + (hi - lo) * k as f64 / (CDF_GRID - 1) as f64);
        let (pts, e) = mean_line(&per_run, grid, cdf_at);
        means.push((name.clone(), pts));
        ends.push(e);
    }
    Ok((means, ends))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(vals: [f64; 2]) -> ChartData {
        ChartData::Bar {
            title: "T".into(),
            y_label: "y".into(),
            categories: vec!["a".into(), "b".into()],
            series: vec![("s".into(), vals.iter().map(|v| Some(*v)).collect())],
            log_y: false,
            marks: vec![],
            marks_legend: None,
        }
    }

    #[test]
    fn bars_are_the_mean_with_an_interval_where_runs_differ() {
        // Category a varies over the runs, b does not: one error bar, on a.
        let charts = [bar([1.0, 5.0]), bar([2.0, 5.0]), bar([3.0, 5.0])];
        let text = mean_svg(&charts, 3, "seed").unwrap();
        assert_eq!(text.matches("class=\"error-bar\"").count(), 2, "{text}"); // + legend
        assert!(text.contains(">95% interval over 3 seeds</text>"), "{text}");
        assert!(text.contains("T — mean of 3 seeds"), "{text}");
        // The bar's tooltip: mean 2, t(0.975, 2)·1/√3 = 2.484 either side.
        assert!(text.contains("s / a: 2.000 [-0.4841, 4.484]"), "{text}");
        // Other categories: not averaged.
        let mut other = bar([1.0, 2.0]);
        if let ChartData::Bar { categories, .. } = &mut other {
            categories[1] = "c".into();
        }
        assert!(mean_svg(&[bar([1.0, 2.0]), other], 2, "seed").is_err());
    }

    #[test]
    fn lines_are_averaged_at_the_first_runs_x_and_cdfs_on_a_grid() {
        let line = |pts: Vec<(f64, f64)>| ChartData::Line {
            title: "L".into(),
            x_label: "t".into(),
            y_label: "v".into(),
            series: vec![("up".into(), chart_data::points(&pts))],
            log_x: false,
            log_y: false,
            marks: vec![],
            marks_legend: None,
        };
        // The second run is sampled at other x: interpolated (y = x there, so 1.5 at 1.5).
        let a = line(vec![(0.0, 0.0), (1.5, 1.0), (3.0, 2.0)]);
        let b = line(vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]);
        let text = mean_svg(&[a, b], 2, "repeat").unwrap();
        assert!(text.contains("up: 1.250 ["), "{text}");
        assert!(
            text.contains(">95% interval over 2 repeats</text>"),
            "{text}"
        );
        assert_eq!(
            value_at(&chart_data::points(&[(0.0, 0.0), (2.0, 4.0)]), 3.0),
            None
        );
        // CDFs: the mean of step functions.
        let cdf = |xs: &[f64]| ChartData::Cdf {
            title: "C".into(),
            x_label: "ms".into(),
            series: vec![("p".into(), chart_data::points(&svg::cdf_points(xs)))],
        };
        let text = mean_svg(&[cdf(&[1.0, 2.0]), cdf(&[1.0, 3.0])], 2, "seed").unwrap();
        assert!(text.contains("class=\"error-bar\""), "{text}");
        assert_eq!(
            cdf_at(&chart_data::points(&[(1.0, 0.5), (2.0, 1.0)]), 0.5),
            Some(0.0)
        );
        assert_eq!(
            cdf_at(&chart_data::points(&[(1.0, 0.5), (2.0, 1.0)]), 1.5),
            Some(0.5)
        );
    }
}
