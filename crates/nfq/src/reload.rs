//! A reload: the configuration read again (the `--config` file, then the same flags as at
//! start), checked whole, and applied only if valid — from SIGHUP (its own thread) and
//! `ctl reload` (a control thread) alike, one at a time, never in the packet loop.
//!
//! What changes while the daemon runs is what `ctl` changes, and it goes the same way: each
//! class's `percentile`, the `deadline`, the `budget` and the address `table`, as the
//! validated commands `set-percentile`, `set-deadline`, `set-budget`, `add-ip` and `del-ip`
//! the packet loop applies between batches, compared with what the packet loop runs (so the
//! file's values are in force afterwards, whatever `ctl` changed since); if the packet loop
//! refuses one, the changes made before it are taken back. Every other key (the queue number, the service,
//! the class names and order, `default_class`, the discipline, the limits, the control
//! socket, iptables, polling, metrics) is fixed at start: a file that changes one is refused,
//! naming the key, and nothing of it is applied. A refused reload keeps the configuration in
//! force and is counted `failed` in `netsched_nfq_reloads_total`.

use crate::command_error::CommandError;
use crate::config::{Cidr, Config};
use crate::control::{ControlError, ControlState};
use crate::engine::{Applied, Command, Snapshot};
use crate::run_args::RunArgs;
use netsched_metrics::Reloads;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a reload was refused (the running configuration stays).
#[derive(Debug)]
pub enum ReloadError {
    /// The file or a flag is invalid; the text names the file, key and value.
    Config { message: String },
    /// A key that only a restart can change.
    NeedsRestart {
        file: PathBuf,
        key: String,
        running: String,
        new: String,
    },
    /// The packet loop refused or did not take a change (those before it were taken back).
    Apply {
        file: PathBuf,
        key: String,
        error: CommandError,
    },
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Config { message } => f.write_str(message),
            ReloadError::NeedsRestart {
                file,
                key,
                running,
                new,
            } => write!(
                f,
                "{}: {key} = {new}: the running daemon has {running}; changing {key} needs a \
                 restart",
                file.display()
            ),
            ReloadError::Apply { file, key, error } => {
                write!(
                    f,
                    "{}: {key}: not applied: {error}; nothing of the file applied",
                    file.display()
                )
            }
        }
    }
}

impl std::error::Error for ReloadError {}

/// What a reload needs: how the daemon read its configuration, and what is in force.
pub struct Reloader {
    args: RunArgs,
    in_force: Config,
    reloads: Reloads,
}

impl Reloader {
    /// For a daemon started with `cfg`, read by `args`.
    pub fn new(args: RunArgs, cfg: &Config, reloads: Reloads) -> Self {
        Reloader {
            args,
            in_force: cfg.clone(),
            reloads,
        }
    }

    /// The reloads counted (`netsched_nfq_reloads_total`).
    pub fn reloads(&self) -> &Reloads {
        &self.reloads
    }

    /// The configuration file, if the daemon has one.
    pub fn path(&self) -> Option<&Path> {
        self.args.config.as_deref()
    }

    /// Reload, log the outcome naming `by` (SIGHUP or ctl) and answer it as `ctl` does.
    pub fn answer(
        &mut self,
        state: &mut ControlState,
        exec: &mut dyn FnMut(Command) -> Result<Applied, CommandError>,
        by: &str,
    ) -> Result<String, ControlError> {
        let Some(path) = self.path().map(|p| p.display().to_string()) else {
            let msg = "nothing to reload: started without --config (flags need a restart)";
            tracing::info!(by, "{msg}");
            return Ok(msg.to_string());
        };
        let result = self.reload(state, exec);
        self.reloads.record(result.is_ok());
        match result {
            Ok(notes) => {
                tracing::info!(by, "reloaded {path}: {}", notes.join("; "));
                let mut text = format!("reloaded {path}");
                for n in notes {
                    text += &format!("\n{n}");
                }
                Ok(text)
            }
            Err(e) => {
                let line = e.to_string().trim_end().replace('\n', "; ");
                tracing::error!(by, "reload failed, keeping the old configuration: {line}");
                Err(ControlError::Reload(format!(
                    "reload failed, keeping the old configuration: {e}"
                )))
            }
        }
    }

