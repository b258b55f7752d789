//! Runtime control of a running filter over a local Unix socket (`--control-socket PATH`) and
//! its client, `netsched filter ctl`.
//!
//! Protocol (as the other daemons'): one request line of words, at most [`MAX_REQUEST`]
//! bytes; the answer's first line is `ok` or `error: <what>`. Commands:
//!
//! | command | effect |
//! |---|---|
//! | `show [--json]` | the counters (the `--stats` line) |
//! | `reload` | re-read the rule file (and signature file) given at start, swap them in whole; the answer says what was loaded (SIGHUP does the same: [`Outbox::reload_on_signal`]) |
//! | `set-dispatch MODE` | dispatch policy from the next packet on |
//!
//! **The packet path never waits for control, and never sees a half-built rule set.** The
//! control thread reads and compiles the files itself; only a finished `Arc` of the tables
//! goes to the packet thread through a bounded channel ([`COMMAND_QUEUE`] places, full =
//! "busy"), which swaps it between batches with `try_recv`. Packets received before the swap
//! finish against the tables they started with (each holds its own `Arc`); nothing is dropped
//! for a swap. A bad file is refused with its error and the running tables stay.
//!
//! **Reloads take effect in the order they were asked for.** Each `reload` is stamped with
//! the next generation when it arrives (the tables given at start are generation 1) and is
//! built on its own thread; the packet thread swaps in a build only when its generation is
//! above the one in force, so a slow build finishing after a later one is discarded and its
//! client told "superseded by generation N". A build still running when the answer is due
//! (within [`DEADLINE`]) is answered with what will happen: it is swapped in when built
//! unless a later generation is in force by then. A finished build is never dropped for a
//! full queue: it waits for a place.
//!
//! The socket, its access rule and its bounds are every daemon's (`netsched_control`): mode
//! 0660 (group `--control-group` when given); each connection's `SO_PEERCRED` must be root,
//! our own uid, or a member of that group; one thread per connection, at most
//! [`MAX_CONNECTIONS`], each request within [`DEADLINE`].

use crate::control_error::{CommandError, ControlError, RequestError, TablesError};
use crate::pipeline::DispatchMode;
use crate::rule_edit::{Place, RuleChange, DEFAULT_PAGE};
use crate::stats::FilterStats;
use crate::watchdog::Health;
use crate::work::Tables;
use netsched_control::server::{Limits, LineEnd, Server, ServerConfig, WhenFull};
use netsched_control::socket_file::BindMode;
use netsched_control::{handoff, HandOffError, OkOrError};
use netsched_metrics::{Latest, Reloads};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Longest request line, bytes.
pub const MAX_REQUEST: usize = 4096;
/// Everything of one request (read, compile, wait for the packet thread, write) within this.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Commands waiting for the packet thread; one more is answered "busy".
pub const COMMAND_QUEUE: usize = 8;
/// Connections served at once; one more takes the place of the oldest one still without its
/// line (`netsched_control::server`), or, with none such, is answered "busy" and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// How often a control thread waiting for the packet thread's answer looks at the watchdog,
/// and how often a finished build retries a full queue.
const STALL_LOOK: Duration = Duration::from_millis(50);
/// Time kept back from a request's deadline to write the answer of a reload still building.
const REPLY_MARGIN: Duration = Duration::from_millis(500);
/// The default socket path.
pub const DEFAULT_SOCKET: &str = "/run/netsched/filter.sock";

/// A request the packet thread carries out.
#[derive(Debug, Clone)]
pub enum Command {
    Show,
    /// Tables compiled by the control thread, to be used from the next packet on when their
    /// generation is above the one in force ([`swap_in`]).
    SwapTables(Arc<Tables>),
    SetDispatch(DispatchMode),
    /// Change one rule ([`crate::rule_edit`]).
    EditRule(RuleChange),
    /// Rules from position `from`, `count` of them at most.
    ShowRules {
        from: usize,
        count: usize,
    },
}

