//! Hand-written SVG charts: line charts (time series), CDF plots and grouped bar charts.
//!
//! No plotting crate and no font files: text is SVG `<text>` elements that any browser or
//! Markdown viewer renders with its own fonts. Output is deterministic (fixed number formatting,
//! series drawn in the order given), so the same data always gives the same bytes.
//!
//! Every chart has a title, axes with "nice" ticks (1, 2, 2.5 or 5 × 10^k), axis labels and a
//! legend. Non-finite values are skipped, never drawn.
//!
//! API (all write a file — and next to it the chart's data, [`crate::chart_data`], from which a
//! series of runs draws its mean — and also have a `*_svg` variant returning the text):
//! - [`line_chart`]`(title, x_label, y_label, series, path)` — `series: &[(name, Vec<(x, y)>)]`
//! - [`cdf_chart`]`(title, x_label, samples, path)` — `samples: &[(name, Vec<value>)]`; draws
//!   the empirical CDF of each sample set (y axis: fraction 0–1)
//! - [`bar_chart`]`(title, y_label, categories, series, path)` — one group of bars per
//!   category, one bar per series in each group (like the papers' grouped bar charts)
//! - [`bar_chart_with`] / [`line_chart_with`]: the same with [`ChartOptions`] — a logarithmic
//!   y axis (for values that span orders of magnitude) and reference [`Mark`]s (a paper's own
//!   figures drawn as dashed black ticks over the bars, or dashed lines across a line chart)
//!
//! Series are told apart by colour, marker and dash (bars: colour and hatch), reference marks
//! by a black dashed line with a hollow ring, and each has a legend entry drawn like the plot
//! ([`crate::style`]). [`ChartOptions::intervals`] adds error bars (e.g. a 95% interval over
//! seeds) with a legend entry saying what they are.
//!
//! Cost: O(total points) time and output size.

use crate::chart_data::{self, ChartData};
pub use crate::mark::Mark;
use crate::stats::Interval;
use crate::style::{self, n, series_style};
pub use crate::xml::escape;
use std::fmt::Write as _;
use std::path::Path;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const MARGIN_LEFT: f64 = 78.0;
const MARGIN_RIGHT: f64 = 170.0;
const MARGIN_TOP: f64 = 42.0;
const MARGIN_BOTTOM: f64 = 58.0;

fn colour(i: usize) -> &'static str {
    series_style(i).colour
}

/// "Nice" tick positions covering `[lo, hi]`: about `target` ticks spaced by 1, 2, 2.5 or 5 ×
/// 10^k, the first ≤ lo and the last ≥ hi. Returns (ticks, step).
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let (mut lo, mut hi) = (lo, hi);
    if !lo.is_finite() || !hi.is_finite() {
        lo = 0.0;
        hi = 1.0;
    }
    if hi < lo {
        std::mem::swap(&mut lo, &mut hi);
    }
    if hi - lo < 1e-12 * hi.abs().max(1.0) {
        // A flat series: open a band around it.
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo -= pad;
        hi += pad;
        if lo < 0.0 && (lo + pad) >= 0.0 {
            lo = 0.0;
        }
    }
    let raw = (hi - lo) / target.max(2) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).floor();
    let last = (hi / step).ceil();
    let ticks = (first as i64..=last as i64)
        .map(|k| {
            let v = k as f64 * step;
            // Round away binary noise (0.30000000000000004).
            (v / step).round() * step
        })
        .collect();
    (ticks, step)
}

/// Format a tick value with just enough decimals for `step`.
pub fn format_tick(v: f64, step: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    let abs = v.abs();
    if !(1e-4..1e6).contains(&abs) {
        return format!("{v:.2e}");
    }
    // Just enough decimals to tell ticks apart: 0.25 needs 2, 2.5 needs 1, 20 needs 0.
    let mut decimals = 0;
    let mut s = step.abs();
    while (s - s.round()).abs() > 1e-9 * s.max(1.0) && decimals < 6 {
        s *= 10.0;
        decimals += 1;
    }
    format!("{v:.decimals$}")
}

struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    /// `y0`/`y1` are values, the scale between them is logarithmic (both > 0).
    log_y: bool,
    /// The same for `x0`/`x1`.
    log_x: bool,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        let w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
        let frac = if self.log_x {
            (x.max(self.x0).log10() - self.x0.log10()) / (self.x1.log10() - self.x0.log10())
        } else {
            (x - self.x0) / (self.x1 - self.x0)
        };
        MARGIN_LEFT + frac * w
    }
    fn py(&self, y: f64) -> f64 {
        let h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
        let frac = if self.log_y {
            (y.max(self.y0).log10() - self.y0.log10()) / (self.y1.log10() - self.y0.log10())
        } else {
            (y - self.y0) / (self.y1 - self.y0)
        };
        HEIGHT - MARGIN_BOTTOM - frac * h
    }
}

/// Total width: the plot area plus a legend column wide enough for the longest name
/// (about 7 px per character at font size 12).
fn total_width<S: AsRef<str>>(names: &[S]) -> f64 {
    let longest = names
        .iter()
        .map(|n| n.as_ref().chars().count())
        .max()
        .unwrap_or(0);
    (WIDTH - MARGIN_RIGHT + 40.0 + 7.0 * longest as f64).max(WIDTH)
}

fn header(svg: &mut String, title: &str, width: f64) {
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
        w = n(width),
        h = HEIGHT
    );
    let _ = writeln!(
        svg,
        r#"<rect x="0" y="0" width="{}" height="{HEIGHT}" fill="white"/>"#,
        n(width)
    );
    // Centred over the plot when it fits there (about 8.5 px per character in bold 15 px),
    // else from the left edge, so a long title is never cut off on the left.
    let centre = (MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2.0;
    let (x, anchor) = if 8.5 * title.chars().count() as f64 / 2.0 <= centre - 8.0 {
        (centre, "middle")
    } else {
        (8.0, "start")
    };
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="{anchor}" font-size="15" font-weight="bold">{}</text>"#,
        n(x),
        escape(title)
    );
}

