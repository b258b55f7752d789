//! The operational log as a person or a log shipper reads it (docs/logging.md):
//! `netsched-balanced` started, changed by `ctl`, its server checked down, and stopped, in
//! both formats. Text lines start with a UTC timestamp and a level; JSON lines are objects with
//! `timestamp`, `level` and the fields; the health change carries its reason and the `ctl`
//! change the peer's uid.

mod common;
use common::*;
use netsched_testbed::TempDir;
use std::process::{Command, Stdio};

/// Run the balancer with `--log-format fmt` against a server nobody listens on, make one ctl
/// change once the server is down, stop it with SIGTERM; its stderr.
async fn run(fmt: &str) -> String {
    let dir = TempDir::new("bal-logfmt").unwrap();
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let sock = dir.path().join("ctl.sock");
    let text = format!(
        "mode = \"l7\"\nlisten = [\"{listen}\"]\nalgorithm = {{ kind = \"rr\" }}\n\
         control_socket = \"{}\"\n[health]\nkind = \"tcp\"\ninterval = \"50ms\"\nfall = 1\n\
         rise = 1\n[[server]]\nname = \"s1\"\naddr = \"{dead}\"\n",
        sock.display()
    );
    let path = dir.path().join("balance.toml");
    std::fs::write(&path, text).unwrap();
    let err = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_netsched-balanced"))
        .args(["--log-format", fmt, "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let down =
        eventually(|| std::fs::read_to_string(&err).is_ok_and(|t| t.contains("server s1 is down")))
            .await;
    if down {
        netsched_balance::control::request(&sock, "set-weight s1 5").unwrap();
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let out = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(down && status.success(), "{status:?}\n{out}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_lines_carry_a_utc_timestamp_level_reason_and_uid() {
    let out = run("text").await;
    let uid = netsched_sys::process::euid();
    for l in out.lines() {
        // 2026-11-27T02:58:38.765790Z  INFO netsched_balance::daemon: listening on ...
        let (ts, rest) = l.split_once(' ').unwrap_or(("", ""));
        assert!(
            ts.len() == 27 && ts.ends_with('Z') && &ts[10..11] == "T",
            "{l}"
        );
        let level = rest.trim_start().split(' ').next().unwrap_or("");
        assert!(["INFO", "WARN", "ERROR"].contains(&level), "{l}");
    }
    let has = |what: &str| out.lines().any(|l| l.contains(what));
    assert!(has("listening on"), "{out}");
    assert!(
        has("server s1 is down (connect refused") && has("reason=\"connect refused\""),
        "{out}"
    );
    assert!(
        has(&format!("ctl set-weight s1 5 by uid {uid}: s1 weight 5")),
        "{out}"
    );
    assert!(has("stopped in"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_are_objects_with_timestamp_level_and_fields() {
    let out = run("json").await;
    let uid = netsched_sys::process::euid();
    let mut down = false;
    let mut ctl = false;
    for l in out.lines() {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{l}"
        );
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
        let f = &v["fields"];
        down |= f["server"] == "s1" && f["reason"] == "connect refused";
        ctl |= f["uid"] == uid && f["command"] == "set-weight s1 5";
    }
    assert!(down && ctl, "{out}");
}
