//! Valid flags of `netsched link` and of `shape apply`, as the tests start from: the unit
//! tests of `src/cli.rs` (which include this file by path) and `tests/error_texts.rs` change
//! one flag at a time. The including module has `RunArgs` and `ApplyArgs` in scope.

use super::{ApplyArgs, RunArgs};

/// `netsched link` between `a` and `b`: 800 kbit/s a→b, 2 Mbit/s back, 10 ms each way.
pub fn run_args() -> RunArgs {
    RunArgs {
        dev_a: Some("a".into()),
        dev_b: Some("b".into()),
        ab_rate: "800kbit".into(),
        ba_rate: "2mbit".into(),
        delay: "10ms".into(),
        ab_delay: None,
        ba_delay: None,
        ab_qdisc: "fifo:100".into(),
        ba_qdisc: "fifo:1000".into(),
        pool: 1024,
        delay_line: 1024,
        stats: None,
        busy_poll: "50us".into(),
        spin: None,
        port: "auto".into(),
        ring_frames: 4096,
        tx_ring_frames: 0,
        duration: None,
        metrics: None,
        metrics_public: false,
        check: false,
    }
}

/// `shape apply --dev DEV --up UP --dry-run`, queues of 100.
pub fn apply_args(dev: &str, up: &str) -> ApplyArgs {
    ApplyArgs {
        dev: dev.into(),
        up: up.into(),
        down: None,
        ifb: None,
        queue: 100,
        ack_queue: 100,
        headroom: 5.0,
        no_ack_priority: false,
        replace: false,
        dry_run: true,
        check: false,
    }
}
