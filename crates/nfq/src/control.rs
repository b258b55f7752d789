//! The control protocol: the thesis's ioctl API (P0 §3.2.5, Table 9: `perStart`, `perStop`,
//! `perReset`, `perGetStatus`, `perSetPvalue`, `perSetNvalue`, `perAddIP`, `perDeleteIP`)
//! carried as one JSON line per request over a Unix stream socket.
//!
//! Request: `{"cmd":"set_percentile","class":"c0","p":90}\n`; answer:
//! `{"ok":true,"message":"..."}` or `{"ok":false,"error":"..."}`, with `"status"` for
//! `status`. One request per connection.
//!
//! Access: the socket file is mode 0660, owned by root and by the configured group; on each
//! connection the peer's credentials (`SO_PEERCRED`) are checked again: root, the daemon's own
//! user, or a member (primary or supplementary, from `/proc/<pid>/status`) of the group.

use crate::config::{parse_cidr, parse_deadline, resolve_class};
use crate::engine::{Engine, Status};
use anyhow::{anyhow, bail, Context, Result};
use netsched_core::Nanos;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Start,
    Stop,
    Reset,
    Status,
    SetPercentile {
        class: String,
        p: i64,
    },
    /// A duration ("4ms") or "auto".
    SetDeadline {
        deadline: String,
    },
    /// A number ≥ 1, or "off".
    SetBudget {
        budget: String,
    },
    AddIp {
        cidr: String,
        class: String,
    },
    DelIp {
        cidr: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<Status>>,
}

impl Response {
    fn ok(msg: impl Into<String>) -> Self {
        Response {
            ok: true,
            message: Some(msg.into()),
            error: None,
            status: None,
        }
    }
    pub fn err(msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            message: None,
            error: Some(msg.into()),
            status: None,
        }
    }
}

pub fn parse_budget(s: &str) -> Result<Option<usize>> {
    match s.trim() {
        "off" | "none" => Ok(None),
        t => {
            let n: usize = t
                .parse()
                .map_err(|_| anyhow!("budget {s:?}: expected a number ≥ 1 or \"off\""))?;
            if n == 0 {
                bail!("budget 0: must be at least 1 (use \"off\" for no budget)");
            }
            Ok(Some(n))
        }
    }
}

/// Apply a request to the engine. Packets it releases go to `accept`. `status_extra` lets the
/// daemon add socket-level counters to a status answer.
pub fn handle(
    engine: &mut Engine,
    req: &Request,
    now: Nanos,
    accept: &mut Vec<u32>,
    status_extra: &dyn Fn(&mut Status),
) -> Response {
    match apply(engine, req, now, accept) {
        Ok(r) => {
            if let Some(mut st) = r.status {
                status_extra(&mut st);
                return Response {
                    status: Some(st),
                    ..r
                };
            }
            r
        }
        Err(e) => Response::err(format!("{e:#}")),
    }
}

fn apply(
    engine: &mut Engine,
    req: &Request,
    now: Nanos,
    accept: &mut Vec<u32>,
) -> Result<Response> {
    Ok(match req {
        Request::Start => {
            engine.start();
            Response::ok("started: requests are scheduled")
        }
        Request::Stop => {
            let before = accept.len();
            engine.stop(accept);
            Response::ok(format!(
                "stopped: {} held packets released in arrival order; everything now passes",
                accept.len() - before
            ))
        }
        Request::Reset => {
            engine.reset();
            Response::ok("address table and counters cleared")
        }
        Request::Status => Response {
            ok: true,
            message: None,
            error: None,
            status: Some(Box::new(engine.status())),
        },
        Request::SetPercentile { class, p } => {
            let k = resolve_class(&engine.cfg.classes, class)?;
            engine.set_percentile(k, *p)?;
            Response::ok(format!(
                "class {} percentile = {p}",
                engine.cfg.classes[k].name
            ))
        }
        Request::SetDeadline { deadline } => {
            let d = parse_deadline(deadline)?;
            engine.set_deadline(d)?;
            Response::ok(format!("deadline = {deadline}"))
        }
        Request::SetBudget { budget } => {
            let b = parse_budget(budget)?;
            engine.set_budget(b, now, accept);
            Response::ok(match b {
                Some(n) => format!("budget = {n} requests inside the server"),
                None => "budget off: nothing is held".into(),
            })
        }
        Request::AddIp { cidr, class } => {
            let c = parse_cidr(cidr)?;
            let k = resolve_class(&engine.cfg.classes, class)?;
            engine.add_ip(c, k)?;
            Response::ok(format!("{c} -> {}", engine.cfg.classes[k].name))
        }
        Request::DelIp { cidr } => {
            let c = parse_cidr(cidr)?;
            engine.del_ip(c)?;
            Response::ok(format!("{c} removed"))
        }
    })
}

