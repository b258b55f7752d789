//! The balancer's Prometheus families, registered in one `netsched_metrics` registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// The `backend` label of errors on a server deleted while its work was still in flight (its
/// own series are gone; server names cannot contain parentheses, so this never collides).
pub const REMOVED_BACKEND: &str = "(removed)";
/// The `backend` label of a response the balancer gave without choosing a server (a refused
/// or malformed request, no server, a full queue).
pub const NO_BACKEND: &str = "(none)";
/// The `code` label of `http_responses_total`: the status class (HAProxy's `hrsp_1xx` …
/// `hrsp_5xx`, `hrsp_other`).
pub const CODES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// The index in [`CODES`] of `status`'s class.
pub fn code_index(status: u16) -> usize {
    match status {
        100..=599 => (status / 100 - 1) as usize,
        _ => 5,
    }
}

/// One backend's six `http_responses_total` series, in [`CODES`] order.
pub type Responses = [Counter; 6];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    pub backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub backend: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub backend: String,
    pub state: String,
}

/// The values of the `state` label of `admin_state` (`service::Admin`).
pub const ADMIN_STATES: [&str; 3] = ["ready", "drain", "maint"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub backend: String,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabel {
    pub protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

fn hist() -> Histogram {
    // 100 us .. ~6.5 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

/// Every family the balancer exports. Clones share the same series.
#[derive(Clone)]
pub struct Metrics {
    /// Requests (L7) or connections (L4) sent to a backend.
    pub requests: Family<BackendLabel, Counter>,
    /// L7 responses by backend and status class ([`CODES`]); a response given without a
    /// server is counted under [`NO_BACKEND`].
    pub responses: Family<CodeLabel, Counter>,
    /// The [`NO_BACKEND`] series of `responses`.
    pub no_backend_responses: Responses,
    pub active: Family<BackendLabel, Gauge>,
    pub inactive: Family<BackendLabel, Gauge>,
    /// 1 up, 0 down by health checks.
    pub health_up: Family<BackendLabel, Gauge>,
    /// Effective weight after admin state, health and slow start.
    pub weight: Family<BackendLabel, Gauge>,
    /// The configured (or `set-weight`) weight.
    pub configured_weight: Family<BackendLabel, Gauge>,
    /// 1 on the server's operator state (ready, drain, maint), 0 on the others.
    pub admin_state: Family<StateLabel, Gauge>,
    pub errors: Family<ErrorLabel, Counter>,
    /// Requests sent again on a new connection after a reused one was found closed
    /// (idempotent requests wholly at hand only).
    pub retries: Family<BackendLabel, Counter>,
    /// L7 backend connections closed because the order of their answers was in doubt: bytes
    /// while no request was outstanding, bytes left after a response's end, or more than one
    /// response at hand.
    pub closed_in_doubt: Family<BackendLabel, Counter>,
    /// L7 requests sent over a new connection because `http_reuse` kept them off the idle
    /// pooled ones (`safe`: not to be sent twice; `never`: every request).
    pub reuse_new_connections: Family<BackendLabel, Counter>,
    /// Work refused before a backend was chosen: queue_full, queue_timeout, no_server,
    /// max_connections, bad_request, header_timeout, client_timeout, client_error,
    /// stop_accept.
    pub refused: Family<ReasonLabel, Counter>,
    /// TLS handshakes on the listeners (`tls.rs`), by `reason`: `ok`, `failed` (the peer's
    /// or the protocol's error: no shared version or suite, a bad record),
    /// `client_certificate` (a client certificate missing where required, or not verified),
    /// `timeout` (not done within `timeouts.header`).
    pub tls_handshakes: Family<ReasonLabel, Counter>,
    /// Failed `accept(2)` calls on a listener, by reason (stop.rs, [`accept_error_reason`]):
    /// the client stays in the listen backlog and is taken once the cause passes.
    pub accept_errors: Family<ReasonLabel, Counter>,
    pub queue_length: Gauge,
    pub response_seconds: Family<BackendLabel, Histogram, fn() -> Histogram>,
    pub client_connections: Gauge,
    /// Client connections by the protocol they speak (`protocol`: `http/1.1`, `h2`; ALPN's
    /// names), counted once the TLS handshake or the first bytes decided it (http2.rs).
    pub client_protocols: Family<ProtocolLabel, Counter>,
    /// Requests that came as HTTP/2 streams.
    pub h2_streams: Counter,
    /// Client connections that ended after a stop began: `finished` on their own, `cut` at
    /// the deadline (stop.rs).
    pub stop_connections: Family<OutcomeLabel, Counter>,
    /// Servers that exist now, each with the error reasons counted for it: what
    /// [`Metrics::remove_backend`] removes (the reasons come from the data path and are not a
    /// fixed list).
    live: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
    /// Per-class families (`queue.rs`).
    pub classes: crate::queue::ClassMetrics,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let m = Metrics {
            requests: Family::default(),
            responses: Family::default(),
            no_backend_responses: Default::default(),
            active: Family::default(),
            inactive: Family::default(),
            health_up: Family::default(),
            weight: Family::default(),
            configured_weight: Family::default(),
            admin_state: Family::default(),
            errors: Family::default(),
            retries: Family::default(),
            closed_in_doubt: Family::default(),
            reuse_new_connections: Family::default(),
            refused: Family::default(),
            tls_handshakes: Family::default(),
            accept_errors: Family::default(),
            queue_length: Gauge::default(),
            response_seconds: Family::new_with_constructor(hist),
            client_connections: Gauge::default(),
            client_protocols: Family::default(),
            h2_streams: Counter::default(),
            stop_connections: Family::default(),
            live: Arc::default(),
            classes: crate::queue::ClassMetrics::register(
                registry.sub_registry_with_prefix("netsched_balance"),
            ),
        };
        let r = registry.sub_registry_with_prefix("netsched_balance");
        r.register(
            "requests",
            "Requests (l7) or connections (l4) sent to a backend",
            m.requests.clone(),
        );
        r.register(
            "active_connections",
            "Work in progress on a backend (l4: established connections; l7: requests in flight)",
            m.active.clone(),
        );
        r.register(
            "inactive_connections",
            "l4 connections of a backend that are half-closed",
            m.inactive.clone(),
        );
        r.register(
            "health_up",
            "1 when health checks say up",
            m.health_up.clone(),
        );
        r.register(
            "effective_weight",
            "Weight the balancer uses (admin state, health, slow start applied)",
            m.weight.clone(),
        );
        r.register(
            "configured_weight",
            "Weight from the configuration or the last set-weight",
            m.configured_weight.clone(),
        );
        r.register(
            "admin_state",
            "1 on the server's operator state (ready, drain, maint), 0 on the others",
            m.admin_state.clone(),
        );
        r.register("errors", "Backend errors by reason", m.errors.clone());
        r.register(
            "retries",
            "Idempotent requests sent again on a new connection after a reused one was found closed",
            m.retries.clone(),
        );
        r.register(
            "closed_in_doubt",
            "L7 backend connections closed because the order of their answers was in doubt (bytes no request asked for)",
            m.closed_in_doubt.clone(),
        );
        r.register(
            "reuse_new_connections",
            "L7 requests sent over a new backend connection because http_reuse kept them off idle pooled ones",
            m.reuse_new_connections.clone(),
        );
        r.register(
            "refused",
            "Work refused before reaching a backend, by reason",
            m.refused.clone(),
        );
        r.register(
            "tls_handshakes",
            "TLS handshakes on the listeners, by outcome (ok, failed, client_certificate, timeout)",
            m.tls_handshakes.clone(),
        );
        r.register(
            "accept_errors",
            "Failed accepts on a listener, by reason (the client waits in the listen backlog)",
            m.accept_errors.clone(),
        );
        r.register(
            "queue_length",
            "Requests or connections waiting for a server slot",
            m.queue_length.clone(),
        );
        r.register(
            "response_seconds",
            "Time from sending a request to a backend to its response head (l7) or connection set-up (l4)",
            m.response_seconds.clone(),
        );
        r.register(
            "client_connections",
            "Client connections open",
            m.client_connections.clone(),
        );
        r.register(
            "client_protocol_connections",
            "Client connections by protocol (http/1.1, h2)",
            m.client_protocols.clone(),
        );
        r.register(
            "h2_streams",
            "Requests that came as HTTP/2 streams",
            m.h2_streams.clone(),
        );
        r.register(
            "http_responses",
            "L7 responses by backend and status class (1xx-5xx, other); backend (none): answered without a server",
            m.responses.clone(),
        );
        r.register(
            "stop_connections",
            "Client connections that ended after the stop began, by outcome (finished, cut)",
            m.stop_connections.clone(),
        );
        let mut m = m;
        m.no_backend_responses = m.responses_of(NO_BACKEND);
        m
    }

    pub fn backend(name: &str) -> BackendLabel {
        BackendLabel {
            backend: name.to_string(),
        }
    }

    fn live(&self) -> MutexGuard<'_, HashMap<String, BTreeSet<String>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A server now exists: its errors get series of its own.
    pub fn add_backend(&self, name: &str) {
        self.live().entry(name.to_string()).or_default();
    }

    /// A server is gone: remove every series labelled with it, in every family.
    pub fn remove_backend(&self, name: &str) {
        let reasons = self.live().remove(name).unwrap_or_default();
        let l = Self::backend(name);
        self.requests.remove(&l);
        self.active.remove(&l);
        self.inactive.remove(&l);
        self.health_up.remove(&l);
        self.weight.remove(&l);
        self.configured_weight.remove(&l);
        self.retries.remove(&l);
        self.closed_in_doubt.remove(&l);
        self.reuse_new_connections.remove(&l);
        for state in ADMIN_STATES {
            self.admin_state.remove(&StateLabel {
                backend: name.to_string(),
                state: state.to_string(),
            });
        }
        self.response_seconds.remove(&l);
        for code in CODES {
            self.responses.remove(&CodeLabel {
                backend: name.to_string(),
                code,
            });
        }
        for reason in reasons {
            self.errors.remove(&ErrorLabel {
                backend: name.to_string(),
                reason,
            });
        }
    }

    /// Count a backend error. An error of a server already deleted (work still in flight when
    /// it was removed) is counted under `backend="(removed)"`, so it neither brings back a
    /// series of the deleted server nor goes uncounted.
    pub fn error(&self, backend: &str, reason: &str) {
        let label = {
            let mut live = self.live();
            match live.get_mut(backend) {
                Some(reasons) => {
                    if !reasons.contains(reason) {
                        reasons.insert(reason.to_string());
                    }
                    backend
                }
                None => REMOVED_BACKEND,
            }
        };
        self.errors
            .get_or_create(&ErrorLabel {
                backend: label.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Export a server's configured weight and operator state.
    pub fn admin(&self, backend: &str, weight: u32, state: &str) {
        self.configured_weight
            .get_or_create(&Metrics::backend(backend))
            .set(weight as i64);
        for s in ADMIN_STATES {
            self.admin_state
                .get_or_create(&StateLabel {
                    backend: backend.to_string(),
                    state: s.to_string(),
                })
                .set((s == state) as i64);
        }
    }

    pub fn stop_outcome(&self, outcome: &str) {
        self.stop_connections
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    pub fn retry(&self, backend: &str) {
        self.retries.get_or_create(&Metrics::backend(backend)).inc();
    }

    /// Count a failed `accept(2)` ([`accept_error_reason`]).
    pub fn accept_error(&self, e: &std::io::Error) {
        self.accept_errors
            .get_or_create(&ReasonLabel {
                reason: accept_error_reason(e).to_string(),
            })
            .inc();
    }

    /// The label a count of `backend` goes under: its own while it exists, else
    /// [`REMOVED_BACKEND`] (as [`Metrics::error`]), so no series of a deleted server returns.
    fn live_label(&self, backend: &str) -> BackendLabel {
        if self.live().contains_key(backend) {
            Self::backend(backend)
        } else {
            Self::backend(REMOVED_BACKEND)
        }
    }

    pub fn closed_in_doubt(&self, backend: &str) {
        self.closed_in_doubt
            .get_or_create(&self.live_label(backend))
            .inc();
    }

    pub fn reuse_new_connection(&self, backend: &str) {
        self.reuse_new_connections
            .get_or_create(&self.live_label(backend))
            .inc();
    }

    /// Count one TLS handshake's outcome (`ok`, `failed`, `client_certificate`, `timeout`).
    pub fn tls_handshake(&self, outcome: &str) {
        self.tls_handshakes
            .get_or_create(&ReasonLabel {
                reason: outcome.to_string(),
            })
            .inc();
    }

    /// The six `http_responses_total` series of `backend`, made once per server (a label
    /// look-up per response would hash and lock).
    pub fn responses_of(&self, backend: &str) -> Responses {
        CODES.map(|code| {
            self.responses
                .get_or_create(&CodeLabel {
                    backend: backend.to_string(),
                    code,
                })
                .clone()
        })
    }

    /// Count one client connection by its protocol (`http/1.1`, `h2`).
    pub fn client_protocol(&self, protocol: &'static str) {
        self.client_protocols
            .get_or_create(&ProtocolLabel { protocol })
            .inc();
    }

    pub fn refuse(&self, reason: &str) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }
}

/// The `reason` label of a failed accept: `process_nofile` (EMFILE: the process's open-file
/// limit, two descriptors per proxied connection), `system_nofile` (ENFILE), `memory`
/// (ENOBUFS, ENOMEM), `aborted` (ECONNABORTED: the client reset while queued), `other`.
pub fn accept_error_reason(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EMFILE) => "process_nofile",
        Some(libc::ENFILE) => "system_nofile",
        Some(libc::ENOBUFS) | Some(libc::ENOMEM) => "memory",
        Some(libc::ECONNABORTED) => "aborted",
        _ => "other",
    }
}
