//! `netsched balance`: a real L4/L7 load balancer that runs the core's balancers
//! (`netsched_core::balance::AnyBalancer`) unchanged on real connections and requests.
//!
//! | file | what |
//! |---|---|
//! | `class_view.rs` | `show-classes` as a table or JSON |
//! | `classes.rs` | service classes: `queue`, `[[class]]`, `default_class`, their checks, the classifier |
//! | `queue.rs` | the request queue when every server is at maxconn: FIFO, strict priority or P0's percentile (core's disciplines), per-class counters |
//! | `config.rs` | the TOML contract, validation, errors naming file/key/value |
//! | `config_error.rs` | what a configuration, a host or a start can get wrong, typed (key and value named) |
//! | `service.rs` | ServerTable + AnyBalancer, leases (active/inactive), maxconn queue, admin state, slow start, reload |
//! | `l4.rs` | per-connection scheduling and relay |
//! | `sni.rs` | server-name patterns and their matching rule (TLS certificates, SNI routes); the ClientHello reader of L4 SNI routing |
//! | `l7.rs` | per-request scheduling of HTTP/1.1 requests and HTTP/2 streams |
//! | `http2.rs` | HTTP/2 from clients: which protocol, the h2→h1 checks, flood bounds, the stream watchdog |
//! | `forwarded.rs` | the client's address in `X-Forwarded-For` / `Forwarded` (RFC 7239) toward the backends |
//! | `client_io.rs` | the L7 client connection's write inactivity limit |
//! | `proxy_proto.rs` | the PROXY protocol v1/v2 header sent first to a server with `send_proxy` |
//! | `pool.rs` | per-backend idle keep-alive connections |
//! | `h1.rs` | our HTTP/1.1 client to backends, driven in the request's task (head, body framing) |
//! | `server_error.rs` | why a change to the servers is refused (name, address, exists, limit, weight, table), typed |
//! | `health.rs` | TCP / HTTP checks with rise/fall |
//! | `control.rs` | the Unix control socket and `netsched balance ctl` |
//! | `access_log.rs` | the L7 access log (HAProxy `option httplog`-like): entries through a bounded queue to a writer thread |
//! | `metrics.rs` | Prometheus families (served by `netsched-metrics`) |
//! | `stop.rs` | graceful stop: close the listeners (after emptying their accept queues), let the work in flight finish, cut the rest at a deadline |
//! | `daemon.rs` | wiring, SIGHUP reload, SIGTERM/SIGINT/SIGUSR1 stop |
//! | `load.rs` | `netsched balance load`: open-loop HTTP/1.1 generator, latency corrected for coordinated omission |
//! | `sys.rs` | the OS calls it uses, from `netsched-sys` (splice pipes, `shutdown(SHUT_WR)`, `RLIMIT_NOFILE`) |

#![forbid(unsafe_code)]

pub mod access_log;
pub mod class_view;
pub mod classes;
pub mod client_io;
pub mod config;
pub mod config_error;
pub mod control;
pub mod daemon;
pub mod forwarded;
pub mod h1;
pub mod health;
pub mod http2;
pub mod l4;
pub mod l7;
pub mod load;
pub mod metrics;
pub mod pool;
pub mod proxy_proto;
pub mod queue;
pub mod reload;
pub mod sent_bytes;
pub mod server_error;
pub mod service;
pub mod sni;
pub mod status;
pub mod stop;
mod sys;
pub mod tls;

pub use daemon::{run, start, BalanceArgs, Running};