fn footer(svg: &mut String) {
    svg.push_str("</svg>\n");
}

/// Axes, grid, y ticks and labels. X ticks are drawn only when `x_ticks` is given (bar charts
/// label categories instead).
fn axes(
    svg: &mut String,
    f: &Frame,
    x_ticks: Option<&[(f64, String)]>,
    y_ticks: &[(f64, String)],
    x_label: &str,
    y_label: &str,
) {
    let (left, right) = (MARGIN_LEFT, WIDTH - MARGIN_RIGHT);
    let (top, bottom) = (MARGIN_TOP, HEIGHT - MARGIN_BOTTOM);
    svg.push_str("<g class=\"axes\">\n");
    for (t, label) in y_ticks {
        let y = f.py(*t);
        let _ = writeln!(
            svg,
            r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#dddddd"/>"##,
            n(left),
            n(y),
            n(right),
            n(y)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            n(left - 6.0),
            n(y + 4.0),
            escape(label)
        );
    }
    if let Some(ticks) = x_ticks {
        for (t, label) in ticks {
            let x = f.px(*t);
            let _ = writeln!(
                svg,
                r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#eeeeee"/>"##,
                n(x),
                n(top),
                n(x),
                n(bottom)
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                n(x),
                n(bottom + 16.0),
                escape(label)
            );
        }
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333333"/>"##,
        n(left),
        n(top),
        n(right - left),
        n(bottom - top)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        n((left + right) / 2.0),
        n(HEIGHT - 14.0),
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        n((top + bottom) / 2.0),
        n((top + bottom) / 2.0),
        escape(y_label)
    );
    svg.push_str("</g>\n");
}

/// Whether legend glyphs are lines with markers or bar swatches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Line,
    Bar,
}

/// The legend: one row per series, its glyph drawn as the plot draws it.
fn legend<S: AsRef<str>>(svg: &mut String, names: &[S], kind: Kind) {
    let x = WIDTH - MARGIN_RIGHT + 14.0;
    svg.push_str("<g class=\"legend\">\n");
    for (i, name) in names.iter().enumerate() {
        let y = MARGIN_TOP + 10.0 + 20.0 * i as f64;
        match kind {
            Kind::Line => style::legend_line(svg, i, x, y - 4.0),
            Kind::Bar => style::legend_bar(svg, i, x, y - 4.0),
        }
        let _ = writeln!(
            svg,
            r#"<text class="legend-entry" x="{}" y="{}">{}</text>"#,
            n(x + 24.0),
            n(y),
            escape(name.as_ref())
        );
    }
    svg.push_str("</g>\n");
}

/// A legend row for the error bars.
fn interval_legend(svg: &mut String, row: usize, label: &str) {
    let x = WIDTH - MARGIN_RIGHT + 14.0;
    let y = MARGIN_TOP + 10.0 + 20.0 * row as f64;
    style::error_bar(svg, x + 8.0, y - 10.0, y + 2.0, "#333333", label);
    let _ = writeln!(
        svg,
        r#"<text class="legend-entry" x="{}" y="{}">{}</text>"#,
        n(x + 24.0),
        n(y),
        escape(label)
    );
}

fn finite_points(points: &[(f64, f64)]) -> impl Iterator<Item = (f64, f64)> + '_ {
    points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
}

fn bounds<'a>(all: impl Iterator<Item = &'a [(f64, f64)]>) -> Option<(f64, f64, f64, f64)> {
    let mut b: Option<(f64, f64, f64, f64)> = None;
    for pts in all {
        for (x, y) in finite_points(pts) {
            b = Some(match b {
                None => (x, x, y, y),
                Some((a, bx, c, d)) => (a.min(x), bx.max(x), c.min(y), d.max(y)),
            });
        }
    }
    b
}

fn polylines<S: AsRef<str>>(
    svg: &mut String,
    f: &Frame,
    series: &[(S, Vec<(f64, f64)>)],
    step: bool,
) {
    for (i, (name, pts)) in series.iter().enumerate() {
        let mut d = String::new();
        let mut prev: Option<(f64, f64)> = None;
        for (x, y) in finite_points(pts) {
            if step {
                if let Some((_, py)) = prev {
                    let _ = write!(d, "{},{} ", n(f.px(x)), n(f.py(py)));
                }
            }
            let _ = write!(d, "{},{} ", n(f.px(x)), n(f.py(y)));
            prev = Some((x, y));
        }
        let st = series_style(i);
        let _ = writeln!(
            svg,
            r#"<polyline class="series" data-name="{}" fill="none" stroke="{}" stroke-width="1.8"{} points="{}"/>"#,
            escape(name.as_ref()),
            st.colour,
            st.dash_attr(),
            d.trim_end()
        );
        // Markers on every point of a short series, on about 25 evenly spaced ones of a long
        // one: a one-point series is still visible and each line shows its marker.
        let kept: Vec<(f64, f64)> = finite_points(pts).collect();
        let stride = kept.len().div_ceil(25).max(1);
        for (k, (x, y)) in kept.iter().enumerate() {
            if k % stride == 0 || k + 1 == kept.len() {
                style::series_marker(svg, &st, f.px(*x), f.py(*y));
            }
        }
    }
}

/// Error bars of line series: `intervals[i][k]` is the (low, high) of series i's point k.
fn line_intervals<S: AsRef<str>>(
    svg: &mut String,
    f: &Frame,
    series: &[(S, Vec<(f64, f64)>)],
    intervals: &[Vec<(f64, f64)>],
) {
    for (i, ((name, pts), ivs)) in series.iter().zip(intervals).enumerate() {
        for (&(x, y), &(lo, hi)) in pts.iter().zip(ivs) {
            if !(x.is_finite() && drawable_interval(lo, hi, f.log_y)) {
                continue;
            }
            let tip = format!(
                "{}: {} [{}, {}]",
                name.as_ref(),
                short(y),
                short(lo),
                short(hi)
            );
            style::error_bar(svg, f.px(x), f.py(lo), f.py(hi), colour(i), &tip);
        }
    }
}

