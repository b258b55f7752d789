//! Scenarios: the TOML parameter files behind each experiment, and `--set key=value` overrides.
//!
//! `scenarios/NAME.toml` is embedded in the binary at build time (see `build.rs`), so the lab
//! runs from any directory; `--scenario FILE` loads another file instead. Overrides name nested
//! keys with dots (`--set load.cpu_busy=0.5`); the value is parsed as a TOML value (number,
//! bool, array, inline table) and falls back to a plain string. Only keys that exist in the
//! scenario may be set — a typo is an error listing the valid keys — and a value must keep the
//! key's type (an integer may become a float).

use anyhow::{anyhow, bail, Context};
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
pub fn parse(text: &str, origin: &str) -> anyhow::Result<toml::Table> {
    text.parse::<toml::Table>()
        .map_err(|e| anyhow!("scenario {origin}: {e}"))
}

/// The scenario for experiment `name`: from `file` if given, else the embedded one.
pub fn load(name: &str, file: Option<&Path>) -> anyhow::Result<toml::Table> {
    match file {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read scenario file {}", p.display()))?;
            parse(&text, &p.display().to_string())
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

/// The scenario as JSON, the form experiments receive.
pub fn to_json(table: &toml::Table) -> anyhow::Result<serde_json::Value> {
    serde_json::to_value(table).context("scenario cannot be expressed as JSON")
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
