//! The Debian package, for real: `scripts/package-deb` builds it from this test's `netsched`
//! binary, `dpkg -i` installs it, and the test checks what a user gets — the binary and its
//! version, `man -w netsched-balance`, the completions, the example configurations, the
//! units (`systemd-analyze verify`, and `systemd-analyze security --offline=yes` at most
//! [`MAX_EXPOSURE`]), each unit's check command (its `ExecStartPre=`, `--check` on the
//! installed example) in a scratch network namespace with the interfaces the example names,
//! tab completion in bash, and each daemon (`balance`, `nfq`, `vswitch`, `link`) started from
//! its unit's `ExecStart=` line with `NOTIFY_SOCKET`
//! pointing at a datagram socket this test reads: `READY=1` within [`READY_WITHIN`], then
//! `STOPPING=1` and a clean exit after SIGTERM. Then `dpkg --purge`, and nothing the
//! package installed or made is left.
//!
//! Needs root, dpkg-deb, systemd-analyze, unshare and ip (scripts/test installs them); skips
//! with a printed reason otherwise, and when a `netsched` package is already installed (it
//! is not this test's to remove). A failure anywhere still purges what this test installed.

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Highest `systemd-analyze security` exposure any unit may have (0 = locked down, 10 =
/// unprotected; docs/install.md lists each unit's).
const MAX_EXPOSURE: f64 = 3.0;
/// How long a daemon may take from exec to `READY=1`.
const READY_WITHIN: Duration = Duration::from_secs(20);

const UNITS: &[&str] = &["balance", "nfq", "vswitch", "link", "filter", "shape"];

/// Every installed netsched man page as `name(section)` → its roff text.
fn netsched_pages() -> BTreeMap<String, String> {
    let mut pages = BTreeMap::new();
    for sec in ["1", "5", "8"] {
        let Ok(dir) = std::fs::read_dir(format!("/usr/share/man/man{sec}")) else {
            continue;
        };
        for e in dir.flatten() {
            let file = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = file.strip_suffix(&format!(".{sec}.gz")) else {
                continue;
            };
            if !stem.starts_with("netsched") {
                continue;
            }
            let text = must(Command::new("zcat").arg(e.path()));
            pages.insert(format!("{stem}({sec})"), text);
        }
    }
    pages
}

/// The netsched pages a roff text names, as `name(section)` (`netsched\-x(8)`).
fn references(text: &str) -> Vec<String> {
    let plain = text
        .replace("\\-", "-")
        .replace("\\fB", "")
        .replace("\\fR", "");
    let mut found = Vec::new();
    for (i, _) in plain.match_indices("netsched-") {
        let rest = &plain[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..end].trim_end_matches('.');
        if let Some(sec) = rest[end..].strip_prefix('(').and_then(|r| r.get(..2)) {
            if sec.ends_with(')') && "158".contains(&sec[..1]) {
                found.push(format!("{name}({})", &sec[..1]));
            }
        }
    }
    found
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn must(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let (ok, text) = run(cmd);
    assert!(ok, "{shown} failed:\n{text}");
    text
}

/// Purges the package when dropped (the end of the test, or a failed assertion), and
/// removes /run/netsched if this test made it and it is still there.
struct Installed {
    made_run_dir: bool,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "netsched"])
            .stdout(Stdio::null())
            .status();
        if self.made_run_dir {
            let _ = std::fs::remove_dir_all("/run/netsched");
        }
    }
}

/// A unit file's `Key=` lines (in order), `%i` replaced by `example`.
fn unit_lines(unit: &str, key: &str) -> Vec<String> {
    let path = format!("/lib/systemd/system/netsched-{unit}@.service");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(|l| l.replace("%i", "example"))
        .collect()
}

/// A shell command running `line` as systemd would (variables of the unit's
/// `EnvironmentFile=` split at whitespace) inside a new network namespace with loopback up
/// and the interfaces `devs` (veth pairs: the dummy driver may be missing from the kernel).
fn in_netns(unit: &str, line: &str, devs: &[&str]) -> Command {
    let mut script = String::from("set -e; ip link set lo up; ");
    for d in devs {
        script.push_str(&format!(
            "ip link add {d} type veth peer name {d}p; ip link set {d} up; "
        ));
    }
    let env = format!("/etc/netsched/{unit}/example.conf");
    if Path::new(&env).exists() {
        script.push_str(&format!("set -a; . {env}; set +a; "));
    }
    script.push_str("exec ");
    script.push_str(&line.replace("${", "$").replace('}', ""));
    let mut c = Command::new("unshare");
    c.args(["--net", "--", "sh", "-c", &script]);
    c
}

/// The interfaces each example configuration names.
fn example_devs(unit: &str) -> &'static [&'static str] {
    match unit {
        "vswitch" => &["up0", "vg0", "vg1"],
        "link" | "filter" => &["lan0", "wan0"],
        "shape" => &["eth1"],
        _ => &[],
    }
}

