//! Scenario keys with units. Scenario files write every duration, rate and size in the units
//! grammar (`netsched_core::units`) under a name without a unit (`duration = "70s"`,
//! `up = "800kbit"`, `segment_size = "1500b"`); the experiments' parameter structs read a number
//! in one fixed unit (`duration_s = 70.0`). [`UNIT_KEYS`] maps one onto the other:
//! [`to_internal`] converts a scenario before the experiment reads it, and [`old_key`] lets an
//! old spelling (`--set duration_s=80`, or a key of an older scenario file) still work for one
//! release, with a warning naming the new key (docs/cli.md, "Renames").

use anyhow::{anyhow, bail, Result};
use netsched_core::units;

/// The fixed unit an experiment reads a key in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds, a float.
    Seconds,
    /// Milliseconds, a float.
    Millis,
    /// Microseconds, a float.
    Micros,
    /// Nanoseconds, an integer.
    Nanos,
    /// Milliseconds, an integer.
    MillisInt,
    /// kbit/s (1000 bit/s), a float.
    Kbit,
    /// Mbit/s, a float.
    Mbit,
    /// Bytes, an integer.
    Bytes,
    /// KiB, an integer.
    KiB,
    /// MHz, a float.
    Mhz,
}

/// The experiments whose scenarios [`UNIT_KEYS`] applies to (the others read durations in the
/// units grammar themselves, e.g. vm-delay's `duration = "60s"`).
pub const EXPERIMENTS: &[&str] = &["adsl-ack", "percentile-web", "np-dispatch"];

/// Every scenario key the experiments read with a unit: (internal name, name in a scenario
/// file, unit). The file's name is the internal one without its unit, or says what the
/// quantity is where the bare stem would not (`segment_size`, `lan_rate`).
pub const UNIT_KEYS: &[(&str, &str, Unit)] = &[
    // adsl-ack
    ("duration_s", "duration", Unit::Seconds),
    ("measure_from_s", "measure_from", Unit::Seconds),
    ("start_jitter_ms", "start_jitter", Unit::Millis),
    ("lan_kbps", "lan_rate", Unit::Kbit),
    ("lan_delay_ms", "lan_delay", Unit::Millis),
    ("up_kbps", "up", Unit::Kbit),
    ("down_kbps", "down", Unit::Kbit),
    ("wan_delay_ms", "wan_delay", Unit::Millis),
    ("segment_bytes", "segment_size", Unit::Bytes),
    ("ack_bytes", "ack_size", Unit::Bytes),
    ("min_rto_ms", "min_rto", Unit::Millis),
    ("initial_rto_ms", "initial_rto", Unit::Millis),
    ("delack_timeout_ms", "delack_timeout", Unit::Millis),
    ("per_packet_us", "per_packet_time", Unit::Micros),
    ("packet_bytes", "packet_size", Unit::Bytes),
    // adsl-ack on real Linux (docs/shape-and-link.md): its own duration, the topology's rates
    // and delay overridden for real runs, and the strongly asymmetric link.
    ("real_duration_s", "real_duration", Unit::Seconds),
    ("up_kbit", "real_up", Unit::Kbit),
    ("down_kbit", "real_down", Unit::Kbit),
    ("lan_kbit", "real_lan_rate", Unit::Kbit),
    ("delay_ms", "real_wan_delay", Unit::Millis),
    ("strong_up_kbit", "strong_up", Unit::Kbit),
    ("strong_down_kbit", "strong_down", Unit::Kbit),
    // percentile-web
    ("max_duration_s", "max_duration", Unit::Seconds),
    ("bin_s", "bin", Unit::Seconds),
    ("warmup_s", "warmup", Unit::Seconds),
    ("link_mbps", "link_rate", Unit::Mbit),
    ("link_delay_ms", "link_delay", Unit::Millis),
    ("mean_ms", "mean", Unit::Millis),
    ("response_bytes", "response_size", Unit::Bytes),
    ("request_bytes", "request_size", Unit::Bytes),
    (
        "extra_fixed_deadline_ms",
        "extra_fixed_deadline",
        Unit::Millis,
    ),
    ("quick_duration_s", "quick_duration", Unit::Seconds),
    ("page_kb", "page_size", Unit::KiB),
    ("max_hold_ms", "max_hold", Unit::MillisInt),
    // np-dispatch
    ("block_bytes", "block_size", Unit::Bytes),
    ("sop_base_ns", "sop_base", Unit::Nanos),
    ("per_rule_ns", "per_rule", Unit::Nanos),
    ("middle_ns", "middle", Unit::Nanos),
    ("eop_ns", "eop", Unit::Nanos),
    ("signal_ns", "signal", Unit::Nanos),
    ("decision_static_ns", "decision_static", Unit::Nanos),
    (
        "decision_skip_per_thread_ns",
        "decision_skip_per_thread",
        Unit::Nanos,
    ),
    ("decision_scan_idle_ns", "decision_scan_idle", Unit::Nanos),
    (
        "decision_scan_counters_ns",
        "decision_scan_counters",
        Unit::Nanos,
    ),
    ("late_signal_ns", "late_signal", Unit::Nanos),
    ("lock_ns", "lock", Unit::Nanos),
    ("clock_mhz", "clock", Unit::Mhz),
];

