//! `netsched classify`: make ClassBench-like rule sets and traces (`gen`), and measure the
//! packet classifiers of `netsched_core::classify::acl` on them (`bench`). The algorithms and
//! formats live in core; this file reads and writes files and owns the clock.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use netsched_core::classify::acl::generate::{generate_rules, generate_trace, Profile};
use netsched_core::classify::acl::{
    build_classifier, format_trace, parse_trace, ClassifierKind, ClassifierLimits, FiveTuple,
    RuleSet, MAX_FILE_BYTES,
};
use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The most packets `bench` reads from a trace.
const MAX_TRACE_PACKETS: usize = 10_000_000;

#[derive(Debug, Args)]
pub struct ClassifyArgs {
    #[command(subcommand)]
    what: ClassifyWhat,
}

#[derive(Debug, Subcommand)]
enum ClassifyWhat {
    /// Write a ClassBench-like rule set (and optionally a packet trace for it).
    #[command(after_long_help = GEN_HELP)]
    Gen(GenArgs),
    /// Measure build time, memory and lookup speed of the classifiers on a rule set and trace.
    #[command(after_long_help = BENCH_HELP)]
    Bench(BenchArgs),
}

const GEN_HELP: &str = "\
Rules follow ClassBench's method (Taylor & Turner, INFOCOM 2005): per rule a protocol, a
port class per port field (WC 0:65535, HI 1024:65535, LO 0:1023, AR arbitrary, EM exact) and a
source/destination prefix-length pair, addresses under a few skewed base networks so prefixes
nest. Profiles: acl (exact destination ports, specific addresses), fw (many wildcard
addresses), ipc (a mix). Our own parameters, not ClassBench's seed files; see docs/classify.md.

Output: the ClassBench filter format, highest priority first, one rule per line:
    @10.1.0.0/16\t192.0.2.0/24\t0 : 65535\t80 : 80\t0x06/0xFF\t0x0000/0x0000
The trace: one header per line, decimal `src dst src_port dst_port proto`. --hit-percent of
the headers fall inside a randomly chosen rule, the rest are random.
The same profile, --rules and --seed give the same files on every machine.

EXAMPLE:
    netsched classify gen --profile acl --rules 10000 --seed 1 --out acl10k.rules \\
        --trace acl10k.trace --packets 1000000";

const BENCH_HELP: &str = "\
Reads a rule file (ClassBench filter format, or the TOML rule file of docs/rules.md if the
name ends in .toml; its IPv4 rules only: an IPv6 prefix is refused) and a trace, builds each classifier, checks that every one gives the linear scan's answer (or the
first listed one's) for every packet, then classifies the trace in a loop on this thread for
at least --duration of CPU time per classifier. Prints, per classifier: build time, memory, tuples (hash
tables), million packets per CPU second of the classifying thread (Mpps_cpu: time spent
waiting for a core on a busy machine is not counted) and per wall second, the speed relative to the first classifier listed
(the baseline, measured in the same run).

Classifiers: linear (the reference), tuple_space (priority-sorted tuple space search),
tuple_merge (TupleMerge). Limits: --max-tuples, --max-entries, --max-memory refuse a rule set
whose structure would pass them (tuple space explosion, CVE-2019-25076).

For a stable figure run on a quiet core, e.g. `taskset -c 1 netsched classify bench ...`.

EXAMPLE:
    netsched classify bench --rules acl10k.rules --trace acl10k.trace";

#[derive(Debug, Args)]
struct GenArgs {
    /// acl, fw or ipc.
    #[arg(long, default_value = "acl")]
    profile: Profile,
    /// Number of rules (at most 10000000).
    #[arg(long, default_value_t = 10_000)]
    rules: usize,
    /// Seed of the generator: the same profile, --rules and --seed give the same files.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where to write the rules (ClassBench filter format).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Also write a header trace for the rules here.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Headers in the trace (at most 10000000).
    #[arg(long, default_value_t = 100_000)]
    packets: usize,
    /// Percent of headers drawn inside a rule (0-100).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(0..=100))]
    hit_percent: u32,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Rule file: ClassBench filter format, or the TOML rule file (*.toml, docs/rules.md).
    #[arg(long, value_name = "FILE")]
    rules: PathBuf,
    /// Header trace (ClassBench trace format).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// Classifiers to run, comma-separated; the first is the baseline.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "linear,tuple_space,tuple_merge"
    )]
    classifier: Vec<ClassifierKind>,
    /// Minimum measuring time (CPU time) per classifier, e.g. 1s or 500ms.
    #[arg(long, default_value = "1s")]
    duration: String,
    /// Deprecated spelling of --duration in seconds (`--seconds 2` = `--duration 2s`).
    #[arg(long, hide = true, conflicts_with = "duration")]
    seconds: Option<f64>,
    /// Refuse a rule set that needs more tuples (hash tables) than this.
    #[arg(long, default_value_t = ClassifierLimits::default().max_tuples)]
    max_tuples: usize,
    /// Refuse a rule set that needs more table entries than this.
    #[arg(long, default_value_t = ClassifierLimits::default().max_entries)]
    max_entries: usize,
    /// Refuse a rule set whose classifier structures need more memory than this (a size:
    /// 1g, 512m, or bytes).
    #[arg(long = "max-memory", alias = "max-bytes", default_value = "1g", value_parser = parse_memory)]
    max_bytes: usize,
}

