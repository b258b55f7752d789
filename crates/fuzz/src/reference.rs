//! References the targets compare the real parsers against: written from a specification, not
//! from the code they check.
//!
//! [`units`]: the grammar of durations, rates, sizes and frequencies as the table at the top of
//! `crates/core/src/units.rs` documents it, read with a recogniser of its own.

/// The documented units grammar (crates/core/src/units.rs, "Units — one grammar for
/// durations, rates and sizes"):
///
/// ```text
/// text     = ws* number ws* unit ws*
/// number   = sign? (digits ("." digits?)? | "." digits) exponent?
/// sign     = "+" | "-"              (a value below zero is refused; "-0" is 0)
/// exponent = "e" sign? digits       (lower-case e: "1E3" is 1 with the unit "E3")
/// unit     = one of the quantity's units, ASCII case-insensitive
/// ```
///
/// `ws` is any Unicode white space (the text is trimmed, and a space may separate number
/// and unit). The value is the number times the unit's multiplier, rounded to the nearest
/// integer, and refused above the quantity's maximum.
pub mod units {
    use netsched_core::units::{MAX_DURATION, MAX_FREQUENCY_HZ, MAX_RATE_BITS, MAX_SIZE_BYTES};

    /// The quantities of the grammar.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        Duration,
        Rate,
        Size,
        Frequency,
    }

    /// Split `t` (trimmed) into the longest prefix that is a number of the grammar and the
    /// rest; `None` when no prefix is one.
    fn number(t: &str) -> Option<(&str, &str)> {
        let b = t.as_bytes();
        let mut i = 0;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let int_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = i - int_start;
        let mut frac_digits = 0;
        if i < b.len() && b[i] == b'.' {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            frac_digits = j - i - 1;
            if int_digits > 0 || frac_digits > 0 {
                i = j;
            }
        }
        if int_digits == 0 && frac_digits == 0 {
            return None;
        }
        // An exponent only when digits follow (after an optional sign).
        if i < b.len() && b[i] == b'e' {
            let mut j = i + 1;
            if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
                j += 1;
            }
            let d = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j > d {
                i = j;
            }
        }
        Some((&t[..i], &t[i..]))
    }

    /// The multiplier of `unit` (lower-cased) for `kind`, per the documented table.
    fn multiplier(kind: Kind, unit: &str, zero: bool) -> Option<f64> {
        let u = unit.to_ascii_lowercase();
        Some(match kind {
            Kind::Duration => match u.as_str() {
                "ns" | "nsec" | "nsecs" => 1.0,
                "us" | "µs" | "usec" | "usecs" => 1e3,
                "ms" | "msec" | "msecs" => 1e6,
                "s" | "sec" | "secs" => 1e9,
                "m" | "min" | "mins" => 60e9,
                "h" | "hour" | "hours" => 3600e9,
                // A bare number is refused as a duration, except 0.
                "" if zero => 0.0,
                _ => return None,
            },
            Kind::Rate => {
                // `bit` = bits/s, `bps` = bytes/s; SI prefixes ×1000, IEC prefixes ×1024.
                let (prefix, base) = if u.is_empty() {
                    ("", 1.0)
                } else if let Some(p) = u.strip_suffix("bit") {
                    (p, 1.0)
                } else if let Some(p) = u.strip_suffix("bps") {
                    (p, 8.0)
                } else {
                    return None;
                };
                let m = match prefix {
                    "" => 1.0,
                    "k" => 1e3,
                    "m" => 1e6,
                    "g" => 1e9,
                    "t" => 1e12,
                    "ki" => 1024.0,
                    "mi" => 1024.0 * 1024.0,
                    "gi" => 1024.0 * 1024.0 * 1024.0,
                    "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
                    _ => return None,
                };
                m * base
            }
            Kind::Size => match u.as_str() {
                "" | "b" => 1.0,
                "k" | "kb" => 1024.0,
                "m" | "mb" => 1024.0 * 1024.0,
                "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
                "kbit" => 1024.0 / 8.0,
                "mbit" => 1024.0 * 1024.0 / 8.0,
                "gbit" => 1024.0 * 1024.0 * 1024.0 / 8.0,
                _ => return None,
            },
            Kind::Frequency => match u.as_str() {
                "hz" => 1.0,
                "khz" => 1e3,
                "mhz" => 1e6,
                "ghz" => 1e9,
                _ => return None,
            },
        })
    }

    /// The quantity's largest value.
    pub fn max(kind: Kind) -> u64 {
        match kind {
            Kind::Duration => MAX_DURATION,
            Kind::Rate => MAX_RATE_BITS,
            Kind::Size => MAX_SIZE_BYTES,
            Kind::Frequency => MAX_FREQUENCY_HZ,
        }
    }

    /// `text` read by the documented grammar: the value, or `None` when it is refused.
    pub fn parse(kind: Kind, text: &str) -> Option<u64> {
        let t = text.trim();
        let (num, rest) = number(t)?;
        let unit = rest.trim_start();
        let v: f64 = num.parse().ok()?;
        if !v.is_finite() || v < 0.0 {
            return None;
        }
        let x = v * multiplier(kind, unit, v == 0.0)?;
        if !x.is_finite() || x > max(kind) as f64 {
            return None;
        }
        Some(x.round() as u64)
    }
}
