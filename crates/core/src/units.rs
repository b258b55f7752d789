//! # Units — one grammar for durations, rates and sizes
//!
//! Every command-line flag, configuration file, trace and control request of netsched reads
//! durations, rates and sizes through this module, so `1000bps` means the same thing
//! everywhere. The grammar follows tc(8) ("PARAMETERS": RATES, TIMES, SIZES), with one
//! deliberate difference for times, stated below.
//!
//! | kind | accepted forms | value |
//! |---|---|---|
//! | duration | `250ns` (`nsec`, `nsecs`) `250us` (`µs`, `usec`, `usecs`) `4ms` (`msec`, `msecs`) `1.5s` (`sec`, `secs`) `2m` (`min`, `mins`) `1h` (`hour`, `hours`) | nanoseconds |
//! | rate | `bit` `800kbit` `2.1mbit` `1gbit` `1tbit`, a bare number (bits/s); `bps` `kbps` `mbps` `gbps` `tbps` = **bytes**/s; IEC `kibit` `mibit` `gibit` `tibit` `kibps` … `tibps` (×1024) | bits per second |
//! | size | `1500`, `1500b` (bytes); `k`/`kb` `m`/`mb` `g`/`gb` (×1024, bytes); `kbit` `mbit` `gbit` (×1024, bits ÷ 8) | bytes |
//! | frequency | `200MHz`, `1.2GHz`, `32kHz`, `50Hz` (a unit is required) | hertz |
//!
//! - **`bit` means bits/s and `bps` means bytes/s**, as in tc(8): `1000bps` is 8000 bit/s.
//! - Units are case-insensitive, and a space between number and unit is allowed (`4 ms`).
//! - A number is decimal, with an optional sign, fraction and lower-case exponent (`1.5`,
//!   `.5`, `1e3`, `2.5e-3`); the fuzz target `units` (crates/fuzz) checks the parsers
//!   against this table and these rules.
//! - **A bare number is refused as a duration** (except `0`): tc(8) reads it as microseconds,
//!   other tools as seconds, and a wrong guess is off by a factor of a million.
//! - Sizes use 1024 multipliers, as tc(8) does ("kb or k: Kilobytes" is 1024 bytes in
//!   iproute2's `get_size`); rates use SI (1000) multipliers unless an IEC prefix is given.
//! - Every value is range-checked where it enters: negative, non-finite and out-of-range input
//!   is an error naming the text, the bound, and the accepted forms — nothing saturates or wraps.
//!
//! Cost: parsing is a few hundred nanoseconds; nothing here is on a packet path.

use crate::time::Duration;
use core::fmt;

/// What kind of quantity was being read (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Duration,
    Rate,
    Size,
    Frequency,
}

impl Quantity {
    fn name(self) -> &'static str {
        match self {
            Quantity::Duration => "duration",
            Quantity::Rate => "rate",
            Quantity::Size => "size",
            Quantity::Frequency => "frequency",
        }
    }

    /// The accepted forms, as shown in every error.
    pub fn forms(self) -> &'static str {
        match self {
            Quantity::Duration => "e.g. 250us, 4ms, 1.5s, 2m (units ns, us, ms, s, m, h)",
            Quantity::Rate => {
                "e.g. 800kbit, 2.1mbit, 1gbit (bits/s), or 100kbps (bytes/s, as in tc(8))"
            }
            Quantity::Size => "e.g. 1500, 1500b, 64k, 1m (bytes; k/m/g are ×1024 as in tc(8))",
            Quantity::Frequency => "e.g. 200MHz, 1.2GHz, 32kHz (units Hz, kHz, MHz, GHz)",
        }
    }
}

/// Why a text is not a valid quantity.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    Empty,
    NotANumber,
    /// A bare number where a unit is required (durations).
    MissingUnit,
    UnknownUnit(String),
    Negative,
    NotFinite,
    /// Outside `[min, max]`, both given in the quantity's display form.
    OutOfRange {
        min: String,
        max: String,
    },
}

/// A duration, rate or size that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitError {
    pub quantity: Quantity,
    pub text: String,
    pub problem: Problem,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.quantity.name();
        let t = &self.text;
        match &self.problem {
            Problem::Empty => write!(f, "{q} is empty"),
            Problem::NotANumber => write!(f, "{q} `{t}`: not a number"),
            Problem::MissingUnit => write!(f, "{q} `{t}`: needs a unit"),
            Problem::UnknownUnit(u) => write!(f, "{q} `{t}`: unknown unit `{u}`"),
            Problem::Negative => write!(f, "{q} `{t}`: must not be negative"),
            Problem::NotFinite => write!(f, "{q} `{t}`: not a finite number"),
            Problem::OutOfRange { min, max } => {
                write!(f, "{q} `{t}`: must be between {min} and {max}")
            }
        }?;
        write!(f, " ({})", self.quantity.forms())
    }
}

