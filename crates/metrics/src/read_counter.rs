//! A counter whose value is read at scrape time from a function: for counts kept outside the
//! daemon's registry, such as the log writer's dropped lines (`netsched_util::logging`), which
//! the metrics crate does not depend on.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;

struct ReadCounter {
    name: &'static str,
    help: &'static str,
    read: fn() -> u64,
}

impl fmt::Debug for ReadCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadCounter")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for ReadCounter {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let m = enc.encode_descriptor(self.name, self.help, None, MetricType::Counter)?;
        ConstCounter::new((self.read)()).encode(m)
    }
}

/// Register counter `name` (exported as `name_total`, no prefix added) read from `read` at each
/// scrape.
pub fn register_read_counter(
    registry: &mut Registry,
    name: &'static str,
    help: &'static str,
    read: fn() -> u64,
) {
    registry.register_collector(Box::new(ReadCounter { name, help, read }));
}

/// `netsched_log_dropped_lines_total`: every daemon registers it with
/// `netsched_util::logging::dropped_lines`.
pub fn register_log_drops(registry: &mut Registry, read: fn() -> u64) {
    register_read_counter(
        registry,
        "netsched_log_dropped_lines",
        "Log lines dropped because the log writer's bounded queue was full (stderr not draining)",
        read,
    );
}

/// The control socket's counts (`netsched_control::audit`), for the daemons that have one:
/// `netsched_control_refused_requests_total` (state-changing requests refused, logged or
/// not) and
/// `netsched_control_suppressed_warnings_total` (their warnings the rate limit left out).
pub fn register_control_audit(
    registry: &mut Registry,
    refused: fn() -> u64,
    suppressed: fn() -> u64,
) {
    register_read_counter(
        registry,
        "netsched_control_refused_requests",
        "State-changing control requests refused, whether their warning was written or not",
        refused,
    );
    register_read_counter(
        registry,
        "netsched_control_suppressed_warnings",
        "Warnings about refused control requests left out by the rate limit (10 a second)",
        suppressed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    static VALUE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    fn read() -> u64 {
        VALUE.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn the_value_is_read_at_each_scrape() {
        let mut reg = Registry::default();
        register_log_drops(&mut reg, read);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        assert!(s.contains("netsched_log_dropped_lines_total 0"), "{s}");
        VALUE.store(7, std::sync::atomic::Ordering::Relaxed);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        assert!(s.contains("netsched_log_dropped_lines_total 7"), "{s}");
    }

    #[test]
    fn the_control_audit_counts_are_exported() {
        let mut reg = Registry::default();
        register_control_audit(&mut reg, || 3, || 2);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        assert!(
            s.contains("netsched_control_refused_requests_total 3\n"),
            "{s}"
        );
        assert!(
            s.contains("netsched_control_suppressed_warnings_total 2\n"),
            "{s}"
        );
    }
}
