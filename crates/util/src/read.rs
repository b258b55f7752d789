//! Bounded reading of input files. Every file the tools read goes through [`read_text`]: only a
//! regular file (not a device, FIFO or folder — `/dev/zero` would never end), at most `cap`
//! bytes, valid UTF-8; each refusal names the file, what it is and the bound.

use std::io::Read as _;
use std::path::Path;

/// Read the regular file `path` as UTF-8 text of at most `cap` bytes. `what` says what the file
/// is for in errors ("scenario file", "results.json").
pub fn read_text(path: &Path, cap: u64, what: &str) -> anyhow::Result<String> {
    // Look before opening: opening a FIFO would block until someone writes to it.
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    refuse_non_regular(path, &meta, what)?;
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    refuse_non_regular(path, &meta, what)?;
    if meta.len() > cap {
        anyhow::bail!(
            "{what} {}: {} bytes is over the limit of {cap} bytes",
            path.display(),
            meta.len()
        );
    }
    // The size can change between stat and read: read at most cap + 1 bytes and check again.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot read {what} {}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        anyhow::bail!(
            "{what} {}: grew past the limit of {cap} bytes while being read",
            path.display()
        );
    }
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what} {}: not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

fn refuse_non_regular(path: &Path, meta: &std::fs::Metadata, what: &str) -> anyhow::Result<()> {
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a folder"
        } else {
            "not a regular file (a device, FIFO or socket)"
        };
        anyhow::bail!(
            "{what} {}: is {kind}; expected a regular file",
            path.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_folders_big_and_binary_files() {
        let e = read_text(Path::new("/dev/zero"), 1024, "scenario file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/zero") && e.contains("not a regular file"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("netsched-read-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let e = read_text(&dir, 1024, "x").unwrap_err().to_string();
        assert!(e.contains("a folder"), "{e}");
        // A FIFO is refused without blocking on open.
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.map(|s| s.success()).unwrap_or(false) {
            let e = read_text(&fifo, 1024, "x").unwrap_err().to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let f = dir.join("big.toml");
        std::fs::write(&f, vec![b'a'; 2000]).unwrap();
        let e = read_text(&f, 1024, "scenario file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("2000 bytes") && e.contains("1024"), "{e}");
        assert_eq!(read_text(&f, 2000, "x").unwrap().len(), 2000);
        std::fs::write(&f, [b'a', 0xff, b'b']).unwrap();
        let e = read_text(&f, 1024, "x").unwrap_err().to_string();
        assert!(e.contains("not UTF-8") && e.contains("offset 1"), "{e}");
        let e = read_text(&dir.join("missing"), 1, "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