impl std::error::Error for UnitError {}

/// The largest duration any netsched input accepts: 30 days. Callers narrow it further.
pub const MAX_DURATION: Duration = 30 * 24 * 3600 * 1_000_000_000;
/// The largest rate any netsched input accepts: 10 Tbit/s. Callers narrow it further.
pub const MAX_RATE_BITS: u64 = 10_000_000_000_000;
/// The largest size any netsched input accepts: 1 TiB. Callers narrow it further.
pub const MAX_SIZE_BYTES: u64 = 1 << 40;
/// The largest frequency any netsched input accepts: 1 THz. Callers narrow it further.
pub const MAX_FREQUENCY_HZ: u64 = 1_000_000_000_000;

fn split_number(text: &str) -> (&str, &str) {
    let t = text.trim();
    let at = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(t.len());
    // An `e` that is not followed by a digit or sign starts a unit, not an exponent.
    let mut at = at;
    if let Some(pos) = t[..at].find('e') {
        let rest = &t[pos + 1..];
        if !rest.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') {
            at = pos;
        }
    }
    (t[..at].trim(), t[at..].trim())
}

fn number(q: Quantity, text: &str, num: &str) -> Result<f64, UnitError> {
    let err = |problem| UnitError {
        quantity: q,
        text: text.trim().to_string(),
        problem,
    };
    if text.trim().is_empty() {
        return Err(err(Problem::Empty));
    }
    if num.is_empty() {
        return Err(err(Problem::NotANumber));
    }
    let v: f64 = num.parse().map_err(|_| err(Problem::NotANumber))?;
    if !v.is_finite() {
        return Err(err(Problem::NotFinite));
    }
    if v < 0.0 {
        return Err(err(Problem::Negative));
    }
    Ok(v)
}

fn scaled(
    q: Quantity,
    text: &str,
    v: f64,
    mult: f64,
    max: u64,
    show: fn(u64) -> String,
) -> Result<u64, UnitError> {
    let x = v * mult;
    if !x.is_finite() || x > max as f64 {
        return Err(UnitError {
            quantity: q,
            text: text.trim().to_string(),
            problem: Problem::OutOfRange {
                min: show(0),
                max: show(max),
            },
        });
    }
    Ok(x.round() as u64)
}

/// Read a duration (`4ms`, `1.5s`, `0`) into nanoseconds, at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let (num, unit) = split_number(text);
    let v = number(Quantity::Duration, text, num)?;
    let unit_l = unit.to_ascii_lowercase();
    let mult = match unit_l.as_str() {
        "ns" | "nsec" | "nsecs" => 1.0,
        "us" | "µs" | "usec" | "usecs" => 1e3,
        "ms" | "msec" | "msecs" => 1e6,
        "s" | "sec" | "secs" => 1e9,
        "m" | "min" | "mins" => 60e9,
        "h" | "hour" | "hours" => 3600e9,
        "" if v == 0.0 => 0.0,
        "" => {
            return Err(UnitError {
                quantity: Quantity::Duration,
                text: text.trim().to_string(),
                problem: Problem::MissingUnit,
            })
        }
        _ => {
            return Err(UnitError {
                quantity: Quantity::Duration,
                text: text.trim().to_string(),
                problem: Problem::UnknownUnit(unit.to_string()),
            })
        }
    };
    scaled(
        Quantity::Duration,
        text,
        v,
        mult,
        MAX_DURATION,
        format_duration,
    )
}

/// Read a rate (`800kbit`, `100kbps`, `1000000`) into bits per second, at most [`MAX_RATE_BITS`].
pub fn parse_rate(text: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_number(text);
    let v = number(Quantity::Rate, text, num)?;
    let unit_l = unit.to_ascii_lowercase();
    let (prefix, base) = if let Some(p) = unit_l.strip_suffix("bit") {
        (p, 1.0)
    } else if let Some(p) = unit_l.strip_suffix("bps") {
        (p, 8.0)
    } else if unit_l.is_empty() {
        ("", 1.0)
    } else {
        return Err(UnitError {
            quantity: Quantity::Rate,
            text: text.trim().to_string(),
            problem: Problem::UnknownUnit(unit.to_string()),
        });
    };
    let mult = match prefix {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "t" => 1e12,
        "ki" => 1024.0,
        "mi" => 1024.0 * 1024.0,
        "gi" => 1024.0 * 1024.0 * 1024.0,
        "ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(UnitError {
                quantity: Quantity::Rate,
                text: text.trim().to_string(),
                problem: Problem::UnknownUnit(unit.to_string()),
            })
        }
    };
    scaled(
        Quantity::Rate,
        text,
        v,
        mult * base,
        MAX_RATE_BITS,
        format_rate,
    )
}

