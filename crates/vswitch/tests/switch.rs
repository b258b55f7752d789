//! The switch on real interfaces (root; skipped with a reason otherwise). Every test builds
//! its own namespaces with unique names and checks they are gone afterwards. Assertions keep
//! wide margins: the machine is a loaded 2-core box.

mod common;

use common::{assert_gone, build, flooder, ping, EXT_IP};
use netsched_sys::port::{FramePool, Port, Rx, BATCH};
use netsched_sys::tap::Tap;
use netsched_testbed::privileged_test_allowed;
use netsched_vswitch::spawn_in_netns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn forwards_both_ways_and_every_port_balances() {
    if !privileged_test_allowed("forwards_both_ways_and_every_port_balances") {
        return;
    }
    let tag;
    {
        let net = build("vswfw", 3).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config(
            "delay_constrained",
            "packet_rate = 20000\nbatch = 8",
            &[(1, "30ms"), (2, "60ms"), (3, "100ms")],
        );
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        // Guest-initiated (guest → uplink → back by learned MAC) ...
        for (ns, _, _) in &net.guests {
            let (tx, rx) = ping(ns, EXT_IP, 5, "0.1");
            assert_eq!(tx, 5);
            assert!(rx >= 3, "{ns}: {rx}/5 replies");
        }
        // ... and uplink-initiated (ARP flooded to every guest, reply unicast back).
        for (_, _, ip) in &net.guests {
            let (_, rx) = ping(&net.ext, ip, 5, "0.1");
            assert!(rx >= 3, "ext -> {ip}: {rx}/5 replies");
        }
        let st = sw.stop().unwrap();
        assert!(st.identity_holds(), "{st:#?}");
        for p in &st.ports {
            assert_eq!(p.queued, 0, "{p:?}");
            assert!(p.forwarded >= 6, "{p:?}"); // 3+ requests and 3+ replies at least
            assert!(p.delivered >= 6, "{p:?}");
            assert!(!p.removed);
        }
        assert!(st.uplink.delivered_unicast >= 18, "{:?}", st.uplink);
        assert!(st.uplink.flooded >= 1, "{:?}", st.uplink);
        assert!(st.mac_learned >= 3);
    }
    assert_gone(&tag);
}

/// A guest that floods (10× the budget, plus frames larger than a slot) fills only its own
/// vif queue: the other guest's traffic is not pushed out, and the pool (memory) is fixed.
#[test]
fn a_flooding_guest_cannot_push_out_another_ports_traffic() {
    if !privileged_test_allowed("a_flooding_guest_cannot_push_out_another_ports_traffic") {
        return;
    }
    for (discipline, flooder_tier, victim_tier) in [("drr", 1, 1), ("delay_constrained", 1, 3)] {
        let tag;
        {
            let net = build("vswfl", 2).unwrap();
            tag = net.tb.tag().to_string();
            // Guest 0 floods; it may send frames up to 9000 B (over a 2 KiB slot).
            let (g0, p0, _) = &net.guests[0];
            let e0 = net.tb.ifname("e0");
            net.tb
                .exec(g0, "ip", &["link", "set", &e0, "mtu", "9000"])
                .unwrap();
            net.tb
                .exec(&net.sw, "ip", &["link", "set", p0, "mtu", "9000"])
                .unwrap();
            let cfg = net.config(
                discipline,
                "packet_rate = 2000\nbatch = 8",
                &[(flooder_tier, "30ms"), (victim_tier, "100ms")],
            );
            let sw = spawn_in_netns(&net.sw, cfg).unwrap();
            let dst = [2, 0, 0, 0, 0, 0x42];
            let (stop_a, flood) = flooder(g0, &e0, dst, 64, 20_000);
            let (stop_b, big) = flooder(g0, &e0, dst, 3000, 200);
            std::thread::sleep(Duration::from_millis(300));
            let (tx, rx) = ping(&net.guests[1].0, EXT_IP, 50, "0.02");
            stop_a.store(true, Ordering::Relaxed);
            stop_b.store(true, Ordering::Relaxed);
            let sent = flood.join().unwrap();
            let sent_big = big.join().unwrap();
            let st = sw.stop().unwrap();
            assert!(st.identity_holds(), "{st:#?}");
            let (a, b) = (&st.ports[0], &st.ports[1]);
            assert!(
                sent > 4000 && sent_big > 20,
                "flood too weak: {sent} / {sent_big}"
            );
            assert!(a.dropped_queue_full > 1000, "{discipline}: {a:?}");
            assert!(a.dropped_oversize > 10, "{discipline}: {a:?}");
            assert_eq!(
                b.dropped_queue_full, 0,
                "{discipline}: victim lost queue places: {b:?}"
            );
            assert!(rx * 10 >= tx * 8, "{discipline}: victim {rx}/{tx} replies");
            assert!(b.forwarded >= rx as u64, "{b:?}");
        }
        assert_gone(&tag);
    }
}

