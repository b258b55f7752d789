//! One configuration of `adsl-ack --real` end to end: its namespaces, the modem and the
//! gateway's shaping, the transfers and ping, and what they measured ([`RunOutcome`]);
//! everything it created is gone when it returns.

use super::rig::{build_net, set_congestion_control, shape_gateway, start_modem, REMOTE};
use super::traffic::{ping_rtts, read_goodput, start_clients, start_ping, start_servers};
use super::{RunOutcome, RunSpec, Separation};
use anyhow::{Context, Result};
use netsched_link::shape;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Run one configuration end to end; everything it created is gone when it returns.
pub fn run_one(spec: &RunSpec) -> Result<RunOutcome> {
    let a = &spec.access;
    let net = build_net(a).with_context(|| format!("{}: building the namespaces", spec.name()))?;
    let cc_in_force = set_congestion_control(&net, spec)?;
    let engine = start_modem(&net, spec)?;
    // Declared after `net`, so dropped before it: `clear` runs while the namespace exists and
    // removes the state file `apply` wrote, also when the run fails.
    let (gw_target, _shape_guard) = shape_gateway(&net, spec)?;
    // Warm ARP through the engine before measuring.
    let _ = net.tb.exec(
        &net.local,
        "ping",
        &["-n", "-c", "2", "-i", "0.2", "-W", "2", REMOTE],
    );

    let servers = start_servers(&net, spec)?;
    let (ping, ping_count) = start_ping(&net, spec)?;
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watch =
        crate::real::watch_lateness(Arc::clone(&stop_watch), netsched_link::emulation::CATCH_UP);
    let clients = start_clients(&net, spec)?;
    let limit = Duration::from_secs(spec.secs as u64 + 20);
    let finished: Result<Vec<_>> = clients.into_iter().map(|c| c.finish(limit)).collect();
    stop_watch.store(true, Ordering::Relaxed);
    let (host_late_pct, host_max_late_ms) = watch.join().unwrap_or((f64::NAN, f64::NAN));
    finished?;
    let mut out = RunOutcome {
        host_late_pct,
        host_max_late_ms,
        cc_in_force,
        testbed_tag: net.tb.tag().to_string(),
        ping_sent: ping_count,
        ..Default::default()
    };
    read_goodput(servers, spec, &mut out)?;
    out.ping_ms = ping_rtts(ping);
    if spec.sep == Separation::Shape {
        out.shape = shape::show(&gw_target).ok();
    }
    out.link = Some(engine.stop()?);
    // Dropped in reverse order: the shape guard (clear), then the namespaces.
    Ok(out)
}
