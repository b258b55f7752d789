//! Manual pages from the docs: the configuration-file pages of section 5
//! (`netsched-balance.toml(5)` …) are sections of `docs/*.md` turned into roff, so the page an
//! operator reads with `man` and the page on the web are one text; and the sections a daemon's
//! section-8 page needs beyond its flags (FILES, SIGNALS, EXIT STATUS, EXAMPLES, SEE ALSO;
//! man-pages(7), "Sections within a manual page").
//!
//! The markdown read is the subset the docs use: `##`/`###` headings, paragraphs, `-` lists,
//! fenced code, pipe tables, and inline `code`, **bold** and [links](…). Roff needs little
//! escaping (groff_man(7)): a backslash is `\e`, a line may not start with `.` or `'`.

/// The docs a page is made from, read into the binary when it is built.
const BALANCE_MD: &str = include_str!("../../../docs/balance.md");
const NFQ_MD: &str = include_str!("../../../docs/nfq.md");
const VSWITCH_MD: &str = include_str!("../../../docs/vswitch.md");
const FILTER_MD: &str = include_str!("../../../docs/filter.md");
const RULES_MD: &str = include_str!("../../../docs/rules.md");

/// One configuration-file page: its name, what it describes, and the doc sections it holds
/// (`##` headings, matched by their start, each with its `###` subsections).
pub struct ConfigPage {
    pub name: &'static str,
    pub summary: &'static str,
    pub file: &'static str,
    sources: &'static [(&'static str, &'static [&'static str])],
}

/// The section-5 pages.
pub const CONFIG_PAGES: &[ConfigPage] = &[
    ConfigPage {
        name: "netsched-balance.toml",
        summary: "configuration of netsched balance, the L4/L7 load balancer",
        file: "/etc/netsched/balance/NAME.toml",
        sources: &[(
            BALANCE_MD,
            &[
                "Configuration",
                "Checking a configuration",
                "Connection reuse",
                "TLS termination",
                "Client address to backends",
                "SNI routing",
                "Service classes",
                "Access log",
                "Health checks",
                "Reload and shutdown",
                "Bounds",
            ],
        )],
    },
    ConfigPage {
        name: "netsched-nfq.toml",
        summary: "configuration of netsched nfq, the NFQUEUE percentile scheduler",
        file: "/etc/netsched/nfq/NAME.toml",
        sources: &[(NFQ_MD, &["Configuration", "Budget, deadline, discipline"])],
    },
    ConfigPage {
        name: "netsched-vswitch.toml",
        summary: "configuration of netsched vswitch, the host switch",
        file: "/etc/netsched/vswitch/NAME.toml",
        sources: &[(VSWITCH_MD, &["Running it", "Reload", "Files"])],
    },
    ConfigPage {
        name: "netsched-filter.toml",
        summary: "configuration and rule files of netsched filter, the userspace firewall",
        file: "/etc/netsched/filter/NAME.toml",
        sources: &[
            (
                FILTER_MD,
                &["Running it", "Rule file", "Signature file", "Reload"],
            ),
            (RULES_MD, &["The TOML rule file", "ClassBench"]),
        ],
    },
];

impl ConfigPage {
    /// The page in roff.
    pub fn render(&self) -> String {
        let mut out = format!(
            ".TH {} 5 \"\" \"netsched {}\" \"netsched\"\n.SH NAME\n{} \\- {}\n.SH SYNOPSIS\n\\fB{}\\fR\n",
            self.name.to_uppercase(),
            env!("CARGO_PKG_VERSION"),
            self.name.replace('-', "\\-"),
            self.summary,
            self.file
        );
        for (md, wanted) in self.sources {
            for title in *wanted {
                if let Some(text) = section(md, title) {
                    out.push_str(&to_roff(text));
                }
            }
        }
        out
    }
}

/// The `## ` section of `md` whose title starts with `title`, up to the next `## `.
fn section<'a>(md: &'a str, title: &str) -> Option<&'a str> {
    let start = md
        .match_indices("\n## ")
        .map(|(i, _)| i + 1)
        .find(|&i| md[i + 3..].starts_with(title))?;
    let end = md[start + 3..]
        .find("\n## ")
        .map_or(md.len(), |e| start + 3 + e + 1);
    Some(&md[start..end])
}

