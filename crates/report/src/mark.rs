//! A reference value drawn over a chart ([`crate::svg::ChartOptions::marks`]), e.g. the figure
//! a paper printed for the same quantity; kept with a chart's data ([`crate::chart_data`]).

use serde::{Deserialize, Serialize};

/// A reference value drawn over a chart, e.g. the figure a paper printed for the same quantity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Shown as the mark's tooltip, e.g. "P0 Table 14: 11.85 ms".
    pub label: String,
    pub value: f64,
    /// Bar charts: the category (group) the mark belongs to; `None` draws it across the chart.
    pub category: Option<usize>,
    /// Bar charts: the series (bar) within the group; `None` spans the whole group.
    pub series: Option<usize>,
}

impl Mark {
    /// A mark over bar `series` of group `category`.
    pub fn bar(label: impl Into<String>, value: f64, category: usize, series: usize) -> Self {
        Self {
            label: label.into(),
            value,
            category: Some(category),
            series: Some(series),
        }
    }

    /// A horizontal reference line across the whole chart.
    pub fn line(label: impl Into<String>, value: f64) -> Self {
        Self {
            label: label.into(),
            value,
            category: None,
            series: None,
        }
    }
}
