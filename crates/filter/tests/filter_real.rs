//! The filter between real interfaces (root; skipped with a reason otherwise): sender →
//! filter → receiver in namespaces the test makes (unique names, removed also on failure).
//! Verdicts hold with a margin on a loaded 2-core machine: the sender is paced, the window
//! holds everything inside, and what the kernel drops before the filter is counted and
//! allowed for.

mod common;

use common::{assert_gone, build, check_order, receiver, send, stream, tables, DROP_PORT_9, FLOWS};
use netsched_filter::control::{self, ControlServer, Loader};
use netsched_filter::engine::spawn_in_netns;
use netsched_filter::packet;
use netsched_filter::signatures::Signatures;
use netsched_filter::verdict::{DropReason, Fragments};
use netsched_filter::work::Tables;
use netsched_testbed::privileged_test_allowed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn every_policy_forwards_in_flow_order_with_exact_accounting_and_drops_by_rule() {
    if !privileged_test_allowed("every_policy_forwards_in_flow_order_with_exact_accounting") {
        return;
    }
    let tag;
    {
        let net = build("flt").unwrap();
        tag = net.tb.tag().to_string();
        let per_flow = 250;
        for mode in netsched_filter::pipeline::DispatchMode::NAMES {
            let rx = receiver(&net.rcv, &net.r0).unwrap();
            let f = spawn_in_netns(
                &net.flt,
                common::config(&net, mode),
                tables(DROP_PORT_9, 1),
                None,
            )
            .unwrap();
            send(
                &net.snd,
                &net.s0,
                stream(per_flow),
                32,
                Duration::from_millis(2),
            )
            .unwrap();
            rx.wait_for(per_flow as u64 * (FLOWS as u64 - 1), Duration::from_secs(3));
            let st = f.stop().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let (got, rx_drops) = rx.stop().unwrap();
            let counts = check_order(&got);
            // The accounting identity, exact, with nothing left inside.
            assert!(st.identity_holds, "{mode}: {st:#?}");
            assert_eq!(st.queued, 0, "{mode}");
            assert_eq!(st.received, st.forwarded + st.dropped, "{mode}");
            assert_eq!(st.pipeline.order.violations_after, 0, "{mode}");
            // Only the drop rule drops: nothing lost inside the filter.
            for (reason, n) in &st.drops {
                assert_eq!(
                    *reason,
                    DropReason::Rule,
                    "{mode}: {n} dropped for {reason:?}"
                );
            }
            let sent = per_flow as u64 * FLOWS as u64;
            let arrived: u64 = counts.values().map(|&c| c as u64).sum();
            let lost_outside = st.kernel_drops + rx_drops;
            let expected = sent - per_flow as u64; // flow 7 is dropped
            assert!(
                arrived + lost_outside >= expected && arrived <= expected,
                "{mode}: {arrived} of {expected} arrived, {lost_outside} lost in kernels"
            );
            let rule_drops = st.drops.get(&DropReason::Rule).copied().unwrap_or(0);
            assert!(
                rule_drops + st.kernel_drops >= per_flow as u64,
                "{mode}: {rule_drops}"
            );
            let blocks: u64 = st.pipeline.workers.iter().map(|w| w.blocks).sum();
            if *mode == "inline" {
                // Run to completion: the packet thread checked every frame, no worker did.
                assert_eq!(
                    (st.pipeline.inline_packets, blocks),
                    (st.received, 0),
                    "{mode}"
                );
            } else {
                assert!(blocks >= st.received, "{mode}");
            }
            // The policy, seen from the workers (4 workers: more than this host's cores).
            let per_worker: Vec<u64> = st.pipeline.workers.iter().map(|w| w.blocks).collect();
            let stalls = st.pipeline.stalls.get(mode).copied().unwrap_or_default();
            match *mode {
                // Every block to the next worker of the chain, busy or not: an even split.
                "static_rr" => assert!(
                    per_worker.iter().max().unwrap() - per_worker.iter().min().unwrap() <= 1,
                    "{mode}: blocks per worker {per_worker:?}"
                ),
                // Only idle workers are named.
                "fcfs" | "modified_fcfs" => {
                    assert_eq!(stalls.assigned_busy, 0, "{mode}: {stalls:?}")
                }
                _ => {}
            }
            eprintln!(
                "{mode}: received {} forwarded {} dropped {} order before/after {}/{} held {} stalls {:?}",
                st.received,
                st.forwarded,
                st.dropped,
                st.pipeline.order.violations_before,
                st.pipeline.order.violations_after,
                st.pipeline.order.held,
                st.pipeline.stalls
            );
        }
    }
    assert_gone(&tag);
}

