//! The pieces of a web testbed that percentile-web's and balance-classes' rigs share: the
//! client star (one namespace per class, each with its own veth to the server namespace: client
//! k 10.77.k.2/24, server side 10.77.k.1/24, so the server's address table or the balancer's
//! class CIDRs map 10.77.k.0/24 → class k), the page, Debian's nginx as ONE process pinned
//! to a CPU with gzip -9 per request (so every request costs real CPU), started unprivileged
//! as `nobody`, and the readiness probe.
//!
//! Everything started here belongs to the caller's [`Testbed`] (stopped by id and the
//! namespaces deleted when it is dropped).

use crate::real::percentile_web::client::Client;
use anyhow::{bail, Result};
use netsched_testbed::{sleep_unless_interrupted, Testbed};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

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

/// One namespace per class (`c0`, `c1`, …), each joined to `server_ns` by its own veth.
pub fn client_star(tb: &mut Testbed, server_ns: &str, clients: usize) -> Result<Vec<String>> {
    let mut client_ns = Vec::new();
    for k in 0..clients {
        let ns = tb.add_ns(&format!("c{k}"))?;
        let (a, b) = (tb.ifname(&format!("s{k}")), tb.ifname(&format!("c{k}")));
        tb.veth(
            (server_ns, &a, &format!("{}/24", server_addr(k))),
            (&ns, &b, &format!("{}/24", client_addr(k))),
        )?;
        client_ns.push(ns);
    }
    Ok(client_ns)
}

/// The load generator's clients: class k from namespace k to the server side of its veth.
pub fn clients(client_ns: &[String]) -> Vec<Client> {
    client_ns
        .iter()
        .enumerate()
        .map(|(k, ns)| Client {
            netns: ns.clone(),
            server: server_addr(k),
            class: k,
        })
        .collect()
}

/// nginx's configuration: one process, no daemon, gzip -9 of `www/index.html` per request.
/// `tmp`: the folder nginx writes (pid, error log, temp files; handed to `nobody`), `www`:
/// the page's folder, `listen`: nginx's `listen` argument.
pub fn nginx_conf(title: &str, tmp: &str, www: &str, listen: &str) -> String {
    format!(
        "# netsched {title}: one nginx process, pinned by taskset, gzip -9 per request
master_process off;
daemon off;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    default_type text/html;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
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
        listen {listen};
        root {www};
    }}
}}
"
    )
}

/// Start nginx with `conf` in `ns`, as `uid`/`gid` (`setpriv`), pinned to `cpu`; its id.
pub fn spawn_nginx(
    tb: &mut Testbed,
    ns: &str,
    conf: &Path,
    cpu: usize,
    (uid, gid): (u32, u32),
) -> Result<u32> {
    let cpu = cpu.to_string();
    let conf_s = conf.display().to_string();
    let (uid_s, gid_s) = (format!("--reuid={uid}"), format!("--regid={gid}"));
    tb.spawn(
        ns,
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
    )
}

/// Wait (≤ 10 s) until `GET /` on `host:port` from namespace `ns` answers 200; `Err` says
/// which address did not.
pub fn wait_http(tb: &Testbed, ns: &str, host: &str, port: u16) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    let probe = format!(
        "exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -c 12 <&3"
    );
    while Instant::now() < until {
        if tb
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
