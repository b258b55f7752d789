//! The sensitivity table every experiment's report carries: one row per variant (a parameter
//! the paper does not fix, varied alone), the experiment's own cells, and a last cell naming
//! the paper's claims that fail in that row; then a "Reading:" paragraph that counts, inside
//! and outside the paper's regime, in how many rows each claim holds.
//!
//! The experiment chooses the columns, the cells and the prose; this module keeps the table's
//! layout and the bookkeeping of which claim held where, so every report counts alike.

/// One variant: its label (first cell), whether it lies inside the paper's regime, and each
/// claim decided in it (name, holds).
#[derive(Debug, Clone)]
pub struct SensitivityRow {
    pub label: String,
    pub inside: bool,
    pub claims: Vec<(String, bool)>,
}

impl SensitivityRow {
    /// The names of the claims that fail in this row, in the row's order.
    pub fn failed(&self) -> Vec<&str> {
        self.claims
            .iter()
            .filter(|(_, holds)| !holds)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// True if claim `name` was decided in this row and holds.
    pub fn holds(&self, name: &str) -> bool {
        self.claims.iter().any(|(n, h)| n == name && *h)
    }

    /// True if claim `name` was decided in this row and fails.
    pub fn fails(&self, name: &str) -> bool {
        self.claims.iter().any(|(n, h)| n == name && !h)
    }
}

/// A Markdown sensitivity table being filled row by row.
#[derive(Debug, Clone)]
pub struct SensitivityTable {
    md: String,
    none_failed: String,
    rows: Vec<SensitivityRow>,
}

impl SensitivityTable {
    /// `intro` is the paragraph before the table, ending with its own punctuation; `columns`
    /// are every header cell, the label's first and the failed claims' last. `none_failed` is
    /// what the last cell says when every claim of a row holds (e.g. "✓" or "—").
    pub fn new(intro: &str, columns: &[&str], none_failed: &str) -> Self {
        let md = format!(
            "{intro}\n\n| {} |\n|{}\n",
            columns.join(" | "),
            "---|".repeat(columns.len())
        );
        SensitivityTable {
            md,
            none_failed: none_failed.to_string(),
            rows: Vec::new(),
        }
    }

    /// Add a row: `label` first, then `cells`, then the claims that fail (from `claims`, each
    /// a name and whether it holds).
    pub fn row<N: Into<String>>(
        &mut self,
        label: &str,
        inside: bool,
        cells: &[String],
        claims: impl IntoIterator<Item = (N, bool)>,
    ) {
        let row = SensitivityRow {
            label: label.to_string(),
            inside,
            claims: claims.into_iter().map(|(n, h)| (n.into(), h)).collect(),
        };
        let failed = row.failed();
        let last = if failed.is_empty() {
            self.none_failed.clone()
        } else {
            failed.join(", ")
        };
        self.md.push_str("| ");
        self.md.push_str(label);
        for c in cells {
            self.md.push_str(" | ");
            self.md.push_str(c);
        }
        self.md.push_str(" | ");
        self.md.push_str(&last);
        self.md.push_str(" |\n");
        self.rows.push(row);
    }

    /// The rows inside (`true`) or outside (`false`) the paper's regime.
    pub fn rows(&self, inside: bool) -> impl Iterator<Item = &SensitivityRow> {
        self.rows.iter().filter(move |r| r.inside == inside)
    }

    /// Every row, in order.
    pub fn all_rows(&self) -> &[SensitivityRow] {
        &self.rows
    }

    /// "name k/n, …": for each of `names`, in how many of the `n` rows inside (or outside)
    /// the regime it holds.
    pub fn tally(&self, names: &[&str], inside: bool) -> String {
        let n = self.rows(inside).count();
        names
            .iter()
            .map(|name| {
                let k = self.rows(inside).filter(|r| r.holds(name)).count();
                format!("{name} {k}/{n}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The table followed by a blank line and `reading` (the paragraph under it).
    pub fn finish(self, reading: &str) -> String {
        format!("{}\n{reading}", self.md)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> SensitivityTable {
        let mut t = SensitivityTable::new(
            "**Sensitivity** (two claims):",
            &["variant", "x", "claims that fail"],
            "✓",
        );
        t.row("base", true, &["1.0".into()], [("a", true), ("b", true)]);
        t.row("slow", true, &["2.0".into()], [("a", false), ("b", true)]);
        t.row("far", false, &["9.0".into()], [("a", false), ("b", false)]);
        t
    }

    #[test]
    fn the_table_has_a_header_a_row_per_variant_and_names_the_failed_claims() {
        let md = table().finish("Reading: text.\n");
        assert_eq!(
            md,
            "**Sensitivity** (two claims):\n\n| variant | x | claims that fail |\n|---|---|---|\n\
             | base | 1.0 | ✓ |\n| slow | 2.0 | a |\n| far | 9.0 | a, b |\n\nReading: text.\n"
        );
    }

    #[test]
    fn tallies_count_each_claim_inside_and_outside_the_regime() {
        let t = table();
        assert_eq!(t.tally(&["a", "b"], true), "a 1/2, b 2/2");
        assert_eq!(t.tally(&["a", "b"], false), "a 0/1, b 0/1");
        assert_eq!(
            t.tally(&["c"], true),
            "c 0/2",
            "an undecided claim never holds"
        );
        assert_eq!(
            t.rows(false).map(|r| r.label.as_str()).collect::<Vec<_>>(),
            ["far"]
        );
        let slow = &t.all_rows()[1];
        assert!(slow.fails("a") && !slow.fails("b") && !slow.fails("c"));
    }

    #[test]
    fn none_failed_is_the_callers_mark() {
        let mut t = SensitivityTable::new("S.", &["v", "fail"], "—");
        t.row("only", true, &[], [("a", true)]);
        t.row("none", true, &[], Vec::<(&str, bool)>::new());
        assert!(t.finish("R").ends_with("| only | — |\n| none | — |\n\nR"));
    }
}
