//! The workspace's layering, checked from `cargo metadata` and the sources
//! (docs/architecture.md, "Layering rules"):
//! - every crate's netsched dependencies are among those its layer allows ([`ALLOWED`]): the
//!   leaves (`core`, `sim`, `util`, `sys`, `metrics`, `report`) depend on nothing above them,
//!   `control` and `metrics` only on `sys` (`metrics`: the process's CPU time), `testbed` on `sys` and `control` (a daemon's `--check` asks
//!   the control socket's group rule),
//!   no data plane (`link`, `vswitch`, `nfq`, `balance`, `filter`) depends on another data plane, on
//!   `report` or on `lab`, only `cli` (the package `netsched`) depends on `lab`;
//! - a crate that is not in [`ALLOWED`] is an error (a new crate gets a layer when it is
//!   added);
//! - only `netsched-sys` contains `unsafe`: the keyword is searched in `src/**/*.rs` of every
//!   other crate, outside comments, strings and character literals;
//! - wall-clock time (`SystemTime`, `CLOCK_REALTIME`) is read only where something is dated
//!   ([`WALL_CLOCK`]): decisions run on monotonic clocks, so a stepped clock changes none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const DATA_PLANES: &[&str] = &[
    "netsched-link",
    "netsched-filter",
    "netsched-vswitch",
    "netsched-nfq",
    "netsched-balance",
];

/// The one crate allowed to contain `unsafe`.
const UNSAFE_HOME: &str = "netsched-sys";

/// Each workspace crate and the netsched crates it may depend on (normal, build and dev).
const ALLOWED: &[(&str, &[&str])] = &[
    ("netsched-core", &[]),
    ("netsched-util", &[]),
    ("netsched-sys", &[]),
    ("netsched-metrics", &["netsched-sys"]),
    ("netsched-sim", &["netsched-core"]),
    ("netsched-report", &["netsched-util"]),
    ("netsched-testbed", &["netsched-sys", "netsched-control"]),
    ("netsched-control", &["netsched-sys"]),
    (
        "netsched-link",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
        ],
    ),
    (
        "netsched-vswitch",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
        ],
    ),
    (
        "netsched-filter",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
        ],
    ),
    (
        "netsched-nfq",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
        ],
    ),
    (
        "netsched-balance",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
        ],
    ),
    (
        "netsched-lab",
        &[
            "netsched-core",
            "netsched-sim",
            "netsched-util",
            "netsched-report",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
            "netsched-link",
            "netsched-vswitch",
            "netsched-nfq",
            "netsched-balance",
            "netsched-filter",
        ],
    ),
    // The fuzz targets: every parser that reads outside input, from the crates that own it.
    (
        "netsched-fuzz",
        &[
            "netsched-core",
            "netsched-util",
            "netsched-control",
            "netsched-balance",
            "netsched-nfq",
            "netsched-vswitch",
            "netsched-link",
            "netsched-filter",
            "netsched-lab",
        ],
    ),
    (
        "netsched",
        &[
            "netsched-core",
            "netsched-sim",
            "netsched-util",
            "netsched-report",
            "netsched-sys",
            "netsched-metrics",
            "netsched-testbed",
            "netsched-control",
            "netsched-link",
            "netsched-vswitch",
            "netsched-nfq",
            "netsched-balance",
            "netsched-filter",
            "netsched-lab",
        ],
    ),
];

/// Crate → the workspace crates it depends on.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every edge of `graph` the layering forbids, one sentence each (empty: the graph is fine).
fn violations(graph: &Graph) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    let mut out = Vec::new();
    for (krate, deps) in graph {
        let Some(ok) = allowed.get(krate.as_str()) else {
            out.push(format!(
                "{krate} has no layer: add it to ALLOWED in crates/cli/tests/layering.rs and \
                 to docs/architecture.md"
            ));
            continue;
        };
        for dep in deps {
            if ok.contains(&dep.as_str()) {
                continue;
            }
            let why =
                if DATA_PLANES.contains(&krate.as_str()) && DATA_PLANES.contains(&dep.as_str()) {
                    "a data plane must not depend on another data plane"
                } else if DATA_PLANES.contains(&krate.as_str()) {
                    "a data plane depends only on core, util, sys, metrics, testbed and control"
                } else {
                    "not an allowed edge of its layer"
                };
            out.push(format!("{krate} depends on {dep}: {why}"));
        }
    }
    out
}

/// The workspace's crates, their netsched dependencies and their folders, from
/// `cargo metadata --no-deps`.
fn workspace() -> (Graph, BTreeMap<String, PathBuf>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    let mut graph = Graph::new();
    let mut dirs = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_string();
        let deps: BTreeSet<String> = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            // `name` is the package depended on, whatever local name (`rename`) it is given.
            .map(|d| d["name"].as_str().unwrap().to_string())
            .filter(|d| names.contains(d))
            .collect();
        let manifest = PathBuf::from(p["manifest_path"].as_str().unwrap());
        dirs.insert(name.clone(), manifest.parent().unwrap().to_path_buf());
        graph.insert(name, deps);
    }
    (graph, dirs)
}

