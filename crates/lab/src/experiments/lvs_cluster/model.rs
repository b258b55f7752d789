//! What `lvs-cluster` simulates: an LVS-NAT director in front of N proxy hosts, one
//! ApacheBench-like closed-loop client, IPVS balancers from `netsched_core::balance`.
//!
//! Model (discrete events on `netsched_sim::event::EventQueue`):
//! - the client keeps `concurrency` requests outstanding; each new request opens a connection
//!   whose `FlowKey` names the client address, a fresh source port, and the origin (destination)
//!   address the request is for; the director calls `Balancer::pick` and counts the connection
//!   active on the chosen host (`ServerTable::on_open`);
//! - each host is one FCFS server (Squid + distiller on one CPU) whose service time depends on
//!   the object size it returns, calibrated from P4 Table 3's one-host column
//!   (mean = 1 / rate, e.g. 1/318 s at 300 B);
//! - on completion the director moves the connection to inactive (`on_inactive`) and forgets
//!   it after the IPVS TIME_WAIT timeout (`on_inactive_close`); the client sends the next
//!   request at once.
//! - client ports come from a bounded range used in order; a port whose previous connection
//!   is still in IPVS TIME_WAIT reuses that entry and its host, bypassing the scheduler
//!   (`ip_vs_in` looks the connection up before scheduling, ip_vs_core.c);
//! - case "same": every host serves the same object size; case "per-host": host k serves only
//!   size k mod 5 (300 B, 1 K, 10 K, 100 K, mixed, repeating; P4 §3.3 (2)).
//! - directors: `directors` of them (P4 has one), each with its own balancer and its own
//!   server table (an instance counts only its own connections), the client's connections
//!   spread over them by a seeded hash of the connection's 4-tuple, as a router's L4 ECMP
//!   (`fib_multipath_hash_policy = 1`: the hash picks one of N equal ranges,
//!   `fib_select_multipath`). A director spends `director_service` per connection, one at a
//!   time in arrival order, before it schedules it: one director serves at most
//!   1 / `director_service` requests/s, N of them N times that. 0 = no cost (P4's director
//!   was not the limit: its RR rate grew linearly to 4 322 req/s at 15 hosts, Table 3).
//!
//! Cost: O(log n) per event over the requests in flight; about 4 events per request. The
//! TIME_WAIT expiries (one per request, all `inactive_timeout` after their completion) are in
//! time order by construction, so they wait in a FIFO instead of the event heap: the heap
//! holds only the requests in flight, not the ~rate × 120 s expiries. Same results; the default
//! scenario's main grid took 2.4 s of CPU instead of 5.9 s (seed 1, shared 2-core machine).

use anyhow::{anyhow, Context};
use netsched_core::balance::{
    AnyBalancer, Balancer, BalancerConfig, FlowKey, ServerId, ServerTable,
};
use netsched_core::rng::SplitMix64;
use netsched_core::{Nanos, SEC};
use netsched_sim::event::EventQueue;
use serde::Deserialize;
use serde_json::json;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

/// Everything one simulated configuration needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub algorithm: String,
    /// Mean service time (s) of each host, in host order.
    pub host_service_s: Vec<f64>,
    pub jitter_cv: f64,
    pub concurrency: usize,
    /// How requests choose their origin (destination) address.
    pub model: ClientModel,
    /// Distinct origin addresses the requests name.
    pub origins: usize,
    /// `PerOriginAb`: requests each origin's ab process keeps outstanding (`ab -c`).
    pub per_origin_concurrency: usize,
    pub requests: u64,
    pub max_time: Nanos,
    pub warmup_fraction: f64,
    pub inactive_timeout: Nanos,
    /// lblc's cost of an active connection in inactive ones when it picks a new host: 50 in
    /// the Linux 2.4/2.6 ip_vs_lblc.c of 2004, 256 in later kernels.
    pub lblc_active_weight: u32,
    /// Client → director → host TCP handshake time (SYN to the client's ACK); 0 = none.
    pub handshake: Nanos,
    /// Size of the client's ephemeral port range (`ip_local_port_range`), used in order like
    /// the Linux 2.4 port rover. 0 = never reuse a port (every connection is new to IPVS).
    pub client_ports: u32,
    /// Directors behind the router's ECMP (1..=[`MAX_DIRECTORS`]); 1 = P4's cluster.
    pub directors: usize,
    /// A director's time per connection, served one at a time; 0 = no cost.
    pub director_service: Nanos,
}

/// Directors of one simulated cluster, at most (the real rig's bound too).
pub const MAX_DIRECTORS: usize = 8;

