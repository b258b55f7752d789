//! Typed errors of the queue disciplines: [`QdiscConfigError`] (a configuration a discipline
//! refuses; every variant names the field, as a path like `classes[2].quantum`),
//! [`PercentileConfigError`] (the Percentile discipline's own configuration and control
//! requests) and [`IdentityError`] (the accounting identities of [`super::QdiscStats`] do not
//! hold).

use core::fmt;

/// Why a discipline refuses its configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum QdiscConfigError {
    /// `field` must be at least `min` (limits, quanta, weights, batch sizes).
    TooSmall { field: String, min: u64 },
    /// `field` lists no class (band, interface); at least one is needed.
    NoClasses { field: String },
    /// `field` lists `count` classes, more than `max`.
    TooManyClasses {
        field: String,
        count: usize,
        max: usize,
    },
    /// `field` holds `value`, outside `accepted` (a range or a description).
    OutOfRange {
        field: String,
        value: String,
        accepted: String,
    },
    /// `field` must be given when `because` holds.
    Required {
        field: String,
        because: &'static str,
    },
    /// The Percentile discipline's own checks.
    Percentile(PercentileConfigError),
}

impl QdiscConfigError {
    /// The field the error is about (`None` for [`QdiscConfigError::Percentile`]; its own
    /// [`PercentileConfigError::field`] names it).
    pub fn field(&self) -> Option<&str> {
        match self {
            QdiscConfigError::TooSmall { field, .. }
            | QdiscConfigError::NoClasses { field }
            | QdiscConfigError::TooManyClasses { field, .. }
            | QdiscConfigError::OutOfRange { field, .. }
            | QdiscConfigError::Required { field, .. } => Some(field),
            QdiscConfigError::Percentile(_) => None,
        }
    }

    /// The same error about `prefix.field` (a field inside a list entry).
    pub(crate) fn within(mut self, prefix: &str) -> Self {
        match &mut self {
            QdiscConfigError::TooSmall { field, .. }
            | QdiscConfigError::NoClasses { field }
            | QdiscConfigError::TooManyClasses { field, .. }
            | QdiscConfigError::OutOfRange { field, .. }
            | QdiscConfigError::Required { field, .. } => *field = format!("{prefix}.{field}"),
            QdiscConfigError::Percentile(_) => {}
        }
        self
    }

    pub(crate) fn too_small(field: impl Into<String>, min: u64) -> Self {
        QdiscConfigError::TooSmall {
            field: field.into(),
            min,
        }
    }

    pub(crate) fn out_of_range(
        field: impl Into<String>,
        value: impl fmt::Display,
        accepted: impl Into<String>,
    ) -> Self {
        QdiscConfigError::OutOfRange {
            field: field.into(),
            value: value.to_string(),
            accepted: accepted.into(),
        }
    }
}

