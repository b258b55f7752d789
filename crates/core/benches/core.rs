//! Core benchmarks (criterion): cost per enqueue+dequeue of every queue discipline through
//! `AnyQdisc`/`QdiscConfig` at 2, 8 and 64 classes (FIFO is the baseline, measured in the
//! same run), cost per pick of every balancer through `AnyBalancer`/`BalancerConfig` at 4, 64
//! and 1000 servers (rr is the baseline), and the Maglev table build for 1000 servers.
//! After the run a ratio table (median vs. baseline) is printed from criterion's estimates.
//!
//! Run: `CARGO_TARGET_DIR=/work/target-bal cargo bench -p netsched-core --bench core`
//! Results and method: `docs/bench-core.md`.
//!
//! Clock. By default the time measured is the benchmark thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), not wall time: the machine is shared (2 cores, often a load
//! of 10+), and wall time would count the time the thread waits for a core. Set
//! `NETSCHED_BENCH_WALL=1` for criterion's wall clock.
//!
//! Method. Disciplines: each is pre-filled with 4 items per class (limits far above, so the
//! drop path is not measured); one iteration enqueues one 1000-byte item into class
//! `i mod classes` and dequeues one, with `now` advancing by 1 µs. Balancers: a server table
//! with weights 2..5 and fixed connection counts (1 <= active < weight: no idle server for
//! nq, lblc keeps its cache, ovf has room); one iteration picks for the next of 1024 flow keys (distinct sources
//! and destinations). Counts are not updated, so every iteration sees the same table.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{black_box, BenchmarkId, Criterion, Throughput};
use netsched_core::balance::{Balancer, BalancerConfig, FlowKey, ServerId, ServerTable};
use netsched_core::dispatch::{BlockKind, Dispatch, DispatchConfig, DispatchKind, WorkerView};
use netsched_core::qdisc::fifo::TestItem;
use netsched_core::qdisc::{AnyQdisc, Feedback, Qdisc, QdiscConfig, QdiscKind};
use netsched_core::rng::SplitMix64;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

const CLASS_COUNTS: [usize; 3] = [2, 8, 64];
const SERVER_COUNTS: [usize; 3] = [4, 64, 1000];
/// The benchmarked variants of every kind, by bench name. An exhaustive `match`, so a new
/// kind fails to compile here until it is benchmarked (and `qdisc_json` gives its config).
/// `percentile_feedback` is Percentile with a `Feedback::Completed` reported for every
/// dequeued item (the full per-request cost of P0's learning loop); `percentile_quantile`
/// the same with the `auto_quantile` deadline (a histogram update per completion).
fn variants(kind: QdiscKind) -> &'static [&'static str] {
    match kind {
        QdiscKind::Fifo => &["fifo"],
        QdiscKind::StrictPriority => &["strict_priority"],
        QdiscKind::Drr => &["drr"],
        QdiscKind::Wf2qPlus => &["wf2q_plus"],
        QdiscKind::Edf => &["edf"],
        QdiscKind::AckSeparation => &["ack_separation"],
        QdiscKind::Percentile => &["percentile", "percentile_feedback", "percentile_quantile"],
        QdiscKind::DelayConstrained => &["delay_constrained"],
    }
}

/// Every (kind, bench name) pair, in kind order.
fn qdisc_variants() -> Vec<(QdiscKind, &'static str)> {
    QdiscKind::ALL
        .iter()
        .flat_map(|&k| variants(k).iter().map(move |&v| (k, v)))
        .collect()
}

fn repeat(n: usize, f: impl Fn(usize) -> String) -> String {
    (0..n).map(f).collect::<Vec<_>>().join(",")
}