/// Start `unit`'s ExecStart line with NOTIFY_SOCKET set; wait for READY=1, stop it with
/// SIGTERM, wait for STOPPING=1 and a successful exit.
fn start_from_unit(unit: &str, dir: &Path) {
    let exec = unit_lines(unit, "ExecStart");
    assert_eq!(exec.len(), 1, "{unit}: {exec:?}");
    let sock_path = dir.join(format!("notify-{unit}.sock"));
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut child = in_netns(unit, &exec[0], example_devs(unit))
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let wait_for = |what: &str, child: &mut std::process::Child| -> Result<Vec<String>, String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while t0.elapsed() < READY_WITHIN {
            if let Ok(n) = sock.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = msg.lines().any(|l| l == what);
                seen.push(msg);
                if hit {
                    return Ok(seen);
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!("exited ({st}) before {what}; messages {seen:?}"));
            }
        }
        Err(format!(
            "no {what} within {READY_WITHIN:?}; messages {seen:?}"
        ))
    };
    let ready = wait_for("READY=1", &mut child);
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let stopping = ready
        .as_ref()
        .ok()
        .map(|_| wait_for("STOPPING=1", &mut child));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > Duration::from_secs(40) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let ready = ready.unwrap_or_else(|e| panic!("{unit}: {e}\n{log}"));
    eprintln!("{unit}: notified {ready:?}");
    if let Some(s) = stopping {
        s.unwrap_or_else(|e| panic!("{unit}: {e}\n{log}"));
    }
    let status = status.unwrap_or_else(|| panic!("{unit}: did not exit after SIGTERM\n{log}"));
    assert!(status.success(), "{unit}: {status}\n{log}");
    let _ = std::fs::remove_file(&sock_path);
}

/// The exposure score `systemd-analyze security --offline=yes` gives a unit file.
fn exposure(path: &str) -> f64 {
    let text = must(Command::new("systemd-analyze").args([
        "security",
        "--offline=yes",
        "--no-pager",
        path,
    ]));
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no score in:\n{text}"));
    line.split(':')
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unreadable score: {line}"))
}

