//! The vocabulary test: walks every command of `netsched` (the clap tree) and fails when a
//! concept of docs/cli.md appears under another name than its canonical one, when an old
//! spelling is accepted without being in the renames table (so without its warning), when a
//! flag or argument has no help text, or when help text still teaches an old spelling.

use crate::vocab::{COMMAND_MOVES, FLAG_RENAMES, VERB_RENAMES};
use crate::Cli;
use clap::CommandFactory;

/// One concept, its canonical long flag, and spellings no command may use for it.
struct Concept {
    name: &'static str,
    canonical: &'static str,
    /// Whether the canonical flag takes a value (a duration, a path, an address...).
    takes_value: bool,
    forbidden: &'static [&'static str],
}

const CONCEPTS: &[Concept] = &[
    Concept {
        name: "control socket",
        canonical: "control-socket",
        takes_value: true,
        forbidden: &[
            "socket",
            "control",
            "ctl-socket",
            "control-path",
            "sock",
            "ctl",
        ],
    },
    Concept {
        name: "control socket's group",
        canonical: "control-group",
        takes_value: true,
        forbidden: &["group", "socket-group", "ctl-group"],
    },
    Concept {
        name: "stats interval",
        canonical: "stats",
        takes_value: true,
        forbidden: &[
            "stats-interval",
            "interval",
            "stats-every",
            "report-interval",
        ],
    },
    Concept {
        name: "busy polling",
        canonical: "busy-poll",
        takes_value: true,
        forbidden: &["spin", "poll", "busy-wait", "busy-poll-us", "spin-time"],
    },
    Concept {
        name: "duration of a run",
        canonical: "duration",
        takes_value: true,
        forbidden: &["secs", "seconds", "runtime", "run-time", "length", "for"],
    },
    Concept {
        name: "CPU pinning",
        canonical: "cpu",
        takes_value: true,
        forbidden: &["pin", "cpus", "affinity", "core", "pin-cpu"],
    },
    Concept {
        name: "metrics listener",
        canonical: "metrics",
        takes_value: true,
        forbidden: &[
            "metrics-addr",
            "metrics-listen",
            "prometheus",
            "listen-metrics",
        ],
    },
    Concept {
        name: "configuration file",
        canonical: "config",
        takes_value: true,
        forbidden: &["conf", "config-file", "cfg"],
    },
    Concept {
        name: "network namespace",
        canonical: "netns",
        takes_value: true,
        forbidden: &["ns", "namespace"],
    },
    Concept {
        name: "JSON output",
        canonical: "json",
        takes_value: false,
        forbidden: &["format-json", "output-json", "as-json"],
    },
];

/// A long flag may not carry a unit in its name: the value carries it (units grammar).
const UNIT_SUFFIXES: &[&str] = &[
    "-ns", "-us", "-ms", "-s", "-sec", "-secs", "-seconds", "-kbps", "-mbps", "-kbit", "-mbit",
    "-bytes", "-kb", "-mb", "-pct",
];

/// Old spellings no help text may still teach.
const OLD_IN_HELP: &[&str] = &[
    "--socket ",
    "--socket]",
    "--spin",
    "--secs",
    "--seconds",
    "show-servers",
    "show-ports",
    "auto-quantile",
    "netsched ctl ",
    " wf2q,",
    "--pin ",
];

/// Hidden commands that are not old places: packaging and the Slurm sweep's own steps.
const INTERNAL: &[&str] = &["generate", "lab sweep-task", "lab sweep-merge"];

/// Every command as (path below `netsched`, command), depth first.
fn walk() -> Vec<(String, clap::Command)> {
    fn go(prefix: &str, c: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
        for sub in c.get_subcommands() {
            let path = if prefix.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{prefix} {}", sub.get_name())
            };
            out.push((path.clone(), sub.clone()));
            go(&path, sub, out);
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = vec![(String::new(), cmd.clone())];
    go("", &cmd, &mut out);
    out
}

/// The new name of `--old` in command `path`, if the renames table lists it there (a global
/// flag of `scope` is also one of its subcommands').
fn renamed_in(old: &str, path: &str, global: bool) -> Option<&'static str> {
    FLAG_RENAMES
        .iter()
        .find(|r| {
            r.old == format!("--{old}")
                && r.scope
                    .iter()
                    .any(|s| *s == path || (global && path.starts_with(&format!("{s} "))))
        })
        .map(|r| r.new)
}

