//! Runtime control of a running switch over a local Unix socket (`--control PATH`) and its
//! client, `netsched vswitch ctl`.
//!
//! Protocol (as `netsched balance ctl`): the client sends one line of words, at most
//! [`MAX_REQUEST`] bytes, and reads the answer until EOF; the answer's first line is `ok` or
//! `error: <what>`. Commands:
//!
//! | command | effect |
//! |---|---|
//! | `show [--json]` (also `show-ports`) | per port: tier, weight, the accounting, the pass-over measure |
//! | `set-tier PORT TIER` | the port's tier (strict priority, delay-constrained, wall-clock) |
//! | `set-weight PORT W` | the port's weight (DRR quantum `W × 1514` B, WF2Q+ weight) |
//! | `reload` | the `--config` file read again and applied whole, as SIGHUP does ([`crate::reload`]) |
//!
//! **The packet path never waits for control.** The control thread parses and checks a
//! request, then hands a [`Command`] to the packet thread through a bounded channel
//! ([`COMMAND_QUEUE`] places; a full channel answers "busy" at once) and waits for the
//! answer with the request's deadline. The packet thread takes at most [`COMMAND_QUEUE`]
//! commands per loop turn with `try_recv` (never blocks), answers on a one-place channel
//! (never blocks), and applies a change at the next round start. A request has
//! [`DEADLINE`] to arrive and wait for the switch, and as long again to be written; each
//! connection is served by its own thread, at most [`MAX_CONNECTIONS`] at a time (the oldest
//! still silent is closed for a newcomer; with none such, more are answered "busy" and
//! closed), so a stuck client stalls neither the switch nor the other
//! clients. The socket, its bounds and its access rule are the one server of every daemon
//! (`netsched_control`): the socket is mode 0660 (group `--control-group` when given); each
//! connection's `SO_PEERCRED` must be root, our own uid, or a member of that group.

pub use crate::control_error::{ControlError, RequestError};
use crate::stats::SwitchStats;
use netsched_control::{
    handoff, BindError, BindMode, ClientError, HandOffError, Limits, LineEnd, OkOrError, Server,
    ServerConfig, WhenFull,
};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest request line, bytes.
pub const MAX_REQUEST: usize = 4096;
/// Everything of one request (read, wait for the packet thread, write) within this.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// Commands waiting for the packet thread; one more is answered "busy".
pub const COMMAND_QUEUE: usize = 8;
/// Connections served at once; one more takes the place of the oldest one still without its
/// line (`netsched_control::server`), or, with none such, is answered "busy" and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// The default socket path.
pub const DEFAULT_SOCKET: &str = "/run/netsched/vswitch.sock";

/// A request the packet thread carries out (`reload` is the control side's: [`Request`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A snapshot of the counters.
    Show,
    SetTier {
        port: String,
        tier: u32,
    },
    SetWeight {
        port: String,
        weight: u32,
    },
}

/// The packet thread's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Stats(Box<SwitchStats>),
    Done(String),
    Refused(String),
}

/// A command and where its answer goes (the daemons' one hand-off:
/// [`netsched_control::handoff`]); answering never blocks.
pub type Envelope = handoff::Envelope<Command, Answer>;

/// The packet thread's end: [`Inbox::take`] never blocks.
pub type Inbox = handoff::Inbox<Command, Answer>;

/// The control thread's end.
#[derive(Clone)]
pub struct Outbox {
    commands: handoff::Outbox<Command, Answer>,
}

/// A bounded command channel: the control side and the packet thread's side.
pub fn channel() -> (Outbox, Inbox) {
    let (commands, inbox) = handoff::channel(COMMAND_QUEUE);
    (Outbox { commands }, inbox)
}

impl Outbox {
    /// Hand `command` to the packet thread and wait for its answer until `deadline`.
    pub fn execute(&self, command: Command, deadline: Instant) -> Result<Answer, ControlError> {
        self.commands
            .execute(command, deadline)
            .map_err(|e| match e {
                HandOffError::Busy { waiting } => ControlError::Busy { waiting },
                HandOffError::Stopped | HandOffError::Dropped => ControlError::Stopped,
                HandOffError::NoAnswer => ControlError::NoAnswer { within: DEADLINE },
            })
    }
}

