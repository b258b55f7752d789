//! One step for "draw a chart into the output folder and list it in the report": each function
//! writes `<out>/<file>` with the matching [`crate::svg`] chart and returns the [`Figure`] entry
//! for `ExperimentOutput::figures`, so the file name is written once.

use crate::{svg, Figure};
use std::path::Path;

/// `file` must be a plain `.svg` file name (no folder, no `..`): the report links it relative
/// to the output folder.
fn target(out: &Path, file: &str) -> anyhow::Result<std::path::PathBuf> {
    let plain = !file.is_empty()
        && !file.contains(['/', '\\'])
        && file != "."
        && file != ".."
        && file.ends_with(".svg");
    if !plain {
        anyhow::bail!("figure file {file:?}: expected a plain file name ending in .svg");
    }
    Ok(out.join(file))
}

fn entry(title: &str, file: &str) -> Figure {
    Figure {
        title: title.to_string(),
        file: file.to_string(),
    }
}

/// A line chart of named (x, y) series (see [`svg::line_chart`]).
pub fn line<S: AsRef<str>>(
    out: &Path,
    file: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(S, Vec<(f64, f64)>)],
) -> anyhow::Result<Figure> {
    svg::line_chart(title, x_label, y_label, series, &target(out, file)?)?;
    Ok(entry(title, file))
}

/// The empirical CDF of each named sample set (see [`svg::cdf_chart`]).
pub fn cdf<S: AsRef<str>>(
    out: &Path,
    file: &str,
    title: &str,
    x_label: &str,
    samples: &[(S, Vec<f64>)],
) -> anyhow::Result<Figure> {
    svg::cdf_chart(title, x_label, samples, &target(out, file)?)?;
    Ok(entry(title, file))
}

/// A grouped bar chart (see [`svg::bar_chart`]).
pub fn bars<C: AsRef<str>, S: AsRef<str>>(
    out: &Path,
    file: &str,
    title: &str,
    y_label: &str,
    categories: &[C],
    series: &[(S, Vec<f64>)],
) -> anyhow::Result<Figure> {
    svg::bar_chart(title, y_label, categories, series, &target(out, file)?)?;
    Ok(entry(title, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_chart_and_returns_its_entry() {
        let dir = std::env::temp_dir().join(format!("netsched-figure-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let f = line(
            &dir,
            "rate.svg",
            "Rate",
            "t (s)",
            "kbit/s",
            &[("up", vec![(0.0, 1.0), (1.0, 2.0)])],
        )
        .unwrap();
        assert_eq!((f.title.as_str(), f.file.as_str()), ("Rate", "rate.svg"));
        let text = std::fs::read_to_string(dir.join("rate.svg")).unwrap();
        assert!(text.starts_with("<svg") && text.contains("Rate"), "{text}");
        let b = bars(&dir, "b.svg", "B", "y", &["a"], &[("s", vec![1.0])]).unwrap();
        assert_eq!(b.file, "b.svg");
        let c = cdf(&dir, "c.svg", "C", "ms", &[("s", vec![1.0, 2.0])]).unwrap();
        assert!(dir.join(c.file).exists());
        for bad in ["../x.svg", "sub/x.svg", "x.png", ""] {
            let e = line(&dir, bad, "T", "x", "y", &[("s", vec![(0.0, 1.0)])]).unwrap_err();
            assert!(e.to_string().contains("plain file name"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
