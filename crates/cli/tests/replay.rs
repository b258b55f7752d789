//! End-to-end tests of `netsched replay`: the binary, the example files, hand-worked outcomes.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn replay(args: &[&str]) -> (bool, Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_netsched"))
        .arg("replay")
        .args(args)
        .current_dir(root())
        .output()
        .expect("run netsched");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    // Every number of every event named with its unit (docs/cli.md, "JSON outputs").
    for e in &events {
        let bad = netsched_util::json_units::violations(e);
        assert!(bad.is_empty(), "numbers without their unit: {bad:?}\n{e}");
    }
    (
        out.status.success(),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A private folder for one test's files, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("netsched-replay-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ids(events: &[Value], kind: &str) -> Vec<u64> {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .map(|e| e["id"].as_u64().unwrap())
        .collect()
}

/// A 3-packet FIFO at 800 kbit/s: packet 1 goes straight to the wire, 2-4 fill the queue, the
/// ACK (5) and packet 6 are tail-dropped; the ACK at 20 ms finds room.
#[test]
fn fifo_burst_tail_drops() {
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/fifo.toml",
        "--trace",
        "examples/replay/burst.csv",
    ]);
    assert!(ok, "{err}");
    assert_eq!(ids(&ev, "drop"), vec![5, 6]);
    assert_eq!(ids(&ev, "dequeue"), vec![1, 2, 3, 4, 7]);
    // 1500 B at 800 kbit/s = 15 ms per packet.
    let first = ev.iter().find(|e| e["event"] == "complete").unwrap();
    assert_eq!(first["time_ns"], 15_000_000);
    let summary = ev.last().unwrap();
    assert_eq!(summary["event"], "summary");
    assert_eq!(summary["completed"], 5);
    assert_eq!(summary["dropped"], 2);
}

/// ACK separation (P3): the ACK gets its own FIFO and overtakes queued data; the later ACK (7)
/// overtakes packets 3 and 4 too.
#[test]
fn ack_separation_burst_serves_acks_first() {
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/ack-separation.toml",
        "--trace",
        "examples/replay/burst.csv",
    ]);
    assert!(ok, "{err}");
    assert_eq!(ids(&ev, "drop"), vec![6]);
    assert_eq!(ids(&ev, "dequeue"), vec![1, 5, 2, 7, 3, 4]);
}

/// Percentile (P0): under contention the higher classes get lower mean latency.
#[test]
fn percentile_orders_classes() {
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/percentile.toml",
        "--trace",
        "examples/replay/web-waves.csv",
    ]);
    assert!(ok, "{err}");
    let mut sum = [0f64; 5];
    let mut n = [0f64; 5];
    for e in ev.iter().filter(|e| e["event"] == "complete") {
        let c = e["class"].as_u64().unwrap() as usize;
        sum[c] += e["latency_ns"].as_f64().unwrap();
        n[c] += 1.0;
    }
    let mean: Vec<f64> = (0..5).map(|c| sum[c] / n[c]).collect();
    assert!(
        n.iter().all(|&k| k == 40.0),
        "every request completes: {n:?}"
    );
    assert!(
        mean[0] < mean[4],
        "C0 {} should beat C4 {}",
        mean[0],
        mean[4]
    );
}

/// wlc over weights 3,2,1, worked by hand with IPVS's rule (pick the least
/// (active·256 + inactive)/weight, ties to the earlier server).
#[test]
fn wlc_hand_worked_picks() {
    let (ok, ev, err) = replay(&[
        "balance",
        "--config",
        "examples/replay/wlc.toml",
        "--trace",
        "examples/replay/conns.csv",
    ]);
    assert!(ok, "{err}");
    let picks: Vec<u64> = ev
        .iter()
        .filter(|e| e["event"] == "pick")
        .map(|e| e["server"].as_u64().unwrap())
        .collect();
    assert_eq!(picks, vec![0, 1, 2, 0, 1, 0, 1, 0]);
    assert_eq!(
        ev.last().unwrap()["per_server"],
        serde_json::json!([4, 3, 1])
    );
}

