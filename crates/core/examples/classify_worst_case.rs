//! Per-lookup cost of TupleMerge (and the other structures) on rule sets built to fill one
//! bucket — thousands of nested port ranges on one address pair (issue #37) — and on the
//! ClassBench-like sets of `docs/classify.md`, so a change to the bucket bound can be checked
//! for both: the adversarial sets must get cheap, the ordinary ones must not get dearer.
//!
//! Run: `cargo run --release -p netsched-core --example classify_worst_case [rules [only]]`
//! (default 20000 rules in the adversarial sets, 10000 in the generated ones; `only` keeps
//! the sets whose name contains it, e.g. `fw`).
//!
//! Figures are nanoseconds of this thread's CPU time per lookup (`CLOCK_THREAD_CPUTIME_ID`:
//! time spent waiting for a core on a shared machine is not counted), the best of 3 passes of
//! at least 0.3 s each.

use netsched_core::classify::acl::generate::{generate_rules, generate_trace, Profile};
use netsched_core::classify::acl::{
    build_classifier, AclRule, Action, ClassifierKind, ClassifierLimits, FiveTuple, Ipv4Prefix,
    PacketClassifier, ProtoMatch, RuleSet, TupleMergeClassifier,
};
use netsched_core::classify::PortRange;
use std::hint::black_box;
use std::time::Instant;

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
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Nanoseconds of CPU per lookup over whole passes of `trace`: the best of 3 rounds.
fn ns_per_lookup(c: &dyn PacketClassifier, trace: &[FiveTuple]) -> f64 {
    (0..3)
        .map(|_| {
            let cpu0 = thread_cpu_ns();
            let (mut done, mut sum) = (0u64, 0u64);
            while thread_cpu_ns() - cpu0 < 300_000_000 {
                for k in trace {
                    sum = sum.wrapping_add(c.first_match(black_box(k)).map_or(1, u64::from));
                }
                done += trace.len() as u64;
            }
            black_box(sum);
            (thread_cpu_ns() - cpu0) as f64 / done as f64
        })
        .fold(f64::INFINITY, f64::min)
}

const SRC: u32 = 0x0A00_0001;
const DST: u32 = 0xC0A8_0001;

/// `n` rules on one address pair (src /32, dst /32, UDP), rule i with the port ranges
/// `sport(i)` and `dport(i)`, all dropping.
fn nested(n: u32, sport: impl Fn(u32) -> PortRange, dport: impl Fn(u32) -> PortRange) -> RuleSet {
    RuleSet::new(
        (1..=n)
            .map(|i| AclRule {
                src: Ipv4Prefix::new(SRC, 32).unwrap(),
                dst: Ipv4Prefix::new(DST, 32).unwrap(),
                src_port: sport(i),
                dst_port: dport(i),
                proto: ProtoMatch::exact(17),
                action: Action::Drop,
            })
            .collect(),
    )
}

fn span(low: u32, i: u32) -> PortRange {
    PortRange {
        low: low as u16,
        high: (low + i).min(65535) as u16,
    }
}

fn header(sp: u16, dp: u16) -> FiveTuple {
    FiveTuple {
        src: SRC,
        dst: DST,
        src_port: sp,
        dst_port: dp,
        proto: 17,
    }
}

fn report(name: &str, set: &RuleSet, traces: &[(&str, Vec<FiveTuple>)], kinds: &[ClassifierKind]) {
    if !std::env::args()
        .nth(2)
        .is_none_or(|only| name.contains(&only))
    {
        return;
    }
    let lim = ClassifierLimits {
        max_tuples: 100_000,
        ..ClassifierLimits::default()
    };
    let lin = build_classifier(ClassifierKind::Linear, set, &lim).unwrap();
    if let Ok(tm) = TupleMergeClassifier::build(set, &lim) {
        println!(
            "{name}: {} rules; tuple_merge longest bucket {}",
            set.len(),
            tm.longest_bucket()
        );
    }
    for &kind in kinds {
        let t = Instant::now();
        let c = match build_classifier(kind, set, &lim) {
            Ok(c) => c,
            Err(e) => {
                println!("  {kind:<12} refused: {e}");
                continue;
            }
        };
        let build = t.elapsed();
        for (tname, trace) in traces {
            for k in trace {
                assert_eq!(c.first_match(k), lin.first_match(k), "{name} {kind} {k:?}");
            }
            println!(
                "  {kind:<12} {tname:<10} {:>10.1} ns/lookup  build {:>8.1} ms  memory {:>11} B  tables {}",
                ns_per_lookup(c.as_ref(), trace),
                build.as_secs_f64() * 1e3,
                c.memory_bytes(),
                c.tuples()
            );
        }
    }
}

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a rule count"))
        .unwrap_or(20_000);
    let tm = [ClassifierKind::TupleMerge];
    let any = |_| PortRange {
        low: 0,
        high: 65535,
    };
    // The set: dport 5000-(5000+i); a header on the pair that matches none (dport
    // 4999) and one inside the widest range only.
    let set = nested(n, any, |i| span(5000, i));
    let miss = vec![header(1, 4999)];
    let deep = vec![header(1, (5000 + n).min(65535) as u16)];
    report(
        "dport 5000-(5000+i)",
        &set,
        &[("miss", miss.clone()), ("last", deep)],
        &tm,
    );
    let set = nested(n, |i| span(1000, i), any);
    report(
        "sport 1000-(1000+i)",
        &set,
        &[("miss", vec![header(999, 1)])],
        &tm,
    );
    let m = n / 4;
    let set = nested(m, |i| span(1000, i), |i| span(5000, i));
    report(
        "both ports, n/4 rules",
        &set,
        &[("miss", vec![header(999, 4999), header(1000, 4999)])],
        &tm,
    );
    for p in Profile::ALL {
        let set = generate_rules(p, 10_000, 1);
        let trace = generate_trace(&set, 100_000, 90, 1);
        report(
            &format!("{p}-like 10k"),
            &set,
            &[("trace", trace)],
            &[ClassifierKind::TupleMerge, ClassifierKind::TupleSpace],
        );
    }
}
