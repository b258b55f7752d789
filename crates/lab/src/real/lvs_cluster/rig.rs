//! The cluster's topology and the CPU accounting around it.
//!
//! One director (P4's cluster):
//!
//! ```text
//!  client ns 10.88.0.2 ── 10.88.0.1 director ns 10.88.k.1 ── 10.88.k.2 host k ns   (k = 1..=n)
//! ```
//!
//! `m` > 1 directors behind a router's equal-cost multipath (`d` = 1..=m):
//!
//! ```text
//!                                    ┌ 10.86.d.2 director d 10.85.d.2 ┐
//!  client 10.87.0.2 ── 10.87.0.1 router 10.86.d.1                     10.85.d.1 hub 10.88.k.1 ── 10.88.k.2 host k
//!                       ECMP: 10.88.0.1/32 via every 10.86.d.2      (the VIP 10.88.0.1/32 on each director's lo)
//! ```
//!
//! The router forwards the virtual IP over one next hop per director, the next hop chosen by an
//! L4 hash of the connection (`fib_multipath_hash_policy = 1`: addresses and ports), so the
//! client's connections, each from its own source port, spread over the directors and every
//! packet of one connection reaches the same director. The hub forwards between the directors
//! and the hosts (each host's default route). Each director is a full proxy (L7, and L4's TCP
//! relay, `crates/balance/src/l4.rs`): its connection to a host comes from its own address
//! 10.85.d.2, so the host's answer comes back through the director that owns the flow, and the
//! director's answer to the client leaves by its default route to the router.
//!
//! One veth per link; in the one-director rig no routing between the client's and the hosts'
//! subnets: the director is a proxy (it terminates the client's connection and opens its own to
//! the host, as LVS-NAT rewrites the destination and the answers come back through it, P4 §2).
//! Everything is owned by a [`Testbed`] (namespaces, the director processes) and the [`Host`]s
//! (threads of this process inside the host namespaces); dropping the [`Rig`] stops the hosts,
//! kills the directors by id and deletes the namespaces, on success, error, panic or
//! SIGINT/SIGTERM.

use super::director::{Director, RunningDirector, ADMIN_PORT};
use super::host::{Host, Service};
use anyhow::{bail, Context, Result};
use netsched_testbed::{TempDir, Testbed};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// Hosts of one rig, at most (addresses are 10.88.k.2, k ≤ 250).
pub const MAX_HOSTS: usize = 64;
/// The port every host and the director listen on.
pub const PORT: u16 = 80;
/// Directors of one rig, at most (the simulation's bound).
pub const MAX_DIRECTORS: usize = crate::experiments::lvs_cluster::MAX_DIRECTORS;

/// The director's client-side address (the virtual IP).
pub fn vip() -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(10, 88, 0, 1), PORT))
}

/// Host `k`'s address (k counts from 0).
pub fn host_addr(k: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::new(10, 88, (k + 1) as u8, 2),
        PORT,
    ))
}

/// A built cluster of `n` hosts behind one or more directors. Field order is drop order:
/// hosts, then the directors and the namespaces (the testbed), then the temp dir.
pub struct Rig {
    pub hosts: Vec<Host>,
    running: Vec<RunningDirector>,
    pub tb: Testbed,
    pub client_ns: String,
    /// The first director's namespace (the only one in P4's cluster).
    pub director_ns: String,
    /// Every director's namespace, in order (`director_ns` first).
    pub directors_ns: Vec<String>,
    /// The router's namespace (ECMP over the directors), with more than one director.
    pub router_ns: Option<String>,
    pub host_ns: Vec<String>,
    pub dir: TempDir,
}

impl Rig {
    /// Build the namespaces and start `n` hosts with `workers` threads each, behind one
    /// director (P4's cluster).
    pub fn build(n: usize, workers: usize, seed: u64) -> Result<Rig> {
        Self::build_with(n, 1, workers, seed)
    }

