//! `netsched`: the command-line tool. Each subcommand lives in the crate that owns it; this
//! file only wires them together.

#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser, Subcommand};

/// mimalloc instead of glibc's malloc: `netsched balance` allocates per request (hyper's
/// buffers, headers, channels), and glibc's slow path for buffers above its thread cache
/// (`_int_malloc`, `_int_free`, `malloc_consolidate`) was ~7% of the director's CPU per L7
/// request in a profile (docs/lvs-real.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod classify;
mod config;
mod generate;
mod logging;
mod man_doc;
#[cfg(test)]
mod props;
mod replay;
mod replay_balance;
mod replay_qdisc;
mod trace;
mod vocab;
#[cfg(test)]
mod vocab_walk;

/// netsched decides who goes first when network work contends for a link, a server or a core,
/// and proves it: in a deterministic simulator (`lab`) and on real Linux (`shape`, `link`,
/// `nfq`, `balance`, `vswitch`, `filter`).
#[derive(Debug, Parser)]
#[command(name = "netsched", version = env!("NETSCHED_VERSION"), propagate_version = true)]
struct Cli {
    /// How log lines are written to stderr: `text` (timestamped lines) or `json` (one object
    /// per line). Under systemd with stderr on the journal, journald's native protocol is used.
    #[arg(long, global = true, default_value = "text", value_name = "text|json")]
    log_format: netsched_util::logging::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Reproduce the papers' experiments in simulation (and on real Linux with --real).
    Lab(netsched_lab::cli::LabArgs),
    /// Feed a trace through one algorithm and print what happened to every item.
    Replay(replay::ReplayArgs),
    /// Install ACK separation on a gateway interface with tc (HTB + u32).
    Shape(netsched_link::cli::ShapeArgs),
    /// Run the userspace link engine between two interfaces.
    Link(netsched_link::cli::LinkArgs),
    /// Run the percentile scheduling daemon on the NFQUEUE packet path (or `nfq ctl` to control
    /// a running one).
    Nfq(netsched_nfq::cli::NfqArgs),
    /// Control a running `netsched nfq` daemon (old place of `netsched nfq ctl`).
    #[command(hide = true)]
    Ctl(netsched_nfq::ctl_client::CtlArgs),
    /// Run the L4/L7 load balancer (or `balance ctl` to control a running one).
    Balance(netsched_balance::BalanceArgs),
    /// Run the host switch: guest interfaces scheduled onto one uplink.
    Vswitch(netsched_vswitch::cli::VswitchArgs),
    /// Run the userspace firewall between two interfaces (P1's dispatch policies).
    Filter(Box<netsched_filter::cli::FilterArgs>),
    /// Write the man pages or shell completions (for packaging).
    #[command(hide = true)]
    Generate(generate::GenerateArgs),
    /// Generate ClassBench-like ACLs and traces, and benchmark the packet classifiers.
    Classify(classify::ClassifyArgs),
}

fn main() {
    vocab::warn_old_spellings();
    let cli = Cli::parse();
    let log = logging::install(cli.log_format);
    let result = match cli.cmd {
        Cmd::Lab(a) => netsched_lab::cli::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Shape(a) => netsched_link::cli::run_shape(a),
        Cmd::Link(a) => netsched_link::cli::run_link(a),
        Cmd::Nfq(a) => netsched_nfq::cli::run(a),
        Cmd::Ctl(a) => netsched_nfq::ctl_client::run(a),
        Cmd::Balance(a) => netsched_balance::run(a),
        Cmd::Vswitch(a) => netsched_vswitch::cli::run_vswitch(a),
        Cmd::Filter(a) => netsched_filter::cli::run_filter(*a),
        Cmd::Generate(a) => generate::run(a, Cli::command()),
        Cmd::Classify(a) => classify::run(a),
    };
    // Flush the queued log lines before the final error line and the exit.
    drop(log);
    if let Err(e) = result {
        eprintln!("netsched: error: {e:#}");
        std::process::exit(1);
    }
}