/// Parse one request line. Errors name the word that is wrong.
pub fn parse(line: &str) -> Result<(Command, bool), RequestError> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let Some(&command) = w.first() else {
        return Err(RequestError::Empty);
    };
    let number = |i: usize, what: &'static str| -> Result<u32, RequestError> {
        let v = w.get(i).ok_or_else(|| RequestError::Missing {
            command: command.to_string(),
            what,
        })?;
        v.parse::<u32>().map_err(|_| RequestError::NotANumber {
            command: command.to_string(),
            port: w[1].to_string(),
            what,
            value: v.to_string(),
        })
    };
    let port = |i: usize| -> Result<String, RequestError> {
        w.get(i)
            .map(|s| s.to_string())
            .ok_or_else(|| RequestError::Missing {
                command: command.to_string(),
                what: "PORT (a guest port's device name)",
            })
    };
    let arity = |n: usize| -> Result<(), RequestError> {
        match w.get(n) {
            Some(word) => Err(RequestError::Unexpected {
                command: command.to_string(),
                word: word.to_string(),
            }),
            None => Ok(()),
        }
    };
    match command {
        // `show` is the CLI's verb; `show-ports` the wire's first one (both kept: see
        // docs/cli.md, "Control socket verbs").
        "show" | "show-ports" => match w.get(1).copied() {
            None => Ok((Command::Show, false)),
            Some("--json") => arity(2).map(|()| (Command::Show, true)),
            Some(other) => Err(RequestError::UnknownOption {
                command: command.to_string(),
                option: other.to_string(),
            }),
        },
        "set-tier" => {
            let port = port(1)?;
            let tier = number(2, "TIER")?;
            arity(3)?;
            Ok((Command::SetTier { port, tier }, false))
        }
        "set-weight" => {
            let port = port(1)?;
            let weight = number(2, "W")?;
            arity(3)?;
            Ok((Command::SetWeight { port, weight }, false))
        }
        other => Err(RequestError::UnknownCommand {
            word: other.to_string(),
        }),
    }
}

/// `show-ports` as a table.
pub fn ports_table(s: &SwitchStats) -> String {
    let mut out = format!(
        "discipline {}  rounds {}  uplink {}\n{:<16} {:>4} {:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>5}\n",
        s.discipline,
        s.rounds,
        s.uplink.dev,
        "port",
        "tier",
        "weight",
        "received",
        "forwarded",
        "dropped",
        "queued",
        "passed",
        "bound"
    );
    for p in &s.ports {
        out += &format!(
            "{:<16} {:>4} {:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>5}{}\n",
            p.dev,
            p.tier,
            p.weight,
            p.received,
            p.forwarded,
            p.dropped(),
            p.queued,
            p.max_rounds_passed,
            p.bound_rounds,
            if p.removed { "  (removed)" } else { "" }
        );
    }
    out
}

/// What serves `reload` on the control thread (`reload.rs`: the file read again and applied
/// whole); given who asked (`ctl`), it answers the text or the refusal.
pub type ReloadFn = dyn Fn(&str) -> Result<String, ControlError> + Send + Sync;

/// The answer text of a request line (without the `ok`/`error` status line). `reload` is
/// served here, on the control thread, with `reloader` (as SIGHUP: the same wording as
/// `netsched balance ctl reload`).
fn execute_line(
    line: &str,
    out: &Outbox,
    reloader: Option<&ReloadFn>,
    deadline: Instant,
) -> Result<String, ControlError> {
    if line.split_whitespace().collect::<Vec<_>>() == ["reload"] {
        let r = reloader.ok_or(ControlError::NoReload)?;
        return r("ctl");
    }
    let (cmd, json) = parse(line)?;
    match out.execute(cmd, deadline)? {
        Answer::Stats(s) if json => serde_json::to_string(&s)
            .map(|t| t + "\n")
            .map_err(ControlError::Encode),
        Answer::Stats(s) => Ok(ports_table(&s)),
        Answer::Done(msg) => Ok(msg + "\n"),
        Answer::Refused(msg) => Err(ControlError::Refused(msg)),
    }
}