/// The packet thread's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Stats(Box<FilterStats>),
    Done(String),
    /// A rule edit refused.
    Refused(crate::rule_edit::EditError),
    /// A build of generation `requested` arrived after generation `in_force` was swapped in.
    Superseded {
        requested: u64,
        in_force: u64,
    },
}

/// The packet thread's ordering decision for a built rule set: `new` replaces `in_force` only
/// when its generation is higher; otherwise it is discarded (a later reload is already in
/// force). The answer says what is in force, with the load's summary
/// ([`crate::classifier::PacketClassifier::summary`]). Cost: one comparison and the answer's text;
/// the discarded tables are freed by their last `Arc`.
pub fn swap_in(in_force: &mut Arc<Tables>, new: &Arc<Tables>) -> Answer {
    if new.generation <= in_force.generation {
        return Answer::Superseded {
            requested: new.generation,
            in_force: in_force.generation,
        };
    }
    *in_force = new.clone();
    Answer::Done(format!(
        "rules generation {}: {} rules, {} signatures\n{}",
        new.generation,
        new.classifier.rules(),
        new.signatures.len(),
        new.classifier.summary()
    ))
}

/// A command and where its answer goes (the daemons' one hand-off:
/// [`netsched_control::handoff`]).
pub type Envelope = handoff::Envelope<Command, Answer>;

/// The packet thread's end: [`Inbox::take`] never blocks.
pub type Inbox = handoff::Inbox<Command, Answer>;

/// Builds fresh tables of the given generation (the `reload` command); runs on a build thread
/// of its own, off the packet path.
pub type Loader = Arc<dyn Fn(u64) -> Result<Arc<Tables>, TablesError> + Send + Sync>;

/// The control thread's end.
#[derive(Clone)]
pub struct Outbox {
    commands: handoff::Outbox<Command, Answer>,
    loader: Loader,
    /// The generation given to the last `reload` asked for.
    generation: Arc<AtomicU64>,
    watch: Option<Watch>,
    /// Reloads by outcome, counted when each build ends (`netsched_filter_reloads_total`).
    reloads: Reloads,
}

/// What the control thread reads itself while the packet thread is stalled: the watchdog's
/// verdict and the packet thread's last published counters.
#[derive(Clone)]
struct Watch {
    health: Arc<Health>,
    latest: Arc<Latest<FilterStats>>,
}

/// A bounded command channel; `loader` compiles the tables for `reload`.
pub fn channel(loader: Loader) -> (Outbox, Inbox) {
    let (commands, inbox) = handoff::channel(COMMAND_QUEUE);
    (
        Outbox {
            commands,
            loader,
            generation: Arc::new(AtomicU64::new(1)),
            watch: None,
            reloads: Reloads::new(),
        },
        inbox,
    )
}

impl Outbox {
    /// While `health` says the packet thread is stalled, `show` is answered by the control
    /// thread from `latest` (the packet thread's last published counters, with the
    /// watchdog's stall count) and other commands fail at once, instead of waiting in the queue.
    pub fn with_watchdog(mut self, health: Arc<Health>, latest: Arc<Latest<FilterStats>>) -> Self {
        self.watch = Some(Watch { health, latest });
        self
    }

    /// The answer to `request` without the packet thread, when it is stalled.
    fn stalled_answer(&self, request: &Request) -> Option<Result<Answer, CommandError>> {
        let w = self.watch.as_ref().filter(|w| w.health.stalled())?;
        Some(match request {
            Request::Show { .. } => match w.latest.get() {
                Some((_, s)) => {
                    let mut s = FilterStats::clone(&s);
                    s.packet_thread_stalls = w.health.stalls();
                    Ok(Answer::Stats(Box::new(s)))
                }
                None => Err(CommandError::Stalled),
            },
            _ => Err(CommandError::Stalled),
        })
    }

