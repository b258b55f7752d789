//! The texts of `netsched link`'s and `netsched shape`'s typed errors, word for word: a bad
//! discipline spec, bad flags of the engine and of `shape apply`, and what a rolled-back
//! `shape` change says. Each names the flag or the spec, the value and the rule. No root,
//! no network.

use netsched_link::cli::{ApplyArgs, RunArgs};
use netsched_link::engine::parse_qdisc;
use netsched_link::shape::{Restore, ShapeError, TcError};

mod example_args;
use example_args::{apply_args, run_args};

/// A change to the flags of `netsched link`, and to those of `shape apply`.
type RunChange = Box<dyn Fn(&mut RunArgs)>;
type ApplyChange = Box<dyn Fn(&mut ApplyArgs)>;

#[test]
fn a_bad_discipline_spec_names_the_spec_the_value_and_the_rule() {
    for (spec, text) in [
        (
            "fifo:0",
            "qdisc `fifo:0`: `0` packets: must be between 1 and 1048576",
        ),
        ("fifo:x", "qdisc `fifo:x`: `x` is not a packet count"),
        (
            "red",
            "qdisc `red`: unknown discipline `red` (fifo[:N], ack_sep[:N][+filter][+cap=S], or \
             JSON)",
        ),
        (
            "ack_sep:99999999",
            "qdisc `ack_sep:99999999`: ack_sep: `99999999` packets: must be between 1 and 1048576",
        ),
        (
            "ack_sepX",
            "qdisc `ack_sepX`: ack_sepX: expected ack_sep[:N][+filter][+cap=S]",
        ),
        (
            "ack_sep+bogus",
            "qdisc `ack_sep+bogus`: ack_sep: unknown option `bogus` (filter, cap=S)",
        ),
        (
            "ack_sep+cap=zz",
            "qdisc `ack_sep+cap=zz`: ack_sep: cap `zz` is not a number",
        ),
        (
            r#"{"kind":"fifo","queue_limit":0}"#,
            r#"qdisc `{"kind":"fifo","queue_limit":0}`: queue_limit: must be at least 1"#,
        ),
    ] {
        assert_eq!(parse_qdisc(spec).unwrap_err().to_string(), text, "{spec}");
    }
    let e = parse_qdisc("{bad").unwrap_err().to_string();
    assert!(
        e.starts_with("qdisc `{bad`: not a valid QdiscConfig: "),
        "{e}"
    );
    let e = parse_qdisc(&"x".repeat(70_000)).unwrap_err().to_string();
    assert_eq!(e, "qdisc spec of 70000 bytes: at most 65536");
}

#[test]
fn a_bad_engine_flag_is_named_with_its_value() {
    let cases: Vec<(RunChange, &str)> = vec![
        (Box::new(|a| a.dev_a = None), "--dev-a is required"),
        (
            Box::new(|a| a.dev_b = Some("a".into())),
            "--dev-a and --dev-b are both `a`: they must differ",
        ),
        (
            Box::new(|a| a.pool = 3),
            "--pool 3: must be between 64 and 1048576 slots",
        ),
        (
            Box::new(|a| a.delay_line = 0),
            "--delay-line 0: must be between 1 and 1048576",
        ),
        (
            Box::new(|a| a.ab_qdisc = "red".into()),
            "--ab-qdisc: qdisc `red`: unknown discipline `red` (fifo[:N], \
             ack_sep[:N][+filter][+cap=S], or JSON)",
        ),
        (
            Box::new(|a| a.port = "rings".into()),
            "--port: port backend `rings`: unknown (one of auto, xdp, tpacket, tpacket_v3, packet)",
        ),
    ];
    for (change, text) in cases {
        let mut a = run_args();
        change(&mut a);
        assert_eq!(a.config().unwrap_err().to_string(), text);
    }
    // The units grammar words the value and the rule; the flag comes first.
    for (change, flag, value) in [
        (
            Box::new(|a: &mut RunArgs| a.ba_rate = "fast".into()) as RunChange,
            "--ba-rate: ",
            "`fast`",
        ),
        (Box::new(|a| a.delay = "11s".into()), "--delay: ", "`11s`"),
        (
            Box::new(|a| a.ab_delay = Some("x".into())),
            "--ab-delay: ",
            "`x`",
        ),
        (
            Box::new(|a| a.stats = Some("10ms".into())),
            "--stats: ",
            "`10ms`",
        ),
        (
            Box::new(|a| a.busy_poll = "1s".into()),
            "--busy-poll (a duration such as 50us, 0 = off, or `always`): ",
            "`1s`",
        ),
        (Box::new(|a| a.spin = Some("1s".into())), "--spin: ", "`1s`"),
    ] {
        let mut a = run_args();
        change(&mut a);
        let e = a.config().unwrap_err().to_string();
        assert!(e.starts_with(flag) && e.contains(value), "{e}");
    }
}

