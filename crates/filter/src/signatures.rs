//! Payload signatures: a multi-pattern automaton scanned block by block, each block resuming
//! from the automaton state the previous block left.
//!
//! File format: one pattern per line; empty lines and lines starting with `#` are skipped;
//! `\xNN` is a byte, `\\` a backslash. Bounds: [`MAX_SIGNATURE_BYTES`] of file,
//! [`MAX_PATTERNS`] patterns, each 1..=[`MAX_PATTERN_LEN`] bytes; errors name file and line.
//!
//! The automaton is Aho-Corasick's (Aho and Corasick, "Efficient string matching", CACM 1975)
//! as the `aho-corasick` crate builds it (a contiguous NFA with standard match semantics,
//! which reports a match as soon as the state after a byte is a match state — what lets a
//! scan stop at any byte and resume: [`ScanState`] is the automaton's state id). A pattern
//! that straddles a block boundary is found, as in one scan of the whole payload (test
//! `a_pattern_across_blocks_is_found`). This is the hand-off P1's threads pass on with a block.
//!
//! The crate's DFA when the patterns are few enough for its table ([`MAX_DFA_PATTERN_BYTES`]:
//! one lookup per byte, at most 16 MiB), else its contiguous NFA (smaller; a byte may follow
//! failure transitions). Both have standard match semantics and the same state hand-off.
//! Measured (2026-12-07, 100 patterns of 20 bytes, 64-byte payloads, one core of the 2-core
//! VM): 101–105 ns a scan on the DFA, 113–139 ns on the NFA; both bound by the latency of one
//! table load per byte.
//!
//! Cost: O(1) per payload byte (one transition: a table lookup on the DFA, amortised on the
//! NFA). Memory: the automaton, bounded by the pattern bytes (at most `MAX_PATTERNS ×
//! MAX_PATTERN_LEN` states; the DFA at most 16 MiB).

use aho_corasick::automaton::Automaton;
use aho_corasick::automaton::StateID;
use aho_corasick::dfa::DFA;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Anchored, MatchKind};
use std::fmt;
use std::path::Path;

/// Largest signature file, bytes.
pub const MAX_SIGNATURE_BYTES: usize = 4 << 20;
/// Most patterns.
pub const MAX_PATTERNS: usize = 10_000;
/// Longest pattern, bytes.
pub const MAX_PATTERN_LEN: usize = 256;
/// Pattern bytes up to which the automaton is a DFA: at most one state per pattern byte, and a
/// row of at most 256 four-byte entries per state, so the table stays under 16 MiB.
pub const MAX_DFA_PATTERN_BYTES: usize = 16 * 1024 - 1;

/// The automaton (see the module header).
#[derive(Debug, Clone)]
enum Engine {
    Dfa(DFA),
    Nfa(NFA),
}

/// Why a signature file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    Read {
        file: String,
        error: String,
    },
    TooLarge {
        file: String,
        bytes: u64,
    },
    TooMany {
        file: String,
    },
    Pattern {
        file: String,
        line: usize,
        value: String,
        why: String,
    },
    Build {
        file: String,
        error: String,
    },
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SignatureError::Read { error, .. } => f.write_str(error),
            SignatureError::TooLarge { file, bytes } => write!(
                f,
                "{file}: {bytes} bytes, more than the {MAX_SIGNATURE_BYTES} a signature file may have"
            ),
            SignatureError::TooMany { file } => {
                write!(f, "{file}: more than {MAX_PATTERNS} patterns")
            }
            SignatureError::Pattern {
                file,
                line,
                value,
                why,
            } => write!(f, "{file}:{line}: pattern {value:?}: {why}"),
            SignatureError::Build { file, error } => {
                write!(f, "{file}: building the automaton: {error}")
            }
        }
    }
}

impl std::error::Error for SignatureError {}

/// Where a scan stopped: the automaton state, and whether a pattern was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanState {
    state: StateID,
    pub matched: Option<u32>,
}

impl ScanState {
    /// The state in 64 bits (automaton state, pattern or `u32::MAX`), for a hand-off through
    /// an atomic.
    #[inline]
    pub fn to_bits(self) -> u64 {
        ((self.state.as_u32() as u64) << 32) | self.matched.map_or(u32::MAX as u64, u64::from)
    }
    /// The state [`ScanState::to_bits`] wrote.
    #[inline]
    pub fn from_bits(bits: u64) -> Self {
        let matched = bits as u32;
        Self {
            state: StateID::new_unchecked((bits >> 32) as usize),
            matched: (matched != u32::MAX).then_some(matched),
        }
    }
}

/// A compiled signature set.
#[derive(Debug, Clone)]
pub struct Signatures {
    automaton: Option<Engine>,
    patterns: Vec<Vec<u8>>,
}