impl fmt::Display for QdiscConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QdiscConfigError::TooSmall { field, min } => {
                write!(f, "{field}: must be at least {min}")
            }
            QdiscConfigError::NoClasses { field } => {
                write!(f, "{field}: at least one class is required")
            }
            QdiscConfigError::TooManyClasses { field, count, max } => {
                write!(f, "{field}: {count} classes, at most {max} allowed")
            }
            QdiscConfigError::OutOfRange {
                field,
                value,
                accepted,
            } => write!(f, "{field}: {value} is outside {accepted}"),
            QdiscConfigError::Required { field, because } => {
                write!(f, "{field}: required {because}")
            }
            QdiscConfigError::Percentile(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for QdiscConfigError {}

impl From<PercentileConfigError> for QdiscConfigError {
    fn from(e: PercentileConfigError) -> Self {
        QdiscConfigError::Percentile(e)
    }
}

/// Why the Percentile discipline refuses a configuration or a control request
/// (`perSetPvalue`, `perSetNvalue`); every variant carries the value it refused.
#[derive(Debug, Clone, PartialEq)]
pub enum PercentileConfigError {
    /// `deadline.ms` is not a positive, finite number.
    DeadlineMs { ms: f64 },
    /// `deadline.ns` is 0.
    DeadlineNsZero,
    /// `memory.window` is 0.
    MemoryWindowZero,
    /// `memory.window` is more than `max`.
    MemoryWindowTooLarge { window: u64, max: u64 },
    /// `memory.half_life_ms` is not a positive, finite number.
    MemoryHalfLife { half_life_ms: f64 },
    /// `percentiles` is empty.
    NoClasses,
    /// `percentiles` lists `count` classes, more than `max`.
    TooManyClasses { count: usize, max: usize },
    /// `percentiles[index]` (or, for a control request, `percentile`) is outside 1..=100.
    PercentileOutOfRange { index: Option<usize>, percent: u32 },
    /// `queue_limit` is 0.
    LimitPacketsZero,
    /// A control request names `class`, which is not configured.
    UnknownClass { class: usize },
    /// `max_hold` is a zero duration.
    MaxHoldZero,
}

impl PercentileConfigError {
    /// The field the error is about, as a path (`percentiles[1]`, `deadline.ms`, …).
    pub fn field(&self) -> String {
        match self {
            PercentileConfigError::DeadlineMs { .. } => "deadline.ms".into(),
            PercentileConfigError::DeadlineNsZero => "deadline.ns".into(),
            PercentileConfigError::MemoryWindowZero
            | PercentileConfigError::MemoryWindowTooLarge { .. } => "memory.window".into(),
            PercentileConfigError::MemoryHalfLife { .. } => "memory.half_life_ms".into(),
            PercentileConfigError::NoClasses | PercentileConfigError::TooManyClasses { .. } => {
                "percentiles".into()
            }
            PercentileConfigError::PercentileOutOfRange { index: Some(i), .. } => {
                format!("percentiles[{i}]")
            }
            PercentileConfigError::PercentileOutOfRange { index: None, .. } => "percentile".into(),
            PercentileConfigError::LimitPacketsZero => "queue_limit".into(),
            PercentileConfigError::UnknownClass { .. } => "class".into(),
            PercentileConfigError::MaxHoldZero => "max_hold".into(),
        }
    }
}

impl fmt::Display for PercentileConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = self.field();
        match self {
            PercentileConfigError::DeadlineMs { ms } => {
                write!(f, "{field}: must be a positive number, got {ms}")
            }
            PercentileConfigError::MemoryHalfLife { half_life_ms } => {
                write!(f, "{field}: must be a positive number, got {half_life_ms}")
            }
            PercentileConfigError::DeadlineNsZero
            | PercentileConfigError::MemoryWindowZero
            | PercentileConfigError::LimitPacketsZero
            | PercentileConfigError::MaxHoldZero => write!(f, "{field}: must be at least 1"),
            PercentileConfigError::MemoryWindowTooLarge { window, max } => {
                write!(f, "{field}: at most {max}, got {window}")
            }
            PercentileConfigError::NoClasses => {
                write!(f, "{field}: at least one class is needed")
            }
            PercentileConfigError::TooManyClasses { count, max } => {
                write!(f, "{field}: at most {max} classes, got {count}")
            }
            PercentileConfigError::PercentileOutOfRange { percent, .. } => {
                write!(f, "{field}: must be in 1..=100, got {percent}")
            }
            PercentileConfigError::UnknownClass { class } => {
                write!(f, "{field}: {class} is not configured")
            }
        }
    }
}

impl std::error::Error for PercentileConfigError {}

/// Which accounting identity of [`super::QdiscStats`] failed, with the counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    /// `received != enqueued + dropped_on_arrival`.
    Arrivals {
        received: u64,
        enqueued: u64,
        dropped_on_arrival: u64,
    },
    /// `enqueued != dequeued + evicted + queued`.
    Departures {
        enqueued: u64,
        dequeued: u64,
        evicted: u64,
        queued: u64,
    },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::Arrivals {
                received,
                enqueued,
                dropped_on_arrival,
            } => write!(
                f,
                "received {received} != enqueued {enqueued} + dropped_on_arrival {dropped_on_arrival}"
            ),
            IdentityError::Departures {
                enqueued,
                dequeued,
                evicted,
                queued,
            } => write!(
                f,
                "enqueued {enqueued} != dequeued {dequeued} + evicted {evicted} + queued {queued}"
            ),
        }
    }
}

impl std::error::Error for IdentityError {}