#[test]
fn bad_trace_names_file_line_and_field() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("netsched-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("bad.csv");
    std::fs::write(&trace, "time,class,size,id\n0ms,0,100,1\n1ms,0,lots,2\n").unwrap();
    let (ok, _, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/fifo.toml",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("bad.csv:3") && err.contains("`size`") && err.contains("lots"),
        "{err}"
    );

    let cfg = dir.join("bad.toml");
    std::fs::write(
        &cfg,
        "[qdisc]\nkind = \"fifo\"\nqueue_limit = 0\n[service]\nrate = \"1mbit\"\n",
    )
    .unwrap();
    let (ok, _, err) = replay(&[
        "qdisc",
        "--config",
        cfg.to_str().unwrap(),
        "--trace",
        "examples/replay/burst.csv",
    ]);
    assert!(!ok);
    assert!(
        err.contains("bad.toml") && err.contains("queue_limit"),
        "{err}"
    );

    std::fs::write(
        &cfg,
        "[qdisc]\nkind = \"fifo\"\n[service]\nrate = \"fast\"\n",
    )
    .unwrap();
    let (ok, _, err) = replay(&[
        "qdisc",
        "--config",
        cfg.to_str().unwrap(),
        "--trace",
        "examples/replay/burst.csv",
    ]);
    assert!(!ok);
    assert!(
        err.contains("service.rate") && err.contains("fast"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// EDF with late items discarded: 1 starts at once, 2 starts at 10 ms (deadline 15 ms), and at
/// 20 ms items 3 and 4 are past their 15 ms deadline: evicted and reported, not lost.
#[test]
fn edf_expired_items_are_reported() {
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/edf.toml",
        "--trace",
        "examples/replay/edf.csv",
    ]);
    assert!(ok, "{err}");
    assert_eq!(ids(&ev, "dequeue"), vec![1, 2]);
    assert_eq!(ids(&ev, "evict"), vec![3, 4]);
    assert!(ev
        .iter()
        .filter(|e| e["event"] == "evict")
        .all(|e| e["reason"] == "deadline_expired" && e["time_ns"] == 20_000_000));
    assert_eq!(ev.last().unwrap()["dropped"], 2);
}

/// `per_item` beyond the largest duration is refused where it enters (it used to wrap, and
/// completion times ran backwards).
#[test]
fn huge_per_item_is_an_error() {
    let d = Scratch::new("per-item");
    let cfg = d.file(
        "huge.toml",
        "[qdisc]\nkind = \"fifo\"\n[service]\nper_item = \"99999999999999s\"\n",
    );
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        &cfg,
        "--trace",
        "examples/replay/burst.csv",
    ]);
    assert!(!ok, "{ev:?}");
    assert!(
        err.contains("huge.toml")
            && err.contains("service.per_item")
            && err.contains("99999999999999s"),
        "{err}"
    );
}

