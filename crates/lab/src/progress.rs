//! Progress of a series of runs (`lab`, `lab run --seeds K`, `lab run --real --repeat N`,
//! `lab sweep`) on stderr: runs done out of the total, time spent and time left.
//!
//! - stderr is a terminal (and `TERM` is not `dumb`): an `indicatif` bar, redrawn in place at
//!   most 4 times a second; the runs' own log lines are printed above it ([`line`]) so the bar
//!   never tears them;
//! - otherwise (CI logs, a pipe, a file): one plain line, `[lab] progress: 3/12 runs, 41 s
//!   elapsed, about 2 min 3 s left`, every [`PLAIN_EVERY`] and once at the end — no carriage
//!   return and no escape sequence, so a log stays readable.
//!
//! Progress never goes to stdout (which carries the report's path) nor into any output file.
//! Time left is the wall time per finished run so far × the runs still to do (wall time, so
//! runs going on in parallel are already accounted for).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Interval between two plain progress lines.
pub const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// The bar being drawn, if any: [`line`] prints above it.
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An `indicatif` bar (stderr is a terminal).
    Bar,
    /// Plain lines every `every`.
    Plain { every: Duration },
}

impl Mode {
    /// A bar when stderr is a terminal that can redraw a line, plain lines otherwise.
    pub fn detect() -> Mode {
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        if std::io::stderr().is_terminal() && !dumb {
            Mode::Bar
        } else {
            Mode::Plain { every: PLAIN_EVERY }
        }
    }
}

struct Plain {
    done: u64,
    last_line: Instant,
}

/// Progress over `total` runs; [`Progress::inc`] after each, [`Progress::finish`] at the end
/// (also on drop). Shared by the worker threads (`&Progress` is `Sync`).
pub struct Progress {
    total: u64,
    started: Instant,
    bar: Option<ProgressBar>,
    plain: Mutex<Plain>,
    every: Duration,
    finished: Mutex<bool>,
    /// Where plain lines go (stderr; a test collects them).
    sink: Box<dyn Fn(&str) + Send + Sync>,
}

impl Progress {
    /// Progress over `total` runs shown as [`Mode::detect`] says.
    pub fn new(total: u64) -> Progress {
        Progress::with_mode(total, Mode::detect())
    }

    /// Progress over `total` runs shown as `mode` says.
    pub fn with_mode(total: u64, mode: Mode) -> Progress {
        Progress::with_sink(total, mode, Box::new(|l| eprintln!("{l}")))
    }

    /// Progress over `total` runs shown as `mode` says, plain lines written by `sink`.
    pub fn with_sink(total: u64, mode: Mode, sink: Box<dyn Fn(&str) + Send + Sync>) -> Progress {
        let started = Instant::now();
        let (bar, every) = match mode {
            Mode::Bar => {
                let bar = ProgressBar::with_draw_target(
                    Some(total),
                    ProgressDrawTarget::stderr_with_hz(4),
                );
                let style = ProgressStyle::with_template(
                    "[lab] {bar:30} {pos}/{len} runs, {elapsed} elapsed, ~{eta} left",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar());
                bar.set_style(style);
                bar.enable_steady_tick(Duration::from_millis(500));
                *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(bar.clone());
                (Some(bar), Duration::MAX)
            }
            Mode::Plain { every } => (None, every),
        };
        Progress {
            total,
            started,
            bar,
            plain: Mutex::new(Plain {
                done: 0,
                last_line: started,
            }),
            every,
            finished: Mutex::new(false),
            sink,
        }
    }

    /// One more run finished.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            return;
        }
        let mut p = self.plain.lock().unwrap_or_else(|p| p.into_inner());
        p.done += 1;
        let now = Instant::now();
        if now.duration_since(p.last_line) >= self.every && p.done < self.total {
            p.last_line = now;
            (self.sink)(&format!(
                "[lab] progress: {}",
                plain_text(p.done, self.total, now.duration_since(self.started))
            ));
        }
    }

    /// Clear the bar, or print the last plain line (once).
    pub fn finish(&self) {
        let mut f = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if *f {
            return;
        }
        *f = true;
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
            *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return;
        }
        let p = self.plain.lock().unwrap_or_else(|p| p.into_inner());
        (self.sink)(&format!(
            "[lab] progress: {}",
            plain_text(p.done, self.total, self.started.elapsed())
        ));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Print a log line to stderr, above the progress bar when one is drawn.
pub fn line(text: &str) {
    let active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match active {
        Some(bar) => bar.println(text),
        None => eprintln!("{text}"),
    }
}

/// `3/12 runs, 41 s elapsed, about 2 min 3 s left` (no estimate before the first run ends).
pub fn plain_text(done: u64, total: u64, elapsed: Duration) -> String {
    let mut s = format!("{done}/{total} runs, {} elapsed", human(elapsed));
    if done >= total {
        s.push_str(", done");
    } else if done > 0 {
        let left = elapsed.as_secs_f64() / done as f64 * (total - done) as f64;
        s.push_str(&format!(
            ", about {} left",
            human(Duration::from_secs_f64(left))
        ));
    }
    s
}

/// `41 s`, `2 min 3 s`, `1 h 5 min`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{} h {} min", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_counts_runs_and_estimates_time_left() {
        assert_eq!(
            plain_text(0, 12, Duration::from_secs(5)),
            "0/12 runs, 5 s elapsed"
        );
        // 3 runs in 30 s: 9 more take about 90 s.
        assert_eq!(
            plain_text(3, 12, Duration::from_secs(30)),
            "3/12 runs, 30 s elapsed, about 1 min 30 s left"
        );
        assert_eq!(
            plain_text(12, 12, Duration::from_secs(3725)),
            "12/12 runs, 1 h 2 min elapsed, done"
        );
    }

    fn collect(every: Duration, total: u64, incs: u64) -> Vec<String> {
        let lines = std::sync::Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let p = Progress::with_sink(
            total,
            Mode::Plain { every },
            Box::new(move |l| l2.lock().unwrap().push(l.to_string())),
        );
        assert!(p.bar.is_none());
        std::thread::scope(|s| {
            for _ in 0..incs {
                s.spawn(|| p.inc());
            }
        });
        p.finish();
        p.finish();
        drop(p);
        let v = lines.lock().unwrap().clone();
        v
    }

    #[test]
    fn plain_mode_prints_plain_lines_and_one_last_line() {
        // Interval 0: a line after every run but the last, then the closing line, once.
        let lines = collect(Duration::ZERO, 3, 3);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("[lab] progress: 1/3 runs, "),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("[lab] progress: 2/3 runs, "),
            "{lines:?}"
        );
        assert!(lines[1].contains(" left"), "{lines:?}");
        assert!(
            lines[2].starts_with("[lab] progress: 3/3 runs, ") && lines[2].ends_with(", done"),
            "{lines:?}"
        );
        for l in &lines {
            assert!(!l.contains('\r') && !l.contains('\x1b'), "{l:?}");
        }
        // The default interval: a short series prints only the closing line.
        let lines = collect(PLAIN_EVERY, 5, 5);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("5/5 runs"), "{lines:?}");
    }
}