/// Inline markdown to roff: `code` and **bold** in bold, [text](link) as its text.
fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        // The end of a span opened at `rest`'s start by `mark`, if it is closed.
        let close = |mark: &str| {
            let after = rest.strip_prefix(mark)?;
            after.find(mark).map(|e| e + mark.len())
        };
        if let Some(end) = close("**") {
            out.push_str(&format!("\\fB{}\\fR", escape(&rest[2..end])));
            rest = &rest[end + 2..];
        } else if let Some(end) = close("`") {
            out.push_str(&format!("\\fB{}\\fR", escape(&rest[1..end])));
            rest = &rest[end + 1..];
        } else if let Some((label, after)) = link(rest) {
            out.push_str(&inline(label));
            rest = after;
        } else {
            out.push_str(&escape(&rest[..c.len_utf8()]));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// `[label](target)` at the start of `s`: the label and what follows the link.
fn link(s: &str) -> Option<(&str, &str)> {
    let body = s.strip_prefix('[')?;
    let close = body.find("](")?;
    let end = body[close..].find(')')? + close;
    (!body[..close].contains('\n')).then(|| (&body[..close], &body[end + 1..]))
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\e")
}

/// A roff text line: never starting with a control character.
fn line(s: &str) -> String {
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}\n")
    } else {
        format!("{s}\n")
    }
}

/// Cells of a table row `| a | b |`; `\|` inside a cell is a literal bar.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner
        .replace("\\|", "\u{1}")
        .split('|')
        .map(|c| c.trim().replace('\u{1}', "|"))
        .collect()
}

/// A pipe table as a list: per row, the first cell as the tag, the others under it, each but
/// the last prefixed by its column's header.
fn table(rows: &[&str]) -> String {
    let header = cells(rows[0]);
    let mut out = String::new();
    for row in rows.iter().skip(2) {
        let c = cells(row);
        out.push_str(&format!(".TP\n{}", line(&inline(&c[0]))));
        let n = c.len();
        for (i, cell) in c.iter().enumerate().skip(1) {
            let head = header.get(i).map(String::as_str).unwrap_or("");
            let text = if i + 1 < n && !head.is_empty() {
                format!("{head}: {cell}.")
            } else {
                cell.clone()
            };
            out.push_str(&line(&inline(&text)));
        }
    }
    out
}

/// A markdown section to roff.
pub fn to_roff(md: &str) -> String {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if let Some(t) = l.strip_prefix("## ") {
            out.push_str(&format!(
                ".SH \"{}\"\n",
                inline(t).to_uppercase().replace('"', "")
            ));
        } else if let Some(t) = l.strip_prefix("### ") {
            out.push_str(&format!(".SS \"{}\"\n", inline(t).replace('"', "")));
        } else if l.starts_with("```") {
            out.push_str(".PP\n.RS 4\n.nf\n");
            i += 1;
            while i < lines.len() && !lines[i].starts_with("```") {
                out.push_str(&line(&escape(lines[i])));
                i += 1;
            }
            out.push_str(".fi\n.RE\n");
        } else if l.starts_with('|') {
            let start = i;
            while i + 1 < lines.len() && lines[i + 1].starts_with('|') {
                i += 1;
            }
            if i > start + 1 {
                out.push_str(&table(&lines[start..=i]));
            }
        } else if !l.trim().is_empty() {
            let list = ["- ", "* "].iter().any(|p| l.starts_with(p))
                || l.split_once(". ")
                    .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
            out.push_str(if list { ".IP \\(bu 2\n" } else { ".PP\n" });
            let mut text = l
                .trim_start_matches("- ")
                .trim_start_matches("* ")
                .to_string();
            while i + 1 < lines.len() && continues(lines[i + 1]) {
                i += 1;
                text.push(' ');
                text.push_str(lines[i].trim());
            }
            out.push_str(&line(&inline(&text)));
        }
        i += 1;
    }
    out
}

