//! sender → filter → receiver in three namespaces of one `Testbed` (removed on drop, also
//! after a failed assertion). The sender writes crafted UDP frames with an AF_PACKET port
//! (flow id and per-flow sequence number in the payload); the receiver reads them with
//! another, so the test knows exactly what was sent and what arrived, in which order.

#![allow(dead_code)]

use anyhow::Result;
use netsched_filter::engine::EngineConfig;
use netsched_filter::packet::udp4_frame;
use netsched_filter::pipeline::DispatchMode;
use netsched_filter::rig::RigSpec;
use netsched_sys::port::{FramePool, Port, Rx, BATCH};
use netsched_testbed::NetnsThread;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const MAGIC: &[u8; 4] = b"NSF1";
/// Flows of the test stream; flow 7 goes to UDP port 9 (the drop rule's).
pub const FLOWS: u8 = 8;

pub use netsched_filter::rig::Net;

/// The rule set of most tests: drop UDP to port 9 (flow 7's), accept the rest.
pub const DROP_PORT_9: &str = "[[rule]]\naction = \"drop\"\nproto = \"udp\"\ndport = \"9\"\n";

/// `rules` (TOML) on TupleMerge, with a signature that never occurs in the test stream, as
/// generation `generation`.
pub fn tables(rules: &str, generation: u64) -> Arc<netsched_filter::work::Tables> {
    use netsched_filter::classifier::build_classifier;
    use netsched_filter::rules::RuleSet;
    Arc::new(netsched_filter::work::Tables {
        classifier: build_classifier(
            RuleSet::from_toml_str(rules, "test rules").unwrap(),
            netsched_core::classify::acl::ClassifierKind::TupleMerge,
            &Default::default(),
        )
        .unwrap(),
        signatures: netsched_filter::signatures::Signatures::parse(
            "NEVER-IN-THE-TEST-STREAM\n",
            "test sigs",
        )
        .unwrap(),
        generation,
    })
}

/// snd 10.99.0.1/24 ── filter ── 10.99.0.2/24 rcv.
pub fn build(label: &str) -> Result<Net> {
    netsched_filter::rig::build(RigSpec {
        label,
        snd_addr: "10.99.0.1/24",
        rcv_addr: "10.99.0.2/24",
        ipv6_off: false,
    })
}

/// The filter under `mode`: 4 workers, 4096 frames held, a window that holds them all.
pub fn config(net: &Net, mode: &str) -> EngineConfig {
    net.engine_config(4, DispatchMode::parse(mode).unwrap(), 4096, 16384)
}

/// Test frame `seq` of `flow` with `size` payload bytes (≥ 9).
pub fn frame(flow: u8, seq: u32, size: usize) -> Vec<u8> {
    let mut payload = vec![b'.'; size.max(9)];
    payload[..4].copy_from_slice(MAGIC);
    payload[4] = flow;
    payload[5..9].copy_from_slice(&seq.to_be_bytes());
    let dport = if flow == 7 { 9 } else { 2000 + flow as u16 };
    udp4_frame(
        [10, 99, 0, 1],
        [10, 99, 0, 2],
        1000 + flow as u16,
        dport,
        &payload,
    )
}

/// (flow, seq) of a test frame.
pub fn tag(f: &[u8]) -> Option<(u8, u32)> {
    let at = f.windows(4).position(|w| w == MAGIC)?;
    let b = f.get(at + 4..at + 9)?;
    Some((b[0], u32::from_be_bytes([b[1], b[2], b[3], b[4]])))
}