/// TAP port: the test plays the VM monitor (as QEMU `-netdev tap` does), relaying frames
/// between the TAP fd and a veth whose far end is a guest namespace that pings the uplink.
#[test]
fn a_tap_port_forwards_for_a_guest_namespace_behind_it() {
    if !privileged_test_allowed("a_tap_port_forwards_for_a_guest_namespace_behind_it") {
        return;
    }
    let tag;
    {
        let mut net = build("vswtp", 1).unwrap();
        tag = net.tb.tag().to_string();
        let g = net.tb.add_ns("gt").unwrap();
        let relay_if = net.tb.ifname("rv");
        let sw_ns = net.sw.clone();
        net.tb
            .veth(
                (&sw_ns, &relay_if, ""),
                (&g, &net.tb.ifname("ge"), "10.77.0.50/24"),
            )
            .unwrap();
        let tap_name = net.tb.ifname("tap");
        // The relay thread: creates the TAP in the switch namespace and relays until stopped.
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let relay = {
            let (stop, ns, tap_name, relay_if) = (
                Arc::clone(&stop),
                sw_ns.clone(),
                tap_name.clone(),
                relay_if.clone(),
            );
            std::thread::spawn(move || -> (u64, u64) {
                netsched_testbed::enter_netns(&ns).unwrap();
                let tap = Tap::open(&tap_name).unwrap();
                netsched_testbed::run("ip", &["link", "set", &tap_name, "up"]).unwrap();
                let veth = Port::open(&relay_if).unwrap();
                ready_tx.send(()).unwrap();
                let mut pool = FramePool::new(64);
                let mut buf = vec![0u8; 4096];
                let (mut to_tap, mut from_tap) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    // guest → TAP fd (the switch reads it from the TAP interface)
                    let mut ev = [Rx::Oversize { len: 0 }; BATCH];
                    let (_, k) = veth.recv(&mut pool, &mut ev);
                    for e in &ev[..k] {
                        if let Rx::Frame { slot, len } = *e {
                            if tap.write(pool.data(slot, len)).is_ok() {
                                to_tap += 1;
                            }
                            pool.release(slot);
                        }
                    }
                    // switch → TAP interface → fd → guest
                    if tap.wait_readable(1).unwrap_or(false) {
                        if let Ok(n) = tap.read(&mut buf) {
                            if veth.send_frame(&buf[..n]).is_ok_and(|r| r == n) {
                                from_tap += 1;
                            }
                        }
                    }
                }
                (to_tap, from_tap)
            })
        };
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("relay ready");
        let mut cfg = net.config("strict_priority", "", &[(1, "30ms")]);
        cfg.ports.push(netsched_vswitch::PortConfig {
            dev: tap_name.clone(),
            tier: 2,
            weight: 1,
            bound: 60_000_000,
            bitmap_len: None,
            queue_limit: None,
        });
        let sw = spawn_in_netns(&sw_ns, cfg).unwrap();
        let (tx, rx) = ping(&g, EXT_IP, 5, "0.1");
        let st = sw.stop().unwrap();
        stop.store(true, Ordering::Relaxed);
        let (to_tap, from_tap) = relay.join().unwrap();
        assert_eq!(tx, 5);
        assert!(rx >= 3, "through the TAP port: {rx}/5 replies");
        let t = &st.ports[1];
        assert_eq!(t.dev, tap_name);
        assert!(t.forwarded >= 3 && t.delivered >= 3, "{t:?}");
        assert!(to_tap >= 3 && from_tap >= 3, "relay {to_tap}/{from_tap}");
        assert!(st.identity_holds(), "{st:#?}");
    }
    assert_gone(&tag);
}

