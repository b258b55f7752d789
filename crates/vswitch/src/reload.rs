//! A reload: the `--config` file read again, checked whole, and applied only if valid — from
//! SIGHUP (its own thread) and `ctl reload` (a control thread) alike, one at a time.
//!
//! What changes while the switch runs is what `ctl` changes: each port's `tier` and `weight`,
//! handed to the packet thread as the same `set-tier`/`set-weight` commands (applied at the
//! next round start). Every other key (the uplink, the ports and their devices, the
//! discipline, the budget, queues, rings, polling) is fixed when the ports open: a file that
//! changes one is refused, naming the key, and nothing of it is applied; a change the packet
//! thread refuses (a port that vanished) takes back those made before it. A refused reload
//! keeps the configuration in force and is counted `failed` in
//! `netsched_vswitch_reloads_total`.

use crate::config::{Discipline, SwitchConfig};
use crate::config_error::ConfigError;
use crate::control::{Answer, Command, ControlError, Outbox, DEADLINE};
use netsched_metrics::Reloads;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// Why a reload was refused (the running configuration stays).
#[derive(Debug)]
pub enum ReloadError {
    /// The file does not read or parse, or a value is refused (the text names file and key).
    Config(Box<ConfigError>),
    /// A key that only a restart can change.
    NeedsRestart {
        file: PathBuf,
        key: String,
        running: String,
        new: String,
    },
    /// A new tier or weight outside 1..=1000.
    Range {
        file: PathBuf,
        key: String,
        value: u32,
    },
    /// The packet thread refused or did not answer a change (those before it were taken
    /// back).
    Apply {
        file: PathBuf,
        key: String,
        error: Box<ControlError>,
    },
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Config(e) => write!(f, "{e}"),
            ReloadError::NeedsRestart {
                file,
                key,
                running,
                new,
            } => write!(
                f,
                "{}: {key} = {new}: the running switch has {running}; changing {key} needs a \
                 restart",
                file.display()
            ),
            ReloadError::Range { file, key, value } => write!(
                f,
                "{}: {key} = {value}: must be between 1 and 1000",
                file.display()
            ),
            ReloadError::Apply { file, key, error } => write!(
                f,
                "{}: {key}: not applied: {error}; nothing of the file applied",
                file.display()
            ),
        }
    }
}

impl std::error::Error for ReloadError {}

/// What a reload needs of the running switch.
pub struct Reloader {
    path: PathBuf,
    /// The configuration in force (the start's, then each applied reload's).
    in_force: Mutex<SwitchConfig>,
    out: Outbox,
    reloads: Reloads,
}

impl Reloader {
    /// For a switch started with `cfg` read from `path`; changes go through `out`.
    pub fn new(path: &Path, cfg: &SwitchConfig, out: Outbox, reloads: Reloads) -> Self {
        Reloader {
            path: path.to_path_buf(),
            in_force: Mutex::new(cfg.clone()),
            out,
            reloads,
        }
    }

    /// The configuration file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the file again and apply it, or refuse it whole; counted either way. Returns
    /// notes on what changed.
    pub fn reload(&self) -> Result<Vec<String>, ReloadError> {
        let mut in_force = self.in_force.lock().unwrap_or_else(|p| p.into_inner());
        let result = self.reload_locked(&mut in_force);
        self.reloads.record(result.is_ok());
        result
    }

    fn reload_locked(&self, in_force: &mut SwitchConfig) -> Result<Vec<String>, ReloadError> {
        let new = SwitchConfig::load(&self.path).map_err(|e| ReloadError::Config(Box::new(e)))?;
        if let Some((key, running, new)) = restart_key(in_force, &new) {
            return Err(ReloadError::NeedsRestart {
                file: self.path.clone(),
                key,
                running,
                new,
            });
        }
        let changes = changes(&new);
        for (key, _, value) in &changes {
            if !(1..=1000).contains(value) {
                return Err(ReloadError::Range {
                    file: self.path.clone(),
                    key: key.clone(),
                    value: *value,
                });
            }
        }
        let running = self.running()?;
        let mut notes = Vec::new();
        for (i, (key, cmd, _)) in changes.iter().enumerate() {
            match self.send(key, cmd.clone()) {
                Ok(Some(msg)) => notes.push(msg),
                Ok(None) => {}
                Err(e) => {
                    // Take back what was changed before it: the tiers and weights running.
                    for (_, done, _) in changes[..i].iter().rev() {
                        let _ = self.send(key, undo(done, &running));
                    }
                    return Err(e);
                }
            }
        }
        if notes.is_empty() {
            notes.push("no tier or weight changed".to_string());
        }
        *in_force = new;
        Ok(notes)
    }
}

impl Reloader {
    /// The tiers and weights the packet thread runs, by port.
    fn running(&self) -> Result<Vec<(String, u32, u32)>, ReloadError> {
        match self.out.execute(Command::Show, Instant::now() + DEADLINE) {
            Ok(Answer::Stats(s)) => Ok(s
                .ports
                .iter()
                .map(|p| (p.dev.clone(), p.tier, p.weight))
                .collect()),
            Ok(_) => Err(self.apply_error("(show)", ControlError::Stopped)),
            Err(e) => Err(self.apply_error("(show)", e)),
        }
    }

