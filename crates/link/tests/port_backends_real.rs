//! Privileged tests of the link engine on each port backend (root; CI runs them): the same
//! line of namespaces and the same accounting on `xdp` (AF_XDP in native mode on veth),
//! `tpacket` (receive ring, `sendmmsg`), `tpacket` with a transmit ring, `tpacket_v3` (a
//! receive ring of blocks), and `packet`
//! (`recvmmsg`/`sendmmsg`).

mod common;

use netsched_link::engine::spawn_in_netns;
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use netsched_testbed::{namespaces_with, privileged_test_allowed, xdp_test_allowed};

/// Pings `a → b` through the engine on `port`: a slow series (the engine sleeps between
/// echoes) and a fast one (batches); every frame accounted, the backend the one asked for.
fn forwards_on(label: &str, net: u8, port: PortOptions) {
    forwards_on_line(common::line(label, net), label, net, port);
}

/// [`forwards_on`] over the line `line` (made with `net`).
fn forwards_on_line(line: common::Line, label: &str, net: u8, port: PortOptions) {
    let tag;
    {
        let line = line;
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
        if matches!(port.backend, PortBackend::Xdp | PortBackend::Auto) {
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
        // `auto` is asked for only where `xdp` must be taken.
        let want = match port.backend {
            PortBackend::Auto => PortBackend::Xdp,
            b => b,
        };
        assert_eq!(st.port, want, "{label}: {st:?}");
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
                <= if want == PortBackend::Xdp {
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
fn the_engine_forwards_and_accounts_on_the_tpacket_v3_ring() {
    if !privileged_test_allowed("the_engine_forwards_and_accounts_on_the_tpacket_v3_ring") {
        return;
    }
    forwards_on(
        "lnkv3",
        89,
        PortOptions {
            backend: PortBackend::TpacketV3,
            ring: RingConfig {
                rx_frames: 256,
                tx_frames: 0,
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
    if !xdp_test_allowed("the_engine_forwards_and_accounts_on_af_xdp") {
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

/// The engine on two-queue veths runs on `xdp` (a socket per queue), every frame accounted.
#[test]
fn the_engine_forwards_and_accounts_on_af_xdp_over_two_queue_veths() {
    let test = "the_engine_forwards_and_accounts_on_af_xdp_over_two_queue_veths";
    if !xdp_test_allowed(test) {
        return;
    }
    forwards_on_line(
        common::line_with_queues("lnkmq", 86, 2),
        "lnkmq",
        86,
        PortOptions {
            backend: PortBackend::Auto,
            ring: RingConfig {
                rx_frames: 256,
                tx_frames: 256,
            },
        },
    );
}

/// Frames sent into a two-queue veth from CPU 0 and from CPU 1 reach its queues 0 and 1 (with
/// `PACKET_QDISC_BYPASS` the sender's queue is its CPU modulo the queue count: net/packet/
/// af_packet.c, `packet_pick_tx_queue`); `auto` opens `xdp` with a socket on each queue, and
/// each queue's socket reads exactly the frames sent to it.
#[test]
fn an_xdp_port_reads_every_queue_of_a_two_queue_veth() {
    use netsched_sys::FramePort;
    let test = "an_xdp_port_reads_every_queue_of_a_two_queue_veth";
    if !xdp_test_allowed(test) {
        return;
    }
    let cpus = netsched_sys::thread::allowed_cpus();
    if !(cpus.contains(&0) && cpus.contains(&1)) {
        eprintln!("SKIP {test}: CPUs 0 and 1 are not both allowed ({cpus:?})");
        return;
    }
    let tag;
    {
        let line = common::line_with_queues("lnkmqr", 87, 2);
        tag = line.tb.tag().to_string();
        // No IPv6 neighbour traffic: every frame on the port is one the test sent.
        for ns in line.tb.namespaces() {
            line.tb
                .sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
                .unwrap();
        }
        let (m, ma, a, ia) = (
            line.m.clone(),
            line.ma.clone(),
            line.a.clone(),
            line.tb.ifname("a"),
        );
        let (opened, per_queue, lost, sent) = std::thread::spawn(move || {
            netsched_testbed::enter_netns(&m).unwrap();
            let opts = PortOptions {
                ring: RingConfig {
                    rx_frames: 256,
                    tx_frames: 64,
                },
                ..PortOptions::default()
            };
            let (port, why) = netsched_sys::AnyPort::open(&ma, &opts).unwrap();
            let mut pool = netsched_sys::FramePool::new(1024);
            let mut ev = [netsched_sys::Rx::Oversize { len: 0 }; netsched_sys::BATCH];
            let (mut sent, mut got) = (0u64, 0u64);
            for round in 0..20 {
                // A thread of its own per round (a pinned thread may not re-pin elsewhere).
                let (a, ia) = (a.clone(), ia.clone());
                sent += std::thread::spawn(move || {
                    netsched_testbed::enter_netns(&a).unwrap();
                    netsched_sys::thread::pin_to_cpu(round % 2).unwrap();
                    let sender = netsched_sys::Port::open(&ia).unwrap();
                    // To a MAC nobody has, a local experimental EtherType: the program takes it.
                    let mut frame = vec![0u8; 60];
                    frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0xee, 0x01]);
                    frame[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xee, 0x02]);
                    frame[12..14].copy_from_slice(&[0x88, 0xb5]);
                    for _ in 0..16 {
                        sender.send_frame(&frame).unwrap();
                    }
                    16
                })
                .join()
                .unwrap();
                // Lockstep: read what this round sent before the next, so no ring overflows.
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while got < sent && std::time::Instant::now() < until {
                    let (_, n) = port.recv(&mut pool, &mut ev);
                    for e in &ev[..n] {
                        if let netsched_sys::Rx::Frame { slot, .. } = *e {
                            pool.release(slot);
                        }
                    }
                    got += n as u64;
                    if n == 0 {
                        let _ = netsched_sys::poll_in(&[(port.raw_fd(), true)], 10_000_000);
                    }
                }
            }
            let per_queue = match &port {
                netsched_sys::AnyPort::Xdp(x) => x.rx_per_queue(),
                _ => Vec::new(),
            };
            let lost = port.take_kernel_drops();
            ((port.backend(), why), per_queue, lost, sent)
        })
        .join()
        .unwrap();
        assert_eq!(opened, (PortBackend::Xdp, None), "{opened:?}");
        assert_eq!(lost, 0, "{per_queue:?}");
        // Half the rounds from each CPU: each queue's socket read exactly its half.
        assert_eq!(per_queue, vec![sent / 2, sent / 2], "of {sent} sent");
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}

/// An interface whose queue another socket holds refuses `xdp` (after the bounded wait for a
/// closing socket's release), and `auto` takes the ring instead, saying why.
#[test]
fn auto_leaves_xdp_for_the_ring_with_the_reason_when_the_queue_is_taken() {
    let test = "auto_leaves_xdp_for_the_ring_with_the_reason_when_the_queue_is_taken";
    if !xdp_test_allowed(test) {
        return;
    }
    let tag;
    {
        let line = common::line("lnktkn", 88);
        tag = line.tb.tag().to_string();
        let (m, ma) = (line.m.clone(), line.ma.clone());
        let (explicit, auto) = std::thread::spawn(move || {
            netsched_testbed::enter_netns(&m).unwrap();
            let xdp = PortOptions {
                backend: PortBackend::Xdp,
                ring: RingConfig {
                    rx_frames: 64,
                    tx_frames: 64,
                },
            };
            let (first, _) = netsched_sys::AnyPort::open(&ma, &xdp).unwrap();
            assert_eq!(first.backend(), PortBackend::Xdp);
            let explicit = netsched_sys::AnyPort::open(&ma, &xdp).map(|_| ());
            let auto = netsched_sys::AnyPort::open(&ma, &PortOptions::default())
                .map(|(p, why)| (p.backend(), why));
            drop(first);
            (explicit, auto)
        })
        .join()
        .unwrap();
        let e = explicit.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains("queue 0"), "{e}");
        let (backend, why) = auto.unwrap();
        assert_eq!(backend, PortBackend::Tpacket);
        let why = why.unwrap();
        assert!(
            why.contains("xdp refused")
                && why.contains("queue 0")
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
    if !xdp_test_allowed(test) {
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

/// Tagged frames (802.1Q, a priority tag, 802.1ad over 802.1Q, three tags) sent from `a`
/// arrive in `b` byte for byte through the engine on every backend. The kernel takes the
/// outer tag out of a received frame before a packet socket sees it (crates/sys/src/vlan.rs);
/// a port that did not put it back would forward the frame untagged.
#[test]
fn vlan_and_qinq_frames_keep_their_tags_through_the_engine_on_every_backend() {
    use netsched_testbed::frames::{capture, send, tagged_set, MARKER};
    let test = "vlan_and_qinq_frames_keep_their_tags_through_the_engine_on_every_backend";
    if !privileged_test_allowed(test) {
        return;
    }
    let tag;
    {
        let line = common::line("lnkvl", 91);
        tag = line.tb.tag().to_string();
        let mut ports = vec![
            PortBackend::Packet,
            PortBackend::Tpacket,
            PortBackend::TpacketV3,
        ];
        match netsched_sys::xdp_port::unavailable() {
            None => ports.push(PortBackend::Xdp),
            Some(why) => eprintln!("SKIP the xdp backend: {why}"),
        }
        let mut want = tagged_set();
        want.sort();
        for backend in ports {
            let mut cfg = common::engine_config(
                &line,
                common::dir(None, 0, "fifo:1000"),
                common::dir(None, 0, "fifo:1000"),
            );
            cfg.port = PortOptions {
                backend,
                ring: RingConfig {
                    rx_frames: 256,
                    tx_frames: 0,
                },
            };
            let h = spawn_in_netns(&line.m, cfg).unwrap();
            let rx = capture(&line.b, &line.tb.ifname("b"), MARKER).unwrap();
            send(
                &line.a,
                &line.tb.ifname("a"),
                tagged_set(),
                std::time::Duration::from_millis(5),
            )
            .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1500));
            let st = h.stop().unwrap();
            let mut got = rx.stop().unwrap();
            got.sort();
            assert_eq!(got, want, "{}: the frames that arrived", backend.name());
            assert_eq!(st.port, backend);
            st.ab.check_accounting().unwrap();
            st.ba.check_accounting().unwrap();
        }
    }
    assert!(namespaces_with(&tag).is_empty(), "namespaces leaked");
}
