//! The client of the daemon's control socket, `netsched nfq ctl`: its verbs and arguments
//! ([`CtlCmd`], also what the daemon parses each request line with), the line each verb
//! sends, and the status table `show` answers (the thesis's ioctl API, P0 Table 9, over the
//! daemon's Unix socket; the daemon's side is [`crate::control`]).
//!
//! Cost: one connection and one line per command; the answer is printed as it came.

use crate::config::fmt_duration;
use crate::control::request;
use crate::engine::Status;
use anyhow::{bail, Result};

const EXAMPLES: &str = "\
Examples:
  netsched nfq ctl show                        # per-class N, S, failures, P, priority, attainment
  netsched nfq ctl show --json
  netsched nfq ctl set-percentile gold 95      # class by name or index
  netsched nfq ctl set-deadline 4ms            # or: auto (running mean), auto_quantile
  netsched nfq ctl set-budget 4                # or: set-budget off
  netsched nfq ctl add-ip 192.168.1.0/24 gold
  netsched nfq ctl del-ip 192.168.1.0/24
  netsched nfq ctl stop                        # release everything held, pass in arrival order
  netsched nfq ctl start
  netsched nfq ctl reset                       # clear the address table and the counters
  netsched nfq ctl reload                      # read the --config file again (as SIGHUP)";

/// Arguments of `netsched nfq ctl`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct CtlArgs {
    #[command(flatten)]
    pub socket: netsched_control::CtlSocket,
    #[command(subcommand)]
    pub cmd: CtlCmd,
}

#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum CtlCmd {
    /// Schedule requests (perStart).
    Start,
    /// Release everything held and pass all traffic in arrival order (perStop).
    Stop,
    /// Clear the address table and all counters (perReset).
    Reset,
    /// Per-class N, S, failures, P, priority, attainment, queue; deadline; table; budget.
    #[command(alias = "status")]
    Show {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Set a class's percentile target, 1..=100 (perSetPvalue).
    SetPercentile {
        /// The class, by name or index.
        class: String,
        /// The new target, 1..=100.
        p: i64,
    },
    /// Set the deadline: a duration ("4ms"), "auto" (running mean response time) or
    /// "auto_quantile" (running quantile at the request-weighted mean target) (perSetNvalue).
    SetDeadline {
        /// A duration ("4ms"), "auto" or "auto_quantile".
        deadline: String,
    },
    /// Requests allowed inside the server at once: a number or "off".
    SetBudget {
        /// A number of requests, or "off".
        budget: String,
    },
    /// Map a CIDR prefix to a class (perAddIP).
    AddIp {
        /// The prefix, e.g. 192.168.1.0/24.
        cidr: String,
        /// The class, by name or index.
        class: String,
    },
    /// Remove a prefix from the table (perDeleteIP).
    DelIp {
        /// The prefix, as added.
        cidr: String,
    },
    /// Read the configuration file again and apply it whole, or refuse it and keep the old
    /// configuration (as SIGHUP).
    Reload,
}

impl CtlCmd {
    /// The request line for this verb, as the daemon parses it (`set-percentile gold 95`).
    /// The line is split on whitespace, so an argument that is empty or holds whitespace
    /// is refused here.
    pub fn to_line(&self) -> Result<String> {
        let words: Vec<String> = match self {
            CtlCmd::Start => vec!["start".into()],
            CtlCmd::Stop => vec!["stop".into()],
            CtlCmd::Reset => vec!["reset".into()],
            CtlCmd::Show { json: false } => vec!["show".into()],
            CtlCmd::Show { json: true } => vec!["show".into(), "--json".into()],
            CtlCmd::SetPercentile { class, p } => {
                vec!["set-percentile".into(), class.clone(), p.to_string()]
            }
            CtlCmd::SetDeadline { deadline } => vec!["set-deadline".into(), deadline.clone()],
            CtlCmd::SetBudget { budget } => vec!["set-budget".into(), budget.clone()],
            CtlCmd::AddIp { cidr, class } => vec!["add-ip".into(), cidr.clone(), class.clone()],
            CtlCmd::DelIp { cidr } => vec!["del-ip".into(), cidr.clone()],
            CtlCmd::Reload => vec!["reload".into()],
        };
        if let Some(w) = words
            .iter()
            .find(|w| w.is_empty() || w.contains(char::is_whitespace))
        {
            bail!("{w:?}: a control argument cannot be empty or hold whitespace");
        }
        Ok(words.join(" "))
    }
}

pub fn run(args: CtlArgs) -> Result<()> {
    // What can be checked here is checked before connecting, so a typo gets its own error
    // (naming the value) even when the daemon is down. The daemon checks again.
    if let CtlCmd::SetDeadline { deadline } = &args.cmd {
        crate::config::parse_deadline(deadline)?;
    }
    let line = args.cmd.to_line()?;
    print!("{}", request(&args.socket.locate("nfq")?, &line)?);
    Ok(())
}

