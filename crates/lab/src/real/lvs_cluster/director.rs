//! The director in front of the hosts, behind one small abstraction with two implementations:
//!
//! - [`DirectorKind::Netsched`]: `netsched balance --config FILE` (the project's balancer; any
//!   core `BalancerConfig` kind), configured with the TOML contract of `docs/lvs-real.md`;
//! - [`DirectorKind::Haproxy`]: Debian's `haproxy` (`-db`, foreground), whose `balance`
//!   methods cover only some of the core kinds: `roundrobin` (rr, wrr), `leastconn` (lc, wlc),
//!   `source` (sh) and `uri` with `hash-type map-based` (dh keyed on the URI, as the netsched
//!   config's `hash_key = "uri"`). lblc, lblcr, sed, nq, mh … have no HAProxy equivalent and
//!   are reported as not run.
//!
//! In [`ProxyMode::L7`] (the default) both proxy HTTP and open one host connection per
//! request (HAProxy `option http-server-close`): least-connection counts are then requests in
//! flight at each host. In [`ProxyMode::L4`] (`[real] mode = "l4"`) both relay TCP and schedule
//! each new client connection, as IPVS-NAT does (`ip_vs_conn.c`: one scheduling decision per
//! connection); the client opens one connection per request, so that is still one decision per
//! request. In L4 there is no URI to hash, and every connection has the same destination (the
//! one virtual IP), so the destination-hashing kinds (dh, lblc, lblcr) would send everything to
//! one host: they are reported as not run, with that reason.

use anyhow::{anyhow, bail, Context, Result};
use netsched_testbed::Testbed;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Which director program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectorKind {
    Netsched,
    Haproxy,
}

/// What the director schedules: HTTP requests (L7) or TCP connections (L4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyMode {
    #[default]
    L7,
    L4,
}

impl ProxyMode {
    /// `"l7"` or `"l4"`, as in `[real] mode` and `netsched balance`'s `mode`.
    pub fn parse(text: &str) -> Result<ProxyMode> {
        match text {
            "l7" => Ok(ProxyMode::L7),
            "l4" => Ok(ProxyMode::L4),
            other => Err(anyhow!("real.mode = {other:?}: expected \"l7\" or \"l4\"")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ProxyMode::L7 => "l7",
            ProxyMode::L4 => "l4",
        }
    }
}

/// Each `netsched balance` director's Prometheus listener, on its namespace's loopback
/// (the rig reads each director's request count there).
pub const ADMIN_PORT: u16 = 9100;

/// Core kinds that hash the destination: with one virtual IP and no URI (L4), every
/// connection has the same key.
const DESTINATION_KINDS: [&str; 3] = ["dh", "lblc", "lblcr"];

/// A director program that can be started.
#[derive(Debug, Clone)]
pub struct Director {
    pub kind: DirectorKind,
    pub binary: PathBuf,
    pub mode: ProxyMode,
}

/// A started director: its process id (owned by the rig's testbed) and log file.
#[derive(Debug)]
pub struct RunningDirector {
    pub pid: u32,
    pub log: PathBuf,
    /// `netsched balance`'s control socket (unused by haproxy).
    pub ctl: PathBuf,
}

impl RunningDirector {
    /// The last lines of the director's log (for error messages), bounded to 2 KB.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(2048);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].trim().to_string()
    }
}

static CONFIGS: AtomicU32 = AtomicU32::new(0);