#[test]
fn the_workspace_follows_the_layering_rules() {
    let (graph, _) = workspace();
    assert!(
        graph.len() >= 13 && graph.contains_key(UNSAFE_HOME),
        "cargo metadata listed {:?}",
        graph.keys()
    );
    let v = violations(&graph);
    assert!(v.is_empty(), "layering violations:\n{}", v.join("\n"));
}

#[test]
fn the_rules_reject_a_forbidden_edge_of_a_made_up_graph() {
    let graph = |edges: &[(&str, &[&str])]| -> Graph {
        edges
            .iter()
            .map(|(k, ds)| (k.to_string(), ds.iter().map(|d| d.to_string()).collect()))
            .collect()
    };
    let fine = graph(&[
        ("netsched-core", &[]),
        ("netsched-sys", &[]),
        ("netsched-util", &[]),
        ("netsched-report", &["netsched-util"]),
        ("netsched-vswitch", &["netsched-core", "netsched-sys"]),
        ("netsched-lab", &["netsched-vswitch", "netsched-report"]),
    ]);
    assert_eq!(violations(&fine), Vec::<String>::new());

    let mut bad = fine.clone();
    bad.get_mut("netsched-vswitch")
        .unwrap()
        .insert("netsched-link".into());
    assert_eq!(
        violations(&bad),
        vec![
            "netsched-vswitch depends on netsched-link: a data plane must not depend on \
              another data plane"
        ]
    );

    let mut bad = fine.clone();
    bad.get_mut("netsched-vswitch")
        .unwrap()
        .insert("netsched-report".into());
    assert_eq!(violations(&bad).len(), 1, "{:?}", violations(&bad));
    assert!(violations(&bad)[0].contains("netsched-vswitch depends on netsched-report"));

    for (krate, dep) in [
        ("netsched-core", "netsched-sim"),
        ("netsched-sys", "netsched-core"),
        ("netsched-report", "netsched-lab"),
        ("netsched-util", "netsched-sys"),
    ] {
        let mut bad = fine.clone();
        bad.get_mut(krate).unwrap().insert(dep.into());
        assert_eq!(
            violations(&bad).len(),
            1,
            "{krate} -> {dep} must be refused"
        );
    }

    let mut bad = fine.clone();
    bad.insert("netsched-new".into(), BTreeSet::new());
    assert!(violations(&bad)[0].contains("netsched-new has no layer"));
}

/// `src` with every comment, string literal and character literal replaced by a space (plus
/// the line breaks it spanned, so line numbers stay those of `src`); lifetimes and all other
/// code are kept.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < src.len() {
        if let Some(end) = literal_or_comment_end(src, i) {
            out.push(' ');
            out.extend(src[i..end].matches('\n').map(|_| '\n'));
            i = end;
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// If a comment, string, raw string or character literal starts at byte `i` of `src`, the
/// index just past it.
fn literal_or_comment_end(src: &str, i: usize) -> Option<usize> {
    let b = src.as_bytes();
    let after_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    match b[i] {
        b'/' if b.get(i + 1) == Some(&b'/') => {
            Some(src[i..].find('\n').map_or(src.len(), |p| i + p))
        }
        b'/' if b.get(i + 1) == Some(&b'*') => {
            let (mut depth, mut j) = (0, i);
            while j < b.len() {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        return Some(j);
                    }
                } else {
                    j += 1;
                }
            }
            Some(b.len())
        }
        b'r' | b'b' if !after_ident => raw_string_end(b, i),
        b'"' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            Some((j + 1).min(b.len()))
        }
        b'\'' => {
            // A character literal ('x', '\n', '\'', '\u{..}', 'é'), else a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let from = (i + 3).min(b.len());
                b[from..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| from + p + 1)
            } else {
                let ch = src[i + 1..].chars().next()?;
                (b.get(i + 1 + ch.len_utf8()) == Some(&b'\'')).then_some(i + 2 + ch.len_utf8())
            }
        }
        _ => None,
    }
}