/// The director a router's L4 ECMP sends a connection to: a hash of the 4-tuple (client
/// address and port, destination address and port) under `seed` (the router's hash key), mapped
/// onto `n` equal ranges as `fib_select_multipath` maps it onto the next hops' upper bounds.
pub fn ecmp_director(seed: u64, key: &FlowKey, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    let addr = |a: IpAddr| -> u64 {
        match a {
            IpAddr::V4(v) => u32::from(v) as u64,
            IpAddr::V6(v) => {
                let b = u128::from(v);
                (b as u64) ^ ((b >> 64) as u64)
            }
        }
    };
    let mut h = SplitMix64::new(
        seed ^ addr(key.src).rotate_left(17)
            ^ addr(key.dst).rotate_left(41)
            ^ ((key.src_port as u64) << 16 | key.dst_port as u64),
    );
    let x = h.next_u64() >> 32;
    ((x * n as u64) >> 32) as usize
}

/// How the client's requests choose their destination (`client.model` in the scenario).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientModel {
    /// One closed loop of `concurrency` requests; each request names one of `origins`
    /// addresses, chosen uniformly at random.
    Uniform,
    /// One ab process per origin address, each its own closed loop of
    /// `per_origin_concurrency` requests for that origin only (ab fetches a single URL).
    PerOriginAb,
}

impl ClientModel {
    /// The scenario-file name (`client.model`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::PerOriginAb => "per_origin_ab",
        }
    }
}

/// What one configuration measured.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterResult {
    /// Completed requests per second after warm-up.
    pub req_per_s: f64,
    pub completed: u64,
    pub mean_response_ms: f64,
    /// Requests each host served (whole run).
    pub per_host: Vec<u64>,
    /// Requests the balancer could not place ("no destination available"); 0 in these runs.
    pub unplaced: u64,
    /// Connections whose client port still had an IPVS entry (TIME_WAIT) and were forwarded to
    /// that entry's host without asking the scheduler (whole run).
    pub reused: u64,
    /// Connections each director placed (whole run), in director order.
    pub per_director: Vec<u64>,
}

enum Ev {
    /// A client slot sends its next request: for `origin` (per-origin ab), or for a random
    /// origin (`NO_ORIGIN`, uniform model).
    Send { origin: u32 },
    /// The connection's handshake completed: the request reaches `host`.
    Arrive { host: usize, req: Req },
    /// Host finished its current request.
    Done { host: usize },
    /// Director finished the connection at the head of its queue.
    DirectorDone { director: usize },
}

/// An inactive connection at the director expires (if its entry was not reused since:
/// `generation` must still match).
struct Forget {
    at: Nanos,
    director: usize,
    host: usize,
    port: u32,
    generation: u64,
}

const NO_ORIGIN: u32 = u32::MAX;

struct Req {
    sent: Nanos,
    port: u32,
    /// The ab process (origin) that sent it, or `NO_ORIGIN`.
    slot_origin: u32,
    /// The origin the request named.
    origin: u32,
    /// The director that placed it (whose server table counts its connection).
    director: usize,
}

/// A connection waiting at its director (`director_service` > 0) to be scheduled.
struct Pending {
    sent: Nanos,
    port: u32,
    slot_origin: u32,
    origin: u32,
}

/// One director: its balancer, its own view of the hosts' connections, and the connections
/// waiting for it.
struct DirectorState {
    balancer: AnyBalancer,
    table: ServerTable,
    queue: VecDeque<Pending>,
    busy: bool,
    placed: u64,
}

/// The director's IPVS connection entry for one (client port, origin) pair: IPVS finds a
/// connection by its whole 4-tuple (client address and port, destination address and port,
/// `ip_vs_conn_in_get`, ip_vs_conn.c), so a port reused towards another origin is a new
/// connection.
#[derive(Clone, Copy)]
struct ConnEntry {
    origin: u32,
    host: usize,
    /// Still in flight (active); an inactive entry waits for its TIME_WAIT expiry.
    active: bool,
    generation: u64,
}

struct Host {
    queue: VecDeque<Req>,
    busy: bool,
    service_s: f64,
}

fn origin_addr(i: usize) -> IpAddr {
    // Origins 10.1.x.y, consecutive like a block of server addresses.
    let i = i as u32 + 1;
    IpAddr::V4(Ipv4Addr::new(10, 1, (i >> 8) as u8, (i & 0xff) as u8))
}

/// Host `i`'s address: 192.168.1.10 + i, counting on into 192.168.2.x, ... past .255 (a
/// wrapping byte would give hosts 246 and 0 the same address, and sh/mh hash addresses).
fn host_addr(i: usize) -> IpAddr {
    let base = u32::from(Ipv4Addr::new(192, 168, 1, 10));
    IpAddr::V4(Ipv4Addr::from(base.wrapping_add(i as u32)))
}

