//! Trace files for `netsched replay`: CSV with a header row, or JSON lines. Every error names
//! the file, the line and the field.

use anyhow::{anyhow, bail, Result};
use std::collections::HashMap;
use std::path::Path;

/// One record of a trace: field name → raw text.
pub struct Record {
    pub line: usize,
    fields: HashMap<String, String>,
}

/// A whole trace, read into memory (traces are bounded by the file size).
pub struct Trace {
    pub path: String,
    pub records: Vec<Record>,
}

impl Trace {
    /// Read a CSV (first non-comment line is the header) or JSON-lines file; the format is
    /// chosen by the extension (`.jsonl`/`.json`/`.ndjson` → JSON lines) or, failing that, by
    /// whether the first non-blank line starts with `{`.
    pub fn read(path: &Path) -> Result<Trace> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow!("cannot read trace {}: {e}", path.display()))?;
        let name = path.display().to_string();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'));
        let json =
            matches!(ext, "jsonl" | "json" | "ndjson") || first.is_some_and(|l| l.starts_with('{'));
        let records = if json {
            parse_jsonl(&name, &text)?
        } else {
            parse_csv(&name, &text)?
        };
        Ok(Trace {
            path: name,
            records,
        })
    }
}

fn parse_csv(name: &str, text: &str) -> Result<Vec<Record>> {
    let mut header: Option<Vec<String>> = None;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cells: Vec<String> = line.split(',').map(|c| c.trim().to_string()).collect();
        match &header {
            None => header = Some(cells),
            Some(h) => {
                if cells.len() != h.len() {
                    bail!(
                        "{name}:{}: expected {} comma-separated fields ({}), found {}",
                        i + 1,
                        h.len(),
                        h.join(","),
                        cells.len()
                    );
                }
                out.push(Record {
                    line: i + 1,
                    fields: h.iter().cloned().zip(cells).collect(),
                });
            }
        }
    }
    Ok(out)
}

fn parse_jsonl(name: &str, text: &str) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| anyhow!("{name}:{}: not a JSON object: {e}", i + 1))?;
        let obj = v
            .as_object()
            .ok_or_else(|| anyhow!("{name}:{}: expected a JSON object, found {v}", i + 1))?;
        let fields = obj
            .iter()
            .map(|(k, v)| {
                let s = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), s)
            })
            .collect();
        out.push(Record {
            line: i + 1,
            fields,
        });
    }
    Ok(out)
}

impl Record {
    /// The raw text of `field`, or an error naming file, line and field.
    pub fn text(&self, file: &str, field: &str) -> Result<&str> {
        self.fields
            .get(field)
            .map(String::as_str)
            .ok_or_else(|| anyhow!("{file}:{}: missing field `{field}`", self.line))
    }

    /// A whole number field.
    pub fn u64(&self, file: &str, field: &str) -> Result<u64> {
        let t = self.text(file, field)?;
        t.parse().map_err(|_| {
            anyhow!(
                "{file}:{}: field `{field}`: `{t}` is not a whole number",
                self.line
            )
        })
    }

    /// A time field: a number with a unit (`1500ns`, `20us`, `4ms`, `1.5s`); a bare number is
    /// seconds.
    pub fn time_ns(&self, file: &str, field: &str) -> Result<u64> {
        let t = self.text(file, field)?;
        parse_duration_ns(t)
            .map_err(|why| anyhow!("{file}:{}: field `{field}`: `{t}` {why}", self.line))
    }
}

/// Parse a duration such as `250us`, `4ms`, `1.5s`, `100ns`; a bare number means seconds.
pub fn parse_duration_ns(t: &str) -> std::result::Result<u64, String> {
    let t = t.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| "is not a time (examples: 250us, 4ms, 1.5s)".to_string())?;
    let scale = match unit.trim() {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        u => return Err(format!("has an unknown unit `{u}` (use ns, us, ms or s)")),
    };
    if !v.is_finite() || v < 0.0 {
        return Err("must be a non-negative time".into());
    }
    Ok((v * scale).round() as u64)
}

/// Parse a rate such as `800kbit`, `2.1mbit`, `1gbit`, `500bit` (bits per second; SI units as
/// in tc(8)).
pub fn parse_rate_bps(t: &str) -> std::result::Result<u64, String> {
    let t = t.trim().to_ascii_lowercase();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{t}` is not a rate (examples: 800kbit, 2.1mbit, 1gbit)"))?;
    let scale = match unit {
        "" | "bit" | "bps" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        u => {
            return Err(format!(
                "`{t}`: unknown unit `{u}` (use bit, kbit, mbit, gbit)"
            ))
        }
    };
    let bps = (v * scale).round();
    if !bps.is_finite() || bps < 1.0 {
        return Err(format!("`{t}`: a rate must be at least 1 bit/s"));
    }
    Ok(bps as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_rates() {
        assert_eq!(parse_duration_ns("4ms"), Ok(4_000_000));
        assert_eq!(parse_duration_ns("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert!(parse_duration_ns("4 parsecs").is_err());
        assert!(parse_duration_ns("-1s").is_err());
        assert_eq!(parse_rate_bps("800kbit"), Ok(800_000));
        assert_eq!(parse_rate_bps("2.1mbit"), Ok(2_100_000));
        assert!(parse_rate_bps("0kbit").is_err());
        assert!(parse_rate_bps("fast").is_err());
    }

    #[test]
    fn csv_errors_name_file_line_field() {
        let dir = std::env::temp_dir().join(format!("netsched-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.csv");
        std::fs::write(&p, "time,class,size,id\n0,0,100,1\n1ms,0,abc,2\n").unwrap();
        let t = Trace::read(&p).unwrap();
        assert_eq!(t.records.len(), 2);
        let err = t.records[1].u64(&t.path, "size").unwrap_err().to_string();
        assert!(
            err.contains("t.csv:3") && err.contains("`size`") && err.contains("abc"),
            "{err}"
        );
        std::fs::write(&p, "time,class,size,id\n0,0,100\n").unwrap();
        let err = Trace::read(&p).err().unwrap().to_string();
        assert!(err.contains("t.csv:2"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
