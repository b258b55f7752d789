//! Runtime control (`--control`) and `/metrics` (`--metrics`) on a live switch (root; skipped
//! with a reason otherwise). Unique namespaces, removed also after a failed assertion.
//! Assertions are about large effects only: the machine is a loaded, shared 2-core box.

mod common;

use common::{assert_gone, build, flooder, spawn_switch};
use netsched_testbed::{privileged_test_allowed, TempDir};
use netsched_vswitch::control::{self, ControlServer};
use netsched_vswitch::metrics::{Budget, SwitchMetrics};
use netsched_vswitch::SwitchStats;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SINK: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];

fn show(socket: &Path) -> SwitchStats {
    // `show` on the wire (the CLI's verb); `show-ports` is checked by the parser's test.
    let json = control::request(socket, "show --json").expect("show --json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("show JSON parses");
    let bad = netsched_util::json_units::violations(&v);
    assert!(
        bad.is_empty(),
        "numbers without their unit: {bad:?}\n{json}"
    );
    let ports = v["ports"].as_array().expect("ports array");
    // Rebuild the fields the tests use (SwitchStats is Serialize only).
    let mut s = SwitchStats {
        discipline: v["discipline"].as_str().unwrap_or_default().to_string(),
        rounds: v["rounds"].as_u64().unwrap(),
        rebuilds: v["rebuilds"].as_u64().unwrap(),
        ..SwitchStats::default()
    };
    for p in ports {
        let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
        s.ports.push(netsched_vswitch::PortStats {
            dev: p["dev"].as_str().unwrap().to_string(),
            tier: n("tier") as u32,
            weight: n("weight") as u32,
            received: n("received"),
            forwarded: n("forwarded"),
            dropped_queue_full: n("dropped_queue_full"),
            dropped_malformed: n("dropped_malformed"),
            dropped_oversize: n("dropped_oversize"),
            dropped_send_error: n("dropped_send_error"),
            dropped_removed: n("dropped_removed"),
            dropped_shutdown: n("dropped_shutdown"),
            dropped_discipline: n("dropped_discipline"),
            queued: n("queued"),
            ..Default::default()
        });
    }
    s
}

/// Frames forwarded per port during `window`.
fn forwarded_during(socket: &Path, window: Duration) -> Vec<u64> {
    let a = show(socket);
    std::thread::sleep(window);
    let b = show(socket);
    assert!(a.identity_holds() && b.identity_holds(), "{a:#?} {b:#?}");
    a.ports
        .iter()
        .zip(&b.ports)
        .map(|(x, y)| y.forwarded - x.forwarded)
        .collect()
}

/// Two flooding guests, each offering 2.5× the budget: the one in the better tier is served
/// first. After the two swap tiers over the control socket, the other one is.
#[test]
fn set_tier_and_set_weight_take_effect_on_live_traffic() {
    if !privileged_test_allowed("set_tier_and_set_weight_take_effect_on_live_traffic") {
        return;
    }
    let dir = TempDir::new("vswctl").unwrap();
    let socket = dir.path().join("ctl.sock");
    let tag;
    {
        let net = build("vswct", 2).unwrap();
        tag = net.tb.tag().to_string();
        // delay_constrained: equal bounds (bitmap 10 each), so either port, while in tier 3,
        // gets about one round in 10 (P2 §3.3: promoted when its delay bit reaches the end).
        for (discipline, change) in [
            ("strict_priority", "tier"),
            ("delay_constrained", "tier"),
            ("drr", "weight"),
        ] {
            let cfg = net.config(
                discipline,
                "packet_rate = 2000\nqueue_limit = 256\nbatch = 8",
                &[(1, "100ms"), (3, "100ms")],
            );
            let (p0, p1) = (net.guests[0].1.clone(), net.guests[1].1.clone());
            let (outbox, inbox) = control::channel();
            let server = ControlServer::start(&socket, None, outbox).unwrap();
            let sw = spawn_switch(&net.sw, cfg, move |s| s.attach_control(inbox)).unwrap();
            let floods: Vec<_> = (0..2)
                .map(|i| {
                    let (g, _, _) = &net.guests[i];
                    flooder(g, &net.tb.ifname(&format!("e{i}")), SINK, 200, 5000)
                })
                .collect();
            std::thread::sleep(Duration::from_millis(500));
            let before = forwarded_during(&socket, Duration::from_secs(2));
            match change {
                "tier" => {
                    let a = control::request(&socket, &format!("set-tier {p1} 1")).unwrap();
                    assert!(a.contains("tier 3 -> 1"), "{a}");
                    let a = control::request(&socket, &format!("set-tier {p0} 3")).unwrap();
                    assert!(a.contains("applies at the next round start"), "{a}");
                    // strict priority uses no weight: refused, naming why.
                    let e = control::request(&socket, &format!("set-weight {p0} 4"))
                        .unwrap_err()
                        .to_string();
                    assert!(e.contains("does not use a weight"), "{e}");
                }
                _ => {
                    let a = control::request(&socket, &format!("set-weight {p1} 8")).unwrap();
                    assert!(a.contains("weight 1 -> 8"), "{a}");
                    let e = control::request(&socket, &format!("set-tier {p0} 2"))
                        .unwrap_err()
                        .to_string();
                    assert!(e.contains("drr does not use a tier"), "{e}");
                }
            }
            // Malformed requests: clear errors naming what is wrong; the switch goes on.
            for (req, want) in [
                (
                    "set-tier nosuchport 1".to_string(),
                    "no guest port \"nosuchport\"",
                ),
                (format!("set-{change} {p0} 0"), "must be between 1 and 1000"),
                (
                    format!("set-{change} {p0} lots"),
                    "\"lots\" is not a whole number",
                ),
                ("frobnicate".to_string(), "unknown command \"frobnicate\""),
            ] {
                let e = control::request(&socket, &req).unwrap_err().to_string();
                assert!(e.contains(want), "{req}: want {want:?} in {e:?}");
            }
            std::thread::sleep(Duration::from_millis(300));
            let after = forwarded_during(&socket, Duration::from_secs(2));
            let shown = show(&socket);
            // One rebuild per change at most (two changes in one turn share one).
            let changes = if change == "tier" { 2 } else { 1 };
            assert!(
                (1..=changes).contains(&shown.rebuilds),
                "rebuilds for {changes} change(s): {shown:#?}"
            );
            let table = control::request(&socket, "show-ports").unwrap();
            assert!(table.contains(&p0) && table.contains("weight"), "{table}");
            for (stop, t) in floods {
                stop.store(true, Ordering::Relaxed);
                t.join().unwrap();
            }
            let st = sw.stop().unwrap();
            drop(server);
            assert!(!socket.exists(), "control socket removed");
            assert!(st.identity_holds(), "{st:#?}");
            // A rebuild moves every queued frame into the new discipline: none is lost.
            assert!(
                st.ports.iter().all(|p| p.dropped_discipline == 0),
                "{st:#?}"
            );
            println!("{discipline}: forwarded per 2 s before {before:?}, after {after:?}");
            match change {
                // Port 0 (tier 1) first, then port 1 (moved to tier 1, port 0 to tier 3).
                "tier" => {
                    assert!(before[0] > 3 * before[1], "before: {before:?}");
                    assert!(after[1] > 3 * after[0], "after: {after:?}");
                }
                // Equal weights share; weight 8 takes about 8 of 9 turns.
                _ => {
                    assert!(before[1] < 2 * before[0], "before: {before:?}");
                    assert!(after[1] > 3 * after[0], "after: {after:?}");
                }
            }
        }
    }
    assert_gone(&tag);
}

/// The socket is mode 0660 (a stranger cannot even connect); and if the file's mode lets one
/// in, the credential check turns it away with a message naming its uid.
#[test]
fn a_stranger_is_refused_by_the_file_mode_and_by_its_credentials() {
    if !privileged_test_allowed("a_stranger_is_refused_by_the_file_mode_and_by_its_credentials") {
        return;
    }
    let (setpriv, python) = (Path::new("/usr/bin/setpriv"), Path::new("/usr/bin/python3"));
    if !setpriv.exists() || !python.exists() {
        println!("skipped: needs /usr/bin/setpriv and /usr/bin/python3 to act as another user");
        return;
    }
    let dir = TempDir::new("vswctl").unwrap();
    // Let `nobody` reach the socket file (the folder is ours).
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o711),
    )
    .unwrap();
    let socket = dir.path().join("ctl.sock");
    let tag;
    {
        let net = build("vswpc", 1).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config("strict_priority", "packet_rate = 2000", &[(1, "30ms")]);
        let (outbox, inbox) = control::channel();
        let _server = ControlServer::start(&socket, None, outbox).unwrap();
        let sw = spawn_switch(&net.sw, cfg, move |s| s.attach_control(inbox)).unwrap();
        let as_nobody = || {
            let script = "import socket,sys\n\
                s=socket.socket(socket.AF_UNIX)\n\
                try:\n s.connect(sys.argv[1])\n\
                except OSError as e:\n print('connect:', e.strerror); sys.exit(0)\n\
                s.sendall(b'show-ports\\n'); s.settimeout(5)\n\
                out=b''\n\
                while True:\n d=s.recv(4096)\n if not d: break\n out+=d\n\
                print(out.decode())";
            let out = std::process::Command::new(setpriv)
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(python)
                .args(["-c", script])
                .arg(&socket)
                .output()
                .expect("setpriv runs");
            String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
        };
        let first = as_nobody();
        assert!(first.contains("connect: Permission denied"), "{first}");
        // Open the file's mode (our own socket): the second gate must hold on its own.
        std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        let second = as_nobody();
        assert!(
            second.contains(
                "error: permission denied: uid 65534 is neither root nor in the control group"
            ),
            "{second}"
        );
        // Root still gets its answer.
        assert!(control::request(&socket, "show-ports").is_ok());
        let st = sw.stop().unwrap();
        assert!(st.identity_holds());
    }
    assert_gone(&tag);
}