/// Does `next` continue the paragraph or list item above it?
fn continues(next: &str) -> bool {
    let t = next.trim_start();
    !(next.trim().is_empty()
        || next.starts_with('#')
        || next.starts_with("```")
        || next.starts_with('|')
        || next.starts_with("- ")
        || next.starts_with("* ")
        || (t.len() == next.len()
            && t.split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())))
}

/// What a daemon's section-8 page says beyond its flags.
pub struct DaemonPage {
    pub command: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    pub signals: &'static [(&'static str, &'static str)],
    pub examples: &'static [(&'static str, &'static str)],
    pub see_also: &'static str,
}

/// Signals every daemon treats alike.
const STOP: (&str, &str) = (
    "SIGINT, SIGTERM",
    "stop: what is inside finishes within its bound, what the run created is removed, the \
     control socket file too.",
);

pub const DAEMON_PAGES: &[DaemonPage] = &[
    DaemonPage {
        command: "balance",
        files: &[
            ("/etc/netsched/balance/NAME.toml", "the configuration of the unit netsched-balance@NAME; netsched-balance.toml(5)"),
            ("/run/netsched/balance-NAME.sock", "its control socket (control_socket), where netsched balance ctl looks"),
        ],
        signals: &[
            ("SIGHUP", "reload the configuration file, all or nothing (systemctl reload)."),
            ("SIGINT, SIGTERM", "stop accepting; requests and relays in flight finish, cut after timeouts.hard_stop_after."),
            ("SIGUSR1", "soft stop: stop accepting and exit once every connection has ended, with no deadline."),
        ],
        examples: &[
            ("netsched balance --config /etc/netsched/balance/web.toml --check", "check a file"),
            ("systemctl enable --now netsched-balance@web", "run it as a service"),
            ("netsched balance ctl show", "the servers of the only balancer running"),
            ("netsched balance ctl --instance web drain app1", "drain a server of netsched-balance@web"),
        ],
        see_also: "netsched-balance.toml(5), netsched-balance-ctl(8), systemd.service(5)",
    },
    DaemonPage {
        command: "nfq",
        files: &[
            ("/etc/netsched/nfq/NAME.toml", "the configuration of the unit netsched-nfq@NAME; netsched-nfq.toml(5)"),
            ("/run/netsched/nfq-NAME.sock", "its control socket (control_socket)"),
        ],
        signals: &[
            ("SIGHUP", "reload percentiles, deadline, budget and the address table, all or nothing; other keys need a restart."),
            ("SIGINT, SIGTERM", "stop: held packets are released, the iptables rules the daemon installed are removed."),
        ],
        examples: &[
            ("netsched nfq --config /etc/netsched/nfq/web.toml --check", "check a file"),
            ("netsched nfq ctl show", "classes, deadline and budget of the only scheduler running"),
        ],
        see_also: "netsched-nfq.toml(5), netsched-nfq-ctl(8), iptables-extensions(8) (NFQUEUE)",
    },
    DaemonPage {
        command: "vswitch",
        files: &[
            ("/etc/netsched/vswitch/NAME.toml", "the configuration of the unit netsched-vswitch@NAME; netsched-vswitch.toml(5)"),
            ("/run/netsched/vswitch-NAME.sock", "its control socket (--control-socket)"),
        ],
        signals: &[
            ("SIGHUP", "reload the ports' tiers and weights, all or nothing; other keys need a restart."),
            STOP,
        ],
        examples: &[
            ("netsched vswitch --config /etc/netsched/vswitch/host.toml --check", "check a file"),
            ("netsched vswitch ctl set-tier vg3 1", "move a port to the first tier"),
        ],
        see_also: "netsched-vswitch.toml(5), netsched-vswitch-ctl(8)",
    },
    DaemonPage {
        command: "filter",
        files: &[
            ("/etc/netsched/filter/NAME.toml", "the configuration of the unit netsched-filter@NAME; netsched-filter.toml(5)"),
            ("/run/netsched/filter-NAME.sock", "its control socket (control_socket)"),
        ],
        signals: &[
            ("SIGHUP", "read the configuration file again and swap the rule and signature files in, all or nothing."),
            ("SIGINT, SIGTERM", "stop: receiving stops, what is inside drains, the final counters print as one JSON line."),
        ],
        examples: &[
            ("netsched filter --config /etc/netsched/filter/edge.toml --check", "check a file and its rules"),
            ("netsched filter ctl show --json", "the counters of the only filter running"),
        ],
        see_also: "netsched-filter.toml(5), netsched-filter-ctl(8), netsched-classify(1)",
    },
    DaemonPage {
        command: "link",
        files: &[(
            "/etc/netsched/link/NAME.conf",
            "LINK_ARGS=\"...\", the flags of the unit netsched-link@NAME",
        )],
        signals: &[
            ("SIGHUP", "logged; the link reads no file (its settings are flags, which need a restart)."),
            STOP,
        ],
        examples: &[(
            "netsched link --dev-a lan0 --dev-b wan0 --ab-rate 800kbit --ab-qdisc ack_sep:100 --delay 10ms",
            "an ADSL-like uplink with P3's ACK separation",
        )],
        see_also: "netsched-shape(8), tc(8)",
    },
];

