//! A packet loop on its own thread inside a named network namespace, with a stop flag: what
//! `netsched link`'s engine and `netsched vswitch`'s switch both need when a test or an
//! experiment runs them inside a [`Testbed`](crate::Testbed) namespace.
//!
//! The thread enters the namespace first (only that thread moves; see
//! [`enter_netns`](crate::sys::enter_netns)), so every socket the loop opens lives there.
//! [`NetnsThread::spawn`] returns once the loop's resources are open, or with the error that
//! kept them from opening. [`NetnsThread::stop`] sets the flag, joins, and hands back what the
//! loop returned; dropping the handle does the same and discards the result, so a failing
//! test never leaves a thread running in a namespace that is about to be deleted.

use anyhow::{anyhow, Context, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A loop running on its own thread inside a network namespace; `T` is what it returns.
pub struct NetnsThread<T> {
    /// What runs, for messages ("link engine", "switch").
    what: &'static str,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<T>>>,
}

impl<T: Send + 'static> NetnsThread<T> {
    /// Start thread `thread_name`, which enters namespace `netns` (an `ip netns` name), calls
    /// `open` there, reports that it is ready, then calls `run(opened, should_stop)` until
    /// `should_stop()` says so. Returns once `open` has finished: with its error (the thread
    /// already joined) or with the handle.
    pub fn spawn<S>(
        what: &'static str,
        thread_name: String,
        netns: &str,
        open: impl FnOnce() -> Result<S> + Send + 'static,
        run: impl FnOnce(S, &dyn Fn() -> bool) -> Result<T> + Send + 'static,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let stop_seen = Arc::clone(&stop);
        let ns = netns.to_string();
        let thread = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || -> Result<T> {
                let opened = crate::sys::enter_netns(&ns)
                    .map_err(anyhow::Error::from)
                    .and_then(|()| open());
                let state = match opened {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let msg = format!("{e:#}");
                        let _ = ready_tx.send(Err(e));
                        return Err(anyhow!("{msg}"));
                    }
                };
                run(state, &|| stop_seen.load(Ordering::Relaxed))
            })
            .with_context(|| format!("starting the {what} thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(NetnsThread {
                what,
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                // `open` panicked: the sender was dropped without a word.
                let _ = thread.join();
                Err(anyhow!("the {what} thread ended before it was ready"))
            }
        }
    }

    /// Ask the loop to stop, wait for it, and return what it returned.
    pub fn stop(mut self) -> Result<T> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow!("the {} thread panicked", self.what)),
            None => Err(anyhow!("the {} was already stopped", self.what)),
        }
    }

    /// True while the loop's thread is still running (it may end by itself, e.g. on an error).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl<T> Drop for NetnsThread<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{privileged_test_allowed, Testbed};
    use anyhow::bail;
    use std::time::Duration;

    /// A loop that counts its rounds until told to stop.
    fn counting(start: u64, stop: &dyn Fn() -> bool) -> Result<u64> {
        let mut n = start;
        while !stop() {
            n += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(n)
    }

    #[test]
    fn a_missing_namespace_is_an_error_naming_it_and_open_never_runs() {
        let opened = Arc::new(AtomicBool::new(false));
        let o = Arc::clone(&opened);
        let r = NetnsThread::spawn(
            "test loop",
            "t-missing".into(),
            "no-such-ns-netsched-thread",
            move || {
                o.store(true, Ordering::Relaxed);
                Ok(0u64)
            },
            counting,
        );
        let e = format!("{:#}", r.err().expect("a missing namespace must fail"));
        assert!(e.contains("no-such-ns-netsched-thread"), "{e}");
        assert!(!opened.load(Ordering::Relaxed));
    }

    #[test]
    fn in_a_namespace_stop_returns_the_loops_result_and_open_errors_come_back() {
        if !privileged_test_allowed("netns_thread") {
            return;
        }
        let mut bed = Testbed::new("nthr").unwrap();
        let ns = bed.add_ns("a").unwrap();

        // The loop runs inside the namespace: the thread sees the namespace's loopback only.
        let h = NetnsThread::spawn(
            "test loop",
            "t-count".into(),
            &ns,
            || Ok(std::fs::read_link("/proc/thread-self/ns/net")?),
            |inode, stop| Ok((inode, counting(0, stop)?)),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(h.is_running());
        let (inode, rounds) = h.stop().unwrap();
        let ours = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        assert_ne!(inode, ours, "the loop must run in the other namespace");
        assert!(rounds > 0);

        // An error from `open` is what spawn returns.
        let e = NetnsThread::<u64>::spawn(
            "test loop",
            "t-open".into(),
            &ns,
            || -> Result<u64> { bail!("port eth9 does not exist") },
            counting,
        )
        .err()
        .unwrap();
        assert!(format!("{e:#}").contains("eth9"), "{e:#}");

        // A loop that fails reports its error through stop().
        let h = NetnsThread::<u64>::spawn(
            "test loop",
            "t-fail".into(),
            &ns,
            || Ok(()),
            |(), _| bail!("send failed"),
        )
        .unwrap();
        assert!(format!("{:#}", h.stop().unwrap_err()).contains("send failed"));

        // A panicking loop is an error naming what panicked, not a panic of the caller.
        let h = NetnsThread::<u64>::spawn(
            "test loop",
            "t-panic".into(),
            &ns,
            || Ok(()),
            |(), _| panic!("boom"),
        )
        .unwrap();
        let e = h.stop().unwrap_err().to_string();
        assert!(e.contains("test loop thread panicked"), "{e}");

        // Dropping the handle stops and joins the loop.
        let running = Arc::new(AtomicBool::new(false));
        let r = Arc::clone(&running);
        let h = NetnsThread::spawn(
            "test loop",
            "t-drop".into(),
            &ns,
            || Ok(()),
            move |(), stop| {
                r.store(true, Ordering::Relaxed);
                let n = counting(0, stop);
                r.store(false, Ordering::Relaxed);
                n
            },
        )
        .unwrap();
        while !running.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(h);
        assert!(!running.load(Ordering::Relaxed), "drop must join the loop");
    }
}
