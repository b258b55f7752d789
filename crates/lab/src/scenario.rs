//! Scenarios: the TOML parameter files behind each experiment, and `--set key=value` overrides.
//!
//! `scenarios/NAME.toml` is embedded in the binary at build time (see `build.rs`), so the lab
//! runs from any directory; `--scenario FILE` loads another file instead. Overrides name nested
//! keys with dots (`--set load.cpu_busy=0.5`); the value is parsed as a TOML value (number,
//! bool, array, inline table) and falls back to a plain string. Only keys that exist in the
//! scenario may be set — a typo is an error listing the valid keys — and a value must keep the
//! key's type (an integer may become a float).
//!
//! A `--scenario` file must be a regular file of at most [`crate::limits::MAX_SCENARIO_BYTES`]
//! (no devices, FIFOs or folders), hold at least one key, and share at least one top-level key
//! with the experiment's embedded scenario (so another experiment's file is refused, the same
//! way for all five experiments).
//!
//! Experiments read their parameters either by dotted key ([`crate::params`]) or as a typed
//! struct with [`typed`], whose errors name the scenario, the dotted key and the value.

use anyhow::{anyhow, bail, Context};
use serde::de::DeserializeOwned;
use std::path::Path;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/scenarios.rs"));
}

/// The scenario embedded for `name`, if the build found `scenarios/NAME.toml`.
pub fn embedded(name: &str) -> Option<&'static str> {
    embedded::EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// Parse scenario text; `origin` names the file in errors (the TOML error carries line/column).
/// A scenario without any key (empty, or only comments) is refused.
pub fn parse(text: &str, origin: &str) -> anyhow::Result<toml::Table> {
    let table = text
        .parse::<toml::Table>()
        .map_err(|e| anyhow!("scenario {origin}: {e}"))?;
    if table.is_empty() {
        bail!(
            "scenario {origin}: has no keys (empty, or only comments); a scenario sets the experiment's parameters — start from a copy of scenarios/NAME.toml"
        );
    }
    Ok(table)
}

/// The scenario for experiment `name`: from `file` if given, else the embedded one.
pub fn load(name: &str, file: Option<&Path>) -> anyhow::Result<toml::Table> {
    match file {
        Some(p) => {
            let text = netsched_report::read::read_text(
                p,
                crate::limits::MAX_SCENARIO_BYTES,
                "scenario file",
            )?;
            let origin = p.display().to_string();
            let mut table = parse(&text, &origin)?;
            let mut warnings = Vec::new();
            crate::scenario_units::upgrade_old_keys(&mut table, "", &mut warnings);
            let keys = toml::Value::Table(table.clone());
            warnings.extend(netsched_core::qdisc::limits::old_keys(&keys));
            for w in warnings {
                eprintln!("netsched: warning: scenario {origin}: {w}");
            }
            if let Some(reference) = embedded(name) {
                let reference = parse(reference, name)?;
                if !table.keys().any(|k| reference.contains_key(k)) {
                    let mine: Vec<&str> = table.keys().map(String::as_str).collect();
                    let theirs: Vec<&str> = reference.keys().map(String::as_str).collect();
                    bail!(
                        "scenario {origin}: does not look like a {name} scenario — none of its top-level keys ({}) is one of {name}'s ({})",
                        mine.join(", "),
                        theirs.join(", ")
                    );
                }
            }
            Ok(table)
        }
        None => {
            let text = embedded(name).ok_or_else(|| {
                anyhow!("no scenario embedded for {name}: scenarios/{name}.toml was missing at build time (use --scenario FILE)")
            })?;
            parse(text, &format!("scenarios/{name}.toml (embedded)"))
        }
    }
}

/// Every leaf key of the table as a dotted path, sorted (what `--set` accepts).
pub fn leaf_keys(table: &toml::Table) -> Vec<String> {
    fn walk(prefix: &str, t: &toml::Table, out: &mut Vec<String>) {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(sub) => walk(&path, sub, out),
                _ => out.push(path),
            }
        }
    }
    let mut out = Vec::new();
    walk("", table, &mut out);
    out.sort();
    out
}