/// Simulate one configuration.
pub fn simulate(cfg: &ClusterConfig, seed: u64) -> anyhow::Result<ClusterResult> {
    let in_flight = match cfg.model {
        ClientModel::Uniform => cfg.concurrency,
        ClientModel::PerOriginAb => cfg.origins * cfg.per_origin_concurrency,
    };
    if cfg.client_ports != 0 && (cfg.client_ports as usize) <= in_flight {
        anyhow::bail!(
            "client.ports ({}) must exceed the requests in flight ({in_flight}) so a free port exists",
            cfg.client_ports,
        );
    }
    if cfg.directors == 0 || cfg.directors > MAX_DIRECTORS {
        anyhow::bail!(
            "cluster.directors = {} is outside 1..={MAX_DIRECTORS}",
            cfg.directors
        );
    }
    if cfg.origins == 0 || cfg.origins >= NO_ORIGIN as usize {
        anyhow::bail!(
            "the number of origins must be within 1..2^32-1, got {}",
            cfg.origins
        );
    }
    let mut cluster = Cluster::new(cfg, seed)?;
    cluster.run()?;
    Ok(cluster.result())
}

/// The balancer `cfg` names, built with `rng`.
fn balancer(cfg: &ClusterConfig, rng: &mut SplitMix64) -> anyhow::Result<AnyBalancer> {
    let mut kind = json!({ "kind": cfg.algorithm });
    if cfg.algorithm == "lblc" {
        kind["active_weight"] = json!(cfg.lblc_active_weight);
    }
    let bal_cfg: BalancerConfig = serde_json::from_value(kind)
        .map_err(|e| anyhow!("unknown balancer {:?}: {e}", cfg.algorithm))?;
    bal_cfg
        .build(rng)
        .map_err(|e| anyhow!("balancer {}: {e}", cfg.algorithm))
}

/// A service time of mean `mean` seconds: `mean × (1 − cv + cv·Exp(1))`.
fn service_time(cfg: &ClusterConfig, rng: &mut SplitMix64, mean: f64) -> Nanos {
    let s = mean * (1.0 - cfg.jitter_cv + cfg.jitter_cv * rng.exp(1.0));
    (s * SEC as f64) as Nanos
}

/// One configuration being simulated: the director (balancer, server table, IPVS connection
/// entries per client port), the hosts, the client's ports, the events and the tallies.
struct Cluster<'a> {
    cfg: &'a ClusterConfig,
    rng: SplitMix64,
    directors: Vec<DirectorState>,
    /// The router's ECMP hash key.
    ecmp_seed: u64,
    hosts: Vec<Host>,
    client: IpAddr,
    /// Client ports: index into the ephemeral range; the rover moves one port per connection
    /// and skips ports still in flight (Linux 2.4 tcp_v4_get_port / tcp_port_rover). The
    /// rover is the kernel's, shared by every ab process of the client machine.
    ports: u32,
    rover: u32,
    /// IPVS entries per client port (none when ports are never reused): at most one per
    /// origin; the list is short (a port is used a few times per TIME_WAIT period).
    conns: Vec<Vec<ConnEntry>>,
    port_busy: Vec<bool>,
    generation: u64,
    reused: u64,
    q: EventQueue<Ev>,
    /// TIME_WAIT expiries in time order (each is `inactive_timeout` after a completion, and
    /// completions come in time order); an expiry due at the same instant as an event goes
    /// first, as it was scheduled earlier.
    forgets: VecDeque<Forget>,
    warmup: u64,
    warm_time: Nanos,
    warmed: bool,
    warm_at: Nanos,
    completed: u64,
    unplaced: u64,
    measured: u64,
    resp_sum: f64,
    per_host: Vec<u64>,
    last: Nanos,
}

