//! What `netsched` tells a user in its help and its errors: the about line names every
//! real-Linux command, `link --help` shows the required flags as required and every flag
//! with a line of help, `-V` names the commit, and errors name the cause (`nfq cleanup` with
//! an iptables front end that is not installed; `nfq` without the privilege it needs).

use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_netsched")
}

fn run(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().expect("exited, not killed"),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_about_line_names_every_command_on_real_linux() {
    let (code, text) = run(Command::new(bin()).arg("--help"));
    assert_eq!(code, 0);
    // The about paragraph: the lines before the first blank one (wrapped to the terminal).
    let about: String = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    for c in [
        "`shape`",
        "`link`",
        "`nfq`",
        "`balance`",
        "`vswitch`",
        "`filter`",
    ] {
        assert!(about.contains(c), "{c} missing from: {about}");
    }
}

#[test]
fn link_help_shows_required_devices_and_documents_every_flag() {
    let (code, text) = run(Command::new(bin()).args(["link", "--help"]));
    assert_eq!(code, 0);
    let usage = text.lines().find(|l| l.starts_with("Usage:")).unwrap();
    assert!(
        usage.contains("--dev-a <DEV_A>") && !usage.contains("[--dev-a"),
        "{usage}"
    );
    for flag in ["--ab-delay <AB_DELAY>", "--ba-delay <BA_DELAY>"] {
        let i = text.find(flag).unwrap_or_else(|| panic!("{flag}: {text}"));
        let rest = &text[i + flag.len()..];
        let help = rest.lines().next().unwrap().trim().to_string()
            + rest.lines().nth(1).unwrap_or_default().trim();
        assert!(help.contains("delay"), "{flag} has no help: {help:?}");
    }
}

#[test]
fn version_names_the_commit_in_a_git_checkout() {
    let (code, text) = run(Command::new(bin()).arg("-V"));
    assert_eq!(code, 0);
    let git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(o) if o.status.success() => {
            let commit = String::from_utf8_lossy(&o.stdout).trim().to_string();
            assert_eq!(
                text.trim(),
                format!("netsched {} (commit {commit})", env!("CARGO_PKG_VERSION"))
            );
        }
        _ => assert_eq!(
            text.trim(),
            format!("netsched {}", env!("CARGO_PKG_VERSION"))
        ),
    }
}

#[test]
fn nfq_cleanup_with_a_missing_iptables_is_an_error() {
    let (code, text) = run(Command::new(bin()).args([
        "nfq",
        "cleanup",
        "--iptables",
        "no-such-iptables-7f3a",
        "--control-socket",
        "/nonexistent-netsched/nfq.sock",
    ]));
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("no-such-iptables-7f3a") && !text.contains("removed"),
        "{text}"
    );
}

#[test]
fn nfq_without_privilege_says_it_needs_root() {
    let is_root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    // As root, run it as nobody (setpriv, util-linux). Everything nobody touches lives in a
    // fresh folder under the system's temporary folder, owned by nobody: a copy of the binary
    // and the socket's place. The checkout may sit in a folder nobody cannot search (mode
    // 0700), so neither the build's binary nor the target folder is reachable from there.
    let dir = netsched_testbed::TempDir::new("nfq-noroot").unwrap();
    let exe = dir.path().join("netsched");
    std::fs::copy(bin(), &exe).unwrap();
    let socket = dir.path().join("nfq.sock");
    let args = [
        "nfq",
        "--port",
        "80",
        "--class",
        "a=90",
        "--control-socket",
        socket.to_str().unwrap(),
    ];
    let mut cmd = if is_root {
        dir.hand_to(65534, 65534, &[]).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let (code, text) = run(cmd.args(args));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("needs root (CAP_NET_ADMIN)"), "{text}");
}
