//! The balancer's TOML configuration (`deny_unknown_fields`; durations in the tc(8) grammar of
//! `netsched_core::units`). Every error names the file, the key and the value.

use netsched_core::balance::BalancerConfig;
use netsched_core::units::{parse_duration_in, UnitError};
use netsched_core::{Nanos, MS, SEC};
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Most servers one balancer takes.
pub const MAX_SERVERS: usize = 4096;
/// Most listen addresses.
pub const MAX_LISTEN: usize = 64;
/// Largest `max_connections`.
pub const MAX_CONNECTIONS: usize = 1_000_000;
/// Most data-path threads.
pub const MAX_THREADS: usize = 1024;
/// Largest `queue_limit`.
pub const MAX_QUEUE: usize = 1_000_000;
/// Largest weight (IPVS takes an int; we keep a margin for slow-start arithmetic).
pub const MAX_WEIGHT: u32 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Per connection, relaying bytes (HAProxy `mode tcp`, IPVS-NAT scheduling).
    L4,
    /// Per HTTP/1.1 request, with keep-alive pools to the backends (HAProxy `mode http`).
    L7,
}

/// How L4 mode moves bytes between the two sockets of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relay {
    /// `splice(2)` through a pipe pair per connection: the bytes never enter user space.
    #[default]
    Splice,
    /// `read`/`write` through a 16 KiB user-space buffer per direction.
    Copy,
}

/// What a hashing balancer hashes in L7 mode (HAProxy `balance source|hdr(host)|uri`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HashKey {
    #[default]
    Source,
    Host,
    Uri,
}