impl<'a> Cluster<'a> {
    /// The director and hosts of `cfg`, and the client's first requests.
    fn new(cfg: &'a ClusterConfig, seed: u64) -> anyhow::Result<Self> {
        let mut rng = SplitMix64::new(seed);
        // Every director has the same configuration; each its own state. Director 0 is built
        // first from the run's stream, so one director simulates exactly as P4's cluster.
        let mut directors = Vec::new();
        for _ in 0..cfg.directors.max(1) {
            let balancer = balancer(cfg, &mut rng)?;
            let mut table = ServerTable::new();
            for i in 0..cfg.host_service_s.len() {
                table
                    .add_server(i as u32, host_addr(i), 3128, 1)
                    .map_err(|e| anyhow!("server table: {e}"))?;
            }
            directors.push(DirectorState {
                balancer,
                table,
                queue: VecDeque::new(),
                busy: false,
                placed: 0,
            });
        }
        let hosts: Vec<Host> = cfg
            .host_service_s
            .iter()
            .map(|s| Host {
                queue: VecDeque::new(),
                busy: false,
                service_s: *s,
            })
            .collect();
        // The router's hash key: its own stream, so the run's draws do not depend on N.
        let ecmp_seed = SplitMix64::new(seed ^ 0xEC3F_0000_0000_0001).next_u64();
        let ports = if cfg.client_ports == 0 {
            u32::MAX
        } else {
            cfg.client_ports
        };
        let mut q: EventQueue<Ev> = EventQueue::new();
        match cfg.model {
            ClientModel::Uniform => {
                for _ in 0..cfg.concurrency {
                    q.schedule(0, Ev::Send { origin: NO_ORIGIN });
                }
            }
            ClientModel::PerOriginAb => {
                // ab processes started one after another, requests of each interleaved
                for _ in 0..cfg.per_origin_concurrency {
                    for o in 0..cfg.origins {
                        q.schedule(0, Ev::Send { origin: o as u32 });
                    }
                }
            }
        }
        Ok(Cluster {
            cfg,
            rng,
            directors,
            ecmp_seed,
            per_host: vec![0u64; hosts.len()],
            hosts,
            client: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ports,
            rover: ports - 1,
            conns: vec![Vec::new(); cfg.client_ports as usize],
            port_busy: vec![false; cfg.client_ports as usize],
            generation: 0,
            reused: 0,
            q,
            forgets: VecDeque::new(),
            warmup: (cfg.requests as f64 * cfg.warmup_fraction) as u64,
            warm_time: (cfg.max_time as f64 * cfg.warmup_fraction) as Nanos,
            warmed: false,
            warm_at: 0,
            completed: 0,
            unplaced: 0,
            measured: 0,
            resp_sum: 0.0,
            last: 0,
        })
    }

    /// Runs the events and the TIME_WAIT expiries in time order until the time limit, the
    /// request count, or nothing is left.
    fn run(&mut self) -> anyhow::Result<()> {
        let cfg = self.cfg;
        loop {
            let next_event = self.q.peek_time();
            let forget_due = match (self.forgets.front(), next_event) {
                (Some(f), Some(t)) => f.at <= t,
                (Some(_), None) => true,
                (None, _) => false,
            };
            if forget_due {
                let Some(f) = self.forgets.pop_front() else {
                    break;
                };
                if f.at > cfg.max_time || self.completed >= cfg.requests {
                    break;
                }
                self.last = f.at;
                self.forget(f)?;
                continue;
            }
            let Some((now, ev)) = self.q.pop() else {
                break;
            };
            if now > cfg.max_time || self.completed >= cfg.requests {
                break;
            }
            self.last = now;
            match ev {
                Ev::Send {
                    origin: slot_origin,
                } => self.send(now, slot_origin)?,
                Ev::Arrive { host, req } => self.arrive(host, req)?,
                Ev::Done { host } => self.done(now, host)?,
                Ev::DirectorDone { director } => self.director_done(now, director)?,
            }
        }
        Ok(())
    }

    /// A TIME_WAIT entry expires: the director forgets the connection.
    fn forget(&mut self, f: Forget) -> anyhow::Result<()> {
        if self.cfg.client_ports > 0 {
            // A reused entry was re-armed (its generation changed): this expiry is
            // stale, the entry's inactive count was already taken back at reuse.
            let Some(l) = self.conns.get_mut(f.port as usize) else {
                return Ok(());
            };
            let Some(i) = l
                .iter()
                .position(|c| c.generation == f.generation && !c.active)
            else {
                return Ok(());
            };
            l.swap_remove(i);
        }
        self.directors[f.director]
            .table
            .on_inactive_close(ServerId(f.host as u32))
            .map_err(|e| anyhow!(e))
    }

