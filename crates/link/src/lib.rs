//! # netsched-link — P3 on real Linux
//!
//! - [`shape`]: `netsched shape`, the gateway configuration (HTB + u32 ACK class via `tc -batch`)
//! - [`engine`]: `netsched link`, a userspace link engine (AF_PACKET) running core disciplines
//!
//! The adsl-ack experiment on real Linux (`netsched lab run adsl-ack --real`) lives in the lab
//! (`netsched_lab::real::adsl_ack`) and drives these.

pub mod ackcfg;
pub mod bench;
pub mod engine;
pub mod shape;

#[cfg(test)]
mod cli_tests {
    use clap::{CommandFactory, Parser};

    /// The two subcommands as the `netsched` binary mounts them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: Cmd,
    }
    #[derive(Debug, clap::Subcommand)]
    enum Cmd {
        Shape(crate::shape::ShapeArgs),
        Link(crate::engine::LinkArgs),
    }

    #[test]
    fn clap_definitions_are_consistent_and_parse_the_examples() {
        Cli::command().debug_assert();
        let ok = |args: &[&str]| Cli::try_parse_from(args).unwrap();
        ok(&[
            "n",
            "shape",
            "apply",
            "--dev",
            "eth1",
            "--up",
            "800kbit",
            "--dry-run",
        ]);
        ok(&[
            "n", "shape", "apply", "--dev", "eth1", "--up", "1mbit", "--down", "50mbit", "--ifb",
            "ifb0",
        ]);
        ok(&["n", "shape", "show", "--dev", "eth1", "--json"]);
        ok(&["n", "shape", "clear", "--dev", "eth1"]);
        let c = ok(&[
            "n",
            "link",
            "--dev-a",
            "a",
            "--dev-b",
            "b",
            "--ab-qdisc",
            "ack-sep:100+filter+cap=0.5",
            "--stats",
            "1s",
        ]);
        match c.cmd {
            Cmd::Link(l) => {
                assert!(l.sub.is_none());
                assert_eq!(l.run.ab_qdisc, "ack-sep:100+filter+cap=0.5");
            }
            _ => panic!("not link"),
        }
        match ok(&["n", "link", "bench", "--secs", "2"]).cmd {
            Cmd::Link(l) => assert!(l.sub.is_some()),
            _ => panic!("not link"),
        }
        // --down without --ifb is refused by clap itself.
        assert!(Cli::try_parse_from([
            "n", "shape", "apply", "--dev", "e", "--up", "1mbit", "--down", "2mbit"
        ])
        .is_err());
    }
}
