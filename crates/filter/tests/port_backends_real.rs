//! The filter on the `xdp` port backend (root; skipped with a reason otherwise, or when the
//! build has no XDP program): sender → filter → receiver in namespaces the test makes, the
//! input and output read and written through AF_XDP sockets, every frame accounted, the
//! kernel's `XDP_STATISTICS` in the stats, and the XDP programs gone after the stop.

mod common;

use common::{
    assert_gone, build, check_order, config, receiver, send, stream, tables, DROP_PORT_9, FLOWS,
};
use netsched_filter::engine::spawn_in_netns;
use netsched_filter::verdict::DropReason;
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use netsched_testbed::xdp_test_allowed;
use std::time::Duration;

#[test]
fn the_filter_forwards_and_accounts_every_frame_on_af_xdp() {
    let test = "the_filter_forwards_and_accounts_every_frame_on_af_xdp";
    if !xdp_test_allowed(test) {
        return;
    }
    let tag;
    {
        let net = build("fltxdp").unwrap();
        tag = net.tb.tag().to_string();
        // No IPv6 neighbour traffic: every frame on the input is one the test sent.
        for ns in net.tb.namespaces() {
            net.tb
                .sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
                .unwrap();
        }
        let mut cfg = config(&net, "fcfs");
        cfg.port = PortOptions {
            backend: PortBackend::Xdp,
            ring: RingConfig {
                rx_frames: 1024,
                tx_frames: 0,
            },
        };
        let per_flow = 250;
        let rx = receiver(&net.rcv, &net.r0).unwrap();
        let f = spawn_in_netns(&net.flt, cfg, tables(DROP_PORT_9, 1), None).unwrap();
        send(
            &net.snd,
            &net.s0,
            stream(per_flow),
            32,
            Duration::from_millis(2),
        )
        .unwrap();
        rx.wait_for(per_flow as u64 * (FLOWS as u64 - 1), Duration::from_secs(3));
        let running = net
            .tb
            .exec(&net.flt, "ip", &["link", "show", &net.fin])
            .unwrap();
        let st = f.stop().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let (got, rx_drops) = rx.stop().unwrap();
        assert!(running.contains("prog/xdp"), "running: {running}");
        for dev in [&net.fin, &net.fout] {
            let shown = net.tb.exec(&net.flt, "ip", &["link", "show", dev]).unwrap();
            assert!(!shown.contains("prog/xdp"), "after the stop: {shown}");
        }
        assert_eq!(st.port, PortBackend::Xdp, "{st:#?}");
        assert!(st.ring_bytes > 0, "{st:#?}");
        // Every frame taken is forwarded or dropped by the rule, nothing left inside.
        assert!(st.identity_holds && st.identity_failures == 0, "{st:#?}");
        assert_eq!(st.queued, 0);
        assert_eq!(st.received, st.forwarded + st.dropped);
        for (reason, n) in &st.drops {
            assert_eq!(*reason, DropReason::Rule, "{n} dropped for {reason:?}");
        }
        // Every receive loss the filter counted is one the input socket reported, and the
        // engine never queued an invalid descriptor.
        let [xin, xout] = st.xdp_drops;
        assert!(st.kernel_drops <= xin.rx_lost(), "{st:#?}");
        assert_eq!(xin.tx_invalid_descs + xout.tx_invalid_descs, 0, "{st:#?}");
        // Every frame sent is accounted: arrived in flow order, dropped by the rule, or
        // counted lost in a kernel (the filter's input socket or the receiver's).
        let counts = check_order(&got);
        let sent = per_flow as u64 * FLOWS as u64;
        let arrived: u64 = counts.values().map(|&c| c as u64).sum();
        let rule = st.drops.get(&DropReason::Rule).copied().unwrap_or(0);
        assert!(
            st.forwarded >= arrived && st.forwarded <= arrived + rx_drops,
            "{} forwarded, {arrived} arrived, {rx_drops} lost at the receiver",
            st.forwarded
        );
        assert!(
            arrived + rule + st.kernel_drops + rx_drops >= sent
                && arrived <= sent - per_flow as u64,
            "{arrived} arrived, {rule} by rule, {} + {rx_drops} lost in kernels, of {sent}",
            st.kernel_drops
        );
        assert!(st.received <= sent, "{st:#?}");
        // The stats line keeps the JSON unit rule (`xdp_drops` is a map of counts).
        let v = serde_json::to_value(&st).unwrap();
        let bad = netsched_util::json_units::violations(&v);
        assert!(bad.is_empty(), "{bad:?}");
        eprintln!(
            "xdp: received {} forwarded {} dropped {} kernel {} xdp in {xin:?} out {xout:?}",
            st.received, st.forwarded, st.dropped, st.kernel_drops
        );
    }
    assert_gone(&tag);
}
