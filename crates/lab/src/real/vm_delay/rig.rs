//! The testbed of `vm-delay --real`: a switch namespace, an external host on its uplink, one
//! namespace per guest on a veth into the switch, and the switch's configuration for a
//! scenario (same tiers, bitmaps, bounds, vif queue and batch as the simulator's).

use crate::experiments::vm_delay::VmConfig;
use anyhow::Result;
use netsched_testbed::Testbed;
use netsched_vswitch::SwitchConfig;

/// The external host's address (the probes' destination).
pub(super) const EXT_IP: &str = "10.78.0.254";

/// The namespaces of one domain count.
pub(super) struct Bed {
    pub tb: Testbed,
    pub sw: String,
    pub uplink: String,
    /// (namespace, switch-side port, guest-side interface)
    pub guests: Vec<(String, String, String)>,
}

/// The testbed for `n` guests.
pub(super) fn build(n: usize) -> Result<Bed> {
    let mut tb = Testbed::new("vmdly")?;
    let sw = tb.add_ns("sw")?;
    let ext = tb.add_ns("ext")?; // the external host on the uplink
    let uplink = tb.ifname("up");
    tb.veth(
        (&sw, &uplink, ""),
        (&ext, &tb.ifname("ue"), &format!("{EXT_IP}/24")),
    )?;
    let mut guests = Vec::new();
    for i in 0..n {
        netsched_testbed::check_interrupted()?;
        let g = tb.add_ns(&format!("g{i}"))?;
        let (p, e) = (tb.ifname(&format!("p{i}")), tb.ifname(&format!("e{i}")));
        tb.veth((&sw, &p, ""), (&g, &e, &format!("10.78.0.{}/24", i + 1)))?;
        guests.push((g, p, e));
    }
    Ok(Bed {
        tb,
        sw,
        uplink,
        guests,
    })
}

/// The switch configuration of `cfg` (same tiers, bitmaps, bounds, vif queue and batch).
pub(super) fn switch_config(bed: &Bed, cfg: &VmConfig, pps: u64) -> Result<SwitchConfig> {
    let per_tier = cfg.domains / cfg.tiers.len();
    // A late turn of the switch thread may make up at most one on period of budget: the
    // backend delivers the scenario's budget despite the host's short stalls (a hypervisor's
    // steal, another process), and longer stalls count as lost (gate 2).
    let catch_up = cfg.budget_cycle().map_or(0, |(on, _)| on);
    let mut t = format!(
        "uplink = \"{}\"\ndiscipline = \"{}\"\npacket_rate = {pps}\nbudget_busy = {}\n\
         budget_slice = \"{}us\"\nbudget_catch_up = \"{}us\"\nbatch = {}\nqueue_limit = {}\n",
        bed.uplink,
        cfg.scheduler,
        cfg.cpu_busy,
        (cfg.slice_ms * 1000.0).round() as u64,
        catch_up / 1000,
        cfg.batch,
        cfg.vif_queue
    );
    for (i, (_, port, _)) in bed.guests.iter().enumerate() {
        let tier = &cfg.tiers[i / per_tier];
        t += &format!(
            "[[port]]\ndev = \"{port}\"\ntier = {}\nbound = \"{}us\"\nbitmap_len = {}\n",
            tier.priority,
            (tier.bound_ms * 1000.0).round() as u64,
            tier.bitmap_len
        );
    }
    Ok(SwitchConfig::parse(&t, "vm-delay (generated)")?)
}
