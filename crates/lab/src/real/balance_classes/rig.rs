//! The balance-classes testbed: one server namespace holding the balancer (netsched balance
//! or HAProxy, one at a time) and `backends` nginx processes on loopback, and one client
//! namespace per class, each with its own veth and address (client k: 10.77.k.2/24, balancer
//! side 10.77.k.1/24, as percentile-web's rig), so the balancer classifies by source CIDR
//! 10.77.k.0/24 as P0 classifies by IP table.
//!
//! The client star, nginx and the probe are percentile-web's ([`crate::real::percentile_web::star`]).
//! The backends are Debian's nginx, each ONE process (`master_process off`,
//! `worker_processes 1`) pinned with `taskset` to the server CPU, each request costing real CPU
//! (the page is gzip-compressed at level 9 per request, as in percentile-web's rig); they run
//! unprivileged as `nobody` from a private folder. Their slots are scarce by the balancer's
//! `maxconn`, so requests wait in the balancer's queue, where the discipline decides.
//!
//! Everything is owned by a [`Testbed`]: dropping the [`ClassBed`] (end, error, panic, or a
//! run interrupted by SIGINT/SIGTERM) stops each nginx by id, deletes the namespaces and
//! removes the folder.

use crate::real::percentile_web::star::{self, page};
use anyhow::Result;
use netsched_testbed::{check_interrupted, TempDir, Testbed};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The port the balancer listens on (every address of the server namespace).
pub const LISTEN_PORT: u16 = 8080;
/// Backend b listens on 127.0.0.1:(BACKEND_PORT0 + b).
pub const BACKEND_PORT0: u16 = 8081;

pub struct ClassBed {
    pub tb: Testbed,
    pub server_ns: String,
    pub client_ns: Vec<String>,
    pub dir: PathBuf,
    pub backends: Vec<SocketAddr>,
    nginx_pids: Vec<u32>,
    _tmp: TempDir,
}

impl ClassBed {
    /// Namespaces for `clients` classes and `backends` nginx processes pinned to `server_cpu`.
    pub fn new(
        clients: usize,
        backends: usize,
        page_kb: usize,
        server_cpu: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut tb = Testbed::new("bcls")?;
        let server_ns = tb.add_ns("lb")?;
        let client_ns = star::client_star(&mut tb, &server_ns, clients)?;
        check_interrupted()?;
        let tmp = TempDir::new(tb.tag())?;
        let dir = tmp.path().to_path_buf();
        tmp.create_dir("www")?;
        tmp.create_file("www/index.html", page(page_kb, seed).as_bytes())?;
        let (uid, gid) = netsched_testbed::nobody()?;
        let d = dir.display().to_string();
        let mut confs = Vec::new();
        let mut addrs = Vec::new();
        for b in 0..backends {
            let port = BACKEND_PORT0 + b as u16;
            tmp.create_dir(&format!("tmp{b}"))?;
            tmp.hand_to(uid, gid, &[&format!("tmp{b}")])?;
            let conf = star::nginx_conf(
                &format!("balance-classes backend {b}"),
                &format!("{d}/tmp{b}"),
                &format!("{d}/www"),
                &format!("127.0.0.1:{port}"),
            );
            confs.push(tmp.create_file(&format!("nginx-{b}.conf"), conf.as_bytes())?);
            addrs.push(SocketAddr::from(([127, 0, 0, 1], port)));
        }
        let mut bed = ClassBed {
            tb,
            server_ns,
            client_ns,
            dir,
            backends: addrs,
            nginx_pids: Vec::new(),
            _tmp: tmp,
        };
        let ns = bed.server_ns.clone();
        for conf in &confs {
            let pid = star::spawn_nginx(&mut bed.tb, &ns, conf, server_cpu, (uid, gid))?;
            bed.nginx_pids.push(pid);
        }
        for a in &bed.backends {
            star::wait_http(&bed.tb, &ns, &a.ip().to_string(), a.port())?;
        }
        Ok(bed)
    }

    pub fn clients(&self) -> Vec<crate::real::percentile_web::client::Client> {
        star::clients(&self.client_ns)
    }
}

impl Drop for ClassBed {
    fn drop(&mut self) {
        for pid in std::mem::take(&mut self.nginx_pids) {
            let _ = self.tb.stop(pid, Duration::from_millis(500));
        }
        // Then the fields: `tb` (remaining processes, namespaces), `_tmp` (the folder).
    }
}
