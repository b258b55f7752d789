//! Running `tc` and `ip` for `netsched shape`: where (an interface, optionally inside a named
//! network namespace), with bounded output, and `tc -batch` errors that name the failing line.

use super::tc_error::TcError;
use std::io::Read;
use std::process::{Command, Stdio};

/// Most bytes read from one `tc`/`ip` command's output (a snapshot of a device with hundreds of
/// filters is ~1 MiB of JSON).
const MAX_OUTPUT: u64 = 16 << 20;

/// Where commands run: an interface, optionally inside a named network namespace.
#[derive(Debug, Clone)]
pub struct Target {
    pub netns: Option<String>,
    pub dev: String,
}

/// What `ip -d -j link show` says of one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkInfo {
    pub ifindex: u32,
    /// `linkinfo.info_kind`: `ifb`, `veth`, ... (empty for physical devices).
    pub kind: String,
    pub up: bool,
}

impl Target {
    pub fn local(dev: &str) -> Self {
        Self {
            netns: None,
            dev: dev.to_string(),
        }
    }
    pub fn in_netns(ns: &str, dev: &str) -> Self {
        Self {
            netns: Some(ns.to_string()),
            dev: dev.to_string(),
        }
    }

    /// The same namespace, another device.
    pub fn with_dev(&self, dev: &str) -> Self {
        Self {
            netns: self.netns.clone(),
            dev: dev.to_string(),
        }
    }

    /// " in network namespace NS" or "".
    pub fn ns_suffix(&self) -> String {
        self.netns
            .as_ref()
            .map(|n| format!(" in network namespace {n}"))
            .unwrap_or_default()
    }

