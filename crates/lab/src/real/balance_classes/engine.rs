//! The five queue disciplines compared by balance-classes, each a balancer configuration in
//! front of the same backends: `netsched balance` with `discipline = "fifo" | "strict_priority" |
//! "percentile"` (docs/balance-classes.md) and Debian's HAProxy 2.6 with
//! `http-request set-priority-class` (strict classes) and with `http-request
//! set-priority-offset` (one time offset per class).
//!
//! HAProxy semantics (HAProxy 2.6 Configuration Manual, §4.2 "http-request
//! set-priority-class" and "http-request set-priority-offset", Debian's
//! /usr/share/doc/haproxy/configuration.txt.gz): a queued request is ordered first by its
//! priority class, lower first (range -2047..2047), then by its arrival time plus its offset in
//! milliseconds, lower first (range -524287..524287). With `maxconn` on each server, requests
//! beyond the slots wait in the backend's queue.
//!
//! Both balancers get: one thread (`threads = 1`, `nbthread 1`), least-connection balancing,
//! `maxconn` per server, a 60 s queue timeout, keep-alive on both sides.

use anyhow::{anyhow, Result};
use std::fmt::Write;
use std::net::SocketAddr;

/// One balancer configuration of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    NetschedFifo,
    NetschedPriority,
    NetschedPercentile,
    HaproxyClass,
    HaproxyOffset,
}

