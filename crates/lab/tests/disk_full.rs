//! A sweep whose disk fills after its runs have finished (root: a small tmpfs mounted for the
//! test, unmounted on every exit). The finished runs stay; the report that would stand for
//! the whole sweep (`sweep.md`) is not written; the same command with room again tabulates
//! the kept runs without running them again.
//!
//! The tmpfs is sized from a first sweep in a roomy one: everything that sweep wrote, less
//! half of its charts, so the runs and tables fit and the charts do not, whatever the sizes
//! on this machine. Budget: about a second.

#[path = "common_lab.rs"]
mod common_lab;

use common_lab::temp_dir;
use netsched_lab::cli;
use netsched_testbed::{privileged_test_allowed, Tmpfs};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes the files under `dir` take (allocated blocks), those whose name `pick` accepts.
fn allocated(dir: &Path, pick: &dyn Fn(&str) -> bool) -> u64 {
    let mut sum = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = e.metadata().unwrap();
        if m.is_dir() {
            sum += allocated(&e.path(), pick);
        } else if pick(&e.file_name().to_string_lossy()) {
            sum += m.blocks() * 512;
        }
    }
    sum
}

fn sweep(out: &Path) -> Result<(), String> {
    cli::main_with(&[
        "sweep",
        "np-dispatch",
        "--grid",
        "cost.rules=5,40",
        "--seeds",
        "2",
        "--out",
        out.to_str().unwrap(),
    ])
    .map_err(|e| format!("{e:#}"))
}

fn results(out: &Path) -> usize {
    std::fs::read_dir(out.join("runs"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().join("results.json").is_file())
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_sweep_whose_disk_fills_while_drawing_keeps_its_finished_runs() {
    if !privileged_test_allowed("a_sweep_whose_disk_fills_while_drawing_keeps_its_finished_runs") {
        return;
    }
    let base = temp_dir("disk-full");
    // What the whole sweep writes, and its charts.
    let (whole, charts) = {
        let fs = Tmpfs::mount(&base.join("roomy"), 64 << 20).unwrap();
        let out = fs.path().join("sweep");
        sweep(&out).unwrap();
        assert_eq!(results(&out), 4);
        let charts = allocated(&out, &|n| n.ends_with(".svg"));
        (allocated(&out, &|_| true), charts)
    };
    assert!(charts >= 8192, "the charts take {charts} bytes");
    let fs = Tmpfs::mount(&base.join("small"), whole - charts / 2).unwrap();
    let out = fs.path().join("sweep");
    let e = sweep(&out).unwrap_err();
    assert!(e.contains("finished runs are kept"), "{e}");
    assert_eq!(results(&out), 4, "the finished runs are kept: {e}");
    assert!(
        !out.join("sweep.md").exists(),
        "no report stands for a sweep whose tables were not all written"
    );
    // With room again, the same command tabulates the kept runs and runs none again.
    fs.resize(64 << 20).unwrap();
    let before: Vec<_> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();
    sweep(&out).unwrap();
    let after: Vec<_> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().modified().unwrap())
        .collect();
    assert_eq!(before, after, "no run ran again");
    assert!(out.join("sweep.md").is_file());
    drop(fs);
    let _ = std::fs::remove_dir_all(&base);
}
