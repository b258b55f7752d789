//! `netsched filter`'s settings: one declaration ([`FilterOptions`]) read both as flags and as
//! the keys of a configuration file (`--config FILE`, TOML), so a key is always its flag's
//! long name in snake_case (`--block-size 64` ↔ `block_size = 64`).
//!
//! A flag given on the command line wins over the file; what neither gives takes the default
//! written in its help. Relative paths in the file (`rules`, `signatures`) are relative to
//! the file's folder, so a unit and a shell read the same files. The file is read once at
//! start and again at each reload (SIGHUP, `ctl reload`): a reload applies the rule and
//! signature keys ([`RELOADABLE`]); a file that changes any other key is refused whole,
//! naming the key, and the running filter keeps its configuration.
//!
//! Every error names where the value came from: `FILE: key = value: why` for the file,
//! `--flag value: why` for a flag. The file is read bounded ([`MAX_CONFIG_BYTES`]) and must be
//! a regular file.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Keys a reload applies; every other key must be as at start.
pub const RELOADABLE: &[&str] = &[
    "rules",
    "rules_format",
    "classbench_action",
    "classifier",
    "signatures",
];

/// Every setting of `netsched filter`, as flags and as configuration keys; `None` = not
/// given here. Defaults are applied where the value is used (`cli.rs`).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FilterOptions {
    /// Interface frames arrive on.
    #[arg(long)]
    pub input: Option<String>,
    /// Interface accepted frames leave on, or `none` (accepted frames are consumed).
    #[arg(long)]
    pub output: Option<String>,
    /// Rule file, first match wins: the TOML rule file (docs/rules.md) or a ClassBench filter
    /// set (see --rules-format).
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Format of the rule file: `toml`, `classbench`, or `auto`: ClassBench when its first
    /// line that is neither blank nor a `#` comment starts with `@`, TOML otherwise (decided
    /// again on every reload) [default: auto].
    #[arg(long, value_parser = ["auto", "toml", "classbench"])]
    pub rules_format: Option<String>,
    /// The action of every rule of a ClassBench file, which has none; a packet no rule
    /// matches gets the other one. `drop` (the default): a blocklist, the rest accepted;
    /// `accept`: an allowlist, the rest dropped. Refused with a TOML file (its rules and
    /// `default` say what they do).
    #[arg(long, value_parser = ["accept", "drop"])]
    pub classbench_action: Option<String>,
    /// How IPv4 packets are matched against the rules: `tuple_merge` (TupleMerge, Daly & Torng
    /// 2017), `tuple_space` (tuple space search) or `linear` (the rules in order); every one
    /// gives the first match. IPv6 packets are matched in order [default: tuple_merge].
    #[arg(long)]
    pub classifier: Option<String>,
    /// Signature file (one pattern per line, `\xNN` escapes).
    #[arg(long)]
    pub signatures: Option<PathBuf>,
    /// What a signature match does: drop or mark (forward, counted) [default: drop].
    #[arg(long, value_parser = ["drop", "mark"])]
    pub on_signature: Option<String>,
    /// What a worker panic does to its packet: drop (fail closed) or forward (fail open)
    /// [default: drop].
    #[arg(long, value_parser = ["drop", "forward"])]
    pub on_panic: Option<String>,
    /// Frames that are not IPv4/IPv6 (ARP…): accept or drop [default: accept].
    #[arg(long, value_parser = ["accept", "drop"])]
    pub non_ip: Option<String>,
    /// IP fragments (IPv4 MF or offset ≠ 0, IPv6 Fragment header): drop (counted as
    /// `fragment`) or pass (each classified on its own: a later one without ports, and a
    /// signature split across fragments is not seen) [default: drop].
    #[arg(long, value_parser = ["drop", "pass"])]
    pub fragments: Option<String>,
    /// static_rr, modified_rr, fcfs, modified_fcfs, flow_hash or work_stealing
    /// [default: modified_fcfs].
    #[arg(long)]
    pub dispatch: Option<String>,
    /// Worker threads (1..=64) [default: 4].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Bytes per block (P1's 64-byte mpackets), 1..=2048 [default: 64].
    #[arg(long)]
    pub block_size: Option<u32>,
    /// Tasks one worker may hold (queued and running) [default: 64].
    #[arg(long)]
    pub worker_queue: Option<usize>,
    /// Packets the reorder window may hold over all flows (0: no reordering) [default: 1024].
    #[arg(long)]
    pub reorder_window: Option<usize>,
    /// Longest a packet waits in the reorder window, e.g. `5ms` [default: 5ms].
    #[arg(long)]
    pub reorder_timeout: Option<String>,
    /// Receive buffer slots (frames inside the filter at most) [default: 4096].
    #[arg(long)]
    pub pool: Option<usize>,
    /// Port backend: `xdp` (an AF_XDP socket per receive queue fed by an XDP program, native
    /// mode), `tpacket` (mmap'ed TPACKET_V2 receive ring), `tpacket_v3` (TPACKET_V3 receive
    /// ring of blocks, 1 ms retire timer), `packet` (recvmmsg/sendmmsg) or `auto` (xdp, else
    /// the tpacket ring, else packet, with the reasons printed) [default: auto].
    #[arg(long)]
    pub port: Option<String>,
    /// Receive ring frames per port (2 KiB each; 64..=65536, rounded up to 8; xdp: UMEM
    /// receive chunks, at most 32768, rounded up to a power of two) [default: 4096].
    #[arg(long)]
    pub ring_frames: Option<usize>,
    /// CPU pinning of the workers: `auto` pins one worker per CPU when there are more CPUs
    /// than workers; `off` leaves them to the scheduler [default: off].
    #[arg(long, value_parser = ["auto", "off"])]
    pub cpu: Option<String>,
    /// Print counters as JSON lines this often (at least 100ms), e.g. `1s`.
    #[arg(long)]
    pub stats: Option<String>,
    /// Stop after this long (e.g. `30s`); default: until Ctrl-C / SIGTERM.
    #[arg(long)]
    pub duration: Option<String>,
    /// Enter this network namespace (`ip netns` name) before opening the interfaces.
    #[arg(long)]
    pub netns: Option<String>,
    /// Control socket (mode 0660): `netsched filter ctl` talks to it
    /// [default: /run/netsched/filter.sock].
    #[arg(long = "control-socket", alias = "control")]
    pub control_socket: Option<PathBuf>,
    /// Group (name or gid) whose members may use the control socket besides root and us.
    #[arg(long)]
    pub control_group: Option<String>,
    /// Serve Prometheus `GET /metrics` on this address: `PORT` (loopback), `IP:PORT` or
    /// `[IPv6]:PORT`; an address that is not loopback needs --metrics-public.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Allow a --metrics address that is not loopback (`metrics_public = true` in the file).
    #[arg(long, num_args = 0, default_missing_value = "true")]
    pub metrics_public: Option<bool>,
}