pub fn run(args: ClassifyArgs) -> Result<()> {
    match args.what {
        ClassifyWhat::Gen(a) => run_gen(&a),
        ClassifyWhat::Bench(a) => run_bench(&a),
    }
}

fn run_gen(a: &GenArgs) -> Result<()> {
    let rules = generate_rules(a.profile, a.rules, a.seed);
    std::fs::write(&a.out, rules.to_classbench())
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    if let Some(path) = &a.trace {
        let trace = generate_trace(&rules, a.packets, a.hit_percent, a.seed);
        std::fs::write(path, format_trace(&trace))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// A text file of at most [`MAX_FILE_BYTES`] bytes.
fn read_text(path: &Path) -> Result<String> {
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| anyhow!("cannot read {name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("cannot read {name}: {e}"))?;
    if bytes.len() > MAX_FILE_BYTES {
        bail!("{name}: larger than {MAX_FILE_BYTES} bytes");
    }
    String::from_utf8(bytes).map_err(|e| anyhow!("{name}: not UTF-8 text: {e}"))
}

fn read_rules(path: &Path) -> Result<RuleSet> {
    let text = read_text(path)?;
    let name = path.display().to_string();
    Ok(if path.extension().is_some_and(|e| e == "toml") {
        RuleSet::from_toml_str(&text, &name)?
    } else {
        RuleSet::parse_classbench(&text, &name)?
    })
}

fn run_bench(a: &BenchArgs) -> Result<()> {
    let rules = read_rules(&a.rules)?;
    let trace = parse_trace(
        &read_text(&a.trace)?,
        &a.trace.display().to_string(),
        MAX_TRACE_PACKETS,
    )?;
    let seconds = match a.seconds {
        Some(s) if s.is_finite() && s > 0.0 => s,
        Some(s) => bail!("--seconds {s}: must be a positive number of seconds"),
        None => {
            netsched_core::units::parse_duration_in(&a.duration, 1, 3_600_000_000_000)
                .context("--duration")? as f64
                / 1e9
        }
    };
    if trace.is_empty() || a.classifier.is_empty() {
        bail!("need a non-empty trace and at least one classifier");
    }
    let limits = ClassifierLimits {
        max_tuples: a.max_tuples,
        max_entries: a.max_entries,
        max_bytes: a.max_bytes,
        ..ClassifierLimits::default()
    };
    println!(
        "rules {} ({}), trace {} packets ({})",
        rules.len(),
        a.rules.display(),
        trace.len(),
        a.trace.display()
    );
    println!(
        "{:<12} {:>10} {:>12} {:>7} {:>9} {:>8} {:>10} {:>9}",
        "classifier",
        "build_ms",
        "memory_B",
        "tuples",
        "Mpps_cpu",
        "x_first",
        "Mpps_wall",
        "matched"
    );
    let mut reference: Option<Vec<Option<u32>>> = None;
    let mut first_mpps = None;
    for &kind in &a.classifier {
        let start = Instant::now();
        let c = build_classifier(kind, &rules, &limits).with_context(|| format!("{kind}"))?;
        let build = start.elapsed();
        let answers: Vec<Option<u32>> = trace.iter().map(|k| c.first_match(k)).collect();
        match &reference {
            None => reference = Some(answers.clone()),
            Some(want) => {
                if let Some(i) = (0..trace.len()).find(|&i| want[i] != answers[i]) {
                    bail!(
                        "{kind} disagrees with {} on packet {} ({:?}): {:?} vs {:?}",
                        a.classifier[0],
                        i + 1,
                        trace[i],
                        answers[i],
                        want[i]
                    );
                }
            }
        }
        let (mpps, wall) = measure(&trace, |k| c.first_match(k), seconds);
        let ratio = mpps / *first_mpps.get_or_insert(mpps);
        println!(
            "{:<12} {:>10.2} {:>12} {:>7} {:>9.3} {:>8.2} {:>10.3} {:>9}",
            kind.to_string(),
            build.as_secs_f64() * 1e3,
            c.memory_bytes(),
            c.tuples(),
            mpps,
            ratio,
            wall,
            answers.iter().filter(|x| x.is_some()).count()
        );
    }
    Ok(())
}

/// `--max-memory`: a size in the units grammar (`1g`, `512m`, or bytes).
fn parse_memory(text: &str) -> Result<usize, String> {
    netsched_core::units::parse_size(text)
        .map_err(|e| e.to_string())
        .and_then(|b| usize::try_from(b).map_err(|_| format!("{text}: too large")))
}

/// Million lookups per second over whole passes of `trace`, for at least `seconds` of this
/// thread's CPU time: per CPU second (`CLOCK_THREAD_CPUTIME_ID`, so time spent waiting for a
/// core on a busy machine is not counted) and per wall-clock second.
fn measure(trace: &[FiveTuple], f: impl Fn(&FiveTuple) -> Option<u32>, seconds: f64) -> (f64, f64) {
    let min_ns = (seconds * 1e9) as u64;
    let start = Instant::now();
    let cpu0 = netsched_sys::thread_cpu_ns();
    let mut done = 0u64;
    let mut sum = 0u64;
    loop {
        for k in trace {
            sum = sum.wrapping_add(f(black_box(k)).map_or(1, u64::from));
        }
        done += trace.len() as u64;
        if netsched_sys::thread_cpu_ns() - cpu0 >= min_ns {
            break;
        }
    }
    black_box(sum);
    let cpu = (netsched_sys::thread_cpu_ns() - cpu0) as f64 / 1e9;
    let wall = start.elapsed().as_secs_f64();
    (done as f64 / cpu / 1e6, done as f64 / wall / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("netsched-classify-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// gen writes files that bench reads; every classifier agrees on them.
    #[test]
    fn gen_then_bench() {
        let d = dir("gen");
        let gen = GenArgs {
            profile: Profile::Fw,
            rules: 300,
            seed: 5,
            out: d.join("fw.rules"),
            trace: Some(d.join("fw.trace")),
            packets: 2000,
            hit_percent: 90,
        };
        run_gen(&gen).unwrap();
        let rules = read_rules(&gen.out).unwrap();
        assert_eq!(rules, generate_rules(Profile::Fw, 300, 5));
        let bench = BenchArgs {
            rules: gen.out.clone(),
            trace: d.join("fw.trace"),
            classifier: ClassifierKind::ALL.to_vec(),
            duration: "10ms".into(),
            seconds: None,
            max_tuples: 4096,
            max_entries: 1 << 24,
            max_bytes: 1 << 30,
        };
        run_bench(&bench).unwrap();
        // A limit the rule set passes is reported with the classifier's name.
        let tight = BenchArgs {
            max_tuples: 1,
            ..bench
        };
        let e = format!("{:#}", run_bench(&tight).unwrap_err());
        assert!(e.starts_with("tuple_space: rule "), "{e}");
        std::fs::write(
            d.join("bad.toml"),
            "[[rule]]\ndport = \"80-\"\naction = \"drop\"\n",
        )
        .unwrap();
        let e = read_rules(&d.join("bad.toml")).unwrap_err().to_string();
        assert!(e.contains("bad.toml:2: rule[0].dport '80-'"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// `classify bench` reads the rule file form of docs/rules.md, taken from the file at test
    /// time: the example (the first ```toml block) whole; the IPv6 block is refused, naming
    /// the rule's line and field and saying why. The spellings of the form this command read
    /// before are refused with the form's own.
    #[test]
    fn the_documented_form_is_read_and_ipv6_refused() {
        let doc = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rules.md");
        let blocks =
            netsched_util::markdown::fenced_blocks(&std::fs::read_to_string(doc).unwrap(), "toml");
        assert!(blocks.len() >= 2, "{doc}");
        let d = dir("doc");
        let example = d.join("example.toml");
        std::fs::write(&example, &blocks[0]).unwrap();
        let set = read_rules(&example).unwrap();
        assert!(set.len() >= 3, "{set:?}");
        let v6 = d.join("v6.toml");
        std::fs::write(&v6, &blocks[1]).unwrap();
        let e = read_rules(&v6).unwrap_err().to_string();
        assert!(
            e.contains("v6.toml:") && e.contains("an IPv6 prefix") && e.contains("IPv4 rules only"),
            "{e}"
        );
        for (body, spelled) in [
            (
                "src_port = \"1024-65535\"\naction = \"drop\"",
                "src_port '1024-65535': unknown field; this form spells it sport",
            ),
            (
                "dst_port = \"80\"\naction = \"drop\"",
                "dst_port '80': unknown field; this form spells it dport",
            ),
            (
                "action = \"class:3\"",
                "action 'class:3': this form spells it action = \"class\" and class = 3",
            ),
        ] {
            let old = d.join("old.toml");
            std::fs::write(&old, format!("[[rule]]\n{body}\n")).unwrap();
            let e = read_rules(&old).unwrap_err().to_string();
            assert!(e.contains(&format!("rule[0].{spelled}")), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
