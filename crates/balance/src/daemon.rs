//! Wiring: bind listeners, the control socket and `/metrics`, start the data path, health
//! checks and control tasks; reload on SIGHUP; stop gracefully on SIGTERM/SIGINT (bounded by
//! `timeouts.hard_stop_after`; a second one cuts at once), SIGUSR1 or `ctl soft-stop` (no
//! deadline), stop.rs.
//!
//! Listeners set `SO_REUSEPORT` (and `SO_REUSEADDR`), so a new balancer binds the same
//! addresses while the old one runs, and `start new; SIGTERM old` restarts without refusing
//! a connection: Linux spreads new connections over every listener of the group (same
//! effective uid only, socket(7)), and the old one empties its accept queue before it closes.

use crate::config::{Config, Mode};
use crate::config_error::StartError;
use crate::control::{self, ControlServer, CtlArgs};
use crate::metrics::Metrics;
use crate::service::Service;
use crate::stop::{Phase, Stop, StopReport};
use crate::{health, l4, l7};
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{Notify, Semaphore};
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
    mode: Mode,
    tasks: Vec<JoinHandle<()>>,
    /// The accept loops; they end once the stop has begun and their listeners are closed.
    accept_tasks: Mutex<Vec<JoinHandle<()>>>,
    stop: Stop,
    /// `ctl soft-stop` asks the daemon's loop to stop.
    soft_stop: Arc<Notify>,
    conns: Arc<Semaphore>,
    max_connections: usize,
    /// SIGHUP's and `ctl reload`'s reload.
    reloader: Arc<crate::reload::Reloader>,
    _control: ControlServer,
    _metrics: Arc<Mutex<Option<netsched_metrics::MetricsServer>>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        for t in self
            .accept_tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            t.abort();
        }
    }
}

impl Running {
    /// Re-read the configuration file and apply it; on error the old configuration stays
    /// (reload.rs).
    pub fn reload(&self) -> Result<Vec<String>, StartError> {
        self.reloader.reload()
    }

    /// Begin the stop: listeners close (after their accept queues are emptied), idle L7
    /// connections close, the rest go on (stop.rs). Idempotent.
    pub fn begin_stop(&self) {
        self.stop.advance(Phase::Draining);
    }

    /// Close every connection still open (the deadline).
    pub fn cut(&self) {
        self.stop.advance(Phase::Cut);
    }

    pub fn phase(&self) -> Phase {
        self.stop.phase()
    }

    /// Resolves when `ctl soft-stop` has asked for a stop.
    pub async fn soft_stop_requested(&self) {
        self.soft_stop.notified().await
    }

