//! Replays every file of every target's corpus (`corpus/<target>/`) through its target: how CI
//! runs the fuzz targets (stable Rust, seconds, no libFuzzer). A panic fails the test naming
//! the target and the file.

use netsched_fuzz::TARGETS;
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_target_has_a_non_empty_corpus() {
    for (name, _) in TARGETS {
        let dir = corpus(name);
        assert!(
            dir.is_dir() && !files(&dir).is_empty(),
            "target {name}: no seed in {}",
            dir.display()
        );
    }
}

#[test]
fn every_corpus_folder_is_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for e in std::fs::read_dir(&root).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            TARGETS.iter().any(|(t, _)| *t == name),
            "corpus/{name} belongs to no target"
        );
    }
}

#[test]
fn every_corpus_file_replays_without_a_panic() {
    // The panic message goes to stderr as usual; the failure names the target and the file.
    let mut failed = Vec::new();
    let mut replayed = 0;
    for (name, target) in TARGETS {
        for file in files(&corpus(name)) {
            let data = std::fs::read(&file).unwrap();
            replayed += 1;
            if std::panic::catch_unwind(|| target(&data)).is_err() {
                failed.push(format!("target {name}: {}", file.display()));
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {replayed} corpus files panicked:\n{}",
        failed.len(),
        failed.join("\n")
    );
}