/// Read a frequency (`200MHz`, `1.2GHz`) into hertz, at most [`MAX_FREQUENCY_HZ`]. A bare
/// number is refused, as for durations: "200" could mean Hz or MHz, a factor of a million.
pub fn parse_frequency(text: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_number(text);
    let v = number(Quantity::Frequency, text, num)?;
    let err = |problem| UnitError {
        quantity: Quantity::Frequency,
        text: text.trim().to_string(),
        problem,
    };
    let mult = match unit.to_ascii_lowercase().as_str() {
        "hz" => 1.0,
        "khz" => 1e3,
        "mhz" => 1e6,
        "ghz" => 1e9,
        "" => return Err(err(Problem::MissingUnit)),
        _ => return Err(err(Problem::UnknownUnit(unit.to_string()))),
    };
    scaled(
        Quantity::Frequency,
        text,
        v,
        mult,
        MAX_FREQUENCY_HZ,
        format_frequency,
    )
}

/// Read a size (`1500`, `64k`, `1mb`) into bytes, at most [`MAX_SIZE_BYTES`].
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_number(text);
    let v = number(Quantity::Size, text, num)?;
    let unit_l = unit.to_ascii_lowercase();
    let mult = match unit_l.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "kbit" => 1024.0 / 8.0,
        "mbit" => 1024.0 * 1024.0 / 8.0,
        "gbit" => 1024.0 * 1024.0 * 1024.0 / 8.0,
        _ => {
            return Err(UnitError {
                quantity: Quantity::Size,
                text: text.trim().to_string(),
                problem: Problem::UnknownUnit(unit.to_string()),
            })
        }
    };
    scaled(Quantity::Size, text, v, mult, MAX_SIZE_BYTES, format_size)
}

fn check_range(
    q: Quantity,
    text: &str,
    v: u64,
    min: u64,
    max: u64,
    show: fn(u64) -> String,
) -> Result<u64, UnitError> {
    if v < min || v > max {
        return Err(UnitError {
            quantity: q,
            text: text.trim().to_string(),
            problem: Problem::OutOfRange {
                min: show(min),
                max: show(max),
            },
        });
    }
    Ok(v)
}

/// `parsed`, then require `min ..= max`: a value past the parser's own bounds (`1e300s`) is
/// told the caller's range too, so one key never names two ranges.
fn parse_in(
    q: Quantity,
    text: &str,
    parsed: Result<u64, UnitError>,
    (min, max): (u64, u64),
    show: fn(u64) -> String,
) -> Result<u64, UnitError> {
    match parsed {
        Ok(v) => check_range(q, text, v, min, max, show),
        Err(UnitError {
            problem: Problem::OutOfRange { .. },
            ..
        }) => Err(UnitError {
            quantity: q,
            text: text.trim().to_string(),
            problem: Problem::OutOfRange {
                min: show(min),
                max: show(max),
            },
        }),
        Err(e) => Err(e),
    }
}

/// [`parse_duration`], then require `min ..= max` nanoseconds.
pub fn parse_duration_in(text: &str, min: Duration, max: Duration) -> Result<Duration, UnitError> {
    let q = Quantity::Duration;
    parse_in(q, text, parse_duration(text), (min, max), format_duration)
}

/// [`parse_rate`], then require `min ..= max` bits/s.
pub fn parse_rate_in(text: &str, min: u64, max: u64) -> Result<u64, UnitError> {
    parse_in(
        Quantity::Rate,
        text,
        parse_rate(text),
        (min, max),
        format_rate,
    )
}

/// [`parse_size`], then require `min ..= max` bytes.
pub fn parse_size_in(text: &str, min: u64, max: u64) -> Result<u64, UnitError> {
    parse_in(
        Quantity::Size,
        text,
        parse_size(text),
        (min, max),
        format_size,
    )
}

