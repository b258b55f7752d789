//! The queue limits every discipline's configuration defaults to, in one place: a class (band,
//! interface) queue holds at most [`DEFAULT_QUEUE_LIMIT`] packets and has no byte limit
//! unless its configuration says otherwise. The functions are serde's `default = "..."`.
//!
//! Source: 1000 packets is Linux's default device `txqueuelen` (`DEFAULT_TX_QUEUE_LEN`,
//! `include/linux/netdevice.h`), which `pfifo` takes as its limit when given none.
//! Cost: none (constants).

/// Packets a class queue holds by default.
pub const DEFAULT_QUEUE_LIMIT: usize = 1000;

/// Bytes a class queue holds by default: no limit.
pub const NO_SIZE_LIMIT: u64 = u64::MAX;

/// Keys of a discipline's configuration under their spellings before `queue_limit`,
/// `size_limit` and the units grammar, still read for one release; each reader warns with the
/// new form (docs/cli.md, "Renames"). (old, new form)
pub const OLD_KEYS: [(&str, &str); 3] = [
    ("limit_packets", "queue_limit"),
    ("limit_bytes", "size_limit"),
    ("bound_ns", "bound, a duration (\"30ms\")"),
];

/// Every old key under `value` (a discipline's configuration, read as TOML or JSON), with its
/// path and its new name, e.g. `bands[1].limit_packets is written queue_limit`.
pub fn old_keys(value: &toml::Value) -> Vec<String> {
    fn walk(v: &toml::Value, path: &str, out: &mut Vec<String>) {
        match v {
            toml::Value::Table(m) => {
                for (k, v) in m {
                    let here = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    if let Some((_, new)) = OLD_KEYS.iter().find(|(old, _)| old == k) {
                        out.push(format!("{here} is written {new}"));
                    }
                    walk(v, &here, out);
                }
            }
            toml::Value::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    walk(v, &format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, "", &mut out);
    out
}

/// [`DEFAULT_QUEUE_LIMIT`], for `#[serde(default = "...")]`.
pub(crate) fn default_queue_limit() -> usize {
    DEFAULT_QUEUE_LIMIT
}

/// [`NO_SIZE_LIMIT`], for `#[serde(default = "...")]`.
pub(crate) fn no_size_limit() -> u64 {
    NO_SIZE_LIMIT
}

#[cfg(test)]
mod tests {
    #[test]
    fn old_keys_are_named_with_their_path_and_new_name() {
        let v: toml::Value = toml::from_str(
            "kind = \"strict_priority\"\nbands = [{ queue_limit = 5 }, { limit_packets = 5, limit_bytes = 9 }]\n",
        )
        .unwrap();
        assert_eq!(
            super::old_keys(&v),
            [
                "bands[1].limit_bytes is written size_limit",
                "bands[1].limit_packets is written queue_limit"
            ]
        );
    }
}