/// Parse a `--set` value: a TOML value if it is one, else the text as a string.
pub fn parse_value(text: &str) -> toml::Value {
    let doc = format!("v = {text}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(text.to_string())),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

fn type_name(v: &toml::Value) -> &'static str {
    v.type_str()
}

/// Apply one `key=value` override to the scenario.
pub fn apply_set(table: &mut toml::Table, assignment: &str) -> anyhow::Result<()> {
    let (key, text) = assignment
        .split_once('=')
        .ok_or_else(|| anyhow!("--set {assignment:?}: expected key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        bail!("--set {assignment:?}: empty key");
    }
    // An old spelling with a unit in its name (`duration_s=80`): the new key, with a warning.
    let leaf = key.rsplit('.').next().unwrap_or(key);
    if let Some((new, value)) = crate::scenario_units::old_key(leaf, &parse_value(text.trim())) {
        let new_key = match key.rsplit_once('.') {
            Some((parent, _)) => format!("{parent}.{new}"),
            None => new.to_string(),
        };
        if leaf_keys(table).contains(&new_key) {
            eprintln!("netsched: warning: --set {key} is renamed {new_key} (units grammar: {new_key}={value})");
            return apply_set(table, &format!("{new_key}={value}"));
        }
    }
    let valid = leaf_keys(table);
    let unknown = || {
        anyhow!(
            "--set: unknown key {key:?}; valid keys: {}",
            valid.join(", ")
        )
    };
    let parts: Vec<&str> = key.split('.').collect();
    let mut cur = &mut *table;
    for p in &parts[..parts.len() - 1] {
        cur = match cur.get_mut(*p) {
            Some(toml::Value::Table(t)) => t,
            _ => return Err(unknown()),
        };
    }
    let last = parts[parts.len() - 1];
    let slot = cur.get_mut(last).ok_or_else(unknown)?;
    if let toml::Value::Table(_) = slot {
        return Err(unknown());
    }
    let mut value = parse_value(text.trim());
    value = match (&*slot, value) {
        (toml::Value::Float(_), toml::Value::Integer(i)) => toml::Value::Float(i as f64),
        (old, new) if type_name(old) == type_name(&new) => new,
        (toml::Value::String(_), new) => toml::Value::String(match new {
            toml::Value::String(s) => s,
            other => other.to_string(),
        }),
        (old, new) => bail!(
            "--set {key}={text}: {key} is a {} (currently {old}), got a {}",
            type_name(old),
            type_name(&new)
        ),
    };
    *slot = value;
    Ok(())
}

/// The scenario as JSON, the form experiments receive: durations, rates and sizes written in
/// the units grammar become the numbers the experiments read ([`crate::scenario_units`]).
pub fn to_json(table: &toml::Table) -> anyhow::Result<serde_json::Value> {
    serde_json::to_value(table).context("scenario cannot be expressed as JSON")
}

/// [`to_json`] for experiment `name`: the experiments listed in
/// [`crate::scenario_units::EXPERIMENTS`] get their unit keys converted first.
pub fn to_json_for(name: &str, table: &toml::Table) -> anyhow::Result<serde_json::Value> {
    if !crate::scenario_units::EXPERIMENTS.contains(&name) {
        return to_json(table);
    }
    let internal = crate::scenario_units::to_internal(table, "")?;
    to_json(&internal)
}

/// The scenario parameters as a typed struct `T` (use `#[serde(deny_unknown_fields)]` so a
/// misspelt key is refused). An error names the scenario (`origin`, e.g. "lvs-cluster"), the
/// dotted key where it went wrong (`service.jitter_cv`, `cluster.hosts[2]`) and serde's reason
/// with the offending value ("invalid type: string \"x\", expected f64", "unknown field
/// `jiter_cv`, expected one of ...").
pub fn typed<T: DeserializeOwned>(params: &serde_json::Value, origin: &str) -> anyhow::Result<T> {
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            anyhow!("scenario {origin}: {inner}")
        } else {
            anyhow!("scenario {origin}: {path}: {inner}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> toml::Table {
        parse(
            "name = \"x\"\nduration_s = 2.0\n[load]\nhosts = [1, 5]\ncount = 3\n",
            "t",
        )
        .unwrap()
    }

    #[test]
    fn sets_nested_keys_with_types() {
        let mut t = sample();
        apply_set(&mut t, "load.count=7").unwrap();
        apply_set(&mut t, "duration_s=3").unwrap();
        apply_set(&mut t, "load.hosts=[2,4,6]").unwrap();
        apply_set(&mut t, "name=hello world").unwrap();
        let j = to_json(&t).unwrap();
        assert_eq!(j["load"]["count"], 7);
        assert_eq!(j["duration_s"], 3.0);
        assert_eq!(j["load"]["hosts"], serde_json::json!([2, 4, 6]));
        assert_eq!(j["name"], "hello world");
    }

    #[test]
    fn unknown_key_names_it_and_lists_valid_keys() {
        let mut t = sample();
        let e = apply_set(&mut t, "load.cont=7").unwrap_err().to_string();
        assert!(e.contains("\"load.cont\""), "{e}");
        assert!(e.contains("load.count") && e.contains("duration_s"), "{e}");
        let e = apply_set(&mut t, "load=1").unwrap_err().to_string();
        assert!(e.contains("unknown key"), "{e}");
    }

    #[test]
    fn wrong_type_is_an_error() {
        let mut t = sample();
        let e = apply_set(&mut t, "load.count=many")
            .unwrap_err()
            .to_string();
        assert!(e.contains("integer") && e.contains("string"), "{e}");
        assert!(apply_set(&mut t, "novalue").is_err());
    }

    #[test]
    fn typed_errors_name_the_scenario_key_and_value() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Service {
            jitter_cv: f64,
            sizes: Vec<u32>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct P {
            service: Service,
        }
        let ok = serde_json::json!({"service": {"jitter_cv": 0.5, "sizes": [1, 2]}});
        let p: P = typed(&ok, "lvs-cluster").unwrap();
        assert_eq!((p.service.jitter_cv, p.service.sizes.len()), (0.5, 2));
        let bad = serde_json::json!({"service": {"jitter_cv": "high", "sizes": [1]}});
        let e = typed::<P>(&bad, "lvs-cluster").unwrap_err().to_string();
        assert!(
            e.starts_with("scenario lvs-cluster: service.jitter_cv: ") && e.contains("\"high\""),
            "{e}"
        );
        let bad = serde_json::json!({"service": {"jitter_cv": 1, "sizes": [1, -2]}});
        let e = typed::<P>(&bad, "x").unwrap_err().to_string();
        assert!(e.contains("service.sizes[1]") && e.contains("-2"), "{e}");
        let bad = serde_json::json!({"service": {"jiter_cv": 1, "sizes": []}});
        let e = typed::<P>(&bad, "x").unwrap_err().to_string();
        assert!(
            e.contains("service.jiter_cv") && e.contains("unknown field"),
            "{e}"
        );
        let e = typed::<P>(&serde_json::json!({}), "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `service`"), "{e}");
    }

    #[test]
    fn empty_scenarios_are_refused() {
        for text in ["", "# only a comment\n", "\n\n"] {
            let e = parse(text, "my.toml").unwrap_err().to_string();
            assert!(e.contains("my.toml") && e.contains("no keys"), "{e}");
        }
    }

    #[test]
    fn parse_errors_name_the_file_and_line() {
        let e = parse("a = 1\nb = \n", "scenarios/x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scenarios/x.toml") && e.contains("line 2"),
            "{e}"
        );
    }
}
