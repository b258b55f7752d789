//! Fuzz targets of netsched: every parser that reads outside input (network bytes,
//! configuration, rule and signature files, control-socket lines), one plain function per
//! target in [`targets`], `fn NAME(data: &[u8])`.
//!
//! A target feeds the bytes to the real parser (the function the daemon calls, never a copy)
//! and asserts what must hold: it never panics, a value it accepts survives its writer
//! (round trip), and it agrees with a reference where one exists (`httparse`, the linear
//! scan, the documented units grammar). A broken invariant is a panic, which both drivers
//! report:
//! - `tests/replay.rs` replays every file of `corpus/<target>/` through its target (`cargo
//!   test -p netsched-fuzz`: seconds, stable Rust, no libFuzzer);
//! - `fuzz/` is a cargo-fuzz project with a three-line wrapper per target, run by
//!   `scripts/fuzz` (libFuzzer, coverage-guided, new inputs written to the corpus folder).
//!
//! docs/testing.md ("Fuzzing") lists the targets, what each checks and how long each has run.

pub mod reference;
pub mod targets;

/// A target: the bytes in, a panic when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target: its name (the corpus folder and the cargo-fuzz target) and its function.
pub const TARGETS: &[(&str, Target)] = &[
    ("http_request", targets::http_request),
    ("http_response", targets::http_response),
    ("proxy_protocol", targets::proxy_protocol),
    ("tls_client_hello", targets::tls_client_hello),
    ("balance_config", targets::balance_config),
    ("nfq_config", targets::nfq_config),
    ("vswitch_config", targets::vswitch_config),
    ("link_args", targets::link_args),
    ("filter_config", targets::filter_config),
    ("lab_scenario", targets::lab_scenario),
    ("filter_rules", targets::filter_rules),
    ("classbench", targets::classbench),
    ("signatures", targets::signatures),
    ("filter_packet", targets::filter_packet),
    ("core_wire", targets::core_wire),
    ("nfq_packet", targets::nfq_packet),
    ("nfq_netlink", targets::nfq_netlink),
    ("control_line", targets::control_line),
    ("units", targets::units),
    ("tuple_merge", targets::tuple_merge),
];
