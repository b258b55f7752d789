//! The libc calls this crate makes — the splice relay's pipes, `shutdown(SHUT_WR)`,
//! `TCP_NODELAY` on a listener, the open-file limit, a peek at a backend connection's unread
//! bytes — are `netsched_sys`'s safe wrappers,
//! re-exported here under the names the crate's modules use. (`SO_PEERCRED` comes through
//! `netsched_testbed`.)

pub use netsched_sys::pipe::Pipe;
pub use netsched_sys::process::raise_nofile_limit;
pub use netsched_sys::socket::{peek_pending, quickack, set_nodelay, shutdown_write};
