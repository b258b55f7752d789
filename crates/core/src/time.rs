//! The core's time: nanosecond counts named by their role, an [`Instant`] (a point on the
//! engine's clock) and a [`Duration`] (a length of time), as smoltcp's `time` module pairs
//! them. Both are `u64` aliases, so the arithmetic and every caller's numbers stay as they
//! are; the names say in each signature which one is meant.
//!
//! The clock is the engine's: virtual in the simulator, `CLOCK_MONOTONIC` since the engine's
//! start in the data planes. Algorithms never read a clock: every instant is passed in
//! (`now`). Instant − instant is a duration; instant + duration is an instant.

/// A point in time: nanoseconds since the engine's epoch.
pub type Instant = u64;

/// A length of time in nanoseconds: a timeout, an interval, a latency, a relative deadline.
pub type Duration = u64;

/// Nanoseconds per millisecond.
pub const MS: Duration = 1_000_000;
/// Nanoseconds per second.
pub const SEC: Duration = 1_000_000_000;