fn drawable_interval(lo: f64, hi: f64, log_y: bool) -> bool {
    lo.is_finite() && hi.is_finite() && hi > lo && (!log_y || lo > 0.0)
}

/// Four significant digits, for tooltips.
fn short(v: f64) -> String {
    if !v.is_finite() {
        return "—".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let decimals = (3.0 - v.abs().log10().floor()).clamp(0.0, 9.0) as usize;
    format!("{v:.decimals$}")
}

/// A line chart of named (x, y) series as SVG text.
pub fn line_chart_svg<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
) -> String {
    line_chart_svg_with(title, x_label, y_label, series, &ChartOptions::default())
}

/// Empirical CDF points of `values` (sorted; y = i/n), thinned to at most ~2000 points.
pub fn cdf_points(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let len = v.len();
    if len == 0 {
        return Vec::new();
    }
    let stride = len.div_ceil(2000).max(1);
    let mut pts = Vec::with_capacity(len / stride + 2);
    for (i, x) in v.iter().enumerate() {
        if i % stride == 0 || i + 1 == len {
            pts.push((*x, (i + 1) as f64 / len as f64));
        }
    }
    pts
}

/// An empirical CDF plot (y: fraction of samples ≤ x) as SVG text.
pub fn cdf_chart_svg<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    samples: &[(S, Vec<f64>)],
) -> String {
    let series: Vec<(&str, Vec<(f64, f64)>)> = samples
        .iter()
        .map(|(name, v)| (name.as_ref(), cdf_points(v)))
        .collect();
    let (x0, x1, _, _) =
        bounds(series.iter().map(|(_, p)| p.as_slice())).unwrap_or((0.0, 1.0, 0.0, 1.0));
    let (xt, xs) = nice_ticks(x0.min(0.0), x1, 8);
    let (yt, ys) = nice_ticks(0.0, 1.0, 5);
    let f = Frame {
        x0: xt[0],
        x1: *xt.last().unwrap(),
        y0: 0.0,
        y1: 1.0,
        log_y: false,
        log_x: false,
    };
    let mut svg = String::new();
    let names: Vec<&str> = series.iter().map(|(s, _)| *s).collect();
    header(&mut svg, title, total_width(&names));
    axes(
        &mut svg,
        &f,
        Some(&labelled(&xt, xs)),
        &labelled(&yt, ys),
        x_label,
        "fraction ≤ x (CDF)",
    );
    polylines(&mut svg, &f, &series, true);
    legend(&mut svg, &names, Kind::Line);
    footer(&mut svg);
    svg
}

/// A grouped bar chart as SVG text: for each category a group with one bar per series;
/// `series[i].1[j]` is series i's value in category j (missing or non-finite → no bar).
pub fn bar_chart_svg<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
) -> String {
    bar_chart_svg_with(title, y_label, categories, series, &ChartOptions::default())
}

/// How to draw a chart beyond its data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChartOptions {
    /// Logarithmic y axis (decades, with 2 and 5 between them over short ranges). Values ≤ 0
    /// cannot be drawn on it and are skipped like non-finite ones.
    pub log_y: bool,
    /// Logarithmic x axis (line charts; points with x ≤ 0 are skipped).
    pub log_x: bool,
    /// Reference marks, drawn as dashed black lines.
    pub marks: Vec<Mark>,
    /// Legend entry for the marks (e.g. "paper (P0 Table 14)"); `None`: "reference".
    pub marks_legend: Option<String>,
    /// Error bars: `intervals[i][k]` is the (low, high) end of series i's value k (bar
    /// charts: in category k); non-finite or empty ends draw nothing. Empty: no error bars.
    pub intervals: Vec<Vec<(f64, f64)>>,
    /// Legend entry for the error bars (e.g. "95% interval over 5 seeds"); `None`:
    /// "interval".
    pub intervals_legend: Option<String>,
}

/// Ticks of a logarithmic axis covering `[lo, hi]` (both > 0): powers of ten, plus 2× and 5×
/// when the range spans at most three decades. The first tick is ≤ lo and the last ≥ hi.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    let d0 = lo.log10().floor() as i32;
    let d1 = hi.log10().ceil().max(d0 as f64 + 1.0) as i32;
    let fine = d1 - d0 <= 3;
    let mut ticks = Vec::new();
    for d in d0..=d1 {
        let base = 10f64.powi(d);
        for m in [1.0, 2.0, 5.0] {
            if m != 1.0 && !fine {
                continue;
            }
            ticks.push(m * base);
        }
    }
    // Trim ticks beyond the ones that bracket the data.
    let first = ticks
        .iter()
        .rposition(|t| *t <= lo * (1.0 + 1e-12))
        .unwrap_or(0);
    let last = ticks
        .iter()
        .position(|t| *t >= hi * (1.0 - 1e-12))
        .unwrap_or(ticks.len() - 1);
    ticks[first..=last].to_vec()
}

