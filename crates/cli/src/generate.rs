//! `netsched generate`: the manual pages and shell completions the Debian package installs,
//! generated from the clap definitions so they never disagree with `--help`
//! (`scripts/package-deb` runs it; hidden from `--help`).
//!
//! Man pages (clap_mangen): one per command and subcommand, named as git names its own,
//! `netsched-balance(8)`, `netsched-balance-ctl(8)`, `netsched-lab(1)`: section 8 (system
//! administration) for the daemons and `shape`, which need privileges and change the host;
//! section 1 for the rest (man-pages(7), "Sections of the manual pages"); the daemons' pages
//! end with FILES, SIGNALS, EXIT STATUS, EXAMPLES and SEE ALSO, and the configuration files
//! have pages of section 5 made from the docs (`man_doc.rs`).
//! Completions (clap_complete): bash, zsh, fish, with the file names those shells look up.

use crate::man_doc::{CONFIG_PAGES, DAEMON_PAGES};
use anyhow::{Context, Result};
use clap::Command;
use std::path::{Path, PathBuf};

/// Where a page's mention of a doc of the source tree points once installed: the
/// configuration pages of section 5 hold those docs' reference sections; the rest is in the
/// package's documentation folder (scripts/package-deb installs the docs named here).
const DOC_TARGETS: &[(&str, &str)] = &[
    ("docs/balance.md", "netsched\\-balance.toml(5)"),
    ("docs/nfq.md", "netsched\\-nfq.toml(5)"),
    ("docs/vswitch.md", "netsched\\-vswitch.toml(5)"),
    ("docs/filter.md", "netsched\\-filter.toml(5)"),
    ("docs/rules.md", "netsched\\-filter.toml(5)"),
    ("docs/", "/usr/share/doc/netsched/"),
];

fn point_docs_at_pages(page: &str) -> String {
    DOC_TARGETS
        .iter()
        .fold(page.to_string(), |text, (from, to)| text.replace(from, to))
}

/// Commands whose pages go to section 8.
const SECTION_8: &[&str] = &[
    "balance", "nfq", "ctl", "vswitch", "link", "shape", "filter",
];

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Write one roff man page per command and subcommand into DIR (netsched.1, ...).
    Man {
        /// Output folder (created if missing).
        dir: PathBuf,
    },
    /// Write the completion script of SHELL into DIR (netsched.bash, _netsched,
    /// netsched.fish).
    Completions {
        /// bash, zsh or fish (or elvish, powershell).
        shell: clap_complete::Shell,
        /// Output folder (created if missing).
        dir: PathBuf,
    },
}

/// Run `generate` on `cmd`, the whole `netsched` command.
pub fn run(args: GenerateArgs, mut cmd: Command) -> Result<()> {
    match args.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
            cmd.build();
            let n = man_pages(&cmd, "netsched", "1", &dir)?;
            for p in CONFIG_PAGES {
                let path = dir.join(format!("{}.5", p.name));
                std::fs::write(&path, point_docs_at_pages(&p.render()))
                    .with_context(|| format!("{}", path.display()))?;
            }
            eprintln!(
                "netsched generate: {} man pages in {}",
                n + CONFIG_PAGES.len(),
                dir.display()
            );
        }
        What::Completions { shell, dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
            let p = clap_complete::generate_to(shell, &mut cmd, "netsched", &dir)
                .with_context(|| format!("{}", dir.display()))?;
            eprintln!("netsched generate: {}", p.display());
        }
    }
    Ok(())
}

/// Write `cmd`'s page as `name.section` and its subcommands' below it; the number written.
fn man_pages(cmd: &Command, name: &str, section: &str, dir: &Path) -> Result<usize> {
    let mut page = cmd.clone().name(name.to_string());
    // clap's `help` subcommand has no page of its own: not listed.
    if page.find_subcommand("help").is_some() {
        page = page.mut_subcommand("help", |h| h.hide(true));
    }
    let path = dir.join(format!("{name}.{section}"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .title(name.to_uppercase())
        .section(section)
        .manual("netsched")
        .source(format!("netsched {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)?;
    let mut text = String::from_utf8(out).context("a man page that is not UTF-8")?;
    if let Some(d) = DAEMON_PAGES
        .iter()
        .find(|d| name == format!("netsched-{}", d.command))
    {
        text.push_str(&d.render());
    }
    // clap_mangen names every subcommand's page in its parent's section.
    for sub in SECTION_8 {
        text = text.replace(
            &format!("netsched\\-{sub}(1)"),
            &format!("netsched\\-{sub}(8)"),
        );
    }
    std::fs::write(&path, point_docs_at_pages(&text))
        .with_context(|| format!("{}", path.display()))?;
    let mut n = 1;
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let sub_section = if name == "netsched" && SECTION_8.contains(&sub.get_name()) {
            "8"
        } else {
            section
        };
        n += man_pages(sub, &format!("{name}-{}", sub.get_name()), sub_section, dir)?;
    }
    Ok(n)
}
