//! The JSON outputs' unit rule (docs/cli.md, "JSON outputs") as code: every number a command
//! prints as JSON is named with its unit — `*_ns` (nanoseconds), `*_bytes`, `*_bits_per_s`,
//! `*_per_s` (events per second), `*_per_cpu_s` (events per second of one CPU's time),
//! `*_percent` (hundredths of a whole) — or is a count, ratio or identifier listed in
//! [`UNITLESS`]. Times, sizes and bit rates are integers; frequencies, percentages and ratios
//! may have a fraction.
//!
//! Two shapes name their numbers through their parent: an object of summary statistics
//! ([`STAT_KEYS`]: `mean`, `sd`, `min`...) under a named metric has that metric's unit, and
//! in a dotted key (`upload_tcp.timeouts`, the lab's flattened metric paths) the last part is
//! the name.
//!
//! [`violations`] walks a JSON value and names every number that breaks the rule; each
//! command's tests run it on what the command prints. The `serialize_with` functions below
//! let a report keep its internal unit (microseconds as a float, say) and still print an
//! integer in the rule's unit.

use serde::Serializer;
use serde_json::Value;

/// The unit suffixes, longest first where one ends another (`_bits_per_s` before `_per_s`),
/// with whether the value must be an integer.
pub const UNIT_SUFFIXES: &[(&str, bool)] = &[
    ("_ns", true),
    ("_bytes", true),
    ("_bits_per_s", true),
    ("_per_cpu_s", false),
    ("_per_s", false),
    ("_percent", false),
];

/// Names of numbers without a unit: counts (of frames, packets, requests, connections, events),
/// ratios, identifiers and configuration numbers. A name here must not name a time, a size or
/// a rate; a new output's count goes here, in its group.
#[rustfmt::skip]
pub const UNITLESS: &[&str] = &[
    // Packet engines (vswitch, filter, link): frames counted, per port and direction.
    "received", "forwarded", "dropped", "queued", "delivered", "deliver_failed",
    "delivered_unicast", "flooded", "send_errors", "kernel_drops", "dropped_queue_full",
    "dropped_malformed", "dropped_oversize", "dropped_send_error", "dropped_removed",
    "dropped_shutdown", "dropped_discipline", "dropped_no_port", "rx_frames", "tx_frames",
    "acks_classified", "kernel_socket_drops", "queued_frames", "in_flight_frames",
    "max_delay_line", "held_at_stop", "stats_dropped", "wakeups", "wakeups_per_frame",
    // vswitch: the discipline and the MAC table.
    "rounds", "rebuilds", "mac_learned", "mac_table_full", "max_rounds_passed", "bound_rounds",
    "tier", "weight",
    // filter: the pipeline, its workers and the flow order.
    "identity_failures", "signature_marked", "tx_retries", "rule_swaps", "rule_edits", "edit_failures", "bucket_steals",
    "in_flight", "waiting_tasks", "rules_generation", "malformed_frames", "non_ip_frames",
    "later_fragments", "blocks", "tasks", "sops", "handoff_waits", "panics", "cpu",
    "assigned_busy", "no_idle_worker", "queue_full", "violations_before", "violations_after",
    "held", "held_peak", "released_by_overflow", "released_by_timeout", "late", "untracked",
    "packet_thread_stalls", "inline_packets", "inline_panics",
    // vswitch --trace-latency: frames without a usable kernel stamp.
    "up_unstamped", "down_unstamped",
    // shape show: tc's counters.
    "packets", "drops", "overlimits", "backlog_packets", "limit_packets", "prio",
    // link bench and nfq bench.
    "wakeups_per_frame_64", "wakeups_per_frame_1500", "load_average", "flood_bypassed",
    "flood_enobufs", "daemon_packets", "bypassed_fail_open", "enobufs", "flows",
    // nfq ctl show: the engine, its classes and the kernel's queue.
    "budget", "in_server", "held_packets", "deadline_quantile", "max_hold_factor", "class",
    "priority", "queue_len", "completed", "timeouts", "requests", "passed_at_once", "released",
    "other", "passed_over_limit", "untracked_flows", "discipline_drops_passed", "aborted",
    "expired_flows", "early_misses", "retransmissions", "max_hold_releases", "stale_skipped",
    "passed_stopped", "queue_dropped", "user_dropped", "queue_total", "rule_matched",
    "skipped_fail_open",
    // The percentile discipline's counts (nfq, balance): N requests, S that met the deadline
    // (the paper's notation, not seconds), those that failed it, and S / (N·P) ratios.
    "n", "s", "fail", "percentile", "attainment", "decision_attainment",
    // balance: servers, service classes and `balance load`.
    "effective_weight", "maxconn", "active", "inactive", "queue_limit", "served_at_once",
    "served_from_queue", "served_by_max_hold", "refused", "due", "answered", "not_sent", "idle_closes", "retried",
    // replay: event identifiers and the summaries' counts (the disciplines' `QdiscStats`).
    "id", "conn", "server", "per_server", "items", "picks", "rejects", "still_open",
    "enqueued", "dequeued", "drops_on_arrival", "drops_evicted", "queued_packets",
    // The lab's results (`netsched lab`): packets, segments, requests and frames counted by
    // the simulations and the real runs, and their ratios (a utilisation, an offered load, a
    // share, TCP's congestion window in segments, a class's weight).
    "acks_received", "acks_sent", "ack_filtered", "arrived", "blocks", "bulk_lost", "bulk_sent",
    "data_delivered", "data_held", "data_lost", "data_sent", "delivered_segments",
    "download_received", "download_sent", "download_timeouts", "events", "fast_recoveries",
    "gateway_input_drops", "gateway_input_received", "max_cwnd", "offered_load", "ok",
    "ok_in_window", "out_of_order_at_receiver", "p", "per_host_requests", "ping_received",
    "ping_sent", "probe_delivered", "probe_held", "probe_lost", "probe_sent",
    "receiver_kernel_drops", "released_at_exit", "responses", "retransmits", "reused_connections",
    "seeds", "segments_sent", "sent", "server_utilisation", "sop_share", "sop_threads",
    "work_imbalance",
    "sop_workers", "stream_delivered", "stream_held", "stream_lost", "stream_sent", "unplaced",
    "uplink_drops_ack", "uplink_drops_data", "uplink_max_queue", "uplink_qdisc_drops",
    "uplink_tx_acks", "uplink_utilisation", "upload_received", "upload_sent", "upload_timeouts",
    "errors", "cut_at_end", "unaccounted", "host_served", "host_busy", "host_bad_requests",
    "balancer_attainment_over_p", "directors", "per_director_requests", "director_requests",
    // vm-delay's arrival trace: frames per clump and per window, clumps and bursts counted.
    "frames", "merged_frames", "clumps", "clump_max", "clump_mean", "clump_p99", "window_max",
    "all_ports_window_max", "bursts", "caught_up", "sent_overflow", "read", "switch_dropped",
    "replay_dropped", "shutdown_in_flight", "overflow", "merged", "max_clump",
];