/// The status as a readable table (the layout of P0 Table 14, one column per class).
pub fn format_status(st: &Status) -> String {
    let mut out = String::new();
    let w = 10;
    let row = |label: &str, vals: Vec<String>| {
        let mut s = format!("{label:<22}");
        for v in vals {
            s.push_str(&format!("{v:>w$}"));
        }
        s.push('\n');
        s
    };
    out.push_str(&format!(
        "state: {}   discipline: {}   deadline: {}{}   budget: {} (inside the server: {})\n",
        if st.running { "running" } else { "stopped" },
        st.discipline,
        fmt_duration(st.deadline_ns),
        match (st.deadline_mode.as_str(), st.deadline_quantile) {
            ("auto_quantile", Some(q)) =>
                format!(" (auto_quantile: running {:.1}th percentile)", q * 100.0),
            ("auto_quantile", None) => " (auto_quantile)".to_string(),
            _ if st.deadline_auto => " (auto: running mean)".to_string(),
            _ => String::new(),
        },
        st.budget.map(|b| b.to_string()).unwrap_or("off".into()),
        st.in_server
    ));
    let c = &st.classes;
    out.push_str(&row("", c.iter().map(|r| r.name.clone()).collect()));
    out.push_str(&row(
        "N (requests)",
        c.iter().map(|r| r.n.to_string()).collect(),
    ));
    out.push_str(&row(
        "S (within deadline)",
        c.iter().map(|r| r.s.to_string()).collect(),
    ));
    out.push_str(&row(
        "failures",
        c.iter().map(|r| r.fail.to_string()).collect(),
    ));
    out.push_str(&row(
        "P",
        c.iter().map(|r| r.percentile.to_string()).collect(),
    ));
    out.push_str(&row(
        "priority",
        c.iter()
            .map(|r| r.priority.map(|p| format!("{p:.0}")).unwrap_or("-".into()))
            .collect(),
    ));
    out.push_str(&row(
        "attainment S/(N·P)",
        c.iter().map(|r| format!("{:.3}", r.attainment)).collect(),
    ));
    out.push_str(&row(
        "mean response (ms)",
        c.iter()
            .map(|r| format!("{:.3}", r.mean_response_ns as f64 / 1e6))
            .collect(),
    ));
    out.push_str(&row(
        "queue length",
        c.iter().map(|r| r.queue_len.to_string()).collect(),
    ));
    out.push_str(&row(
        "held packets",
        c.iter().map(|r| r.held_packets.to_string()).collect(),
    ));
    out.push_str(&row(
        "timeouts",
        c.iter().map(|r| r.timeouts.to_string()).collect(),
    ));
    out.push_str(&format!(
        "address table ({} entries; others -> {}):\n",
        st.table.len(),
        st.default_class
    ));
    for (cidr, class) in &st.table {
        out.push_str(&format!("  {cidr:<40} {class}\n"));
    }
    let k = &st.counters;
    out.push_str(&format!(
        "packets {}  requests {}  held {}  released {}  passed at once {}  other {}  over limit {}  untracked flows {}  aborted {}\n",
        k.packets, k.requests, k.held, k.released, k.passed_at_once, k.other, k.passed_over_limit, k.untracked_flows, k.aborted
    ));
    out.push_str(&format!(
        "released by max_hold {}  stale queue entries skipped {}  early misses {}  expired flows {}\n",
        k.max_hold_releases, k.stale_skipped, k.early_misses, k.expired_flows
    ));
    out.push_str(&format!(
        "kernel: rule matched {}  received {}  skipped by fail-open {}  ENOBUFS {}  queue_dropped {}  user_dropped {}  in kernel queue {}  rcvbuf {} bytes\n",
        st.kernel.rule_matched, st.kernel.received, st.kernel.skipped_fail_open, st.kernel.enobufs, st.kernel.queue_dropped, st.kernel.user_dropped, st.kernel.queue_total, st.kernel.rcvbuf_bytes
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: CtlArgs,
    }

    /// Every verb's line, parsed as the daemon parses it, is the verb again.
    #[test]
    fn ctl_every_verb_parses_and_its_line_parses_back() {
        let cases: [&[&str]; 11] = [
            &["start"],
            &["show", "--json"],
            &["show"],
            &["stop"],
            &["reset"],
            &["status", "--json"],
            &["set-percentile", "gold", "95"],
            &["set-deadline", "auto"],
            &["set-budget", "off"],
            &["add-ip", "10.0.0.0/8", "gold"],
            &["del-ip", "10.0.0.0/8"],
        ];
        for argv in cases {
            let mut full = vec!["ctl"];
            full.extend_from_slice(argv);
            let t = T::try_parse_from(&full).unwrap();
            let line = t.a.cmd.to_line().unwrap();
            let back = crate::control::parse_line(&line).unwrap();
            assert_eq!(back, t.a.cmd, "{argv:?} -> {line:?}");
        }
        assert_eq!(
            crate::control::parse_line(&CtlCmd::Reload.to_line().unwrap()).unwrap(),
            CtlCmd::Reload
        );
        assert!(T::try_parse_from(["ctl", "set-percentile", "gold"]).is_err());
        assert!(T::try_parse_from(["ctl", "set-percentile", "gold", "x"]).is_err());
        let spaced = CtlCmd::AddIp {
            cidr: "10.0.0.0/8".into(),
            class: "gold class".into(),
        };
        let e = spaced.to_line().unwrap_err().to_string();
        assert!(
            e.contains("\"gold class\"") && e.contains("whitespace"),
            "{e}"
        );
    }
}
