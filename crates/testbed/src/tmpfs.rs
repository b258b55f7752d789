//! A small tmpfs mounted for one test (root): a disk that fills at a size the test chooses,
//! for the faults a full disk causes. Unmounted, and its mount point removed, when dropped —
//! also when the test fails.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs (see the module header).
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mount a tmpfs of `bytes` (rounded up to pages) at `at`, made if missing.
    pub fn mount(at: &Path, bytes: u64) -> Result<Tmpfs> {
        std::fs::create_dir_all(at).with_context(|| format!("creating {}", at.display()))?;
        let t = Tmpfs {
            path: at.to_path_buf(),
        };
        t.mount_cmd(&[
            "-t",
            "tmpfs",
            "-o",
            &format!("size={bytes},mode=0700"),
            "tmpfs",
        ])?;
        Ok(t)
    }

    /// Give it another size (what it holds stays).
    pub fn resize(&self, bytes: u64) -> Result<()> {
        self.mount_cmd(&["-o", &format!("remount,size={bytes}"), "tmpfs"])
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn mount_cmd(&self, args: &[&str]) -> Result<()> {
        let s = Command::new("mount")
            .args(args)
            .arg(&self.path)
            .status()
            .context("running mount")?;
        if !s.success() {
            bail!("mount {args:?} {}: {s}", self.path.display());
        }
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
        let _ = std::fs::remove_dir(&self.path);
    }
}