/// Summary statistics of one metric over several runs (the lab's aggregates; `window_max`'s
/// per-window frames): a number under one of these keys has the unit of the object's name.
pub const STAT_KEYS: &[&str] = &["mean", "half_width", "sd", "min", "max"];

/// Objects whose keys are data and whose numbers are ratios (a fraction allowed): the CPUs a
/// lab run's roles kept busy, in CPU seconds per second.
pub const RATIO_MAPS: &[&str] = &["cpu_cores"];

/// Objects whose keys are data (a drop reason, a class number, an error kind, the kernel's
/// `struct xdp_statistics` counters of an AF_XDP socket) and whose numbers are counts.
pub const COUNT_MAPS: &[&str] = &["drops", "forwarded_by_class", "errors", "xdp_drops"];

/// One number that breaks the rule: where it is (`a.b[2].c`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub why: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.why)
    }
}

/// Every number in `v` that breaks the rule (none: an empty list).
pub fn violations(v: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    walk(v, "", None, Keys::Names, &mut out);
    out
}

/// The unit suffix `name` ends with, and whether its values must be integers.
pub fn unit_of(name: &str) -> Option<(&'static str, bool)> {
    UNIT_SUFFIXES
        .iter()
        .find(|(s, _)| name.len() > s.len() && name.ends_with(s))
        .copied()
}

/// What the keys of an object under `name` are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Names of their own.
    Names,
    /// Data, over counts ([`COUNT_MAPS`]).
    Counts,
    /// Data, over ratios ([`RATIO_MAPS`]).
    Ratios,
}

/// Whether the rule knows `name`: a unit suffix, or a listed unitless name.
fn named(name: &str) -> bool {
    unit_of(name).is_some() || UNITLESS.contains(&name)
}

