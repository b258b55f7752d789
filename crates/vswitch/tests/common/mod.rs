//! A switch namespace, an external host on the uplink and N guest namespaces, all owned by a
//! `Testbed` (removed on drop, also after a failed assertion).

#![allow(dead_code)]

use anyhow::Result;
use netsched_sys::port::Port;
use netsched_testbed::Testbed;
use netsched_vswitch::SwitchConfig;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const EXT_IP: &str = "10.77.0.254";

pub struct Net {
    pub tb: Testbed,
    pub sw: String,
    pub ext: String,
    pub uplink: String,
    /// (namespace, switch-side port, guest IP)
    pub guests: Vec<(String, String, String)>,
}

/// `n` guests on veth pairs into namespace `sw`, and `ext` (10.77.0.254) on the uplink.
pub fn build(label: &str, n: usize) -> Result<Net> {
    let mut tb = Testbed::new(label)?;
    let sw = tb.add_ns("sw")?;
    let ext = tb.add_ns("ext")?;
    let uplink = tb.ifname("up");
    tb.veth(
        (&sw, &uplink, ""),
        (&ext, &tb.ifname("ue"), &format!("{EXT_IP}/24")),
    )?;
    let mut guests = Vec::new();
    for i in 0..n {
        let g = tb.add_ns(&format!("g{i}"))?;
        let port = tb.ifname(&format!("p{i}"));
        let ip = format!("10.77.0.{}", i + 1);
        tb.veth(
            (&sw, &port, ""),
            (&g, &tb.ifname(&format!("e{i}")), &format!("{ip}/24")),
        )?;
        guests.push((g, port, ip));
    }
    Ok(Net {
        tb,
        sw,
        ext,
        uplink,
        guests,
    })
}

impl Net {
    /// A configuration with the given discipline, budget and `(tier, bound)` per guest.
    pub fn config(&self, discipline: &str, extra: &str, tiers: &[(u32, &str)]) -> SwitchConfig {
        let mut t = format!(
            "uplink = \"{}\"\ndiscipline = \"{discipline}\"\n{extra}\n",
            self.uplink
        );
        for (i, (_, port, _)) in self.guests.iter().enumerate() {
            let (tier, bound) = tiers[i % tiers.len()];
            t += &format!("[[port]]\ndev = \"{port}\"\ntier = {tier}\nbound = \"{bound}\"\n");
        }
        SwitchConfig::parse(&t, "test.toml").expect("test configuration")
    }
}

/// `ping` from namespace `ns`: (transmitted, received).
pub fn ping(ns: &str, dst: &str, count: u32, interval: &str) -> (u32, u32) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-n", "-q", "-c"])
        .arg(count.to_string())
        .args(["-i", interval, "-W", "3", dst])
        .stdin(Stdio::null())
        .output()
        .expect("ping runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no ping summary: {text}"));
    let nums: Vec<u32> = line
        .split(',')
        .filter_map(|p| p.split_whitespace().next()?.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// A thread in namespace `ns` sending raw frames on `dev` at about `pps` until stopped:
/// `len`-byte frames from MAC 02:00:00:00:00:99 to `dst`, EtherType 0x88b5 (local
/// experimental). Returns the stop flag and the thread (frames sent).
pub fn flooder(
    ns: &str,
    dev: &str,
    dst: [u8; 6],
    len: usize,
    pps: u64,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let (ns, dev) = (ns.to_string(), dev.to_string());
    let t = std::thread::spawn(move || {
        netsched_testbed::enter_netns(&ns).expect("enter guest namespace");
        let port = Port::open(&dev).expect("flooder port");
        let mut frame = vec![0u8; len];
        frame[..6].copy_from_slice(&dst);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        let mut sent = 0u64;
        let per_ms = (pps / 1000).max(1);
        while !stop2.load(Ordering::Relaxed) {
            for _ in 0..per_ms {
                if send_raw(&port, &frame) {
                    sent += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sent
    });
    (stop, t)
}

/// One frame out of `port` (a plain `send` on its socket).
fn send_raw(port: &Port, frame: &[u8]) -> bool {
    port.send_frame(frame).is_ok_and(|r| r == frame.len())
}

/// Asserts no namespace of this testbed is left.
pub fn assert_gone(tag: &str) {
    let left = netsched_testbed::namespaces_with(tag);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// A switch on its own thread in namespace `ns`, with `attach` called on it once its ports are
/// open (control inbox, metrics). Stopping (or dropping) joins it.
pub struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<netsched_vswitch::SwitchStats>>>,
}

impl Running {
    pub fn stop(mut self) -> Result<netsched_vswitch::SwitchStats> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("running")
            .join()
            .map_err(|_| anyhow::anyhow!("the switch thread panicked"))?
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn spawn_switch(
    ns: &str,
    cfg: SwitchConfig,
    attach: impl FnOnce(&mut netsched_vswitch::Switch) + Send + 'static,
) -> Result<Running> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<(), String>>();
    let ns = ns.to_string();
    let thread = std::thread::spawn(move || {
        let opened = netsched_testbed::enter_netns(&ns)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(netsched_vswitch::Switch::open(&cfg, None)?));
        let mut sw = match opened {
            Ok(s) => s,
            Err(e) => {
                let _ = ready_tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        attach(&mut sw);
        let _ = ready_tx.send(Ok(()));
        Ok(sw.run(&|| stop2.load(Ordering::Relaxed), None, None)?)
    });
    let running = Running {
        stop,
        thread: Some(thread),
    };
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(running),
        Ok(Err(e)) => Err(anyhow::anyhow!(e)),
        Err(_) => Err(anyhow::anyhow!(
            "the switch thread ended before it was ready"
        )),
    }
}
