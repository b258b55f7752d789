//! How every daemon's status-page test checks its page (`tests/status_page.rs` of balance,
//! nfq, vswitch, link and filter): wait until what the page shows stands still, load the page
//! in headless Chromium ([`crate::chromium`]) with a budget of virtual time so its script
//! refreshes at least twice, scrape `/metrics` before and after, and compare what the page
//! shows with the scrape — again, at most [`ATTEMPTS`] times, if the daemon moved while the
//! browser ran. The daemon, its traffic, what counts as "still" and the comparison itself stay
//! in each test; the scrape is the test's too (this crate does not parse `/metrics`).
//!
//! Cost: one browser run per attempt (a few seconds each), one scrape a second while waiting.

use crate::chromium::{self, cells, figures, refreshes, shown_number};
use anyhow::Result;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long waiting for stillness and one browser run may take.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// Virtual time the page's script runs: the first refresh at load, the next ones a second
/// apart.
pub const BUDGET: Duration = Duration::from_secs(4);
/// Loads tried before "the daemon kept moving" fails the test.
pub const ATTEMPTS: usize = 3;
/// Size of the screenshots in docs/img.
pub const SCREENSHOT_SIZE: (u32, u32) = (1200, 800);
/// Virtual time before a screenshot is taken.
const SCREENSHOT_BUDGET: Duration = Duration::from_secs(3);

/// Run `f` inside a namespace (the status pages' tests scrape and browse from there).
pub use crate::netns_call::in_netns;

/// Where `NETSCHED_STATUS_SCREENSHOT` asks the page to be saved (a `.png` path), if it does.
pub fn screenshot_asked() -> Option<PathBuf> {
    std::env::var("NETSCHED_STATUS_SCREENSHOT")
        .ok()
        .map(PathBuf::from)
}

/// What changed between two projections of a scrape, for the message of a failed attempt.
pub trait Changes {
    /// One line per change, sorted.
    fn changes(&self, after: &Self) -> Vec<String>;
}

impl<K: Debug + Eq + Hash> Changes for HashMap<K, f64> {
    fn changes(&self, after: &Self) -> Vec<String> {
        let mut out: Vec<String> = after
            .iter()
            .filter(|(k, v)| self.get(*k) != Some(v))
            .map(|(k, v)| format!("{k:?}: {:?} -> {v}", self.get(k)))
            .chain(
                self.keys()
                    .filter(|k| !after.contains_key(*k))
                    .map(|k| format!("{k:?}: gone")),
            )
            .collect();
        out.sort();
        out
    }
}

/// A daemon's status page: where the browser loads it from.
#[derive(Debug, Clone)]
pub struct StatusPage {
    /// The namespace the browser runs in (`None`: this host's).
    pub ns: Option<String>,
    pub url: String,
    /// Longest browser run and longest wait for stillness.
    pub patience: Duration,
}

impl StatusPage {
    /// The page at `url`, loaded from inside `ns` when given.
    pub fn new(ns: Option<&str>, url: &str) -> Self {
        Self {
            ns: ns.map(str::to_string),
            url: url.to_string(),
            patience: PATIENCE,
        }
    }

    /// Sleep a second at a time until `still()` returns what it returned a second before;
    /// panics after [`StatusPage::patience`], naming `what` (e.g. "the engine").
    pub fn wait_until_still<K: PartialEq>(&self, what: &str, mut still: impl FnMut() -> K) {
        let start = Instant::now();
        let mut last = still();
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = still();
            if now == last {
                return;
            }
            assert!(start.elapsed() < self.patience, "{what} never stood still");
            last = now;
        }
    }

    /// Load the page once and read what it shows; asserts that it refreshed at least twice.
    pub fn load(&self) -> Shown {
        let dom = chromium::dump_dom(self.ns.as_deref(), &self.url, BUDGET, self.patience)
            .unwrap_or_else(|e| panic!("loading {}: {e:#}", self.url));
        assert!(
            refreshes(&dom) >= 2,
            "the page did not refresh twice:\n{dom}"
        );
        Shown::read(dom)
    }

    /// Scrape, load the page, scrape again; when `still` of both scrapes is equal, hand what
    /// the page shows and both scrapes to `check` (which asserts). Had the daemon moved, try
    /// again, at most [`ATTEMPTS`] times, then fail naming what moved (`what`: "the engine").
    pub fn compare<S, K: PartialEq + Changes>(
        &self,
        what: &str,
        mut scrape: impl FnMut() -> S,
        still: impl Fn(&S) -> K,
        check: impl FnOnce(&Shown, &S, &S),
    ) {
        let mut moved = Vec::new();
        for _ in 0..ATTEMPTS {
            let before = scrape();
            let shown = self.load();
            let after = scrape();
            let (b, a) = (still(&before), still(&after));
            if a == b {
                check(&shown, &before, &after);
                return;
            }
            moved.push(format!(
                "{what} moved while the page was read: {:?}",
                b.changes(&a)
            ));
        }
        panic!("{moved:?}");
    }

    /// Save the page as a PNG of [`SCREENSHOT_SIZE`] at `png`.
    pub fn screenshot(&self, png: &std::path::Path) -> Result<()> {
        chromium::screenshot(
            self.ns.as_deref(),
            &self.url,
            png,
            SCREENSHOT_SIZE,
            SCREENSHOT_BUDGET,
            self.patience,
        )
    }
}

