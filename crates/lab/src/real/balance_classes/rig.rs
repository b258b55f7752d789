//! The balance-classes testbed: one server namespace holding the balancer (netsched balance
//! or HAProxy, one at a time) and `backends` nginx processes on loopback, and one client
//! namespace per class, each with its own veth and address (client k: 10.77.k.2/24, balancer
//! side 10.77.k.1/24, as percentile-web's rig), so the balancer classifies by source CIDR
//! 10.77.k.0/24 as P0 classifies by IP table.
//!
//! The backends are Debian's nginx, each ONE process (`master_process off`,
//! `worker_processes 1`) pinned with `taskset` to the server CPU, each request costing real CPU
//! (the page is gzip-compressed at level 9 per request, as in percentile-web's rig); they run
//! unprivileged as `nobody` from a private folder. Their slots are scarce by the balancer's
//! `maxconn`, so requests wait in the balancer's queue, where the discipline decides.
//!
//! Everything is owned by a [`Testbed`]: dropping the [`ClassBed`] (end, error, panic, or a
//! run interrupted by SIGINT/SIGTERM) stops each nginx by id, deletes the namespaces and
//! removes the folder.

use crate::real::percentile_web::rig::{client_addr, page, server_addr};
use anyhow::{bail, Result};
use netsched_testbed::{check_interrupted, sleep_unless_interrupted, TempDir, Testbed};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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

fn nginx_conf(d: &str, b: usize, port: u16) -> String {
    format!(
        "# netsched balance-classes backend {b}: one nginx process, gzip -9 per request
master_process off;
daemon off;
worker_processes 1;
pid {d}/tmp{b}/nginx.pid;
error_log {d}/tmp{b}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    default_type text/html;
    client_body_temp_path {d}/tmp{b}/body;
    proxy_temp_path {d}/tmp{b}/proxy;
    fastcgi_temp_path {d}/tmp{b}/fastcgi;
    uwsgi_temp_path {d}/tmp{b}/uwsgi;
    scgi_temp_path {d}/tmp{b}/scgi;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    sendfile off;
    tcp_nodelay on;
    gzip on;
    gzip_comp_level 9;
    gzip_min_length 0;
    gzip_types text/html;
    gzip_buffers 64 8k;
    server {{
        listen 127.0.0.1:{port};
        root {d}/www;
    }}
}}
"
    )
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
        let mut client_ns = Vec::new();
        for k in 0..clients {
            let ns = tb.add_ns(&format!("c{k}"))?;
            let (a, b) = (tb.ifname(&format!("s{k}")), tb.ifname(&format!("c{k}")));
            tb.veth(
                (&server_ns, &a, &format!("{}/24", server_addr(k))),
                (&ns, &b, &format!("{}/24", client_addr(k))),
            )?;
            client_ns.push(ns);
        }
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
            confs.push(tmp.create_file(
                &format!("nginx-{b}.conf"),
                nginx_conf(&d, b, port).as_bytes(),
            )?);
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
        let cpu = server_cpu.to_string();
        let (uid_s, gid_s) = (format!("--reuid={uid}"), format!("--regid={gid}"));
        for conf in &confs {
            let conf_s = conf.display().to_string();
            let ns = bed.server_ns.clone();
            let pid = bed.tb.spawn(
                &ns,
                "setpriv",
                &[
                    &uid_s,
                    &gid_s,
                    "--clear-groups",
                    "taskset",
                    "-c",
                    &cpu,
                    "nginx",
                    "-c",
                    &conf_s,
                    "-e",
                    "stderr",
                ],
                "nginx",
            )?;
            bed.nginx_pids.push(pid);
        }
        for b in 0..backends {
            let a = bed.backends[b];
            bed.wait_http(&bed.server_ns.clone(), &a.ip().to_string(), a.port())?;
        }
        Ok(bed)
    }

    /// Wait (≤ 10 s) until `GET /` on `host:port` from namespace `ns` answers 200.
    pub fn wait_http(&self, ns: &str, host: &str, port: u16) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(10);
        let probe = format!(
            "exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3"
        );
        while Instant::now() < until {
            if self
                .tb
                .exec(ns, "bash", &["-c", &probe])
                .map(|o| o.starts_with("HTTP/1.1 200") || o.starts_with("HTTP/1.0 200"))
                .unwrap_or(false)
            {
                return Ok(());
            }
            sleep_unless_interrupted(Duration::from_millis(100))?;
        }
        bail!("{host}:{port} did not answer 200 within 10 s (from namespace {ns})")
    }

    pub fn clients(&self) -> Vec<crate::real::percentile_web::client::Client> {
        self.client_ns
            .iter()
            .enumerate()
            .map(|(k, ns)| crate::real::percentile_web::client::Client {
                netns: ns.clone(),
                server: server_addr(k),
                class: k,
            })
            .collect()
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