impl DaemonPage {
    /// FILES, SIGNALS, EXIT STATUS, EXAMPLES and SEE ALSO in roff.
    pub fn render(&self) -> String {
        let tagged = |title: &str, items: &[(&str, &str)], bold_tag: bool| {
            let mut s = format!(".SH {title}\n");
            for (tag, text) in items {
                let tag = if bold_tag {
                    format!("\\fB{}\\fR", escape(tag))
                } else {
                    escape(tag)
                };
                s.push_str(&format!(".TP\n{}{}", line(&tag), line(&escape(text))));
            }
            s
        };
        let mut out = tagged("FILES", self.files, false);
        out.push_str(&tagged("SIGNALS", self.signals, true));
        out.push_str(&tagged(
            "EXIT STATUS",
            &[
                ("0", "it ran and stopped as asked, or --check found the configuration valid."),
                ("1", "an invalid configuration (named with its file, key and value), or a failure while running."),
                ("2", "a usage error: an unknown flag or a flag's value of the wrong form."),
            ],
            true,
        ));
        out.push_str(".SH EXAMPLES\n");
        for (cmd, what) in self.examples {
            out.push_str(&format!(
                ".PP\n{}.RS 4\n\\fB{}\\fR\n.RE\n",
                line(&escape(what)),
                escape(cmd)
            ));
        }
        out.push_str(&format!(".SH \"SEE ALSO\"\n{}", line(self.see_also)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_roff() {
        // Marks that open nothing or close nothing stay text.
        assert_eq!(inline("a * b `c"), "a * b `c");
        assert_eq!(inline("x)"), "x)");
        let md = "## Keys\n\nA `key` and **bold** [link](x.md).\n\n| key | default | meaning |\n|---|---|---|\n| `a` | 1 | first \\| second |\n\n```\n.dot line\n```\n- item one\n  goes on\n";
        let r = to_roff(md);
        assert!(r.contains(".SH \"KEYS\""), "{r}");
        assert!(r.contains("A \\fBkey\\fR and \\fBbold\\fR link."), "{r}");
        assert!(
            r.contains(".TP\n\\fBa\\fR\ndefault: 1.\nfirst | second\n"),
            "{r}"
        );
        assert!(r.contains(".nf\n\\&.dot line\n.fi"), "{r}");
        assert!(r.contains(".IP \\(bu 2\nitem one goes on\n"), "{r}");
    }

    #[test]
    fn every_config_page_finds_each_of_its_sections() {
        for p in CONFIG_PAGES {
            for (md, wanted) in p.sources {
                for t in *wanted {
                    assert!(section(md, t).is_some(), "{}: no section {t:?}", p.name);
                }
            }
            assert!(p.render().len() > 2000, "{}", p.name);
        }
    }
}