    fn command(&self, prog: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, prog]);
                c
            }
            None => Command::new(prog),
        }
    }

    /// Run `prog args`, with `stdin` fed if given; Err carries tc's/ip's message.
    pub fn run(&self, prog: &str, args: &[&str], stdin: Option<&str>) -> Result<String, TcError> {
        use std::io::Write;
        let io = |doing: String| move |source| TcError::Io { doing, source };
        let mut c = self.command(prog);
        c.args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        let mut child = c.spawn().map_err(|source| TcError::Spawn {
            prog: prog.to_string(),
            source,
        })?;
        if let Some(input) = stdin {
            let mut si = child.stdin.take().expect("piped stdin");
            si.write_all(input.as_bytes())
                .map_err(io(format!("writing to `{prog}`")))?;
        }
        // stderr is read on its own thread so neither pipe can fill and block the child.
        let mut err = child.stderr.take().expect("piped stderr");
        let err_reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = (&mut err).take(MAX_OUTPUT).read_to_end(&mut s);
            s
        });
        let mut out = Vec::new();
        child
            .stdout
            .take()
            .expect("piped stdout")
            .take(MAX_OUTPUT + 1)
            .read_to_end(&mut out)
            .map_err(io(format!("reading the output of `{prog}`")))?;
        let command = || format!("{prog} {}", args.join(" "));
        if out.len() as u64 > MAX_OUTPUT {
            // It may be blocked writing the rest: end it (our own child) before waiting.
            let _ = child.kill();
            let _ = child.wait();
            let _ = err_reader.join();
            return Err(TcError::TooMuchOutput {
                command: command(),
                max: MAX_OUTPUT,
            });
        }
        let status = child.wait().map_err(io(format!("waiting for `{prog}`")))?;
        let err = err_reader.join().unwrap_or_default();
        if !status.success() {
            return Err(TcError::Failed {
                command: command(),
                stderr: String::from_utf8_lossy(&err).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// `ip -d -j link show dev DEV`, or None if there is no such interface.
    pub fn link(&self, dev: &str) -> Result<Option<LinkInfo>, TcError> {
        let command = || format!("ip -d -j link show dev {dev}");
        let out = match self.run("ip", &["-d", "-j", "link", "show", "dev", dev], None) {
            Ok(o) => o,
            Err(TcError::Failed { stderr, .. })
                if stderr.contains("does not exist") || stderr.contains("Cannot find device") =>
            {
                return Ok(None);
            }
            Err(e) => {
                return Err(TcError::Command {
                    command: command(),
                    source: Box::new(e),
                })
            }
        };
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).map_err(|source| TcError::Json {
                command: command(),
                source,
            })?;
        let Some(l) = v.as_array().and_then(|a| a.first()) else {
            return Ok(None);
        };
        Ok(Some(LinkInfo {
            ifindex: l.get("ifindex").and_then(|i| i.as_u64()).unwrap_or(0) as u32,
            kind: l
                .get("linkinfo")
                .and_then(|i| i.get("info_kind"))
                .and_then(|k| k.as_str())
                .unwrap_or("")
                .to_string(),
            up: l
                .get("flags")
                .and_then(|f| f.as_array())
                .is_some_and(|f| f.iter().any(|x| x.as_str() == Some("UP"))),
        }))
    }

    pub fn link_exists(&self, dev: &str) -> bool {
        matches!(self.link(dev), Ok(Some(_)))
    }

    /// `tc -j [-s] qdisc show dev DEV` as JSON values.
    pub fn qdisc_json(&self, dev: &str, stats: bool) -> Result<Vec<serde_json::Value>, TcError> {
        let mut args = vec!["-j"];
        if stats {
            args.push("-s");
        }
        args.extend(["qdisc", "show", "dev", dev]);
        self.json(&args)
    }

    /// Run `tc ARGS` and parse its JSON array (empty output is an empty array).
    pub fn json(&self, args: &[&str]) -> Result<Vec<serde_json::Value>, TcError> {
        let command = || format!("tc {}", args.join(" "));
        let out = self.run("tc", args, None).map_err(|e| TcError::Command {
            command: command(),
            source: Box::new(e),
        })?;
        if out.trim().is_empty() {
            return Ok(Vec::new());
        }
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).map_err(|source| TcError::Json {
                command: command(),
                source,
            })?;
        Ok(v.as_array().cloned().unwrap_or_default())
    }

    /// Run batch lines; Err names the failing line and tc's message.
    pub fn batch(&self, lines: &[String]) -> Result<(), TcError> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut input = lines.join("\n");
        input.push('\n');
        let e = match self.run("tc", &["-batch", "-"], Some(&input)) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if let TcError::Failed { stderr, .. } = &e {
            // tc -batch reports "Command failed -:N" (1-based line of the batch).
            let failed = stderr
                .lines()
                .find_map(|l| l.strip_prefix("Command failed -:"))
                .and_then(|n| n.trim().parse::<usize>().ok());
            if let Some(line) = failed.and_then(|n| lines.get(n.wrapping_sub(1))) {
                let reason: Vec<&str> = stderr
                    .lines()
                    .filter(|l| !l.starts_with("Command failed"))
                    .collect();
                return Err(TcError::BatchLine {
                    line: line.clone(),
                    reason: reason.join("; "),
                });
            }
        }
        Err(TcError::Batch(Box::new(e)))
    }

    /// The identity of this target's network namespace: its cookie (see
    /// [`netsched_sys::socket::netns_cookie`]; never reused) and its nsfs inode number (reused once the
    /// namespace is gone, but cheap to check for liveness).
    pub fn netns_id(&self) -> Result<(u64, u64), TcError> {
        fn here() -> Result<(u64, u64), TcError> {
            use std::os::unix::fs::MetadataExt;
            let cookie =
                netsched_sys::socket::netns_cookie().map_err(|source| TcError::NetnsId {
                    what: "SO_NETNS_COOKIE",
                    source,
                })?;
            const NS: &str = "/proc/thread-self/ns/net";
            let ino = std::fs::metadata(NS)
                .map_err(|source| TcError::NetnsId { what: NS, source })?
                .ino();
            Ok((cookie, ino))
        }
        match &self.netns {
            None => here(),
            Some(ns) => {
                let ns = ns.clone();
                // setns affects only the calling thread: do it on a short-lived one.
                std::thread::spawn(move || -> Result<(u64, u64), TcError> {
                    netsched_testbed::enter_netns(&ns)
                        .map_err(|e| TcError::Netns(format!("{e:#}")))?;
                    here()
                })
                .join()
                .map_err(|_| TcError::Netns("the namespace-identity thread panicked".into()))?
            }
        }
    }
}
