//! `netsched link bench` without the CLI (root):
//! `cargo run --release -p netsched-link --example link_bench -- 3 300 [--json]
//! [--ports=xdp,tpacket,packet] [--tx-ring-frames=N]`
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs: u32 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let pings = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(300);
    netsched_link::bench::run(netsched_link::bench::BenchArgs {
        duration: format!("{secs}s"),
        secs: None,
        pings,
        json: args.iter().any(|a| a == "--json"),
        ports: args
            .iter()
            .find_map(|a| a.strip_prefix("--ports="))
            .unwrap_or("xdp,tpacket,packet")
            .to_string(),
        tx_ring_frames: args
            .iter()
            .find_map(|a| a.strip_prefix("--tx-ring-frames="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    })
}
