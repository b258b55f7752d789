//! What can go wrong with `netsched shape`, typed: a plan its bounds refuse ([`PlanError`],
//! naming the flag and the value), the record of what apply installed ([`StateError`], naming
//! the file), and apply/clear/show themselves ([`ShapeError`]: the device, the part and what
//! tc shows). A change that failed and was rolled back carries what the restore achieved
//! ([`Restore`]) in front of the reason it failed.
//!
//! Cost: built only when something is refused or fails.

use super::tc_error::TcError;
use netsched_core::units::format_rate;
use std::fmt;
use std::path::PathBuf;

/// A flag of `shape apply` outside its bounds.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanError {
    /// `flag` (`--dev`, `--ifb`) is no interface name.
    IfName { flag: &'static str, name: String },
    /// `--headroom` outside `0..=50` percent.
    Headroom(f64),
    /// A queue length (`--queue-limit`, `--ack-queue-limit`) outside `1..=max` packets.
    Queue {
        flag: &'static str,
        value: u32,
        max: u32,
    },
    /// `--ifb` names the shaped device.
    IfbIsDev(String),
    /// A line rate whose shaped rate is outside `min..=max` bits/s.
    Rate {
        flag: &'static str,
        line_bps: u64,
        min: u64,
        max: u64,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::IfName { flag, name } => write!(
                f,
                "{flag}: interface name `{name}` is not valid (1–15 characters: letters, digits, \
                 - _ . @)"
            ),
            PlanError::Headroom(h) => {
                write!(f, "--headroom {h}: must be between 0 and 50 percent")
            }
            PlanError::Queue { flag, value, max } => {
                write!(f, "{flag} {value}: must be between 1 and {max} packets")
            }
            PlanError::IfbIsDev(ifb) => write!(f, "--ifb {ifb}: must differ from --dev"),
            PlanError::Rate {
                flag,
                line_bps,
                min,
                max,
            } => write!(
                f,
                "{flag} {}: the shaped rate must be between {} and {}",
                format_rate(*line_bps),
                format_rate(*min),
                format_rate(*max)
            ),
        }
    }
}

impl std::error::Error for PlanError {}

/// The record of what apply installed could not be read or written.
#[derive(Debug)]
pub enum StateError {
    /// Opening or reading the record.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The record is larger than the bound.
    TooLarge { path: PathBuf, max: u64 },
    /// The file is no record of ours.
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// Encoding the record.
    Encode(serde_json::Error),
    /// Creating the directory, writing or renaming the file (`doing` names which and the path).
    Write {
        doing: String,
        source: std::io::Error,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Read { path, source } => write!(f, "{}: {source}", path.display()),
            StateError::TooLarge { path, max } => {
                write!(f, "{}: larger than {max} bytes", path.display())
            }
            StateError::Parse { path, source } => {
                write!(
                    f,
                    "{}: not a netsched shape record: {source}",
                    path.display()
                )
            }
            StateError::Encode(e) => write!(f, "encoding the netsched shape record: {e}"),
            StateError::Write { doing, source } => write!(f, "{doing}: {source}"),
        }
    }
}

// No `source()`: the text already holds the inner error's.
impl std::error::Error for StateError {}

/// What the restore after a failed change achieved (said before the reason of the failure).
#[derive(Debug, Clone, PartialEq)]
pub enum Restore {
    /// Every device shows what it showed before (`ns`: " in network namespace NS" or "").
    Verified { ns: String, devs: Vec<String> },
    /// Put back, but the devices could not be read again (why).
    Unchecked(String),
    /// What still differs from before.
    Incomplete { ns: String, differs: Vec<String> },
}

impl fmt::Display for Restore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Restore::Verified { ns, devs } => write!(
                f,
                "nothing changed{ns}: the previous configuration of {} was restored (verified: \
                 tc shows the same qdiscs, classes and filters as before)",
                devs.join(", ")
            ),
            Restore::Unchecked(why) => write!(
                f,
                "the previous configuration was put back but could not be checked: {why}"
            ),
            Restore::Incomplete { ns, differs } => write!(
                f,
                "the previous configuration{ns} could NOT be fully restored: {}",
                differs.join("; ")
            ),
        }
    }
}

