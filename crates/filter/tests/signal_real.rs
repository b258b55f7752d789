//! The filter as a process (root; skipped with a reason otherwise): SIGTERM mid-run drains what
//! is inside, prints the final counters with the identity holding, removes the control socket
//! and exits 0.

mod common;

use common::{assert_gone, build, send, stream};
use netsched_testbed::privileged_test_allowed;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigterm_mid_run_drains_reports_and_removes_the_socket() {
    if !privileged_test_allowed("sigterm_mid_run_drains_reports_and_removes_the_socket") {
        return;
    }
    let tag;
    {
        let net = build("flsig").unwrap();
        tag = net.tb.tag().to_string();
        let dir = netsched_testbed::TempDir::new("filter-sig").unwrap();
        let rules = dir
            .create_file(
                "rules.toml",
                b"[[rule]]\naction = \"drop\"\ndport = \"9\"\n",
            )
            .unwrap();
        let sigs = dir
            .create_file("sigs.txt", b"# none in the stream\nZZZZZZ\n")
            .unwrap();
        let sock = dir.path().join("f.sock");
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.flt,
                env!("CARGO_BIN_EXE_netsched-filterd"),
                "filter",
            ])
            .args([
                "--input",
                &net.fin,
                "--output",
                &net.fout,
                "--dispatch",
                "fcfs",
            ])
            .arg("--rules")
            .arg(&rules)
            .arg("--signatures")
            .arg(&sigs)
            .arg("--control-socket")
            .arg(&sock)
            .args(["--stats", "200ms"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let ready = Instant::now();
        while !sock.exists() && ready.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(sock.exists(), "the filter did not open its control socket");
        // Traffic, and SIGTERM while it flows.
        let (snd, s0) = (net.snd.clone(), net.s0.clone());
        let sender =
            std::thread::spawn(move || send(&snd, &s0, stream(300), 16, Duration::from_millis(2)));
        std::thread::sleep(Duration::from_millis(150));
        let st = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        sender.join().unwrap().unwrap();
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = status.expect("the filter did not stop within 15 s of SIGTERM");
        assert!(status.success(), "{status:?}\n{err}");
        assert!(!sock.exists(), "the control socket is removed");
        let last = out.lines().last().unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(last).unwrap();
        let f = &v["final"];
        assert_eq!(f["identity_holds"], true, "{last}");
        assert_eq!(f["queued"], 0, "{last}");
        assert!(f["received"].as_u64().unwrap() > 0, "{last}");
        // Every stats line before it held the identity too.
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let s = if v.get("final").is_some() {
                &v["final"]
            } else {
                &v
            };
            assert_eq!(s["identity_holds"], true, "{line}");
            let bad = netsched_util::json_units::violations(&v);
            assert!(
                bad.is_empty(),
                "numbers without their unit: {bad:?}\n{line}"
            );
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    assert_gone(&tag);
}
