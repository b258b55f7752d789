//! Root test of the packet filter's live status page in Debian's headless Chromium: the filter
//! (four workers, a rule dropping UDP port 9) between a sender and a receiver namespace with
//! its `--metrics` listener (`metrics::serve`, as `netsched filter` starts it) on this host's
//! loopback; the test stream (eight flows, one of them dropped by the rule) goes through and
//! stops. Once what the page shows stands still for a second, the page is loaded and, once it
//! has refreshed, every figure it shows must equal what `/metrics` says right after (within the
//! page's rounding: 3 decimals of ms below a second, of s above). Had the filter moved while
//! the browser ran, the comparison is made again, at most 3 times (IPv6 is off in the
//! namespaces, so nothing but the test sends). Skips with a reason without root or without
//! chromium (fails instead under CI=true); the testbed deletes the namespaces and the filter
//! thread is stopped, also on failure; the browser's profile is removed.
//! With `NETSCHED_STATUS_SCREENSHOT=path.png` the page is saved there.

mod common;

use common::{assert_gone, build, receiver, send, stream, FLOWS};
use netsched_filter::classifier::build_classifier;
use netsched_filter::engine::Engine;
use netsched_filter::rules::RuleSet;
use netsched_filter::signatures::Signatures;
use netsched_filter::work::Tables;
use netsched_metrics::{parse_exposition, scrape, Latest, Sample};
use netsched_testbed::chromium;
use netsched_testbed::status_page::{screenshot_asked, Shown, StatusPage};
use netsched_testbed::{privileged_test_allowed, NetnsThread};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const DROP_PORT_9: &str = "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n";

fn tables() -> Arc<Tables> {
    Arc::new(Tables {
        classifier: build_classifier(
            RuleSet::from_toml_str(DROP_PORT_9, "test rules").unwrap(),
            netsched_core::classify::acl::ClassifierKind::TupleMerge,
            &Default::default(),
        )
        .unwrap(),
        signatures: Signatures::parse("NEVER-IN-THE-TEST-STREAM\n", "test sigs").unwrap(),
        generation: 1,
    })
}

fn samples(addr: SocketAddr) -> Vec<Sample> {
    let (code, body) = scrape(addr, Duration::from_secs(10)).unwrap();
    assert_eq!(code, 200, "{body}");
    parse_exposition(&body).unwrap()
}

/// The series the page shows, by name and labels (not the copy's own age and count).
fn still(s: &[Sample]) -> HashMap<String, f64> {
    s.iter()
        // An idle AF_XDP socket's TX ring is found empty at every poll: an event count that
        // moves while nothing else does; the process's own CPU time and memory, and the
        // listener's count of requests, move with every scrape.
        .filter(|s| {
            !s.name.contains("snapshot")
                && !s.name.contains("xdp_ring_empty")
                && !s.name.starts_with("process_")
                && !s.name.starts_with("netsched_metrics_listener_")
        })
        .map(|s| {
            let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            (format!("{}{{{}}}", s.name, labels.join(",")), s.value)
        })
        .collect()
}

