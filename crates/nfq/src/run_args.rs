//! The flags of a scheduling run of `netsched nfq` ([`RunArgs`]) and how they lay over the
//! configuration file: what the command line and a reload (`reload.rs`, which applies the same
//! flags over the file read again) share.

use crate::config::{
    self, parse_cidr, parse_deadline, parse_protocol, resolve_class, ClassSpec, Config,
};
use crate::control;
use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// TOML configuration file (docs/nfq.md).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// NFQUEUE number (`nfqueue` in the file).
    #[arg(long = "nfqueue", alias = "queue")]
    pub queue: Option<u16>,
    /// Service protocol: tcp or udp.
    #[arg(long)]
    pub protocol: Option<String>,
    /// Service port (repeat for several); replaces the file's list.
    #[arg(long = "port")]
    pub ports: Vec<u16>,
    /// Service address (only requests to it are scheduled).
    #[arg(long)]
    pub address: Option<String>,
    /// A class NAME=P (percentile target 1..=100), in priority order; replaces the file's.
    #[arg(long = "class", value_name = "NAME=P")]
    pub classes: Vec<String>,
    /// An address-table entry CIDR=CLASS (added to the file's).
    #[arg(long = "map", value_name = "CIDR=CLASS")]
    pub maps: Vec<String>,
    /// Class of addresses no entry matches (name or index; default: the last class).
    #[arg(long)]
    pub default_class: Option<String>,
    /// Deadline: a duration ("4ms"), "auto" (running mean response time) or "auto_quantile"
    /// (running q-quantile of response times, q = Σ N·P / Σ N).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Requests inside the server at once (a number, or "off" for no holding).
    #[arg(long)]
    pub budget: Option<String>,
    /// percentile (P0), fifo, or strict_priority (class 0 first).
    #[arg(long)]
    pub discipline: Option<String>,
    /// Control socket path.
    #[arg(long = "control-socket", alias = "socket")]
    pub socket: Option<PathBuf>,
    /// Group allowed to use the control socket.
    #[arg(long = "control-group", alias = "group")]
    pub group: Option<String>,
    /// iptables front end (iptables, iptables-legacy, iptables-nft).
    #[arg(long)]
    pub iptables: Option<String>,
    /// Count a miss as soon as a request's age passes the deadline (true), or only when its
    /// late response leaves (false, default, as in the thesis).
    #[arg(long)]
    pub early_miss: Option<bool>,
    /// Keep polling this long after each burst of packets before sleeping ("200us"; "0" = off,
    /// always sleep).
    #[arg(long)]
    pub busy_poll: Option<String>,
    /// Pin the daemon to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Serve Prometheus metrics on GET /metrics at ADDR: PORT (= 127.0.0.1:PORT), IP:PORT or
    /// [IPv6]:PORT; port 0 picks a free port (printed). Loopback only unless --metrics-public.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Allow --metrics on an address that is not loopback.
    #[arg(long, requires = "metrics")]
    pub metrics_public: bool,
    /// Validate the configuration (file and flags) and what it asks of the host — the
    /// control socket path can be taken, the group exists, the iptables front end is
    /// installed, the metrics address can be bound — then exit: 0 valid, 1 invalid.
    #[arg(long)]
    pub check: bool,
}

impl RunArgs {
    /// The configuration: file (if any), then flags.
    pub fn to_config(&self) -> Result<Config> {
        let mut c = match &self.config {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        if let Some(q) = self.queue {
            c.queue = q;
        }
        if let Some(p) = &self.protocol {
            c.service.protocol = parse_protocol(p).context("--protocol")?;
        }
        if !self.ports.is_empty() {
            c.service.ports = self.ports.clone();
        }
        if let Some(a) = &self.address {
            c.service.address = Some(
                a.parse()
                    .map_err(|_| anyhow::anyhow!("--address {a:?}: not an IP address"))?,
            );
        }
        if !self.classes.is_empty() {
            c.classes.clear();
            for s in &self.classes {
                let (name, p) = s
                    .split_once('=')
                    .with_context(|| format!("--class {s:?}: expected NAME=P, e.g. gold=90"))?;
                let p: i64 = p
                    .trim()
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--class {s:?}: {p:?} is not a number"))?;
                let p = config::validate_percentile(p).with_context(|| format!("--class {s:?}"))?;
                c.classes.push(ClassSpec {
                    name: name.trim().to_string(),
                    percentile: p,
                });
            }
            c.default_class = c.classes.len() - 1;
        }
        if let Some(d) = &self.default_class {
            c.default_class = resolve_class(&c.classes, d).context("--default-class")?;
        }
        for m in &self.maps {
            let (cidr, class) = m
                .split_once('=')
                .with_context(|| format!("--map {m:?}: expected CIDR=CLASS"))?;
            let cidr = parse_cidr(cidr).with_context(|| format!("--map {m:?}"))?;
            let k =
                resolve_class(&c.classes, class.trim()).with_context(|| format!("--map {m:?}"))?;
            c.table.push((cidr, k));
        }
        if let Some(d) = &self.deadline {
            c.deadline = parse_deadline(d).context("--deadline")?;
        }
        if let Some(b) = &self.budget {
            c.budget = control::parse_budget(b).context("--budget")?;
        }
        if let Some(d) = &self.discipline {
            c.discipline = config::DisciplineKind::parse(d).context("--discipline")?;
            if let Some(new) = config::DisciplineKind::old_spelling(d) {
                eprintln!("netsched: warning: --discipline {d} is renamed {new}");
            }
        }
        if let Some(s) = &self.socket {
            c.control_socket = s.clone();
        }
        if let Some(g) = &self.group {
            c.control_group = Some(g.clone());
        }
        if let Some(i) = &self.iptables {
            c.iptables = i.clone();
        }
        if let Some(e) = self.early_miss {
            c.early_miss = e;
        }
        if let Some(b) = &self.busy_poll {
            c.busy_poll =
                config::parse_duration(b, config::BUSY_POLL_RANGE).context("--busy-poll")?;
        }
        if let Some(m) = &self.metrics {
            c.metrics = Some(netsched_metrics::parse_addr(
                "--metrics",
                m,
                self.metrics_public,
                "--metrics-public",
            )?);
        }
        c.validate()?;
        Ok(c)
    }
}