/// A port whose interface disappears is closed and counted; the others keep being served.
#[test]
fn a_vanished_port_is_removed_and_the_others_keep_forwarding() {
    if !privileged_test_allowed("a_vanished_port_is_removed_and_the_others_keep_forwarding") {
        return;
    }
    let tag;
    {
        let net = build("vswrm", 3).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config("wf2q_plus", "packet_rate = 20000", &[(1, "30ms")]);
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        for (ns, _, _) in &net.guests {
            assert!(ping(ns, EXT_IP, 3, "0.1").1 >= 1, "{ns} before removal");
        }
        net.tb
            .exec(&net.sw, "ip", &["link", "del", &net.guests[1].1])
            .unwrap();
        std::thread::sleep(Duration::from_millis(600)); // > LIVENESS_EVERY, with margin
        for i in [0, 2] {
            let (_, rx) = ping(&net.guests[i].0, EXT_IP, 5, "0.1");
            assert!(rx >= 3, "guest {i} after removal: {rx}/5");
        }
        let st = sw.stop().unwrap();
        assert!(st.ports[1].removed, "{:?}", st.ports[1]);
        assert!(!st.ports[0].removed && !st.ports[2].removed);
        assert!(st.identity_holds(), "{st:#?}");
    }
    assert_gone(&tag);
}

/// The uplink deleted under a running switch: it stops by itself within seconds (its liveness
/// check looks every `LIVENESS_EVERY`) with an error naming the uplink; no spinning, nothing
/// left running.
#[test]
fn a_vanished_uplink_stops_the_switch_with_its_name() {
    if !privileged_test_allowed("a_vanished_uplink_stops_the_switch_with_its_name") {
        return;
    }
    let tag;
    {
        let net = build("vswul", 1).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config("delay_constrained", "packet_rate = 20000", &[(1, "30ms")]);
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        assert!(
            ping(&net.guests[0].0, EXT_IP, 3, "0.1").1 >= 1,
            "before removal"
        );
        net.tb
            .exec(&net.sw, "ip", &["link", "del", &net.uplink])
            .unwrap();
        // Generous: the check runs every 200 ms; a loaded machine may be slow to schedule.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sw.is_running() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !sw.is_running(),
            "the switch still runs 10 s after its uplink went"
        );
        let e = format!("{:#}", sw.stop().expect_err("an error, not stats"));
        assert!(e.contains(&net.uplink) && e.contains("disappeared"), "{e}");
    }
    assert_gone(&tag);
}

/// Bad input to the spawner: an interface that does not exist is a clear error, and nothing
/// keeps running.
#[test]
fn a_missing_interface_is_a_clear_error() {
    if !privileged_test_allowed("a_missing_interface_is_a_clear_error") {
        return;
    }
    let tag;
    {
        let net = build("vswms", 1).unwrap();
        tag = net.tb.tag().to_string();
        let mut cfg = net.config("edf", "", &[(1, "30ms")]);
        cfg.ports[0].dev = "nsx-nosuch0".into();
        let e = format!("{:#}", spawn_in_netns(&net.sw, cfg).err().unwrap());
        assert!(
            e.contains("nsx-nosuch0") && e.contains("does not exist"),
            "{e}"
        );
    }
    assert_gone(&tag);
}