/// Every key of [`FilterOptions`], in declaration order.
pub const KEYS: &[&str] = &[
    "input",
    "output",
    "rules",
    "rules_format",
    "classbench_action",
    "classifier",
    "signatures",
    "on_signature",
    "on_panic",
    "non_ip",
    "fragments",
    "dispatch",
    "workers",
    "block_size",
    "worker_queue",
    "reorder_window",
    "reorder_timeout",
    "pool",
    "port",
    "ring_frames",
    "cpu",
    "stats",
    "duration",
    "netns",
    "control_socket",
    "control_group",
    "metrics",
    "metrics_public",
];

/// Take each field of `file` that `flags` lacks into `flags`, and its key into `taken`.
macro_rules! take_missing {
    ($flags:ident, $file:ident, $taken:ident; $($f:ident),* $(,)?) => {
        $(if $flags.$f.is_none() && $file.$f.is_some() {
            $flags.$f = $file.$f.take();
            $taken.insert(stringify!($f));
        })*
    };
}

/// The settings in force: the flags, then the file for what they leave out.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub opts: FilterOptions,
    /// The configuration file, when one was given.
    pub file: Option<PathBuf>,
    /// Keys whose value came from the file.
    pub from_file: BTreeSet<&'static str>,
}

/// A configuration file that could not be used.
#[derive(Debug)]
pub enum ConfigError {
    /// Not readable, not a regular file, too large or not UTF-8.
    Read(String),
    /// Not TOML, an unknown key or a value of the wrong type (toml names the line).
    Toml {
        file: PathBuf,
        source: toml::de::Error,
    },
    /// A reload's file changes a key only a restart applies.
    NeedsRestart {
        file: PathBuf,
        key: &'static str,
        running: String,
        read: String,
    },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Read(e) => f.write_str(e),
            ConfigError::Toml { file, source } => write!(f, "{}: {source}", file.display()),
            ConfigError::NeedsRestart {
                file,
                key,
                running,
                read,
            } => write!(
                f,
                "{}: {key} = {read}: running with {running}; only {} change on reload, \
                 this key needs a restart",
                file.display(),
                RELOADABLE.join(", ")
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Settings {
    /// `flags`, completed from `file` when given.
    pub fn resolve(flags: &FilterOptions, file: Option<&Path>) -> Result<Settings, ConfigError> {
        let mut opts = flags.clone();
        let mut from_file = BTreeSet::new();
        if let Some(path) = file {
            let mut read = read_file(path)?;
            take_missing!(opts, read, from_file;
                input, output, rules, rules_format, classbench_action, classifier, signatures,
                on_signature, on_panic, non_ip, fragments, dispatch, workers, block_size,
                worker_queue, reorder_window, reorder_timeout, pool, port, ring_frames, cpu,
                stats, duration, netns, control_socket, control_group, metrics, metrics_public);
        }
        Ok(Settings {
            opts,
            file: file.map(Path::to_path_buf),
            from_file,
        })
    }

    /// Where `key`'s value came from, for an error: `FILE: key` or `--flag`.
    pub fn key(&self, key: &'static str) -> String {
        match &self.file {
            Some(f) if self.from_file.contains(key) => format!("{}: {key} =", f.display()),
            _ => format!("--{}", key.replace('_', "-")),
        }
    }

    /// `value` if it is one of `allowed`, else an error naming where it came from.
    pub fn choice<'a>(
        &self,
        key: &'static str,
        value: Option<&'a str>,
        default: &'a str,
        allowed: &[&str],
    ) -> anyhow::Result<&'a str> {
        let v = value.unwrap_or(default);
        anyhow::ensure!(
            allowed.contains(&v),
            "{} {v}: one of {}",
            self.key(key),
            allowed.join(", ")
        );
        Ok(v)
    }

