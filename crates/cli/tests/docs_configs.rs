//! Every whole configuration the docs show is one the daemon accepts: each fenced `toml`
//! block of the daemons' pages that holds a complete file (for balance: `mode`, `listen`,
//! `algorithm` and a `[[server]]`; for nfq: a `[[class]]`; for vswitch: `uplink` and a
//! `[[port]]`; a rule file: a `[[rule]]`) goes through the daemon's own parser and
//! validation — the configuration half of `--check`, without the host's (interfaces,
//! addresses, sockets), which a doc's example names as placeholders. Fragments (a `[tls]`
//! table alone) are left out by the same rule. The packaged examples in /etc/netsched are
//! checked with `--check` itself, under their units, by `tests/package.rs`.

use std::path::Path;

/// The fenced ```toml blocks of `doc`, with the line each starts on.
fn toml_blocks(doc: &str) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(Path::new("../../docs").join(doc)).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match (&mut open, line.trim_start()) {
            (None, l) if l.starts_with("```toml") => open = Some((i + 2, String::new())),
            (Some(_), l) if l.starts_with("```") => blocks.push(open.take().unwrap()),
            (Some((_, b)), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// Does `block` set every key or table of `marks` at the start of a line?
fn whole(block: &str, marks: &[&str]) -> bool {
    marks
        .iter()
        .all(|m| block.lines().any(|l| l.trim_start().starts_with(m)))
}

/// Check each whole block of `docs` with `check`; how many were checked.
fn check_docs(docs: &[&str], marks: &[&str], check: impl Fn(&str) -> Result<(), String>) -> usize {
    let mut n = 0;
    for doc in docs {
        for (line, block) in toml_blocks(doc) {
            if whole(&block, marks) {
                n += 1;
                if let Err(e) = check(&block) {
                    panic!("docs/{doc}:{line}: the configuration shown is refused: {e}\n{block}");
                }
            }
        }
    }
    n
}

#[test]
fn every_balance_configuration_in_the_docs_is_accepted() {
    let docs = ["balance.md", "balance-classes.md", "lvs-real.md"];
    let marks = ["mode", "listen", "algorithm", "[[server]]"];
    let n = check_docs(&docs, &marks, |t| {
        netsched_balance::config::Config::parse(t)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    assert!(
        n >= 3,
        "only {n} whole balance configurations found in the docs"
    );
}

#[test]
fn every_nfq_configuration_in_the_docs_is_accepted() {
    let n = check_docs(&["nfq.md"], &["[[class]]"], |t| {
        let c = netsched_nfq::config::Config::from_toml(t).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())
    });
    assert!(n >= 1, "no whole nfq configuration found in docs/nfq.md");
}

#[test]
fn every_vswitch_configuration_in_the_docs_is_accepted() {
    let n = check_docs(&["vswitch.md"], &["uplink", "[[port]]"], |t| {
        netsched_vswitch::config::SwitchConfig::parse(t, "vswitch.md")
            .map(drop)
            .map_err(|e| e.to_string())
    });
    assert!(
        n >= 1,
        "no whole vswitch configuration found in docs/vswitch.md"
    );
}

#[test]
fn every_rule_file_in_the_docs_is_accepted() {
    use netsched_core::classify::acl::{RuleFile, RuleFileLimits};
    let n = check_docs(&["rules.md", "filter.md"], &["[[rule]]"], |t| {
        // As `netsched filter` reads them: IPv6 prefixes too.
        let limits = RuleFileLimits {
            ipv6: true,
            ..RuleFileLimits::IPV4_STRUCTURES
        };
        RuleFile::parse_toml(t, "rules.md", &limits)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    assert!(n >= 1, "no rule file found in docs/rules.md");
}