/// The `netsched` binary: `$NETSCHED_BIN`; else this executable if it is `netsched`; else
/// `netsched` in the target folder this executable was built into (a test binary lives in
/// `<target>/<profile>/deps/`, and `cargo test --workspace` builds `<target>/<profile>/netsched`
/// before running any test, because `crates/cli` has integration tests); else
/// `target/release/netsched` of this workspace.
pub fn netsched_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("NETSCHED_BIN") {
        return PathBuf::from(p);
    }
    if let Ok(exe) = std::env::current_exe() {
        if exe.file_name().is_some_and(|n| n == "netsched") {
            return exe;
        }
        if let Some(profile) = exe
            .parent()
            .filter(|d| d.file_name().is_some_and(|n| n == "deps"))
            .and_then(Path::parent)
        {
            let beside = profile.join("netsched");
            if beside.is_file() {
                return beside;
            }
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/netsched")
}

/// True if `netsched balance` exists in `bin`.
fn has_balance(bin: &Path) -> bool {
    Command::new(bin)
        .args(["balance", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

impl Director {
    /// `choice`: `"netsched"`, `"haproxy"` or `"auto"` (netsched balance if the binary has
    /// it, else haproxy).
    pub fn detect(choice: &str) -> Result<Director> {
        let haproxy = || -> Result<Director> {
            let ok = Command::new("haproxy")
                .arg("-v")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok {
                bail!(
                    "director haproxy: `haproxy -v` failed; install it (apt-get install haproxy)"
                );
            }
            Ok(Director {
                kind: DirectorKind::Haproxy,
                binary: PathBuf::from("haproxy"),
                mode: ProxyMode::L7,
            })
        };
        match choice {
            "haproxy" => haproxy(),
            "netsched" => {
                let bin = netsched_binary();
                if !has_balance(&bin) {
                    bail!(
                        "director netsched: `{} balance --help` failed (build it, or set NETSCHED_BIN)",
                        bin.display()
                    );
                }
                Ok(Director {
                    kind: DirectorKind::Netsched,
                    binary: bin,
                    mode: ProxyMode::L7,
                })
            }
            "auto" => {
                let bin = netsched_binary();
                if has_balance(&bin) {
                    Ok(Director {
                        kind: DirectorKind::Netsched,
                        binary: bin,
                        mode: ProxyMode::L7,
                    })
                } else {
                    haproxy()
                }
            }
            other => Err(anyhow!(
                "real.director = {other:?}: expected \"auto\", \"netsched\" or \"haproxy\""
            )),
        }
    }

    /// Run `netsched balance ctl --control-socket <running.ctl> ARGS…` (netsched director only);
    /// returns its standard output.
    pub fn ctl(&self, running: &RunningDirector, args: &[&str]) -> Result<String> {
        if self.kind != DirectorKind::Netsched {
            bail!("{} has no netsched control socket", self.name());
        }
        let sock = running.ctl.display().to_string();
        let mut all = vec!["balance", "ctl", "--control-socket", &sock];
        all.extend_from_slice(args);
        netsched_testbed::run(&self.binary.display().to_string(), &all)
    }

    /// The program (its mode is [`Director::mode`]).
    pub fn name(&self) -> &'static str {
        match self.kind {
            DirectorKind::Netsched => "netsched balance",
            DirectorKind::Haproxy => "haproxy",
        }
    }

    /// HAProxy's `balance` line for a core kind, if it has one.
    fn haproxy_balance(alg: &str) -> Option<&'static str> {
        Some(match alg {
            "rr" | "wrr" => "balance roundrobin",
            "lc" | "wlc" => "balance leastconn",
            "sh" => "balance source\n    hash-type map-based",
            "dh" => "balance uri whole\n    hash-type map-based",
            _ => return None,
        })
    }

    /// The same director in `mode`.
    pub fn with_mode(mut self, mode: ProxyMode) -> Director {
        self.mode = mode;
        self
    }

    /// Why this director cannot run `alg`, if it cannot.
    pub fn cannot_run(&self, alg: &str) -> Option<&'static str> {
        if self.mode == ProxyMode::L4 && DESTINATION_KINDS.contains(&alg) {
            return Some(
                "hashes the destination, and in l4 every connection has the one virtual IP \
                 as its destination (no URI to read)",
            );
        }
        if !self.supports(alg) {
            return Some("no equivalent balance method; it needs `netsched balance`");
        }
        None
    }

    /// Can this director program run `alg` at all?
    pub fn supports(&self, alg: &str) -> bool {
        match self.kind {
            DirectorKind::Netsched => netsched_core::balance::BalancerConfig::all_defaults()
                .iter()
                .any(|c| c.name() == alg),
            DirectorKind::Haproxy => Self::haproxy_balance(alg).is_some(),
        }
    }

    /// The configuration text for `alg` with the given listener and servers.
    pub fn config(&self, alg: &str, vip: SocketAddr, servers: &[SocketAddr]) -> Result<String> {
        match self.kind {
            DirectorKind::Haproxy => {
                let balance = Self::haproxy_balance(alg)
                    .ok_or_else(|| anyhow!("haproxy has no balance method for {alg:?}"))?;
                let mode = match self.mode {
                    ProxyMode::L7 => {
                        "mode http\n    option http-server-close\n    timeout http-request 5s"
                    }
                    ProxyMode::L4 => "mode tcp",
                };
                let mut s = format!(
                    "global\n    maxconn 4096\n    nbthread 1\n\
                     defaults\n    {mode}\n    retries 0\n    \
                     timeout connect 2s\n    timeout client 120s\n    timeout server 120s\n    \
                     timeout queue 120s\n\
                     frontend fe\n    bind {vip}\n    default_backend be\n\
                     backend be\n    {balance}\n"
                );
                for (k, a) in servers.iter().enumerate() {
                    s.push_str(&format!("    server s{} {a} weight 1\n", k + 1));
                }
                Ok(s)
            }
            DirectorKind::Netsched => {
                // sh and mh hash the client's address (IPVS ip_vs_sh.c and ip_vs_mh.c hash the
                // source; so does the simulation: P4's one client lands on one host); the
                // destination kinds (dh, lblc, lblcr) key on the URI, P4's many destinations.
                let key = if matches!(alg, "sh" | "mh") || self.mode == ProxyMode::L4 {
                    "source"
                } else {
                    "uri"
                };
                let mode = self.mode.name();
                let admin = ADMIN_PORT;
                let mut s = format!(
                    "mode = \"{mode}\"\nlisten = [\"{vip}\"]\nalgorithm = {{ kind = \"{alg}\" }}\n\
                     hash_key = \"{key}\"\ncontrol_socket = \"CTL\"\nmax_client_connections = 20000\n\
                     admin = \"127.0.0.1:{admin}\"\n\n\
                     [timeouts]\nconnect = \"2s\"\nclient = \"120s\"\nserver = \"120s\"\n\
                     queue = \"120s\"\nheader = \"5s\"\n\n\
                     [health]\nkind = \"http\"\npath = \"/\"\nexpect_status = 200\n\
                     interval = \"500ms\"\nrise = 2\nfall = 2\ntimeout = \"1s\"\n\n\
                     [defaults]\nmaxconn = 0\nqueue_limit = 1024\nslow_start = \"0s\"\n"
                );
                for (k, a) in servers.iter().enumerate() {
                    s.push_str(&format!(
                        "\n[[server]]\nname = \"s{}\"\naddr = \"{a}\"\nweight = 1\n",
                        k + 1
                    ));
                }
                Ok(s)
            }
        }
    }

    /// Write the configuration into `dir` and start the director in namespace `ns`.
    pub fn start(
        &self,
        tb: &mut Testbed,
        ns: &str,
        dir: &Path,
        alg: &str,
        vip: SocketAddr,
        servers: &[SocketAddr],
    ) -> Result<RunningDirector> {
        let n = CONFIGS.fetch_add(1, Ordering::Relaxed);
        let ctl = dir.join(format!("ctl-{n}.sock"));
        let text = self
            .config(alg, vip, servers)?
            .replace("\"CTL\"", &format!("{:?}", ctl.display().to_string()));
        let ext = match self.kind {
            DirectorKind::Haproxy => "cfg",
            DirectorKind::Netsched => "toml",
        };
        let cfg = dir.join(format!("director-{n}.{ext}"));
        std::fs::write(&cfg, text).with_context(|| format!("writing {}", cfg.display()))?;
        let log = dir.join(format!("director-{n}.log"));
        let logf =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let cfg_s = cfg.display().to_string();
        let bin = self.binary.display().to_string();
        let args: Vec<&str> = match self.kind {
            DirectorKind::Haproxy => vec!["-db", "-f", &cfg_s],
            DirectorKind::Netsched => vec!["balance", "--config", &cfg_s],
        };
        let pid = tb.spawn_with(
            ns,
            &bin,
            &args,
            self.name(),
            Stdio::null(),
            Stdio::from(logf.try_clone().context("log file")?),
        )?;
        Ok(RunningDirector { pid, log, ctl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_covers_the_kinds_it_has_and_refuses_the_others() {
        let d = Director {
            kind: DirectorKind::Haproxy,
            binary: "haproxy".into(),
            mode: ProxyMode::L7,
        };
        for a in ["rr", "wrr", "lc", "wlc", "sh", "dh"] {
            assert!(d.supports(a), "{a}");
        }
        for a in ["lblc", "lblcr", "sed", "nq", "mh"] {
            assert!(!d.supports(a), "{a}");
        }
        let vip: SocketAddr = "10.88.0.1:80".parse().unwrap();
        let s: SocketAddr = "10.88.1.2:80".parse().unwrap();
        let c = d.config("lc", vip, &[s]).unwrap();
        assert!(c.contains("balance leastconn") && c.contains("server s1 10.88.1.2:80"));
        assert!(d.config("lblc", vip, &[s]).is_err());
    }

    #[test]
    fn the_netsched_config_follows_the_contract() {
        let d = Director {
            kind: DirectorKind::Netsched,
            binary: "netsched".into(),
            mode: ProxyMode::L7,
        };
        assert!(d.supports("lblc") && !d.supports("nope"));
        let vip: SocketAddr = "10.88.0.1:80".parse().unwrap();
        let s: SocketAddr = "10.88.1.2:80".parse().unwrap();
        let c = d.config("lblc", vip, &[s]).unwrap();
        let t: toml::Table = toml::from_str(&c).unwrap();
        assert_eq!(t["mode"].as_str(), Some("l7"));
        assert_eq!(t["algorithm"]["kind"].as_str(), Some("lblc"));
        assert_eq!(t["hash_key"].as_str(), Some("uri"));
        assert_eq!(t["server"][0]["addr"].as_str(), Some("10.88.1.2:80"));
        assert_eq!(t["timeouts"]["connect"].as_str(), Some("2s"));
        assert_eq!(t["health"]["fall"].as_integer(), Some(2));
        assert_eq!(t["admin"].as_str(), Some("127.0.0.1:9100"));
        for alg in ["sh", "mh"] {
            let t: toml::Table = toml::from_str(&d.config(alg, vip, &[s]).unwrap()).unwrap();
            assert_eq!(t["hash_key"].as_str(), Some("source"), "{alg}");
        }
    }

    #[test]
    fn l4_relays_tcp_and_refuses_the_destination_kinds_with_the_reason() {
        let vip: SocketAddr = "10.88.0.1:80".parse().unwrap();
        let s: SocketAddr = "10.88.1.2:80".parse().unwrap();
        let n = Director {
            kind: DirectorKind::Netsched,
            binary: "netsched".into(),
            mode: ProxyMode::L7,
        }
        .with_mode(ProxyMode::L4);
        for alg in ["rr", "lc", "wlc", "sed", "nq", "sh", "mh"] {
            assert_eq!(n.cannot_run(alg), None, "{alg}");
            let t: toml::Table = toml::from_str(&n.config(alg, vip, &[s]).unwrap()).unwrap();
            assert_eq!(t["mode"].as_str(), Some("l4"), "{alg}");
            assert_eq!(t["hash_key"].as_str(), Some("source"), "{alg}");
        }
        for alg in ["dh", "lblc", "lblcr"] {
            let why = n.cannot_run(alg).unwrap();
            assert!(why.contains("destination"), "{alg}: {why}");
        }
        let h = Director {
            kind: DirectorKind::Haproxy,
            binary: "haproxy".into(),
            mode: ProxyMode::L4,
        };
        let c = h.config("lc", vip, &[s]).unwrap();
        assert!(c.contains("mode tcp") && !c.contains("mode http"), "{c}");
        assert!(
            !c.contains("http-request") && !c.contains("http-server-close"),
            "{c}"
        );
        assert!(h.cannot_run("dh").is_some() && h.cannot_run("mh").is_some());
        assert_eq!(h.cannot_run("sh"), None);
        assert_eq!(ProxyMode::parse("l4").unwrap(), ProxyMode::L4);
        let e = ProxyMode::parse("tcp").unwrap_err().to_string();
        assert!(e.contains("real.mode") && e.contains("\"tcp\""), "{e}");
    }
}
