//! `scripts/soak` (docs/testing.md, "Soak") teaches with `--help` and refuses bad options
//! with an error naming the option, before it asks for root or starts anything. The soak
//! itself is a long real run that no test starts.

use std::path::PathBuf;
use std::process::{Command, Output};

fn soak(args: &[&str]) -> Output {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/soak");
    Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect("bash runs scripts/soak")
}

#[test]
fn help_lists_every_option_and_daemon() {
    let out = soak(&["--help"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--daemons",
        "--duration",
        "--interval",
        "--warmup",
        "--window",
        "--rate",
        "--out",
        "balance-l4",
        "balance-l7",
        "nfq",
        "vswitch",
        "link",
        "filter",
        "5 %",
    ] {
        assert!(
            text.contains(word),
            "--help does not mention {word}:\n{text}"
        );
    }
}

#[test]
fn bad_options_are_refused_with_the_option_named() {
    for (args, names) in [
        (&["--daemons", "balance-l9"][..], "balance-l9"),
        (&["--daemons", "nfq,,link"][..], "--daemons"),
        (&["--duration", "10x"][..], "--duration"),
        (&["--duration", "30s"][..], "--duration"),
        (&["--interval", "0"][..], "--interval"),
        (&["--duration", "5m", "--warmup", "5m"][..], "--warmup"),
        (&["--rate", "-3"][..], "--rate"),
        (&["--rate", "half"][..], "--rate"),
        (&["--rate"][..], "--rate"),
        (&["--max-seconds", "1h"][..], "--max-seconds"),
        (&["--frobnicate"][..], "--frobnicate"),
    ] {
        let out = soak(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(names),
            "{args:?}: the error does not name {names}: {err}"
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: started something: {out:?}"
        );
    }
}
