//! Private temporary folders for real runs (nginx configs, logs, sockets): created fresh with
//! `mkdtemp(3)` semantics — a new name, mode 0700, never an existing folder or a symlink — and
//! removed with everything in it when dropped. A predictable `/tmp/netsched-<tag>` that another
//! user could create first (or point elsewhere with a symlink) is never used.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A folder this run created, removed when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new folder `<system temp>/netsched-<label>-XXXXXX`. `label` keeps only `[A-Za-z0-9_-]`.
    pub fn new(label: &str) -> Result<Self> {
        Self::new_in(&std::env::temp_dir(), label)
    }

    /// A new folder `<parent>/netsched-<label>-XXXXXX`.
    pub fn new_in(parent: &Path, label: &str) -> Result<Self> {
        let label: String = label
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(32)
            .collect();
        let template = parent.join(format!("netsched-{label}-XXXXXX"));
        let path = crate::sys::mkdtemp(&template)?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder's path, handing its removal to the caller (nothing is removed on drop).
    pub fn keep(self) -> PathBuf {
        let mut me = std::mem::ManuallyDrop::new(self);
        std::mem::take(&mut me.path)
    }

    /// Create a new file inside the folder (`name` may go through sub-folders made with
    /// [`TempDir::create_dir`]), refusing to follow or replace anything already there
    /// (`O_CREAT | O_EXCL`, so a planted symlink is an error, not a redirect).
    pub fn create_file(&self, name: &str, contents: &[u8]) -> Result<PathBuf> {
        use std::io::Write;
        let p = self.inside(name)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .with_context(|| format!("creating {}", p.display()))?;
        f.write_all(contents)
            .with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }

    /// Create a new sub-folder; an existing file, folder or symlink of that name is an error.
    pub fn create_dir(&self, name: &str) -> Result<PathBuf> {
        let p = self.inside(name)?;
        std::fs::create_dir(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(p)
    }

    /// Give the folder itself and the listed entries (relative names) to `uid:gid`, e.g. so
    /// that a server run as an unprivileged user may write its logs there. Symlinks are never
    /// followed (`lchown`).
    pub fn hand_to(&self, uid: u32, gid: u32, entries: &[&str]) -> Result<()> {
        let mut paths = vec![self.path.clone()];
        for e in entries {
            paths.push(self.inside(e)?);
        }
        for p in paths {
            std::os::unix::fs::lchown(&p, Some(uid), Some(gid))
                .with_context(|| format!("chown {uid}:{gid} {}", p.display()))?;
        }
        Ok(())
    }

    /// `name` as a path inside the folder: plain components only (no `..`, `.`, absolute
    /// paths or empty parts), at most 8 deep and 255 bytes.
    fn inside(&self, name: &str) -> Result<PathBuf> {
        let parts: Vec<&str> = name.split('/').collect();
        if name.is_empty()
            || name.len() > 255
            || parts.len() > 8
            || parts
                .iter()
                .any(|c| c.is_empty() || *c == "." || *c == "..")
        {
            bail!("temporary file name {name:?}: must be a plain relative name");
        }
        Ok(self.path.join(name))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("cannot remove {}: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_dirs_are_fresh_private_and_removed() {
        let p;
        {
            let a = TempDir::new("t/../x").unwrap();
            let b = TempDir::new("t/../x").unwrap();
            assert_ne!(a.path(), b.path());
            p = a.path().to_path_buf();
            assert!(p
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("netsched-tx-"));
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700);
            a.create_file("nginx.conf", b"x").unwrap();
            // A second create of the same name is refused (no overwrite, no symlink follow).
            assert!(a.create_file("nginx.conf", b"y").is_err());
            std::os::unix::fs::symlink("/etc/passwd", a.path().join("link")).unwrap();
            assert!(a.create_file("link", b"y").is_err());
            assert!(a.create_file("../escape", b"y").is_err());
            assert!(a.create_file("/etc/escape", b"y").is_err());
            let www = a.create_dir("www").unwrap();
            assert!(
                a.create_dir("www").is_err(),
                "an existing folder is refused"
            );
            assert!(
                a.create_dir("link").is_err(),
                "a planted symlink is refused"
            );
            a.create_file("www/index.html", b"<html>").unwrap();
            assert!(www.join("index.html").exists());
            assert!(a.create_file("www/../../x", b"y").is_err());
        }
        assert!(!p.exists());
    }
}
