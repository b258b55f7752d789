//! The cluster's topology and the CPU accounting around it.
//!
//! ```text
//!  client ns 10.88.0.2 ── 10.88.0.1 director ns 10.88.k.1 ── 10.88.k.2 host k ns   (k = 1..=n)
//! ```
//! One veth per link, no routing between the client's and the hosts' subnets: the director is
//! a proxy (it terminates the client's connection and opens its own to the host, as LVS-NAT
//! rewrites the destination and the answers come back through it, P4 §2). Everything is owned
//! by a [`Testbed`] (namespaces, the director process) and the [`Host`]s (threads of this
//! process inside the host namespaces); dropping the [`Rig`] stops the hosts, kills the
//! director by id and deletes the namespaces, on success, error, panic or SIGINT/SIGTERM.

use super::director::{Director, RunningDirector};
use super::host::{Host, Service};
use anyhow::{bail, Context, Result};
use netsched_testbed::{TempDir, Testbed};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// Hosts of one rig, at most (addresses are 10.88.k.2, k ≤ 250).
pub const MAX_HOSTS: usize = 64;
/// The port every host and the director listen on.
pub const PORT: u16 = 80;

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

/// A built cluster of `n` hosts. Field order is drop order: hosts, then the director and the
/// namespaces (the testbed), then the temp dir.
pub struct Rig {
    pub hosts: Vec<Host>,
    director: Option<RunningDirector>,
    pub tb: Testbed,
    pub client_ns: String,
    pub director_ns: String,
    pub host_ns: Vec<String>,
    pub dir: TempDir,
}

impl Rig {
    /// Build the namespaces and start `n` hosts with `workers` threads each.
    pub fn build(n: usize, workers: usize, seed: u64) -> Result<Rig> {
        if n == 0 || n > MAX_HOSTS {
            bail!("hosts = {n} is outside 1..={MAX_HOSTS}");
        }
        let mut tb = Testbed::new("lvsr")?;
        let dir = TempDir::new("lvs-real")?;
        let client_ns = tb.add_ns("cl")?;
        let director_ns = tb.add_ns("dir")?;
        let (ic, id) = (tb.ifname("c"), tb.ifname("d"));
        tb.veth(
            (&client_ns, &ic, "10.88.0.2/24"),
            (&director_ns, &id, "10.88.0.1/24"),
        )?;
        // Every request is a new connection to one address (client → VIP) or to one host
        // (director → host k); at P4's 4.3k req/s the default 28k ports in 60 s TIME_WAIT run
        // out within seconds and connect() then burns the client's CPU searching for a free
        // port. The client and the director may reuse a TIME_WAIT port (timestamps make it
        // safe, tcp(7) tcp_tw_reuse) from the whole unprivileged range, in these namespaces.
        for ns in [&client_ns, &director_ns] {
            tb.sysctl(ns, "net.ipv4.ip_local_port_range=1024 65535")?;
            tb.sysctl(ns, "net.ipv4.tcp_tw_reuse=1")?;
        }
        let mut rig = Rig {
            hosts: Vec::new(),
            director: None,
            tb,
            client_ns,
            director_ns,
            host_ns: Vec::new(),
            dir,
        };
        let mut seeds = netsched_core::rng::SplitMix64::new(seed);
        for k in 0..n {
            let ns = rig.tb.add_ns(&format!("h{k}"))?;
            let (a, b) = (
                rig.tb.ifname(&format!("d{k}")),
                rig.tb.ifname(&format!("h{k}")),
            );
            let net = k + 1;
            rig.tb.veth(
                (&rig.director_ns.clone(), &a, &format!("10.88.{net}.1/24")),
                (&ns, &b, &format!("10.88.{net}.2/24")),
            )?;
            let host = Host::start(&ns, host_addr(k), workers, seeds.next_u64())?;
            rig.hosts.push(host);
            rig.host_ns.push(ns);
        }
        Ok(rig)
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

    /// Start `director` with `algorithm` (stopping the previous one) and wait until the
    /// virtual IP accepts connections from the client namespace.
    pub fn start_director(&mut self, director: &Director, algorithm: &str) -> Result<()> {
        self.stop_director();
        let servers: Vec<SocketAddr> = (0..self.hosts.len()).map(host_addr).collect();
        let running = director.start(
            &mut self.tb,
            &self.director_ns,
            self.dir.path(),
            algorithm,
            vip(),
            &servers,
        )?;
        let pid = running.pid;
        self.director = Some(running);
        let ns = self.client_ns.clone();
        let ready = std::thread::spawn(move || -> Result<()> {
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
        .map_err(|_| anyhow::anyhow!("readiness thread panicked"))?;
        ready.with_context(|| {
            format!(
                "{} (pid {pid}); its log: {}",
                director.name(),
                self.director
                    .as_ref()
                    .map(|d| d.log_tail())
                    .unwrap_or_default()
            )
        })
    }

    /// The running director's process id.
    pub fn director_pid(&self) -> Option<u32> {
        self.director.as_ref().map(|d| d.pid)
    }

    /// The running director (its pid, log and control socket).
    pub fn director(&self) -> Option<&RunningDirector> {
        self.director.as_ref()
    }

    /// Stop the running director, if any (SIGTERM, then SIGKILL after 2 s).
    pub fn stop_director(&mut self) {
        if let Some(d) = self.director.take() {
            let _ = self.tb.stop(d.pid, Duration::from_secs(2));
        }
    }
}