    /// Hand `command` to the packet thread and wait for its answer until `deadline`.
    pub fn execute(&self, command: Command, deadline: Instant) -> Result<Answer, CommandError> {
        let pending = self.commands.send(command);
        let answer = match (&self.watch, pending) {
            (_, Err(e)) => Err(e),
            (None, Ok(p)) => p.wait(deadline),
            // A command taken just before a stall is never answered: stop waiting then.
            (Some(w), Ok(p)) => p.wait_or(deadline, STALL_LOOK, || w.health.stalled()),
        };
        answer.map_err(|e| match e {
            HandOffError::Busy { waiting } => CommandError::Busy { queue: waiting },
            HandOffError::Stopped | HandOffError::Dropped => CommandError::Stopped,
            HandOffError::NoAnswer => CommandError::NoAnswer { within: DEADLINE },
        })
    }
}

impl Outbox {
    /// Stamp a reload with the next generation, build it on its own thread and hand it to the
    /// packet thread; the answer when it comes before `deadline` less [`REPLY_MARGIN`],
    /// otherwise [`CommandError::StillBuilding`] (the build goes on and is handed over when
    /// done). A built set waits for a place in a full queue instead of being dropped.
    fn reload(&self, deadline: Instant) -> Result<Answer, ControlError> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let (tx, rx) = mpsc::channel();
        let out = self.clone();
        let spawned = std::thread::Builder::new()
            .name("filter-reload".into())
            .spawn(move || {
                let result = (out.loader)(generation)
                    .map_err(ControlError::Tables)
                    .and_then(|t| out.hand_over(t).map_err(ControlError::Command));
                out.reloads.record(result.is_ok());
                if let Err(mpsc::SendError(r)) = tx.send(result) {
                    // Nobody waits any more: the client was told this would happen.
                    match r {
                        Ok(Answer::Done(msg)) => {
                            tracing::info!("reload: {}", msg.replace('\n', "; "))
                        }
                        Ok(Answer::Superseded {
                            requested,
                            in_force,
                        }) => tracing::info!(
                            "reload as generation {requested}: superseded by generation {in_force}"
                        ),
                        Ok(Answer::Stats(_) | Answer::Refused(_)) => {}
                        Err(e) => tracing::warn!("reload as generation {generation}: {e}"),
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("reload: no build thread: {e}");
            return Err(CommandError::Stopped.into());
        }
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(REPLY_MARGIN);
        match rx.recv_timeout(wait) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(CommandError::StillBuilding {
                generation,
                after: wait,
            }
            .into()),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(CommandError::Stopped.into()),
        }
    }

    /// The reloads counted so far, by outcome.
    pub fn reloads(&self) -> &Reloads {
        &self.reloads
    }

    /// SIGHUP's reload: the same as `ctl reload` (the rule file read again on a build thread,
    /// swapped in whole or refused), its outcome logged naming `file` instead of answered.
    pub fn reload_on_signal(&self, file: &Path) {
        let file = file.display();
        match self
            .reload(Instant::now() + DEADLINE)
            .and_then(|a| answer_text(a, false, false))
        {
            Ok(text) => {
                tracing::info!(
                    by = "SIGHUP",
                    "reloaded {file}: {}",
                    text.trim_end().replace('\n', "; ")
                )
            }
            Err(e @ ControlError::Command(CommandError::StillBuilding { .. })) => {
                tracing::warn!(by = "SIGHUP", "reload of {file}: {e}")
            }
            // A refused file says "reload failed, keeping the old configuration" itself.
            Err(e @ ControlError::Tables(_)) => tracing::error!(
                by = "SIGHUP",
                "{}",
                e.to_string().trim_end().replace('\n', "; ")
            ),
            Err(e) => tracing::error!(
                by = "SIGHUP",
                "reload failed, keeping the old configuration: {}",
                e.to_string().trim_end().replace('\n', "; ")
            ),
        }
    }

    /// Queue built tables, waiting for a place while the queue is full, then wait for the
    /// packet thread's answer within [`DEADLINE`].
    fn hand_over(&self, tables: Arc<Tables>) -> Result<Answer, CommandError> {
        loop {
            match self.execute(
                Command::SwapTables(tables.clone()),
                Instant::now() + DEADLINE,
            ) {
                Err(CommandError::Busy { .. }) => std::thread::sleep(STALL_LOOK),
                r => return r,
            }
        }
    }
}

/// A parsed request: `Reload` is compiled by the control thread before it becomes a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Show { json: bool },
    ShowRules { from: usize, count: usize },
    Reload,
    SetDispatch(DispatchMode),
    Rule(RuleChange),
}

