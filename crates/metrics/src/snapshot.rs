//! Families written at scrape time from the latest copy a packet thread published, and the one
//! reading of a `--metrics ADDR` flag.
//!
//! Why a copy and not atomics: the NFQUEUE and AF_PACKET engines keep their counters in plain
//! fields of a single-threaded packet loop (no atomic per packet). Every so often (each daemon
//! documents its period, ~100 ms) the loop builds a copy and calls [`Latest::publish`], which
//! uses `try_lock`: it **never waits**. The scrape side ([`Latest::get`]) holds the same lock
//! only to clone an `Arc`, so the only way a scrape can meet the packet thread is that one
//! publication is skipped (counted in `snapshots_skipped_total`) and the next one lands.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Instant;

/// A one-value slot: the packet thread publishes, the metrics thread reads the latest.
pub struct Latest<T> {
    slot: Mutex<Option<(Instant, Arc<T>)>>,
    published: AtomicU64,
    skipped: AtomicU64,
}

impl<T> Default for Latest<T> {
    fn default() -> Self {
        Self {
            slot: Mutex::new(None),
            published: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }
}

impl<T> Latest<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace the latest value without ever waiting. Returns false (and counts a skip) when
    /// a reader holds the slot at this instant; the caller publishes again next period.
    /// The replaced value is freed after the lock is released (or by a reader still holding it).
    pub fn publish(&self, value: T) -> bool {
        let fresh = Some((Instant::now(), Arc::new(value)));
        let mut guard = match self.slot.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        let old = std::mem::replace(&mut *guard, fresh);
        drop(guard);
        drop(old);
        self.published.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The latest value and when it was published (None before the first publication). Holds
    /// the lock only to clone an `Arc`.
    pub fn get(&self) -> Option<(Instant, Arc<T>)> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Publications that landed.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Publications skipped because a reader held the slot.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
}

/// Writes families into one scrape (the registry's prefix is added; counters get `_total`).
pub struct Writer<'a> {
    enc: DescriptorEncoder<'a>,
}

impl Writer<'_> {
    /// One counter without labels.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> fmt::Result {
        let m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(m)
    }

    /// A counter of a fractional base unit (CPU seconds).
    pub fn counter_f64(&mut self, name: &str, help: &str, value: f64) -> fmt::Result {
        let m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        ConstCounter::new(value).encode(m)
    }

    /// A counter family: one series per label set.
    pub fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, v) in series {
            ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// One gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) -> fmt::Result {
        let m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(value).encode(m)
    }

    /// A gauge family: one series per label set.
    pub fn gauges<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, f64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, v) in series {
            ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

type WriteFn<T> = Box<dyn Fn(&T, &mut Writer<'_>) -> fmt::Result + Send + Sync>;

struct SnapshotCollector<T> {
    latest: Arc<Latest<T>>,
    write: WriteFn<T>,
}

impl<T> fmt::Debug for SnapshotCollector<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnapshotCollector")
            .field("published", &self.latest.published())
            .finish()
    }
}

impl<T: Send + Sync + 'static> Collector for SnapshotCollector<T> {
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        let mut w = Writer { enc };
        w.counter(
            "snapshots_published",
            "Copies of the packet thread's counters published for scrapes",
            self.latest.published(),
        )?;
        w.counter(
            "snapshots_skipped",
            "Publications skipped because a scrape was reading the previous copy (never waits)",
            self.latest.skipped(),
        )?;
        if let Some((at, value)) = self.latest.get() {
            w.gauge(
                "snapshot_age_seconds",
                "Age of the copy these values come from",
                at.elapsed().as_secs_f64(),
            )?;
            (self.write)(&value, &mut w)?;
        }
        Ok(())
    }
}

/// Register families written from `latest` at each scrape, under `prefix` (e.g.
/// `netsched_nfq`). Besides what `write` writes, the collector exports
/// `<prefix>_snapshots_published_total`, `<prefix>_snapshots_skipped_total` and
/// `<prefix>_snapshot_age_seconds` (absent, like `write`'s families, before the first
/// publication).
pub fn register_snapshot<T: Send + Sync + 'static>(
    registry: &mut Registry,
    prefix: &str,
    latest: Arc<Latest<T>>,
    write: impl Fn(&T, &mut Writer<'_>) -> fmt::Result + Send + Sync + 'static,
) {
    registry
        .sub_registry_with_prefix(prefix)
        .register_collector(Box::new(SnapshotCollector {
            latest,
            write: Box::new(write),
        }));
}

