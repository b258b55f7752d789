//! One mode of the percentile-web real run: the NFQUEUE daemon in a thread inside the server
//! namespace, configured for the mode, the closed-loop load through it ([`super::client`]),
//! the daemon's final status, and the per-class means and p99 (`netsched_report::stats`).
//!
//! Source: P0 §4 (the thesis's experiment: FIFO kernel, Percentile daemon; strict priority
//! added).
//! Cost: the run's length; memory of every answered request's sample.

use super::client::{run_load, LoadResult, LoadSpec};
use super::rig::{client_cidr, WebBed};
use super::RealParams;
use anyhow::{anyhow, Result};
use netsched_nfq::config::{ClassSpec, Config, DisciplineKind};
use netsched_nfq::engine::Status;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What one mode measured.
#[derive(Debug, Clone)]
pub struct ModeRun {
    pub mode: DisciplineKind,
    pub load: LoadResult,
    /// The daemon's status just before it stopped.
    pub status: Status,
    pub mean_ms: Vec<f64>,
    pub p99_ms: Vec<f64>,
    pub completed: Vec<u64>,
    pub released_at_exit: usize,
    /// The unique tag of the testbed the mode ran on (in every namespace name it created).
    pub testbed_tag: String,
    /// Which run of this mode this is (1 unless earlier ones ran on an unsteady server).
    pub attempt: usize,
}

/// The daemon's configuration for one mode.
pub fn daemon_config(p: &RealParams, mode: DisciplineKind, socket: &Path) -> Result<Config> {
    let deadline = if p.deadline == "fifo_server_mean" {
        "auto"
    } else {
        p.deadline.as_str()
    };
    let mut c = Config {
        discipline: mode,
        budget: Some(p.budget),
        deadline: netsched_nfq::config::parse_deadline(deadline)?,
        control_socket: socket.to_path_buf(),
        early_miss: p.early_miss,
        ..Config::default()
    };
    c.limits.max_hold = p.max_hold.as_nanos() as u64;
    c.limits.max_hold_factor = p.max_hold_factor;
    for (k, &pc) in p.percentiles.iter().enumerate() {
        c.classes.push(ClassSpec {
            name: format!("C{k}"),
            percentile: pc,
        });
        c.table
            .push((netsched_nfq::config::parse_cidr(&client_cidr(k))?, k));
    }
    c.default_class = p.percentiles.len() - 1;
    c.validate()?;
    Ok(c)
}

/// Run one mode on an existing testbed: daemon (in a thread inside the server namespace),
/// the load, the final status.
pub fn run_mode(bed: &WebBed, p: &RealParams, mode: DisciplineKind) -> Result<ModeRun> {
    let socket = bed.dir.join(format!("ctl-{}.sock", mode.as_str()));
    let cfg = daemon_config(p, mode, &socket)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server_ns = bed.server_ns.clone();
    let cpu = p.client_cpu;
    let stop2 = Arc::clone(&stop);
    let daemon = std::thread::spawn(move || -> Result<netsched_nfq::daemon::Summary> {
        netsched_testbed::enter_netns(&server_ns)?;
        let _ = netsched_testbed::pin_to_cpu(cpu);
        Ok(netsched_nfq::daemon::run_daemon(cfg, &stop2, |_| {
            let _ = ready_tx.send(());
        })?)
    });
    if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        stop.store(true, Ordering::Relaxed);
        return match daemon.join() {
            Ok(Err(e)) => Err(e.context("the daemon did not start")),
            _ => Err(anyhow!("the daemon did not start within 10 s")),
        };
    }
    let spec = LoadSpec {
        clients: bed.clients(),
        port: bed.port,
        path: "/index.html".into(),
        threads_per_client: p.threads_per_client,
        duration: p.duration,
        max_requests_per_thread: p.max_requests_per_thread,
        cpu: Some(p.client_cpu),
        read_timeout: Duration::from_secs(10),
        // P0 Table 14 is taken "after 60000 packets of one class" (4 threads × m = 15000).
        stop_when_a_class_finishes: true,
    };
    let no_stop = AtomicBool::new(false);
    // Ends early on SIGINT/SIGTERM (the run's SignalGuard); checked below once the daemon
    // has stopped and released what it held.
    let load = run_load(&spec, &no_stop);
    let status = netsched_nfq::control::status(&socket).ok();
    stop.store(true, Ordering::Relaxed);
    let summary = daemon
        .join()
        .map_err(|_| anyhow!("the daemon thread panicked"))??;
    netsched_testbed::check_interrupted()?;
    let load = load?;
    let status = status.unwrap_or(summary.status.clone());
    let n = p.percentiles.len();
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); n];
    for s in &load.samples {
        per[s.class].push(s.latency_ns as f64 / 1e6);
    }
    for v in &mut per {
        netsched_report::stats::sort(v);
    }
    Ok(ModeRun {
        mode,
        mean_ms: per
            .iter()
            .map(|v| netsched_report::stats::mean(v).unwrap_or(0.0))
            .collect(),
        p99_ms: per
            .iter()
            .map(|v| netsched_report::stats::percentile(v, 0.99).unwrap_or(f64::NAN))
            .collect(),
        completed: per.iter().map(|v| v.len() as u64).collect(),
        load,
        status,
        released_at_exit: summary.released_at_exit,
        testbed_tag: bed.tb.tag().to_string(),
        attempt: 1,
    })
}
