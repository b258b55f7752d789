//! Output folders that do not outlive a failed run: [`OutDir::create`] makes the folder (and
//! any missing parents) and remembers the topmost folder it created; unless the run calls
//! [`OutDir::keep`], dropping it removes that folder again. A folder that already existed is
//! never removed, nor anything in it.
//!
//! A run that holds several runs (a sweep, a series, every experiment) calls `keep` as soon as
//! one of them has finished: a later failure (the disk full while drawing the charts) must not
//! take finished results with it. What is written last (tables, reports) is written whole or
//! not at all, so a folder without its report is never passed off as complete.

use std::path::{Path, PathBuf};

/// An output folder created for one run (see the module header).
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    /// The topmost folder this run created (`None`: the folder already existed).
    created: Option<PathBuf>,
}

impl OutDir {
    /// Create `path` (with missing parents). An existing folder is used as it is.
    pub fn create(path: &Path) -> anyhow::Result<OutDir> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => {
                return Ok(OutDir {
                    path: path.to_path_buf(),
                    created: None,
                })
            }
            Ok(m) if m.file_type().is_symlink() && path.is_dir() => {
                return Ok(OutDir {
                    path: path.to_path_buf(),
                    created: None,
                })
            }
            Ok(_) => anyhow::bail!(
                "output folder {}: exists and is not a folder",
                path.display()
            ),
            Err(_) => {}
        }
        // The topmost missing ancestor is what this run creates.
        let created = path
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .take_while(|a| std::fs::symlink_metadata(a).is_err())
            .last()
            .map(Path::to_path_buf);
        std::fs::create_dir_all(path)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
        Ok(OutDir {
            path: path.to_path_buf(),
            created,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Did this run create the folder?
    pub fn is_new(&self) -> bool {
        self.created.is_some()
    }

    /// The run succeeded: keep the folder.
    pub fn keep(mut self) {
        self.created = None;
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if let Some(top) = self.created.take() {
            let _ = std::fs::remove_dir_all(&top);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("netsched-outdir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn removes_only_what_it_created() {
        let base = scratch("rm");
        // New nested folders: all of them go when dropped without keep().
        let d = OutDir::create(&base.join("a/b/c")).unwrap();
        assert!(d.is_new() && base.join("a/b/c").is_dir());
        std::fs::write(base.join("a/b/c/partial.csv"), "x").unwrap();
        drop(d);
        assert!(!base.join("a").exists());
        assert!(base.exists());
        // An existing folder and its contents stay.
        std::fs::create_dir_all(base.join("old")).unwrap();
        std::fs::write(base.join("old/mine.txt"), "x").unwrap();
        let d = OutDir::create(&base.join("old")).unwrap();
        assert!(!d.is_new());
        drop(d);
        assert!(base.join("old/mine.txt").exists());
        // keep() keeps.
        let d = OutDir::create(&base.join("kept")).unwrap();
        d.keep();
        assert!(base.join("kept").is_dir());
        // A file in the way is an error.
        std::fs::write(base.join("file"), "x").unwrap();
        let e = OutDir::create(&base.join("file")).unwrap_err().to_string();
        assert!(e.contains("not a folder"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