/// Keys read as written (a string the experiment parses itself with the units grammar and
/// words): the percentile queue's bound on waiting, `"off"`, `"deadline"` or a duration
/// (core `MaxHold`), which shares its name with nfq's `[real] max_hold`.
pub const AS_WRITTEN: &[&str] = &["percentile.max_hold", "real.balance.max_hold"];

fn unit_of_file_key(key: &str) -> Option<(&'static str, Unit)> {
    UNIT_KEYS
        .iter()
        .find(|(_, file, _)| *file == key)
        .map(|(internal, _, unit)| (*internal, *unit))
}

/// The internal value of `text` (units grammar) in `unit`; `key` names it in errors.
fn convert(key: &str, text: &str, unit: Unit) -> Result<toml::Value> {
    let err = |e: units::UnitError| anyhow!("{key} = {text:?}: {e}");
    let ns = || units::parse_duration(text).map_err(err);
    let v = match unit {
        Unit::Seconds => toml::Value::Float(ns()? as f64 / 1e9),
        Unit::Millis => toml::Value::Float(ns()? as f64 / 1e6),
        Unit::Micros => toml::Value::Float(ns()? as f64 / 1e3),
        Unit::Nanos => toml::Value::Integer(i64::try_from(ns()?)?),
        Unit::MillisInt => {
            let ns = ns()?;
            if ns % 1_000_000 != 0 {
                bail!("{key} = {text:?}: whole milliseconds");
            }
            toml::Value::Integer(i64::try_from(ns / 1_000_000)?)
        }
        Unit::Kbit => toml::Value::Float(units::parse_rate(text).map_err(err)? as f64 / 1e3),
        Unit::Mbit => toml::Value::Float(units::parse_rate(text).map_err(err)? as f64 / 1e6),
        Unit::Bytes => toml::Value::Integer(i64::try_from(units::parse_size(text).map_err(err)?)?),
        Unit::KiB => {
            let b = units::parse_size(text).map_err(err)?;
            if b % 1024 != 0 {
                bail!("{key} = {text:?}: whole KiB (e.g. 24k)");
            }
            toml::Value::Integer(i64::try_from(b / 1024)?)
        }
        Unit::Mhz => toml::Value::Float(units::parse_frequency(text).map_err(err)? as f64 / 1e6),
    };
    Ok(v)
}