/// Every engine, in run order (netsched FIFO first: its mean response time is the deadline).
pub const ALL_ENGINES: [Engine; 5] = [
    Engine::NetschedFifo,
    Engine::NetschedPriority,
    Engine::NetschedPercentile,
    Engine::HaproxyClass,
    Engine::HaproxyOffset,
];

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::NetschedFifo => "netsched-fifo",
            Engine::NetschedPriority => "netsched-priority",
            Engine::NetschedPercentile => "netsched-percentile",
            Engine::HaproxyClass => "haproxy-class",
            Engine::HaproxyOffset => "haproxy-offset",
        }
    }

    pub fn parse(text: &str) -> Result<Engine> {
        ALL_ENGINES
            .iter()
            .copied()
            .find(|e| e.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = ALL_ENGINES.iter().map(|e| e.name()).collect();
                anyhow!(
                    "real.balance.engines: unknown engine {text:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }

    pub fn is_haproxy(self) -> bool {
        matches!(self, Engine::HaproxyClass | Engine::HaproxyOffset)
    }
}

/// What every configuration shares.
#[derive(Debug, Clone)]
pub struct Shape {
    pub listen_port: u16,
    pub backends: Vec<SocketAddr>,
    pub maxconn: u32,
    /// Class k's source network and percentile.
    pub classes: Vec<(String, u32)>,
    /// The percentile discipline's deadline, ns (`None`: P0's automatic one).
    pub deadline_ns: Option<u64>,
    /// HAProxy offset of class k = k × this, ms.
    pub offset_step_ms: u64,
    /// netsched's `max_hold` of every class (used by the percentile queue).
    pub max_hold: netsched_core::qdisc::percentile::MaxHold,
}

/// `netsched balance`'s TOML for a netsched engine (`ctl`: the control socket).
pub fn netsched_config(e: Engine, s: &Shape, ctl: &str) -> String {
    let queue = match e {
        Engine::NetschedFifo => "fifo",
        Engine::NetschedPriority => "strict_priority",
        _ => "percentile",
    };
    let deadline = match s.deadline_ns {
        Some(ns) => format!("{}us", (ns / 1000).max(1)),
        None => "auto".to_string(),
    };
    let mut t = format!(
        "mode = \"l7\"\nlisten = [\"0.0.0.0:{}\"]\nalgorithm = {{ kind = \"lc\" }}\n\
         control_socket = {ctl:?}\nthreads = 1\nmax_client_connections = 1000\ndiscipline = \"{queue}\"\n\
         default_class = \"C{}\"\n\n\
         [timeouts]\nconnect = \"2s\"\nclient = \"120s\"\nserver = \"120s\"\nqueue = \"60s\"\n\
         header = \"5s\"\n\n[defaults]\nmaxconn = {}\nqueue_limit = 1000\n",
        s.listen_port,
        s.classes.len().saturating_sub(1),
        s.maxconn
    );
    for (k, a) in s.backends.iter().enumerate() {
        let _ = write!(t, "\n[[server]]\nname = \"s{}\"\naddr = \"{a}\"\n", k + 1);
    }
    for (k, (cidr, p)) in s.classes.iter().enumerate() {
        let _ = write!(
            t,
            "\n[[class]]\nname = \"C{k}\"\npercentile = {p}\ndeadline = \"{deadline}\"\n\
             max_hold = \"{}\"\nsources = [\"{cidr}\"]\n",
            s.max_hold
        );
    }
    t
}

/// HAProxy's configuration for a HAProxy engine.
pub fn haproxy_config(e: Engine, s: &Shape) -> String {
    let mut t = format!(
        "global\n    maxconn 4096\n    nbthread 1\n\
         defaults\n    mode http\n    retries 0\n    timeout connect 2s\n    \
         timeout client 120s\n    timeout server 120s\n    timeout queue 60s\n    \
         timeout http-request 5s\n\
         frontend fe\n    bind 0.0.0.0:{}\n",
        s.listen_port
    );
    for (k, (cidr, _)) in s.classes.iter().enumerate() {
        let _ = writeln!(t, "    acl c{k} src {cidr}");
    }
    for k in 0..s.classes.len() {
        let _ = match e {
            Engine::HaproxyOffset => writeln!(
                t,
                "    http-request set-priority-offset int({}) if c{k}",
                k as u64 * s.offset_step_ms
            ),
            _ => writeln!(t, "    http-request set-priority-class int({k}) if c{k}"),
        };
    }
    t.push_str("    default_backend be\nbackend be\n    balance leastconn\n");
    for (k, a) in s.backends.iter().enumerate() {
        let _ = writeln!(t, "    server s{} {a} maxconn {}", k + 1, s.maxconn);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            listen_port: 8080,
            backends: vec!["127.0.0.1:8081".parse().unwrap()],
            maxconn: 2,
            classes: vec![("10.77.0.0/24".into(), 90), ("10.77.1.0/24".into(), 50)],
            deadline_ns: Some(12_345_678),
            offset_step_ms: 12,
            max_hold: netsched_core::qdisc::percentile::MaxHold::Deadline,
        }
    }

    #[test]
    fn the_netsched_configs_differ_only_in_the_queue() {
        let s = shape();
        for (e, q) in [
            (Engine::NetschedFifo, "fifo"),
            (Engine::NetschedPriority, "strict_priority"),
            (Engine::NetschedPercentile, "percentile"),
        ] {
            let t: toml::Table = toml::from_str(&netsched_config(e, &s, "/x.sock")).unwrap();
            assert_eq!(t["discipline"].as_str(), Some(q));
            assert_eq!(t["defaults"]["maxconn"].as_integer(), Some(2));
            assert_eq!(t["class"][1]["sources"][0].as_str(), Some("10.77.1.0/24"));
            assert_eq!(t["class"][0]["deadline"].as_str(), Some("12345us"));
            assert_eq!(t["class"][0]["max_hold"].as_str(), Some("deadline"));
            assert_eq!(t["default_class"].as_str(), Some("C1"));
        }
    }

    #[test]
    fn haproxy_gets_one_class_or_one_offset_per_source_network() {
        let s = shape();
        let c = haproxy_config(Engine::HaproxyClass, &s);
        assert!(c.contains("acl c1 src 10.77.1.0/24"), "{c}");
        assert!(c.contains("set-priority-class int(1) if c1"), "{c}");
        assert!(c.contains("server s1 127.0.0.1:8081 maxconn 2"), "{c}");
        let o = haproxy_config(Engine::HaproxyOffset, &s);
        assert!(o.contains("set-priority-offset int(12) if c1"), "{o}");
        assert!(!o.contains("set-priority-class"), "{o}");
        assert_eq!(
            Engine::parse("haproxy-offset").unwrap(),
            Engine::HaproxyOffset
        );
        let e = Engine::parse("nope").unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("netsched-fifo"), "{e}");
    }
}