    /// Read, check and apply; returns notes on what changed. The changes go one by one
    /// through the packet loop; if it refuses one, those made before it are taken back.
    fn reload(
        &mut self,
        state: &mut ControlState,
        exec: &mut dyn FnMut(Command) -> Result<Applied, CommandError>,
    ) -> Result<Vec<String>, ReloadError> {
        let file = self.path().map(Path::to_path_buf).unwrap_or_default();
        let new = self.args.to_config().map_err(|e| ReloadError::Config {
            message: format!("{e:#}"),
        })?;
        if let Some((key, running, value)) = restart_key(&self.in_force, &new) {
            return Err(ReloadError::NeedsRestart {
                file,
                key,
                running,
                new: value,
            });
        }
        let failed = |key: &str, error| ReloadError::Apply {
            file: file.clone(),
            key: key.to_string(),
            error,
        };
        let running = match exec(Command::Snapshot) {
            Ok(Applied::Snapshot(s)) => s,
            Ok(_) => return Err(failed("(status)", CommandError::ShuttingDown)),
            Err(e) => return Err(failed("(status)", e)),
        };
        let plan = changes(&running, &new, state.table());
        for (i, c) in plan.iter().enumerate() {
            if let Err(e) = state.apply(c.apply, &mut *exec) {
                for done in plan[..i].iter().rev() {
                    let _ = state.apply(done.undo, &mut *exec);
                }
                return Err(failed(&c.key, e));
            }
        }
        let mut notes: Vec<String> = plan.into_iter().map(|c| c.key).collect();
        if notes.is_empty() {
            notes.push("nothing changed".to_string());
        }
        self.in_force = new;
        Ok(notes)
    }
}

/// The first key only a restart can change whose value differs: (key, running, new).
fn restart_key(old: &Config, new: &Config) -> Option<(String, String, String)> {
    macro_rules! same {
        ($($key:literal => $($field:ident).+),* $(,)?) => {$(
            if old.$($field).+ != new.$($field).+ {
                return Some((
                    $key.to_string(),
                    format!("{:?}", old.$($field).+),
                    format!("{:?}", new.$($field).+),
                ));
            }
        )*};
    }
    same!(
        "nfqueue" => queue,
        "discipline" => discipline,
        "default_class" => default_class,
        "control_socket" => control_socket,
        "control_group" => control_group,
        "iptables" => iptables,
        "service.protocol" => service.protocol,
        "service.ports" => service.ports,
        "service.address" => service.address,
        "limits" => limits,
        "early_miss" => early_miss,
        "busy_poll" => busy_poll,
        "--metrics" => metrics,
    );
    let names = |c: &Config| c.classes.iter().map(|k| k.name.clone()).collect::<Vec<_>>();
    if names(old) != names(new) {
        return Some((
            "class (names and order)".to_string(),
            format!("{:?}", names(old)),
            format!("{:?}", names(new)),
        ));
    }
    None
}

/// One change of a reload: its key (as the notes name it), the command that makes it and the
/// one that takes it back.
struct Change {
    key: String,
    apply: Command,
    undo: Command,
}

