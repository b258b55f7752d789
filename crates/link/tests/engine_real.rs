//! Privileged tests of `netsched link` and `netsched shape` on namespaces (root; CI runs them).

use netsched_link::engine::{parse_qdisc, spawn_in_netns, DirConfig, EngineConfig};
use netsched_testbed::{namespaces_with, privileged_test_allowed, Testbed};

fn rtt_ms(tb: &Testbed, ns: &str, dst: &str, count: u32) -> Vec<f64> {
    let out = tb
        .exec(
            ns,
            "ping",
            &["-n", "-c", &count.to_string(), "-i", "0.05", "-W", "2", dst],
        )
        .unwrap();
    out.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn link_engine_forwards_with_delay_and_counts_everything() {
    if !privileged_test_allowed("link_engine_forwards_with_delay_and_counts_everything") {
        return;
    }
    let tag;
    {
        let mut tb = Testbed::new("lnk").unwrap();
        tag = tb.tag().to_string();
        let a = tb.add_ns("a").unwrap();
        let m = tb.add_ns("m").unwrap();
        let b = tb.add_ns("b").unwrap();
        let (ia, ma, mb, ib) = (
            tb.ifname("a"),
            tb.ifname("ma"),
            tb.ifname("mb"),
            tb.ifname("b"),
        );
        tb.veth((&a, &ia, "10.77.0.1/24"), (&m, &ma, "")).unwrap();
        tb.veth((&m, &mb, ""), (&b, &ib, "10.77.0.2/24")).unwrap();
        let cfg = EngineConfig {
            dev_a: ma.clone(),
            dev_b: mb.clone(),
            ab: DirConfig {
                rate_bps: Some(10_000_000),
                delay: 10 * netsched_core::MS,
                qdisc: parse_qdisc("fifo:100").unwrap(),
            },
            ba: DirConfig {
                rate_bps: None,
                delay: 5 * netsched_core::MS,
                qdisc: parse_qdisc("fifo:100").unwrap(),
            },
            pool: 1024,
            delay_line: 1024,
            stats_interval: None,
            busy_poll: false,
        };
        let h = spawn_in_netns(&m, cfg).unwrap();
        let rtts = rtt_ms(&tb, &a, "10.77.0.2", 20);
        let st = h.stop().unwrap();
        assert!(rtts.len() >= 18, "pings lost: {rtts:?}");
        let mut sorted = rtts.clone();
        sorted.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let p50 = sorted[sorted.len() / 2];
        assert!(
            (15.0..19.0).contains(&p50),
            "RTT p50 {p50} ms, expected ≈ 15 ms"
        );
        assert!(st.ab.tx_frames >= 20 && st.ba.tx_frames >= 20, "{st:?}");
        assert!(st.ab.rx_frames >= st.ab.tx_frames);
        assert_eq!(st.ab.queued_frames, 0);
        st.ab.check_accounting().unwrap();
        st.ba.check_accounting().unwrap();
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}

#[test]
fn shape_apply_show_clear_and_restore_on_failure() {
    use netsched_link::shape::{self, ApplyArgs, ShapePlan, Target};
    if !privileged_test_allowed("shape_apply_show_clear_and_restore_on_failure") {
        return;
    }
    let mut tb = Testbed::new("shp").unwrap();
    let a = tb.add_ns("a").unwrap();
    let b = tb.add_ns("b").unwrap();
    let (ia, ib) = (tb.ifname("a"), tb.ifname("b"));
    tb.veth((&a, &ia, "10.78.0.1/24"), (&b, &ib, "10.78.0.2/24"))
        .unwrap();
    let args = |queue: u32| ApplyArgs {
        dev: ia.clone(),
        up: "2mbit".into(),
        down: None,
        ifb: None,
        queue,
        ack_queue: 50,
        headroom: 5.0,
        no_ack_priority: false,
        replace: false,
        dry_run: false,
    };
    let t = Target::in_netns(&a, &ia);
    shape::apply(&t, &ShapePlan::from_args(&args(100)).unwrap(), false).unwrap();

    // An upload from b to a: a's pure ACKs leave through ia and must land in the ACK class.
    let srv = tb
        .spawn(&a, "iperf3", &["-s", "-1", "-p", "5301"], "iperf3 server")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    tb.exec(
        &b,
        "iperf3",
        &[
            "-c",
            "10.78.0.1",
            "-p",
            "5301",
            "-t",
            "2",
            "--connect-timeout",
            "3000",
        ],
    )
    .unwrap();
    tb.stop(srv, std::time::Duration::from_secs(1)).unwrap();
    let st = shape::show(&t).unwrap();
    let ack = st.class(&ia, "1:10").expect("ACK class installed");
    let bulk = st.class(&ia, "1:20").expect("bulk class installed");
    assert_eq!(ack.prio, Some(0));
    assert!(ack.packets > 100, "ACK class saw {} packets", ack.packets);
    assert!(
        bulk.packets < ack.packets / 10,
        "bulk {} vs ack {}",
        bulk.packets,
        ack.packets
    );
    assert!(st
        .qdiscs
        .iter()
        .any(|q| q.kind == "pfifo" && q.handle == "20:" && q.limit == Some(100)));

    // A failing apply (the batch names a device that does not exist) restores the old tree.
    let mut bad = ShapePlan::from_args(&args(77)).unwrap();
    bad.up.dev = "nosuchdev0".into();
    let e = format!("{:#}", shape::apply(&t, &bad, false).unwrap_err());
    assert!(e.contains("nosuchdev0") && e.contains("restored"), "{e}");
    let st = shape::show(&t).unwrap();
    assert!(
        st.qdiscs
            .iter()
            .any(|q| q.kind == "pfifo" && q.handle == "20:" && q.limit == Some(100)),
        "previous tree not restored: {st:?}"
    );

    // A tree netsched did not install is refused, and left as it was.
    shape::clear(&t).unwrap();
    tb.exec(
        &a,
        "tc",
        &[
            "qdisc", "add", "dev", &ia, "root", "tbf", "rate", "1mbit", "burst", "10k", "limit",
            "30k",
        ],
    )
    .unwrap();
    let e = format!(
        "{:#}",
        shape::apply(&t, &ShapePlan::from_args(&args(100)).unwrap(), false).unwrap_err()
    );
    assert!(
        e.contains("not installed by netsched shape") && e.contains("tbf"),
        "{e}"
    );
    assert!(shape::show(&t)
        .unwrap()
        .qdiscs
        .iter()
        .any(|q| q.kind == "tbf"));
    shape::clear(&t).unwrap();
    assert!(!shape::show(&t)
        .unwrap()
        .qdiscs
        .iter()
        .any(|q| q.kind == "tbf" || q.kind == "htb"));

    // Download shaping: ingress redirected to an IFB (created, then removed by clear).
    let ifb = tb.ifname("ifb");
    let mut down = args(100);
    down.down = Some("5mbit".into());
    down.ifb = Some(ifb.clone());
    shape::apply(&t, &ShapePlan::from_args(&down).unwrap(), false).unwrap();
    let st = shape::show(&t).unwrap();
    assert!(
        st.qdiscs.iter().any(|q| q.dev == ia && q.kind == "ingress"),
        "{st:?}"
    );
    let root = st.class(&ifb, "1:1").expect("IFB tree installed");
    assert_eq!(root.rate, "4750Kbit");
    tb.exec(&a, "ping", &["-c", "3", "-i", "0.2", "10.78.0.2"])
        .unwrap();
    let st = shape::show(&t).unwrap();
    let ifb_root = st
        .qdiscs
        .iter()
        .find(|q| q.dev == ifb && q.kind == "htb")
        .unwrap();
    assert!(
        ifb_root.packets >= 3,
        "replies not redirected through the IFB: {ifb_root:?}"
    );
    shape::clear(&t).unwrap();
    assert!(
        tb.exec(&a, "ip", &["link", "show", &ifb]).is_err(),
        "IFB not removed"
    );

    // Unknown interface: a clear error, nothing touched.
    let e = shape::apply(
        &Target::in_netns(&a, "nosuch0"),
        &ShapePlan::from_args(&args(100)).unwrap(),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`nosuch0` does not exist"), "{e}");
}
