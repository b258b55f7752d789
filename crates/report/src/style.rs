//! How the series of a chart are told apart, in colour and without it: each series gets a
//! colour, a marker shape and a line dash (lines) or a hatch (bars), and the legend draws the
//! same glyph as the plot. Reference values (a paper's figures) are black, dashed, with a
//! hollow ring, unlike any series.
//!
//! Series `i` gets colour `i mod 8` (the colour-blind-friendly palette of Wong, "Points of
//! view: Color blindness", Nature Methods 8:441, 2011), marker `i mod 5`, and dash/hatch
//! `(i div 8) mod 4`: the (colour, dash) pair differs for the first 32 series, and two series
//! within five of each other never share a marker.
//!
//! Error bars are drawn as a vertical line from the interval's low to its high end with short
//! caps.

use crate::xml::escape;
use std::fmt::Write as _;

/// Colours for series, in order (Wong 2011; the yellow last as it is the faintest on white).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// Line dashes by variant (none = solid).
const DASHES: [Option<&str>; 4] = [None, Some("7 3"), Some("2 2"), Some("9 3 2 3")];

/// Distinct styles before (colour, dash) pairs repeat.
pub const DISTINCT: usize = PALETTE.len() * DASHES.len();

/// Marker shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
}

const MARKERS: [Marker; 5] = [
    Marker::Circle,
    Marker::Square,
    Marker::Triangle,
    Marker::Diamond,
    Marker::Cross,
];

/// The look of series `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesStyle {
    pub colour: &'static str,
    pub marker: Marker,
    /// 0: solid line / plain fill; 1..=3: a dash pattern / hatch.
    pub variant: usize,
}

/// The style of series `i` (see the module header).
pub fn series_style(i: usize) -> SeriesStyle {
    SeriesStyle {
        colour: PALETTE[i % PALETTE.len()],
        marker: MARKERS[i % MARKERS.len()],
        variant: (i / PALETTE.len()) % DASHES.len(),
    }
}