fn dur<'de, D: Deserializer<'de>>(d: D, min: Nanos, max: Nanos) -> Result<Nanos, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration_in(&text, min, max).map_err(|e: UnitError| serde::de::Error::custom(e))
}
fn dur_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Nanos, D::Error> {
    dur(d, MS, 3600 * SEC)
}
fn dur_slow_start<'de, D: Deserializer<'de>>(d: D) -> Result<Nanos, D::Error> {
    dur(d, 0, 3600 * SEC)
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeouts {
    /// Connecting to a backend.
    #[serde(default = "d_connect", deserialize_with = "dur_timeout")]
    pub connect: Nanos,
    /// Client inactivity (L4: no byte from the client; L7: idle keep-alive).
    #[serde(default = "d_30s", deserialize_with = "dur_timeout")]
    pub client: Nanos,
    /// Server inactivity (L4: no byte from the server; L7: waiting for the response head).
    #[serde(default = "d_30s", deserialize_with = "dur_timeout")]
    pub server: Nanos,
    /// Longest wait in the queue when every server is at maxconn (HAProxy `timeout queue`).
    #[serde(default = "d_1s", deserialize_with = "dur_timeout")]
    pub queue: Nanos,
    /// Longest time to receive a complete request head (HAProxy `timeout http-request`).
    #[serde(default = "d_5s", deserialize_with = "dur_timeout")]
    pub header: Nanos,
}
fn d_connect() -> Nanos {
    2 * SEC
}
fn d_30s() -> Nanos {
    30 * SEC
}
fn d_1s() -> Nanos {
    SEC
}
fn d_5s() -> Nanos {
    5 * SEC
}
fn d_500ms() -> Nanos {
    500 * MS
}
impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: d_connect(),
            client: d_30s(),
            server: d_30s(),
            queue: d_1s(),
            header: d_5s(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthKind {
    Tcp,
    Http,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub kind: HealthKind,
    #[serde(default = "d_path")]
    pub path: String,
    #[serde(default = "d_status")]
    pub expect_status: u16,
    #[serde(default = "d_500ms", deserialize_with = "dur_timeout")]
    pub interval: Nanos,
    #[serde(default = "d_2")]
    pub rise: u32,
    #[serde(default = "d_2")]
    pub fall: u32,
    #[serde(default = "d_1s", deserialize_with = "dur_timeout")]
    pub timeout: Nanos,
}
fn d_path() -> String {
    "/".into()
}
fn d_status() -> u16 {
    200
}
fn d_2() -> u32 {
    2
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Concurrent connections (L4) or requests (L7) per server; 0 = unlimited.
    #[serde(default)]
    pub maxconn: u32,
    /// Most requests/connections waiting for a server slot, over the whole balancer.
    #[serde(default = "d_queue")]
    pub queue_limit: usize,
    /// Linear weight ramp after a server comes back (HAProxy `slowstart`); 0 = none.
    #[serde(default, deserialize_with = "dur_slow_start")]
    pub slow_start: Nanos,
}
fn d_queue() -> usize {
    1024
}
impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            maxconn: 0,
            queue_limit: d_queue(),
            slow_start: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConf {
    pub name: String,
    pub addr: SocketAddr,
    #[serde(default = "d_weight")]
    pub weight: u32,
    /// Overrides `defaults.maxconn`.
    #[serde(default)]
    pub maxconn: Option<u32>,
}
fn d_weight() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub mode: Mode,
    pub listen: Vec<SocketAddr>,
    pub algorithm: BalancerConfig,
    #[serde(default)]
    pub hash_key: HashKey,
    #[serde(default = "d_socket")]
    pub control_socket: PathBuf,
    /// Group (name or gid) whose members may use the control socket besides root.
    #[serde(default)]
    pub control_group: Option<String>,
    /// Prometheus `/metrics` listener; none when absent.
    #[serde(default)]
    pub admin: Option<SocketAddr>,
    #[serde(default = "d_maxconns")]
    pub max_connections: usize,
    /// Threads of the data path; 0 (default) = one per CPU this process may run on. 1 runs
    /// everything on one thread (a current-thread runtime, like HAProxy's `nbthread 1`).
    #[serde(default)]
    pub threads: usize,
    /// L4 relay: `"splice"` (default) or `"copy"`.
    #[serde(default)]
    pub relay: Relay,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub health: Option<Health>,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerConf>,
}
fn d_socket() -> PathBuf {
    PathBuf::from("/run/netsched-balance.sock")
}
fn d_maxconns() -> usize {
    10_000
}

/// A configuration that could not be used: the file and what is wrong with which key.
#[derive(Debug)]
pub struct ConfigError {
    pub file: PathBuf,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}
impl std::error::Error for ConfigError {}

impl Config {
    /// Read and validate a file (at most [`MAX_CONFIG_BYTES`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError {
            file: path.to_path_buf(),
            message,
        };
        // Only a regular file, at most the bound (`/dev/zero` or a FIFO would never end).
        let text = netsched_report::read::read_text(path, MAX_CONFIG_BYTES, "configuration")
            .map_err(|e| {
                let full = e.to_string();
                // The reader names the file; ConfigError names it once more in front.
                let named = format!("configuration {}", path.display());
                err(full
                    .replace(&format!(" {named}"), "")
                    .replace(&format!("{named}: "), ""))
            })?;
        Self::parse(&text).map_err(err)
    }

    /// Parse and validate TOML text; the error names the key and value.
    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks serde cannot express.
    pub fn validate(&self) -> Result<(), String> {
        if self.listen.is_empty() {
            return Err("listen: at least one address is needed".into());
        }
        if self.listen.len() > MAX_LISTEN {
            return Err(format!(
                "listen: {} addresses, at most {MAX_LISTEN}",
                self.listen.len()
            ));
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err(format!(
                "max_connections = {}: must be 1..={MAX_CONNECTIONS}",
                self.max_connections
            ));
        }
        if self.threads > MAX_THREADS {
            return Err(format!(
                "threads = {}: at most {MAX_THREADS} (0 = one per CPU)",
                self.threads
            ));
        }
        if self.defaults.queue_limit > MAX_QUEUE {
            return Err(format!(
                "defaults.queue_limit = {}: at most {MAX_QUEUE}",
                self.defaults.queue_limit
            ));
        }
        if self.servers.len() > MAX_SERVERS {
            return Err(format!(
                "server: {} entries, at most {MAX_SERVERS}",
                self.servers.len()
            ));
        }
        if self.mode == Mode::L4 && self.hash_key != HashKey::Source {
            return Err(format!(
                "hash_key = {:?}: only \"source\" in mode \"l4\" (there is no HTTP to read)",
                self.hash_key
            ));
        }
        // Build once so a bad algorithm option is reported here, naming the field.
        self.algorithm
            .build(&mut netsched_core::rng::SplitMix64::new(1))
            .map_err(|e| format!("algorithm ({}): {e}", self.algorithm.name()))?;
        let mut names = std::collections::HashSet::new();
        for (i, s) in self.servers.iter().enumerate() {
            check_name(&s.name).map_err(|e| format!("server[{i}].name = {:?}: {e}", s.name))?;
            if !names.insert(s.name.as_str()) {
                return Err(format!("server[{i}].name = {:?}: used twice", s.name));
            }
            if s.weight > MAX_WEIGHT {
                return Err(format!(
                    "server[{i}] ({}).weight = {}: at most {MAX_WEIGHT}",
                    s.name, s.weight
                ));
            }
        }
        if let Some(h) = &self.health {
            if h.rise == 0 || h.rise > 1000 {
                return Err(format!("health.rise = {}: must be 1..=1000", h.rise));
            }
            if h.fall == 0 || h.fall > 1000 {
                return Err(format!("health.fall = {}: must be 1..=1000", h.fall));
            }
            if !h.path.starts_with('/')
                || h.path.len() > 1024
                || h.path.contains(char::is_whitespace)
            {
                return Err(format!(
                    "health.path = {:?}: must start with / , hold no whitespace and be at most 1024 bytes",
                    h.path
                ));
            }
            if !(100..=599).contains(&h.expect_status) {
                return Err(format!(
                    "health.expect_status = {}: must be 100..=599",
                    h.expect_status
                ));
            }
        }
        Ok(())
    }
}

