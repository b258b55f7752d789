//! `netsched nfq ctl` requests in the daemon's log: a request that changes state is logged
//! with the caller's uid and pid (`SO_PEERCRED`), a refused one as a warning, and a read
//! (`show`) never (docs/logging.md). The daemon's own control path end to end, without
//! NFQUEUE (no root needed): its control socket ([`ControlServer`]) and line handler, the
//! control state and the engine, a real client connection, and the text lines of a `tracing`
//! fmt subscriber as the daemon writes them.

use netsched_control::LogCapture;
use netsched_nfq::config::{ClassSpec, Config, Deadline, DisciplineKind};
use netsched_nfq::control::{request_with_timeout, ControlServer, ControlState};
use netsched_nfq::engine::Engine;
use std::sync::Mutex;
use std::time::Duration;

fn engine() -> Engine {
    let mut c = Config {
        discipline: DisciplineKind::Percentile,
        deadline: Deadline::Fixed(4_000_000),
        ..Config::default()
    };
    for (i, p) in [90u32, 50].iter().enumerate() {
        c.classes.push(ClassSpec {
            name: format!("c{i}"),
            percentile: *p,
        });
    }
    c.default_class = 1;
    Engine::new(c).unwrap()
}

#[test]
fn a_change_is_logged_with_the_callers_uid_and_pid_and_a_read_is_not() {
    // The whole process's events: this test binary has one test, and the control threads log
    // from their own threads.
    let out = LogCapture::default();
    let sink = out.clone();
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .init();

    let dir = netsched_testbed::TempDir::new("nfq-ctl-log").unwrap();
    let path = dir.path().join("ctl.sock");
    let engine = Mutex::new(engine());
    let mut state = ControlState::new(&engine.lock().unwrap().cfg);
    let control = ControlServer::bind(&path, None)
        .unwrap()
        .serve(move |cmd| {
            let mut e = engine.lock().unwrap();
            let mut acc = Vec::new();
            state.serve(cmd, |c| e.apply(c, 0, &mut acc), &mut |_| {})
        })
        .unwrap();
    let ask = |line: &str| request_with_timeout(&path, line, Duration::from_secs(20));

    let r = ask("set-percentile c0 71");
    assert_eq!(r.unwrap(), "class c0 percentile = 71\n");
    let r = ask("show");
    assert!(r.unwrap().starts_with("state: running"));
    let r = ask("show --json");
    assert!(r.unwrap().starts_with('{'));
    let r = ask("set-percentile nosuch 60");
    assert!(r.is_err(), "{r:?}");
    drop(control);

    // The answer is written after the line is logged, so every line is in by now.
    let log = out.text();
    let (uid, pid) = (effective_uid(), std::process::id());
    let lines: Vec<&str> = log.lines().collect();
    let change = lines
        .iter()
        .find(|l| l.contains("set-percentile c0 71"))
        .unwrap_or_else(|| panic!("the change is not logged:\n{log}"));
    assert!(change.contains(" INFO "), "{change}");
    assert!(
        change.contains(&format!(
            "ctl set-percentile c0 71 by uid {uid}: ok; class c0 percentile = 71"
        )),
        "{change}"
    );
    assert!(change.contains(&format!("pid={pid}")), "{change}");
    let refused = lines
        .iter()
        .find(|l| l.contains("set-percentile nosuch 60"))
        .unwrap_or_else(|| panic!("the refused change is not logged:\n{log}"));
    assert!(
        refused.contains(" WARN ")
            && refused.contains(&format!("by uid {uid} refused: error: "))
            && refused.contains("nosuch"),
        "{refused}"
    );
    assert!(!log.contains("ctl show"), "a read was logged:\n{log}");
    assert_eq!(
        lines.iter().filter(|l| l.contains("ctl ")).count(),
        2,
        "{log}"
    );
}

/// This process's real uid, as the kernel reports it for the socket's peer.
fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("a Uid: line in /proc/self/status")
}
