//! The balancer's TOML configuration (`deny_unknown_fields`; durations in the tc(8) grammar of
//! `netsched_core::units`). Every error names the file, the key and the value.

pub use crate::config_error::{AcceptProxyError, ConfigError, ConfigProblem, HostProblem};
use crate::server_error::{AddrError, NameError};
use netsched_core::balance::BalancerConfig;
use netsched_core::classify::Cidr;
use netsched_core::units::{parse_duration_in, UnitError};
use netsched_core::{Nanos, MS, SEC};
use serde::{Deserialize, Deserializer};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Most servers one balancer takes.
pub const MAX_SERVERS: usize = 4096;
/// Most listen addresses.
pub const MAX_LISTEN: usize = 64;
/// Largest `max_client_connections`.
pub const MAX_CONNECTIONS: usize = 1_000_000;
/// Most data-path threads.
pub const MAX_THREADS: usize = 1024;
/// Largest `queue_limit`.
pub const MAX_QUEUE: usize = 1_000_000;
/// Most networks in `accept_proxy`.
pub const MAX_ACCEPT_PROXY: usize = 256;
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

/// How mode l4 chooses among the servers (docs/balance.md, "SNI routing").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// Every server is a candidate for every connection.
    #[default]
    None,
    /// By the server name of the client's TLS ClientHello (HAProxy `req.ssl_sni`), read
    /// without terminating TLS (`sni.rs`): the servers listing the name in `sni`, else those
    /// listing no name.
    Sni,
}

impl Route {
    pub fn name(self) -> &'static str {
        match self {
            Route::None => "none",
            Route::Sni => "sni",
        }
    }
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

impl HashKey {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            HashKey::Source => "source",
            HashKey::Host => "host",
            HashKey::Uri => "uri",
        }
    }
}

/// Which requests may go over an idle pooled connection to a backend, after HAProxy's
/// `http-reuse` (configuration manual, section 4.2; its default there is `safe` too). An idle
/// connection's state is never known for sure: the backend may have closed it an instant ago
/// (RFC 9112 §9.3.1: either side may close an idle connection at any time), and a request
/// sent into that close can be sent again only if doing so twice is harmless (RFC 9110
/// §9.2.2) and the whole request is still at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpReuse {
    /// An idle pooled connection carries only requests that may be sent twice (idempotent
    /// method, body wholly at hand) and are not the first of their client connection; any
    /// other request gets a new connection, so a backend closing an idle connection never
    /// fails a request that cannot be resent, and such a request never reads a response the
    /// backend sent unasked.
    #[default]
    Safe,
    /// No pooling: a new connection per request, closed after its response.
    Never,
    /// Every request may take an idle pooled connection; only those that may be sent twice
    /// are resent when it turns out closed.
    Always,
}

impl SendProxy {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            SendProxy::V1 => "v1",
            SendProxy::V2 => "v2",
        }
    }
}

impl HttpReuse {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            HttpReuse::Safe => "safe",
            HttpReuse::Never => "never",
            HttpReuse::Always => "always",
        }
    }
}

/// Which headers carry the client's address to the backends in L7 mode (forwarded.rs;
/// docs/balance.md, "Client address to backends").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Forwarded {
    /// `X-Forwarded-For` (HAProxy `option forwardfor`).
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239).
    Forwarded,
    /// Both.
    Both,
    /// Neither.
    Off,
}

impl Forwarded {
    /// The name the file uses.
    pub fn name(self) -> &'static str {
        match self {
            Forwarded::XForwardedFor => "x-forwarded-for",
            Forwarded::Forwarded => "forwarded",
            Forwarded::Both => "both",
            Forwarded::Off => "off",
        }
    }
}

/// The PROXY protocol version sent first on every connection to a server (HAProxy's
/// `send-proxy` / `send-proxy-v2`; proxy_proto.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    /// The text line (proxy-protocol.txt §2.1).
    V1,
    /// The binary block (§2.2).
    V2,
}

/// The networks whose connections to the listeners must start with a PROXY protocol header
/// (HAProxy's `accept-proxy`, only from these; proxy_proto.rs). Empty: no header is read from
/// anyone. A CIDR each (`"10.0.0.0/8"`, or a bare address for one host), at most
/// [`MAX_ACCEPT_PROXY`], none twice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct AcceptProxy(Vec<Cidr>);

impl AcceptProxy {
    /// Whether `ip` is in a listed network (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(ip))
    }
    pub fn networks(&self) -> &[Cidr] {
        &self.0
    }
}

impl TryFrom<Vec<String>> for AcceptProxy {
    type Error = AcceptProxyError;
    fn try_from(texts: Vec<String>) -> Result<Self, AcceptProxyError> {
        if texts.len() > MAX_ACCEPT_PROXY {
            return Err(AcceptProxyError::TooMany {
                given: texts.len(),
                max: MAX_ACCEPT_PROXY,
            });
        }
        let mut nets: Vec<Cidr> = Vec::with_capacity(texts.len());
        for (index, text) in texts.iter().enumerate() {
            let n: Cidr = text.parse().map_err(|why| AcceptProxyError::Network {
                index,
                text: text.clone(),
                why,
            })?;
            if let Some(first) = nets.iter().position(|m| *m == n) {
                return Err(AcceptProxyError::Twice {
                    index,
                    text: text.clone(),
                    first,
                });
            }
            nets.push(n);
        }
        Ok(AcceptProxy(nets))
    }
}