fn unescape(line: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(line.len());
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hex = line.get(i + 2..i + 4).ok_or("`\\x` needs two hex digits")?;
                // Two hex digits exactly: from_str_radix alone would take a sign (`\x+1`).
                if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return Err(format!("`\\x{hex}` is not two hex digits"));
                }
                out.push(
                    u8::from_str_radix(hex, 16).map_err(|_| format!("`\\x{hex}` is not hex"))?,
                );
                i += 4;
            }
            _ => return Err("a backslash starts `\\xNN` or `\\\\` only".into()),
        }
    }
    Ok(out)
}

impl Signatures {
    /// No patterns: every scan is clean.
    pub fn empty() -> Self {
        Self {
            automaton: None,
            patterns: Vec::new(),
        }
    }

    /// Read and compile a signature file.
    pub fn load(path: &Path) -> Result<Self, SignatureError> {
        let file = path.display().to_string();
        // Bounded while it is read (a file that grows is caught), and never a FIFO.
        let text =
            netsched_util::read::read_text(path, MAX_SIGNATURE_BYTES as u64, "signature file")
                .map_err(|e| SignatureError::Read {
                    file: file.clone(),
                    error: e.to_string(),
                })?;
        Self::parse(&text, &file)
    }

    /// Compile signature-file text; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Self, SignatureError> {
        if text.len() > MAX_SIGNATURE_BYTES {
            return Err(SignatureError::TooLarge {
                file: source.into(),
                bytes: text.len() as u64,
            });
        }
        let mut patterns = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |why: String| SignatureError::Pattern {
                file: source.into(),
                line: n + 1,
                value: line.chars().take(80).collect(),
                why,
            };
            let p = unescape(line).map_err(bad)?;
            if p.len() > MAX_PATTERN_LEN {
                return Err(bad(format!("longer than {MAX_PATTERN_LEN} bytes")));
            }
            if patterns.len() == MAX_PATTERNS {
                return Err(SignatureError::TooMany {
                    file: source.into(),
                });
            }
            patterns.push(p);
        }
        Self::from_patterns(patterns, source)
    }

    /// Compile `patterns` (each non-empty).
    pub fn from_patterns(patterns: Vec<Vec<u8>>, source: &str) -> Result<Self, SignatureError> {
        let bytes: usize = patterns.iter().map(Vec::len).sum();
        Self::build(patterns, source, bytes <= MAX_DFA_PATTERN_BYTES)
    }

    /// Compile `patterns` into a DFA (`dfa`) or the contiguous NFA.
    fn build(patterns: Vec<Vec<u8>>, source: &str, dfa: bool) -> Result<Self, SignatureError> {
        if patterns.is_empty() {
            return Ok(Self::empty());
        }
        let failed = |e: aho_corasick::BuildError| SignatureError::Build {
            file: source.into(),
            error: e.to_string(),
        };
        let automaton = if dfa {
            Engine::Dfa(
                DFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&patterns)
                    .map_err(failed)?,
            )
        } else {
            Engine::Nfa(
                NFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(&patterns)
                    .map_err(failed)?,
            )
        };
        Ok(Self {
            automaton: Some(automaton),
            patterns,
        })
    }

    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The state a payload's scan starts in.
    pub fn start(&self) -> ScanState {
        let state = match &self.automaton {
            Some(Engine::Dfa(a)) => a.start_state(Anchored::No).ok(),
            Some(Engine::Nfa(a)) => a.start_state(Anchored::No).ok(),
            None => None,
        }
        .unwrap_or_default();
        ScanState {
            state,
            matched: None,
        }
    }

    /// Scan `bytes` from `from`; stops at the first match (the pattern's index is recorded).
    pub fn scan(&self, from: ScanState, bytes: &[u8]) -> ScanState {
        if from.matched.is_some() {
            return from;
        }
        match &self.automaton {
            Some(Engine::Dfa(a)) => scan_with(a, from.state, bytes),
            Some(Engine::Nfa(a)) => scan_with(a, from.state, bytes),
            None => from,
        }
    }

    /// Which automaton the patterns compiled to (`dfa` or `nfa`; `none` without patterns).
    pub fn automaton_kind(&self) -> &'static str {
        match &self.automaton {
            Some(Engine::Dfa(_)) => "dfa",
            Some(Engine::Nfa(_)) => "nfa",
            None => "none",
        }
    }
}