    /// Build the namespaces and start `n` hosts with `workers` threads each, behind
    /// `directors` directors (more than one: behind a router's ECMP, see the module's figure).
    pub fn build_with(n: usize, directors: usize, workers: usize, seed: u64) -> Result<Rig> {
        if n == 0 || n > MAX_HOSTS {
            bail!("hosts = {n} is outside 1..={MAX_HOSTS}");
        }
        if directors == 0 || directors > MAX_DIRECTORS {
            bail!("directors = {directors} is outside 1..={MAX_DIRECTORS}");
        }
        let mut tb = Testbed::new("lvsr")?;
        let dir = TempDir::new("lvs-real")?;
        let client_ns = tb.add_ns("cl")?;
        let mut rig = Rig {
            hosts: Vec::new(),
            running: Vec::new(),
            tb,
            client_ns: client_ns.clone(),
            director_ns: String::new(),
            directors_ns: Vec::new(),
            router_ns: None,
            host_ns: Vec::new(),
            dir,
        };
        // The namespace the hosts' links start from: the director, or the hub.
        let hub = if directors == 1 {
            let director_ns = rig.tb.add_ns("dir")?;
            let (ic, id) = (rig.tb.ifname("c"), rig.tb.ifname("d"));
            rig.tb.veth(
                (&client_ns, &ic, "10.88.0.2/24"),
                (&director_ns, &id, "10.88.0.1/24"),
            )?;
            rig.directors_ns.push(director_ns.clone());
            director_ns
        } else {
            rig.build_ecmp(directors)?
        };
        rig.director_ns = rig.directors_ns[0].clone();
        // Every request is a new connection to one address (client → VIP) or to one host
        // (director → host k); at P4's 4.3k req/s the default 28k ports in 60 s TIME_WAIT run
        // out within seconds and connect() then burns the client's CPU searching for a free
        // port. The client and the director may reuse a TIME_WAIT port (timestamps make it
        // safe, tcp(7) tcp_tw_reuse) from the whole unprivileged range, in these namespaces.
        for ns in std::iter::once(&client_ns).chain(&rig.directors_ns) {
            rig.tb
                .sysctl(ns, "net.ipv4.ip_local_port_range=1024 65535")?;
            rig.tb.sysctl(ns, "net.ipv4.tcp_tw_reuse=1")?;
        }
        let mut seeds = netsched_core::rng::SplitMix64::new(seed);
        for k in 0..n {
            let ns = rig.tb.add_ns(&format!("h{k}"))?;
            let (a, b) = (
                rig.tb.ifname(&format!("d{k}")),
                rig.tb.ifname(&format!("h{k}")),
            );
            let net = k + 1;
            rig.tb.veth(
                (&hub, &a, &format!("10.88.{net}.1/24")),
                (&ns, &b, &format!("10.88.{net}.2/24")),
            )?;
            if directors > 1 {
                rig.tb.exec(
                    &ns,
                    "ip",
                    &["route", "add", "default", "via", &format!("10.88.{net}.1")],
                )?;
            }
            let host = Host::start(&ns, host_addr(k), workers, seeds.next_u64())?;
            rig.hosts.push(host);
            rig.host_ns.push(ns);
        }
        Ok(rig)
    }