#[test]
fn a_rule_swap_under_traffic_loses_nothing_and_applies_whole() {
    if !privileged_test_allowed("a_rule_swap_under_traffic_loses_nothing_and_applies_whole") {
        return;
    }
    let tag;
    {
        let net = build("flsw").unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("filter-swap").unwrap();
        // After the swap: flow 7 passes, flow 3 (port 2003) is dropped.
        let next = "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"2003\"\n";
        let loader: Loader = Arc::new(move |g| Ok(tables(next, g)));
        let (outbox, inbox) = control::channel(loader);
        let sock = dir.path().join("filter.sock");
        let server = ControlServer::start(&sock, None, outbox).unwrap();
        let rx = receiver(&net.rcv, &net.r0).unwrap();
        let f = spawn_in_netns(
            &net.flt,
            common::config(&net, "modified_fcfs"),
            tables(DROP_PORT_9, 1),
            Some(inbox),
        )
        .unwrap();
        let (snd, s0) = (net.snd.clone(), net.s0.clone());
        let sender =
            std::thread::spawn(move || send(&snd, &s0, stream(400), 16, Duration::from_millis(2)));
        std::thread::sleep(Duration::from_millis(300));
        let answer = control::request(&sock, "reload").unwrap();
        assert!(answer.contains("rules generation 2"), "{answer}");
        let answer = control::request(&sock, "set-dispatch work_stealing").unwrap();
        assert!(answer.contains("work_stealing"), "{answer}");
        sender.join().unwrap().unwrap();
        // Flows 0-6 except 3 pass throughout, flow 3 before the swap and 7 after it.
        rx.wait_for(400 * 7, Duration::from_secs(3));
        let st = f.stop().unwrap();
        drop(server);
        assert!(!sock.exists(), "the control socket is removed");
        std::thread::sleep(Duration::from_millis(200));
        let (got, rx_drops) = rx.stop().unwrap();
        assert!(st.identity_holds && st.queued == 0, "{st:#?}");
        assert_eq!(st.rule_swaps, 1);
        assert_eq!(st.pipeline.rules_generation, 2);
        assert_eq!(st.pipeline.order.violations_after, 0);
        for reason in st.drops.keys() {
            assert_eq!(*reason, DropReason::Rule, "{st:#?}");
        }
        // Per flow, order holds. Every test frame is forwarded or dropped by a rule:
        // arrived + rule drops + kernel losses covers all sent.
        let mut last = std::collections::HashMap::new();
        for &(flow, seq) in &got {
            if let Some(&p) = last.get(&flow) {
                assert!(seq > p, "flow {flow}: {seq} after {p}");
            }
            last.insert(flow, seq);
        }
        let sent = 400 * FLOWS as u64;
        let arrived = got.len() as u64;
        let rule_drops = st.drops.get(&DropReason::Rule).copied().unwrap_or(0);
        assert!(
            arrived + rule_drops + st.kernel_drops + rx_drops >= sent,
            "{arrived} arrived + {rule_drops} dropped by rule < {sent} sent"
        );
        let f7: Vec<u32> = got.iter().filter(|t| t.0 == 7).map(|t| t.1).collect();
        let f3: Vec<u32> = got.iter().filter(|t| t.0 == 3).map(|t| t.1).collect();
        assert!(!f7.is_empty(), "flow 7 passes after the swap");
        assert!(!f3.is_empty(), "flow 3 passed before the swap");
        // The swap is one point in the stream (frames arrive seq-major: position
        // seq × 8 + flow). Before it flow 3 passes and flow 7 is dropped, after it the other
        // way round; so the last flow-3 frame precedes the first flow-7 frame.
        let (last3, first7) = (*f3.last().unwrap(), *f7.first().unwrap());
        assert!(
            last3 * 8 + 3 < first7 * 8 + 7,
            "flow 3 up to {last3}, flow 7 from {first7}"
        );
    }
    assert_gone(&tag);
}

