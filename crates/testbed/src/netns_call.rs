//! A function run inside a network namespace from a process that stays outside it: on a
//! thread of its own that enters the namespace and is joined ([`in_netns`]), or as the first
//! step of every thread a library starts for a test ([`netns_entry`], e.g. the scrapers of
//! `netsched_metrics::hammer`). The namespace is entered with `setns` ([`crate::enter_netns`]);
//! the calling thread never moves.
//!
//! Cost: one thread and one `setns` per call.

use std::sync::Arc;

/// Run `f` on a thread that has entered network namespace `ns` (here when `None`); panics if
/// the namespace cannot be entered or `f` panics.
pub fn in_netns<T: Send + 'static>(ns: Option<&str>, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.map(str::to_string);
    std::thread::spawn(move || {
        if let Some(ns) = &ns {
            crate::enter_netns(ns).expect("setns");
        }
        f()
    })
    .join()
    .expect("thread in the namespace")
}

/// A function that moves the thread calling it into network namespace `ns` (panics if it
/// cannot), for the threads a library starts.
pub fn netns_entry(ns: &str) -> Arc<dyn Fn() + Send + Sync> {
    let ns = ns.to_string();
    Arc::new(move || crate::enter_netns(&ns).expect("setns"))
}
