//! The traffic of `adsl-ack --real`: iperf3 servers and clients between the end hosts (upload
//! local → remote, download remote → local, with the variant's window clamps), ping local →
//! remote every 200 ms, and their output parsed (receiver goodput per second, RTTs).

use super::rig::{Net, LOCAL, REMOTE};
use super::{RunOutcome, RunSpec};
use anyhow::{anyhow, bail, Context, Result};
use netsched_testbed::{check_interrupted, sleep_unless_interrupted, Process, Testbed};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// TCP segment payload on a 1500-byte MTU with timestamps (1500 − 20 − 20 − 12).
const MSS: u64 = 1448;
const PORT_UP: &str = "5201";
const PORT_DOWN: &str = "5202";

/// Start `args` in namespace `ns` with its output captured (read by [`Process::finish`]).
fn start(ns: &str, args: &[&str], label: &str) -> Result<Process> {
    Process::start_in(ns, args, label, Stdio::piped(), Stdio::piped())
}

/// Waits until a TCP server listens on `port` in `ns` (5 s at most).
fn wait_listening(tb: &Testbed, ns: &str, port: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        check_interrupted()?;
        let out = tb.exec(ns, "ss", &["-Hltn"]).unwrap_or_default();
        if out.contains(&format!(":{port} ")) {
            return Ok(());
        }
        sleep_unless_interrupted(Duration::from_millis(50))?;
    }
    bail!("iperf3 server on port {port} in {ns} did not start listening within 5 s")
}

/// Per-second receiver goodput from an iperf3 server's JSON (`intervals[].sum`).
fn iperf_series(json_text: &str, what: &str) -> Result<Vec<(f64, f64)>> {
    let v: Value = serde_json::from_str(json_text.trim())
        .with_context(|| format!("{what}: iperf3 output is not JSON: {:.200}", json_text))?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("{what}: iperf3 reported: {e}");
    }
    let ivs = v
        .get("intervals")
        .and_then(|i| i.as_array())
        .ok_or_else(|| anyhow!("{what}: iperf3 JSON has no intervals"))?;
    Ok(ivs
        .iter()
        .filter_map(|iv| {
            let s = iv.get("sum")?;
            Some((
                s.get("end")?.as_f64()?,
                s.get("bits_per_second")?.as_f64()? / 1e3,
            ))
        })
        .collect())
}

/// Mean of the series after the warm-up (slow start and queue fill).
fn mean_after(series: &[(f64, f64)], warmup: f64) -> Option<f64> {
    let v: Vec<f64> = series
        .iter()
        .filter(|(t, _)| *t > warmup + 0.5)
        .map(|(_, r)| *r)
        .collect();
    netsched_report::stats::mean(&v)
}

/// The iperf3 servers of `spec` (upload: in remote, download: in local), each listening.
pub(super) fn start_servers(net: &Net, spec: &RunSpec) -> Result<Vec<(&'static str, Process)>> {
    let mut servers = Vec::new();
    if spec.upload {
        servers.push((
            "up",
            start(
                &net.remote,
                &["iperf3", "-s", "-1", "-J", "-p", PORT_UP],
                "iperf3 upload server",
            )?,
        ));
        wait_listening(&net.tb, &net.remote, PORT_UP)?;
    }
    if spec.download {
        servers.push((
            "down",
            start(
                &net.local,
                &["iperf3", "-s", "-1", "-J", "-p", PORT_DOWN],
                "iperf3 download server",
            )?,
        ));
        wait_listening(&net.tb, &net.local, PORT_DOWN)?;
    }
    Ok(servers)
}

/// Ping local → remote every 200 ms for the run; returns it and the probes it sends.
pub(super) fn start_ping(net: &Net, spec: &RunSpec) -> Result<(Process, u32)> {
    let ping_count = (spec.secs * 5).saturating_sub(5).max(1);
    let ping = start(
        &net.local,
        &[
            "ping",
            "-n",
            "-i",
            "0.2",
            "-c",
            &ping_count.to_string(),
            "-W",
            "5",
            REMOTE,
        ],
        "ping",
    )?;
    Ok((ping, ping_count))
}

/// The iperf3 clients of `spec`, with the variant's window clamps.
pub(super) fn start_clients(net: &Net, spec: &RunSpec) -> Result<Vec<Process>> {
    let secs = spec.secs.to_string();
    let window_of = |w: Option<u32>| w.map(|w| (w as u64 * MSS).to_string());
    let client_args = |dst: &str, port: &str, window: Option<String>| -> Vec<String> {
        let mut v: Vec<String> = ["iperf3", "-c", dst, "-p", port, "-t", &secs, "-J"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(["--connect-timeout".into(), "3000".into()]);
        if let Some(w) = window {
            v.extend(["-w".to_string(), w]);
        }
        v
    };
    let mut clients = Vec::new();
    if spec.upload {
        let args = client_args(REMOTE, PORT_UP, window_of(spec.variant.window_packets));
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        clients.push(start(&net.local, &args, "iperf3 upload client")?);
    }
    if spec.download {
        let args = client_args(
            LOCAL,
            PORT_DOWN,
            window_of(spec.variant.down_window_packets),
        );
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        clients.push(start(&net.remote, &args, "iperf3 download client")?);
    }
    Ok(clients)
}

/// Each server's goodput per second and its mean after the warm-up, into `out`.
pub(super) fn read_goodput(
    servers: Vec<(&'static str, Process)>,
    spec: &RunSpec,
    out: &mut RunOutcome,
) -> Result<()> {
    let warmup = if spec.secs >= 20 { 5.0 } else { 3.0 };
    for (dir, s) in servers {
        let text = s.finish(Duration::from_secs(10))?;
        let series = iperf_series(&text, &format!("{} ({dir})", spec.name()))?;
        let mean = mean_after(&series, warmup);
        if dir == "up" {
            out.up_series = series;
            out.up_kbit = mean;
        } else {
            out.down_series = series;
            out.down_kbit = mean;
        }
    }
    Ok(())
}

/// The RTTs (ms) of ping's replies.
pub(super) fn ping_rtts(ping: Process) -> Vec<f64> {
    let ping_text = ping.finish(Duration::from_secs(10)).unwrap_or_default();
    ping_text
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf_json_series_and_warmup_mean() {
        let text = r#"{"intervals":[{"sum":{"end":1.0,"bits_per_second":100000}},
            {"sum":{"end":2.0,"bits_per_second":700000}},{"sum":{"end":3.0,"bits_per_second":800000}},
            {"sum":{"end":4.0,"bits_per_second":800000}}]}"#;
        let s = iperf_series(text, "t").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(mean_after(&s, 2.0), Some(800.0));
        assert!(iperf_series(r#"{"error":"unable to connect"}"#, "t")
            .unwrap_err()
            .to_string()
            .contains("unable to connect"));
    }
}
