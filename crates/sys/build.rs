//! Builds the `xdp` port backend's XDP program (bpf/redirect.c) with `clang -target bpf -O2`
//! when a clang is found (`$CLANG`, else `clang` on the PATH). Without one, an empty object
//! is embedded and the reason is compiled in: the `xdp` backend then reports itself
//! unavailable with that reason, and `auto` uses the `tpacket` ring.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/redirect.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("redirect.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    let built = Command::new(&clang)
        .args(["-target", "bpf", "-O2", "-g0", "-c", src, "-o"])
        .arg(&obj)
        .output();
    let reason = match built {
        Ok(o) if o.status.success() => String::new(),
        Ok(o) => format!(
            "the XDP program did not build ({clang} -target bpf: {})",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("failed")
        ),
        Err(e) => format!(
            "built without clang ({clang}: {e}); install Debian's clang and rebuild for the \
             XDP program"
        ),
    };
    if !reason.is_empty() {
        println!("cargo:warning=netsched-sys: xdp backend unavailable: {reason}");
        std::fs::write(&obj, b"").expect("write an empty object to OUT_DIR");
    }
    println!("cargo:rustc-env=NETSCHED_XDP_OBJ={}", obj.display());
    println!("cargo:rustc-env=NETSCHED_XDP_UNAVAILABLE={reason}");
}
