//! Trace files for `netsched replay`: CSV with a header row, or JSON lines, read one row at a
//! time so a replay's memory does not grow with the trace. Every error names the file, the
//! line and the field.
//!
//! Bounds: a line is at most [`MAX_LINE_BYTES`], a CSV row has at most [`MAX_FIELDS`] fields;
//! the number of rows is not bounded (the trace is streamed, not held).

use anyhow::{anyhow, bail, Result};
use netsched_core::units::{self, UnitError};
use netsched_core::Nanos;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The longest line a trace may have, in bytes (newline included).
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// The most fields a CSV header or a JSON object may have.
pub const MAX_FIELDS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    JsonLines,
}

/// A trace being read row by row from `R`.
pub struct TraceReader<R> {
    /// The file name, as shown in errors.
    pub path: String,
    input: R,
    /// `None` until the format is known (the first non-blank, non-comment line decides it).
    format: Option<Format>,
    /// CSV only: the column names.
    header: Vec<String>,
    /// Number of the last line read (1-based).
    line_no: usize,
    buf: Vec<u8>,
    record: Record,
    /// A first JSON row read while detecting the format, not yet handed out.
    pending: bool,
    /// Whether any header or record was found (an empty trace is an error).
    seen_any: bool,
}

/// One row of a trace: field name → raw text. Reused from row to row.
#[derive(Default)]
pub struct Record {
    pub line: usize,
    fields: Vec<(String, String)>,
}

impl TraceReader<BufReader<File>> {
    /// Open a CSV (first non-comment line is the header) or JSON-lines file; the format is
    /// chosen by the extension (`.jsonl`/`.json`/`.ndjson` → JSON lines) or, failing that, by
    /// whether the first non-blank line starts with `{`.
    pub fn open(path: &Path) -> Result<Self> {
        let file =
            File::open(path).map_err(|e| anyhow!("cannot read trace {}: {e}", path.display()))?;
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let json = matches!(ext, "jsonl" | "json" | "ndjson");
        Ok(TraceReader::new(
            path.display().to_string(),
            BufReader::new(file),
            json,
        ))
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Read a trace from `input`; `json` forces JSON lines, otherwise the first line decides.
    pub fn new(path: String, input: R, json: bool) -> Self {
        TraceReader {
            path,
            input,
            format: json.then_some(Format::JsonLines),
            header: Vec::new(),
            line_no: 0,
            buf: Vec::with_capacity(256),
            record: Record::default(),
            pending: false,
            seen_any: false,
        }
    }

    /// The next row, or `None` at the end of the trace.
    pub fn next_record(&mut self) -> Result<Option<&Record>> {
        if self.pending {
            self.pending = false;
            return Ok(Some(&self.record));
        }
        loop {
            if !self.read_line()? {
                if !self.seen_any {
                    bail!("{}: empty trace (no header row and no record)", self.path);
                }
                return Ok(None);
            }
            let line = self.current_line()?;
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let format = match self.format {
                Some(f) => f,
                None if line.starts_with('{') => Format::JsonLines,
                None => Format::Csv,
            };
            self.format = Some(format);
            self.seen_any = true;
            match format {
                Format::JsonLines => {
                    self.parse_json()?;
                    return Ok(Some(&self.record));
                }
                Format::Csv if self.header.is_empty() => self.parse_header()?,
                Format::Csv => {
                    self.parse_csv_row()?;
                    return Ok(Some(&self.record));
                }
            }
        }
    }

    /// Read the next line into `buf` (without its end of line), refusing over-long lines.
    fn read_line(&mut self) -> Result<bool> {
        self.buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| anyhow!("{}:{}: cannot read: {e}", self.path, self.line_no + 1))?;
        if n == 0 {
            return Ok(false);
        }
        self.line_no += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        } else if n as u64 == limit {
            bail!(
                "{}:{}: line is longer than {MAX_LINE_BYTES} bytes",
                self.path,
                self.line_no
            );
        }
        Ok(true)
    }

    fn current_line(&self) -> Result<&str> {
        std::str::from_utf8(&self.buf)
            .map(str::trim)
            .map_err(|e| anyhow!("{}:{}: not UTF-8 text: {e}", self.path, self.line_no))
    }

    fn parse_header(&mut self) -> Result<()> {
        let line = std::str::from_utf8(&self.buf).expect("checked").trim();
        let names: Vec<String> = line.split(',').map(|c| c.trim().to_string()).collect();
        if names.len() > MAX_FIELDS {
            bail!(
                "{}:{}: header has {} fields, at most {MAX_FIELDS} are allowed",
                self.path,
                self.line_no,
                names.len()
            );
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() {
                bail!(
                    "{}:{}: header field {} has no name",
                    self.path,
                    self.line_no,
                    i + 1
                );
            }
            if names[..i].contains(n) {
                bail!("{}:{}: header names `{n}` twice", self.path, self.line_no);
            }
        }
        self.header = names;
        Ok(())
    }

    fn parse_csv_row(&mut self) -> Result<()> {
        let line = std::str::from_utf8(&self.buf).expect("checked").trim();
        let found = line.split(',').count();
        if found != self.header.len() {
            bail!(
                "{}:{}: expected {} comma-separated fields ({}), found {found}",
                self.path,
                self.line_no,
                self.header.len(),
                self.header.join(","),
            );
        }
        let fields = &mut self.record.fields;
        fields.resize_with(self.header.len(), Default::default);
        for ((slot, name), cell) in fields.iter_mut().zip(&self.header).zip(line.split(',')) {
            slot.0.clone_from(name);
            slot.1.clear();
            slot.1.push_str(cell.trim());
        }
        self.record.line = self.line_no;
        Ok(())
    }

    fn parse_json(&mut self) -> Result<()> {
        let (path, line_no) = (&self.path, self.line_no);
        let line = std::str::from_utf8(&self.buf).expect("checked").trim();
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| anyhow!("{path}:{line_no}: not a JSON object: {e}"))?;
        let serde_json::Value::Object(obj) = v else {
            bail!(
                "{path}:{line_no}: expected a JSON object, found {}",
                kind(&v)
            );
        };
        if obj.len() > MAX_FIELDS {
            bail!(
                "{path}:{line_no}: object has {} fields, at most {MAX_FIELDS} are allowed",
                obj.len()
            );
        }
        self.record.fields.clear();
        for (k, v) in obj {
            let s = match v {
                serde_json::Value::String(s) => s,
                other @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                    other.to_string()
                }
                other => bail!(
                    "{path}:{line_no}: field `{k}`: expected a string or a number, found {}",
                    kind(&other)
                ),
            };
            self.record.fields.push((k, s));
        }
        self.record.line = line_no;
        Ok(())
    }
}