/// A duration in the shortest exact-enough form: `1.5s`, `4ms`, `250us`, `12ns`.
pub fn format_duration(ns: Duration) -> String {
    fn trim(v: f64) -> String {
        let s = format!("{v:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        s.to_string()
    }
    if ns == 0 {
        "0s".to_string()
    } else if ns >= 3_600_000_000_000 && ns.is_multiple_of(3_600_000_000_000) {
        format!("{}h", ns / 3_600_000_000_000)
    } else if ns >= 1_000_000_000 {
        format!("{}s", trim(ns as f64 / 1e9))
    } else if ns >= 1_000_000 {
        format!("{}ms", trim(ns as f64 / 1e6))
    } else if ns >= 1_000 {
        format!("{}us", trim(ns as f64 / 1e3))
    } else {
        format!("{ns}ns")
    }
}

/// A rate in bits/s with an SI prefix: `800kbit`, `2.1mbit`.
pub fn format_rate(bits: u64) -> String {
    let v = bits as f64;
    let (x, u) = if bits >= 1_000_000_000_000 {
        (v / 1e12, "tbit")
    } else if bits >= 1_000_000_000 {
        (v / 1e9, "gbit")
    } else if bits >= 1_000_000 {
        (v / 1e6, "mbit")
    } else if bits >= 1_000 {
        (v / 1e3, "kbit")
    } else {
        (v, "bit")
    };
    let s = format!("{x:.3}");
    format!("{}{u}", s.trim_end_matches('0').trim_end_matches('.'))
}

/// A size in bytes: `1500b`, `64k` when a whole multiple of 1024.
pub fn format_size(bytes: u64) -> String {
    const K: u64 = 1024;
    if bytes >= K * K * K && bytes.is_multiple_of(K * K * K) {
        format!("{}g", bytes / (K * K * K))
    } else if bytes >= K * K && bytes.is_multiple_of(K * K) {
        format!("{}m", bytes / (K * K))
    } else if bytes >= K && bytes.is_multiple_of(K) {
        format!("{}k", bytes / K)
    } else {
        format!("{bytes}b")
    }
}

/// A frequency in hertz in its shortest exact unit (`200MHz`, `1.2GHz`, `50Hz`).
pub fn format_frequency(hz: u64) -> String {
    for (div, unit) in [(1_000_000_000, "GHz"), (1_000_000, "MHz"), (1_000, "kHz")] {
        if hz >= div {
            let v = hz as f64 / div as f64;
            return format!("{}{unit}", (v * 1000.0).round() / 1000.0);
        }
    }
    format!("{hz}Hz")
}

/// Serde adapters for configuration files: a duration, rate or size written as a string in this
/// grammar (`deadline = "4ms"`), e.g. `#[serde(deserialize_with = "units::serde_duration")]`.
pub fn serde_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// See [`serde_duration`]; a rate in bits/s.
pub fn serde_rate<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
    parse_rate(&s).map_err(serde::de::Error::custom)
}

/// See [`serde_duration`]; a size in bytes.
pub fn serde_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let s: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
    parse_size(&s).map_err(serde::de::Error::custom)
}