/// A `--metrics` value that cannot be used: names the flag, the value and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrError {
    pub flag: String,
    pub value: String,
    pub problem: String,
}

impl fmt::Display for AddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}: {}", self.flag, self.value, self.problem)
    }
}

impl std::error::Error for AddrError {}

/// Read a metrics listen address: `PORT` (then loopback, `127.0.0.1:PORT`), `IP:PORT` or
/// `[IPv6]:PORT`. An address that is not loopback is refused unless `allow_public` (the
/// daemon's explicit opt-in flag, named by `public_flag` in the error).
pub fn parse_addr(
    flag: &str,
    text: &str,
    allow_public: bool,
    public_flag: &str,
) -> Result<SocketAddr, AddrError> {
    let err = |problem: String| AddrError {
        flag: flag.to_string(),
        value: text.to_string(),
        problem,
    };
    let t = text.trim();
    let addr = if let Ok(port) = t.parse::<u16>() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    } else {
        t.parse::<SocketAddr>().map_err(|_| {
            err("expected PORT, IP:PORT or [IPv6]:PORT (e.g. 9101, 127.0.0.1:9101)".into())
        })?
    };
    if !addr.ip().is_loopback() && !allow_public {
        return Err(err(format!(
            "{} is not a loopback address; metrics are served on loopback unless {public_flag} \
             is given",
            addr.ip()
        )));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_never_waits_for_a_reader_and_counts_the_skip() {
        let l = Latest::new();
        assert!(l.get().is_none());
        assert!(l.publish(1u64));
        // A reader holding the slot (as a scrape does while cloning): publish returns at once.
        let guard = l.slot.lock().unwrap();
        assert!(!l.publish(2));
        assert!(!l.publish(3));
        drop(guard);
        assert_eq!((l.published(), l.skipped()), (1, 2));
        assert_eq!(*l.get().unwrap().1, 1);
        assert!(l.publish(4));
        assert_eq!(*l.get().unwrap().1, 4);
    }

    #[test]
    fn snapshot_families_are_written_with_the_prefix() {
        let latest = Arc::new(Latest::new());
        let mut reg = Registry::default();
        register_snapshot(&mut reg, "demo", Arc::clone(&latest), |v: &u64, w| {
            w.counter("frames", "Frames", *v)?;
            w.gauges("queue_length", "Queue", [([("dir", "ab")], 2.0)])
        });
        let shared: crate::Shared = Arc::new(Mutex::new(reg));
        let text = crate::render(&shared);
        assert!(!text.contains("demo_frames"), "{text}");
        assert!(text.contains("demo_snapshots_published_total 0"), "{text}");
        latest.publish(41);
        let text = crate::render(&shared);
        assert!(text.contains("demo_frames_total 41"), "{text}");
        assert!(text.contains("demo_queue_length{dir=\"ab\"} 2.0"), "{text}");
        assert!(text.contains("demo_snapshot_age_seconds "), "{text}");
        assert!(text.contains("demo_snapshots_published_total 1"), "{text}");
    }

    #[test]
    fn addresses_default_to_loopback_and_public_needs_the_opt_in() {
        let p = |t: &str, public| parse_addr("--metrics", t, public, "--metrics-public");
        assert_eq!(p("9101", false).unwrap().to_string(), "127.0.0.1:9101");
        assert_eq!(p("[::1]:0", false).unwrap().to_string(), "[::1]:0");
        assert_eq!(p("0.0.0.0:9101", true).unwrap().to_string(), "0.0.0.0:9101");
        let e = p("0.0.0.0:9101", false).unwrap_err().to_string();
        assert!(
            e.contains("--metrics") && e.contains("0.0.0.0:9101") && e.contains("--metrics-public"),
            "{e}"
        );
        for bad in ["", "localhost:9", "70000", "1.2.3.4", "abc"] {
            let e = p(bad, false).unwrap_err().to_string();
            assert!(e.contains("--metrics") && e.contains("PORT"), "{bad}: {e}");
        }
    }
}
