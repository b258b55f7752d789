//! Files and folders: `mkdtemp(3)`, a private temporary folder created atomically.

use anyhow::{bail, Context, Result};

/// `mkdtemp(3)`: create a new folder from `template` (ending in `XXXXXX`), mode 0700, failing
/// if anything exists under the chosen name. Returns the created path.
pub fn mkdtemp(template: &std::path::Path) -> Result<std::path::PathBuf> {
    let mut bytes = template
        .to_str()
        .context("temporary folder path is not UTF-8")?
        .as_bytes()
        .to_vec();
    if bytes.contains(&0) || !bytes.ends_with(b"XXXXXX") {
        bail!(
            "temporary folder template {}: must end in XXXXXX and contain no NUL",
            template.display()
        );
    }
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated, writable template ending in XXXXXX; mkdtemp
    // replaces the Xs in place and creates the folder with mode 0700, failing if it exists.
    let r = unsafe { libc::mkdtemp(bytes.as_mut_ptr() as *mut libc::c_char) };
    if r.is_null() {
        bail!(
            "cannot create a temporary folder from {}: {}",
            template.display(),
            std::io::Error::last_os_error()
        );
    }
    bytes.pop();
    Ok(std::path::PathBuf::from(
        String::from_utf8(bytes).context("mkdtemp returned non-UTF-8")?,
    ))
}
