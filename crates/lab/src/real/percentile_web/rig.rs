//! The percentile-web testbed: one server namespace running nginx (Debian's package, our
//! own config in a temp dir), N client namespaces, each with its own source address and its
//! own veth to the server (client k: 10.77.k.2/24, server side 10.77.k.1/24), so the address
//! table maps 10.77.k.0/24 → class k.
//!
//! The pieces it shares with balance-classes' rig (the client star, nginx, the probe) are in
//! [`super::star`].
//!
//! The server is made the bottleneck deliberately: nginx runs as ONE process
//! (`master_process off`, `worker_processes 1`) pinned to CPU 0 with `taskset`, and every
//! request costs real CPU: the page (`page_kb` of pseudo-random words) is gzip-compressed at
//! level 9 on every request (`gzip_comp_level 9`, clients send `Accept-Encoding: gzip`).
//! Clients and the daemon are pinned to the other CPU.
//!
//! nginx runs unprivileged, as `nobody` (`setpriv`), from a private folder ([`TempDir`]:
//! `mkdtemp`, mode 0700, files created with `O_EXCL`, handed to `nobody` only where nginx
//! writes); port 80 is allowed to it by the server namespace's own
//! `net.ipv4.ip_unprivileged_port_start = 0`, which changes nothing outside that namespace.
//!
//! Everything is owned by a [`Testbed`]: dropping the [`WebBed`] (end, error, panic, or a run
//! interrupted by SIGINT/SIGTERM) stops nginx by id together with its process group, deletes
//! the namespaces (their veths and iptables rules go with them) and removes the folder.

use super::star::{self, server_addr};
pub use super::star::{client_addr, client_cidr, page};
use anyhow::Result;
use netsched_testbed::{check_interrupted, TempDir, Testbed};
use std::path::PathBuf;
use std::time::Duration;

pub struct WebBed {
    pub tb: Testbed,
    pub server_ns: String,
    pub client_ns: Vec<String>,
    /// The run's private folder (nginx's config, page, logs; control sockets).
    pub dir: PathBuf,
    pub nginx_pid: u32,
    pub port: u16,
    /// Removes `dir` when the bed is dropped (after nginx and the namespaces are gone).
    _tmp: TempDir,
}

impl WebBed {
    /// Build the namespaces and start nginx. `server_cpu`: the CPU nginx is pinned to.
    pub fn new(clients: usize, page_kb: usize, server_cpu: usize, seed: u64) -> Result<Self> {
        let mut tb = Testbed::new("pweb")?;
        let server_ns = tb.add_ns("srv")?;
        let client_ns = star::client_star(&mut tb, &server_ns, clients)?;
        check_interrupted()?;
        // The tag in the folder's name lets a leak check find it (and nginx, by its -c path).
        let tmp = TempDir::new(tb.tag())?;
        let dir = tmp.path().to_path_buf();
        tmp.create_dir("www")?;
        tmp.create_dir("tmp")?;
        tmp.create_file("www/index.html", page(page_kb, seed).as_bytes())?;
        let (uid, gid) = netsched_testbed::nobody()?;
        // nginx (as nobody) writes its pid, error log and temp files; it only reads the rest.
        tmp.hand_to(uid, gid, &["tmp"])?;
        tb.sysctl(&server_ns, "net.ipv4.ip_unprivileged_port_start=0")?;
        let port = 80;
        let d = dir.display().to_string();
        let conf = star::nginx_conf(
            "percentile-web",
            &format!("{d}/tmp"),
            &format!("{d}/www"),
            &port.to_string(),
        );
        let conf_path = tmp.create_file("nginx.conf", conf.as_bytes())?;
        let mut bed = WebBed {
            nginx_pid: 0,
            tb,
            server_ns,
            client_ns,
            dir,
            port,
            _tmp: tmp,
        };
        let ns = bed.server_ns.clone();
        bed.nginx_pid = star::spawn_nginx(&mut bed.tb, &ns, &conf_path, server_cpu, (uid, gid))?;
        bed.wait_ready()?;
        Ok(bed)
    }

    fn wait_ready(&self) -> Result<()> {
        let log = || std::fs::read_to_string(self.dir.join("tmp/error.log")).unwrap_or_default();
        let host = server_addr(0).to_string();
        star::wait_http(&self.tb, &self.client_ns[0], &host, self.port).map_err(|e| {
            e.context(format!(
                "nginx (is Debian's nginx-light installed?): {}",
                log()
            ))
        })
    }

    pub fn clients(&self) -> Vec<super::client::Client> {
        star::clients(&self.client_ns)
    }

    /// iptables rules carrying the daemon's comment in the server namespace.
    pub fn leftover_rules(&self, iptables: &str) -> Result<usize> {
        let out = self.tb.exec(&self.server_ns, iptables, &["-S"])?;
        Ok(out
            .lines()
            .filter(|l| l.contains(netsched_nfq::iptables::COMMENT_PREFIX))
            .count())
    }
}

impl Drop for WebBed {
    fn drop(&mut self) {
        let _ = self.tb.stop(self.nginx_pid, Duration::from_millis(500));
        // Then the fields: `tb` (remaining processes, namespaces), `_tmp` (the folder).
    }
}
