//! `netsched replay`: feed a trace through one algorithm with a simple service model and print,
//! as JSON lines, what happened to every item. The same `QdiscConfig` / `BalancerConfig` the
//! simulator and the data planes use, so a replay is the quickest way to see an algorithm act.
//!
//! Read top-down: this file parses the command line and picks a replay; `replay_qdisc` and
//! `replay_balance` each run one kind; both read their inputs through `config` and `trace`.
//!
//! Memory: the trace is streamed row by row (`trace`), so memory is bounded by what is in
//! flight (queued or in service, open connections), not by the trace length. An error in row
//! N is reported after the output of rows before N.

use crate::replay_balance::{self, BalanceReplay};
use crate::replay_qdisc::{self, QdiscReplay};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::io::Write;

#[derive(Debug, Args)]
#[command(after_long_help = REPLAY_HELP)]
pub struct ReplayArgs {
    #[command(subcommand)]
    what: ReplayWhat,
}

const REPLAY_HELP: &str = "\
Units as in tc(8), the same everywhere in netsched:
  times  take a unit: 1500ns, 250us, 4ms, 1.5s (a bare number is refused, except 0);
  rates: 800kbit, 2.1mbit, 1gbit are bits/s; 100kbps, 1mbps are BYTES/s (1000bps = 8000bit);
  sizes: 1500, 1500b, 64k (bytes; k/m/g are x1024).
Output: one JSON object per line on stdout, in time order; a final {\"event\":\"summary\",...}.
The trace is streamed: an error in a row stops the replay after the output of earlier rows.";

#[derive(Debug, Subcommand)]
enum ReplayWhat {
    /// Replay packets or requests through a queue discipline served by one server.
    #[command(after_long_help = replay_qdisc::HELP)]
    Qdisc(QdiscReplay),
    /// Replay connection open/close events through a load balancer.
    #[command(after_long_help = replay_balance::help())]
    Balance(BalanceReplay),
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.what {
        ReplayWhat::Qdisc(a) => replay_qdisc::run(&a, &mut out),
        ReplayWhat::Balance(a) => replay_balance::run(&a, &mut out),
    }?;
    out.flush()?;
    Ok(())
}