/// Why `apply`, `clear` or `show` failed or refused. `ns` fields are " in network namespace
/// NS" or "".
#[derive(Debug)]
pub enum ShapeError {
    Plan(PlanError),
    Tc(TcError),
    State(StateError),
    /// The shaped interface does not exist.
    NoSuchInterface {
        dev: String,
        ns: String,
    },
    /// The plan was made for another device than the target's.
    PlanTarget {
        plan_dev: String,
        target_dev: String,
    },
    /// `--ifb` names a device of another kind (`kind` empty: physical).
    NotIfb {
        dev: String,
        kind: String,
    },
    /// More qdiscs and classes than a snapshot walks.
    TooManyParents {
        dev: String,
        count: usize,
        max: usize,
    },
    /// Parts that netsched did not install, without `--replace` (nothing changed).
    Foreign {
        dev: String,
        ns: String,
        parts: Vec<String>,
    },
    /// A step of the change failed: `step` names the command (and a likely cause).
    Step {
        step: String,
        source: TcError,
    },
    /// After the change, a part does not show what it should.
    Verify {
        dev: String,
        side: &'static str,
        shows: String,
        /// Clear: the part should be gone and is still there.
        still: bool,
    },
    /// Clear removed what it could; these parts were left as they are.
    LeftAsIs {
        dev: String,
        ns: String,
        cleared: String,
        left: Vec<String>,
    },
    /// The change failed and was rolled back: what the restore achieved, then why it failed.
    RolledBack {
        restore: Restore,
        source: Box<ShapeError>,
    },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ShapeError::*;
        match self {
            Plan(e) => write!(f, "{e}"),
            Tc(e) => write!(f, "{e}"),
            State(e) => write!(f, "{e}"),
            NoSuchInterface { dev, ns } => write!(f, "interface `{dev}` does not exist{ns}"),
            PlanTarget {
                plan_dev,
                target_dev,
            } => write!(
                f,
                "the plan shapes `{plan_dev}`, the target is `{target_dev}`"
            ),
            NotIfb { dev, kind } => write!(
                f,
                "--ifb {dev}: is a {} device, not an IFB: ingress redirected to it would leave \
                 through it and be lost (create one with `ip link add NAME type ifb`, or name \
                 a missing device and apply creates it)",
                if kind.is_empty() { "physical" } else { kind }
            ),
            TooManyParents { dev, count, max } => write!(
                f,
                "{dev}: {count} qdiscs and classes, more than the {max} a snapshot walks; \
                 refusing to change a configuration it cannot record"
            ),
            Foreign { dev, ns, parts } => write!(
                f,
                "{dev}{ns}: not installed by netsched shape: {}; nothing changed. Remove it \
                 yourself (e.g. `tc qdisc del dev {dev} root`) or pass --replace to discard it \
                 (it cannot be restored afterwards)",
                parts.join("; ")
            ),
            Step { step, source } => write!(f, "{step}: {source}"),
            Verify {
                dev,
                side,
                shows,
                still,
            } => {
                let still = if *still { "still " } else { "" };
                write!(f, "verify: {dev} {side} {still}shows [{shows}]")
            }
            LeftAsIs {
                dev,
                ns,
                cleared,
                left,
            } => write!(f, "{dev}{ns}: {cleared}; left as is: {}", left.join("; ")),
            RolledBack { restore, source } => write!(f, "{restore}: {source}"),
        }
    }
}

// No `source()`: every text already holds its inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for ShapeError {}

impl From<PlanError> for ShapeError {
    fn from(e: PlanError) -> Self {
        ShapeError::Plan(e)
    }
}

impl From<TcError> for ShapeError {
    fn from(e: TcError) -> Self {
        ShapeError::Tc(e)
    }
}

impl From<StateError> for ShapeError {
    fn from(e: StateError) -> Self {
        ShapeError::State(e)
    }
}
