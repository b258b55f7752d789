//! The testbed of `adsl-ack --real`: namespaces local — gateway — modem — remote, the LAN
//! shaped with `tbf`, the access link emulated by `netsched link` in the modem namespace, and
//! for ACK separation by tc, `netsched shape` on the gateway.

use super::{Access, RunSpec, Separation};
use anyhow::{Context, Result};
use netsched_link::engine::{parse_qdisc, spawn_in_netns, DirConfig, EngineConfig, EngineHandle};
use netsched_link::shape::{self, ShapePlan, Target, TreePlan};
use netsched_testbed::Testbed;

pub(super) const LOCAL: &str = "10.203.1.1";
const GW_LAN: &str = "10.203.1.254";
pub(super) const REMOTE: &str = "10.203.2.1";
const GW_WAN: &str = "10.203.2.254";

/// Clears a `netsched shape` installation when dropped.
pub(super) struct ShapeGuard(Option<Target>);

impl Drop for ShapeGuard {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = shape::clear(t);
        }
    }
}

/// The namespaces of one run.
pub(super) struct Net {
    pub tb: Testbed,
    pub local: String,
    pub gw: String,
    pub modem: String,
    pub remote: String,
    pub gw_wan: String,
    pub modem_a: String,
    pub modem_b: String,
}

/// The namespaces of `access`, addressed and routed, the LAN shaped.
pub(super) fn build_net(access: &Access) -> Result<Net> {
    let mut tb = Testbed::new("adslr")?;
    let local = tb.add_ns("local")?;
    let gw = tb.add_ns("gw")?;
    let modem = tb.add_ns("modem")?;
    let remote = tb.add_ns("remote")?;
    let (l0, g0, g1, ma, mb, r0) = (
        tb.ifname("l0"),
        tb.ifname("g0"),
        tb.ifname("g1"),
        tb.ifname("ma"),
        tb.ifname("mb"),
        tb.ifname("r0"),
    );
    for ns in [&local, &gw, &modem, &remote] {
        // IPv4 only: keeps router solicitations and MLD reports off the measured links.
        tb.sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")?;
        tb.sysctl(ns, "net.ipv6.conf.default.disable_ipv6=1")?;
    }
    tb.veth(
        (&local, &l0, &format!("{LOCAL}/24")),
        (&gw, &g0, &format!("{GW_LAN}/24")),
    )?;
    tb.veth((&gw, &g1, &format!("{GW_WAN}/24")), (&modem, &ma, ""))?;
    tb.veth((&modem, &mb, ""), (&remote, &r0, &format!("{REMOTE}/24")))?;
    tb.sysctl(&gw, "net.ipv4.ip_forward=1")?;
    tb.exec(&local, "ip", &["route", "add", "default", "via", GW_LAN])?;
    tb.exec(
        &remote,
        "ip",
        &["route", "add", "10.203.1.0/24", "via", GW_WAN],
    )?;
    // LAN at its rate both ways (tbf, burst of a few frames, ≈ 50 ms of queue).
    let lan = format!("{}bit", access.lan_bps);
    let limit = (access.lan_bps / 8 / 20).max(30_000).to_string();
    for (ns, dev) in [(&local, &l0), (&gw, &g0)] {
        tb.exec(
            ns,
            "tc",
            &[
                "qdisc", "add", "dev", dev, "root", "tbf", "rate", &lan, "burst", "15000", "limit",
                &limit,
            ],
        )?;
    }
    Ok(Net {
        tb,
        local,
        gw,
        modem,
        remote,
        gw_wan: g1,
        modem_a: ma,
        modem_b: mb,
    })
}

/// The modem's uplink discipline of `spec` (its FIFO, or the core ACK separation).
pub(super) fn link_qdisc_up(spec: &RunSpec) -> String {
    let q = spec.access.up_queue;
    match spec.sep {
        Separation::Fifo | Separation::Shape => format!("fifo:{q}"),
        Separation::Link => format!("ack_sep:{q}"),
        Separation::LinkFiltered => format!("ack_sep:{q}+filter+cap={}", spec.ack_share_max),
    }
}

/// Sets the congestion control of `spec` in the end hosts; returns the one in force.
pub(super) fn set_congestion_control(net: &Net, spec: &RunSpec) -> Result<String> {
    for ns in [&net.local, &net.remote] {
        if spec.variant.cc != "default" {
            net.tb
                .sysctl(
                    ns,
                    &format!("net.ipv4.tcp_congestion_control={}", spec.variant.cc),
                )
                .with_context(|| format!("congestion control `{}`", spec.variant.cc))?;
        }
    }
    let cc_in_force = net
        .tb
        .exec(
            &net.local,
            "sysctl",
            &["-n", "net.ipv4.tcp_congestion_control"],
        )?
        .trim()
        .to_string();
    Ok(cc_in_force)
}

/// Starts `netsched link` in the modem namespace: the access link of `spec` both ways.
pub(super) fn start_modem(net: &Net, spec: &RunSpec) -> Result<EngineHandle> {
    let a = &spec.access;
    let engine_cfg = EngineConfig {
        dev_a: net.modem_a.clone(),
        dev_b: net.modem_b.clone(),
        ab: DirConfig {
            rate_bps: Some(a.up_bps),
            delay: a.delay,
            qdisc: parse_qdisc(&link_qdisc_up(spec))?,
        },
        ba: DirConfig {
            rate_bps: Some(a.down_bps),
            delay: a.delay,
            qdisc: parse_qdisc(&format!("fifo:{}", a.down_queue))?,
        },
        pool: 4096,
        delay_line: 4096,
        stats_interval: None,
        busy_poll: false,
        spin: 0,
        port: netsched_sys::PortOptions::default(),
    };
    let engine = spawn_in_netns(&net.modem, engine_cfg).context("starting netsched link")?;
    Ok(engine)
}

/// The gateway's WAN side, and for ACK separation by tc `netsched shape` applied there (cleared
/// when the guard is dropped, also when the run fails).
pub(super) fn shape_gateway(net: &Net, spec: &RunSpec) -> Result<(Target, ShapeGuard)> {
    let a = &spec.access;
    let gw_target = Target::in_netns(&net.gw, &net.gw_wan);
    // Created before `apply`: a failed apply is cleared too.
    let guard = ShapeGuard(if spec.sep == Separation::Shape {
        Some(gw_target.clone())
    } else {
        None
    });
    if spec.sep == Separation::Shape {
        let plan = ShapePlan {
            up: TreePlan {
                dev: net.gw_wan.clone(),
                line_bps: a.up_bps,
                headroom_pct: 5.0,
                queue: a.up_queue as u32,
                ack_queue: a.up_queue as u32,
                ack_priority: true,
            },
            down: None,
            ingress_dev: net.gw_wan.clone(),
        };
        shape::apply(&gw_target, &plan, false).context("netsched shape apply on the gateway")?;
    }
    Ok((gw_target, guard))
}
