//! Root test inside a network namespace of our own (`netsched_testbed::Testbed`): the
//! balancer daemon in front of two Debian nginx processes, a backend killed mid-run.
//! Skips with a reason without root; everything it starts is killed by pid and the namespace
//! deleted when the testbed drops, also on failure.

mod nginx;

use netsched_testbed::{privileged_test_allowed, TempDir, Testbed};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(20);

/// Run `f` on a thread that has entered namespace `ns`.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).expect("setns");
        f()
    })
    .join()
    .expect("client thread")
}

fn get(addr: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn balancer_in_a_namespace_spreads_over_nginx_and_takes_a_killed_one_out() {
    if !privileged_test_allowed(
        "balancer_in_a_namespace_spreads_over_nginx_and_takes_a_killed_one_out",
    ) {
        return;
    }
    let mut tb = Testbed::new("bal").unwrap();
    let ns = tb.add_ns("lb").unwrap();
    let dir = TempDir::new("bal-netns").unwrap();
    let pids = nginx::Nginx {
        connections: 1024,
        keepalive_requests: None,
    }
    .start(&mut tb, &ns, dir.path());
    let sock = dir.path().join("ctl.sock");
    let cfg = dir.path().join("balance.toml");
    std::fs::write(
        &cfg,
        format!(
            "mode = \"l7\"\nlisten = [\"127.0.0.1:8080\"]\nalgorithm = {{ kind = \"rr\" }}\ncontrol_socket = \"{}\"\n\
[health]\nkind = \"http\"\ninterval = \"200ms\"\nrise = 2\nfall = 2\ntimeout = \"1s\"\n\
[[server]]\nname = \"a\"\naddr = \"127.0.0.1:8081\"\n[[server]]\nname = \"b\"\naddr = \"127.0.0.1:8082\"\n",
            sock.display()
        ),
    )
    .unwrap();
    nginx::start_balancer(&mut tb, &ns, &cfg, &dir.path().join("log"));
    // Wait until the balancer and both nginx answer through it.
    let ready = in_ns(&ns, || {
        let end = Instant::now() + PATIENCE;
        let mut seen = std::collections::HashSet::new();
        while Instant::now() < end && seen.len() < 2 {
            let (s, body) = get("127.0.0.1:8080");
            if s == 200 {
                seen.insert(body);
            } else {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        seen.len()
    });
    assert_eq!(
        ready,
        2,
        "log: {}",
        std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
    );
    let counts = in_ns(&ns, || {
        let mut m: HashMap<String, u32> = HashMap::new();
        for _ in 0..20 {
            let (s, body) = get("127.0.0.1:8080");
            assert_eq!(s, 200);
            *m.entry(body).or_default() += 1;
        }
        m
    });
    assert_eq!((counts["a"], counts["b"]), (10, 10), "rr over two nginx");
    tb.stop(pids["b"], Duration::from_millis(500)).unwrap();
    let killed = Instant::now();
    while !netsched_balance::control::request(&sock, "show-servers")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("b ") && l.contains(" down "))
    {
        assert!(killed.elapsed() < PATIENCE, "b never marked down");
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = in_ns(&ns, || {
        (0..10).map(|_| get("127.0.0.1:8080")).collect::<Vec<_>>()
    });
    assert!(
        after.iter().all(|(s, b)| *s == 200 && b == "a"),
        "{after:?}"
    );
}