/// A tick label of a logarithmic axis: plain decimals from 0.0001 to 10^6, else exponent form.
pub fn format_log_tick(v: f64) -> String {
    if !(1e-4..1e6).contains(&v.abs()) {
        return format!("{v:.0e}");
    }
    let decimals = (-v.abs().log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

fn labelled(ticks: &[f64], step: f64) -> Vec<(f64, String)> {
    ticks.iter().map(|t| (*t, format_tick(*t, step))).collect()
}

/// The y frame and labelled ticks for values in `[lo, hi]`.
fn y_axis(lo: f64, hi: f64, log_y: bool) -> (f64, f64, Vec<(f64, String)>, f64) {
    if log_y {
        let t = log_ticks(lo, hi);
        let labels = t.iter().map(|v| (*v, format_log_tick(*v))).collect();
        (t[0], *t.last().unwrap(), labels, 0.0)
    } else {
        let (t, step) = nice_ticks(lo, hi, 6);
        (t[0], *t.last().unwrap(), labelled(&t, step), step)
    }
}

fn mark_legend(svg: &mut String, row: usize, label: &str) {
    let x = WIDTH - MARGIN_RIGHT + 14.0;
    let y = MARGIN_TOP + 10.0 + 20.0 * row as f64;
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black" stroke-width="2" stroke-dasharray="4 2"/>"#,
        n(x - 2.0),
        n(y - 4.0),
        n(x + 18.0),
        n(y - 4.0)
    );
    style::reference_marker(svg, x + 8.0, y - 4.0);
    let _ = writeln!(
        svg,
        r#"<text class="legend-entry" x="{}" y="{}">{}</text>"#,
        n(x + 24.0),
        n(y),
        escape(label)
    );
}

fn mark_line(svg: &mut String, f: &Frame, x0: f64, x1: f64, m: &Mark) {
    let y = f.py(m.value);
    let _ = writeln!(
        svg,
        r#"<line class="mark" x1="{}" y1="{}" x2="{}" y2="{}" stroke="black" stroke-width="2" stroke-dasharray="4 2"><title>{}</title></line>"#,
        n(x0),
        n(y),
        n(x1),
        n(y),
        escape(&m.label)
    );
    style::reference_marker(svg, (x0 + x1) / 2.0, y);
}

/// [`bar_chart_svg`] with [`ChartOptions`] (log axis, reference marks).
pub fn bar_chart_svg_with<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
    opts: &ChartOptions,
) -> String {
    let drawable = |v: &f64| v.is_finite() && (!opts.log_y || *v > 0.0);
    let ends: Vec<f64> = opts
        .intervals
        .iter()
        .flatten()
        .filter(|(lo, hi)| drawable_interval(*lo, *hi, opts.log_y))
        .flat_map(|&(lo, hi)| [lo, hi])
        .collect();
    let values = series
        .iter()
        .flat_map(|(_, vals)| vals.iter())
        .chain(opts.marks.iter().map(|m| &m.value))
        .chain(ends.iter())
        .filter(|v| drawable(v));
    let (mut lo, mut hi): (f64, f64) = if opts.log_y {
        (f64::INFINITY, f64::NEG_INFINITY)
    } else {
        (0.0, 0.0)
    };
    for v in values {
        lo = lo.min(*v);
        hi = hi.max(*v);
    }
    if !opts.log_y && hi == lo {
        hi = lo + 1.0;
    }
    let (y0, y1, yt, ys) = y_axis(lo, hi, opts.log_y);
    let f = Frame {
        x0: 0.0,
        x1: categories.len().max(1) as f64,
        y0,
        y1,
        log_y: opts.log_y,
        log_x: false,
    };
    let mut svg = String::new();
    let mut names: Vec<&str> = series.iter().map(|(s, _)| s.as_ref()).collect();
    let marks_legend = opts.marks_legend.as_deref().unwrap_or("reference");
    if !opts.marks.is_empty() {
        names.push(marks_legend);
    }
    let intervals_legend = opts.intervals_legend.as_deref().unwrap_or("interval");
    if !opts.intervals.is_empty() {
        names.push(intervals_legend);
    }
    header(&mut svg, title, total_width(&names));
    svg.push_str(&style::defs(series.len()));
    axes(&mut svg, &f, None, &yt, "", y_label);
    let nseries = series.len().max(1) as f64;
    let group_w = f.px(1.0) - f.px(0.0);
    let bar_w = group_w * 0.8 / nseries;
    // The bars' base: zero on a linear axis, the bottom of a log axis.
    let base = if opts.log_y { y0 } else { 0.0 };
    for (j, cat) in categories.iter().enumerate() {
        let gx = f.px(j as f64) + group_w * 0.1;
        for (i, (name, vals)) in series.iter().enumerate() {
            let Some(v) = vals.get(j).copied().filter(drawable) else {
                continue;
            };
            let (ya, yb) = (f.py(v.max(base)), f.py(v.min(base)));
            let tip = if opts.log_y {
                // Four significant digits: the axis spans decades, one step means nothing.
                let decimals = (3.0 - v.abs().log10().floor()).clamp(0.0, 9.0) as usize;
                format!("{v:.decimals$}")
            } else {
                format_tick(v, ys / 100.0)
            };
            let _ = writeln!(
                svg,
                r#"<rect class="bar" x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {}</title></rect>"#,
                n(gx + bar_w * i as f64),
                n(ya),
                n(bar_w * 0.92),
                n((yb - ya).max(0.0)),
                series_style(i).bar_fill(i),
                escape(&format!("{} / {}", name.as_ref(), cat.as_ref())),
                escape(&tip)
            );
            if let Some(&(lo, hi)) = opts.intervals.get(i).and_then(|iv| iv.get(j)) {
                if drawable_interval(lo, hi, opts.log_y) {
                    let tip = format!(
                        "{} / {}: {} [{}, {}]",
                        name.as_ref(),
                        cat.as_ref(),
                        short(v),
                        short(lo),
                        short(hi)
                    );
                    let x = gx + bar_w * (i as f64 + 0.46);
                    style::error_bar(&mut svg, x, f.py(lo), f.py(hi), "#222222", &tip);
                }
            }
        }
        // A label wider than its group wraps at spaces onto lines of their own.
        let cx = n(f.px(j as f64 + 0.5));
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">"#,
            cx,
            n(HEIGHT - MARGIN_BOTTOM + 16.0)
        );
        for (k, line) in wrap_label(cat.as_ref(), group_w * 0.95).iter().enumerate() {
            let dy = if k == 0 { 0.0 } else { 14.0 };
            let _ = write!(
                svg,
                r#"<tspan x="{}" dy="{}">{}</tspan>"#,
                cx,
                n(dy),
                escape(line)
            );
        }
        let _ = writeln!(svg, "</text>");
    }
    for m in opts.marks.iter().filter(|m| drawable(&m.value)) {
        let (x0, x1) = match (m.category, m.series) {
            (Some(j), Some(i)) => {
                let x = f.px(j as f64) + group_w * 0.1 + bar_w * i as f64;
                (x - bar_w * 0.1, x + bar_w * 1.02)
            }
            (Some(j), None) => (f.px(j as f64) + group_w * 0.05, f.px(j as f64 + 0.95)),
            _ => (MARGIN_LEFT, WIDTH - MARGIN_RIGHT),
        };
        mark_line(&mut svg, &f, x0, x1, m);
    }
    legend(&mut svg, &names[..series.len()], Kind::Bar);
    extra_legends(&mut svg, series.len(), opts, marks_legend, intervals_legend);
    footer(&mut svg);
    svg
}