#[test]
fn a_bad_shape_flag_is_named_with_its_value() {
    let cases: Vec<(ApplyChange, &str)> = vec![
        (
            Box::new(|a| a.queue = 0),
            "--queue-limit 0: must be between 1 and 100000 packets",
        ),
        (
            Box::new(|a| a.ack_queue = 200_000),
            "--ack-queue-limit 200000: must be between 1 and 100000 packets",
        ),
        (
            Box::new(|a| a.headroom = 51.0),
            "--headroom 51: must be between 0 and 50 percent",
        ),
        (
            Box::new(|a| {
                a.down = Some("1mbit".into());
                a.ifb = Some("eth1".into());
            }),
            "--ifb eth1: must differ from --dev",
        ),
        (
            Box::new(|a| {
                a.down = Some("1mbit".into());
                a.ifb = Some("bad name!".into());
            }),
            "--ifb: interface name `bad name!` is not valid (1–15 characters: letters, digits, \
             - _ . @)",
        ),
        (
            Box::new(|a| a.down = Some("1mbit".into())),
            "--down and --ifb go together",
        ),
        (
            Box::new(|a| a.dev = "this-name-is-far-too-long".into()),
            "--dev: interface name `this-name-is-far-too-long` is not valid (1–15 characters: \
             letters, digits, - _ . @)",
        ),
    ];
    for (change, text) in cases {
        let mut a = apply_args("eth1", "1mbit");
        change(&mut a);
        assert_eq!(a.plan().unwrap_err().to_string(), text);
    }
    let mut a = apply_args("eth1", "1mbit");
    a.up = "fast".into();
    let e = a.plan().unwrap_err().to_string();
    assert!(e.starts_with("--up: ") && e.contains("`fast`"), "{e}");
}

#[test]
fn a_rolled_back_change_says_what_the_restore_achieved_then_why_it_failed() {
    let failed = || {
        Box::new(ShapeError::Tc(TcError::BatchLine {
            line: "qdisc add dev e0 root handle 1: htb".into(),
            reason: "Error: bad rate".into(),
        }))
    };
    let verified = ShapeError::RolledBack {
        restore: Restore::Verified {
            ns: " in network namespace n1".into(),
            devs: vec!["e0".into(), "ifb0".into()],
        },
        source: failed(),
    };
    assert_eq!(
        verified.to_string(),
        "nothing changed in network namespace n1: the previous configuration of e0, ifb0 was \
         restored (verified: tc shows the same qdiscs, classes and filters as before): `tc qdisc \
         add dev e0 root handle 1: htb` failed: Error: bad rate"
    );
    let incomplete = ShapeError::RolledBack {
        restore: Restore::Incomplete {
            ns: String::new(),
            differs: vec!["e0 egress: was [tbf 8001: root], is [none]".into()],
        },
        source: failed(),
    };
    assert_eq!(
        incomplete.to_string(),
        "the previous configuration could NOT be fully restored: e0 egress: was [tbf 8001: \
         root], is [none]: `tc qdisc add dev e0 root handle 1: htb` failed: Error: bad rate"
    );
    // Printed as the binary prints errors (`{:#}` of anyhow), nothing repeats.
    let shown = format!("{:#}", anyhow::Error::from(verified));
    assert_eq!(shown.matches("bad rate").count(), 1, "{shown}");
}
