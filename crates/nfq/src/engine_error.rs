//! Why the engine refused to start or refused a change, typed ([`EngineError`]): the
//! configuration's own error, the discipline's or the deadline's, a class index that does not
//! exist, or an address-table edit the table cannot take. The texts are those the control
//! protocol answers with and `netsched nfq` prints.
//!
//! Cost: built only when something is refused.

use crate::config::Cidr;
use crate::config_error::ConfigError;
use crate::discipline::SchedulerError;
use netsched_core::qdisc::PercentileConfigError;
use std::fmt;

#[derive(Debug)]
pub enum EngineError {
    /// The configuration (or a percentile given to `set_percentile`) is refused.
    Config(ConfigError),
    /// The discipline refuses its classes or deadline (`discipline`: its name).
    Discipline {
        discipline: &'static str,
        source: SchedulerError,
    },
    /// The percentile judge refuses the deadline mode.
    Deadline(PercentileConfigError),
    /// The discipline refuses a new percentile or deadline while running.
    Refused(PercentileConfigError),
    /// A class index beyond the configured classes.
    NoSuchClass(usize),
    /// The address table holds `max_entries` prefixes already.
    TableFull { max_entries: usize },
    /// A prefix to delete that is not in the address table.
    NotInTable(Cidr),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Config(e) => write!(f, "{e}"),
            EngineError::Discipline { discipline, source } => {
                write!(f, "discipline {discipline}: {source}")
            }
            EngineError::Deadline(e) => write!(f, "deadline: {e}"),
            EngineError::Refused(e) => write!(f, "{e}"),
            EngineError::NoSuchClass(class) => write!(f, "class {class}: no such class"),
            EngineError::TableFull { max_entries } => write!(
                f,
                "address table full ({max_entries} entries, max_table_entries); delete one first"
            ),
            EngineError::NotInTable(cidr) => write!(f, "{cidr}: not in the address table"),
        }
    }
}

// No `source()`: the text already holds the inner error's, and a chain printed with `{:#}`
// would repeat it.
impl std::error::Error for EngineError {}

impl From<ConfigError> for EngineError {
    fn from(e: ConfigError) -> Self {
        EngineError::Config(e)
    }
}