/// The changes that put `new`'s run-time keys in force, against what the packet loop runs
/// (`running`, and the table as `ctl` left it): the file's values are the ones in force
/// afterwards, whatever `ctl` changed since.
fn changes(running: &Snapshot, new: &Config, table: &BTreeMap<Cidr, usize>) -> Vec<Change> {
    let mut out = Vec::new();
    for (k, (old, n)) in running.percentiles.iter().zip(&new.classes).enumerate() {
        if *old != n.percentile {
            out.push(Change {
                key: format!("class {} percentile = {}", n.name, n.percentile),
                apply: Command::SetPercentile {
                    class: k,
                    p: n.percentile,
                },
                undo: Command::SetPercentile { class: k, p: *old },
            });
        }
    }
    if running.deadline != new.deadline {
        out.push(Change {
            key: format!("deadline = {}", new.deadline.describe()),
            apply: Command::SetDeadline(new.deadline),
            undo: Command::SetDeadline(running.deadline),
        });
    }
    if running.budget != new.budget {
        let shown = new.budget.map_or("off".to_string(), |n| n.to_string());
        out.push(Change {
            key: format!("budget = {shown}"),
            apply: Command::SetBudget(new.budget),
            undo: Command::SetBudget(running.budget),
        });
    }
    let wanted: BTreeMap<Cidr, usize> = new.table.iter().copied().collect();
    for (cidr, class) in table.iter().filter(|(c, _)| !wanted.contains_key(c)) {
        out.push(Change {
            key: format!("table: {cidr} removed"),
            apply: Command::DelIp(*cidr),
            undo: Command::AddIp {
                cidr: *cidr,
                class: *class,
            },
        });
    }
    for (cidr, class) in &wanted {
        if table.get(cidr) != Some(class) {
            let undo = match table.get(cidr) {
                Some(old) => Command::AddIp {
                    cidr: *cidr,
                    class: *old,
                },
                None => Command::DelIp(*cidr),
            };
            out.push(Change {
                key: format!("table: {cidr} -> {}", new.classes[*class].name),
                apply: Command::AddIp {
                    cidr: *cidr,
                    class: *class,
                },
                undo,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Engine;

    fn file(dir: &Path, gold: u32, budget: usize, extra: &str) -> PathBuf {
        let p = dir.join("nfq.toml");
        let text = format!(
            "budget = {budget}\n{extra}\n[service]\nports = [80]\n\
             [[class]]\nname = \"gold\"\npercentile = {gold}\n\
             [[class]]\nname = \"rest\"\npercentile = 50\n"
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Reload against `engine` (as the packet loop would apply), with `state` beside it;
    /// `refuse_budget` makes the packet loop refuse `set-budget`.
    fn run(
        r: &mut Reloader,
        engine: &mut Engine,
        state: &mut ControlState,
        refuse_budget: bool,
    ) -> Result<String, ControlError> {
        let mut exec = |cmd: Command| match cmd {
            Command::SetBudget(_) if refuse_budget => Err(CommandError::Refused {
                reason: "test".into(),
            }),
            c => engine.apply(c, 0, &mut Vec::new()),
        };
        r.answer(state, &mut exec, "test")
    }

    #[test]
    fn a_reload_applies_the_file_or_nothing_of_it() {
        let dir = std::env::temp_dir().join(format!("nfq-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let args = RunArgs {
            config: Some(file(&dir, 90, 4, "")),
            ..RunArgs::default()
        };
        let cfg = args.to_config().unwrap();
        let mut engine = Engine::new(cfg.clone()).unwrap();
        let mut state = ControlState::new(&cfg);
        let mut r = Reloader::new(args, &cfg, Reloads::new());

        // Applied: percentile and budget.
        file(&dir, 95, 8, "");
        let a = run(&mut r, &mut engine, &mut state, false);
        assert!(a.is_ok(), "{a:?}");
        let s = engine.snapshot_without_table();
        assert_eq!((s.percentiles[0], s.budget), (95, Some(8)));

        // The packet loop refuses the budget: the percentile made before it is taken back.
        file(&dir, 70, 2, "");
        let a = run(&mut r, &mut engine, &mut state, true);
        let e = a.unwrap_err().to_string();
        assert!(
            e.starts_with("reload failed, keeping the old configuration: "),
            "{e}"
        );
        assert!(e.contains("budget = 2"), "{e}");
        let s = engine.snapshot_without_table();
        assert_eq!((s.percentiles[0], s.budget), (95, Some(8)));

        // A restart-only key: refused naming it, nothing applied.
        file(&dir, 60, 8, "nfqueue = 3");
        let a = run(&mut r, &mut engine, &mut state, false);
        let e = a.unwrap_err().to_string();
        assert!(
            e.contains("nfq.toml: nfqueue = 3") && e.contains("needs a restart"),
            "{e}"
        );
        assert_eq!(engine.snapshot_without_table().percentiles[0], 95);
        assert_eq!(
            (r.reloads().count("ok"), r.reloads().count("failed")),
            (1, 2)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