    /// The client opens a connection for its next request (from slot `slot_origin`): the next
    /// free port and an origin; the router's ECMP hash gives the director, which places it at
    /// once (no director cost) or after the connections queued before it.
    fn send(&mut self, now: Nanos, slot_origin: u32) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let port = loop {
            self.rover = (self.rover + 1) % self.ports;
            if !self
                .port_busy
                .get(self.rover as usize)
                .copied()
                .unwrap_or(false)
            {
                break self.rover;
            }
        };
        let origin = if slot_origin == NO_ORIGIN {
            self.rng.below(cfg.origins as u64) as u32
        } else {
            slot_origin
        };
        let p = Pending {
            sent: now,
            port,
            slot_origin,
            origin,
        };
        let d = ecmp_director(self.ecmp_seed, &self.flow_key(port, origin), cfg.directors);
        if cfg.director_service == 0 {
            return self.place(now, d, p);
        }
        // The port is taken from the SYN on, while the connection waits at its director.
        if let Some(b) = self.port_busy.get_mut(port as usize) {
            *b = true;
        }
        let dir = &mut self.directors[d];
        dir.queue.push_back(p);
        if !dir.busy {
            dir.busy = true;
            self.q
                .schedule_in(cfg.director_service, Ev::DirectorDone { director: d });
        }
        Ok(())
    }

    /// The connection's 4-tuple as the router and the director see it.
    fn flow_key(&self, port: u32, origin: u32) -> FlowKey {
        let wire_port = 1024 + (port % (u16::MAX as u32 - 1024)) as u16;
        FlowKey::new(self.client, wire_port, origin_addr(origin as usize), 80)
    }

    /// `director` has spent its time on the connection at the head of its queue: it places it
    /// and starts on the next one.
    fn director_done(&mut self, now: Nanos, director: usize) -> anyhow::Result<()> {
        let p = self.directors[director]
            .queue
            .pop_front()
            .context("director done with an empty queue")?;
        if self.directors[director].queue.is_empty() {
            self.directors[director].busy = false;
        } else {
            self.q
                .schedule_in(self.cfg.director_service, Ev::DirectorDone { director });
        }
        self.place(now, director, p)
    }

    /// Director `d` places connection `p`: the entry's own host when the 4-tuple is still in
    /// TIME_WAIT, else its balancer's pick.
    fn place(&mut self, now: Nanos, d: usize, p: Pending) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let Pending {
            sent,
            port,
            slot_origin,
            origin,
        } = p;
        self.generation += 1;
        // IPVS looks the connection up before it schedules (ip_vs_in →
        // conn_in_get, net/netfilter/ipvs/ip_vs_core.c): a SYN whose 4-tuple still
        // has an entry in TIME_WAIT reuses it and goes to the same real server. Only
        // Linux 4.2's `conn_reuse_mode` made IPVS reschedule such connections.
        // The entry is the director's own: the same 4-tuple hashes to the same director.
        let existing = self
            .conns
            .get_mut(port as usize)
            .and_then(|l| l.iter_mut().find(|c| c.origin == origin));
        let is_reuse = existing.is_some();
        let h = if let Some(c) = existing {
            c.active = true;
            c.generation = self.generation;
            self.reused += 1;
            if cfg.handshake == 0 {
                self.directors[d]
                    .table
                    .on_inactive_close(ServerId(c.host as u32))
                    .map_err(|e| anyhow!(e))?;
            }
            c.host
        } else {
            let key = self.flow_key(port, origin);
            let dir = &mut self.directors[d];
            let Some(ServerId(id)) = dir.balancer.pick(&dir.table, &key, now) else {
                self.unplaced += 1;
                if let Some(b) = self.port_busy.get_mut(port as usize) {
                    *b = false;
                }
                // Retry after 1 ms, as a client would after a refused connection.
                self.q.schedule_in(
                    SEC / 1000,
                    Ev::Send {
                        origin: slot_origin,
                    },
                );
                return Ok(());
            };
            if let Some(l) = self.conns.get_mut(port as usize) {
                l.push(ConnEntry {
                    origin,
                    host: id as usize,
                    active: true,
                    generation: self.generation,
                });
            }
            id as usize
        };
        self.directors[d].placed += 1;
        if let Some(b) = self.port_busy.get_mut(port as usize) {
            *b = true;
        }
        let req = Req {
            sent,
            port,
            slot_origin,
            origin,
            director: d,
        };
        let table = &mut self.directors[d].table;
        if cfg.handshake > 0 {
            // IPVS counts a connection in SYN_RECV as inactive and makes it active
            // on ESTABLISHED (set_tcp_state, ip_vs_proto_tcp.c): until the handshake
            // is done the scheduler does not see it as load. A reused entry stays
            // inactive (TIME_WAIT → SYN_RECV) until then too.
            if !is_reuse {
                table.on_open(ServerId(h as u32)).map_err(|e| anyhow!(e))?;
                table
                    .on_inactive(ServerId(h as u32))
                    .map_err(|e| anyhow!(e))?;
            }
            self.q
                .schedule_in(cfg.handshake, Ev::Arrive { host: h, req });
            return Ok(());
        }
        table.on_open(ServerId(h as u32)).map_err(|e| anyhow!(e))?;
        self.enqueue(h, req);
        Ok(())
    }

    /// `req` joins `host`'s queue; an idle host starts serving.
    fn enqueue(&mut self, host: usize, req: Req) {
        self.hosts[host].queue.push_back(req);
        if !self.hosts[host].busy {
            self.hosts[host].busy = true;
            let d = service_time(self.cfg, &mut self.rng, self.hosts[host].service_s);
            self.q.schedule_in(d, Ev::Done { host });
        }
    }

    /// The handshake is done (ESTABLISHED): inactive → active, and the request reaches the
    /// host.
    fn arrive(&mut self, host: usize, req: Req) -> anyhow::Result<()> {
        let table = &mut self.directors[req.director].table;
        let s = table
            .get(ServerId(host as u32))
            .context("arrive at an unknown host")?;
        let (a, i) = (s.active + 1, s.inactive.saturating_sub(1));
        table
            .set_conns(ServerId(host as u32), a, i)
            .map_err(|e| anyhow!(e))?;
        self.enqueue(host, req);
        Ok(())
    }

    /// `host` finished its head request: counted (after the warm-up), the connection goes
    /// inactive and into TIME_WAIT, the host serves its next request, the client sends again.
    fn done(&mut self, now: Nanos, host: usize) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let req = self.hosts[host]
            .queue
            .pop_front()
            .context("done with empty queue")?;
        self.completed += 1;
        self.per_host[host] += 1;
        // Warm-up ends after `warmup` completions or a `warmup_fraction` of the time
        // limit, whichever comes first (slow clusters may never reach the count).
        if !self.warmed && (self.completed >= self.warmup || now >= self.warm_time) {
            self.warmed = true;
            self.warm_at = now;
        } else if self.warmed {
            self.measured += 1;
            self.resp_sum += (now - req.sent) as f64 / 1e6;
        }
        self.directors[req.director]
            .table
            .on_inactive(ServerId(host as u32))
            .map_err(|e| anyhow!(e))?;
        let mut generation = 0;
        if let Some(l) = self.conns.get_mut(req.port as usize) {
            if let Some(c) = l.iter_mut().find(|c| c.origin == req.origin) {
                c.active = false;
                generation = c.generation;
            }
        }
        if let Some(b) = self.port_busy.get_mut(req.port as usize) {
            *b = false;
        }
        self.forgets.push_back(Forget {
            at: now.saturating_add(cfg.inactive_timeout),
            director: req.director,
            host,
            port: req.port,
            generation,
        });
        if self.hosts[host].queue.is_empty() {
            self.hosts[host].busy = false;
        } else {
            let d = service_time(cfg, &mut self.rng, self.hosts[host].service_s);
            self.q.schedule_in(d, Ev::Done { host });
        }
        self.q.schedule(
            now,
            Ev::Send {
                origin: req.slot_origin,
            },
        );
        Ok(())
    }

    /// The figures of the run.
    fn result(self) -> ClusterResult {
        let measured = self.measured;
        let span = (self.last.saturating_sub(self.warm_at)) as f64 / SEC as f64;
        let req_per_s = if measured > 0 && span > 0.0 {
            measured as f64 / span
        } else {
            0.0
        };
        ClusterResult {
            req_per_s,
            completed: self.completed,
            mean_response_ms: if measured > 0 {
                self.resp_sum / measured as f64
            } else {
                f64::NAN
            },
            per_host: self.per_host,
            unplaced: self.unplaced,
            reused: self.reused,
            per_director: self.directors.iter().map(|d| d.placed).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addresses_stay_distinct_past_the_last_byte() {
        let addrs: std::collections::BTreeSet<IpAddr> = (0..10_000).map(host_addr).collect();
        assert_eq!(addrs.len(), 10_000);
        assert_eq!(host_addr(0), IpAddr::V4(Ipv4Addr::new(192, 168, 1, 10)));
        assert_eq!(host_addr(246), IpAddr::V4(Ipv4Addr::new(192, 168, 2, 0)));
    }

    fn cfg(alg: &str, service: Vec<f64>) -> ClusterConfig {
        ClusterConfig {
            algorithm: alg.into(),
            host_service_s: service,
            jitter_cv: 0.5,
            concurrency: 8,
            origins: 4,
            requests: 3000,
            max_time: 100 * SEC,
            warmup_fraction: 0.1,
            inactive_timeout: 120 * SEC,
            lblc_active_weight: 50,
            handshake: 0,
            client_ports: 0,
            directors: 1,
            director_service: 0,
            model: ClientModel::Uniform,
            per_origin_concurrency: 2,
        }
    }

    #[test]
    fn one_host_rate_matches_its_calibration() {
        let r = simulate(&cfg("rr", vec![1.0 / 318.0]), 1).unwrap();
        assert!(
            (r.req_per_s - 318.0).abs() < 318.0 * 0.05,
            "{}",
            r.req_per_s
        );
        assert_eq!(r.unplaced, 0);
    }

    #[test]
    fn rr_spreads_evenly_over_identical_hosts() {
        let r = simulate(&cfg("rr", vec![0.01; 4]), 2).unwrap();
        let (lo, hi) = (
            r.per_host.iter().min().unwrap(),
            r.per_host.iter().max().unwrap(),
        );
        // Assignments alternate exactly; completions differ by what is still queued.
        assert!(hi - lo <= 8, "{:?}", r.per_host);
        assert!(r.req_per_s > 3.0 * 100.0, "{}", r.req_per_s);
    }

    #[test]
    fn a_reused_port_goes_to_its_previous_host_without_scheduling() {
        // 20 ports, 4 hosts, one origin, 3000 requests: after the first pass almost every
        // connection finds its 4-tuple's TIME_WAIT entry (120 s ≫ the run) and follows it.
        let mut c = cfg("rr", vec![0.01; 4]);
        c.client_ports = 20;
        c.origins = 1;
        let r = simulate(&c, 3).unwrap();
        assert!(
            r.reused + 20 >= r.completed,
            "{} of {}",
            r.reused,
            r.completed
        );
        // Fresh ports: never reused.
        c.client_ports = 0;
        assert_eq!(simulate(&c, 3).unwrap().reused, 0);
    }

    #[test]
    fn a_port_reused_towards_another_origin_is_scheduled_anew() {
        // 2000 ports, 3000 requests: the last ~1000 connections reuse a port once. The IPVS
        // entry matches only if that port's first connection named the same origin
        // (ip_vs_conn_in_get's 4-tuple): about all of them with 1 origin, a quarter with 4.
        let mut c = cfg("rr", vec![0.01; 4]);
        c.client_ports = 2000;
        c.origins = 1;
        let one = simulate(&c, 3).unwrap().reused;
        c.origins = 4;
        let four = simulate(&c, 3).unwrap().reused;
        assert!((950..=1010).contains(&one), "1 origin: {one} reused");
        assert!((150..=350).contains(&four), "4 origins: {four} reused");
    }

    #[test]
    fn per_origin_ab_dh_reaches_only_the_hosts_the_kernel_hash_gives() {
        // 15 ab processes for origins 10.1.0.1..15: buckets 177·k mod 256, bucket b → host
        // b mod 15 (ip_vs_dh.c): 7 distinct hosts. Independent of the seed.
        let mut c = cfg("dh", vec![0.01; 15]);
        c.model = ClientModel::PerOriginAb;
        c.origins = 15;
        for seed in [1, 2] {
            let r = simulate(&c, seed).unwrap();
            let used = r.per_host.iter().filter(|n| **n > 0).count();
            assert_eq!(used, 7, "{:?}", r.per_host);
        }
        // rr spreads the same ab processes over all 15
        c.algorithm = "rr".into();
        let r = simulate(&c, 1).unwrap();
        assert!(r.per_host.iter().all(|n| *n > 0), "{:?}", r.per_host);
    }

    #[test]
    fn a_handshake_delays_each_request_and_keeps_the_counts_consistent() {
        // one request in flight on one host: its response time is service + handshake
        let mut c = cfg("lc", vec![0.01]);
        c.concurrency = 1;
        c.client_ports = 200;
        let base = simulate(&c, 4).unwrap();
        c.handshake = 2 * SEC / 1000;
        let hs = simulate(&c, 4).unwrap();
        // every request waits 2 ms more before its host sees it; counts never go negative
        // (ServerTable would return an error) and every request is served
        assert!(
            (hs.mean_response_ms - base.mean_response_ms - 2.0).abs() < 0.5,
            "{} vs {}",
            hs.mean_response_ms,
            base.mean_response_ms
        );
        assert_eq!(hs.completed, base.completed);
        assert!(hs.reused > 0);
    }

    #[test]
    fn too_few_ports_is_a_clear_error() {
        let mut c = cfg("rr", vec![0.01; 4]);
        c.client_ports = 8; // concurrency 8: no free port would remain
        let e = simulate(&c, 1).unwrap_err().to_string();
        assert!(e.contains("client.ports"), "{e}");
    }

    #[test]
    fn ecmp_spreads_connections_evenly_and_always_sends_a_4_tuple_to_the_same_director() {
        let client = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        for n in [2, 3, 8] {
            let mut count = vec![0u64; n];
            for port in 1024..21024u16 {
                let k = FlowKey::new(client, port, origin_addr(port as usize % 50), 80);
                let d = ecmp_director(7, &k, n);
                assert_eq!(d, ecmp_director(7, &k, n));
                count[d] += 1;
            }
            // 20 000 keys: each director's share within 10% of 1/n (≫ 5 standard deviations).
            let fair = 20_000.0 / n as f64;
            for c in &count {
                assert!((*c as f64 - fair).abs() < 0.1 * fair, "n={n}: {count:?}");
            }
        }
        assert_eq!(ecmp_director(7, &FlowKey::new(client, 5, client, 80), 1), 0);
    }

    /// 8 hosts of 10 ms (800 req/s) behind directors of 5 ms (200 req/s each), a closed loop of
    /// 30: the directors are the limit.
    fn director_bound(directors: usize) -> ClusterConfig {
        let mut c = cfg("rr", vec![0.01; 8]);
        c.concurrency = 30;
        c.requests = 20_000;
        c.directors = directors;
        c.director_service = 5 * SEC / 1000;
        c
    }

    #[test]
    fn two_directors_double_a_director_bound_cluster() {
        let one = simulate(&director_bound(1), 5).unwrap();
        let two = simulate(&director_bound(2), 5).unwrap();
        // One director: 1 / 5 ms = 200 req/s (it never idles with 30 in the loop).
        assert!(
            (one.req_per_s - 200.0).abs() < 200.0 * 0.03,
            "{}",
            one.req_per_s
        );
        // Two: 400 req/s if ECMP keeps both busy; a director left idle by the hash would
        // show as a ratio below 1.9.
        let ratio = two.req_per_s / one.req_per_s;
        assert!((1.9..=2.05).contains(&ratio), "{ratio}: {two:?}");
        assert_eq!(two.per_director.len(), 2);
        let total: u64 = two.per_director.iter().sum();
        for d in &two.per_director {
            let share = *d as f64 / total as f64;
            assert!((0.45..=0.55).contains(&share), "{:?}", two.per_director);
        }
        // Four directors: 800 req/s of director capacity meets 800 of the hosts': the hosts
        // (and queueing at both) hold it below 4×, above the two directors' rate.
        let four = simulate(&director_bound(4), 5).unwrap();
        assert!(four.req_per_s > 1.3 * two.req_per_s, "{four:?}");
        assert!(four.req_per_s < 800.0 * 1.02, "{four:?}");
    }

    #[test]
    fn more_directors_give_nothing_to_a_host_bound_cluster() {
        // 4 hosts of 10 ms (400 req/s) behind directors of 0.5 ms (2 000 req/s each).
        let mut c = director_bound(1);
        c.host_service_s = vec![0.01; 4];
        c.director_service = SEC / 2000;
        let one = simulate(&c, 6).unwrap();
        c.directors = 2;
        let two = simulate(&c, 6).unwrap();
        assert!(
            (one.req_per_s - 400.0).abs() < 400.0 * 0.05,
            "{}",
            one.req_per_s
        );
        let ratio = two.req_per_s / one.req_per_s;
        assert!((0.95..=1.05).contains(&ratio), "{ratio}");
    }

    #[test]
    fn one_director_without_cost_places_every_connection_itself_and_is_deterministic() {
        let c = cfg("lc", vec![0.01; 3]);
        let a = simulate(&c, 9).unwrap();
        assert_eq!(a, simulate(&c, 9).unwrap());
        assert_eq!(a.per_director.len(), 1);
        // every completed request was placed by it (plus those still in flight at the end)
        assert!(a.per_director[0] >= a.completed, "{a:?}");
        assert!(
            a.per_director[0] <= a.completed + c.concurrency as u64,
            "{a:?}"
        );
        // with a cost too small to matter the rate is the same within 2%
        let mut d = c.clone();
        d.director_service = 1000; // 1 µs
        let b = simulate(&d, 9).unwrap();
        assert!(
            (b.req_per_s - a.req_per_s).abs() < 0.02 * a.req_per_s,
            "{b:?} vs {a:?}"
        );
    }

    #[test]
    fn directors_outside_their_bounds_are_a_clear_error() {
        for n in [0, MAX_DIRECTORS + 1] {
            let mut c = cfg("rr", vec![0.01]);
            c.directors = n;
            let e = simulate(&c, 1).unwrap_err().to_string();
            assert!(
                e.contains("cluster.directors") && e.contains(&n.to_string()),
                "{e}"
            );
        }
    }

    #[test]
    fn unknown_algorithm_is_a_clear_error() {
        let e = simulate(&cfg("nope", vec![0.01]), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope"), "{e}");
    }
}
