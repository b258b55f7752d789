//! Embed every `scenarios/*.toml` of the workspace into the binary, so `netsched lab` works
//! from any directory. Generates `$OUT_DIR/scenarios.rs` holding
//! `pub static EMBEDDED: &[(&str, &str)] = &[(name, include_str!(file)), ...];` sorted by name.
//! A missing scenario is not a build error: the runner reports it when that experiment runs.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dir = manifest.join("../../scenarios");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut entries: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) == Some("toml") {
                if let Some(stem) = p.file_stem().and_then(|s| s.to_str()) {
                    println!("cargo:rerun-if-changed={}", p.display());
                    let abs = p.canonicalize().unwrap_or(p.clone());
                    entries.push((stem.to_string(), abs));
                }
            }
        }
    }
    entries.sort();
    let mut code = String::from("pub static EMBEDDED: &[(&str, &str)] = &[\n");
    for (name, path) in &entries {
        code.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("scenarios.rs");
    std::fs::write(out, code).expect("write scenarios.rs");
}
