//! The control socket's verbs, declared once: the clap subcommands `netsched nfq ctl` takes,
//! the line each is sent as ([`CtlCmd::to_line`]), which the daemon parses back with the same
//! definition (`control.rs`), and the text `show` answers ([`format_status`]).

use crate::config::fmt_duration;
use crate::engine::Status;
use std::fmt;

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

/// A control argument that cannot travel in a request line (empty, or holding whitespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError(pub String);

impl fmt::Display for ArgumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}: a control argument cannot be empty or hold whitespace",
            self.0
        )
    }
}

impl std::error::Error for ArgumentError {}

impl CtlCmd {
    /// The request line for this verb, as the daemon parses it (`set-percentile gold 95`).
    /// The line is split on whitespace, so an argument that is empty or holds whitespace
    /// is refused here.
    pub fn to_line(&self) -> Result<String, ArgumentError> {
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
            return Err(ArgumentError(w.clone()));
        }
        Ok(words.join(" "))
    }
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
