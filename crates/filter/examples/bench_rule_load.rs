//! How long `netsched filter` takes to load a rule set, from 1k to 100k rules: the text parsed
//! into rules (`RuleSet::parse`, what start and every reload do) and the classifier built
//! (`build_classifier`, TupleMerge), for the TOML form and for the same rules as a ClassBench
//! file. The baseline in the same run is the TOML library alone reading the same text
//! (`toml::from_str` into a generic table): what any TOML rule file costs before a rule is
//! looked at. Growth is linear when the time per rule stays flat as the set grows.
//!
//! Usage: `bench_rule_load [SIZES…] [--rounds N]` (default sizes 1000 10000 25000 50000
//! 100000, 3 rounds; the median of the rounds is printed). Rules are ClassBench-like acl sets
//! from core's generator (seed 1). Bounded: at most 100 000 rules (the filter's limit) and
//! 9 rounds.

use netsched_core::classify::acl::generate::{generate_rules, Profile};
use netsched_core::classify::acl::{AclRule, ClassifierKind};
use netsched_filter::classifier::build_classifier;
use netsched_filter::rules::{RuleSet, RulesFormat, RulesOptions};
use std::fmt::Write;
use std::time::Instant;

fn toml_of(rules: &[AclRule]) -> String {
    let mut t = String::from("default = \"accept\"\n");
    for r in rules {
        let _ = write!(
            t,
            "[[rule]]\naction = \"drop\"\nsrc = \"{}\"\ndst = \"{}\"\nsport = \"{}-{}\"\n\
             dport = \"{}-{}\"\nproto = \"0x{:02X}/0x{:02X}\"\n",
            r.src,
            r.dst,
            r.src_port.low,
            r.src_port.high,
            r.dst_port.low,
            r.dst_port.high,
            r.proto.value,
            r.proto.mask
        );
    }
    t
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds of `f`, median of `rounds`.
fn time(rounds: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn load(text: &str, format: RulesFormat) -> usize {
    let options = RulesOptions {
        format: Some(format),
        classbench_action: None,
    };
    let set = RuleSet::parse(text, "bench", &options).expect("generated rules parse");
    let n = set.rules.len();
    build_classifier(set, ClassifierKind::TupleMerge, &Default::default())
        .expect("generated rules build");
    n
}

fn main() {
    let mut sizes = Vec::new();
    let mut rounds = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--rounds" {
            rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        } else {
            match a.parse::<usize>() {
                Ok(n) if (1..=100_000).contains(&n) => sizes.push(n),
                _ => {
                    eprintln!("bench_rule_load: `{a}`: a size is 1..=100000 rules");
                    std::process::exit(2);
                }
            }
        }
    }
    if !(1..=9).contains(&rounds) {
        eprintln!("bench_rule_load: --rounds is 1..=9");
        std::process::exit(2);
    }
    if sizes.is_empty() {
        sizes = vec![1_000, 10_000, 25_000, 50_000, 100_000];
    }
    println!(
        "{:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "rules", "toml lib", "toml load", "load/lib", "us/rule", "cb load", "us/rule"
    );
    for n in sizes {
        let set = generate_rules(Profile::Acl, n, 1);
        let toml_text = toml_of(&set.rules);
        let cb_text = set.to_classbench();
        let lib = time(rounds, || {
            let v: toml::Table = toml::from_str(&toml_text).expect("valid TOML");
            std::hint::black_box(v);
        });
        let mut loaded = 0;
        let toml_load = time(rounds, || loaded = load(&toml_text, RulesFormat::Toml));
        let cb_load = time(rounds, || {
            std::hint::black_box(load(&cb_text, RulesFormat::ClassBench));
        });
        println!(
            "{:>7} {:>9.3}s {:>9.3}s {:>9.2}x {:>10.2} {:>9.3}s {:>10.2}",
            loaded,
            lib,
            toml_load,
            toml_load / lib,
            toml_load * 1e6 / loaded as f64,
            cb_load,
            cb_load * 1e6 / loaded as f64
        );
    }
}
