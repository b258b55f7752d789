//! The percentile-web testbed: one server namespace running nginx (Debian's package, our
//! own config in a temp dir), N client namespaces, each with its own source address and its
//! own veth to the server (client k: 10.77.k.2/24, server side 10.77.k.1/24), so the address
//! table maps 10.77.k.0/24 → class k.
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

use anyhow::{bail, Result};
use netsched_testbed::{check_interrupted, sleep_unless_interrupted, TempDir, Testbed};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

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

pub fn server_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, k as u8, 1)
}
pub fn client_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, k as u8, 2)
}
pub fn client_cidr(k: usize) -> String {
    format!("10.77.{k}.0/24")
}

/// A page of `kb` KiB of pseudo-random words (deterministic from `seed`), so that gzip has
/// real work to do.
pub fn page(kb: usize, seed: u64) -> String {
    const WORDS: [&str; 24] = [
        "percentile",
        "scheduler",
        "class",
        "deadline",
        "request",
        "response",
        "server",
        "client",
        "queue",
        "packet",
        "kernel",
        "thesis",
        "budget",
        "priority",
        "attainment",
        "netfilter",
        "socket",
        "latency",
        "throughput",
        "gold",
        "silver",
        "bronze",
        "web",
        "ms",
    ];
    let mut rng = netsched_core::rng::SplitMix64::new(seed);
    let mut s = String::from("<html><body><p>\n");
    while s.len() < kb * 1024 {
        let w = WORDS[rng.below(WORDS.len() as u64) as usize];
        s.push_str(w);
        s.push_str(&format!("{} ", rng.below(1000)));
        if rng.below(12) == 0 {
            s.push('\n');
        }
    }
    s.push_str("</p></body></html>\n");
    s
}

impl WebBed {
    /// Build the namespaces and start nginx. `server_cpu`: the CPU nginx is pinned to.
    pub fn new(clients: usize, page_kb: usize, server_cpu: usize, seed: u64) -> Result<Self> {
        let mut tb = Testbed::new("pweb")?;
        let server_ns = tb.add_ns("srv")?;
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
        let conf = format!(
            "# netsched percentile-web: one nginx process, pinned by taskset, gzip -9 per request
master_process off;
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type text/html;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
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
        listen {port};
        root {d}/www;
    }}
}}
",
            d = dir.display()
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
        let cpu = server_cpu.to_string();
        let conf_s = conf_path.display().to_string();
        let (uid_s, gid_s) = (format!("--reuid={uid}"), format!("--regid={gid}"));
        bed.nginx_pid = bed.tb.spawn(
            &bed.server_ns.clone(),
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
        bed.wait_ready()?;
        Ok(bed)
    }

    fn wait_ready(&self) -> Result<()> {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self
                .tb
                .exec(
                    &self.client_ns[0],
                    "bash",
                    &[
                        "-c",
                        &format!(
                            "exec 3<>/dev/tcp/{}/{} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3",
                            server_addr(0),
                            self.port
                        ),
                    ],
                )
                .map(|o| o.starts_with("HTTP/1.1 200"))
                .unwrap_or(false)
            {
                return Ok(());
            }
            sleep_unless_interrupted(Duration::from_millis(100))?;
        }
        let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        bail!("nginx did not answer within 10 s (is Debian's nginx-light installed?): {log}")
    }

    pub fn clients(&self) -> Vec<super::client::Client> {
        self.client_ns
            .iter()
            .enumerate()
            .map(|(k, ns)| super::client::Client {
                netns: ns.clone(),
                server: server_addr(k),
                class: k,
            })
            .collect()
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