/// If a raw (byte) string literal (`r"…"`, `r#"…"#`, `br"…"`) starts at `i`, the index just
/// past it.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&x| x == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    j += 1;
    while j < b.len() {
        if b[j] == b'"'
            && b[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&x| x == b'#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(b.len())
}

/// Lines (1-based) of `src` where the `unsafe` keyword appears in code.
fn unsafe_lines(src: &str) -> Vec<usize> {
    word_lines(src, "unsafe")
}

/// Lines (1-based) of `src` where `word` appears in code as a whole identifier.
fn word_lines(src: &str, word: &str) -> Vec<usize> {
    let code = code_only(src);
    let cb = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut lines = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find(word) {
        let (s, e) = (at + p, at + p + word.len());
        if (s == 0 || !is_ident(cb[s - 1])) && (e == cb.len() || !is_ident(cb[e])) {
            lines.push(code[..s].matches('\n').count() + 1);
        }
        at = e;
    }
    lines
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_the_sys_crate_contains_unsafe() {
    let (_, dirs) = workspace();
    let mut found = Vec::new();
    let mut scanned = 0;
    for (krate, dir) in &dirs {
        if krate == UNSAFE_HOME {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            scanned += 1;
            for line in unsafe_lines(&text) {
                found.push(format!("{}:{line}", f.display()));
            }
        }
    }
    assert!(scanned > 100, "scanned only {scanned} files");
    assert!(
        found.is_empty(),
        "`unsafe` outside {UNSAFE_HOME} (move the call behind a safe wrapper there):\n{}",
        found.join("\n")
    );
}

/// Where wall-clock time (`SystemTime`, `CLOCK_REALTIME`) may be read, and why: only to date
/// things. Every scheduling decision, timeout and rate runs on monotonic clocks (`Instant`,
/// `CLOCK_MONOTONIC`), so a clock stepped backwards or forwards changes no decision.
const WALL_CLOCK: &[(&str, &str)] = &[
    (
        "crates/balance/src/access_log.rs",
        "the date of an access log line",
    ),
    (
        "crates/balance/src/l7.rs",
        "the date an access log entry carries",
    ),
    (
        "crates/balance/src/tls.rs",
        "a certificate's validity dates",
    ),
    (
        "crates/balance/src/l4.rs",
        "the date of an L4 access log line",
    ),
    (
        "crates/sys/src/clock.rs",
        "the clock of the kernel's packet receive stamps, for latency accounting only",
    ),
    (
        "crates/metrics/src/process.rs",
        "process_start_time_seconds",
    ),
    (
        "crates/testbed/src/lib.rs",
        "a unique suffix for test names",
    ),
];

#[test]
fn wall_clock_time_only_dates_things() {
    let (_, dirs) = workspace();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let mut found = Vec::new();
    for dir in dirs.values() {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            let rel = f.canonicalize().unwrap();
            let rel = rel
                .strip_prefix(&root)
                .unwrap_or(&rel)
                .display()
                .to_string();
            if WALL_CLOCK.iter().any(|(file, _)| *file == rel) {
                continue;
            }
            for word in ["SystemTime", "CLOCK_REALTIME"] {
                for line in word_lines(&text, word) {
                    found.push(format!("{rel}:{line}: {word}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "wall-clock time outside the places that date things (use Instant; or, to date \
         something, add the file to WALL_CLOCK with its reason):\n{}",
        found.join("\n")
    );
}

/// Crates whose library API returns typed errors (each names its value, path, address or
/// system call, and a caller can match on it); `anyhow` appears only in the files of the
/// command edge listed in [`COMMAND_EDGE`].
const TYPED_ERRORS: &[&str] = &["crates/sys", "crates/link", "crates/nfq", "crates/vswitch"];

/// The files of those crates that may use `anyhow`, and why: each is a command's entry point
/// (arguments read, errors printed), not an API another crate calls.
const COMMAND_EDGE: &[(&str, &str)] = &[
    (
        "crates/link/src/cli.rs",
        "`netsched link` and `netsched shape`",
    ),
    ("crates/link/src/bench.rs", "`netsched link bench`"),
    ("crates/nfq/src/cli.rs", "`netsched nfq`"),
    (
        "crates/nfq/src/run_args.rs",
        "`netsched nfq`'s flags read into a configuration",
    ),
    ("crates/nfq/src/ctl_client.rs", "`netsched nfq ctl`"),
    ("crates/nfq/src/bench.rs", "`netsched nfq bench`"),
    (
        "crates/vswitch/src/cli.rs",
        "`netsched vswitch` and `netsched vswitch ctl`",
    ),
];

#[test]
fn library_errors_are_typed_and_anyhow_stays_at_the_command_edge() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap();
    let mut found = Vec::new();
    let mut scanned = 0;
    for krate in TYPED_ERRORS {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        for f in files {
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            scanned += 1;
            if COMMAND_EDGE.iter().any(|(file, _)| *file == rel) {
                continue;
            }
            let text = std::fs::read_to_string(&f).unwrap();
            for line in word_lines(&text, "anyhow") {
                found.push(format!("{rel}:{line}"));
            }
        }
    }
    assert!(scanned > 50, "scanned only {scanned} files");
    assert!(
        found.is_empty(),
        "`anyhow` in a library API (return a typed error; or, for a command's entry point, add \
         the file to COMMAND_EDGE with its reason):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_unsafe_scan_sees_code_and_not_comments_strings_or_names() {
    let src = r####"// unsafe in a line comment
/* unsafe in a /* nested */ block
   comment */
fn f<'a>(x: &'a str) -> char {
    let s = "an unsafe string \" still unsafe";
    let r = r#"raw "unsafe""#;
    let not_unsafe_name = 'u';
    let q = '"';
    let unsafe_cell = 1;
    unsafe { g() }
}
"####;
    assert_eq!(unsafe_lines(src), vec![10]);
    assert_eq!(unsafe_lines("fn x() {}\n// unsafe\n"), Vec::<usize>::new());
    assert_eq!(unsafe_lines("unsafe fn x() {}"), vec![1]);
    assert_eq!(
        unsafe_lines("let c = '\\'';\nunsafe impl Send for X {}"),
        vec![2]
    );
}