/// Legend rows after the series: the marks', then the error bars'.
fn extra_legends(
    svg: &mut String,
    mut row: usize,
    opts: &ChartOptions,
    marks_legend: &str,
    intervals_legend: &str,
) {
    if !opts.marks.is_empty() {
        mark_legend(svg, row, marks_legend);
        row += 1;
    }
    if !opts.intervals.is_empty() {
        interval_legend(svg, row, intervals_legend);
    }
}

/// [`line_chart_svg`] with [`ChartOptions`]: log axes (points with y ≤ 0 on a log y axis or
/// x ≤ 0 on a log x axis are skipped), marks drawn as horizontal dashed lines across the plot,
/// error bars.
pub fn line_chart_svg_with<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    opts: &ChartOptions,
) -> String {
    let kept: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, pts)| {
            let pts = pts
                .iter()
                .map(|&(x, y)| {
                    let off = (opts.log_y && y <= 0.0) || (opts.log_x && x <= 0.0);
                    if off {
                        (x, f64::NAN)
                    } else {
                        (x, y)
                    }
                })
                .collect();
            (name.as_ref(), pts)
        })
        .collect();
    let (x0, x1, mut lo, mut hi) =
        bounds(kept.iter().map(|(_, p)| p.as_slice())).unwrap_or((0.0, 1.0, 0.0, 1.0));
    let ends = opts
        .intervals
        .iter()
        .flatten()
        .filter(|(l, h)| drawable_interval(*l, *h, opts.log_y))
        .flat_map(|&(l, h)| [l, h]);
    let marks = opts.marks.iter().map(|m| m.value);
    for v in ends.chain(marks) {
        if v.is_finite() && (!opts.log_y || v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    // Anchor non-negative data at zero on a linear axis, so charts compare by eye.
    if !opts.log_y && lo > 0.0 {
        lo = 0.0;
    }
    let (fx0, fx1, x_labels) = x_axis(x0, x1, opts.log_x);
    let (y0, y1, yt, _) = y_axis(lo, hi, opts.log_y);
    let f = Frame {
        x0: fx0,
        x1: fx1,
        y0,
        y1,
        log_y: opts.log_y,
        log_x: opts.log_x,
    };
    let mut svg = String::new();
    let mut names: Vec<&str> = kept.iter().map(|(s, _)| *s).collect();
    let marks_legend = opts.marks_legend.as_deref().unwrap_or("reference");
    let intervals_legend = opts.intervals_legend.as_deref().unwrap_or("interval");
    if !opts.marks.is_empty() {
        names.push(marks_legend);
    }
    if !opts.intervals.is_empty() {
        names.push(intervals_legend);
    }
    header(&mut svg, title, total_width(&names));
    axes(&mut svg, &f, Some(&x_labels), &yt, x_label, y_label);
    polylines(&mut svg, &f, &kept, false);
    line_intervals(&mut svg, &f, &kept, &opts.intervals);
    for m in opts
        .marks
        .iter()
        .filter(|m| m.value.is_finite() && (!opts.log_y || m.value > 0.0))
    {
        mark_line(&mut svg, &f, MARGIN_LEFT, WIDTH - MARGIN_RIGHT, m);
    }
    legend(&mut svg, &names[..kept.len()], Kind::Line);
    extra_legends(&mut svg, kept.len(), opts, marks_legend, intervals_legend);
    footer(&mut svg);
    svg
}

/// The x frame and labelled ticks for values in `[lo, hi]`.
fn x_axis(lo: f64, hi: f64, log_x: bool) -> (f64, f64, Vec<(f64, String)>) {
    if log_x {
        let t = log_ticks(lo, hi);
        let labels = t.iter().map(|v| (*v, format_log_tick(*v))).collect();
        (t[0], *t.last().unwrap(), labels)
    } else {
        let (t, step) = nice_ticks(lo, hi, 8);
        (t[0], *t.last().unwrap(), labelled(&t, step))
    }
}

/// Write the SVG text `svg` to `path` (its folder created if missing).
pub fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, svg).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// Write the chart and, next to it, its data ([`chart_data`]).
fn write_with_data(path: &Path, svg: &str, data: &ChartData) -> anyhow::Result<()> {
    write(path, svg)?;
    chart_data::save(path, data)
}

fn named<S: AsRef<str>, T>(
    series: &[(S, T)],
    f: impl Fn(&T) -> Vec<(f64, Option<f64>)>,
) -> Vec<(String, chart_data::Points)> {
    series
        .iter()
        .map(|(name, v)| (name.as_ref().to_string(), f(v)))
        .collect()
}