impl SeriesStyle {
    /// ` stroke-dasharray="..."` for a dashed variant, else nothing.
    pub fn dash_attr(&self) -> String {
        match DASHES[self.variant] {
            Some(d) => format!(r#" stroke-dasharray="{d}""#),
            None => String::new(),
        }
    }

    /// The `fill` of a bar: the colour, or the hatch pattern defined by [`defs`].
    pub fn bar_fill(&self, i: usize) -> String {
        if self.variant == 0 {
            self.colour.to_string()
        } else {
            format!("url(#hatch-{i})")
        }
    }
}

/// `<defs>` with the hatch pattern of every hatched series among `n` bar series (none: "").
pub fn defs(n: usize) -> String {
    let mut s = String::new();
    for i in 0..n {
        let st = series_style(i);
        if st.variant == 0 {
            continue;
        }
        let lines = match st.variant {
            1 => r#"<path d="M0,6 L6,0" stroke="white" stroke-width="1.6"/>"#,
            2 => r#"<path d="M0,6 L6,0 M0,0 L6,6" stroke="white" stroke-width="1.2"/>"#,
            _ => r#"<circle cx="3" cy="3" r="1.3" fill="white"/>"#,
        };
        let _ = writeln!(
            s,
            r#"<pattern id="hatch-{i}" patternUnits="userSpaceOnUse" width="6" height="6"><rect width="6" height="6" fill="{}"/>{lines}</pattern>"#,
            st.colour
        );
    }
    if s.is_empty() {
        s
    } else {
        format!("<defs>\n{s}</defs>\n")
    }
}

/// A number in SVG coordinates: two decimals, no "-0.00".
pub fn n(v: f64) -> String {
    let s = format!("{v:.2}");
    if s == "-0.00" {
        "0.00".to_string()
    } else {
        s
    }
}

/// A marker of `shape` centred at (x, y), `r` its half-size, filled with `fill`.
pub fn marker(svg: &mut String, shape: Marker, x: f64, y: f64, r: f64, fill: &str, stroke: &str) {
    let _ = match shape {
        Marker::Circle => writeln!(
            svg,
            r#"<circle class="marker" cx="{}" cy="{}" r="{}" fill="{fill}" stroke="{stroke}"/>"#,
            n(x),
            n(y),
            n(r)
        ),
        Marker::Square => writeln!(
            svg,
            r#"<rect class="marker" x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="{stroke}"/>"#,
            n(x - r),
            n(y - r),
            n(2.0 * r),
            n(2.0 * r)
        ),
        Marker::Triangle => writeln!(
            svg,
            r#"<path class="marker" d="M{},{} L{},{} L{},{} Z" fill="{fill}" stroke="{stroke}"/>"#,
            n(x),
            n(y - r * 1.2),
            n(x + r * 1.1),
            n(y + r * 0.8),
            n(x - r * 1.1),
            n(y + r * 0.8)
        ),
        Marker::Diamond => writeln!(
            svg,
            r#"<path class="marker" d="M{},{} L{},{} L{},{} L{},{} Z" fill="{fill}" stroke="{stroke}"/>"#,
            n(x),
            n(y - r * 1.3),
            n(x + r * 1.1),
            n(y),
            n(x),
            n(y + r * 1.3),
            n(x - r * 1.1),
            n(y)
        ),
        Marker::Cross => writeln!(
            svg,
            r#"<path class="marker" d="M{},{} L{},{} M{},{} L{},{}" stroke="{fill}" stroke-width="2"/>"#,
            n(x - r),
            n(y - r),
            n(x + r),
            n(y + r),
            n(x - r),
            n(y + r),
            n(x + r),
            n(y - r)
        ),
    };
}

/// A series' marker (filled in its colour, outlined in white so overlapping ones stay apart).
pub fn series_marker(svg: &mut String, st: &SeriesStyle, x: f64, y: f64) {
    marker(svg, st.marker, x, y, 3.2, st.colour, "white");
}

/// The reference marker: a hollow black ring (no series uses it).
pub fn reference_marker(svg: &mut String, x: f64, y: f64) {
    let _ = writeln!(
        svg,
        r#"<circle class="mark-marker" cx="{}" cy="{}" r="4" fill="white" stroke="black" stroke-width="1.6"/>"#,
        n(x),
        n(y)
    );
}

/// An error bar at `x` from pixel `y_lo` to `y_hi` in `colour`, with `tip` as its tooltip.
pub fn error_bar(svg: &mut String, x: f64, y_lo: f64, y_hi: f64, colour: &str, tip: &str) {
    let _ = writeln!(
        svg,
        r#"<path class="error-bar" d="M{x},{a} L{x},{b} M{l},{a} L{r},{a} M{l},{b} L{r},{b}" stroke="{colour}" stroke-width="1.4" fill="none"><title>{t}</title></path>"#,
        x = n(x),
        a = n(y_lo),
        b = n(y_hi),
        l = n(x - 4.0),
        r = n(x + 4.0),
        t = escape(tip)
    );
}

/// Legend glyph of a line series at row position (x, y): a short line in its dash with its
/// marker in the middle.
pub fn legend_line(svg: &mut String, i: usize, x: f64, y: f64) {
    let st = series_style(i);
    let _ = writeln!(
        svg,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="1.8"{}/>"#,
        n(x - 2.0),
        n(y),
        n(x + 18.0),
        n(y),
        st.colour,
        st.dash_attr()
    );
    series_marker(svg, &st, x + 8.0, y);
}

/// Legend glyph of a bar series: a swatch in its fill.
pub fn legend_bar(svg: &mut String, i: usize, x: f64, y: f64) {
    let st = series_style(i);
    let _ = writeln!(
        svg,
        r##"<rect x="{}" y="{}" width="16" height="11" fill="{}" stroke="#333333" stroke-width="0.5"/>"##,
        n(x),
        n(y - 5.5),
        st.bar_fill(i)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_32_series_have_distinct_colour_and_dash_and_neighbours_distinct_markers() {
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..DISTINCT {
            let s = series_style(i);
            assert!(seen.insert((s.colour, s.variant)), "series {i} repeats");
        }
        for i in 0..DISTINCT {
            for j in i + 1..(i + 5).min(DISTINCT) {
                assert_ne!(series_style(i).marker, series_style(j).marker, "{i} {j}");
            }
        }
        // Series 0 and 8 share blue but not the dash.
        assert_eq!(series_style(0).colour, series_style(8).colour);
        assert_ne!(series_style(0).dash_attr(), series_style(8).dash_attr());
    }

    #[test]
    fn hatches_are_defined_only_for_hatched_series() {
        assert_eq!(defs(8), "");
        let d = defs(13);
        assert_eq!(d.matches("<pattern ").count(), 5);
        assert!(d.contains(r#"id="hatch-8""#) && d.contains(r#"id="hatch-12""#));
        assert_eq!(series_style(9).bar_fill(9), "url(#hatch-9)");
        assert_eq!(series_style(2).bar_fill(2), PALETTE[2]);
    }
}
