//! `netsched-nfqd`: the daemon and its control client without the rest of the `netsched`
//! tool (same code as `netsched nfq` / `netsched ctl`). The integration tests start it as a
//! separate process so they can SIGKILL it.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "netsched-nfqd", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the percentile scheduling daemon (= `netsched nfq`).
    Nfq(Box<netsched_nfq::cli::NfqArgs>),
    /// Control a running daemon (= `netsched ctl`).
    Ctl(netsched_nfq::ctl::CtlArgs),
    /// Run the percentile-web experiment on real Linux (= `netsched lab run percentile-web
    /// --real`, without the lab's report files).
    Experiment {
        /// Output folder for CSV / SVG files and results.json.
        #[arg(long, default_value = "out/percentile-web-real")]
        out: std::path::PathBuf,
        /// Short run (< 2 minutes).
        #[arg(long)]
        quick: bool,
        /// Parameters as a JSON object (see netsched_nfq::experiment).
        #[arg(long, default_value = "{}")]
        params: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() {
    let r = match Cli::parse().cmd {
        Cmd::Nfq(a) => netsched_nfq::cli::run(*a),
        Cmd::Ctl(a) => netsched_nfq::ctl::run(a),
        Cmd::Experiment {
            out,
            quick,
            params,
            seed,
        } => experiment(&out, quick, &params, seed),
    };
    if let Err(e) = r {
        eprintln!("netsched: error: {e:#}");
        std::process::exit(1);
    }
}

fn experiment(out: &std::path::Path, quick: bool, params: &str, seed: u64) -> anyhow::Result<()> {
    let params: serde_json::Value = serde_json::from_str(params)
        .map_err(|e| anyhow::anyhow!("--params: not a JSON object: {e}"))?;
    let o = netsched_nfq::experiment::run_real(&params, seed, out, quick)?;
    o.results.write(out)?;
    for c in &o.comparisons {
        println!(
            "{:<45} paper {:>22}   ours {:>22}",
            c.quantity, c.paper, c.ours
        );
    }
    for n in &o.notes {
        println!("{n}");
    }
    for c in &o.checks {
        println!(
            "[{}] {} — {}",
            if c.passed { "PASS" } else { "FAIL" },
            c.claim,
            c.detail
        );
    }
    Ok(())
}
