//! Privileged tests of the link engine on each port backend (root; CI runs them): the same
//! line of namespaces and the same accounting on `tpacket` (receive ring, `sendmmsg`),
//! `tpacket` with a transmit ring, and `packet` (`recvmmsg`/`sendmmsg`).

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
        let st = h.stop().unwrap();
        let replies = slow.lines().filter(|l| l.contains("time=")).count();
        assert!(replies >= 18, "{label}: {replies}/20 replies:\n{slow}");
        assert_eq!(st.port, port.backend, "{label}: {st:?}");
        assert_eq!(st.ring_bytes > 0, port.backend == PortBackend::Tpacket);
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
