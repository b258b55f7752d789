//! Every bound on what the lab accepts from its command line and its input files, in one place
//! (listed in docs/lab.md, "Bounds"). A value over a bound is refused with an error naming the
//! option, the value and the bound before anything runs or any folder is created.

use anyhow::bail;

/// Seeds of one `lab run --seeds K`, one `lab --seeds K`, or one sweep grid point.
pub const MAX_SEEDS: u64 = 1000;
/// Repeats of one real run (`lab run NAME --real --repeat N`; each takes the machine for the
/// length of a real run).
pub const MAX_REPEATS: u64 = 100;
/// `--grid` axes of one sweep.
pub const MAX_GRID_AXES: usize = 8;
/// Values on one `--grid` axis.
pub const MAX_AXIS_VALUES: usize = 1000;
/// Runs of one sweep: grid points × seeds (each run keeps its parameters in memory until the
/// tables are written).
pub const MAX_SWEEP_RUNS: u64 = 10_000;
/// Parallel runs (`--jobs`).
pub const MAX_JOBS: usize = 256;
/// Size of a `--scenario` file (the shipped ones are under 8 KiB).
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;
/// Size of a run's `results.json` that a sweep re-reads to skip a finished run.
pub const MAX_RESULTS_BYTES: u64 = 64 << 20;

/// `count` must be in `1..=max`; `what` names the option (`--seeds`).
pub fn check_count(what: &str, count: u64, max: u64) -> anyhow::Result<()> {
    if count == 0 {
        bail!("{what} 0: must be at least 1");
    }
    if count > max {
        bail!("{what} {count}: more than the limit of {max}");
    }
    Ok(())
}

/// The seeds `first..first+count`, checked against [`MAX_SEEDS`] and u64 overflow.
pub fn seed_range(first: u64, count: u64) -> anyhow::Result<Vec<u64>> {
    check_count("--seeds", count, MAX_SEEDS)?;
    if first.checked_add(count - 1).is_none() {
        bail!(
            "--seed {first} --seeds {count}: the last seed would be past {}",
            u64::MAX
        );
    }
    Ok((0..count).map(|i| first + i).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_seed_ranges_are_bounded() {
        assert_eq!(seed_range(5, 3).unwrap(), vec![5, 6, 7]);
        let e = seed_range(1, 100_000_000).unwrap_err().to_string();
        assert!(e.contains("--seeds 100000000") && e.contains("1000"), "{e}");
        let e = seed_range(1, 0).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = seed_range(u64::MAX, 2).unwrap_err().to_string();
        assert!(e.contains("--seed 18446744073709551615"), "{e}");
        assert_eq!(seed_range(u64::MAX, 1).unwrap(), vec![u64::MAX]);
        assert!(check_count("--repeat", MAX_REPEATS + 1, MAX_REPEATS).is_err());
    }
}
