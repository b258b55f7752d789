//! No configuration key carries a unit in its name (docs/cli.md, "Configuration files"): every
//! example configuration and scenario in the repository is read and its keys checked, and the
//! keys the daemons' configuration files accept are read from their own parsers (the list a
//! misspelt key's error gives), so a new `*_ms` key fails here whether or not an example
//! uses it. Durations, rates and sizes are values in the units grammar instead.

use netsched_lab::scenario_units::has_unit_suffix;
use std::path::{Path, PathBuf};

/// Keys still read for one release under their old, unit-suffixed spelling (each with a
/// warning naming the new key).
const DEPRECATED: &[&str] = &["rcvbuf_bytes"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `*.toml` file under `dir` (recursively).
fn toml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            toml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
}

fn keys(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.push(path.clone());
                keys(&path, v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|x| keys(prefix, x, out)),
        _ => {}
    }
}

#[test]
fn no_example_configuration_or_scenario_has_a_unit_in_a_key() {
    let mut files = Vec::new();
    for dir in ["scenarios", "examples", "packaging"] {
        toml_files(&repo().join(dir), &mut files);
    }
    assert!(files.len() >= 10, "too few files found: {files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let value: toml::Value =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut all = Vec::new();
        keys("", &value, &mut all);
        for k in all {
            let leaf = k.rsplit('.').next().unwrap();
            if has_unit_suffix(leaf) {
                bad.push(format!("{}: {k}", f.display()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "keys with a unit in their name:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_scenario_reads_into_the_experiments_numbers() {
    let mut files = Vec::new();
    toml_files(&repo().join("scenarios"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let table = netsched_lab::scenario::parse(&text, &f.display().to_string()).unwrap();
        let name = f.file_stem().unwrap().to_str().unwrap();
        netsched_lab::scenario::to_json_for(name, &table)
            .unwrap_or_else(|e| panic!("{}: {e:#}", f.display()));
    }
}

/// The field names a `deny_unknown_fields` parser lists when it meets an unknown key.
fn accepted_keys(error: &str) -> Vec<String> {
    let list = error
        .split_once("expected one of")
        .or_else(|| error.split_once("expected"))
        .map(|(_, l)| l)
        .unwrap_or_else(|| panic!("no field list in {error:?}"));
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_daemons_configuration_keys_carry_no_unit() {
    let probe = "zz_probe = 1";
    let mut checked = Vec::new();
    let nfq = |text: &str| {
        netsched_nfq::config::Config::from_toml(text)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    for section in ["", "[service]\n", "[limits]\n"] {
        checked.push((
            format!("nfq {section}"),
            nfq(&format!("{section}{probe}\n")),
        ));
    }
    let vswitch = |text: &str| {
        netsched_vswitch::config::SwitchConfig::parse(text, "x")
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    checked.push(("vswitch".into(), vswitch(&format!("{probe}\n"))));
    checked.push((
        "vswitch [[port]]".into(),
        vswitch(&format!("uplink = \"u\"\n[[port]]\n{probe}\n")),
    ));
    let balance = |text: &str| {
        netsched_balance::config::Config::parse(text)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    for section in ["", "[timeouts]\n", "[health]\n", "[defaults]\n"] {
        checked.push((
            format!("balance {section}"),
            balance(&format!("{section}{probe}\n")),
        ));
    }
    let mut bad = Vec::new();
    for (what, error) in &checked {
        let fields = accepted_keys(error);
        assert!(!fields.is_empty(), "{what}: {error}");
        for f in fields {
            if has_unit_suffix(&f) && !DEPRECATED.contains(&f.as_str()) {
                bad.push(format!("{what}: {f}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "keys with a unit in their name:\n{}",
        bad.join("\n")
    );
}
