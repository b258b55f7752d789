//! The link engine's live status page (`GET /` on its `--metrics` listener): one row per
//! direction (a→b, b→a) with the interfaces it reads and writes, its configured rate and
//! delay, frames in and out, the rates in and out (bits per second over the last second),
//! drops (the discipline's and the engine's, all reasons) and the kernel's, what waits in the
//! discipline and on the delay line, and the ACKs it classified; the port backend and the
//! packet thread's CPU above. The page and its JSON are `netsched_metrics`'s (`status.html`
//! documents the layout's fields); every figure is a `netsched_link_` family of `/metrics`
//! (metrics.rs), from the packet thread's latest copy (≤ ~100 ms old).

use netsched_metrics::Page;

pub const PAGE: Page = Page {
    prefix: "netsched_link_",
    layout: r#"{
  "title": "netsched link",
  "summary": [
    {"id": "backend", "label": "port backend", "metric": "netsched_link_port_backend", "agg": "state", "state": "backend"},
    {"id": "ring", "label": "ring memory", "metric": "netsched_link_ring_bytes", "unit": "B"},
    {"id": "uptime", "label": "forwarding for (s)", "metric": "netsched_link_uptime_seconds"},
    {"id": "cpu", "label": "packet thread CPU (s)", "metric": "netsched_link_cpu_seconds_total"},
    {"id": "wakeups", "label": "wake-ups", "metric": "netsched_link_wakeups_total"}
  ],
  "tables": [
    {"id": "directions", "title": "Directions", "key": "dir", "keyLabel": "direction",
     "rows": "netsched_link_rx_frames_total",
     "columns": [
      {"id": "from", "label": "from", "metric": "netsched_link_rx_frames_total", "agg": "label", "label_of": "from"},
      {"id": "to", "label": "to", "metric": "netsched_link_rx_frames_total", "agg": "label", "label_of": "to"},
      {"id": "rate_limit", "label": "rate limit", "metric": "netsched_link_rate_limit_bits_per_second", "states": {"0": "unshaped"}, "unit": "bit/s"},
      {"id": "delay", "label": "delay", "metric": "netsched_link_delay_seconds", "unit": "s"},
      {"id": "rx_frames", "label": "frames in", "metric": "netsched_link_rx_frames_total"},
      {"id": "rx_rate", "label": "rate in", "metric": "netsched_link_rx_bytes_total", "agg": "rate", "scale": 8, "unit": "bit/s"},
      {"id": "tx_frames", "label": "frames out", "metric": "netsched_link_tx_frames_total"},
      {"id": "tx_rate", "label": "rate out", "metric": "netsched_link_tx_bytes_total", "agg": "rate", "scale": 8, "unit": "bit/s"},
      {"id": "drops", "label": "dropped", "metric": "netsched_link_drops_total", "agg": "sum", "bad": ["nonzero"]},
      {"id": "kernel_drops", "label": "kernel drops", "metric": "netsched_link_kernel_socket_drops_total", "warn": ["nonzero"]},
      {"id": "queued", "label": "queued", "metric": "netsched_link_queued_frames"},
      {"id": "queued_bytes", "label": "queued bytes", "metric": "netsched_link_queued_bytes", "unit": "B"},
      {"id": "in_flight", "label": "in flight", "metric": "netsched_link_in_flight_frames"},
      {"id": "max_line", "label": "most in flight", "metric": "netsched_link_max_delay_line_frames"},
      {"id": "acks", "label": "ACKs classified", "metric": "netsched_link_acks_classified_total"}
     ]}
  ]
}"#,
};
