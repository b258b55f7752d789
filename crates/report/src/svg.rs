//! Hand-written SVG charts: line charts (time series), CDF plots and grouped bar charts.
//!
//! No plotting crate and no font files: text is SVG `<text>` elements that any browser or
//! Markdown viewer renders with its own fonts. Output is deterministic (fixed number formatting,
//! series drawn in the order given), so the same data always gives the same bytes.
//!
//! Every chart has a title, axes with "nice" ticks (1, 2, 2.5 or 5 × 10^k), axis labels and a
//! legend. Non-finite values are skipped, never drawn.
//!
//! API (all write a file and also have a `*_svg` variant returning the text):
//! - [`line_chart`]`(title, x_label, y_label, series, path)` — `series: &[(name, Vec<(x, y)>)]`
//! - [`cdf_chart`]`(title, x_label, samples, path)` — `samples: &[(name, Vec<value>)]`; draws
//!   the empirical CDF of each sample set (y axis: fraction 0–1)
//! - [`bar_chart`]`(title, y_label, categories, series, path)` — one group of bars per
//!   category, one bar per series in each group (like the papers' grouped bar charts)
//! - [`bar_chart_with`] / [`line_chart_with`]: the same with [`ChartOptions`] — a logarithmic
//!   y axis (for values that span orders of magnitude) and reference [`Mark`]s (a paper's own
//!   figures drawn as dashed black ticks over the bars, or dashed lines across a line chart)
//!
//! Cost: O(total points) time and output size.

use std::fmt::Write as _;
use std::path::Path;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const MARGIN_LEFT: f64 = 78.0;
const MARGIN_RIGHT: f64 = 170.0;
const MARGIN_TOP: f64 = 42.0;
const MARGIN_BOTTOM: f64 = 58.0;

/// Colours for series, in order (colour-blind-friendly palette, then repeats).
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Escape text for an SVG text node or attribute.
pub fn escape(text: &str) -> String {
    let mut s = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&apos;"),
            _ => s.push(c),
        }
    }
    s
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

/// A number in SVG coordinates: two decimals, no "-0.00".
fn n(v: f64) -> String {
    let s = format!("{v:.2}");
    if s == "-0.00" {
        "0.00".to_string()
    } else {
        s
    }
}

struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
    /// `y0`/`y1` are values, the scale between them is logarithmic (both > 0).
    log_y: bool,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        let w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
        MARGIN_LEFT + (x - self.x0) / (self.x1 - self.x0) * w
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
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        n((MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2.0),
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
    x_ticks: Option<(&[f64], f64)>,
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
    if let Some((ticks, step)) = x_ticks {
        for &t in ticks {
            let x = f.px(t);
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
                escape(&format_tick(t, step))
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

fn legend<S: AsRef<str>>(svg: &mut String, names: &[S]) {
    let x = WIDTH - MARGIN_RIGHT + 14.0;
    svg.push_str("<g class=\"legend\">\n");
    for (i, name) in names.iter().enumerate() {
        let y = MARGIN_TOP + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="14" height="10" fill="{}"/>"#,
            n(x),
            n(y - 9.0),
            colour(i)
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">{}</text>"#,
            n(x + 20.0),
            n(y),
            escape(name.as_ref())
        );
    }
    svg.push_str("</g>\n");
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
        let _ = writeln!(
            svg,
            r#"<polyline class="series" data-name="{}" fill="none" stroke="{}" stroke-width="1.8" points="{}"/>"#,
            escape(name.as_ref()),
            colour(i),
            d.trim_end()
        );
        // Mark isolated points so a one-point series is still visible.
        if pts.len() <= 25 {
            for (x, y) in finite_points(pts) {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{}" cy="{}" r="2.5" fill="{}"/>"#,
                    n(f.px(x)),
                    n(f.py(y)),
                    colour(i)
                );
            }
        }
    }
}

