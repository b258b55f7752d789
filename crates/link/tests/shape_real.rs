//! Privileged tests of `netsched shape` in namespaces (root; CI runs them): it never destroys
//! configuration it did not install (issue #10.2), restores exactly what was there when an
//! apply fails, and says truthfully when it could not.

use netsched_link::shape::{self, snapshot::DeviceConfig, ShapePlan, Target};
use netsched_testbed::{privileged_test_allowed, Testbed};

/// A plan for `dev` at 2 Mbit/s (and 5 Mbit/s down through `ifb`).
fn plan(dev: &str, ifb: Option<&str>) -> ShapePlan {
    ShapePlan::new(
        dev,
        2_000_000,
        ifb.map(|i| (i, 5_000_000)),
        100,
        50,
        5.0,
        true,
    )
    .unwrap()
}

/// One namespace with a veth pair `ia` (in it) — `ib` (in a second namespace).
fn bed(label: &str) -> (Testbed, String, String, String, String) {
    let mut tb = Testbed::new(label).unwrap();
    let a = tb.add_ns("a").unwrap();
    let b = tb.add_ns("b").unwrap();
    let (ia, ib) = (tb.ifname("a"), tb.ifname("b"));
    tb.veth((&a, &ia, "10.78.0.1/24"), (&b, &ib, "10.78.0.2/24"))
        .unwrap();
    (tb, a, b, ia, ib)
}

fn cfg(t: &Target, dev: &str) -> DeviceConfig {
    DeviceConfig::capture(t, dev).unwrap()
}

fn tc(tb: &Testbed, ns: &str, args: &[&str]) {
    tb.exec(ns, "tc", args).unwrap();
}

