//! The testbed's system calls — entering a network namespace, pinning a thread to a CPU,
//! signalling a process group, `mkdtemp`, the peer credentials of a Unix socket — are
//! `netsched_sys`'s safe wrappers (where every `unsafe` block of the workspace is), re-exported
//! here under the names the testbed always offered.

use anyhow::{Context, Result};

pub(crate) use netsched_sys::fs::mkdtemp;
pub use netsched_sys::process::{euid, is_root};
pub(crate) use netsched_sys::process::{signal_group, signal_pid};
pub use netsched_sys::socket::{peer_cred, PeerCred};
pub use netsched_sys::thread::{allowed_cpus, enter_netns, pin_to_cpu};

/// The uid and gid of the unprivileged account `nobody` (for servers a run starts that need no
/// privilege), looked up with `id`.
pub fn nobody() -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = crate::run("id", &[flag, "nobody"])?;
        out.trim()
            .parse()
            .with_context(|| format!("`id {flag} nobody` printed {:?}", out.trim()))
    };
    Ok((id("-u")?, id("-g")?))
}
