//! An interface deleted under the filter as a process, under traffic (root; skipped with a
//! reason otherwise): the filter notices within its interface watch's period
//! (`netsched_sys::iface_watch`, 1 s), prints its final counters, names the interface in its
//! error and exits with status 1 — it neither runs on deaf nor spins. Without the watch it
//! runs on until the test's limit and the test fails.

mod common;

use common::{assert_gone, build, flood, FilterProcess};
use netsched_testbed::privileged_test_allowed;
use std::time::{Duration, Instant};

#[test]
fn an_interface_deleted_under_the_filter_ends_it_with_the_reason() {
    if !privileged_test_allowed("an_interface_deleted_under_the_filter_ends_it_with_the_reason") {
        return;
    }
    let tag;
    {
        let net = build("fllost").unwrap();
        tag = net.tb.tag().to_string();
        let mut f = FilterProcess::start(
            &net,
            "filter-lost",
            b"[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n",
            &[],
        )
        .unwrap();
        let (stop, sender) = flood(&net.snd, &net.s0, 50);
        std::thread::sleep(Duration::from_millis(300));
        net.tb
            .exec(&net.flt, "ip", &["link", "del", &net.fout])
            .unwrap();
        let deleted = Instant::now();
        // The watch looks once a second; 10 s is the margin for a loaded machine.
        let status = loop {
            if let Some(s) = f.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                deleted.elapsed() < Duration::from_secs(10),
                "still running 10 s after its output was deleted:\n{}",
                f.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        sender.join().unwrap().unwrap();
        let err = f.stderr();
        assert_eq!(status.code(), Some(1), "{err}");
        let why = format!("--output {} (index ", net.fout);
        assert!(
            err.contains(&why) && err.contains("was deleted: stopped filtering"),
            "{err}"
        );
        assert!(
            f.stdout().contains("\"final\""),
            "the final counters are printed"
        );
    }
    assert_gone(&tag);
}