fn dur<'de, D: Deserializer<'de>>(d: D, min: Nanos, max: Nanos) -> Result<Nanos, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration_in(&text, min, max).map_err(|e: UnitError| serde::de::Error::custom(e))
}
/// `algorithm = "rr"` as `algorithm = { kind = "rr" }`; an error names the kinds there are.
fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<BalancerConfig, D::Error> {
    use serde::de::Error;
    let v = toml::Value::deserialize(d)?;
    let table = match v {
        toml::Value::String(kind) => {
            let mut t = toml::Table::new();
            t.insert("kind".into(), toml::Value::String(kind));
            t
        }
        toml::Value::Table(t) => t,
        other => {
            return Err(D::Error::custom(format!(
                "{other}: a balancer's kind (\"rr\") or a table ({{ kind = \"mh\", ... }})"
            )))
        }
    };
    let kind = table
        .get("kind")
        .and_then(|k| k.as_str())
        .map(str::to_owned);
    BalancerConfig::deserialize(toml::Value::Table(table)).map_err(|e| {
        let known: Vec<&str> = BalancerConfig::all_defaults()
            .iter()
            .map(|c| c.name())
            .collect();
        match kind {
            Some(k) if !known.contains(&k.as_str()) => D::Error::custom(format!(
                "kind = {k:?}: no such balancer; one of {}",
                known.join(", ")
            )),
            None => D::Error::custom(format!("no kind: one of {}", known.join(", "))),
            Some(_) => D::Error::custom(e.to_string()),
        }
    })
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
    /// After SIGTERM/SIGINT, longest wait for the work in flight before what is left is cut
    /// (HAProxy `hard-stop-after`; stop.rs).
    #[serde(default = "d_30s", deserialize_with = "dur_timeout")]
    pub hard_stop_after: Nanos,
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
            hard_stop_after: d_30s(),
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
    /// A PROXY protocol header first on every connection to this server; none when absent.
    #[serde(default)]
    pub send_proxy: Option<SendProxy>,
    /// `route = "sni"`: the server names this server is chosen for (`sni.rs` patterns);
    /// none: the default route, for names no server lists.
    #[serde(default)]
    pub sni: Vec<String>,
}
fn d_weight() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub mode: Mode,
    pub listen: Vec<SocketAddr>,
    /// Networks whose connections must start with a PROXY protocol header ([`AcceptProxy`]).
    #[serde(default)]
    pub accept_proxy: AcceptProxy,
    /// The balancer: a table (`{ kind = "mh", ... }`, the core's options), or its kind alone
    /// (`"rr"`) for the defaults.
    #[serde(deserialize_with = "algorithm")]
    pub algorithm: BalancerConfig,
    #[serde(default)]
    pub hash_key: HashKey,
    /// L7: which requests may reuse an idle backend connection ([`HttpReuse`]).
    #[serde(default)]
    pub http_reuse: HttpReuse,
    /// L7: which headers carry the client's address to the backends ([`Forwarded`]).
    #[serde(default)]
    pub forwarded: Forwarded,
    #[serde(default = "d_socket")]
    pub control_socket: PathBuf,
    /// Group (name or gid) whose members may use the control socket besides root.
    #[serde(default)]
    pub control_group: Option<String>,
    /// Prometheus `/metrics` listener: `PORT` (loopback), `IP:PORT` or `[IPv6]:PORT`, as
    /// the daemons' `--metrics` reads it; none when absent.
    #[serde(default, deserialize_with = "admin_addr")]
    pub admin: Option<SocketAddr>,
    /// Client connections open at once over every listener; one more is closed at accept
    /// (`refused{reason="max_connections"}`). Not a server's `maxconn`, whose excess waits in
    /// the queue. `max_connections` is its old spelling, read with a warning.
    #[serde(
        default = "d_maxconns",
        rename = "max_client_connections",
        alias = "max_connections"
    )]
    pub max_connections: usize,
    /// Threads of the data path; 0 (default) = one per CPU this process may run on. 1 runs
    /// everything on one thread (a current-thread runtime, like HAProxy's `nbthread 1`).
    #[serde(default)]
    pub threads: usize,
    /// L4 relay: `"splice"` (default) or `"copy"`.
    #[serde(default)]
    pub relay: Relay,
    /// L4: `"none"` (default) or `"sni"` ([`Route`]).
    #[serde(default)]
    pub route: Route,
    #[serde(default)]
    pub timeouts: Timeouts,
    #[serde(default)]
    pub health: Option<Health>,
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerConf>,
    /// `discipline`: the order in which waiting requests get a freed slot (`classes.rs`);
    /// `queue` is its old spelling, read with a warning.
    #[serde(default, rename = "discipline", alias = "queue")]
    pub queue: crate::classes::QueueKind,
    /// Service classes of L7 requests (`classes.rs`).
    #[serde(default, rename = "class")]
    pub classes: Vec<crate::classes::ClassConf>,
    #[serde(default)]
    pub default_class: Option<String>,
    /// Access log (a line per L7 request, per L4 connection): `"stderr"` or an absolute file
    /// path; off when absent (access_log.rs).
    #[serde(default)]
    pub access_log: Option<String>,
    /// TLS termination on every listener (mode l7; `tls.rs`): `[[tls.certificate]]` entries,
    /// and client certificates (`client_certificate`, `client_ca`).
    #[serde(default)]
    pub tls: Option<crate::tls::TlsConf>,
}
/// `admin`: a port alone or an address (written in the operator's own file, an address that
/// is not loopback is allowed, as HAProxy's `stats socket`/`bind` lines are).
fn admin_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Admin {
        Port(u16),
        Text(String),
    }
    let text = match <Admin as serde::Deserialize>::deserialize(d)? {
        Admin::Port(p) => p.to_string(),
        Admin::Text(t) => t,
    };
    netsched_metrics::parse_addr("admin", &text, true, "")
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Old spellings in a configuration file that still work for one release, each as a warning
/// naming the new one (docs/cli.md, "Renames"; printed with the file's name by
/// [`Config::load`]).
pub fn old_spellings(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    if table.contains_key("max_connections") {
        out.push("max_connections is renamed max_client_connections".to_string());
    }
    if let Some(q) = table.get("queue") {
        let new = match q.as_str() {
            Some("priority") => "\"strict_priority\"".to_string(),
            _ => q.to_string(),
        };
        out.push(format!("queue = {q} is renamed discipline = {new}"));
    } else if table.get("discipline").and_then(|v| v.as_str()) == Some("priority") {
        out.push("discipline = \"priority\" is renamed \"strict_priority\"".to_string());
    }
    out
}

fn d_socket() -> PathBuf {
    PathBuf::from("/run/netsched/balance.sock")
}
fn d_maxconns() -> usize {
    10_000
}