    /// After [`Running::begin_stop`]: wait until the listeners are closed and every client
    /// connection has ended (on its own or cut).
    pub async fn drained(&self) -> StopReport {
        let accepting: Vec<JoinHandle<()>> =
            std::mem::take(&mut *self.accept_tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for t in accepting {
            let _ = t.await;
        }
        // Every connection holds a permit until it ends; all of them back = none left. (Only
        // now: a waiting `acquire_many` takes the permits that come back, so no new
        // connection could be admitted meanwhile.)
        if let Ok(p) = self.conns.acquire_many(self.max_connections as u32).await {
            p.forget();
            self.conns.add_permits(self.max_connections);
        }
        self.stop.report()
    }

    /// Stop gracefully: begin, wait for the work in flight up to `grace` (none: no deadline),
    /// then cut what is left.
    pub async fn stop(&self, grace: Option<Duration>) -> StopReport {
        self.begin_stop();
        let drained = self.drained();
        tokio::pin!(drained);
        match grace {
            None => drained.await,
            Some(g) => {
                tokio::select! {
                    r = &mut drained => return r,
                    _ = tokio::time::sleep(g) => {}
                }
                self.cut();
                drained.await
            }
        }
    }

    /// `timeouts.hard_stop_after` of the configuration in force.
    pub fn hard_stop_after(&self) -> Duration {
        Duration::from_nanos(self.service.runtime().timeouts.hard_stop_after)
    }
}

/// A listening socket with `SO_REUSEPORT` when its port is given: another balancer may bind
/// the same address while this one runs (a restart), and Linux spreads new connections over
/// both. Port 0 (any free port) gets no `SO_REUSEPORT`: no successor could name that port,
/// so sharing it would serve nothing.
///
/// The listen backlog asked for is `max_connections`, as HAProxy's `backlog` defaults to the
/// frontend's `maxconn` (configuration manual, `backlog`); the kernel caps it at
/// `net.core.somaxconn` (4096 by default since Linux 5.4). A burst of connects larger than the
/// backlog has SYNs dropped and sent again a second later.
fn bind_listener(a: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let s = if a.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.set_reuseport(a.port() != 0)?;
    s.bind(a)?;
    s.listen(backlog)
}

/// Start everything on the current tokio runtime.
pub async fn start(cfg: Config, config_path: &Path) -> Result<Running, StartError> {
    let mut registry = prometheus_client::registry::Registry::default();
    netsched_metrics::register_daemon(
        &mut registry,
        "balance",
        netsched_util::logging::dropped_lines,
    );
    netsched_metrics::register_control_audit(
        &mut registry,
        netsched_control::audit::refused_requests,
        netsched_control::audit::suppressed_warnings,
    );
    let metrics = Metrics::new(&mut registry);
    let log_counters = crate::access_log::LogCounters::register(&mut registry);
    let service = Service::new(&cfg, metrics)?;
    if let Some(v) = &cfg.access_log {
        let refused = |why: String| StartError::AccessLog {
            file: config_path.to_path_buf(),
            why,
        };
        let target = crate::access_log::Target::parse(v).map_err(refused)?;
        let log = crate::access_log::AccessLog::start(&target, log_counters).map_err(refused)?;
        let _ = service.access.set(Arc::new(log));
        tracing::info!(access_log = %v, "access log on: {v}");
    }
    let tls = match &cfg.tls {
        Some(conf) => {
            let certs = crate::tls::Certificates::load(conf).map_err(|source| StartError::Tls {
                file: config_path.to_path_buf(),
                source,
            })?;
            tracing::info!("TLS on every listener: {} certificates", certs.len());
            Some(Arc::new(certs))
        }
        None => None,
    };
    let mut listeners = Vec::new();
    for a in &cfg.listen {
        let l = bind_listener(*a, cfg.max_connections as u32)
            .map_err(|source| StartError::Listen { addr: *a, source })?;
        listeners.push(l);
    }
    let listen = listeners
        .iter()
        .zip(&cfg.listen)
        .map(|(l, a)| {
            l.local_addr()
                .map_err(|source| StartError::Listen { addr: *a, source })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // `/metrics` has one listener (no SO_REUSEPORT: a scrape must reach one process). While
    // a balancer being replaced still holds the address, the new one serves it once it is
    // free (checked every 100 ms).
    let registry = Arc::new(Mutex::new(registry));
    let metrics_server = Arc::new(Mutex::new(None));
    let mut admin_later = None;
    if let Some(a) = cfg.admin {
        match netsched_metrics::serve_with_page(a, registry.clone(), Some(crate::status::PAGE)) {
            Ok(m) => *metrics_server.lock().unwrap_or_else(|p| p.into_inner()) = Some(m),
            Err(netsched_metrics::MetricsError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                tracing::warn!(
                    admin = %a,
                    "admin address in use (by the balancer being replaced?): /metrics is served \
                     there once it is free"
                );
                admin_later = Some(a);
            }
            Err(e) => return Err(StartError::Metrics(e)),
        }
    }
    let admin = metrics_server
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|m: &netsched_metrics::MetricsServer| m.addr());
    let conns = Arc::new(Semaphore::new(cfg.max_connections));
    let stop = Stop::new(service.metrics.clone());
    let soft_stop = Arc::new(Notify::new());
    let reloader = Arc::new(crate::reload::Reloader::new(
        &cfg,
        config_path,
        service.clone(),
        tls.clone(),
    ));
    let control = ControlServer::start(
        &cfg.control_socket,
        cfg.control_group.as_deref(),
        service.clone(),
        soft_stop.clone(),
        reloader.clone(),
    )
    .map_err(StartError::Control)?;
    let mut accept_tasks = Vec::new();
    for l in listeners {
        let (svc, c, st) = (service.clone(), conns.clone(), stop.clone());
        accept_tasks.push(match cfg.mode {
            Mode::L4 => tokio::spawn(l4::serve(l, svc, c, cfg.relay, st)),
            Mode::L7 => tokio::spawn(l7::serve(l, svc, c, cfg.hash_key, tls.clone(), st)),
        });
    }
    let mut tasks = Vec::new();
    if let Some(a) = admin_later {
        let (holder, registry) = (metrics_server.clone(), registry.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if let Ok(m) = netsched_metrics::serve_with_page(
                    a,
                    registry.clone(),
                    Some(crate::status::PAGE),
                ) {
                    *holder.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
                    tracing::info!(admin = %a, "/metrics now served on http://{a}/metrics");
                    return;
                }
            }
        }));
    }
    tasks.push(tokio::spawn(health::run(service.clone())));
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
        admin,
        service,
        control_socket: cfg.control_socket.clone(),
        mode: cfg.mode,
        tasks,
        accept_tasks: Mutex::new(accept_tasks),
        stop,
        soft_stop,
        conns,
        max_connections: cfg.max_connections,
        reloader,
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
        // Certificates and keys are read and checked against each other as at start.
        let tls = match &cfg.tls {
            Some(conf) => {
                let certs = crate::tls::Certificates::load(conf)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                format!(
                    ", {} TLS certificates{}",
                    certs.len(),
                    certs.client_auth().note()
                )
            }
            None => String::new(),
        };
        println!(
            "{}: ok ({:?}, {}, {} servers{tls})",
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
        tracing::warn!(
            nofile,
            need,
            "the open-file limit ({nofile}) is below the {need} descriptors max_client_connections = {} \
             may need (two sockets per connection)",
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
        let mut usr1 = signal(SignalKind::user_defined1())?;
        let running = start(cfg, &path).await.map_err(|e| anyhow::anyhow!(e))?;
        tracing::info!(
            mode = ?running.mode,
            "listening on {:?}, control {}{}",
            running.listen,
            running.control_socket.display(),
            running
                .admin
                .map(|a| format!(", metrics http://{a}/metrics"))
                .unwrap_or_default()
        );
        netsched_util::notify::ready("netsched balance", "listening");
        // Set once the stop has begun; `deadline` once it is bounded (SIGTERM/SIGINT).
        let mut started: Option<tokio::time::Instant> = None;
        let mut deadline: Option<tokio::time::Instant> = None;
        let report = {
        let drained = running.drained();
        tokio::pin!(drained);
        loop {
            // A stop without a deadline waits forever; the branch below is then disabled.
            let cut_at = deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            let terminate = tokio::select! {
                _ = hup.recv() => {
                    netsched_util::notify::reloading("netsched balance");
                    let reloaded = running.reload();
                    netsched_util::notify::ready("netsched balance", "listening");
                    match reloaded {
                        Ok(notes) => tracing::info!(by = "SIGHUP", "reloaded {}: {}", path.display(), notes.join("; ")),
                        Err(e) => tracing::error!(by = "SIGHUP", "reload failed, keeping the old configuration: {e}"),
                    }
                    continue;
                }
                _ = int.recv() => true,
                _ = term.recv() => true,
                _ = usr1.recv() => false,
                _ = running.soft_stop_requested() => false,
                _ = tokio::time::sleep_until(cut_at), if deadline.is_some() && running.phase() < Phase::Cut => {
                    tracing::warn!("hard_stop_after reached: closing the connections left");
                    running.cut();
                    continue;
                }
                r = &mut drained, if started.is_some() => break r,
            };
            let open = running.service.metrics.client_connections.get();
            match (started, deadline, terminate) {
                (None, _, _) => {
                    started = Some(tokio::time::Instant::now());
                    netsched_util::notify::stopping("netsched balance");
                    running.begin_stop();
                    let until = if terminate {
                        let grace = running.hard_stop_after();
                        deadline = Some(tokio::time::Instant::now() + grace);
                        format!("up to {:.1} s (hard_stop_after)", grace.as_secs_f64())
                    } else {
                        "with no deadline".to_string()
                    };
                    tracing::info!(signal = if terminate { "SIGTERM/SIGINT" } else { "SIGUSR1/ctl" }, "stopping: listeners closed, {open} connections open, waiting {until}");
                }
                // A soft stop turned into a bounded one.
                (Some(_), None, true) => {
                    let grace = running.hard_stop_after();
                    deadline = Some(tokio::time::Instant::now() + grace);
                    tracing::info!("stopping: {open} connections open, waiting up to {:.1} s (hard_stop_after)", grace.as_secs_f64());
                }
                // Asked twice to terminate: cut now.
                (Some(_), Some(_), true) => {
                    tracing::warn!("asked again to stop: closing the {open} connections left");
                    running.cut();
                }
                (Some(_), _, false) => {}
            }
        }
        };
        let took = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        tracing::info!(
            "stopped in {took:.2} s: {} connections finished, {} cut ({} taken from the accept queues)",
            report.finished, report.cut, report.from_queue
        );
        drop(running);
        Ok::<_, anyhow::Error>(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