/// Parse one request line. Errors name the word that is wrong.
pub fn parse(line: &str) -> Result<Request, RequestError> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let arity = |n: usize| -> Result<(), RequestError> {
        match w.get(n) {
            Some(extra) => Err(RequestError::Unexpected {
                command: w[0].to_string(),
                word: extra.to_string(),
            }),
            None => Ok(()),
        }
    };
    match w.first().copied() {
        None => Err(RequestError::Empty),
        Some("show") => match w.get(1).copied() {
            None => Ok(Request::Show { json: false }),
            Some("rules") => {
                let num = |i: usize, default: usize| match w.get(i) {
                    None => Ok(default),
                    Some(n) => n.parse().map_err(|_| {
                        RequestError::Rule(format!("show rules: {n:?} is not a count"))
                    }),
                };
                let (from, count) = (num(2, 0)?, num(3, DEFAULT_PAGE)?);
                arity(4).map(|()| Request::ShowRules { from, count })
            }
            Some("--json") => arity(2).map(|()| Request::Show { json: true }),
            Some(o) => Err(RequestError::ShowOption(o.to_string())),
        },
        Some("reload") => arity(1).map(|()| Request::Reload),
        Some("rule") => parse_rule_change(&w[1..]).map(Request::Rule),
        Some("rules") => parse_rules_page(&w[1..]),
        Some("set-dispatch") => {
            let m = w.get(1).ok_or(RequestError::MissingMode)?;
            let mode = DispatchMode::parse(m).map_err(RequestError::Dispatch)?;
            arity(2).map(|()| Request::SetDispatch(mode))
        }
        Some(other) => Err(RequestError::UnknownCommand(other.to_string())),
    }
}

/// `rules [--from N] [--count N]`: the CLI's spelling of `show rules FROM COUNT`.
fn parse_rules_page(w: &[&str]) -> Result<Request, RequestError> {
    let (mut from, mut count) = (0, DEFAULT_PAGE);
    let mut words = w.iter();
    while let Some(&flag) = words.next() {
        let slot = match flag {
            "--from" => &mut from,
            "--count" => &mut count,
            other => {
                return Err(RequestError::Unexpected {
                    command: "rules".into(),
                    word: other.to_string(),
                })
            }
        };
        let n = words
            .next()
            .ok_or_else(|| RequestError::Rule(format!("rules: {flag} without a number")))?;
        *slot = n
            .parse()
            .map_err(|_| RequestError::Rule(format!("rules: {flag} {n:?} is not a number")))?;
    }
    Ok(Request::ShowRules { from, count })
}

/// `rule add KEY=VALUE…` (after every rule), `rule insert [before H | after H] KEY=VALUE…`
/// (before every rule, or next to the rule of handle H), `rule delete H`.
fn parse_rule_change(w: &[&str]) -> Result<RuleChange, RequestError> {
    let handle = |s: Option<&&str>| -> Result<u64, RequestError> {
        let s = s.ok_or_else(|| RequestError::Rule("missing the HANDLE".into()))?;
        s.parse()
            .map_err(|_| RequestError::Rule(format!("{s:?} is not a handle (a number)")))
    };
    let rule = |words: &[&str]| {
        crate::rule_edit::parse_rule_words(words).map_err(|e| RequestError::Rule(e.to_string()))
    };
    match w.first().copied() {
        Some("add") => Ok(RuleChange::Insert {
            at: Place::Bottom,
            rule: rule(&w[1..])?,
        }),
        Some("insert") => {
            let (at, rest) = match w.get(1).copied() {
                Some("before") => (Place::Before(handle(w.get(2))?), &w[3..]),
                Some("after") => (Place::After(handle(w.get(2))?), &w[3..]),
                _ => (Place::Top, &w[1..]),
            };
            Ok(RuleChange::Insert {
                at,
                rule: rule(rest)?,
            })
        }
        Some("delete") => match w.get(2) {
            Some(extra) => Err(RequestError::Unexpected {
                command: "rule delete".into(),
                word: extra.to_string(),
            }),
            None => Ok(RuleChange::Delete {
                handle: handle(w.get(1))?,
            }),
        },
        Some(v) => Err(RequestError::Rule(format!(
            "unknown verb {v:?} (add, insert, delete)"
        ))),
        None => Err(RequestError::Rule("missing add, insert or delete".into())),
    }
}