    /// A reload's settings: refused when a key other than [`RELOADABLE`] differs from `self`'s.
    pub fn check_reload(&self, read: &Settings) -> Result<(), ConfigError> {
        let (a, b) = (fields(&self.opts), fields(&read.opts));
        for ((key, running), (_, got)) in a.iter().zip(b.iter()) {
            if running != got && !RELOADABLE.contains(key) {
                return Err(ConfigError::NeedsRestart {
                    file: read.file.clone().unwrap_or_default(),
                    key,
                    running: running.clone(),
                    read: got.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Read, parse and anchor the file's relative paths at its folder.
fn read_file(path: &Path) -> Result<FilterOptions, ConfigError> {
    let text = netsched_util::read::read_text(path, MAX_CONFIG_BYTES, "filter configuration")
        .map_err(|e| ConfigError::Read(format!("{e:#}")))?;
    parse_file(&text, path)
}

/// Parse the text of the configuration file at `path` (which names it in errors) and anchor
/// its relative paths at the file's folder.
pub fn parse_file(text: &str, path: &Path) -> Result<FilterOptions, ConfigError> {
    let mut read: FilterOptions = toml::from_str(text).map_err(|source| ConfigError::Toml {
        file: path.to_path_buf(),
        source,
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for p in [&mut read.rules, &mut read.signatures]
        .into_iter()
        .flatten()
    {
        if p.is_relative() {
            *p = dir.join(&*p);
        }
    }
    Ok(read)
}

/// Each key with its value as the file would write it (`(none)` when absent).
fn fields(o: &FilterOptions) -> Vec<(&'static str, String)> {
    let table = toml::Table::try_from(o).unwrap_or_default();
    KEYS.iter()
        .map(|k| {
            let v = table
                .get(*k)
                .map_or("(none)".to_string(), |v| v.to_string());
            (*k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("filter.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "netsched-filter-config-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn flags_win_over_the_file_and_relative_paths_follow_the_file() {
        let d = tmp();
        let f = write(
            &d,
            "input = \"a\"\noutput = \"b\"\nrules = \"r.toml\"\nworkers = 2\n",
        );
        let flags = FilterOptions {
            workers: Some(3),
            ..Default::default()
        };
        let s = Settings::resolve(&flags, Some(&f)).unwrap();
        assert_eq!(s.opts.workers, Some(3));
        assert_eq!(s.opts.input.as_deref(), Some("a"));
        assert_eq!(s.opts.rules, Some(d.join("r.toml")));
        assert_eq!(s.key("input"), format!("{}: input =", f.display()));
        assert_eq!(s.key("workers"), "--workers");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_file_and_line() {
        let d = tmp();
        let f = write(&d, "input = \"a\"\nworkerz = 2\n");
        let e = Settings::resolve(&FilterOptions::default(), Some(&f)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("filter.toml") && msg.contains("workerz"),
            "{msg}"
        );
        assert!(msg.contains("line 2"), "{msg}");
        let f = write(&d, "workers = \"four\"\n");
        let msg = Settings::resolve(&FilterOptions::default(), Some(&f))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("workers") && msg.contains("line 1"), "{msg}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_reload_changes_only_the_rule_keys() {
        let d = tmp();
        let start = write(&d, "input = \"a\"\nrules = \"r1.toml\"\nworkers = 2\n");
        let running = Settings::resolve(&FilterOptions::default(), Some(&start)).unwrap();
        let f = write(&d, "input = \"a\"\nrules = \"r2.toml\"\nworkers = 2\n");
        let read = Settings::resolve(&FilterOptions::default(), Some(&f)).unwrap();
        running.check_reload(&read).unwrap();
        let f = write(&d, "input = \"a\"\nrules = \"r2.toml\"\nworkers = 3\n");
        let read = Settings::resolve(&FilterOptions::default(), Some(&f)).unwrap();
        let e = running.check_reload(&read).unwrap_err().to_string();
        assert!(e.contains("workers = 3: running with 2"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn every_key_is_listed() {
        let table = toml::Table::try_from(FilterOptions {
            input: Some(String::new()),
            ..Default::default()
        })
        .unwrap();
        assert!(table.keys().all(|k| KEYS.contains(&k.as_str())));
        // The flag names of the clap declaration are the keys, dashed.
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cmd {
            #[command(flatten)]
            o: FilterOptions,
        }
        let longs: Vec<String> = Cmd::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
            .filter(|l| l != "help")
            .collect();
        assert_eq!(longs, KEYS, "flags and keys differ");
    }
}