/// Send `frames` from namespace `ns` on `dev`, `burst` at a time with a pause between bursts.
pub fn send(
    ns: &str,
    dev: &str,
    frames: Vec<Vec<u8>>,
    burst: usize,
    pause: Duration,
) -> Result<()> {
    let (ns, dev) = (ns.to_string(), dev.to_string());
    std::thread::spawn(move || -> Result<()> {
        netsched_testbed::enter_netns(&ns)?;
        let port = Port::open(&dev)?;
        for chunk in frames.chunks(burst) {
            for f in chunk {
                let mut tries = 0;
                while port.send_frame(f).is_err() && tries < 100 {
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            std::thread::sleep(pause);
        }
        Ok(())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("sender panicked"))?
}

/// What the receiver saw: test frames in arrival order, and its kernel drops.
pub type Received = (Vec<(u8, u32)>, u64);

/// A running receiver and how many test frames it has seen so far.
pub struct Receiver {
    pub thread: NetnsThread<Received>,
    pub seen: Arc<AtomicU64>,
}

impl Receiver {
    /// Wait until `want` test frames arrived, or none arrived for `quiet` (the filter may
    /// still be working through a backlog on a loaded machine: progress keeps the wait going).
    pub fn wait_for(&self, want: u64, quiet: Duration) {
        let mut last = self.seen.load(Ordering::Relaxed);
        let mut since = std::time::Instant::now();
        while last < want && since.elapsed() < quiet {
            std::thread::sleep(Duration::from_millis(20));
            let now = self.seen.load(Ordering::Relaxed);
            if now != last {
                last = now;
                since = std::time::Instant::now();
            }
        }
    }

    pub fn stop(self) -> Result<Received> {
        self.thread.stop()
    }
}

/// Read test frames in namespace `ns` on `dev` until stopped.
pub fn receiver(ns: &str, dev: &str) -> Result<Receiver> {
    let dev = dev.to_string();
    let seen = Arc::new(AtomicU64::new(0));
    let seen2 = seen.clone();
    let thread = NetnsThread::spawn(
        "receiver",
        format!("rcv-{ns}"),
        ns,
        move || Ok(Port::open(&dev)?),
        move |port, stop| {
            let mut pool = FramePool::new(256);
            let mut ev = [Rx::Oversize { len: 0 }; BATCH];
            let mut got = Vec::new();
            let mut drops = 0;
            while !stop() {
                let (_, n) = port.recv(&mut pool, &mut ev);
                for e in &ev[..n] {
                    if let Rx::Frame { slot, len } = *e {
                        if let Some(t) = tag(pool.data(slot, len)) {
                            got.push(t);
                            seen2.fetch_add(1, Ordering::Relaxed);
                        }
                        pool.release(slot);
                    }
                }
                drops += port.take_kernel_drops();
                if n == 0 {
                    let _ = netsched_sys::epoll::poll_in(&[(port.raw_fd(), true)], 5_000_000);
                }
            }
            Ok((got, drops))
        },
    )?;
    Ok(Receiver { thread, seen })
}

/// The test stream: `per_flow` frames of each flow, interleaved, sizes cycling through P1's
/// 64/256/512/1500-byte packets (payload sizes so the frames are those lengths).
pub fn stream(per_flow: u32) -> Vec<Vec<u8>> {
    let sizes = [64usize - 42, 256 - 42, 512 - 42, 1500 - 42];
    let mut out = Vec::new();
    for seq in 0..per_flow {
        for flow in 0..FLOWS {
            out.push(frame(flow, seq, sizes[(seq as usize + flow as usize) % 4]));
        }
    }
    out
}

/// Check the receiver's frames: no duplicates, each flow strictly in sequence order, no frame
/// of the dropped flow 7. Returns frames per flow.
pub fn check_order(got: &[(u8, u32)]) -> HashMap<u8, u32> {
    let mut last: HashMap<u8, u32> = HashMap::new();
    let mut count: HashMap<u8, u32> = HashMap::new();
    for &(flow, seq) in got {
        assert_ne!(flow, 7, "a frame of the dropped flow arrived (seq {seq})");
        if let Some(&prev) = last.get(&flow) {
            assert!(seq > prev, "flow {flow}: seq {seq} arrived after {prev}");
        }
        last.insert(flow, seq);
        *count.entry(flow).or_default() += 1;
    }
    count
}

pub fn assert_gone(tag: &str) {
    let left = netsched_testbed::namespaces_with(tag);
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// `netsched-filterd filter` as a process in the rig's filter namespace, on its two ports,
/// with a control socket, its stdout and stderr in files of a private folder (files, not
/// pipes: a full pipe would stall the filter). Killed on drop if still running.
pub struct FilterProcess {
    pub child: std::process::Child,
    pub sock: std::path::PathBuf,
    dir: netsched_testbed::TempDir,
}

impl FilterProcess {
    /// Start it with the TOML `rules` and the further arguments `args`; waits (≤ 20 s) for
    /// its control socket.
    pub fn start(net: &Net, label: &str, rules: &[u8], args: &[&str]) -> Result<FilterProcess> {
        let dir = netsched_testbed::TempDir::new(label)?;
        let rules = dir.create_file("rules.toml", rules)?;
        let sock = dir.path().join("f.sock");
        let mut all: Vec<std::ffi::OsString> = ["--input", &net.fin, "--output", &net.fout]
            .iter()
            .map(Into::into)
            .collect();
        all.extend(["--rules".into(), rules.into_os_string()]);
        all.extend(args.iter().map(Into::into));
        Self::spawn(net, dir, sock, all)
    }

    /// Start it from a configuration file `config.toml` in its folder: the interfaces, the
    /// control socket and `rules = "rules.toml"` (written from `rules`), then `extra` keys.
    pub fn start_with_config(
        net: &Net,
        label: &str,
        rules: &[u8],
        extra: &str,
    ) -> Result<FilterProcess> {
        let dir = netsched_testbed::TempDir::new(label)?;
        dir.create_file("rules.toml", rules)?;
        let sock = dir.path().join("f.sock");
        let config = dir.create_file(
            "config.toml",
            Self::config_text(net, &sock, extra).as_bytes(),
        )?;
        Self::spawn(
            net,
            dir,
            sock,
            vec!["--config".into(), config.into_os_string()],
        )
    }

    /// The text of a configuration file as [`FilterProcess::start_with_config`] writes it.
    pub fn config_text(net: &Net, sock: &std::path::Path, extra: &str) -> String {
        format!(
            "input = \"{}\"\noutput = \"{}\"\nrules = \"rules.toml\"\ncontrol_socket = \"{}\"\n{extra}\n",
            net.fin,
            net.fout,
            sock.display()
        )
    }

    fn spawn(
        net: &Net,
        dir: netsched_testbed::TempDir,
        sock: std::path::PathBuf,
        args: Vec<std::ffi::OsString>,
    ) -> Result<FilterProcess> {
        let out = std::fs::File::create(dir.path().join("stdout"))?;
        let err = std::fs::File::create(dir.path().join("stderr"))?;
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", &net.flt])
            .arg(env!("CARGO_BIN_EXE_netsched-filterd"))
            .arg("filter");
        if !args.iter().any(|a| a == "--config") {
            cmd.arg("--control-socket").arg(&sock);
        }
        let child = cmd
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        let mut p = FilterProcess { child, sock, dir };
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while !p.sock.exists() {
            if std::time::Instant::now() > until || p.child.try_wait()?.is_some() {
                anyhow::bail!(
                    "the filter did not open its control socket:\n{}",
                    p.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(p)
    }

    /// The folder of its files (rules, configuration, output).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// SIGTERM, then wait up to `limit`: the exit status (`None`: still running) and how long
    /// it took.
    pub fn terminate(&mut self, limit: Duration) -> (Option<std::process::ExitStatus>, Duration) {
        let sent = std::time::Instant::now();
        let st = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        assert!(st.is_ok_and(|s| s.success()), "kill -TERM");
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return (Some(s), sent.elapsed());
            }
            if sent.elapsed() > limit {
                return (None, sent.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The rule file it was started with (rewrite it, then `reload` or SIGHUP).
    pub fn rules_file(&self) -> std::path::PathBuf {
        self.dir.path().join("rules.toml")
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }
}

impl Drop for FilterProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Frames of `stream(per_flow)` sent from namespace `ns` on `dev` in a loop, as fast as the
/// port takes them, until the returned flag is set; the thread returns how many were sent.
pub fn flood(
    ns: &str,
    dev: &str,
    per_flow: u32,
) -> (
    Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<Result<u64>>,
) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ns, dev, flag) = (ns.to_string(), dev.to_string(), stop.clone());
    let h = std::thread::spawn(move || -> Result<u64> {
        netsched_testbed::enter_netns(&ns)?;
        let port = Port::open(&dev)?;
        let frames = stream(per_flow);
        let mut sent = 0u64;
        while !flag.load(Ordering::Relaxed) {
            for f in &frames {
                if port.send_frame(f).is_ok() {
                    sent += 1;
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        Ok(sent)
    });
    (stop, h)
}
