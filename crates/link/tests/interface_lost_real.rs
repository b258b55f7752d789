//! An interface deleted under the link engine as a process (`netsched-linkd link`; root,
//! skipped with a reason otherwise): the link notices within its interface watch's period
//! (`netsched_sys::iface_watch`, 1 s), prints its final counters, names the interface in its
//! error and exits with status 1 — it neither forwards on deaf nor spins. Without the watch
//! it runs on until the test's limit and the test fails.

mod common;

use netsched_testbed::{namespaces_with, privileged_test_allowed};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_interface_deleted_under_the_link_ends_it_with_the_reason() {
    if !privileged_test_allowed("an_interface_deleted_under_the_link_ends_it_with_the_reason") {
        return;
    }
    let tag;
    {
        let line = common::line("lklost", 92);
        tag = line.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("link-lost").unwrap();
        let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let mut child = Command::new("ip")
            .args(["netns", "exec", &line.m])
            .arg(env!("CARGO_BIN_EXE_netsched-linkd"))
            .args(["link", "--dev-a", &line.ma, "--dev-b", &line.mb])
            .args(["--port", "packet"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let text = || std::fs::read_to_string(&err).unwrap_or_default();
        let until = Instant::now() + Duration::from_secs(20);
        while !text().contains("forwarding") {
            assert!(
                Instant::now() < until,
                "the link did not start:\n{}",
                text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        line.tb
            .exec(&line.m, "ip", &["link", "del", &line.mb])
            .unwrap();
        let deleted = Instant::now();
        // The watch looks once a second; 10 s is the margin for a loaded machine.
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if deleted.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("still running 10 s after --dev-b was deleted:\n{}", text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(1), "{}", text());
        let why = format!("--dev-b {} (index ", line.mb);
        assert!(
            text().contains(&why) && text().contains("was deleted: stopped forwarding"),
            "{}",
            text()
        );
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        assert!(stdout.contains("\"final\""), "{stdout}");
    }
    assert!(namespaces_with(&tag).is_empty());
}