#[test]
fn the_package_installs_runs_its_units_and_purges_clean() {
    if !netsched_testbed::privileged_test_allowed(
        "the_package_installs_runs_its_units_and_purges_clean",
    ) {
        return;
    }
    for p in [
        "dpkg-deb",
        "systemd-analyze",
        "unshare",
        "ip",
        "man",
        "iptables",
    ] {
        if !have(p) {
            eprintln!("SKIP: {p} is not installed (scripts/test installs it)");
            return;
        }
    }
    let (installed, _) = run(Command::new("dpkg-query").args(["-W", "netsched"]));
    if installed || Path::new("/etc/netsched").exists() {
        eprintln!(
            "SKIP: a netsched package (or /etc/netsched) is already here; not ours to remove"
        );
        return;
    }
    let group_before = run(Command::new("getent").args(["group", "netsched"])).0;
    let var_lib_before = Path::new("/var/lib/netsched").exists();

    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("package-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = must(
        Command::new(root.join("scripts/package-deb"))
            .args(["--binary", env!("CARGO_BIN_EXE_netsched"), "--out"])
            .arg(&dir),
    );
    let deb = out.lines().last().unwrap().trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{out}");

    let made_run_dir = !Path::new("/run/netsched").exists();
    let guard = Installed { made_run_dir };
    must(Command::new("dpkg").args(["-i", &deb]));
    // Every file (not folder) the package installed, to look for after the purge.
    let files: Vec<String> = must(Command::new("dpkg").args(["-L", "netsched"]))
        .lines()
        .filter(|f| !Path::new(f).is_dir())
        .map(str::to_string)
        .collect();
    assert!(files.len() > 20, "{files:?}");

    // The binary, its version with the commit, the man pages, completions, configurations.
    let v = must(Command::new("/usr/bin/netsched").arg("-V"));
    assert!(v.starts_with("netsched "), "{v}");
    let man_excluded = std::fs::read_dir("/etc/dpkg/dpkg.cfg.d").is_ok_and(|rd| {
        rd.flatten().any(|e| {
            std::fs::read_to_string(e.path())
                .is_ok_and(|t| t.contains("path-exclude=/usr/share/man"))
        })
    });
    if man_excluded {
        eprintln!(
            "note: dpkg excludes /usr/share/man here; man -w not checked, the .deb's list is"
        );
        let list = must(Command::new("dpkg-deb").args(["-c", &deb]));
        assert!(
            list.contains("./usr/share/man/man8/netsched-balance.8.gz"),
            "{list}"
        );
    } else {
        let page = must(Command::new("man").args(["-w", "netsched-balance"]));
        assert_eq!(page.trim(), "/usr/share/man/man8/netsched-balance.8.gz");
        must(Command::new("man").args(["-w", "netsched-lab"]));
        must(Command::new("man").args(["-w", "8", "netsched-balance-ctl"]));
        must(Command::new("man").args(["-w", "8", "netsched-filter"]));
        must(Command::new("man").args(["-w", "5", "netsched-balance.toml"]));
        // Every page another page names is installed, and no page points into the source
        // tree; the daemons' pages have the sections an operator looks for.
        let pages = netsched_pages();
        for (page, text) in &pages {
            assert!(
                !text.contains("docs/"),
                "{page} points into the source tree"
            );
            for r in references(text) {
                assert!(
                    pages.contains_key(&r),
                    "{page} names {r}, which is not installed"
                );
            }
        }
        for d in ["balance", "nfq", "vswitch", "filter", "link"] {
            let text = &pages[&format!("netsched-{d}(8)")];
            for s in ["FILES", "SIGNALS", "EXIT STATUS", "EXAMPLES", "SEE ALSO"] {
                assert!(
                    text.contains(&format!(".SH {s}")) || text.contains(&format!(".SH \"{s}\"")),
                    "netsched-{d}(8) has no {s}"
                );
            }
        }
    }
    for f in [
        "/usr/share/bash-completion/completions/netsched",
        "/usr/share/zsh/vendor-completions/_netsched",
        "/usr/share/fish/vendor_completions.d/netsched.fish",
        "/etc/netsched/balance/example.toml",
        "/etc/netsched/nfq/example.toml",
        "/etc/netsched/vswitch/example.toml",
        "/etc/netsched/filter/example.toml",
        "/etc/netsched/filter/example.rules.toml",
        "/etc/netsched/link/example.conf",
        "/etc/netsched/shape/example.conf",
    ] {
        assert!(Path::new(f).is_file(), "{f} missing");
    }
    // Tab completion in bash: the installed script, sourced, completes a command's name and
    // a daemon's flag (clap_complete's function `_netsched` fills COMPREPLY).
    for (line, want) in [
        ("netsched bal", "balance"),
        ("netsched balance --ch", "--check"),
    ] {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            ". /usr/share/bash-completion/completions/netsched; \
             COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{line}'; COMP_POINT={}; \
             _netsched netsched '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            words.join(" "),
            words.len() - 1,
            line.len(),
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let got = must(Command::new("bash").args(["-c", &script]));
        assert!(
            got.lines().any(|l| l.trim() == want),
            "bash completion of {line:?}: {got:?}"
        );
    }
    let conffiles = std::fs::read_to_string("/var/lib/dpkg/info/netsched.conffiles").unwrap();
    assert!(
        conffiles.contains("/etc/netsched/balance/example.toml"),
        "{conffiles}"
    );
    assert!(run(Command::new("getent").args(["group", "netsched"])).0);

    // Units: verified, scored, their check commands pass on the examples. The folder of
    // the control sockets is made as systemd makes it (RuntimeDirectory=).
    std::fs::create_dir_all("/run/netsched").unwrap();
    let mut scores = BTreeMap::new();
    for u in UNITS {
        let path = format!("/lib/systemd/system/netsched-{u}@.service");
        let instance = dir.join(format!("netsched-{u}@example.service"));
        std::fs::copy(&path, &instance).unwrap();
        let (ok, text) = run(Command::new("systemd-analyze").arg("verify").arg(&instance));
        assert!(ok && text.trim().is_empty(), "verify {path}:\n{text}");
        scores.insert(*u, exposure(&path));
        let check = match *u {
            "shape" => format!("{} --check", unit_lines(u, "ExecStart")[0]),
            _ => unit_lines(u, "ExecStartPre")[0].clone(),
        };
        assert!(check.contains("--check"), "{u}: {check}");
        let text = must(&mut in_netns(u, &check, example_devs(u)));
        assert!(text.contains("ok"), "{u} check: {text}");
    }
    eprintln!("systemd-analyze security --offline=yes: {scores:?}");
    for (u, s) in &scores {
        assert!(
            *s <= MAX_EXPOSURE,
            "netsched-{u}@: exposure {s} > {MAX_EXPOSURE}"
        );
    }

    // Every daemon from its unit, readiness through NOTIFY_SOCKET.
    for u in ["balance", "nfq", "vswitch", "link", "filter"] {
        start_from_unit(u, &dir);
    }

    // Purge: nothing of the package is left.
    drop(guard);
    let (known, status) = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "netsched"]));
    assert!(!known || status.contains("not-installed"), "{status}");
    for f in &files {
        assert!(!Path::new(f).exists(), "{f} left after purge");
    }
    for p in [
        "/usr/bin/netsched",
        "/etc/netsched",
        "/lib/systemd/system/netsched-balance@.service",
    ] {
        assert!(!Path::new(p).exists(), "{p} left after purge");
    }
    assert_eq!(
        run(Command::new("getent").args(["group", "netsched"])).0,
        group_before,
        "the group netsched after purge"
    );
    assert_eq!(Path::new("/var/lib/netsched").exists(), var_lib_before);
    if made_run_dir {
        assert!(
            !Path::new("/run/netsched").exists(),
            "/run/netsched left after purge"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
