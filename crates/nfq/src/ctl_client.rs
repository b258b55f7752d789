//! The client of the daemon's control socket, `netsched nfq ctl`: the socket to talk to and
//! the verb ([`CtlCmd`], declared in `verbs.rs` with the line it sends and the status table
//! `show` answers), sent as one line (the thesis's ioctl API, P0 Table 9, over the daemon's
//! Unix socket; the daemon's side is [`crate::control`]).
//!
//! Cost: one connection and one line per command; the answer is printed as it came.

use crate::control::request;
pub use crate::verbs::{format_status, CtlCmd};
use anyhow::Result;

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
