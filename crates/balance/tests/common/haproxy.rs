//! Debian's HAProxy (`/usr/sbin/haproxy`) as a test peer: started in the foreground (`-db`)
//! with a configuration of the test's, on frontend addresses picked free on loopback, killed
//! by pid when dropped (netsched_testbed's `Process`). A test without HAProxy installed gets
//! the reason instead and skips.

use netsched_testbed::{Process, TempDir};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub const HAPROXY: &str = "/usr/sbin/haproxy";

/// A running HAProxy and its frontend addresses, in the order the configuration got them.
pub struct Haproxy {
    _proc: Process,
    _dir: TempDir,
    pub frontends: Vec<SocketAddr>,
}

/// `n` distinct free loopback addresses: all bound at once (so none is handed out twice), then
/// released for HAProxy to bind.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter().map(|l| l.local_addr().unwrap()).collect()
}

/// HAProxy with the configuration `config` gives for `n` frontend addresses (bound in order),
/// ready once the last one accepts; or why not.
pub async fn start(n: usize, config: impl Fn(&[SocketAddr]) -> String) -> Result<Haproxy, String> {
    if !Path::new(HAPROXY).exists() {
        return Err(format!("{HAPROXY} is not installed"));
    }
    let dir = TempDir::new("bal-haproxy").map_err(|e| e.to_string())?;
    // The frontend ports are picked free and released before HAProxy binds them: another
    // process may take one meanwhile, then HAProxy fails to start and is tried once more.
    let mut why = String::new();
    for _ in 0..2 {
        let frontends = free_addrs(n);
        let cfg = dir
            .create_file("haproxy.cfg", config(&frontends).as_bytes())
            .map_err(|e| e.to_string())?;
        let err = std::fs::File::create(dir.path().join("stderr")).map_err(|e| e.to_string())?;
        let mut cmd = std::process::Command::new(HAPROXY);
        cmd.arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(err);
        let mut p = Process::start(cmd, "haproxy").map_err(|e| e.to_string())?;
        let until = Instant::now() + Duration::from_secs(10);
        let last = *frontends.last().ok_or("no frontend asked for")?;
        while p.running() && Instant::now() < until {
            if TcpStream::connect(last).await.is_ok() {
                return Ok(Haproxy {
                    _proc: p,
                    _dir: dir,
                    frontends,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        why = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    }
    Err(format!("haproxy did not start: {}", why.trim()))
}
