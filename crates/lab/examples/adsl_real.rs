//! Run the real adsl-ack experiment without the lab runner (root):
//! `cargo run -p netsched-lab --example adsl_real -- '{"real_variants":["reno/88"]}' /tmp/out [--full]`
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let params: serde_json::Value =
        serde_json::from_str(args.get(1).map(String::as_str).unwrap_or("{}"))?;
    let out = std::path::PathBuf::from(args.get(2).map(String::as_str).unwrap_or("/tmp/adsl-real"));
    let quick = !args.iter().any(|a| a == "--full");
    let o = netsched_lab::real::adsl_ack::run_real(&params, 1, &out, quick)?;
    for c in &o.comparisons {
        println!("{:<70} paper {:<32} ours {}", c.quantity, c.paper, c.ours);
    }
    for c in &o.checks {
        println!(
            "[{}] {} — {}",
            if c.passed { "PASS" } else { "FAIL" },
            c.claim,
            c.detail
        );
    }
    o.results.write(&out)?;
    Ok(())
}
