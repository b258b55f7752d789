//! Root test of the host switch's live status page in Debian's headless Chromium: the switch
//! (delay_constrained, three guests on tiers 1–3, a packet budget) in a namespace with its
//! `--metrics` listener (`metrics::serve`, as `netsched vswitch` starts it) on this host's
//! loopback; the guests send frames for half a second and stop. Once what the page shows stands
//! still for a second, the page is loaded and, once it has refreshed, every figure it shows
//! must equal what `/metrics` says right after. Had the switch moved while the browser ran (the
//! scrapes before and after differ), the comparison is made again, at most 3 times; IPv6 is off
//! in the namespaces, so nothing but the test sends. Skips with a reason without root or
//! without chromium (fails instead under CI=true); the testbed deletes the namespaces and the
//! switch thread is stopped, also on failure; the browser's profile is removed.
//! With `NETSCHED_STATUS_SCREENSHOT=path.png` the page is saved there.

mod common;

use common::{assert_gone, build, flooder, spawn_switch};
use netsched_metrics::{scrape_samples, Sample};
use netsched_testbed::chromium;
use netsched_testbed::privileged_test_allowed;
use netsched_testbed::status_page::{screenshot_asked, Shown, StatusPage};
use netsched_vswitch::metrics::{Budget, SwitchMetrics};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

const SINK: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];

/// Every `netsched_vswitch_` sample but the packet thread's own bookkeeping, by series.
fn series(addr: SocketAddr) -> HashMap<String, f64> {
    scrape_samples(addr, Duration::from_secs(10))
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.name.starts_with("netsched_vswitch_")
                && !["publications", "wakeups", "budget_lost"]
                    .iter()
                    .any(|n| s.name.contains(n))
        })
        .map(|s: Sample| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (format!("{}{{{}}}", s.name, labels.join(",")), s.value)
        })
        .collect()
}

/// The sum of the series of family `name` whose labels contain `with`.
fn fam(m: &HashMap<String, f64>, name: &str, with: &str) -> f64 {
    let hits: Vec<f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(with))
        .map(|(_, v)| *v)
        .collect();
    assert!(!hits.is_empty(), "{name} {with} not in /metrics");
    hits.iter().sum()
}

/// Every figure the page shows against the series `m` scraped right after it was loaded.
fn check(page: &Shown, m: &HashMap<String, f64>, ports: &[String]) {
    let dom = &page.dom;
    let number = |row: &str, col: &str| page.number(row, col);
    let mut want: Vec<&str> = ports.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(page.rows(), want, "{dom}");
    for p in ports {
        let with = format!("port={p}");
        for (col, name) in [
            ("tier", "netsched_vswitch_port_tier"),
            ("weight", "netsched_vswitch_port_weight"),
            ("received", "netsched_vswitch_port_received_total"),
            ("forwarded", "netsched_vswitch_port_forwarded_total"),
            ("dropped", "netsched_vswitch_port_dropped_total"),
            ("kernel_drops", "netsched_vswitch_port_kernel_drops_total"),
            ("queued", "netsched_vswitch_port_queued"),
            ("delivered", "netsched_vswitch_port_delivered_total"),
            ("passed", "netsched_vswitch_port_max_rounds_passed"),
            ("bound", "netsched_vswitch_port_bound_rounds"),
        ] {
            assert_eq!(number(p, col), fam(m, name, &with), "{p}/{col}");
        }
        assert_eq!(
            number(p, "rate"),
            0.0,
            "{p}: nothing moved between refreshes"
        );
        assert_eq!(
            number(p, "bitrate"),
            0.0,
            "{p}: nothing moved between refreshes"
        );
        let removed = fam(m, "netsched_vswitch_port_removed", &with);
        let word = page.cell(p, "removed");
        assert_eq!(word, if removed == 1.0 { "removed" } else { "present" });
    }
    let fig = |id: &str| page.figure_number(id);
    for (id, name) in [
        ("budget_pps", "netsched_vswitch_budget_packets_per_second"),
        ("busy", "netsched_vswitch_budget_busy_permille"),
        ("rounds", "netsched_vswitch_rounds_total"),
        ("uplink_received", "netsched_vswitch_uplink_received_total"),
        ("uplink_dropped", "netsched_vswitch_uplink_dropped_total"),
        ("macs", "netsched_vswitch_mac_learned"),
    ] {
        assert_eq!(fig(id), fam(m, name, ""), "{id}");
    }
    assert_eq!(page.figure("budget_bps"), "no bit budget");
    // What the guests sent is on the page, not only equal to /metrics.
    assert!(
        ports.iter().all(|p| number(p, "forwarded") > 0.0),
        "a port forwarded nothing:\n{dom}"
    );
}

#[test]
fn vswitch_status_page_shows_what_metrics_says_for_every_port() {
    let test = "vswitch_status_page_shows_what_metrics_says_for_every_port";
    if !privileged_test_allowed(test) {
        return;
    }
    if !chromium::test_allowed(test) {
        return;
    }
    let tag;
    {
        let net = build("vswst", 3).unwrap();
        tag = net.tb.tag().to_string();
        // No IPv6 chatter (router solicitations seconds apart) to move the counters.
        for ns in net.tb.namespaces() {
            net.tb
                .sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
                .unwrap();
        }
        let cfg = net.config(
            "delay_constrained",
            "packet_rate = 5000\nbatch = 8",
            &[(1, "30ms"), (2, "60ms"), (3, "100ms")],
        );
        let names: Vec<String> = net.guests.iter().map(|g| g.1.clone()).collect();
        let mut reg = netsched_metrics::prometheus_client::registry::Registry::default();
        let budget = Budget {
            packet_rate: Some(5000),
            ..Budget::default()
        };
        let m = SwitchMetrics::register(&mut reg, &names, budget);
        let server = netsched_vswitch::metrics::serve("127.0.0.1:0".parse().unwrap(), reg).unwrap();
        let addr = server.addr();
        let sw = spawn_switch(&net.sw, cfg, move |s| s.attach_metrics(m)).unwrap();
        let floods: Vec<_> = (0..3)
            .map(|i| {
                let (g, _, _) = &net.guests[i];
                flooder(g, &net.tb.ifname(&format!("e{i}")), SINK, 200, 1000)
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        for (stop, t) in floods {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            t.join().unwrap();
        }
        let page = StatusPage::new(None, &format!("http://{addr}/"));
        page.wait_until_still("the switch", || series(addr));
        page.compare(
            "the switch",
            || series(addr),
            |m| m.clone(),
            |shown, _, m| check(shown, m, &names),
        );
        if let Some(png) = screenshot_asked() {
            // With traffic, so the rates show.
            let floods: Vec<_> = (0..3)
                .map(|i| {
                    let (g, _, _) = &net.guests[i];
                    let pps = [2000, 1500, 1000][i];
                    flooder(g, &net.tb.ifname(&format!("e{i}")), SINK, 200, pps)
                })
                .collect();
            std::thread::sleep(Duration::from_secs(1));
            page.screenshot(&png).unwrap();
            for (stop, t) in floods {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                t.join().unwrap();
            }
        }
        sw.stop().unwrap();
    }
    assert_gone(&tag);
}