/// A line chart of named (x, y) series as SVG text.
pub fn line_chart_svg<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
) -> String {
    let (x0, x1, mut y0, y1) =
        bounds(series.iter().map(|(_, p)| p.as_slice())).unwrap_or((0.0, 1.0, 0.0, 1.0));
    // Anchor non-negative data at zero so bars of different charts compare by eye.
    if y0 > 0.0 {
        y0 = 0.0;
    }
    let (xt, xs) = nice_ticks(x0, x1, 8);
    let (yt, ys) = nice_ticks(y0, y1, 6);
    let f = Frame {
        x0: xt[0],
        x1: *xt.last().unwrap(),
        y0: yt[0],
        y1: *yt.last().unwrap(),
        log_y: false,
    };
    let mut svg = String::new();
    let names: Vec<&str> = series.iter().map(|(s, _)| s.as_ref()).collect();
    header(&mut svg, title, total_width(&names));
    axes(
        &mut svg,
        &f,
        Some((&xt, xs)),
        &labelled(&yt, ys),
        x_label,
        y_label,
    );
    polylines(&mut svg, &f, series, false);
    legend(&mut svg, &names);
    footer(&mut svg);
    svg
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
    };
    let mut svg = String::new();
    let names: Vec<&str> = series.iter().map(|(s, _)| *s).collect();
    header(&mut svg, title, total_width(&names));
    axes(
        &mut svg,
        &f,
        Some((&xt, xs)),
        &labelled(&yt, ys),
        x_label,
        "fraction ≤ x (CDF)",
    );
    polylines(&mut svg, &f, &series, true);
    legend(&mut svg, &names);
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

/// A reference value drawn over a chart, e.g. the figure a paper printed for the same quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Shown as the mark's tooltip, e.g. "P0 Table 14: 11.85 ms".
    pub label: String,
    pub value: f64,
    /// Bar charts: the category (group) the mark belongs to; `None` draws it across the chart.
    pub category: Option<usize>,
    /// Bar charts: the series (bar) within the group; `None` spans the whole group.
    pub series: Option<usize>,
}

impl Mark {
    /// A mark over bar `series` of group `category`.
    pub fn bar(label: impl Into<String>, value: f64, category: usize, series: usize) -> Self {
        Self {
            label: label.into(),
            value,
            category: Some(category),
            series: Some(series),
        }
    }

    /// A horizontal reference line across the whole chart.
    pub fn line(label: impl Into<String>, value: f64) -> Self {
        Self {
            label: label.into(),
            value,
            category: None,
            series: None,
        }
    }
}

/// How to draw a chart beyond its data.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChartOptions {
    /// Logarithmic y axis (decades, with 2 and 5 between them over short ranges). Values ≤ 0
    /// cannot be drawn on it and are skipped like non-finite ones.
    pub log_y: bool,
    /// Reference marks, drawn as dashed black lines.
    pub marks: Vec<Mark>,
    /// Legend entry for the marks (e.g. "paper (P0 Table 14)"); `None`: "reference".
    pub marks_legend: Option<String>,
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
        n(x),
        n(y - 4.0),
        n(x + 14.0),
        n(y - 4.0)
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}">{}</text>"#,
        n(x + 20.0),
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
    let values = series
        .iter()
        .flat_map(|(_, vals)| vals.iter())
        .chain(opts.marks.iter().map(|m| &m.value))
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
    };
    let mut svg = String::new();
    let mut names: Vec<&str> = series.iter().map(|(s, _)| s.as_ref()).collect();
    let marks_legend = opts.marks_legend.as_deref().unwrap_or("reference");
    if !opts.marks.is_empty() {
        names.push(marks_legend);
    }
    header(&mut svg, title, total_width(&names));
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
                colour(i),
                escape(&format!("{} / {}", name.as_ref(), cat.as_ref())),
                escape(&tip)
            );
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
    legend(&mut svg, &names[..series.len()]);
    if !opts.marks.is_empty() {
        mark_legend(&mut svg, series.len(), marks_legend);
    }
    footer(&mut svg);
    svg
}