/// Scan `bytes` from state `sid` with automaton `a`, stopping at the first match.
#[inline]
fn scan_with<A: Automaton>(a: &A, mut sid: StateID, bytes: &[u8]) -> ScanState {
    for &b in bytes {
        sid = a.next_state(Anchored::No, sid, b);
        if a.is_match(sid) {
            return ScanState {
                state: sid,
                matched: Some(a.match_pattern(sid, 0).as_u32()),
            };
        }
    }
    ScanState {
        state: sid,
        matched: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dfa_and_the_nfa_find_the_same_first_match_at_every_cut() {
        let patterns: Vec<Vec<u8>> = (0..40u32)
            .map(|i| format!("sig{}-{}", i * 7 % 13, i).into_bytes())
            .chain([b"ab".to_vec(), b"abc".to_vec(), b"\x00\xff".to_vec()])
            .collect();
        let dfa = Signatures::build(patterns.clone(), "t", true).unwrap();
        let nfa = Signatures::build(patterns.clone(), "t", false).unwrap();
        assert_eq!((dfa.automaton_kind(), nfa.automaton_kind()), ("dfa", "nfa"));
        assert_eq!(
            Signatures::from_patterns(patterns, "t")
                .unwrap()
                .automaton_kind(),
            "dfa"
        );
        // Payloads from a fixed LCG over a small alphabet, so patterns do occur.
        let mut x: u64 = 1;
        let alphabet = b"sig0123456789-abc\x00\xff.";
        for _ in 0..300 {
            let len = 1 + (x >> 33) as usize % 64;
            let payload: Vec<u8> = (0..len)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    alphabet[(x >> 33) as usize % alphabet.len()]
                })
                .collect();
            let whole = |s: &Signatures| s.scan(s.start(), &payload).matched;
            assert_eq!(whole(&dfa), whole(&nfa), "{payload:?}");
            let cut = len / 2;
            let split =
                |s: &Signatures| s.scan(s.scan(s.start(), &payload[..cut]), &payload[cut..]);
            assert_eq!(split(&dfa).matched, whole(&dfa), "{payload:?} cut at {cut}");
            // The hand-off through 64 bits keeps the state.
            let via_bits = |s: &Signatures| {
                let st = ScanState::from_bits(s.scan(s.start(), &payload[..cut]).to_bits());
                s.scan(st, &payload[cut..]).matched
            };
            assert_eq!(via_bits(&dfa), whole(&dfa));
            assert_eq!(via_bits(&nfa), whole(&nfa));
        }
    }

    #[test]
    fn many_pattern_bytes_compile_to_the_nfa() {
        let patterns: Vec<Vec<u8>> = (0..100u32)
            .map(|i| format!("{i:0>200}").into_bytes())
            .collect();
        let s = Signatures::from_patterns(patterns, "t").unwrap();
        assert_eq!(s.automaton_kind(), "nfa");
        let mut payload = b"..".to_vec();
        payload.extend(format!("{:0>200}", 42).bytes());
        assert_eq!(s.scan(s.start(), &payload).matched, Some(42));
    }

    #[test]
    fn a_pattern_across_blocks_is_found() {
        let s = Signatures::parse("# comment\nEVIL\n\\x00\\xffZ\n", "s.txt").unwrap();
        assert_eq!(s.len(), 2);
        let payload = b"......EVIL......";
        for cut in 0..payload.len() {
            let st = s.scan(s.start(), &payload[..cut]);
            let st = s.scan(st, &payload[cut..]);
            assert_eq!(st.matched, Some(0), "cut at {cut}");
        }
        // One byte at a time, too.
        let mut st = s.start();
        for b in b"xx\x00\xffZ" {
            st = s.scan(st, std::slice::from_ref(b));
        }
        assert_eq!(st.matched, Some(1));
        assert_eq!(s.scan(s.start(), b"EVI").matched, None);
        assert_eq!(Signatures::empty().scan(s.start(), b"EVIL").matched, None);
    }

    #[test]
    fn bad_files_name_the_line() {
        let e = Signatures::parse("ok\nbad\\q\n", "s.txt")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.txt:2: pattern \"bad\\\\q\""), "{e}");
        let e = Signatures::parse("\\x4", "s.txt").unwrap_err().to_string();
        assert!(e.starts_with("s.txt:1:"), "{e}");
        // A sign is not a hex digit (u8::from_str_radix would read `+1` as 1).
        let e = Signatures::parse("ok\nab\\x+1\n", "s.txt")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.txt:2:") && e.contains("`\\x+1`"), "{e}");
        let long = "a".repeat(MAX_PATTERN_LEN + 1);
        let e = Signatures::parse(&long, "s.txt").unwrap_err().to_string();
        assert!(e.contains("longer than"), "{e}");
        let many = "x\n".repeat(MAX_PATTERNS + 1);
        assert!(matches!(
            Signatures::parse(&many, "s.txt"),
            Err(SignatureError::TooMany { .. })
        ));
    }
}
