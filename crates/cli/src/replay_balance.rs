//! `netsched replay balance`: connection open/close events through one load balancer, with the
//! connection accounting an IPVS director keeps (active on open, released on close).

use crate::config::read_toml;
use crate::trace::TraceReader;
use anyhow::{anyhow, bail, Result};
use clap::Args;
use netsched_core::balance::{
    AnyBalancer, Balancer, BalancerConfig, BalancerKind, FlowKey, ServerId, ServerTable,
};
use netsched_core::rng::SplitMix64;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// The most servers a configuration may list.
pub const MAX_SERVERS: usize = 4096;
/// The most connections open at once (each is remembered until its close).
pub const MAX_OPEN_CONNS: usize = 1 << 22;

/// The long help, listing the balancer kinds from the one list core keeps.
pub fn help() -> String {
    format!(
        "\
CONFIG (TOML): the balancer and its servers.

    [balancer]
    kind = \"wlc\"              # {}

    [[servers]]
    addr = \"10.0.0.1\"
    weight = 3

TRACE (CSV or JSON lines), in time order: a connection opens (a server is picked) or closes.

    time,event,conn,client,dest
    0ms,open,1,192.0.2.10:40000,198.51.100.1:80
    5ms,close,1,,

`time` needs a unit (only 0 may go without). At most {MAX_OPEN_CONNS} connections may be
open at once.

OUTPUT events: pick (conn, server index and address) or reject (no server available), close.

EXAMPLE:
    netsched replay balance --config examples/replay/wlc.toml --trace examples/replay/conns.csv",
        BalancerKind::names(" ")
    )
}

#[derive(Debug, Args)]
pub struct BalanceReplay {
    /// Balancer and servers (TOML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Connection open/close events (CSV or JSON lines).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BalanceReplayConfig {
    balancer: BalancerConfig,
    servers: Vec<ServerConfig>,
    /// Seed for balancers that draw random numbers (twos, least_request).
    #[serde(default)]
    seed: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerConfig {
    addr: IpAddr,
    #[serde(default)]
    port: u16,
    #[serde(default = "one")]
    weight: u32,
}

fn one() -> u32 {
    1
}

/// The balancer and server table a configuration describes; `name` is the file, for errors.
pub(crate) fn setup(name: &str, cfg: &BalanceReplayConfig) -> Result<(AnyBalancer, ServerTable)> {
    if cfg.servers.is_empty() {
        bail!("{name}: [[servers]] lists no server");
    }
    if cfg.servers.len() > MAX_SERVERS {
        bail!(
            "{name}: [[servers]] lists {} servers, at most {MAX_SERVERS} are allowed",
            cfg.servers.len()
        );
    }
    let mut table = ServerTable::new();
    for (i, s) in cfg.servers.iter().enumerate() {
        table
            .add_server(i as u32, s.addr, s.port, s.weight)
            .map_err(|e| anyhow!("{name}: servers[{i}]: {e}"))?;
    }
    let mut rng = SplitMix64::new(cfg.seed);
    let balancer = cfg
        .balancer
        .build(&mut rng)
        .map_err(|e| anyhow!("{name}: [balancer] {e}"))?;
    Ok((balancer, table))
}

pub fn run(a: &BalanceReplay, out: &mut impl Write) -> Result<()> {
    let cfg: BalanceReplayConfig = read_toml(&a.config)?;
    let (balancer, table) = setup(&a.config.display().to_string(), &cfg)?;
    let mut trace = TraceReader::open(&a.trace)?;
    replay(&cfg, balancer, table, &mut trace, out)
}

/// Run the open/close events of `trace` through `balancer`.
pub(crate) fn replay<R: BufRead, W: Write>(
    cfg: &BalanceReplayConfig,
    mut balancer: AnyBalancer,
    mut table: ServerTable,
    trace: &mut TraceReader<R>,
    out: &mut W,
) -> Result<()> {
    let mut open: HashMap<u64, ServerId> = HashMap::new();
    let (mut picks, mut rejects) = (0u64, 0u64);
    let mut per_server = vec![0u64; cfg.servers.len()];
    let mut last_t = 0;
    let file = trace.path.clone();
    while let Some(r) = trace.next_record()? {
        let at = |field: &str| format!("{file}:{}: field `{field}`", r.line);
        let t = r.time_ns(&file, "time")?;
        if t < last_t {
            bail!(
                "{}: events must be in time order ({t} ns is before {last_t} ns)",
                at("time")
            );
        }
        last_t = t;
        let conn = r.u64(&file, "conn")?;
        match r.text(&file, "event")? {
            "open" => {
                if open.contains_key(&conn) {
                    bail!("{}: connection {conn} is already open", at("conn"));
                }
                if open.len() >= MAX_OPEN_CONNS {
                    bail!(
                        "{}: more than {MAX_OPEN_CONNS} connections open at once",
                        at("event")
                    );
                }
                let sock = |field: &str| -> Result<SocketAddr> {
                    let v = r.text(&file, field)?;
                    v.parse()
                        .map_err(|_| anyhow!("{}: `{v}` is not an address:port", at(field)))
                };
                let (client, dest) = (sock("client")?, sock("dest")?);
                let key = FlowKey::new(client.ip(), client.port(), dest.ip(), dest.port());
                match balancer.pick(&table, &key, t) {
                    Some(id) => {
                        table
                            .on_open(id)
                            .map_err(|e| anyhow!("internal accounting error: {e}"))?;
                        open.insert(conn, id);
                        picks += 1;
                        per_server[id.0 as usize] += 1;
                        let s = &cfg.servers[id.0 as usize];
                        writeln!(
                            out,
                            "{}",
                            json!({"time_ns": t, "event": "pick", "conn": conn, "server": id.0,
                                   "addr": s.addr.to_string()})
                        )?;
                    }
                    None => {
                        rejects += 1;
                        writeln!(
                            out,
                            "{}",
                            json!({"time_ns": t, "event": "reject", "conn": conn,
                                   "reason": "no server available"})
                        )?;
                    }
                }
            }
            "close" => {
                // A close for a rejected or unknown connection is reported, not an error:
                // traces recorded at a director include connections it turned away.
                match open.remove(&conn) {
                    Some(id) => {
                        table
                            .on_close(id)
                            .map_err(|e| anyhow!("internal accounting error: {e}"))?;
                        writeln!(
                            out,
                            "{}",
                            json!({"time_ns": t, "event": "close", "conn": conn, "server": id.0})
                        )?;
                    }
                    None => writeln!(
                        out,
                        "{}",
                        json!({"time_ns": t, "event": "close_unknown", "conn": conn})
                    )?,
                }
            }
            other => bail!(
                "{}: `{other}` is not an event (use open or close)",
                at("event")
            ),
        }
    }
    writeln!(
        out,
        "{}",
        json!({"event": "summary", "balancer": cfg.balancer.name(), "picks": picks,
               "rejects": rejects, "still_open": open.len(), "per_server": per_server})
    )?;
    Ok(())
}
