//! The NFQUEUE daemon's live status page (`GET /` on its `--metrics` listener): one row per
//! class with its percentile target P, attainment S / (N·P), requests judged N, answered
//! within the deadline S, S / N, failures, what it holds now and its mean response time; the
//! deadline, the server's occupancy and the kernel queue's drops above. The page and its JSON
//! are `netsched_metrics`'s (`status.html` documents the layout's fields); every figure is a
//! `netsched_nfq_` family of `/metrics` (metrics.rs), so it is as old as the packet loop's
//! latest copy (≤ ~110 ms).

use netsched_metrics::Page;

pub const PAGE: Page = Page {
    prefix: "netsched_nfq_",
    layout: r#"{
  "title": "netsched nfq",
  "summary": [
    {"id": "running", "label": "scheduling", "metric": "netsched_nfq_running", "states": {"1": "running", "0": "stopped"}, "bad": ["stopped"]},
    {"id": "deadline", "label": "deadline", "metric": "netsched_nfq_deadline_seconds", "unit": "s"},
    {"id": "in_server", "label": "in the server", "metric": "netsched_nfq_in_server"},
    {"id": "budget", "label": "budget", "metric": "netsched_nfq_budget"},
    {"id": "held", "label": "packets held", "metric": "netsched_nfq_held_packets"},
    {"id": "flows", "label": "flows", "metric": "netsched_nfq_flows"},
    {"id": "rate", "label": "request rate", "metric": "netsched_nfq_requests_total", "agg": "rate", "unit": "/s"},
    {"id": "kernel_dropped", "label": "kernel queue drops", "metric": "netsched_nfq_kernel_queue_dropped_total", "bad": ["nonzero"]}
  ],
  "tables": [
    {"id": "classes", "title": "Classes", "key": "class", "rows": "netsched_nfq_class_percentile_target",
     "empty": "no snapshot from the packet loop yet",
     "columns": [
      {"id": "target", "label": "target P (%)", "metric": "netsched_nfq_class_percentile_target"},
      {"id": "attainment", "label": "attainment S/(N·P)", "metric": "netsched_nfq_class_attainment", "unit": "ratio"},
      {"id": "n", "label": "N (judged)", "metric": "netsched_nfq_class_requests_total"},
      {"id": "s", "label": "S (in time)", "metric": "netsched_nfq_class_within_deadline_total"},
      {"id": "s_over_n", "label": "S/N", "metric": "netsched_nfq_class_within_deadline_total", "agg": "ratio", "div": "netsched_nfq_class_requests_total", "unit": "ratio"},
      {"id": "failed", "label": "failed", "metric": "netsched_nfq_class_failed_total", "warn": ["nonzero"]},
      {"id": "timeouts", "label": "timeouts", "metric": "netsched_nfq_class_timeouts_total", "warn": ["nonzero"]},
      {"id": "queue", "label": "queued", "metric": "netsched_nfq_class_queue_length"},
      {"id": "held", "label": "packets held", "metric": "netsched_nfq_class_held_packets"},
      {"id": "priority", "label": "priority", "metric": "netsched_nfq_class_priority"},
      {"id": "response", "label": "mean response", "metric": "netsched_nfq_class_mean_response_seconds", "unit": "s"}
     ]}
  ]
}"#,
};
