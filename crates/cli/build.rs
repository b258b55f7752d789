//! Put the git commit into `netsched -V`: sets `NETSCHED_VERSION` to
//! "0.1.0 (commit 1a2b3c4d5e6f)" from `git rev-parse HEAD`, or to the bare Cargo version when
//! the source is not a git checkout (a crate tarball) or git is missing. Set
//! `NETSCHED_COMMIT` in the environment to name the commit without git (a package build
//! from an exported tree).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var("CARGO_MANIFEST_DIR").ok()?)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=NETSCHED_COMMIT");
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = std::env::var("NETSCHED_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    // Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it points at.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
        let common = std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default())
            .join(common);
        // Only files that exist: cargo reruns a build script whose file is missing every time.
        let mut watch = vec![common.join("packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(common.join(r));
        }
        for w in watch.iter().filter(|w| w.exists()) {
            println!("cargo:rerun-if-changed={}", w.display());
        }
    }
    let full = match commit {
        Some(c) => format!("{version} (commit {c})"),
        None => version,
    };
    println!("cargo:rustc-env=NETSCHED_VERSION={full}");
}
