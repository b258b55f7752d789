//! The shared state of one balancer: the core's `ServerTable` and `AnyBalancer`, the backends'
//! admin and health state, the maxconn queue, and the operations the data path, the health
//! checker, the control socket and reload apply to it.
//!
//! Accounting (IPVS, `ip_vs_conn.c` `ip_vs_bind_dest`/`ip_vs_unbind_dest` and the TCP state
//! table in `ip_vs_proto_tcp.c`): a [`Lease`] counts *active* from the moment a backend is
//! chosen, *inactive* once one direction has closed (L4), and leaves the table when dropped.
//! The counters live in the table, apart from the selector, so a balancer rebuild (algorithm
//! reload, add/del server, weight change) never loses them — unlike pingora-load-balancing's
//! selection, which rebuilds its least-connections state on every backend update.
//!
//! maxconn uses the table's IPVS thresholds: a server at `maxconn` is flagged overloaded
//! (upper = lower = maxconn), so every balancer skips it; when the balancer finds no server
//! and some usable server is only full, the work waits in one bounded queue (HAProxy's backend
//! queue, configuration manual §5.2 `maxconn` and §4 `timeout queue`) until a slot frees or
//! its class's queue timeout expires. The queue (`queue.rs`) lives under the same lock as the
//! table: a freed slot (a lease dropped, a server added or back) is handed at once, under
//! that lock, to the waiter the discipline (FIFO, strict priority, percentile) chooses, so no
//! newcomer can take it first. A waiter whose key picks no server with a slot (a hashing
//! balancer whose server is full) holds the head until its server frees one; newcomers may
//! use slots it cannot.
//!
//! SNI routes (L4 `route = "sni"`, docs/balance.md "SNI routing"): the servers listing the
//! same names form a route with its own `ServerTable` and `AnyBalancer`, so a connection's
//! pick runs over its route's servers only and each server's counts live in its route's table;
//! the servers listing none form the default route, which is the only one without SNI routing
//! (every look-up then goes straight to it). The routes share the queue; a waiter keeps its
//! server name and is matched to a route when a slot is offered to it.
//!
//! The lock is a `std::sync::Mutex` held only for table arithmetic, never across an await.