    /// Send one change; the packet thread's note when it changed something.
    fn send(&self, key: &str, cmd: Command) -> Result<Option<String>, ReloadError> {
        match self.out.execute(cmd, Instant::now() + DEADLINE) {
            Ok(Answer::Done(msg)) if msg.ends_with("unchanged") => Ok(None),
            Ok(Answer::Done(msg)) => Ok(Some(msg)),
            Ok(Answer::Refused(why)) => Err(self.apply_error(key, ControlError::Refused(why))),
            Ok(Answer::Stats(_)) => Ok(None),
            Err(e) => Err(self.apply_error(key, e)),
        }
    }

    fn apply_error(&self, key: &str, error: ControlError) -> ReloadError {
        ReloadError::Apply {
            file: self.path.clone(),
            key: key.to_string(),
            error: Box::new(error),
        }
    }
}

/// The command that takes `done` back to the value `running` had.
fn undo(done: &Command, running: &[(String, u32, u32)]) -> Command {
    let was = |port: &str| running.iter().find(|(dev, _, _)| dev == port);
    match done {
        Command::SetTier { port, tier } => Command::SetTier {
            port: port.clone(),
            tier: was(port).map_or(*tier, |r| r.1),
        },
        Command::SetWeight { port, weight } => Command::SetWeight {
            port: port.clone(),
            weight: was(port).map_or(*weight, |r| r.2),
        },
        other => other.clone(),
    }
}

/// The first key other than a port's tier or weight whose value differs: (key, running, new).
fn restart_key(old: &SwitchConfig, new: &SwitchConfig) -> Option<(String, String, String)> {
    macro_rules! same {
        ($($field:ident),*) => {$(
            if old.$field != new.$field {
                return Some((
                    stringify!($field).to_string(),
                    format!("{:?}", old.$field),
                    format!("{:?}", new.$field),
                ));
            }
        )*};
    }
    same!(
        uplink,
        discipline,
        packet_rate,
        rate,
        budget_busy,
        budget_slice,
        budget_catch_up,
        batch,
        queue_limit,
        mac_table,
        busy_poll,
        port_backend,
        ring_frames
    );
    if old.ports.len() != new.ports.len() {
        return Some((
            "port (the number of [[port]] tables)".to_string(),
            old.ports.len().to_string(),
            new.ports.len().to_string(),
        ));
    }
    for (i, (o, n)) in old.ports.iter().zip(&new.ports).enumerate() {
        let keys = [
            ("dev", format!("{:?}", o.dev), format!("{:?}", n.dev)),
            ("bound", o.bound.to_string(), n.bound.to_string()),
            (
                "bitmap_len",
                o.bitmap_len().to_string(),
                n.bitmap_len().to_string(),
            ),
            (
                "queue_limit",
                format!("{:?}", o.queue_limit),
                format!("{:?}", n.queue_limit),
            ),
        ];
        for (key, a, b) in keys {
            if a != b {
                return Some((format!("port[{i}].{key}"), a, b));
            }
        }
    }
    None
}

/// The tiers and weights the discipline uses, every port's, as the commands `ctl` sends (the
/// file's values are put in force whatever `ctl` changed since): (key, command, value).
fn changes(new: &SwitchConfig) -> Vec<(String, Command, u32)> {
    let tiers = matches!(
        new.discipline,
        Discipline::StrictPriority | Discipline::DelayConstrained | Discipline::DelayWallClock
    );
    let weights = matches!(new.discipline, Discipline::Drr | Discipline::Wf2q);
    let mut out = Vec::new();
    for (i, n) in new.ports.iter().enumerate() {
        if tiers {
            let cmd = Command::SetTier {
                port: n.dev.clone(),
                tier: n.tier,
            };
            out.push((format!("port[{i}].tier"), cmd, n.tier));
        }
        if weights {
            let cmd = Command::SetWeight {
                port: n.dev.clone(),
                weight: n.weight,
            };
            out.push((format!("port[{i}].weight"), cmd, n.weight));
        }
    }
    out
}

/// Reload with `r`, log the outcome naming `by` (SIGHUP or ctl) and answer it.
pub fn reload_answer(r: &Reloader, by: &str) -> Result<String, ControlError> {
    let path = r.path().display().to_string();
    match r.reload() {
        Ok(notes) => {
            tracing::info!(by, "reloaded {path}: {}", notes.join("; "));
            let mut text = format!("reloaded {path}\n");
            for n in notes {
                text += &format!("{n}\n");
            }
            Ok(text)
        }
        Err(e) => {
            let line = e.to_string().trim_end().replace('\n', "; ");
            tracing::error!(by, "reload failed, keeping the old configuration: {line}");
            Err(ControlError::Reload(e.to_string()))
        }
    }
}
