//! CSV files: series and tables with a header row.
//!
//! Values are written with Rust's shortest round-trip float formatting, so a CSV re-read gives
//! the same numbers and the same data always gives the same bytes. Fields containing a comma,
//! quote or newline are quoted (RFC 4180).

use std::fmt::Write as _;
use std::path::Path;

/// Quote a field if it needs it (RFC 4180 §2).
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A float as CSV text: shortest round-trip form; non-finite as "nan"/"inf"/"-inf".
pub fn num(v: f64) -> String {
    if v.is_nan() {
        "nan".to_string()
    } else {
        format!("{v}")
    }
}

/// A table as CSV text: `header` then `rows` (each row's fields already text).
pub fn table_text<H: AsRef<str>, F: AsRef<str>>(header: &[H], rows: &[Vec<F>]) -> String {
    let mut out = String::new();
    let line = |fields: Vec<String>| fields.join(",");
    out.push_str(&line(header.iter().map(|h| field(h.as_ref())).collect()));
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(|f| field(f.as_ref())).collect()));
        out.push('\n');
    }
    out
}

/// Write a table of text fields.
pub fn write_table<H: AsRef<str>, F: AsRef<str>>(
    path: &Path,
    header: &[H],
    rows: &[Vec<F>],
) -> anyhow::Result<()> {
    write(path, &table_text(header, rows))
}

/// Write numeric rows under a header.
pub fn write_rows<H: AsRef<str>>(
    path: &Path,
    header: &[H],
    rows: &[Vec<f64>],
) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|v| num(*v)).collect())
        .collect();
    write(path, &table_text(header, &rows))
}

/// Named (x, y) series in long form: header `series,<x_name>,<y_name>`, one line per point.
pub fn series_text<S: AsRef<str>>(
    x_name: &str,
    y_name: &str,
    series: &[(S, Vec<(f64, f64)>)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "series,{},{}", field(x_name), field(y_name));
    for (name, pts) in series {
        let name = field(name.as_ref());
        for (x, y) in pts {
            let _ = writeln!(out, "{name},{},{}", num(*x), num(*y));
        }
    }
    out
}

/// Write named (x, y) series in long form (see [`series_text`]).
pub fn write_series<S: AsRef<str>>(
    path: &Path,
    x_name: &str,
    y_name: &str,
    series: &[(S, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    write(path, &series_text(x_name, y_name, series))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_fields_that_need_it() {
        assert_eq!(field("a"), "a");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn series_in_long_form_round_trip() {
        let text = series_text(
            "t_s",
            "delay_ms",
            &[("fifo", vec![(0.0, 1.5), (0.1, 0.1 + 0.2)])],
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "series,t_s,delay_ms");
        assert_eq!(lines.len(), 3);
        let y: f64 = lines[2].split(',').nth(2).unwrap().parse().unwrap();
        assert_eq!(y, 0.1 + 0.2);
    }

    #[test]
    fn table_has_header_and_rows() {
        let t = table_text(&["a", "b"], &[vec!["1", "x,y"]]);
        assert_eq!(t, "a,b\n1,\"x,y\"\n");
        assert_eq!(num(f64::NAN), "nan");
    }
}