/// Frames a filter must survive and account for: runts, truncated and inconsistent IPv4
/// headers, IPv4 options, later fragments, non-IP, an IPv6 chain of extension headers.
fn hostile_frames() -> Vec<Vec<u8>> {
    let good = common::frame(0, 0, 64);
    let mut out = Vec::new();
    // Runts and truncations at every length below the UDP header (padded by nobody: veth
    // carries them as they are; the kernel refuses frames shorter than the Ethernet header).
    for cut in [14usize, 20, 33, 38, 41] {
        out.push(good[..cut].to_vec());
    }
    let mut ihl = good.clone();
    ihl[14] = 0x44; // IHL 16 bytes < 20
    out.push(ihl);
    let mut ihl_long = good.clone();
    ihl_long[14] = 0x4f; // IHL 60 bytes: past the frame's UDP header
    out.push(ihl_long);
    let mut total = good.clone();
    total[16..18].copy_from_slice(&9000u16.to_be_bytes()); // total length past the frame
    out.push(total);
    // IPv4 with 4 bytes of options (NOP NOP NOP EOL): valid, the UDP header moves.
    let mut opt = good[..14].to_vec();
    opt.extend_from_slice(&good[14..34]);
    opt[14] = 0x46;
    let len = u16::from_be_bytes([opt[16], opt[17]]) + 4;
    opt[16..18].copy_from_slice(&len.to_be_bytes());
    opt.extend_from_slice(&[1, 1, 1, 0]);
    opt.extend_from_slice(&good[34..]);
    out.push(opt);
    let mut frag = good.clone();
    frag[20..22].copy_from_slice(&0x0001u16.to_be_bytes()); // later fragment, offset 8
    out.push(frag);
    let mut arp = good.clone();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    out.push(arp);
    // IPv6: 40 hop-by-hop headers of 8 bytes, then UDP (past any sane walk bound).
    let mut v6 = good[..12].to_vec();
    v6.extend_from_slice(&0x86ddu16.to_be_bytes());
    let hops = 40usize;
    let mut hdr = vec![0x60, 0, 0, 0];
    hdr.extend_from_slice(&((hops * 8 + 8) as u16).to_be_bytes());
    hdr.extend_from_slice(&[0, 64]);
    hdr.extend_from_slice(&[0u8; 32]);
    v6.extend_from_slice(&hdr);
    for i in 0..hops {
        v6.extend_from_slice(&[if i + 1 == hops { 17 } else { 0 }, 0, 1, 4, 0, 0, 0, 0]);
    }
    v6.extend_from_slice(&[0, 7, 0, 9, 0, 8, 0, 0]);
    out.push(v6);
    out
}

