//! Wiring: bind listeners, the control socket and `/metrics`, start the data path, health
//! checks and control tasks; reload on SIGHUP; shut down cleanly on SIGINT/SIGTERM.

use crate::config::{Config, Mode, Relay};
use crate::control::{self, ControlSocket, CtlArgs};
use crate::metrics::Metrics;
use crate::service::Service;
use crate::{health, l4, l7};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

/// `netsched balance`: an L4/L7 load balancer running the core's balancers.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BalanceArgs {
    /// Configuration file (TOML; see docs/balance.md).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Validate the configuration and exit.
    #[arg(long)]
    pub check: bool,
    #[command(subcommand)]
    pub cmd: Option<BalanceCmd>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BalanceCmd {
    /// Talk to a running balancer over its control socket.
    Ctl(CtlArgs),
    /// Open-loop HTTP/1.1 load at a fixed rate; latency from when each request was due.
    Load(crate::load::LoadArgs),
}

/// A running balancer. Dropping it stops every task and removes the control socket.
pub struct Running {
    pub listen: Vec<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub service: Arc<Service>,
    pub control_socket: PathBuf,
    config_path: PathBuf,
    mode: Mode,
    listen_cfg: Vec<SocketAddr>,
    relay: Relay,
    threads: usize,
    tasks: Vec<JoinHandle<()>>,
    _control: Arc<ControlSocket>,
    _metrics: Option<netsched_metrics::MetricsServer>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Running {
    /// Re-read the configuration file and apply it; on error the old configuration stays.
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let cfg = Config::load(&self.config_path).map_err(|e| e.to_string())?;
        let mut notes = Vec::new();
        if cfg.mode != self.mode
            || cfg.listen != self.listen_cfg
            || cfg.relay != self.relay
            || cfg.threads != self.threads
        {
            notes.push(
                "mode, listen, relay and threads changes need a restart; kept the old ones"
                    .to_string(),
            );
        }
        notes.extend(
            self.service
                .reload(&cfg)
                .map_err(|e| format!("{}: {e}", self.config_path.display()))?,
        );
        Ok(notes)
    }
}

/// Start everything on the current tokio runtime.
pub async fn start(cfg: Config, config_path: &Path) -> Result<Running, String> {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Metrics::new(&mut registry);
    let service = Service::new(&cfg, metrics)?;
    let mut listeners = Vec::new();
    for a in &cfg.listen {
        let l = TcpListener::bind(a)
            .await
            .map_err(|e| format!("listen {a}: {e}"))?;
        listeners.push(l);
    }
    let listen = listeners
        .iter()
        .map(|l| l.local_addr().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let control = Arc::new(ControlSocket::bind(
        &cfg.control_socket,
        cfg.control_group.as_deref(),
    )?);
    let metrics_server = match cfg.admin {
        Some(a) => Some(
            netsched_metrics::serve(a, Arc::new(Mutex::new(registry)))
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let conns = Arc::new(Semaphore::new(cfg.max_connections));
    let mut tasks = Vec::new();
    for l in listeners {
        tasks.push(match cfg.mode {
            Mode::L4 => tokio::spawn(l4::serve(l, service.clone(), conns.clone(), cfg.relay)),
            Mode::L7 => tokio::spawn(l7::serve(l, service.clone(), conns.clone(), cfg.hash_key)),
        });
    }
    tasks.push(tokio::spawn(health::run(service.clone())));
    tasks.push(tokio::spawn(control::serve(
        control.clone(),
        service.clone(),
    )));
    // Slow-start ramps need a tick even when no work arrives (weights are exported); idle L7
    // backend connections past their timeout are closed on the same tick.
    let s2 = service.clone();
    tasks.push(tokio::spawn(async move {
        let mut t = tokio::time::interval(Duration::from_millis(250));
        loop {
            t.tick().await;
            s2.refresh();
            s2.sweep_idle();
        }
    }));
    Ok(Running {
        listen,
        admin: metrics_server.as_ref().map(|m| m.addr()),
        service,
        control_socket: cfg.control_socket.clone(),
        config_path: config_path.to_path_buf(),
        mode: cfg.mode,
        listen_cfg: cfg.listen.clone(),
        relay: cfg.relay,
        threads: cfg.threads,
        tasks,
        _control: control,
        _metrics: metrics_server,
    })
}

pub fn run(args: BalanceArgs) -> anyhow::Result<()> {
    match &args.cmd {
        Some(BalanceCmd::Ctl(c)) => return control::run_ctl(c),
        Some(BalanceCmd::Load(l)) => return crate::load::run(l),
        None => {}
    }
    let Some(path) = args.config.clone() else {
        anyhow::bail!(
            "netsched balance: --config FILE is required (or `netsched balance ctl ...`)"
        );
    };
    let cfg = Config::load(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.check {
        cfg.check_host()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        println!(
            "{}: ok ({:?}, {}, {} servers)",
            path.display(),
            cfg.mode,
            cfg.algorithm.name(),
            cfg.servers.len()
        );
        return Ok(());
    }
    // Two sockets per connection, plus pipes while bytes are in flight (splice relay); when
    // descriptors run out, accept waits (the backlog holds clients), a backend connect fails
    // with 502 / a closed connection counted `errors{reason="connect"}`, and splice copies.
    let nofile = crate::sys::raise_nofile_limit().unwrap_or(0);
    let need = cfg.max_connections as u64 * 2 + 64;
    if nofile < need {
        eprintln!(
            "netsched balance: warning: the open-file limit ({nofile}) is below the {need} \
             descriptors max_connections = {} may need (two sockets per connection)",
            cfg.max_connections
        );
    }
    let threads = match cfg.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // One thread: a current-thread runtime (no work stealing, no cross-thread wake-ups), the
    // fair match for HAProxy's `nbthread 1` on a pinned core. `available_parallelism` follows
    // the affinity mask, so `taskset -c 0 netsched balance` gets this by default.
    let rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let running = start(cfg, &path).await.map_err(|e| anyhow::anyhow!(e))?;
        eprintln!(
            "netsched balance: listening on {:?}, control {}{}",
            running.listen,
            running.control_socket.display(),
            running
                .admin
                .map(|a| format!(", metrics http://{a}/metrics"))
                .unwrap_or_default()
        );
        loop {
            tokio::select! {
                _ = hup.recv() => match running.reload() {
                    Ok(notes) => eprintln!("netsched balance: reloaded {}: {}", path.display(), notes.join("; ")),
                    Err(e) => eprintln!("netsched balance: reload failed, keeping the old configuration: {e}"),
                },
                _ = int.recv() => break,
                _ = term.recv() => break,
            }
        }
        eprintln!("netsched balance: shutting down");
        drop(running);
        Ok::<_, anyhow::Error>(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
