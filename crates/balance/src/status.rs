//! The balancer's live status page (`GET /` on the admin listener): what an operator looks at
//! first, laid out like HAProxy's stats page — one row per server with its operator state,
//! health, weights, work in progress, requests and their rate, errors and mean response time,
//! and the balancer's own figures above. The page and its JSON are `netsched_metrics`'s
//! (`status.html` documents the layout's fields); every figure is a `netsched_balance_` family
//! of `/metrics` (metrics.rs).
//!
//! Below the servers, the client side: TLS handshakes by outcome (`ok`, `failed`,
//! `client_certificate`, `timeout`: tls.rs) and client connections by the protocol they speak
//! (`http/1.1`, `h2`: http2.rs), with the count of HTTP/2 streams among the summary figures —
//! what shows whether clients get HTTP/2 and whether handshakes fail.

use netsched_metrics::Page;

pub const PAGE: Page = Page {
    prefix: "netsched_balance_",
    layout: r#"{
  "title": "netsched balance",
  "summary": [
    {"id": "clients", "label": "client connections", "metric": "netsched_balance_client_connections"},
    {"id": "queued", "label": "queued", "metric": "netsched_balance_queue_length", "warn": ["nonzero"]},
    {"id": "rate", "label": "request rate", "metric": "netsched_balance_requests_total", "agg": "rate", "unit": "/s"},
    {"id": "requests", "label": "requests", "metric": "netsched_balance_requests_total", "agg": "sum"},
    {"id": "errors", "label": "backend errors", "metric": "netsched_balance_errors_total", "agg": "sum", "bad": ["nonzero"]},
    {"id": "refused", "label": "refused", "metric": "netsched_balance_refused_total", "agg": "sum", "warn": ["nonzero"]},
    {"id": "h2_streams", "label": "HTTP/2 streams", "metric": "netsched_balance_h2_streams_total"}
  ],
  "tables": [
    {"id": "servers", "title": "Servers", "key": "backend", "keyLabel": "server",
     "rows": "netsched_balance_configured_weight", "empty": "no servers",
     "columns": [
      {"id": "state", "label": "state", "metric": "netsched_balance_admin_state", "agg": "state", "state": "state",
       "warn": ["drain"], "bad": ["maint"], "row": {"drain": "warn", "maint": "maint"}},
      {"id": "health", "label": "health", "metric": "netsched_balance_health_up", "states": {"1": "up", "0": "down"},
       "bad": ["down"], "row": {"up": "ok", "down": "bad"}},
      {"id": "weight", "label": "weight", "metric": "netsched_balance_configured_weight"},
      {"id": "effective", "label": "effective weight", "metric": "netsched_balance_effective_weight"},
      {"id": "active", "label": "active", "metric": "netsched_balance_active_connections"},
      {"id": "inactive", "label": "half-closed", "metric": "netsched_balance_inactive_connections"},
      {"id": "requests", "label": "requests", "metric": "netsched_balance_requests_total"},
      {"id": "rate", "label": "rate", "metric": "netsched_balance_requests_total", "agg": "rate", "unit": "/s"},
      {"id": "errors", "label": "errors", "metric": "netsched_balance_errors_total", "agg": "sum", "bad": ["nonzero"]},
      {"id": "retries", "label": "retries", "metric": "netsched_balance_retries_total", "agg": "sum"},
      {"id": "response", "label": "mean response", "metric": "netsched_balance_response_seconds", "agg": "mean", "unit": "s"}
     ]},
    {"id": "tls", "title": "TLS handshakes", "key": "reason", "keyLabel": "outcome",
     "rows": "netsched_balance_tls_handshakes_total", "empty": "no TLS handshakes",
     "columns": [
      {"id": "handshakes", "label": "handshakes", "metric": "netsched_balance_tls_handshakes_total"},
      {"id": "rate", "label": "rate", "metric": "netsched_balance_tls_handshakes_total", "agg": "rate", "unit": "/s"}
     ]},
    {"id": "protocols", "title": "Client protocols", "key": "protocol", "keyLabel": "protocol",
     "rows": "netsched_balance_client_protocol_connections_total", "empty": "no client connections yet",
     "columns": [
      {"id": "connections", "label": "connections", "metric": "netsched_balance_client_protocol_connections_total"},
      {"id": "rate", "label": "rate", "metric": "netsched_balance_client_protocol_connections_total", "agg": "rate", "unit": "/s"}
     ]}
  ]
}"#,
};