/// `show` as text.
pub fn summary(s: &FilterStats) -> String {
    let mut out = format!(
        "dispatch {}  rules generation {}\nreceived {}  forwarded {}  dropped {}  queued {}  identity {}\n",
        s.pipeline.dispatch,
        s.pipeline.rules_generation,
        s.received,
        s.forwarded,
        s.dropped,
        s.queued,
        if s.identity_holds { "holds" } else { "BROKEN" }
    );
    if s.packet_thread_stalls > 0 {
        out += &format!("packet thread stalls {}\n", s.packet_thread_stalls);
    }
    for (r, n) in &s.drops {
        out += &format!("  dropped {}: {n}\n", r.name());
    }
    let o = &s.pipeline.order;
    out += &format!(
        "order: violations before window {}  after {}  held {}  timeouts {}\n",
        o.violations_before, o.violations_after, o.held, o.released_by_timeout
    );
    for (i, w) in s.pipeline.workers.iter().enumerate() {
        out += &format!(
            "worker {i}: busy {} ms  idle {} ms  blocks {}  hand-off waits {}  panics {}\n",
            w.busy_ns / 1_000_000,
            w.idle_ns / 1_000_000,
            w.blocks,
            w.handoff_waits,
            w.panics
        );
    }
    out
}

fn execute_line(line: &str, out: &Outbox, deadline: Instant) -> Result<String, ControlError> {
    let request = parse(line)?;
    let json = matches!(request, Request::Show { json: true });
    let (answer, stalled) = match out.stalled_answer(&request) {
        Some(a) => (a?, true),
        None => {
            let cmd = match &request {
                Request::Show { .. } => Command::Show,
                Request::Reload => return answer_text(out.reload(deadline)?, json, false),
                Request::SetDispatch(m) => Command::SetDispatch(*m),
                Request::Rule(c) => Command::EditRule(c.clone()),
                Request::ShowRules { from, count } => Command::ShowRules {
                    from: *from,
                    count: *count,
                },
            };
            match out.execute(cmd, deadline) {
                Err(e @ CommandError::NoAnswer { .. }) => match out.stalled_answer(&request) {
                    Some(a) => (a?, true),
                    None => return Err(e.into()),
                },
                r => (r?, false),
            }
        }
    };
    answer_text(answer, json, stalled)
}

fn answer_text(answer: Answer, json: bool, stalled: bool) -> Result<String, ControlError> {
    match answer {
        Answer::Stats(s) if json => serde_json::to_string(&s)
            .map(|t| t + "\n")
            .map_err(ControlError::Encode),
        Answer::Stats(s) if stalled => Ok(format!(
            "packet thread stalled: the counters it last published\n{}",
            summary(&s)
        )),
        Answer::Stats(s) => Ok(summary(&s)),
        Answer::Done(msg) if msg.ends_with('\n') => Ok(msg),
        Answer::Done(msg) => Ok(msg + "\n"),
        Answer::Refused(e) => Err(ControlError::Edit(e)),
        Answer::Superseded {
            requested,
            in_force,
        } => Err(CommandError::Superseded {
            requested,
            in_force,
        }
        .into()),
    }
}

/// The socket's bounds and bind mode (the one server of every daemon, `netsched-control`).
pub const SERVER: ServerConfig = ServerConfig {
    daemon: "netsched filter",
    thread_name: "filter-control",
    limits: Limits {
        max_connections: MAX_CONNECTIONS,
        max_line: MAX_REQUEST,
        request_within: DEADLINE,
        answer_within: DEADLINE,
    },
    when_full: WhenFull::Refuse,
    line_end: LineEnd::NewlineOrEnd,
    bind: BindMode::Exclusive,
    nice: None,
};