fn is_builtin(a: &clap::Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

#[test]
fn every_concept_has_one_name_in_every_command() {
    let mut problems = Vec::new();
    for (path, cmd) in walk() {
        for a in cmd.get_arguments().filter(|a| !is_builtin(a)) {
            let Some(long) = a.get_long() else { continue };
            let aliases: Vec<&str> = a.get_all_aliases().unwrap_or_default();
            for c in CONCEPTS {
                if long == c.canonical && c.takes_value != a.get_action().takes_values() {
                    problems.push(format!(
                        "`{path}` --{long}: the {} flag must {}take a value",
                        c.name,
                        if c.takes_value { "" } else { "not " }
                    ));
                }
                if c.forbidden.contains(&long) {
                    // Allowed only as a hidden, deprecated flag with its warning.
                    let ok =
                        a.is_hide_set() && renamed_in(long, &path, a.is_global_set()).is_some();
                    if !ok {
                        problems.push(format!(
                            "`{path}` --{long}: the {} is spelled --{}",
                            c.name, c.canonical
                        ));
                    }
                }
            }
            for al in &aliases {
                if renamed_in(al, &path, a.is_global_set()).is_none() {
                    problems.push(format!(
                        "`{path}` --{long} accepts --{al}, which is not in vocab::FLAG_RENAMES for `{path}` (no warning would be printed)"
                    ));
                }
            }
            if UNIT_SUFFIXES.iter().any(|s| long.ends_with(s)) {
                problems.push(format!(
                    "`{path}` --{long}: a unit in a flag name (give the unit in the value)"
                ));
            }
            if a.is_hide_set() && !a.get_id().as_str().contains("test") {
                let listed = renamed_in(long, &path, a.is_global_set()).is_some();
                let test_hook = a
                    .get_help()
                    .is_some_and(|h| h.to_string().starts_with("Test hook"));
                if !listed && !test_hook {
                    problems.push(format!(
                        "`{path}` --{long} is hidden but neither a listed old spelling nor a test hook"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn every_daemon_has_ctl_in_the_same_place_with_the_same_verbs() {
    let all = walk();
    let find = |p: &str| all.iter().find(|(path, _)| path == p).map(|(_, c)| c);
    for daemon in ["nfq", "balance", "vswitch", "filter"] {
        let ctl = find(&format!("{daemon} ctl"))
            .unwrap_or_else(|| panic!("`netsched {daemon} ctl` is missing"));
        let socket = ctl
            .get_arguments()
            .find(|a| a.get_long() == Some("control-socket"))
            .unwrap_or_else(|| panic!("`{daemon} ctl` has no --control-socket"));
        assert!(
            socket.is_global_set(),
            "`{daemon} ctl`: --control-socket must be accepted after the verb too"
        );
        assert!(
            find(&format!("{daemon} ctl show")).is_some(),
            "`{daemon} ctl show` is missing"
        );
        let daemon_cmd = find(daemon).unwrap();
        if daemon != "balance" {
            // balance reads its socket from its configuration file (`control_socket`).
            assert!(
                daemon_cmd
                    .get_arguments()
                    .any(|a| a.get_long() == Some("control-socket")),
                "`{daemon}` has no --control-socket"
            );
        }
    }
    // Old places and verbs still parse, hidden, and each is in the renames table.
    for (path, cmd) in &all {
        let parent_path = path.rsplit_once(' ').map_or("", |(p, _)| p);
        for al in cmd.get_all_aliases() {
            assert!(
                VERB_RENAMES
                    .iter()
                    .any(|v| v.parent == parent_path && v.old == al && cmd.get_name() == v.new),
                "`{path}` accepts the alias `{al}`, not in vocab::VERB_RENAMES"
            );
        }
        let under_help = path.split(' ').any(|w| w == "help");
        if cmd.is_hide_set() && !path.is_empty() && !under_help {
            assert!(
                COMMAND_MOVES.iter().any(|(old, _)| old == path)
                    || INTERNAL.contains(&path.as_str()),
                "`{path}` is hidden but neither a listed move nor an internal command"
            );
        }
    }
    for v in VERB_RENAMES {
        let p = format!("{} {}", v.parent, v.new);
        let c = find(&p).unwrap_or_else(|| panic!("`{p}` is missing"));
        assert!(
            c.get_all_aliases().any(|a| a == v.old),
            "`{p}` lacks `{}`",
            v.old
        );
    }
    for (old, new) in COMMAND_MOVES {
        assert!(find(old).is_some_and(|c| c.is_hide_set()), "`{old}`");
        assert!(find(new).is_some(), "`{new}`");
    }
}

#[test]
fn every_flag_and_argument_has_help_and_help_teaches_no_old_spelling() {
    let mut problems = Vec::new();
    for (path, mut cmd) in walk() {
        for a in cmd.get_arguments().filter(|a| !is_builtin(a)) {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if help.trim().is_empty() {
                problems.push(format!("`{path}` {}: no help text", a.get_id()));
            }
        }
        // Old places (hidden) and clap's `help` subcommands render their parent's words.
        let old_place = COMMAND_MOVES
            .iter()
            .any(|(old, _)| path == *old || path.starts_with(&format!("{old} ")));
        if cmd.is_hide_set() || old_place || path.split(' ').any(|w| w == "help") {
            continue;
        }
        let text = cmd.render_long_help().to_string();
        for old in OLD_IN_HELP {
            if text.contains(old) {
                problems.push(format!("`{path}` --help still says {old:?}"));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_renames_table_only_names_flags_that_exist() {
    let all = walk();
    for r in FLAG_RENAMES {
        let new_flag = r.new.split_whitespace().next().unwrap();
        for scope in r.scope {
            let (_, cmd) = all
                .iter()
                .find(|(p, _)| p == scope)
                .unwrap_or_else(|| panic!("{}: no command `{scope}`", r.old));
            let has = |name: &str| {
                cmd.get_arguments().any(|a| {
                    a.get_long() == Some(name)
                        || a.get_all_aliases().unwrap_or_default().contains(&name)
                })
            };
            assert!(
                has(r.old.trim_start_matches("--")),
                "`{scope}` does not accept {}",
                r.old
            );
            assert!(
                has(new_flag.trim_start_matches("--")),
                "`{scope}` has no {new_flag}"
            );
        }
    }
}

/// Old spellings of configuration keys and values (docs/cli.md, "Renames"), as they would be
/// written in a file or a command line: still read, with a warning, for one release, and
/// taught nowhere. Each is (text, what may follow it: `None` anything, `Some(f)` a character
/// `f` accepts); no letter, digit, `_` or `.` may precede it.
type After = Option<fn(char) -> bool>;
fn letter(c: char) -> bool {
    c.is_ascii_alphabetic()
}
fn digit(c: char) -> bool {
    c.is_ascii_digit()
}
fn not_underscore(c: char) -> bool {
    c != '_'
}
const OLD_CONFIG_SPELLINGS: &[(&str, After)] = &[
    // balance: the discipline (a word value; `timeouts.queue = "1s"` starts with a digit).
    ("queue = \"", Some(letter)),
    // nfq's NFQUEUE number, vswitch's vif queue (a bare count).
    ("queue = ", Some(digit)),
    ("discipline = \"strict\"", None),
    ("discipline = \"prio\"", None),
    ("--discipline strict", Some(not_underscore)),
    ("max_connections =", None),
    ("max_held_packets", None),
    ("kernel_queue_maxlen", None),
    // nfq's networks → class: `sources` in the `[[class]]`, as balance's.
    ("[[table]]", None),
];

/// Whether `line` holds `old` with nothing of a longer name right before it, and what
/// `after` wants right after it (the end of the line counts as a space).
fn has_old(line: &str, old: &str, after: After) -> bool {
    let mut from = 0;
    while let Some(i) = line[from..].find(old) {
        let at = from + i;
        from = at + old.len();
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let next = line[from..].chars().next().unwrap_or(' ');
        if after.is_none_or(|f| f(next)) {
            return true;
        }
    }
    false
}

/// Every file of the docs, the README, the packaged and shipped examples and the scenarios.
fn taught_files() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![repo.join("README.md")];
    for dir in ["docs", "packaging", "examples", "scenarios"] {
        walk(&repo.join(dir), &mut out);
    }
    out
}

#[test]
fn docs_and_examples_teach_no_old_configuration_spelling() {
    for (line, want) in [
        ("queue = \"priority\"", true),
        ("queue = 0                      # NFQUEUE number", true),
        ("queue = \"1s\"", false),
        ("queue_limit = 32", false),
        ("nfqueue = 0", false),
        ("up_queue = 100", false),
        ("discipline = \"strict_priority\"", false),
        ("netsched nfq --discipline strict --port 80", true),
        ("netsched nfq --discipline strict_priority", false),
        ("max_client_connections = 10", false),
    ] {
        let hit = OLD_CONFIG_SPELLINGS
            .iter()
            .any(|(old, after)| has_old(line, old, *after));
        assert_eq!(hit, want, "{line}");
    }
    let files = taught_files();
    assert!(files.len() > 20, "too few files: {files:?}");
    let mut bad = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue; // not text
        };
        // The renames table of docs/cli.md names the old spellings on purpose.
        let mut in_renames = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("## ") {
                in_renames = line == "## Renames" && f.ends_with("docs/cli.md");
            }
            if in_renames {
                continue;
            }
            for (old, after) in OLD_CONFIG_SPELLINGS {
                if has_old(line, old, *after) {
                    bad.push(format!("{}:{}: {old:?}: {line}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "old configuration spellings (docs/cli.md, \"Renames\"):\n{}",
        bad.join("\n")
    );
}
