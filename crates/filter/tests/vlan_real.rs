//! VLAN tags through the filter on every port backend (root; skipped with a reason otherwise;
//! `xdp` skipped alone when the build has no XDP program): sender → filter → receiver in
//! namespaces the test makes. A tagged frame leaves with the tags it came with (802.1Q, a
//! priority tag of VID 0, 802.1ad over 802.1Q, three tags); the rules apply to what is
//! inside the tags; and a frame with more tags than the parser reads is dropped and counted
//! as `header_too_deep`, never accepted as non-IP.

mod common;

use common::{assert_gone, build, config, frame, send, tables, DROP_PORT_9, MAGIC};
use netsched_filter::engine::spawn_in_netns;
use netsched_filter::verdict::DropReason;
use netsched_sys::{PortBackend, PortOptions, RingConfig};
use netsched_testbed::frames::{capture, with_tags};
use netsched_testbed::privileged_test_allowed;
use std::time::{Duration, Instant};

const Q: u16 = 0x8100;
const AD: u16 = 0x88a8;

/// The frames sent and, for each, whether it must arrive unchanged. Flow 7 goes to UDP
/// port 9 (the drop rule's); the others are accepted when the filter can read them.
fn cases() -> Vec<(Vec<u8>, bool)> {
    let four = [(AD, 100), (Q, 5), (Q, 6), (Q, 7)];
    vec![
        (with_tags(&frame(0, 0, 64), &[(Q, 5)]), true),
        (with_tags(&frame(1, 0, 64), &[(Q, 0x6000)]), true),
        (with_tags(&frame(2, 0, 64), &[(AD, 100), (Q, 5)]), true),
        (with_tags(&frame(3, 0, 64), &four[..3]), true),
        (with_tags(&frame(7, 0, 64), &[(Q, 5)]), false),
        (with_tags(&frame(7, 1, 64), &four[..3]), false),
        (with_tags(&frame(7, 2, 64), &four), false),
        (with_tags(&frame(4, 0, 64), &four), false),
    ]
}

fn backends() -> Vec<PortOptions> {
    let mut out: Vec<PortOptions> = [
        PortBackend::Packet,
        PortBackend::Tpacket,
        PortBackend::TpacketV3,
    ]
    .into_iter()
    .map(|backend| PortOptions {
        backend,
        ring: RingConfig::default(),
    })
    .collect();
    match netsched_sys::xdp_port::unavailable() {
        None => out.push(PortOptions {
            backend: PortBackend::Xdp,
            ring: RingConfig {
                rx_frames: 1024,
                tx_frames: 0,
            },
        }),
        Some(why) => eprintln!("SKIP the xdp backend: {why}"),
    }
    out
}

#[test]
fn vlan_tags_are_kept_read_through_and_a_too_deep_stack_is_dropped_on_every_backend() {
    if !privileged_test_allowed("vlan_tags_are_kept_read_through_and_a_too_deep_stack") {
        return;
    }
    let tag;
    {
        let net = build("flvl").unwrap();
        tag = net.tb.tag().to_string();
        let cases = cases();
        let want: Vec<Vec<u8>> = cases
            .iter()
            .filter(|(_, arrives)| *arrives)
            .map(|(f, _)| f.clone())
            .collect();
        for port in backends() {
            let name = port.backend.name();
            let mut cfg = config(&net, "modified_fcfs");
            cfg.port = port;
            let rx = capture(&net.rcv, &net.r0, MAGIC).unwrap();
            let f = spawn_in_netns(&net.flt, cfg, tables(DROP_PORT_9, 1), None).unwrap();
            let frames: Vec<Vec<u8>> = cases.iter().map(|(f, _)| f.clone()).collect();
            send(&net.snd, &net.s0, frames, 1, Duration::from_millis(5)).unwrap();
            let until = Instant::now() + Duration::from_secs(3);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            let st = f.stop().unwrap();
            let mut got = rx.stop().unwrap();
            got.sort();
            let mut want = want.clone();
            want.sort();
            let dropped = |r| st.drops.get(&r).copied().unwrap_or(0);
            eprintln!(
                "{name}: {} of {} arrived; drops {:?}; kernel drops {}",
                got.len(),
                want.len(),
                st.drops,
                st.kernel_drops
            );
            assert_eq!(st.kernel_drops, 0, "{name}: a frame lost before the filter");
            assert_eq!(got, want, "{name}: the frames that arrived, tags and all");
            assert_eq!(dropped(DropReason::Rule), 2, "{name}: {:?}", st.drops);
            assert_eq!(
                dropped(DropReason::HeaderTooDeep),
                2,
                "{name}: {:?}",
                st.drops
            );
            assert_eq!(dropped(DropReason::NonIp), 0, "{name}: {:?}", st.drops);
            assert!(st.identity_holds && st.identity_failures == 0, "{name}");
        }
    }
    assert_gone(&tag);
}