/// The socket's bounds and ways (the one server of every daemon: [`netsched_control`]).
pub const SERVER: ServerConfig = ServerConfig {
    daemon: "netsched vswitch",
    thread_name: "vswitch-control",
    limits: Limits {
        max_connections: MAX_CONNECTIONS,
        max_line: MAX_REQUEST,
        request_within: DEADLINE,
        answer_within: DEADLINE,
    },
    when_full: WhenFull::Refuse,
    // `printf show-ports | nc -U` (no newline, then half-close) is a request too.
    line_end: LineEnd::NewlineOrEnd,
    bind: BindMode::Exclusive,
    nice: None,
};

/// The listening socket and its threads; dropping it stops accepting and removes the socket
/// file (only if it is still the one we created).
pub struct ControlServer {
    server: Server,
}

impl ControlServer {
    /// Bind `path` (mode 0660, group `group` when given) and serve requests through `out`.
    /// A stale socket (nobody answers) is replaced; a live one is an error; a path that is
    /// not a socket is never removed.
    pub fn start(path: &Path, group: Option<&str>, out: Outbox) -> Result<Self, BindError> {
        Self::start_with_reload(path, group, out, None)
    }

    /// As [`ControlServer::start`], with `reload` served by `reloader`.
    pub fn start_with_reload(
        path: &Path,
        group: Option<&str>,
        out: Outbox,
        reloader: Option<Arc<ReloadFn>>,
    ) -> Result<Self, BindError> {
        // The switch's side: a request line in, its `ok`/`error` answer out, on the server's
        // connection thread (it waits for the packet thread at most until the deadline).
        let handler = OkOrError(
            move |line: &str, deadline| execute_line(line, &out, reloader.as_deref(), deadline),
            |verb| verb.starts_with("show"),
        );
        let server = Server::start(path, group, SERVER, Arc::new(handler))?;
        Ok(ControlServer { server })
    }

    pub fn path(&self) -> &Path {
        self.server.path()
    }
}

/// Send one request line to `socket`; the answer without its `ok` line, or the error text
/// (the daemons' one client: [`netsched_control::request_line`]).
pub fn request(socket: &Path, line: &str) -> Result<String, ClientError> {
    let hint = format!("netsched vswitch --control-socket {}", socket.display());
    netsched_control::request_line(socket, line, DEADLINE + Duration::from_secs(3), &hint)
}

/// `netsched vswitch ctl`: talk to a running switch.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    #[command(flatten)]
    pub socket: netsched_control::CtlSocket,
    #[command(subcommand)]
    pub op: CtlOp,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlOp {
    /// Per port: tier, weight, received/forwarded/dropped/queued, pass-over measure.
    #[command(alias = "show-ports")]
    Show {
        /// The whole snapshot as one JSON object (the `--stats` line's form).
        #[arg(long)]
        json: bool,
    },
    /// Move a port to another tier (1 = most important); applies at the next round start.
    SetTier {
        /// The port (its interface name).
        port: String,
        /// The new tier, 1 = most important.
        tier: u32,
    },
    /// Change a port's weight (DRR, WF2Q+); applies at the next round start.
    SetWeight {
        /// The port (its interface name).
        port: String,
        /// The new weight.
        weight: u32,
    },
    /// Read the --config file again and apply it whole, or refuse it and keep the old
    /// configuration (as SIGHUP).
    Reload,
}