#[test]
fn shape_apply_show_clear_and_restore_on_failure() {
    if !privileged_test_allowed("shape_apply_show_clear_and_restore_on_failure") {
        return;
    }
    let (mut tb, a, b, ia, _) = bed("shp");
    let t = Target::in_netns(&a, &ia);
    let kernel_default = cfg(&t, &ia);
    shape::apply(&t, &plan(&ia, None), false).unwrap();

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

    // A failing apply (rate 0 fails at the batch's second line, after the root was replaced)
    // restores netsched's previous tree exactly, and says it checked.
    let ours = cfg(&t, &ia);
    let mut bad = plan(&ia, None);
    bad.up.line_bps = 0;
    bad.up.queue = 77;
    let e = format!("{:#}", shape::apply(&t, &bad, false).unwrap_err());
    assert!(
        e.contains("nothing changed") && e.contains("verified"),
        "{e}"
    );
    assert!(e.contains("rate"), "the failing command is named: {e}");
    assert_eq!(cfg(&t, &ia), ours, "previous tree not restored exactly");

    // Re-applying over our own tree is allowed; clear brings back the kernel default.
    shape::apply(&t, &plan(&ia, None), false).unwrap();
    let c = shape::clear(&t).unwrap();
    assert!(c.to_string().contains("removed"), "{c}");
    assert_eq!(cfg(&t, &ia), kernel_default);

    // Download shaping: ingress redirected to an IFB (created, then removed by clear).
    let ifb = tb.ifname("ifb");
    shape::apply(&t, &plan(&ia, Some(&ifb)), false).unwrap();
    let st = shape::show(&t).unwrap();
    assert!(
        st.qdiscs.iter().any(|q| q.dev == ia && q.kind == "ingress"),
        "{st:?}"
    );
    assert_eq!(st.class(&ifb, "1:1").expect("IFB tree").rate, "4750Kbit");
    tb.exec(&a, "ping", &["-c", "3", "-i", "0.2", "10.78.0.2"])
        .unwrap();
    let st = shape::show(&t).unwrap();
    let ifb_root = st
        .qdiscs
        .iter()
        .find(|q| q.dev == ifb && q.kind == "htb")
        .unwrap();
    assert!(ifb_root.packets >= 3, "not redirected: {ifb_root:?}");
    // `shape show --json` prints this value: every number named with its unit.
    let v = serde_json::to_value(&st).unwrap();
    let bad = netsched_util::json_units::violations(&v);
    assert!(bad.is_empty(), "numbers without their unit: {bad:?}\n{v}");
    assert!(ifb_root.sent_bytes > 0, "{ifb_root:?}");
    shape::clear(&t).unwrap();
    assert!(
        tb.exec(&a, "ip", &["link", "show", &ifb]).is_err(),
        "IFB not removed"
    );
    assert_eq!(cfg(&t, &ia), kernel_default);

    // Unknown interface: a clear error, nothing touched.
    let e = shape::apply(
        &Target::in_netns(&a, "nosuch0"),
        &plan("nosuch0", None),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`nosuch0` does not exist"), "{e}");
}

/// Issue #10.2: `apply --ifb v1` where v1 is a veth with a foreign tbf, and --dev has a
/// pfifo_fast root someone added: refused before anything changes; both stay as they were.
#[test]
fn foreign_roots_and_a_non_ifb_device_are_refused_and_kept() {
    if !privileged_test_allowed("foreign_roots_and_a_non_ifb_device_are_refused_and_kept") {
        return;
    }
    let (tb, a, _b, ia, _) = bed("shf");
    let t = Target::in_netns(&a, &ia);
    let v1 = tb.ifname("v1");
    let v2 = tb.ifname("v2");
    tb.exec(
        &a,
        "ip",
        &["link", "add", &v1, "type", "veth", "peer", "name", &v2],
    )
    .unwrap();
    tc(
        &tb,
        &a,
        &[
            "qdisc", "add", "dev", &v1, "root", "tbf", "rate", "1mbit", "burst", "10k", "limit",
            "30k",
        ],
    );
    tc(&tb, &a, &["qdisc", "add", "dev", &ia, "root", "pfifo_fast"]);
    let (dev_before, v1_before) = (cfg(&t, &ia), cfg(&t, &v1));

    // A veth as --ifb: refused (ingress would be redirected out of it and lost).
    let e = format!(
        "{:#}",
        shape::apply(&t, &plan(&ia, Some(&v1)), true).unwrap_err()
    );
    assert!(e.contains("not an IFB") && e.contains("veth"), "{e}");
    assert_eq!(
        (cfg(&t, &ia), cfg(&t, &v1)),
        (dev_before.clone(), v1_before)
    );

    // pfifo_fast added by someone is not the kernel default: refused without --replace.
    let e = format!(
        "{:#}",
        shape::apply(&t, &plan(&ia, None), false).unwrap_err()
    );
    assert!(
        e.contains("not installed by netsched") && e.contains("pfifo_fast"),
        "{e}"
    );
    assert_eq!(cfg(&t, &ia), dev_before);

    // A real IFB carrying someone's tbf: refused too, and kept.
    let ifb = tb.ifname("ifb");
    tb.exec(&a, "ip", &["link", "add", &ifb, "type", "ifb"])
        .unwrap();
    tc(
        &tb,
        &a,
        &[
            "qdisc", "add", "dev", &ifb, "root", "tbf", "rate", "1mbit", "burst", "10k", "limit",
            "30k",
        ],
    );
    tc(&tb, &a, &["qdisc", "del", "dev", &ia, "root"]);
    let (dev_before, ifb_before) = (cfg(&t, &ia), cfg(&t, &ifb));
    let e = format!(
        "{:#}",
        shape::apply(&t, &plan(&ia, Some(&ifb)), false).unwrap_err()
    );
    assert!(e.contains(&ifb) && e.contains("tbf"), "{e}");
    assert_eq!((cfg(&t, &ia), cfg(&t, &ifb)), (dev_before, ifb_before));
}

/// A failing apply with download shaping restores the kernel default on --dev (no ingress
/// left), deletes the IFB it created, and says it verified; with --replace over someone's
/// tbf it says truthfully that the tbf could not be restored.
#[test]
fn failing_apply_restores_and_reports_what_it_could_not() {
    if !privileged_test_allowed("failing_apply_restores_and_reports_what_it_could_not") {
        return;
    }
    let (tb, a, _b, ia, _) = bed("shr");
    let t = Target::in_netns(&a, &ia);
    let ifb = tb.ifname("ifb");
    let before = cfg(&t, &ia);
    let mut bad = plan(&ia, Some(&ifb));
    bad.down.as_mut().unwrap().line_bps = 0; // fails in the IFB tree, after dev's tree and ingress
    let e = format!("{:#}", shape::apply(&t, &bad, false).unwrap_err());
    assert!(
        e.contains("nothing changed") && e.contains("verified"),
        "{e}"
    );
    assert_eq!(cfg(&t, &ia), before);
    assert!(
        !cfg(&t, &ifb).exists,
        "the IFB apply created was left behind"
    );

    // --replace over someone's tbf, then a failure: the tbf is gone and the error says so.
    tc(
        &tb,
        &a,
        &[
            "qdisc", "add", "dev", &ia, "root", "tbf", "rate", "1mbit", "burst", "10k", "limit",
            "30k",
        ],
    );
    let mut bad = plan(&ia, None);
    bad.up.line_bps = 0;
    let e = format!("{:#}", shape::apply(&t, &bad, true).unwrap_err());
    assert!(
        e.contains("could NOT be fully restored") && e.contains("tbf"),
        "{e}"
    );
}

/// The kernel's default mq root (handle 0:, unaddressable by tc) is accepted and clear brings
/// it back exactly; an mq root someone installed to put a custom child under it (the usual
/// `root handle 1: mq` + `parent 1:1 ...`) is refused without --replace and kept.
#[test]
fn mq_root_with_a_custom_child_is_not_replaced() {
    if !privileged_test_allowed("mq_root_with_a_custom_child_is_not_replaced") {
        return;
    }
    let (tb, a, _b, _ia, _) = bed("shm");
    // A 4-queue IFB gets the kernel's default mq root with one default child per queue.
    let mq = tb.ifname("mq");
    tb.exec(
        &a,
        "ip",
        &["link", "add", &mq, "numtxqueues", "4", "type", "ifb"],
    )
    .unwrap();
    tb.exec(&a, "ip", &["link", "set", &mq, "up"]).unwrap();
    let t = Target::in_netns(&a, &mq);
    let default = cfg(&t, &mq);
    assert!(
        default.egress.qdiscs.iter().any(|q| q["kind"] == "mq"),
        "expected a default mq root: {default:?}"
    );
    shape::apply(&t, &plan(&mq, None), false).unwrap();
    shape::clear(&t).unwrap();
    assert_eq!(
        cfg(&t, &mq),
        default,
        "clear did not bring back the default mq"
    );

    tc(
        &tb,
        &a,
        &["qdisc", "replace", "dev", &mq, "root", "handle", "1:", "mq"],
    );
    tc(
        &tb,
        &a,
        &[
            "qdisc", "replace", "dev", &mq, "parent", "1:1", "pfifo", "limit", "7",
        ],
    );
    let custom = cfg(&t, &mq);
    let e = format!(
        "{:#}",
        shape::apply(&t, &plan(&mq, None), false).unwrap_err()
    );
    assert!(
        e.contains("not installed by netsched") && e.contains("pfifo"),
        "{e}"
    );
    assert_eq!(cfg(&t, &mq), custom);
}

/// `clear` on a device netsched never shaped touches nothing (a foreign root and ingress with
/// a filter stay); after apply, a tree someone changed is left, and the error says so.
#[test]
fn clear_touches_only_what_netsched_installed() {
    if !privileged_test_allowed("clear_touches_only_what_netsched_installed") {
        return;
    }
    let (tb, a, _b, ia, _) = bed("shc");
    let t = Target::in_netns(&a, &ia);
    tc(
        &tb,
        &a,
        &[
            "qdisc", "add", "dev", &ia, "root", "tbf", "rate", "1mbit", "burst", "10k", "limit",
            "30k",
        ],
    );
    tc(
        &tb,
        &a,
        &["qdisc", "add", "dev", &ia, "handle", "ffff:", "ingress"],
    );
    tc(
        &tb,
        &a,
        &[
            "filter", "add", "dev", &ia, "parent", "ffff:", "protocol", "all", "prio", "5", "u32",
            "match", "u32", "0", "0", "action", "mirred", "egress", "mirror", "dev", "lo",
        ],
    );
    let foreign = cfg(&t, &ia);
    let c = shape::clear(&t).unwrap();
    assert!(c.to_string().contains("nothing changed"), "{c}");
    assert_eq!(cfg(&t, &ia), foreign);

    // Upload shaping only leaves someone's ingress alone, and clear too.
    tc(&tb, &a, &["qdisc", "del", "dev", &ia, "root"]);
    shape::apply(&t, &plan(&ia, None), false).unwrap();
    assert_eq!(cfg(&t, &ia).ingress, foreign.ingress);
    // Someone changes our tree: clear leaves it and says why.
    tc(
        &tb,
        &a,
        &[
            "qdisc", "change", "dev", &ia, "parent", "1:20", "handle", "20:", "pfifo", "limit", "5",
        ],
    );
    let changed = cfg(&t, &ia);
    let e = format!("{:#}", shape::clear(&t).unwrap_err());
    assert!(
        e.contains("left as is") && e.contains("changed since"),
        "{e}"
    );
    assert_eq!(cfg(&t, &ia), changed);
}

/// The record of a namespace that no longer exists is removed (it once stayed behind in
/// /run/netsched/shape forever).
#[test]
fn records_of_dead_namespaces_are_removed() {
    if !privileged_test_allowed("records_of_dead_namespaces_are_removed") {
        return;
    }
    let path;
    {
        let (_tb, a, _b, ia, _) = bed("shd");
        let t = Target::in_netns(&a, &ia);
        shape::apply(&t, &plan(&ia, None), false).unwrap();
        let (cookie, _) = t.netns_id().unwrap();
        path = std::path::PathBuf::from(shape::state::STATE_DIR)
            .join(format!("net{cookie}-{ia}.json"));
        assert!(path.exists(), "{} not written", path.display());
        // The testbed is dropped without `clear`: the namespace dies with our tree in it.
    }
    // Any later apply/show/clear prunes; call the pruning step directly.
    shape::state::prune_dead();
    assert!(!path.exists(), "{} left behind", path.display());
}
