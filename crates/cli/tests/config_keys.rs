//! No configuration key carries a unit in its name (docs/cli.md, "Configuration files"): every
//! example configuration and scenario in the repository is read and its keys checked, and the
//! keys the daemons' configuration files accept are read from their own parsers (the list a
//! misspelt key's error gives), so a new `*_ms` key fails here whether or not an example
//! uses it. Durations, rates and sizes are values in the units grammar instead.

use netsched_lab::scenario_units::has_unit_suffix;
use std::path::{Path, PathBuf};

/// Keys still read for one release under their old, unit-suffixed spelling (each with a
/// warning naming the new key).
const DEPRECATED: &[&str] = &[
    "rcvbuf_bytes",
    "max_held_packets",
    "limit_packets",
    "deadline_us",
    "bound_ns",
    "limit_bytes",
];

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
    // Every discipline's configuration (replay, scenarios, `link --ab-qdisc`), at its top level
    // and in its class, band or interface entries.
    let qdisc = |text: &str| {
        toml::from_str::<netsched_core::qdisc::QdiscConfig>(text)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    checked.push((
        "qdisc fifo".into(),
        qdisc(&format!("kind = \"fifo\"\n{probe}\n")),
    ));
    for (kind, list, entry) in [
        ("strict_priority", "bands", ""),
        ("drr", "classes", "quantum = 1514, "),
        ("wf2q_plus", "classes", "weight = 1, "),
        ("edf", "classes", "deadline = \"1ms\", "),
        (
            "delay_constrained",
            "interfaces",
            "priority = 1, bitmap_len = 3, ",
        ),
    ] {
        checked.push((
            format!("qdisc {kind} {list}"),
            qdisc(&format!(
                "kind = \"{kind}\"\n{list} = [{{ {entry}{probe} }}]\n"
            )),
        ));
    }
    checked.push((
        "qdisc percentile".into(),
        qdisc(&format!(
            "kind = \"percentile\"\npercentiles = [90]\n{probe}\n"
        )),
    ));
    let mut bad = Vec::new();
    for (what, error) in &checked {
        let fields = accepted_keys(error);
        assert!(!fields.is_empty(), "{what}: {error}");
        for f in fields {
            // A count names what it counts without the word for its unit (`queue_limit`).
            let unit = has_unit_suffix(&f) || f.ends_with("_packets");
            if unit && !DEPRECATED.contains(&f.as_str()) {
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
