//! The command-line vocabulary's old spellings (docs/cli.md, "Renames"): flags, subcommands and
//! `ctl` verbs renamed so that one concept has one name in every command. Each old spelling
//! still parses for one release (a hidden clap alias or hidden flag) and prints a warning on
//! stderr naming the new one; this table is where those warnings come from, and the vocabulary
//! test (crates/cli/tests/vocabulary.rs) checks that every hidden spelling is listed here.

/// A flag renamed: `old` still works in the commands of `scope` (space-separated paths below
/// `netsched`), with the warning naming `new`.
#[derive(Debug, Clone, Copy)]
pub struct FlagRename {
    pub old: &'static str,
    pub new: &'static str,
    pub scope: &'static [&'static str],
}

/// Old flag spellings → the canonical one.
pub const FLAG_RENAMES: &[FlagRename] = &[
    FlagRename {
        old: "--socket",
        new: "--control-socket",
        scope: &[
            "nfq",
            "nfq cleanup",
            "nfq ctl",
            "ctl",
            "balance ctl",
            "vswitch ctl",
            "filter ctl",
        ],
    },
    FlagRename {
        old: "--group",
        new: "--control-group",
        scope: &["nfq"],
    },
    FlagRename {
        old: "--control",
        new: "--control-socket",
        scope: &["vswitch", "filter"],
    },
    FlagRename {
        old: "--spin",
        new: "--busy-poll",
        scope: &["link"],
    },
    FlagRename {
        old: "--secs",
        new: "--duration",
        scope: &["link bench"],
    },
    FlagRename {
        old: "--seconds",
        new: "--duration",
        scope: &["nfq bench", "classify bench"],
    },
    FlagRename {
        old: "--max-bytes",
        new: "--max-memory",
        scope: &["classify bench"],
    },
    FlagRename {
        old: "--queue",
        new: "--nfqueue",
        scope: &["nfq", "nfq cleanup"],
    },
    FlagRename {
        old: "--queue",
        new: "--queue-limit",
        scope: &["shape apply"],
    },
    FlagRename {
        old: "--ack-queue",
        new: "--ack-queue-limit",
        scope: &["shape apply"],
    },
    FlagRename {
        old: "--pin",
        new: "--cpu auto",
        scope: &["filter"],
    },
];

/// A subcommand renamed: under `parent`, `old` still works and means `new`.
#[derive(Debug, Clone, Copy)]
pub struct VerbRename {
    pub parent: &'static str,
    pub old: &'static str,
    pub new: &'static str,
}

/// Old `ctl` verbs → `show`, the one verb that prints a daemon's state.
pub const VERB_RENAMES: &[VerbRename] = &[
    VerbRename {
        parent: "nfq ctl",
        old: "status",
        new: "show",
    },
    VerbRename {
        parent: "ctl",
        old: "status",
        new: "show",
    },
    VerbRename {
        parent: "balance ctl",
        old: "show-servers",
        new: "show",
    },
    VerbRename {
        parent: "vswitch ctl",
        old: "show-ports",
        new: "show",
    },
];

/// Top-level commands kept under an old place: `netsched ctl` is `netsched nfq ctl`.
pub const COMMAND_MOVES: &[(&str, &str)] = &[("ctl", "nfq ctl")];

/// The warnings the command line `args` (without the program name) earns: one per old
/// spelling it uses, each naming the new one. Only flags before a `--` are looked at.
pub fn warnings(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let path = command_path(args);
    if let Some((old, new)) = COMMAND_MOVES
        .iter()
        .find(|(old, _)| args.first().map(String::as_str) == Some(*old))
    {
        out.push(format!(
            "`netsched {old}` is now `netsched {new}` (the old place works for one release)"
        ));
    }
    for (i, a) in args.iter().enumerate() {
        if a == "--" {
            break;
        }
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        // One old name may be renamed differently per command (`--queue`: nfq, shape apply).
        let renamed = FLAG_RENAMES
            .iter()
            .find(|r| r.old == name && r.scope.iter().any(|s| path.starts_with(s)));
        if let Some(r) = renamed {
            out.push(format!("{} is renamed {} (docs/cli.md)", r.old, r.new));
        }
        let bare_busy_poll = name == "--busy-poll"
            && !a.contains('=')
            && args.get(i + 1).is_none_or(|next| next.starts_with('-'));
        if bare_busy_poll && path.starts_with("link") {
            out.push("--busy-poll without a value is written --busy-poll always".to_string());
        }
    }
    for v in VERB_RENAMES {
        if path == format!("{} {}", v.parent, v.old) {
            out.push(format!(
                "`{} {}` is renamed `{} {}`",
                v.parent, v.old, v.parent, v.new
            ));
        }
    }
    out
}

