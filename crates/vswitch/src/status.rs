//! The host switch's live status page (`GET /` on its `--metrics` listener): one row per guest
//! port with its tier and weight, frames in and forwarded, the forwarding rate in frames and
//! bits per second (between two refreshes), drops (all reasons, and the kernel's before the
//! switch read them), the queue, frames delivered from the uplink, the longest run of round
//! starts that passed over the port and its proven bound (`delay_constrained`), and whether its
//! interface is gone; the budget, rounds and the uplink above. The page and its JSON are
//! `netsched_metrics`'s (`status.html` documents the layout's fields); every figure is a
//! `netsched_vswitch_` family of `/metrics` (metrics.rs).

use netsched_metrics::Page;

pub const PAGE: Page = Page {
    prefix: "netsched_vswitch_",
    layout: r#"{
  "title": "netsched vswitch",
  "summary": [
    {"id": "budget_pps", "label": "budget", "metric": "netsched_vswitch_budget_packets_per_second", "states": {"0": "no packet budget"}, "unit": "/s"},
    {"id": "budget_bps", "label": "budget (bits)", "metric": "netsched_vswitch_budget_bits_per_second", "states": {"0": "no bit budget"}, "unit": "bit/s"},
    {"id": "busy", "label": "budget off (‰)", "metric": "netsched_vswitch_budget_busy_permille"},
    {"id": "rounds", "label": "rounds", "metric": "netsched_vswitch_rounds_total"},
    {"id": "rate", "label": "forwarded", "metric": "netsched_vswitch_port_forwarded_total", "agg": "rate", "unit": "/s"},
    {"id": "uplink_received", "label": "uplink received", "metric": "netsched_vswitch_uplink_received_total"},
    {"id": "uplink_dropped", "label": "uplink dropped", "metric": "netsched_vswitch_uplink_dropped_total", "agg": "sum", "bad": ["nonzero"]},
    {"id": "macs", "label": "MACs learned", "metric": "netsched_vswitch_mac_learned"}
  ],
  "tables": [
    {"id": "ports", "title": "Guest ports", "key": "port", "rows": "netsched_vswitch_port_tier",
     "columns": [
      {"id": "tier", "label": "tier", "metric": "netsched_vswitch_port_tier"},
      {"id": "weight", "label": "weight", "metric": "netsched_vswitch_port_weight"},
      {"id": "received", "label": "received", "metric": "netsched_vswitch_port_received_total"},
      {"id": "forwarded", "label": "forwarded", "metric": "netsched_vswitch_port_forwarded_total"},
      {"id": "rate", "label": "frames/s", "metric": "netsched_vswitch_port_forwarded_total", "agg": "rate", "unit": "/s"},
      {"id": "bitrate", "label": "rate", "metric": "netsched_vswitch_port_forwarded_bytes_total", "agg": "rate", "scale": 8, "unit": "bit/s"},
      {"id": "dropped", "label": "dropped", "metric": "netsched_vswitch_port_dropped_total", "agg": "sum", "bad": ["nonzero"]},
      {"id": "kernel_drops", "label": "kernel drops", "metric": "netsched_vswitch_port_kernel_drops_total", "warn": ["nonzero"]},
      {"id": "queued", "label": "queued", "metric": "netsched_vswitch_port_queued"},
      {"id": "delivered", "label": "delivered", "metric": "netsched_vswitch_port_delivered_total"},
      {"id": "passed", "label": "longest pass-over (rounds)", "metric": "netsched_vswitch_port_max_rounds_passed"},
      {"id": "bound", "label": "bound", "metric": "netsched_vswitch_port_bound_rounds", "states": {"0": "–"}},
      {"id": "removed", "label": "interface", "metric": "netsched_vswitch_port_removed", "states": {"0": "present", "1": "removed"},
       "bad": ["removed"], "row": {"removed": "bad"}}
     ]}
  ]
}"#,
};