use crate::classes::{ClassSet, Classifier};
use crate::config::{
    check_backend_addr, check_name, Config, Defaults, Health, ServerConf, Timeouts, MAX_SERVERS,
};
use crate::config_error::StartError;
use crate::metrics::Metrics;
use crate::pool::ConnPool;
use crate::queue::{QueueRefusal, RequestQueue};
use crate::server_error::{ReloadError, ServerError};
use netsched_core::balance::{
    AnyBalancer, Balancer, BalancerConfig, FlowKey, ServerId, ServerTable,
};
use netsched_core::qdisc::ClassId;
use netsched_core::rng::SplitMix64;
use netsched_core::Nanos;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Operator state of a server (HAProxy runtime API `set server <b>/<s> state ready|drain|maint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Admin {
    Ready,
    /// No new work; established connections and in-flight requests finish.
    Drain,
    /// Out of rotation for maintenance; health checks paused; established work finishes.
    Maint,
}

impl Admin {
    /// The state's name, as `ctl` and `/metrics` write it.
    pub fn name(self) -> &'static str {
        match self {
            Admin::Ready => "ready",
            Admin::Drain => "drain",
            Admin::Maint => "maint",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Backend {
    pub id: ServerId,
    pub name: String,
    pub addr: SocketAddr,
    /// Configured (or set-weight) weight.
    pub weight: u32,
    /// 0 = unlimited.
    pub maxconn: u32,
    pub admin: Admin,
    pub up: bool,
    /// Consecutive check successes while down / failures while up.
    pub streak: u32,
    /// When the server last became usable (for slow start).
    pub since: Option<Instant>,
    pub effective: u32,
    pub last_check: Option<String>,
    /// What every lease of this server shares (made once per add).
    pub shared: Arc<BackendRef>,
    /// Index of its route in `Inner::routes` (0: the default route).
    pub route: usize,
    /// Its `sni` list as a route key (sorted patterns; empty: the default route).
    pub sni: Vec<crate::sni::Pattern>,
}

/// What the data path needs of a chosen backend, made once when the server is added and shared
/// by its leases: its name and address, its metric series (a label look-up in a
/// prometheus-client family hashes the label and takes a lock — once per server here, not
/// several times per request), and its idle keep-alive connections (L7).
#[derive(Debug)]
pub struct BackendRef {
    pub name: String,
    pub addr: SocketAddr,
    pub requests: Counter,
    /// Its L7 responses by status class (`metrics::CODES`).
    pub responses: crate::metrics::Responses,
    pub active: Gauge,
    pub inactive: Gauge,
    pub response_seconds: Histogram,
    /// `Host` for a request that came without one (as hyper-util's client set it).
    pub host: hyper::header::HeaderValue,
    /// The PROXY protocol header sent first on each of its connections (`proxy_proto.rs`);
    /// in L7 its connections then carry one request each (`l7.rs`).
    pub send_proxy: Option<crate::config::SendProxy>,
    pub conns: ConnPool,
}

impl BackendRef {
    fn new(
        name: &str,
        addr: SocketAddr,
        send_proxy: Option<crate::config::SendProxy>,
        m: &Metrics,
    ) -> Self {
        let l = Metrics::backend(name);
        BackendRef {
            name: name.to_string(),
            addr,
            requests: m.requests.get_or_create(&l).clone(),
            responses: m.responses_of(name),
            active: m.active.get_or_create(&l).clone(),
            inactive: m.inactive.get_or_create(&l).clone(),
            response_seconds: m.response_seconds.get_or_create(&l).clone(),
            host: host_header(addr),
            send_proxy,
            conns: ConnPool::default(),
        }
    }
}

/// Settings the data path reads per connection; swapped whole on reload.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub timeouts: Timeouts,
    /// L7: which requests may take an idle pooled backend connection (`l7.rs`).
    pub http_reuse: crate::config::HttpReuse,
    /// L7: which headers carry the client's address (`forwarded.rs`).
    pub forwarded: crate::config::Forwarded,
    /// Networks whose connections start with a PROXY protocol header (`proxy_proto.rs`).
    pub accept_proxy: crate::config::AcceptProxy,
    pub defaults: Defaults,
    pub health: Option<Health>,
    /// L4: whether a connection's TLS server name picks its servers.
    pub route: crate::config::Route,
}

impl Runtime {
    fn of(cfg: &Config) -> Runtime {
        Runtime {
            timeouts: cfg.timeouts.clone(),
            http_reuse: cfg.http_reuse,
            forwarded: cfg.forwarded,
            accept_proxy: cfg.accept_proxy.clone(),
            defaults: cfg.defaults.clone(),
            health: cfg.health.clone(),
            route: cfg.route,
        }
    }
}

/// The servers of one SNI route, with a balancer of their own: the core's algorithms pick
/// over a whole table, so each route is one (a server is in exactly one, where its counts
/// live). Without SNI routing there is one route, the default, holding every server.
struct RouteTable {
    /// The names it serves (sorted; empty: the default route).
    key: Vec<crate::sni::Pattern>,
    table: ServerTable,
    balancer: AnyBalancer,
}

/// The balancer seed, the same for every route and every rebuild.
const SEED: u64 = 0x6e65_7473_6368_6564;

pub struct Inner {
    /// `routes[0]` is the default route, always there; the others are removed when their
    /// last server goes.
    routes: Vec<RouteTable>,
    /// Name pattern → index in `routes`.
    names: crate::sni::Names<usize>,
    algorithm: BalancerConfig,
    backends: BTreeMap<ServerId, Backend>,
    next_id: u32,
    queue: RequestQueue<Lease>,
    classifier: Classifier,
    pub runtime: Arc<Runtime>,
}

/// Why work was refused before reaching a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No server is usable (all down, drained, in maintenance, or none configured).
    NoServer,
    /// Every usable server is at maxconn and the queue is full.
    QueueFull,
    /// Waited its class's queue timeout (`timeouts.queue` by default) without a slot.
    QueueTimeout,
    /// A reload rebuilt the classes or the queue discipline while it waited.
    Reload,
    /// SNI routing: no server lists the name and none is in the default route.
    NoRoute,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::NoServer => "no_server",
            Refusal::QueueFull => "queue_full",
            Refusal::QueueTimeout => "queue_timeout",
            Refusal::Reload => "reload",
            Refusal::NoRoute => "sni_no_route",
        }
    }
}

pub struct Service {
    inner: Mutex<Inner>,
    /// This service, for the leases handed out when a slot frees.
    me: Weak<Service>,
    /// Wakes the health supervisor when servers are added.
    pub servers_changed: Notify,
    pub metrics: Metrics,
    /// The access log, when `access_log` is set (started once, by the daemon).
    pub access: std::sync::OnceLock<Arc<crate::access_log::AccessLog>>,
    epoch: Instant,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A chosen backend, counted in the table until dropped.
pub struct Lease {
    svc: Arc<Service>,
    pub id: ServerId,
    pub backend: Arc<BackendRef>,
    /// The settings in force when the backend was chosen.
    pub runtime: Arc<Runtime>,
    inactive: bool,
    /// The request's class (index, the classes' generation) until its outcome is counted.
    class: Option<(ClassId, u64)>,
    /// Its response time once [`complete`](Lease::complete) has recorded it (`None`: a
    /// failure). Counted when the lease drops, under the lock the drop takes anyway.
    outcome: Option<Option<Duration>>,
}

impl Lease {
    /// The request's response head went to the client after `latency` (`Some`), or it
    /// failed at the backend (`None`): judged against its class's deadline when the lease
    /// drops (the first outcome recorded counts); a lease dropped without an outcome counts
    /// as a failure.
    pub fn complete(&mut self, latency: Option<Duration>) {
        if self.outcome.is_none() {
            self.outcome = Some(latency);
        }
    }

    /// The balancer's metric families (for errors found while the lease's work runs).
    pub fn metrics(&self) -> &Metrics {
        &self.svc.metrics
    }

    /// One direction has closed (L4 half-close): active -> inactive.
    pub fn set_inactive(&mut self) {
        if self.inactive {
            return;
        }
        self.inactive = true;
        let mut g = lock(&self.svc.inner);
        if let Some(t) = g.table_mut(self.id) {
            let _ = t.on_inactive(self.id);
        }
        sync_gauges(&g, self.id, &self.backend);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let now = self.svc.now_ns();
        let unsent = {
            let mut g = lock(&self.svc.inner);
            if let Some((class, generation)) = self.class.take() {
                // A request begun before a reload that rebuilt the classes is not counted in
                // the new ones.
                if g.queue.generation() == generation {
                    let latency = self.outcome.flatten().map(|d| d.as_nanos() as Nanos);
                    g.queue.complete(class, latency, now);
                }
            }
            // A server deleted while this lease lived is gone from the table: nothing to count.
            if let Some(t) = g.table_mut(self.id) {
                let _ = if self.inactive {
                    t.on_inactive_close(self.id)
                } else {
                    t.on_close(self.id)
                };
            }
            sync_gauges(&g, self.id, &self.backend);
            // The freed slot goes to the next waiter at once, under this lock.
            if g.queue.is_empty() {
                Vec::new()
            } else {
                self.svc.dispatch(&mut g, now)
            }
        };
        drop(unsent);
    }
}

/// A request waiting for a slot: however its wait ends (a lease, its timeout, its client
/// leaving — the future dropped), it is counted once, under the lock.
struct Waiting<'a> {
    svc: &'a Service,
    rx: Option<tokio::sync::oneshot::Receiver<Lease>>,
    class: ClassId,
    generation: u64,
    since: Nanos,
}

impl Waiting<'_> {
    /// Stop waiting: the lease if one was handed meanwhile, else counted as `why`.
    fn end(&mut self, why: QueueRefusal) -> Result<Lease, Refusal> {
        let Some(mut rx) = self.rx.take() else {
            return Err(Refusal::QueueTimeout);
        };
        let now = self.svc.now_ns();
        let mut g = lock(&self.svc.inner);
        match rx.try_recv() {
            Ok(lease) => Ok(lease),
            Err(e) => {
                use tokio::sync::oneshot::error::TryRecvError;
                let reloaded = g.queue.generation() != self.generation;
                let why = match e {
                    // Released by a reload that rebuilt the classes (counted there).
                    _ if reloaded => QueueRefusal::Reload,
                    // Released: no usable server any more.
                    TryRecvError::Closed => QueueRefusal::NoServer,
                    TryRecvError::Empty => why,
                };
                if !reloaded {
                    g.queue.give_up(self.class, self.since, why, now);
                }
                rx.close();
                drop(g);
                Err(match why {
                    QueueRefusal::NoServer => Refusal::NoServer,
                    QueueRefusal::Reload => Refusal::Reload,
                    _ => Refusal::QueueTimeout,
                })
            }
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.rx.is_some() {
            // The client left while waiting (a lease handed meanwhile is dropped, freeing
            // its slot for the next waiter).
            let _ = self.end(QueueRefusal::ClientGone);
        }
    }
}

/// One row of `show-servers`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerView {
    pub name: String,
    pub addr: String,
    pub weight: u32,
    pub effective_weight: u32,
    pub maxconn: u32,
    pub admin: Admin,
    pub health: &'static str,
    pub active: u32,
    pub inactive: u32,
    pub last_check: Option<String>,
}

impl Service {
    pub fn new(cfg: &Config, metrics: Metrics) -> Result<Arc<Self>, StartError> {
        let balancer = cfg
            .algorithm
            .build(&mut SplitMix64::new(SEED))
            .map_err(StartError::Algorithm)?;
        let classes = cfg.class_set().map_err(StartError::Classes)?;
        let svc = Arc::new_cyclic(|me| Service {
            me: me.clone(),
            inner: Mutex::new(Inner {
                routes: vec![RouteTable {
                    key: Vec::new(),
                    table: ServerTable::new(),
                    balancer,
                }],
                names: Default::default(),
                algorithm: cfg.algorithm.clone(),
                backends: BTreeMap::new(),
                next_id: 1,
                queue: RequestQueue::new(
                    &classes,
                    cfg.defaults.queue_limit,
                    metrics.classes.clone(),
                ),
                classifier: classes.classifier.clone(),
                runtime: Arc::new(Runtime::of(cfg)),
            }),
            servers_changed: Notify::new(),
            metrics,
            access: std::sync::OnceLock::new(),
            epoch: Instant::now(),
        });
        for s in &cfg.servers {
            svc.insert_server(s, false).map_err(StartError::Server)?;
        }
        Ok(svc)
    }

    fn now_ns(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    pub fn runtime(&self) -> Arc<Runtime> {
        lock(&self.inner).runtime.clone()
    }

    /// Choose a backend for `key`, waiting in the bounded queue while every usable server is
    /// at maxconn. `classify` puts the request in its class (called once, under the lock,
    /// so the class and the queue are of the same configuration). `sni`: the TLS server name
    /// that picks the route under `route = "sni"` (L4), else `None`.
    pub async fn acquire(
        self: &Arc<Self>,
        key: FlowKey,
        sni: Option<&str>,
        classify: impl FnOnce(&Classifier) -> ClassId,
    ) -> Result<Lease, Refusal> {
        let now = self.now_ns();
        let (rx, class, generation, timeout) = {
            let mut g = lock(&self.inner);
            let class = classify(&g.classifier);
            let generation = g.queue.generation();
            // The common case: a server has a slot; no queue.
            match g.route_of(sni).and_then(|r| g.try_pick(r, &key, now)) {
                Ok(id) => {
                    g.queue.arrive_served(class, now);
                    let mut lease = self.lease(&mut g, id);
                    lease.class = Some((class, generation));
                    return Ok(lease);
                }
                Err(Refusal::QueueFull) => {}
                Err(other) => {
                    g.queue.refuse_at_arrival(class, QueueRefusal::NoServer);
                    return Err(other);
                }
            }
            let timeout = g
                .queue
                .queue_timeout(class)
                .unwrap_or(g.runtime.timeouts.queue);
            match g.queue.enqueue(class, key, sni.map(Arc::from), now) {
                Ok(rx) => (rx, class, generation, timeout),
                Err(_) => return Err(Refusal::QueueFull),
            }
        };
        self.metrics
            .queue_length
            .set(lock(&self.inner).queue.len() as i64);
        let mut waiting = Waiting {
            svc: self,
            rx: Some(rx),
            class,
            generation,
            since: now,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_nanos(timeout);
        let rx = waiting.rx.as_mut().expect("set above");
        let r = match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(lease)) => {
                waiting.rx = None;
                Ok(lease)
            }
            // Released (no usable server), or timed out: counted under the lock.
            Ok(Err(_)) => waiting.end(QueueRefusal::NoServer),
            Err(_) => waiting.end(QueueRefusal::QueueTimeout),
        };
        self.metrics
            .queue_length
            .set(lock(&self.inner).queue.len() as i64);
        r
    }

    /// Hand free slots to waiters in the discipline's order, under the lock: stops when the
    /// next waiter's pick finds no slot. With no usable server at all every waiter is
    /// released (refused `no_server`, as a new request would be). Returns leases whose
    /// waiter was gone, to drop after the lock is released.
    fn dispatch(&self, g: &mut Inner, now: Nanos) -> Vec<Lease> {
        let mut unsent = Vec::new();
        let Some(me) = self.me.upgrade() else {
            return unsent;
        };
        let generation = g.queue.generation();
        while let Some(t) = g.queue.next_waiter(now) {
            let (key, class, sni) = (t.key, t.class, t.sni.clone());
            match g
                .route_of(sni.as_deref())
                .and_then(|r| g.try_pick(r, &key, now))
            {
                Ok(id) => {
                    let mut lease = me.lease(g, id);
                    lease.class = Some((class, generation));
                    if let Err(mut l) = g.queue.hand(lease, now) {
                        l.class = None;
                        unsent.push(l);
                    }
                }
                // One route: no waiter can be served.
                Err(Refusal::NoServer) if g.routes.len() == 1 => {
                    g.queue.release_all();
                    break;
                }
                // Its route has no usable server; others may.
                Err(Refusal::NoServer | Refusal::NoRoute) => g.queue.release_next(now),
                Err(_) => break,
            }
        }
        self.metrics.queue_length.set(g.queue.len() as i64);
        unsent
    }

    /// Offer free slots to the waiters (a server added, back in rotation, weight changed).
    fn wake_queue(&self) {
        let now = self.now_ns();
        let unsent = {
            let mut g = lock(&self.inner);
            if g.queue.is_empty() {
                return;
            }
            self.dispatch(&mut g, now)
        };
        drop(unsent);
    }

    /// Count `id` open and hand out its lease (under the lock, after a successful pick).
    fn lease(self: &Arc<Self>, g: &mut Inner, id: ServerId) -> Lease {
        let backend = g.backends[&id].shared.clone();
        if let Some(t) = g.table_mut(id) {
            let _ = t.on_open(id);
        }
        sync_gauges(g, id, &backend);
        backend.requests.inc();
        Lease {
            svc: self.clone(),
            id,
            backend,
            runtime: g.runtime.clone(),
            inactive: false,
            class: None,
            outcome: None,
        }
    }

    /// Rows of `show-classes`.
    pub fn show_classes(&self) -> Vec<crate::queue::ClassView> {
        lock(&self.inner).queue.view()
    }

    /// The queue discipline in force.
    pub fn queue_kind(&self) -> crate::classes::QueueKind {
        lock(&self.inner).queue.kind()
    }

    /// `set-class NAME FIELD VALUE` (applied at the next decision; logged).
    pub fn set_class(
        &self,
        name: &str,
        field: &str,
        value: &str,
    ) -> Result<String, crate::queue::SetClassError> {
        let done = lock(&self.inner).queue.set_class(name, field, value)?;
        eprintln!("netsched balance: class {done} (set-class)");
        Ok(done)
    }

    /// Close idle backend connections past their timeout (called by the daemon's tick).
    pub fn sweep_idle(&self) {
        let shared: Vec<Arc<BackendRef>> = {
            let g = lock(&self.inner);
            g.backends.values().map(|b| b.shared.clone()).collect()
        };
        for b in shared {
            b.conns.sweep(|| {
                self.metrics.error(&b.name, "unexpected_data");
                self.metrics.closed_in_doubt(&b.name);
            });
        }
    }

    /// Operator or health change: recompute effective weights; wake queued work.
    pub fn refresh(&self) {
        {
            let mut g = lock(&self.inner);
            g.refresh_weights(&self.metrics);
        }
        self.wake_queue();
    }

    /// `ctl add-server`: [`Service::insert_server`], refused when another server has the
    /// address (a configuration is checked for that whole, `config.rs`; a reload may move
    /// servers through each other's addresses one step at a time).
    pub fn add_server(&self, s: &ServerConf, log: bool) -> Result<(), ServerError> {
        let other = lock(&self.inner)
            .backends
            .values()
            .find(|b| b.addr == s.addr)
            .map(|b| b.name.clone());
        if let Some(other) = other {
            return Err(ServerError::AddrInUse {
                name: s.name.clone(),
                addr: s.addr,
                other,
            });
        }
        self.insert_server(s, log)
    }

    /// Add a server to the table and the balancer.
    fn insert_server(&self, s: &ServerConf, log: bool) -> Result<(), ServerError> {
        check_name(&s.name).map_err(|why| ServerError::BadName {
            name: s.name.clone(),
            why,
        })?;
        check_backend_addr(s.addr).map_err(|why| ServerError::BadAddr {
            name: s.name.clone(),
            addr: s.addr,
            why,
        })?;
        {
            let mut g = lock(&self.inner);
            if g.backends.values().any(|b| b.name == s.name) {
                return Err(ServerError::Exists {
                    name: s.name.clone(),
                });
            }

            if g.backends.len() >= MAX_SERVERS {
                return Err(ServerError::TooMany { max: MAX_SERVERS });
            }
            let (route, sni) = g.route_for(s)?;
            let id = ServerId(g.next_id);
            g.next_id += 1;
            let maxconn = s.maxconn.unwrap_or(g.runtime.defaults.maxconn);
            let table = &mut g.routes[route].table;
            table
                .add_server(id.0, s.addr.ip(), s.addr.port(), 0)
                .map_err(|source| ServerError::Table {
                    name: s.name.clone(),
                    source,
                })?;
            if maxconn > 0 {
                let _ = table.set_thresholds(id, maxconn, maxconn);
            }
            g.backends.insert(
                id,
                Backend {
                    id,
                    name: s.name.clone(),
                    addr: s.addr,
                    weight: s.weight,
                    maxconn,
                    admin: Admin::Ready,
                    up: true,
                    streak: 0,
                    since: None,
                    effective: 0,
                    last_check: None,
                    shared: Arc::new(BackendRef::new(
                        &s.name,
                        s.addr,
                        s.send_proxy,
                        &self.metrics,
                    )),
                    route,
                    sni,
                },
            );
            self.metrics.add_backend(&s.name);
            self.metrics
                .health_up
                .get_or_create(&Metrics::backend(&s.name))
                .set(1);
            g.refresh_weights(&self.metrics);
        }
        if log {
            tracing::info!(server = %s.name, addr = %s.addr, "server {} ({}) added", s.name, s.addr);
        }
        self.servers_changed.notify_waiters();
        self.wake_queue();
        Ok(())
    }

    /// Remove a server from rotation and the table; its established connections go on.
    pub fn del_server(&self, name: &str) -> Result<(), ServerError> {
        let mut g = lock(&self.inner);
        let id = g.id_of(name)?;
        let route = g.backends[&id].route;
        g.routes[route]
            .table
            .remove(id)
            .map_err(|source| ServerError::Table {
                name: name.to_string(),
                source,
            })?;
        g.backends.remove(&id);
        if route != 0 && g.routes[route].table.servers().is_empty() {
            g.drop_route(route);
        }
        // Every series of the server goes with it (a lease still alive holds handles that are
        // no longer exported; `sync_gauges` skips a server gone from the table).
        self.metrics.remove_backend(name);
        Ok(())
    }

    pub fn set_weight(&self, name: &str, weight: u32) -> Result<(), ServerError> {
        if weight > crate::config::MAX_WEIGHT {
            return Err(ServerError::WeightTooLarge {
                weight,
                max: crate::config::MAX_WEIGHT,
            });
        }
        {
            let mut g = lock(&self.inner);
            let id = g.id_of(name)?;
            g.backends.get_mut(&id).expect("id_of").weight = weight;
        }
        self.refresh();
        Ok(())
    }

    pub fn set_admin(&self, name: &str, admin: Admin) -> Result<(), ServerError> {
        self.set_admin_all(&[name], admin)
    }

    /// Set the admin state of several servers at once: all of them, or none when a name is
    /// unknown.
    pub fn set_admin_all(&self, names: &[&str], admin: Admin) -> Result<(), ServerError> {
        {
            let mut g = lock(&self.inner);
            let ids = names
                .iter()
                .map(|n| g.id_of(n))
                .collect::<Result<Vec<_>, _>>()?;
            for id in ids {
                let b = g.backends.get_mut(&id).expect("id_of");
                if b.admin != Admin::Ready && admin == Admin::Ready {
                    // Back in rotation: slow start ramps from here (HAProxy applies slowstart
                    // when a server leaves maintenance too).
                    b.since = Some(Instant::now());
                }
                b.admin = admin;
            }
            // With no checks configured nothing else can bring a server marked down back up.
            if g.runtime.health.is_none() {
                g.health_unchecked(&self.metrics, "no health checks configured");
            }
        }
        self.refresh();
        Ok(())
    }

    /// A health check result; returns true when the server changed state.
    pub fn health_result(&self, id: ServerId, ok: bool, detail: String) -> bool {
        let changed = {
            let mut g = lock(&self.inner);
            let Some(h) = g.runtime.health.clone() else {
                return false;
            };
            let Some(b) = g.backends.get_mut(&id) else {
                return false;
            };
            b.last_check = Some(detail);
            let mut changed = false;
            if ok == b.up {
                b.streak = 0;
            } else {
                b.streak += 1;
                let need = if b.up { h.fall } else { h.rise };
                if b.streak >= need {
                    b.up = ok;
                    b.streak = 0;
                    changed = true;
                    if ok {
                        b.since = Some(Instant::now());
                    }
                    let reason = b.last_check.as_deref().unwrap_or("");
                    let run = match need {
                        1 => "1 check".to_string(),
                        n => format!("{n} checks in a row"),
                    };
                    if ok {
                        tracing::info!(
                            server = %b.name,
                            reason,
                            checks = need,
                            "server {} is up ({reason}, {run})",
                            b.name
                        );
                    } else {
                        tracing::warn!(
                            server = %b.name,
                            reason,
                            checks = need,
                            "server {} is down ({reason}, {run})",
                            b.name
                        );
                    }
                    self.metrics
                        .health_up
                        .get_or_create(&Metrics::backend(&b.name))
                        .set(ok as i64);
                }
            }
            changed
        };
        if changed {
            self.refresh();
        }
        changed
    }

    /// Backends the health checker should probe now (not in maintenance).
    /// With each, the PROXY protocol version its connections start with, if any.
    pub fn check_targets(&self) -> Vec<(ServerId, SocketAddr, Option<crate::config::SendProxy>)> {
        let g = lock(&self.inner);
        g.backends
            .values()
            .filter(|b| b.admin != Admin::Maint)
            .map(|b| (b.id, b.addr, b.shared.send_proxy))
            .collect()
    }

    pub fn show(&self) -> Vec<ServerView> {
        let g = lock(&self.inner);
        g.backends
            .values()
            .map(|b| {
                let s = g.routes[b.route].table.get(b.id);
                ServerView {
                    name: b.name.clone(),
                    addr: b.addr.to_string(),
                    weight: b.weight,
                    effective_weight: b.effective,
                    maxconn: b.maxconn,
                    admin: b.admin,
                    health: if b.up { "up" } else { "down" },
                    active: s.map_or(0, |s| s.active),
                    inactive: s.map_or(0, |s| s.inactive),
                    last_check: b.last_check.clone(),
                }
            })
            .collect()
    }

    /// Apply a re-read configuration (SIGHUP). Listeners and established connections are
    /// untouched; the algorithm is rebuilt only if it changed (counters stay in the table);
    /// servers are matched by name: new ones added, missing ones removed, others updated
    /// (an address change re-adds the server). Runtime `set-weight`/`drain` changes to
    /// servers named in the file are replaced by the file, as on an HAProxy reload.
    pub fn reload(&self, cfg: &Config) -> Result<Vec<String>, ReloadError> {
        let mut notes = Vec::new();
        let set: ClassSet = cfg.class_set().map_err(ReloadError::Classes)?;
        {
            let mut g = lock(&self.inner);
            if g.algorithm != cfg.algorithm {
                for r in 0..g.routes.len() {
                    g.routes[r].balancer = cfg
                        .algorithm
                        .build(&mut SplitMix64::new(SEED))
                        .map_err(ReloadError::Algorithm)?;
                }
                notes.push(format!(
                    "algorithm {} -> {}",
                    g.algorithm.name(),
                    cfg.algorithm.name()
                ));
                g.algorithm = cfg.algorithm.clone();
            }
            g.runtime = Arc::new(Runtime::of(cfg));
            let now = self.now_ns();
            let changed = g.queue.reconfigure(&set, cfg.defaults.queue_limit, now);
            notes.extend(changed);
            g.classifier = set.classifier.clone();
            if cfg.health.is_none() {
                // No check runs any more: a server the checks took down would stay down for
                // ever (HAProxy: a server without `check` is always considered up).
                for name in g.health_unchecked(&self.metrics, "health checks removed") {
                    notes.push(format!("server {name} up (health checks removed)"));
                }
            }
        }
        let existing: Vec<Existing> = {
            let g = lock(&self.inner);
            g.backends
                .values()
                .map(|b| (b.name.clone(), b.addr, b.shared.send_proxy, b.sni.clone()))
                .collect()
        };
        // A server whose names change leaves its route first, all of them before any comes
        // back: a name may pass from one route to another only once its old route let it go.
        let mut again = Vec::new();
        for (name, addr, send_proxy, sni) in &existing {
            let Some(s) = cfg.servers.iter().find(|s| &s.name == name) else {
                self.del_server(name)?;
                notes.push(format!("server {name} removed"));
                continue;
            };
            let names = crate::config::route_names(&s.sni).unwrap_or_default();
            if names != *sni {
                self.del_server(name)?;
                again.push(s);
                notes.push(format!("server {name} sni {:?}", s.sni));
            } else if s.addr != *addr {
                self.del_server(name)?;
                self.insert_server(s, false)?;
                notes.push(format!("server {name} moved to {}", s.addr));
            } else if s.send_proxy != *send_proxy {
                // Its connections are made anew with the new header (or none); the idle
                // ones go with the old entry.
                self.del_server(name)?;
                self.insert_server(s, false)?;
                notes.push(format!(
                    "server {name} send_proxy {}",
                    s.send_proxy.map_or("none", |v| v.name())
                ));
            } else {
                let mut g = lock(&self.inner);
                let id = g.id_of(name)?;
                let maxconn = s.maxconn.unwrap_or(cfg.defaults.maxconn);
                let b = g.backends.get_mut(&id).expect("id_of");
                b.weight = s.weight;
                b.maxconn = maxconn;
                b.admin = Admin::Ready;
                let route = b.route;
                let _ = g.routes[route].table.set_thresholds(id, maxconn, maxconn);
            }
        }
        for s in again {
            self.insert_server(s, false)?;
        }
        for s in &cfg.servers {
            if !existing.iter().any(|(n, ..)| n == &s.name) {
                self.insert_server(s, false)?;
                notes.push(format!("server {} added", s.name));
            }
        }
        self.refresh();
        self.servers_changed.notify_waiters();
        Ok(notes)
    }
}

/// A server as a reload finds it: name, address, PROXY header, route key.
type Existing = (
    String,
    SocketAddr,
    Option<crate::config::SendProxy>,
    Vec<crate::sni::Pattern>,
);

impl Inner {
    /// The table holding `id`'s counts (`None`: a server deleted meanwhile). With one route,
    /// no look-up.
    fn table_mut(&mut self, id: ServerId) -> Option<&mut ServerTable> {
        let r = match self.routes.len() {
            1 => 0,
            _ => self.backends.get(&id)?.route,
        };
        Some(&mut self.routes[r].table)
    }

    fn table(&self, id: ServerId) -> Option<&ServerTable> {
        let r = match self.routes.len() {
            1 => 0,
            _ => self.backends.get(&id)?.route,
        };
        Some(&self.routes[r].table)
    }

    /// The route of a connection whose TLS server name is `sni`: the route listing it (exact,
    /// then wildcard), else the default route; refused when that one has no server under
    /// `route = "sni"`.
    fn route_of(&self, sni: Option<&str>) -> Result<usize, Refusal> {
        let r = match sni {
            Some(n) if !self.names.is_empty() => self.names.get(n).copied().unwrap_or(0),
            _ => 0,
        };
        if r == 0
            && self.runtime.route == crate::config::Route::Sni
            && self.routes[0].table.servers().is_empty()
        {
            return Err(Refusal::NoRoute);
        }
        Ok(r)
    }

    /// The route a server joins (made if its names are new), and its route key.
    fn route_for(
        &mut self,
        s: &ServerConf,
    ) -> Result<(usize, Vec<crate::sni::Pattern>), ServerError> {
        let bad = |value: &str, why: String| ServerError::Sni {
            name: s.name.clone(),
            value: value.to_string(),
            why,
        };
        if s.sni.is_empty() {
            return Ok((0, Vec::new()));
        }
        if self.runtime.route != crate::config::Route::Sni {
            return Err(bad(&s.sni[0], "needs route = \"sni\"".into()));
        }
        let key = crate::config::route_names(&s.sni).map_err(|(v, why)| bad(v, why))?;
        if let Some(r) = self.routes.iter().position(|r| r.key == key) {
            return Ok((r, key));
        }
        // A name belongs to one route.
        for p in &key {
            if let Some(r) = self.routes.iter().find(|r| r.key.contains(p)) {
                let why = format!("served by another route ({})", route_text(&r.key));
                return Err(bad(&p.text(), why));
            }
        }
        let balancer = self
            .algorithm
            .build(&mut SplitMix64::new(SEED))
            .map_err(ServerError::Algorithm)?;
        self.routes.push(RouteTable {
            key: key.clone(),
            table: ServerTable::new(),
            balancer,
        });
        self.index_names();
        Ok((self.routes.len() - 1, key))
    }

    /// Remove route `r` (its last server gone): later routes move down one place.
    fn drop_route(&mut self, r: usize) {
        self.routes.remove(r);
        for b in self.backends.values_mut() {
            if b.route > r {
                b.route -= 1;
            }
        }
        self.index_names();
    }

    fn index_names(&mut self) {
        let mut names = crate::sni::Names::default();
        for (i, r) in self.routes.iter().enumerate() {
            for p in &r.key {
                let _ = names.insert(p.clone(), i);
            }
        }
        self.names = names;
    }

    fn id_of(&self, name: &str) -> Result<ServerId, ServerError> {
        self.backends
            .values()
            .find(|b| b.name == name)
            .map(|b| b.id)
            .ok_or_else(|| ServerError::Unknown {
                name: name.to_string(),
            })
    }

    /// A server of route `r` for `key`.
    fn try_pick(&mut self, r: usize, key: &FlowKey, now: Nanos) -> Result<ServerId, Refusal> {
        self.refresh_slow_start();
        let route = &mut self.routes[r];
        if let Some(id) = route.balancer.pick(&route.table, key, now) {
            // Some kernel algorithms do not look at the overload flag (ovf, fo): maxconn
            // still holds.
            match route.table.get(id) {
                Some(s) if !s.overloaded && s.weight > 0 => return Ok(id),
                _ => {}
            }
        }
        let full = route
            .table
            .servers()
            .iter()
            .any(|s| s.weight > 0 && s.overloaded);
        Err(if full {
            Refusal::QueueFull
        } else {
            Refusal::NoServer
        })
    }

    /// No checks run: every server counts as up (a server the checks had taken down comes
    /// back, with slow start, logged and exported like a check that brought it up) and the
    /// last check result is cleared. Returns the servers brought back.
    fn health_unchecked(&mut self, metrics: &Metrics, why: &str) -> Vec<String> {
        let mut back = Vec::new();
        for b in self.backends.values_mut() {
            b.last_check = None;
            b.streak = 0;
            if !b.up {
                b.up = true;
                b.since = Some(Instant::now());
                tracing::info!(server = %b.name, reason = why, "server {} is up ({why})", b.name);
                metrics
                    .health_up
                    .get_or_create(&Metrics::backend(&b.name))
                    .set(1);
                back.push(b.name.clone());
            }
        }
        back
    }

    /// Only recompute while some server is still ramping (a cheap scan on the pick path).
    fn refresh_slow_start(&mut self) {
        if self.runtime.defaults.slow_start == 0 {
            return;
        }
        if self
            .backends
            .values()
            .any(|b| b.effective != 0 && b.effective < b.weight && b.since.is_some())
        {
            self.apply_weights();
        }
    }

    fn refresh_weights(&mut self, metrics: &Metrics) {
        self.apply_weights();
        for b in self.backends.values() {
            metrics
                .weight
                .get_or_create(&Metrics::backend(&b.name))
                .set(b.effective as i64);
            metrics.admin(&b.name, b.weight, b.admin.name());
        }
    }

    fn apply_weights(&mut self) {
        let ss = self.runtime.defaults.slow_start;
        let ids: Vec<ServerId> = self.backends.keys().copied().collect();
        for id in ids {
            let b = self.backends.get_mut(&id).expect("key");
            let w = effective_weight(b, ss);
            if w != b.effective {
                b.effective = w;
                let r = b.route;
                let _ = self.routes[r].table.set_weight(id, w);
            }
        }
    }
}

/// A route's names, as a configuration lists them.
fn route_text(key: &[crate::sni::Pattern]) -> String {
    let names: Vec<String> = key.iter().map(|p| p.text()).collect();
    names.join(", ")
}

/// `ip[:port]`, the port left out when it is HTTP's default.
fn host_header(addr: SocketAddr) -> hyper::header::HeaderValue {
    let text = match (addr.port(), addr.ip()) {
        (80, std::net::IpAddr::V4(ip)) => ip.to_string(),
        (80, std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => addr.to_string(),
    };
    hyper::header::HeaderValue::from_str(&text).expect("an address is a valid header value")
}

/// Publish `id`'s active/inactive counts on its (cached) gauges. A server deleted while a lease
/// lived is gone from the table: its series were removed, nothing to publish.
fn sync_gauges(g: &Inner, id: ServerId, b: &BackendRef) {
    if let Some(s) = g.table(id).and_then(|t| t.get(id)) {
        b.active.set(s.active as i64);
        b.inactive.set(s.inactive as i64);
    }
}

/// Weight the balancer sees: 0 unless ready and up; during slow start the configured weight
/// times the elapsed fraction, rounded up, at least 1 (HAProxy `slowstart`, configuration
/// manual §5.2).
pub fn effective_weight(b: &Backend, slow_start: Nanos) -> u32 {
    if b.admin != Admin::Ready || !b.up || b.weight == 0 {
        return 0;
    }
    match b.since {
        Some(t) if slow_start > 0 => {
            let el = t.elapsed().as_nanos() as u64;
            if el >= slow_start {
                b.weight
            } else {
                let w = (b.weight as u128 * el as u128).div_ceil(slow_start as u128) as u32;
                w.clamp(1, b.weight)
            }
        }
        _ => b.weight,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netsched_core::SEC;

    fn backend(weight: u32, since_ago: Option<Duration>) -> Backend {
        Backend {
            id: ServerId(1),
            name: "s".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            weight,
            maxconn: 0,
            admin: Admin::Ready,
            up: true,
            streak: 0,
            since: since_ago.map(|d| Instant::now() - d),
            effective: 0,
            last_check: None,
            route: 0,
            sni: Vec::new(),
            shared: Arc::new(BackendRef::new(
                "s",
                "127.0.0.1:1".parse().unwrap(),
                None,
                &Metrics::new(&mut Default::default()),
            )),
        }
    }

    #[test]
    fn slow_start_ramps_linearly_from_one_to_the_weight() {
        let ss = 100 * SEC;
        // Just back: at least 1.
        assert_eq!(effective_weight(&backend(50, Some(Duration::ZERO)), ss), 1);
        // A quarter of the way (plus the few microseconds this test takes): ceil(50/4) = 13.
        let w = effective_weight(&backend(50, Some(Duration::from_secs(25))), ss);
        assert!((13..=14).contains(&w), "{w}");
        assert_eq!(
            effective_weight(&backend(50, Some(Duration::from_secs(100))), ss),
            50
        );
        // No slow start, or never came back: the full weight.
        assert_eq!(effective_weight(&backend(50, Some(Duration::ZERO)), 0), 50);
        assert_eq!(effective_weight(&backend(50, None), ss), 50);
        // Down, drained, in maintenance: 0.
        let mut b = backend(50, None);
        b.up = false;
        assert_eq!(effective_weight(&b, ss), 0);
        for a in [Admin::Drain, Admin::Maint] {
            let mut b = backend(50, None);
            b.admin = a;
            assert_eq!(effective_weight(&b, ss), 0);
        }
    }
}
