//! The families every daemon exports about itself, read at each scrape: the process's own
//! (`process_*`, the names and units of Prometheus's client libraries, "Process metrics" in
//! the Prometheus instrumentation guide, so dashboards made for any exporter work), which
//! daemon and version answers (`netsched_build_info`, the `*_build_info` convention of the
//! naming guide: a gauge of 1 whose labels carry the facts), and the log writer's dropped lines.
//!
//! Sources: `clock_gettime(CLOCK_PROCESS_CPUTIME_ID)` for CPU time (every thread, user and
//! system, in ns: no clock-tick rounding); `/proc/self/stat` (proc(5): field 22 `starttime`
//! in clock ticks since boot, field 23 `vsize` in bytes) with `/proc/stat`'s `btime`;
//! `/proc/self/status` `VmRSS`; `/proc/self/limits` "Max open files"; the entries of
//! `/proc/self/fd`, counted up to [`MAX_FDS_COUNTED`]. A source that cannot be read leaves its
//! family out of that scrape rather than exporting a made-up value.
//!
//! Cost per scrape: four small `/proc` reads and one directory walk, on the scrape's thread.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;

/// Open descriptors counted at most (the walk stops there).
pub const MAX_FDS_COUNTED: usize = 1 << 20;
/// Largest `/proc` file read.
const MAX_PROC_BYTES: u64 = 64 * 1024;

/// Register the common families of daemon `daemon` (`balance`, `nfq`, …): `process_*`,
/// `netsched_build_info` and `netsched_log_dropped_lines_total` (read from `log_drops`).
pub fn register_daemon(registry: &mut Registry, daemon: &'static str, log_drops: fn() -> u64) {
    crate::register_log_drops(registry, log_drops);
    registry.register_collector(Box::new(Process { daemon }));
}

struct Process {
    daemon: &'static str,
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("daemon", &self.daemon)
            .finish()
    }
}

fn read(path: &str) -> Option<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// The fields of `/proc/self/stat` after the command name (which may hold spaces and
/// parentheses: the last `)` ends it), so that `fields[0]` is field 3, `state`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// Start time in seconds since the epoch: boot time plus field 22 in clock ticks.
fn start_time(stat: &[&str], proc_stat: &str, ticks: u64) -> Option<f64> {
    let since_boot: u64 = stat.get(22 - 3)?.parse().ok()?;
    let btime: u64 = proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime as f64 + since_boot as f64 / ticks.max(1) as f64)
}

