//! `netsched generate`: the manual pages and shell completions the Debian package installs,
//! generated from the clap definitions so they never disagree with `--help`
//! (`scripts/package-deb` runs it; hidden from `--help`).
//!
//! Man pages (clap_mangen): one per command and subcommand, named as git names its own,
//! `netsched-balance(8)`, `netsched-balance-ctl(8)`, `netsched-lab(1)`: section 8 (system
//! administration) for the daemons and `shape`, which need privileges and change the host;
//! section 1 for the rest (man-pages(7), "Sections of the manual pages").
//! Completions (clap_complete): bash, zsh, fish, with the file names those shells look up.

use anyhow::{Context, Result};
use clap::Command;
use std::path::{Path, PathBuf};

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
            eprintln!("netsched generate: {n} man pages in {}", dir.display());
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
    let page = cmd.clone().name(name.to_string());
    let path = dir.join(format!("{name}.{section}"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .title(name.to_uppercase())
        .section(section)
        .manual("netsched")
        .source(format!("netsched {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)?;
    std::fs::write(&path, out).with_context(|| format!("{}", path.display()))?;
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