impl Config {
    /// A `client_subject` class rule needs client certificates asked for (`[tls]`
    /// `client_certificate` not `off`): else no request could ever match it.
    fn check_client_subjects(&self) -> Result<(), ConfigProblem> {
        let asked = self
            .tls
            .as_ref()
            .is_some_and(|t| t.client_certificate != crate::tls::ClientAuth::Off);
        match self
            .classes
            .iter()
            .enumerate()
            .find(|(_, c)| c.client_subject.is_some())
        {
            Some((index, c)) if !asked => Err(ConfigProblem::ClientSubjectWithoutCertificates {
                index,
                name: c.name.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// `route = "sni"` only in mode l4; `sni` lists only with it, each name valid, and a name
    /// in one route only (servers with the same list share a route).
    fn check_sni(&self) -> Result<(), ConfigProblem> {
        if self.route == Route::Sni && self.mode == Mode::L7 {
            return Err(ConfigProblem::RouteInL7);
        }
        let mut owner: std::collections::HashMap<
            crate::sni::Pattern,
            (usize, Vec<crate::sni::Pattern>),
        > = std::collections::HashMap::new();
        for (i, s) in self.servers.iter().enumerate() {
            let err = |value: &str, why: String| ConfigProblem::ServerSni {
                index: i,
                name: s.name.clone(),
                value: value.to_string(),
                why,
            };
            if s.sni.is_empty() {
                continue;
            }
            if self.route != Route::Sni {
                return Err(err(
                    &s.sni[0],
                    format!("needs route = \"sni\" (route = \"{}\")", self.route.name()),
                ));
            }
            let set = route_names(&s.sni).map_err(|(v, why)| err(v, why))?;
            for p in &set {
                match owner.get(p) {
                    Some((first, other)) if *other != set => {
                        return Err(err(
                            &p.text(),
                            format!(
                            "also in server[{first}] ({})'s list, which differs: a name belongs to \
                             one route (servers with the same list share it)",
                            self.servers[*first].name
                        ),
                        ));
                    }
                    Some(_) => {}
                    None => {
                        owner.insert(p.clone(), (i, set.clone()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Read and validate a file (at most [`MAX_CONFIG_BYTES`]).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |problem: ConfigProblem| ConfigError {
            file: path.to_path_buf(),
            problem,
        };
        // Only a regular file, at most the bound (`/dev/zero` or a FIFO would never end).
        let text = netsched_util::read::read_text(path, MAX_CONFIG_BYTES, "configuration")
            .map_err(|e| {
                let full = e.to_string();
                // The reader names the file; ConfigError names it once more in front.
                let named = format!("configuration {}", path.display());
                err(ConfigProblem::Read(
                    full.replace(&format!(" {named}"), "")
                        .replace(&format!("{named}: "), ""),
                ))
            })?;
        let cfg = Self::parse(&text).map_err(err)?;
        if let Ok(table) = text.parse::<toml::Table>() {
            for w in old_spellings(&table) {
                eprintln!("netsched: warning: {}: {w}", path.display());
            }
        }
        Ok(cfg)
    }

    /// Parse and validate TOML text; the error names the key and value.
    pub fn parse(text: &str) -> Result<Config, ConfigProblem> {
        let cfg: Config = toml::from_str(text)
            .map_err(|e| ConfigProblem::Toml(e.to_string().trim_end().to_string()))?;
        cfg.validate()?;
        // `relay` defaults to splice, so only the text tells whether it was written.
        if cfg.mode == Mode::L7 {
            let table: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigProblem::Toml(e.to_string()))?;
            if let Some(v) = table.get("relay") {
                return Err(ConfigProblem::RelayInL7(v.to_string()));
            }
        }
        // `path` and `expect_status` have defaults too: only the text tells whether a tcp
        // check was given keys it never uses.
        if cfg
            .health
            .as_ref()
            .is_some_and(|h| h.kind == HealthKind::Tcp)
        {
            let table: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigProblem::Toml(e.to_string()))?;
            let health = table.get("health").and_then(|h| h.as_table());
            for key in ["path", "expect_status"] {
                if let Some(v) = health.and_then(|h| h.get(key)) {
                    return Err(ConfigProblem::HealthHttpOnly {
                        key,
                        value: v.to_string(),
                    });
                }
            }
        }
        // `http_reuse` defaults to safe: as with `relay`, only the text tells whether it was
        // written in mode l4, where there is no HTTP connection to reuse.
        if cfg.mode == Mode::L4 {
            let table: toml::Table = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigProblem::Toml(e.to_string()))?;
            if let Some(v) = table.get("http_reuse") {
                return Err(ConfigProblem::HttpReuseInL4(v.to_string()));
            }
            // Likewise `forwarded`: mode l4 reads no HTTP, it has no header to add.
            if let Some(v) = table.get("forwarded") {
                return Err(ConfigProblem::InL4 {
                    key: "forwarded",
                    value: v.to_string(),
                });
            }
        }
        Ok(cfg)
    }

    /// Checks serde cannot express.
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        if self.listen.is_empty() {
            return Err(ConfigProblem::NoListen);
        }
        if self.listen.len() > MAX_LISTEN {
            return Err(ConfigProblem::TooMany {
                key: "listen",
                count: self.listen.len(),
                max: MAX_LISTEN,
                entries: "addresses",
            });
        }
        for (i, a) in self.listen.iter().enumerate() {
            // Port 0 (an ephemeral port each) may appear more than once.
            if a.port() != 0 {
                if let Some(j) = self.listen[..i].iter().position(|b| b == a) {
                    return Err(ConfigProblem::ListenTwice {
                        index: i,
                        addr: *a,
                        first: j,
                    });
                }
            }
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS {
            return Err(ConfigProblem::Range {
                key: "max_client_connections",
                value: self.max_connections as u64,
                min: 1,
                max: MAX_CONNECTIONS as u64,
            });
        }
        if self.threads > MAX_THREADS {
            return Err(ConfigProblem::AtMost {
                key: "threads",
                value: self.threads as u64,
                max: MAX_THREADS as u64,
                note: " (0 = one per CPU)",
            });
        }
        if self.defaults.queue_limit > MAX_QUEUE {
            return Err(ConfigProblem::AtMost {
                key: "defaults.queue_limit",
                value: self.defaults.queue_limit as u64,
                max: MAX_QUEUE as u64,
                note: "",
            });
        }
        if self.servers.len() > MAX_SERVERS {
            return Err(ConfigProblem::TooMany {
                key: "server",
                count: self.servers.len(),
                max: MAX_SERVERS,
                entries: "entries",
            });
        }
        if self.mode == Mode::L4 && self.tls.is_some() {
            return Err(ConfigProblem::TlsInL4);
        }
        self.check_client_subjects()?;
        if self.mode == Mode::L4 && self.hash_key != HashKey::Source {
            return Err(ConfigProblem::HashKeyInL4(self.hash_key.name()));
        }
        // Build once so a bad algorithm option is reported here, naming the field.
        self.algorithm
            .build(&mut netsched_core::rng::SplitMix64::new(1))
            .map_err(|source| ConfigProblem::Algorithm {
                name: self.algorithm.name(),
                source,
            })?;
        let mut names = std::collections::HashSet::new();
        let mut addrs = std::collections::HashMap::new();
        for (i, s) in self.servers.iter().enumerate() {
            check_name(&s.name).map_err(|why| ConfigProblem::ServerName {
                index: i,
                name: s.name.clone(),
                why,
            })?;
            if !names.insert(s.name.as_str()) {
                return Err(ConfigProblem::ServerNameTwice {
                    index: i,
                    name: s.name.clone(),
                });
            }
            check_backend_addr(s.addr).map_err(|why| ConfigProblem::ServerAddr {
                index: i,
                name: s.name.clone(),
                addr: s.addr,
                why,
            })?;
            if let Some(first) = addrs.insert(s.addr, s.name.as_str()) {
                return Err(ConfigProblem::ServerAddrTwice {
                    index: i,
                    name: s.name.clone(),
                    addr: s.addr,
                    first: first.to_string(),
                });
            }
            if s.weight > MAX_WEIGHT {
                return Err(ConfigProblem::ServerWeight {
                    index: i,
                    name: s.name.clone(),
                    weight: s.weight,
                    max: MAX_WEIGHT,
                });
            }
        }
        self.check_sni()?;
        self.class_set().map_err(ConfigProblem::Classes)?;
        if let Some(h) = &self.health {
            if h.rise == 0 || h.rise > 1000 {
                return Err(ConfigProblem::Range {
                    key: "health.rise",
                    value: h.rise as u64,
                    min: 1,
                    max: 1000,
                });
            }
            if h.fall == 0 || h.fall > 1000 {
                return Err(ConfigProblem::Range {
                    key: "health.fall",
                    value: h.fall as u64,
                    min: 1,
                    max: 1000,
                });
            }
            if !h.path.starts_with('/')
                || h.path.len() > 1024
                || h.path.contains(char::is_whitespace)
            {
                return Err(ConfigProblem::HealthPath(h.path.clone()));
            }
            if !(100..=599).contains(&h.expect_status) {
                return Err(ConfigProblem::Range {
                    key: "health.expect_status",
                    value: h.expect_status as u64,
                    min: 100,
                    max: 599,
                });
            }
        }
        Ok(())
    }
}

impl Config {
    /// The classes and queue discipline, checked (`classes.rs`).
    pub fn class_set(&self) -> Result<crate::classes::ClassSet, crate::classes::ClassError> {
        use crate::classes::{ClassError, ClassSet, QueueBounds, QueueKind};
        if self.mode == Mode::L4 && (!self.classes.is_empty() || self.queue != QueueKind::Fifo) {
            return Err(ClassError::L4);
        }
        let bounds = QueueBounds {
            queue_limit: self.defaults.queue_limit.max(1),
            queue_timeout: self.timeouts.queue,
        };
        ClassSet::build(
            self.queue,
            &self.classes,
            self.default_class.as_deref(),
            bounds,
        )
    }
}

/// A backend address must be one to connect to: a port, and not the unspecified address
/// (`0.0.0.0` / `::` mean "any local address" to bind(2); Linux's connect(2) turns them into
/// loopback, which is never what a backend entry means).
pub fn check_backend_addr(addr: SocketAddr) -> Result<(), AddrError> {
    if addr.port() == 0 {
        return Err(AddrError::PortZero);
    }
    if addr.ip().is_unspecified() {
        return Err(AddrError::Unspecified(addr.ip()));
    }
    Ok(())
}

/// Two listen addresses with the same port that one host cannot bind at once: the same
/// address, or one is the unspecified address of the other's family, or one is `::` bound
/// dual-stack (`net.ipv6.bindv6only` = 0, Linux's default) and the other IPv4.
fn overlap(a: SocketAddr, b: SocketAddr, dual_stack: bool) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    if a.ip() == b.ip() {
        return true;
    }
    let covers = |x: SocketAddr, y: SocketAddr| {
        x.ip().is_unspecified() && (x.is_ipv4() == y.is_ipv4() || (dual_stack && x.is_ipv6()))
    };
    covers(a, b) || covers(b, a)
}

impl Config {
    /// What a start would find wrong on this host, without starting (`--check`): the
    /// `control_group` must exist; the control socket path must be free (absent, or a stale
    /// socket) in an existing directory; listen and admin addresses must not overlap each
    /// other and must be free: each is bound (with `SO_REUSEADDR`, as the daemon binds) and
    /// released at once, never put in the listening state, so no connection is ever accepted.
    pub fn check_host(&self) -> Result<(), HostProblem> {
        if let Some(g) = &self.control_group {
            netsched_control::access::group_gid(g).map_err(|why| HostProblem::ControlGroup {
                group: g.clone(),
                why,
            })?;
        }
        let sock = &self.control_socket;
        match std::fs::symlink_metadata(sock) {
            Ok(m) => {
                use std::os::unix::fs::FileTypeExt;
                if !m.file_type().is_socket() {
                    return Err(HostProblem::NotASocket(sock.clone()));
                }
                // A live socket is a running balancer: a start takes the path over (a
                // restart, control.rs), so it is no error here either.
            }
            Err(_) => {
                // The daemons' run-time folder is made at start when missing (socket_file).
                let run_dir = std::path::Path::new(netsched_control::run_dir::RUN_DIR);
                let dir = sock
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty() && *d != run_dir);
                if let Some(d) = dir {
                    if !d.is_dir() {
                        return Err(HostProblem::NoDirectory {
                            socket: sock.clone(),
                            dir: d.to_path_buf(),
                        });
                    }
                }
            }
        }
        let dual_stack = std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
            .map_or(true, |v| v.trim() == "0");
        let mut addrs: Vec<(String, SocketAddr)> = self
            .listen
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("listen[{i}]"), *a))
            .collect();
        if let Some(a) = self.admin {
            addrs.push(("admin".to_string(), a));
        }
        for (i, (ka, a)) in addrs.iter().enumerate() {
            for (kb, b) in &addrs[..i] {
                if overlap(*a, *b, dual_stack) {
                    return Err(HostProblem::Overlap {
                        key: ka.clone(),
                        addr: *a,
                        other_key: kb.clone(),
                        other: *b,
                    });
                }
            }
        }
        // Held together until all are bound, then closed.
        let mut held = Vec::with_capacity(addrs.len());
        for (key, a) in &addrs {
            held.push(bind_only(*a).map_err(|source| HostProblem::Bind {
                key: key.clone(),
                addr: *a,
                source,
            })?);
        }
        drop(held);
        Ok(())
    }
}

/// A TCP socket bound to `a` (`SO_REUSEADDR` set), not listening.
fn bind_only(a: SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let s = if a.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    // As the listeners do (daemon.rs): a running balancer's address is no error (a restart),
    // a socket without SO_REUSEPORT or of another user there is.
    s.set_reuseport(a.port() != 0)?;
    s.bind(a)?;
    Ok(s)
}

/// Server names: 1-64 bytes of `[A-Za-z0-9_.-]` (they appear in metrics labels and ctl).
/// A server's `sni` list as its route's key: the patterns, sorted; `Err` names the value at
/// fault and why (bad name, listed twice, too many).
#[allow(clippy::type_complexity)]
pub fn route_names(list: &[String]) -> Result<Vec<crate::sni::Pattern>, (&str, String)> {
    if list.len() > crate::tls::MAX_NAMES {
        return Err((
            &list[0],
            format!("{} names; at most {}", list.len(), crate::tls::MAX_NAMES),
        ));
    }
    let mut set = Vec::with_capacity(list.len());
    for n in list {
        let p = crate::sni::Pattern::parse(n).map_err(|why| (n.as_str(), why.to_string()))?;
        if set.contains(&p) {
            return Err((n.as_str(), "listed twice".to_string()));
        }
        set.push(p);
    }
    set.sort();
    Ok(set)
}

pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() || name.len() > 64 {
        return Err(NameError::Length);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
    {
        return Err(NameError::Characters);
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
max_client_connections = 100
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
    fn admin_takes_a_port_alone_as_the_daemons_metrics_flag_does() {
        let with = |admin: &str| Config::parse(&GOOD.replace("\"127.0.0.1:9100\"", admin));
        let c = with("9100").unwrap();
        assert_eq!(c.admin, Some("127.0.0.1:9100".parse().unwrap()));
        let c = with("\"9100\"").unwrap();
        assert_eq!(c.admin, Some("127.0.0.1:9100".parse().unwrap()));
        let c = with("\"[::1]:9100\"").unwrap();
        assert_eq!(c.admin, Some("[::1]:9100".parse().unwrap()));
        let e = with("\"nowhere\"").unwrap_err().to_string();
        assert!(e.contains("admin") && e.contains("nowhere"), "{e}");
    }

    /// The old spellings (docs/cli.md, "Renames") read as the new ones, each with a warning;
    /// the new ones without.
    #[test]
    fn old_spellings_are_read_with_a_warning_and_new_ones_without() {
        use crate::classes::QueueKind;
        let classes =
            "\n[[class]]\nname = \"a\"\nsources = [\"10.0.0.0/8\"]\n[[class]]\nname = \"b\"\n";
        let new = format!("{GOOD}{classes}").replacen(
            "max_client_connections = 100\n",
            "max_client_connections = 100\ndiscipline = \"strict_priority\"\n",
            1,
        );
        let old = new
            .replace("max_client_connections", "max_connections")
            .replace("discipline = \"strict_priority\"", "queue = \"priority\"");
        assert_ne!(old, new);
        for text in [&new, &old] {
            let c = Config::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(c.max_connections, 100);
            assert_eq!(c.queue, QueueKind::Priority);
        }
        assert!(old_spellings(&new.parse().unwrap()).is_empty());
        let w = old_spellings(&old.parse().unwrap()).join("\n");
        assert!(
            w.contains("max_connections is renamed max_client_connections")
                && w.contains("queue = \"priority\" is renamed discipline = \"strict_priority\""),
            "{w}"
        );
        let mid = new.replace("\"strict_priority\"", "\"priority\"");
        assert_eq!(Config::parse(&mid).unwrap().queue, QueueKind::Priority);
        let w = old_spellings(&mid.parse().unwrap()).join("\n");
        assert!(
            w.contains("\"priority\" is renamed \"strict_priority\""),
            "{w}"
        );
        assert_eq!(QueueKind::Priority.name(), "strict_priority");
        // Both spellings at once: refused, naming the key.
        let both = new.replacen(
            "max_client_connections = 100\n",
            "max_client_connections = 100\nmax_connections = 5\n",
            1,
        );
        let e = Config::parse(&both).unwrap_err().to_string();
        assert!(e.contains("max_client_connections"), "{e}");
    }

    #[test]
    fn the_contract_example_parses_with_defaults() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.mode, Mode::L7);
        assert_eq!(c.hash_key, HashKey::Host);
        assert_eq!(c.http_reuse, HttpReuse::Safe);
        assert_eq!((c.threads, c.relay), (0, Relay::Splice));
        assert_eq!(c.timeouts.queue, 250 * MS);
        assert_eq!(c.timeouts.server, 30 * SEC);
        assert_eq!(c.timeouts.hard_stop_after, 30 * SEC);
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
            Config::parse(&text).unwrap_err().to_string()
        };
        let e = bad("queue = \"250ms\"", "queue = \"250\"");
        assert!(e.contains("queue") && e.contains("250"), "{e}");
        let e = bad("queue = \"250ms\"", "hard_stop_after = \"forever\"");
        assert!(
            e.contains("hard_stop_after") && e.contains("forever"),
            "{e}"
        );
        let e = bad("weight = 3", "wieght = 3");
        assert!(e.contains("wieght"), "{e}");
        let e = bad("name = \"s2\"", "name = \"s1\"");
        assert!(e.contains("server[1].name") && e.contains("twice"), "{e}");
        let e = bad("kind = \"wlc\"", "kind = \"nope\"");
        assert!(e.contains("nope"), "{e}");
        let e = bad("max_client_connections = 100", "max_client_connections = 0");
        assert!(e.contains("max_client_connections = 0"), "{e}");
        let e = bad("name = \"s1\"", "name = \"s 1\"");
        assert!(e.contains("server[0].name"), "{e}");
        let e = bad(
            "max_client_connections = 100",
            "max_client_connections = 100\nrelay = \"zerocopy\"",
        );
        assert!(e.contains("relay") && e.contains("zerocopy"), "{e}");
        let e = bad(
            "max_client_connections = 100",
            "max_client_connections = 100\nthreads = 5000",
        );
        assert!(e.contains("threads = 5000"), "{e}");
        let e = bad("mode = \"l7\"", "mode = \"l4\"");
        assert!(e.contains("hash_key"), "{e}");
    }

    /// `http_reuse`: the three values, safe when absent; an unknown value names the key and
    /// the value; the key in mode l4 (no HTTP there) is refused, naming it.
    #[test]
    fn http_reuse_values_default_and_refusals() {
        let with = |v: &str| {
            GOOD.replacen(
                "hash_key = \"host\"",
                &format!("hash_key = \"host\"\n{v}"),
                1,
            )
        };
        for (text, want) in [
            ("http_reuse = \"never\"", HttpReuse::Never),
            ("http_reuse = \"always\"", HttpReuse::Always),
            ("http_reuse = \"safe\"", HttpReuse::Safe),
            ("", HttpReuse::Safe),
        ] {
            assert_eq!(
                Config::parse(&with(text)).unwrap().http_reuse,
                want,
                "{text}"
            );
        }
        let e = Config::parse(&with("http_reuse = \"sometimes\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http_reuse") && e.contains("sometimes") && e.contains("safe"),
            "{e}"
        );
        let l4 = |v: &str| {
            with(v)
                .replacen("mode = \"l7\"", "mode = \"l4\"", 1)
                .replacen("hash_key = \"host\"", "", 1)
        };
        Config::parse(&l4("")).unwrap();
        let e = Config::parse(&l4("http_reuse = \"never\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("http_reuse = \"never\"") && e.contains("l4"),
            "{e}"
        );
        // Through a file: the error names it.
        let dir = netsched_testbed::TempDir::new("bal-http-reuse").unwrap();
        let f = dir.path().join("b.toml");
        std::fs::write(&f, with("http_reuse = \"sometimes\"")).unwrap();
        let e = Config::load(&f).unwrap_err().to_string();
        assert!(
            e.contains(&f.display().to_string())
                && e.contains("http_reuse")
                && e.contains("sometimes"),
            "{e}"
        );
    }

    /// `forwarded`: the four values, `x-forwarded-for` when absent; an unknown value names the
    /// key and the value; the key in mode l4 is refused, naming it.
    #[test]
    fn forwarded_values_default_and_refusals() {
        let with = |v: &str| {
            GOOD.replacen(
                "hash_key = \"host\"",
                &format!("hash_key = \"host\"\n{v}"),
                1,
            )
        };
        for (text, want) in [
            ("forwarded = \"x-forwarded-for\"", Forwarded::XForwardedFor),
            ("forwarded = \"forwarded\"", Forwarded::Forwarded),
            ("forwarded = \"both\"", Forwarded::Both),
            ("forwarded = \"off\"", Forwarded::Off),
            ("", Forwarded::XForwardedFor),
        ] {
            let c = Config::parse(&with(text)).unwrap();
            assert_eq!(c.forwarded, want, "{text}");
            if !text.is_empty() {
                assert!(text.contains(want.name()));
            }
        }
        let e = Config::parse(&with("forwarded = \"x-real-ip\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("forwarded")
                && e.contains("x-real-ip")
                && e.contains("x-forwarded-for")
                && e.contains("line 6"),
            "{e}"
        );
        let l4 = |v: &str| {
            with(v)
                .replacen("mode = \"l7\"", "mode = \"l4\"", 1)
                .replacen("hash_key = \"host\"", "", 1)
        };
        let e = Config::parse(&l4("forwarded = \"off\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("forwarded = \"off\"") && e.contains("l4"), "{e}");
    }

    /// `send_proxy`: none when absent, `v1`/`v2`, in either mode; an unknown value names the
    /// key and the value.
    #[test]
    fn send_proxy_values_and_refusal() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.servers[0].send_proxy, None);
        let with = |v: &str| GOOD.replacen("weight = 3", &format!("weight = 3\n{v}"), 1);
        for (v, want) in [("v1", SendProxy::V1), ("v2", SendProxy::V2)] {
            let c = Config::parse(&with(&format!("send_proxy = \"{v}\""))).unwrap();
            assert_eq!(c.servers[0].send_proxy, Some(want));
            assert_eq!(want.name(), v);
            let l4 = with(&format!("send_proxy = \"{v}\""))
                .replacen("mode = \"l7\"", "mode = \"l4\"", 1)
                .replacen("hash_key = \"host\"", "", 1);
            assert_eq!(
                Config::parse(&l4).unwrap().servers[0].send_proxy,
                Some(want)
            );
        }
        let e = Config::parse(&with("send_proxy = \"v3\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("send_proxy") && e.contains("v3") && e.contains("v1"),
            "{e}"
        );
    }

    /// `accept_proxy`: empty when absent; networks (a bare address is one host) matched with
    /// IPv4-mapped addresses as IPv4; a bad network, one listed twice, or too many are refused
    /// naming the key, the index and the value. Both modes.
    #[test]
    fn accept_proxy_networks_and_refusals() {
        let with = |v: &str| {
            GOOD.replacen(
                "hash_key = \"host\"",
                &format!("hash_key = \"host\"\n{v}"),
                1,
            )
        };
        assert!(Config::parse(GOOD)
            .unwrap()
            .accept_proxy
            .networks()
            .is_empty());
        let c = Config::parse(&with(
            r#"accept_proxy = ["10.0.0.0/8", "192.0.2.7", "::1/128"]"#,
        ))
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for (addr, listed) in [
            ("10.9.8.7", true),
            ("::ffff:10.1.1.1", true),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("::1", true),
            ("127.0.0.1", false),
        ] {
            assert_eq!(c.accept_proxy.contains(ip(addr)), listed, "{addr}");
        }
        let l4 = with(r#"accept_proxy = ["127.0.0.1/32"]"#)
            .replacen("mode = \"l7\"", "mode = \"l4\"", 1)
            .replacen("hash_key = \"host\"", "", 1);
        assert!(Config::parse(&l4)
            .unwrap()
            .accept_proxy
            .contains(ip("127.0.0.1")));
        let e = |v: &str| Config::parse(&with(v)).unwrap_err().to_string();
        let t = e(r#"accept_proxy = ["10.0.0.0/8", "10.0.0.1/8"]"#);
        assert!(
            t.contains("accept_proxy[1] = \"10.0.0.1/8\"") && t.contains("10.0.0.0/8"),
            "{t}"
        );
        let t = e(r#"accept_proxy = ["10.0.0.0/8", "nowhere"]"#);
        assert!(t.contains("accept_proxy[1] = \"nowhere\""), "{t}");
        let t = e(r#"accept_proxy = ["::1", "::1/128"]"#);
        assert!(
            t.contains("accept_proxy[1]") && t.contains("accept_proxy[0]"),
            "{t}"
        );
        let many: Vec<String> = (0..=MAX_ACCEPT_PROXY)
            .map(|i| format!("\"10.{}.{}.0/24\"", i / 256, i % 256))
            .collect();
        let t = e(&format!("accept_proxy = [{}]", many.join(",")));
        assert!(
            t.contains("accept_proxy") && t.contains("at most 256"),
            "{t}"
        );
        let t = e("accept_proxy = \"10.0.0.0/8\"");
        assert!(t.contains("accept_proxy"), "{t}");
    }

    #[test]
    fn backend_addresses_need_a_port_and_a_real_address() {
        let bad = |addr: &str| {
            let text = GOOD.replacen("127.0.0.1:9002", addr, 1);
            Config::parse(&text).unwrap_err().to_string()
        };
        let e = bad("127.0.0.1:0");
        assert!(
            e.contains("server[1] (s2).addr = 127.0.0.1:0") && e.contains("port 0"),
            "{e}"
        );
        let e = bad("0.0.0.0:9002");
        assert!(
            e.contains("server[1] (s2).addr = 0.0.0.0:9002") && e.contains("unspecified"),
            "{e}"
        );
        let e = bad("[::]:9002");
        assert!(
            e.contains("server[1] (s2).addr = [::]:9002") && e.contains("unspecified"),
            "{e}"
        );
        // A real IPv6 address is fine.
        Config::parse(&GOOD.replacen("127.0.0.1:9002", "[::1]:9002", 1)).unwrap();
    }

    #[test]
    fn relay_is_refused_in_l7_and_kept_in_l4() {
        let text = GOOD.replacen(
            "max_client_connections = 100",
            "max_client_connections = 100\nrelay = \"copy\"",
            1,
        );
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(e.contains("relay = \"copy\"") && e.contains("l4"), "{e}");
        // Also the default value written out.
        let text = GOOD.replacen(
            "max_client_connections = 100",
            "max_client_connections = 100\nrelay = \"splice\"",
            1,
        );
        assert!(Config::parse(&text)
            .unwrap_err()
            .to_string()
            .contains("relay"));
        let l4 = text.replacen("mode = \"l7\"", "mode = \"l4\"", 1).replacen(
            "hash_key = \"host\"",
            "",
            1,
        );
        assert_eq!(Config::parse(&l4).unwrap().relay, Relay::Splice);
        // The file's spelling, not Rust's (`hash_key = Host` before).
        let l4_host = GOOD.replacen("mode = \"l7\"", "mode = \"l4\"", 1);
        let e = Config::parse(&l4_host).unwrap_err().to_string();
        assert!(e.contains("hash_key = \"host\""), "{e}");
    }

    #[test]
    fn algorithm_by_kind_alone_or_as_a_table_and_what_is_wrong_named() {
        let short = GOOD.replace("algorithm = { kind = \"wlc\" }", "algorithm = \"wlc\"");
        assert_eq!(Config::parse(&short).unwrap(), Config::parse(GOOD).unwrap());
        let bad = GOOD.replace("{ kind = \"wlc\" }", "\"nope\"");
        let e = Config::parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains("kind = \"nope\": no such balancer; one of rr,"),
            "{e}"
        );
        assert!(!e.contains("internally tagged"), "{e}");
        let none = GOOD.replace("{ kind = \"wlc\" }", "{ }");
        let e = Config::parse(&none).unwrap_err().to_string();
        assert!(e.contains("no kind: one of"), "{e}");
        let num = GOOD.replace("{ kind = \"wlc\" }", "3");
        let e = Config::parse(&num).unwrap_err().to_string();
        assert!(e.contains("3: a balancer's kind"), "{e}");
    }

    #[test]
    fn two_servers_at_one_address_are_refused_naming_both() {
        let text = GOOD.replace("127.0.0.1:9002", "127.0.0.1:9001");
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(e.contains("server[1] (s2)"), "{e}");
        assert!(e.contains("127.0.0.1:9001"), "{e}");
        assert!(e.contains("server s1's"), "{e}");
    }

    #[test]
    fn a_tcp_check_with_http_keys_is_refused() {
        let tcp = GOOD.replace("kind = \"http\"", "kind = \"tcp\"");
        let e = Config::parse(&tcp).unwrap_err().to_string();
        assert!(e.contains("health.path = \"/health\""), "{e}");
        assert!(e.contains("kind = \"http\""), "{e}");
        let status = tcp.replace("path = \"/health\"", "expect_status = 204");
        let e = Config::parse(&status).unwrap_err().to_string();
        assert!(e.contains("health.expect_status = 204"), "{e}");
        let bare = tcp.replace("path = \"/health\"\n", "");
        assert!(Config::parse(&bare).is_ok());
    }

    #[test]
    fn a_listen_address_given_twice_is_refused_but_port_0_may_repeat() {
        let text = GOOD.replacen(
            "listen = [\"127.0.0.1:8080\"]",
            "listen = [\"127.0.0.1:8080\", \"127.0.0.1:8081\", \"127.0.0.1:8080\"]",
            1,
        );
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("listen[2] = 127.0.0.1:8080") && e.contains("listen[0]"),
            "{e}"
        );
        let text = GOOD.replacen(
            "listen = [\"127.0.0.1:8080\"]",
            "listen = [\"127.0.0.1:0\", \"127.0.0.1:0\"]",
            1,
        );
        Config::parse(&text).unwrap();
    }

    #[test]
    fn overlapping_listen_addresses() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(overlap(a("0.0.0.0:80"), a("127.0.0.1:80"), false));
        assert!(overlap(a("127.0.0.1:80"), a("0.0.0.0:80"), false));
        assert!(overlap(a("[::]:80"), a("[::1]:80"), false));
        assert!(overlap(a("[::]:80"), a("10.0.0.1:80"), true));
        assert!(!overlap(a("[::]:80"), a("10.0.0.1:80"), false));
        assert!(!overlap(a("0.0.0.0:80"), a("[::1]:80"), true));
        assert!(!overlap(a("0.0.0.0:80"), a("0.0.0.0:81"), true));
        assert!(!overlap(a("127.0.0.1:80"), a("127.0.0.2:80"), true));
        assert!(!overlap(a("0.0.0.0:0"), a("0.0.0.0:0"), true));
    }

    /// `check_host` finds what a start would: an unknown group, a listen address in use
    /// (naming it), overlapping addresses; a free configuration passes and leaves its
    /// addresses free.
    #[test]
    fn check_host_finds_what_a_start_would() {
        let dir = netsched_testbed::TempDir::new("bal-check-host").unwrap();
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let base = |listen: &str, extra: &str| {
            let text = format!(
                "mode = \"l7\"\nlisten = [{listen}]\nalgorithm = {{ kind = \"rr\" }}\ncontrol_socket = \"{}\"\n{extra}\n",
                dir.path().join("ctl.sock").display()
            );
            Config::parse(&text).unwrap()
        };
        base(&format!("\"{free}\""), "").check_host().unwrap();
        // Nothing listens there afterwards (and never did: no listen(2)).
        assert!(std::net::TcpStream::connect(free).is_err());
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = held.local_addr().unwrap();
        let e = base(&format!("\"{free}\", \"{busy}\""), "")
            .check_host()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("listen[1] = {busy}")) && e.contains("in use"),
            "{e}"
        );
        let e = base(&format!("\"{free}\""), &format!("admin = \"{busy}\""))
            .check_host()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("admin = {busy}")) && e.contains("in use"),
            "{e}"
        );
        let e = base(&format!("\"0.0.0.0:{}\", \"{free}\"", free.port()), "")
            .check_host()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("listen[1] = {free}")) && e.contains("listen[0]"),
            "{e}"
        );
        let e = base(
            &format!("\"{free}\""),
            "control_group = \"no-such-group-7f3a\"",
        )
        .check_host()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("control_group") && e.contains("no-such-group-7f3a"),
            "{e}"
        );
        let mut c = base(&format!("\"{free}\""), "");
        c.control_socket = dir.path().join("missing/ctl.sock");
        let e = c.check_host().unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("does not exist"), "{e}");
    }

    /// `route = "sni"` and `sni` lists: l4 only, valid names, a name in one route only
    /// (servers with the same list share it); errors name file, key and value.
    #[test]
    fn sni_routes_and_their_refusals() {
        let cfg = |route: &str, a: &str, b: &str| {
            format!(
                "mode = \"l4\"\nlisten = [\"127.0.0.1:0\"]\nalgorithm = \"rr\"\n{route}\n\
                 [[server]]\nname = \"a\"\naddr = \"127.0.0.1:1\"\n{a}\n\
                 [[server]]\nname = \"b\"\naddr = \"127.0.0.1:2\"\n{b}\n"
            )
        };
        let c = Config::parse(&cfg(
            "route = \"sni\"",
            "sni = [\"a.example\", \"*.b.example\"]",
            "",
        ))
        .unwrap();
        assert_eq!(c.route, Route::Sni);
        assert_eq!(c.servers[0].sni.len(), 2);
        assert_eq!(Config::parse(&cfg("", "", "")).unwrap().route, Route::None);
        // The same list on two servers: one route.
        let same = "sni = [\"*.b.example\", \"a.example\"]";
        Config::parse(&cfg(
            "route = \"sni\"",
            same,
            "sni = [\"a.example\", \"*.B.example\"]",
        ))
        .unwrap();
        let bad = |route: &str, a: &str, b: &str| {
            Config::parse(&cfg(route, a, b)).unwrap_err().to_string()
        };
        let e = bad(
            "route = \"sni\"",
            "sni = [\"a.example\"]",
            "sni = [\"a.example\", \"c.example\"]",
        );
        assert!(
            e.contains("server[1] (b).sni = \"a.example\"") && e.contains("server[0] (a)"),
            "{e}"
        );
        let e = bad("", "sni = [\"a.example\"]", "");
        assert!(
            e.contains("server[0] (a).sni = \"a.example\"") && e.contains("route = \"sni\""),
            "{e}"
        );
        for name in ["a..example", "*.*.example", "a_b.example", ""] {
            let e = bad("route = \"sni\"", &format!("sni = [\"{name}\"]"), "");
            assert!(
                e.contains(&format!("sni = {name:?}")) && e.contains("DNS name"),
                "{e}"
            );
        }
        let e = bad(
            "route = \"sni\"",
            "sni = [\"a.example\", \"A.example\"]",
            "",
        );
        assert!(e.contains("listed twice"), "{e}");
        let e = bad("route = \"tls\"", "", "");
        assert!(e.contains("route") && e.contains("tls"), "{e}");
        let l7 = cfg("route = \"sni\"", "", "").replacen("\"l4\"", "\"l7\"", 1);
        let e = Config::parse(&l7).unwrap_err().to_string();
        assert!(e.contains("route = \"sni\"") && e.contains("l4"), "{e}");
        // Through a file: the error names it.
        let dir = netsched_testbed::TempDir::new("bal-sni").unwrap();
        let f = dir.path().join("b.toml");
        std::fs::write(&f, cfg("route = \"sni\"", "sni = [\"a b\"]", "")).unwrap();
        let e = Config::load(&f).unwrap_err().to_string();
        assert!(e.contains("b.toml") && e.contains("sni = \"a b\""), "{e}");
    }
}