#[test]
fn hostile_frames_are_parsed_counted_and_accounted_under_every_policy() {
    if !privileged_test_allowed("hostile_frames_are_parsed_counted_and_accounted") {
        return;
    }
    let tag;
    {
        let net = build("flhf").unwrap();
        tag = net.tb.tag().to_string();
        for mode in netsched_filter::pipeline::DispatchMode::NAMES {
            let f = spawn_in_netns(
                &net.flt,
                common::config(&net, mode),
                tables(DROP_PORT_9, 1),
                None,
            )
            .unwrap();
            let frames: Vec<Vec<u8>> = (0..20).flat_map(|_| hostile_frames()).collect();
            let sent = frames.len() as u64;
            send(&net.snd, &net.s0, frames, 16, Duration::from_millis(2)).unwrap();
            // Everything sent is inside the filter or settled before it stops.
            let until = std::time::Instant::now() + Duration::from_secs(3);
            while std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            let st = f.stop().unwrap();
            eprintln!(
                "{mode}: received {} forwarded {} drops {:?} malformed {} non-IP {} later fragments {} kernel drops {}",
                st.received,
                st.forwarded,
                st.drops,
                st.pipeline.malformed_frames,
                st.pipeline.non_ip_frames,
                st.pipeline.later_fragments,
                st.kernel_drops
            );
            assert!(
                st.identity_holds && st.identity_failures == 0,
                "{mode}: {st:#?}"
            );
            assert_eq!(st.queued, 0, "{mode}");
            assert_eq!(st.received, st.forwarded + st.dropped, "{mode}");
            // Every frame is accounted; the rig's own IPv6 chatter may add a few.
            assert!(st.received >= sent / 2, "{mode}: {} of {sent}", st.received);
            assert!(
                st.pipeline.malformed_frames > 0,
                "{mode}: malformed counted"
            );
            assert!(st.pipeline.non_ip_frames > 0, "{mode}: non-IP counted");
            assert!(st.pipeline.later_fragments > 0, "{mode}: fragments counted");
            let panics: u64 = st.pipeline.workers.iter().map(|w| w.panics).sum::<u64>()
                + st.pipeline.inline_panics;
            assert_eq!(panics, 0, "{mode}: a hostile frame made a worker panic");
        }
    }
    assert_gone(&tag);
}

/// Reload A (generation 2, 50 rules) blocks in its build; reload B (generation 3, one rule)
/// is answered and in force; A, released, is discarded by the running filter's packet thread
/// and its client told so: generation 3 stays in force, one swap.
#[test]
fn an_earlier_slow_reload_never_overtakes_a_later_one_in_the_running_filter() {
    if !privileged_test_allowed("an_earlier_slow_reload_never_overtakes_a_later_one") {
        return;
    }
    let tag;
    {
        let net = build("flro").unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("filter-reload-order").unwrap();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<u64>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, release_rx) = (Mutex::new(started_tx), Mutex::new(release_rx));
        let many: String = (0..50)
            .map(|i| {
                format!(
                    "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"{}\"\n",
                    1000 + i
                )
            })
            .collect();
        let loader: Loader = Arc::new(move |g| {
            started_tx.lock().unwrap().send(g).unwrap();
            if g == 2 {
                let wait = Duration::from_secs(20);
                release_rx.lock().unwrap().recv_timeout(wait).unwrap();
                return Ok(tables(&many, g));
            }
            Ok(tables(DROP_PORT_9, g))
        });
        let (outbox, inbox) = control::channel(loader);
        let sock = dir.path().join("filter.sock");
        let server = ControlServer::start(&sock, None, outbox).unwrap();
        let f = spawn_in_netns(
            &net.flt,
            common::config(&net, "modified_fcfs"),
            tables(DROP_PORT_9, 1),
            Some(inbox),
        )
        .unwrap();
        let a = {
            let sock = sock.clone();
            std::thread::spawn(move || control::request(&sock, "reload"))
        };
        assert_eq!(started_rx.recv_timeout(control::DEADLINE).unwrap(), 2);
        let b = control::request(&sock, "reload").unwrap();
        assert!(b.contains("rules generation 3: 1 rules"), "{b}");
        release_tx.send(()).unwrap();
        let a = a.join().unwrap().unwrap_err().to_string();
        assert!(a.contains("generation 2 superseded by generation 3"), "{a}");
        let show = control::request(&sock, "show").unwrap();
        assert!(show.contains("rules generation 3"), "{show}");
        let st = f.stop().unwrap();
        drop(server);
        assert_eq!(st.rule_swaps, 1);
        assert_eq!(st.pipeline.rules_generation, 3);
    }
    assert_gone(&tag);
}