/// The running control socket; dropping it stops accepting and removes the socket file (only
/// while it is still the one it made).
pub struct ControlServer {
    server: Server,
}

impl ControlServer {
    /// Bind `path` (mode 0660, group `group` when given) and serve requests through `out`.
    /// A stale socket (nobody answers) is replaced; a live one is an error; a path that is
    /// not a socket is never removed.
    pub fn start(path: &Path, group: Option<&str>, out: Outbox) -> anyhow::Result<Self> {
        // The filter's side of a connection: parse, hand to the packet thread, answer `ok` +
        // text or `error: ...`.
        let handler = OkOrError(
            move |line: &str, deadline| execute_line(line, &out, deadline),
            |verb| verb == "show",
        );
        let server = Server::start(path, group, SERVER, Arc::new(handler))
            .map_err(|e| anyhow::anyhow!("--control-socket {}: {e}", path.display()))?;
        Ok(ControlServer { server })
    }

    pub fn path(&self) -> &Path {
        self.server.path()
    }
}

/// Send one request line to `socket`; the answer without its `ok` line, or the error text.
pub fn request(socket: &Path, line: &str) -> Result<String, netsched_control::ClientError> {
    let hint = format!("netsched filter --control-socket {}", socket.display());
    netsched_control::client::request_line(socket, line, DEADLINE + Duration::from_secs(3), &hint)
}

/// `netsched filter ctl`: talk to a running filter.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    #[command(flatten)]
    pub socket: netsched_control::CtlSocket,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlOp {
    /// The counters.
    Show {
        /// The whole snapshot as one JSON object (the `--stats` line's form).
        #[arg(long)]
        json: bool,
    },
    /// Re-read the rule and signature files and swap them in whole.
    Reload,
    /// Change the dispatch policy.
    SetDispatch {
        /// static_rr, modified_rr, fcfs, modified_fcfs, flow_hash or work_stealing.
        mode: String,
    },
    /// The rules in force, in order, a page at a time: `POSITION handle H RULE` per line.
    Rules {
        /// The first position shown (0 = the first rule).
        #[arg(long, default_value_t = 0)]
        from: usize,
        /// Rules shown, at most 1000.
        #[arg(long, default_value_t = crate::rule_edit::DEFAULT_PAGE)]
        count: usize,
    },
    /// Change one rule while packets flow (needs `--classifier tuple_merge`, the default):
    /// `rule add action=drop proto=udp dport=53` appends; `rule insert [before H | after H]
    /// KEY=VALUE…` puts a rule first or next to the rule of handle H; `rule delete H` removes
    /// one. Keys and values are the rule file's (docs/rules.md). Packets that arrive after
    /// the answer are classified with the change, those before without it.
    #[command(verbatim_doc_comment)]
    Rule {
        /// add KEY=VALUE… | insert [before H | after H] KEY=VALUE… | delete H
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        words: Vec<String>,
    },
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::Show { json } => format!("show{}", if *json { " --json" } else { "" }),
            CtlOp::Reload => "reload".into(),
            CtlOp::SetDispatch { mode } => format!("set-dispatch {mode}"),
            CtlOp::Rules { from, count } => format!("rules --from {from} --count {count}"),
            CtlOp::Rule { words } => format!("rule {}", words.join(" ")),
        }
    }
}