fn walk(v: &Value, path: &str, name: Option<&str>, keys: Keys, out: &mut Vec<Violation>) {
    match v {
        Value::Object(m) => {
            let inner = match name {
                Some(n) if COUNT_MAPS.contains(&n) => Keys::Counts,
                Some(n) if RATIO_MAPS.contains(&n) => Keys::Ratios,
                _ => Keys::Names,
            };
            for (k, x) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                // A dotted key is a flattened path: its last part is the name.
                let own = k.rsplit('.').next().unwrap_or(k);
                let stat_of = name.filter(|n| STAT_KEYS.contains(&own) && named(n));
                walk(x, &p, Some(stat_of.unwrap_or(own)), inner, out);
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                walk(x, &format!("{path}[{i}]"), name, keys, out);
            }
        }
        Value::Number(_) if keys == Keys::Ratios => {}
        Value::Number(n) => {
            if keys == Keys::Counts {
                if !n.is_u64() {
                    out.push(Violation {
                        path: path.to_string(),
                        why: format!("a count must be a whole number, got {n}"),
                    });
                }
                return;
            }
            let Some(name) = name else {
                out.push(Violation {
                    path: path.to_string(),
                    why: "a number with no name".into(),
                });
                return;
            };
            match unit_of(name) {
                Some((_, true)) if !(n.is_u64() || n.is_i64()) => out.push(Violation {
                    path: path.to_string(),
                    why: format!("`{name}` must be an integer in its unit, got {n}"),
                }),
                Some(_) => {}
                None if UNITLESS.contains(&name) => {}
                None => out.push(Violation {
                    path: path.to_string(),
                    why: format!(
                        "`{name}` has no unit suffix ({}) and is not a listed unitless count",
                        UNIT_SUFFIXES
                            .iter()
                            .map(|(s, _)| *s)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// Serialize a float in microseconds as whole nanoseconds (NaN as `null`).
pub fn us_as_ns<S: Serializer>(us: &f64, s: S) -> Result<S::Ok, S::Error> {
    scaled(*us * 1e3, s)
}

/// Serialize a float in milliseconds as whole nanoseconds (NaN as `null`).
pub fn ms_as_ns<S: Serializer>(ms: &f64, s: S) -> Result<S::Ok, S::Error> {
    scaled(*ms * 1e6, s)
}

/// Serialize a float in seconds as whole nanoseconds (NaN as `null`).
pub fn s_as_ns<S: Serializer>(secs: &f64, s: S) -> Result<S::Ok, S::Error> {
    scaled(*secs * 1e9, s)
}

fn scaled<S: Serializer>(x: f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() {
        s.serialize_i64(x.round() as i64)
    } else {
        s.serialize_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn suffixed_integers_and_listed_counts_pass() {
        let v = json!({
            "elapsed_ns": 12, "rx_bytes": 3, "up_bits_per_s": 800_000, "packets_per_s": 1.5,
            "received": 4, "drops": {"queue_full": 2}, "dev": "eth0", "removed": false,
            "ports": [{"tier": 1, "cpu_ns": 5}],
        });
        assert_eq!(violations(&v), vec![]);
    }

    #[test]
    fn unlabelled_and_old_names_fail_with_their_path() {
        let v = json!({"t": 1.5, "ports": [{"cpu_s": 0.2}], "elapsed_ms": 3, "rtt_p50_us": 9.0});
        let got: Vec<String> = violations(&v).into_iter().map(|x| x.path).collect();
        assert_eq!(got, ["elapsed_ms", "ports[0].cpu_s", "rtt_p50_us", "t"]);
    }

    #[test]
    fn a_time_or_size_with_a_fraction_fails() {
        let v = json!({"delay_ns": 1.5, "size_bytes": 2.0, "line_bits_per_s": 3.25});
        assert_eq!(violations(&v).len(), 3, "{:?}", violations(&v));
    }

    #[test]
    fn a_count_map_holds_whole_numbers_and_a_bare_number_fails() {
        assert_eq!(violations(&json!({"drops": {"late": 0.5}})).len(), 1);
        assert_eq!(violations(&json!([1, 2])).len(), 2);
    }

    #[test]
    fn statistics_and_dotted_keys_take_the_metric_s_name() {
        let ok = json!({
            "p99_ns": {"n": 3, "mean": 12, "half_width": 2, "sd": 1, "min": 10, "max": 14},
            "upload_tcp.timeouts": {"n": 3, "mean": 1.5, "half_width": 0.5, "sd": 0.5, "min": 1, "max": 2},
            "idle_percent": {"mean": 3.25}, "cpu_cores": {"client": 0.5},
        });
        assert_eq!(violations(&ok), vec![]);
        let bad = json!({"p99_ns": {"mean": 12.5}, "p99_ms": {"mean": 1}, "x": {"mean": 1}});
        let got: Vec<String> = violations(&bad).into_iter().map(|x| x.path).collect();
        assert_eq!(got, ["p99_ms.mean", "p99_ns.mean", "x.mean"]);
    }

    #[test]
    fn floats_in_other_units_become_whole_nanoseconds() {
        #[derive(serde::Serialize)]
        struct R {
            #[serde(serialize_with = "us_as_ns")]
            a: f64,
            #[serde(serialize_with = "s_as_ns")]
            b: f64,
            #[serde(serialize_with = "ms_as_ns")]
            c: f64,
            #[serde(serialize_with = "us_as_ns")]
            d: f64,
        }
        let r = R {
            a: 12.3456,
            b: 1.5,
            c: 0.25,
            d: f64::NAN,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"a": 12346, "b": 1_500_000_000, "c": 250_000, "d": null})
        );
    }
}
