//! `netsched replay balance`: connection open/close events through one load balancer, with the
//! connection accounting an IPVS director keeps (active on open, released on close).

use crate::replay::{read_toml, BalanceReplay};
use crate::trace::Trace;
use anyhow::{anyhow, bail, Result};
use netsched_core::balance::{Balancer, BalancerConfig, FlowKey, ServerId, ServerTable};
use netsched_core::rng::SplitMix64;
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BalanceReplayConfig {
    balancer: BalancerConfig,
    servers: Vec<ServerConfig>,
    /// Seed for balancers that draw random numbers (twos, least-request p2c).
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

pub(crate) fn replay_balance(a: &BalanceReplay, out: &mut impl Write) -> Result<()> {
    let cfg: BalanceReplayConfig = read_toml(&a.config)?;
    let cname = a.config.display();
    if cfg.servers.is_empty() {
        bail!("{cname}: [[servers]] lists no server");
    }
    let mut table = ServerTable::new();
    for (i, s) in cfg.servers.iter().enumerate() {
        table
            .add_server(i as u32, s.addr, s.port, s.weight)
            .map_err(|e| anyhow!("{cname}: servers[{i}]: {e}"))?;
    }
    let mut rng = SplitMix64::new(cfg.seed);
    let mut balancer = cfg
        .balancer
        .build(&mut rng)
        .map_err(|e| anyhow!("{cname}: [balancer] {e}"))?;

    let tr = Trace::read(&a.trace)?;
    let mut open: HashMap<u64, ServerId> = HashMap::new();
    let (mut picks, mut rejects) = (0u64, 0u64);
    let mut per_server = vec![0u64; cfg.servers.len()];
    let mut last_t = 0;
    for r in &tr.records {
        let at = |field: &str| format!("{}:{}: field `{field}`", tr.path, r.line);
        let t = r.time_ns(&tr.path, "time")?;
        if t < last_t {
            bail!("{}: events must be in time order", at("time"));
        }
        last_t = t;
        let conn = r.u64(&tr.path, "conn")?;
        match r.text(&tr.path, "event")? {
            "open" => {
                if open.contains_key(&conn) {
                    bail!("{}: connection {conn} is already open", at("conn"));
                }
                let sock = |field: &str| -> Result<SocketAddr> {
                    let v = r.text(&tr.path, field)?;
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
                            json!({"t": t, "event": "pick", "conn": conn, "server": id.0,
                                   "addr": s.addr.to_string()})
                        )?;
                    }
                    None => {
                        rejects += 1;
                        writeln!(
                            out,
                            "{}",
                            json!({"t": t, "event": "reject", "conn": conn,
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
                            json!({"t": t, "event": "close", "conn": conn, "server": id.0})
                        )?;
                    }
                    None => writeln!(
                        out,
                        "{}",
                        json!({"t": t, "event": "close_unknown", "conn": conn})
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