fn line_data<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    opts: &ChartOptions,
) -> ChartData {
    ChartData::Line {
        title: title.to_string(),
        x_label: x_label.to_string(),
        y_label: y_label.to_string(),
        series: named(series, |p| chart_data::points(p)),
        log_x: opts.log_x,
        log_y: opts.log_y,
        marks: opts.marks.clone(),
        marks_legend: opts.marks_legend.clone(),
    }
}

fn bar_data<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
    opts: &ChartOptions,
) -> ChartData {
    ChartData::Bar {
        title: title.to_string(),
        y_label: y_label.to_string(),
        categories: categories.iter().map(|c| c.as_ref().to_string()).collect(),
        series: series
            .iter()
            .map(|(name, v)| {
                let vals = v.iter().map(|x| chart_data::finite(*x)).collect();
                (name.as_ref().to_string(), vals)
            })
            .collect(),
        log_y: opts.log_y,
        marks: opts.marks.clone(),
        marks_legend: opts.marks_legend.clone(),
    }
}

/// Write a line chart of named (x, y) series to `path`.
pub fn line_chart<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    path: &Path,
) -> anyhow::Result<()> {
    line_chart_with(
        title,
        x_label,
        y_label,
        series,
        &ChartOptions::default(),
        path,
    )
}

/// Write a line chart with [`ChartOptions`] to `path` (see [`line_chart_svg_with`]).
pub fn line_chart_with<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    opts: &ChartOptions,
    path: &Path,
) -> anyhow::Result<()> {
    write_with_data(
        path,
        &line_chart_svg_with(title, x_label, y_label, series, opts),
        &line_data(title, x_label, y_label, series, opts),
    )
}

/// Write a grouped bar chart with [`ChartOptions`] to `path` (see [`bar_chart_svg_with`]).
pub fn bar_chart_with<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
    opts: &ChartOptions,
    path: &Path,
) -> anyhow::Result<()> {
    write_with_data(
        path,
        &bar_chart_svg_with(title, y_label, categories, series, opts),
        &bar_data(title, y_label, categories, series, opts),
    )
}

/// Write the empirical CDF of each named sample set to `path`.
pub fn cdf_chart<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    samples: &[(S, Vec<f64>)],
    path: &Path,
) -> anyhow::Result<()> {
    let data = ChartData::Cdf {
        title: title.to_string(),
        x_label: x_label.to_string(),
        series: named(samples, |v| chart_data::points(&cdf_points(v))),
    };
    write_with_data(path, &cdf_chart_svg(title, x_label, samples), &data)
}

/// Write a grouped bar chart to `path` (see [`bar_chart_svg`]).
pub fn bar_chart<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
    path: &Path,
) -> anyhow::Result<()> {
    bar_chart_with(
        title,
        y_label,
        categories,
        series,
        &ChartOptions::default(),
        path,
    )
}

/// The ends of a mean's 95% interval as drawn by an error bar ([`ChartOptions::intervals`]):
/// (low, high), or NaN ends (nothing drawn) without an interval (one run, no value). Sweeps and
/// series of runs draw their error bars with it.
pub fn interval_ends(i: Option<&Interval>) -> (f64, f64) {
    i.and_then(|i| i.half_width.map(|_| (i.lo(), i.hi())))
        .unwrap_or((f64::NAN, f64::NAN))
}

/// The legend entry of those error bars: "95% interval over 3 seeds".
pub fn interval_legend_text(runs: usize, noun: &str) -> String {
    format!("95% interval over {runs} {noun}s")
}