/// The subcommand words of `args` (positional words up to and including the first `ctl`
/// verb), joined by spaces: `nfq ctl status` for `nfq ctl --socket S status --json`.
fn command_path(args: &[String]) -> String {
    let mut words: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            break;
        }
        if a.starts_with('-') {
            // The only flag with a value between `ctl` and its verb is the socket's.
            let takes_value = !a.contains('=')
                && matches!(a, "--socket" | "--control-socket")
                && words.last() == Some(&"ctl");
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        let after_ctl = words.last() == Some(&"ctl");
        words.push(a);
        if after_ctl || !is_command_word(&words) {
            if !after_ctl {
                words.pop();
            }
            break;
        }
        i += 1;
    }
    words.join(" ")
}

/// Whether the words so far still name a (sub)command, not a flag's value or an argument.
fn is_command_word(words: &[&str]) -> bool {
    const COMMANDS: &[&str] = &[
        "lab", "replay", "shape", "link", "nfq", "ctl", "balance", "vswitch", "filter", "classify",
        "bench", "cleanup", "load", "gen", "run", "sweep", "list", "qdisc", "apply", "show",
        "clear",
    ];
    match words.len() {
        1 => COMMANDS.contains(&words[0]),
        _ => words.len() <= 3 && COMMANDS.contains(words.last().unwrap()),
    }
}

/// Print the warnings of [`warnings`] for this process's command line on stderr.
pub fn warn_old_spellings() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for w in warnings(&args) {
        eprintln!("netsched: warning: {w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(line: &str) -> Vec<String> {
        warnings(
            &line
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn old_flags_warn_with_the_new_name_and_new_ones_do_not() {
        let got = w("nfq --port 80 --socket /tmp/s --group adm");
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].contains("--socket is renamed --control-socket"));
        assert!(got[1].contains("--group is renamed --control-group"));
        assert!(w("nfq --port 80 --control-socket /tmp/s --control-group adm").is_empty());
        assert!(w("vswitch --config x --control=/tmp/s")[0].contains("--control-socket"));
        assert!(w("link bench --secs 3")[0].contains("--duration"));
        assert!(w("nfq --queue 3")[0].contains("--queue is renamed --nfqueue"));
        assert!(w("nfq cleanup --queue 3")[0].contains("--nfqueue"));
        assert!(w("nfq --nfqueue 3").is_empty());
        assert!(w("nfq bench --seconds 3")[0].contains("--duration"));
        assert!(w("link --dev-a a --dev-b b --spin 0")[0].contains("--busy-poll"));
        assert!(w("filter --input a --output b --rules r --pin")[0].contains("--cpu auto"));
        assert!(w("shape apply --dev d --up 1mbit --queue 5")[0].contains("--queue-limit"));
        assert!(w("shape apply --dev d --up 1mbit --ack-queue=5")[0].contains("--ack-queue-limit"));
        assert!(w("shape apply --dev d --up 1mbit --queue-limit 5 --ack-queue-limit 5").is_empty());
        // `--control` is only old in the daemons that had it: not a warning elsewhere.
        assert!(w("lab run adsl-ack --set control=1").is_empty());
        // A bare `--busy-poll` in link is the old boolean form.
        assert!(w("link --dev-a a --dev-b b --busy-poll")[0].contains("--busy-poll always"));
        assert!(w("link --dev-a a --dev-b b --busy-poll --stats 1s")[0].contains("always"));
        assert!(w("link --dev-a a --dev-b b --busy-poll 0").is_empty());
        assert!(w("link --dev-a a --dev-b b --busy-poll=always").is_empty());
    }

    #[test]
    fn old_ctl_places_and_verbs_warn() {
        let got = w("ctl --socket /tmp/s status --json");
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].contains("`netsched nfq ctl`"));
        assert!(got[2].contains("`ctl show`"));
        assert!(w("nfq ctl --control-socket /tmp/s show --json").is_empty());
        assert!(w("balance ctl show-servers")[0].contains("`balance ctl show`"));
        assert!(w("vswitch ctl --control-socket=/x show-ports")[0].contains("show"));
        // `status` is only an old verb right after `ctl`.
        assert!(w("nfq ctl set-percentile status 90").is_empty());
        assert!(w("balance ctl show").is_empty());
    }
}
