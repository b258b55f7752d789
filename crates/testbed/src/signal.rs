//! Ctrl-C and SIGTERM for long real runs: a [`SignalGuard`] turns both signals into a flag the
//! run polls ([`interrupted`]), so the run stops promptly, its `Testbed`s are dropped (namespaces,
//! processes, temp dirs removed) and the process exits with an error instead of dying with its
//! namespaces in place. Dropping the guard restores the previous handlers.

use anyhow::{bail, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static GUARDS: AtomicUsize = AtomicUsize::new(0);

/// True once SIGINT or SIGTERM arrived while a [`SignalGuard`] was installed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// `Err` if the run was interrupted: call between steps of a long run.
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!(
            "interrupted (SIGINT/SIGTERM); the run's namespaces, processes and files were removed"
        );
    }
    Ok(())
}

/// Sleep up to `d`, waking early (within 20 ms) when interrupted. Returns `Err` if interrupted.
pub fn sleep_unless_interrupted(d: std::time::Duration) -> Result<()> {
    let until = std::time::Instant::now() + d;
    loop {
        check_interrupted()?;
        let now = std::time::Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep((until - now).min(std::time::Duration::from_millis(20)));
    }
}

/// SIGINT/SIGTERM handlers that set the [`interrupted`] flag, for as long as the guard lives.
/// Guards nest; the flag is cleared when the first one is installed.
pub struct SignalGuard(Vec<signal_hook::SigId>);

impl SignalGuard {
    pub fn install() -> Result<Self> {
        if GUARDS.fetch_add(1, Ordering::SeqCst) == 0 {
            INTERRUPTED.store(false, Ordering::Relaxed);
        }
        let mut ids = Vec::new();
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            match netsched_sys::process::set_flag_on_signal(sig, &INTERRUPTED) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    // `Drop` of the partial guard unregisters what was installed.
                    drop(Self(ids));
                    return Err(
                        anyhow::Error::new(e).context("installing a SIGINT/SIGTERM handler")
                    );
                }
            }
        }
        Ok(Self(ids))
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        GUARDS.fetch_sub(1, Ordering::SeqCst);
    }
}