/// What kind of JSON value `v` is, for errors (never the whole value: it may be huge).
fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl Record {
    /// The raw text of `field`, or an error naming file, line and field.
    pub fn text(&self, file: &str, field: &str) -> Result<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| anyhow!("{file}:{}: missing field `{field}`", self.line))
    }

    /// A whole number field.
    pub fn u64(&self, file: &str, field: &str) -> Result<u64> {
        let t = self.text(file, field)?;
        t.parse().map_err(|_| {
            anyhow!(
                "{file}:{}: field `{field}`: `{t}` is not a whole number (0 to {})",
                self.line,
                u64::MAX
            )
        })
    }

    /// A time field (`1500ns`, `20us`, `4ms`, `1.5s`; `0` needs no unit), read with
    /// [`units::parse_duration`], so at most [`units::MAX_DURATION`].
    pub fn time_ns(&self, file: &str, field: &str) -> Result<Nanos> {
        let t = self.text(file, field)?;
        units::parse_duration(t).map_err(|e| self.unit_error(file, field, e))
    }

    /// A size field in bytes (`1500`, `1500b`, `64k`), at most `max`.
    pub fn size(&self, file: &str, field: &str, max: u64) -> Result<u64> {
        let t = self.text(file, field)?;
        units::parse_size_in(t, 0, max).map_err(|e| self.unit_error(file, field, e))
    }

    fn unit_error(&self, file: &str, field: &str, e: UnitError) -> anyhow::Error {
        anyhow!("{file}:{}: field `{field}`: {e}", self.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(text: &[u8]) -> TraceReader<&[u8]> {
        TraceReader::new("t.csv".into(), text, false)
    }

    /// A row as read: its line and its (field, text) pairs.
    type Row = (usize, Vec<(String, String)>);

    /// Read every row, or the first error.
    fn read_all(mut r: TraceReader<&[u8]>) -> Result<Vec<Row>> {
        let mut out = Vec::new();
        while let Some(rec) = r.next_record()? {
            out.push((rec.line, rec.fields.clone()));
        }
        Ok(out)
    }

    #[test]
    fn csv_errors_name_file_line_field() {
        let mut r = reader(b"time,class,size,id\n0,0,100,1\n1ms,0,abc,2\n");
        let first = r.next_record().unwrap().unwrap();
        assert_eq!(first.line, 2);
        assert_eq!(first.size("t.csv", "size", 10_000).unwrap(), 100);
        let second = r.next_record().unwrap().unwrap();
        let err = second
            .size("t.csv", "size", 10_000)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.csv:3") && err.contains("`size`") && err.contains("abc"),
            "{err}"
        );
        assert!(r.next_record().unwrap().is_none());

        let err = read_all(reader(b"time,class,size,id\n0,0,100\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.csv:2") && err.contains("found 3"), "{err}");
    }

    #[test]
    fn json_lines_are_detected_and_checked() {
        let rows = read_all(reader(
            b"# c\n{\"time\":\"1ms\",\"size\":40}\n\n{\"time\":0}\n",
        ))
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, 2);
        assert_eq!(rows[1].1, vec![("time".to_string(), "0".to_string())]);
        let err = read_all(reader(b"{\"time\":\"1ms\"}\n[1,2]\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.csv:2") && err.contains("JSON object"),
            "{err}"
        );
        let err = read_all(reader(b"{\"time\":{\"a\":1}}\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`time`") && err.contains("an object"), "{err}");
    }

    #[test]
    fn bounds_empty_binary_and_long_lines_are_errors() {
        let err = read_all(reader(b"")).unwrap_err().to_string();
        assert!(err.contains("empty trace"), "{err}");
        let err = read_all(reader(b"# only a comment\n\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("empty trace"), "{err}");
        let err = read_all(reader(b"time,id\n\xff\xfe,1\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.csv:2") && err.contains("UTF-8"), "{err}");
        let mut long = b"time,id\n0,".to_vec();
        long.extend(std::iter::repeat_n(b'1', MAX_LINE_BYTES));
        long.push(b'\n');
        let err = read_all(reader(&long)).unwrap_err().to_string();
        assert!(
            err.contains("t.csv:2") && err.contains("longer than"),
            "{err}"
        );
        // A line of exactly the limit (newline included) is fine.
        let mut fits = b"time,id\n0,".to_vec();
        fits.extend(std::iter::repeat_n(b'1', MAX_LINE_BYTES - 3));
        fits.push(b'\n');
        assert_eq!(read_all(reader(&fits)).unwrap().len(), 1);
        let wide = (0..=MAX_FIELDS)
            .map(|i| format!("f{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let err = read_all(reader(wide.as_bytes())).unwrap_err().to_string();
        assert!(err.contains("at most 64"), "{err}");
        let err = read_all(reader(b"time,time\n")).unwrap_err().to_string();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn times_use_the_units_grammar() {
        let rows = b"time,size\n4ms,1500\n1.5,64k\n18446744073709551615ns,1\n";
        let mut r = reader(rows);
        let rec = r.next_record().unwrap().unwrap();
        assert_eq!(rec.time_ns("t.csv", "time").unwrap(), 4_000_000);
        let rec = r.next_record().unwrap().unwrap();
        let err = rec.time_ns("t.csv", "time").unwrap_err().to_string();
        assert!(
            err.contains("t.csv:3") && err.contains("needs a unit"),
            "{err}"
        );
        assert_eq!(rec.size("t.csv", "size", u32::MAX as u64).unwrap(), 65536);
        let rec = r.next_record().unwrap().unwrap();
        let err = rec.time_ns("t.csv", "time").unwrap_err().to_string();
        assert!(err.contains("t.csv:4") && err.contains("between"), "{err}");
    }
}
