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
//! Everything is owned by a [`Testbed`]: dropping the [`WebBed`] (end, error or panic) kills
//! nginx by id and deletes the namespaces (their veths and iptables rules go with them); the
//! temp dir is removed too.

use anyhow::{bail, Context, Result};
use netsched_testbed::Testbed;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub struct WebBed {
    pub tb: Testbed,
    pub server_ns: String,
    pub client_ns: Vec<String>,
    pub dir: PathBuf,
    pub nginx_pid: u32,
    pub port: u16,
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
        let dir = std::env::temp_dir().join(format!("netsched-{}", tb.tag()));
        let www = dir.join("www");
        std::fs::create_dir_all(&www).with_context(|| format!("creating {}", www.display()))?;
        std::fs::create_dir_all(dir.join("tmp"))?;
        std::fs::write(www.join("index.html"), page(page_kb, seed))?;
        let port = 80;
        let conf = format!(
            "# netsched percentile-web: one nginx process, pinned by taskset, gzip -9 per request
master_process off;
daemon off;
worker_processes 1;
user root root;
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
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let mut bed = WebBed {
            nginx_pid: 0,
            tb,
            server_ns,
            client_ns,
            dir,
            port,
        };
        let cpu = server_cpu.to_string();
        let conf_s = conf_path.display().to_string();
        bed.nginx_pid = bed.tb.spawn(
            &bed.server_ns.clone(),
            "taskset",
            &["-c", &cpu, "nginx", "-c", &conf_s, "-e", "stderr"],
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
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
        bail!("nginx did not answer within 10 s (is Debian's nginx-light installed?): {log}")
    }

    pub fn clients(&self) -> Vec<crate::loadgen::Client> {
        self.client_ns
            .iter()
            .enumerate()
            .map(|(k, ns)| crate::loadgen::Client {
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
            .filter(|l| l.contains(crate::iptables::COMMENT_PREFIX))
            .count())
    }
}

impl Drop for WebBed {
    fn drop(&mut self) {
        let _ = self.tb.stop(self.nginx_pid, Duration::from_millis(500));
        let _ = std::fs::remove_dir_all(&self.dir);
        // self.tb drops after this: remaining processes killed, namespaces deleted.
    }
}
