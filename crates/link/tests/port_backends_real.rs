//! Privileged tests of the link engine on each port backend (root; CI runs them): the same
//! line of namespaces and the same accounting on `xdp` (AF_XDP in native mode on veth),
//! `tpacket` (receive ring, `sendmmsg`), `tpacket` with a transmit ring, and `packet`
//! (`recvmmsg`/`sendmmsg`).

mod common;

use netsched_link::engine::spawn_in_netns;
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use netsched_testbed::{namespaces_with, privileged_test_allowed};

/// Pings `a → b` through the engine on `port`: a slow series (the engine sleeps between
/// echoes) and a fast one (batches); every frame accounted, the backend the one asked for.
fn forwards_on(label: &str, net: u8, port: PortOptions) {
    let tag;
    {
        let line = common::line(label, net);
        tag = line.tb.tag().to_string();
        let mut cfg = common::engine_config(
            &line,
            common::dir(None, 0, "fifo:1000"),
            common::dir(None, 0, "fifo:1000"),
        );
        cfg.port = port;
        let h = spawn_in_netns(&line.m, cfg).unwrap();
        let dst = format!("10.{net}.0.2");
        let slow = line
            .tb
            .exec(
                &line.a,
                "ping",
                &["-n", "-c", "20", "-i", "0.05", "-W", "2", &dst],
            )
            .unwrap();
        // A fast series: 300 echoes 2 ms apart. Only the accounting is asserted of it (a
        // loaded machine may delay the engine), the slow series' replies of the path.
        let _ = line.tb.exec(
            &line.a,
            "ping",
            &["-n", "-q", "-c", "300", "-i", "0.002", "-W", "1", &dst],
        );
        if port.backend == PortBackend::Xdp {
            let shown = line
                .tb
                .exec(&line.m, "ip", &["link", "show", &line.ma])
                .unwrap();
            assert!(shown.contains("prog/xdp"), "{label}: running: {shown}");
        }
        let st = h.stop().unwrap();
        // The stopped engine left no XDP program on its ports.
        for dev in [&line.ma, &line.mb] {
            let shown = line.tb.exec(&line.m, "ip", &["link", "show", dev]).unwrap();
            assert!(!shown.contains("prog/xdp"), "{label}: {shown}");
        }
        let replies = slow.lines().filter(|l| l.contains("time=")).count();
        assert!(replies >= 18, "{label}: {replies}/20 replies:\n{slow}");
        assert_eq!(st.port, port.backend, "{label}: {st:?}");
        assert_eq!(st.ring_bytes > 0, port.backend != PortBackend::Packet);
        assert!(st.ab.tx_frames >= 20 && st.ba.tx_frames >= 20, "{st:?}");
        // The engine slept between the slow series' echoes, and a wake-up carried at least
        // one frame (spin 0: every sleep ends with a wake-up, frames arrive after wake-ups).
        assert!(st.wakeups >= 10, "{label}: {} wake-ups", st.wakeups);
        assert!(
            st.wakeups_per_frame > 0.0 && st.wakeups_per_frame <= 1.5,
            "{label}: {} wake-ups per frame",
            st.wakeups_per_frame
        );
        st.ab.check_accounting().unwrap();
        st.ba.check_accounting().unwrap();
        // The engine never queues an invalid descriptor, and every receive loss it counted is
        // one the AF_XDP sockets reported (zeros on the other backends).
        let [xa, xb] = st.xdp_drops;
        assert_eq!(xa.tx_invalid_descs + xb.tx_invalid_descs, 0, "{st:?}");
        assert!(
            st.ab.kernel_socket_drops + st.ba.kernel_socket_drops
                <= if port.backend == PortBackend::Xdp {
                    xa.rx_lost() + xb.rx_lost()
                } else {
                    u64::MAX
                },
            "{st:?}"
        );
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}

#[test]
fn the_engine_forwards_and_accounts_on_the_tpacket_ring() {
    if !privileged_test_allowed("the_engine_forwards_and_accounts_on_the_tpacket_ring") {
        return;
    }
    forwards_on(
        "lnkrng",
        81,
        PortOptions {
            backend: PortBackend::Tpacket,
            ring: RingConfig {
                rx_frames: 256,
                tx_frames: 0,
            },
        },
    );
}

#[test]
fn the_engine_forwards_and_accounts_on_the_tpacket_tx_ring() {
    if !privileged_test_allowed("the_engine_forwards_and_accounts_on_the_tpacket_tx_ring") {
        return;
    }
    forwards_on(
        "lnktxr",
        82,
        PortOptions {
            backend: PortBackend::Tpacket,
            ring: RingConfig {
                rx_frames: 256,
                tx_frames: 256,
            },
        },
    );
}

#[test]
fn the_engine_forwards_and_accounts_on_packet_sockets() {
    if !privileged_test_allowed("the_engine_forwards_and_accounts_on_packet_sockets") {
        return;
    }
    forwards_on(
        "lnkpkt",
        83,
        PortOptions {
            backend: PortBackend::Packet,
            ..PortOptions::default()
        },
    );
}

#[test]
fn the_engine_forwards_and_accounts_on_af_xdp() {
    if !privileged_test_allowed("the_engine_forwards_and_accounts_on_af_xdp") {
        return;
    }
    if let Some(why) = netsched_sys::xdp_port::unavailable() {
        eprintln!("SKIP the_engine_forwards_and_accounts_on_af_xdp: {why}");
        return;
    }
    forwards_on(
        "lnkxdp",
        84,
        PortOptions {
            backend: PortBackend::Xdp,
            ring: RingConfig {
                rx_frames: 256,
                tx_frames: 256,
            },
        },
    );
}

/// On an interface with two receive queues `xdp` refuses (one socket serves queue 0 only) and
/// `auto` takes the ring instead, saying why.
#[test]
fn auto_leaves_xdp_for_the_ring_with_the_reason_on_a_two_queue_veth() {
    let test = "auto_leaves_xdp_for_the_ring_with_the_reason_on_a_two_queue_veth";
    if !privileged_test_allowed(test) {
        return;
    }
    if let Some(why) = netsched_sys::xdp_port::unavailable() {
        eprintln!("SKIP {test}: {why}");
        return;
    }
    let tag;
    {
        let mut tb = netsched_testbed::Testbed::new("lnkmq").unwrap();
        tag = tb.tag().to_string();
        let m = tb.add_ns("m").unwrap();
        let (x, y) = (tb.ifname("x"), tb.ifname("y"));
        let two = ["numrxqueues", "2", "numtxqueues", "2"];
        let mut args = vec!["link", "add", &x];
        args.extend(two);
        args.extend(["type", "veth", "peer", "name", &y]);
        args.extend(two);
        tb.exec(&m, "ip", &args).unwrap();
        for dev in [&x, &y] {
            tb.exec(&m, "ip", &["link", "set", dev, "up"]).unwrap();
        }
        let (explicit, auto) = std::thread::spawn(move || {
            netsched_testbed::enter_netns(&m).unwrap();
            let xdp = PortOptions {
                backend: PortBackend::Xdp,
                ..PortOptions::default()
            };
            let explicit = netsched_sys::AnyPort::open(&x, &xdp).map(|_| ());
            let auto = netsched_sys::AnyPort::open(&x, &PortOptions::default())
                .map(|(p, why)| (p.backend(), why));
            (explicit, auto)
        })
        .join()
        .unwrap();
        let e = explicit.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains("2 receive queues"), "{e}");
        let (backend, why) = auto.unwrap();
        assert_eq!(backend, PortBackend::Tpacket);
        let why = why.unwrap();
        assert!(
            why.contains("xdp refused")
                && why.contains("2 receive queues")
                && why.ends_with("using tpacket"),
            "{why}"
        );
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}

/// A port reopened at once after a stop gets its queue back: the kernel releases a closed
/// socket's hold on the queue from a work item, and the open waits for it (bounded).
#[test]
fn an_xdp_port_reopens_at_once_after_a_stop() {
    let test = "an_xdp_port_reopens_at_once_after_a_stop";
    if !privileged_test_allowed(test) {
        return;
    }
    if let Some(why) = netsched_sys::xdp_port::unavailable() {
        eprintln!("SKIP {test}: {why}");
        return;
    }
    let tag;
    {
        let line = common::line("lnkxro", 85);
        tag = line.tb.tag().to_string();
        let (m, ma, mb) = (line.m.clone(), line.ma.clone(), line.mb.clone());
        std::thread::spawn(move || {
            netsched_testbed::enter_netns(&m).unwrap();
            let xdp = PortOptions {
                backend: PortBackend::Xdp,
                ring: RingConfig {
                    rx_frames: 64,
                    tx_frames: 64,
                },
            };
            for round in 0..10 {
                let a = netsched_sys::AnyPort::open(&ma, &xdp);
                let b = netsched_sys::AnyPort::open(&mb, &xdp);
                assert!(a.is_ok() && b.is_ok(), "round {round}: {a:?} {b:?}");
            }
        })
        .join()
        .unwrap();
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}