/// A 4294967295-byte item at 800 kbit/s takes 4294967295 × 8 / 800000 s = 42949672950000 ns
/// (the product used to overflow 64 bits and give a wrong latency).
#[test]
fn largest_item_gets_the_exact_latency() {
    let d = Scratch::new("big-item");
    let cfg = d.file(
        "c.toml",
        "[qdisc]\nkind = \"fifo\"\n[service]\nrate = \"800kbit\"\n",
    );
    let trace = d.file("t.csv", "time,class,size,id\n0,0,4294967295,1\n");
    let (ok, ev, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(ok, "{err}");
    let done = ev.iter().find(|e| e["event"] == "complete").unwrap();
    assert_eq!(done["latency_ns"], 42_949_672_950_000u64);
    assert_eq!(done["time_ns"], 42_949_672_950_000u64);
}

/// A size beyond u32::MAX bytes, and a service time beyond u64 ns (1 bit/s), are errors
/// naming the line, never a wrapped time.
#[test]
fn oversize_items_and_overflowing_service_are_errors() {
    let d = Scratch::new("oversize");
    let cfg = d.file(
        "c.toml",
        "[qdisc]\nkind = \"fifo\"\n[service]\nrate = \"1bit\"\n",
    );
    let trace = d.file("t.csv", "time,class,size,id\n0,0,4294967296,1\n");
    let (ok, _, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(!ok);
    assert!(err.contains("t.csv:2") && err.contains("`size`"), "{err}");
    let trace = d.file("t.csv", "time,class,size,id\n0,0,4294967295,1\n");
    let (ok, _, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(!ok);
    assert!(err.contains("t.csv:2") && err.contains("item 1"), "{err}");
}

/// A trace time of u64::MAX ns is refused with file, line and field (it used to complete
/// before it was enqueued).
#[test]
fn trace_time_beyond_the_bound_is_an_error() {
    let d = Scratch::new("max-time");
    for (name, line, text) in [
        ("t.csv", 3, "time,class,size,id\n0,0,100,1\n18446744073709551615ns,0,100,2\n"),
        (
            "t.jsonl",
            2,
            "{\"time\":0,\"class\":0,\"size\":100,\"id\":1}\n{\"time\":\"18446744073709551615ns\",\"class\":0,\"size\":100,\"id\":2}\n",
        ),
    ] {
        let trace = d.file(name, text);
        let (ok, _, err) = replay(&["qdisc", "--config", "examples/replay/fifo.toml", "--trace", &trace]);
        assert!(!ok);
        assert!(
            err.contains(&format!("{name}:{line}:")) && err.contains("`time`") && err.contains("18446744073709551615ns"),
            "{err}"
        );
    }
}

/// Units follow tc(8): `1000bps` is 1000 BYTES/s, so a 1000-byte item takes 1 s; a bare
/// number is not a time.
#[test]
fn rates_and_times_follow_tc_units() {
    let d = Scratch::new("units");
    let cfg = d.file(
        "c.toml",
        "[qdisc]\nkind = \"fifo\"\n[service]\nrate = \"1000bps\"\n",
    );
    let trace = d.file("t.csv", "time,class,size,id\n0,0,1000,1\n");
    let (ok, ev, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(ok, "{err}");
    let done = ev.iter().find(|e| e["event"] == "complete").unwrap();
    assert_eq!(done["latency_ns"], 1_000_000_000u64);
    let trace = d.file("t.csv", "time,class,size,id\n0,0,1000,1\n1.5,0,1000,2\n");
    let (ok, _, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(!ok);
    assert!(
        err.contains("t.csv:3") && err.contains("needs a unit"),
        "{err}"
    );
    let cfg = d.file(
        "c.toml",
        "[qdisc]\nkind = \"fifo\"\n[service]\nrate = \"0.1bit\"\n",
    );
    let (ok, _, err) = replay(&["qdisc", "--config", &cfg, "--trace", &trace]);
    assert!(!ok);
    assert!(
        err.contains("service.rate") && err.contains("0.1bit"),
        "{err}"
    );
}

/// An id may come back once its item has left; an id still queued or in service is refused.
#[test]
fn ids_are_unique_among_items_in_flight() {
    let d = Scratch::new("ids");
    let trace = d.file(
        "t.csv",
        "time,class,size,id\n0ms,0,1500,1\n100ms,0,1500,1\n100ms,0,1500,1\n",
    );
    let (ok, ev, err) = replay(&[
        "qdisc",
        "--config",
        "examples/replay/fifo.toml",
        "--trace",
        &trace,
    ]);
    assert!(!ok);
    assert!(
        err.contains("t.csv:4") && err.contains("`id`") && err.contains("line 3"),
        "{err}"
    );
    assert_eq!(ids(&ev, "complete"), vec![1]);
}

/// Every kind `replay balance --help` lists is one the config accepts, and `p2c` is neither.
#[test]
fn balance_help_lists_exactly_the_accepted_kinds() {
    let out = Command::new(env!("CARGO_BIN_EXE_netsched"))
        .args(["replay", "balance", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.contains("kind = \"wlc\""))
        .expect("kind line in help");
    let kinds: Vec<&str> = line.split('#').nth(1).unwrap().split_whitespace().collect();
    assert!(kinds.len() >= 15, "{line}");
    assert!(!kinds.contains(&"p2c"), "{line}");
    let d = Scratch::new("kinds");
    for kind in kinds {
        let cfg = d.file(
            "c.toml",
            &format!("[balancer]\nkind = \"{kind}\"\n[[servers]]\naddr = \"10.0.0.1\"\n"),
        );
        let (ok, _, err) = replay(&[
            "balance",
            "--config",
            &cfg,
            "--trace",
            "examples/replay/conns.csv",
        ]);
        assert!(ok, "{kind}: {err}");
    }
}