/// Split `label` at spaces into lines no wider than `width` pixels (12 px sans-serif is about
/// 6.5 px per character); a single word longer than that stays on its own line.
fn wrap_label(label: &str, width: f64) -> Vec<String> {
    let max_chars = ((width / 6.5).floor() as usize).max(4);
    let mut lines: Vec<String> = Vec::new();
    for word in label.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= max_chars => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_category_labels_wrap_instead_of_overlapping() {
        assert_eq!(wrap_label("alone", 100.0), vec!["alone"]);
        assert_eq!(
            wrap_label("both ACK-sep + filter", 80.0),
            vec!["both ACK-sep", "+ filter"]
        );
        let svg = bar_chart_svg(
            "t",
            "y",
            &["both ACK-sep + filter"; 6],
            &[("a", vec![1.0; 6])],
        );
        assert!(svg.contains("<tspan"), "{svg}");
    }

    use super::*;

    /// Check that tags balance: every `<x ...>` is closed by `</x>` in order, `<x/>` closes
    /// itself. Returns the element names seen.
    fn check_balanced(svg: &str) -> Vec<String> {
        let mut stack: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            assert!(!tag.contains('<'), "'<' inside tag: {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().expect("close without open");
                assert_eq!(open, name.trim(), "mismatched close");
            } else {
                let name: String = tag
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '/')
                    .collect();
                seen.push(name.clone());
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        seen
    }

    #[test]
    fn nice_ticks_are_round_and_cover_the_range() {
        let (t, s) = nice_ticks(0.0, 97.0, 6);
        assert_eq!(s, 20.0);
        assert_eq!(t, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let (t, s) = nice_ticks(0.013, 0.087, 5);
        assert_eq!(s, 0.02);
        assert!(t[0] <= 0.013 && *t.last().unwrap() >= 0.087);
        assert_eq!(format_tick(t[1], s), "0.02");
        let (t, _) = nice_ticks(5.0, 5.0, 5);
        assert!(t[0] < 5.0 && *t.last().unwrap() > 5.0);
        let (t, s) = nice_ticks(-3.0, 7.0, 4);
        assert_eq!(s, 2.5);
        assert_eq!(t.first(), Some(&-5.0));
        assert_eq!(t.last(), Some(&7.5));
        assert_eq!(format_tick(2.5, 2.5), "2.5");
        assert_eq!(format_tick(5.0, 2.5), "5.0");
        assert_eq!(format_tick(4000.0, 1000.0), "4000");
    }

    #[test]
    fn line_chart_is_balanced_and_deterministic() {
        let series = vec![
            (
                "fifo & co",
                vec![(0.0, 1.0), (1.0, 4.0), (2.0, f64::NAN), (3.0, 2.0)],
            ),
            ("<prio>", vec![(0.0, 0.5), (3.0, 3.5)]),
        ];
        let a = line_chart_svg("Queue <delay>", "time (s)", "delay (ms)", &series);
        let b = line_chart_svg("Queue <delay>", "time (s)", "delay (ms)", &series);
        assert_eq!(a, b);
        let tags = check_balanced(&a);
        assert_eq!(tags.iter().filter(|t| *t == "polyline").count(), 2);
        assert!(a.contains("Queue &lt;delay&gt;"));
        assert!(a.contains("fifo &amp; co"));
        assert!(!a.contains("NaN"));
    }

    #[test]
    fn cdf_ends_at_one_and_is_monotone() {
        let pts = cdf_points(&[3.0, 1.0, 2.0, 2.0]);
        assert_eq!(pts.first(), Some(&(1.0, 0.25)));
        assert_eq!(pts.last(), Some(&(3.0, 1.0)));
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let big: Vec<f64> = (0..100_000).map(|i| i as f64).collect();
        assert!(cdf_points(&big).len() <= 2001);
        let svg = cdf_chart_svg("lat", "ms", &[("a", vec![1.0, 5.0]), ("b", vec![])]);
        check_balanced(&svg);
    }

    #[test]
    fn bar_chart_draws_one_bar_per_value() {
        let svg = bar_chart_svg(
            "Idle",
            "idle (%)",
            &["64", "256"],
            &[("RR", vec![1.0, 2.0]), ("FCFS", vec![3.0, f64::INFINITY])],
        );
        let tags = check_balanced(&svg);
        assert_eq!(svg.matches("class=\"bar\"").count(), 3);
        assert!(tags.contains(&"text".to_string()));
    }

    #[test]
    fn log_ticks_bracket_the_data_in_decades() {
        assert_eq!(
            log_ticks(3.0, 200.0),
            vec![2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        assert_eq!(
            log_ticks(3.0, 2000.0),
            vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]
        );
        let t = log_ticks(0.004, 1900.0);
        assert_eq!(t.first(), Some(&0.001));
        assert_eq!(t.last(), Some(&10_000.0));
        assert_eq!(t.len(), 8, "{t:?}");
        assert_eq!(format_log_tick(0.01), "0.01");
        assert_eq!(format_log_tick(2000.0), "2000");
        assert_eq!(format_log_tick(1e7), "1e7");
    }

    #[test]
    fn log_bar_chart_shows_small_bars_next_to_a_large_one() {
        // 5 ms beside 1900 ms: on a linear axis the small bar is under 1 px tall.
        let cats = ["C0", "C1"];
        let series = [("fifo", vec![5.0, 9.0]), ("prio", vec![3.0, 1900.0])];
        let heights = |svg: &str| -> Vec<f64> {
            svg.lines()
                .filter(|l| l.contains("class=\"bar\""))
                .map(|l| {
                    let h = l.split("height=\"").nth(1).unwrap();
                    h[..h.find('"').unwrap()].parse().unwrap()
                })
                .collect()
        };
        let lin = heights(&bar_chart_svg("t", "ms", &cats, &series));
        let log = heights(&bar_chart_svg_with(
            "t",
            "ms",
            &cats,
            &series,
            &ChartOptions {
                log_y: true,
                ..Default::default()
            },
        ));
        assert!(lin[0] < 2.0, "{lin:?}");
        assert!(log[0] > 50.0, "{log:?}");
        assert!(log.windows(1).all(|h| h[0] > 0.0));
    }

    #[test]
    fn marks_are_drawn_once_each_with_a_legend_entry() {
        let opts = ChartOptions {
            log_y: false,
            marks: vec![
                Mark::bar("paper: 750", 750.0, 0, 0),
                Mark::line("link", 800.0),
            ],
            marks_legend: Some("paper (P3)".into()),
            ..Default::default()
        };
        let svg = bar_chart_svg_with("t", "kbit/s", &["alone"], &[("up", vec![790.0])], &opts);
        check_balanced(&svg);
        assert_eq!(svg.matches("class=\"mark\"").count(), 2);
        assert!(svg.contains("paper (P3)") && svg.contains("paper: 750"));
        let line = line_chart_svg_with(
            "t",
            "s",
            "ms",
            &[("a", vec![(0.0, 1.0), (1.0, 100.0)])],
            &ChartOptions {
                log_y: true,
                ..opts
            },
        );
        check_balanced(&line);
        assert_eq!(line.matches("class=\"mark\"").count(), 2);
    }

    /// The value of attribute `name` in each element of `svg` whose text contains `marker`.
    fn attrs(svg: &str, marker: &str, name: &str) -> Vec<String> {
        svg.lines()
            .filter(|l| l.contains(marker))
            .filter_map(|l| {
                let k = l.find(&format!(" {name}=\""))? + name.len() + 3;
                Some(l[k..k + l[k..].find('"')?].to_string())
            })
            .collect()
    }

    #[test]
    fn thirteen_bar_series_get_thirteen_fills_and_the_paper_its_own_legend_entry() {
        let names: Vec<String> = (0..13).map(|i| format!("s{i}")).collect();
        let series: Vec<(String, Vec<f64>)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), vec![10.0 + i as f64, 20.0]))
            .collect();
        let opts = ChartOptions {
            marks: vec![
                Mark::bar("P4: 12", 12.0, 0, 0),
                Mark::bar("P4: 9", 9.0, 1, 8),
            ],
            marks_legend: Some("P4 Table 3 (paper)".into()),
            ..Default::default()
        };
        let svg = bar_chart_svg_with("t", "req/s", &["a", "b"], &series, &opts);
        check_balanced(&svg);
        let fills = attrs(&svg, "class=\"bar\"", "fill");
        assert_eq!(fills.len(), 26);
        // Category a: one bar per series, every fill different (hatches past 8 colours).
        let first: std::collections::BTreeSet<&String> = fills.iter().step_by(1).take(13).collect();
        assert_eq!(first.len(), 13, "{fills:?}");
        for i in 8..13 {
            assert!(
                svg.contains(&format!(r#"<pattern id="hatch-{i}""#)),
                "hatch {i}"
            );
        }
        // A legend entry per series plus one for the paper's marks, drawn with the ring
        // used nowhere else.
        let entries = svg.matches("class=\"legend-entry\"").count();
        assert_eq!(entries, 14);
        assert!(svg.contains(">P4 Table 3 (paper)</text>"));
        assert_eq!(svg.matches("class=\"mark\"").count(), 2);
        assert_eq!(svg.matches("class=\"mark-marker\"").count(), 3);
        assert_eq!(svg.matches("class=\"marker\"").count(), 0);
    }

    #[test]
    fn thirteen_line_series_differ_in_colour_dash_or_marker() {
        let series: Vec<(String, Vec<(f64, f64)>)> = (0..13)
            .map(|i| {
                (
                    format!("s{i}"),
                    vec![(0.0, i as f64), (1.0, 2.0 * i as f64)],
                )
            })
            .collect();
        let svg = line_chart_svg("t", "x", "y", &series);
        check_balanced(&svg);
        let styles: std::collections::BTreeSet<String> = svg
            .lines()
            .filter(|l| l.contains("class=\"series\""))
            .map(|l| {
                let dash = attrs(l, "series", "stroke-dasharray")
                    .pop()
                    .unwrap_or_default();
                let stroke = attrs(l, "series", "stroke").pop().unwrap();
                format!("{stroke} {dash}")
            })
            .collect();
        assert_eq!(styles.len(), 13, "{styles:?}");
        // Each point has a marker, and the legend draws each series' line and marker again.
        assert_eq!(svg.matches("class=\"marker\"").count(), 26 + 13);
    }

    #[test]
    fn intervals_draw_error_bars_that_fit_in_the_axis() {
        let opts = ChartOptions {
            intervals: vec![vec![(8.0, 12.0), (f64::NAN, f64::NAN), (25.0, 41.0)]],
            intervals_legend: Some("95% interval over 5 seeds".into()),
            ..Default::default()
        };
        let pts = vec![(1.0, 10.0), (2.0, 20.0), (3.0, 33.0)];
        let svg = line_chart_svg_with("t", "x", "y (ms)", &[("m", pts)], &opts);
        check_balanced(&svg);
        // Two bars (the NaN interval draws none) and the legend's sample.
        assert_eq!(svg.matches("class=\"error-bar\"").count(), 3);
        assert!(svg.contains(">95% interval over 5 seeds</text>"));
        assert!(svg.contains("m: 33.00 [25.00, 41.00]"), "{svg}");
        // The y axis reaches past the top of the highest interval (41): a tick at 45 or 50.
        assert!(
            svg.contains(">45</text>") || svg.contains(">50</text>"),
            "{svg}"
        );
        let bars = bar_chart_svg_with(
            "t",
            "y",
            &["a", "b"],
            &[("m", vec![10.0, 20.0])],
            &ChartOptions {
                intervals: vec![vec![(9.0, 11.0), (20.0, 20.0)]],
                ..Default::default()
            },
        );
        check_balanced(&bars);
        // An empty interval (one value: no spread to show) draws nothing.
        assert_eq!(bars.matches("class=\"error-bar\"").count(), 2);
        assert!(bars.contains(">interval</text>"));
    }

    #[test]
    fn log_log_line_chart_labels_decades_on_both_axes() {
        let pts = vec![(10.0, 0.01), (100.0, 0.1), (1000.0, 1.0)];
        let svg = line_chart_svg_with(
            "t",
            "hosts",
            "s",
            &[("time", pts)],
            &ChartOptions {
                log_x: true,
                log_y: true,
                ..Default::default()
            },
        );
        check_balanced(&svg);
        for t in [
            ">10</text>",
            ">100</text>",
            ">1000</text>",
            ">0.01</text>",
            ">1</text>",
        ] {
            assert!(svg.contains(t), "{t} in {svg}");
        }
        // Equal ratios are equal distances: x = 10, 100, 1000 are evenly spaced.
        let xs: Vec<f64> = attrs(&svg, "class=\"marker\" cx", "cx")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert!((xs[1] - xs[0] - (xs[2] - xs[1])).abs() < 0.05, "{xs:?}");
    }

    #[test]
    fn a_long_title_starts_at_the_left_edge_instead_of_overflowing_it() {
        let short = line_chart_svg("Short", "x", "y", &[("a", vec![(0.0, 1.0)])]);
        assert!(
            short.contains(r#"text-anchor="middle" font-size="15""#),
            "{short}"
        );
        let title = "Different object size per host (300B, 1K, 10K, 100K, mixed, repeating) — ours and P4 Table 4";
        let long = line_chart_svg(title, "x", "y", &[("a", vec![(0.0, 1.0)])]);
        assert!(
            long.contains(r#"<text x="8.00" y="24" text-anchor="start" font-size="15""#),
            "{long}"
        );
    }

    #[test]
    fn writes_file_creating_the_folder() {
        let dir = std::env::temp_dir().join(format!("netsched-svg-{}", std::process::id()));
        let p = dir.join("sub/x.svg");
        line_chart("t", "x", "y", &[("s".to_string(), vec![(0.0, 0.0)])], &p).unwrap();
        assert!(std::fs::read_to_string(&p).unwrap().starts_with("<svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