/// Two fragments of one UDP datagram whose payload reassembles to `…EVILSIG…` (`EVIL` ends
/// the first, `SIG` starts the second), a whole DF packet and a whole DF packet holding
/// `EVILSIG`, sent into the running filter. Under the default (`drop`) neither fragment
/// arrives and both are counted as `fragment`; under `pass` both arrive (each is checked on its
/// own, and the signature is in neither); the DF packets are decided the same under both.
#[test]
fn fragments_are_dropped_and_counted_by_default_and_pass_on_request() {
    if !privileged_test_allowed("fragments_are_dropped_and_counted_by_default") {
        return;
    }
    let (a, b) = ([10, 99, 0, 1], [10, 99, 0, 2]);
    // Flow 1: seq 0 in the first fragment (8 bytes of UDP header + 16 of data), seq 1 in the
    // last (offset 3 × 8 bytes).
    let mut first_data = common::MAGIC.to_vec();
    first_data.extend_from_slice(&[1, 0, 0, 0, 0]);
    first_data.extend_from_slice(b"...EVIL");
    let first =
        packet::with_ipv4_fragment(&packet::udp4_frame(a, b, 1001, 2001, &first_data), 0x2000);
    let mut later_data = b"SIG".to_vec();
    later_data.extend_from_slice(common::MAGIC);
    later_data.extend_from_slice(&[1, 0, 0, 0, 1]);
    let later = packet::ipv4_later_fragment(a, b, 3, false, &later_data);
    let df = |flow: u8, tail: &[u8]| {
        let mut f = common::frame(flow, 0, 9);
        f.extend_from_slice(tail);
        let total = u16::from_be_bytes([f[16], f[17]]) + tail.len() as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        packet::with_ipv4_fragment(&f, 0x4000)
    };
    let frames = vec![first, later, df(2, b""), df(3, b"EVILSIG")];
    let tag;
    {
        let net = build("flfr").unwrap();
        tag = net.tb.tag().to_string();
        let t = Arc::new(Tables {
            signatures: Signatures::parse("EVILSIG\n", "test sigs").unwrap(),
            ..Arc::into_inner(tables("", 1)).unwrap()
        });
        for (fragments, want) in [
            (Fragments::Drop, vec![(2, 0)]),
            (Fragments::Pass, vec![(1, 0), (1, 1), (2, 0)]),
        ] {
            let mut cfg = common::config(&net, "modified_fcfs");
            if fragments == Fragments::Pass {
                cfg.pipeline.work.fragments = Fragments::Pass;
            }
            let rx = receiver(&net.rcv, &net.r0).unwrap();
            let f = spawn_in_netns(&net.flt, cfg, t.clone(), None).unwrap();
            send(
                &net.snd,
                &net.s0,
                frames.clone(),
                1,
                Duration::from_millis(5),
            )
            .unwrap();
            rx.wait_for(want.len() as u64 + 1, Duration::from_secs(1));
            let st = f.stop().unwrap();
            let (mut got, _) = rx.stop().unwrap();
            got.sort();
            eprintln!("{fragments:?}: arrived {got:?}, drops {:?}", st.drops);
            assert_eq!(got, want, "{fragments:?}");
            let fragment_drops = st.drops.get(&DropReason::Fragment).copied().unwrap_or(0);
            let expect = if fragments == Fragments::Drop { 2 } else { 0 };
            assert_eq!(fragment_drops, expect, "{fragments:?}: {:?}", st.drops);
            assert_eq!(
                st.drops.get(&DropReason::Signature),
                Some(&1),
                "{fragments:?}"
            );
            assert!(
                st.identity_holds && st.queued == 0,
                "{fragments:?}: {st:#?}"
            );
        }
    }
    assert_gone(&tag);
}
