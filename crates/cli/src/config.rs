//! Configuration files for `netsched replay`: TOML, read with a size bound, every error naming
//! the file.

use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::path::Path;

/// The largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read and parse a TOML configuration file.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| anyhow!("cannot read config {name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("cannot read config {name}: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        bail!("{name}: larger than {MAX_CONFIG_BYTES} bytes; not a configuration file?");
    }
    parse_toml(&name, &bytes)
}

/// Parse configuration bytes read from `name`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    let text = std::str::from_utf8(bytes).map_err(|e| anyhow!("{name}: not UTF-8 text: {e}"))?;
    let value = toml::from_str(text).map_err(|e| anyhow!("{name}: {e}"))?;
    if let Ok(table) = text.parse::<toml::Table>() {
        for w in old_spellings(&table) {
            eprintln!("netsched: warning: {name}: {w}");
        }
    }
    Ok(value)
}

/// Old spellings in a replay configuration, each as a warning naming the new form: a
/// discipline's `deadline = { ms = 4.0 }` is now `deadline = "4ms"` (units grammar).
pub fn old_spellings(table: &toml::Table) -> Vec<String> {
    let deadline = table
        .get("qdisc")
        .and_then(|q| q.get("deadline"))
        .and_then(|d| d.as_table());
    let mut out: Vec<String> = match deadline.and_then(|d| d.iter().next()) {
        Some((unit, v)) => vec![format!(
            "[qdisc] deadline = {{ {unit} = {v} }} is written deadline = \"{v}{unit}\" (units grammar)"
        )],
        None => Vec::new(),
    };
    let classes = table
        .get("qdisc")
        .and_then(|q| q.get("classes"))
        .and_then(|c| c.as_array());
    if let Some(q) = table.get("qdisc") {
        let old = netsched_core::qdisc::limits::old_keys(q);
        out.extend(old.into_iter().map(|w| format!("[qdisc] {w}")));
    }
    for c in classes.into_iter().flatten() {
        if let Some(us) = c.get("deadline_us") {
            out.push(format!(
                "[qdisc] classes: deadline_us = {us} is written deadline = \"{us}us\" (units grammar)"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_old_deadline_table_is_reported_with_its_new_form() {
        let old: toml::Table = "[qdisc]\nkind = \"percentile\"\ndeadline = { ms = 4.0 }\n"
            .parse()
            .unwrap();
        let w = super::old_spellings(&old);
        assert!(
            w.len() == 1 && w[0].contains("deadline = \"4.0ms\""),
            "{w:?}"
        );
        let new: toml::Table = "[qdisc]\ndeadline = \"4ms\"\n".parse().unwrap();
        assert!(super::old_spellings(&new).is_empty());
        let edf: toml::Table = "[qdisc]\nclasses = [{ deadline_us = 15000 }]\n"
            .parse()
            .unwrap();
        let w = super::old_spellings(&edf);
        assert!(
            w.len() == 1 && w[0].contains("deadline = \"15000us\""),
            "{w:?}"
        );
    }

    #[test]
    fn the_old_queue_limit_keys_are_read_and_named_with_their_new_form() {
        let old = "[qdisc]\nkind = \"fifo\"\nlimit_packets = 3\nlimit_bytes = 4000\n[service]\nrate = \"1mbit\"\n";
        let table: toml::Table = old.parse().unwrap();
        let w = super::old_spellings(&table);
        assert_eq!(
            w,
            [
                "[qdisc] limit_bytes is written size_limit",
                "[qdisc] limit_packets is written queue_limit"
            ]
        );
        let q: netsched_core::qdisc::QdiscConfig = table["qdisc"].clone().try_into().unwrap();
        let new: netsched_core::qdisc::QdiscConfig =
            toml::from_str("kind = \"fifo\"\nqueue_limit = 3\nsize_limit = \"4000b\"\n").unwrap();
        assert_eq!(q, new);
    }
}
