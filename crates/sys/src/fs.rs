//! Files and folders: `mkdtemp(3)`, a private temporary folder created atomically.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why [`mkdtemp`] made no folder; each names the template.
#[derive(Debug)]
pub enum MkdtempError {
    /// The template is not UTF-8.
    NotUtf8(PathBuf),
    /// The template does not end in `XXXXXX`, or holds a NUL byte.
    BadTemplate(PathBuf),
    /// `mkdtemp(3)` failed (the parent is missing or not writable, …).
    Create {
        template: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for MkdtempError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MkdtempError::NotUtf8(t) => {
                write!(f, "temporary folder template {}: not UTF-8", t.display())
            }
            MkdtempError::BadTemplate(t) => write!(
                f,
                "temporary folder template {}: must end in XXXXXX and contain no NUL",
                t.display()
            ),
            MkdtempError::Create { template, source } => write!(
                f,
                "cannot create a temporary folder from {}: {source}",
                template.display()
            ),
        }
    }
}

// No `source()`: the text holds the inner error's (a `{:#}` chain would repeat it).
impl std::error::Error for MkdtempError {}

/// `mkdtemp(3)`: create a new folder from `template` (ending in `XXXXXX`), mode 0700, failing
/// if anything exists under the chosen name. Returns the created path.
pub fn mkdtemp(template: &Path) -> Result<PathBuf, MkdtempError> {
    let mut bytes = template
        .to_str()
        .ok_or_else(|| MkdtempError::NotUtf8(template.to_path_buf()))?
        .as_bytes()
        .to_vec();
    if bytes.contains(&0) || !bytes.ends_with(b"XXXXXX") {
        return Err(MkdtempError::BadTemplate(template.to_path_buf()));
    }
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated, writable template ending in XXXXXX; mkdtemp
    // replaces the Xs in place and creates the folder with mode 0700, failing if it exists.
    let r = unsafe { libc::mkdtemp(bytes.as_mut_ptr() as *mut libc::c_char) };
    if r.is_null() {
        return Err(MkdtempError::Create {
            template: template.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    bytes.pop();
    // mkdtemp replaces the Xs with ASCII letters and digits: still UTF-8.
    String::from_utf8(bytes)
        .map(PathBuf::from)
        .map_err(|_| MkdtempError::NotUtf8(template.to_path_buf()))
}