pub fn run_ctl(a: &CtlArgs) -> anyhow::Result<()> {
    let out = request(&a.socket.locate("filter")?, &a.op.line())?;
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_errors_name_the_wrong_word() {
        assert_eq!(parse("show").unwrap(), Request::Show { json: false });
        assert_eq!(parse("show --json").unwrap(), Request::Show { json: true });
        assert_eq!(parse(" reload ").unwrap(), Request::Reload);
        assert_eq!(
            parse("show rules").unwrap(),
            Request::ShowRules {
                from: 0,
                count: DEFAULT_PAGE
            }
        );
        assert_eq!(
            parse("show rules 10 5").unwrap(),
            Request::ShowRules { from: 10, count: 5 }
        );
        assert_eq!(
            parse("rules --count 5 --from 10").unwrap(),
            Request::ShowRules { from: 10, count: 5 }
        );
        let op = CtlOp::Rules { from: 3, count: 7 };
        assert_eq!(
            parse(&op.line()).unwrap(),
            Request::ShowRules { from: 3, count: 7 }
        );
        let Request::Rule(RuleChange::Insert { at, rule }) =
            parse("rule insert after 4 action=class class=3 proto=udp dst=10.0.0.0/8 dport=53")
                .unwrap()
        else {
            panic!("not an insert");
        };
        assert_eq!(at, Place::After(4));
        assert_eq!(
            rule.to_string(),
            "action=class class=3 proto=udp dst=10.0.0.0/8 dport=53"
        );
        assert_eq!(
            parse("rule delete 12").unwrap(),
            Request::Rule(RuleChange::Delete { handle: 12 })
        );
        assert_eq!(
            parse("set-dispatch fcfs").unwrap(),
            Request::SetDispatch(DispatchMode::parse("fcfs").unwrap())
        );
        for (line, word) in [
            ("", "empty"),
            ("shw", "\"shw\""),
            ("show --yaml", "--yaml"),
            ("reload now", "\"now\""),
            ("set-dispatch", "missing MODE"),
            ("set-dispatch lottery", "lottery"),
            ("rule", "missing add, insert or delete"),
            ("rule move 3", "\"move\""),
            ("rule delete", "missing the HANDLE"),
            ("rule delete x7", "\"x7\" is not a handle"),
            ("rule delete 7 8", "\"8\""),
            ("rule insert before", "missing the HANDLE"),
            ("rule add action=drop dport=70000", "70000"),
            ("rule add action=drop colour=red", "colour"),
            ("rule add dport=53", "action"),
            ("show rules ten", "\"ten\""),
            ("show rules 1 2 3", "\"3\""),
            ("rules --from", "without a number"),
            ("rules --page 2", "--page"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(word), "{line:?}: {e}");
        }
    }

    #[test]
    fn a_failed_reload_answers_the_error_and_a_full_queue_answers_busy() {
        let loader: Loader = Arc::new(|_| {
            Err(TablesError::Rules(crate::rules::RulesError::File(
                netsched_core::classify::acl::RuleFileError::new(
                    "rules.toml",
                    3,
                    "rule[0].src",
                    "x",
                    netsched_core::classify::acl::RuleFileErrorKind::BadPrefix,
                ),
            )))
        });
        let (out, _inbox) = channel(loader);
        let e = execute_line("reload", &out, Instant::now() + DEADLINE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("rules.toml:3"), "{e}");
        assert!(
            e.starts_with("reload failed, keeping the old configuration: "),
            "{e}"
        );
        for _ in 0..COMMAND_QUEUE {
            out.commands.send(Command::Show).unwrap();
        }
        let e = execute_line("show", &out, Instant::now() + DEADLINE)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("busy"), "{e}");
    }

    /// Every hint of the control socket names it by its flag, `--control-socket`: the client's
    /// when no filter answers, and the server's when the socket cannot be made.
    #[test]
    fn hints_name_the_control_socket_flag() {
        let dir = std::env::temp_dir().join(format!("filter-hint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("none.sock");
        let e = request(&sock, "show").unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "netsched filter --control-socket {}",
                sock.display()
            )),
            "{e}"
        );
        let (out, _inbox) = channel(Arc::new(|g| Ok(built(g, 1))));
        // A regular file where the socket should be: never removed, so the start fails.
        let file = dir.join("not-a-socket");
        std::fs::write(&file, "x").unwrap();
        let e = ControlServer::start(&file, None, out)
            .err()
            .expect("a regular file is no socket")
            .to_string();
        assert!(e.starts_with("--control-socket "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Tables of `generation` with one rule; `rules()` tells them apart.
    fn built(generation: u64, rules: usize) -> Arc<Tables> {
        let text: String = (0..rules)
            .map(|i| {
                format!(
                    "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"{}\"\n",
                    1000 + i
                )
            })
            .collect();
        Arc::new(Tables {
            classifier: crate::classifier::build_classifier(
                crate::rules::RuleSet::from_toml_str(&text, "t").unwrap(),
                netsched_core::classify::acl::ClassifierKind::TupleMerge,
                &Default::default(),
            )
            .unwrap(),
            signatures: crate::signatures::Signatures::empty(),
            generation,
        })
    }

    /// A stand-in packet thread: carries out `swaps` swap commands with [`swap_in`] (giving
    /// up after 30 s); the tables in force at the end.
    fn packet_thread(inbox: Inbox, swaps: usize) -> std::thread::JoinHandle<Arc<Tables>> {
        std::thread::spawn(move || {
            let mut in_force = built(1, 1);
            let mut left = swaps;
            let end = Instant::now() + Duration::from_secs(30);
            while left > 0 && Instant::now() < end {
                match inbox.take() {
                    Some(env) => {
                        let a = match &env.command {
                            Command::SwapTables(t) => {
                                left -= 1;
                                swap_in(&mut in_force, t)
                            }
                            _ => Answer::Done(String::new()),
                        };
                        env.answer(a);
                    }
                    None => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            in_force
        })
    }

    /// Reload A (generation 2) blocks in its build until released; reload B (generation 3)
    /// builds at once. B is answered and in force; A, released, is discarded and its client
    /// told so; generation 3 stays in force.
    #[test]
    fn a_slow_earlier_reload_never_overtakes_a_later_one() {
        let (started_tx, started_rx) = mpsc::channel::<u64>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = std::sync::Mutex::new(release_rx);
        let started_tx = std::sync::Mutex::new(started_tx);
        let loader: Loader = Arc::new(move |g| {
            started_tx.lock().unwrap().send(g).unwrap();
            if g == 2 {
                release_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20))
                    .unwrap();
                return Ok(built(g, 50));
            }
            Ok(built(g, 1))
        });
        let (out, inbox) = channel(loader);
        let packet = packet_thread(inbox, 2);
        let a = {
            let out = out.clone();
            std::thread::spawn(move || execute_line("reload", &out, Instant::now() + DEADLINE))
        };
        assert_eq!(started_rx.recv_timeout(DEADLINE).unwrap(), 2);
        let b = execute_line("reload", &out, Instant::now() + DEADLINE).unwrap();
        assert!(b.contains("rules generation 3: 1 rules"), "{b}");
        // The answer says what was loaded, as the log does.
        assert!(
            b.contains("\nrules: 1 loaded from t (toml), default accept, tuple_merge, "),
            "{b}"
        );
        release_tx.send(()).unwrap();
        let a = a.join().unwrap().unwrap_err().to_string();
        assert!(a.contains("generation 2 superseded by generation 3"), "{a}");
        let in_force = packet.join().unwrap();
        assert_eq!((in_force.generation, in_force.classifier.rules()), (3, 1));
    }

    /// A build still running when the answer is due is answered with its generation and what
    /// will happen, and is swapped in when it is built.
    #[test]
    fn a_reload_still_building_at_the_deadline_says_so_and_lands_later() {
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = std::sync::Mutex::new(release_rx);
        let loader: Loader = Arc::new(move |g| {
            release_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(20))
                .unwrap();
            Ok(built(g, 2))
        });
        let (out, inbox) = channel(loader);
        let packet = packet_thread(inbox, 1);
        let e = execute_line("reload", &out, Instant::now() + REPLY_MARGIN * 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("generation 2 still building"), "{e}");
        assert!(e.contains("swapped in when built"), "{e}");
        release_tx.send(()).unwrap();
        let in_force = packet.join().unwrap();
        assert_eq!((in_force.generation, in_force.classifier.rules()), (2, 2));
    }
}