/// The listening side, owned by the daemon.
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
    group_gid: Option<u32>,
}

fn group_gid(name: &str) -> Result<u32> {
    if let Ok(g) = name.parse::<u32>() {
        return Ok(g);
    }
    let text = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    for line in text.lines() {
        let mut it = line.split(':');
        if it.next() == Some(name) {
            if let Some(gid) = it.nth(1).and_then(|g| g.parse().ok()) {
                return Ok(gid);
            }
        }
    }
    bail!("control_group {name:?}: no such group in /etc/group")
}

impl ControlServer {
    /// Bind `path` (a stale socket file from a killed daemon is replaced; a live one is an
    /// error), mode 0660, group `group`.
    pub fn bind(path: &Path, group: Option<&str>) -> Result<Self> {
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!(
                    "control socket {} is in use: is another netsched nfq running?",
                    path.display()
                );
            }
            std::fs::remove_file(path)
                .with_context(|| format!("removing stale socket {}", path.display()))?;
        }
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
        }
        let listener = UnixListener::bind(path)
            .with_context(|| format!("binding control socket {}", path.display()))?;
        listener.set_nonblocking(true)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
        let gid = match group {
            Some(g) => {
                let gid = group_gid(g)?;
                std::os::unix::fs::chown(path, None, Some(gid))
                    .with_context(|| format!("chown {} to group {g}", path.display()))?;
                Some(gid)
            }
            None => None,
        };
        Ok(ControlServer {
            listener,
            path: path.to_path_buf(),
            group_gid: gid,
        })
    }

    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.listener.as_raw_fd()
    }

    /// Serve every pending connection (non-blocking accept; each connection gets 200 ms to
    /// send its line). `serve` turns a request into a response.
    pub fn poll(&self, mut serve: impl FnMut(Request) -> Response) {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = self.serve_one(stream, &mut serve);
        }
    }

    fn serve_one(
        &self,
        mut stream: UnixStream,
        serve: &mut impl FnMut(Request) -> Response,
    ) -> Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        stream.set_write_timeout(Some(Duration::from_millis(200)))?;
        let resp = match self.allowed(&stream) {
            Err(e) => Response::err(format!("permission denied: {e}")),
            Ok(()) => {
                let mut line = String::new();
                let mut r = BufReader::new(&stream).take(64 * 1024);
                r.read_line(&mut line)?;
                match serde_json::from_str::<Request>(line.trim()) {
                    Ok(req) => serve(req),
                    Err(e) => Response::err(format!("bad request {:?}: {e}", line.trim())),
                }
            }
        };
        let mut text = serde_json::to_string(&resp)?;
        text.push('\n');
        stream.write_all(text.as_bytes())?;
        Ok(())
    }

    fn allowed(&self, stream: &UnixStream) -> Result<()> {
        let cred = peer_cred(stream)?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if cred.uid == 0 || cred.uid == me {
            return Ok(());
        }
        if let Some(g) = self.group_gid {
            if cred.gid == g || supplementary_groups(cred.pid).contains(&g) {
                return Ok(());
            }
        }
        bail!(
            "uid {} is neither root nor in the control group{}",
            cred.uid,
            if self.group_gid.is_none() {
                " (none configured)"
            } else {
                ""
            }
        )
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn peer_cred(stream: &UnixStream) -> Result<libc::ucred> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: pointer and length describe a live ucred.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc < 0 {
        bail!("SO_PEERCRED: {}", std::io::Error::last_os_error());
    }
    Ok(cred)
}

fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Client side: send one request, wait for the answer.
pub fn request(path: &Path, req: &Request) -> Result<Response> {
    let mut s = UnixStream::connect(path).with_context(|| {
        format!(
            "cannot connect to {} (is `netsched nfq` running? root or the control group?)",
            path.display()
        )
    })?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut text = serde_json::to_string(req)?;
    text.push('\n');
    s.write_all(text.as_bytes())?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    serde_json::from_str(line.trim())
        .map_err(|e| anyhow!("bad answer from the daemon {:?}: {e}", line.trim()))
}

use std::io::Read;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClassSpec, Config, Deadline, DisciplineKind};
    use crate::netlink::{NF_INET_LOCAL_IN, NF_INET_LOCAL_OUT};
    use crate::packet::build_ipv4_tcp;
    use std::net::Ipv4Addr;

    fn engine(budget: Option<usize>) -> Engine {
        let mut c = Config {
            discipline: DisciplineKind::Percentile,
            budget,
            deadline: Deadline::Fixed(4_000_000),
            ..Config::default()
        };
        for (i, p) in [90u32, 80, 50].iter().enumerate() {
            c.classes.push(ClassSpec {
                name: format!("c{i}"),
                percentile: *p,
            });
        }
        c.default_class = 2;
        Engine::new(c).unwrap()
    }

    fn call(e: &mut Engine, json: &str) -> (Response, Vec<u32>) {
        let req: Request = serde_json::from_str(json).expect(json);
        let mut acc = Vec::new();
        let r = handle(e, &req, 0, &mut acc, &|_| {});
        (r, acc)
    }

    fn req_pkt(last: u8, port: u16) -> Vec<u8> {
        build_ipv4_tcp(
            Ipv4Addr::new(10, 0, 0, last),
            Ipv4Addr::new(10, 9, 0, 1),
            port,
            80,
            0x18,
            50,
        )
    }

    #[test]
    fn control_status_reports_every_class_and_the_table() {
        let mut e = engine(Some(2));
        let (r, _) = call(
            &mut e,
            r#"{"cmd":"add_ip","cidr":"10.0.0.0/24","class":"c0"}"#,
        );
        assert!(r.ok, "{r:?}");
        let (r, _) = call(&mut e, r#"{"cmd":"status"}"#);
        let st = r.status.unwrap();
        assert_eq!(st.classes.len(), 3);
        assert_eq!(st.budget, Some(2));
        assert_eq!(st.deadline_ns, 4_000_000);
        assert_eq!(
            st.table,
            vec![("10.0.0.0/24".to_string(), "c0".to_string())]
        );
        // JSON round trip of the whole answer.
        let back: Response = serde_json::from_str(
            &serde_json::to_string(&Response {
                status: Some(st.clone()),
                ..Response::ok("x")
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(*back.status.unwrap(), *st);
    }

    #[test]
    fn control_set_percentile_deadline_budget_take_effect() {
        let mut e = engine(Some(1));
        assert!(
            call(&mut e, r#"{"cmd":"set_percentile","class":"c1","p":70}"#)
                .0
                .ok
        );
        assert_eq!(e.status().classes[1].percentile, 70);
        assert!(
            call(&mut e, r#"{"cmd":"set_percentile","class":"2","p":60}"#)
                .0
                .ok
        );
        assert_eq!(e.status().classes[2].percentile, 60);
        assert!(
            call(&mut e, r#"{"cmd":"set_deadline","deadline":"7ms"}"#)
                .0
                .ok
        );
        assert_eq!(e.deadline(), 7_000_000);
        assert!(
            call(&mut e, r#"{"cmd":"set_deadline","deadline":"auto"}"#)
                .0
                .ok
        );
        assert!(e.status().deadline_auto);
        assert_eq!(e.status().deadline_mode, "auto");
        assert!(
            call(
                &mut e,
                r#"{"cmd":"set_deadline","deadline":"auto-quantile"}"#
            )
            .0
            .ok
        );
        let st = e.status();
        assert_eq!(st.deadline_mode, "auto-quantile");
        assert!(st.deadline_quantile.is_some());
        // Budget 1: the second request waits; raising the budget releases it at once.
        let mut acc = Vec::new();
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        assert_eq!(acc, vec![1]);
        let (r, rel) = call(&mut e, r#"{"cmd":"set_budget","budget":"2"}"#);
        assert!(r.ok);
        assert_eq!(rel, vec![2]);
        let (r, _) = call(&mut e, r#"{"cmd":"set_budget","budget":"off"}"#);
        assert!(r.ok);
        assert_eq!(e.status().budget, None);
    }

    #[test]
    fn control_bad_arguments_give_clear_errors() {
        let mut e = engine(None);
        let cases = [
            (r#"{"cmd":"set_percentile","class":"c9","p":70}"#, "c9"),
            (r#"{"cmd":"set_percentile","class":"c0","p":170}"#, "170"),
            (r#"{"cmd":"set_deadline","deadline":"soon"}"#, "soon"),
            (
                r#"{"cmd":"set_deadline","deadline":"auto-q"}"#,
                "auto-quantile",
            ),
            (r#"{"cmd":"set_budget","budget":"0"}"#, "budget 0"),
            (r#"{"cmd":"set_budget","budget":"x"}"#, "\"x\""),
            (
                r#"{"cmd":"add_ip","cidr":"10.0.0.0/33","class":"c0"}"#,
                "33",
            ),
            (
                r#"{"cmd":"add_ip","cidr":"10.0.0.0/8","class":"gold"}"#,
                "gold",
            ),
            (
                r#"{"cmd":"del_ip","cidr":"10.0.0.0/8"}"#,
                "not in the address table",
            ),
        ];
        for (json, needle) in cases {
            let (r, _) = call(&mut e, json);
            assert!(!r.ok, "{json}");
            let msg = r.error.unwrap();
            assert!(msg.contains(needle), "{json}: {msg}");
        }
    }

    #[test]
    fn control_stop_start_reset() {
        let mut e = engine(Some(1));
        let mut acc = Vec::new();
        call(&mut e, r#"{"cmd":"add_ip","cidr":"10.0.0.1","class":"c0"}"#);
        e.on_packet(1, NF_INET_LOCAL_IN, &req_pkt(1, 1000), 0, &mut acc);
        e.on_packet(2, NF_INET_LOCAL_IN, &req_pkt(2, 1000), 0, &mut acc);
        e.on_packet(3, NF_INET_LOCAL_IN, &req_pkt(3, 1000), 0, &mut acc);
        let (r, rel) = call(&mut e, r#"{"cmd":"stop"}"#);
        assert!(r.ok && !e.is_running());
        assert_eq!(rel, vec![2, 3]);
        assert!(call(&mut e, r#"{"cmd":"start"}"#).0.ok);
        assert!(e.is_running());
        let st = e.status();
        assert_eq!(st.classes[0].n, 1);
        assert!(call(&mut e, r#"{"cmd":"reset"}"#).0.ok);
        let st = e.status();
        assert_eq!(st.classes[0].n, 0);
        assert!(st.table.is_empty());
        // A response after reset must not panic or underflow.
        e.on_packet(
            4,
            NF_INET_LOCAL_OUT,
            &build_ipv4_tcp(
                Ipv4Addr::new(10, 9, 0, 1),
                Ipv4Addr::new(10, 0, 0, 1),
                80,
                1000,
                0x18,
                10,
            ),
            1,
            &mut acc,
        );
    }

    #[test]
    fn control_socket_round_trip_and_unknown_command() {
        let dir = std::env::temp_dir().join(format!("nfqctl-{}", std::process::id()));
        let path = dir.join("ctl.sock");
        let server = ControlServer::bind(&path, None).unwrap();
        // A second daemon on the same socket is refused.
        assert!(ControlServer::bind(&path, None).is_err());
        let mut e = engine(None);
        let p2 = path.clone();
        let client = std::thread::spawn(move || {
            let a = request(&p2, &Request::Status).unwrap();
            let mut s = UnixStream::connect(&p2).unwrap();
            s.write_all(b"{\"cmd\":\"explode\"}\n").unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            (a, line)
        });
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !client.is_finished() && std::time::Instant::now() < until {
            server.poll(|req| {
                let mut acc = Vec::new();
                handle(&mut e, &req, 0, &mut acc, &|_| {})
            });
            std::thread::sleep(Duration::from_millis(5));
        }
        let (a, line) = client.join().unwrap();
        assert!(a.ok && a.status.is_some());
        assert!(
            line.contains("\"ok\":false") && line.contains("explode"),
            "{line}"
        );
        drop(server);
        assert!(!path.exists(), "socket file removed on drop");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