impl CtlOp {
    pub fn line(&self) -> String {
        match self {
            CtlOp::Show { json } => {
                format!("show-ports{}", if *json { " --json" } else { "" })
            }
            CtlOp::SetTier { port, tier } => format!("set-tier {port} {tier}"),
            CtlOp::SetWeight { port, weight } => format!("set-weight {port} {weight}"),
            CtlOp::Reload => "reload".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn requests_parse_and_errors_name_the_wrong_word() {
        assert_eq!(parse("show-ports").unwrap(), (Command::Show, false));
        assert_eq!(parse("show").unwrap(), (Command::Show, false));
        assert_eq!(parse("show --json").unwrap(), (Command::Show, true));
        assert_eq!(
            parse(" show-ports  --json ").unwrap(),
            (Command::Show, true)
        );
        assert_eq!(
            parse("set-tier vg1 2").unwrap().0,
            Command::SetTier {
                port: "vg1".into(),
                tier: 2
            }
        );
        assert_eq!(
            parse("set-weight vg1 7").unwrap().0,
            Command::SetWeight {
                port: "vg1".into(),
                weight: 7
            }
        );
        for (bad, want) in [
            ("", "empty request"),
            ("reboot", "unknown command \"reboot\""),
            ("show-ports --yaml", "\"--yaml\""),
            ("set-tier", "missing PORT"),
            ("set-tier vg1", "missing TIER"),
            ("set-tier vg1 high", "TIER \"high\" is not a whole number"),
            ("set-weight vg1 -3", "W \"-3\""),
            ("set-tier vg1 2 3", "unexpected \"3\""),
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{bad:?}: want {want:?} in {e:?}");
        }
    }

    #[test]
    fn a_full_command_queue_answers_busy_at_once_and_a_silent_switch_times_out() {
        let (out, inbox) = channel();
        let soon = Instant::now() + Duration::from_millis(50);
        // Nobody takes the commands: the first COMMAND_QUEUE wait and time out ...
        let e = out.execute(Command::Show, soon).unwrap_err().to_string();
        assert!(e.contains("did not answer"), "{e}");
        for _ in 1..COMMAND_QUEUE {
            let _ = out.execute(Command::Show, Instant::now());
        }
        // ... one more is refused without waiting.
        let t = Instant::now();
        let e = out
            .execute(Command::Show, Instant::now() + Duration::from_secs(5))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("busy"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(1));
        drop(inbox);
        let e = out
            .execute(Command::Show, Instant::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("stopped"), "{e}");
    }

    #[test]
    fn the_socket_answers_refuses_long_lines_and_is_removed_on_drop() {
        let dir = netsched_testbed::TempDir::new("vswctl").unwrap();
        let path = dir.path().join("ctl.sock");
        let (out, inbox) = channel();
        let server = ControlServer::start(&path, None, out).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        // A packet thread stand-in answering every command.
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let pt = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match inbox.take() {
                    Some(e) => {
                        let a = match &e.command {
                            Command::Show => Answer::Stats(Box::default()),
                            Command::SetTier { port, .. } => {
                                Answer::Refused(format!("no port {port:?}"))
                            }
                            Command::SetWeight { .. } => Answer::Done("weight set".into()),
                        };
                        e.answer(a);
                    }
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let json = request(&path, "show-ports --json").unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v["ports"].is_array(), "{json}");
        assert_eq!(request(&path, "set-weight x 2").unwrap(), "weight set\n");
        let e = request(&path, "set-tier nope 2").unwrap_err().to_string();
        assert_eq!(e, "no port \"nope\"");
        let e = request(&path, &"x".repeat(MAX_REQUEST + 10))
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than 4096"), "{e}");
        // A client that sends nothing gets the deadline error, not a hang.
        let t = Instant::now();
        let mut s = UnixStream::connect(&path).unwrap();
        let mut answer = String::new();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("error: no complete request line"),
            "{answer}"
        );
        assert!(t.elapsed() < DEADLINE + Duration::from_secs(2));
        // A second server on the live socket is refused by name.
        let (out2, _in2) = channel();
        let e = ControlServer::start(&path, None, out2)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("in use"), "{e}");
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        stop.store(true, Ordering::Relaxed);
        pt.join().unwrap();
    }

    #[test]
    fn a_path_that_is_not_a_socket_is_never_removed() {
        let dir = netsched_testbed::TempDir::new("vswctl").unwrap();
        let path = dir.path().join("plain");
        std::fs::write(&path, "keep me").unwrap();
        let (out, _inbox) = channel();
        let e = ControlServer::start(&path, None, out)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
    }
}