/// One scrape: (series → value), or why not.
/// One scrape. The listener serves at most 8 scrapes at once and answers a 503 to the rest
/// (crates/metrics); a 503 is tried again after 5 ms, for up to 5 s.
fn scrape(addr: std::net::SocketAddr) -> Result<Vec<(String, f64)>, String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match scrape_once(addr) {
            Err(e) if e.contains(" 503 ") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            r => return r,
        }
    }
}

fn scrape_once(addr: std::net::SocketAddr) -> Result<Vec<(String, f64)>, String> {
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .ok_or("no HTTP body")?;
    if !text.starts_with("HTTP/1.1 200") || !body.trim_end().ends_with("# EOF") {
        return Err(format!("bad answer: {text}"));
    }
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .rsplit_once(' ')
                .ok_or_else(|| format!("bad line {l:?}"))?;
            let v: f64 = v.parse().map_err(|_| format!("bad value in {l:?}"))?;
            Ok((k.to_string(), v))
        })
        .collect()
}

fn value(m: &[(String, f64)], series: &str) -> u64 {
    m.iter()
        .find(|(k, _)| k == series)
        .unwrap_or_else(|| panic!("no series {series}"))
        .1 as u64
}

/// `/metrics` parses, its counters move with traffic and close every port's identity, and
/// 24 scrapers hammering it do not stop forwarding.
#[test]
fn metrics_move_with_traffic_while_scrapers_hammer_them() {
    if !privileged_test_allowed("metrics_move_with_traffic_while_scrapers_hammer_them") {
        return;
    }
    let tag;
    {
        let net = build("vswmx", 2).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config(
            "delay_constrained",
            "packet_rate = 5000\nbatch = 8",
            &[(1, "30ms"), (3, "100ms")],
        );
        let names: Vec<String> = net.guests.iter().map(|g| g.1.clone()).collect();
        let mut reg = prometheus_client::registry::Registry::default();
        let m = SwitchMetrics::register(
            &mut reg,
            &names,
            Budget {
                packet_rate: Some(5000),
                ..Budget::default()
            },
        );
        let server =
            netsched_metrics::serve("127.0.0.1:0".parse().unwrap(), Arc::new(Mutex::new(reg)))
                .unwrap();
        let addr = server.addr();
        let sw = spawn_switch(&net.sw, cfg, move |s| s.attach_metrics(m)).unwrap();
        let first = scrape(addr).unwrap();
        assert_eq!(
            value(&first, "netsched_vswitch_budget_packets_per_second"),
            5000
        );
        let floods: Vec<_> = (0..2)
            .map(|i| {
                let (g, _, _) = &net.guests[i];
                flooder(g, &net.tb.ifname(&format!("e{i}")), SINK, 200, 1500)
            })
            .collect();
        // 24 scrapers as fast as they can, for 3 s; one sampler records forwarded over time.
        let stop = Arc::new(AtomicBool::new(false));
        let scrapers: Vec<_> = (0..24)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let (mut ok, mut bad) = (0u32, Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        match scrape(addr) {
                            Ok(_) => ok += 1,
                            Err(e) => bad.push(e),
                        }
                    }
                    (ok, bad)
                })
            })
            .collect();
        let t0 = Instant::now();
        let mut samples = Vec::new();
        let mut last_rx = 0;
        while t0.elapsed() < Duration::from_secs(3) {
            let m = scrape(addr).unwrap();
            let fwd: u64 = names
                .iter()
                .map(|p| {
                    value(
                        &m,
                        &format!("netsched_vswitch_port_forwarded_total{{port=\"{p}\"}}"),
                    )
                })
                .sum();
            // Counters never go back from one scrape to the next.
            let rx: u64 = names
                .iter()
                .map(|p| {
                    value(
                        &m,
                        &format!("netsched_vswitch_port_received_total{{port=\"{p}\"}}"),
                    )
                })
                .sum();
            assert!(rx >= last_rx, "received went back: {last_rx} -> {rx}");
            last_rx = rx;
            samples.push((t0.elapsed(), fwd));
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        let mut scrapes = 0;
        for t in scrapers {
            let (ok, bad) = t.join().unwrap();
            scrapes += ok;
            assert!(bad.is_empty(), "failed scrapes: {bad:?}");
        }
        for (stop, t) in floods {
            stop.store(true, Ordering::Relaxed);
            t.join().unwrap();
        }
        let st = sw.stop().unwrap();
        // After the stop the last publication is final: the scrape is one instant, and every
        // port's identity holds in it exactly (queued is 0: held frames were counted).
        let last = scrape(addr).unwrap();
        for p in &names {
            let v = |f: &str| value(&last, &format!("netsched_vswitch_{f}{{port=\"{p}\"}}"));
            let dropped: u64 = netsched_vswitch::metrics::PORT_DROP_REASONS
                .iter()
                .map(|r| {
                    value(
                        &last,
                        &format!(
                            "netsched_vswitch_port_dropped_total{{port=\"{p}\",reason=\"{r}\"}}"
                        ),
                    )
                })
                .sum();
            assert_eq!(
                v("port_received_total"),
                v("port_forwarded_total") + dropped + v("port_queued"),
                "{p}: identity in the final scrape"
            );
            let sp = st.ports.iter().find(|x| &x.dev == p).unwrap();
            assert_eq!(
                v("port_received_total"),
                sp.received,
                "{p}: scrape = final stats"
            );
        }
        // Forwarding went on in every second of the hammering (3000/s offered; 100 is 30×
        // below that).
        for s in 0..3 {
            let in_slice: Vec<u64> = samples
                .iter()
                .filter(|(t, _)| t.as_secs() == s)
                .map(|&(_, f)| f)
                .collect();
            let moved = in_slice.last().unwrap_or(&0) - in_slice.first().unwrap_or(&0);
            assert!(
                moved >= 100,
                "second {s}: forwarded only {moved} ({samples:?})"
            );
        }
        println!(
            "{scrapes} scrapes by 24 scrapers in 3 s; forwarded {} then {}",
            samples[0].1,
            samples.last().unwrap().1
        );
        assert!(
            scrapes >= 24,
            "every scraper got at least one answer on average: {scrapes}"
        );
        assert!(value(&last, "netsched_vswitch_rounds_total") > 0);
        assert!(value(&last, "netsched_vswitch_publications_total") > 10);
        assert!(st.identity_holds(), "{st:#?}");
    }
    assert_gone(&tag);
}