/// What a loaded page shows: its table cells (row, column) and its summary figures, as text.
#[derive(Debug, Clone)]
pub struct Shown {
    pub dom: String,
    pub cells: HashMap<(String, String), String>,
    pub figures: HashMap<String, String>,
}

impl Shown {
    /// Read the cells and figures of a serialized page.
    pub fn read(dom: String) -> Self {
        Self {
            cells: cells(&dom),
            figures: figures(&dom),
            dom,
        }
    }

    /// The text of cell `row`/`col`; panics with the page if there is none.
    pub fn cell(&self, row: &str, col: &str) -> String {
        self.cells
            .get(&(row.to_string(), col.to_string()))
            .unwrap_or_else(|| panic!("no cell {row}/{col} on the page:\n{}", self.dom))
            .clone()
    }

    /// Cell `row`/`col` as a number in `/metrics`'s unit ([`shown_number`]); panics if it
    /// shows none.
    pub fn number(&self, row: &str, col: &str) -> f64 {
        let t = self.cell(row, col);
        shown_number(&t).unwrap_or_else(|| panic!("{row}/{col} shows {t:?}, not a number"))
    }

    /// The text of figure `id`; panics with the page if there is none.
    pub fn figure(&self, id: &str) -> String {
        self.figures
            .get(id)
            .unwrap_or_else(|| panic!("no figure {id}:\n{}", self.dom))
            .clone()
    }

    /// Figure `id` as a number; panics if it shows none.
    pub fn figure_number(&self, id: &str) -> f64 {
        let t = self.figure(id);
        shown_number(&t).unwrap_or_else(|| panic!("figure {id} shows {t:?}, not a number"))
    }

    /// What table `id` alone shows (the `<section data-table="id">` of the page): its cells,
    /// no figures; empty when the page has no such table.
    pub fn table(&self, id: &str) -> Shown {
        let open = format!("data-table=\"{id}\"");
        let part = self
            .dom
            .find(&open)
            .map(|at| {
                let end = self.dom[at..]
                    .find("</section>")
                    .map_or(self.dom.len(), |e| at + e);
                &self.dom[at..end]
            })
            .unwrap_or("");
        Shown {
            dom: part.to_string(),
            cells: cells(part),
            figures: HashMap::new(),
        }
    }

    /// The table's row keys, sorted, each once (of every table on the page; see
    /// [`Shown::table`] for one).
    pub fn rows(&self) -> Vec<&str> {
        let mut rows: Vec<&str> = self.cells.keys().map(|(r, _)| r.as_str()).collect();
        rows.sort();
        rows.dedup();
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_what_moved_and_what_went() {
        let before: HashMap<String, f64> = [("a".into(), 1.0), ("b".into(), 2.0)].into();
        let after: HashMap<String, f64> = [("a".into(), 1.0), ("b".into(), 3.0)].into();
        assert_eq!(before.changes(&after), ["\"b\": Some(2.0) -> 3"]);
        let fewer: HashMap<String, f64> = [("a".into(), 1.0)].into();
        assert_eq!(before.changes(&fewer), ["\"b\": gone"]);
        assert!(before.changes(&before.clone()).is_empty());
    }

    #[test]
    fn shown_reads_cells_figures_and_rows() {
        let s = Shown::read(
            r#"<html><body data-refreshes="2"><div data-sum="n">7</div><table>
<tr data-row="b"><td data-col="x">1.5 ms</td></tr><tr data-row="a"><td data-col="x">3</td>
<td data-col="y">–</td></tr></table></body></html>"#
                .into(),
        );
        assert_eq!(s.rows(), ["a", "b"]);
        assert_eq!(s.number("b", "x"), 0.0015);
        assert_eq!(s.cell("a", "y"), "–");
        assert_eq!(s.figure_number("n"), 7.0);
    }

    #[test]
    fn a_table_alone_has_its_own_rows() {
        let s = Shown::read(
            r#"<html><body><section data-table="one"><table><tr data-row="a"><td data-col="x">1</td>
</tr></table></section><section data-table="two"><table><tr data-row="h2"><td data-col="x">2</td>
</tr></table></section></body></html>"#
                .into(),
        );
        assert_eq!(s.rows(), ["a", "h2"]);
        assert_eq!(s.table("one").rows(), ["a"]);
        assert_eq!(s.table("two").number("h2", "x"), 2.0);
        assert!(s.table("three").rows().is_empty());
    }
}