    /// The router, the `m` directors and the hub of the multi-director rig (the module's
    /// figure); returns the hub's namespace.
    fn build_ecmp(&mut self, m: usize) -> Result<String> {
        let router = self.tb.add_ns("rt")?;
        let hub = self.tb.add_ns("hub")?;
        // Forwarding, and no reverse-path filter: the router sees the directors' answers
        // come from the VIP on whichever director link owns the flow.
        for ns in [&router, &hub] {
            self.tb.sysctl(ns, "net.ipv4.ip_forward=1")?;
            self.tb.sysctl(ns, "net.ipv4.conf.all.rp_filter=0")?;
            self.tb.sysctl(ns, "net.ipv4.conf.default.rp_filter=0")?;
        }
        // ECMP on the L4 hash (addresses and ports), not the default L3 one, which would send
        // the one client to one director (ip-sysctl.rst, fib_multipath_hash_policy).
        self.tb
            .sysctl(&router, "net.ipv4.fib_multipath_hash_policy=1")?;
        let (ic, ir) = (self.tb.ifname("c"), self.tb.ifname("r"));
        self.tb.veth(
            (&self.client_ns.clone(), &ic, "10.87.0.2/24"),
            (&router, &ir, "10.87.0.1/24"),
        )?;
        self.tb.exec(
            &self.client_ns,
            "ip",
            &["route", "add", "default", "via", "10.87.0.1"],
        )?;
        let mut route: Vec<String> = ["route", "add", "10.88.0.1/32"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for d in 1..=m {
            let ns = self.tb.add_ns(&format!("dir{d}"))?;
            let (rd, dr) = (
                self.tb.ifname(&format!("r{d}")),
                self.tb.ifname(&format!("f{d}")),
            );
            self.tb.veth(
                (&router, &rd, &format!("10.86.{d}.1/24")),
                (&ns, &dr, &format!("10.86.{d}.2/24")),
            )?;
            let (db, hb) = (
                self.tb.ifname(&format!("b{d}")),
                self.tb.ifname(&format!("u{d}")),
            );
            self.tb.veth(
                (&ns, &db, &format!("10.85.{d}.2/24")),
                (&hub, &hb, &format!("10.85.{d}.1/24")),
            )?;
            self.tb
                .exec(&ns, "ip", &["addr", "add", "10.88.0.1/32", "dev", "lo"])?;
            self.tb.exec(
                &ns,
                "ip",
                &["route", "add", "default", "via", &format!("10.86.{d}.1")],
            )?;
            self.tb.exec(
                &ns,
                "ip",
                &[
                    "route",
                    "add",
                    "10.88.0.0/16",
                    "via",
                    &format!("10.85.{d}.1"),
                ],
            )?;
            route.extend(
                [
                    "nexthop",
                    "via",
                    &format!("10.86.{d}.2"),
                    "dev",
                    &rd,
                    "weight",
                    "1",
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            self.directors_ns.push(ns);
        }
        let args: Vec<&str> = route.iter().map(String::as_str).collect();
        self.tb.exec(&router, "ip", &args)?;
        self.router_ns = Some(router);
        Ok(hub)
    }

    /// Directors of this rig.
    pub fn director_count(&self) -> usize {
        self.directors_ns.len()
    }

    /// Give every host its service for the next cell.
    pub fn configure(&self, services: &[Service]) -> Result<()> {
        if services.len() != self.hosts.len() {
            bail!("{} services for {} hosts", services.len(), self.hosts.len());
        }
        for (h, s) in self.hosts.iter().zip(services) {
            h.configure(*s)?;
        }
        Ok(())
    }

    /// Start `director` with `algorithm` in every director namespace, the same configuration
    /// in each (stopping the previous ones), and wait until each accepts connections on the
    /// virtual IP in its own namespace and the virtual IP accepts them from the client's.
    pub fn start_director(&mut self, director: &Director, algorithm: &str) -> Result<()> {
        self.stop_director();
        let servers: Vec<SocketAddr> = (0..self.hosts.len()).map(host_addr).collect();
        for ns in self.directors_ns.clone() {
            let running = director.start(
                &mut self.tb,
                &ns,
                self.dir.path(),
                algorithm,
                vip(),
                &servers,
            )?;
            let pid = running.pid;
            self.running.push(running);
            let log = |rig: &Rig| rig.running.last().map(|d| d.log_tail()).unwrap_or_default();
            Self::wait_ready(&ns, pid).with_context(|| {
                format!(
                    "{} (pid {pid}) in {ns}; its log: {}",
                    director.name(),
                    log(self)
                )
            })?;
        }
        let pid = self.running[0].pid;
        Self::wait_ready(&self.client_ns, pid).with_context(|| {
            format!(
                "{} (pid {pid}), reached from {}; its log: {}",
                director.name(),
                self.client_ns,
                self.running[0].log_tail()
            )
        })
    }

    /// Wait until the virtual IP accepts a connection from namespace `ns` (10 s), while the
    /// director `pid` lives.
    fn wait_ready(ns: &str, pid: u32) -> Result<()> {
        let ns = ns.to_string();
        std::thread::spawn(move || -> Result<()> {
            netsched_testbed::enter_netns(&ns)?;
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                if TcpStream::connect_timeout(&vip(), Duration::from_millis(200)).is_ok() {
                    return Ok(());
                }
                if !super::cpu::process_alive(pid) {
                    bail!("the director exited before accepting connections");
                }
                if Instant::now() > until {
                    bail!(
                        "the director did not accept connections on {} within 10 s",
                        vip()
                    );
                }
                netsched_testbed::sleep_unless_interrupted(Duration::from_millis(50))?;
            }
        })
        .join()
        .map_err(|_| anyhow::anyhow!("readiness thread panicked"))?
    }

    /// The (first) running director's process id.
    pub fn director_pid(&self) -> Option<u32> {
        self.running.first().map(|d| d.pid)
    }

    /// Every running director's process id, in director order.
    pub fn director_pids(&self) -> Vec<u32> {
        self.running.iter().map(|d| d.pid).collect()
    }

    /// The (first) running director (its pid, log and control socket).
    pub fn director(&self) -> Option<&RunningDirector> {
        self.running.first()
    }

    /// Every running director, in director order.
    pub fn running_directors(&self) -> &[RunningDirector] {
        &self.running
    }

    /// Requests (L7) or connections (L4) each running `netsched balance` director sent to
    /// the hosts since it started: the sum of its `netsched_balance_requests_total` over the
    /// backends, read from its `/metrics` (the admin listener on its loopback), in director
    /// order.
    pub fn director_requests(&self) -> Result<Vec<u64>> {
        self.directors_ns[..self.running.len()]
            .iter()
            .map(|ns| {
                let ns2 = ns.clone();
                let text = std::thread::spawn(move || scrape_metrics(&ns2))
                    .join()
                    .map_err(|_| anyhow::anyhow!("metrics thread panicked"))?
                    .with_context(|| format!("reading /metrics in {ns}"))?;
                requests_total(&text)
            })
            .collect()
    }

    /// Stop the running directors, if any (SIGTERM, then SIGKILL after 2 s).
    pub fn stop_director(&mut self) {
        for d in std::mem::take(&mut self.running) {
            let _ = self.tb.stop(d.pid, Duration::from_secs(2));
        }
    }
}

/// `GET /metrics` from the admin listener in namespace `ns` (2 s, ≤ 4 MiB).
fn scrape_metrics(ns: &str) -> Result<String> {
    use std::io::{Read, Write};
    netsched_testbed::enter_netns(ns)?;
    let addr = SocketAddr::from(([127, 0, 0, 1], ADMIN_PORT));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = Vec::new();
    s.take(4 << 20).read_to_end(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The sum of `netsched_balance_requests_total` over its series in a Prometheus text page;
/// an error when the page has no such series.
pub fn requests_total(page: &str) -> Result<u64> {
    let mut found = false;
    let mut sum = 0u64;
    for line in page.lines() {
        let Some(rest) = line.strip_prefix("netsched_balance_requests_total") else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = rest.rsplit(' ').next().unwrap_or("");
        let v: f64 = value
            .parse()
            .map_err(|_| anyhow::anyhow!("metrics line {line:?}: not a number"))?;
        sum += v as u64;
        found = true;
    }
    if !found {
        bail!("no netsched_balance_requests_total series in the /metrics page");
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_total_sums_the_backends_and_refuses_a_page_without_them() {
        let page = "# HELP netsched_balance_requests Requests (l7) or connections (l4)\n\
                    # TYPE netsched_balance_requests counter\n\
                    netsched_balance_requests_total{backend=\"s1\"} 120\n\
                    netsched_balance_requests_total{backend=\"s2\"} 75\n\
                    netsched_balance_class_requests_total{class=\"0\"} 999\n\
                    netsched_balance_requests_totalx 5\n";
        assert_eq!(requests_total(page).unwrap(), 195);
        let e = requests_total("netsched_balance_active_connections 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("netsched_balance_requests_total"), "{e}");
        let e = requests_total("netsched_balance_requests_total{backend=\"s1\"} x\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a number"), "{e}");
    }

    #[test]
    fn directors_outside_their_bounds_are_refused_before_anything_is_built() {
        for m in [0, MAX_DIRECTORS + 1] {
            let e = Rig::build_with(1, m, 1, 1).err().unwrap().to_string();
            assert!(e.contains("directors") && e.contains(&m.to_string()), "{e}");
        }
    }
}
