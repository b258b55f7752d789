//! `netsched link bench` without the CLI (root):
//! `cargo run --release -p netsched-link --example link_bench -- 3 300`
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let pings = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(300);
    netsched_link::bench::run(netsched_link::bench::BenchArgs {
        secs,
        pings,
        json: args.iter().any(|a| a == "--json"),
    })
}
