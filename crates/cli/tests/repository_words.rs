//! The repository describes the project as it is: no work-log words in any tracked file.
//!
//! Work-period labels (the word "session" followed by a number, a capital "S" and a number used
//! as a label, "session" joined to "-start", "this" before "session"), names of scratch
//! branches of the `h-<word>` kind and paths into the scratch worktrees under `/work` belong in
//! commit messages, not in docs, comments, test names or scripts. A dated figure cites its
//! date and commit instead.
//!
//! "session" alone stays a legitimate word (a TCP session, a flow of the WF2Q paper); only a
//! number right after it, or the phrases above, are flagged. The matcher is written by hand
//! (no regex dependency); its unit tests below build their samples from pieces so that this
//! file does not flag itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One flagged word: 1-based line number and the text that matched.
#[derive(Debug, PartialEq)]
struct Hit {
    line: usize,
    word: String,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Work-log words in `text`, one entry per match.
fn work_log_words(text: &str) -> Vec<Hit> {
    let mut hits = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for word in line_words(line) {
            hits.push(Hit { line: i + 1, word });
        }
    }
    hits
}

fn line_words(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let lower = line.to_ascii_lowercase();
    let l = lower.as_bytes();
    let mut out = Vec::new();
    let take = |from: usize, to: usize| String::from_utf8_lossy(&b[from..to]).into_owned();

    // The word "session" not preceded by a letter or digit ('_' counts as a separator, for
    // test names), an optional "s", an optional separator (space, '-' or '_'), then a digit.
    // Also "session" with "-start" right after it, and "this" right before it.
    let key = b"session";
    let mut at = 0;
    while let Some(p) = find(l, key, at) {
        at = p + key.len();
        if p > 0 && l[p - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut q = p + key.len();
        if l.get(q) == Some(&b's') {
            q += 1;
        }
        if matches!(l.get(q), Some(b' ' | b'-' | b'_')) {
            q += 1;
        }
        if l.get(q).is_some_and(u8::is_ascii_digit) {
            let mut e = q;
            while l.get(e).is_some_and(u8::is_ascii_digit) {
                e += 1;
            }
            out.push(take(p, e));
            continue;
        }
        let end = p + key.len();
        if l[end..].starts_with(b"-start") {
            out.push(take(p, end + 6));
            continue;
        }
        if p >= 5 && &l[p - 5..p] == b"this " && (p == 5 || !is_word(l[p - 6])) {
            let after = l.get(end).copied();
            if after.is_none_or(|c| !is_word(c)) {
                out.push(take(p - 5, end));
            }
        }
    }

    // A capital S and digits as a whole word (case-sensitive, so server names such as `s1`
    // pass); after '§' too.
    for (p, &c) in b.iter().enumerate() {
        if c != b'S' || (p > 0 && is_word(b[p - 1])) {
            continue;
        }
        let mut e = p + 1;
        while b.get(e).is_some_and(u8::is_ascii_digit) {
            e += 1;
        }
        if e > p + 1 && b.get(e).is_none_or(|&c| !is_word(c)) {
            out.push(take(p, e));
        }
    }

    // Scratch branches: a word that starts with "h-" and a letter.
    for p in 0..b.len().saturating_sub(2) {
        if b[p] == b'h'
            && b[p + 1] == b'-'
            && b[p + 2].is_ascii_lowercase()
            && (p == 0 || !(is_word(b[p - 1]) || b[p - 1] == b'-'))
        {
            let mut e = p + 2;
            while b.get(e).is_some_and(|&c| is_word(c) || c == b'-') {
                e += 1;
            }
            out.push(take(p, e));
        }
    }

    // Paths into the scratch worktrees (built from pieces, so this line does not match).
    for key in [["/work", "/wt/"].concat(), ["/work", "/main"].concat()] {
        let key = key.as_bytes();
        let mut at = 0;
        while let Some(p) = find(b, key, at) {
            at = p + key.len();
            out.push(take(p, at));
        }
    }
    out
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from >= hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tracked files (`git ls-files`), or, without `.git` or git, every file under the root
/// except `target/` and `.git/`.
fn tracked_files(root: &Path) -> Vec<PathBuf> {
    if root.join(".git").exists() {
        if let Ok(out) = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["ls-files", "-z"])
            .output()
        {
            if out.status.success() {
                return out
                    .stdout
                    .split(|&c| c == 0)
                    .filter(|p| !p.is_empty())
                    .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
                    .collect();
            }
        }
    }
    let mut files = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let rel = dir.join(entry.file_name());
            let name = entry.file_name();
            if name == "target" || name == ".git" {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(rel),
                Ok(t) if t.is_file() => files.push(rel),
                _ => {}
            }
        }
    }
    files
}