/// The JSON config of `kind` (bench variant `variant`) with `n` classes, or None if the kind
/// has a fixed class count other than `n` (ACK separation: 2).
fn qdisc_json(kind: QdiscKind, variant: &str, n: usize) -> Option<String> {
    let lim = r#""queue_limit": 100000"#;
    Some(match kind {
        QdiscKind::Fifo => format!(r#"{{"kind": "fifo", {lim}}}"#),
        QdiscKind::StrictPriority => format!(
            r#"{{"kind": "strict_priority", "bands": [{}]}}"#,
            repeat(n, |_| format!("{{{lim}}}"))
        ),
        QdiscKind::Drr => format!(
            r#"{{"kind": "drr", "classes": [{}]}}"#,
            repeat(n, |_| format!(r#"{{"quantum": 1500, {lim}}}"#))
        ),
        QdiscKind::Wf2qPlus => format!(
            r#"{{"kind": "wf2q_plus", "classes": [{}]}}"#,
            repeat(n, |i| format!(r#"{{"weight": {}, {lim}}}"#, 1 + i % 4))
        ),
        QdiscKind::Edf => format!(
            r#"{{"kind": "edf", "classes": [{}]}}"#,
            repeat(n, |i| format!(
                r#"{{"deadline": "{}us", {lim}}}"#,
                1000 * (i + 1)
            ))
        ),
        QdiscKind::AckSeparation if n == 2 => {
            format!(r#"{{"kind": "ack_separation", "ack": {{{lim}}}, "other": {{{lim}}}}}"#)
        }
        QdiscKind::AckSeparation => return None,
        QdiscKind::Percentile if variant != "percentile_quantile" => format!(
            r#"{{"kind": "percentile", {lim}, "percentiles": [{}]}}"#,
            repeat(n, |i| format!("{}", 99 - (i * 49) / n.max(2)))
        ),
        QdiscKind::Percentile => format!(
            r#"{{"kind": "percentile", {lim}, "deadline": "auto_quantile", "percentiles": [{}]}}"#,
            repeat(n, |i| format!("{}", 99 - (i * 49) / n.max(2)))
        ),
        QdiscKind::DelayConstrained => format!(
            r#"{{"kind": "delay_constrained", "interfaces": [{}]}}"#,
            repeat(n, |i| format!(
                r#"{{"priority": {}, "bitmap_len": {}, {lim}}}"#,
                1 + i % 3,
                [3, 6, 10][i % 3]
            ))
        ),
    })
}

fn build_qdisc(kind: QdiscKind, variant: &str, n: usize) -> Option<AnyQdisc<TestItem>> {
    let json = qdisc_json(kind, variant, n)?;
    let cfg: QdiscConfig = match serde_json::from_str(&json) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("skip {variant}/{n}: config does not parse ({e}): {json}");
            return None;
        }
    };
    match cfg.build() {
        Ok(q) => Some(q),
        Err(e) => {
            eprintln!("skip {variant}/{n}: {e}");
            None
        }
    }
}

fn item(id: u64) -> TestItem {
    TestItem { id, len: 1000 }
}

/// Pre-fill 4 items per class; return the next item id.
fn prefill(q: &mut AnyQdisc<TestItem>, n: usize) -> u64 {
    let mut id = 0;
    for _ in 0..4 {
        for c in 0..n {
            let _ = q.enqueue(c, item(id), 0);
            id += 1;
        }
    }
    id
}

/// Steady-state check outside the measurement: each dequeue after an enqueue returns an
/// item (else the bench would measure a growing queue or the drop path).
fn steady_state_ok(kind: QdiscKind, variant: &str, n: usize) -> bool {
    let Some(mut q) = build_qdisc(kind, variant, n) else {
        return false;
    };
    let first = prefill(&mut q, n);
    let start = q.len();
    for id in first..first + 10_000 {
        let now = (id - first + 1) * 1000;
        let v = q.enqueue(id as usize % n, item(id), now);
        if !v.is_queued() || q.dequeue(now).is_none() {
            eprintln!("note {variant}/{n}: not steady (drop or held item); measured anyway");
            return true;
        }
    }
    assert_eq!(q.len(), start, "{variant}/{n}: queue length drifted");
    true
}

fn bench_qdiscs<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group("qdisc_enq_deq");
    for &n in &CLASS_COUNTS {
        for (kind, variant) in qdisc_variants() {
            if qdisc_json(kind, variant, n).is_none() || !steady_state_ok(kind, variant, n) {
                continue;
            }
            let Some(mut q) = build_qdisc(kind, variant, n) else {
                continue;
            };
            let mut id = prefill(&mut q, n);
            let mut now = 0u64;
            let feedback = matches!(variant, "percentile_feedback" | "percentile_quantile");
            g.bench_function(BenchmarkId::new(variant, n), |b| {
                b.iter(|| {
                    now += 1000;
                    id += 1;
                    let v = q.enqueue(id as usize % n, item(id), now);
                    let _ = black_box(v);
                    let out = q.dequeue(now);
                    if feedback {
                        if let Some(it) = &out {
                            // item ids were enqueued into class id % n; latencies 0..8 ms
                            let fb = Feedback::Completed {
                                class: it.id as usize % n,
                                latency: (it.id * 7919 % 8) * 1_000_000,
                            };
                            q.feedback(fb, now);
                        }
                    }
                    black_box(out)
                })
            });
        }
    }
    g.finish();
}

/// A table of `n` servers, weights 2..=5, 1 <= active < weight (no idle server, so nq
/// scans like sed; room below the weight for ovf and lblc), a few inactive connections.
fn server_table(n: usize) -> ServerTable {
    let mut t = ServerTable::new();
    for i in 0..n {
        let w = 2 + (i % 4) as u32;
        let addr = IpAddr::V4(Ipv4Addr::from(0x0A00_0001 + i as u32));
        t.add_server(i as u32, addr, 80, w).unwrap();
        let active = 1 + (i as u32 * 7) % (w - 1);
        t.set_conns(ServerId(i as u32), active, (i as u32 * 3) % 5)
            .unwrap();
    }
    t
}

fn flow_keys() -> Vec<FlowKey> {
    let mut r = SplitMix64::new(42);
    (0..1024)
        .map(|_| {
            let v = r.next_u64();
            FlowKey::new(
                IpAddr::V4(Ipv4Addr::from(0xC000_0000 | (v as u32 & 0x00FF_FFFF))),
                1024 + (v >> 32) as u16 % 60000,
                IpAddr::V4(Ipv4Addr::from(0xC633_6400 | ((v >> 48) as u32 & 0x3FF))),
                80,
            )
        })
        .collect()
}

fn bench_balancers<M: Measurement>(c: &mut Criterion<M>) {
    let keys = flow_keys();
    let mut g = c.benchmark_group("balancer_pick");
    for &n in &SERVER_COUNTS {
        let table = server_table(n);
        for cfg in BalancerConfig::all_defaults() {
            let mut rng = SplitMix64::new(7);
            let mut b = cfg.build(&mut rng).expect("default config builds");
            // warm tables and caches (wrr/dh/sh/mh build, lblc entries) outside the timing
            for k in &keys {
                black_box(b.pick(&table, k, 0));
            }
            let mut i = 0usize;
            g.bench_function(BenchmarkId::new(cfg.name(), n), |bch| {
                bch.iter(|| {
                    i = (i + 1) & 1023;
                    black_box(b.pick(&table, &keys[i], 0))
                })
            });
        }
    }
    g.finish();
}

/// One `assign` per block on the IXP1200's 6 × 4 workers, a quarter of them busy, for every
/// dispatch kind (`DispatchKind::ALL`; `DispatchConfig::of_kind` is an exhaustive `match`).
fn bench_dispatch<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group("dispatch_assign");
    let mut workers = WorkerView::uniform(6, 4);
    for (i, w) in workers.iter_mut().enumerate() {
        w.busy = i % 4 == 0;
        w.idle_since = i as u64;
    }
    let blocks = [
        BlockKind::Sop,
        BlockKind::Middle,
        BlockKind::Eop,
        BlockKind::Single,
    ];
    for &kind in DispatchKind::ALL {
        let mut p = DispatchConfig::of_kind(kind)
            .build()
            .expect("dispatch configs have no options that can be wrong");
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new(kind.name(), workers.len()), |b| {
            b.iter(|| {
                i = (i + 1) & 3;
                black_box(p.assign(blocks[i], &WorkerView::new(&workers), i as u64))
            })
        });
    }
    g.finish();
}

fn bench_maglev_build<M: Measurement>(c: &mut Criterion<M>) {
    let mut g = c.benchmark_group("maglev_build");
    g.sample_size(20);
    let table = server_table(1000);
    let mut mh = netsched_core::balance::maglev::Maglev::default();
    g.bench_function(BenchmarkId::new("m65521", 1000), |b| {
        b.iter(|| {
            mh.maglev_build(black_box(&table));
            black_box(mh.slots()[0])
        })
    });
    let mut big = netsched_core::balance::maglev::Maglev::new(131071, false, false).unwrap();
    g.bench_function(BenchmarkId::new("m131071", 1000), |b| {
        b.iter(|| {
            big.maglev_build(black_box(&table));
            black_box(big.slots()[0])
        })
    });
    g.finish();
}

/// Where criterion writes its results: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`,
/// else the workspace `target/criterion`.
fn criterion_dir() -> PathBuf {
    if let Ok(h) = std::env::var("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t).join("criterion");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion")
}

/// Median in ns of one benchmark of this run, from criterion's `new/estimates.json`.
fn median_ns(group: &str, name: &str, param: usize) -> Option<f64> {
    let p = criterion_dir()
        .join(group)
        .join(name)
        .join(param.to_string())
        .join("new/estimates.json");
    let text = std::fs::read_to_string(p).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn print_ratios() {
    println!("\n== qdisc enqueue+dequeue, median ns (ratio to fifo at the same class count)");
    println!("{:<20} {:>16} {:>16} {:>16}", "kind", "2", "8", "64");
    for (_, variant) in qdisc_variants() {
        let mut row = format!("{variant:<20}");
        for &n in &CLASS_COUNTS {
            let cell = match (
                median_ns("qdisc_enq_deq", variant, n),
                median_ns("qdisc_enq_deq", "fifo", n),
            ) {
                (Some(x), Some(f)) => format!("{x:.1} ({:.2}x)", x / f),
                _ => "-".into(),
            };
            row += &format!(" {cell:>16}");
        }
        println!("{row}");
    }
    println!("\n== balancer pick, median ns (ratio to rr at the same server count)");
    println!("{:<18} {:>16} {:>16} {:>16}", "kind", "4", "64", "1000");
    for cfg in BalancerConfig::all_defaults() {
        let mut row = format!("{:<18}", cfg.name());
        for &n in &SERVER_COUNTS {
            let cell = match (
                median_ns("balancer_pick", cfg.name(), n),
                median_ns("balancer_pick", "rr", n),
            ) {
                (Some(x), Some(r)) => format!("{x:.1} ({:.2}x)", x / r),
                _ => "-".into(),
            };
            row += &format!(" {cell:>16}");
        }
        println!("{row}");
    }
    for name in ["m65521", "m131071"] {
        if let Some(x) = median_ns("maglev_build", name, 1000) {
            println!("\nmaglev build, 1000 servers, {name}: {:.3} ms", x / 1e6);
        }
    }
}

/// Thread CPU time (Linux `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`), as a criterion
/// measurement. Declared directly against the C library std already links (core's only
/// normal dependency is serde; no libc crate in this bench).
struct ThreadCpuTime;

#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec (64-bit time_t and long on the 64-bit Linux
    // targets this project builds for); the call only writes into it.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(not(target_os = "linux"))]
fn thread_cpu_ns() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

struct NsFormatter;

impl ValueFormatter for NsFormatter {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns"
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        // per-second rate from ns per iteration
        let per = match t {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) | Throughput::Elements(n) => *n,
        } as f64;
        for v in values.iter_mut() {
            *v = per * 1e9 / *v;
        }
        "/s"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &NsFormatter
    }
}

fn run_all<M: Measurement>(mut c: Criterion<M>) {
    c = c
        .measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300))
        .configure_from_args();
    bench_qdiscs(&mut c);
    bench_balancers(&mut c);
    bench_maglev_build(&mut c);
    bench_dispatch(&mut c);
    c.final_summary();
}

fn main() {
    let wall = std::env::var("NETSCHED_BENCH_WALL").is_ok_and(|v| v == "1");
    if wall {
        println!("clock: wall time (criterion WallTime)");
        run_all(Criterion::default().with_measurement(WallTime));
    } else {
        println!("clock: thread CPU time (CLOCK_THREAD_CPUTIME_ID)");
        run_all(Criterion::default().with_measurement(ThreadCpuTime));
    }
    print_ratios();
}