/// `VmRSS:   1234 kB` in bytes.
fn resident(status: &str) -> Option<u64> {
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The soft limit of "Max open files" (`unlimited` is no number: left out).
fn max_fds(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn open_fds() -> Option<u64> {
    let n = std::fs::read_dir("/proc/self/fd")
        .ok()?
        .take(MAX_FDS_COUNTED)
        .count();
    // The walk's own descriptor is one of them.
    Some(n.saturating_sub(1) as u64)
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&prometheus_client::registry::Unit>,
    v: f64,
) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

impl Collector for Process {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        use prometheus_client::registry::Unit;
        let cpu = netsched_sys::clock::process_cpu_ns() as f64 / 1e9;
        let m = enc.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        ConstCounter::new(cpu).encode(m)?;
        let stat = read("/proc/self/stat");
        let fields = stat.as_deref().and_then(stat_fields);
        if let Some(f) = &fields {
            let ticks = netsched_sys::clock::clock_ticks_per_second();
            if let Some(t) = read("/proc/stat").and_then(|p| start_time(f, &p, ticks)) {
                let help = "Start time of the process since the Unix epoch";
                gauge(
                    &mut enc,
                    "process_start_time",
                    help,
                    Some(&Unit::Seconds),
                    t,
                )?;
            }
            if let Some(v) = f.get(23 - 3).and_then(|v| v.parse::<u64>().ok()) {
                let help = "Virtual memory size";
                gauge(
                    &mut enc,
                    "process_virtual_memory",
                    help,
                    Some(&Unit::Bytes),
                    v as f64,
                )?;
            }
        }
        if let Some(rss) = read("/proc/self/status").as_deref().and_then(resident) {
            let help = "Resident memory size";
            gauge(
                &mut enc,
                "process_resident_memory",
                help,
                Some(&Unit::Bytes),
                rss as f64,
            )?;
        }
        if let Some(n) = open_fds() {
            gauge(
                &mut enc,
                "process_open_fds",
                "Open file descriptors",
                None,
                n as f64,
            )?;
        }
        if let Some(n) = read("/proc/self/limits").as_deref().and_then(max_fds) {
            let help = "Maximum number of open file descriptors (soft limit)";
            gauge(&mut enc, "process_max_fds", help, None, n as f64)?;
        }
        let mut m = enc.encode_descriptor(
            "netsched_build_info",
            "The daemon answering and its version (always 1)",
            None,
            MetricType::Gauge,
        )?;
        let labels = [
            ("daemon", self.daemon),
            ("version", env!("CARGO_PKG_VERSION")),
        ];
        let m = m.encode_family(&labels)?;
        ConstGauge::new(1i64).encode(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, name: &str) -> Option<&'a str> {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
    }

    fn value(text: &str, name: &str) -> f64 {
        line(text, name)
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    #[test]
    fn every_family_is_exported_with_values_of_this_process() {
        let mut reg = Registry::default();
        register_daemon(&mut reg, "test", || 3);
        // Burn some CPU so the counter is above zero.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &reg).unwrap();
        assert!(value(&s, "process_cpu_seconds_total") > 0.0, "{s}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value(&s, "process_start_time_seconds");
        assert!(
            start > now - 3600.0 && start <= now + 1.0,
            "{start} vs {now}"
        );
        assert!(value(&s, "process_resident_memory_bytes") > 1e5, "{s}");
        assert!(value(&s, "process_virtual_memory_bytes") > 1e5, "{s}");
        let fds = value(&s, "process_open_fds");
        // 256 more open files: the count rises by them. The other tests of this crate run in
        // the same process and open and close descriptors meanwhile, a few dozen at most, so
        // the check asks for half the rise.
        let files: Vec<_> = (0..256)
            .map(|_| std::fs::File::open("/proc/self/stat").unwrap())
            .collect();
        let mut s2 = String::new();
        prometheus_client::encoding::text::encode(&mut s2, &reg).unwrap();
        let more = value(&s2, "process_open_fds");
        assert!(more >= fds + 128.0, "{fds} then {more} with 256 files more");
        drop(files);
        assert!(value(&s, "process_max_fds") >= fds, "{s}");
        let info = line(&s, "netsched_build_info").unwrap();
        assert!(info.contains("daemon=\"test\""), "{info}");
        assert!(info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))));
        assert!(info.ends_with(" 1"), "{info}");
        assert_eq!(value(&s, "netsched_log_dropped_lines_total"), 3.0);
    }

    #[test]
    fn proc_files_are_read_field_by_field() {
        let stat = "42 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 1000 4096 9";
        let f = stat_fields(stat).unwrap();
        assert_eq!(f[0], "S");
        assert_eq!(
            start_time(&f, "cpu 1 2\nbtime 1700000000\n", 100),
            Some(1_700_000_010.0)
        );
        assert_eq!(f[23 - 3], "4096");
        assert_eq!(resident("Name:\tx\nVmRSS:\t  2048 kB\n"), Some(2048 * 1024));
        assert_eq!(resident("Name:\tx\n"), None);
        let limits = "Limit Soft Limit Hard Limit Units\nMax open files 1024 4096 files\n";
        assert_eq!(max_fds(limits), Some(1024));
        assert_eq!(max_fds("Max open files unlimited unlimited files\n"), None);
        assert_eq!(stat_fields("no parenthesis"), None);
    }
}
