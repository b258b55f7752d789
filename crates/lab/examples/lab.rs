//! `netsched lab` without building the whole CLI (no real data planes linked in):
//! `cargo run --release -p netsched-lab --example lab -- run vm-delay --set backend.batch=8`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Err(e) = netsched_lab::cli::main_with(&refs) {
        eprintln!("netsched lab: error: {e:#}");
        std::process::exit(1);
    }
}