#[test]
fn no_work_log_words_in_tracked_files() {
    let root = repo_root();
    let files = tracked_files(&root);
    assert!(
        files.len() > 10,
        "found only {} files under {root:?}",
        files.len()
    );
    let mut found = Vec::new();
    for rel in files {
        if rel.file_name().is_some_and(|n| n == "Cargo.lock") {
            continue;
        }
        let Ok(bytes) = std::fs::read(root.join(&rel)) else {
            continue; // listed but deleted in the work tree
        };
        if bytes.contains(&0) {
            continue; // binary
        }
        let text = String::from_utf8_lossy(&bytes);
        for hit in work_log_words(&text) {
            found.push(format!("{}:{}: {}", rel.display(), hit.line, hit.word));
        }
    }
    assert!(
        found.is_empty(),
        "work-log words (state the fact, cite a date and commit or a doc section instead):\n{}",
        found.join("\n")
    );
}

/// Joins pieces, so that the samples do not appear literally in this file.
fn s(parts: &[&str]) -> String {
    parts.concat()
}

fn words(text: &str) -> Vec<String> {
    work_log_words(text).into_iter().map(|h| h.word).collect()
}

#[test]
fn matcher_flags_work_period_labels() {
    let ses = "sess";
    for (sample, want) in [
        (s(&["as measured in ", ses, "ion 7."]), s(&[ses, "ion 7"])),
        (s(&["the ", ses, "ion-9 code"]), s(&[ses, "ion-9"])),
        (s(&["about half of ", ses, "ions 4-5"]), s(&[ses, "ions 4"])),
        (
            s(&["(", "Sess", "ion 8: the generator)"]),
            s(&["Sess", "ion 8"]),
        ),
        (s(&["fn real_", ses, "ion8_loss()"]), s(&[ses, "ion8"])),
        (s(&["the ", ses, "ion-start build"]), s(&[ses, "ion-start"])),
        (
            s(&["not run ", "this ", ses, "ion."]),
            s(&["this ", ses, "ion"]),
        ),
        (s(&["the ", "S", "8 tip"]), s(&["S", "8"])),
        (s(&["docs §", "S", "10"]), s(&["S", "10"])),
        (s(&["Merge branch '", "h-", "vdoc'"]), s(&["h-", "vdoc"])),
        (s(&["built in ", "/work/", "main"]), s(&["/work/", "main"])),
    ] {
        assert_eq!(words(&sample), vec![want], "sample {sample:?}");
    }
}

#[test]
fn matcher_names_the_line() {
    let text = s(&["fine\nalso fine\nsee ", "sess", "ion 3\n"]);
    assert_eq!(
        work_log_words(&text),
        vec![Hit {
            line: 3,
            word: s(&["sess", "ion 3"])
        }]
    );
}

#[test]
fn matcher_passes_legitimate_uses() {
    for sample in [
        "a TCP session is torn down; sessions are counted",
        "the WF2Q paper's flows (it calls them sessions) share the link",
        "the session's key, a session_id, per-session state, sessions: 12",
        "this session_id field",
        "name = \"s1\"; server s2 10.0.0.2:80; let s0 = tb.ifname(\"s0\")",
        "DS3 links, PS4, CUBIC's S-curve, Sx",
        "depth-first, high-water, each-h-step",
        "CARGO_TARGET_DIR=/work/target-bal cargo bench",
        "measured 2026-11-26 on commit 0cebd29",
    ] {
        assert!(
            words(sample).is_empty(),
            "{sample:?} flagged: {:?}",
            words(sample)
        );
    }
}