/// A size written either way: a string in this grammar (`size_limit = "64k"`) or a bare
/// integer of bytes (`size_limit = 65536`, and JSON numbers, as a size's serialized form).
pub fn serde_size_or_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Written<'a> {
        Bytes(u64),
        Text(std::borrow::Cow<'a, str>),
    }
    match serde::Deserialize::deserialize(d).map_err(|_: D::Error| {
        serde::de::Error::custom(
            "expected a size: bytes as an integer, or a string such as \"64k\"",
        )
    })? {
        Written::Bytes(n) => Ok(n),
        Written::Text(s) => parse_size(&s).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MS, SEC};

    #[test]
    fn a_value_past_the_parser_s_bounds_is_told_the_caller_s_range() {
        let e = parse_duration_in("1e300s", MS, 3600 * SEC).unwrap_err();
        let small = parse_duration_in("0", MS, 3600 * SEC).unwrap_err();
        assert_eq!(e.problem, small.problem, "{e} / {small}");
        assert!(
            e.to_string().contains("1ms") && e.to_string().contains("1h"),
            "{e}"
        );
        let e = parse_rate_in("1e300gbit", 1, 1_000_000).unwrap_err();
        assert_eq!(
            e.problem,
            parse_rate_in("2mbit", 1, 1_000_000).unwrap_err().problem
        );
    }

    #[test]
    fn durations_follow_one_grammar() {
        assert_eq!(parse_duration("4ms"), Ok(4_000_000));
        assert_eq!(parse_duration(" 1.5s "), Ok(1_500_000_000));
        assert_eq!(parse_duration("250us"), Ok(250_000));
        assert_eq!(parse_duration("250µs"), Ok(250_000));
        assert_eq!(parse_duration("2 m"), Ok(120_000_000_000));
        assert_eq!(parse_duration("10msec"), Ok(10_000_000));
        assert_eq!(parse_duration("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("1e3us"), Ok(1_000_000));
        let e = parse_duration("10").unwrap_err();
        assert_eq!(e.problem, Problem::MissingUnit);
        assert!(e.to_string().contains("4ms"), "{e}");
        assert_eq!(parse_duration("").unwrap_err().problem, Problem::Empty);
        assert_eq!(
            parse_duration("-1s").unwrap_err().problem,
            Problem::Negative
        );
        assert_eq!(
            parse_duration("ms").unwrap_err().problem,
            Problem::NotANumber
        );
        assert!(matches!(
            parse_duration("3 fortnights").unwrap_err().problem,
            Problem::UnknownUnit(_)
        ));
        assert!(matches!(
            parse_duration("1e300s").unwrap_err().problem,
            Problem::OutOfRange { .. }
        ));
        assert!(matches!(
            parse_duration("99999999999999s").unwrap_err().problem,
            Problem::OutOfRange { .. }
        ));
        assert_eq!(
            parse_duration("NaNs").unwrap_err().problem,
            Problem::NotANumber
        );
        assert_eq!(
            parse_duration("infs").unwrap_err().problem,
            Problem::NotANumber
        );
    }

    #[test]
    fn rates_follow_tc_bit_is_bits_bps_is_bytes() {
        assert_eq!(parse_rate("800kbit"), Ok(800_000));
        assert_eq!(parse_rate("2.1mbit"), Ok(2_100_000));
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1000"), Ok(1000));
        assert_eq!(parse_rate("1000bit"), Ok(1000));
        // tc(8): "bps  Bytes per second".
        assert_eq!(parse_rate("1000bps"), Ok(8000));
        assert_eq!(parse_rate("100kbps"), Ok(800_000));
        assert_eq!(parse_rate("1kibit"), Ok(1024));
        assert_eq!(parse_rate("1MBIT"), Ok(1_000_000));
        assert!(matches!(
            parse_rate("5furlongs").unwrap_err().problem,
            Problem::UnknownUnit(_)
        ));
        assert!(matches!(
            parse_rate("1e30bit").unwrap_err().problem,
            Problem::OutOfRange { .. }
        ));
        assert!(parse_rate_in("4bit", 8, 1000).is_err());
        assert_eq!(parse_rate_in("8bit", 8, 1000), Ok(8));
    }

    #[test]
    fn sizes_follow_tc_with_1024_multipliers() {
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("1500b"), Ok(1500));
        assert_eq!(parse_size("64k"), Ok(65_536));
        assert_eq!(parse_size("64kb"), Ok(65_536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("8kbit"), Ok(1024));
        assert!(parse_size("2tb").is_err());
        assert!(parse_size_in("100", 200, 300).is_err());
    }

    #[test]
    fn formats_read_back_to_the_same_value() {
        for ns in [0, 12, 250_000, 4_000_000, 1_500_000_000, 7_200_000_000_000] {
            assert_eq!(parse_duration(&format_duration(ns)), Ok(ns), "{ns}");
        }
        for b in [8, 800_000, 2_100_000, 1_000_000_000] {
            assert_eq!(parse_rate(&format_rate(b)), Ok(b), "{b}");
        }
        for s in [1, 1500, 65_536, 1 << 20] {
            assert_eq!(parse_size(&format_size(s)), Ok(s), "{s}");
        }
    }

    #[test]
    fn frequencies_need_a_unit_and_stay_in_range() {
        assert_eq!(parse_frequency("200MHz"), Ok(200_000_000));
        assert_eq!(parse_frequency("1.2 GHz"), Ok(1_200_000_000));
        assert_eq!(parse_frequency("32khz"), Ok(32_000));
        assert_eq!(parse_frequency("50Hz"), Ok(50));
        assert_eq!(
            parse_frequency("200").unwrap_err().problem,
            Problem::MissingUnit
        );
        assert!(matches!(
            parse_frequency("2THz").unwrap_err().problem,
            Problem::UnknownUnit(_)
        ));
        assert!(matches!(
            parse_frequency("2000GHz").unwrap_err().problem,
            Problem::OutOfRange { .. }
        ));
        let e = parse_frequency("-5MHz").unwrap_err().to_string();
        assert!(
            e.contains("frequency `-5MHz`") && e.contains("200MHz"),
            "{e}"
        );
        assert_eq!(format_frequency(166_000_000), "166MHz");
        assert_eq!(format_frequency(1_200_000_000), "1.2GHz");
        assert_eq!(format_frequency(50), "50Hz");
    }
}
