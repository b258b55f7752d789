//! Configuration files for `netsched replay`: TOML, read with a size bound, every error naming
//! the file.

use anyhow::{anyhow, bail, Result};
use std::io::Read;
use std::path::Path;

/// The largest configuration file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Read and parse a TOML configuration file.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| anyhow!("cannot read config {name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("cannot read config {name}: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        bail!("{name}: larger than {MAX_CONFIG_BYTES} bytes; not a configuration file?");
    }
    parse_toml(&name, &bytes)
}

/// Parse configuration bytes read from `name`.
pub fn parse_toml<T: serde::de::DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    let text = std::str::from_utf8(bytes).map_err(|e| anyhow!("{name}: not UTF-8 text: {e}"))?;
    toml::from_str(text).map_err(|e| anyhow!("{name}: {e}"))
}