/// The scenario as the experiments read it: every unit key of [`UNIT_KEYS`] written in the
/// units grammar (a string, or an array of strings) becomes its internal key and number.
/// `path` names the table in errors.
pub fn to_internal(table: &toml::Table, path: &str) -> Result<toml::Table> {
    let mut out = toml::Table::new();
    for (k, v) in table {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let unit_key = unit_of_file_key(k).filter(|_| !AS_WRITTEN.contains(&here.as_str()));
        let converted = match (v, unit_key) {
            (toml::Value::String(s), Some((internal, unit))) => {
                Some((internal, convert(&here, s, unit)?))
            }
            (toml::Value::Array(a), Some((internal, unit)))
                if !a.is_empty() && a.iter().all(|x| x.is_str()) =>
            {
                let items = a
                    .iter()
                    .map(|x| convert(&here, x.as_str().unwrap_or_default(), unit))
                    .collect::<Result<Vec<_>>>()?;
                Some((internal, toml::Value::Array(items)))
            }
            _ => None,
        };
        match (converted, v) {
            (Some((internal, value)), _) => {
                out.insert(internal.to_string(), value);
            }
            (None, toml::Value::Table(t)) => {
                out.insert(k.clone(), toml::Value::Table(to_internal(t, &here)?));
            }
            (None, toml::Value::Array(a)) => {
                let items = a
                    .iter()
                    .map(|x| match x {
                        toml::Value::Table(t) => to_internal(t, &here).map(toml::Value::Table),
                        other => Ok(other.clone()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.insert(k.clone(), toml::Value::Array(items));
            }
            (None, other) => {
                out.insert(k.clone(), other.clone());
            }
        }
    }
    Ok(out)
}

/// Whether a key's name ends in a unit (`_ms`, `_s`, `_kbps`, `_bytes` ...): such keys are
/// refused in the vocabulary (the value carries the unit).
pub fn has_unit_suffix(key: &str) -> bool {
    const SUFFIXES: &[&str] = &[
        "_ns", "_us", "_ms", "_s", "_sec", "_secs", "_seconds", "_kbps", "_mbps", "_gbps", "_bps",
        "_kbit", "_mbit", "_gbit", "_bytes", "_kb", "_mb", "_kib", "_mib", "_pct", "_hz", "_khz",
        "_mhz", "_ghz",
    ];
    SUFFIXES.iter().any(|s| key.ends_with(s))
}

/// The old spelling `key` (a leaf name such as `duration_s`) as (new name, the value `number`
/// written with its unit), if it is one.
pub fn old_key(key: &str, number: &toml::Value) -> Option<(&'static str, String)> {
    let (_, file, unit) = UNIT_KEYS.iter().find(|(internal, _, _)| *internal == key)?;
    let n = match number {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        _ => return None,
    };
    let text = match unit {
        Unit::Seconds => format!("{n}s"),
        Unit::Millis | Unit::MillisInt => format!("{n}ms"),
        Unit::Micros => format!("{n}us"),
        Unit::Nanos => format!("{n}ns"),
        Unit::Kbit => format!("{n}kbit"),
        Unit::Mbit => format!("{n}mbit"),
        Unit::Bytes => format!("{n}b"),
        Unit::KiB => format!("{n}k"),
        Unit::Mhz => format!("{n}MHz"),
    };
    Some((file, text))
}

/// Old spellings (internal keys) in a scenario file's table, each as a warning naming the new
/// key, and the table with them rewritten to the new spelling.
pub fn upgrade_old_keys(table: &mut toml::Table, path: &str, warnings: &mut Vec<String>) {
    let keys: Vec<String> = table.keys().cloned().collect();
    for k in keys {
        let here = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        let value = table[&k].clone();
        if let toml::Value::Table(mut t) = value {
            upgrade_old_keys(&mut t, &here, warnings);
            table.insert(k, toml::Value::Table(t));
            continue;
        }
        let new = match &value {
            toml::Value::Array(a) => a
                .iter()
                .map(|x| old_key(&k, x))
                .collect::<Option<Vec<_>>>()
                .filter(|v| !v.is_empty())
                .map(|v| {
                    let name = v[0].0;
                    let items = v.into_iter().map(|(_, t)| toml::Value::String(t));
                    (name, toml::Value::Array(items.collect()))
                }),
            other => old_key(&k, other).map(|(n, t)| (n, toml::Value::String(t))),
        };
        if let Some((name, v)) = new {
            if table.contains_key(name) {
                continue;
            }
            warnings.push(format!("{here} is renamed {name} = {v} (units grammar)"));
            table.remove(&k);
            table.insert(name.to_string(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> toml::Table {
        text.parse().unwrap()
    }

    #[test]
    fn unit_keys_become_the_experiments_numbers() {
        let table = t(
            "duration = \"70s\"\n[topology]\nup = \"800kbit\"\nlan_rate = \"10mbit\"\n\
             wan_delay = \"10ms\"\n[tcp]\nsegment_size = \"1500b\"\n[matrix]\nmin_rto = [\"1s\", \"200ms\"]\n\
             [server]\nservice = { dist = \"exponential\", mean = \"600us\" }\n\
             [real]\npage_size = \"24k\"\nmax_hold = \"1s\"\ndeadline = \"auto\"\n[cost]\nsop_base = \"300ns\"\n",
        );
        let i = to_internal(&table, "").unwrap();
        assert_eq!(i["duration_s"].as_float(), Some(70.0));
        assert_eq!(i["topology"]["up_kbps"].as_float(), Some(800.0));
        assert_eq!(i["topology"]["lan_kbps"].as_float(), Some(10_000.0));
        assert_eq!(i["topology"]["wan_delay_ms"].as_float(), Some(10.0));
        assert_eq!(i["tcp"]["segment_bytes"].as_integer(), Some(1500));
        assert_eq!(
            i["matrix"]["min_rto_ms"].as_array().unwrap(),
            &vec![toml::Value::Float(1000.0), toml::Value::Float(200.0)]
        );
        assert_eq!(i["server"]["service"]["mean_ms"].as_float(), Some(0.6));
        assert_eq!(i["real"]["page_kb"].as_integer(), Some(24));
        assert_eq!(i["real"]["max_hold_ms"].as_integer(), Some(1000));
        assert_eq!(i["real"]["deadline"].as_str(), Some("auto"));
        assert_eq!(i["cost"]["sop_base_ns"].as_integer(), Some(300));
    }

    /// The percentile discipline's `max_hold` (words or a duration, read by core `MaxHold`)
    /// stays as written in `[percentile]` and `[real.balance]`; nfq's `[real] max_hold` is
    /// still converted to its milliseconds.
    #[test]
    fn the_percentile_bound_on_waiting_is_read_as_written() {
        let table = t(
            "[percentile]\nmax_hold = \"deadline\"\n[real]\nmax_hold = \"1s\"\n\
             [real.balance]\nmax_hold = \"500ms\"\n",
        );
        let i = to_internal(&table, "").unwrap();
        assert_eq!(i["percentile"]["max_hold"].as_str(), Some("deadline"));
        assert_eq!(i["real"]["max_hold_ms"].as_integer(), Some(1000));
        assert_eq!(i["real"]["balance"]["max_hold"].as_str(), Some("500ms"));
    }

    #[test]
    fn a_bad_value_names_the_key_and_the_text() {
        let e = to_internal(&t("[topology]\nup = \"fast\"\n"), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("topology.up") && e.contains("fast"), "{e}");
        let e = to_internal(&t("duration = \"70\"\n"), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duration") && e.contains("70"), "{e}");
        let e = to_internal(&t("page_size = \"1500b\"\n"), "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole KiB"), "{e}");
    }

    #[test]
    fn old_keys_still_read_with_a_warning_naming_the_new_one() {
        let mut table = t("duration_s = 70.0\n[topology]\nup_kbps = 800.0\n[matrix]\nmin_rto_ms = [1000.0, 200.0]\n");
        let mut w = Vec::new();
        upgrade_old_keys(&mut table, "", &mut w);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w
            .iter()
            .any(|x| x.contains("topology.up_kbps is renamed up")));
        let i = to_internal(&table, "").unwrap();
        assert_eq!(i["duration_s"].as_float(), Some(70.0));
        assert_eq!(i["topology"]["up_kbps"].as_float(), Some(800.0));
        assert_eq!(i["matrix"]["min_rto_ms"][1].as_float(), Some(200.0));
    }

    #[test]
    fn adsl_ack_s_real_parameters_take_the_units_grammar() {
        let table = t("real_duration = \"15s\"\nreal_up = \"1mbit\"\nstrong_down = \"25mbit\"\n");
        let i = to_internal(&table, "").unwrap();
        assert_eq!(i["real_duration_s"].as_float(), Some(15.0));
        assert_eq!(i["up_kbit"].as_float(), Some(1000.0));
        assert_eq!(i["strong_down_kbit"].as_float(), Some(25_000.0));
        let mut old = t("real_duration_s = 12\ndelay_ms = 10.0\n");
        let mut w = Vec::new();
        upgrade_old_keys(&mut old, "", &mut w);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w
            .iter()
            .any(|x| x.contains("delay_ms is renamed real_wan_delay")));
        let i = to_internal(&old, "").unwrap();
        assert_eq!(i["real_duration_s"].as_float(), Some(12.0));
        assert_eq!(i["delay_ms"].as_float(), Some(10.0));
    }

    #[test]
    fn every_file_name_is_unique_and_carries_no_unit() {
        for (internal, file, _) in UNIT_KEYS {
            assert_ne!(file, internal);
            assert!(!crate::scenario_units::has_unit_suffix(file), "{file}");
            let same = UNIT_KEYS.iter().filter(|(_, f, _)| f == file).count();
            assert_eq!(same, 1, "{file}");
        }
    }
}
