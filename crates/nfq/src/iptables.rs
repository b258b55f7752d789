//! The daemon's iptables rules: installed on start, removed on exit (also on error, by
//! `Drop`), and found again after a SIGKILL by their comment (`netsched-nfq:q<N>`) —
//! `netsched nfq cleanup` and the next start remove such leftovers.
//!
//! Rules (both with `--queue-bypass`: with no daemon bound the kernel accepts, see
//! `xt_NFQUEUE` / `nf_queue` "NF_VERDICT_FLAG_QUEUE_BYPASS"):
//! - INPUT: `-p PROTO [-d ADDR] -m multiport --dports PORTS -j NFQUEUE --queue-num N`
//! - OUTPUT: `-p PROTO [-s ADDR] -m multiport --sports PORTS -j NFQUEUE --queue-num N`
//!
//! The nft `queue` expression is not available on every kernel (nor here); the iptables
//! front end (`iptables`, nft-backed, or `iptables-legacy`) works in network namespaces.

use crate::config::Service;
use crate::iptables_error::IptablesError;
use std::net::IpAddr;

pub const COMMENT_PREFIX: &str = "netsched-nfq:q";

fn comment(queue: u16) -> String {
    format!("{COMMENT_PREFIX}{queue}")
}

/// The IPv6 twin of an iptables front end (`iptables-legacy` → `ip6tables-legacy`).
fn ip6_of(bin: &str) -> String {
    bin.replacen("iptables", "ip6tables", 1)
}

fn run(bin: &str, args: &[String]) -> Result<String, IptablesError> {
    let out = std::process::Command::new(bin)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| IptablesError::Spawn {
            bin: bin.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(IptablesError::Failed {
            bin: bin.to_string(),
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installed rules; removed when dropped.
pub struct Rules {
    installed: Vec<(String, Vec<String>)>,
}

/// The rule specs (without `-I`/`-D` and chain) for one family.
fn specs(service: &Service, queue: u16) -> Vec<(&'static str, Vec<String>)> {
    let proto = if service.protocol == crate::packet::PROTO_UDP {
        "udp"
    } else {
        "tcp"
    };
    let ports = service
        .ports
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut v = Vec::new();
    for (chain, addr_flag, port_flag) in [("INPUT", "-d", "--dports"), ("OUTPUT", "-s", "--sports")]
    {
        let mut a: Vec<String> = vec!["-p".into(), proto.into()];
        if let Some(addr) = service.address {
            a.push(addr_flag.into());
            a.push(addr.to_string());
        }
        a.extend(
            [
                "-m",
                "multiport",
                port_flag,
                &ports,
                "-m",
                "comment",
                "--comment",
                &comment(queue),
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue.to_string(),
                "--queue-bypass",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        v.push((chain, a));
    }
    v
}

impl Rules {
    /// Remove leftovers of queue `queue`, then insert the rules at the top of INPUT/OUTPUT.
    pub fn install(iptables: &str, service: &Service, queue: u16) -> Result<Self, IptablesError> {
        cleanup(iptables, Some(queue))?;
        let mut rules = Rules {
            installed: Vec::new(),
        };
        let mut bins = Vec::new();
        match service.address {
            Some(IpAddr::V4(_)) => bins.push(iptables.to_string()),
            Some(IpAddr::V6(_)) => bins.push(ip6_of(iptables)),
            None => {
                bins.push(iptables.to_string());
                // IPv6 too when the tool exists (best effort: a host without ip6tables only
                // gets IPv4 scheduling, reported on stderr).
                let b6 = ip6_of(iptables);
                if run(&b6, &["-S".into(), "INPUT".into()]).is_ok() {
                    bins.push(b6);
                } else {
                    tracing::warn!("{b6} not usable; scheduling IPv4 only");
                }
            }
        }
        for bin in bins {
            for (chain, spec) in specs(service, queue) {
                let mut args = vec!["-I".to_string(), chain.to_string(), "1".to_string()];
                args.extend(spec.iter().cloned());
                run(&bin, &args)?; // on error, `rules` drops and removes what was installed
                let mut del = vec!["-D".to_string(), chain.to_string()];
                del.extend(spec);
                rules.installed.push((bin.clone(), del));
            }
        }
        Ok(rules)
    }

    pub fn count(&self) -> usize {
        self.installed.len()
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        for (bin, del) in self.installed.drain(..).rev() {
            if let Err(e) = run(&bin, &del) {
                tracing::warn!("removing rule: {e}");
            }
        }
    }
}

/// Packets that matched our NFQUEUE rules of `queue` (INPUT + OUTPUT, IPv4 + IPv6), from the
/// rule counters of `iptables -L -v -x -n`. With fail-open the kernel counts nothing when it
/// lets a packet bypass a full queue or socket (`__nfqnl_enqueue_packet` in
/// net/netfilter/nfnetlink_queue.c increments `queue_dropped` / `queue_user_dropped` only
/// without fail-open), so "matched − received by the daemon" is the only exact count of
/// packets that skipped the scheduler.
pub fn rule_packet_count(iptables: &str, queue: u16) -> u64 {
    let mut total = 0;
    for bin in [iptables.to_string(), ip6_of(iptables)] {
        for chain in ["INPUT", "OUTPUT"] {
            let Ok(text) = run(
                &bin,
                &[
                    "-L".into(),
                    chain.into(),
                    "-v".into(),
                    "-x".into(),
                    "-n".into(),
                ],
            ) else {
                continue;
            };
            for line in text.lines().filter(|l| l.contains(&comment(queue))) {
                if let Some(p) = line
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
                {
                    total += p;
                }
            }
        }
    }
    total
}

/// Lines of `iptables -S` that carry our comment (all queues, or one).
pub fn leftover_rules(iptables: &str, queue: Option<u16>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for bin in [iptables.to_string(), ip6_of(iptables)] {
        let Ok(text) = run(&bin, &["-S".into()]) else {
            continue;
        };
        for line in text.lines() {
            let ours = match queue {
                Some(q) => line
                    .split_whitespace()
                    .any(|w| w.trim_matches('"') == comment(q)),
                None => line.contains(COMMENT_PREFIX),
            };
            if ours && line.starts_with("-A ") {
                found.push((bin.clone(), line.to_string()));
            }
        }
    }
    found
}

/// Delete every rule we installed earlier and left behind (after SIGKILL). Returns how many.
pub fn cleanup(iptables: &str, queue: Option<u16>) -> Result<usize, IptablesError> {
    let mut n = 0;
    for (bin, line) in leftover_rules(iptables, queue) {
        // `iptables -S` may quote the comment ("netsched-nfq:q0"); ours has no spaces, so
        // dropping the quotes gives back the exact argument.
        let mut args: Vec<String> = line
            .split_whitespace()
            .map(|w| w.trim_matches('"').to_string())
            .collect();
        args[0] = "-D".into();
        run(&bin, &args).map_err(|e| IptablesError::Leftover {
            line: line.clone(),
            source: Box::new(e),
        })?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_and_a_failed_command_are_typed_and_named() {
        let e = run("/nonexistent/iptables", &["-S".into()]).unwrap_err();
        assert!(matches!(e, IptablesError::Spawn { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("cannot run `/nonexistent/iptables` (is iptables installed?): "),
            "{e}"
        );
        // `false` runs and exits 1 with no stderr.
        let e = run("false", &["-S".into(), "INPUT".into()]).unwrap_err();
        assert!(matches!(e, IptablesError::Failed { .. }), "{e:?}");
        assert_eq!(e.to_string(), "`false -S INPUT` failed: ");
    }
}
