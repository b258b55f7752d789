//! A watch on the interfaces a data plane is bound to: each must keep the index it had when
//! the watch began. An interface deleted, or deleted and made again under the same name (a
//! new index: sockets and XDP programs bound to the old one get nothing), is *lost*; the
//! watch says which, and the daemon stops with that reason rather than run on deaf.
//!
//! Principle: the packet path is never asked to notice. A thread of its own looks once per
//! period and sets one flag; the packet loop already polls its stop condition (at least every
//! 100 ms in `link` and `filter`), and that condition reads the flag too. (`vswitch` closes a
//! vanished guest port and serves the others, so it looks per port itself: switch.rs.)
//!
//! Cost: one `if_nametoindex(3)` (a socket and an ioctl) per interface per period, off the
//! packet path; memory: the names and indexes. The watch thread ends when the watch drops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The period of [`InterfaceWatch::spawn`]'s looks that the daemons use.
pub const PERIOD: Duration = Duration::from_secs(1);

/// Watches interfaces keep their index (see the module header). Dropping it ends the thread.
pub struct InterfaceWatch {
    lost: Lost,
    thread: Option<JoinHandle<()>>,
}

/// Whether a watched interface was lost, and which: cheap to clone and to ask (one atomic
/// load), for a stop condition on the packet path.
#[derive(Clone)]
pub struct Lost(Arc<Shared>);

struct Shared {
    lost: AtomicBool,
    why: Mutex<Option<String>>,
    done: AtomicBool,
}

impl Lost {
    /// Whether an interface was lost.
    pub fn is_set(&self) -> bool {
        self.0.lost.load(Ordering::Relaxed)
    }

    /// Which interface was lost and how (`la (index 5) was deleted`), once one was.
    pub fn why(&self) -> Option<String> {
        if !self.is_set() {
            return None;
        }
        self.0.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl InterfaceWatch {
    /// Watch `devs` (named as the caller names them, e.g. `("--dev-a", "la")`), looking every
    /// `period`. Each must exist now, in the calling thread's network namespace, which the
    /// watch thread inherits.
    pub fn spawn(devs: &[(&str, &str)], period: Duration) -> std::io::Result<InterfaceWatch> {
        let mut watched = Vec::new();
        for &(role, dev) in devs {
            let index = crate::socket::ifindex(dev).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{role} {dev}: no such interface"),
                )
            })?;
            watched.push((role.to_string(), dev.to_string(), index));
        }
        let shared = Arc::new(Shared {
            lost: AtomicBool::new(false),
            why: Mutex::new(None),
            done: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("iface-watch".into())
            .spawn(move || watch(&s, &watched, period))?;
        Ok(InterfaceWatch {
            lost: Lost(shared),
            thread: Some(thread),
        })
    }

    /// The flag the stop condition reads.
    pub fn lost(&self) -> Lost {
        self.lost.clone()
    }
}

/// Look every `period` until a watched interface is lost or the watch drops.
fn watch(s: &Shared, watched: &[(String, String, u32)], period: Duration) {
    while !s.done.load(Ordering::Relaxed) {
        std::thread::park_timeout(period);
        for (role, dev, index) in watched {
            let why = match crate::socket::ifindex(dev) {
                Some(i) if i == *index => continue,
                Some(i) => format!(
                    "{role} {dev}: its index changed from {index} to {i} (deleted and made again)"
                ),
                None => format!("{role} {dev} (index {index}) was deleted"),
            };
            *s.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            s.lost.store(true, Ordering::Relaxed);
            return;
        }
    }
}

impl Drop for InterfaceWatch {
    fn drop(&mut self) {
        self.lost.0.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_refused_and_loopback_is_kept() {
        let e = InterfaceWatch::spawn(&[("--dev-a", "nosuchif0")], PERIOD)
            .err()
            .unwrap()
            .to_string();
        assert_eq!(e, "--dev-a nosuchif0: no such interface");
        let w = InterfaceWatch::spawn(&[("--dev-a", "lo")], Duration::from_millis(5)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!w.lost().is_set() && w.lost().why().is_none());
        let t = std::time::Instant::now();
        drop(w);
        assert!(t.elapsed() < PERIOD, "the thread ends when the watch drops");
    }
}