/// [`line_chart_svg`] with [`ChartOptions`]: a log y axis (points with y ≤ 0 are skipped) and
/// marks drawn as horizontal dashed lines across the plot.
pub fn line_chart_svg_with<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    opts: &ChartOptions,
) -> String {
    if !opts.log_y && opts.marks.is_empty() {
        return line_chart_svg(title, x_label, y_label, series);
    }
    let kept: Vec<(&str, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(name, pts)| {
            (
                name.as_ref(),
                pts.iter()
                    .map(|&(x, y)| {
                        if opts.log_y && y <= 0.0 {
                            (x, f64::NAN)
                        } else {
                            (x, y)
                        }
                    })
                    .collect(),
            )
        })
        .collect();
    let (x0, x1, mut lo, mut hi) =
        bounds(kept.iter().map(|(_, p)| p.as_slice())).unwrap_or((0.0, 1.0, 1.0, 10.0));
    for m in opts
        .marks
        .iter()
        .filter(|m| m.value.is_finite() && (!opts.log_y || m.value > 0.0))
    {
        lo = lo.min(m.value);
        hi = hi.max(m.value);
    }
    if !opts.log_y && lo > 0.0 {
        lo = 0.0;
    }
    let (xt, xs) = nice_ticks(x0, x1, 8);
    let (y0, y1, yt, _) = y_axis(lo, hi, opts.log_y);
    let f = Frame {
        x0: xt[0],
        x1: *xt.last().unwrap(),
        y0,
        y1,
        log_y: opts.log_y,
    };
    let mut svg = String::new();
    let mut names: Vec<&str> = kept.iter().map(|(s, _)| *s).collect();
    let marks_legend = opts.marks_legend.as_deref().unwrap_or("reference");
    if !opts.marks.is_empty() {
        names.push(marks_legend);
    }
    header(&mut svg, title, total_width(&names));
    axes(&mut svg, &f, Some((&xt, xs)), &yt, x_label, y_label);
    polylines(&mut svg, &f, &kept, false);
    for m in opts
        .marks
        .iter()
        .filter(|m| m.value.is_finite() && (!opts.log_y || m.value > 0.0))
    {
        mark_line(&mut svg, &f, MARGIN_LEFT, WIDTH - MARGIN_RIGHT, m);
    }
    legend(&mut svg, &names[..kept.len()]);
    if !opts.marks.is_empty() {
        mark_legend(&mut svg, kept.len(), marks_legend);
    }
    footer(&mut svg);
    svg
}

fn write(path: &Path, svg: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, svg).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

/// Write a line chart of named (x, y) series to `path`.
pub fn line_chart<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
    path: &Path,
) -> anyhow::Result<()> {
    write(path, &line_chart_svg(title, x_label, y_label, series))
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
    write(
        path,
        &line_chart_svg_with(title, x_label, y_label, series, opts),
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
    write(
        path,
        &bar_chart_svg_with(title, y_label, categories, series, opts),
    )
}

/// Write the empirical CDF of each named sample set to `path`.
pub fn cdf_chart<S: AsRef<str>>(
    title: &str,
    x_label: &str,
    samples: &[(S, Vec<f64>)],
    path: &Path,
) -> anyhow::Result<()> {
    write(path, &cdf_chart_svg(title, x_label, samples))
}

/// Write a grouped bar chart to `path` (see [`bar_chart_svg`]).
pub fn bar_chart<C: AsRef<str>, S: AsRef<str>>(
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
    path: &Path,
) -> anyhow::Result<()> {
    write(path, &bar_chart_svg(title, y_label, categories, series))
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

    #[test]
    fn writes_file_creating_the_folder() {
        let dir = std::env::temp_dir().join(format!("netsched-svg-{}", std::process::id()));
        let p = dir.join("sub/x.svg");
        line_chart("t", "x", "y", &[("s".to_string(), vec![(0.0, 0.0)])], &p).unwrap();
        assert!(std::fs::read_to_string(&p).unwrap().starts_with("<svg"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