fn fam(m: &[Sample], name: &str, label: Option<(&str, &str)>) -> f64 {
    let hits: Vec<f64> = m
        .iter()
        .filter(|s| s.name == name && label.is_none_or(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .collect();
    assert!(!hits.is_empty(), "{name} {label:?} not in /metrics");
    hits.iter().sum()
}

/// Every figure the page shows against the scrape `after` it was loaded.
fn check(page: &Shown, after: &[Sample]) {
    let dom = &page.dom;
    let number = |row: &str, col: &str| page.number(row, col);
    let workers: Vec<&str> = after
        .iter()
        .filter(|s| s.name == "netsched_filter_worker_blocks_total")
        .filter_map(|s| s.label("worker"))
        .collect();
    assert_eq!(workers.len(), 4, "{after:?}");
    for w in &workers {
        let l = Some(("worker", *w));
        for (col, name) in [
            ("blocks", "netsched_filter_worker_blocks_total"),
            (
                "handoff_waits",
                "netsched_filter_worker_handoff_waits_total",
            ),
            ("panics", "netsched_filter_worker_panics_total"),
        ] {
            assert_eq!(number(w, col), fam(after, name, l), "worker {w}/{col}");
        }
        for (col, name) in [
            ("busy", "netsched_filter_worker_busy_ns_total"),
            ("idle", "netsched_filter_worker_idle_ns_total"),
        ] {
            let exact = fam(after, name, l) / 1e9;
            let v = number(w, col);
            // Shown in ms with 3 decimals below a second, in s with 3 decimals above.
            let half_step = if exact >= 1.0 { 0.5e-3 } else { 0.5e-6 };
            assert!(
                (v - exact).abs() <= half_step + exact * 1e-12,
                "worker {w}/{col}: {v} {exact}"
            );
        }
        assert_eq!(number(w, "busy_share"), 0.0, "worker {w}: nothing moved");
    }
    let reasons: Vec<&str> = after
        .iter()
        .filter(|s| s.name == "netsched_filter_dropped_total")
        .filter_map(|s| s.label("reason"))
        .collect();
    assert!(!reasons.is_empty());
    for r in &reasons {
        let exact = fam(after, "netsched_filter_dropped_total", Some(("reason", *r)));
        assert_eq!(number(r, "frames"), exact, "drop {r}");
        assert_eq!(number(r, "rate"), 0.0, "drop {r}: nothing moved");
    }
    let mut want: Vec<&str> = workers.iter().chain(&reasons).copied().collect();
    want.sort();
    assert_eq!(page.rows(), want, "{dom}");
    let fig = |id: &str| page.figure_number(id);
    for (id, name) in [
        ("received", "netsched_filter_received_total"),
        ("forwarded", "netsched_filter_forwarded_total"),
        ("queued", "netsched_filter_queued"),
        ("dropped", "netsched_filter_dropped_total"),
        ("kernel_drops", "netsched_filter_kernel_drops_total"),
        ("identity", "netsched_filter_identity_failures_total"),
        ("marked", "netsched_filter_signature_marked_total"),
        ("generation", "netsched_filter_rules_generation"),
        (
            "order_after",
            "netsched_filter_order_violations_after_total",
        ),
    ] {
        assert_eq!(fig(id), fam(after, name, None), "{id}");
    }
    assert_eq!(fig("rate"), 0.0);
    // What the stream made: frames forwarded and the rule's drops, on the page.
    assert!(
        fig("forwarded") > 0.0 && number("rule", "frames") > 0.0,
        "{dom}"
    );
}

/// The filter on its own thread in namespace `ns`, publishing to `latest` (as `netsched
/// filter --metrics` does).
fn spawn(
    net: &common::Net,
    latest: Arc<Latest<netsched_filter::stats::FilterStats>>,
) -> NetnsThread<()> {
    let cfg = common::config(net, "work_stealing");
    NetnsThread::spawn(
        "filter",
        "filter-status".to_string(),
        &net.flt,
        move || {
            let mut e = Engine::open(&cfg, tables())?;
            e.attach_metrics(latest);
            Ok(e)
        },
        |mut e, stop| {
            e.run(stop, None, None, &mut |_| {});
            e.finish();
            Ok(())
        },
    )
    .unwrap()
}

#[test]
fn filter_status_page_shows_what_metrics_says_for_workers_and_drops() {
    let test = "filter_status_page_shows_what_metrics_says_for_workers_and_drops";
    if !privileged_test_allowed(test) {
        return;
    }
    if !chromium::test_allowed(test) {
        return;
    }
    let tag;
    {
        let net = build("fltst").unwrap();
        tag = net.tb.tag().to_string();
        for ns in net.tb.namespaces() {
            net.tb
                .sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
                .unwrap();
        }
        let latest = Arc::new(Latest::new());
        let server = netsched_filter::metrics::serve(
            "127.0.0.1:0".parse().unwrap(),
            latest.clone(),
            [net.fin.clone(), net.fout.clone()],
        )
        .unwrap();
        let addr = server.addr();
        let rx = receiver(&net.rcv, &net.r0).unwrap();
        let filter = spawn(&net, latest);
        let per_flow = 100;
        send(
            &net.snd,
            &net.s0,
            stream(per_flow),
            32,
            Duration::from_millis(2),
        )
        .unwrap();
        rx.wait_for(per_flow as u64 * (FLOWS as u64 - 1), Duration::from_secs(3));
        let page = StatusPage::new(None, &format!("http://{addr}/"));
        page.wait_until_still("the filter", || still(&samples(addr)));
        page.compare(
            "the filter",
            || samples(addr),
            |s| still(s),
            |shown, _, after| check(shown, after),
        );
        if let Some(png) = screenshot_asked() {
            // With traffic, so the rates show.
            let (snd, s0) = (net.snd.clone(), net.s0.clone());
            let sender = std::thread::spawn(move || {
                send(&snd, &s0, stream(2000), 32, Duration::from_millis(2))
            });
            std::thread::sleep(Duration::from_millis(500));
            let shot = page.screenshot(&png);
            sender.join().unwrap().unwrap();
            shot.unwrap();
        }
        filter.stop().unwrap();
        let _ = rx.stop();
    }
    assert_gone(&tag);
}
