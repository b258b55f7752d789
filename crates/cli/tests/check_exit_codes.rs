//! `--check` of every daemon and of `shape apply`, and the exit codes every command shares
//! (docs/install.md, "Exit codes"): 0 valid, 1 invalid (one line on stderr naming the key or
//! flag), 2 usage. Each check is run against something it must accept and something it must
//! refuse, so a check that accepts everything fails here. No root needed: nothing starts.

use std::path::PathBuf;
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_netsched")
}

/// Exit code, stdout, stderr.
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Self {
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("check-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn assert_invalid(args: &[&str], needle: &str) {
    let (code, _, err) = run(args);
    assert_eq!(code, 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn balance_check_accepts_a_free_address_and_refuses_a_taken_one() {
    let d = Dir::new("balance");
    let cfg = |listen: std::net::SocketAddr| {
        format!(
            "mode = \"l7\"\nlisten = [\"{listen}\"]\nalgorithm = {{ kind = \"p2c\" }}\n\
             control_socket = \"{}\"\n[[server]]\nname = \"s1\"\naddr = \"127.0.0.1:9\"\n",
            d.path("ctl.sock")
        )
    };
    let ok = d.file("ok.toml", &cfg(free_port()));
    let (code, out, err) = run(&["balance", "--config", &ok, "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok"), "{out}");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = d.file("taken.toml", &cfg(held.local_addr().unwrap()));
    assert_invalid(&["balance", "--config", &taken, "--check"], "in use");
    let (code, _, err) = run(&["balance", "--config", &ok, "--check", "--bogus"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn nfq_check_validates_the_file_and_the_host() {
    let d = Dir::new("nfq");
    let cfg = |socket: &str, extra: &str| {
        format!(
            "control_socket = \"{socket}\"\n{extra}\n[service]\nports = [80]\n\
             [[class]]\nname = \"gold\"\npercentile = 90\n"
        )
    };
    let ok = d.file("ok.toml", &cfg(&d.path("nfq.sock"), ""));
    let (code, out, err) = run(&["nfq", "--config", &ok, "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ok"), "{out}");
    let missing_dir = d.file("dir.toml", &cfg(&d.path("no/nfq.sock"), ""));
    assert_invalid(
        &["nfq", "--config", &missing_dir, "--check"],
        "does not exist",
    );
    let no_iptables = d.file(
        "ipt.toml",
        &cfg(&d.path("nfq.sock"), "iptables = \"no-such-iptables-7f3a\""),
    );
    assert_invalid(
        &["nfq", "--config", &no_iptables, "--check"],
        "no-such-iptables-7f3a",
    );
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();
    assert_invalid(
        &["nfq", "--config", &ok, "--metrics", &busy, "--check"],
        "in use",
    );
    let bad = d.file("bad.toml", "queue = \"x\"\n");
    let (code, _, _) = run(&["nfq", "--config", &bad, "--check"]);
    assert_eq!(code, 1);
    let (code, _, _) = run(&["nfq", "--check", "--nfqueue", "notanumber"]);
    assert_eq!(code, 2);
}

#[test]
fn vswitch_link_and_shape_checks_find_missing_interfaces() {
    let d = Dir::new("vswitch");
    // The port: any interface of this namespace besides lo (the uplink).
    let port = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n != "lo");
    let cfg = |uplink: &str, port: &str| {
        format!(
            "uplink = \"{uplink}\"\ndiscipline = \"drr\"\npacket_rate = 1000\n\
             [[port]]\ndev = \"{port}\"\ntier = 1\nbound = \"30ms\"\n"
        )
    };
    let sock = d.path("vs.sock");
    if let Some(port) = &port {
        let ok = d.file("ok.toml", &cfg("lo", port));
        let (code, out, err) = run(&[
            "vswitch",
            "--config",
            &ok,
            "--control-socket",
            &sock,
            "--check",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("ok"), "{out}");
    } else {
        eprintln!("note: only lo here; vswitch --check on existing interfaces not run");
    }
    let missing = d.file("missing.toml", &cfg("nosuch7f3a", "lo"));
    assert_invalid(
        &[
            "vswitch",
            "--config",
            &missing,
            "--control-socket",
            &sock,
            "--check",
        ],
        "uplink = nosuch7f3a",
    );

    if let Some(port) = &port {
        let (code, out, err) = run(&["link", "--dev-a", "lo", "--dev-b", port, "--check"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("ok"), "{out}");
    }
    assert_invalid(
        &["link", "--dev-a", "lo", "--dev-b", "nosuch7f3a", "--check"],
        "--dev-b = nosuch7f3a",
    );
    // --dev-a and --dev-b are required: a usage error, not a runtime one.
    let (code, _, err) = run(&["link", "--dev-a", "lo", "--check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--dev-b"), "{err}");

    let have_tc = Command::new("sh")
        .args(["-c", "command -v tc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if have_tc {
        let (code, out, err) = run(&["shape", "apply", "--dev", "lo", "--up", "1mbit", "--check"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("ok"), "{out}");
    } else {
        eprintln!("note: tc is not installed; shape apply --check on lo not run");
    }
    assert_invalid(
        &[
            "shape",
            "apply",
            "--dev",
            "nosuch7f3a",
            "--up",
            "1mbit",
            "--check",
        ],
        "--dev = nosuch7f3a",
    );
    // --dry-run looks at the interface too (it printed a script for any name before).
    assert_invalid(
        &[
            "shape",
            "apply",
            "--dev",
            "nosuch7f3a",
            "--up",
            "1mbit",
            "--dry-run",
        ],
        "no such interface",
    );
    let (code, out, err) = run(&[
        "shape",
        "apply",
        "--dev",
        "lo",
        "--up",
        "1mbit",
        "--dry-run",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("tc -batch"), "{out}");
    let (code, _, _) = run(&["shape", "apply", "--dev", "lo", "--up", "fast", "--check"]);
    assert_eq!(code, 1);
    let (code, _, _) = run(&["shape", "apply", "--up", "1mbit", "--check"]);
    assert_eq!(code, 2);
}

/// Old configuration spellings (docs/cli.md, "Renames") are read, each with a warning on
/// stderr naming the file, the old and the new spelling; the new spellings warn of nothing.
#[test]
fn old_configuration_spellings_are_read_with_a_warning_naming_the_file() {
    let d = Dir::new("renames");
    let warned = |args: &[&str], file: &str, want: &[&str]| {
        let (_, _, err) = run(args);
        for w in want {
            let line = format!("netsched: warning: {file}: {w}");
            assert!(err.contains(&line), "{args:?}: no {line:?} in {err}");
        }
        err
    };

    let balance = |name: &str, keys: &str| {
        d.file(
            name,
            &format!(
                "mode = \"l7\"\nlisten = [\"{}\"]\nalgorithm = {{ kind = \"p2c\" }}\n\
                 control_socket = \"{}\"\n{keys}\n[[server]]\nname = \"s1\"\n\
                 addr = \"127.0.0.1:9\"\n",
                free_port(),
                d.path(&format!("{name}.sock"))
            ),
        )
    };
    let old = balance("bal-old.toml", "max_connections = 100\nqueue = \"fifo\"");
    let (code, _, err) = run(&["balance", "--config", &old, "--check"]);
    assert_eq!(code, 0, "{err}");
    warned(
        &["balance", "--config", &old, "--check"],
        &old,
        &[
            "max_connections is renamed max_client_connections",
            "queue = \"fifo\" is renamed discipline = \"fifo\"",
        ],
    );
    let new = balance(
        "bal-new.toml",
        "max_client_connections = 100\ndiscipline = \"fifo\"",
    );
    let (code, _, err) = run(&["balance", "--config", &new, "--check"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");

    let nfq = |name: &str, keys: &str, class: &str| {
        d.file(
            name,
            &format!(
                "control_socket = \"{}\"\n{keys}\n[service]\nports = [80]\n\
                 [[class]]\nname = \"gold\"\npercentile = 90\n{class}\n\
                 [[class]]\nname = \"rest\"\npercentile = 50\n",
                d.path(&format!("{name}.sock"))
            ),
        )
    };
    let old = nfq(
        "nfq-old.toml",
        "queue = 5\ndiscipline = \"strict\"\n[limits]\nmax_held_packets = 100\n\
         kernel_queue_maxlen = 1000\n[[table]]\ncidr = \"10.1.0.0/16\"\nclass = \"gold\"",
        "",
    );
    warned(
        &["nfq", "--config", &old, "--check"],
        &old,
        &[
            "queue is renamed nfqueue",
            "discipline = \"strict\" is renamed \"strict_priority\"",
            "[limits] max_held_packets is renamed held_limit",
            "[limits] kernel_queue_maxlen is renamed nfqueue_limit",
            "[[table]] (cidr, class) is written sources",
        ],
    );
    let new = nfq(
        "nfq-new.toml",
        "nfqueue = 5\ndiscipline = \"strict_priority\"\n[limits]\nheld_limit = 100\n\
         nfqueue_limit = 1000",
        "sources = [\"10.1.0.0/16\"]",
    );
    let (code, out, err) = run(&["nfq", "--config", &new, "--check"]);
    assert!(!err.contains("warning"), "{err}");
    if code == 0 {
        assert!(
            out.contains("nfqueue 5") && out.contains("strict_priority"),
            "{out}"
        );
    }

    // vswitch reads the file before it looks for the interfaces: the warning comes first.
    let vswitch = |name: &str, keys: &str| {
        d.file(
            name,
            &format!(
                "uplink = \"nosuch7f3a\"\ndiscipline = \"drr\"\npacket_rate = 1000\n{keys}\n\
                 [[port]]\ndev = \"lo\"\ntier = 1\nbound = \"30ms\"\n"
            ),
        )
    };
    let sock = d.path("vs.sock");
    let old = vswitch("vs-old.toml", "queue = 64");
    warned(
        &[
            "vswitch",
            "--config",
            &old,
            "--control-socket",
            &sock,
            "--check",
        ],
        &old,
        &["queue (packets of a vif queue) is renamed queue_limit"],
    );
    let new = vswitch("vs-new.toml", "queue_limit = 64");
    let (code, _, err) = run(&[
        "vswitch",
        "--config",
        &new,
        "--control-socket",
        &sock,
        "--check",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("warning"), "{err}");
}
