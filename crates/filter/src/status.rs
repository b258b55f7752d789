//! The packet filter's live status page (`GET /` on its `--metrics` listener): frames in, out
//! and inside, the forwarding rate, drops and the rule set above; one row per worker with the
//! blocks it processed, its busy share over the last second, busy and idle time, hand-off
//! waits and panics; one row per drop reason. The page and its JSON are `netsched_metrics`'s
//! (`status.html` documents the layout's fields); every figure is a `netsched_filter_` family
//! of `/metrics` (metrics.rs), from the packet thread's latest copy (≤ ~100 ms old).

use netsched_metrics::Page;

pub const PAGE: Page = Page {
    prefix: "netsched_filter_",
    layout: r#"{
  "title": "netsched filter",
  "summary": [
    {"id": "received", "label": "received", "metric": "netsched_filter_received_total"},
    {"id": "forwarded", "label": "forwarded", "metric": "netsched_filter_forwarded_total"},
    {"id": "rate", "label": "forwarded rate", "metric": "netsched_filter_forwarded_total", "agg": "rate", "unit": "/s"},
    {"id": "queued", "label": "inside now", "metric": "netsched_filter_queued"},
    {"id": "dropped", "label": "dropped", "metric": "netsched_filter_dropped_total", "agg": "sum", "warn": ["nonzero"]},
    {"id": "kernel_drops", "label": "kernel drops", "metric": "netsched_filter_kernel_drops_total", "warn": ["nonzero"]},
    {"id": "identity", "label": "identity failures", "metric": "netsched_filter_identity_failures_total", "bad": ["nonzero"]},
    {"id": "marked", "label": "signature marked", "metric": "netsched_filter_signature_marked_total"},
    {"id": "generation", "label": "rule set", "metric": "netsched_filter_rules_generation"},
    {"id": "order_after", "label": "sent out of order", "metric": "netsched_filter_order_violations_after_total", "bad": ["nonzero"]}
  ],
  "tables": [
    {"id": "workers", "title": "Workers", "key": "worker", "rows": "netsched_filter_worker_blocks_total",
     "columns": [
      {"id": "blocks", "label": "blocks", "metric": "netsched_filter_worker_blocks_total"},
      {"id": "busy_share", "label": "busy (last second)", "metric": "netsched_filter_worker_busy_ns_total", "agg": "rate", "scale": 1e-9, "unit": "ratio"},
      {"id": "busy", "label": "busy", "metric": "netsched_filter_worker_busy_ns_total", "scale": 1e-9, "unit": "s"},
      {"id": "idle", "label": "idle", "metric": "netsched_filter_worker_idle_ns_total", "scale": 1e-9, "unit": "s"},
      {"id": "handoff_waits", "label": "hand-off waits", "metric": "netsched_filter_worker_handoff_waits_total"},
      {"id": "panics", "label": "panics", "metric": "netsched_filter_worker_panics_total", "bad": ["nonzero"]}
     ]},
    {"id": "drops", "title": "Drops", "key": "reason", "rows": "netsched_filter_dropped_total",
     "columns": [
      {"id": "frames", "label": "frames", "metric": "netsched_filter_dropped_total", "warn": ["nonzero"]},
      {"id": "rate", "label": "rate", "metric": "netsched_filter_dropped_total", "agg": "rate", "unit": "/s"}
     ]}
  ]
}"#,
};