/// The forwarding budget bounds what leaves on the uplink: 4000 packets/s on, off half the
/// time → at most ~2000/s, whatever the guests offer (upper bound with 10 % + 1 slice of
/// margin; the lower bound is loose, the machine is shared).
#[test]
fn the_budget_bounds_forwarding_with_its_off_periods() {
    if !privileged_test_allowed("the_budget_bounds_forwarding_with_its_off_periods") {
        return;
    }
    let tag;
    {
        let net = build("vswbd", 2).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config(
            "wf2q_plus",
            "packet_rate = 4000\nbudget_busy = 0.5\nbudget_slice = \"10ms\"",
            &[(1, "30ms")],
        );
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        let t = std::time::Instant::now();
        let dst = [2, 0, 0, 0, 0, 0x42];
        let floods: Vec<_> = (0..2)
            .map(|i| {
                let (g, _, _) = &net.guests[i];
                flooder(g, &net.tb.ifname(&format!("e{i}")), dst, 64, 10_000)
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        for (stop, _) in &floods {
            stop.store(true, Ordering::Relaxed);
        }
        for (_, th) in floods {
            th.join().unwrap();
        }
        let st = sw.stop().unwrap();
        let secs = t.elapsed().as_secs_f64();
        let fwd: u64 = st.ports.iter().map(|p| p.forwarded).sum();
        eprintln!("forwarded {fwd} in {secs:.2}s ({:.0}/s)", fwd as f64 / secs);
        let max = 2000.0 * secs * 1.1 + 40.0;
        assert!(
            (fwd as f64) <= max,
            "forwarded {fwd} in {secs:.2}s, above {max:.0}"
        );
        assert!(
            fwd as f64 >= 2000.0 * secs * 0.3,
            "forwarded only {fwd} in {secs:.2}s"
        );
        assert!(st.ports.iter().all(|p| p.dropped_queue_full > 0), "{st:#?}");
        assert!(st.identity_holds(), "{st:#?}");
    }
    assert_gone(&tag);
}

/// The adaptive polling window (`busy_poll`, default 200 µs) ends: after traffic stops the
/// switch sleeps in `poll` again. A switch that kept spinning would use its whole share of a
/// CPU — on a loaded 2-core machine at least a quarter of the 3 idle seconds (0.75 s); a
/// sleeping one uses milliseconds. The bound, 0.3 s over the whole run, sits between.
#[test]
fn the_switch_sleeps_again_when_traffic_stops() {
    if !privileged_test_allowed("the_switch_sleeps_again_when_traffic_stops") {
        return;
    }
    let tag;
    {
        let net = build("vswidle", 1).unwrap();
        tag = net.tb.tag().to_string();
        let cfg = net.config("strict_priority", "busy_poll = \"1ms\"", &[(1, "30ms")]);
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        // Traffic first (each frame opens a polling window), then 3 s with none.
        let (_, rx) = ping(&net.guests[0].0, EXT_IP, 20, "0.01");
        assert!(rx >= 15, "{rx}/20 replies");
        std::thread::sleep(Duration::from_secs(3));
        let st = sw.stop().unwrap();
        let cpu_s = st.cpu_ns as f64 / 1e9;
        eprintln!("switch thread CPU over the run: {cpu_s:.3} s");
        assert!(
            cpu_s < 0.3,
            "the switch used {cpu_s:.3} s of CPU in a run that was idle for 3 s: it kept spinning"
        );
        assert!(st.identity_holds(), "{st:#?}");
    }
    assert_gone(&tag);
}

/// Every port backend forwards both ways with every port balanced, and the switch says which
/// one ran and what its rings cost.
#[test]
fn each_port_backend_forwards_and_balances() {
    if !privileged_test_allowed("each_port_backend_forwards_and_balances") {
        return;
    }
    let xdp = netsched_sys::xdp_port::unavailable().is_none();
    if !xdp {
        eprintln!(
            "each_port_backend_forwards_and_balances: xdp skipped (this build has no XDP program)"
        );
    }
    let backends = [
        ("xdp", "vswbkx"),
        ("tpacket", "vswbkr"),
        ("packet", "vswbkp"),
    ];
    for (backend, label) in backends.into_iter().filter(|(b, _)| xdp || *b != "xdp") {
        let tag;
        {
            let net = build(label, 2).unwrap();
            tag = net.tb.tag().to_string();
            let cfg = net.config(
                "delay_constrained",
                &format!("packet_rate = 20000\nbatch = 8\nport_backend = \"{backend}\"\nring_frames = 128"),
                &[(1, "30ms"), (2, "60ms")],
            );
            let sw = spawn_in_netns(&net.sw, cfg).unwrap();
            for (ns, _, _) in &net.guests {
                let (tx, rx) = ping(ns, EXT_IP, 5, "0.1");
                assert_eq!(tx, 5);
                assert!(rx >= 3, "{backend}: {ns}: {rx}/5 replies");
            }
            let st = sw.stop().unwrap();
            assert_eq!(st.port_backend.name(), backend);
            // Two guests and the uplink, 128 frames of 2 KiB each (or no ring); on xdp a UMEM
            // of 128 receive and 1024 transmit chunks each, plus its four rings (a few pages).
            if backend == "xdp" {
                let umem = 3 * (128 + 1024) * 2048;
                assert!(
                    (umem..umem + 3 * 64 * 1024).contains(&st.ring_bytes),
                    "{backend}: {} bytes",
                    st.ring_bytes
                );
            } else {
                let rings = if backend == "tpacket" {
                    3 * 128 * 2048
                } else {
                    0
                };
                assert_eq!(st.ring_bytes, rings, "{backend}");
            }
            assert!(st.wakeups >= 3, "{backend}: {} wake-ups", st.wakeups);
            assert!(st.identity_holds(), "{backend}: {st:#?}");
            for p in &st.ports {
                assert!(p.forwarded >= 6 && p.delivered >= 6, "{backend}: {p:?}");
            }
        }
        assert_gone(&tag);
    }
}

/// Tagged frames (802.1Q, a priority tag, 802.1ad over 802.1Q, three tags) sent by a guest
/// arrive at the uplink's far end byte for byte on every backend (broadcast: the switch
/// floods them). The kernel takes the outer tag out of a received frame before a packet
/// socket sees it; the ports put it back (crates/sys/src/vlan.rs).
#[test]
fn vlan_and_qinq_frames_keep_their_tags_through_the_switch_on_every_backend() {
    use netsched_testbed::frames::{capture, send, tagged_set, MARKER};
    let test = "vlan_and_qinq_frames_keep_their_tags_through_the_switch_on_every_backend";
    if !privileged_test_allowed(test) {
        return;
    }
    let xdp = netsched_sys::xdp_port::unavailable().is_none();
    if !xdp {
        eprintln!("{test}: xdp skipped (this build has no XDP program)");
    }
    let tag;
    {
        let net = build("vswvl", 1).unwrap();
        tag = net.tb.tag().to_string();
        let mut want = tagged_set();
        want.sort();
        let backends = ["xdp", "tpacket", "tpacket_v3", "packet"];
        for backend in backends.into_iter().filter(|b| xdp || *b != "xdp") {
            let cfg = net.config(
                "delay_constrained",
                &format!("packet_rate = 20000\nbatch = 8\nport_backend = \"{backend}\"\nring_frames = 128"),
                &[(1, "30ms")],
            );
            let sw = spawn_in_netns(&net.sw, cfg).unwrap();
            let rx = capture(&net.ext, &net.tb.ifname("ue"), MARKER).unwrap();
            send(
                &net.guests[0].0,
                &net.tb.ifname("e0"),
                tagged_set(),
                Duration::from_millis(5),
            )
            .unwrap();
            std::thread::sleep(Duration::from_millis(1500));
            let st = sw.stop().unwrap();
            let mut got = rx.stop().unwrap();
            got.sort();
            assert_eq!(got, want, "{backend}: the frames that arrived");
            assert_eq!(st.port_backend.name(), backend);
            assert!(st.identity_holds(), "{backend}: {st:#?}");
        }
    }
    assert_gone(&tag);
}

/// `trace_latency`: every echo request is accounted stage by stage on the ring backend, and
/// the stages add up (a frame's total covers its send, each percentile lies under the
/// longest time). What the figures are on this host is the benchmark's business
/// (`bench_vswitch latency --trace-latency`), not this test's.
#[test]
fn latency_accounting_cuts_every_frame_into_its_stages() {
    if !privileged_test_allowed("latency_accounting_cuts_every_frame_into_its_stages") {
        return;
    }
    let tag;
    {
        let net = build("vswlat", 2).unwrap();
        tag = net.tb.tag().to_string();
        let mut cfg = net.config(
            "delay_constrained",
            "port_backend = \"tpacket\"",
            &[(1, "30ms"), (2, "60ms")],
        );
        cfg.trace_latency = true;
        let sw = spawn_in_netns(&net.sw, cfg).unwrap();
        let (tx, rx) = ping(&net.guests[0].0, EXT_IP, 20, "0.02");
        assert_eq!(tx, 20);
        assert!(rx >= 15, "{rx}/20 replies");
        let st = sw.stop().unwrap();
        assert!(st.identity_holds(), "{st:#?}");
        let lat = st
            .latency
            .expect("a latency report when trace_latency is on");
        let stage = |s: &str| lat.stage(s).unwrap_or_else(|| panic!("{s} in {lat:?}"));
        let forwarded: u64 = st.ports.iter().map(|p| p.forwarded).sum();
        // Every frame sent on the uplink has its send time, and a total unless the kernel
        // stamped it before the switch began (a guest's neighbour solicitation, say).
        assert_eq!(stage("up_send").count, forwarded, "{lat:?}");
        assert_eq!(
            stage("up_total").count + lat.up_unstamped,
            stage("up_read").count,
            "{lat:?}"
        );
        assert!(stage("up_total").count > 0, "{lat:?}");
        assert!(stage("up_read").count >= forwarded, "{lat:?}");
        assert_eq!(
            stage("up_wait_slept").count + stage("up_wait_awake").count + lat.up_unstamped,
            stage("up_read").count,
            "{lat:?}"
        );
        assert_eq!(
            stage("down_total").count + lat.down_unstamped,
            stage("down_read").count,
            "{lat:?}"
        );
        assert!(stage("down_read").count >= u64::from(rx), "{lat:?}");
        for s in &lat.stages {
            assert!(s.p50_ns <= s.p99_ns && s.p99_ns <= s.max_ns, "{s:?}");
        }
        // Per frame, total = wait + read + queue + send; so for the percentiles too.
        assert!(
            stage("up_total").p50_ns >= stage("up_send").p50_ns,
            "{lat:?}"
        );
        assert!(
            stage("down_total").p50_ns >= stage("down_deliver").p50_ns,
            "{lat:?}"
        );
    }
    assert_gone(&tag);
}