/// Server names: 1-64 bytes of `[A-Za-z0-9_.-]` (they appear in metrics labels and ctl).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("must be 1 to 64 characters".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err("only letters, digits, '_', '-' and '.'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
mode = "l7"
listen = ["127.0.0.1:8080"]
algorithm = { kind = "wlc" }
hash_key = "host"
admin = "127.0.0.1:9100"
max_connections = 100
[timeouts]
connect = "2s"
queue = "250ms"
[health]
kind = "http"
path = "/health"
interval = "100ms"
[defaults]
maxconn = 4
slow_start = "10s"
[[server]]
name = "s1"
addr = "127.0.0.1:9001"
weight = 3
[[server]]
name = "s2"
addr = "127.0.0.1:9002"
maxconn = 10
"#;

    #[test]
    fn the_contract_example_parses_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.mode, Mode::L7);
        assert_eq!(c.hash_key, HashKey::Host);
        assert_eq!((c.threads, c.relay), (0, Relay::Splice));
        assert_eq!(c.timeouts.queue, 250 * MS);
        assert_eq!(c.timeouts.server, 30 * SEC);
        assert_eq!(c.defaults.maxconn, 4);
        assert_eq!(c.defaults.slow_start, 10 * SEC);
        assert_eq!(c.servers[1].maxconn, Some(10));
        assert_eq!(c.servers[1].weight, 1);
        let h = c.health.unwrap();
        assert_eq!((h.rise, h.fall, h.interval), (2, 2, 100 * MS));
    }

    #[test]
    fn errors_name_the_key_and_the_value() {
        let bad = |from: &str, to: &str| {
            let text = GOOD.replacen(from, to, 1);
            assert_ne!(text, GOOD, "{from} not in the example");
            Config::parse(&text).unwrap_err()
        };
        let e = bad("queue = \"250ms\"", "queue = \"250\"");
        assert!(e.contains("queue") && e.contains("250"), "{e}");
        let e = bad("weight = 3", "wieght = 3");
        assert!(e.contains("wieght"), "{e}");
        let e = bad("name = \"s2\"", "name = \"s1\"");
        assert!(e.contains("server[1].name") && e.contains("twice"), "{e}");
        let e = bad("kind = \"wlc\"", "kind = \"nope\"");
        assert!(e.contains("nope"), "{e}");
        let e = bad("max_connections = 100", "max_connections = 0");
        assert!(e.contains("max_connections = 0"), "{e}");
        let e = bad("name = \"s1\"", "name = \"s 1\"");
        assert!(e.contains("server[0].name"), "{e}");
        let e = bad(
            "max_connections = 100",
            "max_connections = 100\nrelay = \"zerocopy\"",
        );
        assert!(e.contains("relay") && e.contains("zerocopy"), "{e}");
        let e = bad(
            "max_connections = 100",
            "max_connections = 100\nthreads = 5000",
        );
        assert!(e.contains("threads = 5000"), "{e}");
        let e = bad("mode = \"l7\"", "mode = \"l4\"");
        assert!(e.contains("hash_key"), "{e}");
    }
}
